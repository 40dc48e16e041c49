//! How deep a connection's queues must be for the worst case the plan can produce.

use super::{MIN_WRITE_LIMIT, pieces, split_chunks};
use crate::{CTS_SIGNAL_EVERY, MAX_RECVS, SLOTS};

/// Work-request and completion-queue depths a connection needs when NCCL uses every limit the
/// plugin advertises (32 outstanding groups of `maxRecvs` buffers of up to `u32::MAX` bytes,
/// split or not, up to 128 QPs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueDepths {
    /// Send queue of each data QP: the sender's writes of 32 groups (on a QP, a group puts the
    /// pieces of each buffer's chunk, up to 4 when a chunk nears 4 GiB and writes carry 1 GiB,
    /// plus its final; a lone buffer under adaptive routing, its pieces plus a 0-byte final,
    /// is within that), or the receiver's clear-to-send writes (32 outstanding, plus the
    /// unsignaled ones a signaled write has not yet retired).
    pub send_wr: u32,
    /// Receive queue of each data QP: one zero-length receive per outstanding group.
    pub recv_wr: u32,
    /// Send queue of the flush QP: one read per request of a receive comm.
    pub flush_wr: u32,
    /// The comm's CQ: every signaled write or receive that can be outstanding at once (the
    /// pieces of a long chunk are unsignaled: they add nothing here).
    pub cqe: u32,
}

/// The depths for a connection of `nqps` QPs.
pub fn queue_depths(nqps: usize) -> QueueDepths {
    let slots = SLOTS as u32;
    let bufs = MAX_RECVS as u32;
    // Writes on one QP for one group whose buffers are all `chunk` bytes on that QP: each
    // buffer's pieces (never more than at the smallest write limit), then the final.
    let per_group = |chunk: u32| bufs * pieces(chunk, MIN_WRITE_LIMIT) + 1;
    // Unsplit: a QP carries every `nqps`-th of the 32 groups in flight, each buffer whole.
    let unsplit = (slots as usize).div_ceil(nqps.max(1)) as u32 * per_group(u32::MAX);
    // Split: every group puts a chunk of each buffer on every QP.
    let chunk = split_chunks(u32::MAX, nqps)
        .map(|(_, _, len)| len)
        .max()
        .unwrap_or(u32::MAX);
    let sender_wr = unsplit.max(slots * per_group(chunk));
    let nqps = nqps.max(1) as u32;
    // Clear-to-send: each write announces at least one new group, and one that wraps around
    // the ring is two work requests; up to CTS_SIGNAL_EVERY writes wait for a signaled one.
    let cts_wr = 2 * (slots + CTS_SIGNAL_EVERY as u32);
    QueueDepths {
        send_wr: sender_wr.max(cts_wr),
        recv_wr: slots,
        flush_wr: slots,
        // Sender: one signaled final per QP per group. Receiver: one receive per QP per group,
        // the signaled clear-to-send writes, and the flushes.
        cqe: slots * nqps + slots.div_ceil(CTS_SIGNAL_EVERY as u32) + slots,
    }
}
