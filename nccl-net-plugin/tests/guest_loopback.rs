//! In-process loopback through the exported table on rxe0 (guest only): a sender and a receiver
//! comm in one process, a size sweep with byte-for-byte checks, grouped receives and zero-byte
//! messages. The cross-process NCCL-like suite lives in the `ferro-tests` package.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use core::ffi::{c_int, c_void};
use ferro_ffi::ncclNetProperties_v8_t;
use nccl_net_ferro::ncclNetPlugin_v8 as NET;
use std::ptr::null_mut;
use std::time::Instant;

mod common;
use common::*;

#[test]
fn loopback_sweep_groups_and_zero_bytes() {
    transfer_sweep();
}

/// One process: init, then the sweep and a grouped receive on `FERRO_TEST_DEV`.
fn transfer_sweep() {
    let dev = test_dev();
    let p = pair(dev);
    let cap = 16 << 20;
    let sbuf = vec![0u8; cap];
    let mut rbufs: Vec<Vec<u8>> = (0..8).map(|_| vec![0u8; cap + 4096]).collect();
    let smr = reg(p.send, sbuf.as_ptr(), cap);
    let rmrs: Vec<*mut c_void> = rbufs.iter_mut().map(|b| reg_buf(p.recv, b)).collect();
    let mut sbuf = sbuf;
    for (k, &size) in [0usize, 1, 4095, 4096, 65537, 1 << 20, 16 << 20]
        .iter()
        .enumerate()
    {
        let data = pattern(k as u32, size);
        sbuf[..size].copy_from_slice(&data);
        let (sent, received) = transfer(
            &p,
            (sbuf.as_ptr(), smr, size),
            (rbufs[0].as_mut_ptr(), rmrs[0], cap + 4096),
            7,
        );
        let (ss, rs) = ([sent], [received]);
        assert_eq!(ss[0] as usize, size, "sender size");
        assert_eq!(rs[0] as usize, size, "receiver size");
        assert!(rbufs[0][..size] == data[..], "data mismatch at size {size}");
    }
    // A grouped receive of 8 buffers, sends in reverse tag order, sizes differ (one empty).
    let n = 8;
    let group: Vec<RecvArg> = rbufs
        .iter_mut()
        .zip(&rmrs)
        .enumerate()
        .map(|(t, (b, &m))| (b.as_mut_ptr(), 65536, t as c_int, m))
        .collect();
    let rreq = post_irecv(p.recv, &group);
    let mut sreqs = Vec::new();
    let chunk = 65536;
    for t in (0..n).rev() {
        let size = if t == 3 { 0 } else { 1000 * (t + 1) };
        let data = pattern(100 + t as u32, size);
        sbuf[t * chunk..t * chunk + size].copy_from_slice(&data);
        sreqs.push(post_isend(
            p.send,
            sbuf[t * chunk..].as_ptr(),
            size,
            t as c_int,
            smr,
        ));
    }
    for r in sreqs {
        wait(r, &mut [0]);
    }
    let mut got = vec![-1 as c_int; n];
    wait(rreq, &mut got);
    for t in 0..n {
        let size = if t == 3 { 0 } else { 1000 * (t + 1) };
        assert_eq!(got[t] as usize, size, "size of buffer {t}");
        assert!(
            rbufs[t][..size] == pattern(100 + t as u32, size)[..],
            "data of buffer {t}"
        );
    }
    // SAFETY: closing what we opened.
    unsafe {
        ok(NET.deregMr.unwrap()(p.send, smr), "dereg");
        for m in rmrs {
            ok(NET.deregMr.unwrap()(p.recv, m), "dereg");
        }
        close(&p);
    }
}

