//! A port that goes down under pending transfers, through the exported table on soft-RoCE
//! (guest only): with recovery in place off (`FERRO_RECOVERY_BUDGET_S=0`) both sides fail
//! naming it and new comms work once it is back (recovery itself: `tests/tests/guest_recovery.rs`); with
//! asynchronous events not returned, a port flap is logged and the same comms go on.
//!
//! Settings the plugin reads once per process and anything that needs a second process or the
//! plugin's stderr run in child processes of this test binary, selected by `FERRO_TEST_CHILD`
//! (`common::CHILD_ROLE`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use core::ffi::{c_int, c_void};
use ferro_ffi::ncclResult_t;
use std::time::{Duration, Instant};

mod common;
use common::*;

// A port taken down under pending transfers, then brought back

/// A pair on the test device with 1 MiB buffers registered on both sides and a receive for
/// tag 1 posted (it waits for data: nothing is sent with that tag yet).
struct PendingReceive {
    p: Pair,
    sbuf: Vec<u8>,
    rbuf: Vec<u8>,
    smh: *mut c_void,
    rmh: *mut c_void,
    rreq: *mut c_void,
}

fn pending_receive(seed: u32) -> PendingReceive {
    let p = pair(test_dev());
    let mut sbuf = pattern(seed, 1 << 20);
    let mut rbuf = vec![0u8; 1 << 20];
    let smh = reg_buf(p.send, &mut sbuf);
    let rmh = reg_buf(p.recv, &mut rbuf);
    let (r, rreq) = try_irecv(p.recv, &[(rbuf.as_mut_ptr(), 1 << 20, 1, rmh)]);
    ok(r, "irecv");
    PendingReceive {
        p,
        sbuf,
        rbuf,
        smh,
        rmh,
        rreq,
    }
}

fn port_down_child() {
    let _up = LinkUp;
    let dev = test_dev();
    // Pending on both sides: a receive for tag 1 waits for data, a send with tag 2 waits for a
    // buffer with its tag.
    let PendingReceive {
        p,
        mut sbuf,
        mut rbuf,
        smh,
        rreq,
        ..
    } = pending_receive(1);
    let (r, sreq) = try_isend(p.send, sbuf.as_mut_ptr(), 1 << 20, 2, smh);
    ok(r, "isend");
    assert!(sreq.is_null());
    let (send_err, recv_err) = link_down_fails_both_sides(&p, sbuf.as_ptr(), 1 << 20, smh, rreq);
    println!("PORT-DOWN send failed after {send_err:?}, receive after {recv_err:?}");
    close(&p);
    link_up_and_active();
    // A new comm pair moves 1 MiB, verified.
    let q = pair(dev);
    let smh = reg_buf(q.send, &mut sbuf);
    let rmh = reg_buf(q.recv, &mut rbuf);
    rbuf.fill(0);
    let sizes = transfer(
        &q,
        (sbuf.as_mut_ptr(), smh, 1 << 20),
        (rbuf.as_mut_ptr(), rmh, 1 << 20),
        7,
    );
    assert_eq!(sizes, (1 << 20, 1 << 20));
    assert!(rbuf == sbuf, "1 MiB after the port came back: bytes differ");
    close(&q);
    println!("PORT-UP-OK");
}

#[test]
fn with_recovery_off_a_port_that_goes_down_fails_both_sides_naming_it_and_new_comms_work_once_it_is_back()
 {
    if std::env::var(CHILD_ROLE).as_deref() == Ok("port-down") {
        return port_down_child();
    }
    in_guest();
    assert!(
        std::path::Path::new("/sys/class/infiniband/rxe1").exists(),
        "needs rxe1 on dummy1"
    );
    let _up = LinkUp;
    let t = child_passes(
        "with_recovery_off_a_port_that_goes_down_fails_both_sides_naming_it_and_new_comms_work_once_it_is_back",
        "port-down",
        &[("FERRO_TEST_DEV", "rxe1"), ("FERRO_RECOVERY_BUDGET_S", "0")],
        "PORT-UP-OK",
        "port-down",
    );
    println!("{t}");
    assert!(
        t.lines().any(|l| l.contains("WARN")
            && l.contains("rxe1 port 1")
            && l.contains("IBV_EVENT_PORT_ERR")),
        "a WARN must name the device, the port and the event:\n{t}"
    );
    assert!(
        t.contains("IBV_EVENT_PORT_ACTIVE"),
        "the port's return is logged:\n{t}"
    );
}

/// `NCCL_IB_RETURN_ASYNC_EVENTS=0`: the port's events are logged but fail nothing, so the comms
/// pending across a short port flap go on once the port is back.
fn port_flap_child() {
    let _up = LinkUp;
    let PendingReceive {
        p,
        mut sbuf,
        rbuf,
        smh,
        rmh,
        rreq,
    } = pending_receive(3);
    ip_link("down");
    let down = Instant::now();
    while !rxe1_port_state().contains("DOWN") {
        assert!(
            down.elapsed() < Duration::from_secs(10),
            "rxe1 port 1 did not go down"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Two seconds of waiting calls on both sides (thousands of periodic looks): nothing fails.
    while down.elapsed() < Duration::from_secs(2) {
        let (r, done) = try_test(rreq);
        assert_eq!(
            r,
            ncclResult_t::Success,
            "the receive failed while the port was down"
        );
        assert!(done.is_none(), "the receive completed with no send");
        let (r, req) = try_isend(p.send, sbuf.as_mut_ptr(), 1 << 20, 2, smh);
        assert_eq!(
            r,
            ncclResult_t::Success,
            "the send comm failed while the port was down"
        );
        assert!(req.is_null(), "a send with tag 2 has no buffer");
    }
    link_up_and_active();
    // The same comms finish the pending receive.
    let sreq = post_isend(p.send, sbuf.as_mut_ptr(), 1 << 20, 1, smh);
    let mut sizes = [0 as c_int; 8];
    wait(sreq, &mut sizes);
    wait(rreq, &mut sizes);
    assert_eq!(sizes[0], 1 << 20);
    assert!(rbuf == sbuf, "1 MiB across the flap: bytes differ");
    release(&p, smh, rmh);
    println!("FLAP-OK");
}

#[test]
fn with_async_events_not_returned_a_port_flap_is_logged_and_the_same_comms_go_on() {
    if std::env::var(CHILD_ROLE).as_deref() == Ok("port-flap") {
        return port_flap_child();
    }
    in_guest();
    assert!(
        std::path::Path::new("/sys/class/infiniband/rxe1").exists(),
        "needs rxe1 on dummy1"
    );
    let _up = LinkUp;
    let t = child_passes(
        "with_async_events_not_returned_a_port_flap_is_logged_and_the_same_comms_go_on",
        "port-flap",
        &[
            ("FERRO_TEST_DEV", "rxe1"),
            ("NCCL_IB_RETURN_ASYNC_EVENTS", "0"),
        ],
        "FLAP-OK",
        "port-flap",
    );
    println!("{t}");
    assert!(
        t.lines().any(|l| l.contains("WARN")
            && l.contains("rxe1 port 1")
            && l.contains("IBV_EVENT_PORT_ERR")),
        "the event is still logged, naming the device and the port:\n{t}"
    );
}
