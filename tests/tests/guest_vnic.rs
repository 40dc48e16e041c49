//! Guest tests: virtual NICs. Both ranks fuse rxe0 and rxe1 with `makeVDevice` (`--dev
//! rxe0+rxe1`) and connect over the fused devices, so every connection has QPs on both soft-RoCE
//! devices (rxe0 to rxe0, rxe1 to rxe1). `virtual-nic` checks the properties, the refused
//! fusions, and traffic verified byte for byte with both devices' own packet counters moving;
//! the generic scenarios (requests in flight, grouped receives, connection orders) run over the
//! fused devices unchanged. Fails (does not skip) outside the soft-RoCE guest.

use ferro_tests::driver::{GroupSpec, run_group};
use ferro_tests::guest;
use std::path::Path;
use std::time::Duration;

const HARNESS: &str = env!("CARGO_BIN_EXE_nccl-harness");
const FUSED: &str = "rxe0+rxe1";

fn run(scenario: &str, abi: &str, env: &[(&str, &str)], secs: u64) {
    let mut spec = GroupSpec::new(scenario, 2)
        .args(&["--dev", FUSED])
        .env("FERRO_NET_ABI", abi)
        .timeout(Duration::from_secs(secs));
    for (k, v) in env {
        spec = spec.env(k, v);
    }
    let rep = run_group(Path::new(HARNESS), &spec);
    rep.assert_all_passed();
    eprintln!("v{abi} {scenario} {env:?}: passed");
}

#[test]
fn two_devices_fused_on_the_v9_table_carry_every_byte_over_both() {
    let _g = guest::serial();
    run("virtual-nic", "9", &[], 240);
}

#[test]
fn two_devices_fused_on_the_v12_table_carry_every_byte_over_both_split_or_not() {
    let _g = guest::serial();
    run("virtual-nic", "12", &[], 240);
    run(
        "virtual-nic",
        "12",
        &[
            ("NCCL_IB_QPS_PER_CONNECTION", "2"),
            ("NCCL_IB_SPLIT_DATA_ON_QPS", "1"),
        ],
        240,
    );
}

#[test]
fn the_generic_scenarios_pass_over_fused_devices() {
    let _g = guest::serial();
    for (name, secs) in [
        ("connect-orders", 120),
        ("inflight-32", 180),
        ("grouped-recv", 180),
    ] {
        run(name, "11", &[], secs);
    }
}
