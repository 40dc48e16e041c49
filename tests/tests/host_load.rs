//! Host tests: what NCCL sees when it loads the plugin on a machine without usable RDMA devices
//! (this build host has libibverbs but no RDMA device). Build the plugin first:
//! `cargo build -p nccl-net-plugin && cargo test -p ferro-tests --test host_load`.
//!
//! Scenarios that need their own environment (the plugin reads it once per process) run the
//! `nccl-harness` binary's `init-probe` in a child process.

use ferro_ffi::{AbiVersion, log_level, ncclResult_t};
use ferro_tests::driver::{GroupReport, GroupSpec, run_group};
use ferro_tests::net::{Net, PLUGIN_ENV, plugin_path};
use ferro_tests::table::NCCL_RELEASES;
use ferro_tests::{checks, elf, logger};
use std::path::Path;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

const HARNESS: &str = env!("CARGO_BIN_EXE_nccl-harness");
const OLD_VERBS: &str = env!("FERRO_TESTS_OLD_VERBS_SO");

/// Tests that look at the log run one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn net() -> &'static Net {
    Net::global().unwrap_or_else(|e| panic!("{e}"))
}

/// The plugin after `init` (as NCCL calls it first), and init's result.
fn inited() -> (&'static Net, Result<(), ncclResult_t>) {
    static INIT: OnceLock<Result<(), ncclResult_t>> = OnceLock::new();
    let n = net();
    (n, *INIT.get_or_init(|| n.init()))
}

/// No RDMA device visible to this process (the build host's situation).
fn no_rdma_devices() -> bool {
    std::fs::read_dir("/sys/class/infiniband").map_or(true, |mut d| d.next().is_none())
}

#[test]
fn plugin_does_not_link_libibverbs() {
    let path = plugin_path().unwrap_or_else(|e| panic!("{e}"));
    let needed = elf::needed_libraries(&path).expect("read the dynamic section");
    assert!(
        needed.iter().any(|n| n.starts_with("libc.so")),
        "the parser found no libc in {needed:?}: broken parser?"
    );
    assert!(
        !needed
            .iter()
            .any(|n| n.contains("ibverbs") || n.contains("rdmacm") || n.contains("mlx")),
        "{} has NEEDED {needed:?}: libibverbs must be loaded at run time, or dlopen fails on hosts without rdma-core",
        path.display()
    );
    if let Some(from_readelf) = elf::needed_by_readelf(&path) {
        assert_eq!(
            needed, from_readelf,
            "own ELF parser and readelf -d disagree"
        );
    }
}

#[test]
fn exports_every_table_from_v7_to_v12_with_its_size_and_every_mandatory_entry() {
    let path = plugin_path().unwrap_or_else(|e| panic!("{e}"));
    let nm = std::process::Command::new("nm")
        .args(["-D", "--defined-only", "-S"])
        .arg(&path)
        .output()
        .expect("run nm (binutils) on the plugin");
    let nm = String::from_utf8_lossy(&nm.stdout);
    for v in AbiVersion::ALL {
        let sym = v.symbol().to_str().unwrap();
        let size = nm
            .lines()
            .find(|l| l.split_whitespace().last() == Some(sym))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| usize::from_str_radix(s, 16).ok())
            .unwrap_or_else(|| panic!("nm -D does not list {sym} with a size:\n{nm}"));
        assert_eq!(size, v.table_size(), "{sym} size");
        let n = Net::load_version(&path, v).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(n.version(), v);
        assert_eq!(n.name().as_deref(), Some("Ferro"), "{sym} name");
        let t = n.table();
        let missing: Vec<&str> = t
            .mandatory_entries()
            .into_iter()
            .filter(|(_, present)| !present)
            .map(|(n, _)| n)
            .collect();
        assert!(
            missing.is_empty(),
            "{sym}: NULL mandatory entries: {missing:?}"
        );
        assert!(
            t.device_entries_null(),
            "{sym}: getDeviceMr and irecvConsumed must be NULL for a host plugin"
        );
    }
}

