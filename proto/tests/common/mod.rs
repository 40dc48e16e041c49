//! The fake wire of the recovery tests (`host_recovery_two_sided.rs`): a sender core and a
//! receiver core joined by a byte arena (RDMA writes copy bytes, each QP delivers in order), a
//! fake out-of-band connection that carries the recovery exchange as `ferro_proto::wire`
//! messages, and cuts that kill every QP at a chosen point. The wire checks every write
//! against the receive buffers already completed.

// The fake wire is test code: a broken invariant is a test failure, so it panics.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use ferro_proto::MAX_DEVS;
use ferro_proto::MAX_RECVS;
use ferro_proto::comm::Done;
use ferro_proto::comm::recovering::Recovering;
use ferro_proto::comm::recv::{CtsWrite, RecvBuf, RecvCore, RecvStep};
use ferro_proto::comm::send::{SEND_REQS, SendCore, SendStep};
use ferro_proto::fifo::{self, CtsEntry, ENTRY_SIZE, FIFO_BYTES, SIZES_BYTES};
use ferro_proto::plan::{self, AdaptiveRouting, QpLayout, SizesSlot, Write};
use ferro_proto::recovery::plan::replay_writes_into;
use std::collections::VecDeque;
use std::time::Duration;

mod exchange;

/// One buffer of a planned receive group: its tag, capacity and the size the sender offers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Member {
    tag: i32,
    capacity: u32,
    sent: u32,
}

impl Member {
    pub(crate) fn placed(&self) -> u32 {
        self.sent.min(self.capacity)
    }
}

pub(crate) fn pattern(group: usize, member: usize, i: usize) -> u8 {
    (group * 31 + member * 7 + i * 13 + 1) as u8
}

/// An RDMA write in flight on one QP.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Op {
    from: u64,
    to: u64,
    len: u32,
    imm: Option<u32>,
    seq: u64,
    wr_id: u64,
}

/// Where a cut strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    MidWrite,
    DataBeforeImmediate,
    ImmediateBeforeAck,
    LateImmediate,
    MidClearToSend,
    Plain,
}

pub(crate) const CUTS: [Cut; 6] = [
    Cut::MidWrite,
    Cut::DataBeforeImmediate,
    Cut::ImmediateBeforeAck,
    Cut::LateImmediate,
    Cut::MidClearToSend,
    Cut::Plain,
];

/// Who notices a cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Notice {
    Sender,
    Receiver,
    Both,
}

pub(crate) const BUDGET: Duration = Duration::from_secs(30);

pub(crate) struct Wire {
    layout: QpLayout,
    nqps: usize,
    max_write: u32,
    /// Whether a lone buffer's immediates travel apart from its data (first writes and
    /// replays alike).
    pub(crate) ar: AdaptiveRouting,
    arena: Vec<u8>,
    /// Per arena byte: 1 + the group whose receive buffer it is, or 0.
    owner: Vec<u32>,
    pub(crate) send: SendCore,
    pub(crate) recv: RecvCore,
    fifo: u64,
    cts_stage: u64,
    sizes: u64,
    sizes_stage: u64,
    /// Whether the connection's QPs work (false from a cut to the rebuild).
    alive: bool,
    data: Vec<VecDeque<Op>>,
    cts: VecDeque<(usize, Vec<u8>)>,
    recv_wrs: Vec<VecDeque<(u64, u64)>>,
    /// Sender completions not yet polled.
    send_cq: Vec<VecDeque<u64>>,
    /// Completions of QPs a cut killed, polled late: the sender's right after it resumes, the
    /// receiver's (an immediate that reached it late) right after it resumes.
    stale_send: Vec<u64>,
    stale_recv: Vec<(u64, u32)>,
    /// The out-of-band connection, each way: whole encoded messages.
    to_recv: VecDeque<Vec<u8>>,
    to_send: VecDeque<Vec<u8>>,
    groups: Vec<Vec<Member>>,
    buf_addr: Vec<Vec<u64>>,
    src_addr: Vec<Vec<u64>>,
    posted: usize,
    per_tag: Vec<Vec<(usize, usize)>>,
    next_of_tag: Vec<usize>,
    /// Receive requests not yet reported done: (request, group).
    recv_reqs: Vec<(u32, usize)>,
    /// Send requests not yet reported done: (request, placed size, group, member).
    send_reqs: Vec<(u32, u32, usize, usize)>,
    recv_done: Vec<Option<Done>>,
    sends_done: usize,
    /// The time, advanced one millisecond per step.
    now: Duration,
    cuts: usize,
    scratch: Vec<Write>,
}