/// Child: a transfer, then `iflush` on the received buffer must give a request that completes
/// (the loopback QP's 1-byte RDMA READ), or NULL when flushing does not apply.
fn child_flush() {
    let dev = test_dev();
    let p = pair(dev);
    let len = 1 << 16;
    let mut src = vec![7u8; len];
    let mut dst = vec![0u8; len];
    let smr = reg_buf(p.send, &mut src);
    let rmr = reg_buf(p.recv, &mut dst);
    transfer(
        &p,
        (src.as_ptr(), smr, len),
        (dst.as_mut_ptr(), rmr, len),
        0,
    );
    let mut freq: *mut c_void = null_mut();
    let mut d = [dst.as_mut_ptr().cast::<c_void>()];
    let mut sz = [len as c_int];
    let mut mh = [rmr];
    // SAFETY: arrays of n = 1 naming the registered receive buffer.
    unsafe {
        ok(
            NET.iflush.unwrap()(
                p.recv,
                1,
                d.as_mut_ptr(),
                sz.as_mut_ptr(),
                mh.as_mut_ptr(),
                &mut freq,
            ),
            "iflush",
        );
    }
    if freq.is_null() {
        println!("CHILD-RESULT flush=none");
    } else {
        wait(freq, &mut [0; 8]);
        println!("CHILD-RESULT flush=done");
    }
    assert!(dst.iter().all(|b| *b == 7));
}

