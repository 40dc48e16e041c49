//! When the process's connects in progress are swept for abandoned ones. Every `connect` call
//! may look for connects whose caller stopped calling (they time out after
//! [`super::HANDSHAKE_TIMEOUT`] without progress), but a sweep visits every connect in progress
//! under the process-wide table's lock: on every call, N connects in progress (NCCL connects
//! to many peers at once, from several threads) would make each call O(N) and serialise the
//! callers on that lock. [`SweepPacer`] lets one call in each [`SWEEP_INTERVAL`] do it, across
//! all threads, so a call costs O(1) in N and an abandoned connect is still dropped within the
//! time-out plus one interval.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// At most one sweep per interval (the time-out it enforces is two minutes).
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// The time of the last sweep, shared by the threads that call `connect`.
#[derive(Debug, Default)]
pub struct SweepPacer {
    /// Milliseconds since the caller's epoch of the last sweep (0: none yet).
    last_ms: AtomicU64,
}

impl SweepPacer {
    pub const fn new() -> Self {
        SweepPacer {
            last_ms: AtomicU64::new(0),
        }
    }

    /// Whether the caller should sweep now (`now` since the caller's fixed epoch): true for at
    /// most one caller per [`SWEEP_INTERVAL`], which then owns that sweep.
    pub fn due(&self, now: Duration) -> bool {
        let now_ms = u64::try_from(now.as_millis()).unwrap_or(u64::MAX);
        let last = self.last_ms.load(Ordering::Relaxed);
        now_ms.saturating_sub(last) >= SWEEP_INTERVAL.as_millis() as u64
            && self
                .last_ms
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn a_sweep_is_due_at_most_once_per_interval() {
        let p = SweepPacer::new();
        assert!(
            !p.due(ms(500)),
            "nothing can have timed out in the first interval"
        );
        assert!(p.due(ms(1000)));
        assert!(!p.due(ms(1000)));
        assert!(!p.due(ms(1999)));
        assert!(p.due(ms(2000)));
        assert!(p.due(ms(60_000)));
        assert!(!p.due(ms(60_500)));
    }

    #[test]
    fn of_many_threads_asking_at_once_exactly_one_sweeps() {
        let p = SweepPacer::new();
        let won: usize = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8).map(|_| s.spawn(|| p.due(ms(5000)))).collect();
            hs.into_iter().map(|h| usize::from(h.join().unwrap())).sum()
        });
        assert_eq!(won, 1);
    }
}
