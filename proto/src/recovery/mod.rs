//! Recovery in place: the rules by which a comm whose QPs failed, and whose peer is alive, is
//! brought back without losing or repeating a message (see `docs/DESIGN.md`, "Recovery in
//! place"). Pure: the transport rebuilds the QPs and moves the messages over the out-of-band
//! connection; everything decided lives here and in the cores' recovery methods
//! (`comm::send::recovery`, `comm::recv::recovery`).
//!
//! This module owns:
//! - [`Recovery`]: one comm's epoch (which QPs' completions count), whether it is stopped, the
//!   budget (a `Duration`; zero turns recovery off) and the time spent;
//! - [`snapshot`]: what the receiver reports when it stops ([`ReceiverState`]: for every
//!   outstanding group, which QPs' immediates arrived), the truth both sides recover to;
//! - [`plan`]: what the sender replays ([`ReplayGroup`]: the QP shares of a group whose
//!   immediates did not arrive) and the writes that carry it.

pub mod plan;
pub mod snapshot;

pub use plan::ReplayGroup;

pub use snapshot::{GroupArrivals, ReceiverState};

use crate::health::Failure;
use crate::qp_retry::RetryPolicy;
use std::fmt;
use std::time::Duration;

/// Why a recovery step was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoveryError {
    /// Recovery is off (a budget of zero): the comm fails as it always did.
    Off,
    /// A message or call names another epoch than the comm's current one.
    WrongEpoch { got: u32, want: u32 },
    /// A step that needs a stopped comm (or the previous step) came too early.
    NotReady(&'static str),
    /// The peer's report contradicts what this side knows (never happens between two correct
    /// peers); the comm fails.
    Inconsistent(String),
    /// The comm failed (the budget ran out, or it had failed before): its failure.
    Failed(Failure),
}

impl fmt::Display for RecoveryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecoveryError::Off => f.write_str("recovery in place is off (budget 0)"),
            RecoveryError::WrongEpoch { got, want } => write!(
                f,
                "recovery message of epoch {got} while the comm is at epoch {want}"
            ),
            RecoveryError::NotReady(what) => write!(f, "recovery step out of order: {what}"),
            RecoveryError::Inconsistent(what) => {
                write!(f, "the peer's recovery state contradicts ours: {what}")
            }
            RecoveryError::Failed(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for RecoveryError {}

/// What the transport does next for a comm ([`crate::comm::recovering::Recovering::recovery_step`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The comm runs: nothing to do.
    Run,
    /// Stopped: wait for the peer's next message.
    Wait,
    /// Stopped: rebuild this side's QPs (once the device can carry them: its port is active),
    /// then report them ([`Recovering::qps_rebuilt`](crate::comm::recovering::Recovering::qps_rebuilt)).
    Rebuild,
    /// Stopped: connect this side's QPs to the peer's rebuilt ones. The sender rebuilds its
    /// QPs first and then reports them; the receiver, whose QPs were rebuilt before, then
    /// resumes.
    Connect(PeerQps),
}

/// The peer's QPs of the current epoch, from its `Rebuilt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerQps {
    /// Their numbers, in the handshake's QP order.
    pub qpns: Vec<u32>,
    /// The peer's members that are down (see [`crate::plan::QpLayout::remote_down`]).
    pub down: u8,
}

/// [`Recovery::counting`] while the comm is stopped: above every epoch modulo 256.
pub const NOT_COUNTING: u16 = u16::MAX;

/// One comm's recovery bookkeeping: its epoch, whether it is stopped, the budget and the time,
/// and where the exchange of the current epoch stands.
#[derive(Debug, Default)]
pub struct Recovery {
    /// The most time one recovery may take, from the first stop to the resume; zero is off.
    budget: Duration,
    /// The current epoch: work posted in it is the only work whose completions count.
    epoch: u32,
    stopped: bool,
    /// The epoch whose completions count, modulo 256 ([`Recovery::counting`]): `epoch as u8`
    /// while the comm runs, [`NOT_COUNTING`] while it is stopped; kept by the two steps that
    /// change either (a stop and the resume), so a completion's question is one compare.
    counting: u16,
    /// When the current recovery began (its first stop), while one is under way.
    since: Option<Duration>,
    /// Epochs entered in the current recovery: 1, plus one per restart.
    attempts: u32,
    /// Why the comm stopped, last time.
    cause: String,
    /// A failure seen while the comm ran (a failed completion), not yet acted on: the
    /// transport stops the comm at its next step.
    wanted: Option<String>,
    /// This side's QPs of the current epoch were rebuilt (and the peer told).
    rebuilt: bool,
    /// The peer's rebuilt QPs of the current epoch, from its `Rebuilt`.
    peer_qpns: Option<PeerQps>,
    /// The least time from the stop to a rebuild (`NCCL_IB_RESILIENCY_PORT_RECOVERY_START_DELAY`).
    start_delay: Duration,
    /// The most epochs one recovery may enter (`NCCL_IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX`).
    attempts_max: Option<u32>,
    /// Failed tries of this epoch's connect step (a QP state change that failed), and when the
    /// next try is due ([`Recovery::connect_failed`]).
    connect_failures: u32,
    retry_at: Option<Duration>,
    /// The last failed try's error, for the failure when the budget runs out.
    connect_error: Option<String>,
}

