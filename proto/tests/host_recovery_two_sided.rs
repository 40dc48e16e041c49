//! Recovery in place, end to end over a fake wire: a sender core and a receiver core wired
//! through a byte arena (RDMA writes copy bytes, each QP delivers in order) and a fake
//! out-of-band connection (whole messages of `ferro_proto::wire`, in order each way), with
//! "cuts" that kill every QP of the connection at random points:
//! - mid-write (some bytes of a data write placed, no immediate);
//! - after a QP's data but before its immediate;
//! - after the immediate but before the sender's completion (which is polled later, from a
//!   destroyed QP: an old epoch);
//! - with the immediate reaching the receiver only after it stopped;
//! - during a clear-to-send write (part of its bytes placed);
//! - during the recovery exchange, and twice in a row.
//!
//! A cut drops everything in flight (writes, posted receives, clear-to-send writes); flushed
//! receives complete in error, which the cores never see. The side or sides that notice stop,
//! both run the exchange (`Recover`, the receiver's `ReceiverState`, `Rebuilt` each way,
//! `Resume`), the QPs are rebuilt, and traffic resumes. At the end: every message delivered
//! exactly once into the buffer NCCL's matching assigns it (the `j`-th send of tag `t` fills
//! the `j`-th posted buffer of tag `t`), every byte right, no buffer written after its receive
//! completed (the wire checks every write), and both sides agree on the counters.

// The fake wire is test code: a broken invariant is a test failure, so it panics.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use ferro_proto::comm::Done;
use ferro_proto::comm::recv::{CtsWrite, RecvBuf, RecvCore, RecvStep};
use ferro_proto::comm::send::{SEND_REQS, SendCore, SendStep};
use ferro_proto::fifo::{self, CtsEntry, ENTRY_SIZE, FIFO_BYTES, SIZES_BYTES};
use ferro_proto::plan::{self, QpLayout, SizesSlot, Write};
use ferro_proto::recovery::{RecoveryError, plan::replay_writes_into};
use ferro_proto::wire::{self, Msg};
use ferro_proto::{MAX_DEVS, MAX_RECVS, SLOTS};
use proptest::prelude::*;
use std::collections::VecDeque;
use std::time::Duration;

/// One buffer of a planned receive group: its tag, capacity and the size the sender offers.
#[derive(Debug, Clone, Copy)]
struct Member {
    tag: i32,
    capacity: u32,
    sent: u32,
}

impl Member {
    fn placed(&self) -> u32 {
        self.sent.min(self.capacity)
    }
}

fn pattern(group: usize, member: usize, i: usize) -> u8 {
    (group * 31 + member * 7 + i * 13 + 1) as u8
}

/// An RDMA write in flight on one QP.
#[derive(Debug, Clone, Copy)]
struct Op {
    from: u64,
    to: u64,
    len: u32,
    imm: Option<u32>,
    seq: u64,
    wr_id: u64,
}

/// Where a cut strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    MidWrite,
    DataBeforeImmediate,
    ImmediateBeforeAck,
    LateImmediate,
    MidClearToSend,
    Plain,
}

const CUTS: [Cut; 6] = [
    Cut::MidWrite,
    Cut::DataBeforeImmediate,
    Cut::ImmediateBeforeAck,
    Cut::LateImmediate,
    Cut::MidClearToSend,
    Cut::Plain,
];

/// Who notices a cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Notice {
    Sender,
    Receiver,
    Both,
}

const BUDGET: Duration = Duration::from_secs(30);

