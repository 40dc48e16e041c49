//! A sender core and a receiver core wired together through a fake RDMA "wire", with no verbs
//! and no sockets: RDMA writes copy bytes in one shared arena, each QP delivers in order, QPs
//! and completion queues deliver in whatever order the schedule picks.
//!
//! NCCL's rules drive the traffic: every tag has its own sender that sends its messages in
//! order, tags interleave freely (one may run ahead of the others), receives are posted ahead
//! up to 32 groups, groups hold repeated tags and zero-byte members. Whatever the interleaving,
//! every message must land in the buffer NCCL's matching rule assigns it (the `j`-th send of tag
//! `t` fills the `j`-th posted buffer of tag `t`), byte for byte, and both sides must report the
//! right sizes. Some runs limit writes to a few bytes, so every message goes as plain pieces
//! ended by one write with immediate, as messages above the port's write limit do.

// The fake wire is test code: a broken invariant is a test failure, so it panics.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use ferro_proto::comm::recv::{CtsWrite, PostRecv, RecvBuf, RecvCore, RecvStep};
use ferro_proto::comm::send::{SEND_REQS, SendCore, SendStep};
use ferro_proto::comm::{CoreError, Done};
use ferro_proto::fifo::{self, CtsEntry, ENTRY_SIZE, FIFO_BYTES, SIZES_BYTES};
use ferro_proto::plan::{self, AdaptiveRouting, QpLayout, SizesSlot};
use ferro_proto::{MAX_DEVS, MAX_RECVS, SLOTS};
use proptest::prelude::*;
use std::collections::VecDeque;

/// One buffer of a planned receive group: its tag, its capacity and the size the sender
/// offers (larger than the capacity: truncated to it, as NCCL's own transport does).
#[derive(Debug, Clone, Copy)]
struct Member {
    tag: i32,
    capacity: u32,
    sent: u32,
}

impl Member {
    /// The bytes that land: the offered size, cut to the posted buffer.
    fn placed(&self) -> u32 {
        self.sent.min(self.capacity)
    }
}

/// A byte arena standing for both hosts' registered memory; addresses are offsets into it.
struct Arena(Vec<u8>);

impl Arena {
    fn copy(&mut self, from: u64, to: u64, len: u32) {
        let (f, t, l) = (from as usize, to as usize, len as usize);
        self.0.copy_within(f..f + l, t);
    }
    fn read<const N: usize>(&self, at: usize) -> [u8; N] {
        let mut b = [0u8; N];
        b.copy_from_slice(&self.0[at..at + N]);
        b
    }
}

/// An RDMA write in flight on one QP.
#[derive(Debug, Clone, Copy)]
struct Op {
    from: u64,
    to: u64,
    len: u32,
    /// `Some` for writes with immediate (signaled on the sender, consume a receive).
    imm: Option<u32>,
    seq: u64,
}

/// The fake wire: both cores, the arena, per-QP queues in each direction.
struct Wire {
    /// The sender's view of the QPs (the receiver's has the member counts swapped).
    layout: QpLayout,
    nqps: usize,
    /// The most one write carries (the plan cuts longer chunks into pieces).
    max_write: u32,
    /// Whether a lone buffer's immediates travel apart from its data.
    ar: AdaptiveRouting,
    arena: Arena,
    send: SendCore,
    recv: RecvCore,
    /// Sender's FIFO, receiver's sizes FIFO, sender's sizes staging, receiver's clear-to-send
    /// staging (arena offsets).
    fifo: u64,
    cts_stage: u64,
    sizes: u64,
    sizes_stage: u64,
    /// Sender -> receiver writes, per QP, in order.
    data: Vec<VecDeque<Op>>,
    /// Receiver -> sender CTS writes (bytes captured at post time), in order on QP 0.
    cts: VecDeque<(usize, Vec<u8>)>,
    /// Receives posted on each QP (their wr_ids), consumed in order by immediates.
    recv_wrs: Vec<VecDeque<(u64, u64)>>,
    /// Sender completions not yet polled, per QP (acknowledgements may lag).
    send_cq: Vec<VecDeque<u64>>,
    /// The sender's send queue of each QP: work requests posted and not yet retired by a
    /// polled signaled completion, and each group's share of them in order.
    sq_held: Vec<u32>,
    sq_groups: Vec<VecDeque<u32>>,
    /// The plan: receive groups, and where each group's buffers live.
    groups: Vec<Vec<Member>>,
    buf_addr: Vec<Vec<u64>>,
    posted: usize,
    /// Per tag: the (group, member) destinations of its sends, in order, and how many were sent.
    per_tag: Vec<Vec<(usize, usize)>>,
    next_of_tag: Vec<usize>,
    /// Source address of the message for (group, member).
    src_addr: Vec<Vec<u64>>,
    recv_reqs: VecDeque<(u32, usize)>,
    send_reqs: Vec<(u32, u32)>,
    recv_done: Vec<Option<Done>>,
    sends_done: usize,
    retries: usize,
    cts_writes: usize,
}

