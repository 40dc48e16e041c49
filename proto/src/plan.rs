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
//! Keys: a buffer registered on a virtual device has one key per member ([`Keys`]); a write
//! takes the local key of its QP's local member and the remote key of its QP's remote member.
//!
//! No write carries more than the port allows ([`write_limit`]): a chunk longer than that goes
//! as several plain RDMA WRITEs on the same QP, in order, and only the last piece carries the
//! chunk's immediate (if it has one). A request may thus carry up to `u32::MAX` bytes, the
//! width of every size on the wire (clear-to-send entry, sizes record, immediate).

use crate::{CTS_SIGNAL_EVERY, Keys, MAX_DEVS, MAX_RECVS, SLOTS};
use std::ops::Range;

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
pub fn pieces(len: u32, max_write: u32) -> u32 {
    len.div_ceil(max_write.max(1)).max(1)
}

/// How a connection's QPs map onto the member devices of both sides, and how groups use them.
/// Both sides build the same layout (the local and remote counts swapped), so they agree on
/// which QPs every group uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpLayout {
    pub nqps: usize,
    pub split: bool,
    /// Member devices of this side's (virtual) device.
    pub local_devs: usize,
    /// Member devices of the peer's.
    pub remote_devs: usize,
    /// Members of this side that are down (bit `m` for member `m`): their QPs run on the next
    /// member up instead (failover inside a virtual NIC; zero for a connection that never failed
    /// over).
    pub local_down: u8,
    /// Members of the peer that are down, as the peer said in the recovery exchange.
    pub remote_down: u8,
}

/// The member a QP whose home member is `home` runs on when the members in `down` are down:
/// its home, else the next member up (in member order, wrapping); its home when every member is
/// down.
fn member_up(home: usize, members: usize, down: u8) -> usize {
    (0..members)
        .map(|k| (home + k) % members)
        .find(|&m| m >= 8 || down & (1 << m) == 0)
        .unwrap_or(home)
}

impl QpLayout {
    /// `qps_per_conn` QPs for every member pair: `qps_per_conn x max(local, remote)` QPs.
    pub fn new(qps_per_conn: usize, split: bool, local_devs: usize, remote_devs: usize) -> Self {
        let local_devs = local_devs.clamp(1, MAX_DEVS);
        let remote_devs = remote_devs.clamp(1, MAX_DEVS);
        QpLayout {
            nqps: qps_per_conn.max(1) * local_devs.max(remote_devs),
            split,
            local_devs,
            remote_devs,
            local_down: 0,
            remote_down: 0,
        }
    }

    /// The same layout with these members down on each side (see [`QpLayout::local_down`]).
    pub fn with_down(self, local_down: u8, remote_down: u8) -> Self {
        QpLayout {
            local_down,
            remote_down,
            ..self
        }
    }

    /// This side's member device that QP `q` belongs to when every member is up.
    pub fn home_local_dev(&self, q: usize) -> usize {
        q % self.local_devs.max(1)
    }

    /// A connection between two physical devices.
    pub fn one_device(nqps: usize, split: bool) -> Self {
        QpLayout::new(nqps, split, 1, 1)
    }

    /// `NCCL_IB_QPS_PER_CONNECTION` as the layout was built with.
    pub fn qps_per_conn(&self) -> usize {
        self.nqps / self.local_devs.max(self.remote_devs).max(1)
    }

    /// QPs one message is spread over when not split: one per member of the larger side.
    pub fn data_qps(&self) -> usize {
        self.local_devs
            .max(self.remote_devs)
            .clamp(1, self.nqps.max(1))
    }

    /// This side's member device that QP `q` runs on: its home member, or the next one up
    /// when that one is down.
    pub fn local_dev(&self, q: usize) -> usize {
        let n = self.local_devs.max(1);
        member_up(q % n, n, self.local_down)
    }

    /// The peer's member device at the other end of QP `q` (its home, or the next one up there).
    pub fn remote_dev(&self, q: usize) -> usize {
        let n = self.remote_devs.max(1);
        member_up(q % n, n, self.remote_down)
    }

    /// Which QPs group `seq` uses: every QP when split, else its window of [`Self::data_qps`].
    pub fn group_qps(&self, seq: u64) -> Range<usize> {
        let nqps = self.nqps.max(1);
        if self.split {
            return 0..nqps;
        }
        let width = self.data_qps();
        let windows = (nqps / width).max(1) as u64;
        let start = (seq % windows) as usize * width;
        start..start + width
    }
}

