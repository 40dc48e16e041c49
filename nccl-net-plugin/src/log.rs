//! Logging through NCCL's logger.
//!
//! NCCL hands `init` a C variadic logger. It is kept in an atomic so every thread can log; text is
//! always passed as an argument to a constant `"%s"` format, so a `%` in a message (a device name,
//! a path) can never be read as a conversion. Before `init` (or in tools that have no NCCL), WARN
//! lines go to stderr and the rest is dropped unless `FERRO_LOG_STDERR=1`.

use core::ffi::{c_char, c_int, c_ulong};
use ferro_ffi::{log_level, ncclDebugLogger_t};
use std::ffi::CString;
use std::sync::atomic::{AtomicUsize, Ordering};

static LOGGER: AtomicUsize = AtomicUsize::new(0);

/// Installs NCCL's logger (a later `init` may replace it; NULL keeps the stderr fallback).
pub fn set_logger(f: ncclDebugLogger_t) {
    LOGGER.store(f.map_or(0, |f| f as usize), Ordering::Release);
}

fn logger() -> ncclDebugLogger_t {
    let p = LOGGER.load(Ordering::Acquire);
    if p == 0 {
        None
    } else {
        // SAFETY: p was stored from a valid `ncclDebugLogger_t` function pointer in set_logger.
        Some(unsafe {
            core::mem::transmute::<
                usize,
                unsafe extern "C" fn(c_int, c_ulong, *const c_char, c_int, *const c_char, ...),
            >(p)
        })
    }
}

fn stderr_enabled() -> bool {
    crate::config::Config::process().0.log_stderr
}

/// Emits one log line.
pub fn emit(level: c_int, flags: c_ulong, func: &str, line: u32, msg: &str) {
    match logger() {
        Some(f) => {
            let text = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
            let func = CString::new(func).unwrap_or_default();
            let line = c_int::try_from(line).unwrap_or(0);
            // SAFETY: NCCL's logger accepts (level, flags, filefunc, line, fmt, ...); the format is
            // the constant "%s" with exactly one NUL-terminated string argument.
            unsafe {
                f(
                    level,
                    flags,
                    func.as_ptr(),
                    line,
                    c"%s".as_ptr(),
                    text.as_ptr(),
                )
            };
        }
        None => {
            if level == log_level::WARN || stderr_enabled() {
                let tag = if level == log_level::WARN {
                    "WARN"
                } else {
                    "INFO"
                };
                eprintln!("NET/Ferro {tag} {msg}");
            }
        }
    }
}

/// `warn!(flags, "fmt", args..)`: a WARN line, prefixed like NCCL's own network lines.
#[macro_export]
macro_rules! warn {
    ($flags:expr, $($arg:tt)*) => {
        $crate::log::emit(::ferro_ffi::log_level::WARN, $flags, module_path!(), line!(), &format!("NET/Ferro : {}", format!($($arg)*)))
    };
}

/// `info!(flags, "fmt", args..)`: an INFO line.
#[macro_export]
macro_rules! info {
    ($flags:expr, $($arg:tt)*) => {
        $crate::log::emit(::ferro_ffi::log_level::INFO, $flags, module_path!(), line!(), &format!("NET/Ferro : {}", format!($($arg)*)))
    };
}

/// `trace!(flags, "fmt", args..)`: a TRACE line (NCCL prints it only in TRACE builds).
#[macro_export]
macro_rules! trace {
    ($flags:expr, $($arg:tt)*) => {
        $crate::log::emit(::ferro_ffi::log_level::TRACE, $flags, module_path!(), line!(), &format!("NET/Ferro : {}", format!($($arg)*)))
    };
}
