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
//! - A posted group's sends stay in its slot's bookkeeping until the group is delivered, so a
//!   recovery can replay them ([`recovery`]); while the comm is stopped for recovery every
//!   `isend` is retried and completions of destroyed QPs (an older epoch) are ignored.

mod recovery;

use super::requests::RequestTable;
use super::wr_id::{self, WrId};
use super::{CommHealth, CoreError, Done, Failure};
use crate::Keys;
use crate::fifo::{self, CtsEntry};
use crate::plan::{QpLayout, SendItem};
use crate::recovery::Recovery;
use crate::{MAX_RECVS, SLOTS};

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
}

/// What the transport does for an `isend`. Small on purpose: the group to write stays in the
/// core ([`SendCore::ready_group`]), so nothing large is copied per message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    items: &'a [SendItem],
    reqs: &'a [u32],
    epoch: u32,
}

impl<'a> ReadyGroup<'a> {
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
/// next one opens. One per core, reused in place: it is large (up to 8 entries and items with a
/// key per member device), and copying it per message costs time on the data path.
#[derive(Debug, Clone, Copy)]
struct GroupBuf {
    seq: u64,
    entries: [CtsEntry; MAX_RECVS],
    n: usize,
    taken: [bool; MAX_RECVS],
    items: [SendItem; MAX_RECVS],
    reqs: [u32; MAX_RECVS],
}

/// Signaled writes still outstanding for the group that last used a slot, and its sends (kept
/// until the group is delivered, for a replay after a recovery).
#[derive(Debug, Clone, Copy)]
struct InFlight {
    seq: u64,
    remaining: u32,
    reqs: [u32; MAX_RECVS],
    n: usize,
    items: [SendItem; MAX_RECVS],
    /// The QPs whose shares a recovery replays (bit `q` for QP `q`); zero otherwise.
    replay: u128,
}

const IDLE: InFlight = InFlight {
    seq: 0,
    remaining: 0,
    reqs: [0; MAX_RECVS],
    n: 0,
    items: [NO_ITEM; MAX_RECVS],
    replay: 0,
};

const NO_ENTRY: CtsEntry = CtsEntry {
    seq: 0,
    addr: 0,
    rkeys: [0; crate::MAX_DEVS],
    size: 0,
    tag: 0,
    nreqs: 0,
    idx: 0,
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
}

impl SendCore {
    pub fn new(layout: QpLayout) -> SendCore {
        SendCore {
            layout,
            reqs: RequestTable::new(SEND_REQS),
            seq: 0,
            cur: GroupBuf {
                seq: 0,
                entries: [NO_ENTRY; MAX_RECVS],
                n: 0,
                taken: [false; MAX_RECVS],
                items: [NO_ITEM; MAX_RECVS],
                reqs: [0; MAX_RECVS],
            },
            open: false,
            inflight: [IDLE; SLOTS],
            health: CommHealth::default(),
            truncation_note: None,
            oversize: Oversize::Truncate,
            last_wait: None,
            recovery: Recovery::default(),
            peer_state_applied: false,
        }
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
    pub fn isend(
        &mut self,
        tag: i32,
        size: u32,
        addr: u64,
        lkeys: Keys,
        mut read_entry: impl FnMut(u64, usize) -> Option<CtsEntry>,
    ) -> Result<SendStep, CoreError> {
        self.health.check()?;
        if self.recovery.is_stopped() {
            let epoch = self.recovery.epoch();
            return Ok(self.retry(SendWait::Recovering { epoch }));
        }
        if !self.open {
            if let Err(wait) = self.open_group(&mut read_entry) {
                return Ok(self.retry(wait));
            }
            self.open = true;
        }
        let g = &self.cur;
        let Some(i) = fifo::find_buffer(&g.entries[..g.n], &g.taken[..g.n], tag) else {
            let seq = g.seq;
            return Ok(self.retry(SendWait::TagAhead { tag, seq }));
        };
        let (gseq, capacity) = (g.seq, g.entries[i].size);
        if size > capacity && self.oversize == Oversize::Refuse {
            let f = Failure::usage(format!(
                "send of {size} bytes (tag {tag}) is larger than the receive buffer of {capacity} bytes it matched (receive #{gseq}): a comm of ABI v7 refuses it, as NCCL 2.19 did; nothing was sent"
            ));
            return Err(CoreError::Failed(self.health.fail(f).clone()));
        }
        let size = if size > capacity {
            self.health.counters.truncated += 1;
            if self.health.counters.truncated == 1 {
                self.truncation_note = Some(Truncation {
                    tag,
                    seq: gseq,
                    size,
                    capacity,
                });
            }
            capacity
        } else {
            size
        };
        let req = self.reqs.alloc(SendReq { size, done: false })?;
        self.health.counters.messages += 1;
        self.health.counters.bytes += u64::from(size);
        self.health.counters.requests += 1;
        self.last_wait = None;
        let g = &mut self.cur;
        g.taken[i] = true;
        g.items[i] = SendItem {
            addr,
            lkeys,
            size,
            remote_addr: g.entries[i].addr,
            rkeys: g.entries[i].rkeys,
        };
        g.reqs[i] = req;
        if !g.taken[..g.n].iter().all(|t| *t) {
            return Ok(SendStep::Matched { req });
        }
        self.open = false;
        // Field by field: only the group's own items are copied (one for a single buffer).
        let f = &mut self.inflight[slot(gseq)];
        f.seq = gseq;
        f.remaining = self.layout.group_qps(gseq).len() as u32;
        f.reqs = g.reqs;
        f.n = g.n;
        f.items[..g.n].copy_from_slice(&g.items[..g.n]);
        f.replay = 0;
        self.seq += 1;
        Ok(SendStep::Post { req })
    }

    /// The group the last [`SendStep::Post`] completed, to be written now: valid until the next
    /// `isend` (which may open the next group).
    pub fn ready_group(&self) -> ReadyGroup<'_> {
        let g = &self.cur;
        ReadyGroup {
            seq: g.seq,
            items: &g.items[..g.n],
            reqs: &g.reqs[..g.n],
            epoch: self.recovery.epoch(),
        }
    }