#[test]
fn each_nccl_release_finds_the_table_it_looks_for_first() {
    let path = plugin_path().unwrap_or_else(|e| panic!("{e}"));
    let lib = ferro_tests::net::open_library(&path).unwrap_or_else(|e| panic!("{e}"));
    let picks: Vec<(&str, Option<u32>)> = NCCL_RELEASES
        .iter()
        .map(|r| (r.name, r.pick(|s| lib.has_symbol(s))))
        .collect();
    assert_eq!(
        picks,
        [
            ("2.19", Some(7)),
            ("2.20-2.23", Some(8)),
            ("2.24-2.25", Some(9)),
            ("2.26-2.27", Some(10)),
            ("2.28-2.29", Some(11)),
            ("2.30", Some(12)),
        ],
        "the table each NCCL release would load"
    );
    // Older tables than any release's first choice are not exported (v5, v6).
    assert!(!lib.has_symbol("ncclNetPlugin_v6") && !lib.has_symbol("ncclNetPlugin_v5"));
}

#[test]
fn init_succeeds_or_explains_why_and_is_idempotent() {
    let _g = serial();
    let (n, first) = inited();
    let second = n.init();
    assert_eq!(first, second, "a second init must give the same result");
    let all = logger::logs();
    match first {
        Ok(()) => {
            let ndev = n.devices().expect("devices after a successful init");
            assert!(
                ndev >= 1,
                "init succeeded with {ndev} devices: it must fail when nothing is usable"
            );
        }
        Err(code) => {
            assert!(
                code.name().is_some() && code != ncclResult_t::InProgress,
                "init returned {code:?}"
            );
            let warns: Vec<_> = all.iter().filter(|l| l.level == log_level::WARN).collect();
            assert!(
                !warns.is_empty(),
                "init failed with {code:?} and logged no WARN line explaining why"
            );
            if no_rdma_devices() {
                assert!(
                    warns
                        .iter()
                        .any(|l| l.text.contains("no usable RDMA device")
                            || l.text.contains("cannot load")),
                    "expected a WARN naming the reason (no usable RDMA device / missing libibverbs):\n{}",
                    logger::format_logs(&all)
                );
            }
            match n.devices() {
                Ok(d) => assert_eq!(d, 0, "devices after a failed init"),
                Err(c) => assert_ne!(c, ncclResult_t::Success),
            }
        }
    }
}

#[test]
fn bad_input_is_refused_without_crashing() {
    let _g = serial();
    let (n, init) = inited();
    let ndev = if init.is_ok() {
        n.devices().unwrap_or(0)
    } else {
        0
    };
    let problems = checks::bad_input_problems(n, 0, ndev);
    assert!(
        problems.is_empty(),
        "bad input handled wrongly:\n  {}\nlog:\n{}",
        problems.join("\n  "),
        logger::format_logs(&logger::logs())
    );
}

fn probe(env: &[(&str, &str)]) -> GroupReport {
    let mut spec = GroupSpec::new("init-probe", 1).timeout(Duration::from_secs(60));
    for (k, v) in env {
        spec = spec.env(k, v);
    }
    run_group(Path::new(HARNESS), &spec)
}

fn init_code(rep: &GroupReport, key: &str) -> i32 {
    let line = rep
        .rank(0)
        .lines_with(&format!("{key} "))
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no {key} line\n{}", rep.dump()));
    line.split_whitespace()
        .next()
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad {key} line {line:?}"))
}

fn logged(rep: &GroupReport, level: &str, text: &str) -> bool {
    rep.rank(0)
        .lines_with(&format!("LOG {level} "))
        .iter()
        .any(|l| l.contains(text))
}

fn check_failed_init(rep: &GroupReport) {
    rep.assert_all_passed();
    let first = init_code(rep, "INIT");
    assert_ne!(first, 0, "init must fail\n{}", rep.dump());
    assert_eq!(
        init_code(rep, "INIT2"),
        first,
        "a second init must fail the same way\n{}",
        rep.dump()
    );
    let devices = rep.rank(0).lines_with("DEVICES ");
    assert!(
        devices.iter().any(|d| d == "ok 0" || d.starts_with("err ")),
        "devices after a failed init must give 0 or an error: {devices:?}\n{}",
        rep.dump()
    );
}

