//! The receive side of a comm: what a posted receive turns into (zero-length receives on the
//! QPs its group uses, and clear-to-send entries for the sender's FIFO), how the immediates of
//! a group add up to a finished request, and flush requests.
//!
//! Rules (see `docs/DESIGN.md`, "Data path"):
//! - Receive group `k` takes FIFO slot `k % SLOTS`; at most [`SLOTS`] groups are outstanding,
//!   beyond that `irecv` is answered with a retry (NULL request).
//! - A group is done when every QP it uses delivered its immediate. With one buffer the size is
//!   the sum of the immediates; with several the sizes come from the sizes FIFO, which the
//!   transport reads when the core asks for it.
//! - Clear-to-send writes are coalesced: a receive's entries are staged at once (at the same
//!   offsets in the receiver's staging as in the sender's FIFO), and one RDMA write carries the
//!   entries of every staged group, a run of consecutive FIFO slots ([`CtsWrite`]). The write
//!   is due as soon as as many groups are staged as the sender still holds unused
//!   (`staged >= supply`), judged at the `irecv` that stages a group and on every other call
//!   on the comm ([`RecvCore::cts_due`]); any waiting call forces it out
//!   ([`RecvCore::cts_flush`]). An idle comm or a ping-pong (supply 0 or 1) writes every
//!   receive at once, as NCCL's own transport does.
//!   With `W` receives kept posted the sender thus always holds at least `W / 2` entries (a
//!   whole round trip of the write is covered when the link is slow) and each write carries
//!   about `W / 2` groups: one write per 16 receives at NCCL's limit of 32, per 4 at its
//!   usual 8 steps ahead.
//! - One clear-to-send write in [`CTS_SIGNAL_EVERY`] is signaled.
//! - Each receive's `wr_id` names the QP it was posted on, so the core knows which of a group's
//!   QPs delivered; that is what it reports when the comm stops for recovery ([`recovery`]).
//!   While stopped, `irecv` is retried, nothing is written and completions of destroyed QPs
//!   (an older epoch) are ignored.

mod recovery;

pub use recovery::{RecvResume, Repost};

use super::requests::RequestTable;
use super::wr_id::{self, CTS_SIGNAL_EVERY, WrId};
use super::{CommHealth, CoreError, Done};
use crate::fifo::{CtsEntry, ENTRY_SIZE, FIFO_BYTES, entry_offset};
use crate::plan::QpLayout;
use crate::recovery::Recovery;
use crate::{Keys, MAX_RECVS, SLOTS};
use std::ops::Range;

/// Receive requests one comm can hold (receives and flushes together).
pub const RECV_REQS: usize = SLOTS;

/// One buffer of a grouped receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvBuf {
    pub addr: u64,
    pub size: u32,
    pub tag: i32,
    /// The buffer's remote key on each member device of this side.
    pub rkeys: Keys,
}

/// What the transport posts for a receive. Its clear-to-send entries are not kept: the
/// transport encodes them straight from the receive's buffers into its staging
/// ([`PostRecv::entry`]), so nothing large is stored, copied or read back per message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostRecv {
    pub req: u32,
    pub seq: u64,
    /// One zero-length receive on each of these QPs (wr_id [`PostRecv::recv_wr_id`]).
    pub qps: Range<usize>,
    /// The clear-to-send write to post now (after the receives), or `None` when the entries
    /// stay staged for a later, coalesced write.
    pub cts: Option<CtsWrite>,
    /// The comm's recovery epoch, carried by the `wr_id`s.
    pub epoch: u32,
}

impl PostRecv {
    /// The clear-to-send entry of buffer `i` of this receive's `n` buffers, `b`: to be staged
    /// at [`PostRecv::stage_offset`] + `i * ENTRY_SIZE` (the offset of FIFO slot
    /// `seq % SLOTS`) before anything is posted.
    #[inline(always)]
    pub fn entry(&self, i: usize, n: usize, b: &RecvBuf) -> CtsEntry {
        CtsEntry {
            seq: self.seq + 1,
            addr: b.addr,
            rkeys: b.rkeys,
            size: b.size,
            tag: b.tag,
            nreqs: n as u16,
            idx: i as u16,
        }
    }

