//! NCCL's `NCCL_IB_*` variables that can run on soft-RoCE but that no other guest test sets,
//! each shown working through the exported tables (guest only): `NCCL_IB_DISABLE`,
//! `NCCL_IB_MERGE_NICS=0`, `NCCL_IB_ADDR_RANGE`, `NCCL_IB_TIMEOUT`, `NCCL_IB_RETRY_CNT` and
//! `NCCL_IB_PKEY` (read back from the kernel with `ibv_query_qp`), a non-default
//! `NCCL_IB_AR_THRESHOLD`, `NCCL_IB_RESILIENCY_PORT_RECOVERY=0`, the rail and plane fields of
//! `NCCL_IB_HCA` (v12 properties), and the line that says a set variable does not apply.
//!
//! The variables are read once per process, so each case runs in a child process of this test
//! binary (`common::CHILD_ROLE`), whose plugin lines go to its stderr; the parent checks what the
//! child printed and logged.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use core::ffi::c_int;
use ferro_nccl_standin::Net;
use ferro_nccl_standin::table::Table;
use nccl_net_ferro::ncclNetPlugin_v12;
use nccl_net_ferro::transport::{QpRetryAttrs, comm_ref};

mod common;
use common::*;

/// Variables a child does not inherit unless its case sets them.
const CLEARED: &[&str] = &[
    "NCCL_IB_DISABLE",
    "NCCL_IB_MERGE_NICS",
    "NCCL_IB_ADDR_RANGE",
    "NCCL_IB_ADDR_FAMILY",
    "NCCL_IB_GID_INDEX",
    "NCCL_IB_HCA",
    "NCCL_IB_TIMEOUT",
    "NCCL_IB_RETRY_CNT",
    "NCCL_IB_PKEY",
    "NCCL_IB_ADAPTIVE_ROUTING",
    "NCCL_IB_AR_THRESHOLD",
    "NCCL_IB_QPS_PER_CONNECTION",
    "NCCL_IB_SPLIT_DATA_ON_QPS",
    "NCCL_IB_RESILIENCY_PORT_RECOVERY",
    "FERRO_RECOVERY_BUDGET_S",
    "NCCL_IB_OOO_RQ",
    "FERRO_TEST_DEV",
];

/// Runs this binary's `test` as a child playing `role` with `env` (the other [`CLEARED`]
/// variables removed); checks it exited 0 and printed `marker`; returns its output.
fn run_child(test: &str, role: &str, env: &[(&str, &str)], marker: &str) -> String {
    let mut cmd = child(test, role, env);
    for v in CLEARED {
        if !env.iter().any(|(k, _)| k == v) {
            cmd.env_remove(v);
        }
    }
    let out = cmd.output().unwrap();
    let t = text(&out);
    assert!(
        out.status.success() && t.contains(marker),
        "{role} ({env:?}):\n{t}"
    );
    println!("{role}:\n{t}");
    t
}

/// The linked v12 table, initialised (its plugin lines to stderr).
fn net_v12() -> Net {
    let n = Net::linked(Table::V12(&ncclNetPlugin_v12, core::ptr::null_mut()));
    n.init_with(None).expect("v12 init");
    n
}

/// The names of the devices `init` reported, in order.
fn device_names(n: &Net) -> Vec<String> {
    let count = n.devices().expect("devices");
    (0..count)
        .map(|d| {
            n.get_properties(d)
                .expect("getProperties")
                .name
                .unwrap_or_default()
        })
        .collect()
}

// NCCL_IB_DISABLE

const DISABLE_TEST: &str = "nccl_ib_disable_makes_init_fail_with_a_warn_naming_the_variable";

#[test]
fn nccl_ib_disable_makes_init_fail_with_a_warn_naming_the_variable() {
    if std::env::var(CHILD_ROLE).as_deref() == Ok("disable") {
        let r = net().init_with(None);
        assert!(r.is_err(), "init succeeded with NCCL_IB_DISABLE=1");
        println!("INIT-REFUSED {r:?}");
        return;
    }
    in_guest();
    let t = run_child(
        DISABLE_TEST,
        "disable",
        &[("NCCL_IB_DISABLE", "1")],
        "INIT-REFUSED",
    );
    assert!(
        t.lines()
            .any(|l| l.contains("WARN") && l.contains("NCCL_IB_DISABLE=1")),
        "no WARN names NCCL_IB_DISABLE=1:\n{t}"
    );
}

