//! The traffic class and service level of every QP of a connection, on both sides, as NCCL's
//! IB transport chooses them (guest only): the connecting side takes `NCCL_IB_TC` when it is
//! set, else the communicator's traffic class, else 0 (the service level the same way from
//! `NCCL_IB_SL`, the class's low 4 bits standing in for it); the accepting side builds its QPs
//! with the connecting side's values, except that its data QPs, which carry its clear-to-send
//! writes, take `NCCL_IB_FIFO_TC` when it is set (RoCE); its flush QPs keep the connecting
//! side's class.
//!
//! The variables are read once per process, so each combination of them runs in a child process
//! of this binary; each child makes three connections (through the v10 table with the config's
//! class unset and set, and through the v11 table, whose context carries a class), with two QPs
//! per connection and flush QPs on the receiving side, moves a message on each, and reads every
//! QP's attributes back from the kernel with `ibv_query_qp`. Soft-RoCE keeps no service level
//! (it reports 0 whatever was given), so there the service level is checked as this side gave
//! it to the kernel. (rxe short-circuits traffic between QPs of one address, and delivers
//! packets of a second local device to the first, so the test bed cannot show them on the
//! wire.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use core::ffi::{c_int, c_void};
use ferro_nccl_standin::raw;
use ferro_nccl_standin::table::Table;
use ferro_proto::path::QpPath;
use nccl_net_ferro::transport::comm_ref;
use nccl_net_ferro::{ncclNetPlugin_v10, ncclNetPlugin_v11};
use std::time::{Duration, Instant};

mod common;
use common::*;

const TEST: &str = "every_qp_takes_the_senders_class_and_level_and_the_receivers_the_fifo_class";
const DONE: &str = "every connection checked";

/// What a child checks: the environment it runs with, and for each connection (the v10
/// config's class unset, the v10 config's class 101, the v11 context's class 70) the expected
/// (sender's data QPs, receiver's data QPs, receiver's flush QPs) traffic class and service level.
struct Case {
    name: &'static str,
    env: &'static [(&'static str, &'static str)],
    expect: [(QpPath, QpPath, QpPath); 3],
}

const fn p(tc: u8, sl: u8) -> QpPath {
    QpPath { tc, sl }
}

const CASES: &[Case] = &[
    Case {
        name: "nothing set",
        env: &[],
        expect: [
            (p(0, 0), p(0, 0), p(0, 0)),
            (p(101, 5), p(101, 5), p(101, 5)),
            (p(70, 6), p(70, 6), p(70, 6)),
        ],
    },
    Case {
        name: "NCCL_IB_TC and NCCL_IB_SL set",
        env: &[("NCCL_IB_TC", "32"), ("NCCL_IB_SL", "3")],
        expect: [
            (p(32, 3), p(32, 3), p(32, 3)),
            (p(32, 3), p(32, 3), p(32, 3)),
            (p(32, 3), p(32, 3), p(32, 3)),
        ],
    },
    Case {
        name: "NCCL_IB_FIFO_TC set",
        env: &[("NCCL_IB_FIFO_TC", "104")],
        expect: [
            (p(0, 0), p(104, 0), p(0, 0)),
            (p(101, 5), p(104, 5), p(101, 5)),
            (p(70, 6), p(104, 6), p(70, 6)),
        ],
    },
    Case {
        name: "NCCL_IB_TC, NCCL_IB_SL and NCCL_IB_FIFO_TC set",
        env: &[
            ("NCCL_IB_TC", "32"),
            ("NCCL_IB_SL", "3"),
            ("NCCL_IB_FIFO_TC", "104"),
        ],
        expect: [
            (p(32, 3), p(104, 3), p(32, 3)),
            (p(32, 3), p(104, 3), p(32, 3)),
            (p(32, 3), p(104, 3), p(32, 3)),
        ],
    },
];

/// The kernel's view of a comm's data QPs, what this side gave them, and its flush QPs.
struct Seen {
    kernel: Vec<QpPath>,
    given: Vec<QpPath>,
    flush: Vec<QpPath>,
}

fn seen(comm: *mut c_void) -> Seen {
    // SAFETY: a live comm of this plugin (checked by its magic).
    let c = unsafe { comm_ref(comm) }.expect("comm");
    Seen {
        kernel: c.qp_paths().expect("ibv_query_qp"),
        given: c.qp_paths_given(),
        flush: c.flush_qp_paths().expect("ibv_query_qp of the flush QPs"),
    }
}