    /// Every entry of this receive of `bufs` ([`PostRecv::entry`]), in buffer order.
    #[inline(always)]
    pub fn entries<'a>(&'a self, bufs: &'a [RecvBuf]) -> impl Iterator<Item = CtsEntry> + 'a {
        let n = bufs.len();
        bufs.iter()
            .enumerate()
            .map(move |(i, b)| self.entry(i, n, b))
    }

    /// Where the entries go, in the staging area and in the sender's FIFO alike.
    pub fn stage_offset(&self) -> usize {
        entry_offset(self.seq, 0)
    }

    /// The `wr_id` of the receives when the QP they are posted on is not named (QP index 0).
    pub fn recv_wr_id(&self) -> u64 {
        WrId::Recv { req: self.req }.encode_in(self.epoch)
    }

    /// The `wr_id` of the receive posted on QP `q`: it names the QP, which a recovery needs
    /// to know which of the group's QPs delivered.
    pub fn recv_wr_id_on(&self, q: usize) -> u64 {
        WrId::recv_on(self.req, q, self.epoch)
    }
}

/// One clear-to-send write: the staged entries of receive groups `from..to`, which sit in
/// consecutive FIFO slots. The same byte ranges are read from the receiver's staging and written
/// into the sender's FIFO; a run that wraps around the end of the ring is two ranges (two work
/// requests chained in one post). Slots before the last are written whole: the entries past a
/// group's own count are old ones, which the sender never reads (it reads `nreqs` entries and
/// checks each one's sequence number).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CtsWrite {
    pub from: u64,
    pub to: u64,
    /// The bytes written of the run's last slot: its group's entries. The byte ranges are
    /// computed when the write is posted, so an `irecv` whose entries stay staged carries
    /// little.
    last_bytes: u32,
    epoch: u32,
    /// Whether the (last) work request is signaled.
    pub signaled: bool,
}

impl CtsWrite {
    fn new(from: u64, to: u64, last_n: usize, signaled: bool) -> CtsWrite {
        debug_assert!(from < to && to - from <= SLOTS as u64);
        CtsWrite {
            from,
            to,
            last_bytes: (last_n * ENTRY_SIZE) as u32,
            epoch: 0,
            signaled,
        }
    }

    /// The run's byte ranges: `[start..end, 0..0]`, or `[start..FIFO_BYTES, 0..end]` when it
    /// wraps around the end of the ring.
    #[inline]
    fn range_pair(&self) -> [Range<usize>; 2] {
        let start = entry_offset(self.from, 0);
        let end = entry_offset(self.to - 1, 0) + self.last_bytes as usize;
        if end > start {
            [start..end, 0..0]
        } else {
            [start..FIFO_BYTES, 0..end]
        }
    }

    /// The byte ranges to write (one, or two when the run wraps), in posting order.
    #[inline]
    pub fn ranges(&self) -> impl Iterator<Item = Range<usize>> + use<> {
        self.range_pair().into_iter().filter(|r| !r.is_empty())
    }

    /// Whether the run wraps around the end of the ring (two ranges, two work requests).
    #[inline]
    pub fn wraps(&self) -> bool {
        !self.range_pair()[1].is_empty()
    }

    /// Receive groups this write announces.
    pub fn groups(&self) -> u64 {
        self.to - self.from
    }

    pub fn wr_id(&self) -> u64 {
        WrId::Cts { seq: self.to - 1 }.encode_in(self.epoch)
    }
}

/// What the transport does for an `irecv`.
#[allow(
    clippy::large_enum_variant,
    reason = "returned by value on the data path: boxing would allocate per message"
)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecvStep {
    /// [`SLOTS`] receives are outstanding (or the table is full): answer NULL, NCCL retries.
    Retry,
    Post(PostRecv),
}

/// A request in flight: the completions it still waits for, and what it is. `remaining` is
/// the one field `test` asks while waiting (0: done), whatever the kind.
#[derive(Debug, Clone, Copy)]
struct RecvReq {
    /// Completions still awaited: the immediates of a receive's QPs, the reads of a flush.
    remaining: u16,
    kind: ReqKind,
}