// NCCL_IB_MERGE_NICS

const MERGE_TEST: &str =
    "with_merge_nics_0_fusing_two_devices_is_refused_and_a_one_member_device_still_made";

#[test]
fn with_merge_nics_0_fusing_two_devices_is_refused_and_a_one_member_device_still_made() {
    if std::env::var(CHILD_ROLE).as_deref() == Ok("merge-off") {
        let n = net_v12();
        let names = device_names(&n);
        let at = |name: &str| names.iter().position(|x| x == name).expect(name) as c_int;
        let (rxe0, rxe1) = (at("rxe0"), at("rxe1"));
        let two = n.make_vdevice(&[rxe0, rxe1]);
        assert!(
            two.is_err(),
            "rxe0 + rxe1 fused with NCCL_IB_MERGE_NICS=0: {two:?}"
        );
        let one = n.make_vdevice(&[rxe1]).expect("a one-member device");
        assert!(one >= names.len() as c_int, "device {one}");
        let p = n.get_properties(one).expect("getProperties");
        println!(
            "MERGE-OFF two: {two:?}; one: device {one} {:?} {:?}",
            p.name, p.vdevs
        );
        n.finalize().expect("finalize");
        return;
    }
    in_guest();
    run_child(
        MERGE_TEST,
        "merge-off",
        &[("NCCL_IB_MERGE_NICS", "0")],
        "MERGE-OFF",
    );
}

// NCCL_IB_ADDR_RANGE

const RANGE_TEST: &str =
    "an_address_range_keeps_the_devices_with_a_gid_in_it_and_leaves_the_others_unused";

#[test]
fn an_address_range_keeps_the_devices_with_a_gid_in_it_and_leaves_the_others_unused() {
    if let Ok(role) = std::env::var(CHILD_ROLE) {
        match net().init_with(None) {
            Ok(()) => {
                let names = device_names(net());
                if role == "range-rxe1" {
                    // The device in the range carries data.
                    let dev = names.iter().position(|x| x == "rxe1").expect("rxe1") as c_int;
                    let p = pair(dev);
                    let (smh, rmh) = one_message(&p, 21);
                    release(&p, smh, rmh);
                }
                println!("DEVICES {names:?}");
            }
            Err(e) => println!("DEVICES none: init {e:?}"),
        }
        return;
    }
    in_guest();
    // rxe1's IPv4 GID (::ffff:192.0.2.2) is in the range; rxe0's (127.0.0.1, ::1) are not.
    let t = run_child(
        RANGE_TEST,
        "range-rxe1",
        &[
            ("NCCL_IB_ADDR_RANGE", "192.0.2.0/24"),
            ("FERRO_TEST_DEV", "rxe1"),
        ],
        "DEVICES",
    );
    assert!(t.contains("DEVICES [\"rxe1\"]"), "only rxe1 is kept:\n{t}");
    assert!(
        t.contains("rxe1:1/RoCE via dummy1 GID 1 (::ffff:192.0.2.2)"),
        "rxe1 uses its IPv4 GID:\n{t}"
    );
    assert!(
        t.lines()
            .any(|l| l.contains("rxe0 port 1") && l.contains("the port is not used")),
        "no line says why rxe0 is not used:\n{t}"
    );
    // A range no GID is in: no device is used, each saying why.
    let t = run_child(
        RANGE_TEST,
        "range-none",
        &[("NCCL_IB_ADDR_RANGE", "10.99.0.0/16")],
        "DEVICES",
    );
    assert!(
        t.contains("DEVICES none") || t.contains("DEVICES []"),
        "a device was kept:\n{t}"
    );
    for dev in ["rxe0", "rxe1"] {
        assert!(
            t.lines().any(|l| l.contains(&format!("{dev} port 1"))
                && l.contains("the port is not used")),
            "no line says why {dev} is not used:\n{t}"
        );
    }
}

// NCCL_IB_TIMEOUT, NCCL_IB_RETRY_CNT, NCCL_IB_PKEY

const RETRY_TEST: &str = "every_qp_takes_the_ack_timeout_the_retry_count_and_the_pkey_index_given";

