//! The traffic class and service level of a connection's QPs, and who decides them.
//!
//! The sending side decides, as NCCL's IB transport does: `NCCL_IB_TC` when it is set, else the
//! communicator's traffic class (ABI v10+) when that is set, else 0; the service level the same
//! way from `NCCL_IB_SL`. It sends both in `Connect`; the receiving side builds its QPs with
//! them and echoes them in `Accept`. One exception: on RoCE, the receiving side's data QPs,
//! which carry its clear-to-send writes (and the acknowledgements of the data it receives),
//! take `NCCL_IB_FIFO_TC` when that is set. The receiver's flush QPs keep the sender's class.

/// Highest service level: the field is 4 bits wide.
pub const MAX_SL: u8 = 15;

/// What the QPs of one connection are given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpPath {
    /// RoCE traffic class (the GRH's), 0..=255.
    pub tc: u8,
    /// Service level, 0..=[`MAX_SL`].
    pub sl: u8,
}

impl QpPath {
    /// The sending side's choice from `NCCL_IB_TC` and `NCCL_IB_SL` (`None`: not set) and the
    /// communicator's traffic class (`None`: not set, or an ABI before v10).
    ///
    /// The communicator's class stands in for the service level too, as in NCCL; a service level
    /// has 4 bits, so only the class's low 4 bits are taken (what an InfiniBand NIC keeps of a
    /// wider value), and the kernel's view of the QP is what the NIC uses.
    pub fn choose(env_tc: Option<u8>, env_sl: Option<u8>, comm_class: Option<u8>) -> QpPath {
        QpPath {
            tc: env_tc.or(comm_class).unwrap_or(0),
            sl: env_sl.or(comm_class.map(|c| c & MAX_SL)).unwrap_or(0),
        }
    }

    /// The traffic class of the receiving side's data QPs: `NCCL_IB_FIFO_TC` (`fifo_tc`) when
    /// it is set and the link is RoCE (`roce`), else the sender's.
    pub fn receiver_tc(self, fifo_tc: Option<u8>, roce: bool) -> u8 {
        match fifo_tc {
            Some(tc) if roce => tc,
            _ => self.tc,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn path(tc: u8, sl: u8) -> QpPath {
        QpPath { tc, sl }
    }

    #[test]
    fn the_environment_wins_over_the_communicators_class_which_wins_over_zero() {
        assert_eq!(QpPath::choose(None, None, None), path(0, 0));
        assert_eq!(QpPath::choose(Some(32), Some(3), None), path(32, 3));
        assert_eq!(QpPath::choose(Some(32), Some(3), Some(96)), path(32, 3));
        assert_eq!(QpPath::choose(None, None, Some(5)), path(5, 5));
        assert_eq!(QpPath::choose(Some(0), Some(0), Some(5)), path(0, 0));
    }

    #[test]
    fn each_variable_is_taken_on_its_own() {
        assert_eq!(QpPath::choose(Some(32), None, Some(7)), path(32, 7));
        assert_eq!(QpPath::choose(None, Some(2), Some(7)), path(7, 2));
        assert_eq!(QpPath::choose(Some(32), None, None), path(32, 0));
        assert_eq!(QpPath::choose(None, Some(2), None), path(0, 2));
    }

    #[test]
    fn a_communicators_class_wider_than_a_service_level_gives_its_low_four_bits() {
        assert_eq!(QpPath::choose(None, None, Some(96)), path(96, 0));
        assert_eq!(QpPath::choose(None, None, Some(106)), path(106, 10));
        assert_eq!(QpPath::choose(None, None, Some(255)), path(255, MAX_SL));
    }

    #[test]
    fn the_fifo_class_replaces_the_senders_on_the_receivers_roce_qps_only() {
        let p = path(32, 3);
        assert_eq!(p.receiver_tc(None, true), 32);
        assert_eq!(p.receiver_tc(Some(104), true), 104);
        assert_eq!(p.receiver_tc(Some(104), false), 32);
        assert_eq!(p.receiver_tc(Some(0), true), 0);
    }
}
