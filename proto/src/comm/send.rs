//! The send side of a comm: which posted receive buffer each `isend` fills, when a group of
//! sends is complete and can be written, and when its requests are done.
//!
//! Rules (see `docs/DESIGN.md`, "Data path"):
//! - Sends fill the receiver's groups in order. The head group `k` is opened from the entries
//!   the receiver wrote into FIFO slot `k % SLOTS`; until all of its entries are there, `isend`
//!   is answered with a retry (NULL request), as NCCL's own transport does.
//! - A send takes the first untaken entry of the head group with its tag (tags may repeat). A
//!   send whose tag has no untaken entry left belongs to a later group (NCCL's per-tag senders
//!   run ahead of each other): it is answered with a retry, never an error.
//! - A send larger than its buffer is truncated to the buffer's size, and both sides report the
//!   bytes actually placed, as NCCL's own IB transport does since 2.20; a comm made through the
//!   v7 table (NCCL 2.19, whose IB transport refused such a send) refuses it instead
//!   ([`Oversize`]): the comm fails with an error naming both sizes.
//! - When every entry of the head group is taken, the group is handed to the transport to be
//!   written, and the next group becomes the head.
//! - The in-flight bookkeeping of slot `k % SLOTS` is reused for group `k + SLOTS` only once
//!   every signaled write of group `k` completed; until then a new group is not opened (retry).
//! - A group is written only when its writes fit in the send queue of every QP it uses
//!   ([`Room`]): the send that would complete it is retried until earlier writes complete,
//!   so the queues are sized for 32 groups of single-write buffers, not for 32 groups of the
//!   largest buffers in pieces.
//! - A posted group's sends stay in its slot's bookkeeping until the group is delivered, so a
//!   recovery can replay them ([`recovery`]); while the comm is stopped for recovery every
//!   `isend` is retried and completions of destroyed QPs (an older epoch) are ignored.

mod recovery;
mod room;
mod straight;

pub use room::Room;

use super::requests::RequestTable;
use super::wr_id::{self, WrId};
use super::{CommHealth, CoreError, Done, Failure};
use crate::Keys;
use crate::fifo::{self, CtsEntry};
use crate::plan::{AdaptiveRouting, QpLayout, SendItem};
use crate::recovery::Recovery;
use crate::{MAX_RECVS, SLOTS};
use std::ops::Range;

/// Send requests one comm can hold: NCCL may post `NCCL_NET_MAX_REQUESTS x maxRecvs` isends.
pub const SEND_REQS: usize = SLOTS * MAX_RECVS;

/// Why an `isend` gets no request yet (the caller answers NULL and NCCL calls again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendWait {
    /// The receiver has not (fully) posted group `seq` yet.
    ClearToSend { seq: u64 },
    /// Group `seq - SLOTS`, which used the same slot, still has writes in flight.
    SlotBusy { seq: u64 },
    /// Every buffer with this tag in the head group `seq` is taken: the send is for a later group.
    TagAhead { tag: i32, seq: u64 },
    /// The comm is stopped for recovery (epoch `epoch`) until its QPs are rebuilt.
    Recovering { epoch: u32 },
    /// Group `seq`'s writes do not fit in QP `qp`'s send queue until earlier writes complete.
    QueueFull { seq: u64, qp: usize },
}

/// What the transport does for an `isend`. Small on purpose: the group to write stays in the
/// core ([`SendCore::ready_group`]), so nothing large is copied per message. Its kind is a tag
/// of its own (not folded into the wait's), so the transport's `match` is one compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum SendStep {
    /// No request: answer NULL, NCCL retries.
    Retry(SendWait),
    /// The send is matched; its group waits for other members before anything is written.
    Matched { req: u32 },
    /// The send is matched and completes its group: write [`SendCore::ready_group`] now.
    Post { req: u32 },
}

/// What a send larger than the buffer it matched does: the ABI version the comm was made through
/// decides (NCCL 2.19 refused it, 2.20 and later truncate it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Oversize {
    /// Truncated to the buffer; both sides report the bytes placed (v8+).
    #[default]
    Truncate,
    /// Refused: the comm fails with a usage error naming both sizes, nothing is written (v7).
    Refuse,
}

/// A send that was larger than the buffer it matched (it is truncated to the buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncation {
    pub tag: i32,
    pub seq: u64,
    pub size: u32,
    pub capacity: u32,
}