fn pattern(group: usize, member: usize, i: usize) -> u8 {
    (group * 31 + member * 7 + i * 13 + 1) as u8
}

impl Wire {
    fn new(nqps: usize, split: bool, groups: Vec<Vec<Member>>, tags: usize) -> Wire {
        Wire::with_layout(QpLayout::one_device(nqps, split), groups, tags)
    }

    /// A connection whose sides are (virtual) devices of `layout.local_devs` (sender) and
    /// `layout.remote_devs` (receiver) members.
    fn with_layout(layout: QpLayout, groups: Vec<Vec<Member>>, tags: usize) -> Wire {
        let nqps = layout.nqps;
        let recv_layout = QpLayout {
            local_devs: layout.remote_devs,
            remote_devs: layout.local_devs,
            ..layout
        };
        let mut next = 0u64;
        let mut take = |len: usize| {
            let a = next;
            next += len.max(1).next_multiple_of(64) as u64;
            a
        };
        let fifo = take(FIFO_BYTES);
        let sizes = take(SIZES_BYTES);
        let sizes_stage = take(SIZES_BYTES);
        let cts_stage = take(FIFO_BYTES);
        let buf_addr: Vec<Vec<u64>> = groups
            .iter()
            .map(|g| g.iter().map(|m| take(m.capacity as usize)).collect())
            .collect();
        let src_addr: Vec<Vec<u64>> = groups
            .iter()
            .map(|g| g.iter().map(|m| take(m.sent as usize)).collect())
            .collect();
        let mut arena = Arena(vec![0u8; next as usize]);
        for (gi, g) in groups.iter().enumerate() {
            for (mi, m) in g.iter().enumerate() {
                let a = src_addr[gi][mi] as usize;
                for i in 0..m.sent as usize {
                    arena.0[a + i] = pattern(gi, mi, i);
                }
            }
        }
        let mut per_tag = vec![Vec::new(); tags];
        for (gi, g) in groups.iter().enumerate() {
            for (mi, m) in g.iter().enumerate() {
                per_tag[m.tag as usize].push((gi, mi));
            }
        }
        Wire {
            layout,
            nqps,
            max_write: u32::MAX,
            ar: AdaptiveRouting::OFF,
            arena,
            send: SendCore::new(layout),
            recv: RecvCore::new(recv_layout),
            fifo,
            cts_stage,
            sizes,
            sizes_stage,
            data: vec![VecDeque::new(); nqps],
            cts: VecDeque::new(),
            recv_wrs: vec![VecDeque::new(); nqps],
            send_cq: vec![VecDeque::new(); nqps],
            sq_held: vec![0; nqps],
            sq_groups: vec![VecDeque::new(); nqps],
            recv_done: vec![None; groups.len()],
            groups,
            buf_addr,
            posted: 0,
            next_of_tag: vec![0; tags],
            per_tag,
            src_addr,
            recv_reqs: VecDeque::new(),
            send_reqs: Vec::new(),
            sends_done: 0,
            retries: 0,
            cts_writes: 0,
        }
    }

