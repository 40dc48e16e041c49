//! The send core's tests: matching, truncation, completions, slot reuse and queue room.

use super::*;
use crate::comm::Failure;
use std::time::Duration;

/// A FIFO the test fills by hand: `groups[k]` are the buffers of receive group `k`.
struct Fifo {
    groups: Vec<Vec<(i32, u32)>>,
}

impl Fifo {
    fn read(&self, seq: u64, i: usize) -> Option<CtsEntry> {
        let g = self.groups.get(seq as usize)?;
        let &(tag, size) = g.get(i)?;
        Some(CtsEntry {
            seq: seq + 1,
            addr: 0x1000_0000 * (seq + 1) + 0x1_0000 * i as u64,
            rkeys: [7; crate::MAX_DEVS],
            size,
            tag,
            nreqs: g.len() as u16,
            idx: i as u16,
        })
    }
}

fn send(core: &mut SendCore, fifo: &Fifo, tag: i32, size: u32) -> SendStep {
    core.isend(tag, size, 0x42, &[1; crate::MAX_DEVS], |s, i| {
        fifo.read(s, i)
    })
    .unwrap()
}

/// A posted group, copied out of the core.
#[derive(Debug)]
struct Posted {
    seq: u64,
    items: Vec<SendItem>,
    reqs: Vec<u32>,
}

impl Posted {
    fn items(&self) -> &[SendItem] {
        &self.items
    }
    fn reqs(&self) -> &[u32] {
        &self.reqs
    }
}

fn owned(c: &SendCore) -> Posted {
    let g = c.ready_group();
    Posted {
        seq: g.seq,
        items: g.items().to_vec(),
        reqs: g.reqs().to_vec(),
    }
}

/// A send that must complete its group: the group written.
fn send_post(c: &mut SendCore, fifo: &Fifo, tag: i32, size: u32) -> Posted {
    match send(c, fifo, tag, size) {
        SendStep::Post { .. } => owned(c),
        other => panic!("expected a post, got {other:?}"),
    }
}

#[test]
fn a_send_before_the_clear_to_send_is_retried() {
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    let fifo = Fifo { groups: vec![] };
    assert_eq!(
        send(&mut c, &fifo, 0, 8),
        SendStep::Retry(SendWait::ClearToSend { seq: 0 })
    );
    assert_eq!(c.in_flight(), 0, "a retry takes no request");
}

#[test]
fn an_overtaking_send_is_retried_until_its_group_is_the_head() {
    // Two receive groups posted ahead, tags 1 and 2 in each; tag 1 runs ahead.
    let fifo = Fifo {
        groups: vec![vec![(1, 64), (2, 64)], vec![(1, 64), (2, 64)]],
    };
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    assert!(matches!(
        send(&mut c, &fifo, 1, 64),
        SendStep::Matched { .. }
    ));
    assert_eq!(
        send(&mut c, &fifo, 1, 64),
        SendStep::Retry(SendWait::TagAhead { tag: 1, seq: 0 }),
        "tag 1's second send belongs to group 1 and must wait, not fail"
    );
    let g = send_post(&mut c, &fifo, 2, 64);
    assert_eq!(g.seq, 0);
    assert_eq!(c.head_seq(), 1);
    let step = send(&mut c, &fifo, 1, 64);
    assert!(matches!(step, SendStep::Matched { .. }), "{step:?}");
}

#[test]
fn repeated_tags_fill_their_buffers_in_order() {
    let fifo = Fifo {
        groups: vec![vec![(5, 10), (9, 10), (5, 20)]],
    };
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    send(&mut c, &fifo, 5, 1);
    send(&mut c, &fifo, 9, 2);
    let g = send_post(&mut c, &fifo, 5, 3);
    let remote: Vec<u64> = g.items().iter().map(|i| i.remote_addr).collect();
    let sizes: Vec<u32> = g.items().iter().map(|i| i.size).collect();
    assert_eq!(remote, vec![0x1000_0000, 0x1001_0000, 0x1002_0000]);
    assert_eq!(sizes, vec![1, 2, 3]);
}

