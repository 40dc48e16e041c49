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

fn tree() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    for (rel, text) in [
        ("proc/cmdline", "BOOT_IMAGE=/vmlinuz intel_iommu=on\n"),
        ("dev/infiniband/uverbs7", ""),
        ("dev/infiniband/rdma_cm", ""),
    ] {
        let p = t.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    std::fs::create_dir_all(t.path().join("sys")).unwrap();
    t
}

fn doctor(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nccl-net-doctor"))
        .args(args)
        .env_remove("NCCL_NET")
        .env_remove("NCCL_NET_PLUGIN")
        .output()
        .expect("run the doctor");
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_host_section_reads_dev_infiniband_and_the_command_line_under_root() {
    let t = tree();
    let root = format!("--root={}", t.path().display());
    let (_, json, _) = doctor(&["--json".as_ref(), root.as_ref()]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("JSON on stdout");
    assert_eq!(v["host"]["dev_infiniband"]["present"], true);
    assert_eq!(
        v["host"]["dev_infiniband"]["entries"],
        serde_json::json!(["rdma_cm", "uverbs7"])
    );
    assert_eq!(
        v["host"]["iommu"]["mode"], "translated",
        "{}",
        v["host"]["iommu"]
    );
    // NCCL is looked for under the tree too: there is none in it.
    let nccl = &v["node"]["nccl"];
    for k in [
        "library",
        "library_real_path",
        "version",
        "plugin",
        "plugin_is_ferro",
        "plugin_tables",
    ] {
        assert!(
            nccl.get(k).is_some_and(serde_json::Value::is_null),
            "{k}: {nccl}"
        );
    }
    assert_eq!(v["node"]["sriov_vfio_vfs"], serde_json::json!([]));
    assert_eq!(v["verdict"]["gdr_policy"], "required");
    let (_, text, _) = doctor(&["--output".as_ref(), "text".as_ref(), root.as_ref()]);
    assert!(text.contains("/dev/infiniband: rdma_cm uverbs7"), "{text}");
    assert!(!text.contains("/dev/infiniband: absent"), "{text}");
}

#[test]
fn the_nfd_output_is_a_feature_file_and_its_verdict_matches_the_exit_status() {
    let t = tree();
    let (code, out, _) = doctor(&[
        "--output=nfd".as_ref(),
        "--gdr-policy".as_ref(),
        "optional".as_ref(),
        "--root".as_ref(),
        t.path().as_os_str(),
    ]);
    let features: Vec<(&str, &str)> = out
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_once('=').expect("name=value"))
        .collect();
    assert!(
        features
            .iter()
            .all(|(k, _)| k.starts_with("ferro.nccl-net/")),
        "{out}"
    );
    let get = |k: &str| features.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    assert_eq!(
        get("ferro.nccl-net/exit-code"),
        Some(code.to_string().as_str())
    );
    assert_eq!(get("ferro.nccl-net/gdr-policy"), Some("optional"));
    let verdict = get("ferro.nccl-net/verdict").unwrap();
    assert_eq!(verdict == "fail", code != 0, "{out}");
}

#[test]
fn version_and_usage_errors_name_the_option_the_user_typed() {
    let (code, out, _) = doctor(&["--version".as_ref()]);
    assert_eq!(code, 0);
    assert!(out.starts_with("nccl-net-doctor "), "{out}");
    let (code, _, err) = doctor(&["--root=/no/such/tree".as_ref()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--root /no/such/tree: not a directory"),
        "{err}"
    );
    let t = tempfile::tempdir().unwrap();
    let (code, _, err) = doctor(&["--root".as_ref(), t.path().as_os_str()]);
    assert_eq!(code, 2);
    assert!(err.contains("--root (its sys directory)"), "{err}");
    let (code, _, err) = doctor(&["--output".as_ref(), "yaml".as_ref()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("invalid value 'yaml' for '--output <FORMAT>'"),
        "{err}"
    );
    let (code, _, err) = doctor(&["--sysfs-root=".as_ref()]);
    assert_eq!(code, 2);
    assert!(err.contains("'--sysfs-root <PATH>'"), "{err}");
    let (code, out, _) = doctor(&["--help".as_ref()]);
    assert_eq!(code, 0);
    assert!(
        out.contains("--gdr-policy <POLICY>") && out.contains("Exit status"),
        "{out}"
    );
}
