//! The locked-memory and `/dev/shm` reader and judgement: thresholds, parsing, fake trees, and
//! that each finding shows once in every output of a report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::node::fake::{Tree, facts};
use crate::tests::{device, host, report, rxe_port, squash};
use crate::{overall, render_json, render_text, report_checks, warnings};
use serde_json::Value;

#[test]
fn memlock_thresholds() {
    let judge = |soft: Option<u64>, cap: Option<bool>| {
        memlock_check(&Limits {
            memlock: Ok(Memlock { soft, hard: soft }),
            cap_ipc_lock: cap,
            ..host().limits
        })
    };
    assert_eq!(judge(None, Some(false)).status, Status::Ok, "unlimited");
    assert_eq!(
        judge(Some(MEMLOCK_WARN_BELOW), Some(false)).status,
        Status::Info,
        "at the threshold: worth knowing, not a warning"
    );
    assert_eq!(judge(Some(1 << 40), None).status, Status::Info);
    assert_eq!(
        judge(Some(MEMLOCK_WARN_BELOW - 1), None).status,
        Status::Warning
    );
    let c = judge(Some(8 << 20), Some(false));
    assert_eq!(c.status, Status::Warning);
    assert!(c.summary.contains("8 MiB"), "{}", c.summary);
    assert!(
        c.fix.as_deref().unwrap().contains("--ulimit memlock=-1"),
        "{c:?}"
    );
    assert_eq!(
        judge(Some(64 << 10), Some(true)).status,
        Status::Info,
        "CAP_IPC_LOCK lifts the limit for RDMA pinning"
    );
    // Shown under the limit line's section once, among the pod checks, and counted among warnings.
    let mut r = report(vec![device("rxe0", vec![rxe_port()])]);
    r.node = Some(facts(&Tree::new(), vec![], &[]));
    r.host.limits.memlock = Ok(Memlock {
        soft: Some(8 << 20),
        hard: None,
    });
    let text = render_text(&r);
    assert!(
        text.contains("locked memory (RLIMIT_MEMLOCK): 8 MiB (hard limit unlimited)"),
        "{text}"
    );
    assert!(
        text.contains("  [warning] locked memory is limited to 8 MiB"),
        "{text}"
    );
    assert_eq!(warnings(&r).len(), 1);
    assert!(
        overall(&r).summary.ends_with("(1 warning above)"),
        "{}",
        overall(&r).summary
    );
}

#[test]
fn shm_thresholds() {
    let judge = |size_bytes: u64| {
        shm_check(&Limits {
            shm: Ok(Shm {
                size_bytes,
                available_bytes: None,
            }),
            ..host().limits
        })
    };
    assert_eq!(judge(SHM_WARN_BELOW).status, Status::Ok);
    assert_eq!(judge(64 << 30).status, Status::Ok);
    let c = judge(64 << 20);
    assert_eq!(c.status, Status::Warning);
    assert!(
        c.summary.starts_with("/dev/shm is 64 MiB (below 1 GiB)"),
        "{}",
        c.summary
    );
    assert!(c.fix.as_deref().unwrap().contains("--shm-size"), "{c:?}");
    assert_eq!(judge(SHM_WARN_BELOW - 1).status, Status::Warning);
}

#[test]
fn a_low_memlock_and_a_small_dev_shm_in_a_fake_tree_are_judged_once_in_every_output() {
    let t = Tree::new();
    t.write(
        "proc/self/limits",
        "Limit                     Soft Limit           Hard Limit           Units\n\
         Max locked memory         65536                65536                bytes\n",
    );
    t.write(
        "proc/self/mounts",
        "tmpfs /dev/shm tmpfs rw,nosuid,nodev,size=65536k 0 0\n",
    );
    let mut r = report(vec![device("rxe0", vec![rxe_port()])]);
    r.host.limits = read_limits(&t.roots());
    r.node = Some(facts(&t, vec![], &[]));
    assert_eq!(
        r.host.limits.memlock,
        Ok(Memlock {
            soft: Some(64 << 10),
            hard: Some(64 << 10)
        })
    );
    assert_eq!(r.host.limits.cap_ipc_lock, Some(false));
    assert_eq!(
        r.host.limits.shm.as_ref().map(|s| s.size_bytes),
        Ok(64 << 20)
    );
    let memlock = "locked memory is limited to 64 KiB (below 64 MiB)";
    let shm = "/dev/shm is 64 MiB (below 1 GiB)";
    let found = |list: &[String], needle: &str| list.iter().filter(|w| w.contains(needle)).count();

    let w = warnings(&r);
    assert_eq!(
        (found(&w, memlock), found(&w, shm), w.len()),
        (1, 1, 2),
        "{w:#?}"
    );
    let ids: Vec<&str> = report_checks(&r).iter().map(|c| c.id).collect();
    for id in ["pod.memlock", "pod.shm"] {
        assert_eq!(ids.iter().filter(|i| **i == id).count(), 1, "{ids:?}");
    }
    assert!(overall(&r).summary.ends_with("(2 warnings above)"));

    let text = squash(&render_text(&r));
    assert_eq!(text.matches(memlock).count(), 1, "{text}");
    assert_eq!(text.matches(shm).count(), 1, "{text}");
    assert!(
        text.contains("locked memory (RLIMIT_MEMLOCK): 64 KiB (hard limit 64 KiB)"),
        "{text}"
    );
    assert!(text.contains("/dev/shm: 64 MiB"), "{text}");

    let v: Value = serde_json::from_str(&render_json(&r)).unwrap();
    let w: Vec<String> = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        (found(&w, memlock), found(&w, shm), w.len()),
        (1, 1, 2),
        "{w:#?}"
    );
    let h = &v["host"];
    assert_eq!(h["memlock"]["soft_bytes"], 64 << 10);
    assert_eq!(h["dev_shm"]["size_bytes"], 64 << 20);
    let summary = |id: &str| {
        v["node"]["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap()["summary"]
            .clone()
    };
    assert_eq!(
        h["memlock"]["warning"],
        summary("pod.memlock"),
        "the host object carries the one judgement"
    );
    assert_eq!(h["dev_shm"]["warning"], summary("pod.shm"));
}