impl Wire {
    pub(crate) fn new(
        layout: QpLayout,
        groups: Vec<Vec<Member>>,
        tags: usize,
        max_write: u32,
    ) -> Wire {
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
        let mut arena = vec![0u8; next as usize];
        let mut owner = vec![0u32; next as usize];
        for (gi, g) in groups.iter().enumerate() {
            for (mi, m) in g.iter().enumerate() {
                let a = src_addr[gi][mi] as usize;
                for i in 0..m.sent as usize {
                    arena[a + i] = pattern(gi, mi, i);
                }
                let b = buf_addr[gi][mi] as usize;
                owner[b..b + m.capacity as usize].fill(gi as u32 + 1);
            }
        }
        let mut per_tag = vec![Vec::new(); tags];
        for (gi, g) in groups.iter().enumerate() {
            for (mi, m) in g.iter().enumerate() {
                per_tag[m.tag as usize].push((gi, mi));
            }
        }
        let mut send = SendCore::new(layout);
        let mut recv = RecvCore::new(recv_layout);
        send.set_recovery_budget(BUDGET);
        recv.set_recovery_budget(BUDGET);
        Wire {
            layout,
            nqps,
            max_write,
            ar: AdaptiveRouting::OFF,
            arena,
            owner,
            send,
            recv,
            fifo,
            cts_stage,
            sizes,
            sizes_stage,
            alive: true,
            data: vec![VecDeque::new(); nqps],
            cts: VecDeque::new(),
            recv_wrs: vec![VecDeque::new(); nqps],
            send_cq: vec![VecDeque::new(); nqps],
            stale_send: Vec::new(),
            stale_recv: Vec::new(),
            to_recv: VecDeque::new(),
            to_send: VecDeque::new(),
            recv_done: vec![None; groups.len()],
            groups,
            buf_addr,
            src_addr,
            posted: 0,
            next_of_tag: vec![0; tags],
            per_tag,
            recv_reqs: Vec::new(),
            send_reqs: Vec::new(),
            sends_done: 0,
            now: Duration::ZERO,
            cuts: 0,
            scratch: Vec::new(),
        }
    }

    /// Places `len` bytes from `from` at `to`: the check that no completed receive buffer is
    /// ever written again.
    pub(crate) fn place(&mut self, from: u64, to: u64, len: u32) {
        let (f, t, l) = (from as usize, to as usize, len as usize);
        for &o in &self.owner[t..t + l] {
            if o > 0 {
                let g = o as usize - 1;
                assert!(
                    self.recv_done[g].is_none(),
                    "a write touched group {g}'s buffer after its receive completed"
                );
            }
        }
        self.arena.copy_within(f..f + l, t);
    }

    // ---- the receiver ------------------------------------------------------------------