impl Recovery {
    /// The budget of one recovery; zero turns recovery off (the comm fails as it always did).
    pub fn set_budget(&mut self, budget: Duration) {
        self.budget = budget;
    }

    pub fn budget(&self) -> Duration {
        self.budget
    }

    /// The least time from a stop to the rebuild of the QPs (`None`: none), and the most epochs
    /// one recovery may enter before the comm fails (`None`: only the budget bounds it).
    pub fn set_limits(&mut self, start_delay: Option<Duration>, attempts_max: Option<u32>) {
        self.start_delay = start_delay.unwrap_or_default();
        self.attempts_max = attempts_max;
    }

    /// Whether the QPs may be rebuilt or connected at `now`: the start delay has passed since
    /// the stop, and no failed connect waits for its retry.
    pub fn may_rebuild(&self, now: Duration) -> bool {
        self.since
            .is_none_or(|s| now.saturating_sub(s) >= self.start_delay)
            && self.retry_at.is_none_or(|at| now >= at)
    }

    /// The connect step of this epoch failed at `now`: a state change of this side's QPs
    /// (`error`, with its `errno`) that connects them to the peer's. When it is tried again
    /// under `policy` (`NCCL_IB_MQP_RETRY_*`, as at setup: the move to RTR resolves the peer's
    /// address, which times out while the fabric converges after a port came back, and only
    /// that is retried unless `_ALL` is set), or `None` to give up. Until then
    /// [`Recovery::may_rebuild`] says no; the budget bounds the whole recovery as always.
    /// Returns the try that failed (from 1) with the time of the next.
    pub fn connect_failed(
        &mut self,
        now: Duration,
        errno: i32,
        error: &str,
        policy: &RetryPolicy,
    ) -> (u32, Option<Duration>) {
        self.connect_failures += 1;
        self.connect_error = Some(error.to_string());
        let next = policy.next_attempt(self.connect_failures, errno, now);
        self.retry_at = next;
        (self.connect_failures, next)
    }

    /// Failed tries of this epoch's connect step so far.
    pub fn connect_failures(&self) -> u32 {
        self.connect_failures
    }

    pub fn is_enabled(&self) -> bool {
        !self.budget.is_zero()
    }

    /// The current epoch (0 until the comm first stops).
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Whether the comm is stopped: no work is posted and no completion counts until it
    /// resumes.
    #[inline]
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Whether a completion of work posted in epoch `wr_epoch` (modulo 256, from its `wr_id`)
    /// counts: the comm runs and the work is of its current epoch.
    #[inline]
    pub fn counts(&self, wr_epoch: u8) -> bool {
        u16::from(wr_epoch) == self.counting
    }

    /// The epoch (modulo 256) whose completions count while the comm runs; [`NOT_COUNTING`],
    /// which no epoch of a `wr_id` equals, while it is stopped.
    #[inline]
    pub fn counting(&self) -> u16 {
        self.counting
    }

    /// Stops the comm at the next epoch (a first failure, or a second one during recovery,
    /// which restarts it). Returns the new epoch.
    pub fn stop(&mut self, now: Duration, cause: &str) -> Result<u32, RecoveryError> {
        self.enter(self.epoch + 1, now, cause)
    }

    /// The peer stopped at `epoch`: a later epoch than ours stops (or restarts) this side at
    /// it; ours is nothing new (`Ok(false)`); an earlier one is a stale message, ignored too.
    pub fn adopt(&mut self, epoch: u32, now: Duration) -> Result<bool, RecoveryError> {
        if epoch <= self.epoch {
            return Ok(false);
        }
        self.enter(epoch, now, "the peer asked to recover")
            .map(|_| true)
    }

