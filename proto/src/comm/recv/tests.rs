//! Unit tests of the receive side: posting, coalesced clear-to-send writes, immediates adding
//! up to finished requests, and flushes.

use super::*;
use crate::MAX_DEVS;

fn bufs(n: usize) -> Vec<RecvBuf> {
    (0..n)
        .map(|i| RecvBuf {
            addr: 0x1000 * (i as u64 + 1),
            size: 64,
            tag: i as i32,
            rkeys: [3; MAX_DEVS],
        })
        .collect()
}

fn post(c: &mut RecvCore, n: usize) -> PostRecv {
    match c.irecv(&bufs(n)).unwrap() {
        RecvStep::Post(p) => p,
        RecvStep::Retry => panic!("expected a post"),
    }
}

#[test]
fn a_receive_becomes_one_entry_per_buffer_with_its_group_sequence() {
    let mut c = RecvCore::new(QpLayout::one_device(1, false));
    post(&mut c, 1);
    let b = bufs(3);
    let RecvStep::Post(p) = c.irecv(&b).unwrap() else {
        panic!("expected a post")
    };
    assert_eq!(p.seq, 1);
    assert_eq!(p.entries(&b).count(), 3);
    for (i, e) in p.entries(&b).enumerate() {
        assert_eq!((e.seq, e.nreqs, e.idx), (2, 3, i as u16));
    }
}

#[test]
fn groups_use_one_qp_in_turn_or_every_qp_when_split() {
    let mut c = RecvCore::new(QpLayout::one_device(4, false));
    let qps: Vec<_> = (0..5).map(|_| post(&mut c, 1).qps).collect();
    assert_eq!(qps, vec![0..1, 1..2, 2..3, 3..4, 0..1]);
    let mut c = RecvCore::new(QpLayout::one_device(4, true));
    assert_eq!(post(&mut c, 1).qps, 0..4);
}

#[test]
fn the_thirty_third_outstanding_receive_is_retried() {
    let mut c = RecvCore::new(QpLayout::one_device(1, false));
    let first = post(&mut c, 1);
    for _ in 1..SLOTS {
        post(&mut c, 1);
    }
    assert_eq!(c.irecv(&bufs(1)), Ok(RecvStep::Retry));
    c.handle_completion(first.recv_wr_id(), 5, |_, _| unreachable!());
    assert_eq!(c.take_done(first.req), Ok(Some(Done::one(5))));
    assert!(matches!(c.irecv(&bufs(1)), Ok(RecvStep::Post(_))));
}

#[test]
fn a_receive_completed_by_the_last_poll_before_a_failure_is_reported_done() {
    let mut c = RecvCore::new(QpLayout::one_device(1, false));
    let polled = post(&mut c, 1);
    let pending = post(&mut c, 1);
    // The periodic look found the peer gone: the last poll delivers the first completion,
    // then the comm fails.
    c.handle_completion(polled.recv_wr_id(), 48, |_, _| unreachable!());
    let f = crate::comm::Failure::remote("peer closed the connection");
    c.health.fail(f.clone());
    assert_eq!(c.test(polled.req), Ok(Some(Done::one(48))));
    assert_eq!(c.test(pending.req), Err(CoreError::Failed(f)));
    assert_eq!(
        c.test(polled.req),
        Err(CoreError::NotInFlight { idx: polled.req }),
        "reported once, then freed"
    );
}

#[test]
fn a_pending_receive_of_a_live_comm_is_not_done_yet() {
    let mut c = RecvCore::new(QpLayout::one_device(1, false));
    let p = post(&mut c, 1);
    assert_eq!(c.test(p.req), Ok(None));
}

#[test]
fn a_split_receive_adds_the_immediates_of_every_qp() {
    let mut c = RecvCore::new(QpLayout::one_device(3, true));
    let p = post(&mut c, 1);
    for imm in [128, 128, 44] {
        assert!(c.is_pending(p.req));
        assert_eq!(c.take_done(p.req), Ok(None));
        c.handle_completion(p.recv_wr_id(), imm, |_, _| unreachable!());
    }
    assert!(!c.is_pending(p.req), "done is not pending");
    assert_eq!(c.take_done(p.req), Ok(Some(Done::one(300))));
    assert!(!c.is_pending(p.req), "a freed request is not pending");
}

