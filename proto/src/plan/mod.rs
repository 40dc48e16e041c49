//! Turning sends and receives into work requests, for one or several QPs per connection, over
//! one device or several (a virtual NIC).
//!
//! A connection has `nqps` QPs ([`QpLayout`]). When either side is a virtual device of several
//! members, `nqps` is `NCCL_IB_QPS_PER_CONNECTION` x the larger member count, and QP `q` runs
//! from this side's member `q % local_devs` to the peer's member `q % remote_devs`, so every
//! window of `data_qps()` consecutive QPs reaches every member of both sides.
//!
//! - Unsplit (`NCCL_IB_SPLIT_DATA_ON_QPS=0`): group `seq` uses the `data_qps()` QPs of window
//!   `seq % (nqps / data_qps())`: one QP on a physical device (`seq % nqps`), and one QP per
//!   member pair on a virtual one, so a message is spread over every device.
//! - Split (`=1`): every QP.
//!
//! A group that uses several QPs cuts every message into one chunk per QP of
//! `ceil(size / n)` rounded up to 128 bytes (the last ones may be short or empty); chunk `q`
//! travels on the group's `q`-th QP, and every QP carries a final write-with-immediate.
//!
//! A group of one buffer ends, on each QP it uses, with an RDMA WRITE WITH IMMEDIATE whose
//! immediate is the number of bytes that QP carried, so the receiver learns the size from its
//! completions alone. A group of several buffers sends its data as plain RDMA WRITEs, then one
//! write-with-immediate that carries the per-buffer sizes (`u32` each) into the receiver's sizes
//! FIFO; the other QPs of the group end with an empty write-with-immediate. RC delivers in order
//! on each QP, so when the receiver has seen the immediate of every QP the group used, all of the
//! group's data has landed. Empty writes always target the receiver's sizes FIFO, a registered
//! region, never a possibly unregistered empty user buffer.
//!
//! Adaptive routing (`NCCL_IB_ADAPTIVE_ROUTING`, [`AdaptiveRouting`]): on a fabric that sends
//! the packets of one QP over several paths, the packets of a long write may land out of order.
//! So, as NCCL does, a lone buffer of more than the threshold (`NCCL_IB_AR_THRESHOLD`) goes as
//! plain RDMA WRITEs on each QP, then a 0-byte write with immediate (to the sizes FIFO, the
//! immediate still the QP's byte count), so that the immediate never overtakes the data. A multi-buffer group already writes its data plain
//! and ends with the sizes write, so adaptive routing changes nothing there. The choice is the
//! sender's alone: the receiver learns sizes from the immediates either way.
//!
//! Keys: a buffer registered on a virtual device has one key per member ([`Keys`]); a write
//! takes the local key of its QP's local member and the remote key of its QP's remote member.
//!
//! No write carries more than the port allows ([`write_limit`]): a chunk longer than that goes
//! as several plain RDMA WRITEs on the same QP, in order, and only the last piece carries the
//! chunk's immediate (if it has one). A request may thus carry up to `u32::MAX` bytes, the
//! width of every size on the wire (clear-to-send entry, sizes record, immediate).

use crate::Keys;
use std::ops::Range;

mod depths;
mod layout;
#[cfg(test)]
mod tests;

pub use depths::{QueueDepths, SEND_ROOM, largest_group_wrs, queue_depths};
pub use layout::QpLayout;

/// Granularity of split chunks: keeps NCCL's 128-byte protocol lines whole on one QP.
pub const SPLIT_ALIGN: u32 = 128;

/// The most one work request may carry on InfiniBand and RoCE: 2^31 bytes.
pub const IB_MAX_MSG_BYTES: u32 = 1 << 31;

/// The least a write is allowed to carry, whatever the port reports: 1 GiB, as NCCL's IB
/// transport posts one write per QP of up to its 1 GiB per-request cap on every device (rxe
/// reports a `max_msg_sz` of 8 MiB and carries 2 GiB per write).
pub const MIN_WRITE_LIMIT: u32 = 1 << 30;

