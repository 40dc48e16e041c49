//! Unit tests of recovery in place, one per rule, refusal and edge: the epoch filter, the
//! report and the replay, the budget, and recovery turned off.

use super::*;
use crate::comm::recovering::Recovering;
use crate::comm::recv::{PostRecv, RecvBuf, RecvCore, RecvStep};
use crate::comm::send::{SendCore, SendStep, SendWait};
use crate::comm::wr_id::WrId;
use crate::comm::{CoreError, Done};
use crate::fifo::CtsEntry;
use crate::plan::{AdaptiveRouting, QpLayout, SizesSlot};
use crate::wire::Msg;
use crate::{MAX_DEVS, MAX_RECVS};

const fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

const BUDGET: Duration = Duration::from_secs(30);

/// Entry `i` of group `seq`, every group a single buffer of 4096 bytes with tag 0.
fn entry(seq: u64, _i: usize) -> Option<CtsEntry> {
    Some(CtsEntry {
        seq: seq + 1,
        addr: 0x10_0000 * (seq + 1),
        rkeys: [7; MAX_DEVS],
        size: 4096,
        tag: 0,
        nreqs: 1,
        idx: 0,
    })
}

/// A sender with recovery on that posted groups `0..n` (one buffer each); their requests.
fn sender(layout: QpLayout, n: u64) -> (SendCore, Vec<u32>) {
    let mut c = SendCore::new(layout);
    c.set_recovery_budget(BUDGET);
    let reqs = (0..n)
        .map(
            |_| match c.isend(0, 4096, 0x42, &[1; MAX_DEVS], entry).unwrap() {
                SendStep::Post { req } => req,
                other => panic!("expected a post, got {other:?}"),
            },
        )
        .collect();
    (c, reqs)
}

fn state(epoch: u32, next_seq: u64, outstanding: &[(u64, u128)]) -> ReceiverState {
    ReceiverState {
        epoch,
        next_seq,
        outstanding: outstanding
            .iter()
            .map(|&(seq, arrived)| GroupArrivals { seq, arrived })
            .collect(),
    }
}

fn receiver(layout: QpLayout, groups: usize) -> (RecvCore, Vec<PostRecv>) {
    let mut c = RecvCore::new(layout);
    c.set_recovery_budget(BUDGET);
    let bufs = [RecvBuf {
        addr: 0x1000,
        size: 4096,
        tag: 0,
        rkeys: [3; MAX_DEVS],
    }];
    let posts = (0..groups)
        .map(|_| match c.irecv(&bufs).unwrap() {
            RecvStep::Post(p) => p,
            RecvStep::Retry => panic!("expected a post"),
        })
        .collect();
    (c, posts)
}

#[test]
fn a_stale_send_completion_of_an_old_epoch_is_ignored() {
    let (mut c, reqs) = sender(QpLayout::one_device(1, false), 1);
    assert_eq!(c.begin_recovery(s(1), "QP 0 went to error"), Ok(1));
    c.apply_peer_state(&state(1, 1, &[(0, 0)])).unwrap();
    c.resume(1, s(2)).unwrap();
    let replay: Vec<u64> = c.replay().map(|g| g.wr_id()).collect();
    assert_eq!(replay, vec![WrId::Send { seq: 0 }.encode_in(1)]);
    c.handle_completion(WrId::Send { seq: 0 }.encode());
    assert_eq!(
        c.take_done(reqs[0]),
        Ok(None),
        "the destroyed QP's completion does not finish the replayed send"
    );
    c.handle_completion(replay[0]);
    assert_eq!(c.take_done(reqs[0]), Ok(Some(Done::one(4096))));
}

#[test]
fn a_stale_receive_completion_of_an_old_epoch_is_ignored_and_so_is_one_polled_while_stopped() {
    let (mut c, posts) = receiver(QpLayout::one_device(1, false), 1);
    c.begin_recovery(s(1), "port down").unwrap();
    c.handle_completion(posts[0].recv_wr_id_on(0), 4096, |_, _| unreachable!());
    assert_eq!(
        c.receiver_state().unwrap(),
        state(1, 1, &[(0, 0)]),
        "what arrives after the stop is not in the report"
    );
    let r = c.resume(1, s(2)).unwrap();
    c.handle_completion(posts[0].recv_wr_id_on(0), 4096, |_, _| unreachable!());
    assert_eq!(c.take_done(posts[0].req), Ok(None), "an epoch-0 completion");
    c.handle_completion(r.reposts[0].wr_id(0), 4096, |_, _| unreachable!());
    assert_eq!(c.take_done(posts[0].req), Ok(Some(Done::one(4096))));
}

