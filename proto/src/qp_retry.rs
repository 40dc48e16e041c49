//! Retrying a QP state change that failed (`NCCL_IB_MQP_RETRY_CNT`, `_SLEEP_MSEC`, `_ALL`),
//! without blocking: which failures are retried, when the next attempt is due, and when to give
//! up ([`RetryPolicy`]); and the progress of connecting a connection's QPs one state change at a
//! time ([`ConnectProgress`]), which the transport keeps between `connect`/`accept` calls and
//! asks what to do at each call (a state change, wait, or nothing more).
//!
//! NCCL sleeps between attempts inside the call; here the time of the next attempt is recorded
//! and the calls in between answer "not yet". A state change such as the move to RTR resolves
//! the peer's address, which can time out while the fabric converges: that failure
//! (`ETIMEDOUT`) is retried, any other one only when `_ALL` is set.

use std::fmt;
use std::time::Duration;

/// `ETIMEDOUT` as Linux numbers it (the errno `ibv_modify_qp` returns when an address
/// resolution times out).
pub const ETIMEDOUT: i32 = 110;

/// NCCL's defaults: 34 retries, 100 ms x attempt between them, only `ETIMEDOUT`.
pub const DEFAULT_RETRIES: u32 = 34;
pub const DEFAULT_SLEEP: Duration = Duration::from_millis(100);

/// Which failed state changes are tried again, how often, and how long apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (`NCCL_IB_MQP_RETRY_CNT`): at most `retries + 1`
    /// attempts in all.
    pub retries: u32,
    /// The wait before retry `k` is `sleep x k` (`NCCL_IB_MQP_RETRY_SLEEP_MSEC`).
    pub sleep: Duration,
    /// Retry every failure, not only `ETIMEDOUT` (`NCCL_IB_MQP_RETRY_ALL`).
    pub all: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            retries: DEFAULT_RETRIES,
            sleep: DEFAULT_SLEEP,
            all: false,
        }
    }
}

impl RetryPolicy {
    /// Whether a state change that failed with `errno` may be tried again.
    pub fn retries_errno(&self, errno: i32) -> bool {
        errno != 0 && (self.all || errno == ETIMEDOUT)
    }

    /// After the `failures`-th failed attempt (counting from 1) with `errno` at `now`: when the
    /// next attempt is due, or `None` to give up (a failure not retried, or the last attempt).
    pub fn next_attempt(&self, failures: u32, errno: i32, now: Duration) -> Option<Duration> {
        if !self.retries_errno(errno) || failures > self.retries {
            return None;
        }
        Some(now + self.sleep.saturating_mul(failures))
    }

    /// The longest one state change can take in waits alone: `sleep x (1 + 2 + ... + retries)`.
    pub fn longest_wait(&self) -> Duration {
        let r = u64::from(self.retries);
        let sum = r * (r + 1) / 2;
        self.sleep
            .saturating_mul(u32::try_from(sum).unwrap_or(u32::MAX))
    }
}

/// One of the two state changes that connect a QP to its peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// INIT to ready-to-receive (the peer's address is resolved here).
    Rtr,
    /// Ready-to-receive to ready-to-send.
    Rts,
}

impl fmt::Display for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transition::Rtr => "RTR",
            Transition::Rts => "RTS",
        })
    }
}

/// What to do next about a connection's QPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Try this state change of QP `qp` now.
    Change { qp: usize, to: Transition },
    /// A retry is due at this time; answer "not yet" until then.
    WaitUntil(Duration),
    /// Every QP is ready to send.
    Done,
}

/// A state change given up: QP index, the change, how many attempts were made, the last errno
/// and whether it was one the policy retries (then the attempts ran out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GaveUp {
    pub qp: usize,
    pub to: Transition,
    pub attempts: u32,
    pub errno: i32,
    pub retried: bool,
}

impl fmt::Display for GaveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "QP {} to {} failed with errno {} after {} attempt{}",
            self.qp,
            self.to,
            self.errno,
            self.attempts,
            if self.attempts == 1 { "" } else { "s" }
        )?;
        if self.retried {
            write!(f, " (NCCL_IB_MQP_RETRY_CNT's retries are spent)")
        } else {
            write!(
                f,
                " (not retried: only ETIMEDOUT is, unless NCCL_IB_MQP_RETRY_ALL=1)"
            )
        }
    }
}

/// The progress of connecting `qps` QPs, each to RTR then RTS, in order, one state change at a
/// time: the next change, the failed attempts of it so far, and when it may be tried again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectProgress {
    qps: usize,
    /// Index of the next change: QP `step / 2`, RTR when even, RTS when odd.
    step: usize,
    failures: u32,
    due: Option<Duration>,
}

impl ConnectProgress {
    pub fn new(qps: usize) -> Self {
        ConnectProgress {
            qps,
            step: 0,
            failures: 0,
            due: None,
        }
    }

    /// What to do at `now`.
    pub fn next(&self, now: Duration) -> Next {
        if self.step >= 2 * self.qps {
            return Next::Done;
        }
        match self.due {
            Some(due) if now < due => Next::WaitUntil(due),
            _ => Next::Change {
                qp: self.step / 2,
                to: if self.step % 2 == 0 {
                    Transition::Rtr
                } else {
                    Transition::Rts
                },
            },
        }
    }

    /// The change [`Self::next`] named succeeded: on to the next one.
    pub fn succeeded(&mut self) {
        self.step += 1;
        self.failures = 0;
        self.due = None;
    }

    /// The change [`Self::next`] named failed with `errno` at `now`: `Ok(due)` when it is tried
    /// again at `due`, else what was given up.
    pub fn failed(
        &mut self,
        policy: &RetryPolicy,
        errno: i32,
        now: Duration,
    ) -> Result<Duration, GaveUp> {
        self.failures += 1;
        match policy.next_attempt(self.failures, errno, now) {
            Some(due) => {
                self.due = Some(due);
                Ok(due)
            }
            None => Err(GaveUp {
                qp: self.step / 2,
                to: if self.step % 2 == 0 {
                    Transition::Rtr
                } else {
                    Transition::Rts
                },
                attempts: self.failures,
                errno,
                retried: policy.retries_errno(errno),
            }),
        }
    }

    /// Failed attempts of the current change so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests;