#[test]
fn immediates_of_a_receive_of_nearly_4_gib_add_up_without_overflow() {
    // u32::MAX bytes split over 4 QPs: three chunks of 1 GiB and the rest.
    let mut c = RecvCore::new(QpLayout::one_device(4, true));
    let p = post(&mut c, 1);
    let chunks: Vec<u32> = crate::plan::split_chunks(u32::MAX, 4)
        .map(|(_, _, len)| len)
        .collect();
    for imm in chunks {
        c.handle_completion(p.recv_wr_id(), imm, |_, _| unreachable!());
    }
    assert_eq!(c.take_done(p.req), Ok(Some(Done::one(u32::MAX))));
    // Immediates that claim more than a request can carry stay at the maximum.
    let p = post(&mut c, 1);
    for _ in 0..4 {
        c.handle_completion(p.recv_wr_id(), 1 << 31, |_, _| unreachable!());
    }
    assert_eq!(c.take_done(p.req), Ok(Some(Done::one(u32::MAX))));
}

#[test]
fn a_grouped_receive_reads_its_sizes_once_when_it_finishes() {
    let mut c = RecvCore::new(QpLayout::one_device(2, true));
    let p = post(&mut c, 3);
    let mut reads = 0;
    for _ in 0..2 {
        c.handle_completion(p.recv_wr_id(), 0, |seq, n| {
            reads += 1;
            assert_eq!((seq, n), (0, 3));
            [1, 0, 3, 0, 0, 0, 0, 0]
        });
    }
    assert_eq!(reads, 1);
    let d = c.take_done(p.req).unwrap().unwrap();
    assert_eq!(&d.sizes[..d.n], &[1, 0, 3]);
    let n = c.health.counters;
    assert_eq!((n.messages, n.bytes, n.completions), (3, 4, 2));
}

#[test]
fn group_sizes_outside_one_to_eight_are_refused() {
    let mut c = RecvCore::new(QpLayout::one_device(1, false));
    assert!(matches!(c.irecv(&[]), Err(CoreError::Usage(_))));
    assert!(matches!(c.irecv(&bufs(9)), Err(CoreError::Usage(_))));
}

/// Finishes group `p` (one immediate per QP it uses).
fn finish(c: &mut RecvCore, p: &PostRecv) {
    for _ in p.qps.clone() {
        c.handle_completion(p.recv_wr_id(), 1, |_, _| [0; MAX_RECVS]);
    }
}

#[test]
fn take_ready_frees_a_finished_receive_or_flush_and_leaves_anything_else() {
    let mut c = RecvCore::new(QpLayout::one_device(1, false));
    let p = post(&mut c, 1);
    assert_eq!(c.take_ready(p.req), None, "pending");
    assert!(c.is_pending(p.req), "and still in flight");
    c.handle_completion(p.recv_wr_id(), 9, |_, _| unreachable!());
    assert_eq!(c.take_ready(p.req), Some(Done::one(9)));
    assert_eq!(c.take_ready(p.req), None, "freed once");
    assert_eq!(
        c.take_done(p.req),
        Err(CoreError::NotInFlight { idx: p.req })
    );
    let f = c.begin_flush(1).unwrap();
    assert_eq!(c.take_ready(f), None);
    c.handle_completion(RecvCore::flush_wr_id(f), 0, |_, _| unreachable!());
    assert_eq!(c.take_ready(f), Some(Done::NOTHING));
    assert_eq!(c.take_ready(RECV_REQS as u32 + 5), None, "out of range");
}

