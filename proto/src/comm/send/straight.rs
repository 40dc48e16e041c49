//! The send core's straight path: the common group (one buffer, on a comm whose groups use one
//! QP between physical devices, its send one write with its immediate) opened, matched,
//! completed and recorded in flight in one pass, and its one write handed to the transport
//! ([`SendCore::lone_write`]), without the planner. The same state and writes as the general
//! path of [`SendCore::isend`] (its tests compare them).

use super::{CoreError, Keys, Oversize, SendCore, SendReq, SendStep, SendWait, WrId, slot};
use crate::fifo::CtsEntry;
use crate::plan::Write;

impl SendCore {
    /// The straight path of [`SendCore::isend`] for a group not open yet: the head group, read
    /// from its first FIFO entry, is one buffer that this send matches and fills in one write
    /// with its immediate, with room on its QP: it is opened, matched and completed at once,
    /// without filling the open group's matching state (nothing reads it once the group is
    /// complete). `None` (nothing changed) for anything else, which the general path answers.
    #[inline(always)]
    pub(super) fn open_lone(
        &mut self,
        tag: i32,
        size: u32,
        addr: u64,
        lkeys: &Keys,
        read_entry: &mut impl FnMut(u64, usize) -> Option<CtsEntry>,
    ) -> Option<Result<SendStep, CoreError>> {
        let seq = self.seq;
        if self.inflight[slot(seq)].remaining > 0 {
            return None;
        }
        let e = read_entry(seq, 0)?;
        if e.nreqs != 1 || e.tag != tag || (size > e.size && self.oversize == Oversize::Refuse) {
            return None;
        }
        if !self.fits_lone(size, e.size) {
            return None;
        }
        let q = self.lone_qp(seq);
        if !self.room.take_one(q) {
            return None;
        }
        let item = &mut self.inflight[slot(seq)].items[0];
        item.remote_addr = e.addr;
        item.rkeys = e.rkeys;
        self.cur.seq = seq;
        self.cur.n = 1;
        Some(self.post_lone(q, tag, size, e.size, addr, lkeys))
    }

    /// The straight path of [`SendCore::isend`] for the open group: the send matches its one
    /// buffer (`capacity` bytes), on a comm whose groups use one QP between physical devices, and
    /// its `size`, truncated to the buffer, is one write with its immediate. The same state and
    /// answer as the general path (which its tests compare with), without the planner: the
    /// group's QP is `seq % nqps`, it holds one work request there.
    #[inline(always)]
    pub(super) fn isend_lone(
        &mut self,
        tag: i32,
        size: u32,
        capacity: u32,
        addr: u64,
        lkeys: &Keys,
    ) -> Result<SendStep, CoreError> {
        let gseq = self.cur.seq;
        let q = self.lone_qp(gseq);
        if !self.room.take_one(q) {
            return Ok(self.retry(SendWait::QueueFull { seq: gseq, qp: q }));
        }
        self.post_lone(q, tag, size, capacity, addr, lkeys)
    }

    /// Whether a send of `size` bytes into a buffer of `capacity` bytes is one write with its
    /// immediate (asked past a v7 comm's refusal of an oversized send): its length, truncated
    /// to the buffer, is not zero and within [`SendCore::set_plan`]'s lone limit.
    #[inline(always)]
    pub(super) fn fits_lone(&self, size: u32, capacity: u32) -> bool {
        let len = size.min(capacity);
        len != 0 && len <= self.lone_max
    }

    /// The QP of group `seq` on a comm of the straight path.
    #[inline(always)]
    fn lone_qp(&self, seq: u64) -> usize {
        let nqps = self.layout.nqps;
        if nqps <= 1 {
            0
        } else {
            (seq % nqps as u64) as usize
        }
    }

    /// The straight path past its room check (one work request held on QP `q`): the request
    /// taken, the group (`cur.seq`, whose buffer's remote side is in its slot) completed and
    /// recorded in flight.
    #[inline(always)]
    fn post_lone(
        &mut self,
        q: usize,
        tag: i32,
        size: u32,
        capacity: u32,
        addr: u64,
        lkeys: &Keys,
    ) -> Result<SendStep, CoreError> {
        let gseq = self.cur.seq;
        let len = if size > capacity {
            self.note_truncation(tag, gseq, size, capacity);
            capacity
        } else {
            size
        };
        let req = match self.reqs.alloc(SendReq {
            size: len,
            done: false,
        }) {
            Ok(req) => req,
            Err(e) => {
                self.room.give_back_held((q, 1));
                return Err(e);
            }
        };
        let c = &mut self.health.counters;
        c.messages += 1;
        c.bytes += u64::from(len);
        c.requests += 1;
        self.last_wait = None;
        // The group closes: its matching state (`taken`, `left`) is not read again before the
        // next group opens and resets it.
        let g = &mut self.cur;
        g.qps = (q, q + 1);
        g.lone = true;
        self.open = false;
        let f = &mut self.inflight[slot(gseq)];
        let item = &mut f.items[0];
        item.addr = addr;
        item.lkeys = *lkeys;
        item.size = len;
        f.reqs[0] = req;
        f.seq = gseq;
        f.remaining = 1;
        f.n = 1;
        f.replay = 0;
        f.held_on = Some((q, 1));
        self.seq += 1;
        Ok(SendStep::Post { req })
    }

    /// The same core without the straight path of [`SendCore::isend`] (what its tests compare
    /// with): every group goes through the general path.
    #[cfg(test)]
    pub(super) fn general_only(mut self) -> SendCore {
        self.straight = false;
        self
    }

    /// The group the last [`SendStep::Post`] completed, when the straight path took it: its
    /// one write (with its immediate, the keys of the physical devices) and the write's
    /// `wr_id`, the whole of what [`SendCore::ready_group`]'s plan would post; `None` for a
    /// group to plan in full. Valid until the next `isend`.
    #[inline]
    pub fn lone_write(&self) -> Option<(Write, u64)> {
        let g = &self.cur;
        if !g.lone {
            return None;
        }
        let it = &self.inflight[slot(g.seq)].items[0];
        let w = Write {
            qp: g.qps.0,
            local_addr: it.addr,
            lkey: it.lkeys[0],
            len: it.size,
            remote_addr: it.remote_addr,
            rkey: it.rkeys[0],
            imm: Some(it.size),
        };
        Some((
            w,
            WrId::Send { seq: g.seq }.encode_in(self.recovery.epoch()),
        ))
    }
}
