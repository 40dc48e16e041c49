//! What the sender replays after a recovery: for every group it posted that the receiver has
//! not completed, the shares of the QPs whose immediates did not arrive, planned exactly as the
//! group was first written (the same chunks, sizes record and immediates) and kept to those QPs.
//! A share whose immediate arrived is complete (RC delivers in order on each QP, and the
//! immediate comes last), so it is never written again; a share rewritten over bytes a cut left
//! half-placed lands in a buffer whose receive is not complete, which no one reads yet.

use crate::plan::{self, AdaptiveRouting, QpLayout, SendItem, SizesSlot, Write};

/// A posted group to write again on some of its QPs, in the new epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayGroup<'a> {
    pub seq: u64,
    /// Bit `q` set: QP `q`'s share is replayed.
    pub qps: u128,
    pub(crate) items: &'a [SendItem],
    pub(crate) reqs: &'a [u32],
    /// The group's `wr_id` in the new epoch (the comm's encoding).
    pub(crate) wr_id: u64,
}

impl<'a> ReplayGroup<'a> {
    /// The group's sends in the receiver's buffer order, as first written.
    pub fn items(&self) -> &'a [SendItem] {
        self.items
    }

    /// Their requests, in the same order.
    pub fn reqs(&self) -> &'a [u32] {
        self.reqs
    }

    /// Whether QP `q`'s share is replayed.
    pub fn on_qp(&self, q: usize) -> bool {
        q < 128 && self.qps & (1u128 << q) != 0
    }

    /// The `wr_id` of the replayed writes (the group's, in the new epoch).
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }

    /// The data bytes the replay carries (the buffers' shares on the replayed QPs).
    pub fn bytes(&self, layout: &QpLayout) -> u64 {
        self.items
            .iter()
            .flat_map(|it| plan::buffer_shares(self.seq, it.size, layout))
            .filter(|&(q, _)| self.on_qp(q))
            .map(|(_, len)| u64::from(len))
            .sum()
    }
}

/// The writes of a replay into a buffer the caller reuses: the group's plan
/// ([`plan::plan_group_into`], under the same adaptive routing) kept to the replayed QPs, in
/// the same order.
pub fn replay_writes_into(
    g: &ReplayGroup<'_>,
    layout: &QpLayout,
    sizes: SizesSlot,
    max_write: u32,
    ar: AdaptiveRouting,
    out: &mut Vec<Write>,
) {
    plan::plan_group_into(g.seq, g.items, layout, sizes, max_write, ar, out);
    out.retain(|w| g.on_qp(w.qp));
}