#[test]
fn take_ready_with_hands_a_finished_result_on_in_place_and_frees_it_once() {
    let mut c = RecvCore::new(QpLayout::one_device(1, false));
    let p = post(&mut c, 1);
    let mut got = None;
    assert!(!c.take_ready_with(p.req, |d| got = Some(*d)), "pending");
    assert_eq!(got, None, "nothing handed on while pending");
    c.handle_completion(p.recv_wr_id(), 9, |_, _| unreachable!());
    assert!(c.take_ready_with(p.req, |d| got = Some(*d)));
    assert_eq!(got, Some(Done::one(9)));
    assert!(!c.take_ready_with(p.req, |_| unreachable!()), "freed once");
    let f = c.begin_flush(1).unwrap();
    assert!(!c.take_ready_with(f, |_| unreachable!()));
    c.handle_completion(RecvCore::flush_wr_id(f), 0, |_, _| unreachable!());
    assert!(c.take_ready_with(f, |d| got = Some(*d)));
    assert_eq!(got, Some(Done::NOTHING));
    assert!(!c.take_ready_with(RECV_REQS as u32 + 5, |_| unreachable!()));
}

#[test]
fn a_receive_on_an_idle_comm_is_announced_at_once() {
    let mut c = RecvCore::new(QpLayout::one_device(1, false));
    let p = post(&mut c, 2);
    let w = p.cts.clone().expect("written at once");
    assert_eq!((w.from, w.to), (0, 1));
    assert_eq!(w.ranges().collect::<Vec<_>>(), vec![0..2 * ENTRY_SIZE]);
    finish(&mut c, &p);
    assert_eq!(c.take_done(p.req).unwrap().unwrap().n, 2);
    // Idle again: the next one goes at once too (a ping-pong never waits for a call).
    assert!(post(&mut c, 1).cts.is_some());
}

#[test]
fn receives_posted_back_to_back_are_announced_in_writes_that_double() {
    let mut c = RecvCore::new(QpLayout::one_device(1, false));
    let written: Vec<Option<(u64, u64)>> = (0..SLOTS)
        .map(|_| post(&mut c, 3).cts.map(|w| (w.from, w.to)))
        .collect();
    let writes: Vec<(u64, u64)> = written.iter().flatten().copied().collect();
    // Due when as many groups are staged as the sender holds: 1, 1, 2, 4, 8, 16 groups.
    assert_eq!(
        writes,
        vec![(0, 1), (1, 2), (2, 4), (4, 8), (8, 16), (16, 32)]
    );
    assert_eq!(c.staged(), 0);
    assert_eq!(c.health.counters.cts_writes, 6);
}

#[test]
fn a_coalesced_write_covers_whole_slots_up_to_the_last_groups_entries() {
    let mut c = RecvCore::new(QpLayout::one_device(1, false));
    for _ in 0..2 {
        post(&mut c, 1);
    }
    assert!(
        post(&mut c, 8).cts.is_none(),
        "1 staged, the sender holds 2"
    );
    let w = post(&mut c, 3).cts.expect("2 staged, the sender holds 2");
    let slot = MAX_RECVS * ENTRY_SIZE;
    assert_eq!((w.from, w.to), (2, 4));
    assert_eq!(
        w.ranges().collect::<Vec<_>>(),
        vec![2 * slot..3 * slot + 3 * ENTRY_SIZE],
        "slot 2 whole, then the last group's 3 entries"
    );
}

#[test]
fn staged_entries_wait_while_the_sender_holds_more_and_go_out_when_it_holds_as_many() {
    let mut c = RecvCore::new(QpLayout::one_device(1, false));
    let posted: Vec<PostRecv> = (0..8).map(|_| post(&mut c, 1)).collect();
    assert_eq!((c.supply(), c.staged()), (8, 0));
    let more: Vec<PostRecv> = (0..2).map(|_| post(&mut c, 1)).collect();
    assert!(more.iter().all(|p| p.cts.is_none()));
    for (i, p) in posted.iter().enumerate().take(5) {
        assert_eq!(c.cts_due(), None, "2 staged, the sender holds {}", 8 - i);
        finish(&mut c, p);
    }
    assert_eq!(c.supply(), 3);
    assert_eq!(c.cts_due(), None);
    finish(&mut c, &posted[5]);
    let w = c.cts_due().expect("2 staged, the sender holds 2");
    assert_eq!((w.from, w.to), (8, 10));
}

