//! Clear-to-send writes: posting the coalesced writes the receive core decides
//! ([`ferro_proto::comm::recv::CtsWrite`]), and the process-wide list of receive comms, so that a
//! thread waiting on any comm writes out entries that another comm still holds staged.
//!
//! Why the list: a receive comm stages the entries of receives posted while its sender still has
//! clear-to-send entries to use, and writes them on its next call. A caller that posts receives
//! on one comm and then waits on another (a send to the same peer, whose own receives wait for
//! ours) would leave them staged; the periodic look of every waiting call (every
//! `LIVENESS_EVERY` calls) therefore writes out the staged entries of every other receive comm
//! of the process. Comms locked by their own thread are skipped: that thread is inside a call on
//! the comm, and writes them itself.

use super::comm::{Comm, ReceiverMem, Side};
use super::receivers;
use crate::error::Result;
use ferro_proto::comm::Failure;
use ferro_proto::comm::recv::{CtsWrite, RecvCore};
use ferro_verbs::{Fixed, RemoteAddr, SendChain, SendFlags};

/// The QP that carries clear-to-send writes.
const CTS_QP: usize = 0;

/// Writes the staged entries of every receive comm except `current` (whose lock the caller
/// holds) and those another thread is using right now.
pub(super) fn flush_others(current: *const Comm) {
    // Another thread holding the list is adding, removing, or doing this same work.
    receivers::list().try_visit(current as usize, |c| {
        // SAFETY: the registry only visits addresses of live comms (removed before they are
        // freed, under the lock held during this call), and only shared references are made.
        let comm = unsafe { &*(c as *const Comm) };
        let Side::Receiver { mem, core, .. } = &comm.side else {
            return;
        };
        let Ok(mut core) = core.try_lock() else {
            return;
        };
        if let Some(w) = core.cts_flush() {
            // A failure is recorded as the comm's sticky error, reported by its next call.
            let _ = comm.post_cts(mem, &mut core, &w);
        }
    });
}

impl Comm {
    /// Posts one clear-to-send write: one work request per byte range (two when the run
    /// wraps around the ring), chained in one `ibv_post_send` on QP 0 (from this side's first
    /// member to the sender's first member, whose FIFO key is used). A failed post becomes the
    /// comm's sticky failure.
    pub(super) fn post_cts(
        &self,
        mem: &ReceiverMem,
        core: &mut RecvCore,
        w: &CtsWrite,
    ) -> Result<()> {
        let member = self.ep.layout.local_dev(CTS_QP);
        let remote_key = mem.peer_fifo.1[self.ep.layout.remote_dev(CTS_QP)];
        let n = w.ranges().count();
        let mut chain = SendChain::<Fixed<2>>::fixed();
        for (i, r) in w.ranges().enumerate() {
            let local = mem.cts_stage.sge(member, r.start, r.len() as u32);
            let remote = RemoteAddr {
                addr: mem.peer_fifo.0 + r.start as u64,
                rkey: remote_key,
            };
            let flags = SendFlags {
                signaled: w.signaled && i + 1 == n,
                // NCCL_IB_USE_INLINE: a write of one entry (a receive of one buffer written at
                // once, the ping-pong case) is copied into the work request, sparing the NIC a
                // read of the staging buffer.
                inline: n == 1,
            };
            chain.rdma_write(w.wr_id(), Some(local), remote, None, flags);
        }
        if chain.is_empty() {
            return Ok(());
        }
        core.health.counters.send_posts += 1;
        // The entries are this comm's registered clear-to-send staging, whose bytes for these
        // groups stay as they are until the groups complete (32 receives later at the earliest).
        match self.ep.qps[CTS_QP].post(&mut chain) {
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