    /// The receiver posts its next group, if any is left. `false` when nothing happened.
    fn post_recv(&mut self) -> bool {
        let gi = self.posted;
        let Some(g) = self.groups.get(gi) else {
            return false;
        };
        let bufs: Vec<RecvBuf> = g
            .iter()
            .enumerate()
            .map(|(mi, m)| RecvBuf {
                addr: self.buf_addr[gi][mi],
                size: m.capacity,
                tag: m.tag,
                rkeys: [1; MAX_DEVS],
            })
            .collect();
        match self.recv.irecv(&bufs).expect("irecv") {
            RecvStep::Retry => {
                // A retried irecv is a call that waits: every staged entry goes out.
                if let Some(w) = self.recv.cts_flush() {
                    self.execute_cts(&w);
                }
                assert_eq!(
                    self.recv_reqs.len(),
                    SLOTS,
                    "a receive is only refused when 32 are posted or finished but not yet tested"
                );
                false
            }
            RecvStep::Post(p) => {
                self.execute_recv(&p, &bufs);
                self.recv_reqs.push_back((p.req, gi));
                self.posted += 1;
                true
            }
        }
    }

    fn execute_recv(&mut self, p: &PostRecv, bufs: &[RecvBuf]) {
        for q in p.qps.clone() {
            self.recv_wrs[q].push_back((p.recv_wr_id(), p.seq));
        }
        let at = self.cts_stage as usize + p.stage_offset();
        for (i, e) in p.entries(bufs).enumerate() {
            self.arena.0[at + i * ENTRY_SIZE..at + (i + 1) * ENTRY_SIZE]
                .copy_from_slice(&e.encode());
        }
        if let Some(w) = &p.cts {
            self.execute_cts(w);
        }
    }

    /// A clear-to-send write: the staged bytes of its ranges, captured at post time (as the NIC
    /// may read them any time after), delivered later in order.
    fn execute_cts(&mut self, w: &CtsWrite) {
        for r in w.ranges() {
            let at = self.cts_stage as usize;
            let bytes = self.arena.0[at + r.start..at + r.end].to_vec();
            self.cts.push_back((r.start, bytes));
        }
        self.cts_writes += 1;
    }

    /// What the transport does on every call on the receive comm besides a posted `irecv`.
    fn cts_due(&mut self) {
        if let Some(w) = self.recv.cts_due() {
            self.execute_cts(&w);
        }
    }

    /// Tag `t`'s sender offers its next message. `false` when it got no request (or is done).
    fn try_send(&mut self, t: usize) -> bool {
        let Some(&(gi, mi)) = self.per_tag[t].get(self.next_of_tag[t]) else {
            return false;
        };
        if self.send_reqs.len() == SEND_REQS {
            return false; // NCCL never has more sends outstanding on one comm
        }
        let m = self.groups[gi][mi];
        // The core keeps each QP's send queue within its room, counted as this wire plans.
        self.send.set_plan(self.max_write, self.ar);
        let (arena, fifo) = (&self.arena, self.fifo as usize);
        let step = self
            .send
            .isend(
                m.tag,
                m.sent,
                self.src_addr[gi][mi],
                &[1; MAX_DEVS],
                |seq, i| {
                    let at = fifo + fifo::entry_offset(seq, i);
                    CtsEntry::decode(&arena.read::<ENTRY_SIZE>(at), seq)
                },
            )
            .expect("isend");
        let req = match step {
            SendStep::Retry(_) => {
                self.retries += 1;
                return false;
            }
            SendStep::Matched { req } => req,
            SendStep::Post { req } => {
                self.execute_group();
                req
            }
        };
        self.send_reqs.push((req, m.placed()));
        self.next_of_tag[t] += 1;
        true
    }

    /// Writes the group the sender's core just completed ([`SendCore::ready_group`]).
    fn execute_group(&mut self) {
        let g = self.send.ready_group();
        let (seq, items) = (g.seq, g.items().to_vec());
        let soff = fifo::sizes_offset(seq);
        for (i, it) in items.iter().enumerate() {
            let at = self.sizes_stage as usize + soff + 4 * i;
            self.arena.0[at..at + 4].copy_from_slice(&it.size.to_le_bytes());
        }
        let slot = SizesSlot {
            local_addr: self.sizes_stage + soff as u64,
            lkeys: [2; MAX_DEVS],
            remote_addr: self.sizes + soff as u64,
            rkeys: [2; MAX_DEVS],
        };
        let writes = plan::plan_group(seq, &items[..], &self.layout, slot, self.max_write, self.ar);
        assert_eq!(
            writes.iter().filter(|w| w.imm.is_some()).count(),
            self.layout.group_qps(seq).len(),
            "one signaled write per QP the group uses, as the core counts them"
        );
        let mut per_qp = vec![0u32; self.nqps];
        for w in &writes {
            per_qp[w.qp] += 1;
        }
        for (q, &n) in per_qp.iter().enumerate().filter(|(_, n)| **n > 0) {
            assert!(
                self.sq_held[q] == 0 || self.sq_held[q] + n <= plan::SEND_ROOM,
                "QP {q}: group {seq}'s {n} writes posted onto {} held (room {})",
                self.sq_held[q],
                plan::SEND_ROOM
            );
            self.sq_held[q] += n;
            self.sq_groups[q].push_back(n);
        }
        for w in writes {
            self.data[w.qp].push_back(Op {
                from: w.local_addr,
                to: w.remote_addr,
                len: w.len,
                imm: w.imm,
                seq,
            });
        }
    }