#[test]
fn a_ping_pong_with_two_receives_ahead_writes_each_receive_at_once() {
    let mut c = RecvCore::new(QpLayout::one_device(1, false));
    let mut q: std::collections::VecDeque<PostRecv> = (0..2).map(|_| post(&mut c, 1)).collect();
    for _ in 0..50 {
        let p = q.pop_front().unwrap();
        finish(&mut c, &p);
        c.take_done(p.req).unwrap().unwrap();
        let next = post(&mut c, 1);
        assert!(
            next.cts.is_some(),
            "1 staged, the sender holds 1: written at once"
        );
        q.push_back(next);
    }
}

#[test]
fn with_thirty_two_kept_posted_each_write_carries_about_sixteen_groups() {
    let mut c = RecvCore::new(QpLayout::one_device(1, false));
    let mut q: std::collections::VecDeque<PostRecv> = (0..SLOTS).map(|_| post(&mut c, 1)).collect();
    let mut writes = 0;
    for _ in 0..1000 {
        writes += usize::from(c.cts_due().is_some());
        assert!(
            c.supply() >= (SLOTS / 2) as u64 - 1,
            "the sender is never starved"
        );
        let p = q.pop_front().unwrap();
        finish(&mut c, &p);
        c.take_done(p.req).unwrap().unwrap();
        let next = post(&mut c, 1);
        writes += usize::from(next.cts.is_some());
        q.push_back(next);
    }
    assert!(
        (55..=70).contains(&writes),
        "{writes} writes for 1000 receives"
    );
}

#[test]
fn a_waiting_call_writes_every_staged_entry_whatever_the_supply() {
    let mut c = RecvCore::new(QpLayout::one_device(1, false));
    for _ in 0..10 {
        post(&mut c, 1);
    }
    assert_eq!((c.supply(), c.staged()), (8, 2));
    assert_eq!(c.cts_due(), None);
    let w = c.cts_flush().expect("forced");
    assert_eq!((w.from, w.to), (8, 10));
    assert_eq!(c.cts_flush(), None);
}

#[test]
fn a_run_that_wraps_around_the_ring_is_two_ranges() {
    let mut c = RecvCore::new(QpLayout::one_device(1, false));
    // Move the ring to slot 30: 30 groups posted and finished one at a time.
    for _ in 0..30 {
        let p = post(&mut c, 1);
        assert!(p.cts.is_some());
        finish(&mut c, &p);
        c.take_done(p.req).unwrap().unwrap();
    }
    // Slots 30 and 31 written one by one; then 33 (slot 1) waits behind 32 (slot 0),
    // and their write wraps after 31 only if a run spans the end: stage 31..34.
    let p30 = post(&mut c, 1);
    assert!(p30.cts.is_some());
    // Sender holds 1 (group 30); stage groups 31, 32, 33 with two more held back.
    let p31 = post(&mut c, 2);
    assert!(p31.cts.is_some(), "1 staged, the sender holds 1");
    assert!(post(&mut c, 2).cts.is_none());
    let w = post(&mut c, 2).cts.expect("2 staged, the sender holds 2");
    assert_eq!((w.from, w.to), (32, 34));
    assert_eq!(w.ranges().count(), 1, "slots 0 and 1 do not wrap");
    for _ in 0..3 {
        post(&mut c, 2);
    }
    finish(&mut c, &p30);
    finish(&mut c, &p31);
    // Now force a run that wraps: finish everything, move to slot 31, stage 31..34.
    let slot = MAX_RECVS * ENTRY_SIZE;
    let mut c = RecvCore::new(QpLayout::one_device(1, false));
    for _ in 0..31 {
        let p = post(&mut c, 1);
        finish(&mut c, &p);
        c.take_done(p.req).unwrap().unwrap();
    }
    for _ in 0..3 {
        post(&mut c, 1);
    }
    let (supply, staged) = (c.supply(), c.staged());
    assert!(staged > 0, "supply {supply}, staged {staged}");
    let w = c.cts_flush().unwrap();
    let r: Vec<_> = w.ranges().collect();
    if w.from % SLOTS as u64 > (w.to - 1) % SLOTS as u64 {
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].end, FIFO_BYTES);
        assert_eq!(r[1].start, 0);
    }
    assert!(
        r.iter()
            .all(|x| x.len() <= FIFO_BYTES && x.start % slot == 0)
    );
}

