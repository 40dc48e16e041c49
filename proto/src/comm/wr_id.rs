//! The `wr_id` every work request carries: which kind of work it is and what it refers to, so a
//! completion can be dispatched without any lookup table.
//!
//! Layout: the top two bits are the kind, the next 8 bits the comm's recovery epoch (modulo 256;
//! 0 until the comm first recovers, so a comm that never recovers uses the same values as before
//! epochs existed), the low 54 bits its payload (a group sequence number for data and
//! clear-to-send writes, a request-table index for receives and flushes; a receive also carries
//! the index of the QP it was posted on in bits 32..40). A completion whose epoch is not the
//! comm's current one comes from a QP that recovery destroyed and is ignored (see
//! [`crate::recovery`]).

/// What a work request was, recovered from its `wr_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrId {
    /// One of the writes of send group `seq` (only the writes with immediates are signaled).
    Send { seq: u64 },
    /// A zero-length receive posted for receive request `req`; it consumes one immediate.
    Recv { req: u32 },
    /// The clear-to-send write of receive group `seq` (one in [`CTS_SIGNAL_EVERY`] is signaled).
    Cts { seq: u64 },
    /// The 1-byte RDMA READ of flush request `req`.
    Flush { req: u32 },
}

const KIND_SHIFT: u32 = 62;
/// Where the epoch starts: it takes the 8 bits below the kind.
const EPOCH_SHIFT: u32 = 54;
const PAYLOAD: u64 = (1 << EPOCH_SHIFT) - 1;
/// Where a receive's QP index starts (above its 32-bit request index).
const QP_SHIFT: u32 = 32;

pub use crate::CTS_SIGNAL_EVERY;

impl WrId {
    /// The `wr_id` of this work in recovery epoch 0 (a comm that never recovered).
    pub fn encode(self) -> u64 {
        match self {
            WrId::Send { seq } => seq & PAYLOAD,
            WrId::Recv { req } => (1 << KIND_SHIFT) | u64::from(req),
            WrId::Cts { seq } => (2 << KIND_SHIFT) | (seq & PAYLOAD),
            WrId::Flush { req } => (3 << KIND_SHIFT) | u64::from(req),
        }
    }

    /// The `wr_id` of this work posted in recovery epoch `epoch` (kept modulo 256).
    pub fn encode_in(self, epoch: u32) -> u64 {
        self.encode() | (u64::from(epoch as u8) << EPOCH_SHIFT)
    }

    /// The `wr_id` of the zero-length receive of request `req` posted on QP `qp` in epoch
    /// `epoch`: the QP index says, when its immediate arrives, which of the group's QPs delivered.
    pub fn recv_on(req: u32, qp: usize, epoch: u32) -> u64 {
        WrId::Recv { req }.encode_in(epoch) | (((qp & 0xff) as u64) << QP_SHIFT)
    }

    /// What the work was, whatever its epoch.
    pub fn decode(wr_id: u64) -> WrId {
        let payload = wr_id & PAYLOAD;
        // Request indexes are encoded from a u32, so the truncation only drops zero bits (and a
        // receive's QP index).
        match wr_id >> KIND_SHIFT {
            0 => WrId::Send { seq: payload },
            1 => WrId::Recv {
                req: payload as u32,
            },
            2 => WrId::Cts { seq: payload },
            _ => WrId::Flush {
                req: payload as u32,
            },
        }
    }
}

/// The group of a send write's `wr_id` posted in epoch `epoch` (modulo 256; a value above 255,
/// such as [`crate::recovery::NOT_COUNTING`], matches none), in one shift and compare; `None`
/// for any other work or epoch.
#[inline]
pub fn send_in(wr_id: u64, epoch: u16) -> Option<u64> {
    // A send's kind is 0: the bits above its payload are its epoch alone.
    (wr_id >> EPOCH_SHIFT == u64::from(epoch)).then_some(wr_id & PAYLOAD)
}

/// The request of a receive's `wr_id` (`WrId::Recv`, whatever its epoch and QP), else `None`:
/// the common completion's kind in one compare, without [`WrId::decode`].
#[inline(always)]
pub fn recv_req(wr_id: u64) -> Option<u32> {
    // The request index is the payload's low 32 bits (the QP index sits above it).
    (wr_id >> KIND_SHIFT == 1).then_some(wr_id as u32)
}

/// The recovery epoch (modulo 256) a `wr_id` was posted in.
pub fn epoch_of(wr_id: u64) -> u8 {
    ((wr_id >> EPOCH_SHIFT) & 0xff) as u8
}

/// The QP index a receive's `wr_id` names ([`WrId::recv_on`]; 0 for one made by
/// [`WrId::encode`]).
pub fn recv_qp(wr_id: u64) -> usize {
    ((wr_id >> QP_SHIFT) & 0xff) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_through_its_wr_id() {
        for id in [
            WrId::Send { seq: 0 },
            WrId::Send { seq: PAYLOAD },
            WrId::Recv { req: 0 },
            WrId::Recv { req: u32::MAX },
            WrId::Cts { seq: 12345 },
            WrId::Flush { req: 255 },
        ] {
            assert_eq!(WrId::decode(id.encode()), id);
        }
    }

    #[test]
    fn kinds_never_collide_for_the_same_payload() {
        let ids = [
            WrId::Send { seq: 7 }.encode(),
            WrId::Recv { req: 7 }.encode(),
            WrId::Cts { seq: 7 }.encode(),
            WrId::Flush { req: 7 }.encode(),
        ];
        for (i, a) in ids.iter().enumerate() {
            for b in &ids[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn the_epoch_and_a_receives_qp_ride_along_without_changing_what_the_work_is() {
        for epoch in [0, 1, 255, 256, 257] {
            let w = WrId::Send { seq: 77 }.encode_in(epoch);
            assert_eq!(WrId::decode(w), WrId::Send { seq: 77 });
            assert_eq!(epoch_of(w), epoch as u8);
            let r = WrId::recv_on(31, 127, epoch);
            assert_eq!(WrId::decode(r), WrId::Recv { req: 31 });
            assert_eq!((epoch_of(r), recv_qp(r)), (epoch as u8, 127));
        }
        assert_eq!(
            WrId::Cts { seq: 5 }.encode_in(0),
            WrId::Cts { seq: 5 }.encode(),
            "epoch 0 is the encoding of a comm that never recovered"
        );
        assert_eq!(recv_qp(WrId::Recv { req: 3 }.encode()), 0);
    }

    #[test]
    fn a_sends_group_is_found_only_in_its_own_epoch_and_in_no_other_kind_of_work() {
        for epoch in [0, 1, 255, 256] {
            let w = WrId::Send { seq: PAYLOAD }.encode_in(epoch);
            assert_eq!(send_in(w, u16::from(epoch as u8)), Some(PAYLOAD));
            assert_eq!(send_in(w, u16::from((epoch as u8).wrapping_add(1))), None);
            assert_eq!(send_in(w, crate::recovery::NOT_COUNTING), None);
            for other in [
                WrId::Recv { req: 1 }.encode_in(epoch),
                WrId::Cts { seq: 1 }.encode_in(epoch),
                WrId::Flush { req: 1 }.encode_in(epoch),
            ] {
                assert_eq!(send_in(other, u16::from(epoch as u8)), None);
            }
        }
    }
}
