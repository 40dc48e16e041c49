//! Guest data-path tests: each runs one scenario of the `nccl-harness` binary as 2 (or 4)
//! processes over rxe0 (soft-RoCE on lo) and checks every rank's verdict. Fails (does not skip)
//! outside the soft-RoCE guest. The scenarios are described in `ferro_tests::scenario`.
//!
//! Run serially (`--test-threads=1`, as `testbed/guest/run-tests.sh` does; a lock serialises them
//! anyway). Observed in the TCG guest (debug build): about 200 s for the whole file, the ring
//! all-reduce being the longest (about 75 s); the timeouts below are several times that.

use ferro_tests::driver::{GroupReport, GroupSpec, RawClient, run_group};
use ferro_tests::guest;
use std::path::Path;
use std::time::Duration;

const HARNESS: &str = env!("CARGO_BIN_EXE_nccl-harness");

fn run(spec: GroupSpec) -> GroupReport {
    let _g = guest::serial();
    run_group(Path::new(HARNESS), &spec)
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[test]
fn connect_accept_in_both_orders_on_one_listen_comm() {
    run(GroupSpec::new("connect-orders", 2).timeout(secs(120))).assert_all_passed();
}

#[test]
fn size_sweep_zero_to_16_mib() {
    run(GroupSpec::new("size-sweep", 2).timeout(secs(240))).assert_all_passed();
}

#[test]
fn size_sweep_with_adaptive_routing_forced_on_around_its_threshold_split_and_not() {
    // rxe is RoCE, where adaptive routing is off unless forced. Each run also sweeps 8191,
    // 8192, 8193 and 8320 bytes and checks the immediates the sender sent apart.
    let two = [("NCCL_IB_QPS_PER_CONNECTION", "2")];
    let split = [
        ("NCCL_IB_QPS_PER_CONNECTION", "2"),
        ("NCCL_IB_SPLIT_DATA_ON_QPS", "1"),
    ];
    for env in [&[][..], &two[..], &split[..]] {
        let mut spec = GroupSpec::new("size-sweep", 2)
            .env("NCCL_IB_ADAPTIVE_ROUTING", "1")
            .timeout(secs(240));
        for (k, v) in env {
            spec = spec.env(k, v);
        }
        let rep = run(spec);
        eprintln!("{env:?}:\n{}", rep.summary());
        rep.assert_all_passed();
    }
}

#[test]
fn thirty_two_requests_in_flight() {
    run(GroupSpec::new("inflight-32", 2).timeout(secs(120))).assert_all_passed();
}

#[test]
fn grouped_receives_match_tags() {
    run(GroupSpec::new("grouped-recv", 2).timeout(secs(120))).assert_all_passed();
}

#[test]
fn close_with_requests_in_flight() {
    run(GroupSpec::new("close-inflight", 2).timeout(secs(120))).assert_all_passed();
}

#[test]
fn hundred_cycles_leak_no_fds_or_verbs_objects() {
    run(GroupSpec::new("cycles", 2)
        .args(&["--iters", "100"])
        .timeout(secs(300)))
    .assert_all_passed();
}

fn peer_kill(victim: &str, victim_rank: usize) {
    let rep = run(GroupSpec::new("peer-kill", 2)
        .args(&["--victim", victim])
        .timeout(secs(180)));
    let survivor = 1 - victim_rank;
    assert!(
        rep.rank(victim_rank).killed_by_driver,
        "the {victim} was never killed\n{}",
        rep.dump()
    );
    rep.assert_passed(survivor);
}

#[test]
fn sender_killed_mid_transfer() {
    peer_kill("sender", 1);
}

#[test]
fn receiver_killed_mid_transfer() {
    peer_kill("receiver", 0);
}

#[test]
fn hostile_peers_do_not_stall_accept() {
    let rep = run(GroupSpec::new("hostile-peers", 2)
        .raw_client(RawClient::Garbage(64))
        .raw_client(RawClient::Silent)
        .timeout(secs(120)));
    rep.assert_all_passed();
}

#[test]
fn a_flood_of_strangers_neither_keeps_the_real_peer_out_nor_leaks_fds() {
    run(GroupSpec::new("listener-flood", 2).timeout(secs(180))).assert_all_passed();
}

#[test]
fn ring_allreduce_four_ranks() {
    run(GroupSpec::new("ring-allreduce", 4)
        .args(&["--iters", "10"])
        .timeout(secs(400)))
    .assert_all_passed();
}
