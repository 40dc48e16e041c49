//! The one error sysfs discovery reports: `class/infiniband` could not be listed.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// A sysfs read that could not be turned into a partial result.
#[derive(Debug)]
pub struct SysfsError {
    /// The path that failed.
    pub path: PathBuf,
    /// The underlying I/O error.
    pub source: io::Error,
}

impl SysfsError {
    pub(super) fn new(path: &Path, source: io::Error) -> Self {
        Self {
            path: path.to_path_buf(),
            source,
        }
    }
}

impl fmt::Display for SysfsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot read {}: {}", self.path.display(), self.source)
    }
}

impl std::error::Error for SysfsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}
