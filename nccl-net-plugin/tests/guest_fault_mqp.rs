//! Retries of the QP state changes that connect a QP (`NCCL_IB_MQP_RETRY_*`), through the
//! exported table on soft-RoCE (guest only), with failures injected by the `test-faults`
//! feature (`nccl_net_ferro::transport::faults`): `connect` and `accept` keep answering "not
//! yet" without blocking while a timed-out change waits for its retry, then connect; spent
//! retries fail the connection with a WARN naming the device, port, QP, attempts and errno. The
//! reconnects of a recovery in place after a link flap are retried the same way, within the
//! recovery budget.
//!
//! The settings are read once per process, so each case runs in a child process of this test
//! binary (`common::CHILD_ROLE`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use core::ffi::c_int;
use ferro_ffi::ncclResult_t;
use ferro_nccl_standin::net::Comm as _;
use ferro_nccl_standin::net::{ListenComm, RecvComm, SendComm};
use nccl_net_ferro::transport::faults;
use std::time::{Duration, Instant};

mod common;
use common::*;

/// What one child saw: the longest single call and the slow calls among those made once the
/// first injected failure had happened (while retries wait: the calls before it create the QPs
/// and register the regions, slow under the emulator, and no change has failed yet), the calls
/// that answered "not yet", the time to connect, and the outcome.
struct Run {
    longest_call: Duration,
    /// Calls that took 150 ms or more (a retry's wait in the test is 200 ms or more).
    slow_calls: u32,
    not_yet: u32,
    took: Duration,
    result: Result<(SendComm, RecvComm), String>,
}

impl Run {
    fn note(&mut self, call: Duration, after_a_failure: bool) {
        if !after_a_failure {
            return;
        }
        self.longest_call = self.longest_call.max(call);
        if call >= Duration::from_millis(150) {
            self.slow_calls += 1;
        }
    }
}