#[test]
fn a_send_completed_by_the_last_poll_before_a_failure_is_reported_done() {
    let fifo = Fifo {
        groups: vec![vec![(0, 64)], vec![(0, 64)]],
    };
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    let SendStep::Post { req: first } = send(&mut c, &fifo, 0, 40) else {
        panic!("first group posts")
    };
    let g = owned(&c);
    let SendStep::Post { req: second } = send(&mut c, &fifo, 0, 8) else {
        panic!("second group posts")
    };
    c.handle_completion(WrId::Send { seq: g.seq }.encode());
    let f = Failure::remote("peer closed the connection");
    c.health.fail(f.clone());
    assert_eq!(c.test(first), Ok(Some(Done::one(40))));
    assert_eq!(c.test(second), Err(CoreError::Failed(f)));
}

#[test]
fn a_v7_comm_refuses_a_send_larger_than_its_buffer_naming_both_sizes() {
    let fifo = Fifo {
        groups: vec![vec![(0, 10)]],
    };
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    c.set_oversize(Oversize::Refuse);
    let r = c.isend(0, 11, 0x42, &[1; crate::MAX_DEVS], |s, i| fifo.read(s, i));
    let Err(CoreError::Failed(f)) = r else {
        panic!("expected a refusal, got {r:?}")
    };
    assert_eq!(f.kind, super::super::FailureKind::Usage);
    assert!(
        f.message.contains("11 bytes") && f.message.contains("10 bytes"),
        "{f}"
    );
    assert_eq!(c.in_flight(), 0, "no request was taken");
    assert_eq!(c.health.counters.truncated, 0);
    assert_eq!(c.health.failure(), Some(&f), "the comm stays failed");
    let again = c.isend(0, 4, 0x42, &[1; crate::MAX_DEVS], |s, i| fifo.read(s, i));
    assert_eq!(again, Err(CoreError::Failed(f)));
}

#[test]
fn a_v7_comm_still_takes_a_send_that_fits() {
    let fifo = Fifo {
        groups: vec![vec![(0, 10)]],
    };
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    c.set_oversize(Oversize::Refuse);
    let g = send_post(&mut c, &fifo, 0, 10);
    assert_eq!(g.items[0].size, 10);
    assert!(c.health.failure().is_none());
}

#[test]
fn a_send_larger_than_its_buffer_is_truncated_and_noted_once() {
    let fifo = Fifo {
        groups: vec![vec![(0, 10)], vec![(0, 10)]],
    };
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    let g = send_post(&mut c, &fifo, 0, 11);
    assert_eq!(g.items()[0].size, 10, "only the posted size is written");
    assert_eq!(
        c.take_truncation_note(),
        Some(Truncation {
            tag: 0,
            seq: 0,
            size: 11,
            capacity: 10
        })
    );
    let SendStep::Post { req } = send(&mut c, &fifo, 0, 4000) else {
        panic!("second group posts")
    };
    let group = owned(&c);
    assert_eq!(c.take_truncation_note(), None, "said once per comm");
    assert_eq!(c.health.counters.truncated, 2);
    c.handle_completion(WrId::Send { seq: group.seq }.encode());
    assert_eq!(
        c.take_done(req),
        Ok(Some(Done::one(10))),
        "the sender reports the bytes placed"
    );
}

#[test]
fn retries_are_counted_by_cause() {
    let fifo = Fifo {
        groups: vec![vec![(1, 8)]],
    };
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    send(&mut c, &fifo, 1, 8);
    send(&mut c, &fifo, 1, 8);
    let n = c.health.counters;
    assert_eq!((n.retries, n.cts_waits, n.tag_ahead), (1, 1, 0));
    let fifo = Fifo {
        groups: vec![vec![(1, 8), (2, 8)]],
    };
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    send(&mut c, &fifo, 1, 8);
    send(&mut c, &fifo, 1, 8);
    let n = c.health.counters;
    assert_eq!((n.retries, n.tag_ahead, n.messages, n.bytes), (1, 1, 1, 8));
}