#[test]
fn every_qp_takes_the_ack_timeout_the_retry_count_and_the_pkey_index_given() {
    if let Ok(want) = std::env::var(CHILD_ROLE) {
        let p = pair(test_dev());
        let (smh, rmh) = one_message(&p, 5);
        // SAFETY: live comms of this plugin (checked by their magic).
        let send = unsafe { comm_ref(p.send) }.expect("send comm");
        // SAFETY: as above.
        let recv = unsafe { comm_ref(p.recv) }.expect("recv comm");
        let s = send.qp_retry_attrs().expect("ibv_query_qp");
        let r = recv.qp_retry_attrs().expect("ibv_query_qp");
        println!("sender {s:?}; receiver {r:?}");
        let want: Vec<u8> = want.split(',').map(|x| x.parse().unwrap()).collect();
        let want = QpRetryAttrs {
            timeout: want[0],
            retry_cnt: want[1],
            rnr_retry: 7,
            pkey_index: 0,
        };
        assert_eq!(s.len(), 2, "two QPs per connection");
        for (side, qps) in [("sender", &s), ("receiver", &r)] {
            for (q, a) in qps.iter().enumerate() {
                assert_eq!(*a, want, "{side}'s QP {q} (kernel's view)");
            }
        }
        release(&p, smh, rmh);
        println!("RETRY-ATTRS-OK");
        return;
    }
    in_guest();
    // NCCL's defaults: timeout 20, retry count 7; RNR retries 7 (infinite) always; soft-RoCE
    // has one P_Key, at index 0, so only index 0 can be given.
    let cases: [(&[(&str, &str)], &str); 2] = [
        (&[], "20,7"),
        (
            &[
                ("NCCL_IB_TIMEOUT", "14"),
                ("NCCL_IB_RETRY_CNT", "3"),
                ("NCCL_IB_PKEY", "0"),
            ],
            "14,3",
        ),
    ];
    for (env, want) in cases {
        let mut env = env.to_vec();
        env.push(("NCCL_IB_QPS_PER_CONNECTION", "2"));
        run_child(RETRY_TEST, want, &env, "RETRY-ATTRS-OK");
    }
}

// NCCL_IB_AR_THRESHOLD

const AR_TEST: &str =
    "with_adaptive_routing_a_raised_threshold_sends_immediates_apart_only_above_it";

/// The threshold the child runs with, and the sizes it sends (8193 is above the default 8192).
const AR_THRESHOLD: usize = 16384;
const AR_SIZES: [usize; 5] = [8193, 16383, 16384, 16385, 20000];

#[test]
fn with_adaptive_routing_a_raised_threshold_sends_immediates_apart_only_above_it() {
    if std::env::var(CHILD_ROLE).as_deref() == Ok("ar") {
        let p = pair(test_dev());
        let len = 32 << 10;
        let mut sbuf = pattern(9, len);
        let mut rbuf = vec![0u8; len];
        let smh = reg_buf(p.send, &mut sbuf);
        let rmh = reg_buf(p.recv, &mut rbuf);
        for (i, size) in AR_SIZES.into_iter().enumerate() {
            rbuf.fill(0);
            let got = transfer(
                &p,
                (sbuf.as_ptr(), smh, size),
                (rbuf.as_mut_ptr(), rmh, size),
                10 + i as c_int,
            );
            assert_eq!(got, (size as c_int, size as c_int), "{size} bytes");
            assert!(rbuf[..size] == sbuf[..size], "{size} bytes: data differs");
        }
        release(&p, smh, rmh);
        println!("AR-SIZES-SENT");
        return;
    }
    in_guest();
    let threshold = AR_THRESHOLD.to_string();
    let t = run_child(
        AR_TEST,
        "ar",
        &[
            ("NCCL_IB_ADAPTIVE_ROUTING", "1"),
            ("NCCL_IB_AR_THRESHOLD", &threshold),
            ("NCCL_IB_QPS_PER_CONNECTION", "1"),
        ],
        "AR-SIZES-SENT",
    );
    let close: Vec<&str> = t
        .lines()
        .filter(|l| l.contains("send comm closed"))
        .collect();
    assert_eq!(close.len(), 1, "one send close line:\n{t}");
    let apart = close[0].find(" immediates apart").map_or(0, |i| {
        close[0][..i]
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or_else(|| panic!("unreadable close line: {}", close[0]))
    });
    // One immediate apart per message above the threshold (one QP): 16385 and 20000 bytes; at
    // the default threshold 8193 and up would go so (5).
    let want = AR_SIZES.iter().filter(|s| **s > AR_THRESHOLD).count();
    assert_eq!(apart, want, "immediates apart: {}", close[0]);
}

