//! NCCL's logger for the plugin, recording every line.
//!
//! `ncclDebugLogger_t` is a C variadic function, which stable Rust cannot define: the function
//! handed to the plugin is `ferro_standin_logger` in `csrc/logger.c`. It formats the message with
//! `vsnprintf` and passes the text to `sink` here, which appends it to a process-wide list and
//! echoes it to stderr when `FERRO_TEST_VERBOSE=1`.

use core::ffi::{CStr, c_char, c_int, c_ulong};
use ferro_ffi::{log_level, ncclDebugLogger_t};
use std::io::Write as _;
use std::sync::{Mutex, MutexGuard, Once, OnceLock};

/// Environment variable that makes the harness echo plugin log lines (and child output) to stderr.
pub const VERBOSE_ENV: &str = "FERRO_TEST_VERBOSE";

type SinkFn = unsafe extern "C" fn(
    level: c_int,
    flags: c_ulong,
    filefunc: *const c_char,
    line: c_int,
    text: *const c_char,
);

unsafe extern "C" {
    /// The variadic logger (`csrc/logger.c`).
    fn ferro_standin_logger(
        level: c_int,
        flags: c_ulong,
        filefunc: *const c_char,
        line: c_int,
        fmt: *const c_char,
        ...
    );
    /// Installs the function that receives formatted lines.
    fn ferro_standin_set_sink(f: Option<SinkFn>);
}

/// One line the plugin logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// `ncclDebugLogLevel` (see [`ferro_ffi::log_level`]).
    pub level: c_int,
    /// Subsystem flags.
    pub flags: c_ulong,
    /// The `filefunc` argument (the plugin passes its module path).
    pub filefunc: String,
    pub line: c_int,
    /// The formatted message.
    pub text: String,
}

impl std::fmt::Display for LogLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", level_name(self.level), self.text)
    }
}

/// `"WARN"`, `"INFO"`, ... for a level value.
pub fn level_name(level: c_int) -> &'static str {
    match level {
        log_level::NONE => "NONE",
        log_level::VERSION => "VERSION",
        log_level::WARN => "WARN",
        log_level::INFO => "INFO",
        log_level::ABORT => "ABORT",
        log_level::TRACE => "TRACE",
        _ => "LEVEL?",
    }
}

#[derive(Default)]
struct Store {
    /// Lines dropped by `clear_logs` so far (keeps marks monotonic).
    base: usize,
    lines: Vec<LogLine>,
}

static STORE: Mutex<Store> = Mutex::new(Store {
    base: 0,
    lines: Vec::new(),
});
static INSTALL: Once = Once::new();

fn store() -> MutexGuard<'static, Store> {
    // A panic while holding the lock cannot leave the list inconsistent (push/clear only).
    STORE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether `FERRO_TEST_VERBOSE=1`.
pub fn verbose() -> bool {
    static V: OnceLock<bool> = OnceLock::new();
    *V.get_or_init(|| std::env::var(VERBOSE_ENV).is_ok_and(|v| v == "1"))
}

fn lossy(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the C side passes NUL-terminated strings (its own buffer, or the plugin's filefunc
    // argument, which the logger contract makes a C string) that live for the duration of the call.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

unsafe extern "C" fn sink(
    level: c_int,
    flags: c_ulong,
    filefunc: *const c_char,
    line: c_int,
    text: *const c_char,
) {
    let entry = LogLine {
        level,
        flags,
        filefunc: lossy(filefunc),
        line,
        text: lossy(text),
    };
    if verbose() {
        let _ = writeln!(
            std::io::stderr(),
            "[plugin {}] {}",
            level_name(level),
            entry.text
        );
    }
    store().lines.push(entry);
}

/// The logger to pass to the plugin's `init`: `ferro_standin_logger`, with the recording sink
/// installed.
pub fn nccl_logger() -> ncclDebugLogger_t {
    INSTALL.call_once(|| {
        // SAFETY: `sink` matches the C typedef `ferro_tests_sink_fn` and lives for the whole
        // process; the C side stores it atomically.
        unsafe { ferro_standin_set_sink(Some(sink)) };
    });
    Some(ferro_standin_logger)
}

/// Every line recorded so far (since the last [`clear_logs`]).
pub fn logs() -> Vec<LogLine> {
    store().lines.clone()
}

/// Forgets the recorded lines.
pub fn clear_logs() {
    let mut s = store();
    s.base += s.lines.len();
    s.lines.clear();
}

/// A position in the log; [`logs_since`] returns the lines recorded after it. Unlike
/// [`clear_logs`], marks do not disturb other threads' view of the log.
pub fn log_mark() -> usize {
    let s = store();
    s.base + s.lines.len()
}

/// The lines recorded after `mark` (those still kept, if the log was cleared in between).
pub fn logs_since(mark: usize) -> Vec<LogLine> {
    let s = store();
    let skip = mark.saturating_sub(s.base).min(s.lines.len());
    s.lines[skip..].to_vec()
}

/// Whether a line with `level` whose text contains `substring` was recorded.
pub fn has_log(level: c_int, substring: &str) -> bool {
    store()
        .lines
        .iter()
        .any(|l| l.level == level && l.text.contains(substring))
}

/// The recorded lines as text, one per line (for failure messages).
pub fn format_logs(lines: &[LogLine]) -> String {
    let mut s = String::new();
    for l in lines {
        s.push_str("  ");
        s.push_str(&l.to_string());
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferro_ffi::log_flags;

    #[test]
    fn the_c_logger_formats_and_records() {
        let logger = nccl_logger().expect("logger");
        let mark = log_mark();
        // SAFETY: calling the C variadic logger with a constant format and matching arguments.
        unsafe {
            logger(
                log_level::WARN,
                log_flags::NET,
                c"mod::fn".as_ptr(),
                42,
                c"%s has %d%% of %s".as_ptr(),
                c"rxe0".as_ptr(),
                50 as c_int,
                c"it".as_ptr(),
            );
        }
        let long = "x".repeat(5000);
        let long_c = std::ffi::CString::new(long.clone()).expect("no NUL");
        // SAFETY: as above; "%s" with one C string (longer than the C side's stack buffer).
        unsafe {
            logger(
                log_level::INFO,
                log_flags::INIT,
                c"f".as_ptr(),
                1,
                c"%s".as_ptr(),
                long_c.as_ptr(),
            )
        };
        let got = logs_since(mark);
        let mine: Vec<_> = got
            .iter()
            .filter(|l| l.filefunc == "mod::fn" || l.text == long)
            .collect();
        assert_eq!(mine.len(), 2, "{got:?}");
        assert_eq!(mine[0].text, "rxe0 has 50% of it");
        assert_eq!(mine[0].level, log_level::WARN);
        assert_eq!(mine[0].line, 42);
        assert_eq!(mine[1].text.len(), 5000);
        assert!(has_log(log_level::WARN, "has 50%"));
        assert!(!has_log(log_level::INFO, "has 50%"));
    }
}
