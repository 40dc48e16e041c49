//! The binary with `--root`: the node and pod checks read the given tree (not the host's /sys,
//! /proc and /dev), and the JSON report carries them with the documented keys; the locked-memory
//! and `/dev/shm` facts of the `host` object come from the tree too, and are judged once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

#[test]
fn the_doctor_reads_node_facts_under_root_and_reports_them_in_json() {
    let t = tempfile::tempdir().unwrap();
    let w = |rel: &str, text: &str| {
        let p = t.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    w("sys/module/nvidia/version", "550.90.07\n");
    w("sys/module/nvidia/taint", "OE\n");
    w("sys/module/nvidia_fs/version", "2.17.5\n");
    w("proc/sys/kernel/osrelease", "6.8.0-45-generic\n");
    w("proc/cmdline", "intel_iommu=on iommu=pt\n");
    w(
        "proc/self/mounts",
        "tmpfs /dev/shm tmpfs rw,size=65536k 0 0\n",
    );
    std::fs::create_dir_all(t.path().join("sys/class/net/eth0")).unwrap();
    std::fs::create_dir_all(t.path().join("dev")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nccl-net-doctor"))
        .args(["--json", "--root"])
        .arg(t.path())
        .env("NCCL_SOCKET_IFNAME", "net1")
        .output()
        .expect("run the doctor");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(v["format_version"], 2);
    assert_eq!(
        v["node"]["roots"]["sys"],
        t.path().join("sys").display().to_string()
    );
    assert_eq!(v["node"]["nvidia"]["kernel_modules"], "open");
    assert_eq!(v["node"]["nvidia_fs"]["version"], "2.17.5");
    assert_eq!(v["node"]["iommu"], "passthrough");
    let checks = v["node"]["checks"].as_array().unwrap();
    let by_id = |id: &str| checks.iter().find(|c| c["id"] == id).unwrap().clone();
    assert_eq!(by_id("pod.socket_ifname")["status"], "fail");
    assert_eq!(by_id("pod.shm")["status"], "warning");
    assert_eq!(v["verdict"]["node_status"], "fail");
    // This host has no usable RDMA port for the plugin (exit 1), or one (then 3: a check failed).
    let code = out.status.code().unwrap();
    assert_eq!(v["verdict"]["exit_code"], code);
    assert!(code == 1 || code == 3, "exit status {code}");
}

#[test]
fn locked_memory_and_dev_shm_are_read_under_root_and_each_judged_once() {
    let t = tempfile::tempdir().unwrap();
    let w = |rel: &str, text: &str| {
        let p = t.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    // Values no real process here is likely to have, so they can only come from the tree.
    w(
        "proc/self/limits",
        "Limit                     Soft Limit           Hard Limit           Units\n\
         Max locked memory         196608               393216               bytes\n",
    );
    w(
        "proc/self/status",
        "Name:\tdoctor\nCapEff:\t0000000000000000\n",
    );
    w(
        "proc/self/mounts",
        "tmpfs /dev/shm tmpfs rw,size=98304k 0 0\n",
    );
    std::fs::create_dir_all(t.path().join("sys")).unwrap();
    std::fs::create_dir_all(t.path().join("dev")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nccl-net-doctor"))
        .args(["--json", "--root"])
        .arg(t.path())
        .output()
        .expect("run the doctor");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let memlock = &v["host"]["memlock"];
    assert_eq!(
        (&memlock["soft_bytes"], &memlock["hard_bytes"]),
        (&196_608.into(), &393_216.into()),
        "{memlock}"
    );
    assert_eq!(memlock["cap_ipc_lock"], false);
    assert_eq!(v["host"]["dev_shm"]["size_bytes"], 96u64 << 20);
    let checks = v["node"]["checks"].as_array().unwrap();
    for (id, needle) in [
        ("pod.memlock", "locked memory is limited to 192 KiB"),
        ("pod.shm", "/dev/shm is 96 MiB"),
    ] {
        let judged: Vec<&serde_json::Value> = checks.iter().filter(|c| c["id"] == id).collect();
        assert_eq!(judged.len(), 1, "{id}: {judged:?}");
        assert_eq!(judged[0]["status"], "warning", "{id}");
        let warnings = v["warnings"].as_array().unwrap();
        let found = warnings
            .iter()
            .filter(|w| w.as_str().unwrap().contains(needle))
            .count();
        assert_eq!(found, 1, "{needle:?} in {warnings:?}");
    }
}