/// A complete group of matched sends, ready to be written: a view into the core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadyGroup<'a> {
    pub seq: u64,
    /// The QPs the group uses ([`QpLayout::group_qps`]), as `start..end`.
    qps: (usize, usize),
    items: &'a [SendItem],
    reqs: &'a [u32],
    epoch: u32,
}

impl<'a> ReadyGroup<'a> {
    /// The QPs the group uses ([`QpLayout::group_qps`] of its sequence number).
    #[inline]
    pub fn qps(&self) -> Range<usize> {
        self.qps.0..self.qps.1
    }

    /// The sends in the receiver's buffer order.
    pub fn items(&self) -> &'a [SendItem] {
        self.items
    }

    /// The request of each send, in the same order as [`ReadyGroup::items`].
    pub fn reqs(&self) -> &'a [u32] {
        self.reqs
    }

    /// The `wr_id` of the group's writes (its sequence number, in the comm's epoch).
    pub fn wr_id(&self) -> u64 {
        WrId::Send { seq: self.seq }.encode_in(self.epoch)
    }
}

#[derive(Debug, Clone, Copy)]
struct SendReq {
    size: u32,
    done: bool,
}

/// The head group while its sends are being matched, and the last group completed until the
/// next one opens. One per core, reused in place. What matching needs of each receiver's entry
/// (its tag and size) is kept here; the rest (the buffer's address and keys) is decoded
/// straight into the in-flight bookkeeping of the group's slot (free while the group is open:
/// a group opens only once its slot's last group is delivered), where the matched sends'
/// items and requests are written too, so nothing is copied when the group is posted.
#[derive(Debug, Clone, Copy)]
struct GroupBuf {
    seq: u64,
    /// The QPs of the group once complete ([`QpLayout::group_qps`]), as `start..end`.
    qps: (usize, usize),
    /// Each receive buffer's tag.
    tags: [i32; MAX_RECVS],
    /// Each receive buffer's size (what a send into it is truncated to).
    caps: [u32; MAX_RECVS],
    n: usize,
    taken: [bool; MAX_RECVS],
    /// Entries not taken yet (`n` minus the `true`s of `taken`).
    left: usize,
    /// The group, once complete, is one write with its immediate on one QP of a physical
    /// device (taken by the straight path of [`SendCore::isend`]; see [`SendCore::lone_write`]).
    lone: bool,
}

/// Signaled writes still outstanding for the group that last used a slot, and its sends (kept
/// until the group is delivered, for a replay after a recovery). While the slot's next group
/// is open (`remaining` is 0 then), `items` and `reqs` fill with that group's matched sends.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    seq: u64,
    remaining: u32,
    reqs: [u32; MAX_RECVS],
    n: usize,
    items: [SendItem; MAX_RECVS],
    /// The QPs whose shares a recovery replays (bit `q` for QP `q`); zero otherwise.
    replay: u128,
    /// A group on one QP: `(qp, n)`, the work requests it holds there (what its delivery gives
    /// back to the room, without counting its writes again); `None` for a group on several.
    held_on: Option<(usize, u32)>,
}

const IDLE: InFlight = InFlight {
    seq: 0,
    remaining: 0,
    reqs: [0; MAX_RECVS],
    n: 0,
    items: [NO_ITEM; MAX_RECVS],
    replay: 0,
    held_on: None,
};

const NO_ITEM: SendItem = SendItem {
    addr: 0,
    lkeys: [0; crate::MAX_DEVS],
    size: 0,
    remote_addr: 0,
    rkeys: [0; crate::MAX_DEVS],
};

/// The send side's state.
#[derive(Debug)]
pub struct SendCore {
    layout: QpLayout,
    reqs: RequestTable<SendReq>,
    /// The head group: the next group to be matched.
    seq: u64,
    /// The head group's state (valid when `open`), or the last group completed.
    cur: GroupBuf,
    open: bool,
    inflight: [InFlight; SLOTS],
    /// The comm's sticky error, counters and stall watchdog.
    pub health: CommHealth,
    /// The comm's first truncation, until the transport has reported it.
    truncation_note: Option<Truncation>,
    /// What a send larger than its buffer does.
    oversize: Oversize,
    /// Why the last `isend` was answered with a retry (`None` once a send was matched again).
    last_wait: Option<SendWait>,
    /// The epoch, the stop and the budget of recovery in place.
    pub recovery: Recovery,
    /// Whether the receiver's state of the current recovery has been applied.
    peer_state_applied: bool,
    /// The work requests each QP's send queue holds for groups not yet delivered.
    room: Room,
    /// Whether every group uses one QP, `seq % nqps`, between two physical devices (member
    /// keys at index 0): a group of one buffer may then take the straight path.
    straight: bool,
    /// The largest buffer that goes as one write carrying its immediate (within the write
    /// limit and not under adaptive routing), as [`SendCore::set_plan`] was given.
    lone_max: u32,
}