/// The most bytes one RDMA write may carry on a port whose `max_msg_sz` is given: the port's
/// limit, but at least [`MIN_WRITE_LIMIT`] and at most [`IB_MAX_MSG_BYTES`].
pub fn write_limit(max_msg_sz: u32) -> u32 {
    max_msg_sz.clamp(MIN_WRITE_LIMIT, IB_MAX_MSG_BYTES)
}

/// Writes a chunk of `len` bytes takes when no write may carry more than `max_write` (at least
/// one: an empty chunk is one empty write).
#[inline]
pub fn pieces(len: u32, max_write: u32) -> u32 {
    len.div_ceil(max_write.max(1)).max(1)
}

/// The chunks of a `size`-byte message over `nqps` QPs: `(qp, offset, len)`, one per QP.
#[inline]
pub fn split_chunks(size: u32, nqps: usize) -> impl Iterator<Item = (usize, u32, u32)> {
    let n = nqps.max(1) as u64;
    let size = u64::from(size);
    // In 64 bits: rounding a chunk of nearly 4 GiB up to 128 bytes passes u32::MAX.
    let chunk = size.div_ceil(n).div_ceil(u64::from(SPLIT_ALIGN)) * u64::from(SPLIT_ALIGN);
    (0..n).map(move |q| {
        let off = (q * chunk).min(size);
        let end = (off + chunk).min(size);
        // Both are at most `size`, a u32.
        (q as usize, off as u32, (end - off) as u32)
    })
}

/// Pushes `w` as writes of at most `max_write` bytes on its QP, in address order: the first
/// pieces plain, the last one with `w`'s immediate (if any), so the receiver still sees one
/// immediate for the chunk, after all of its bytes.
pub fn push_pieces(out: &mut Vec<Write>, w: Write, max_write: u32) {
    let max_write = max_write.max(1);
    let mut off = 0u32;
    while w.len - off > max_write {
        out.push(Write {
            local_addr: w.local_addr + u64::from(off),
            remote_addr: w.remote_addr + u64::from(off),
            len: max_write,
            imm: None,
            ..w
        });
        off += max_write;
    }
    out.push(Write {
        local_addr: w.local_addr + u64::from(off),
        remote_addr: w.remote_addr + u64::from(off),
        len: w.len - off,
        ..w
    });
}

/// The chunks of a `size`-byte buffer over the group's QPs: whole on a lone QP, else one per
/// QP, `(qp, offset, len)`.
fn chunks(size: u32, qps: Range<usize>) -> impl Iterator<Item = (usize, u32, u32)> {
    let (whole, parts) = if qps.len() <= 1 {
        (Some((qps.start, 0, size)), None)
    } else {
        let base = qps.start;
        (
            None,
            Some(split_chunks(size, qps.len()).map(move |(q, o, l)| (base + q, o, l))),
        )
    };
    whole.into_iter().chain(parts.into_iter().flatten())
}

/// The chunks of one item over the group's QPs.
fn chunks_of(it: &SendItem, qps: &Range<usize>) -> impl Iterator<Item = (usize, u32, u32)> {
    chunks(it.size, qps.clone())
}

/// The bytes of one `size`-byte buffer of group `seq` that each QP the group uses carries:
/// `(qp, len)` for every QP of [`QpLayout::group_qps`], in order. The cut [`plan_group`] makes
/// (over several QPs: the chunks of [`split_chunks`], the last ones possibly empty; on one QP:
/// the whole buffer), and the share of a posted receive buffer each QP's receive stands for.
pub fn buffer_shares(seq: u64, size: u32, layout: &QpLayout) -> impl Iterator<Item = (usize, u32)> {
    chunks(size, layout.group_qps(seq)).map(|(qp, _, len)| (qp, len))
}

