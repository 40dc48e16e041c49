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
//! - the sticky error (once a comm failed, every later call reports the same failure), the
//!   per-comm [`counters`] and the stall [`watchdog`], together in [`CommHealth`].
//!
//! Nothing here reads a clock or touches memory the NIC writes: the transport passes in what it
//! read (FIFO entries, sizes) through small closures or values.

pub mod counters;
pub mod recv;
pub mod requests;
pub mod send;
pub mod watchdog;
pub mod wr_id;

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

/// Whose fault a comm failure is; the transport maps it to NCCL's result codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The peer failed or misbehaved (a failed work completion, a dead connection).
    Remote,
    /// The system failed us (a post or poll refused by libibverbs).
    System,
    /// The caller broke the contract (a send larger than the posted receive).
    Usage,
}

/// Why a comm stopped working. Sticky: kept by the core and reported by every later call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
}

impl Failure {
    pub fn remote(message: impl Into<String>) -> Failure {
        Failure {
            kind: FailureKind::Remote,
            message: message.into(),
        }
    }

    pub fn system(message: impl Into<String>) -> Failure {
        Failure {
            kind: FailureKind::System,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
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

/// The sticky error of one comm: the first failure wins and stays.
#[derive(Debug, Default)]
pub struct Sticky(Option<Failure>);

impl Sticky {
    /// Records `f` unless the comm already failed; returns the failure in force.
    pub fn set(&mut self, f: Failure) -> &Failure {
        self.0.get_or_insert(f)
    }

    pub fn get(&self) -> Option<&Failure> {
        self.0.as_ref()
    }

    pub fn is_failed(&self) -> bool {
        self.0.is_some()
    }

    /// `Err` with the failure in force, if any.
    pub fn check(&self) -> Result<(), CoreError> {
        match &self.0 {
            Some(f) => Err(CoreError::Failed(f.clone())),
            None => Ok(()),
        }
    }
}

/// What every comm keeps besides its side's state: the sticky error, the counter of waiting
/// calls that paces the periodic look, the stall watchdog and the counters.
#[derive(Debug)]
pub struct CommHealth {
    error: Sticky,
    liveness: LivenessCounter,
    watchdog: watchdog::Watchdog,
    pub counters: counters::Counters,
}

impl Default for CommHealth {
    fn default() -> Self {
        CommHealth {
            error: Sticky::default(),
            liveness: LivenessCounter::default(),
            watchdog: watchdog::Watchdog::new(std::time::Duration::ZERO),
            counters: counters::Counters::default(),
        }
    }
}

impl CommHealth {
    /// Records a failure; every later call reports the first one.
    pub fn fail(&mut self, f: Failure) -> &Failure {
        self.counters.errors += 1;
        self.error.set(f)
    }

    pub fn failure(&self) -> Option<&Failure> {
        self.error.get()
    }

    /// `Err` with the failure in force, if any.
    pub fn check(&self) -> Result<(), CoreError> {
        self.error.check()
    }

    /// Counts a call that waits (an unfinished `test`, a retried call); `true` when the comm
    /// should look at the peer, the device and the clock.
    pub fn tick_waiting(&mut self) -> bool {
        self.liveness.tick()
    }

    /// Enables the stall watchdog: a stall is reported after `threshold` without progress.
    pub fn set_stall_threshold(&mut self, threshold: std::time::Duration) {
        self.watchdog = watchdog::Watchdog::new(threshold);
    }

    /// The watchdog's check at time `now` (read by the caller at its periodic look); `waiting`
    /// says whether the comm has work outstanding. Progress is any new completion or request.
    pub fn check_stall(
        &mut self,
        now: std::time::Duration,
        waiting: bool,
    ) -> Option<watchdog::Stall> {
        let progress = self.counters.completions + self.counters.requests;
        self.watchdog.check(now, progress, waiting)
    }
}

/// How often a comm that waits looks at the world (the peer's out-of-band connection, the
/// device's events, the clock for the stall watchdog): every this many calls that wait (an
/// unfinished `test`, an `isend` or `irecv` answered with a retry). Counting calls rather than
/// reading the clock keeps those calls cheap: clock reads are system calls on some virtual
/// machines. NCCL's progress thread calls continuously while it waits, so this is frequent.
pub const LIVENESS_EVERY: u32 = 256;

/// Counts waiting calls and says when the comm should look at the world.
#[derive(Debug, Default)]
pub struct LivenessCounter(u32);

impl LivenessCounter {
    /// Call once per waiting call; `true` every [`LIVENESS_EVERY`] calls.
    pub fn tick(&mut self) -> bool {
        self.0 += 1;
        if self.0 < LIVENESS_EVERY {
            return false;
        }
        self.0 = 0;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_sticks() {
        let mut s = Sticky::default();
        assert!(s.check().is_ok());
        s.set(Failure::remote("peer gone"));
        s.set(Failure::system("later"));
        assert_eq!(s.get().map(|f| f.message.as_str()), Some("peer gone"));
        assert_eq!(
            s.check(),
            Err(CoreError::Failed(Failure::remote("peer gone")))
        );
    }

    #[test]
    fn the_peer_is_checked_once_every_256_unfinished_tests() {
        let mut c = LivenessCounter::default();
        let fired: Vec<usize> = (1..=600).filter(|_| c.tick()).collect();
        assert_eq!(fired.len(), 2);
    }
}
