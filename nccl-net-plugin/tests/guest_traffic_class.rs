//! The communicator's traffic class reaches the QPs (guest only). With `NCCL_IB_TC=32`, a
//! connection made through the v10 table with the config's `trafficClass` = 96 gives the sender's
//! QPs traffic class 96, one made with -1 (not set) 32, and one made through the v11 table, whose
//! context carries trafficClass 64, 64; the receiver's QPs keep `NCCL_IB_TC` (accept has no
//! config). The classes are read back from the kernel with `ibv_query_qp`, and each connection
//! moves a message. (rxe short-circuits traffic between QPs of one address, and delivers
//! packets of a second local device to the first, so the test bed cannot show them on the wire.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use core::ffi::{c_int, c_void};
use ferro_nccl_standin::raw;
use ferro_nccl_standin::table::Table;
use nccl_net_ferro::transport::comm_ref;
use nccl_net_ferro::{ncclNetPlugin_v10, ncclNetPlugin_v11};
use std::time::{Duration, Instant};

mod common;
use common::*;

/// The traffic classes of a comm's QPs.
fn classes(comm: *mut c_void) -> Vec<u8> {
    // SAFETY: a live comm of this plugin (checked by its magic).
    let c = unsafe { comm_ref(comm) }.expect("comm");
    c.qp_traffic_classes().expect("ibv_query_qp")
}

/// Connects through `t` (v10: with `tc` in the config; v11: the context's), moves one 64 KiB
/// message, and returns the (sender, receiver) QPs' traffic classes.
fn one_connection(t: Table<'static>, dev: c_int, tc: c_int) -> (Vec<u8>, Vec<u8>) {
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
    let out = (classes(p.send), classes(p.recv));
    release(&p, smr, rmr);
    out
}

#[test]
fn the_communicators_traffic_class_replaces_nccl_ib_tc_for_its_connections() {
    // SAFETY: set before any thread starts and before the plugin reads its environment (init).
    unsafe { std::env::set_var("NCCL_IB_TC", "32") };
    let dev = test_dev();
    let v10 = Table::V10(&ncclNetPlugin_v10);
    raw::init_ctx(v10, None, None, 0, -1).expect("v10 init");
    assert_eq!(one_connection(v10, dev, 96), (vec![96], vec![32]));
    assert_eq!(one_connection(v10, dev, -1), (vec![32], vec![32]));

    let v11 = Table::V11(&ncclNetPlugin_v11, core::ptr::null_mut());
    let ctx = raw::init_ctx(v11, None, None, 0x11, 64).expect("v11 init");
    assert_eq!(
        one_connection(v11.with_ctx(ctx), dev, -1),
        (vec![64], vec![32])
    );
    raw::finalize(v11.with_ctx(ctx)).expect("finalize");
}