#[test]
fn a_state_message_of_a_wrong_epoch_is_refused() {
    let (mut c, _) = sender(QpLayout::one_device(1, false), 1);
    assert!(matches!(
        c.apply_peer_state(&state(0, 1, &[(0, 0)])),
        Err(RecoveryError::NotReady(_))
    ));
    c.begin_recovery(s(1), "first").unwrap();
    c.begin_recovery(s(2), "second").unwrap();
    assert_eq!(
        c.apply_peer_state(&state(1, 1, &[(0, 0)])),
        Err(RecoveryError::WrongEpoch { got: 1, want: 2 })
    );
    assert!(matches!(c.resume(2, s(3)), Err(RecoveryError::NotReady(_))));
    c.apply_peer_state(&state(2, 1, &[(0, 0)])).unwrap();
    assert_eq!(
        c.resume(1, s(3)),
        Err(RecoveryError::WrongEpoch { got: 1, want: 2 })
    );
    let (mut r, _) = receiver(QpLayout::one_device(1, false), 1);
    r.begin_recovery(s(1), "first").unwrap();
    assert_eq!(
        r.resume(3, s(2)),
        Err(RecoveryError::WrongEpoch { got: 3, want: 1 })
    );
}

#[test]
fn a_second_failure_during_recovery_restarts_it_at_the_next_epoch() {
    let (mut c, _) = sender(QpLayout::one_device(1, false), 1);
    assert_eq!(c.begin_recovery(s(1), "flap"), Ok(1));
    assert_eq!(c.on_peer_recover(1, s(1)), Ok(false), "the peer's echo");
    assert_eq!(c.begin_recovery(s(2), "flap again"), Ok(2));
    assert_eq!(c.on_peer_recover(1, s(2)), Ok(false), "a stale request");
    assert_eq!(c.on_peer_recover(4, s(3)), Ok(true), "the peer restarted");
    assert_eq!(c.recovery.epoch(), 4);
    assert_eq!(c.health.counters.recoveries, 4);
    let (mut r, _) = receiver(QpLayout::one_device(1, false), 1);
    assert_eq!(r.on_peer_recover(1, s(1)), Ok(true));
    assert_eq!(r.receiver_state().unwrap().epoch, 1);
}

#[test]
fn when_the_budget_runs_out_the_comm_fails_naming_what_was_pending_and_what_was_tried() {
    let (mut c, _) = sender(QpLayout::one_device(1, false), 2);
    c.begin_recovery(s(100), "QP 0 went to error (retry exceeded)")
        .unwrap();
    c.begin_recovery(s(110), "port 1 down again").unwrap();
    assert_eq!(c.check_recovery(s(130)), Ok(()), "30 s is within budget");
    let Err(CoreError::Failed(f)) = c.check_recovery(s(131)) else {
        panic!("31 s is past the budget")
    };
    for said in [
        "gave up after 31.0 s (budget 30.0 s)",
        "2 attempt(s) up to epoch 2",
        "the last after port 1 down again",
        "2 groups posted and not yet delivered",
    ] {
        assert!(f.message.contains(said), "{said:?} not in {f}");
    }
    assert!(
        matches!(c.isend(0, 8, 0, &[1; MAX_DEVS], entry), Err(CoreError::Failed(g)) if g == f),
        "the failure is sticky"
    );
    assert_eq!(
        c.begin_recovery(s(140), "again"),
        Err(RecoveryError::Failed(f))
    );
    let (mut r, _) = receiver(QpLayout::one_device(1, false), 1);
    r.begin_recovery(s(0), "port down").unwrap();
    assert!(matches!(
        r.begin_recovery(s(31), "again"),
        Err(RecoveryError::Failed(f)) if f.message.contains("1 receives posted wait")
    ));
}

