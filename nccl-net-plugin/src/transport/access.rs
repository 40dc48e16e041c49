//! Who may do what to which memory: the access every QP and every memory registration of the
//! transport is given, in one place, each the least the protocol needs (see `docs/DESIGN.md`,
//! "Memory registration", the access table). A QP's access flags say what a peer may do through
//! it to this side's memory; a registration's say what the local NIC (local write) and a peer
//! (remote write, remote read) may do to that memory. Local reads (the source of a write) need
//! no flag.

use ferro_verbs::sys::{IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE};

/// Data QPs, both sides: the peer writes through them (data, sizes and immediates into the
/// receiver; clear-to-send entries into the sender's FIFO). No reads, no atomics, as NCCL's
/// IB transport grants on its data QPs.
pub(super) const DATA_QP: u32 = IBV_ACCESS_REMOTE_WRITE;

/// The receive side's flush QP, connected to itself: it serves its own 1-byte RDMA READ of a
/// received buffer, so it must allow remote reads, and nothing else.
pub(super) const FLUSH_QP: u32 = IBV_ACCESS_REMOTE_READ;

/// Memory the peer writes: the sender's CTS FIFO and the receiver's sizes FIFO (remote write
/// requires local write as well).
pub(super) const PEER_WRITTEN: u32 = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

/// Staging areas the NIC only reads as the source of a write (the receiver's CTS staging, the
/// sender's sizes staging): the CPU fills them, no remote access and no NIC write.
pub(super) const STAGING: u32 = 0;

/// The flush QP's landing buffer: the NIC writes the read's byte into it.
pub(super) const FLUSH_LANDING: u32 = IBV_ACCESS_LOCAL_WRITE;

/// Buffers NCCL registers: written by the peer (remote write), read back through the flush QP
/// (remote read: `iflush`'s loopback read is a remote read of the buffer's registration), and
/// the NIC's local write, which remote write requires. The same as NCCL's IB transport grants
/// (2.19 to 2.27; 2.28+ add remote atomics, which nothing here uses).
pub(super) const USER: u32 =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