/// How many work requests [`plan_group`] puts on each QP of group `seq`, without planning the
/// writes: `f(qp, n)` is called for each part (a QP may be named more than once; the counts
/// add up). The send core uses it to keep each QP's send queue within its room.
pub fn writes_per_qp(
    seq: u64,
    items: &[SendItem],
    layout: &QpLayout,
    max_write: u32,
    ar: AdaptiveRouting,
    mut f: impl FnMut(usize, u32),
) {
    let qps = layout.group_qps(seq);
    if let [one] = items {
        let apart = ar.applies_to(one.size);
        if qps.len() == 1 {
            // The common case, without the chunk iterator: the whole buffer on one QP.
            f(
                qps.start,
                pieces(one.size, max_write) + u32::from(one.size > 0 && apart),
            );
            return;
        }
        for (qp, _, len) in chunks_of(one, &qps) {
            f(qp, pieces(len, max_write) + u32::from(len > 0 && apart));
        }
        return;
    }
    for it in items {
        for (qp, _, len) in chunks_of(it, &qps) {
            if len > 0 {
                f(qp, pieces(len, max_write));
            }
        }
    }
    for (i, qp) in qps.enumerate() {
        f(
            qp,
            if i == 0 {
                pieces(4 * items.len() as u32, max_write)
            } else {
                1
            },
        );
    }
}

/// One matched send of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendItem {
    pub addr: u64,
    /// The send buffer's local key on each member device of this side.
    pub lkeys: Keys,
    pub size: u32,
    pub remote_addr: u64,
    /// The receive buffer's remote key on each member device of the peer.
    pub rkeys: Keys,
}

/// An RDMA write to post.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Write {
    pub qp: usize,
    pub local_addr: u64,
    pub lkey: u32,
    pub len: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    /// `Some(imm)` for a write with immediate (these are the signaled ones).
    pub imm: Option<u32>,
}

impl Write {
    /// Whether this is an immediate sent apart from its data under adaptive routing: a write
    /// of no bytes whose immediate counts bytes written before it on its QP (every other empty
    /// write with immediate carries 0: an empty chunk, or a multi-buffer group's other QPs).
    pub fn is_immediate_apart(&self) -> bool {
        self.len == 0 && self.imm.is_some_and(|imm| imm > 0)
    }
}

/// Whether a lone buffer's immediate travels apart from its data (`NCCL_IB_ADAPTIVE_ROUTING`
/// and `NCCL_IB_AR_THRESHOLD`), decided by the sender once per connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AdaptiveRouting {
    /// Buffers of more than this many bytes send their immediate apart; `None`: never.
    above: Option<u32>,
}

impl AdaptiveRouting {
    /// Off: every lone buffer's last write carries its immediate.
    pub const OFF: AdaptiveRouting = AdaptiveRouting { above: None };

    /// On for lone buffers of more than `threshold` bytes.
    pub const fn above(threshold: u32) -> AdaptiveRouting {
        AdaptiveRouting {
            above: Some(threshold),
        }
    }

    /// The threshold when on.
    pub fn threshold(&self) -> Option<u32> {
        self.above
    }

    /// Whether a lone buffer of `size` bytes sends its immediates apart.
    #[inline]
    pub fn applies_to(&self, size: u32) -> bool {
        self.above.is_some_and(|t| size > t)
    }
}

/// Where the sizes of a multi-buffer group come from and go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizesSlot {
    /// Local staging copy of the sizes (registered on every member), already filled.
    pub local_addr: u64,
    pub lkeys: Keys,
    /// The receiver's sizes-FIFO slot for this group, and its key on each of its members.
    pub remote_addr: u64,
    pub rkeys: Keys,
}

/// The writes of one complete group, data first; the writes with immediates (one per QP used)
/// come last on each QP. No write carries more than `max_write` bytes ([`write_limit`]); under
/// `ar` a lone buffer above the threshold ends each QP with an immediate of its own.
pub fn plan_group(
    seq: u64,
    items: &[SendItem],
    layout: &QpLayout,
    sizes: SizesSlot,
    max_write: u32,
    ar: AdaptiveRouting,
) -> Vec<Write> {
    let mut w = Vec::new();
    plan_group_into(seq, items, layout, sizes, max_write, ar, &mut w);
    w
}

