//! Clear-to-send writes: posting the coalesced writes the receive core decides
//! ([`ferro_proto::comm::recv::CtsWrite`]), and the backstop that writes out entries a receive
//! comm left staged while its caller waits on another comm.
//!
//! Why the backstop: a receive comm stages the entries of receives posted while its sender
//! still has clear-to-send entries to use, and writes them on its next call. A caller that posts
//! receives on one comm and then waits on another (a send to the same peer, whose own receives
//! wait for ours) would leave them staged for ever: a hang.
//!
//! How, at a cost that does not grow with the number of comms: a receive comm whose `irecv`
//! leaves entries staged joins the process-wide queue of [`receivers`] (once: a flag under the
//! comm's own lock says it is queued, so the registry's lock is only taken when it was not).
//! The periodic look of every waiting call (every `LIVENESS_EVERY` calls, on any comm) takes at
//! most [`VISITS_PER_LOOK`] comms from the front of the queue and writes out everything each
//! has staged. A comm it cannot lock is in a call of its own thread right now: it goes back to
//! the end of the queue, to be written by that thread or by a later look. A comm that wrote its
//! entries itself stays queued until a look takes it and finds nothing to write: the queue
//! holds at most every receive comm once, and a look costs the same with 16 comms or 4,096.

use super::comm::{Comm, ReceiverMem, Side};
use super::endpoint::CTS_QP;
use super::lock::TryLockError;
use super::receivers::{self, Visit};
use crate::error::Result;
use ferro_proto::comm::Failure;
use ferro_proto::comm::recv::{CtsWrite, RecvCore};
use ferro_verbs::{Fixed, RemoteAddr, SendChain, SendFlags};
use std::ops::Range;
use std::sync::atomic::Ordering;

/// The most queued comms one look visits. Every waiting comm looks every `LIVENESS_EVERY`
/// calls, so a comm at place `p` of the queue is reached within `p / VISITS_PER_LOOK` looks of
/// any waiting comm, and each look does a fixed amount of work.
pub(super) const VISITS_PER_LOOK: usize = 4;

/// Writes the staged entries of up to [`VISITS_PER_LOOK`] queued receive comms, never
/// `current` (whose lock the caller holds).
pub(super) fn flush_others(current: &Comm) {
    // `None`: another thread holds the registry (adding, removing, queueing or doing this same
    // work); a later look does it.
    let _ = receivers::list().try_visit(current as *const Comm as usize, VISITS_PER_LOOK, |c| {
        // SAFETY: the registry only visits addresses of live comms (removed before they
        // are freed, under the lock held during this call), and only shared references are
        // made.
        let comm = unsafe { &*(c as *const Comm) };
        comm.write_staged_for_others()
    });
}

impl Comm {
    /// A look of another comm's call visits this one: everything staged is written out, unless
    /// this comm is in a call of its own thread right now (it is then kept queued).
    fn write_staged_for_others(&self) -> Visit {
        let (Side::Receiver { mem, core, .. }, Some(place)) = (&self.side, &self.place) else {
            return Visit::Done;
        };
        let mut core = match core.try_lock() {
            Ok(core) => core,
            Err(TryLockError::WouldBlock) => return Visit::Busy,
            // Unusable after an earlier internal error: its calls only report that.
            Err(TryLockError::Broken) => return Visit::Done,
        };
        // Off the queue, under the comm's lock: its next staging queues it again.
        place.queued.store(false, Ordering::Relaxed);
        if let Some(w) = core.cts_flush() {
            // A failure is recorded as the comm's sticky error, reported by its next call.
            let _ = self.post_cts(mem, &mut core, &w);
        }
        Visit::Done
    }

    /// After an `irecv` that left entries staged (the core holds the comm's lock): the comm is
    /// queued for the backstop, joining the queue only if it is not there already.
    #[inline(always)]
    pub(super) fn keep_staged(&self, core: &RecvCore) {
        let Some(place) = &self.place else {
            return;
        };
        if core.staged() > 0 && !place.queued.load(Ordering::Relaxed) {
            place.queued.store(true, Ordering::Relaxed);
            receivers::list().queue(place.ticket);
        }
    }

    /// Posts one clear-to-send write on QP 0 (from this side's first member to the sender's
    /// first member, whose FIFO key is used): one work request built in place on this frame
    /// for the common run, two chained in one `ibv_post_send` when the run wraps around the
    /// ring. A failed post becomes the comm's sticky failure.
    pub(super) fn post_cts(
        &self,
        mem: &ReceiverMem,
        core: &mut RecvCore,
        w: &CtsWrite,
    ) -> Result<()> {
        let layout = self.ep.layout();
        let member = layout.local_dev(CTS_QP);
        let remote_key = mem.peer_fifo.1[layout.remote_dev(CTS_QP)];
        let wraps = w.wraps();
        // The request of range `r`; `last`: the run's last one (signaled when the write is).
        let request = |r: Range<usize>, last: bool| {
            let local = mem.cts_stage.sge(member, r.start, r.len() as u32);
            let remote = RemoteAddr {
                addr: mem.peer_fifo.0 + r.start as u64,
                rkey: remote_key,
            };
            let flags = SendFlags {
                signaled: w.signaled && last,
                // NCCL_IB_USE_INLINE: a write of one entry (a receive of one buffer written at
                // once, the ping-pong case) is copied into the work request, sparing the NIC a
                // read of the staging buffer.
                inline: !wraps,
            };
            (local, remote, flags)
        };
        let qp = self.ep.qp(CTS_QP);
        // The entries are this comm's registered clear-to-send staging, whose bytes for these
        // groups stay as they are until the groups complete (32 receives later at the earliest).
        let posted = if wraps {
            let mut chain = SendChain::<Fixed<2>>::fixed();
            let mut ranges = w.ranges().peekable();
            while let Some(r) = ranges.next() {
                let (local, remote, flags) = request(r, ranges.peek().is_none());
                chain.rdma_write(w.wr_id(), Some(local), remote, None, flags);
            }
            core.health.counters.send_posts += 1;
            qp.post(&mut chain)
        } else {
            let Some(r) = w.ranges().next() else {
                return Ok(());
            };
            let (local, remote, flags) = request(r, true);
            core.health.counters.send_posts += 1;
            qp.post_write(w.wr_id(), Some(local), remote, None, flags)
        };
        match posted {
            Ok(()) => Ok(()),
            Err(e) => {
                let f = core.health.fail(Failure::system(format!(
                    "{}: clear-to-send: {e}",
                    self.describe()
                )));
                Err(super::comm::failure_error(f.clone()))
            }
        }
    }

    /// On a receive comm's call other than a posted `irecv`: the write the core says is due.
    pub(super) fn cts_due(&self, mem: &ReceiverMem, core: &mut RecvCore) -> Result<()> {
        match core.cts_due() {
            Some(w) => self.post_cts(mem, core, &w),
            None => Ok(()),
        }
    }
}