#[test]
fn a_recovery_that_resumes_gives_the_next_one_a_whole_budget() {
    let (mut c, _) = sender(QpLayout::one_device(1, false), 1);
    c.begin_recovery(s(0), "flap").unwrap();
    c.apply_peer_state(&state(1, 1, &[])).unwrap();
    c.resume(1, s(20)).unwrap();
    assert_eq!(c.health.counters.recovery_ns, 20_000_000_000);
    c.begin_recovery(s(100), "flap").unwrap();
    assert_eq!(c.check_recovery(s(125)), Ok(()));
}

#[test]
fn with_recovery_off_a_failure_stops_nothing_and_every_completion_counts_as_before() {
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    assert_eq!(c.recovery.budget(), Duration::ZERO, "off unless set");
    assert_eq!(c.begin_recovery(s(1), "QP error"), Err(RecoveryError::Off));
    let SendStep::Post { req } = c.isend(0, 8, 0, &[1; MAX_DEVS], entry).unwrap() else {
        panic!("a comm that did not stop sends on")
    };
    assert_eq!(c.ready_group().wr_id(), WrId::Send { seq: 0 }.encode());
    c.handle_completion(WrId::Send { seq: 0 }.encode());
    assert_eq!(c.take_done(req), Ok(Some(Done::one(8))));
    assert_eq!(c.health.counters.recoveries, 0);
    let mut r = RecvCore::new(QpLayout::one_device(1, false));
    assert_eq!(r.on_peer_recover(1, s(1)), Err(RecoveryError::Off));
    assert!(matches!(
        r.receiver_state(),
        Err(RecoveryError::NotReady(_))
    ));
}

#[test]
fn a_stopped_comm_retries_every_call_and_writes_no_clear_to_send() {
    let (mut c, _) = sender(QpLayout::one_device(1, false), 0);
    c.begin_recovery(s(1), "flap").unwrap();
    assert_eq!(
        c.isend(0, 8, 0, &[1; MAX_DEVS], entry).unwrap(),
        SendStep::Retry(SendWait::Recovering { epoch: 1 })
    );
    assert!(c.describe_wait().contains("recovering (epoch 1)"));
    let (mut r, _) = receiver(QpLayout::one_device(1, false), 2);
    r.begin_recovery(s(1), "flap").unwrap();
    assert_eq!(r.cts_flush(), None);
    assert!(
        r.describe_wait()
            .starts_with("the comm is recovering (epoch 1): 2 receives posted wait")
    );
    assert_eq!(
        r.irecv(&[RecvBuf {
            addr: 1,
            size: 1,
            tag: 0,
            rkeys: [1; MAX_DEVS]
        }]),
        Ok(RecvStep::Retry)
    );
}

#[test]
fn only_the_shares_whose_immediates_did_not_arrive_are_replayed() {
    let layout = QpLayout::one_device(4, true);
    let (mut c, reqs) = sender(layout, 2);
    c.begin_recovery(s(1), "QP 1 went to error").unwrap();
    // Group 0: QPs 0 and 2 delivered. Group 1: nothing arrived.
    c.apply_peer_state(&state(1, 2, &[(0, 0b0101), (1, 0)]))
        .unwrap();
    let g: Vec<(u64, u128)> = c.replay().map(|g| (g.seq, g.qps)).collect();
    assert_eq!(g, vec![(0, 0b1010), (1, 0b1111)]);
    let first = c.replay().next().unwrap();
    let sizes = SizesSlot {
        local_addr: 0,
        lkeys: [2; MAX_DEVS],
        remote_addr: 0x99,
        rkeys: [2; MAX_DEVS],
    };
    let mut w = Vec::new();
    plan::replay_writes_into(
        &first,
        &layout,
        sizes,
        u32::MAX,
        AdaptiveRouting::OFF,
        &mut w,
    );
    let qps: Vec<(usize, u64, Option<u32>)> =
        w.iter().map(|w| (w.qp, w.remote_addr, w.imm)).collect();
    assert_eq!(
        qps,
        vec![
            (1, 0x10_0000 + 1024, Some(1024)),
            (3, 0x10_0000 + 3072, Some(1024))
        ],
        "the same chunks and immediates as first written, on QPs 1 and 3 only"
    );
    assert_eq!(first.bytes(&layout), 2048);
    let wr_id = first.wr_id();
    c.resume(1, s(2)).unwrap();
    let n = c.health.counters;
    assert_eq!(
        (n.sends_replayed, n.bytes_replayed, n.qps_rebuilt),
        (2, 2048 + 4096, 4)
    );
    for q in [1, 3] {
        assert_eq!(
            c.take_done(reqs[0]),
            Ok(None),
            "before QP {q}'s replay completed"
        );
        c.handle_completion(wr_id);
    }
    assert_eq!(c.take_done(reqs[0]), Ok(Some(Done::one(4096))));
}

