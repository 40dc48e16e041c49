//! The room in each data QP's send queue: how many work requests the groups posted and not yet
//! delivered hold on each QP, so that a group is written only when its writes fit
//! ([`plan::SEND_ROOM`] per QP, the depth the QPs are made with).
//!
//! A group's work requests on a QP are held from its post until every signaled write of the
//! group completed (its last completion retires everything it posted, on every QP it used,
//! since each QP completes in order), or until a recovery found it delivered. The count only
//! ever overstates what a QP holds, never understates it: a replay after a recovery posts, on
//! emptied QPs, a part of groups that are still held. Nothing is allocated per message: the
//! counts are one vector per comm, sized once.

use crate::plan::{self, AdaptiveRouting, QpLayout, SendItem};
use std::ops::Range;

/// Work requests held per QP, and how the send core counts a group's.
#[derive(Debug, Clone)]
pub struct Room {
    held: Vec<u32>,
    /// The group being checked, per QP (reused).
    need: Vec<u32>,
    /// Work requests one QP may hold.
    cap: u32,
    /// Counted as the transport plans: at most this many bytes per write, and the lone
    /// buffers whose immediates go apart.
    max_write: u32,
    ar: AdaptiveRouting,
}

impl Room {
    pub fn new(nqps: usize) -> Room {
        Room {
            held: vec![0; nqps.max(1)],
            need: vec![0; nqps.max(1)],
            cap: plan::SEND_ROOM,
            max_write: plan::MIN_WRITE_LIMIT,
            ar: AdaptiveRouting::OFF,
        }
    }

    /// Plan as the transport does: `max_write` bytes at most per write, under `ar`.
    pub fn set_plan(&mut self, max_write: u32, ar: AdaptiveRouting) {
        self.max_write = max_write;
        self.ar = ar;
    }

    /// The common group in O(1): a lone buffer on a lone QP puts all of its work requests on
    /// that QP, `(qp, n)` (what [`plan::writes_per_qp`] counts for it); `None` for any other
    /// group, which is counted per QP.
    #[inline]
    fn lone(&self, qps: &Range<usize>, items: &[SendItem]) -> Option<(usize, u32)> {
        let [one] = items else {
            return None;
        };
        if qps.len() != 1 || qps.start >= self.held.len() {
            return None;
        }
        let apart = one.size > 0 && self.ar.applies_to(one.size);
        Some((
            qps.start,
            plan::pieces(one.size, self.max_write) + u32::from(apart),
        ))
    }

    /// Counts group `seq`'s work requests per QP into `need`.
    fn count(&mut self, seq: u64, items: &[SendItem], layout: &QpLayout) {
        let qps = layout.group_qps(seq);
        let end = qps.end.min(self.need.len());
        self.need[qps.start.min(end)..end].fill(0);
        let need = &mut self.need;
        plan::writes_per_qp(seq, items, layout, self.max_write, self.ar, |q, n| {
            if let Some(c) = need.get_mut(q) {
                *c += n;
            }
        });
    }

    /// The first QP group `seq`'s writes do not fit in now, if any. A group always fits a QP
    /// that holds nothing, so a group never waits for ever (with the real write limits one
    /// group needs at most [`plan::largest_group_wrs`], within the room; only a test's tiny
    /// write limit makes a group larger than the room, and then it goes alone).
    pub fn full_qp(&mut self, seq: u64, items: &[SendItem], layout: &QpLayout) -> Option<usize> {
        self.full_qp_of(seq, layout.group_qps(seq), items, layout)
    }

    /// [`Room::full_qp`] of group `seq`, whose QPs are `qps` (its [`QpLayout::group_qps`]).
    #[inline]
    pub fn full_qp_of(
        &mut self,
        seq: u64,
        qps: Range<usize>,
        items: &[SendItem],
        layout: &QpLayout,
    ) -> Option<usize> {
        if let Some((q, n)) = self.lone(&qps, items) {
            self.need[q] = n;
            let held = self.held[q];
            return (held > 0 && held + n > self.cap).then_some(q);
        }
        self.count(seq, items, layout);
        qps.filter(|&q| q < self.held.len())
            .find(|&q| self.held[q] > 0 && self.held[q] + self.need[q] > self.cap)
    }

