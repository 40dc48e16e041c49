//! The steps of a recovery in place that the send and the receive core take alike: the budget,
//! stopping at a new epoch (a failure seen here, or the peer's request), and failing the comm
//! when the budget runs out. Each core says where its recovery state and health are, which side
//! it is, and what it has pending; its own steps (the receiver's report, the replay, the
//! reposts) stay in its `recovery` module. The rules are in [`crate::recovery`].

use super::CoreError;
use crate::health::CommHealth;
use crate::recovery::{Recovery, RecoveryError};
use std::time::Duration;

/// A protocol core that can recover in place.
pub trait Recovering {
    /// "send" or "receive", for the failure when the budget runs out.
    const SIDE: &'static str;

    /// The core's recovery state.
    fn recovery(&self) -> &Recovery;

    /// The core's recovery state and health, borrowed together.
    fn recovery_parts(&mut self) -> (&mut Recovery, &mut CommHealth);

    /// What the comm has pending, for the failure when the budget runs out.
    fn recovery_pending(&self) -> String;

    /// Called once the comm entered a later epoch (its counters already moved).
    fn entered_epoch(&mut self) {}

    /// The most one recovery may take; zero (the default) turns recovery off, and a failure
    /// fails the comm as it always did.
    fn set_recovery_budget(&mut self, budget: Duration) {
        self.recovery_parts().0.set_budget(budget);
    }

    /// The comm's QPs failed (`cause` says how): the comm stops at the next epoch (a failure
    /// during a recovery restarts it) and the new epoch is returned, to be sent to the peer.
    /// From then on calls are retried and completions of the old QPs are ignored.
    fn begin_recovery(&mut self, now: Duration, cause: &str) -> Result<u32, RecoveryError> {
        usable(self, now)?;
        let (r, h) = self.recovery_parts();
        let old = r.epoch();
        let epoch = r.stop(now, cause)?;
        h.counters.recoveries += u64::from(epoch - old);
        self.entered_epoch();
        Ok(epoch)
    }

    /// The peer asked to recover at `epoch`: a later epoch than this side's stops (or
    /// restarts) it there (`Ok(true)`: answer with the same request); the same or an older one
    /// changes nothing (`Ok(false)`).
    fn on_peer_recover(&mut self, epoch: u32, now: Duration) -> Result<bool, RecoveryError> {
        usable(self, now)?;
        let (r, h) = self.recovery_parts();
        let old = r.epoch();
        let new = r.adopt(epoch, now)?;
        if new {
            h.counters.recoveries += u64::from(epoch - old);
            self.entered_epoch();
        }
        Ok(new)
    }

    /// At every look while stopped: fails the comm (sticky) when its recovery has run past
    /// the budget, with a failure naming what was pending and what was tried.
    fn check_recovery(&mut self, now: Duration) -> Result<(), CoreError> {
        if self.recovery().is_stopped() && self.recovery().expired(now) {
            let pending = self.recovery_pending();
            let (r, h) = self.recovery_parts();
            let f = r.gave_up(now, Self::SIDE, &pending);
            return Err(h.fail(f).clone().into());
        }
        Ok(())
    }
}

/// Refuses a failed comm, and fails one whose recovery ran out of budget.
fn usable<C: Recovering + ?Sized>(core: &mut C, now: Duration) -> Result<(), RecoveryError> {
    core.recovery_parts()
        .1
        .check()
        .map_err(RecoveryError::Failed)?;
    core.check_recovery(now).map_err(|e| match e {
        CoreError::Failed(f) => RecoveryError::Failed(f),
        other => RecoveryError::Inconsistent(other.to_string()),
    })
}
