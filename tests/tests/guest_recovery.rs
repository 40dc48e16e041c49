//! Guest tests: recovery in place. Both ranks use rxe1 (soft-RoCE on `dummy1`) and the `link-flap`
//! scenario takes `dummy1` down under 32 sends in flight (see `ferro_tests::scenario` for what each
//! rank checks): a 2 s flap is recovered with every byte right and no error returned, through the
//! v8 and the v12 tables, with one QP and with two split QPs; NCCL's start delay holds the rebuild
//! back; a link that stays down past the budget fails within bounds with the WARN that says so; a
//! peer killed during a recovery is found within the dead-peer bound; over rxe0 and rxe1 fused on
//! both ranks, rxe1 going down moves its QPs to rxe0 (failover) and its return moves them back.
//! Fails (does not skip) outside the soft-RoCE guest.

use ferro_tests::driver::{GroupReport, GroupSpec, run_group};
use ferro_tests::guest;
use ferro_tests::scenario::set_link;
use std::path::Path;
use std::time::Duration;

const HARNESS: &str = env!("CARGO_BIN_EXE_nccl-harness");

/// Brings the link back whatever the test did (a failed rank may have left it down).
struct LinkUp;

impl Drop for LinkUp {
    fn drop(&mut self) {
        let _ = set_link(true);
    }
}

fn flap(mode: &str, abi: &str, env: &[(&str, &str)], secs: u64) -> GroupReport {
    flap_on(guest::DEV2, mode, abi, env, secs)
}

fn flap_on(dev: &str, mode: &str, abi: &str, env: &[(&str, &str)], secs: u64) -> GroupReport {
    let _g = guest::serial();
    let _up = LinkUp;
    let mut spec = GroupSpec::new("link-flap", 2)
        .args(&["--dev", dev, "--flap", mode])
        .env("FERRO_NET_ABI", abi)
        .timeout(Duration::from_secs(secs));
    for (k, v) in env {
        spec = spec.env(k, v);
    }
    let rep = run_group(Path::new(HARNESS), &spec);
    eprintln!("v{abi} {mode} {env:?}:\n{}", rep.summary());
    rep
}

#[test]
fn a_two_second_link_flap_under_32_sends_in_flight_is_recovered_in_place_through_the_v12_table() {
    flap("transient", "12", &[], 240).assert_all_passed();
}

#[test]
fn a_two_second_link_flap_is_recovered_through_the_v8_table_and_with_two_split_qps() {
    flap("transient", "8", &[], 240).assert_all_passed();
    flap(
        "transient",
        "12",
        &[
            ("NCCL_IB_QPS_PER_CONNECTION", "2"),
            ("NCCL_IB_SPLIT_DATA_ON_QPS", "1"),
        ],
        240,
    )
    .assert_all_passed();
}

#[test]
fn a_recovery_waits_nccls_start_delay_before_it_rebuilds_the_qps() {
    // The link is down 2 s; with a 4 s start delay every recovery takes 4 s or more (the
    // scenario checks the time each recovered line reports), where it takes about 2.7 s without.
    flap(
        "transient",
        "12",
        &[("NCCL_IB_RESILIENCY_PORT_RECOVERY_START_DELAY", "4000")],
        240,
    )
    .assert_all_passed();
}

#[test]
fn a_link_down_past_the_recovery_budget_fails_both_sides_within_bounds() {
    flap("for-good", "12", &[("FERRO_RECOVERY_BUDGET_S", "3")], 180).assert_all_passed();
}

#[test]
fn a_peer_killed_while_the_other_side_recovers_is_found_within_the_dead_peer_bound() {
    let rep = flap("peer-killed", "12", &[], 180);
    assert!(
        rep.rank(1).killed_by_driver,
        "the sender was never killed\n{}",
        rep.dump()
    );
    rep.assert_passed(0);
}

#[test]
fn a_fused_nic_whose_member_goes_down_fails_over_to_the_other_and_back_when_it_returns() {
    flap_on("rxe0+rxe1", "failover", "12", &[], 300).assert_all_passed();
}
