//! What the receiver reports when it stops: the groups it posted and, for every one it has not
//! completed, which QPs' immediates arrived. The receiver's completion state is the truth both
//! sides recover to: a group it completed (reported to NCCL or ready to be) is never written
//! again, and of the others only the QP shares whose immediates did not arrive are replayed.

use crate::SLOTS;

/// One group the receiver posted and has not completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupArrivals {
    pub seq: u64,
    /// Bit `q` is set when QP `q`'s immediate for the group arrived (QP indexes are below
    /// [`crate::MAX_QPS`]).
    pub arrived: u128,
}

/// The receiver's state at a stop, as sent over the out-of-band connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiverState {
    /// The epoch the receiver stopped at.
    pub epoch: u32,
    /// The groups it posted: `0..next_seq`. Every group below `next_seq` that is not in
    /// `outstanding` is complete.
    pub next_seq: u64,
    /// The groups posted and not complete, by increasing sequence number (at most [`SLOTS`],
    /// all within the last [`SLOTS`] groups posted).
    pub outstanding: Vec<GroupArrivals>,
}

impl ReceiverState {
    /// Whether the state is one a correct receiver can send: at most [`SLOTS`] outstanding
    /// groups, in increasing order, every one among the last [`SLOTS`] posted.
    pub fn is_well_formed(&self) -> bool {
        let low = self.next_seq.saturating_sub(SLOTS as u64);
        self.outstanding.len() <= SLOTS
            && self
                .outstanding
                .iter()
                .all(|g| (low..self.next_seq).contains(&g.seq))
            && self.outstanding.windows(2).all(|w| w[0].seq < w[1].seq)
    }

    /// What the receiver knows of group `seq`: `None` when it completed it (or never posted
    /// it: `seq >= next_seq`, which [`ReceiverState::posted`] tells apart), else its arrivals.
    pub fn arrivals(&self, seq: u64) -> Option<u128> {
        self.outstanding
            .iter()
            .find(|g| g.seq == seq)
            .map(|g| g.arrived)
    }

    /// Whether the receiver posted group `seq`.
    pub fn posted(&self, seq: u64) -> bool {
        seq < self.next_seq
    }
}