/// Child, listening side of a two-process connection: prints its handle, then accepts until the
/// connection is made or refused; prints the outcome.
fn child_listen() {
    let dev = test_dev();
    let mut handle = [0u8; 128];
    let mut listen: *mut c_void = null_mut();
    // SAFETY: table calls with valid out-pointers.
    unsafe {
        ok(
            NET.listen.unwrap()(dev, handle.as_mut_ptr().cast(), &mut listen),
            "listen",
        )
    };
    println!("HANDLE {}", Handle(handle).to_hex());
    use std::io::Write as _;
    std::io::stdout().flush().unwrap();
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    let mut recv: *mut c_void = null_mut();
    // The plugin drops a connection it refuses and keeps listening, so a refusal shows up as the
    // peer's error; this side reports what it saw after the peer gives up.
    while recv.is_null() && Instant::now() < deadline {
        // SAFETY: listen comm from listen().
        let r = unsafe { NET.accept.unwrap()(listen, &mut recv, null_mut()) };
        if r != ferro_ffi::ncclResult_t::Success {
            println!("CHILD-RESULT accept={}", r.0);
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    println!(
        "CHILD-RESULT accept={}",
        if recv.is_null() {
            "timeout"
        } else {
            "connected"
        }
    );
}

/// Child, connecting side: connects to the handle in `FERRO_PEER_HANDLE`; prints the outcome.
fn child_connect() {
    let dev = test_dev();
    let mut handle = Handle::from_hex(&std::env::var("FERRO_PEER_HANDLE").unwrap())
        .unwrap()
        .0;
    let mut send: *mut c_void = null_mut();
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    while send.is_null() && Instant::now() < deadline {
        // SAFETY: a handle from the peer's listen().
        let r =
            unsafe { NET.connect.unwrap()(dev, handle.as_mut_ptr().cast(), &mut send, null_mut()) };
        if r != ferro_ffi::ncclResult_t::Success {
            println!("CHILD-RESULT connect={}", r.0);
            return;
        }
    }
    println!(
        "CHILD-RESULT connect={}",
        if send.is_null() {
            "timeout"
        } else {
            "connected"
        }
    );
}

/// Two processes whose settings that must agree differ: both sides report it, naming both values.
#[test]
fn mismatched_settings_between_ranks_fail_on_both_sides() {
    match std::env::var("FERRO_MATRIX_CHILD").as_deref() {
        Ok("listen") => return child_listen(),
        Ok("connect") => return child_connect(),
        _ => {}
    }
    assert!(
        std::path::Path::new("/sys/class/infiniband/rxe0").exists(),
        "needs the soft-RoCE guest"
    );
    use std::io::BufRead as _;
    use std::process::{Command, Stdio};
    let exe = std::env::current_exe().unwrap();
    let args = [
        "--exact",
        "mismatched_settings_between_ranks_fail_on_both_sides",
        "--nocapture",
        "--test-threads=1",
    ];
    let mut server = Command::new(&exe)
        .args(args)
        .env("FERRO_MATRIX_CHILD", "listen")
        .env("FERRO_LOG_STDERR", "1")
        .env("NCCL_IB_QPS_PER_CONNECTION", "2")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(server.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let handle = loop {
        match lines.next() {
            // libtest may print "test name ... " on the same line first.
            Some(Ok(l)) => match l.find("HANDLE ") {
                Some(at) => break l[at + 7..].trim().to_string(),
                None => seen.push(l),
            },
            _ => {
                let out = server.wait_with_output().unwrap();
                panic!(
                    "the listening child ended before printing its handle ({:?}):\n{}\n{}",
                    out.status,
                    seen.join("\n"),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    };
    let client = Command::new(&exe)
        .args(args)
        .env("FERRO_MATRIX_CHILD", "connect")
        .env("FERRO_LOG_STDERR", "1")
        .env("FERRO_PEER_HANDLE", &handle)
        .env("NCCL_IB_QPS_PER_CONNECTION", "4")
        .output()
        .unwrap();
    let ctext = format!(
        "{}{}",
        String::from_utf8_lossy(&client.stdout),
        String::from_utf8_lossy(&client.stderr)
    );
    // The server keeps listening after refusing; stop it and read what it logged.
    let _ = server.kill();
    let sout = server.wait_with_output().unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let stext = format!(
        "{}\n{}",
        rest.join("\n"),
        String::from_utf8_lossy(&sout.stderr)
    );
    assert!(
        ctext.contains("CHILD-RESULT connect=5"),
        "the connecting side must fail with ncclInvalidUsage:\n{ctext}"
    );
    for (side, text) in [("connecting", &ctext), ("listening", &stext)] {
        assert!(
            text.contains("NCCL_IB_QPS_PER_CONNECTION 2 here vs 4")
                || text.contains("NCCL_IB_QPS_PER_CONNECTION 4 here vs 2")
                || text.contains("settings differ between ranks"),
            "the {side} side must say which settings differ:\n{text}"
        );
    }
    assert!(
        stext.contains("WARN"),
        "the listening side must warn:\n{stext}"
    );
}

/// What a child process of [`settings_matrix`] does.
fn child_devices() {
    // SAFETY: calling the plugin's own table as NCCL would.
    let (init, names) = unsafe {
        let r = NET.init.unwrap()(None);
        let mut n = 0;
        ok(NET.devices.unwrap()(&mut n), "devices");
        let mut names = Vec::new();
        for d in 0..n {
            let mut p: ncclNetProperties_v8_t = std::mem::zeroed();
            ok(NET.getProperties.unwrap()(d, &mut p), "props");
            names.push(
                std::ffi::CStr::from_ptr(p.name)
                    .to_string_lossy()
                    .into_owned(),
            );
        }
        (r, names)
    };
    println!("CHILD-RESULT init={} devices={}", init.0, names.join(","));
}

struct Case {
    env: &'static [(&'static str, &'static str)],
    /// "transfer": the sweep must pass; "devices": the device list (or init failure) is checked.
    kind: &'static str,
    /// Substrings the child's output (stdout + stderr) must contain.
    expect: &'static [&'static str],
}

const MATRIX: &[Case] = &[
    // Inline clear-to-send writes (NCCL_IB_USE_INLINE=1), with the size sweep.
    Case {
        env: &[("NCCL_IB_USE_INLINE", "1")],
        kind: "transfer",
        expect: &["NCCL_IB_USE_INLINE=1"],
    },
    Case {
        env: &[("NCCL_IB_USE_INLINE", "2")],
        kind: "transfer",
        expect: &["NCCL_IB_USE_INLINE", "2", "NCCL_IB_USE_INLINE=0"],
    },
    // QPs per connection x split mode, with the size sweep and a grouped receive.
    Case {
        env: &[
            ("NCCL_IB_QPS_PER_CONNECTION", "1"),
            ("NCCL_IB_SPLIT_DATA_ON_QPS", "1"),
        ],
        kind: "transfer",
        expect: &["NCCL_IB_QPS_PER_CONNECTION=1 NCCL_IB_SPLIT_DATA_ON_QPS=1"],
    },
    Case {
        env: &[
            ("NCCL_IB_QPS_PER_CONNECTION", "2"),
            ("NCCL_IB_SPLIT_DATA_ON_QPS", "0"),
        ],
        kind: "transfer",
        expect: &["NCCL_IB_QPS_PER_CONNECTION=2 NCCL_IB_SPLIT_DATA_ON_QPS=0"],
    },
    Case {
        env: &[
            ("NCCL_IB_QPS_PER_CONNECTION", "2"),
            ("NCCL_IB_SPLIT_DATA_ON_QPS", "1"),
        ],
        kind: "transfer",
        expect: &["NCCL_IB_QPS_PER_CONNECTION=2 NCCL_IB_SPLIT_DATA_ON_QPS=1"],
    },
    Case {
        env: &[
            ("NCCL_IB_QPS_PER_CONNECTION", "4"),
            ("NCCL_IB_SPLIT_DATA_ON_QPS", "0"),
        ],
        kind: "transfer",
        expect: &["NCCL_IB_QPS_PER_CONNECTION=4 NCCL_IB_SPLIT_DATA_ON_QPS=0"],
    },
    Case {
        env: &[
            ("NCCL_IB_QPS_PER_CONNECTION", "4"),
            ("NCCL_IB_SPLIT_DATA_ON_QPS", "1"),
        ],
        kind: "transfer",
        expect: &["NCCL_IB_QPS_PER_CONNECTION=4 NCCL_IB_SPLIT_DATA_ON_QPS=1"],
    },
    Case {
        env: &[
            ("NCCL_IB_QPS_PER_CONNECTION", "8"),
            ("NCCL_IB_SPLIT_DATA_ON_QPS", "0"),
        ],
        kind: "transfer",
        expect: &["NCCL_IB_QPS_PER_CONNECTION=8 NCCL_IB_SPLIT_DATA_ON_QPS=0"],
    },
    Case {
        env: &[
            ("NCCL_IB_QPS_PER_CONNECTION", "8"),
            ("NCCL_IB_SPLIT_DATA_ON_QPS", "1"),
        ],
        kind: "transfer",
        expect: &["NCCL_IB_QPS_PER_CONNECTION=8 NCCL_IB_SPLIT_DATA_ON_QPS=1"],
    },
    // GID choice on rxe1 (IPv4 192.0.2.2 and IPv6 2001:db8::2 on dummy1), traffic over it.
    Case {
        env: &[("FERRO_TEST_DEV", "rxe1")],
        kind: "transfer",
        expect: &[
            "rxe1:1/RoCE via dummy1 GID 1 (::ffff:192.0.2.2)",
            // GPUDirect RDMA state, one sentence per device.
            "rxe0: GPUDirect RDMA off: provider rejects dma-buf (EOPNOTSUPP)",
            "rxe1: GPUDirect RDMA off: provider rejects dma-buf (EOPNOTSUPP)",
            "NCCL will stage through host memory",
        ],
    },
    // Flush: host memory needs none; FERRO_FLUSH_HOST=1 exercises the loopback-QP RDMA READ.
    Case {
        env: &[],
        kind: "flush",
        expect: &["CHILD-RESULT flush=none"],
    },
    Case {
        env: &[("FERRO_FLUSH_HOST", "1")],
        kind: "flush",
        expect: &["CHILD-RESULT flush=done"],
    },
    Case {
        env: &[
            ("FERRO_FLUSH_HOST", "1"),
            ("NCCL_IB_QPS_PER_CONNECTION", "4"),
        ],
        kind: "flush",
        expect: &["CHILD-RESULT flush=done"],
    },
    Case {
        env: &[
            ("FERRO_TEST_DEV", "rxe1"),
            ("NCCL_IB_ADDR_FAMILY", "AF_INET6"),
        ],
        kind: "transfer",
        expect: &["rxe1:1/RoCE via dummy1 GID 2 (2001:db8::2)"],
    },
    Case {
        env: &[("FERRO_TEST_DEV", "rxe1"), ("NCCL_IB_GID_INDEX", "2")],
        kind: "transfer",
        expect: &[
            "rxe1:1/RoCE via dummy1 GID 2 (2001:db8::2)",
            "rxe0:1/RoCE via lo GID 2 (::1)",
        ],
    },
    // Per-device override: rxe1 uses index 2, rxe0 keeps the automatic IPv4 choice.
    Case {
        env: &[("FERRO_TEST_DEV", "rxe1"), ("FERRO_GID_INDEX", "rxe1=2")],
        kind: "transfer",
        expect: &[
            "rxe1:1/RoCE via dummy1 GID 2 (2001:db8::2)",
            "rxe0:1/RoCE via lo GID 1 (::ffff:127.0.0.1)",
        ],
    },
    // HCA selection changes `devices`.
    Case {
        env: &[("NCCL_IB_HCA", "rxe1")],
        kind: "devices",
        expect: &["CHILD-RESULT init=0 devices=rxe1\n"],
    },
    Case {
        env: &[("NCCL_IB_HCA", "^rxe1")],
        kind: "devices",
        expect: &[
            "CHILD-RESULT init=0 devices=rxe0\n",
            "excluded by NCCL_IB_HCA=^rxe1",
        ],
    },
    Case {
        env: &[("NCCL_IB_HCA", "=rxe0:1")],
        kind: "devices",
        expect: &["CHILD-RESULT init=0 devices=rxe0\n"],
    },
    Case {
        env: &[("NCCL_IB_HCA", "=rxe")],
        kind: "devices",
        expect: &["CHILD-RESULT init=2 devices=\n", "no usable RDMA device"],
    },
    // A non-existent explicit GID index: a clean init failure naming device, index and table.
    Case {
        env: &[("NCCL_IB_GID_INDEX", "9")],
        kind: "devices",
        expect: &[
            "CHILD-RESULT init=2 devices=\n",
            "rxe0 port 1: GID index 9 (explicit NCCL_IB_GID_INDEX=9)",
            "valid non-zero indexes: [0, 1, 2]",
        ],
    },
    // An invalid value warns and falls back to the default.
    Case {
        env: &[("NCCL_IB_QPS_PER_CONNECTION", "0")],
        kind: "devices",
        expect: &[
            "CHILD-RESULT init=0 devices=rxe0,rxe1\n",
            "NCCL_IB_QPS_PER_CONNECTION=0 is outside 1..=128; using the default 1",
        ],
    },
];

/// Every setting combination in its own process (the plugin reads its environment once).
#[test]
fn settings_matrix() {
    match std::env::var("FERRO_MATRIX_CHILD").as_deref() {
        Ok("transfer") => return transfer_sweep(),
        Ok("devices") => return child_devices(),
        Ok("flush") => return child_flush(),
        _ => {}
    }
    assert!(
        std::path::Path::new("/sys/class/infiniband/rxe1").exists(),
        "needs the soft-RoCE guest"
    );
    let exe = std::env::current_exe().expect("own executable");
    let mut failures = Vec::new();
    for case in MATRIX {
        let t = Instant::now();
        let out = std::process::Command::new(&exe)
            .args([
                "--exact",
                "settings_matrix",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("FERRO_MATRIX_CHILD", case.kind)
            .env("FERRO_LOG_STDERR", "1")
            .envs(case.env.iter().copied())
            .output()
            .expect("spawn child");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let missing: Vec<&str> = case
            .expect
            .iter()
            .copied()
            .filter(|e| !text.contains(e))
            .collect();
        let label = format!("{:?} ({})", case.env, case.kind);
        if !out.status.success() || !missing.is_empty() {
            failures.push(format!(
                "{label}: status {:?}, missing {missing:?}\n{text}",
                out.status.code()
            ));
        } else {
            println!("ok  {label} in {:.1} s", t.elapsed().as_secs_f64());
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        MATRIX.len(),
        failures.join("\n---\n")
    );
}