#[test]
fn missing_libibverbs_fails_init_cleanly() {
    let lib = "/nonexistent/libibverbs.so.1";
    let rep = probe(&[("FERRO_IBVERBS_LIB", lib)]);
    check_failed_init(&rep);
    assert!(
        logged(&rep, "WARN", lib),
        "no WARN names the missing library {lib}\n{}",
        rep.dump()
    );
}

#[test]
fn old_rdma_core_without_dmabuf_is_loaded_and_reported() {
    assert!(
        Path::new(OLD_VERBS).is_file(),
        "the stand-in library {OLD_VERBS} was not built"
    );
    let rep = probe(&[("FERRO_IBVERBS_LIB", OLD_VERBS)]);
    check_failed_init(&rep);
    assert!(
        logged(&rep, "INFO", "ibv_reg_dmabuf_mr: no"),
        "no INFO line reports the missing ibv_reg_dmabuf_mr\n{}",
        rep.dump()
    );
    assert!(
        logged(&rep, "WARN", "no usable RDMA device"),
        "no WARN says \"no usable RDMA device\"\n{}",
        rep.dump()
    );
}

#[test]
fn harness_names_a_missing_plugin() {
    let rep = probe(&[(PLUGIN_ENV, "/nonexistent/libnccl-net-ferro.so")]);
    let r = rep.rank(0);
    assert_eq!(r.status.and_then(|s| s.code()), Some(1), "{}", rep.dump());
    assert!(
        r.verdict
            .as_deref()
            .is_some_and(|v| v.starts_with("FAIL") && v.contains(PLUGIN_ENV)),
        "{}",
        rep.dump()
    );
}

/// NCCL 2.22-2.25 and 2.28+ `dlclose` the plugin when the last communicator goes and `dlopen` it
/// again later. The library is linked `-z nodelete`, so it stays mapped: the table keeps its
/// address, and `init` on the reloaded library gives the same answer without a crash.
#[test]
fn survives_dlclose_and_dlopen_cycles() {
    let _g = serial();
    let path = plugin_path().unwrap_or_else(|e| panic!("{e}"));
    let dynamic = std::process::Command::new("readelf")
        .arg("-d")
        .arg(&path)
        .output()
        .expect("readelf (binutils)");
    let text = String::from_utf8_lossy(&dynamic.stdout);
    assert!(
        text.contains("NODELETE"),
        "the plugin must be linked with -z nodelete:\n{text}"
    );
    let c = std::ffi::CString::new(path.to_string_lossy().as_bytes()).unwrap();
    let mut first_table = std::ptr::null_mut();
    let mut first_init = None;
    for cycle in 0..3 {
        // SAFETY: dlopen/dlsym/dlclose on the plugin, as NCCL does; the table is only read while
        // the handle is open.
        unsafe {
            let h = libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            assert!(!h.is_null(), "dlopen failed on cycle {cycle}");
            let t = libc::dlsym(h, c"ncclNetPlugin_v8".as_ptr());
            assert!(!t.is_null());
            let table = &*t.cast::<ferro_ffi::ncclNet_v8_t>();
            let r = table.init.unwrap()(None);
            let mut n = -1;
            let d = table.devices.unwrap()(&mut n);
            assert_eq!(d, ferro_ffi::ncclResult_t::Success);
            if cycle == 0 {
                first_table = t;
                first_init = Some((r, n));
            } else {
                assert_eq!(
                    t, first_table,
                    "the library was unmapped and reloaded (no NODELETE?)"
                );
                assert_eq!(
                    Some((r, n)),
                    first_init,
                    "init after a reload must give the same outcome"
                );
            }
            assert_eq!(libc::dlclose(h), 0);
        }
    }
}