/// Connects through `t` (v10: with `tc` in the config; v11: the context's), moves one 64 KiB
/// message, and returns what the (sender, receiver) QPs were given.
fn one_connection(t: Table<'static>, dev: c_int, tc: c_int) -> (Seen, Seen) {
    let mut h = [0u8; 128];
    let listen = raw::listen(t, dev, &mut h).expect("listen");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut send: *mut c_void = core::ptr::null_mut();
    let mut recv: *mut c_void = core::ptr::null_mut();
    while send.is_null() || recv.is_null() {
        assert!(Instant::now() < deadline, "connect/accept did not finish");
        if send.is_null() {
            send = raw::connect_tc(t, dev, tc, &mut h).expect("connect").0;
        }
        if recv.is_null() {
            // SAFETY: a live listen comm.
            recv = unsafe { raw::accept(t, listen) }.expect("accept").0;
        }
    }
    let p = Pair { send, recv, listen };
    let len = 64 << 10;
    let sbuf = pattern(tc as u32, len);
    let mut rbuf = vec![0u8; len];
    let smr = reg(p.send, sbuf.as_ptr(), len);
    let rmr = reg_buf(p.recv, &mut rbuf);
    let (sent, got) = transfer(
        &p,
        (sbuf.as_ptr(), smr, len),
        (rbuf.as_mut_ptr(), rmr, len),
        3,
    );
    assert_eq!((sent, got), (len as c_int, len as c_int));
    assert!(rbuf == sbuf, "data differs");
    let out = (seen(p.send), seen(p.recv));
    release(&p, smr, rmr);
    out
}

/// Every QP in `kernel` has `want`'s traffic class; its service level is `want`'s too, or,
/// on soft-RoCE (which keeps none), 0.
fn check_kernel(kernel: &[QpPath], want: QpPath, soft_roce: bool, what: &str) {
    assert!(!kernel.is_empty(), "{what}: no QPs");
    for (q, k) in kernel.iter().enumerate() {
        assert_eq!(
            k.tc, want.tc,
            "{what}: QP {q}'s traffic class (kernel's view)"
        );
        if soft_roce {
            assert!(
                k.sl == want.sl || k.sl == 0,
                "{what}: QP {q}'s service level is {} (kernel's view), {} given",
                k.sl,
                want.sl
            );
        } else {
            assert_eq!(
                k.sl, want.sl,
                "{what}: QP {q}'s service level (kernel's view)"
            );
        }
    }
}

/// The child's part: the three connections of `case`, each QP checked.
fn run_case(case: &Case) {
    let dev = test_dev();
    let soft_roce = std::env::var("FERRO_TEST_DEV")
        .unwrap_or_else(|_| "rxe0".into())
        .starts_with("rxe");
    let v10 = Table::V10(&ncclNetPlugin_v10);
    raw::init_ctx(v10, None, None, 0, -1).expect("v10 init");
    let v11 = Table::V11(&ncclNetPlugin_v11, core::ptr::null_mut());
    let ctx = raw::init_ctx(v11, None, None, 0x11, 70).expect("v11 init");
    let connections = [
        ("v10, class unset", v10, -1),
        ("v10, class 101", v10, 101),
        ("v11, context class 70", v11.with_ctx(ctx), -1),
    ];
    for ((what, t, tc), (send, recv, flush)) in connections.into_iter().zip(&case.expect) {
        let (s, r) = one_connection(t, dev, tc);
        println!(
            "{what}: sender kernel {:?} given {:?}; receiver kernel {:?} given {:?}; flush {:?}",
            s.kernel, s.given, r.kernel, r.given, r.flush
        );
        let what = format!("{}: {what}", case.name);
        assert_eq!(s.kernel.len(), 2, "{what}: two QPs per connection");
        assert!(
            s.given.iter().all(|g| g == send),
            "{what}: sender gave {:?}",
            s.given
        );
        assert!(
            r.given.iter().all(|g| g == recv),
            "{what}: receiver gave {:?}",
            r.given
        );
        check_kernel(&s.kernel, *send, soft_roce, &format!("{what}: sender"));
        check_kernel(&r.kernel, *recv, soft_roce, &format!("{what}: receiver"));
        check_kernel(
            &r.flush,
            *flush,
            soft_roce,
            &format!("{what}: receiver's flush QPs"),
        );
        assert!(s.flush.is_empty(), "{what}: a send comm has no flush QPs");
    }
    raw::finalize(v11.with_ctx(ctx)).expect("finalize");
    println!("{DONE}");
}

#[test]
fn every_qp_takes_the_senders_class_and_level_and_the_receivers_the_fifo_class() {
    if let Ok(role) = std::env::var(CHILD_ROLE) {
        let case = CASES.iter().find(|c| c.name == role).expect("a known case");
        return run_case(case);
    }
    in_guest();
    for case in CASES {
        // Every child starts from the same environment: the variables it does not set are
        // removed, whatever this process inherited.
        let mut cmd = child(TEST, case.name, case.env);
        for v in ["NCCL_IB_TC", "NCCL_IB_SL", "NCCL_IB_FIFO_TC"] {
            if !case.env.iter().any(|(k, _)| *k == v) {
                cmd.env_remove(v);
            }
        }
        cmd.env("NCCL_IB_QPS_PER_CONNECTION", "2")
            .env("FERRO_FLUSH_HOST", "1");
        let out = cmd.output().unwrap();
        let t = text(&out);
        assert!(
            out.status.success() && t.contains(DONE),
            "{}:\n{t}",
            case.name
        );
        println!("{}:\n{t}", case.name);
    }
}
