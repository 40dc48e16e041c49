//! Subnet-aware routing (`NCCL_IB_SUBNET_AWARE_ROUTING`) and the rail-locality notice
//! (`NCCL_IB_WARN_RAIL_LOCAL`) through the exported table on soft-RoCE (guest only): rxe0 is
//! on 127.0.0.1 (lo) and rxe1 on 192.0.2.2 (dummy1), two subnets. Settings are read once per
//! process, so each case runs in a child process (`common::CHILD_ROLE`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use ferro_nccl_standin::Net;
use ferro_nccl_standin::net::Comm as _;
use ferro_nccl_standin::table::Table;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod common;
use common::*;

/// The listen handle's subnet-aware routing GIDs (bytes 72..104).
const GIDS: std::ops::Range<usize> = 72..104;

const TEST: &str = "a_connect_naming_a_device_off_the_listeners_subnet_uses_the_one_on_it";

#[test]
fn a_connect_naming_a_device_off_the_listeners_subnet_uses_the_one_on_it() {
    match std::env::var(CHILD_ROLE).as_deref() {
        Ok("subnet") => {
            test_dev();
            let rxe0 = net().device_by_name("rxe0").unwrap();
            let rxe1 = net().device_by_name("rxe1").unwrap();
            let (mut handle, listen) = net().listen(rxe1).expect("listen");
            let gid = &handle.0[GIDS.start..GIDS.start + 16];
            assert_eq!(
                gid[10..],
                [0xff, 0xff, 192, 0, 2, 2],
                "the handle carries rxe1's GID"
            );
            // NCCL names rxe0 for the connection; rxe0 is not on 192.0.2.0/24.
            let (s, r) = net()
                .connect_accept_blocking(rxe0, &mut handle, &listen, Duration::from_secs(60))
                .expect("connect/accept");
            let p = Pair {
                send: s.as_ptr(),
                recv: r.as_ptr(),
                listen: listen.as_ptr(),
            };
            let (smh, rmh) = one_message(&p, 5);
            release(&p, smh, rmh);
            println!("ROUTED");
        }
        Ok("unset") => {
            test_dev();
            let rxe1 = net().device_by_name("rxe1").unwrap();
            let (handle, _listen) = net().listen(rxe1).expect("listen");
            assert!(
                handle.0[GIDS].iter().all(|&b| b == 0),
                "a listener without the setting puts no GID in the handle"
            );
            println!("NO-GIDS");
        }
        _ => {
            in_guest();
            let out = child_passes(
                TEST,
                "subnet",
                &[("NCCL_IB_SUBNET_AWARE_ROUTING", "1")],
                "ROUTED",
                "subnet-aware routing from rxe0 to a listener on rxe1",
            );
            assert!(
                out.lines()
                    .any(|l| l.contains("rxe0:1: subnet-aware routing: using rxe1:1 instead")),
                "the connecting side did not say it switched to rxe1:\n{out}"
            );
            let out = child_passes(TEST, "unset", &[], "NO-GIDS", "without the setting");
            assert!(!out.contains("subnet-aware routing"), "{out}");
        }
    }
}

const RAIL_TEST: &str = "a_peer_device_with_another_member_count_is_said_at_info_when_asked";

/// The v10 table (makeVDevice is v9+; the shared helpers use v8).
fn net10() -> &'static Net {
    static N: OnceLock<Net> = OnceLock::new();
    N.get_or_init(|| Net::linked(Table::V10(&nccl_net_ferro::ncclNetPlugin_v10)))
}

#[test]
fn a_peer_device_with_another_member_count_is_said_at_info_when_asked() {
    if std::env::var(CHILD_ROLE).as_deref() == Ok("rails") {
        in_guest();
        net10().init_with(None).expect("init");
        let rxe0 = net10().device_by_name("rxe0").unwrap();
        let rxe1 = net10().device_by_name("rxe1").unwrap();
        let fused = net10().make_vdevice(&[rxe0, rxe1]).expect("makeVDevice");
        let (mut handle, listen) = net10().listen(fused).expect("listen");
        // The accepting side says it before its QPs leave INIT, the connecting side once the
        // accepting side's answer came; whether rxe connects rxe0's QPs to rxe1's is not this
        // test's question, so a connection that fails afterwards still shows the first.
        let start = Instant::now();
        let (mut send, mut recv) = (None, None);
        let outcome = loop {
            if start.elapsed() > Duration::from_secs(30) {
                break "timed out".to_string();
            }
            if send.is_none() {
                match net10().connect(rxe0, &mut handle) {
                    Ok(s) => send = s,
                    Err(e) => break format!("failed: connect {e:?}"),
                }
            }
            if recv.is_none() {
                match net10().accept(&listen) {
                    Ok(r) => recv = r,
                    Err(e) => break format!("failed: accept {e:?}"),
                }
            }
            if send.is_some() && recv.is_some() {
                break "connected".to_string();
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        println!("OUTCOME {outcome}");
        return;
    }
    in_guest();
    for (set, want) in [("1", true), ("0", false)] {
        let out = child_passes(
            RAIL_TEST,
            "rails",
            &[("NCCL_IB_WARN_RAIL_LOCAL", set)],
            "OUTCOME",
            "rxe0 connecting to rxe0+rxe1",
        );
        let said = |side: &str| {
            out.lines().any(|l| {
                l.contains("INFO")
                    && l.contains(side)
                    && l.contains("set NCCL_IB_WARN_RAIL_LOCAL=0")
            })
        };
        assert_eq!(
            said("has 1 member device and this side 2"),
            want,
            "accepting side, NCCL_IB_WARN_RAIL_LOCAL={set}:\n{out}"
        );
        if out.contains("OUTCOME connected") {
            assert_eq!(
                said("has 2 member devices and this side 1"),
                want,
                "connecting side, NCCL_IB_WARN_RAIL_LOCAL={set}:\n{out}"
            );
        }
    }
}
