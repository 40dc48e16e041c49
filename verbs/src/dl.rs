//! The dynamic loader as the plugin's crates use it: a library opened once with
//! `RTLD_NOW|RTLD_LOCAL` and never closed, its symbols looked up plain (`dlsym`) or at a pinned
//! version (`dlvsym`), and the loader's error text. libibverbs ([`crate::loader`]) and the CUDA
//! driver (the GPUDirect detection) are both opened through it.
//!
//! Hand-written over `libc` rather than a loader crate: the crates available have no `dlvsym`,
//! which the verbs table needs for every symbol, and their handle closes the library on drop,
//! which these libraries must never be.

use core::ffi::{CStr, c_void};
use core::ptr::NonNull;
use std::ffi::CString;
use std::fmt;

/// Why a library could not be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenError {
    /// The name has a NUL byte (it cannot be passed to the loader).
    NulInName,
    /// `dlopen` failed; the loader's message (`dlerror`), which names the library.
    Loader(String),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::NulInName => f.write_str("NUL in name"),
            OpenError::Loader(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for OpenError {}

/// A library opened with `RTLD_NOW|RTLD_LOCAL`, never closed (its providers' threads and state,
/// or the CUDA driver under a running application, must outlive every user of it).
#[derive(Debug)]
pub struct Library {
    name: String,
    handle: NonNull<c_void>,
}

impl Library {
    /// `dlopen(name, RTLD_NOW|RTLD_LOCAL)`: all symbols bound now, none made global.
    ///
    /// # Errors
    /// [`OpenError`]: a NUL in `name`, or the loader's message.
    pub fn open(name: &str) -> Result<Library, OpenError> {
        let c = CString::new(name).map_err(|_| OpenError::NulInName)?;
        // SAFETY: c is NUL-terminated. Loading runs the library's constructors, which is the point.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        NonNull::new(handle)
            .map(|handle| Library {
                name: name.to_string(),
                handle,
            })
            .ok_or_else(|| OpenError::Loader(dl_error()))
    }

    /// The name it was opened by.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `dlsym`: the default version of `symbol`; `None` if absent.
    pub fn sym(&self, symbol: &str) -> Option<NonNull<c_void>> {
        let s = CString::new(symbol).ok()?;
        // SAFETY: handle is a live dlopen handle (never closed); s is NUL-terminated.
        NonNull::new(unsafe { libc::dlsym(self.handle.as_ptr(), s.as_ptr()) })
    }

    /// `dlvsym`: `symbol@version`; `None` if absent at that version.
    pub fn vsym(&self, symbol: &str, version: &str) -> Option<NonNull<c_void>> {
        let s = CString::new(symbol).ok()?;
        let v = CString::new(version).ok()?;
        // SAFETY: handle is a live dlopen handle (never closed); both strings are NUL-terminated.
        NonNull::new(unsafe { libc::dlvsym(self.handle.as_ptr(), s.as_ptr(), v.as_ptr()) })
    }
}

/// The text of `dlerror()` (the last dynamic-loader error on this thread), or a placeholder.
pub fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a pointer to a thread-local NUL-terminated message, valid
    // until the next dl* call on this thread; it is copied before any other dl* call.
    let msg = unsafe { libc::dlerror() };
    if msg.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: non-NULL, NUL-terminated (see above).
        unsafe { CStr::from_ptr(msg) }
            .to_string_lossy()
            .into_owned()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_gives_the_loaders_message_naming_it() {
        let e = Library::open("/nonexistent/libnope.so.1").unwrap_err();
        match e {
            OpenError::Loader(msg) => assert!(msg.contains("/nonexistent/libnope.so.1"), "{msg}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(Library::open("lib\0m").unwrap_err(), OpenError::NulInName);
    }

    #[test]
    fn symbols_are_found_plain_and_at_a_version_and_a_wrong_version_is_none() {
        let libm = Library::open("libm.so.6").unwrap();
        assert!(libm.sym("cos").is_some());
        assert!(libm.sym("no_such_symbol_here").is_none());
        let at = if cfg!(target_arch = "aarch64") {
            "GLIBC_2.17"
        } else {
            "GLIBC_2.2.5"
        };
        assert!(libm.vsym("cos", at).is_some());
        assert!(libm.vsym("cos", "GLIBC_0.0").is_none());
    }
}