/// The chunks of a `size`-byte message over `nqps` QPs: `(qp, offset, len)`, one per QP.
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
/// come last on each QP. No write carries more than `max_write` bytes ([`write_limit`]).
pub fn plan_group(
    seq: u64,
    items: &[SendItem],
    layout: &QpLayout,
    sizes: SizesSlot,
    max_write: u32,
) -> Vec<Write> {
    let mut w = Vec::new();
    plan_group_into(seq, items, layout, sizes, max_write, &mut w);
    w
}

/// [`plan_group`] into a buffer the caller reuses (cleared first), so the data path allocates
/// nothing once the buffer has grown to its working size.
pub fn plan_group_into(
    seq: u64,
    items: &[SendItem],
    layout: &QpLayout,
    sizes: SizesSlot,
    max_write: u32,
    w: &mut Vec<Write>,
) {
    w.clear();
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
        for (qp, off, len) in chunks_of(one, &qps) {
            if len == 0 {
                w.push(empty(qp, 0));
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

/// Work-request and completion-queue depths a connection needs when NCCL uses every limit the
/// plugin advertises (32 outstanding groups of `maxRecvs` buffers of up to `u32::MAX` bytes,
/// split or not, up to 128 QPs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueDepths {
    /// Send queue of each data QP: the sender's writes of 32 groups (on a QP, a group puts the
    /// pieces of each buffer's chunk, up to 4 when a chunk nears 4 GiB and writes carry 1 GiB,
    /// plus its final), or the receiver's clear-to-send writes (32 outstanding, plus the
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys `base`, `base + 10`, `base + 20`, ... by member.
    const fn keys(base: u32) -> Keys {
        [
            base,
            base + 10,
            base + 20,
            base + 30,
            base + 40,
            base + 50,
            base + 60,
            base + 70,
        ]
    }

    const SIZES: SizesSlot = SizesSlot {
        local_addr: 0x100,
        lkeys: keys(1),
        remote_addr: 0x900,
        rkeys: keys(2),
    };

    fn item(i: u64, size: u32) -> SendItem {
        SendItem {
            addr: 0x10_0000 * (i + 1),
            lkeys: keys(3),
            size,
            remote_addr: 0x80_0000 * (i + 1),
            rkeys: keys(4),
        }
    }

    fn one(nqps: usize, split: bool) -> QpLayout {
        QpLayout::one_device(nqps, split)
    }

    #[test]
    fn chunks_cover_the_message_exactly_in_128_byte_multiples() {
        for size in [0u32, 1, 127, 128, 129, 4095, 4096, 65537, 1 << 20] {
            for nqps in [1usize, 2, 3, 4, 8] {
                let c: Vec<_> = split_chunks(size, nqps).collect();
                assert_eq!(c.len(), nqps);
                let mut next = 0;
                for (q, (qp, off, len)) in c.iter().enumerate() {
                    assert_eq!(*qp, q);
                    assert_eq!(*off, next.min(size));
                    next = off + len;
                    if off + len < size {
                        assert_eq!(len % SPLIT_ALIGN, 0);
                    }
                }
                assert_eq!(next, size, "size {size} nqps {nqps}");
            }
        }
    }

    #[test]
    fn buffer_shares_are_the_bytes_the_plan_writes_on_each_qp() {
        for split in [false, true] {
            for nqps in [1usize, 2, 3, 4] {
                for seq in [0u64, 1, 5] {
                    let sizes = [0u32, 1, 128, 129, 4096, 65537];
                    let items: Vec<SendItem> = sizes
                        .iter()
                        .enumerate()
                        .map(|(i, &s)| item(i as u64, s))
                        .collect();
                    let lay = one(nqps, split);
                    let qps: Vec<usize> = lay.group_qps(seq).collect();
                    for n in [1, items.len()] {
                        let w = plan_group(seq, &items[..n], &lay, SIZES, MIN_WRITE_LIMIT);
                        for it in &items[..n] {
                            let shares: Vec<(usize, u32)> =
                                buffer_shares(seq, it.size, &lay).collect();
                            let on: Vec<usize> = shares.iter().map(|s| s.0).collect();
                            assert_eq!(on, qps, "one share per QP of the group");
                            for (qp, len) in shares {
                                let written: u32 = w
                                    .iter()
                                    .filter(|x| {
                                        x.qp == qp
                                            && x.len > 0
                                            && x.local_addr >= it.addr
                                            && x.local_addr < it.addr + 0x10_0000
                                    })
                                    .map(|x| x.len)
                                    .sum();
                                assert_eq!(
                                    written, len,
                                    "size {} qp {qp} nqps {nqps} split {split} n {n}",
                                    it.size
                                );
                            }
                            let total: u32 = buffer_shares(seq, it.size, &lay).map(|s| s.1).sum();
                            assert_eq!(total, it.size);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn unsplit_single_message_is_one_write_with_its_size() {
        let w = plan_group(5, &[item(0, 4096)], &one(4, false), SIZES, MIN_WRITE_LIMIT);
        assert_eq!(
            w,
            vec![Write {
                qp: 1,
                local_addr: 0x10_0000,
                lkey: 3,
                len: 4096,
                remote_addr: 0x80_0000,
                rkey: 4,
                imm: Some(4096)
            }]
        );
    }

    #[test]
    fn zero_byte_message_is_an_empty_write_to_the_sizes_fifo() {
        let w = plan_group(0, &[item(0, 0)], &one(1, false), SIZES, MIN_WRITE_LIMIT);
        assert_eq!(
            w,
            vec![Write {
                qp: 0,
                local_addr: 0x100,
                lkey: 1,
                len: 0,
                remote_addr: 0x900,
                rkey: 2,
                imm: Some(0)
            }]
        );
    }

    #[test]
    fn split_single_message_has_one_immediate_per_qp_summing_to_the_size() {
        let w = plan_group(0, &[item(0, 1000)], &one(4, true), SIZES, MIN_WRITE_LIMIT);
        assert_eq!(w.len(), 4);
        assert!(w.iter().all(|x| x.imm.is_some()));
        assert_eq!(w.iter().map(|x| x.imm.unwrap_or(0)).sum::<u32>(), 1000);
        assert_eq!(w.iter().map(|x| x.qp).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    }

    #[test]
    fn group_ends_with_the_sizes_write_after_all_data() {
        let items = [item(0, 10), item(1, 0), item(2, 300)];
        let w = plan_group(2, &items, &one(2, false), SIZES, MIN_WRITE_LIMIT);
        // Two data writes (the empty one is skipped) then the sizes, all on QP 0 (= 2 % 2).
        assert_eq!(w.len(), 3);
        assert!(w.iter().all(|x| x.qp == 0));
        assert_eq!(
            w[2],
            Write {
                qp: 0,
                local_addr: 0x100,
                lkey: 1,
                len: 12,
                remote_addr: 0x900,
                rkey: 2,
                imm: Some(0)
            }
        );
        let split = plan_group(2, &items, &one(2, true), SIZES, MIN_WRITE_LIMIT);
        let finals: Vec<_> = split.iter().filter(|x| x.imm.is_some()).collect();
        assert_eq!(finals.len(), 2);
        assert_eq!(finals[0].len, 12);
        assert_eq!(finals[1].len, 0);
        let last_data = split.iter().rposition(|x| x.imm.is_none()).unwrap();
        let first_final = split.iter().position(|x| x.imm.is_some()).unwrap();
        assert!(last_data < first_final);
    }

    #[test]
    fn every_window_of_an_unsplit_virtual_nic_reaches_every_member_of_both_sides() {
        for qpc in 1..=4 {
            for l in 1..=MAX_DEVS {
                for r in 1..=MAX_DEVS {
                    let lay = QpLayout::new(qpc, false, l, r);
                    assert_eq!(lay.nqps, qpc * l.max(r));
                    for seq in 0..3 * qpc as u64 {
                        let qps = lay.group_qps(seq);
                        assert_eq!(qps.len(), l.max(r));
                        assert!(qps.end <= lay.nqps);
                        let mut local = vec![false; l];
                        let mut remote = vec![false; r];
                        for q in qps {
                            local[lay.local_dev(q)] = true;
                            remote[lay.remote_dev(q)] = true;
                        }
                        assert!(
                            local.iter().chain(&remote).all(|x| *x),
                            "{qpc} {l} {r} {seq}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_physical_connection_keeps_one_qp_per_group_in_turn() {
        let lay = one(4, false);
        let used: Vec<_> = (0..6).map(|s| lay.group_qps(s)).collect();
        assert_eq!(used, vec![0..1, 1..2, 2..3, 3..4, 0..1, 1..2]);
        assert_eq!(one(4, true).group_qps(9), 0..4);
    }

    #[test]
    fn a_message_over_a_virtual_nic_is_cut_across_its_members_with_each_members_keys() {
        // Two members on each side, one QP per pair: QP q runs member q to member q.
        let lay = QpLayout::new(1, false, 2, 2);
        let w = plan_group(7, &[item(0, 1000)], &lay, SIZES, MIN_WRITE_LIMIT);
        assert_eq!(w.len(), 2);
        assert_eq!((w[0].qp, w[0].lkey, w[0].rkey), (0, 3, 4));
        assert_eq!((w[1].qp, w[1].lkey, w[1].rkey), (1, 13, 14));
        assert_eq!(w[0].len + w[1].len, 1000);
        assert_eq!(w[1].remote_addr, 0x80_0000 + u64::from(w[0].len));
        assert!(w.iter().all(|x| x.imm == Some(x.len)));
        // Three receiver members, one sender member: QP q runs member 0 to member q.
        let lay = QpLayout::new(1, false, 1, 3);
        let items = [item(0, 10), item(1, 500)];
        let w = plan_group(0, &items, &lay, SIZES, MIN_WRITE_LIMIT);
        for x in &w {
            // One local member: data with the buffer's key 0, finals with the staging's key 0.
            assert_eq!(x.lkey, if x.imm.is_some() { 1 } else { 3 });
        }
        let finals: Vec<_> = w.iter().filter(|x| x.imm.is_some()).collect();
        assert_eq!(
            finals.iter().map(|x| (x.qp, x.rkey)).collect::<Vec<_>>(),
            vec![(0, 2), (1, 12), (2, 22)],
            "each QP's final goes to the sizes FIFO with the key of the member it reaches"
        );
        assert_eq!(finals[0].len, 8, "two sizes on the group's first QP");
    }

    #[test]
    fn a_qp_whose_member_is_down_runs_on_the_next_member_up_on_either_side() {
        let lay = QpLayout::new(1, false, 2, 2);
        assert_eq!((lay.local_dev(1), lay.remote_dev(1)), (1, 1));
        let failed = lay.with_down(0b10, 0b10);
        assert_eq!((failed.local_dev(0), failed.local_dev(1)), (0, 0));
        assert_eq!((failed.remote_dev(0), failed.remote_dev(1)), (0, 0));
        assert_eq!(failed.home_local_dev(1), 1);
        // Three members, the middle one down: its QPs move to the next one.
        let three = QpLayout::new(1, true, 3, 3).with_down(0b010, 0);
        assert_eq!(
            (0..3).map(|q| three.local_dev(q)).collect::<Vec<_>>(),
            [0, 2, 2]
        );
        assert_eq!(
            three.group_qps(0),
            0..3,
            "the QPs a group uses do not change"
        );
        // Every member down: each QP stays home (the comm waits for a port).
        let all = QpLayout::new(1, false, 2, 2).with_down(0b11, 0);
        assert_eq!((all.local_dev(0), all.local_dev(1)), (0, 1));
    }

    #[test]
    fn a_failed_over_plan_takes_the_keys_of_the_members_the_qps_run_on() {
        let lay = QpLayout::new(1, false, 2, 2).with_down(0b10, 0b10);
        // A message over a fused pair is spread over both QPs; QP 1's home is member 1 on both
        // sides, which is down: its share takes member 0's keys.
        let items = [item(0, 4096)];
        let writes = plan_group(1, &items, &lay, SIZES, MIN_WRITE_LIMIT);
        assert!(writes.iter().any(|w| w.qp == 1), "{writes:?}");
        for w in writes {
            assert_eq!(w.lkey, items[0].lkeys[0], "the local key of member 0");
            assert_eq!(w.rkey, items[0].rkeys[0], "the remote key of member 0");
        }
        let up = plan_group(
            1,
            &items,
            &QpLayout::new(1, false, 2, 2),
            SIZES,
            MIN_WRITE_LIMIT,
        );
        assert!(up.iter().any(|w| w.qp == 1 && w.lkey == items[0].lkeys[1]));
    }

    #[test]
    fn queue_depths_cover_the_worst_case_the_plan_can_produce() {
        let sizes = [0u32, 1, 127, 129, 4096, 100_000, (1 << 31) + 1, u32::MAX];
        let mut layouts = Vec::new();
        for split in [false, true] {
            for nqps in [1usize, 2, 3, 4, 8, 128] {
                layouts.push(one(nqps, split));
            }
            // Virtual NICs: windows of one QP per member pair.
            for (qpc, l, r) in [(1, 2, 2), (2, 4, 1), (1, 8, 8), (3, 2, 5)] {
                layouts.push(QpLayout::new(qpc, split, l, r));
            }
        }
        for lay in layouts {
            let d = queue_depths(lay.nqps);
            for mix in [0, 6] {
                // 32 outstanding groups of 8 buffers of a size mix (from index `mix` on: the
                // largest sizes in every buffer), written 1 GiB at most at a time: count writes
                // per QP.
                let mut per_qp = vec![0u32; lay.nqps];
                let mut finals = 0u32;
                for seq in 0..SLOTS as u64 {
                    let items: Vec<SendItem> = (0..MAX_RECVS)
                        .map(|i| {
                            let k = mix + (seq as usize + i) % (sizes.len() - mix);
                            item(i as u64, sizes[k])
                        })
                        .collect();
                    for w in plan_group(seq, &items, &lay, SIZES, MIN_WRITE_LIMIT) {
                        per_qp[w.qp] += 1;
                        finals += u32::from(w.imm.is_some());
                    }
                }
                let worst = per_qp.iter().copied().max().unwrap_or(0);
                assert!(worst <= d.send_wr, "{lay:?}: {worst} writes on one QP");
                assert!(finals + SLOTS as u32 <= d.cqe, "{lay:?}: {finals} signaled");
            }
            // Receiver: a receive per QP per group (split uses every QP).
            assert!(SLOTS as u32 * lay.nqps as u32 + SLOTS as u32 <= d.cqe);
            assert!(SLOTS as u32 <= d.recv_wr);
        }
        // One QP: 32 groups x (8 buffers x 4 pieces + the final). From 4 QPs on, a split chunk
        // of the largest buffer fits one write and 32 x (8 + 1) remain.
        assert_eq!(queue_depths(1).send_wr, 1056);
        assert_eq!(queue_depths(2).send_wr, 544);
        assert_eq!(queue_depths(4).send_wr, 288);
        assert_eq!(queue_depths(128).send_wr, 288);
    }

    #[test]
    fn queue_depths_keep_the_completion_queue_as_before_the_pieces() {
        // Pieces are unsignaled: the CQ holds the finals, the receives, the signaled
        // clear-to-send writes and the flushes, as it did when one write carried a chunk.
        for nqps in [1usize, 2, 4, 128] {
            let slots = SLOTS as u32;
            assert_eq!(
                queue_depths(nqps).cqe,
                slots * nqps as u32 + slots.div_ceil(CTS_SIGNAL_EVERY as u32) + slots
            );
        }
    }

    #[test]
    fn the_write_limit_is_the_ports_between_1_gib_and_2_gib() {
        assert_eq!(write_limit(0x80_0000), 1 << 30, "rxe reports 8 MiB");
        assert_eq!(write_limit(1 << 30), 1 << 30, "mlx5");
        assert_eq!(write_limit(1 << 31), 1 << 31);
        assert_eq!(write_limit(u32::MAX), 1 << 31, "the IB maximum");
    }

    #[test]
    fn chunks_of_a_request_of_nearly_4_gib_do_not_overflow() {
        for nqps in [1usize, 2, 3, 4, 7, 128] {
            let c: Vec<_> = split_chunks(u32::MAX, nqps).collect();
            assert_eq!(
                c.iter().map(|&(_, _, l)| u64::from(l)).sum::<u64>(),
                u64::from(u32::MAX)
            );
            assert_eq!(c[0].1, 0);
        }
    }

    #[test]
    fn a_single_buffer_above_the_limit_is_plain_pieces_then_one_immediate_with_the_total() {
        let size = 2_254_857_830u32; // 2.1 GiB, above 2^31
        let w = plan_group(3, &[item(0, size)], &one(1, false), SIZES, MIN_WRITE_LIMIT);
        assert_eq!(
            w.iter().map(|x| x.len).collect::<Vec<_>>(),
            vec![1 << 30, 1 << 30, size - (1 << 31)]
        );
        assert_eq!(
            w.iter().map(|x| x.imm).collect::<Vec<_>>(),
            vec![None, None, Some(size)]
        );
        for (k, x) in w.iter().enumerate() {
            let off = u64::from(k as u32 * MIN_WRITE_LIMIT);
            assert_eq!(
                (x.local_addr, x.remote_addr),
                (0x10_0000 + off, 0x80_0000 + off)
            );
            assert_eq!((x.qp, x.lkey, x.rkey), (0, 3, 4));
        }
    }

    /// Checks the invariants of a group's plan: on each QP, every write of the same group
    /// planned without a limit is there as consecutive pieces of at most `max_write` bytes,
    /// covering it in order, plain but for the last, which keeps the write's immediate.
    fn check_pieces(seq: u64, items: &[SendItem], lay: &QpLayout, max_write: u32) {
        let whole = plan_group(seq, items, lay, SIZES, u32::MAX);
        let cut = plan_group(seq, items, lay, SIZES, max_write);
        let total = |w: &[Write]| w.iter().map(|x| u64::from(x.len)).sum::<u64>();
        assert_eq!(total(&cut), total(&whole), "bytes conserved");
        assert!(
            cut.iter().all(|x| x.len <= max_write),
            "a write above the limit"
        );
        for qp in 0..lay.nqps {
            let on =
                |w: &[Write]| -> Vec<Write> { w.iter().filter(|x| x.qp == qp).copied().collect() };
            let (whole_q, cut_q) = (on(&whole), on(&cut));
            let mut rest = cut_q.iter();
            for w in &whole_q {
                let n = pieces(w.len, max_write) as usize;
                let mut off = 0u64;
                for k in 0..n {
                    let p = rest.next().expect("a piece is missing");
                    assert_eq!(
                        (p.local_addr, p.remote_addr),
                        (w.local_addr + off, w.remote_addr + off),
                        "QP {qp}: pieces out of order"
                    );
                    assert_eq!((p.lkey, p.rkey), (w.lkey, w.rkey));
                    assert_eq!(p.imm, if k + 1 == n { w.imm } else { None });
                    off += u64::from(p.len);
                }
                assert_eq!(off, u64::from(w.len), "QP {qp}: pieces cover the write");
            }
            assert!(rest.next().is_none(), "QP {qp}: a write too many");
            let imms: Vec<u32> = cut_q.iter().filter_map(|x| x.imm).collect();
            let used = lay.group_qps(seq).contains(&qp);
            assert_eq!(
                imms.len(),
                usize::from(used),
                "QP {qp}: one immediate per QP used"
            );
            assert_eq!(cut_q.last().map(|x| x.imm.is_some()), used.then_some(true));
            if let ([_], Some(&imm)) = (items, imms.first()) {
                assert_eq!(
                    u64::from(imm),
                    total(&cut_q),
                    "QP {qp}: the immediate is the bytes it carried"
                );
            }
        }
    }

    #[test]
    fn pieces_conserve_bytes_keep_order_and_leave_one_immediate_per_qp() {
        let sizes = [0u32, 1, 1000, 4096, 5000, 65_537];
        for nqps in [1usize, 2, 3, 4] {
            for split in [false, true] {
                for max_write in [1u32, 7, 128, 1000, 4096, u32::MAX] {
                    for seq in 0..4u64 {
                        for n in [1usize, 2, 8] {
                            let items: Vec<SendItem> = (0..n)
                                .map(|i| {
                                    item(i as u64, sizes[(seq as usize * 3 + i) % sizes.len()])
                                })
                                .collect();
                            check_pieces(seq, &items, &one(nqps, split), max_write);
                        }
                    }
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn any_group_planned_in_pieces_keeps_every_invariant(
            seq in 0u64..64,
            qpc in 1usize..=4,
            split in proptest::bool::ANY,
            (l, r) in (1usize..=3, 1usize..=3),
            // Small sizes in small pieces, or any size up to u32::MAX in pieces of 1 to 2 GiB.
            (sizes, max_write) in proptest::prop_oneof![
                (proptest::collection::vec(0u32..5000, 1..=MAX_RECVS), 1u32..5000),
                (
                    proptest::collection::vec(proptest::num::u32::ANY, 1..=MAX_RECVS),
                    MIN_WRITE_LIMIT..=IB_MAX_MSG_BYTES
                ),
            ],
        ) {
            let items: Vec<SendItem> =
                sizes.iter().enumerate().map(|(i, &s)| item(i as u64, s)).collect();
            check_pieces(seq, &items, &QpLayout::new(qpc, split, l, r), max_write);
        }
    }
}
