//! A plugin's exported table of any ABI version (v7 … v12), and the order in which each NCCL
//! release looks the tables up.
//!
//! [`Table`] is what [`crate::raw`] calls through: one variant per version, each holding that
//! version's hand-written table type, so the same scenario runs against every version by
//! choosing the variant; the calls convert arguments the way each version's signature needs.
//! For v11+ the table carries the per-communicator context `init` returned.

use core::ffi::{c_char, c_int, c_void};
use ferro_ffi::{
    AbiVersion, DevicesFn, ncclNet_v7_t, ncclNet_v8_t, ncclNet_v9_t, ncclNet_v10_t, ncclNet_v11_t,
    ncclNet_v12_t,
};

/// One exported table, with the v11+ context (NULL until `init` created one).
#[derive(Debug, Clone, Copy)]
pub enum Table<'a> {
    V7(&'a ncclNet_v7_t),
    V8(&'a ncclNet_v8_t),
    V9(&'a ncclNet_v9_t),
    V10(&'a ncclNet_v10_t),
    V11(&'a ncclNet_v11_t, *mut c_void),
    V12(&'a ncclNet_v12_t, *mut c_void),
}

impl<'a> From<&'a ncclNet_v8_t> for Table<'a> {
    fn from(t: &'a ncclNet_v8_t) -> Table<'a> {
        Table::V8(t)
    }
}

impl<'a> From<&Table<'a>> for Table<'a> {
    fn from(t: &Table<'a>) -> Table<'a> {
        *t
    }
}

/// Calls `$body` with `$t` bound to the table, whatever its version (for the members every
/// version has with the same type).
macro_rules! any_table {
    ($table:expr, $t:ident => $body:expr) => {
        match $table {
            Table::V7($t) => $body,
            Table::V8($t) => $body,
            Table::V9($t) => $body,
            Table::V10($t) => $body,
            Table::V11($t, _) => $body,
            Table::V12($t, _) => $body,
        }
    };
}
pub(crate) use any_table;

impl<'a> Table<'a> {
    /// The table behind the exported symbol of `version`.
    ///
    /// # Safety
    /// `sym` is the address of that version's exported table, immutable and alive for `'a`.
    pub unsafe fn from_symbol(version: AbiVersion, sym: *const c_void) -> Table<'a> {
        // SAFETY: (every arm) per this function's contract; each table type's layout is pinned.
        unsafe {
            match version {
                AbiVersion::V7 => Table::V7(&*sym.cast()),
                AbiVersion::V8 => Table::V8(&*sym.cast()),
                AbiVersion::V9 => Table::V9(&*sym.cast()),
                AbiVersion::V10 => Table::V10(&*sym.cast()),
                AbiVersion::V11 => Table::V11(&*sym.cast(), core::ptr::null_mut()),
                AbiVersion::V12 => Table::V12(&*sym.cast(), core::ptr::null_mut()),
            }
        }
    }

    /// The table's ABI version.
    pub fn version(&self) -> AbiVersion {
        match self {
            Table::V7(_) => AbiVersion::V7,
            Table::V8(_) => AbiVersion::V8,
            Table::V9(_) => AbiVersion::V9,
            Table::V10(_) => AbiVersion::V10,
            Table::V11(..) => AbiVersion::V11,
            Table::V12(..) => AbiVersion::V12,
        }
    }

    /// The same table with the v11+ context `ctx` (ignored before v11).
    pub fn with_ctx(self, ctx: *mut c_void) -> Table<'a> {
        match self {
            Table::V11(t, _) => Table::V11(t, ctx),
            Table::V12(t, _) => Table::V12(t, ctx),
            other => other,
        }
    }

    /// The v11+ context (NULL before v11 or before `init`).
    pub fn ctx(&self) -> *mut c_void {
        match self {
            Table::V11(_, c) | Table::V12(_, c) => *c,
            _ => core::ptr::null_mut(),
        }
    }

    /// The table's `name` member.
    pub fn name_ptr(&self) -> *const c_char {
        any_table!(self, t => t.name)
    }

    /// The `devices` entry (the same type in every version).
    pub fn devices_fn(&self) -> Option<DevicesFn> {
        any_table!(self, t => t.devices)
    }

    /// `getProperties(dev, p)` with a pointer of the version's properties type (or NULL, to
    /// check that the plugin refuses it). `None` when the entry is NULL.
    ///
    /// # Safety
    /// `p` is NULL or points to writable memory of the version's properties size.
    pub unsafe fn get_properties_raw(
        &self,
        dev: c_int,
        p: *mut c_void,
    ) -> Option<ferro_ffi::ncclResult_t> {
        // SAFETY: (every arm) per this function's contract.
        unsafe { any_table!(self, t => t.getProperties.map(|f| f(dev, p.cast()))) }
    }

    /// `listen(dev, handle, out)` with raw pointers (v11+: on the table's context), to check that
    /// the plugin refuses NULLs. `None` when the entry is NULL.
    ///
    /// # Safety
    /// `handle` is NULL or 128 writable bytes; `out` is NULL or a writable pointer slot.
    pub unsafe fn listen_raw(
        &self,
        dev: c_int,
        handle: *mut c_void,
        out: *mut *mut c_void,
    ) -> Option<ferro_ffi::ncclResult_t> {
        // SAFETY: (every arm) per this function's contract.
        unsafe {
            match self {
                Table::V11(t, ctx) => t.listen.map(|f| f(*ctx, dev, handle, out)),
                Table::V12(t, ctx) => t.listen.map(|f| f(*ctx, dev, handle, out)),
                Table::V7(t) => t.listen.map(|f| f(dev, handle, out)),
                Table::V8(t) => t.listen.map(|f| f(dev, handle, out)),
                Table::V9(t) => t.listen.map(|f| f(dev, handle, out)),
                Table::V10(t) => t.listen.map(|f| f(dev, handle, out)),
            }
        }
    }

    /// The `iflush` entry (the same type in every version).
    pub fn iflush_fn(&self) -> Option<ferro_ffi::IflushFn> {
        any_table!(self, t => t.iflush)
    }

    /// Whether `getDeviceMr` and `irecvConsumed` are NULL (a host plugin leaves them NULL).
    pub fn device_entries_null(&self) -> bool {
        any_table!(self, t => t.getDeviceMr.is_none() && t.irecvConsumed.is_none())
    }

    /// The members NCCL needs in every version, with whether the table fills them, plus those the
    /// version adds (`makeVDevice` may be NULL: NCCL then does not fuse devices).
    pub fn mandatory_entries(&self) -> Vec<(&'static str, bool)> {
        let mut v = any_table!(self, t => vec![
            ("init", t.init.is_some()),
            ("devices", t.devices.is_some()),
            ("getProperties", t.getProperties.is_some()),
            ("listen", t.listen.is_some()),
            ("connect", t.connect.is_some()),
            ("accept", t.accept.is_some()),
            ("regMr", t.regMr.is_some()),
            ("regMrDmaBuf", t.regMrDmaBuf.is_some()),
            ("deregMr", t.deregMr.is_some()),
            ("isend", t.isend.is_some()),
            ("irecv", t.irecv.is_some()),
            ("iflush", t.iflush.is_some()),
            ("test", t.test.is_some()),
            ("closeSend", t.closeSend.is_some()),
            ("closeRecv", t.closeRecv.is_some()),
            ("closeListen", t.closeListen.is_some()),
        ]);
        match self {
            Table::V11(t, _) => {
                v.push(("finalize", t.finalize.is_some()));
                v.push(("setNetAttr", t.setNetAttr.is_some()));
            }
            Table::V12(t, _) => {
                v.push(("finalize", t.finalize.is_some()));
                v.push(("setNetAttr", t.setNetAttr.is_some()));
            }
            _ => {}
        }
        v
    }
}

/// An NCCL release line whose plugin loader differs from its neighbours'.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NcclRelease {
    pub name: &'static str,
    /// The net table versions it looks up, first found wins.
    pub order: &'static [u32],
}

/// Every NCCL release from 2.19 to 2.30 and the net table versions it tries, in its order
/// (v5/v6 are older than anything this project exports, and listed for completeness).
pub const NCCL_RELEASES: &[NcclRelease] = &[
    NcclRelease {
        name: "2.19",
        order: &[7, 6, 5],
    },
    NcclRelease {
        name: "2.20-2.23",
        order: &[8, 7, 6, 5],
    },
    NcclRelease {
        name: "2.24-2.25",
        order: &[9, 8, 7, 6, 5],
    },
    NcclRelease {
        name: "2.26-2.27",
        order: &[10, 9, 8, 7, 6],
    },
    NcclRelease {
        name: "2.28-2.29",
        order: &[11, 10, 9, 8, 7, 6],
    },
    NcclRelease {
        name: "2.30",
        order: &[12, 11, 10, 9, 8, 7, 6],
    },
];

impl NcclRelease {
    /// The table this release would use: the first version in its order whose symbol `lookup`
    /// finds (`ncclNetPlugin_v<N>`), as its loader does.
    pub fn pick(&self, mut lookup: impl FnMut(&str) -> bool) -> Option<u32> {
        self.order
            .iter()
            .copied()
            .find(|v| lookup(&format!("ncclNetPlugin_v{v}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_release_picks_its_newest_table_when_all_are_exported() {
        let all = |s: &str| AbiVersion::ALL.iter().any(|v| v.symbol().to_str() == Ok(s));
        let picks: Vec<(&str, Option<u32>)> = NCCL_RELEASES
            .iter()
            .map(|r| (r.name, r.pick(all)))
            .collect();
        assert_eq!(
            picks,
            [
                ("2.19", Some(7)),
                ("2.20-2.23", Some(8)),
                ("2.24-2.25", Some(9)),
                ("2.26-2.27", Some(10)),
                ("2.28-2.29", Some(11)),
                ("2.30", Some(12)),
            ]
        );
    }

    #[test]
    fn a_library_with_only_v8_is_invisible_to_2_19_and_adapted_by_later_releases() {
        let only_v8 = |s: &str| s == "ncclNetPlugin_v8";
        assert_eq!(NCCL_RELEASES[0].pick(only_v8), None);
        assert!(
            NCCL_RELEASES[1..]
                .iter()
                .all(|r| r.pick(only_v8) == Some(8))
        );
    }
}