#[test]
fn a_posted_group_names_the_request_of_each_of_its_sends() {
    let fifo = Fifo {
        groups: vec![vec![(3, 10), (4, 10)]],
    };
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    let SendStep::Matched { req: first } = send(&mut c, &fifo, 4, 1) else {
        panic!("the first send of two only matches")
    };
    let SendStep::Post { req } = send(&mut c, &fifo, 3, 2) else {
        panic!("the second send posts the group")
    };
    let group = owned(&c);
    assert_eq!(
        group.reqs(),
        &[req, first],
        "in the receiver's buffer order"
    );
}

#[test]
fn zero_byte_members_complete_their_group() {
    let fifo = Fifo {
        groups: vec![vec![(0, 0), (1, 100)]],
    };
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    send(&mut c, &fifo, 0, 0);
    let g = send_post(&mut c, &fifo, 1, 100);
    assert_eq!(g.items()[0].size, 0);
}

#[test]
fn requests_are_done_when_every_qp_of_their_group_completed() {
    let fifo = Fifo {
        groups: vec![vec![(0, 4096)]],
    };
    let mut c = SendCore::new(QpLayout::one_device(4, true));
    let SendStep::Post { req } = send(&mut c, &fifo, 0, 4096) else {
        panic!("single-buffer group posts at once")
    };
    let group = owned(&c);
    for q in 0..4 {
        assert!(c.is_pending(req), "after {q} of 4 QPs");
        assert_eq!(c.take_done(req), Ok(None), "after {q} of 4 QPs");
        assert_eq!(c.take_ready(req), None, "after {q} of 4 QPs");
        c.handle_completion(WrId::Send { seq: group.seq }.encode());
    }
    assert!(!c.is_pending(req), "done, not pending");
    assert_eq!(
        c.take_ready(req),
        Some(Done::one(4096)),
        "taken in one look-up"
    );
    assert!(!c.is_pending(req), "gone, not pending");
    assert_eq!(
        c.take_done(req),
        Err(CoreError::NotInFlight { idx: req }),
        "a request is reported done once"
    );
}

#[test]
fn a_slot_is_not_reused_while_the_group_32_earlier_has_writes_in_flight() {
    let fifo = Fifo {
        groups: (0..=SLOTS).map(|_| vec![(0, 8)]).collect(),
    };
    // Two QPs unsplit: groups alternate QPs; group 0's completion is held back.
    let mut c = SendCore::new(QpLayout::one_device(2, false));
    let mut reqs = Vec::new();
    for k in 0..SLOTS as u64 {
        let SendStep::Post { req } = send(&mut c, &fifo, 0, 8) else {
            panic!("group {k} posts")
        };
        let group = owned(&c);
        reqs.push(req);
        if k != 0 {
            c.handle_completion(WrId::Send { seq: group.seq }.encode());
        }
    }
    assert_eq!(
        send(&mut c, &fifo, 0, 8),
        SendStep::Retry(SendWait::SlotBusy { seq: SLOTS as u64 })
    );
    c.handle_completion(WrId::Send { seq: 0 }.encode());
    assert!(matches!(send(&mut c, &fifo, 0, 8), SendStep::Post { .. }));
    assert_eq!(c.take_done(reqs[0]), Ok(Some(Done::one(8))));
}

#[test]
fn a_stale_completion_for_another_group_of_the_slot_is_ignored() {
    let fifo = Fifo {
        groups: vec![vec![(0, 8)]],
    };
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    let SendStep::Post { req, .. } = send(&mut c, &fifo, 0, 8) else {
        panic!()
    };
    c.handle_completion(WrId::Send { seq: SLOTS as u64 }.encode());
    assert_eq!(c.take_done(req), Ok(None));
}

