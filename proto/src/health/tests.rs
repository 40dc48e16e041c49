//! The fault policy's verdicts and their order, on hand-made facts.

use super::device::{DeviceCause, Level};
use super::verdict::{failed_completion, refused};
use super::*;
use std::time::Duration;

const COMM: &str = "rxe0:1 peer 10.0.0.2:40000";
const PENDING: &str = "a receive waits for the sender's data for receive #0";

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

fn port_down() -> DeviceFault {
    let mut d = DeviceHealth::new("rxe0");
    d.apply(DeviceEvent::PortDown { port: 1 });
    d.verdict_for(1, |_| false, 0).unwrap()
}

fn look(now: u64, device: Option<DeviceFault>, socket: Socket) -> Look {
    Look {
        now: s(now),
        device,
        socket,
        waiting: true,
        recovering: false,
        member_back: None,
    }
}

fn health(stall_s: u64) -> CommHealth {
    let mut h = CommHealth::default();
    h.set_stall_threshold(s(stall_s));
    h
}

fn failure_of(v: Verdict) -> Failure {
    match v {
        Verdict::PollThenFail(fault) => fault.failure(COMM, PENDING),
        Verdict::Fail(f) => f,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn the_first_failure_sticks() {
    let mut s = Sticky::default();
    assert!(s.check().is_ok());
    s.set(Failure::remote("peer gone"));
    s.set(Failure::system("later"));
    assert_eq!(s.get().map(|f| f.message.as_str()), Some("peer gone"));
    assert_eq!(s.check(), Err(Failure::remote("peer gone")));
}

#[test]
fn the_first_failure_of_a_comm_sticks_and_every_failure_is_counted() {
    let mut h = CommHealth::default();
    h.fail(Failure::remote("peer gone"));
    let in_force = h.fail(Failure::system("port down")).clone();
    assert_eq!(in_force, Failure::remote("peer gone"));
    assert_eq!(h.failure(), Some(&Failure::remote("peer gone")));
    assert_eq!(h.counters.errors, 2);
}

#[test]
fn the_peer_is_checked_once_every_256_unfinished_tests() {
    let mut c = LivenessCounter::default();
    let fired: Vec<usize> = (1..=600).filter(|_| c.tick()).collect();
    assert_eq!(fired.len(), 2);
}

#[test]
fn a_look_is_due_every_256_waiting_calls_and_never_after_the_comm_failed() {
    let mut h = CommHealth::default();
    let due: Vec<u32> = (1..=600).filter(|_| h.look_due()).collect();
    assert_eq!(due, [LIVENESS_EVERY, 2 * LIVENESS_EVERY]);
    h.fail(Failure::remote("gone"));
    assert!(!(0..1000).any(|_| h.look_due()));
}

#[test]
fn a_look_reads_the_world_at_first_and_then_once_a_millisecond() {
    let mut g = GatherPace::default();
    let us = Duration::from_micros;
    assert!(g.due(us(5_000)), "the first look reads");
    assert!(!g.due(us(5_000)));
    assert!(!g.due(us(5_999)));
    assert!(g.due(us(6_000)), "one millisecond later");
    assert!(!g.due(us(6_500)));
    // Looks far apart each read.
    assert!(g.due(us(60_000)));
    assert!(g.due(us(61_000)));
}

#[test]
fn a_clock_that_went_back_does_not_stop_the_reading_looks() {
    let mut g = GatherPace::default();
    assert!(g.due(Duration::from_secs(10)));
    // A time far before the last reading look: read now rather than wait for the clock to
    // come back.
    assert!(g.due(Duration::from_secs(1)));
    assert!(!g.due(Duration::from_secs(1)));
}

#[test]
fn a_recovering_comm_reads_at_every_look() {
    let mut h = CommHealth::default();
    let t = Duration::from_secs(3);
    assert!(h.gather_due(t, false));
    assert!(!h.gather_due(t, false));
    assert!(h.gather_due(t, true));
    assert!(h.gather_due(t, true));
}

#[test]
fn a_quiet_comm_that_moves_continues() {
    let mut h = health(60);
    assert_eq!(h.decide(look(0, None, Socket::Quiet)), Verdict::Continue);
    assert_eq!(h.decide(look(30, None, Socket::Quiet)), Verdict::Continue);
}

#[test]
fn a_device_fault_comes_before_a_dead_peer_and_a_stall() {
    let mut h = health(60);
    assert_eq!(h.decide(look(0, None, Socket::Quiet)), Verdict::Continue);
    let v = h.decide(look(100, Some(port_down()), Socket::Gone(PeerGone::Closed)));
    assert_eq!(v, Verdict::PollThenFail(Fault::Device(port_down())));
}

#[test]
fn a_dead_peer_comes_before_a_stall() {
    let mut h = health(60);
    assert_eq!(h.decide(look(0, None, Socket::Quiet)), Verdict::Continue);
    let v = h.decide(look(100, None, Socket::Gone(PeerGone::Closed)));
    assert_eq!(v, Verdict::PollThenFail(Fault::PeerGone(PeerGone::Closed)));
}

#[test]
fn device_events_fail_the_comm_by_default() {
    let mut h = CommHealth::default();
    let v = h.decide(look(0, Some(port_down()), Socket::Quiet));
    assert!(matches!(v, Verdict::PollThenFail(Fault::Device(_))));
}

#[test]
fn with_return_async_events_0_a_device_fault_is_logged_not_failed() {
    let mut d = DeviceHealth::new("rxe0");
    let log = d.apply(DeviceEvent::PortDown { port: 1 });
    assert_eq!(log.level, Level::Warn, "the event is still said");
    let fault = d.verdict_for(1, |_| false, 0);
    assert!(fault.is_some());

    let mut h = health(60);
    h.set_return_async_events(false);
    assert_eq!(
        h.decide(look(0, fault.clone(), Socket::Quiet)),
        Verdict::Continue
    );
    // The other checks still run: the stall watchdog, then a dead peer.
    assert!(matches!(
        h.decide(look(60, fault.clone(), Socket::Quiet)),
        Verdict::Warn(_)
    ));
    assert_eq!(
        h.decide(look(61, fault, Socket::Gone(PeerGone::Closed))),
        Verdict::PollThenFail(Fault::PeerGone(PeerGone::Closed))
    );
    assert!(h.failure().is_none(), "a verdict records nothing by itself");
}

#[test]
fn a_device_fault_is_the_systems_failure_naming_the_comm_the_fault_and_what_was_pending() {
    let f = failure_of(CommHealth::default().decide(look(0, Some(port_down()), Socket::Quiet)));
    assert_eq!(f.kind, FailureKind::System);
    assert_eq!(
        f.message,
        format!("{COMM}: rxe0 port 1 went down (IBV_EVENT_PORT_ERR); {PENDING}")
    );
}

#[test]
fn socket_eof_reset_and_keepalive_timeout_give_three_distinct_reasons() {
    let reason = |how: PeerGone| {
        let f = failure_of(CommHealth::default().decide(look(0, None, Socket::Gone(how))));
        assert_eq!(f.kind, FailureKind::Remote);
        f.message
    };
    let eof = reason(PeerGone::Closed);
    let reset = reason(PeerGone::Error(
        "Connection reset by peer (os error 104)".into(),
    ));
    let timeout = reason(PeerGone::TimedOut(
        "Connection timed out (os error 110)".into(),
    ));
    assert_eq!(
        eof,
        format!(
            "{COMM}: peer closed the connection (process exited or was killed?) while requests were outstanding; {PENDING}"
        )
    );
    assert_eq!(
        reset,
        format!(
            "{COMM}: peer connection error: Connection reset by peer (os error 104) (process killed or host rebooted?) while requests were outstanding; {PENDING}"
        )
    );
    assert_eq!(
        timeout,
        format!(
            "{COMM}: peer stopped answering: the out-of-band connection timed out after unanswered keepalive probes (Connection timed out (os error 110); host down or network partitioned?) while requests were outstanding; {PENDING}"
        )
    );
}

#[test]
fn a_failed_completion_is_the_peers_failure() {
    let wc = FailedCompletion {
        device: "rxe0",
        port: 1,
        status: 12,
        status_name: "IBV_WC_RETRY_EXC_ERR",
        vendor_err: 0x81,
        opcode: 1,
        qp_num: 17,
    };
    let f = failure_of(failed_completion(COMM, &wc, false));
    assert_eq!(f.kind, FailureKind::Remote);
    assert_eq!(
        f.message,
        format!(
            "{COMM}: work completion failed on rxe0:1: IBV_WC_RETRY_EXC_ERR (status 12, vendor error 0x81, opcode 1, QP 17)"
        )
    );
}

#[test]
fn a_refused_post_or_poll_is_the_systems_failure() {
    let f = failure_of(refused(COMM, &"ibv_post_send: Cannot allocate memory"));
    assert_eq!(f.kind, FailureKind::System);
    assert_eq!(
        f.message,
        format!("{COMM}: ibv_post_send: Cannot allocate memory")
    );
}

#[test]
fn a_stall_is_warned_at_1x_2x_and_4x_the_threshold() {
    let mut h = health(60);
    let mut warned = Vec::new();
    for t in (0..=250).step_by(10) {
        if let Verdict::Warn(stall) = h.decide(look(t, None, Socket::Quiet)) {
            warned.push((t, stall.idle.as_secs(), stall.previous_warnings));
        }
    }
    assert_eq!(warned, [(60, 60, 0), (120, 120, 1), (240, 240, 2)]);
}

#[test]
fn progress_or_nothing_outstanding_is_no_stall() {
    let mut h = health(60);
    h.decide(look(0, None, Socket::Quiet));
    h.counters.completions += 1;
    assert_eq!(h.decide(look(60, None, Socket::Quiet)), Verdict::Continue);
    let idle = Look {
        waiting: false,
        ..look(200, None, Socket::Quiet)
    };
    assert_eq!(h.decide(idle), Verdict::Continue);
}

#[test]
fn the_stall_warning_says_how_long_what_the_comm_waits_for_and_its_counters() {
    let mut h = health(1);
    h.decide(look(0, None, Socket::Quiet));
    let Verdict::Warn(stall) = h.decide(look(1, None, Socket::Quiet)) else {
        panic!("no stall after the threshold");
    };
    assert_eq!(
        stall.warning(COMM, "send", "a send waits", "sent 0 messages"),
        format!("{COMM}: send comm made no progress for 1 s: a send waits; sent 0 messages")
    );
}

#[test]
fn a_fault_of_a_member_names_the_member_and_the_virtual_device() {
    let f = port_down().of_member("rxe0", 1, "rxe0+rxe1");
    assert_eq!(f.cause, DeviceCause::PortDown { port: 1 });
    let failure = Fault::Device(f).failure(COMM, PENDING);
    assert_eq!(
        failure.message,
        format!(
            "{COMM}: member rxe0:1 of rxe0+rxe1: rxe0 port 1 went down (IBV_EVENT_PORT_ERR); {PENDING}"
        )
    );
}

#[test]
fn a_flush_refused_before_any_read_is_abandoned_and_after_one_fails_the_comm() {
    assert_eq!(verdict::flush_refused(0), FlushRefused::AbortFlush);
    assert_eq!(verdict::flush_refused(1), FlushRefused::FailComm);
    assert_eq!(verdict::flush_refused(7), FlushRefused::FailComm);
}

#[test]
fn a_peers_failure_notice_fails_the_comm_with_the_peers_words() {
    let why = "send of 11 bytes (tag 0) is larger than the receive buffer of 10 bytes it matched";
    let v = CommHealth::default().decide(look(0, None, Socket::Gone(PeerGone::Failed(why.into()))));
    assert_eq!(
        v,
        Verdict::PollThenFail(Fault::PeerGone(PeerGone::Failed(why.into())))
    );
    let f = failure_of(v);
    assert_eq!(f.kind, FailureKind::Remote);
    assert_eq!(
        f.message,
        format!("{COMM}: the peer failed the comm: {why}; {PENDING}")
    );
}

#[test]
fn a_failure_notice_round_trips_and_other_bytes_are_no_notice() {
    use crate::health::facts::{decode_notice, encode_notice};
    let why = "send of 11 bytes is larger than the receive buffer of 10 bytes";
    assert_eq!(decode_notice(&encode_notice(why)).as_deref(), Some(why));
    assert_eq!(decode_notice(b"hello"), None);
    assert_eq!(decode_notice(b""), None);
}

fn retry_exceeded(status: u32) -> FailedCompletion<'static> {
    FailedCompletion {
        device: "rxe1",
        port: 1,
        status,
        status_name: "IBV_WC_RETRY_EXC_ERR",
        vendor_err: 0,
        opcode: 1,
        qp_num: 17,
    }
}

#[test]
fn with_recovery_on_a_path_failure_recovers_and_an_access_error_still_fails() {
    let v = failed_completion(COMM, &retry_exceeded(12), true);
    assert_eq!(
        v,
        Verdict::Recover(
            "work completion failed on rxe1:1: IBV_WC_RETRY_EXC_ERR (status 12, vendor error 0x0, opcode 1, QP 17)"
                .into()
        )
    );
    for flushed_or_path in [2, 5, 7, 12, 13, 16, 19, 20, 21] {
        assert!(matches!(
            failed_completion(COMM, &retry_exceeded(flushed_or_path), true),
            Verdict::Recover(_)
        ));
    }
    // Length, protection and access errors are the same after a rebuild.
    for bug in [1, 4, 8, 9, 10, 11] {
        assert!(matches!(
            failed_completion(COMM, &retry_exceeded(bug), true),
            Verdict::Fail(_)
        ));
    }
}

fn recovering_health() -> CommHealth {
    let mut h = health(60);
    h.set_recover_in_place(true);
    h
}

#[test]
fn with_recovery_on_a_port_down_under_waiting_work_recovers_instead_of_failing() {
    let mut h = recovering_health();
    assert_eq!(
        h.decide(look(0, Some(port_down()), Socket::Quiet)),
        Verdict::Recover("rxe0 port 1 went down (IBV_EVENT_PORT_ERR)".into())
    );
}

#[test]
fn a_port_down_under_an_idle_comm_is_only_logged_as_nccl_does() {
    let mut h = recovering_health();
    let idle = Look {
        waiting: false,
        ..look(0, Some(port_down()), Socket::Quiet)
    };
    assert_eq!(h.decide(idle), Verdict::Continue);
}

#[test]
fn a_comm_already_recovering_waits_for_its_port_instead_of_recovering_again() {
    let mut h = recovering_health();
    let stopped = Look {
        recovering: true,
        ..look(0, Some(port_down()), Socket::Quiet)
    };
    assert_eq!(h.decide(stopped), Verdict::Continue);
}

#[test]
fn a_dead_peer_fails_a_recovering_comm_all_the_same() {
    let mut h = recovering_health();
    let stopped = Look {
        recovering: true,
        ..look(0, Some(port_down()), Socket::Gone(PeerGone::Closed))
    };
    assert!(matches!(
        h.decide(stopped),
        Verdict::PollThenFail(Fault::PeerGone(PeerGone::Closed))
    ));
}

#[test]
fn a_fatal_device_error_fails_the_comm_even_with_recovery_on() {
    let mut h = recovering_health();
    let mut d = DeviceHealth::new("rxe0");
    d.apply(DeviceEvent::DeviceFatal);
    let fatal = d.verdict_for(1, |_| false, 0);
    assert!(matches!(
        h.decide(look(0, fatal, Socket::Quiet)),
        Verdict::PollThenFail(Fault::Device(_))
    ));
}

#[test]
fn with_recovery_off_a_port_down_fails_the_comm_as_before() {
    let mut h = health(60);
    assert!(matches!(
        h.decide(look(0, Some(port_down()), Socket::Quiet)),
        Verdict::PollThenFail(Fault::Device(_))
    ));
}

#[test]
fn a_member_failed_over_from_that_is_active_again_brings_the_qps_home_under_waiting_work() {
    let mut h = recovering_health();
    let back = Look {
        member_back: Some("rxe1:1".into()),
        ..look(0, None, Socket::Quiet)
    };
    assert_eq!(
        h.decide(back.clone()),
        Verdict::Recover("member rxe1:1 is active again: its QPs move back (failback)".into())
    );
    let idle = Look {
        waiting: false,
        ..back.clone()
    };
    assert_eq!(
        h.decide(idle),
        Verdict::Continue,
        "an idle comm fails back later"
    );
    let mut off = health(60);
    assert_eq!(
        off.decide(back),
        Verdict::Continue,
        "recovery off: nothing moves"
    );
}