    pub(crate) fn post_recv(&mut self) -> bool {
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
                if let Some(w) = self.recv.cts_flush() {
                    self.execute_cts(&w);
                }
                false
            }
            RecvStep::Post(p) => {
                for q in p.qps.clone() {
                    self.post_recv_wr(q, p.recv_wr_id_on(q), p.seq);
                }
                let at = self.cts_stage as usize + p.stage_offset();
                for (i, e) in p.entries(&bufs).enumerate() {
                    self.arena[at + i * ENTRY_SIZE..at + (i + 1) * ENTRY_SIZE]
                        .copy_from_slice(&e.encode());
                }
                if let Some(w) = &p.cts {
                    self.execute_cts(w);
                }
                self.recv_reqs.push((p.req, gi));
                self.posted += 1;
                true
            }
        }
    }

    /// Posting on a QP that a cut killed is flushed at once: nothing is queued.
    pub(crate) fn post_recv_wr(&mut self, q: usize, wr: u64, seq: u64) {
        if self.alive {
            self.recv_wrs[q].push_back((wr, seq));
        }
    }

    pub(crate) fn execute_cts(&mut self, w: &CtsWrite) {
        if !self.alive {
            return;
        }
        for r in w.ranges() {
            let at = self.cts_stage as usize;
            let bytes = self.arena[at + r.start..at + r.end].to_vec();
            self.cts.push_back((r.start, bytes));
        }
    }

    /// The receiver handles an immediate of group `seq` (receive `wr`) and, as NCCL may test
    /// any request at any time, reports the group at once when it completed.
    pub(crate) fn immediate(&mut self, wr: u64, imm: u32) {
        let (arena, sizes) = (&self.arena, self.sizes as usize);
        self.recv.handle_completion(wr, imm, |seq, n| {
            let mut out = [0u32; MAX_RECVS];
            for (i, o) in out.iter_mut().enumerate().take(n) {
                let at = sizes + fifo::sizes_offset(seq) + 4 * i;
                *o = u32::from_le_bytes(arena[at..at + 4].try_into().unwrap());
            }
            out
        });
        self.test_recvs();
    }

    pub(crate) fn test_recvs(&mut self) -> bool {
        let mut finished = false;
        let mut i = 0;
        while i < self.recv_reqs.len() {
            let (req, gi) = self.recv_reqs[i];
            match self.recv.take_done(req).expect("recv test") {
                Some(d) => {
                    assert!(self.recv_done[gi].is_none(), "group {gi} completed twice");
                    self.recv_done[gi] = Some(d);
                    self.recv_reqs.swap_remove(i);
                    finished = true;
                }
                None => i += 1,
            }
        }
        if let Some(w) = self.recv.cts_due() {
            self.execute_cts(&w);
        }
        finished
    }

    // ---- the sender --------------------------------------------------------------------

    pub(crate) fn try_send(&mut self, t: usize) -> bool {
        let Some(&(gi, mi)) = self.per_tag[t].get(self.next_of_tag[t]) else {
            return false;
        };
        if self.send_reqs.len() == SEND_REQS {
            return false;
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
                    CtsEntry::decode(arena[at..at + ENTRY_SIZE].try_into().unwrap(), seq)
                },
            )
            .expect("isend");
        let req = match step {
            SendStep::Retry(_) => return false,
            SendStep::Matched { req } => req,
            SendStep::Post { req } => {
                self.execute_group();
                req
            }
        };
        self.send_reqs.push((req, m.placed(), gi, mi));
        self.next_of_tag[t] += 1;
        true
    }

    pub(crate) fn sizes_slot(&self, seq: u64) -> SizesSlot {
        let soff = fifo::sizes_offset(seq) as u64;
        SizesSlot {
            local_addr: self.sizes_stage + soff,
            lkeys: [2; MAX_DEVS],
            remote_addr: self.sizes + soff,
            rkeys: [2; MAX_DEVS],
        }
    }

    pub(crate) fn execute_group(&mut self) {
        let g = self.send.ready_group();
        let (seq, wr_id, items) = (g.seq, g.wr_id(), g.items().to_vec());
        for (i, it) in items.iter().enumerate() {
            let at = self.sizes_stage as usize + fifo::sizes_offset(seq) + 4 * i;
            self.arena[at..at + 4].copy_from_slice(&it.size.to_le_bytes());
        }
        let slot = self.sizes_slot(seq);
        plan::plan_group_into(
            seq,
            &items,
            &self.layout,
            slot,
            self.max_write,
            self.ar,
            &mut self.scratch,
        );
        self.queue_writes(seq, wr_id);
    }

    pub(crate) fn queue_writes(&mut self, seq: u64, wr_id: u64) {
        if !self.alive {
            return;
        }
        for w in &self.scratch {
            self.data[w.qp].push_back(Op {
                from: w.local_addr,
                to: w.remote_addr,
                len: w.len,
                imm: w.imm,
                seq,
                wr_id,
            });
        }
    }

    /// The sender's replay after it resumed, group by group in order.
    pub(crate) fn replay(&mut self) {
        let groups: Vec<(u64, u64, Vec<Write>)> = self
            .send
            .replay()
            .map(|g| {
                let mut w = Vec::new();
                replay_writes_into(
                    &g,
                    &self.layout,
                    self.sizes_slot(g.seq),
                    self.max_write,
                    self.ar,
                    &mut w,
                );
                (g.seq, g.wr_id(), w)
            })
            .collect();
        for (seq, wr_id, w) in groups {
            self.scratch = w;
            self.queue_writes(seq, wr_id);
        }
    }

    pub(crate) fn test_sends(&mut self) -> bool {
        let mut finished = false;
        let mut i = 0;
        while i < self.send_reqs.len() {
            let (req, size, gi, mi) = self.send_reqs[i];
            match self.send.take_done(req).expect("send test") {
                Some(d) => {
                    assert_eq!(d, Done::one(size));
                    // NCCL reuses a buffer once its send is done: a write of it after that
                    // (a replay of a send reported done too early) would carry these bytes.
                    let a = self.src_addr[gi][mi] as usize;
                    self.arena[a..a + self.groups[gi][mi].sent as usize].fill(0xEE);
                    self.send_reqs.swap_remove(i);
                    self.sends_done += 1;
                    finished = true;
                }
                None => i += 1,
            }
        }
        finished
    }

    // ---- the wire ----------------------------------------------------------------------

    /// Delivers the oldest write on QP `q`, or the oldest clear-to-send write (`q == nqps`).
    pub(crate) fn deliver(&mut self, q: usize) -> bool {
        if !self.alive {
            return false;
        }
        if q == self.nqps {
            let Some((off, bytes)) = self.cts.pop_front() else {
                return false;
            };
            let at = self.fifo as usize + off;
            self.arena[at..at + bytes.len()].copy_from_slice(&bytes);
            return true;
        }
        let Some(op) = self.data[q].pop_front() else {
            return false;
        };
        self.place(op.from, op.to, op.len);
        if let Some(imm) = op.imm {
            let (wr, seq) = self.recv_wrs[q]
                .pop_front()
                .expect("a write with immediate found no posted receive (RNR)");
            assert_eq!(
                seq, op.seq,
                "QP {q}: group {}'s immediate consumed group {seq}'s receive",
                op.seq
            );
            self.immediate(wr, imm);
            self.send_cq[q].push_back(op.wr_id);
        }
        true
    }

    pub(crate) fn ack(&mut self, q: usize) -> bool {
        let Some(wr) = self.send_cq[q].pop_front() else {
            return false;
        };
        self.send.handle_completion(wr);
        true
    }
}

