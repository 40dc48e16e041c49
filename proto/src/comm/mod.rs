//! The comm state machine: everything a connected send or receive comm decides, without I/O.
//!
//! The plugin's transport owns the verbs objects and the registered memory; for every NCCL call
//! it asks the core here what to do, executes the verbs work the core names, and feeds the
//! completions it polls back in. The core owns:
//! - the request table and its free list ([`requests`]);
//! - the send side: opening the head group from the clear-to-send FIFO, matching sends to posted
//!   buffers by tag, the per-slot in-flight bookkeeping ([`send`]);
//! - the receive side: group sequence numbers, what to post for a receive, how its immediates
//!   add up to a finished request ([`recv`]);
//! - the `wr_id` encoding that routes completions ([`wr_id`]);
//! - the per-comm [`counters`];
//! - each side's part of recovery in place (`send::recovery`, `recv::recovery`: stop, report,
//!   replay, resume), by the rules of [`crate::recovery`].
//!
//! Each core keeps a [`CommHealth`]: the sticky error, the stall watchdog and the counters. The
//! fault policy it belongs to (when a comm fails, how, and what is said) is [`crate::health`];
//! its types are re-exported here under the paths the rest of the code uses.
//!
//! Nothing here reads a clock or touches memory the NIC writes: the transport passes in what it
//! read (FIFO entries, sizes) through small closures or values.

pub mod recovering;
pub mod recv;
pub mod requests;
pub mod send;
pub mod wr_id;

pub use crate::health::{
    CommHealth, Failure, FailureKind, LIVENESS_EVERY, LivenessCounter, Sticky,
};
pub use crate::health::{counters, watchdog};

use crate::MAX_RECVS;
use std::fmt;

/// The byte counts a finished request reports to `test`: one per buffer of the group (`n` of
/// them; a send reports its own size, a flush nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    pub sizes: [u32; MAX_RECVS],
    pub n: usize,
}

impl Done {
    pub fn one(size: u32) -> Done {
        let mut sizes = [0; MAX_RECVS];
        sizes[0] = size;
        Done { sizes, n: 1 }
    }

    pub const NOTHING: Done = Done {
        sizes: [0; MAX_RECVS],
        n: 0,
    };
}

/// A call the core refuses (the comm stays usable unless the error is also made sticky).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoreError {
    /// `test` on a request that is not in flight (never posted, or already reported done).
    NotInFlight { idx: u32 },
    /// More requests than the table holds (NCCL never posts that many).
    TableFull { capacity: usize },
    /// A call that does not fit the comm (wrong side, bad group size, too large a send).
    Usage(String),
    /// The comm failed earlier.
    Failed(Failure),
}

impl fmt::Display for CoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CoreError::NotInFlight { idx } => {
                write!(f, "test on a request that is not in flight (slot {idx})")
            }
            CoreError::TableFull { capacity } => {
                write!(f, "more than {capacity} requests in flight on one comm")
            }
            CoreError::Usage(m) => f.write_str(m),
            CoreError::Failed(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for CoreError {}

impl From<Failure> for CoreError {
    fn from(f: Failure) -> CoreError {
        CoreError::Failed(f)
    }
}

/// What `test` reports for a request after the comm's last poll, given what `take_done` found:
/// a request whose completion was polled is done, with its sizes, even when the comm failed
/// afterwards (a failure found by a periodic look polls once more first, so work that
/// completed before the fault still counts); only a request still pending gets the comm's
/// failure; otherwise it is not done yet.
#[inline]
pub fn test_outcome(taken: Option<Done>, health: &CommHealth) -> Result<Option<Done>, CoreError> {
    match taken {
        Some(d) => Ok(Some(d)),
        None => health.check().map(|()| None).map_err(CoreError::Failed),
    }
}
