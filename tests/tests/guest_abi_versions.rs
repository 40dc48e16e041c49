//! Guest tests: every exported table version (v7 … v12) drives the same scenarios, each in its
//! own processes (`FERRO_NET_ABI=<N>` makes the harness look up `ncclNetPlugin_v<N>` and call
//! only that table), over rxe0. One scenario list, one test per version. The list has the
//! version-independent data path (connection orders, sizes, requests in flight, grouped
//! receives) and `abi-features`, which checks what the version adds (see
//! `ferro_tests::scenario`). v10+ run `abi-features` a second time with two QPs per connection
//! and messages split across them, where every buffer's profiler events must be one per QP, on
//! distinct QPs. Fails (does not skip) outside the soft-RoCE guest.

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
    if version >= AbiVersion::V10 {
        let spec = GroupSpec::new("abi-features", 2)
            .env("FERRO_NET_ABI", &n)
            .env("NCCL_IB_QPS_PER_CONNECTION", "2")
            .env("NCCL_IB_SPLIT_DATA_ON_QPS", "1")
            .timeout(Duration::from_secs(180));
        let rep = run_group(Path::new(HARNESS), &spec);
        rep.assert_all_passed();
        eprintln!("v{n} abi-features, 2 QPs split: passed");
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
