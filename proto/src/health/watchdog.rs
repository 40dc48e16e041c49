//! The stall watchdog: notices when a comm with work outstanding has made no progress for a
//! while, and says so at doubling intervals. Pure: the transport passes the time in (read
//! only every so many waiting calls, never per call) and decides how to word the warning.

use std::time::Duration;

/// When the comm last moved, and when the next warning is due.
#[derive(Debug)]
pub struct Watchdog {
    /// Stall threshold; zero disables the watchdog.
    threshold: Duration,
    /// The progress count seen at the last check, and when it last changed.
    seen: u64,
    since: Option<Duration>,
    /// Warnings given for the current stall (the next one waits twice as long).
    warned: u32,
}

/// A stall to report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stall {
    /// How long nothing has moved.
    pub idle: Duration,
    /// How many warnings this stall has had before this one.
    pub previous_warnings: u32,
}

impl Watchdog {
    pub fn new(threshold: Duration) -> Watchdog {
        Watchdog {
            threshold,
            seen: 0,
            since: None,
            warned: 0,
        }
    }

    /// One check at time `now`. `progress` is any count that grows when the comm moves
    /// (completions, requests finished); `waiting` says whether work is outstanding. Returns a
    /// stall when one is due: first after the threshold, then after 2x, 4x ... the threshold.
    pub fn check(&mut self, now: Duration, progress: u64, waiting: bool) -> Option<Stall> {
        if self.threshold.is_zero() {
            return None;
        }
        let since = *self.since.get_or_insert(now);
        if progress != self.seen || !waiting {
            self.seen = progress;
            self.since = Some(now);
            self.warned = 0;
            return None;
        }
        let idle = now.saturating_sub(since);
        let due = self.threshold * 2u32.saturating_pow(self.warned).min(1 << 16);
        if idle < due {
            return None;
        }
        let stall = Stall {
            idle,
            previous_warnings: self.warned,
        };
        self.warned += 1;
        Some(stall)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn a_stall_is_reported_after_the_threshold_then_at_doubling_intervals() {
        let mut w = Watchdog::new(s(60));
        assert_eq!(w.check(s(0), 5, true), None);
        assert_eq!(w.check(s(59), 5, true), None);
        let first = w.check(s(60), 5, true).unwrap();
        assert_eq!((first.idle, first.previous_warnings), (s(60), 0));
        assert_eq!(w.check(s(100), 5, true), None);
        assert_eq!(w.check(s(120), 5, true).unwrap().previous_warnings, 1);
        assert_eq!(w.check(s(200), 5, true), None);
        assert_eq!(w.check(s(240), 5, true).unwrap().idle, s(240));
    }

    #[test]
    fn progress_or_an_idle_comm_resets_the_clock() {
        let mut w = Watchdog::new(s(60));
        w.check(s(0), 1, true);
        assert_eq!(w.check(s(50), 2, true), None, "moved");
        assert_eq!(w.check(s(100), 2, true), None, "50 s since the last move");
        assert!(w.check(s(110), 2, true).is_some());
        assert_eq!(
            w.check(s(500), 2, false),
            None,
            "nothing outstanding is no stall"
        );
        assert_eq!(w.check(s(550), 2, true), None);
        assert!(w.check(s(560), 2, true).is_some());
    }

    #[test]
    fn a_zero_threshold_disables_the_watchdog() {
        let mut w = Watchdog::new(Duration::ZERO);
        assert_eq!(w.check(s(0), 0, true), None);
        assert_eq!(w.check(s(100_000), 0, true), None);
    }
}