struct Wire {
    layout: QpLayout,
    nqps: usize,
    max_write: u32,
    arena: Vec<u8>,
    /// Per arena byte: 1 + the group whose receive buffer it is, or 0.
    owner: Vec<u32>,
    send: SendCore,
    recv: RecvCore,
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
    fn new(layout: QpLayout, groups: Vec<Vec<Member>>, tags: usize, max_write: u32) -> Wire {
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
    fn place(&mut self, from: u64, to: u64, len: u32) {
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
                for (i, e) in self.recv.posted_entries().iter().enumerate() {
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
    fn post_recv_wr(&mut self, q: usize, wr: u64, seq: u64) {
        if self.alive {
            self.recv_wrs[q].push_back((wr, seq));
        }
    }

    fn execute_cts(&mut self, w: &CtsWrite) {
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
    fn immediate(&mut self, wr: u64, imm: u32) {
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

    fn test_recvs(&mut self) -> bool {
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

    fn try_send(&mut self, t: usize) -> bool {
        let Some(&(gi, mi)) = self.per_tag[t].get(self.next_of_tag[t]) else {
            return false;
        };
        if self.send_reqs.len() == SEND_REQS {
            return false;
        }
        let m = self.groups[gi][mi];
        let (arena, fifo) = (&self.arena, self.fifo as usize);
        let step = self
            .send
            .isend(
                m.tag,
                m.sent,
                self.src_addr[gi][mi],
                [1; MAX_DEVS],
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

    fn sizes_slot(&self, seq: u64) -> SizesSlot {
        let soff = fifo::sizes_offset(seq) as u64;
        SizesSlot {
            local_addr: self.sizes_stage + soff,
            lkeys: [2; MAX_DEVS],
            remote_addr: self.sizes + soff,
            rkeys: [2; MAX_DEVS],
        }
    }

    fn execute_group(&mut self) {
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
            &mut self.scratch,
        );
        self.queue_writes(seq, wr_id);
    }

    fn queue_writes(&mut self, seq: u64, wr_id: u64) {
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
    fn replay(&mut self) {
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

    fn test_sends(&mut self) -> bool {
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
    fn deliver(&mut self, q: usize) -> bool {
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

    fn ack(&mut self, q: usize) -> bool {
        let Some(wr) = self.send_cq[q].pop_front() else {
            return false;
        };
        self.send.handle_completion(wr);
        true
    }

    /// A QP with writes queued, preferring `hint`'s.
    fn busy_qp(&self, hint: usize) -> Option<usize> {
        (0..self.nqps)
            .map(|i| (hint + i) % self.nqps)
            .find(|&q| !self.data[q].is_empty())
    }

    /// Kills every QP of the connection at the point `cut` names; `notice` says which side
    /// sees it. Everything in flight is lost; the sender's unpolled completions are polled
    /// after it resumes, as completions of destroyed QPs.
    fn cut(&mut self, cut: Cut, notice: Notice, hint: usize) {
        self.cuts += 1;
        let mut late = None;
        if self.alive {
            match cut {
                Cut::MidWrite => {
                    if let Some(q) = self.busy_qp(hint) {
                        let op = self.data[q].pop_front().unwrap();
                        self.place(op.from, op.to, op.len / 2);
                    }
                }
                Cut::DataBeforeImmediate | Cut::LateImmediate | Cut::ImmediateBeforeAck => {
                    if let Some(q) = self.busy_qp(hint) {
                        while let Some(op) = self.data[q].pop_front() {
                            match op.imm {
                                None => self.place(op.from, op.to, op.len),
                                Some(_) if cut == Cut::ImmediateBeforeAck => {
                                    self.data[q].push_front(op);
                                    self.deliver(q);
                                    break;
                                }
                                Some(imm) => {
                                    self.place(op.from, op.to, op.len);
                                    let (wr, _) = self.recv_wrs[q].pop_front().unwrap();
                                    late = Some((wr, imm));
                                    break;
                                }
                            }
                        }
                    }
                }
                Cut::MidClearToSend => {
                    if let Some((off, bytes)) = self.cts.pop_front() {
                        let at = self.fifo as usize + off;
                        let part = bytes.len() / 2 + 3;
                        self.arena[at..at + part].copy_from_slice(&bytes[..part]);
                    }
                }
                Cut::Plain => {}
            }
        }
        self.kill();
        for cq in &mut self.send_cq {
            self.stale_send.extend(cq.drain(..));
        }
        if notice != Notice::Sender {
            self.recv_notices();
            if let (Cut::LateImmediate, Some((wr, imm))) = (cut, late) {
                // It reaches a stopped receiver: ignored, and replayed.
                self.immediate(wr, imm);
            }
        } else if let (Cut::LateImmediate, Some(late)) = (cut, late) {
            // It reaches the receiver after its rebuild: ignored, and replayed.
            self.stale_recv.push(late);
        }
        if notice != Notice::Receiver {
            self.send_notices();
        }
    }

    /// Destroys the QPs' work: writes, posted receives and clear-to-send writes in flight.
    fn kill(&mut self) {
        self.alive = false;
        self.data.iter_mut().for_each(VecDeque::clear);
        self.recv_wrs.iter_mut().for_each(VecDeque::clear);
        self.cts.clear();
    }

    // ---- the recovery exchange ---------------------------------------------------------

    fn to_receiver(&mut self, m: &Msg) {
        self.to_recv.push_back(wire::encode(m));
    }

    fn to_sender(&mut self, m: &Msg) {
        self.to_send.push_back(wire::encode(m));
    }

    fn send_notices(&mut self) {
        let epoch = self
            .send
            .begin_recovery(self.now, "QP error")
            .expect("sender stops");
        self.to_receiver(&Msg::Recover { epoch });
    }

    fn recv_notices(&mut self) {
        let epoch = self
            .recv
            .begin_recovery(self.now, "QP error")
            .expect("receiver stops");
        self.receiver_stopped(epoch);
    }

    /// The receiver stopped at `epoch`: it says so, reports its state, and offers its rebuilt
    /// QPs (the fake's QP numbers name the epoch).
    fn receiver_stopped(&mut self, epoch: u32) {
        self.to_sender(&Msg::Recover { epoch });
        let st = self
            .recv
            .receiver_state()
            .expect("a stopped receiver reports");
        self.to_sender(&Msg::ReceiverState(st));
        let qpns = (0..self.nqps as u32).map(|q| epoch * 1000 + q).collect();
        self.to_sender(&Msg::Rebuilt { epoch, qpns });
    }

    fn decode(bytes: &[u8]) -> Msg {
        let mut r = wire::Reader::new();
        r.push(bytes);
        r.poll()
            .expect("a well-formed message")
            .expect("a whole message")
    }

    /// The receiver reads one message from the sender.
    fn recv_reads(&mut self) -> bool {
        let Some(bytes) = self.to_recv.pop_front() else {
            return false;
        };
        match Wire::decode(&bytes) {
            Msg::Recover { epoch } => {
                if self.recv.on_peer_recover(epoch, self.now).expect("recover") {
                    self.receiver_stopped(epoch);
                }
            }
            Msg::Rebuilt { epoch, qpns } => {
                assert_eq!(qpns.len(), self.nqps);
                if self.recv.recovery.is_stopped() && epoch == self.recv.recovery.epoch() {
                    // Both sides' QPs of this epoch exist: the old ones are destroyed with
                    // whatever they still held, the new ones connected.
                    self.kill();
                    self.alive = true;
                    let r = self.recv.resume(epoch, self.now).expect("receiver resumes");
                    for p in &r.reposts {
                        for q in p.qps() {
                            self.post_recv_wr(q, p.wr_id(q), p.seq);
                        }
                    }
                    if let Some(w) = &r.cts {
                        self.execute_cts(w);
                    }
                    for (wr, imm) in std::mem::take(&mut self.stale_recv) {
                        self.immediate(wr, imm);
                    }
                    self.to_sender(&Msg::Resume { epoch });
                } else {
                    assert!(
                        epoch < self.recv.recovery.epoch(),
                        "a rebuild from the future"
                    );
                }
            }
            other => panic!("the receiver got {other:?}"),
        }
        true
    }

    /// The sender reads one message from the receiver.
    fn send_reads(&mut self) -> bool {
        let Some(bytes) = self.to_send.pop_front() else {
            return false;
        };
        let current =
            |w: &Wire, e: u32| w.send.recovery.is_stopped() && e == w.send.recovery.epoch();
        match Wire::decode(&bytes) {
            Msg::Recover { epoch } => {
                if self.send.on_peer_recover(epoch, self.now).expect("recover") {
                    self.to_receiver(&Msg::Recover { epoch });
                }
            }
            Msg::ReceiverState(st) => match self.send.apply_peer_state(&st) {
                Ok(()) => {}
                Err(RecoveryError::WrongEpoch { got, want }) => assert!(got < want),
                Err(RecoveryError::NotReady(_)) => {
                    assert!(
                        st.epoch <= self.send.recovery.epoch(),
                        "a state of an epoch not entered"
                    );
                }
                Err(e) => panic!("{e}"),
            },
            Msg::Rebuilt { epoch, .. } => {
                if current(self, epoch) {
                    let qpns = (0..self.nqps as u32)
                        .map(|q| epoch * 1000 + 500 + q)
                        .collect();
                    self.to_receiver(&Msg::Rebuilt { epoch, qpns });
                }
            }
            Msg::Resume { epoch } => {
                if current(self, epoch) {
                    self.send.resume(epoch, self.now).expect("sender resumes");
                    self.replay();
                    for wr in std::mem::take(&mut self.stale_send) {
                        self.send.handle_completion(wr);
                    }
                    // NCCL tests at any time: a send finished early gives its buffer back now.
                    self.test_sends();
                }
            }
            other => panic!("the sender got {other:?}"),
        }
        true
    }

    // ---- the schedule ------------------------------------------------------------------

    fn step(&mut self, c: u32, cuts_left: &mut usize) {
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

    fn run(&mut self, schedule: &[u32], mut cuts_left: usize) {
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

    fn check(&self) {
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
        eprintln!("STAT cuts {} rec {} replayed {} groups {}", self.cuts, sc.recoveries, sc.sends_replayed, self.groups.len());
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

fn member(tag: i32, capacity: u32, sent: u32) -> Member {
    Member {
        tag,
        capacity,
        sent,
    }
}

fn groups_of(shape: &[Vec<(u32, u32, u32)>], tags: usize) -> Vec<Vec<Member>> {
    shape
        .iter()
        .map(|g| {
            g.iter()
                .map(|&(t, cap, pct)| member((t as usize % tags) as i32, cap, cap * pct / 100))
                .collect()
        })
        .collect()
}

#[test]
fn a_cut_of_every_kind_noticed_by_either_side_is_recovered_in_place() {
    for (qpc, split, l, r) in [
        (1, false, 1, 1),
        (2, true, 1, 1),
        (1, false, 2, 2),
        (2, false, 1, 2),
    ] {
        for (k, cut) in CUTS.iter().enumerate() {
            for notice in [Notice::Sender, Notice::Receiver, Notice::Both] {
                let groups: Vec<Vec<Member>> = (0..40)
                    .map(|g| {
                        (0..3)
                            .map(|t| member(t, 200, ((g * 37 + t as usize * 51) % 250) as u32))
                            .collect()
                    })
                    .collect();
                let mut w = Wire::new(QpLayout::new(qpc, split, l, r), groups, 3, 64);
                // Receives ahead, sends and some deliveries; then the cut mid-traffic.
                let warm: Vec<u32> = (0..300u32)
                    .map(|i| [0, 1, 2, 1, 2, 3][(i % 6) as usize] + 8 * (i / 6))
                    .collect();
                for &c in &warm {
                    w.step(c, &mut 0);
                }
                w.cut(*cut, notice, k);
                w.run(&[], 0);
                assert_eq!(
                    w.send.health.counters.recoveries, 1,
                    "{cut:?} noticed by {notice:?}"
                );
            }
        }
    }
}

#[test]
fn a_cut_during_the_exchange_and_a_second_in_a_row_restart_it_at_the_next_epoch() {
    let groups: Vec<Vec<Member>> = (0..36)
        .map(|g| vec![member(0, 100, 90 + g % 10), member(1, 100, 7)])
        .collect();
    let mut w = Wire::new(QpLayout::new(2, true, 1, 1), groups, 2, u32::MAX);
    for _ in 0..10 {
        w.post_recv();
    }
    while w.deliver(2) {}
    for _ in 0..6 {
        w.try_send(0);
        w.try_send(1);
    }
    w.deliver(0);
    w.cut(Cut::DataBeforeImmediate, Notice::Receiver, 1);
    // The sender learns and answers; the receiver's rebuilt QPs fail before it resumes.
    w.send_reads();
    w.recv_reads();
    w.cut(Cut::Plain, Notice::Sender, 0);
    w.cut(Cut::Plain, Notice::Both, 0);
    w.run(&[], 0);
    assert_eq!(w.recv.health.counters.recoveries, 3);
    assert!(w.send.health.counters.sends_replayed > 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_interleaving_with_cuts_delivers_every_message_exactly_once(
        qpc in 1usize..=4,
        split in any::<bool>(),
        devs in prop::option::of((1usize..=2, 1usize..=2)),
        tags in 1usize..=4,
        shape in prop::collection::vec(prop::collection::vec((0u32..4, 0u32..160, 0u32..=130), 1..=MAX_RECVS), 1..40),
        schedule in prop::collection::vec(any::<u32>(), 0..1200),
        cuts in 0usize..=4,
        max_write in prop_oneof![Just(u32::MAX), 1u32..=64],
    ) {
        let (l, r) = devs.unwrap_or((1, 1));
        let mut w = Wire::new(QpLayout::new(qpc, split, l, r), groups_of(&shape, tags), tags, max_write);
        w.run(&schedule, cuts);
    }

    #[test]
    fn cuts_that_come_close_together_during_the_exchange_are_recovered_too(
        qpc in 1usize..=4,
        split in any::<bool>(),
        devs in prop::option::of((1usize..=2, 1usize..=2)),
        shape in prop::collection::vec(prop::collection::vec((0u32..2, 1u32..120, 50u32..=100), 1..=MAX_RECVS), SLOTS..50),
        schedule in prop::collection::vec((0u32..64).prop_map(|c| if c % 8 == 7 { c } else { c % 7 + 8 * (c / 8) }), 200..800),
        cuts in 2usize..=6,
    ) {
        let (l, r) = devs.unwrap_or((1, 1));
        let mut w = Wire::new(QpLayout::new(qpc, split, l, r), groups_of(&shape, 2), 2, u32::MAX);
        w.run(&schedule, cuts);
    }
}