/// Listens and connects on the test device with `failures` injected connect changes failing
/// with `errno`, calling `connect` and `accept` in turn (as NCCL's loop does) every 5 ms.
fn connect_with_failures(failures: u32, errno: i32) -> (Run, ListenComm) {
    let dev = test_dev();
    let (mut handle, listen) = net().listen(dev).expect("listen");
    faults::fail_connect_changes(failures, errno);
    let start = Instant::now();
    let (mut send, mut recv) = (None, None);
    let mut run = Run {
        longest_call: Duration::ZERO,
        slow_calls: 0,
        not_yet: 0,
        took: Duration::ZERO,
        result: Err(String::new()),
    };
    while start.elapsed() < Duration::from_secs(60) {
        if send.is_none() {
            let after_a_failure = faults::connect_failures_left() < failures;
            let t = Instant::now();
            let r = net().connect(dev, &mut handle);
            run.note(t.elapsed(), after_a_failure);
            match r {
                Ok(Some(s)) => send = Some(s),
                Ok(None) => run.not_yet += 1,
                Err(e) => {
                    run.result = Err(format!("connect: {e:?}"));
                    break;
                }
            }
        }
        if recv.is_none() {
            let after_a_failure = faults::connect_failures_left() < failures;
            let t = Instant::now();
            let r = net().accept(&listen);
            run.note(t.elapsed(), after_a_failure);
            match r {
                Ok(Some(c)) => recv = Some(c),
                Ok(None) => run.not_yet += 1,
                Err(e) => {
                    run.result = Err(format!("accept: {e:?}"));
                    break;
                }
            }
        }
        if send.is_some() && recv.is_some() {
            run.result = Ok((send.take().unwrap(), recv.take().unwrap()));
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    run.took = start.elapsed();
    faults::fail_connect_changes(0, 0);
    (run, listen)
}

const RETRY_TEST: &str =
    "timed_out_qp_changes_make_connect_and_accept_answer_not_yet_until_their_retries_succeed";

#[test]
fn timed_out_qp_changes_make_connect_and_accept_answer_not_yet_until_their_retries_succeed() {
    if std::env::var(CHILD_ROLE).as_deref() == Ok("retry") {
        // Three timeouts: waits of 200, 400 and 600 ms before the retries.
        let (run, listen) = connect_with_failures(3, libc::ETIMEDOUT);
        let (s, r) = run.result.unwrap();
        // A call that slept through a wait would take 200 ms or more, once per retry (or 1.2 s
        // for all three); one slow call is allowed for the emulator's pauses.
        assert!(
            run.slow_calls <= 1 && run.longest_call < Duration::from_millis(1200),
            "{} calls took 150 ms or more, the longest {:?}: a call blocked through a retry's wait",
            run.slow_calls,
            run.longest_call
        );
        assert!(
            run.took >= Duration::from_millis(1200),
            "connected after {:?}: the retries did not wait",
            run.took
        );
        assert!(
            run.not_yet >= 50,
            "only {} calls answered not yet",
            run.not_yet
        );
        // The comms carry data.
        let p = Pair {
            send: s.as_ptr(),
            recv: r.as_ptr(),
            listen: listen.as_ptr(),
        };
        let (smh, rmh) = one_message(&p, 3);
        release(&p, smh, rmh);
        println!("RETRIED-AND-CONNECTED");
        return;
    }
    in_guest();
    let out = child_passes(
        RETRY_TEST,
        "retry",
        &[("NCCL_IB_MQP_RETRY_SLEEP_MSEC", "200")],
        "RETRIED-AND-CONNECTED",
        "three timed-out QP changes, 200 ms x attempt",
    );
    for k in 1..=3 {
        assert!(
            out.contains(&format!("retry {k}/34 due in {} ms", 200 * k)),
            "retry {k} was not announced:\n{out}"
        );
    }
    assert!(
        out.contains("to RTR succeeded at attempt 4"),
        "no line says the fourth attempt succeeded:\n{out}"
    );
}

const GIVE_UP_TEST: &str =
    "spent_retries_fail_the_connection_with_a_warn_naming_the_qp_the_attempts_and_the_errno";

#[test]
fn spent_retries_fail_the_connection_with_a_warn_naming_the_qp_the_attempts_and_the_errno() {
    if std::env::var(CHILD_ROLE).as_deref() == Ok("give-up") {
        // Whether the calls between retries block is the test above's question; here the
        // failing call also destroys the connection's QPs, which takes its time on an emulator.
        let (run, _listen) = connect_with_failures(100, libc::ETIMEDOUT);
        let e = run.result.expect_err("the connection failed");
        assert!(
            run.took >= Duration::from_millis(150),
            "failed after {:?}: the two retries (50 + 100 ms) did not wait",
            run.took
        );
        println!("GAVE-UP {e}");
        return;
    }
    if std::env::var(CHILD_ROLE).as_deref() == Ok("not-retried") {
        let (run, _listen) = connect_with_failures(1, libc::EINVAL);
        let e = run.result.expect_err("the connection failed");
        assert!(run.took < Duration::from_secs(5), "took {:?}", run.took);
        println!("GAVE-UP {e}");
        return;
    }
    in_guest();
    let out = child_passes(
        GIVE_UP_TEST,
        "give-up",
        &[
            ("NCCL_IB_MQP_RETRY_CNT", "2"),
            ("NCCL_IB_MQP_RETRY_SLEEP_MSEC", "50"),
        ],
        "GAVE-UP",
        "timeouts past NCCL_IB_MQP_RETRY_CNT=2",
    );
    let dev = std::env::var("FERRO_TEST_DEV").unwrap_or_else(|_| "rxe0".into());
    let warn = out
        .lines()
        .find(|l| l.contains("WARN") && l.contains("failed after 3 attempts"))
        .unwrap_or_else(|| panic!("no WARN of the spent retries:\n{out}"));
    assert!(warn.contains(&format!("{dev}:1 QP 0")), "{warn}");
    assert!(warn.contains("with errno 110"), "{warn}");
    assert!(warn.contains("NCCL_IB_MQP_RETRY_CNT"), "{warn}");
    // A failure that is not a time-out is not retried (without NCCL_IB_MQP_RETRY_ALL).
    let out = child_passes(
        GIVE_UP_TEST,
        "not-retried",
        &[],
        "GAVE-UP",
        "one EINVAL, not retried",
    );
    assert!(
        out.lines()
            .any(|l| l.contains("WARN") && l.contains("failed after 1 attempt with errno 22")),
        "no WARN of the failure that was not retried:\n{out}"
    );
    assert!(!out.contains("retry 1/"), "an EINVAL was retried:\n{out}");
    // The accepting side told the connecting side why (a `Reject`), so it did not take the
    // closed connection for the drop of a stranger and dial again.
    assert!(
        !out.contains("connecting again"),
        "the connecting side dialled again after the accepting side failed:\n{out}"
    );
}

const RETRY_ALL_TEST: &str = "with_retry_all_a_failure_that_is_not_a_time_out_is_retried_too";

#[test]
fn with_retry_all_a_failure_that_is_not_a_time_out_is_retried_too() {
    if std::env::var(CHILD_ROLE).as_deref() == Ok("retry-all") {
        let (run, listen) = connect_with_failures(1, libc::EINVAL);
        let (s, r) = run.result.expect("connected after the retry");
        net().close_send(s).expect("closeSend");
        net().close_recv(r).expect("closeRecv");
        net().close_listen(listen).expect("closeListen");
        println!("RETRIED-ALL-AND-CONNECTED");
        return;
    }
    in_guest();
    // The same injected EINVAL that `spent_retries_fail_...` sees fail at once without
    // NCCL_IB_MQP_RETRY_ALL.
    let out = child_passes(
        RETRY_ALL_TEST,
        "retry-all",
        &[
            ("NCCL_IB_MQP_RETRY_ALL", "1"),
            ("NCCL_IB_MQP_RETRY_SLEEP_MSEC", "50"),
        ],
        "RETRIED-ALL-AND-CONNECTED",
        "one EINVAL with NCCL_IB_MQP_RETRY_ALL=1",
    );
    assert!(
        out.contains("retry 1/34 due in 50 ms"),
        "the EINVAL was not retried:\n{out}"
    );
    assert!(
        out.contains("succeeded at attempt 2"),
        "no line says the second attempt succeeded:\n{out}"
    );
    assert!(
        !out.lines()
            .any(|l| l.contains("WARN") && l.contains("failed after")),
        "the connection was given up:\n{out}"
    );
}

const RECOVERY_TEST: &str =
    "a_reconnect_that_times_out_during_a_recovery_in_place_is_retried_and_the_comm_recovers";

/// Both sides of a pair on rxe1 with a receive waiting; `dummy1` goes down (the comms stop to
/// recover in place), the next two state changes that connect a QP fail with `ETIMEDOUT` (as a
/// move to RTR does while the fabric converges), the link comes back: the reconnects are tried
/// again after NCCL's retry pause instead of failing the comm, and the receive gets its 1 MiB.
fn recovery_retry_child() {
    let _up = LinkUp;
    let p = pair(test_dev());
    let len = 1 << 20;
    let mut sbuf = pattern(21, len);
    let mut rbuf = vec![0u8; len];
    let smh = reg_buf(p.send, &mut sbuf);
    let rmh = reg_buf(p.recv, &mut rbuf);
    let (r, rreq) = try_irecv(p.recv, &[(rbuf.as_mut_ptr(), len, 1, rmh)]);
    assert_eq!(r, ncclResult_t::Success, "irecv");
    ip_link("down");
    let down = Instant::now();
    // The waiting calls of both sides see the port go down and stop the comms.
    while down.elapsed() < Duration::from_secs(2) {
        let (r, done) = try_test(rreq);
        assert_eq!(
            r,
            ncclResult_t::Success,
            "the receive failed while the port was down"
        );
        assert!(done.is_none());
        let (r, req) = try_isend(p.send, sbuf.as_mut_ptr(), len, 2, smh);
        assert_eq!(
            r,
            ncclResult_t::Success,
            "the send comm failed while the port was down"
        );
        assert!(req.is_null(), "a send with tag 2 has no buffer");
        std::thread::sleep(Duration::from_millis(2));
    }
    faults::fail_connect_changes(2, libc::ETIMEDOUT);
    link_up_and_active();
    let mut sreq: *mut core::ffi::c_void = std::ptr::null_mut();
    let (mut sent, mut received) = (false, false);
    let start = Instant::now();
    while !(sent && received) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "not recovered within 60 s (sent {sent}, received {received}, injected failures left {})",
            faults::connect_failures_left()
        );
        if sreq.is_null() {
            let (r, req) = try_isend(p.send, sbuf.as_mut_ptr(), len, 1, smh);
            assert_eq!(r, ncclResult_t::Success, "isend after the flap");
            sreq = req;
        } else if !sent {
            let (r, done) = try_test(sreq);
            assert_eq!(r, ncclResult_t::Success, "the send failed after the flap");
            sent = done.is_some();
        }
        if !received {
            let (r, done) = try_test(rreq);
            assert_eq!(
                r,
                ncclResult_t::Success,
                "the receive failed after the flap"
            );
            if let Some(sizes) = done {
                assert_eq!(sizes[0], len as c_int);
                received = true;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let left = faults::connect_failures_left();
    faults::fail_connect_changes(0, 0);
    assert_eq!(left, 0, "the injected failures were not all met");
    assert!(rbuf == sbuf, "1 MiB across the flap: bytes differ");
    release(&p, smh, rmh);
    println!("RECOVERY-RETRIED-OK");
}

#[test]
fn a_reconnect_that_times_out_during_a_recovery_in_place_is_retried_and_the_comm_recovers() {
    if std::env::var(CHILD_ROLE).as_deref() == Ok("recovery-retry") {
        return recovery_retry_child();
    }
    in_guest();
    assert!(
        std::path::Path::new("/sys/class/infiniband/rxe1").exists(),
        "needs rxe1 on dummy1"
    );
    let _up = LinkUp;
    let out = child_passes(
        RECOVERY_TEST,
        "recovery-retry",
        &[
            ("FERRO_TEST_DEV", "rxe1"),
            ("NCCL_IB_MQP_RETRY_SLEEP_MSEC", "200"),
        ],
        "RECOVERY-RETRIED-OK",
        "two timed-out reconnects during a recovery in place",
    );
    for k in 1..=2 {
        let line = out
            .lines()
            .find(|l| l.contains("WARN") && l.contains(&format!("retry {k}/34 due in")))
            .unwrap_or_else(|| panic!("retry {k} of the reconnect was not announced:\n{out}"));
        assert!(
            line.contains("connecting the QPs again failed with errno 110")
                && line.contains("within the recovery budget"),
            "{line}"
        );
    }
    assert!(
        out.contains("recovered in place"),
        "no line says the comms recovered:\n{out}"
    );
    assert!(
        !out.contains("recovery in place failed"),
        "a recovery failed:\n{out}"
    );
}