#[test]
fn runs_of_every_length_from_every_slot_cover_their_groups_without_overlapping() {
    let slot = MAX_RECVS * ENTRY_SIZE;
    for from in 0..2 * SLOTS as u64 {
        for len in 1..=SLOTS as u64 {
            for last_n in [1, MAX_RECVS] {
                let w = CtsWrite::new(from, from + len, last_n, false);
                let r: Vec<_> = w.ranges().collect();
                let bytes: usize = r.iter().map(|x| x.len()).sum();
                assert_eq!(bytes, (len as usize - 1) * slot + last_n * ENTRY_SIZE);
                assert!(r.iter().all(|x| x.end <= FIFO_BYTES));
                assert_eq!(r[0].start, entry_offset(from, 0));
                if r.len() == 2 {
                    assert!(r[1].start == 0 && r[1].end <= r[0].start, "{r:?}");
                }
            }
        }
    }
}

#[test]
fn one_clear_to_send_write_in_sixteen_is_signaled() {
    let mut c = RecvCore::new(QpLayout::one_device(1, false));
    let mut signaled = Vec::new();
    for i in 0..40 {
        let p = post(&mut c, 1);
        let w = p.cts.clone().expect("idle comm: written at once");
        if w.signaled {
            signaled.push(i);
        }
        finish(&mut c, &p);
        c.take_done(p.req).unwrap().unwrap();
    }
    assert_eq!(signaled, vec![0, 16, 32]);
}

#[test]
fn a_failed_comm_writes_no_clear_to_send() {
    let mut c = RecvCore::new(QpLayout::one_device(1, false));
    post(&mut c, 1);
    post(&mut c, 1);
    c.health.fail(crate::comm::Failure::remote("gone"));
    assert_eq!(c.cts_flush(), None);
}

#[test]
fn a_flush_with_a_full_table_is_an_error_not_a_null_request() {
    let mut c = RecvCore::new(QpLayout::one_device(1, false));
    for _ in 0..RECV_REQS {
        c.begin_flush(1).unwrap();
    }
    assert_eq!(
        c.begin_flush(1),
        Err(CoreError::TableFull {
            capacity: RECV_REQS
        })
    );
}

#[test]
fn a_flush_over_two_devices_is_done_only_when_both_reads_completed() {
    let mut c = RecvCore::new(QpLayout::new(1, false, 2, 2));
    let f = c.begin_flush(2).unwrap();
    c.handle_completion(RecvCore::flush_wr_id(f), 0, |_, _| unreachable!());
    assert_eq!(c.take_done(f).unwrap(), None);
    c.handle_completion(RecvCore::flush_wr_id(f), 0, |_, _| unreachable!());
    assert_eq!(c.take_done(f).unwrap(), Some(Done::NOTHING));
}

#[test]
fn a_flush_is_done_on_its_completion_and_reports_no_sizes() {
    let mut c = RecvCore::new(QpLayout::one_device(1, false));
    let f = c.begin_flush(1).unwrap();
    assert_eq!(c.take_done(f), Ok(None));
    c.handle_completion(RecvCore::flush_wr_id(f), 0, |_, _| unreachable!());
    assert_eq!(c.take_done(f), Ok(Some(Done::NOTHING)));
}

#[test]
fn the_qps_a_group_uses_are_the_layouts_for_every_shape_and_sequence() {
    for nqps in 1..=4 {
        for split in [false, true] {
            for local in 1..=3 {
                for remote in 1..=3 {
                    let layout = QpLayout::new(nqps, split, local, remote);
                    let c = RecvCore::new(layout);
                    for seq in 0..40 {
                        assert_eq!(
                            c.group_qps(seq),
                            layout.group_qps(seq),
                            "{layout:?} group {seq}"
                        );
                    }
                }
            }
        }
    }
}
