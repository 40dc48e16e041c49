//! The send core's cell: the core behind the comm's lock ([`CoreLock`]), and the hint a
//! retried `isend` reads without taking that lock (the head group it can only wait for), with
//! the count of the retries so answered, which the next locked section adds in. Below the
//! comm (`super::comm` holds a [`SendCell`]); what reads the clear-to-send FIFO is the
//! caller's (`super::send`), handed in as a closure.

use super::lock::{Broken, CoreGuard, CoreLock};
use crate::error::Result;
use ferro_proto::comm::send::SendCore;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Retries a send comm answers without its lock in a row: the next waiting call takes the
/// lock and accounts them, so it is the periodic look's own call when only retries wait.
const UNLOCKED_WAITS: u32 = ferro_proto::comm::LIVENESS_EVERY - 1;

/// The send core behind the comm's lock, and the hint a retried `isend` reads without it.
///
/// Every locked `isend` publishes, as it ends, the head group a retry could only wait for
/// ([`SendCore::awaited_hint`]: the comm healthy and running, no recovery wanted, no group
/// open, the group's slot free); every other locked section (`test`, the close line) withdraws
/// it if the comm failed, a recovery stopped it or is wanted, or the head group moved (nothing
/// else there opens a group or fills the head group's slot; a slot it frees is published by
/// the next locked `isend`). While that group's first clear-to-send entry is not in the
/// FIFO, a retried `isend` answers NULL with a load of the hint, a look at the entry's
/// sequence word and a counter, which the next locked section accounts
/// ([`SendCore::add_cts_waits`]: the same counters, wait and look cadence as answering under
/// the lock). The hint is only that: whatever acts on the comm takes the lock, and a stale
/// hint (possible only when NCCL calls one comm from two threads at once, which it does not)
/// costs at most one NULL answer or one miscounted retry.
#[derive(Debug)]
pub(super) struct SendCell {
    core: CoreLock<SendCore>,
    /// The awaited head group's sequence number plus one; 0: none (take the lock).
    awaited: AtomicU64,
    /// Retries answered without the lock since the last locked section.
    waits: AtomicU32,
}

impl SendCell {
    pub(super) fn new(core: SendCore) -> SendCell {
        SendCell {
            core: CoreLock::new(core),
            awaited: AtomicU64::new(0),
            waits: AtomicU32::new(0),
        }
    }

    /// The core, locked (the retries answered without the lock accounted first); the hint is
    /// withdrawn when the guard is dropped if the comm can no longer answer a retry without it.
    #[inline(always)]
    pub(super) fn lock(&self) -> Result<SendGuard<'_, false>> {
        self.lock_as()
    }

    /// [`SendCell::lock`] for `isend`: the hint is published again when the guard is dropped.
    #[inline(always)]
    pub(super) fn lock_publishing(&self) -> Result<SendGuard<'_, true>> {
        self.lock_as()
    }

    #[inline(always)]
    fn lock_as<const PUBLISH: bool>(&self) -> Result<SendGuard<'_, PUBLISH>> {
        let Ok(mut core) = self.core.lock() else {
            // No more answers without the lock: every call reports the comm unusable.
            self.awaited.store(0, Ordering::Release);
            return Err(Broken.into());
        };
        if self.waits.load(Ordering::Relaxed) != 0 {
            core.add_cts_waits(self.waits.swap(0, Ordering::Relaxed));
        }
        Ok(SendGuard {
            core,
            awaited: &self.awaited,
        })
    }

    /// A retried `isend` answered without the lock: `true` (answer NULL) when the published
    /// head group's first entry has not arrived and the look is not due.
    #[inline(always)]
    pub(super) fn retry_unlocked(&self, arrived: impl FnOnce(u64) -> bool) -> bool {
        let awaited = self.awaited.load(Ordering::Acquire);
        if awaited == 0 {
            return false;
        }
        let n = self.waits.load(Ordering::Relaxed);
        if n >= UNLOCKED_WAITS || arrived(awaited - 1) {
            return false;
        }
        self.waits.store(n + 1, Ordering::Relaxed);
        true
    }
}

/// The locked send core; [`SendGuard::unlock`] (or a drop) publishes or withdraws the hint of
/// [`SendCell`] and unlocks. `PUBLISH`: publish the hint anew (an `isend`), not only withdraw
/// it; a constant, so the guard is two pointers and the choice costs no test.
pub(super) struct SendGuard<'a, const PUBLISH: bool> {
    core: CoreGuard<'a, SendCore>,
    awaited: &'a AtomicU64,
}

impl<const PUBLISH: bool> core::ops::Deref for SendGuard<'_, PUBLISH> {
    type Target = SendCore;
    #[inline(always)]
    fn deref(&self) -> &SendCore {
        &self.core
    }
}

impl<const PUBLISH: bool> core::ops::DerefMut for SendGuard<'_, PUBLISH> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut SendCore {
        &mut self.core
    }
}

impl<const PUBLISH: bool> SendGuard<'_, PUBLISH> {
    /// Ends a section that returned normally: the hint settled ([`SendGuard::settle_hint`]),
    /// then the lock released, inline and without the look at `std::thread::panicking` that a
    /// drop makes (a guard dropped by an unwinding section withdraws the hint, as before).
    #[inline(always)]
    pub(super) fn unlock(self) {
        self.settle_hint();
        self.unlock_unchanged();
    }

    /// Ends a section that changed nothing the hint depends on (the comm's failure, its
    /// recovery, the head group: a `test` that only took a finished request): the hint, settled
    /// by the section before, stands; the lock is released.
    #[inline(always)]
    pub(super) fn unlock_unchanged(self) {
        let this = core::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped nor used again, so the core's guard is moved out of
        // it exactly once; releasing it is all the guard's drop would have done past the hint.
        let core = unsafe { core::ptr::read(&this.core) };
        core.unlock();
    }

    /// Publishes the hint anew (an `isend`) or withdraws it if the comm can no longer answer a
    /// retry without the lock; the section did not panic.
    #[inline(always)]
    fn settle_hint(&self) {
        if PUBLISH {
            let awaited = self
                .core
                .awaited_hint()
                .map_or(0, |seq| seq.wrapping_add(1));
            self.awaited.store(awaited, Ordering::Release);
        } else {
            // Withdrawn also if the head group moved (a recovery may have applied the peer's
            // state within this section).
            let awaited = self.awaited.load(Ordering::Relaxed);
            if awaited != 0
                && (self.core.hint_withdrawn() || self.core.head_seq().wrapping_add(1) != awaited)
            {
                self.awaited.store(0, Ordering::Release);
            }
        }
    }
}

impl<const PUBLISH: bool> Drop for SendGuard<'_, PUBLISH> {
    #[inline(always)]
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The section panicked: the core breaks when its guard drops next; no retry may
            // be answered without the lock from here on.
            self.awaited.store(0, Ordering::Release);
        } else {
            self.settle_hint();
        }
    }
}