impl SendCore {
    pub fn new(layout: QpLayout) -> SendCore {
        SendCore {
            layout,
            reqs: RequestTable::new(SEND_REQS),
            seq: 0,
            cur: GroupBuf {
                seq: 0,
                qps: (0, 0),
                tags: [0; MAX_RECVS],
                caps: [0; MAX_RECVS],
                n: 0,
                taken: [false; MAX_RECVS],
                left: 0,
                lone: false,
            },
            open: false,
            inflight: [IDLE; SLOTS],
            health: CommHealth::default(),
            truncation_note: None,
            oversize: Oversize::Truncate,
            last_wait: None,
            recovery: Recovery::default(),
            peer_state_applied: false,
            room: Room::new(layout.nqps),
            straight: layout.local_devs == 1
                && layout.remote_devs == 1
                && (!layout.split || layout.nqps <= 1),
            lone_max: lone_max(crate::plan::MIN_WRITE_LIMIT, AdaptiveRouting::OFF),
        }
    }

    /// Counts each group's work requests as the transport plans them: at most `max_write`
    /// bytes per write, lone buffers under `ar` (given when the comm is created).
    pub fn set_plan(&mut self, max_write: u32, ar: AdaptiveRouting) {
        self.room.set_plan(max_write, ar);
        self.lone_max = lone_max(max_write, ar);
    }

    /// Work requests QP `q`'s send queue holds for groups not yet delivered.
    pub fn queue_held(&self, q: usize) -> u32 {
        self.room.held(q)
    }

    /// Sets what a send larger than its buffer does (given when the comm is created).
    pub fn set_oversize(&mut self, oversize: Oversize) {
        self.oversize = oversize;
    }

    /// The sequence number of the head group (the next one sends will fill).
    pub fn head_seq(&self) -> u64 {
        self.seq
    }

    /// Matches one send. `read_entry(seq, i)` returns entry `i` of group `seq` from the FIFO if
    /// it is complete (see [`CtsEntry::decode`]); it is only called when a new group is opened.
    /// `addr`/`lkeys` name the caller's registered buffer and its key on each member device
    /// (zeros for an empty send).
    #[inline(always)]
    pub fn isend(
        &mut self,
        tag: i32,
        size: u32,
        addr: u64,
        lkeys: &Keys,
        mut read_entry: impl FnMut(u64, usize) -> Option<CtsEntry>,
    ) -> Result<SendStep, CoreError> {
        if let Some(f) = self.health.failure() {
            return Err(failed(f));
        }
        if self.recovery.is_stopped() {
            let epoch = self.recovery.epoch();
            return Ok(self.retry(SendWait::Recovering { epoch }));
        }
        if !self.open {
            if self.straight {
                if let Some(step) = self.open_lone(tag, size, addr, lkeys, &mut read_entry) {
                    return step;
                }
            }
            if let Err(wait) = self.open_group(&mut read_entry) {
                return Ok(self.retry(wait));
            }
            self.open = true;
        }
        let g = &self.cur;
        if g.n == 1 && self.straight && g.tags[0] == tag && !g.taken[0] {
            let capacity = g.caps[0];
            if size > capacity && self.oversize == Oversize::Refuse {
                let gseq = g.seq;
                return Err(self.refuse_oversize(tag, size, capacity, gseq));
            }
            if self.fits_lone(size, capacity) {
                return self.isend_lone(tag, size, capacity, addr, lkeys);
            }
        }
        let g = &self.cur;
        let Some(i) = fifo::find_buffer(&g.tags[..g.n], &g.taken[..g.n], tag) else {
            let seq = g.seq;
            return Ok(self.retry(SendWait::TagAhead { tag, seq }));
        };
        let (gseq, n, capacity) = (g.seq, g.n, g.caps[i]);
        let completes = g.left == 1;
        if size > capacity && self.oversize == Oversize::Refuse {
            return Err(self.refuse_oversize(tag, size, capacity, gseq));
        }
        // Written in place once, into the slot's bookkeeping beside the receive buffer's
        // address and keys (the size already truncated to the buffer): a send that is retried
        // below leaves its entry untaken, and the next one overwrites the item.
        let s = slot(gseq);
        let item = &mut self.inflight[s].items[i];
        item.addr = addr;
        item.lkeys = *lkeys;
        item.size = size.min(capacity);
        // The QPs of the group (needed only by the send that completes it).
        let mut qps = 0..0;
        if completes {
            // The last send of the group: it is taken only if the group's writes fit now.
            qps = self.layout.group_qps(gseq);
            let items = &self.inflight[s].items[..n];
            if let Some(qp) = self.room.full_qp_of(gseq, qps.clone(), items, &self.layout) {
                return Ok(self.retry(SendWait::QueueFull { seq: gseq, qp }));
            }
        }
        let size = if size > capacity {
            self.note_truncation(tag, gseq, size, capacity);
            capacity
        } else {
            size
        };
        let req = self.reqs.alloc(SendReq { size, done: false })?;
        let c = &mut self.health.counters;
        c.messages += 1;
        c.bytes += u64::from(size);
        c.requests += 1;
        self.last_wait = None;
        let g = &mut self.cur;
        g.taken[i] = true;
        g.left -= 1;
        let f = &mut self.inflight[s];
        f.reqs[i] = req;
        if !completes {
            return Ok(SendStep::Matched { req });
        }
        self.open = false;
        // The items and requests are in the slot already: only the group's figures are set.
        f.seq = gseq;
        f.remaining = qps.len() as u32;
        f.n = n;
        f.replay = 0;
        g.qps = (qps.start, qps.end);
        // The send that completes the group ran `full_qp_of` on these same items above.
        f.held_on = self.room.take_counted_of(qps);
        g.lone = false;
        self.seq += 1;
        Ok(SendStep::Post { req })
    }