    /// Group `seq` is posted: its work requests are held (counting them; the send core takes
    /// them with [`Room::take_counted`], right after [`Room::full_qp`] counted them, so this
    /// is the reference its tests compare with).
    #[cfg(test)]
    fn take(&mut self, seq: u64, items: &[SendItem], layout: &QpLayout) {
        self.count(seq, items, layout);
        self.take_counted(seq, layout);
    }

    /// Group `seq` is posted: the work requests the last [`Room::full_qp`] call counted (and
    /// found fitting) are held, without counting its writes again: the caller passes the same
    /// group, with the same items, right after that call.
    pub fn take_counted(&mut self, seq: u64, layout: &QpLayout) {
        self.take_counted_of(layout.group_qps(seq));
    }

    /// [`Room::take_counted`] of the group whose QPs are `qps`. A group on one QP returns
    /// `(qp, n)`, the work requests it took there: what its delivery gives back
    /// ([`Room::give_back_held`], the same as [`Room::give_back`] of the group).
    #[inline(always)]
    pub fn take_counted_of(&mut self, qps: Range<usize>) -> Option<(usize, u32)> {
        if qps.len() == 1 {
            let q = qps.start;
            let h = self.held.get_mut(q)?;
            let n = self.need[q];
            *h += n;
            return Some((q, n));
        }
        let n = self.held.len();
        for q in qps.filter(|&q| q < n) {
            self.held[q] += self.need[q];
        }
        None
    }

    /// A group of one work request on QP `q` (a lone buffer in one write with its immediate):
    /// held if it fits (`true`), as [`Room::full_qp_of`] then [`Room::take_counted_of`] of that
    /// group do; `false` (nothing held) when QP `q` is full for it.
    #[inline(always)]
    pub fn take_one(&mut self, q: usize) -> bool {
        let Some(h) = self.held.get_mut(q) else {
            return true;
        };
        if *h > 0 && *h >= self.cap {
            return false;
        }
        *h += 1;
        true
    }

    /// Group delivered that [`Room::take_counted_of`] held as `(qp, n)`.
    #[inline]
    pub fn give_back_held(&mut self, (q, n): (usize, u32)) {
        if let Some(h) = self.held.get_mut(q) {
            *h = h.saturating_sub(n);
        }
    }

    /// Group `seq` is delivered: its work requests are retired.
    pub fn give_back(&mut self, seq: u64, items: &[SendItem], layout: &QpLayout) {
        if let Some((q, n)) = self.lone(&layout.group_qps(seq), items) {
            self.held[q] = self.held[q].saturating_sub(n);
            return;
        }
        self.count(seq, items, layout);
        let n = self.held.len();
        for q in layout.group_qps(seq).filter(|&q| q < n) {
            self.held[q] = self.held[q].saturating_sub(self.need[q]);
        }
    }