#[test]
fn a_comm_waiting_for_the_clear_to_send_reports_a_stall_that_says_so() {
    let fifo = Fifo { groups: vec![] };
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    c.health.set_stall_threshold(Duration::from_secs(60));
    send(&mut c, &fifo, 0, 8);
    let waiting = c.is_waiting();
    assert_eq!(c.health.check_stall(Duration::from_secs(1), waiting), None);
    send(&mut c, &fifo, 0, 8);
    let waiting = c.is_waiting();
    let stall = c
        .health
        .check_stall(Duration::from_secs(61), waiting)
        .expect("stalled");
    assert_eq!(stall.idle, Duration::from_secs(60));
    assert_eq!(
        c.describe_wait(),
        "a send waits for the receiver's clear-to-send for receive #0 (the receiver has posted 0 receives so far); 0 sends in flight waiting for their write completions"
    );
}

#[test]
fn a_partly_written_group_is_not_opened() {
    // Entry 1 of the group is missing (torn or not yet arrived).
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    let r = c
        .isend(0, 8, 0, &[1; crate::MAX_DEVS], |s, i| {
            (i == 0).then_some(CtsEntry {
                seq: s + 1,
                addr: 1,
                rkeys: [1; crate::MAX_DEVS],
                size: 8,
                tag: 0,
                nreqs: 2,
                idx: 0,
            })
        })
        .unwrap();
    assert_eq!(r, SendStep::Retry(SendWait::ClearToSend { seq: 0 }));
}

#[test]
fn a_failed_comm_refuses_every_later_send() {
    let fifo = Fifo {
        groups: vec![vec![(0, 8)]],
    };
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    c.health.fail(Failure::remote("peer gone"));
    assert!(matches!(
        c.isend(0, 8, 0, &[1; crate::MAX_DEVS], |s, i| fifo.read(s, i)),
        Err(CoreError::Failed(_))
    ));
}

/// A send through the transport's unlocked retry: while [`SendCore::awaited_hint`] names a
/// group whose first entry is not there, the retry is only counted ([`SendCore::add_cts_waits`],
/// as the next locked section does) and answered; else `isend`.
fn send_with_shortcut(c: &mut SendCore, fifo: &Fifo, tag: i32, size: u32) -> SendStep {
    if let Some(seq) = c.awaited_hint() {
        if fifo.read(seq, 0).is_none() {
            c.add_cts_waits(1);
            return SendStep::Retry(SendWait::ClearToSend { seq });
        }
    }
    send(c, fifo, tag, size)
}

#[test]
fn the_retry_shortcut_answers_and_counts_as_isend_does() {
    // Group 0 of two buffers, then group 1 not posted yet: the shortcut is taken before group
    // 0 opens (not there), never while it is open, and again for group 1 (not there).
    let mut fifo = Fifo { groups: vec![] };
    let mut a = SendCore::new(QpLayout::one_device(1, false));
    let mut b = SendCore::new(QpLayout::one_device(1, false));
    let steps = |a: &mut SendCore, b: &mut SendCore, fifo: &Fifo, tag: i32| {
        let (x, y) = (send(a, fifo, tag, 8), send_with_shortcut(b, fifo, tag, 8));
        assert_eq!(x, y);
        assert_eq!(a.health.counters, b.health.counters);
        assert_eq!(a.describe_wait(), b.describe_wait());
        x
    };
    assert_eq!(
        steps(&mut a, &mut b, &fifo, 0),
        SendStep::Retry(SendWait::ClearToSend { seq: 0 })
    );
    fifo.groups.push(vec![(0, 8), (1, 8)]);
    assert!(matches!(
        steps(&mut a, &mut b, &fifo, 0),
        SendStep::Matched { .. }
    ));
    assert_eq!(b.awaited_group(), None, "group 0 is open");
    assert!(matches!(
        steps(&mut a, &mut b, &fifo, 0),
        SendStep::Retry(SendWait::TagAhead { .. })
    ));
    assert!(matches!(
        steps(&mut a, &mut b, &fifo, 1),
        SendStep::Post { .. }
    ));
    assert_eq!(b.awaited_group(), Some(1));
    assert_eq!(
        steps(&mut a, &mut b, &fifo, 0),
        SendStep::Retry(SendWait::ClearToSend { seq: 1 })
    );
}

