//! The harness's error type: a failed plugin call, a deadline that passed, or a failed check.

use ferro_ffi::ncclResult_t;
use std::fmt;
use std::time::Duration;

/// Why a harness step failed.
#[derive(Debug, Clone, PartialEq)]
pub enum HarnessError {
    /// A plugin call returned a non-success `ncclResult_t`.
    Nccl {
        call: &'static str,
        code: ncclResult_t,
    },
    /// Something did not happen within its deadline.
    Timeout { what: String, after: Duration },
    /// A check failed; the text says what was expected and what was seen.
    Failed(String),
}

impl HarnessError {
    /// The plugin's result code, if this is a failed plugin call.
    pub fn nccl_code(&self) -> Option<ncclResult_t> {
        match self {
            HarnessError::Nccl { code, .. } => Some(*code),
            _ => None,
        }
    }
}

impl fmt::Display for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HarnessError::Nccl { call, code } => write!(f, "{call} returned {code:?} ({})", code.0),
            HarnessError::Timeout { what, after } => {
                write!(f, "timed out after {:.1} s: {what}", after.as_secs_f64())
            }
            HarnessError::Failed(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for HarnessError {}

impl From<String> for HarnessError {
    fn from(s: String) -> Self {
        HarnessError::Failed(s)
    }
}

pub type HResult<T> = Result<T, HarnessError>;

/// Attaches the call name to a raw plugin result.
pub trait NcclExt<T> {
    fn call(self, call: &'static str) -> HResult<T>;
}

impl<T> NcclExt<T> for Result<T, ncclResult_t> {
    fn call(self, call: &'static str) -> HResult<T> {
        self.map_err(|code| HarnessError::Nccl { call, code })
    }
}

/// `ensure!(cond, "format", args..)`: returns `HarnessError::Failed` from the enclosing function
/// when `cond` is false.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err($crate::error::HarnessError::Failed(format!($($arg)+)));
        }
    };
}

/// `bail!("format", args..)`: returns `HarnessError::Failed` from the enclosing function.
#[macro_export]
macro_rules! bail {
    ($($arg:tt)+) => {
        return Err($crate::error::HarnessError::Failed(format!($($arg)+)))
    };
}
