//! Guest tests: every exported table version (v7 … v12) drives the same scenarios, each in its
//! own processes (`FERRO_NET_ABI=<N>` makes the harness look up `ncclNetPlugin_v<N>` and call
//! only that table), over rxe0. One scenario list, one test per version. The list has the
//! version-independent data path (connection orders, sizes, requests in flight, grouped
//! receives), faults (close in flight, a killed peer, hostile clients) and `abi-features`,
//! which checks what the version adds (see `ferro_tests::scenario`). v10+ run `abi-features` a
//! second time with two QPs per connection and messages split across them, where every buffer's
//! profiler events must be one per QP, on distinct QPs. Fails (does not skip) outside the
//! soft-RoCE guest.
//!
//! A separate test sends one 2.1 GiB message (above 2^31) through each table with `size_t`
//! sizes (v9 to v12), one after the other in the same boot (`big-message`).

use ferro_ffi::AbiVersion;
use ferro_tests::driver::{GroupSpec, RawClient, run_group};
use ferro_tests::guest;
use std::path::Path;
use std::time::Duration;

const HARNESS: &str = env!("CARGO_BIN_EXE_nccl-harness");

/// How a scenario's outcome is judged.
enum Expect {
    AllPass,
    /// `peer-kill`: the driver killed the other rank, and this one saw the failure and passed.
    Survivor(usize),
}

/// The scenarios each version runs (without the version, which each test adds): the data path
/// (connection orders, sizes, requests in flight, grouped receives), faults (close with work in
/// flight, a killed sender, stray and silent clients on the listener), and what the version adds.
fn scenarios() -> Vec<(GroupSpec, Expect)> {
    let secs = Duration::from_secs;
    vec![
        (
            GroupSpec::new("connect-orders", 2).timeout(secs(120)),
            Expect::AllPass,
        ),
        (
            GroupSpec::new("size-sweep", 2).timeout(secs(240)),
            Expect::AllPass,
        ),
        (
            GroupSpec::new("inflight-32", 2).timeout(secs(120)),
            Expect::AllPass,
        ),
        (
            GroupSpec::new("grouped-recv", 2).timeout(secs(120)),
            Expect::AllPass,
        ),
        (
            GroupSpec::new("close-inflight", 2).timeout(secs(120)),
            Expect::AllPass,
        ),
        (
            GroupSpec::new("peer-kill", 2)
                .args(&["--victim", "sender"])
                .timeout(secs(180)),
            Expect::Survivor(0),
        ),
        (
            GroupSpec::new("hostile-peers", 2)
                .raw_client(RawClient::Garbage(64))
                .raw_client(RawClient::Silent)
                .timeout(secs(120)),
            Expect::AllPass,
        ),
        (
            GroupSpec::new("abi-features", 2).timeout(secs(180)),
            Expect::AllPass,
        ),
    ]
}

fn every_scenario_passes_through(version: AbiVersion) {
    let _g = guest::serial();
    let n = version.number().to_string();
    for (spec, expect) in scenarios() {
        let spec = spec.env("FERRO_NET_ABI", &n);
        let name = spec.scenario.clone();
        let rep = run_group(Path::new(HARNESS), &spec);
        match expect {
            Expect::AllPass => rep.assert_all_passed(),
            Expect::Survivor(r) => {
                assert!(
                    rep.rank(1 - r).killed_by_driver,
                    "v{n} {name}: the victim was never killed\n{}",
                    rep.dump()
                );
                rep.assert_passed(r);
            }
        }
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
