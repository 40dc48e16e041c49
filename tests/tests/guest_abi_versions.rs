//! Guest tests: every exported table version (v7 … v12) drives the same scenarios, each in its
//! own processes (`FERRO_NET_ABI=<N>` makes the harness look up `ncclNetPlugin_v<N>` and call
//! only that table), over rxe0. One scenario list, one test per version. The list has the
//! version-independent data path (connection orders, sizes, requests in flight, grouped
//! receives) and `abi-features`, which checks what the version adds (see
//! `ferro_tests::scenario`). Fails (does not skip) outside the soft-RoCE guest.
//!
//! A separate test sends one 2.1 GiB message (above 2^31) through each table with `size_t`
//! sizes (v9 to v12), one after the other in the same boot (`big-message`).

use ferro_ffi::AbiVersion;
use ferro_tests::driver::{GroupSpec, run_group};
use ferro_tests::guest;
use std::path::Path;
use std::time::Duration;

const HARNESS: &str = env!("CARGO_BIN_EXE_nccl-harness");

/// The scenarios each version runs, with their time limits in seconds.
const SCENARIOS: [(&str, u64); 5] = [
    ("connect-orders", 120),
    ("size-sweep", 240),
    ("inflight-32", 120),
    ("grouped-recv", 120),
    ("abi-features", 180),
];

fn every_scenario_passes_through(version: AbiVersion) {
    let _g = guest::serial();
    let n = version.number().to_string();
    for (name, secs) in SCENARIOS {
        let spec = GroupSpec::new(name, 2)
            .env("FERRO_NET_ABI", &n)
            .timeout(Duration::from_secs(secs));
        let rep = run_group(Path::new(HARNESS), &spec);
        rep.assert_all_passed();
        eprintln!("v{n} {name}: passed");
    }
}

#[test]
fn every_scenario_passes_through_the_v7_table() {
    every_scenario_passes_through(AbiVersion::V7);
}

#[test]
fn every_scenario_passes_through_the_v8_table() {
    every_scenario_passes_through(AbiVersion::V8);
}

#[test]
fn every_scenario_passes_through_the_v9_table() {
    every_scenario_passes_through(AbiVersion::V9);
}

#[test]
fn every_scenario_passes_through_the_v10_table() {
    every_scenario_passes_through(AbiVersion::V10);
}

#[test]
fn every_scenario_passes_through_the_v11_table() {
    every_scenario_passes_through(AbiVersion::V11);
}

#[test]
fn every_scenario_passes_through_the_v12_table() {
    every_scenario_passes_through(AbiVersion::V12);
}

/// The tables whose sizes are `size_t`, so a request may exceed 2 GiB.
const SIZE_T_TABLES: [AbiVersion; 4] = [
    AbiVersion::V9,
    AbiVersion::V10,
    AbiVersion::V11,
    AbiVersion::V12,
];

#[test]
fn a_message_above_2_gib_crosses_every_table_with_size_t_sizes() {
    let _g = guest::serial();
    let all = std::time::Instant::now();
    for version in SIZE_T_TABLES {
        let n = version.number().to_string();
        let start = std::time::Instant::now();
        let spec = GroupSpec::new("big-message", 2)
            .env("FERRO_NET_ABI", &n)
            .timeout(Duration::from_secs(1200));
        let rep = run_group(Path::new(HARNESS), &spec);
        rep.assert_all_passed();
        eprintln!(
            "v{n} big-message: passed in {:.0} s\n{}",
            start.elapsed().as_secs_f64(),
            rep.summary()
        );
    }
    eprintln!(
        "big-message through v9, v10, v11, v12: {:.0} s",
        all.elapsed().as_secs_f64()
    );
}