#[test]
fn cap_eff_parsing() {
    assert_eq!(
        cap_ipc_lock_from_status("Name:\tx\nCapEff:\t000001ffffffffff\n"),
        Some(true)
    );
    assert_eq!(
        cap_ipc_lock_from_status("CapEff:\t00000000a80425fb\n"),
        Some(false),
        "Docker's default set"
    );
    assert_eq!(
        cap_ipc_lock_from_status("CapEff:\t0000000000004000\n"),
        Some(true)
    );
    assert_eq!(cap_ipc_lock_from_status("Name:\tx\n"), None);
}

#[test]
fn an_unreadable_limits_file_or_mount_table_is_unknown_and_not_a_warning() {
    let t = Tree::new();
    std::fs::remove_file(t.path("proc/self/limits")).unwrap();
    std::fs::remove_file(t.path("proc/self/mounts")).unwrap();
    let l = read_limits(&t.roots());
    assert!(
        l.memlock.as_ref().unwrap_err().contains("self/limits"),
        "{:?}",
        l.memlock
    );
    assert!(matches!(&l.shm, Err(ShmProblem::Unknown(e)) if e.contains("self/mounts")));
    let m = memlock_check(&l);
    assert_eq!(
        (m.status, m.summary.as_str()),
        (
            Status::Info,
            "locked-memory limit unknown and CAP_IPC_LOCK is not effective"
        )
    );
    assert_eq!(shm_check(&l).status, Status::Info);
    t.write("proc/self/status", "Name:\tdoctor\n");
    let l = read_limits(&t.roots());
    assert_eq!(l.cap_ipc_lock, None);
    assert_eq!(
        memlock_check(&l).summary,
        "locked-memory limit and capabilities unknown"
    );
}

#[test]
fn a_dev_shm_mount_without_a_size_is_half_of_memtotal_and_unknown_without_meminfo() {
    let t = Tree::new();
    t.write("proc/self/mounts", "shm /dev/shm tmpfs rw,nosuid 0 0\n");
    t.write("proc/meminfo", "MemTotal:       4194304 kB\n");
    let size = |t: &Tree| read_limits(&t.roots()).shm.map(|s| s.size_bytes);
    assert_eq!(size(&t), Ok(2 << 30));
    std::fs::remove_file(t.path("proc/meminfo")).unwrap();
    assert!(
        matches!(size(&t), Err(ShmProblem::Unknown(_))),
        "{:?}",
        size(&t)
    );
    t.write(
        "proc/self/mounts",
        "tmpfs /dev/shm tmpfs rw,size=lots 0 0\n",
    );
    assert!(matches!(size(&t), Err(ShmProblem::Unknown(e)) if e.contains("size=lots")));
}

#[test]
fn free_space_is_measured_only_where_dev_shm_exists_under_the_root() {
    let t = Tree::new();
    let free = |t: &Tree| read_limits(&t.roots()).shm.unwrap().available_bytes;
    assert_eq!(free(&t), None, "the fake tree has no dev/shm");
    std::fs::create_dir_all(t.path("dev/shm")).unwrap();
    assert!(free(&t).is_some());
}

#[test]
fn memlock_limits_need_both_values_and_read_unlimited_as_none() {
    assert_eq!(
        memlock_from_limits("Max locked memory  unlimited  unlimited  bytes"),
        Some(Memlock {
            soft: None,
            hard: None
        })
    );
    assert_eq!(
        memlock_from_limits("Max locked memory  65536  unlimited  bytes"),
        Some(Memlock {
            soft: Some(64 << 10),
            hard: None
        })
    );
    assert_eq!(memlock_from_limits("Max locked memory  65536"), None);
    assert_eq!(memlock_from_limits("Max locked memory  lots  lots"), None);
}