#[test]
fn a_group_the_receiver_completed_is_delivered_without_a_replay() {
    let (mut c, reqs) = sender(QpLayout::one_device(2, false), 3);
    c.handle_completion(WrId::Send { seq: 1 }.encode());
    c.begin_recovery(s(1), "flap").unwrap();
    // The receiver completed groups 0 and 1 and posted a fourth it was not sent yet.
    c.apply_peer_state(&state(1, 4, &[(2, 0), (3, 0)])).unwrap();
    assert_eq!(
        c.take_done(reqs[0]),
        Ok(Some(Done::one(4096))),
        "unacknowledged, but complete"
    );
    assert_eq!(c.take_done(reqs[1]), Ok(Some(Done::one(4096))));
    assert_eq!(c.take_done(reqs[2]), Ok(None));
    let g: Vec<(u64, u128)> = c.replay().map(|g| (g.seq, g.qps)).collect();
    assert_eq!(g, vec![(2, 0b01)], "group 2 used QP 0 of two");
}

#[test]
fn a_report_that_contradicts_what_the_sender_saw_is_refused() {
    let (mut c, _) = sender(QpLayout::one_device(1, false), 2);
    c.handle_completion(WrId::Send { seq: 0 }.encode());
    c.begin_recovery(s(1), "flap").unwrap();
    assert!(matches!(
        c.apply_peer_state(&state(1, 2, &[(0, 0), (1, 0)])),
        Err(RecoveryError::Inconsistent(m)) if m.contains("group 0 is incomplete at the receiver")
    ));
    assert!(matches!(
        c.apply_peer_state(&state(1, 1, &[])),
        Err(RecoveryError::Inconsistent(m)) if m.contains("posted 1 groups, the sender wrote 2")
    ));
    assert!(matches!(
        c.apply_peer_state(&state(1, 2, &[(1, 1)])),
        Err(RecoveryError::Inconsistent(m)) if m.contains("every immediate")
    ));
}

#[test]
fn the_receiver_reports_which_qps_delivered_reposts_the_rest_and_announces_every_outstanding_group_again()
 {
    let (mut c, posts) = receiver(QpLayout::one_device(3, true), 4);
    for q in 0..3 {
        c.handle_completion(posts[0].recv_wr_id_on(q), 100, |_, _| unreachable!());
    }
    c.handle_completion(posts[1].recv_wr_id_on(1), 100, |_, _| unreachable!());
    c.handle_completion(posts[3].recv_wr_id_on(2), 100, |_, _| unreachable!());
    assert_eq!(c.begin_recovery(s(5), "port down"), Ok(1));
    assert_eq!(
        c.receiver_state().unwrap(),
        state(1, 4, &[(1, 0b010), (2, 0), (3, 0b100)])
    );
    let r = c.resume(1, s(7)).unwrap();
    let reposts: Vec<(u64, Vec<usize>)> = r
        .reposts
        .iter()
        .map(|p| (p.seq, p.qps().collect()))
        .collect();
    assert_eq!(
        reposts,
        vec![(1, vec![0, 2]), (2, vec![0, 1, 2]), (3, vec![0, 1])]
    );
    let w = r.cts.expect("outstanding groups are announced again");
    assert_eq!((w.from, w.to, w.signaled), (1, 4, true));
    assert_eq!(w.wr_id(), WrId::Cts { seq: 3 }.encode_in(1));
    assert_eq!(c.cts_flush(), None, "nothing is left staged");
    assert_eq!(c.take_done(posts[0].req), Ok(Some(Done::one(300))));
    // Group 1's size adds what arrived before the stop and what the replay brings.
    for q in [0, 2] {
        c.handle_completion(r.reposts[0].wr_id(q), 100, |_, _| unreachable!());
    }
    assert_eq!(c.take_done(posts[1].req), Ok(Some(Done::one(300))));
    let n = c.health.counters;
    assert_eq!(
        (n.recoveries, n.qps_rebuilt, n.recovery_ns),
        (1, 3, 2_000_000_000)
    );
}

