//! The fault policy: when a comm fails, how, and what is said about it. Pure: the transport
//! gathers **facts** ([`facts`]: device events, the out-of-band socket, failed work completions,
//! refused posts and polls, the time, whether work is outstanding), asks here, and executes the
//! **verdict** ([`Verdict`]: continue, warn, fail, or poll once more and then fail).
//!
//! It owns:
//! - [`DeviceHealth`]: what one device's asynchronous events said so far (ports down, a fatal
//!   error, QPs and CQs with an error), the log line each event is worth, and whether a comm on
//!   the device can go on ([`device`]);
//! - [`CommHealth`]: one comm's sticky error (the first failure wins, [`Sticky`]), the counter of
//!   waiting calls that paces the periodic look ([`LivenessCounter`], every
//!   [`LIVENESS_EVERY`] calls), the pace of the look's system calls ([`GatherPace`], at most
//!   once per [`GATHER_EVERY`]), the stall [`watchdog`], the comm's counters, its setting of
//!   `NCCL_IB_RETURN_ASYNC_EVENTS`, and [`CommHealth::decide`]: the order of checks at a look;
//! - the wording of every fault message and stall warning ([`verdict`]).
//!
//! Nothing here reads a clock, a socket or a device: the time is passed in.

pub mod counters;
pub mod device;
pub mod facts;
pub mod verdict;
pub mod watchdog;

pub use device::{DeviceFault, DeviceHealth};
pub use facts::{DeviceEvent, FailedCompletion, Look, PeerGone, Socket};
pub use verdict::{Failure, FailureKind, Fault, FlushRefused, Verdict};

use counters::Counters;
use std::time::Duration;

/// The sticky error of one comm: the first failure wins and stays.
#[derive(Debug, Default)]
pub struct Sticky(Option<Failure>);

impl Sticky {
    /// Records `f` unless the comm already failed; returns the failure in force.
    pub fn set(&mut self, f: Failure) -> &Failure {
        self.0.get_or_insert(f)
    }

    #[inline]
    pub fn get(&self) -> Option<&Failure> {
        self.0.as_ref()
    }

    #[inline]
    pub fn is_failed(&self) -> bool {
        self.0.is_some()
    }

    /// `Err` with the failure in force, if any (inline: on the data path the answer is `Ok`,
    /// one compare; the failure's copy is out of line).
    #[inline]
    pub fn check(&self) -> Result<(), Failure> {
        match &self.0 {
            Some(f) => Err(copy_of(f)),
            None => Ok(()),
        }
    }
}

#[cold]
#[inline(never)]
fn copy_of(f: &Failure) -> Failure {
    f.clone()
}

/// How often a comm that waits looks at the world (the peer's out-of-band connection, the
/// device's events, the clock for the stall watchdog): every this many calls that wait (an
/// unfinished `test`, an `isend` or `irecv` answered with a retry). Counting calls rather than
/// reading the clock keeps those calls cheap: clock reads are system calls on some virtual
/// machines. NCCL's progress thread calls continuously while it waits, so this is frequent.
pub const LIVENESS_EVERY: u32 = 256;

/// The shortest time between two looks of one comm that read the peer's out-of-band connection
/// and the device's events (system calls both). Looks come every [`LIVENESS_EVERY`] waiting
/// calls, which on a fast link is every few microseconds; reading the world once a millisecond
/// keeps a dead peer, a failure notice or a port event noticed within that millisecond (the
/// stall watchdog and the recovery work in seconds), without a system call every few
/// microseconds on the data path.
pub const GATHER_EVERY: Duration = Duration::from_millis(1);

/// Says which looks of a comm read the peer's connection and the device's events: the first,
/// and after that one per [`GATHER_EVERY`]. Looks in between decide on the clock and on what
/// was recorded already (device events another comm read, messages already received).
#[derive(Debug, Default)]
pub struct GatherPace {
    /// The earliest time of the next reading look; `None` before the first.
    next: Option<Duration>,
}

impl GatherPace {
    /// At a look at time `now`: whether this look reads (and if so, the next one waits
    /// [`GATHER_EVERY`]). A clock that went back (it does not) reads at once.
    #[inline]
    pub fn due(&mut self, now: Duration) -> bool {
        match self.next {
            Some(next) if now < next && next - now <= GATHER_EVERY => false,
            _ => {
                self.next = Some(now + GATHER_EVERY);
                true
            }
        }
    }
}

/// Counts waiting calls and says when the comm should look at the world.
#[derive(Debug, Default)]
pub struct LivenessCounter(u32);

impl LivenessCounter {
    /// Call once per waiting call; `true` every [`LIVENESS_EVERY`] calls.
    #[inline]
    pub fn tick(&mut self) -> bool {
        self.0 += 1;
        if self.0 < LIVENESS_EVERY {
            return false;
        }
        self.0 = 0;
        true
    }

    /// Counts `n` waiting calls made without [`LivenessCounter::tick`] (answered where the
    /// counter could not be reached): the look they make due comes at the next tick at the
    /// latest, never later.
    #[inline]
    pub fn add(&mut self, n: u32) {
        self.0 = self.0.saturating_add(n).min(LIVENESS_EVERY - 1);
    }
}

/// What every comm keeps besides its side's state: the sticky error, the counter of waiting
/// calls that paces the periodic look, the stall watchdog, the counters, and whether device
/// events fail the comm.
#[derive(Debug)]
pub struct CommHealth {
    error: Sticky,
    liveness: LivenessCounter,
    gather: GatherPace,
    watchdog: watchdog::Watchdog,
    /// `NCCL_IB_RETURN_ASYNC_EVENTS`: `true` (1, the default) when the device's events fail the
    /// comms they affect; `false` (0) when they are only logged.
    return_async_events: bool,
    /// Recovery in place is on for the comm (a budget above zero): a port that goes down or a
    /// QP error event starts a recovery instead of failing the comm.
    recover_in_place: bool,
    pub counters: Counters,
}

