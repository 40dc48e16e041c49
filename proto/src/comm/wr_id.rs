//! The `wr_id` every work request carries: which kind of work it is and what it refers to, so a
//! completion can be dispatched without any lookup table.
//!
//! Layout: the top two bits are the kind, the low 62 bits its payload (a group sequence number
//! for data and clear-to-send writes, a request-table index for receives and flushes).

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
const PAYLOAD: u64 = (1 << KIND_SHIFT) - 1;

pub use crate::CTS_SIGNAL_EVERY;

impl WrId {
    pub fn encode(self) -> u64 {
        match self {
            WrId::Send { seq } => seq & PAYLOAD,
            WrId::Recv { req } => (1 << KIND_SHIFT) | u64::from(req),
            WrId::Cts { seq } => (2 << KIND_SHIFT) | (seq & PAYLOAD),
            WrId::Flush { req } => (3 << KIND_SHIFT) | u64::from(req),
        }
    }

    pub fn decode(wr_id: u64) -> WrId {
        let payload = wr_id & PAYLOAD;
        // Request indexes are encoded from a u32, so the truncation only drops zero bits.
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
}