#[test]
fn the_retry_shortcut_is_not_offered_to_a_failed_stopped_or_busy_comm() {
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    assert_eq!(c.awaited_group(), Some(0));
    c.recovery.set_budget(Duration::from_secs(1));
    c.recovery.stop(Duration::ZERO, "test").unwrap();
    assert_eq!(c.awaited_group(), None, "stopped for recovery");
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    c.health.fail(Failure::remote("peer gone"));
    assert_eq!(c.awaited_group(), None, "failed");
    // Every slot used once, group 0's writes still in flight: group 32's slot is busy.
    let fifo = groups_of(SLOTS + 1, 1, 8);
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    for k in 0..SLOTS as u64 {
        assert!(matches!(send(&mut c, &fifo, 0, 8), SendStep::Post { .. }));
        if k != 0 {
            c.handle_completion(WrId::Send { seq: k }.encode());
        }
    }
    assert_eq!(c.awaited_group(), None, "slot busy");
    c.handle_completion(WrId::Send { seq: 0 }.encode());
    assert_eq!(c.awaited_group(), Some(SLOTS as u64));
}

#[test]
fn the_unlocked_retry_hint_is_withheld_while_a_recovery_is_wanted() {
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    assert_eq!(c.awaited_hint(), Some(0));
    c.recovery.set_budget(Duration::from_secs(1));
    c.recovery.want("test");
    assert_eq!(
        c.awaited_group(),
        Some(0),
        "running: the locked shortcut stays"
    );
    assert_eq!(
        c.awaited_hint(),
        None,
        "the wait hook must drive the recovery"
    );
    assert!(c.hint_withdrawn());
}

#[test]
fn a_hint_is_withdrawn_whenever_it_would_not_be_published() {
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    assert!(!c.hint_withdrawn());
    c.recovery.set_budget(Duration::from_secs(1));
    c.recovery.stop(Duration::ZERO, "test").unwrap();
    assert!(c.hint_withdrawn(), "stopped");
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    c.health.fail(Failure::remote("peer gone"));
    assert!(c.hint_withdrawn(), "failed");
}

#[test]
fn retries_answered_without_the_core_count_as_clear_to_send_waits_and_bring_the_look() {
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    let mut by_core = SendCore::new(QpLayout::one_device(1, false));
    let nothing_yet = Fifo { groups: vec![] };
    for _ in 0..(crate::comm::LIVENESS_EVERY - 1) {
        assert_eq!(
            send(&mut by_core, &nothing_yet, 0, 8),
            SendStep::Retry(SendWait::ClearToSend { seq: 0 })
        );
        assert!(!by_core.health.look_due());
    }
    c.add_cts_waits(crate::comm::LIVENESS_EVERY - 1);
    assert_eq!(c.health.counters, by_core.health.counters);
    assert_eq!(c.describe_wait(), by_core.describe_wait());
    assert!(c.is_waiting());
    assert!(c.health.look_due(), "the next waiting call looks");
    assert!(by_core.health.look_due());
}

// ---- room in the send queues -----------------------------------------------------------

/// Groups `0..n`, each of `bufs` buffers of `size` bytes with tags `0..bufs`.
fn groups_of(n: usize, bufs: usize, size: u32) -> Fifo {
    Fifo {
        groups: (0..n)
            .map(|_| (0..bufs).map(|t| (t as i32, size)).collect())
            .collect(),
    }
}

/// Sends every buffer of the head group; the last step (a post or a retry).
fn send_group(c: &mut SendCore, fifo: &Fifo, seq: usize) -> SendStep {
    let g = &fifo.groups[seq];
    let mut last = None;
    for &(tag, size) in g {
        last = Some(send(c, fifo, tag, size));
    }
    last.expect("a group has buffers")
}