impl Default for CommHealth {
    fn default() -> Self {
        CommHealth {
            error: Sticky::default(),
            liveness: LivenessCounter::default(),
            gather: GatherPace::default(),
            watchdog: watchdog::Watchdog::new(Duration::ZERO),
            return_async_events: true,
            recover_in_place: false,
            counters: Counters::default(),
        }
    }
}

impl CommHealth {
    /// Records a failure; every later call reports the first one.
    pub fn fail(&mut self, f: Failure) -> &Failure {
        self.counters.errors += 1;
        self.error.set(f)
    }

    #[inline]
    pub fn failure(&self) -> Option<&Failure> {
        self.error.get()
    }

    /// `Err` with the failure in force, if any.
    #[inline]
    pub fn check(&self) -> Result<(), Failure> {
        self.error.check()
    }

    /// Counts a call that waits (an unfinished `test`, a retried call); `true` when the comm
    /// should look at the peer, the device and the clock: every [`LIVENESS_EVERY`] such calls,
    /// and never once the comm failed (its failure is final, and no longer counted).
    #[inline]
    pub fn look_due(&mut self) -> bool {
        !self.error.is_failed() && self.liveness.tick()
    }

    /// [`CommHealth::look_due`] for a caller that knows the comm has not failed (it found no
    /// failure before a poll that found nothing): the counter alone.
    #[inline]
    pub fn look_due_healthy(&mut self) -> bool {
        debug_assert!(!self.error.is_failed());
        self.liveness.tick()
    }

    /// Counts `n` calls that waited without [`CommHealth::look_due`] (a retried `isend` answered
    /// without the comm's lock): the look they make due comes at the next waiting call.
    #[inline]
    pub fn add_waits(&mut self, n: u32) {
        self.liveness.add(n);
    }

    /// At a look at time `now`: whether it reads the peer's connection and the device's events
    /// ([`GatherPace`]); always while the comm recovers (`recovering`: its handshake with the
    /// peer goes over that connection).
    #[inline]
    pub fn gather_due(&mut self, now: Duration, recovering: bool) -> bool {
        self.gather.due(now) || recovering
    }

    /// Enables the stall watchdog: a stall is reported after `threshold` without progress.
    pub fn set_stall_threshold(&mut self, threshold: Duration) {
        self.watchdog = watchdog::Watchdog::new(threshold);
    }

    /// `NCCL_IB_RETURN_ASYNC_EVENTS` for this comm: `false` logs device events without failing
    /// the comm (the stall watchdog still says what it waits for).
    pub fn set_return_async_events(&mut self, fail_on_events: bool) {
        self.return_async_events = fail_on_events;
    }

    /// Whether device faults that recovery in place can repair start a recovery (on) or fail
    /// the comm (off, as before recovery existed). Set with the comm's recovery budget.
    pub fn set_recover_in_place(&mut self, on: bool) {
        self.recover_in_place = on;
    }

    pub fn recovers_in_place(&self) -> bool {
        self.recover_in_place
    }

    /// The watchdog's check at time `now` (read by the caller at its periodic look); `waiting`
    /// says whether the comm has work outstanding. Progress is any new completion or request.
    pub fn check_stall(&mut self, now: Duration, waiting: bool) -> Option<watchdog::Stall> {
        let progress = self.counters.completions + self.counters.requests;
        self.watchdog.check(now, progress, waiting)
    }

    /// The verdict of one periodic look, in this order:
    /// 1. a device fault (with `NCCL_IB_RETURN_ASYNC_EVENTS=1`; with 0 the events were only
    ///    logged when they were read): with recovery in place on, a fault it can repair (the
    ///    port went down, an error event on one of the comm's QPs) starts a recovery when the
    ///    comm has work outstanding and is not already recovering (a port down under an idle
    ///    comm is only logged, NCCL's meaning: its QPs may be unharmed, and a later failed
    ///    completion recovers them); any other fault, or any fault with recovery off: poll once
    ///    more, then fail (system);
    /// 2. a dead peer (its out-of-band connection closed, reset or timed out): poll once more,
    ///    then fail (remote);
    /// 3. a member of a virtual NIC the comm failed over from is active again: with work
    ///    outstanding, recover (failback: the QPs move home);
    /// 4. the stall watchdog: a WARN when the comm with work outstanding has made no progress
    ///    for the threshold, then 2x, 4x ... as long;
    /// 5. otherwise continue.
    pub fn decide(&mut self, look: Look) -> Verdict {
        if let Some(d) = look.device.filter(|_| self.return_async_events) {
            if !(self.recover_in_place && d.is_repairable()) {
                return Verdict::PollThenFail(Fault::Device(d));
            }
            if look.waiting && !look.recovering {
                return Verdict::Recover(d.to_string());
            }
        }
        if let Socket::Gone(how) = look.socket {
            return Verdict::PollThenFail(Fault::PeerGone(how));
        }
        if let Some(member) = look.member_back.filter(|_| self.recover_in_place) {
            if look.waiting && !look.recovering {
                return Verdict::Recover(format!(
                    "member {member} is active again: its QPs move back (failback)"
                ));
            }
        }
        match self.check_stall(look.now, look.waiting) {
            Some(stall) => Verdict::Warn(stall),
            None => Verdict::Continue,
        }
    }
}

#[cfg(test)]
mod tests;
