//! The plan's tests: layouts, chunks, pieces, adaptive routing and queue depths.

use super::*;
use crate::{CTS_SIGNAL_EVERY, MAX_DEVS, MAX_RECVS, SLOTS};

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

/// Adaptive routing off, and on for every non-empty buffer.
const ARS: [AdaptiveRouting; 2] = [AdaptiveRouting::OFF, AdaptiveRouting::above(0)];

/// NCCL's default `NCCL_IB_AR_THRESHOLD`.
const AR_THRESHOLD: u32 = 8192;

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
                for (n, ar) in [1, items.len()]
                    .into_iter()
                    .flat_map(|n| ARS.map(|ar| (n, ar)))
                {
                    let w = plan_group(seq, &items[..n], &lay, SIZES, MIN_WRITE_LIMIT, ar);
                    for it in &items[..n] {
                        let shares: Vec<(usize, u32)> = buffer_shares(seq, it.size, &lay).collect();
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
    let w = plan_group(
        5,
        &[item(0, 4096)],
        &one(4, false),
        SIZES,
        MIN_WRITE_LIMIT,
        AdaptiveRouting::OFF,
    );
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
    let w = plan_group(
        0,
        &[item(0, 0)],
        &one(1, false),
        SIZES,
        MIN_WRITE_LIMIT,
        AdaptiveRouting::OFF,
    );
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
    let w = plan_group(
        0,
        &[item(0, 1000)],
        &one(4, true),
        SIZES,
        MIN_WRITE_LIMIT,
        AdaptiveRouting::OFF,
    );
    assert_eq!(w.len(), 4);
    assert!(w.iter().all(|x| x.imm.is_some()));
    assert_eq!(w.iter().map(|x| x.imm.unwrap_or(0)).sum::<u32>(), 1000);
    assert_eq!(w.iter().map(|x| x.qp).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
}

#[test]
fn group_ends_with_the_sizes_write_after_all_data() {
    let items = [item(0, 10), item(1, 0), item(2, 300)];
    let w = plan_group(
        2,
        &items,
        &one(2, false),
        SIZES,
        MIN_WRITE_LIMIT,
        AdaptiveRouting::OFF,
    );
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
    let split = plan_group(
        2,
        &items,
        &one(2, true),
        SIZES,
        MIN_WRITE_LIMIT,
        AdaptiveRouting::OFF,
    );
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
    let w = plan_group(
        7,
        &[item(0, 1000)],
        &lay,
        SIZES,
        MIN_WRITE_LIMIT,
        AdaptiveRouting::OFF,
    );
    assert_eq!(w.len(), 2);
    assert_eq!((w[0].qp, w[0].lkey, w[0].rkey), (0, 3, 4));
    assert_eq!((w[1].qp, w[1].lkey, w[1].rkey), (1, 13, 14));
    assert_eq!(w[0].len + w[1].len, 1000);
    assert_eq!(w[1].remote_addr, 0x80_0000 + u64::from(w[0].len));
    assert!(w.iter().all(|x| x.imm == Some(x.len)));
    // Three receiver members, one sender member: QP q runs member 0 to member q.
    let lay = QpLayout::new(1, false, 1, 3);
    let items = [item(0, 10), item(1, 500)];
    let w = plan_group(
        0,
        &items,
        &lay,
        SIZES,
        MIN_WRITE_LIMIT,
        AdaptiveRouting::OFF,
    );
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
fn queue_depths_cover_every_group_and_32_groups_that_need_no_pieces() {
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
        // Groups of one buffer (with adaptive routing: its pieces plain, then an immediate of
        // its own on each QP) and of 8; from size index 6 on, only the largest sizes.
        for (mix, n, ar) in [0, 6]
            .into_iter()
            .flat_map(|m| [1, MAX_RECVS].map(|n| (m, n)))
            .flat_map(|(m, n)| ARS.map(|ar| (m, n, ar)))
        {
            // 32 outstanding groups, written 1 GiB at most at a time: count writes per QP,
            // those of the groups that need no pieces apart.
            let mut per_qp = vec![0u32; lay.nqps];
            let mut finals = 0u32;
            for seq in 0..SLOTS as u64 {
                let items: Vec<SendItem> = (0..n)
                    .map(|i| {
                        let k = mix + (seq as usize + i) % (sizes.len() - mix);
                        item(i as u64, sizes[k])
                    })
                    .collect();
                let mut group = vec![0u32; lay.nqps];
                for w in plan_group(seq, &items, &lay, SIZES, MIN_WRITE_LIMIT, ar) {
                    group[w.qp] += 1;
                    finals += u32::from(w.imm.is_some());
                }
                let mut counted = vec![0u32; lay.nqps];
                writes_per_qp(seq, &items, &lay, MIN_WRITE_LIMIT, ar, |q, k| {
                    counted[q] += k
                });
                assert_eq!(counted, group, "{lay:?} group {seq} {n} buffers {ar:?}");
                let worst = group.iter().copied().max().unwrap_or(0);
                assert!(
                    worst <= largest_group_wrs() && largest_group_wrs() <= d.send_wr,
                    "{lay:?} {n} buffers {ar:?}: one group puts {worst} writes on one QP"
                );
                if mix == 0 {
                    for (q, k) in group.iter().enumerate() {
                        per_qp[q] += k;
                    }
                }
            }
            assert!(
                finals + SLOTS as u32 <= d.cqe,
                "{lay:?} {n} buffers {ar:?}: {finals} signaled"
            );
            // Groups of buffers of at most 1 GiB: all 32 fit at once, nothing waits for room.
            let small: Vec<SendItem> = (0..n).map(|i| item(i as u64, 1 << 30)).collect();
            let mut room = vec![0u32; lay.nqps];
            for seq in 0..SLOTS as u64 {
                writes_per_qp(seq, &small, &lay, MIN_WRITE_LIMIT, ar, |q, k| room[q] += k);
            }
            let worst = room.iter().copied().max().unwrap_or(0);
            assert!(worst <= d.send_wr, "{lay:?} {n} buffers {ar:?}: {worst}");
        }
        // Receiver: a receive per QP per group (split uses every QP).
        assert!(SLOTS as u32 * lay.nqps as u32 + SLOTS as u32 <= d.cqe);
        assert!(SLOTS as u32 <= d.recv_wr);
    }
    // Every data QP's send queue: 32 groups x (8 buffers + the final), below NCCL's 2 x 256,
    // for any number of QPs; one group of the largest buffers needs 8 x 4 + 1.
    for nqps in [1usize, 2, 4, 128] {
        let d = queue_depths(nqps);
        assert_eq!(d.send_wr, 288);
        assert!(d.send_wr <= 512 && d.cts_wr <= 512 && d.recv_wr <= 256);
        assert!(d.cqe <= 256 * nqps as u32, "below NCCL's send-side CQ");
    }
    assert_eq!(largest_group_wrs(), 33);
    assert_eq!(queue_depths(1).cts_wr, 2 * (32 + CTS_SIGNAL_EVERY as u32));
}

#[test]
fn the_clear_to_send_queue_holds_32_writes_each_split_in_two_and_the_unsignaled_ones() {
    // Each clear-to-send write covers at least one new group; one that wraps around the ring
    // is two work requests; CTS_SIGNAL_EVERY - 1 unsignaled writes may precede a signaled one.
    let d = queue_depths(1);
    let worst = 2 * (SLOTS as u32 + CTS_SIGNAL_EVERY as u32);
    assert!(worst <= d.cts_wr);
    assert!(d.unused_wr >= 1, "a QP needs at least one entry per queue");
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
    let w = plan_group(
        3,
        &[item(0, size)],
        &one(1, false),
        SIZES,
        MIN_WRITE_LIMIT,
        AdaptiveRouting::OFF,
    );
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
fn check_pieces(seq: u64, items: &[SendItem], lay: &QpLayout, max_write: u32, ar: AdaptiveRouting) {
    let whole = plan_group(seq, items, lay, SIZES, u32::MAX, ar);
    let cut = plan_group(seq, items, lay, SIZES, max_write, ar);
    let total = |w: &[Write]| w.iter().map(|x| u64::from(x.len)).sum::<u64>();
    assert_eq!(total(&cut), total(&whole), "bytes conserved");
    assert!(
        cut.iter().all(|x| x.len <= max_write),
        "a write above the limit"
    );
    for qp in 0..lay.nqps {
        let on = |w: &[Write]| -> Vec<Write> { w.iter().filter(|x| x.qp == qp).copied().collect() };
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
                            .map(|i| item(i as u64, sizes[(seq as usize * 3 + i) % sizes.len()]))
                            .collect();
                        for ar in ARS {
                            check_pieces(seq, &items, &one(nqps, split), max_write, ar);
                            check_adaptive_routing(seq, &items, &one(nqps, split), max_write, ar);
                        }
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
        // Adaptive routing off, or on above a threshold among the sizes drawn.
        ar_threshold in proptest::option::of(proptest::prop_oneof![0u32..6000, proptest::num::u32::ANY]),
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
        let ar = ar_threshold.map_or(AdaptiveRouting::OFF, AdaptiveRouting::above);
        let lay = QpLayout::new(qpc, split, l, r);
        check_pieces(seq, &items, &lay, max_write, ar);
        check_adaptive_routing(seq, &items, &lay, max_write, ar);
        check_lone_write(seq, &items, &lay, max_write, ar);
    }

    #[test]
    fn the_lone_write_shortcut_plans_what_the_general_plan_does(
        seq in 0u64..64,
        qpc in 1usize..=4,
        split in proptest::bool::ANY,
        (l, r) in (1usize..=3, 1usize..=3),
        (ldown, rdown) in (0u8..8, 0u8..8),
        ar_threshold in proptest::option::of(0u32..6000),
        // Small sizes in small pieces, or any size in pieces of 1 to 2 GiB (never billions of
        // one-byte pieces).
        (sizes, max_write) in proptest::prop_oneof![
            (proptest::collection::vec(0u32..6000, 1..=2), 1u32..6000),
            (
                proptest::collection::vec(proptest::num::u32::ANY, 1..=2),
                MIN_WRITE_LIMIT..=IB_MAX_MSG_BYTES
            ),
        ],
    ) {
        let items: Vec<SendItem> =
            sizes.iter().enumerate().map(|(i, &s)| item(i as u64, s)).collect();
        let ar = ar_threshold.map_or(AdaptiveRouting::OFF, AdaptiveRouting::above);
        let lay = QpLayout::new(qpc, split, l, r).with_down(ldown, rdown);
        check_lone_write(seq, &items, &lay, max_write, ar);
    }
}

/// Checks the shortcut of [`plan_group_into`]: [`lone_write`] answers exactly for a lone
/// non-empty buffer on a lone QP that fits one write outside adaptive routing, and then plans
/// the one write the general plan makes; the planned group is the general plan either way.
fn check_lone_write(
    seq: u64,
    items: &[SendItem],
    lay: &QpLayout,
    max_write: u32,
    ar: AdaptiveRouting,
) {
    let mut general = Vec::new();
    plan_general_into(seq, items, lay, SIZES, max_write, ar, &mut general);
    let lone = lone_write(seq, items, lay, max_write, ar);
    let expected = items.len() == 1
        && lay.group_qps(seq).len() == 1
        && items[0].size > 0
        && items[0].size <= max_write
        && !ar.applies_to(items[0].size);
    assert_eq!(lone.is_some(), expected, "{items:?} on {lay:?}");
    if let Some(w) = lone {
        assert_eq!(general, vec![w]);
    }
    assert_eq!(plan_group(seq, items, lay, SIZES, max_write, ar), general);
}

/// Checks what adaptive routing does to a group's plan: a lone buffer above the threshold
/// has, on every QP that carries some of it, its data as plain writes followed by one 0-byte
/// write with immediate (the QP's byte count, to the sizes FIFO), last on that QP; every other
/// group is planned exactly as with adaptive routing off.
fn check_adaptive_routing(
    seq: u64,
    items: &[SendItem],
    lay: &QpLayout,
    max_write: u32,
    ar: AdaptiveRouting,
) {
    let off = plan_group(seq, items, lay, SIZES, max_write, AdaptiveRouting::OFF);
    let on = plan_group(seq, items, lay, SIZES, max_write, ar);
    let apart = matches!(items, [one] if ar.applies_to(one.size));
    assert!(
        !off.iter().any(Write::is_immediate_apart),
        "no immediate apart with adaptive routing off"
    );
    if !apart {
        assert_eq!(on, off, "{ar:?} changed a plan it does not apply to");
        return;
    }
    let plain = |w: &[Write]| -> Vec<Write> {
        w.iter()
            .filter(|x| x.len > 0)
            .map(|x| Write { imm: None, ..*x })
            .collect()
    };
    assert_eq!(plain(&on), plain(&off), "the same data, only plain");
    for (qp, share) in buffer_shares(seq, items[0].size, lay) {
        let q: Vec<Write> = on.iter().filter(|x| x.qp == qp).copied().collect();
        let (last, data) = q.split_last().expect("a QP of the group without writes");
        assert!(
            data.iter().all(|x| x.imm.is_none() && x.len > 0),
            "QP {qp}: {q:?}"
        );
        assert_eq!(
            data.iter().map(|x| x.len).sum::<u32>(),
            share,
            "QP {qp}: its share in data writes"
        );
        let bare = Write {
            qp,
            local_addr: SIZES.local_addr,
            lkey: SIZES.lkeys[lay.local_dev(qp)],
            len: 0,
            remote_addr: SIZES.remote_addr,
            rkey: SIZES.rkeys[lay.remote_dev(qp)],
            imm: Some(share),
        };
        assert_eq!(*last, bare, "QP {qp}: a 0-byte immediate last");
        assert_eq!(last.is_immediate_apart(), share > 0);
    }
}

#[test]
fn adaptive_routing_applies_only_above_its_threshold() {
    let ar = AdaptiveRouting::above(AR_THRESHOLD);
    assert!(!ar.applies_to(0) && !ar.applies_to(AR_THRESHOLD - 1));
    assert!(
        !ar.applies_to(AR_THRESHOLD),
        "the threshold itself goes as before"
    );
    assert!(ar.applies_to(AR_THRESHOLD + 1) && ar.applies_to(u32::MAX));
    assert_eq!(ar.threshold(), Some(AR_THRESHOLD));
    assert!(!AdaptiveRouting::OFF.applies_to(u32::MAX));
    assert_eq!(AdaptiveRouting::default(), AdaptiveRouting::OFF);
    assert!(!AdaptiveRouting::above(u32::MAX).applies_to(u32::MAX));
}

#[test]
fn a_lone_buffer_past_the_threshold_is_plain_data_then_a_zero_byte_immediate_on_each_qp() {
    let ar = AdaptiveRouting::above(AR_THRESHOLD);
    let at = |size| [item(0, size)];
    // Unsplit, one QP (group 0 uses QP 0): up to the threshold one write with its size.
    for size in [AR_THRESHOLD - 1, AR_THRESHOLD] {
        let w = plan_group(0, &at(size), &one(1, false), SIZES, MIN_WRITE_LIMIT, ar);
        assert_eq!(w.len(), 1);
        assert_eq!((w[0].len, w[0].imm), (size, Some(size)));
    }
    // One byte more: the data plain, then the size on a write of its own to the sizes FIFO.
    let size = AR_THRESHOLD + 1;
    let w = plan_group(0, &at(size), &one(1, false), SIZES, MIN_WRITE_LIMIT, ar);
    assert_eq!(
        w,
        vec![
            Write {
                qp: 0,
                local_addr: 0x10_0000,
                lkey: 3,
                len: size,
                remote_addr: 0x80_0000,
                rkey: 4,
                imm: None
            },
            Write {
                qp: 0,
                local_addr: 0x100,
                lkey: 1,
                len: 0,
                remote_addr: 0x900,
                rkey: 2,
                imm: Some(size)
            },
        ]
    );
    // Split over two QPs: 4224 + 3969 bytes, each QP its data then its own immediate.
    let w = plan_group(0, &at(size), &one(2, true), SIZES, MIN_WRITE_LIMIT, ar);
    let shape: Vec<_> = w.iter().map(|x| (x.qp, x.len, x.imm)).collect();
    assert_eq!(
        shape,
        vec![
            (0, 4224, None),
            (0, 0, Some(4224)),
            (1, 3969, None),
            (1, 0, Some(3969))
        ]
    );
    assert_eq!(w[2].local_addr, 0x10_0000 + 4224);
    assert_eq!(w.iter().filter(|x| x.is_immediate_apart()).count(), 2);
    // Split at the threshold: each QP's last write carries its data and its immediate.
    let w = plan_group(
        0,
        &at(AR_THRESHOLD),
        &one(2, true),
        SIZES,
        MIN_WRITE_LIMIT,
        ar,
    );
    let shape: Vec<_> = w.iter().map(|x| (x.qp, x.len, x.imm)).collect();
    assert_eq!(shape, vec![(0, 4096, Some(4096)), (1, 4096, Some(4096))]);
    // A QP whose chunk is empty keeps its plain empty immediate of 0 (not one apart).
    let w = plan_group(
        0,
        &at(100),
        &one(2, true),
        SIZES,
        MIN_WRITE_LIMIT,
        AdaptiveRouting::above(0),
    );
    let shape: Vec<_> = w.iter().map(|x| (x.qp, x.len, x.imm)).collect();
    assert_eq!(
        shape,
        vec![(0, 100, None), (0, 0, Some(100)), (1, 0, Some(0))]
    );
    assert_eq!(w.iter().filter(|x| x.is_immediate_apart()).count(), 1);
    // Larger, in pieces: every piece plain, the immediate after the last.
    let w = plan_group(0, &at(1 << 20), &one(1, false), SIZES, 1 << 18, ar);
    let shape: Vec<_> = w.iter().map(|x| (x.len, x.imm)).collect();
    assert_eq!(
        shape,
        vec![
            (1 << 18, None),
            (1 << 18, None),
            (1 << 18, None),
            (1 << 18, None),
            (0, Some(1 << 20))
        ]
    );
}

#[test]
fn around_the_threshold_every_layout_keeps_the_adaptive_routing_invariants() {
    let ar = AdaptiveRouting::above(AR_THRESHOLD);
    let sizes = [
        AR_THRESHOLD - 1,
        AR_THRESHOLD,
        AR_THRESHOLD + 1,
        AR_THRESHOLD + 128,
        1 << 20,
    ];
    for lay in [
        one(1, false),
        one(2, false),
        one(2, true),
        one(3, true),
        QpLayout::new(1, false, 2, 2),
        QpLayout::new(2, true, 2, 1),
    ] {
        for seq in 0..4u64 {
            for &size in &sizes {
                for n in [1usize, 2, MAX_RECVS] {
                    let items: Vec<SendItem> = (0..n).map(|i| item(i as u64, size)).collect();
                    check_adaptive_routing(seq, &items, &lay, MIN_WRITE_LIMIT, ar);
                    check_pieces(seq, &items, &lay, 4096, ar);
                    let apart = plan_group(seq, &items, &lay, SIZES, MIN_WRITE_LIMIT, ar)
                        .iter()
                        .filter(|x| x.is_immediate_apart())
                        .count();
                    let expect = if n == 1 && size > AR_THRESHOLD {
                        lay.group_qps(seq).len()
                    } else {
                        0
                    };
                    assert_eq!(apart, expect, "{lay:?} seq {seq} size {size} n {n}");
                }
            }
        }
    }
}

#[test]
fn adaptive_routing_leaves_a_multi_buffer_group_as_it_was() {
    let items = [item(0, 10), item(1, 100_000), item(2, 300)];
    for lay in [one(1, false), one(2, true)] {
        assert_eq!(
            plan_group(
                1,
                &items,
                &lay,
                SIZES,
                MIN_WRITE_LIMIT,
                AdaptiveRouting::above(0)
            ),
            plan_group(
                1,
                &items,
                &lay,
                SIZES,
                MIN_WRITE_LIMIT,
                AdaptiveRouting::OFF
            )
        );
    }
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
    let off = AdaptiveRouting::OFF;
    let writes = plan_group(1, &items, &lay, SIZES, MIN_WRITE_LIMIT, off);
    assert!(writes.iter().any(|w| w.qp == 1), "{writes:?}");
    for w in writes {
        assert_eq!(w.lkey, items[0].lkeys[0], "the local key of member 0");
        assert_eq!(w.rkey, items[0].rkeys[0], "the remote key of member 0");
    }
    let home = QpLayout::new(1, false, 2, 2);
    let up = plan_group(1, &items, &home, SIZES, MIN_WRITE_LIMIT, off);
    assert!(up.iter().any(|w| w.qp == 1 && w.lkey == items[0].lkeys[1]));
}