    /// Delivers the oldest write on QP `q` (data path) or the oldest CTS write (`q == nqps`).
    fn deliver(&mut self, q: usize) -> bool {
        if q == self.nqps {
            let Some((off, bytes)) = self.cts.pop_front() else {
                return false;
            };
            let at = self.fifo as usize + off;
            self.arena.0[at..at + bytes.len()].copy_from_slice(&bytes);
            return true;
        }
        let Some(op) = self.data[q].pop_front() else {
            return false;
        };
        self.arena.copy(op.from, op.to, op.len);
        if let Some(imm) = op.imm {
            let (wr, seq) = self.recv_wrs[q]
                .pop_front()
                .expect("a write with immediate found no posted receive (RNR)");
            assert_eq!(
                seq, op.seq,
                "QP {q}: group {}'s immediate consumed group {seq}'s receive",
                op.seq
            );
            let (arena, sizes) = (&self.arena, self.sizes as usize);
            self.recv.handle_completion(wr, imm, |seq, n| {
                let mut out = [0u32; MAX_RECVS];
                for (i, o) in out.iter_mut().enumerate().take(n) {
                    *o = u32::from_le_bytes(
                        arena.read::<4>(sizes + fifo::sizes_offset(seq) + 4 * i),
                    );
                }
                out
            });
            self.send_cq[q]
                .push_back(ferro_proto::comm::wr_id::WrId::Send { seq: op.seq }.encode());
        }
        true
    }

    /// The sender polls one completion of QP `q`.
    fn ack(&mut self, q: usize) -> bool {
        let Some(wr) = self.send_cq[q].pop_front() else {
            return false;
        };
        // The signaled write retires every write of its group before it on this QP.
        let n = self.sq_groups[q]
            .pop_front()
            .expect("a completion of a posted group");
        self.sq_held[q] -= n;
        self.send.handle_completion(wr);
        true
    }

    /// Tests the oldest receive and every send, as NCCL's progress thread does; `true` when a
    /// request finished.
    fn test_all(&mut self) -> bool {
        let mut finished = false;
        if let Some(&(req, gi)) = self.recv_reqs.front() {
            if let Some(d) = self.recv.take_done(req).expect("recv test") {
                self.recv_done[gi] = Some(d);
                self.recv_reqs.pop_front();
                finished = true;
            }
            self.cts_due();
        }
        let mut i = 0;
        while i < self.send_reqs.len() {
            let (req, size) = self.send_reqs[i];
            match self.send.take_done(req) {
                Ok(Some(d)) => {
                    assert_eq!(d, Done::one(size));
                    self.send_reqs.swap_remove(i);
                    self.sends_done += 1;
                    finished = true;
                }
                Ok(None) => i += 1,
                Err(CoreError::NotInFlight { .. }) => panic!("send request lost"),
                Err(e) => panic!("{e}"),
            }
        }
        finished
    }

    /// One step chosen by `c`; `false` when the step found nothing to do.
    fn step(&mut self, c: u32, runner_ahead: Option<usize>) -> bool {
        let tags = self.per_tag.len();
        match c % 5 {
            0 => self.post_recv(),
            1 => {
                // The running-ahead tag always tries first, then one chosen by the schedule.
                if let Some(t) = runner_ahead {
                    self.try_send(t);
                }
                self.try_send((c / 5) as usize % tags)
            }
            2 => self.deliver((c / 5) as usize % (self.nqps + 1)),
            3 => self.ack((c / 5) as usize % self.nqps),
            _ => self.test_all(),
        }
    }

