//! Loading a plugin the way NCCL does: `dlopen(path, RTLD_NOW|RTLD_LOCAL)`, then
//! `dlsym("ncclNetPlugin_v<N>")`. The library is never closed (its table's code lives in it).

use crate::table::Table;
use core::ffi::CStr;
use ferro_ffi::AbiVersion;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The text of `dlerror()`, or a placeholder.
pub fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl* call on
    // this thread; it is copied at once.
    unsafe {
        let p = libc::dlerror();
        if p.is_null() {
            "unknown dlerror".into()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}

/// A library opened with `dlopen`, never closed.
#[derive(Debug, Clone, Copy)]
pub struct Library(*mut core::ffi::c_void);

impl Library {
    /// Whether the library exports `symbol` (looked up as NCCL's loader does: `dlsym`).
    pub fn has_symbol(&self, symbol: &str) -> bool {
        let Ok(c) = CString::new(symbol) else {
            return false;
        };
        // SAFETY: self.0 is a live handle from dlopen (never closed); the name is NUL-terminated.
        !unsafe { libc::dlsym(self.0, c.as_ptr()) }.is_null()
    }
}

/// `dlopen(path, RTLD_NOW|RTLD_LOCAL)`.
pub fn open_library(path: &Path) -> Result<Library, String> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("NUL in {}", path.display()))?;
    // SAFETY: c is NUL-terminated; loading runs the plugin's initialisers, as NCCL's dlopen does.
    let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if lib.is_null() {
        return Err(format!(
            "dlopen({}, RTLD_NOW|RTLD_LOCAL) failed: {}",
            path.display(),
            dl_error()
        ));
    }
    Ok(Library(lib))
}

/// Opens the plugin at `path` and returns its exported table of `version` (valid for the life
/// of the process: the library is never unloaded).
pub fn open_plugin_version(path: &Path, version: AbiVersion) -> Result<Table<'static>, String> {
    let lib = open_library(path)?;
    let name = version.symbol();
    // SAFETY: lib.0 is a live handle; the symbol name is NUL-terminated.
    let sym = unsafe { libc::dlsym(lib.0, name.as_ptr()) };
    if sym.is_null() {
        return Err(format!(
            "{} does not export {}: {}",
            path.display(),
            name.to_string_lossy(),
            dl_error()
        ));
    }
    // SAFETY: the symbol is the plugin's exported table of that version (layouts pinned in
    // ferro-ffi), immutable, in a library that is never unloaded.
    Ok(unsafe { Table::from_symbol(version, sym) })
}

/// The v8 table (see [`open_plugin_version`]), as its own type.
pub fn open_plugin(path: &Path) -> Result<&'static ferro_ffi::ncclNet_v8_t, String> {
    match open_plugin_version(path, AbiVersion::V8)? {
        Table::V8(t) => Ok(t),
        _ => Err("the v8 symbol gave another table type".into()),
    }
}

/// The plugin's own statistics function (`ferroNetStats_v1`), looked up in the library that
/// [`open_plugin`] loaded; `None` for a plugin without it. Not part of NCCL's ABI: tools use it
/// to count posts, polls and allocations per message.
pub fn stats_fn(path: &Path) -> Option<ferro_ffi::FerroNetStatsFn> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: c is NUL-terminated; RTLD_NOLOAD only finds a library that is already loaded
    // (it takes one more reference, never released: the library is never unloaded anyway).
    let lib = unsafe {
        libc::dlopen(
            c.as_ptr(),
            libc::RTLD_NOW | libc::RTLD_LOCAL | libc::RTLD_NOLOAD,
        )
    };
    if lib.is_null() {
        return None;
    }
    let name = CString::new(ferro_ffi::FERRO_NET_STATS_SYMBOL).ok()?;
    // SAFETY: lib is a live handle; the name is NUL-terminated.
    let sym = unsafe { libc::dlsym(lib, name.as_ptr()) };
    if sym.is_null() {
        return None;
    }
    // SAFETY: the symbol is the plugin's exported static holding the function pointer (type
    // pinned in ferro-ffi), immutable, in a library that is never unloaded.
    Some(unsafe { *sym.cast::<ferro_ffi::FerroNetStatsFn>() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_a_clean_error_naming_dlopen() {
        let e = open_plugin(Path::new("/nonexistent/libnope.so")).unwrap_err();
        assert!(e.contains("dlopen(/nonexistent/libnope.so"), "{e}");
    }
}
