//! Turning sends and receives into work requests, for one or several QPs per connection.
//!
//! - Unsplit (`NCCL_IB_SPLIT_DATA_ON_QPS=0`): group `seq` travels whole on QP `seq % nqps`.
//! - Split (`=1`): every message of the group is cut into `nqps` chunks of
//!   `ceil(size / nqps)` rounded up to 128 bytes (the last ones may be short or empty); chunk `q`
//!   travels on QP `q`, and every QP carries a final write-with-immediate for the group.
//!
//! A group of one buffer ends, on each QP it uses, with an RDMA WRITE WITH IMMEDIATE whose
//! immediate is the number of bytes that QP carried, so the receiver learns the size from its
//! completions alone. A group of several buffers sends its data as plain RDMA WRITEs, then one
//! write-with-immediate that carries the per-buffer sizes (`u32` each) into the receiver's sizes
//! FIFO; in split mode the other QPs end with an empty write-with-immediate. RC delivers in order
//! on each QP, so when the receiver has seen the immediate of every QP the group used, all of the
//! group's data has landed. Empty writes always target the receiver's sizes FIFO, a registered
//! region, never a possibly unregistered empty user buffer.
//!
//! No write carries more than the port allows ([`write_limit`]): a chunk longer than that goes
//! as several plain RDMA WRITEs on the same QP, in order, and only the last piece carries the
//! chunk's immediate (if it has one). A request may thus carry up to `u32::MAX` bytes, the
//! width of every size on the wire (clear-to-send entry, sizes record, immediate).

use crate::comm::wr_id::CTS_SIGNAL_EVERY;
use crate::{MAX_RECVS, SLOTS};
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