#[test]
fn a_4_gib_request_on_one_qp_waits_for_room_and_is_posted_once_earlier_writes_complete() {
    // Writes of 16 MiB at most: a request of 4 GiB - 1 is 256 writes, and two do not fit in
    // the room of one QP.
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    c.set_plan(16 << 20, crate::plan::AdaptiveRouting::OFF);
    let fifo = groups_of(2, 1, u32::MAX);
    let SendStep::Post { req: first } = send(&mut c, &fifo, 0, u32::MAX) else {
        panic!("the first request fits an empty queue")
    };
    assert_eq!(c.queue_held(0), 256);
    for _ in 0..3 {
        assert_eq!(
            send(&mut c, &fifo, 0, u32::MAX),
            SendStep::Retry(SendWait::QueueFull { seq: 1, qp: 0 })
        );
    }
    assert_eq!(c.in_flight(), 1, "a send waiting for room takes no request");
    assert_eq!(c.health.counters.messages, 1);
    assert_eq!(c.health.counters.queue_full, 3);
    assert!(
        c.health
            .counters
            .summary(true)
            .contains("3 waits for send-queue room")
    );
    assert!(c.describe_wait().contains("room in the send queue of QP 0"));
    c.handle_completion(WrId::Send { seq: 0 }.encode());
    assert_eq!(
        c.queue_held(0),
        0,
        "the signaled write retired the group's writes"
    );
    assert_eq!(c.take_done(first), Ok(Some(Done::one(u32::MAX))));
    let SendStep::Post { req } = send(&mut c, &fifo, 0, u32::MAX) else {
        panic!("the second request is posted once the first one's writes completed")
    };
    assert_eq!(c.queue_held(0), 256);
    c.handle_completion(WrId::Send { seq: 1 }.encode());
    assert_eq!(c.take_done(req), Ok(Some(Done::one(u32::MAX))));
}

#[test]
fn eight_groups_of_the_largest_buffers_fit_one_qp_and_the_ninth_waits_for_room() {
    // 1 GiB writes: a group of 8 buffers of 4 GiB - 1 is 8 x 4 pieces + its final = 33.
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    let fifo = groups_of(9, MAX_RECVS, u32::MAX);
    for seq in 0..8 {
        assert!(matches!(
            send_group(&mut c, &fifo, seq),
            SendStep::Post { .. }
        ));
    }
    assert_eq!(c.queue_held(0), 8 * 33);
    assert_eq!(
        send_group(&mut c, &fifo, 8),
        SendStep::Retry(SendWait::QueueFull { seq: 8, qp: 0 }),
        "the ninth group's last send waits: 264 + 33 > 288"
    );
    c.handle_completion(WrId::Send { seq: 0 }.encode());
    let last = MAX_RECVS as i32 - 1;
    assert!(matches!(
        send(&mut c, &fifo, last, u32::MAX),
        SendStep::Post { .. }
    ));
    assert_eq!(c.queue_held(0), 8 * 33);
    assert!(c.queue_held(0) <= crate::plan::SEND_ROOM);
}

#[test]
fn thirty_two_groups_of_eight_buffers_in_flight_fit_without_waiting_for_room() {
    for (nqps, split) in [(1, false), (2, false), (4, true), (128, true)] {
        let mut c = SendCore::new(QpLayout::one_device(nqps, split));
        let fifo = groups_of(SLOTS + 1, MAX_RECVS, 1 << 20);
        for seq in 0..SLOTS {
            let step = send_group(&mut c, &fifo, seq);
            assert!(
                matches!(step, SendStep::Post { .. }),
                "{nqps} QPs split {split}: group {seq}: {step:?}"
            );
        }
        let held: u32 = (0..nqps).map(|q| c.queue_held(q)).max().unwrap();
        assert!(held <= crate::plan::SEND_ROOM, "{nqps} QPs: {held}");
        if nqps == 1 {
            assert_eq!(
                held,
                crate::plan::SEND_ROOM,
                "32 x (8 + 1): exactly the room"
            );
        }
        assert_eq!(
            send(&mut c, &fifo, 0, 1 << 20),
            SendStep::Retry(SendWait::SlotBusy { seq: SLOTS as u64 }),
            "the 33rd group waits for its slot, never for room"
        );
        for seq in 0..SLOTS as u64 {
            for _ in c.layout.group_qps(seq) {
                c.handle_completion(WrId::Send { seq }.encode());
            }
        }
        assert!(
            (0..nqps).all(|q| c.queue_held(q) == 0),
            "all room given back"
        );
    }
}

