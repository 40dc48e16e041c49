//! What every verbs owner shares: the hook that reports a failed destroy in `Drop` (an owner
//! never panics there: it reports and leaks the object), and the live-object counts by kind
//! (for leak checks).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicI64, Ordering};

static DROP_HOOK: OnceLock<fn(&str)> = OnceLock::new();

/// Where failures in `Drop` are reported (the plugin forwards them to NCCL's WARN).
pub fn set_drop_error_hook(hook: fn(&str)) {
    let _ = DROP_HOOK.set(hook);
}

/// Reports a failed destroy through the hook (standard error when none is set).
pub(crate) fn report_drop_error(msg: &str) {
    match DROP_HOOK.get() {
        Some(h) => h(msg),
        None => eprintln!("ferro-verbs: {msg}"),
    }
}

/// Live verbs objects created through this crate, by kind (for leak checks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveCounts {
    pub contexts: i64,
    pub pds: i64,
    pub cqs: i64,
    pub qps: i64,
    pub mrs: i64,
}

/// The kinds of object counted.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Context = 0,
    Pd = 1,
    Cq = 2,
    Qp = 3,
    Mr = 4,
}

static LIVE: [AtomicI64; 5] = [const { AtomicI64::new(0) }; 5];

/// One more live object of kind `k` (right after the verb that created it succeeded).
pub(crate) fn inc(k: Kind) {
    LIVE[k as usize].fetch_add(1, Ordering::Relaxed);
}

/// One fewer (in the owner's `Drop`).
pub(crate) fn dec(k: Kind) {
    LIVE[k as usize].fetch_sub(1, Ordering::Relaxed);
}

/// Counts of live objects.
pub fn live_counts() -> LiveCounts {
    let g = |k: Kind| LIVE[k as usize].load(Ordering::Relaxed);
    LiveCounts {
        contexts: g(Kind::Context),
        pds: g(Kind::Pd),
        cqs: g(Kind::Cq),
        qps: g(Kind::Qp),
        mrs: g(Kind::Mr),
    }
}