    /// Runs `schedule`, then drains everything in a fixed order, and checks the outcome.
    fn run(&mut self, schedule: &[u32], runner_ahead: Option<usize>) {
        for &c in schedule {
            self.step(c, runner_ahead);
        }
        let mut idle = 0;
        while idle < 3 {
            let mut moved = false;
            moved |= self.post_recv();
            for t in (0..self.per_tag.len()).rev() {
                moved |= self.try_send(t);
            }
            for q in 0..=self.nqps {
                while self.deliver(q) {
                    moved = true;
                }
            }
            for q in 0..self.nqps {
                while self.ack(q) {
                    moved = true;
                }
            }
            moved |= self.test_all();
            idle = if moved { 0 } else { idle + 1 };
        }
        self.check();
    }

    fn state(&self) -> String {
        format!(
            "posted {} of {}, untested receives {:?}, sends per tag {:?} of {:?}, untested sends {}, sender head {}, queued data {:?}, queued CTS {}, unacked {:?}",
            self.posted,
            self.groups.len(),
            self.recv_reqs,
            self.next_of_tag,
            self.per_tag.iter().map(Vec::len).collect::<Vec<_>>(),
            self.send_reqs.len(),
            self.send.head_seq(),
            self.data.iter().map(VecDeque::len).collect::<Vec<_>>(),
            self.cts.len(),
            self.send_cq.iter().map(VecDeque::len).collect::<Vec<_>>(),
        )
    }

    fn check(&self) {
        let total: usize = self.groups.iter().map(Vec::len).sum();
        assert_eq!(self.sends_done, total, "every send completed");
        for (gi, g) in self.groups.iter().enumerate() {
            let d = self.recv_done[gi]
                .unwrap_or_else(|| panic!("receive {gi} never completed: {}", self.state()));
            assert_eq!(d.n, g.len());
            for (mi, m) in g.iter().enumerate() {
                assert_eq!(d.sizes[mi], m.placed(), "group {gi} member {mi} size");
                let a = self.buf_addr[gi][mi] as usize;
                for i in 0..m.placed() as usize {
                    assert_eq!(
                        self.arena.0[a + i],
                        pattern(gi, mi, i),
                        "group {gi} member {mi} byte {i}"
                    );
                }
                for i in m.placed() as usize..m.capacity as usize {
                    assert_eq!(
                        self.arena.0[a + i],
                        0,
                        "group {gi} member {mi}: byte {i} past the message was written"
                    );
                }
            }
        }
    }
}

fn member(tag: i32, capacity: u32, sent: u32) -> Member {
    Member {
        tag,
        capacity,
        sent,
    }
}

/// 40 groups of 3 tags (0, 1, 2 in that order), sizes varied, zero-byte members included.
fn three_tag_groups(count: usize) -> Vec<Vec<Member>> {
    (0..count)
        .map(|k| {
            (0..3)
                .map(|t| {
                    let sent = ((k * 37 + t * 101) % 300) as u32;
                    member(t as i32, 300, if (k + t) % 7 == 0 { 0 } else { sent })
                })
                .collect()
        })
        .collect()
}

