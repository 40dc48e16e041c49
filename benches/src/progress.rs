//! Progress lines on stderr: whether to print them (`--quiet`) and which process they name.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

static QUIET: AtomicBool = AtomicBool::new(false);
static PREFIX: OnceLock<&'static str> = OnceLock::new();

/// Sets, once per process, whether progress is printed and the name each line starts with.
pub(crate) fn set(quiet: bool, prefix: &'static str) {
    QUIET.store(quiet, Ordering::Relaxed);
    let _ = PREFIX.set(prefix);
}

/// The name progress and error lines start with.
pub(crate) fn prefix() -> &'static str {
    PREFIX.get().copied().unwrap_or("ferro-bench")
}

/// A progress line on stderr.
pub(crate) fn progress(s: &str) {
    if !QUIET.load(Ordering::Relaxed) {
        eprintln!("[{}] {s}", prefix());
    }
}