/// The one write group `seq` needs, when that is all of its plan: a lone non-empty buffer on
/// a lone QP, no longer than `max_write` and not under adaptive routing (its immediate rides
/// with the data). `None` for any other group, which [`plan_group`] lays out. Built on the
/// caller's stack: the common case plans nothing into a buffer.
#[inline]
pub fn lone_write(
    seq: u64,
    items: &[SendItem],
    layout: &QpLayout,
    max_write: u32,
    ar: AdaptiveRouting,
) -> Option<Write> {
    lone_write_on(layout.group_qps(seq), items, layout, max_write, ar)
}

/// [`lone_write`] of the group whose QPs are `qps` (its [`QpLayout::group_qps`], known to the
/// caller).
#[inline]
pub fn lone_write_on(
    qps: Range<usize>,
    items: &[SendItem],
    layout: &QpLayout,
    max_write: u32,
    ar: AdaptiveRouting,
) -> Option<Write> {
    let [one] = items else {
        return None;
    };
    if qps.len() != 1 || one.size == 0 || one.size > max_write || ar.applies_to(one.size) {
        return None;
    }
    let qp = qps.start;
    Some(Write {
        qp,
        local_addr: one.addr,
        lkey: one.lkeys[layout.local_dev(qp)],
        len: one.size,
        remote_addr: one.remote_addr,
        rkey: one.rkeys[layout.remote_dev(qp)],
        imm: Some(one.size),
    })
}

/// [`plan_group`] into a buffer the caller reuses (cleared first), so the data path allocates
/// nothing once the buffer has grown to its working size.
pub fn plan_group_into(
    seq: u64,
    items: &[SendItem],
    layout: &QpLayout,
    sizes: SizesSlot,
    max_write: u32,
    ar: AdaptiveRouting,
    w: &mut Vec<Write>,
) {
    w.clear();
    if let Some(one) = lone_write(seq, items, layout, max_write, ar) {
        w.push(one);
        return;
    }
    plan_general_into(seq, items, layout, sizes, max_write, ar, w);
}

/// Every group's plan, the lone write's included: [`plan_group_into`] without its shortcut
/// (which its tests compare with), into `w` (not cleared).
fn plan_general_into(
    seq: u64,
    items: &[SendItem],
    layout: &QpLayout,
    sizes: SizesSlot,
    max_write: u32,
    ar: AdaptiveRouting,
    w: &mut Vec<Write>,
) {
    let qps = layout.group_qps(seq);
    let empty = |qp: usize, imm: u32| Write {
        qp,
        local_addr: sizes.local_addr,
        lkey: sizes.lkeys[layout.local_dev(qp)],
        len: 0,
        remote_addr: sizes.remote_addr,
        rkey: sizes.rkeys[layout.remote_dev(qp)],
        imm: Some(imm),
    };
    // A chunk of an item as a write on its QP, with that QP's keys.
    let chunk = |it: &SendItem, qp: usize, off: u32, len: u32, imm: Option<u32>| Write {
        qp,
        local_addr: it.addr + u64::from(off),
        lkey: it.lkeys[layout.local_dev(qp)],
        len,
        remote_addr: it.remote_addr + u64::from(off),
        rkey: it.rkeys[layout.remote_dev(qp)],
        imm,
    };
    if let [one] = items {
        let apart = ar.applies_to(one.size);
        for (qp, off, len) in chunks_of(one, &qps) {
            if len == 0 {
                w.push(empty(qp, 0));
            } else if apart {
                push_pieces(w, chunk(one, qp, off, len, None), max_write);
                w.push(empty(qp, len));
            } else {
                push_pieces(w, chunk(one, qp, off, len, Some(len)), max_write);
            }
        }
        return;
    }
    for it in items {
        for (qp, off, len) in chunks_of(it, &qps) {
            if len > 0 {
                push_pieces(w, chunk(it, qp, off, len, None), max_write);
            }
        }
    }
    for (i, qp) in qps.enumerate() {
        if i == 0 {
            // At most 32 bytes: one write under any real limit, in pieces under a test's.
            let sizes_write = Write {
                len: 4 * items.len() as u32,
                ..empty(qp, 0)
            };
            push_pieces(w, sizes_write, max_write);
        } else {
            w.push(empty(qp, 0));
        }
    }
}