impl Wire {
    // ---- the schedule ------------------------------------------------------------------

    pub(crate) fn step(&mut self, c: u32, cuts_left: &mut usize) {
        self.now += Duration::from_millis(1);
        let tags = self.per_tag.len();
        let arg = (c / 8) as usize;
        match c % 8 {
            0 => {
                self.post_recv();
            }
            1 => {
                self.try_send(arg % tags);
            }
            2 => {
                self.deliver(arg % (self.nqps + 1));
            }
            3 => {
                self.ack(arg % self.nqps);
            }
            4 => {
                self.test_recvs();
                self.test_sends();
            }
            5 => {
                self.recv_reads();
            }
            6 => {
                self.send_reads();
            }
            _ if *cuts_left > 0 => {
                *cuts_left -= 1;
                let notice = [Notice::Sender, Notice::Receiver, Notice::Both][arg % 3];
                self.cut(CUTS[(arg / 3) % CUTS.len()], notice, arg / 18);
            }
            _ => {}
        }
    }

    pub(crate) fn run(&mut self, schedule: &[u32], mut cuts_left: usize) {
        for &c in schedule {
            self.step(c, &mut cuts_left);
        }
        let mut idle = 0;
        while idle < 3 {
            self.now += Duration::from_millis(1);
            let mut moved = false;
            moved |= self.recv_reads();
            moved |= self.send_reads();
            moved |= self.post_recv();
            for t in (0..self.per_tag.len()).rev() {
                moved |= self.try_send(t);
            }
            // Completions first, then deliveries: a completion left from before a cut is
            // polled while the replay it must not finish is still in flight.
            for q in 0..self.nqps {
                while self.ack(q) {
                    moved = true;
                }
            }
            for q in 0..=self.nqps {
                while self.deliver(q) {
                    moved = true;
                }
            }
            moved |= self.test_recvs();
            moved |= self.test_sends();
            idle = if moved { 0 } else { idle + 1 };
        }
        self.check();
    }

