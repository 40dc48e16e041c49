//! The steps of a recovery in place that the send and the receive core take alike: the budget,
//! stopping at a new epoch (a failure seen here, or the peer's request), and failing the comm
//! when the budget runs out. Each core says where its recovery state and health are, which side
//! it is, and what it has pending; its own steps (the receiver's report, the replay, the
//! reposts) stay in its `recovery` module. The rules are in [`crate::recovery`].

use super::CoreError;
use crate::health::CommHealth;
use crate::recovery::{Recovery, RecoveryError, Step};
use crate::wire::Msg;
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

    /// What this side tells the peer when it enters `epoch`: `Recover`, and the receiver's
    /// report after it.
    fn stop_messages(&self, epoch: u32) -> Result<Vec<Msg>, RecoveryError>;

    /// A recovery message from the peer: what to answer (possibly nothing). Stale messages
    /// (of an earlier epoch) are ignored; one this side never expects fails the step with
    /// [`RecoveryError::Inconsistent`].
    fn on_recovery_msg(&mut self, msg: Msg, now: Duration) -> Result<Vec<Msg>, RecoveryError>;

    /// What the transport does next ([`Step`]).
    fn recovery_step(&self) -> Step;

    /// Whether the peer's message stops this side at a later epoch than its own (the
    /// transport quiesces its QPs first: the receiver's report must hold every immediate that
    /// arrived).
    fn is_news(&self, msg: &Msg) -> bool {
        matches!(msg, Msg::Recover { epoch } if *epoch > self.recovery().epoch())
    }

    /// The comm's QPs failed (`cause`): it stops at the next epoch; returns what to tell the
    /// peer ([`Recovering::stop_messages`]).
    fn start_recovery(&mut self, now: Duration, cause: &str) -> Result<Vec<Msg>, RecoveryError> {
        let epoch = self.begin_recovery(now, cause)?;
        self.stop_messages(epoch)
    }

    /// This side's QPs of the current epoch exist (numbers in the handshake's QP order; `down`:
    /// this side's members that are down, whose QPs run on the next member up): the message
    /// that tells the peer.
    fn qps_rebuilt(&mut self, qpns: Vec<u32>, down: u8) -> Msg {
        let r = self.recovery_parts().0;
        r.mark_rebuilt();
        Msg::Rebuilt {
            epoch: r.epoch(),
            qpns,
            down,
        }
    }

    /// The most one recovery may take; zero (the default) turns recovery off, and a failure
    /// fails the comm as it always did.
    fn set_recovery_budget(&mut self, budget: Duration) {
        let (r, h) = self.recovery_parts();
        r.set_budget(budget);
        h.set_recover_in_place(!budget.is_zero());
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