    fn enter(&mut self, epoch: u32, now: Duration, cause: &str) -> Result<u32, RecoveryError> {
        if !self.is_enabled() {
            return Err(RecoveryError::Off);
        }
        let since = *self.since.get_or_insert(now);
        if now.saturating_sub(since) > self.budget {
            return Err(RecoveryError::NotReady("the recovery budget is spent"));
        }
        if self.attempts_max.is_some_and(|m| self.attempts >= m) {
            return Err(RecoveryError::NotReady(
                "the recovery's attempts are spent (NCCL_IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX)",
            ));
        }
        self.epoch = epoch;
        self.stopped = true;
        self.counting = NOT_COUNTING;
        self.attempts += 1;
        cause.clone_into(&mut self.cause);
        self.wanted = None;
        self.rebuilt = false;
        self.peer_qpns = None;
        self.connect_failures = 0;
        self.retry_at = None;
        Ok(epoch)
    }

    /// A failure seen while the comm runs (`cause` says what): recovery is wanted, and the
    /// transport stops the comm at its next step. The first cause is kept; ignored when
    /// recovery is off or the comm is already stopped (a flushed completion of the QPs being
    /// torn down is no news).
    pub fn want(&mut self, cause: &str) {
        if self.is_enabled() && !self.stopped && self.wanted.is_none() {
            self.wanted = Some(cause.to_string());
        }
    }

    /// The cause of a wanted recovery, taken.
    pub fn take_wanted(&mut self) -> Option<String> {
        self.wanted.take()
    }

    /// Whether a recovery is wanted and not yet begun.
    #[inline]
    pub fn is_wanted(&self) -> bool {
        self.wanted.is_some()
    }

    /// The peer's QPs of `epoch` were rebuilt: kept for the connect step if `epoch` is the
    /// current recovery's (an older one is stale and ignored).
    pub fn set_peer_qpns(&mut self, epoch: u32, qpns: Vec<u32>, down: u8) {
        if self.stopped && epoch == self.epoch {
            self.peer_qpns = Some(PeerQps { qpns, down });
        }
    }

    /// The peer's rebuilt QPs of the current epoch, once known.
    pub fn peer_qpns(&self) -> Option<&PeerQps> {
        self.peer_qpns.as_ref()
    }

    /// This side's QPs of the current epoch exist.
    pub fn mark_rebuilt(&mut self) {
        self.rebuilt = true;
    }

    pub fn is_rebuilt(&self) -> bool {
        self.rebuilt
    }

    /// A message of epoch `got` is for the current recovery.
    pub fn expect(&self, got: u32) -> Result<(), RecoveryError> {
        if !self.stopped {
            return Err(RecoveryError::NotReady("the comm is not recovering"));
        }
        if got != self.epoch {
            return Err(RecoveryError::WrongEpoch {
                got,
                want: self.epoch,
            });
        }
        Ok(())
    }

    /// The comm runs again at its current epoch; returns the time the recovery took.
    pub fn finish(&mut self, now: Duration) -> Duration {
        self.stopped = false;
        self.counting = u16::from(self.epoch as u8);
        self.attempts = 0;
        self.rebuilt = false;
        self.peer_qpns = None;
        self.connect_failures = 0;
        self.retry_at = None;
        self.connect_error = None;
        self.since
            .take()
            .map_or(Duration::ZERO, |s| now.saturating_sub(s))
    }

    /// Whether the recovery under way has run past its budget at `now`.
    pub fn expired(&self, now: Duration) -> bool {
        self.since
            .is_some_and(|s| now.saturating_sub(s) > self.budget)
    }

    /// The failure of a recovery that ran out of budget: what stopped the comm, what was
    /// tried, and (`pending`) what the comm still waited for.
    pub fn gave_up(&self, now: Duration, side: &str, pending: &str) -> Failure {
        let took = self.since.map_or(Duration::ZERO, |s| now.saturating_sub(s));
        let connect = self.connect_error.as_ref().map_or(String::new(), |e| {
            format!("; the last failed try to connect the QPs: {e}")
        });
        Failure::remote(format!(
            "{side} comm: recovery in place gave up after {:.1} s (budget {:.1} s): {} attempt(s) up to epoch {}, the last after {}{connect}; {pending}",
            took.as_secs_f64(),
            self.budget.as_secs_f64(),
            self.attempts,
            self.epoch,
            self.cause
        ))
    }
}

#[cfg(test)]
mod tests;