// NCCL_IB_RESILIENCY_PORT_RECOVERY

const RECOVERY_TEST: &str =
    "with_nccls_port_recovery_off_a_port_flap_fails_both_sides_of_a_waiting_comm";

#[test]
fn with_nccls_port_recovery_off_a_port_flap_fails_both_sides_of_a_waiting_comm() {
    if std::env::var(CHILD_ROLE).as_deref() == Ok("recovery-off") {
        let _up = LinkUp;
        let p = pair(test_dev());
        let len = 1 << 20;
        let mut sbuf = pattern(11, len);
        let mut rbuf = vec![0u8; len];
        let smh = reg_buf(p.send, &mut sbuf);
        let rmh = reg_buf(p.recv, &mut rbuf);
        // A receive for tag 1 waits for data; a send with tag 2 waits for a buffer.
        let (r, rreq) = try_irecv(p.recv, &[(rbuf.as_mut_ptr(), len, 1, rmh)]);
        ok(r, "irecv");
        let (r, sreq) = try_isend(p.send, sbuf.as_ptr(), len, 2, smh);
        ok(r, "isend");
        assert!(sreq.is_null());
        // With recovery on (30 s by default) nothing would fail while the port is down.
        let (send_err, recv_err) = link_down_fails_both_sides(&p, sbuf.as_ptr(), len, smh, rreq);
        println!("RECOVERY-OFF send failed after {send_err:?}, receive after {recv_err:?}");
        close(&p);
        link_up_and_active();
        println!("PORT-BACK");
        return;
    }
    in_guest();
    assert!(
        std::path::Path::new("/sys/class/infiniband/rxe1").exists(),
        "needs rxe1 on dummy1"
    );
    let _up = LinkUp;
    let t = run_child(
        RECOVERY_TEST,
        "recovery-off",
        &[
            ("FERRO_TEST_DEV", "rxe1"),
            ("NCCL_IB_RESILIENCY_PORT_RECOVERY", "0"),
        ],
        "PORT-BACK",
    );
    assert!(
        t.lines().any(|l| l.contains("WARN")
            && l.contains("rxe1 port 1")
            && l.contains("IBV_EVENT_PORT_ERR")),
        "a WARN must name the device, the port and the event:\n{t}"
    );
}

// NCCL_IB_HCA rail and plane

const RAIL_TEST: &str = "a_rail_and_a_plane_in_nccl_ib_hca_reach_the_v12_properties";

#[test]
fn a_rail_and_a_plane_in_nccl_ib_hca_reach_the_v12_properties() {
    if std::env::var(CHILD_ROLE).as_deref() == Ok("rail") {
        let n = net_v12();
        let names = device_names(&n);
        assert_eq!(names, ["rxe0"], "NCCL_IB_HCA keeps rxe0 only");
        let p = n.get_properties(0).expect("getProperties");
        assert_eq!(
            (p.rail_id, p.plane_id),
            (Some(3), Some(1)),
            "railId, planeId"
        );
        n.finalize().expect("finalize");
        println!("RAIL-PLANE-OK");
        return;
    }
    in_guest();
    run_child(
        RAIL_TEST,
        "rail",
        &[("NCCL_IB_HCA", "=rxe0:1:3:1")],
        "RAIL-PLANE-OK",
    );
}

// A set variable that does not apply

const NOT_APPLICABLE_TEST: &str = "a_set_variable_that_does_not_apply_is_said_so_once_at_init";

#[test]
fn a_set_variable_that_does_not_apply_is_said_so_once_at_init() {
    if std::env::var(CHILD_ROLE).as_deref() == Ok("ooo-rq") {
        test_dev();
        // A second init (a second communicator) says nothing more.
        net().init_with(None).expect("second init");
        println!("INIT-OK");
        return;
    }
    in_guest();
    let t = run_child(
        NOT_APPLICABLE_TEST,
        "ooo-rq",
        &[("NCCL_IB_OOO_RQ", "1")],
        "INIT-OK",
    );
    let said: Vec<&str> = t
        .lines()
        .filter(|l| l.contains("NCCL_IB_OOO_RQ=1 does not apply"))
        .collect();
    assert_eq!(said.len(), 1, "the line must appear once:\n{t}");
    assert!(said[0].contains("INFO"), "{}", said[0]);
}