    /// A v7 comm's refusal of a send larger than its buffer: the comm fails.
    #[cold]
    #[inline(never)]
    fn refuse_oversize(&mut self, tag: i32, size: u32, capacity: u32, gseq: u64) -> CoreError {
        let f = Failure::usage(format!(
            "send of {size} bytes (tag {tag}) is larger than the receive buffer of {capacity} bytes it matched (receive #{gseq}): a comm of ABI v7 refuses it, as NCCL 2.19 did; nothing was sent"
        ));
        CoreError::Failed(self.health.fail(f).clone())
    }

    /// Counts a truncated send, and keeps the comm's first one for the transport to report.
    #[cold]
    #[inline(never)]
    fn note_truncation(&mut self, tag: i32, seq: u64, size: u32, capacity: u32) {
        self.health.counters.truncated += 1;
        if self.health.counters.truncated == 1 {
            self.truncation_note = Some(Truncation {
                tag,
                seq,
                size,
                capacity,
            });
        }
    }

    /// The head group, when an `isend` now could only open it (the comm healthy and running, no
    /// group open, its slot free): the call's answer then depends on that group's first FIFO
    /// entry alone. A transport may look at the entry's sequence word itself and, while it is
    /// not there, answer the retry without the core ([`SendCore::awaited_hint`]) and without
    /// matching anything: the same answer, counters and wait as [`SendCore::isend`] would give.
    #[inline]
    pub fn awaited_group(&self) -> Option<u64> {
        let seq = self.seq;
        let idle = !self.open
            && self.health.failure().is_none()
            && !self.recovery.is_stopped()
            && self.inflight[slot(seq)].remaining == 0;
        idle.then_some(seq)
    }

    /// The head group, when [`SendCore::awaited_group`] gives it and no recovery is wanted
    /// either: the hint a transport may publish for retries answered without its lock (see
    /// [`SendCore::add_cts_waits`]). Every other state leaves the answer to [`SendCore::isend`].
    #[inline]
    pub fn awaited_hint(&self) -> Option<u64> {
        self.awaited_group().filter(|_| !self.recovery.is_wanted())
    }

    /// Whether a hint of [`SendCore::awaited_hint`] published earlier must be withdrawn by a
    /// locked section that neither opens a group nor fills a slot (a `test`): the comm failed,
    /// or a recovery stopped it or is wanted.
    #[inline]
    pub fn hint_withdrawn(&self) -> bool {
        self.health.failure().is_some() || self.recovery.is_stopped() || self.recovery.is_wanted()
    }