#[derive(Debug, Clone, Copy)]
enum ReqKind {
    /// A (grouped) receive. `done` is its answer once `remaining` reaches 0 (`done.n` is the
    /// group's buffer count from the start); until then `done.sizes[0]` adds up the
    /// immediates (the size of a group of one buffer).
    Recv {
        seq: u64,
        done: Done,
        /// Bit `q` set: QP `q`'s immediate arrived (kept while the group waits for others;
        /// a finished group's is never read).
        arrived: u128,
    },
    /// A flush: one RDMA READ on the loopback flush QP of each member device; done when all
    /// of them completed (`reads` of them, reposted whole after a recovery).
    Flush { reads: u16, target: FlushTarget },
}

/// What a flush reads back: one byte at `addr`, under the buffer's key on each member device
/// (kept so that a recovery can post the reads again).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlushTarget {
    pub addr: u64,
    pub rkeys: Keys,
}

/// The receive side's state.
#[derive(Debug)]
pub struct RecvCore {
    layout: QpLayout,
    /// [`QpLayout::group_qps`] of this (fixed) layout, worked out once: a group uses
    /// `group_width` QPs from `(seq % group_windows) * group_width` on.
    group_width: usize,
    group_windows: u64,
    reqs: RequestTable<RecvReq>,
    /// The next receive group.
    seq: u64,
    /// Receive groups posted and not yet finished.
    posted: usize,
    /// The first group whose clear-to-send entries are staged but not yet written.
    cts_next: u64,
    /// Buffers of the newest group (the end of any staged run).
    last_n: usize,
    /// Clear-to-send writes made (for signaling one in [`CTS_SIGNAL_EVERY`]).
    cts_writes: u64,
    /// The comm's sticky error, counters and stall watchdog.
    pub health: CommHealth,
    /// The epoch, the stop and the budget of recovery in place.
    pub recovery: Recovery,
}

impl RecvCore {
    pub fn new(layout: QpLayout) -> RecvCore {
        let nqps = layout.nqps.max(1);
        let group_width = if layout.split {
            nqps
        } else {
            layout.data_qps()
        };
        RecvCore {
            layout,
            group_width,
            group_windows: (nqps / group_width).max(1) as u64,
            reqs: RequestTable::new(RECV_REQS),
            seq: 0,
            posted: 0,
            cts_next: 0,
            last_n: 0,
            cts_writes: 0,
            health: CommHealth::default(),
            recovery: Recovery::default(),
        }
    }

    /// Posts a receive group of `bufs.len()` buffers (1 to [`MAX_RECVS`]). Inline (in each
    /// version's `irecv` entry point): the caller then builds the answer in place instead of
    /// copying it out.
    #[inline(always)]
    pub fn irecv(&mut self, bufs: &[RecvBuf]) -> Result<RecvStep, CoreError> {
        if bufs.is_empty() || bufs.len() > MAX_RECVS {
            return Err(CoreError::Usage(format!(
                "irecv with n={} (must be 1..={MAX_RECVS})",
                bufs.len()
            )));
        }
        self.health.check()?;
        if self.posted >= SLOTS || self.reqs.is_full() || self.recovery.is_stopped() {
            self.health.counters.retries += 1;
            return Ok(RecvStep::Retry);
        }
        let seq = self.seq;
        let n = bufs.len();
        let qps = self.group_qps(seq);
        let req = self.reqs.alloc(RecvReq {
            remaining: qps.len() as u16,
            kind: ReqKind::Recv {
                seq,
                done: Done {
                    sizes: [0; MAX_RECVS],
                    n,
                },
                arrived: 0,
            },
        })?;
        self.seq += 1;
        self.posted += 1;
        self.last_n = n;
        self.health.counters.requests += 1;
        let cts = self.cts_due();
        let epoch = self.recovery.epoch();
        Ok(RecvStep::Post(PostRecv {
            req,
            seq,
            qps,
            cts,
            epoch,
        }))
    }

    /// The QPs group `seq` uses ([`QpLayout::group_qps`]), without re-deriving the layout's
    /// window per receive: one QP and no division in the common case.
    #[inline]
    fn group_qps(&self, seq: u64) -> Range<usize> {
        let start = if self.group_windows == 1 {
            0
        } else {
            (seq % self.group_windows) as usize * self.group_width
        };
        start..start + self.group_width
    }

    /// Clear-to-send entries the sender holds and has not used yet: groups whose entries were
    /// written and that have not finished (a finished group consumed its entries).
    #[inline]
    pub fn supply(&self) -> u64 {
        let finished = self.seq - self.posted as u64;
        self.cts_next.saturating_sub(finished)
    }

