//! The doctor in the soft-RoCE guest: both rxe devices listed with their GID tables and the GID
//! the plugin would pick, an OK verdict, exit status 0; and a clear NOT USABLE verdict (exit 1)
//! for an explicit GID index that does not exist.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn doctor(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    assert!(
        std::path::Path::new("/sys/class/infiniband/rxe0").exists(),
        "needs the soft-RoCE guest (run the README's test command)"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_nccl-net-doctor"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run the doctor");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn doctor_lists_both_devices_with_gid_tables_and_verdicts() {
    let (code, text) = doctor(&[], &[]);
    println!("{text}");
    assert_eq!(code, 0, "doctor must exit 0 with usable devices");
    for needle in [
        "rxe0 port 1: OK",
        "rxe1 port 1: OK",
        "0000:0000:0000:0000:0000:ffff:7f00:0001",
        "0000:0000:0000:0000:0000:ffff:c000:0202",
        "2001:0db8:0000:0000:0000:0000:0000:0002",
        "GID choice: auto",
        "rxe0: GPUDirect RDMA off: provider rejects dma-buf (EOPNOTSUPP)",
        // The node and pod checks on real sysfs: rxe has no PCI device, its uverbs node is
        // found through class/infiniband_verbs.
        "GPUDirect RDMA, node and pod",
        "[ok] /dev/infiniband has the uverbs device of every RDMA device",
    ] {
        assert!(text.contains(needle), "doctor output lacks {needle:?}");
    }
    let (code, json) = doctor(&["--json"], &[]);
    assert_eq!(code, 0);
    assert!(
        json.contains("\"name\": \"rxe0\"") || json.contains("\"name\":\"rxe0\""),
        "{json}"
    );
}

#[test]
fn doctor_explains_a_missing_explicit_gid_index() {
    let (code, text) = doctor(&[], &[("NCCL_IB_GID_INDEX", "77")]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("NOT USABLE") && text.contains("77"), "{text}");
}