    /// Accounts `n` retries of `isend` that the transport answered without the core, each one
    /// having found the head group's ([`SendCore::awaited_hint`], unchanged since) first entry
    /// not written yet: the same counters and wait as `n` calls of
    /// `isend` that found that entry missing, and `n` waiting calls towards the periodic look.
    #[inline]
    pub fn add_cts_waits(&mut self, n: u32) {
        let c = &mut self.health.counters;
        c.retries += u64::from(n);
        c.cts_waits += u64::from(n);
        self.last_wait = Some(SendWait::ClearToSend { seq: self.seq });
        self.health.add_waits(n);
    }

    /// The group the last [`SendStep::Post`] completed, to be written now: valid until the next
    /// `isend` (which may open the next group).
    #[inline]
    pub fn ready_group(&self) -> ReadyGroup<'_> {
        let g = &self.cur;
        let f = &self.inflight[slot(g.seq)];
        ReadyGroup {
            seq: g.seq,
            qps: g.qps,
            items: &f.items[..g.n],
            reqs: &f.reqs[..g.n],
            epoch: self.recovery.epoch(),
        }
    }

    #[inline]
    fn retry(&mut self, wait: SendWait) -> SendStep {
        self.health.counters.retries += 1;
        self.last_wait = Some(wait);
        match wait {
            SendWait::ClearToSend { .. } => self.health.counters.cts_waits += 1,
            SendWait::SlotBusy { .. } => self.health.counters.slot_busy += 1,
            SendWait::TagAhead { .. } => self.health.counters.tag_ahead += 1,
            SendWait::QueueFull { .. } => self.health.counters.queue_full += 1,
            SendWait::Recovering { .. } => {}
        }
        SendStep::Retry(wait)
    }

    /// The comm's first truncated send, once (the transport says it at INFO).
    pub fn take_truncation_note(&mut self) -> Option<Truncation> {
        self.truncation_note.take()
    }

    /// Whether [`SendCore::take_truncation_note`] has a note to give.
    #[inline]
    pub fn has_truncation_note(&self) -> bool {
        self.truncation_note.is_some()
    }

    /// Opens the head group in place from its FIFO slot, if the receiver's entries are all
    /// there (on failure nothing is open, whatever was read).
    #[inline(always)]
    fn open_group(
        &mut self,
        read_entry: &mut impl FnMut(u64, usize) -> Option<CtsEntry>,
    ) -> Result<(), SendWait> {
        let seq = self.seq;
        if self.inflight[slot(seq)].remaining > 0 {
            return Err(SendWait::SlotBusy { seq });
        }
        // One call site of `read_entry` here (beside the straight path's), each entry decoded
        // straight into the group and the slot's items; the first says how many there are.
        let (g, items) = (&mut self.cur, &mut self.inflight[slot(seq)].items);
        let (mut i, mut n, mut nreqs) = (0, 1, 0);
        while i < n {
            match read_entry(seq, i) {
                Some(e) if i == 0 || e.nreqs == nreqs => {
                    g.tags[i] = e.tag;
                    g.caps[i] = e.size;
                    items[i].remote_addr = e.addr;
                    items[i].rkeys = e.rkeys;
                    nreqs = e.nreqs;
                }
                _ => return Err(SendWait::ClearToSend { seq }),
            }
            n = usize::from(nreqs);
            i += 1;
        }
        g.seq = seq;
        g.n = n;
        g.taken = [false; MAX_RECVS];
        g.left = n;
        Ok(())
    }

    /// A successful completion polled from the comm's CQ. One of work posted before the last
    /// recovery (another epoch), or polled while the comm is stopped, is ignored: the
    /// receiver's report decides what became of that work.
    #[inline]
    pub fn handle_completion(&mut self, wr_id: u64) {
        // The common completion, one compare: a group's write of the current epoch, the comm
        // running.
        let Some(seq) = wr_id::send_in(wr_id, self.recovery.counting()) else {
            self.other_completion(wr_id);
            return;
        };
        self.health.counters.completions += 1;
        let f = &mut self.inflight[slot(seq)];
        if f.seq != seq || f.remaining == 0 {
            return;
        }
        f.remaining -= 1;
        if f.remaining == 0 {
            for &r in &f.reqs[..f.n] {
                if let Some(s) = self.reqs.get_mut(r) {
                    s.done = true;
                }
            }
            match f.held_on {
                Some(held) => self.room.give_back_held(held),
                None => self.room.give_back(seq, &f.items[..f.n], &self.layout),
            }
        }
    }

    /// A completion that is not a send write of the current epoch: counted if its epoch counts
    /// (other work, which a send comm does not post), else ignored.
    #[cold]
    #[inline(never)]
    fn other_completion(&mut self, wr_id: u64) {
        if self.recovery.counts(wr_id::epoch_of(wr_id)) {
            self.health.counters.completions += 1;
        }
    }

    /// Whether request `req` is in flight and not done yet (`take_done` would answer `None`):
    /// the cheap question a waiting `test` asks before and after its poll.
    #[inline]
    pub fn is_pending(&self, req: u32) -> bool {
        self.reqs.get(req).is_some_and(|s| !s.done)
    }

    /// The request's result if it is in flight and done (it is then freed), in one look-up:
    /// what a `test` whose poll found completions asks first. `None` otherwise.
    #[inline(always)]
    pub fn take_ready(&mut self, req: u32) -> Option<Done> {
        self.take_ready_size(req).map(Done::one)
    }

    /// [`SendCore::take_ready`] as the send's size alone (all a send reports): what `test`
    /// asks first, before any poll. Changes nothing but the request table.
    #[inline(always)]
    pub fn take_ready_size(&mut self, req: u32) -> Option<u32> {
        self.reqs.take_if(req, |s| s.done.then_some(s.size))
    }

    /// `test`: the request's result when it is done (the request is then freed).
    #[inline]
    pub fn take_done(&mut self, req: u32) -> Result<Option<Done>, CoreError> {
        self.reqs.in_flight_mut(req)?;
        Ok(self.take_ready(req))
    }

    /// `test` of request `req` after the last poll ([`super::test_outcome`]): done (and freed)
    /// if its completion was polled, even once the comm failed; else the comm's failure, if
    /// any; else not done yet.
    #[inline]
    pub fn test(&mut self, req: u32) -> Result<Option<Done>, CoreError> {
        let taken = self.take_done(req)?;
        super::test_outcome(taken, &self.health)
    }

    /// Whether the comm waits on its peer: sends in flight, or the last `isend` was retried.
    pub fn is_waiting(&self) -> bool {
        self.reqs.in_flight() > 0 || self.last_wait.is_some()
    }

    /// What the comm waits for, in words a user can act on (for the stall warning).
    pub fn describe_wait(&self) -> String {
        let in_flight = self.reqs.in_flight();
        let head = match self.last_wait {
            Some(SendWait::ClearToSend { seq }) => format!(
                "a send waits for the receiver's clear-to-send for receive #{seq} (the receiver has posted {seq} receives so far)"
            ),
            Some(SendWait::TagAhead { tag, seq }) => format!(
                "a send with tag {tag} waits for receive #{}: the other members of receive #{seq} have not been sent yet",
                seq + 1
            ),
            Some(SendWait::SlotBusy { seq }) => format!(
                "a send waits for the completions of receive #{}'s writes before its FIFO slot is reused",
                seq.saturating_sub(SLOTS as u64)
            ),
            Some(SendWait::Recovering { epoch }) => format!(
                "the comm is recovering (epoch {epoch}): sends wait for its QPs to be rebuilt"
            ),
            Some(SendWait::QueueFull { seq, qp }) => format!(
                "the writes of receive #{seq} wait for room in the send queue of QP {qp} ({} work requests held): earlier writes have not completed",
                self.room.held(qp)
            ),
            None => "no send is being retried".to_string(),
        };
        format!("{head}; {in_flight} sends in flight waiting for their write completions")
    }

    /// Sends matched or posted and not yet reported done.
    pub fn in_flight(&self) -> usize {
        self.reqs.in_flight()
    }
}

/// The error of a call on a comm that failed earlier.
#[cold]
#[inline(never)]
fn failed(f: &Failure) -> CoreError {
    CoreError::Failed(f.clone())
}

/// The largest lone buffer that goes as one write with its immediate: within `max_write`, and
/// not over the adaptive routing threshold when that is on.
fn lone_max(max_write: u32, ar: AdaptiveRouting) -> u32 {
    ar.threshold().map_or(max_write, |t| t.min(max_write))
}

fn slot(seq: u64) -> usize {
    (seq % SLOTS as u64) as usize
}

#[cfg(test)]
mod tests;
