//! Errors from verbs calls.

use std::fmt;

/// A failed verbs call: which one, and the errno it left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// The verb, e.g. `"ibv_create_qp"`.
    pub op: &'static str,
    /// errno (positive), or 0 when the call gave none.
    pub errno: i32,
    /// Extra context (device, sizes, ...).
    pub context: String,
}

impl Error {
    pub fn new(op: &'static str, errno: i32) -> Self {
        Self {
            op,
            errno,
            context: String::new(),
        }
    }

    /// The error with `errno` taken from the thread's last OS error.
    pub fn last(op: &'static str) -> Self {
        Self::new(
            op,
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        )
    }

    /// Adds context such as the device name.
    pub fn context(mut self, ctx: impl Into<String>) -> Self {
        self.context = ctx.into();
        self
    }

    /// True when the provider or library does not implement the operation.
    pub fn is_unsupported(&self) -> bool {
        self.errno == libc::EOPNOTSUPP
            || self.errno == libc::ENOSYS
            || self.errno == libc::EPROTONOSUPPORT
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.op)?;
        if !self.context.is_empty() {
            write!(f, " ({})", self.context)?;
        }
        if self.errno != 0 {
            let io = std::io::Error::from_raw_os_error(self.errno);
            let text = io.to_string();
            let text = text.split(" (os error").next().unwrap_or(&text);
            write!(f, " failed: {} (errno {})", text, self.errno)
        } else {
            write!(f, " failed")
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