    /// Work requests QP `q` holds.
    pub fn held(&self, q: usize) -> u32 {
        self.held.get(q).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{AdaptiveRouting, QpLayout};

    fn item(size: u32) -> SendItem {
        SendItem {
            addr: 0x1000,
            lkeys: [1; crate::MAX_DEVS],
            size,
            remote_addr: 0x2000,
            rkeys: [2; crate::MAX_DEVS],
        }
    }

    #[test]
    fn a_lone_buffer_on_a_lone_qp_is_counted_as_the_plan_counts_it() {
        for (nqps, split, l, r) in [
            (1, false, 1, 1),
            (4, false, 1, 1),
            (4, true, 1, 1),
            (2, false, 2, 1),
        ] {
            let layout = QpLayout::new(nqps, split, l, r);
            for ar in [
                AdaptiveRouting::OFF,
                AdaptiveRouting::above(0),
                AdaptiveRouting::above(8192),
            ] {
                for max_write in [1, 4096, plan::MIN_WRITE_LIMIT] {
                    for size in [0, 1, 8, 4096, 4097, 8193, 1 << 30, u32::MAX] {
                        if size / max_write > plan::SEND_ROOM {
                            continue; // more pieces than any queue holds (and a count past u32)
                        }
                        let items = [item(size)];
                        for seq in 0..4 {
                            let mut room = Room::new(layout.nqps);
                            room.set_plan(max_write, ar);
                            let mut planned = vec![0u32; layout.nqps];
                            plan::writes_per_qp(seq, &items, &layout, max_write, ar, |q, n| {
                                planned[q] += n
                            });
                            match room.lone(&layout.group_qps(seq), &items) {
                                Some((q, n)) => {
                                    let mut want = vec![0u32; layout.nqps];
                                    want[q] = n;
                                    assert_eq!(planned, want, "{size} B, seq {seq}, {layout:?}");
                                }
                                None => assert!(layout.group_qps(seq).len() > 1),
                            }
                            assert_eq!(room.full_qp(seq, &items, &layout), None);
                            room.take_counted(seq, &layout);
                            let held: Vec<u32> = (0..layout.nqps).map(|q| room.held(q)).collect();
                            assert_eq!(held, planned, "{size} B, seq {seq}, {layout:?}");
                            room.give_back(seq, &items, &layout);
                            assert!((0..layout.nqps).all(|q| room.held(q) == 0));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn taking_a_group_counted_by_full_qp_holds_what_counting_it_again_would() {
        for (nqps, split) in [(1, false), (4, false), (4, true)] {
            let layout = QpLayout::new(nqps, split, 1, 1);
            for items in [vec![item(8)], vec![item(1 << 20), item(0), item(4096)]] {
                for seq in 0..8 {
                    let (mut counted, mut recounted) = (Room::new(nqps), Room::new(nqps));
                    assert_eq!(counted.full_qp(seq, &items, &layout), None);
                    counted.take_counted(seq, &layout);
                    recounted.take(seq, &items, &layout);
                    let held = |r: &Room| (0..nqps).map(|q| r.held(q)).collect::<Vec<_>>();
                    assert_eq!(
                        held(&counted),
                        held(&recounted),
                        "{nqps} QPs, split {split}"
                    );
                    assert!(
                        held(&counted).iter().any(|&h| h > 0),
                        "the group holds room"
                    );
                    counted.give_back(seq, &items, &layout);
                    assert!(held(&counted).iter().all(|&h| h == 0), "all given back");
                }
            }
        }
    }

    #[test]
    fn a_group_on_one_qp_gives_back_what_it_took_as_giving_it_back_by_its_items_would() {
        for (nqps, split) in [(1, false), (4, false), (4, true)] {
            let layout = QpLayout::new(nqps, split, 1, 1);
            for items in [
                vec![item(8)],
                vec![item(0)],
                vec![item(1 << 20), item(0), item(4096)],
            ] {
                for seq in 0..8 {
                    let qps = layout.group_qps(seq);
                    let (mut by_held, mut by_items) = (Room::new(nqps), Room::new(nqps));
                    // Something already held, so that a wrong count would show.
                    for r in [&mut by_held, &mut by_items] {
                        assert_eq!(r.full_qp(seq + 8, &items, &layout), None);
                        r.take_counted(seq + 8, &layout);
                    }
                    assert_eq!(by_held.full_qp_of(seq, qps.clone(), &items, &layout), None);
                    let held_on = by_held.take_counted_of(qps.clone());
                    assert_eq!(by_items.full_qp(seq, &items, &layout), None);
                    by_items.take_counted(seq, &layout);
                    assert_eq!(
                        held_on.is_some(),
                        qps.len() == 1,
                        "{nqps} QPs, split {split}"
                    );
                    match held_on {
                        Some(h) => by_held.give_back_held(h),
                        None => by_held.give_back(seq, &items, &layout),
                    }
                    by_items.give_back(seq, &items, &layout);
                    for q in 0..nqps {
                        assert_eq!(by_held.held(q), by_items.held(q), "QP {q} of {nqps}");
                    }
                }
            }
        }
    }
}
