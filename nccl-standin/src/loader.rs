//! Loading a plugin the way NCCL does: `dlopen(path, RTLD_NOW|RTLD_LOCAL)`, then
//! `dlsym("ncclNetPlugin_v<N>")`, through `libloading`. The library is never closed (its table's
//! code lives in it): the opened handle is leaked.

use crate::table::Table;
use core::ffi::c_void;
use core::ptr::NonNull;
use ferro_ffi::AbiVersion;
use libloading::os::unix::{Library as DlLibrary, RTLD_LOCAL, RTLD_NOW};
use std::path::Path;

/// A library opened with `dlopen(RTLD_NOW|RTLD_LOCAL)`, never closed.
#[derive(Debug, Clone, Copy)]
pub struct Library(&'static DlLibrary);

impl Library {
    /// The address of `symbol` as NCCL's loader looks it up (`dlsym`); `None` if absent.
    pub fn symbol(&self, symbol: &str) -> Option<NonNull<c_void>> {
        // SAFETY: the symbol's address is only taken, as an untyped pointer; nothing is called
        // or read through it here.
        let s = unsafe { self.0.get::<*mut c_void>(symbol.as_bytes()) }.ok()?;
        NonNull::new(*s)
    }

    /// Whether the library exports `symbol`.
    pub fn has_symbol(&self, symbol: &str) -> bool {
        self.symbol(symbol).is_some()
    }

    /// Its exported table of `version` (valid for the life of the process: the library is
    /// never unloaded).
    pub fn table(&self, version: AbiVersion) -> Result<Table<'static>, String> {
        let name = version.symbol();
        // SAFETY: as in `symbol`: only the address is taken.
        let sym = unsafe { self.0.get::<*mut c_void>(name.to_bytes_with_nul()) }.map_err(|e| {
            format!(
                "the library does not export {}: {e}",
                name.to_string_lossy()
            )
        })?;
        // SAFETY: the symbol is the plugin's exported table of that version (layouts pinned in
        // ferro-ffi), immutable, in a library that is never unloaded.
        Ok(unsafe { Table::from_symbol(version, *sym) })
    }

    /// The plugin's own statistics function (`ferroNetStats_v1`); `None` for a plugin without
    /// it. Not part of NCCL's ABI: tools use it to count posts, polls and allocations per
    /// message.
    pub fn stats_fn(&self) -> Option<ferro_ffi::FerroNetStatsFn> {
        let sym = self.symbol(ferro_ffi::FERRO_NET_STATS_SYMBOL)?;
        // SAFETY: the symbol is the plugin's exported static holding the function pointer (type
        // pinned in ferro-ffi), immutable, in a library that is never unloaded.
        Some(unsafe { *sym.as_ptr().cast::<ferro_ffi::FerroNetStatsFn>() })
    }
}

/// `dlopen(path, RTLD_NOW|RTLD_LOCAL)`.
pub fn open_library(path: &Path) -> Result<Library, String> {
    // SAFETY: loading runs the plugin's initialisers, as NCCL's dlopen does.
    let lib = unsafe { DlLibrary::open(Some(path), RTLD_NOW | RTLD_LOCAL) }.map_err(|e| {
        format!(
            "dlopen({}, RTLD_NOW|RTLD_LOCAL) failed: {e}",
            path.display()
        )
    })?;
    // Never closed: leaking the handle keeps `dlclose` from ever running.
    Ok(Library(Box::leak(Box::new(lib))))
}

/// Opens the plugin at `path` and returns its exported table of `version` (valid for the life
/// of the process: the library is never unloaded).
pub fn open_plugin_version(path: &Path, version: AbiVersion) -> Result<Table<'static>, String> {
    open_library(path)?
        .table(version)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// The v8 table (see [`open_plugin_version`]), as its own type.
pub fn open_plugin(path: &Path) -> Result<&'static ferro_ffi::ncclNet_v8_t, String> {
    match open_plugin_version(path, AbiVersion::V8)? {
        Table::V8(t) => Ok(t),
        _ => Err("the v8 symbol gave another table type".into()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_a_clean_error_naming_dlopen() {
        let e = open_plugin(Path::new("/nonexistent/libnope.so")).unwrap_err();
        assert!(e.contains("dlopen(/nonexistent/libnope.so"), "{e}");
    }

    #[test]
    fn a_library_without_the_table_is_an_error_naming_the_symbol() {
        let lib = open_library(Path::new("libm.so.6")).unwrap();
        assert!(lib.has_symbol("cos") && !lib.has_symbol("ncclNetPlugin_v8"));
        let e = open_plugin_version(Path::new("libm.so.6"), AbiVersion::V8).unwrap_err();
        assert!(e.contains("does not export ncclNetPlugin_v8"), "{e}");
        assert!(lib.stats_fn().is_none());
    }
}