#[test]
fn a_flush_outstanding_at_the_stop_is_posted_again_whole() {
    let (mut c, _) = receiver(QpLayout::new(1, false, 2, 2), 0);
    let f = c.begin_flush(2).unwrap();
    c.handle_completion(RecvCore::flush_wr_id(f), 0, |_, _| unreachable!());
    c.begin_recovery(s(1), "device 1 port down").unwrap();
    let r = c.resume(1, s(2)).unwrap();
    let none = crate::comm::recv::FlushTarget::default();
    assert_eq!(
        (r.flushes, r.cts, r.reposts.len()),
        (vec![(f, none)], None, 0)
    );
    c.handle_completion(c.flush_wr_id_now(f), 0, |_, _| unreachable!());
    assert_eq!(c.take_done(f), Ok(None), "both reads again");
    c.handle_completion(c.flush_wr_id_now(f), 0, |_, _| unreachable!());
    assert_eq!(c.take_done(f), Ok(Some(Done::NOTHING)));
}

#[test]
fn a_receivers_report_has_room_for_every_group_of_eight_buffers() {
    let mut c = RecvCore::new(QpLayout::one_device(1, false));
    c.set_recovery_budget(BUDGET);
    let bufs = [RecvBuf {
        addr: 1,
        size: 1,
        tag: 0,
        rkeys: [1; MAX_DEVS],
    }; MAX_RECVS];
    while let RecvStep::Post(_) = c.irecv(&bufs).unwrap() {}
    c.begin_recovery(s(1), "flap").unwrap();
    let st = c.receiver_state().unwrap();
    assert_eq!(st.outstanding.len(), crate::SLOTS);
    assert!(st.is_well_formed());
}

#[test]
fn the_exchange_runs_in_order_the_receiver_reports_and_rebuilds_then_the_sender_connects_then_both_resume()
 {
    let layout = QpLayout::new(2, false, 1, 1);
    let (mut snd, _) = sender(layout, 2);
    let (mut rcv, _) = receiver(layout, 2);
    assert_eq!(rcv.recovery_step(), Step::Run);
    // The receiver sees the failure: it says so with its report, then rebuilds.
    let said = rcv.start_recovery(s(1), "port down").unwrap();
    assert!(matches!(
        said[..],
        [Msg::Recover { epoch: 1 }, Msg::ReceiverState(_)]
    ));
    assert_eq!(rcv.recovery_step(), Step::Rebuild);
    let rebuilt = rcv.qps_rebuilt(vec![70, 71], 0);
    assert_eq!(
        rcv.recovery_step(),
        Step::Wait,
        "until the sender's QPs exist"
    );
    // The sender adopts the epoch and answers with its own Recover.
    let mut answers = Vec::new();
    for m in said {
        answers.extend(snd.on_recovery_msg(m, s(1)).unwrap());
    }
    assert_eq!(answers, [Msg::Recover { epoch: 1 }]);
    assert_eq!(
        snd.recovery_step(),
        Step::Wait,
        "no QPs of the receiver yet"
    );
    assert!(snd.on_recovery_msg(rebuilt, s(1)).unwrap().is_empty());
    assert_eq!(
        snd.recovery_step(),
        Step::Connect(PeerQps {
            qpns: vec![70, 71],
            down: 0
        })
    );
    let own = snd.qps_rebuilt(vec![80, 81], 0b1);
    assert_eq!(
        snd.recovery_step(),
        Step::Wait,
        "connected once; waits for Resume"
    );
    // The receiver's own Recover echoed back is no news.
    assert!(
        rcv.on_recovery_msg(Msg::Recover { epoch: 1 }, s(1))
            .unwrap()
            .is_empty()
    );
    assert!(rcv.on_recovery_msg(own, s(1)).unwrap().is_empty());
    assert_eq!(
        rcv.recovery_step(),
        Step::Connect(PeerQps {
            qpns: vec![80, 81],
            down: 0b1
        })
    );
    let r = rcv.resume(1, s(2)).unwrap();
    assert_eq!(rcv.recovery_step(), Step::Run);
    assert_eq!(r.reposts.len(), 2);
    snd.on_recovery_msg(Msg::Resume { epoch: 1 }, s(2)).unwrap();
    assert_eq!(snd.recovery_step(), Step::Run);
    assert_eq!(snd.replay().count(), 2, "both groups, no immediate arrived");
}