#[test]
fn virtual_nics_of_different_member_counts_land_every_byte_split_or_not() {
    for (qpc, split, l, r) in [
        (1, false, 2, 2),
        (1, false, 2, 3),
        (2, false, 3, 1),
        (1, true, 2, 4),
    ] {
        let mut w = Wire::with_layout(QpLayout::new(qpc, split, l, r), three_tag_groups(40), 3);
        let schedule: Vec<u32> = (0..6000u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        w.run(&schedule, None);
    }
}

#[test]
fn one_tag_always_running_ahead_never_fails_and_lands_every_byte() {
    for (nqps, split) in [(1, false), (2, false), (4, false), (2, true), (4, true)] {
        let mut w = Wire::new(nqps, split, three_tag_groups(40), 3);
        // Receives posted ahead first, then tag 0 tries before every other send.
        let schedule: Vec<u32> = (0..4000u32)
            .map(|i| [0, 1, 2, 3, 4][(i % 5) as usize] + 5 * (i / 5))
            .collect();
        w.run(&schedule, Some(0));
        assert!(w.retries > 0, "tag 0 must actually have been held back");
    }
}

#[test]
fn sends_larger_than_their_buffers_are_truncated_to_the_posted_size() {
    let groups: Vec<Vec<Member>> = (0..3)
        .map(|_| vec![member(0, 100, 4000), member(1, 300, 300), member(0, 0, 17)])
        .collect();
    for (nqps, split) in [(1, false), (4, true)] {
        let mut w = Wire::new(nqps, split, groups.clone(), 2);
        w.run(&[], None);
        assert_eq!(w.send.health.counters.truncated, 6);
    }
}

#[test]
fn tags_sending_in_reverse_order_fill_every_group() {
    for (nqps, split) in [(1, false), (4, true)] {
        let mut w = Wire::new(nqps, split, three_tag_groups(35), 3);
        w.run(&[], None); // the drain offers tags 2, 1, 0 in that order
    }
}

#[test]
fn repeated_tags_in_one_group_fill_buffers_in_posting_order() {
    let groups: Vec<Vec<Member>> = (0..34)
        .map(|k| {
            vec![
                member(1, 64, 10 + k as u32),
                member(0, 64, 0),
                member(1, 64, 20),
                member(1, 64, 64),
            ]
        })
        .collect();
    for (nqps, split) in [(1, false), (2, true)] {
        let mut w = Wire::new(nqps, split, groups.clone(), 2);
        w.run(&(0..3000).collect::<Vec<u32>>(), Some(1));
    }
}

#[test]
fn thirty_two_groups_posted_ahead_with_lagging_acknowledgements() {
    // 8-member groups, 32 posted before any send; acknowledgements only polled at the end of
    // each round, so a slot's previous group is still unacknowledged when it comes round again.
    let groups: Vec<Vec<Member>> = (0..70)
        .map(|k| {
            (0..MAX_RECVS)
                .map(|t| member(t as i32, 128, ((k + t) % 3 * 50) as u32))
                .collect()
        })
        .collect();
    for (nqps, split) in [(1, false), (4, false), (4, true)] {
        let mut w = Wire::new(nqps, split, groups.clone(), MAX_RECVS);
        for _ in 0..SLOTS {
            assert!(w.post_recv());
        }
        assert_eq!(
            w.cts_writes, 6,
            "32 receives back to back: writes of 1, 1, 2, 4, 8 and 16 groups"
        );
        assert!(!w.post_recv(), "the 33rd outstanding receive waits");
        assert_eq!(w.cts_writes, 6, "nothing was left staged for the retry");
        // Sends, deliveries and tests, but acknowledgements only every 200 steps.
        let schedule: Vec<u32> = (0..6000u32)
            .map(|i| {
                if i % 200 == 199 {
                    3 + 5 * (i / 200)
                } else {
                    [0, 1, 2, 4][(i % 4) as usize] + 5 * (i / 7)
                }
            })
            .collect();
        w.run(&schedule, Some(MAX_RECVS - 1));
        assert!(
            w.cts_writes < 70,
            "{} clear-to-send writes for 70 groups",
            w.cts_writes
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn any_interleaving_of_posts_sends_deliveries_and_acks_lands_every_message(
        qpc in 1usize..=4,
        split in any::<bool>(),
        devs in prop::option::of((1usize..=3, 1usize..=3)),
        tags in 1usize..=4,
        shape in prop::collection::vec(prop::collection::vec((0u32..4, 0u32..200, 0u32..=130), 1..=MAX_RECVS), 1..45),
        schedule in prop::collection::vec(any::<u32>(), 0..1500),
        runner in prop::option::of(0usize..4),
        max_write in prop_oneof![Just(u32::MAX), 1u32..=64],
        ar_threshold in prop::option::of(0u32..=160),
    ) {
        let groups: Vec<Vec<Member>> = shape
            .iter()
            .map(|g| {
                g.iter()
                    .map(|&(t, cap, pct)| member((t as usize % tags) as i32, cap, cap * pct / 100))
                    .collect()
            })
            .collect();
        // A physical pair, or virtual NICs of 1 to 3 members on either side.
        let (l, r) = devs.unwrap_or((1, 1));
        let mut w = Wire::with_layout(QpLayout::new(qpc, split, l, r), groups, tags);
        // Writes of a few bytes at most: every message of more goes in pieces.
        w.max_write = max_write;
        // Adaptive routing: lone buffers above the threshold send their immediates apart.
        w.ar = ar_threshold.map_or(AdaptiveRouting::OFF, AdaptiveRouting::above);
        w.run(&schedule, runner.map(|r| r % tags));
    }
}