/// One step of [`the_straight_path_leaves_the_state_and_writes_of_the_general_path`]: a send
/// (tag, size), or the completions of the oldest posted group.
#[derive(Debug, Clone, Copy)]
enum Op {
    Send(i32, u32),
    Complete,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        3 => (0i32..3, proptest::sample::select(vec![0u32, 1, 8, 16, 17, 40, 5000]))
            .prop_map(|(t, s)| Op::Send(t, s)),
        1 => Just(Op::Complete),
    ]
}

/// The group the last post wrote, as the transport writes it: the straight path's one write,
/// or the general plan of the core's ready group; with the group's `wr_id`.
fn written(c: &SendCore, max_write: u32, ar: AdaptiveRouting) -> (Vec<crate::plan::Write>, u64) {
    if let Some((w, wr_id)) = c.lone_write() {
        return (vec![w], wr_id);
    }
    let g = c.ready_group();
    let sizes = crate::plan::SizesSlot {
        local_addr: 0x5000,
        lkeys: [3; crate::MAX_DEVS],
        remote_addr: 0x6000,
        rkeys: [4; crate::MAX_DEVS],
    };
    let w = crate::plan::plan_group(g.seq, g.items(), &c.layout, sizes, max_write, ar);
    (w, g.wr_id())
}

proptest::proptest! {
    #[test]
    fn the_straight_path_leaves_the_state_and_writes_of_the_general_path(
        (nqps, split) in proptest::prop_oneof![(1usize..=4, proptest::strategy::Just(false)), (1usize..=2, proptest::bool::ANY)],
        max_write in proptest::sample::select(vec![1u32, 8, 16, 4096, crate::plan::MIN_WRITE_LIMIT]),
        ar in proptest::option::of(proptest::sample::select(vec![0u32, 8, 16, 4096])),
        refuse in proptest::bool::ANY,
        groups in proptest::collection::vec(
            proptest::collection::vec((0i32..3, proptest::sample::select(vec![0u32, 8, 16, 32])), 1..=3),
            40..=48,
        ),
        ops in proptest::collection::vec(op(), 1..300),
    ) {
        let ar = ar.map_or(AdaptiveRouting::OFF, AdaptiveRouting::above);
        let oversize = if refuse { Oversize::Refuse } else { Oversize::Truncate };
        let fifo = Fifo { groups };
        let layout = QpLayout::one_device(nqps, split);
        let mut cores = [SendCore::new(layout), SendCore::new(layout).general_only()];
        for c in &mut cores {
            c.set_plan(max_write, ar);
            c.set_oversize(oversize);
        }
        // Posted groups not yet delivered: their `wr_id` and the writes with immediates.
        let mut posted = std::collections::VecDeque::new();
        for op in ops {
            match op {
                Op::Send(tag, size) => {
                    let [a, b] = &mut cores;
                    let read = |s, i| fifo.read(s, i);
                    let (sa, sb) = (
                        a.isend(tag, size, 0x42, &[1; crate::MAX_DEVS], read),
                        b.isend(tag, size, 0x42, &[1; crate::MAX_DEVS], read),
                    );
                    proptest::prop_assert_eq!(&sa, &sb);
                    if sa.is_err() {
                        return Ok(());
                    }
                    if let Ok(SendStep::Post { .. }) = sa {
                        proptest::prop_assert!(b.lone_write().is_none());
                        let (ga, gb) = (a.ready_group(), b.ready_group());
                        proptest::prop_assert_eq!(ga, gb);
                        let (wa, ida) = written(a, max_write, ar);
                        let (wb, idb) = written(b, max_write, ar);
                        proptest::prop_assert_eq!(&wa, &wb);
                        proptest::prop_assert_eq!(ida, idb);
                        let signaled = wa.iter().filter(|w| w.imm.is_some()).count();
                        posted.push_back((ida, signaled));
                    }
                }
                Op::Complete => {
                    if let Some((wr_id, n)) = posted.pop_front() {
                        for c in &mut cores {
                            for _ in 0..n {
                                c.handle_completion(wr_id);
                            }
                        }
                    }
                }
            }
            let [a, b] = &cores;
            proptest::prop_assert_eq!(a.health.counters, b.health.counters);
            proptest::prop_assert_eq!(a.head_seq(), b.head_seq());
            proptest::prop_assert_eq!(a.in_flight(), b.in_flight());
            proptest::prop_assert_eq!(a.last_wait, b.last_wait);
            proptest::prop_assert_eq!(a.truncation_note, b.truncation_note);
            for q in 0..nqps {
                proptest::prop_assert_eq!(a.queue_held(q), b.queue_held(q));
            }
            for r in 0..SEND_REQS as u32 {
                proptest::prop_assert_eq!(a.is_pending(r), b.is_pending(r));
            }
            for (fa, fb) in a.inflight.iter().zip(&b.inflight) {
                if fa.remaining > 0 || fb.remaining > 0 {
                    proptest::prop_assert_eq!(
                        (fa.seq, fa.remaining, fa.n, fa.replay, fa.held_on),
                        (fb.seq, fb.remaining, fb.n, fb.replay, fb.held_on)
                    );
                    proptest::prop_assert_eq!(&fa.items[..fa.n], &fb.items[..fb.n]);
                    proptest::prop_assert_eq!(&fa.reqs[..fa.n], &fb.reqs[..fb.n]);
                }
            }
        }
    }
}