    /// Groups whose entries are staged but not yet written.
    #[inline]
    pub fn staged(&self) -> u64 {
        self.seq - self.cts_next
    }

    /// The write the transport should post now on any call on the comm other than a
    /// successful `irecv`: the staged groups, once there are as many as the sender still holds.
    #[inline(always)]
    pub fn cts_due(&mut self) -> Option<CtsWrite> {
        if self.staged() > 0 && self.staged() >= self.supply() {
            self.take_cts()
        } else {
            None
        }
    }

    /// Every staged group, now: for a call that waits (a retried `irecv`, the periodic look
    /// of any comm of the process), so no entry ever waits on a caller busy elsewhere.
    pub fn cts_flush(&mut self) -> Option<CtsWrite> {
        if self.staged() > 0 {
            self.take_cts()
        } else {
            None
        }
    }

    fn take_cts(&mut self) -> Option<CtsWrite> {
        if self.health.failure().is_some() || self.recovery.is_stopped() {
            return None;
        }
        let (from, to) = (self.cts_next, self.seq);
        if from == to {
            return None;
        }
        self.cts_next = to;
        let signaled = self.cts_writes % CTS_SIGNAL_EVERY == 0;
        self.cts_writes += 1;
        self.health.counters.cts_writes += 1;
        Some(CtsWrite {
            epoch: self.recovery.epoch(),
            ..CtsWrite::new(from, to, self.last_n, signaled)
        })
    }

    /// A flush request of `reads` RDMA READs (one per member device). A full table is an
    /// error, never a NULL request: NULL from `iflush` means "nothing to flush", so NCCL would
    /// go on before the data is visible.
    pub fn begin_flush(&mut self, reads: u16) -> Result<u32, CoreError> {
        self.begin_flush_of(reads, FlushTarget::default())
    }

    /// [`RecvCore::begin_flush`] of the byte at `target`, which a recovery reads again.
    pub fn begin_flush_of(&mut self, reads: u16, target: FlushTarget) -> Result<u32, CoreError> {
        self.health.check()?;
        let req = self.reqs.alloc(RecvReq {
            remaining: reads.max(1),
            kind: ReqKind::Flush {
                reads: reads.max(1),
                target,
            },
        })?;
        self.health.counters.requests += 1;
        Ok(req)
    }

    /// The flush could not be posted: its request is dropped.
    pub fn abort_flush(&mut self, req: u32) {
        self.reqs.release(req);
    }

    /// The `wr_id` of a flush's reads on a comm that never recovered.
    pub fn flush_wr_id(req: u32) -> u64 {
        WrId::Flush { req }.encode()
    }

    /// The `wr_id` of a flush's reads in the comm's current epoch.
    pub fn flush_wr_id_now(&self, req: u32) -> u64 {
        WrId::Flush { req }.encode_in(self.recovery.epoch())
    }

    /// A successful completion polled from the comm's CQ. `read_sizes(seq, n)` reads the sizes
    /// FIFO slot of group `seq`; it is called once, when a group of several buffers finishes.
    /// A completion of work posted before the last recovery (another epoch), or polled while
    /// the comm is stopped, is ignored: what the comm reported at its stop is the truth.
    /// Inline: it runs inside the poll of `test`, once per completion.
    #[inline(always)]
    pub fn handle_completion(
        &mut self,
        wr_id: u64,
        imm: u32,
        read_sizes: impl FnOnce(u64, usize) -> [u32; MAX_RECVS],
    ) {
        if !self.recovery.counts(wr_id::epoch_of(wr_id)) {
            return;
        }
        self.health.counters.completions += 1;
        // A receive's immediate, the common completion: one compare on the kind (no decode).
        if let Some(req) = wr_id::recv_req(wr_id) {
            let Some(RecvReq {
                remaining,
                kind: ReqKind::Recv { seq, done, arrived },
            }) = self.reqs.get_mut(req)
            else {
                return;
            };
            if *remaining == 0 {
                return;
            }
            // The immediates of a group add up to the bytes its one buffer received, at
            // most u32::MAX (what a request carries); a peer that claims more is held at
            // u32::MAX rather than wrapped to a small size.
            done.sizes[0] = done.sizes[0].saturating_add(imm);
            *remaining -= 1;
            if *remaining > 0 {
                // Which QPs delivered matters only while the group waits for others (what a
                // recovery reports and reposts); a finished group is never asked.
                *arrived |= 1u128 << (wr_id::recv_qp(wr_id) & 127);
                return;
            }
            let n = done.n;
            // One buffer (the common group): its size is the immediates' sum, no loop.
            let bytes = if n == 1 {
                u64::from(done.sizes[0])
            } else {
                done.sizes = read_sizes(*seq, n);
                done.sizes[..n].iter().map(|&s| u64::from(s)).sum::<u64>()
            };
            self.posted -= 1;
            self.health.counters.messages += n as u64;
            self.health.counters.bytes += bytes;
            return;
        }
        self.other_completion(wr_id);
    }