    pub(crate) fn check(&self) {
        let (s, r) = (&self.send, &self.recv);
        assert!(
            !s.recovery.is_stopped() && !r.recovery.is_stopped(),
            "both sides run again"
        );
        assert_eq!(s.recovery.epoch(), r.recovery.epoch());
        let total: usize = self.groups.iter().map(Vec::len).sum();
        assert_eq!(self.sends_done, total, "every send completed once");
        for (gi, g) in self.groups.iter().enumerate() {
            let d = self.recv_done[gi].unwrap_or_else(|| {
                panic!(
                    "receive {gi} never completed after {} cuts (epoch {}, sender head {})",
                    self.cuts,
                    s.recovery.epoch(),
                    s.head_seq()
                )
            });
            assert_eq!(d.n, g.len());
            for (mi, m) in g.iter().enumerate() {
                assert_eq!(d.sizes[mi], m.placed(), "group {gi} member {mi} size");
                let a = self.buf_addr[gi][mi] as usize;
                for i in 0..m.placed() as usize {
                    assert_eq!(
                        self.arena[a + i],
                        pattern(gi, mi, i),
                        "group {gi} member {mi} byte {i}"
                    );
                }
                for i in m.placed() as usize..m.capacity as usize {
                    assert_eq!(
                        self.arena[a + i],
                        0,
                        "group {gi} member {mi}: byte {i} past the message"
                    );
                }
            }
        }
        let (sc, rc) = (s.health.counters, r.health.counters);
        assert_eq!(
            (sc.messages, sc.bytes),
            (rc.messages, rc.bytes),
            "both sides count the same traffic"
        );
        assert_eq!(
            sc.recoveries, rc.recoveries,
            "both sides count the same recoveries"
        );
        assert_eq!(sc.recoveries, u64::from(s.recovery.epoch()));
        assert!(sc.qps_rebuilt <= sc.recoveries * self.nqps as u64);
        assert_eq!(sc.qps_rebuilt % self.nqps as u64, 0);
        if self.cuts == 0 {
            assert_eq!(sc.recoveries, 0);
        }
    }
}

pub(crate) fn member(tag: i32, capacity: u32, sent: u32) -> Member {
    Member {
        tag,
        capacity,
        sent,
    }
}

pub(crate) fn groups_of(shape: &[Vec<(u32, u32, u32)>], tags: usize) -> Vec<Vec<Member>> {
    shape
        .iter()
        .map(|g| {
            g.iter()
                .map(|&(t, cap, pct)| member((t as usize % tags) as i32, cap, cap * pct / 100))
                .collect()
        })
        .collect()
}