#[test]
fn a_lone_write_on_a_full_queue_waits_for_room_as_the_general_path_does() {
    // Nine groups of 32 one-byte pieces fill QP 0's room; the tenth, one byte in one write
    // (the straight path's), waits until the first group is delivered.
    let mut groups = vec![vec![(0, 32)]; 9];
    groups.push(vec![(0, 8)]);
    let fifo = Fifo { groups };
    for mut c in [
        SendCore::new(QpLayout::one_device(1, false)),
        SendCore::new(QpLayout::one_device(1, false)).general_only(),
    ] {
        c.set_plan(1, AdaptiveRouting::OFF);
        for _ in 0..9 {
            send_post(&mut c, &fifo, 0, 32);
        }
        assert_eq!(c.queue_held(0), crate::plan::SEND_ROOM);
        assert_eq!(
            send(&mut c, &fifo, 0, 1),
            SendStep::Retry(SendWait::QueueFull { seq: 9, qp: 0 })
        );
        c.handle_completion(WrId::Send { seq: 0 }.encode());
        assert!(matches!(send(&mut c, &fifo, 0, 1), SendStep::Post { .. }));
        assert_eq!(c.queue_held(0), crate::plan::SEND_ROOM - 32 + 1);
    }
}

#[test]
fn only_a_send_write_of_the_current_epoch_completes_its_group_and_other_work_is_only_counted() {
    let fifo = Fifo {
        groups: vec![vec![(0, 8)]],
    };
    let mut c = SendCore::new(QpLayout::one_device(1, false));
    let SendStep::Post { req } = send(&mut c, &fifo, 0, 8) else {
        panic!("a lone buffer posts at once")
    };
    let completions = |c: &SendCore| c.health.counters.completions;
    c.handle_completion(WrId::Send { seq: 0 }.encode_in(1));
    assert_eq!(
        (c.take_ready_size(req), completions(&c)),
        (None, 0),
        "another epoch"
    );
    c.handle_completion(WrId::Cts { seq: 0 }.encode());
    assert_eq!(
        (c.take_ready_size(req), completions(&c)),
        (None, 1),
        "other work of this epoch is counted, and completes nothing"
    );
    c.handle_completion(WrId::Send { seq: 0 }.encode());
    assert_eq!(completions(&c), 2);
    assert!(!c.is_pending(req));
    assert_eq!(c.take_ready_size(req), Some(8), "a send reports its size");
    assert_eq!(c.take_ready_size(req), None, "once");
    assert_eq!(c.in_flight(), 0);
}
