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

use crate::comm::wr_id::CTS_SIGNAL_EVERY;
use crate::{MAX_RECVS, SLOTS};
use std::ops::Range;

/// Granularity of split chunks: keeps NCCL's 128-byte protocol lines whole on one QP.
pub const SPLIT_ALIGN: u32 = 128;

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
    let n = nqps.max(1) as u32;
    let chunk = size.div_ceil(n).div_ceil(SPLIT_ALIGN) * SPLIT_ALIGN;
    (0..n).map(move |q| {
        let off = q.saturating_mul(chunk).min(size);
        let end = off.saturating_add(chunk).min(size);
        (q as usize, off, end - off)
    })
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

/// The bytes of one `size`-byte buffer of group `seq` that each QP the group uses carries:
/// `(qp, len)` for every QP of [`group_qps`], in order. The cut [`plan_group`] makes (split: the
/// chunks of [`split_chunks`], the last ones possibly empty; unsplit: the whole buffer on the
/// group's QP), and the share of a posted receive buffer each QP's receive stands for.
pub fn buffer_shares(
    seq: u64,
    size: u32,
    nqps: usize,
    split: bool,
) -> impl Iterator<Item = (usize, u32)> {
    let (whole, parts) = if split {
        (None, Some(split_chunks(size, nqps)))
    } else {
        (Some((group_qps(seq, nqps, false).start, 0, size)), None)
    };
    whole
        .into_iter()
        .chain(parts.into_iter().flatten())
        .map(|(qp, _, len)| (qp, len))
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
/// come last on each QP.
pub fn plan_group(
    seq: u64,
    items: &[SendItem],
    nqps: usize,
    split: bool,
    sizes: SizesSlot,
) -> Vec<Write> {
    let mut w = Vec::new();
    plan_group_into(seq, items, nqps, split, sizes, &mut w);
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
            w.push(if len == 0 {
                empty(qp, 0)
            } else {
                chunk(one, qp, off, len, Some(len))
            });
        }
        return;
    }
    for it in items {
        for (qp, off, len) in chunks_of(it, &qps, nqps, split) {
            if len > 0 {
                w.push(chunk(it, qp, off, len, None));
            }
        }
    }
    for (i, qp) in qps.enumerate() {
        if i == 0 {
            w.push(Write {
                len: 4 * items.len() as u32,
                ..empty(qp, 0)
            });
        } else {
            w.push(empty(qp, 0));
        }
    }
}

/// Work-request and completion-queue depths a connection needs when NCCL uses every limit the
/// plugin advertises (32 outstanding groups of `maxRecvs` buffers, split or not, up to 128 QPs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueDepths {
    /// Send queue of each data QP: the sender's writes of 32 groups (each group puts at most
    /// one write per buffer plus its final on a QP), or the receiver's clear-to-send writes
    /// (32 outstanding, plus the unsignaled ones a signaled write has not yet retired).
    pub send_wr: u32,
    /// Receive queue of each data QP: one zero-length receive per outstanding group.
    pub recv_wr: u32,
    /// Send queue of the flush QP: one read per request of a receive comm.
    pub flush_wr: u32,
    /// The comm's CQ: every signaled write or receive that can be outstanding at once.
    pub cqe: u32,
}

/// The depths for a connection of `nqps` QPs.
pub fn queue_depths(nqps: usize) -> QueueDepths {
    let slots = SLOTS as u32;
    let nqps = nqps.max(1) as u32;
    let sender_wr = slots * (MAX_RECVS as u32 + 1);
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
                    let qps: Vec<usize> = group_qps(seq, nqps, split).collect();
                    for n in [1, items.len()] {
                        let w = plan_group(seq, &items[..n], nqps, split, SIZES);
                        for it in &items[..n] {
                            let shares: Vec<(usize, u32)> =
                                buffer_shares(seq, it.size, nqps, split).collect();
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
                            let total: u32 =
                                buffer_shares(seq, it.size, nqps, split).map(|s| s.1).sum();
                            assert_eq!(total, it.size);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn unsplit_single_message_is_one_write_with_its_size() {
        let w = plan_group(5, &[item(0, 4096)], 4, false, SIZES);
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
        let w = plan_group(0, &[item(0, 0)], 1, false, SIZES);
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
        let w = plan_group(0, &[item(0, 1000)], 4, true, SIZES);
        assert_eq!(w.len(), 4);
        assert!(w.iter().all(|x| x.imm.is_some()));
        assert_eq!(w.iter().map(|x| x.imm.unwrap_or(0)).sum::<u32>(), 1000);
        assert_eq!(w.iter().map(|x| x.qp).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    }

    #[test]
    fn group_ends_with_the_sizes_write_after_all_data() {
        let items = [item(0, 10), item(1, 0), item(2, 300)];
        let w = plan_group(2, &items, 2, false, SIZES);
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
        let split = plan_group(2, &items, 2, true, SIZES);
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
        let sizes = [0u32, 1, 127, 129, 4096, 100_000];
        for nqps in [1usize, 2, 3, 4, 8, 128] {
            let d = queue_depths(nqps);
            for split in [false, true] {
                // 32 outstanding groups of 8 buffers of every size mix: count writes per QP.
                let mut per_qp = vec![0u32; nqps];
                let mut finals = 0u32;
                for seq in 0..SLOTS as u64 {
                    let items: Vec<SendItem> = (0..MAX_RECVS)
                        .map(|i| item(i as u64, sizes[(seq as usize + i) % sizes.len()]))
                        .collect();
                    for w in plan_group(seq, &items, nqps, split, SIZES) {
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
            // Receiver: a receive per QP per group (split uses every QP).
            assert!(SLOTS as u32 * nqps as u32 + SLOTS as u32 <= d.cqe);
            assert!(SLOTS as u32 <= d.recv_wr);
        }
        assert_eq!(queue_depths(1).send_wr, 288);
    }
}