#[test]
fn a_rebuild_of_an_older_epoch_is_ignored_and_the_next_epoch_rebuilds_again() {
    let layout = QpLayout::new(1, false, 1, 1);
    let (mut rcv, _) = receiver(layout, 1);
    rcv.start_recovery(s(1), "port down").unwrap();
    rcv.qps_rebuilt(vec![5], 0);
    // A second failure before the sender answered: epoch 2 needs its own QPs.
    rcv.start_recovery(s(2), "QP error").unwrap();
    assert_eq!(rcv.recovery_step(), Step::Rebuild);
    rcv.qps_rebuilt(vec![6], 0);
    rcv.on_recovery_msg(
        Msg::Rebuilt {
            epoch: 1,
            qpns: vec![9],
            down: 0,
        },
        s(2),
    )
    .unwrap();
    assert_eq!(
        rcv.recovery_step(),
        Step::Wait,
        "the sender's epoch-1 QPs are stale"
    );
}

#[test]
fn a_message_a_side_never_expects_fails_the_step() {
    let layout = QpLayout::new(1, false, 1, 1);
    let (mut rcv, _) = receiver(layout, 1);
    rcv.start_recovery(s(1), "port down").unwrap();
    let e = rcv
        .on_recovery_msg(Msg::Resume { epoch: 1 }, s(1))
        .unwrap_err();
    assert!(matches!(e, RecoveryError::Inconsistent(_)), "{e}");
    let (mut snd, _) = sender(layout, 1);
    let e = snd.on_recovery_msg(Msg::Ready, s(1)).unwrap_err();
    assert!(matches!(e, RecoveryError::Inconsistent(_)), "{e}");
}

#[test]
fn a_failure_seen_while_running_is_wanted_once_and_forgotten_when_the_comm_stops() {
    let mut r = Recovery::default();
    r.want("flushed");
    assert!(!r.is_wanted(), "recovery off: nothing is wanted");
    r.set_budget(BUDGET);
    r.want("retry exceeded");
    r.want("flushed");
    assert_eq!(r.take_wanted().as_deref(), Some("retry exceeded"));
    r.want("again");
    r.stop(s(1), "again").unwrap();
    assert!(!r.is_wanted());
    r.want("flushed while stopped");
    assert!(!r.is_wanted());
}

#[test]
fn the_receives_outstanding_are_those_whose_immediates_did_not_arrive() {
    let layout = QpLayout::new(2, true, 1, 1);
    let (mut c, posts) = receiver(layout, 3);
    assert_eq!(c.receives_outstanding(), 6, "3 groups, split over 2 QPs");
    c.handle_completion(posts[0].recv_wr_id_on(1), 4096 / 2, |_, _| unreachable!());
    assert_eq!(c.receives_outstanding(), 5);
}

#[test]
fn the_start_delay_holds_the_rebuild_and_the_attempts_cap_ends_a_recovery_that_keeps_failing() {
    let mut r = Recovery::default();
    r.set_budget(BUDGET);
    r.set_limits(Some(Duration::from_millis(200)), Some(2));
    assert!(r.may_rebuild(s(0)), "nothing to wait for while running");
    r.stop(s(10), "port down").unwrap();
    assert!(!r.may_rebuild(s(10)));
    assert!(r.may_rebuild(s(10) + Duration::from_millis(200)));
    r.stop(s(11), "again").unwrap();
    assert_eq!(
        r.stop(s(12), "and again"),
        Err(RecoveryError::NotReady(
            "the recovery's attempts are spent (NCCL_IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX)"
        ))
    );
}

#[test]
fn a_recovery_gives_back_the_room_of_delivered_groups_and_keeps_the_replayed_ones() {
    let (mut c, reqs) = sender(QpLayout::one_device(1, false), 3);
    assert_eq!(c.queue_held(0), 3, "one write per group");
    c.begin_recovery(s(1), "QP 0 went to error").unwrap();
    // Groups 0 and 2 arrived; group 1 did not.
    c.apply_peer_state(&state(1, 3, &[(1, 0)])).unwrap();
    assert_eq!(
        c.queue_held(0),
        1,
        "only the replayed group still holds room"
    );
    c.resume(1, s(2)).unwrap();
    let replay: Vec<u64> = c.replay().map(|g| g.wr_id()).collect();
    assert_eq!(replay.len(), 1);
    c.handle_completion(replay[0]);
    assert_eq!(c.queue_held(0), 0);
    assert_eq!(c.take_done(reqs[1]), Ok(Some(Done::one(4096))));
}

