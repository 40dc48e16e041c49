//! Start-up cost (guest only): the whole process that loads the plugin, runs `init` with rxe0
//! and rxe1 and reads every device's properties opens at most 200 files (counted with strace,
//! dynamic loading included). Device discovery reads each GID table with one
//! `ibv_query_gid_table` call instead of three sysfs files per slot (thousands per device).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

mod common;
use common::*;

const MAX_OPENS: usize = 200;

#[test]
fn init_with_two_devices_opens_at_most_200_files() {
    if std::env::var(CHILD_ROLE).as_deref() == Ok("init") {
        let dev = test_dev();
        println!("INIT-OK device {dev}");
        return;
    }
    assert!(
        std::path::Path::new("/sys/class/infiniband/rxe1").exists(),
        "needs the soft-RoCE guest with rxe0 and rxe1"
    );
    let trace = std::env::temp_dir().join(format!("ferro-startup-{}.strace", std::process::id()));
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=open,openat,openat2", "-o"])
        .arg(&trace)
        .arg(&exe)
        .args([
            "--exact",
            "init_with_two_devices_opens_at_most_200_files",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ROLE, "init")
        .output()
        .expect("strace (the test bed installs it)");
    let text = text(&out);
    assert!(out.status.success() && text.contains("INIT-OK"), "{text}");
    let lines = std::fs::read_to_string(&trace).unwrap();
    let opens: Vec<&str> = lines.lines().filter(|l| l.contains("open")).collect();
    let sysfs = opens.iter().filter(|l| l.contains("/sys/")).count();
    println!(
        "init with rxe0 and rxe1: {} file opens in the whole process ({sysfs} under /sys)",
        opens.len()
    );
    let _ = std::fs::remove_file(&trace);
    assert!(
        opens.len() <= MAX_OPENS,
        "{} opens (more than {MAX_OPENS}); the first 40:\n{}",
        opens.len(),
        opens
            .iter()
            .take(40)
            .copied()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
