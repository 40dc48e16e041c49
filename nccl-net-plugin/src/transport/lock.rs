//! The lock of a comm's protocol core: one atomic word, taken and released once per data-path
//! call. It owns the one rule that `std::sync::Mutex` adds a check for on both sides of every
//! call: a core whose call panicked (an internal error, caught at the C boundary) is never used
//! again. Here that check is made once, when the guard is dropped while unwinding: the lock's
//! word then says broken, is never free again, and every later call answers [`Broken`] from the
//! slow path of a take that failed.
//!
//! Waiting: NCCL drives each comm from one thread, so the lock is free on every data-path call;
//! another thread only takes it with [`CoreLock::try_lock`] (the clear-to-send backstop), or
//! through a misuse of one comm from two threads, which then spins (yielding) rather than being
//! unsound.

use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU8, Ordering};

/// The core's call panicked earlier: the comm is unusable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Broken;

impl From<Broken> for crate::error::Error {
    /// The error of every call on a comm whose core is broken.
    #[cold]
    #[inline(never)]
    fn from(_: Broken) -> Self {
        crate::error::Error::Internal("comm unusable after an earlier internal error".into())
    }
}

/// Why [`CoreLock::try_lock`] did not take the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TryLockError {
    /// Another call holds it now.
    WouldBlock,
    Broken,
}

/// The lock's word: free, held by one call, or broken (never taken again).
const FREE: u8 = 0;
const HELD: u8 = 1;
const BROKEN: u8 = 2;

/// A comm's protocol core behind its lock.
pub(super) struct CoreLock<T> {
    /// [`FREE`], [`HELD`] or [`BROKEN`]: a broken lock is never free again, so taking the lock
    /// (free to held) is the one check of every call.
    state: AtomicU8,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a guard, and at most one guard exists at a time
// (`state` goes from free to held with acquire ordering and back with release ordering), so
// sharing the lock between threads hands the value from one thread to another like a `Mutex`
// does; that needs `T: Send` and nothing more.
unsafe impl<T: Send> Sync for CoreLock<T> {}

impl<T> CoreLock<T> {
    pub(super) fn new(value: T) -> CoreLock<T> {
        CoreLock {
            state: AtomicU8::new(FREE),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock, waiting (spinning, then yielding) while another call holds it.
    #[inline]
    pub(super) fn lock(&self) -> Result<CoreGuard<'_, T>, Broken> {
        if self.take().is_err() {
            self.wait()?;
        }
        Ok(self.guard())
    }

    /// One attempt to take the lock: `Ok` when this call now holds it, else the word found
    /// (held by another call, or broken).
    #[inline(always)]
    fn take(&self) -> Result<u8, u8> {
        self.state
            .compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed)
    }

    /// Takes the lock if it is free now.
    #[inline]
    pub(super) fn try_lock(&self) -> Result<CoreGuard<'_, T>, TryLockError> {
        match self.take() {
            Ok(_) => Ok(self.guard()),
            Err(BROKEN) => Err(TryLockError::Broken),
            Err(_) => Err(TryLockError::WouldBlock),
        }
    }

    #[cold]
    #[inline(never)]
    fn wait(&self) -> Result<(), Broken> {
        let mut spins = 0u32;
        loop {
            match self.state.load(Ordering::Relaxed) {
                BROKEN => return Err(Broken),
                FREE if self.take().is_ok() => return Ok(()),
                _ => {}
            }
            if spins < 64 {
                spins += 1;
                core::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// The guard of the lock this call now holds.
    #[inline(always)]
    fn guard(&self) -> CoreGuard<'_, T> {
        CoreGuard {
            lock: self,
            _not_send: PhantomData,
        }
    }
}

impl<T: core::fmt::Debug> core::fmt::Debug for CoreLock<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.try_lock() {
            Ok(g) => f.debug_struct("CoreLock").field("value", &*g).finish(),
            Err(e) => f.debug_struct("CoreLock").field("value", &e).finish(),
        }
    }
}

/// The lock held: the core, until dropped.
pub(super) struct CoreGuard<'a, T> {
    lock: &'a CoreLock<T>,
    /// Released by the thread that took it, like `std`'s guard.
    _not_send: PhantomData<*const ()>,
}

impl<T> Deref for CoreGuard<'_, T> {
    type Target = T;

    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one (the lock is held until it drops), so no `&mut`
        // to the value exists elsewhere.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for CoreGuard<'_, T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference through the guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> CoreGuard<'_, T> {
    /// Releases the lock at the end of a section that returned normally: the core is whole, so
    /// this skips the look at `std::thread::panicking` that a drop makes (a guard dropped by an
    /// unwinding section still breaks the core).
    #[inline(always)]
    pub(super) fn unlock(self) {
        self.lock.state.store(FREE, Ordering::Release);
        core::mem::forget(self);
    }
}

impl<T> Drop for CoreGuard<'_, T> {
    #[inline(always)]
    fn drop(&mut self) {
        // A panic under the lock may have left the core half-changed: never used again.
        let next = if std::thread::panicking() {
            BROKEN
        } else {
            FREE
        };
        self.lock.state.store(next, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_refuses_a_try_and_a_released_one_is_taken_again() {
        let l = CoreLock::new(5u32);
        let mut g = l.lock().unwrap();
        *g += 1;
        assert_eq!(l.try_lock().err(), Some(TryLockError::WouldBlock));
        drop(g);
        assert_eq!(*l.try_lock().unwrap(), 6);
    }

    #[test]
    fn a_panic_under_the_lock_breaks_the_core_for_good() {
        let l = CoreLock::new(0u32);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _g = l.lock().unwrap();
            panic!("internal error");
        }));
        assert!(r.is_err());
        assert_eq!(l.lock().err(), Some(Broken));
        assert_eq!(l.try_lock().err(), Some(TryLockError::Broken));
    }

    #[test]
    fn two_threads_adding_under_the_lock_lose_no_update() {
        let l = std::sync::Arc::new(CoreLock::new(0u64));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        *l.lock().unwrap() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*l.lock().unwrap(), 20_000);
    }
}
