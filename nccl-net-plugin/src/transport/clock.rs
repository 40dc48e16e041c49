//! The transport's time base: what the stall watchdog, the recovery's deadlines, the handshake's
//! deadlines and the pace of the periodic look's system calls measure time with.
//!
//! It is the coarse monotonic clock (`CLOCK_MONOTONIC_COARSE`): the kernel's last tick, read
//! from memory it shares with the process, never from the hardware. Its resolution is one tick
//! (1-4 ms), far finer than anything measured with it (a millisecond between reading looks,
//! seconds for the watchdog and the recovery). The precise clock costs a system call and a
//! read of the timer device on machines whose clock source the vDSO cannot read (HPET or ACPI
//! PM timers, common on virtual machines), and the periodic look reads the time every few
//! microseconds on a fast link.

use std::sync::OnceLock;
use std::time::Duration;

/// The time since the transport first read its clock.
pub(super) fn now() -> Duration {
    static START: OnceLock<Duration> = OnceLock::new();
    let t = since_boot();
    t.saturating_sub(*START.get_or_init(|| t))
}

/// The coarse monotonic clock; the precise one on a kernel without it (older than 2.6.32),
/// which runs on the same time line.
fn since_boot() -> Duration {
    read(libc::CLOCK_MONOTONIC_COARSE)
        .or_else(|| read(libc::CLOCK_MONOTONIC))
        .unwrap_or_default()
}

fn read(clock: libc::clockid_t) -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec that outlives the call, which only writes it.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u32::try_from(ts.tv_nsec).ok()?;
    (rc == 0).then(|| Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_base_never_goes_back_and_follows_the_wall_clock() {
        let t0 = now();
        let wall = std::time::Instant::now();
        let mut last = t0;
        while wall.elapsed() < Duration::from_millis(30) {
            let t = now();
            assert!(t >= last, "went back from {last:?} to {t:?}");
            last = t;
        }
        let moved = now() - t0;
        // One tick of resolution (at most 10 ms, HZ=100) at each end.
        assert!(
            moved >= Duration::from_millis(10)
                && moved <= Duration::from_millis(30) + Duration::from_millis(20) + wall.elapsed(),
            "the clock moved {moved:?} in {:?}",
            wall.elapsed()
        );
    }

    #[test]
    fn the_coarse_clock_is_read_without_error() {
        assert!(read(libc::CLOCK_MONOTONIC_COARSE).is_some());
    }
}