/// Which QPs a group uses: every QP when split, else QP `seq % nqps`.
pub fn group_qps(seq: u64, nqps: usize, split: bool) -> Range<usize> {
    if split {
        0..nqps.max(1)
    } else {
        let q = (seq % nqps.max(1) as u64) as usize;
        q..q + 1
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

/// The chunks of one item: split over every QP, or whole on the group's QP.
fn chunks_of(
    it: &SendItem,
    qps: &Range<usize>,
    nqps: usize,
    split: bool,
) -> impl Iterator<Item = (usize, u32, u32)> {
    let (whole, parts) = if split {
        (None, Some(split_chunks(it.size, nqps)))
    } else {
        (Some((qps.start, 0, it.size)), None)
    };
    whole.into_iter().chain(parts.into_iter().flatten())
}

/// One matched send of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendItem {
    pub addr: u64,
    pub lkey: u32,
    pub size: u32,
    pub remote_addr: u64,
    pub rkey: u32,
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
    /// Local staging copy of the sizes (registered), already filled by the caller.
    pub local_addr: u64,
    pub lkey: u32,
    /// The receiver's sizes-FIFO slot for this group.
    pub remote_addr: u64,
    pub rkey: u32,
}

/// The writes of one complete group, data first; the writes with immediates (one per QP used)
/// come last on each QP. No write carries more than `max_write` bytes ([`write_limit`]).
pub fn plan_group(
    seq: u64,
    items: &[SendItem],
    nqps: usize,
    split: bool,
    sizes: SizesSlot,
    max_write: u32,
) -> Vec<Write> {
    let mut w = Vec::new();
    plan_group_into(seq, items, nqps, split, sizes, max_write, &mut w);
    w
}

/// [`plan_group`] into a buffer the caller reuses (cleared first), so the data path allocates
/// nothing once the buffer has grown to its working size.
pub fn plan_group_into(
    seq: u64,
    items: &[SendItem],
    nqps: usize,
    split: bool,
    sizes: SizesSlot,
    max_write: u32,
    w: &mut Vec<Write>,
) {
    w.clear();
    let qps = group_qps(seq, nqps, split);
    let empty = |qp: usize, imm: u32| Write {
        qp,
        local_addr: sizes.local_addr,
        lkey: sizes.lkey,
        len: 0,
        remote_addr: sizes.remote_addr,
        rkey: sizes.rkey,
        imm: Some(imm),
    };
    // A chunk of an item as a write on its QP.
    let chunk = |it: &SendItem, qp: usize, off: u32, len: u32, imm: Option<u32>| Write {
        qp,
        local_addr: it.addr + u64::from(off),
        lkey: it.lkey,
        len,
        remote_addr: it.remote_addr + u64::from(off),
        rkey: it.rkey,
        imm,
    };
    if let [one] = items {
        for (qp, off, len) in chunks_of(one, &qps, nqps, split) {
            if len == 0 {
                w.push(empty(qp, 0));
            } else {
                push_pieces(w, chunk(one, qp, off, len, Some(len)), max_write);
            }
        }
        return;
    }
    for it in items {
        for (qp, off, len) in chunks_of(it, &qps, nqps, split) {
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

    const SIZES: SizesSlot = SizesSlot {
        local_addr: 0x100,
        lkey: 1,
        remote_addr: 0x900,
        rkey: 2,
    };

    fn item(i: u64, size: u32) -> SendItem {
        SendItem {
            addr: 0x10_0000 * (i + 1),
            lkey: 3,
            size,
            remote_addr: 0x80_0000 * (i + 1),
            rkey: 4,
        }
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
    fn unsplit_single_message_is_one_write_with_its_size() {
        let w = plan_group(5, &[item(0, 4096)], 4, false, SIZES, MIN_WRITE_LIMIT);
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
        let w = plan_group(0, &[item(0, 0)], 1, false, SIZES, MIN_WRITE_LIMIT);
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
        let w = plan_group(0, &[item(0, 1000)], 4, true, SIZES, MIN_WRITE_LIMIT);
        assert_eq!(w.len(), 4);
        assert!(w.iter().all(|x| x.imm.is_some()));
        assert_eq!(w.iter().map(|x| x.imm.unwrap_or(0)).sum::<u32>(), 1000);
        assert_eq!(w.iter().map(|x| x.qp).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    }

    #[test]
    fn group_ends_with_the_sizes_write_after_all_data() {
        let items = [item(0, 10), item(1, 0), item(2, 300)];
        let w = plan_group(2, &items, 2, false, SIZES, MIN_WRITE_LIMIT);
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
        let split = plan_group(2, &items, 2, true, SIZES, MIN_WRITE_LIMIT);
        let finals: Vec<_> = split.iter().filter(|x| x.imm.is_some()).collect();
        assert_eq!(finals.len(), 2);
        assert_eq!(finals[0].len, 12);
        assert_eq!(finals[1].len, 0);
        let last_data = split.iter().rposition(|x| x.imm.is_none()).unwrap();
        let first_final = split.iter().position(|x| x.imm.is_some()).unwrap();
        assert!(last_data < first_final);
    }

    #[test]
    fn queue_depths_cover_the_worst_case_the_plan_can_produce() {
        let sizes = [0u32, 1, 127, 129, 4096, 100_000, (1 << 31) + 1, u32::MAX];
        for nqps in [1usize, 2, 3, 4, 8, 128] {
            let d = queue_depths(nqps);
            for split in [false, true] {
                for mix in [0, 6] {
                    // 32 outstanding groups of 8 buffers of a size mix (from index `mix` on:
                    // the largest sizes in every buffer), written 1 GiB at most at a time:
                    // count writes per QP.
                    let mut per_qp = vec![0u32; nqps];
                    let mut finals = 0u32;
                    for seq in 0..SLOTS as u64 {
                        let items: Vec<SendItem> = (0..MAX_RECVS)
                            .map(|i| {
                                let k = mix + (seq as usize + i) % (sizes.len() - mix);
                                item(i as u64, sizes[k])
                            })
                            .collect();
                        for w in plan_group(seq, &items, nqps, split, SIZES, MIN_WRITE_LIMIT) {
                            per_qp[w.qp] += 1;
                            finals += u32::from(w.imm.is_some());
                        }
                    }
                    let worst = per_qp.iter().copied().max().unwrap_or(0);
                    assert!(
                        worst <= d.send_wr,
                        "nqps {nqps} split {split}: {worst} writes on one QP"
                    );
                    assert!(
                        finals + SLOTS as u32 <= d.cqe,
                        "nqps {nqps} split {split}: {finals} signaled"
                    );
                }
            }
            // Receiver: a receive per QP per group (split uses every QP).
            assert!(SLOTS as u32 * nqps as u32 + SLOTS as u32 <= d.cqe);
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
        let w = plan_group(3, &[item(0, size)], 1, false, SIZES, MIN_WRITE_LIMIT);
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
    fn check_pieces(seq: u64, items: &[SendItem], nqps: usize, split: bool, max_write: u32) {
        let whole = plan_group(seq, items, nqps, split, SIZES, u32::MAX);
        let cut = plan_group(seq, items, nqps, split, SIZES, max_write);
        let total = |w: &[Write]| w.iter().map(|x| u64::from(x.len)).sum::<u64>();
        assert_eq!(total(&cut), total(&whole), "bytes conserved");
        assert!(
            cut.iter().all(|x| x.len <= max_write),
            "a write above the limit"
        );
        for qp in 0..nqps {
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
            let used = group_qps(seq, nqps, split).contains(&qp);
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
                            check_pieces(seq, &items, nqps, split, max_write);
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
            nqps in 1usize..=8,
            split in proptest::bool::ANY,
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
            check_pieces(seq, &items, nqps, split, max_write);
        }
    }
}
