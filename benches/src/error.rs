//! One error type for the whole tool: a message for the user.

use std::fmt;

/// An error message, printed as `ferro-bench: error: ...`.
#[derive(Debug, Clone)]
pub(crate) struct Error(String);

pub(crate) type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn new(msg: impl Into<String>) -> Error {
        Error(msg.into())
    }

    /// Prefixes the message with what was being done.
    pub(crate) fn context(self, what: impl fmt::Display) -> Error {
        Error(format!("{what}: {}", self.0))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// The NCCL stand-in's errors are messages too.
impl From<String> for Error {
    fn from(msg: String) -> Error {
        Error(msg)
    }
}

/// A failed plugin call names the call; the plugin's own WARN lines say why.
impl From<ferro_nccl_standin::HarnessError> for Error {
    fn from(e: ferro_nccl_standin::HarnessError) -> Error {
        match e {
            ferro_nccl_standin::HarnessError::Nccl { call, code } => Error(format!(
                "plugin call {call} failed with {code:?} (see the plugin's WARN lines above)"
            )),
            other => Error(other.to_string()),
        }
    }
}

/// Adds context to any error that can be displayed.
pub(crate) trait Context<T> {
    fn ctx(self, what: impl fmt::Display) -> Result<T>;
}

impl<T, E: fmt::Display> Context<T> for std::result::Result<T, E> {
    fn ctx(self, what: impl fmt::Display) -> Result<T> {
        self.map_err(|e| Error(format!("{what}: {e}")))
    }
}
