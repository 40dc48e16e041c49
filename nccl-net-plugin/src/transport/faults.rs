//! Fault injection for tests, compiled only with the `test-faults` feature (never in the
//! library NCCL loads, which is built without it; nothing in the environment reaches it): the
//! next state changes that connect a QP during a handshake fail with a chosen errno, as
//! `ibv_modify_qp` would when an address resolution times out, without calling the provider;
//! and connects hold their `Connect` back after their TCP connection completed, as a process
//! that stalls there would (the listener then drops them as strangers).

use ferro_proto::qp_retry::Transition;
use ferro_verbs::Qp;
use std::sync::Mutex;
use std::time::Duration;

/// How many connect changes are still to fail, and with which errno.
static CONNECT_CHANGES: Mutex<(u32, i32)> = Mutex::new((0, 0));

/// The next `times` state changes that connect a QP in a handshake (to RTR or to RTS, either
/// side, any comm of this process) fail with `errno`; 0 stops it.
pub fn fail_connect_changes(times: u32, errno: i32) {
    *CONNECT_CHANGES.lock().unwrap_or_else(|p| p.into_inner()) = (times, errno);
}

/// How many of the injected failures are still to come (tests use it to tell the calls made
/// while a retry waits from those that set the connection up before the first failure).
pub fn connect_failures_left() -> u32 {
    CONNECT_CHANGES.lock().unwrap_or_else(|p| p.into_inner()).0
}

/// The injected failure of this change, if one is due.
pub(in crate::transport) fn connect_change_failure(
    qp: &Qp,
    to: Transition,
) -> Option<ferro_verbs::Error> {
    let mut f = CONNECT_CHANGES.lock().unwrap_or_else(|p| p.into_inner());
    if f.0 == 0 {
        return None;
    }
    f.0 -= 1;
    Some(
        ferro_verbs::Error::new("ibv_modify_qp", f.1)
            .context(format!("qpn {} to {to} (injected for a test)", qp.qpn())),
    )
}

/// How long a connect holds its `Connect` back, from when it started (its TCP connection
/// completes at once on the test bed), on its first TCP connection only; zero: not at all.
static CONNECT_HOLD: Mutex<Duration> = Mutex::new(Duration::ZERO);

/// Connects started from now on (any of this process) write their `Connect` no sooner than
/// `hold` after they started, on their first TCP connection (a new one after the listener
/// dropped the first is not held); `Duration::ZERO` stops it.
pub fn hold_connects(hold: Duration) {
    *CONNECT_HOLD.lock().unwrap_or_else(|p| p.into_inner()) = hold;
}

/// Whether a connect that started at `started` (and is on its first TCP connection) still
/// holds its `Connect` back at `now`.
pub(in crate::transport) fn connect_held(started: Duration, now: Duration) -> bool {
    let hold = *CONNECT_HOLD.lock().unwrap_or_else(|p| p.into_inner());
    now < started + hold
}
