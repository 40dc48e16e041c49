//! How deep a connection's queues are, each sized to what its side posts, and no deeper than
//! NCCL's IB transport at the same settings.
//!
//! The send queue of a sending data QP is not sized for the worst case the advertised limits
//! allow (32 groups of 8 buffers of 4 GiB - 1, each cut in 1 GiB pieces: 1,056 work requests
//! on one QP); it holds 32 groups of 8 buffers that need no pieces, and the send core keeps
//! every QP within that room (`comm::send`: a group whose writes do not fit waits for earlier
//! writes to complete).

use super::{MIN_WRITE_LIMIT, pieces};
use crate::{CTS_SIGNAL_EVERY, MAX_RECVS, SLOTS};

/// Work-request and completion-queue depths of a connection's queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueDepths {
    /// Send queue of each data QP of the sending side: the writes of 32 groups of 8 buffers
    /// that need one write each, plus each group's final (32 x 9 = 288). Larger groups (pieces
    /// of chunks above the write limit) are kept within it by the send core, which waits for
    /// room ([`SEND_ROOM`]).
    pub send_wr: u32,
    /// Send queue of the receiving side's clear-to-send QP (QP 0): 32 outstanding writes, one
    /// that wraps around the ring being two, plus the unsignaled ones a signaled write has not
    /// yet retired.
    pub cts_wr: u32,
    /// A queue its side never posts to (the sending side's receive queues, the receiving
    /// side's send queues other than the clear-to-send QP's): the least a QP can be made with.
    pub unused_wr: u32,
    /// Receive queue of each data QP of the receiving side: one zero-length receive per
    /// outstanding group.
    pub recv_wr: u32,
    /// Send queue of the flush QP: one read per request of a receive comm.
    pub flush_wr: u32,
    /// The comm's CQ: every signaled write or receive that can be outstanding at once (the
    /// pieces of a long chunk are unsignaled: they add nothing here).
    pub cqe: u32,
}

/// Work requests the send core lets one sending data QP hold at once: 32 groups of 8
/// single-write buffers and their finals. One group never needs more than
/// [`largest_group_wrs`], which is well within it, so a group that waits always fits once
/// the writes before it completed.
pub const SEND_ROOM: u32 = SLOTS as u32 * (MAX_RECVS as u32 + 1);

/// The most work requests one group can put on one QP: 8 buffers of 4 GiB - 1 on a lone QP,
/// each in pieces at the smallest write limit, and the final (8 x 4 + 1 = 33).
pub fn largest_group_wrs() -> u32 {
    MAX_RECVS as u32 * pieces(u32::MAX, MIN_WRITE_LIMIT) + 1
}

/// The depths for a connection of `nqps` QPs.
pub fn queue_depths(nqps: usize) -> QueueDepths {
    let slots = SLOTS as u32;
    let nqps = nqps.max(1) as u32;
    QueueDepths {
        send_wr: SEND_ROOM,
        // Clear-to-send: each write announces at least one new group, and one that wraps
        // around the ring is two work requests; up to CTS_SIGNAL_EVERY writes wait for a
        // signaled one.
        cts_wr: 2 * (slots + CTS_SIGNAL_EVERY as u32),
        unused_wr: 1,
        recv_wr: slots,
        flush_wr: slots,
        // Sender: one signaled final per QP per group. Receiver: one receive per QP per group,
        // the signaled clear-to-send writes, and the flushes.
        cqe: slots * nqps + slots.div_ceil(CTS_SIGNAL_EVERY as u32) + slots,
    }
}