#[test]
fn a_connect_that_timed_out_during_recovery_waits_nccls_retry_pause_and_is_tried_again() {
    let mut r = Recovery::default();
    r.set_budget(BUDGET);
    r.stop(s(100), "port 1 down").unwrap();
    let policy = RetryPolicy::default();
    assert!(r.may_rebuild(s(100)));
    let ms = Duration::from_millis;
    // Two timed-out moves to RTR: 100 ms, then 200 ms, before the next try.
    let (n, next) = r.connect_failed(s(101), 110, "qpn 7 to RTR: ETIMEDOUT", &policy);
    assert_eq!((n, next), (1, Some(s(101) + ms(100))));
    assert!(!r.may_rebuild(s(101) + ms(99)));
    assert!(r.may_rebuild(s(101) + ms(100)));
    let (n, next) = r.connect_failed(s(102), 110, "qpn 7 to RTR: ETIMEDOUT", &policy);
    assert_eq!((n, next), (2, Some(s(102) + ms(200))));
    assert_eq!(r.connect_failures(), 2);
    // A later epoch starts counting again; the budget still bounds the whole recovery.
    r.stop(s(103), "port 1 down again").unwrap();
    assert_eq!(r.connect_failures(), 0);
    assert!(r.may_rebuild(s(103)));
    let f = r.gave_up(s(131), "send", "nothing pending");
    assert!(
        f.message
            .contains("the last failed try to connect the QPs: qpn 7 to RTR: ETIMEDOUT"),
        "{f}"
    );
    // Resumed: the next recovery starts clean.
    r.finish(s(104));
    r.stop(s(200), "flap").unwrap();
    assert!(
        !r.gave_up(s(231), "send", "")
            .message
            .contains("connect the QPs")
    );
}

#[test]
fn a_connect_failure_other_than_a_time_out_is_not_retried_unless_nccl_ib_mqp_retry_all_says_so() {
    let mut r = Recovery::default();
    r.set_budget(BUDGET);
    r.stop(s(0), "port down").unwrap();
    let einval = 22;
    assert_eq!(
        r.connect_failed(s(1), einval, "EINVAL", &RetryPolicy::default()),
        (1, None)
    );
    let all = RetryPolicy {
        all: true,
        ..RetryPolicy::default()
    };
    assert_eq!(
        r.connect_failed(s(1), einval, "EINVAL", &all).1,
        Some(s(1) + Duration::from_millis(200))
    );
    // The retries are counted: past NCCL_IB_MQP_RETRY_CNT, give up.
    let two = RetryPolicy {
        retries: 2,
        ..RetryPolicy::default()
    };
    let mut r = Recovery::default();
    r.set_budget(BUDGET);
    r.stop(s(0), "port down").unwrap();
    assert!(r.connect_failed(s(1), 110, "t", &two).1.is_some());
    assert!(r.connect_failed(s(2), 110, "t", &two).1.is_some());
    assert_eq!(r.connect_failed(s(3), 110, "t", &two).1, None);
}

#[test]
fn completions_count_only_of_the_current_epoch_while_the_comm_runs_past_epoch_256() {
    let mut r = Recovery::default();
    r.set_budget(BUDGET);
    assert!(r.counts(0) && !r.counts(1), "epoch 0 runs from the start");
    assert_eq!(r.counting(), 0);
    for epoch in 1..=257u32 {
        r.stop(s(u64::from(epoch)), "flap").unwrap();
        assert_eq!(r.counting(), NOT_COUNTING, "stopped at epoch {epoch}");
        assert!(
            (0..=255).all(|e| !r.counts(e)),
            "nothing counts while stopped"
        );
        r.finish(s(u64::from(epoch)));
        let now = epoch as u8;
        assert_eq!(r.counting(), u16::from(now));
        assert!(
            r.counts(now) && !r.counts(now.wrapping_sub(1)),
            "epoch {epoch}"
        );
    }
}