    fn retry(&mut self, wait: SendWait) -> SendStep {
        self.health.counters.retries += 1;
        self.last_wait = Some(wait);
        match wait {
            SendWait::ClearToSend { .. } => self.health.counters.cts_waits += 1,
            SendWait::SlotBusy { .. } => self.health.counters.slot_busy += 1,
            SendWait::TagAhead { .. } => self.health.counters.tag_ahead += 1,
            SendWait::Recovering { .. } => {}
        }
        SendStep::Retry(wait)
    }

    /// The comm's first truncated send, once (the transport says it at INFO).
    pub fn take_truncation_note(&mut self) -> Option<Truncation> {
        self.truncation_note.take()
    }

    /// Opens the head group in place from its FIFO slot, if the receiver's entries are all
    /// there (on failure nothing is open, whatever was read).
    fn open_group(
        &mut self,
        read_entry: &mut impl FnMut(u64, usize) -> Option<CtsEntry>,
    ) -> Result<(), SendWait> {
        let seq = self.seq;
        if self.inflight[slot(seq)].remaining > 0 {
            return Err(SendWait::SlotBusy { seq });
        }
        let first = read_entry(seq, 0).ok_or(SendWait::ClearToSend { seq })?;
        let n = usize::from(first.nreqs);
        let g = &mut self.cur;
        g.entries[0] = first;
        for i in 1..n {
            match read_entry(seq, i) {
                Some(e) if e.nreqs == first.nreqs => g.entries[i] = e,
                _ => return Err(SendWait::ClearToSend { seq }),
            }
        }
        g.seq = seq;
        g.n = n;
        g.taken = [false; MAX_RECVS];
        Ok(())
    }

    /// A successful completion polled from the comm's CQ. One of work posted before the last
    /// recovery (another epoch), or polled while the comm is stopped, is ignored: the
    /// receiver's report decides what became of that work.
    pub fn handle_completion(&mut self, wr_id: u64) {
        if !self.recovery.counts(wr_id::epoch_of(wr_id)) {
            return;
        }
        self.health.counters.completions += 1;
        if let WrId::Send { seq } = WrId::decode(wr_id) {
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
            }
        }
    }

    /// `test`: the request's result when it is done (the request is then freed).
    pub fn take_done(&mut self, req: u32) -> Result<Option<Done>, CoreError> {
        let s = *self.reqs.in_flight_mut(req)?;
        if !s.done {
            return Ok(None);
        }
        self.reqs.release(req);
        Ok(Some(Done::one(s.size)))
    }

    /// `test` of request `req` after the last poll ([`super::test_outcome`]): done (and freed)
    /// if its completion was polled, even once the comm failed; else the comm's failure, if
    /// any; else not done yet.
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
            None => "no send is being retried".to_string(),
        };
        format!("{head}; {in_flight} sends in flight waiting for their write completions")
    }

    /// Sends matched or posted and not yet reported done.
    pub fn in_flight(&self) -> usize {
        self.reqs.in_flight()
    }
}

fn slot(seq: u64) -> usize {
    (seq % SLOTS as u64) as usize
}

#[cfg(test)]
mod tests {
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
        core.isend(tag, size, 0x42, [1; crate::MAX_DEVS], |s, i| {
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
        let r = c.isend(0, 11, 0x42, [1; crate::MAX_DEVS], |s, i| fifo.read(s, i));
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
        let again = c.isend(0, 4, 0x42, [1; crate::MAX_DEVS], |s, i| fifo.read(s, i));
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
            assert_eq!(c.take_done(req), Ok(None), "after {q} of 4 QPs");
            c.handle_completion(WrId::Send { seq: group.seq }.encode());
        }
        assert_eq!(c.take_done(req), Ok(Some(Done::one(4096))));
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
            .isend(0, 8, 0, [1; crate::MAX_DEVS], |s, i| {
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
            c.isend(0, 8, 0, [1; crate::MAX_DEVS], |s, i| fifo.read(s, i)),
            Err(CoreError::Failed(_))
        ));
    }
}