    /// A completion other than a receive's (a flush's read; a signaled clear-to-send write,
    /// which only frees its slot in the send queue): out of line, so that the receive's path
    /// stays one compare on the kind.
    #[inline(never)]
    fn other_completion(&mut self, wr_id: u64) {
        if let WrId::Flush { req } = WrId::decode(wr_id)
            && let Some(RecvReq {
                remaining,
                kind: ReqKind::Flush { .. },
            }) = self.reqs.get_mut(req)
        {
            *remaining = remaining.saturating_sub(1);
        }
    }

    /// Whether request `req` is in flight and not done yet (`take_done` would answer `None`):
    /// the cheap question a waiting `test` asks before and after its poll.
    #[inline]
    pub fn is_pending(&self, req: u32) -> bool {
        self.reqs.get(req).is_some_and(|r| r.remaining != 0)
    }

    /// `test`: the request's result when it is done (the request is then freed).
    #[inline]
    pub fn take_done(&mut self, req: u32) -> Result<Option<Done>, CoreError> {
        self.reqs.in_flight_mut(req)?;
        Ok(self.take_ready(req))
    }

    /// The request's result if it is in flight and done (it is then freed), in one look-up:
    /// what a `test` whose poll found completions asks. `None` for a request still pending,
    /// and for one not in flight (which `take_done` reports as an error).
    #[inline]
    pub fn take_ready(&mut self, req: u32) -> Option<Done> {
        let mut done = None;
        self.take_ready_with(req, |d| done = Some(*d));
        done
    }

    /// [`RecvCore::take_ready`], handing the result to `on_done` where it lies (no copy of
    /// it through the callers): whether the request was done (and is now freed).
    #[inline(always)]
    pub fn take_ready_with(&mut self, req: u32, on_done: impl FnOnce(&Done)) -> bool {
        // Inline (a call per finished request otherwise).
        let ready = {
            #[inline(always)]
            |r: &RecvReq| {
                if r.remaining != 0 {
                    return false;
                }
                match &r.kind {
                    ReqKind::Recv { done, .. } => on_done(done),
                    ReqKind::Flush { .. } => on_done(&Done::NOTHING),
                }
                true
            }
        };
        self.reqs.free_if(req, ready)
    }

    /// `test` of request `req` after the last poll ([`super::test_outcome`]): done (and freed)
    /// if its completion was polled, even once the comm failed; else the comm's failure, if
    /// any; else not done yet.
    #[inline]
    pub fn test(&mut self, req: u32) -> Result<Option<Done>, CoreError> {
        let taken = self.take_done(req)?;
        super::test_outcome(taken, &self.health)
    }

    /// Whether the comm waits on its peer: receives or flushes outstanding.
    pub fn is_waiting(&self) -> bool {
        self.posted > 0 || self.reqs.in_flight() > 0
    }

    /// What the comm waits for, in words a user can act on (for the stall warning).
    pub fn describe_wait(&self) -> String {
        let recovering = if self.recovery.is_stopped() {
            format!("the comm is recovering (epoch {}): ", self.recovery.epoch())
        } else {
            String::new()
        };
        format!(
            "{recovering}{} receives posted wait for the sender's data (the oldest is receive #{}; {} of them announced to the sender, {} staged); {} receives finished so far",
            self.posted,
            self.seq - self.posted as u64,
            self.supply(),
            self.staged(),
            self.seq - self.posted as u64
        )
    }

    /// Receive groups posted and not yet finished.
    pub fn posted(&self) -> usize {
        self.posted
    }
}

#[cfg(test)]
mod tests;
