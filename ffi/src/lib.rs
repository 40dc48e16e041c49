//! Layer 1 of 5, the ABI layer: NCCL's external network plugin ABI, versions 7 to 12
//! (`ncclNet_v7_t` … `ncclNet_v12_t`).
//!
//! Every type here is written by hand from the documented, compiler-verified layouts (see
//! `docs/DESIGN.md`, "ABI versions") and pinned by compile-time size/offset assertions in each
//! module. Nothing in this crate calls anything; it only describes what crosses the C boundary.
//!
//! - [`common`]: result codes, logger, constants, device handle, the function types that every
//!   version shares, and v9+'s auxiliary structs (virtual-device members, config, attributes,
//!   profiler callback and descriptor);
//! - [`v7`] … [`v12`]: each version's table and properties, with the function types that differ;
//! - [`ferro`]: Ferro's own statistics symbol (not NCCL's).
//!
//! Values that come *from* C (result codes, pointer-support bits) are transparent integer newtypes
//! with named constants, never Rust enums, so an unexpected value cannot be undefined behaviour.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

pub mod common;
pub mod ferro;
pub mod v10;
pub mod v11;
pub mod v12;
pub mod v7;
pub mod v8;
pub mod v9;

pub use common::*;
pub use ferro::*;
pub use v7::{ncclNet_v7_t, ncclNetProperties_v7_t};
pub use v8::*;
pub use v9::{ncclNet_v9_t, ncclNetProperties_v9_t};
pub use v10::{ncclNet_v10_t, ncclNetProperties_v10_t};
pub use v11::{ncclNet_v11_t, ncclNetProperties_v11_t};
pub use v12::{ncclNet_v12_t, ncclNetProperties_v12_t};

/// The ABI versions this crate describes, and the symbol NCCL looks up for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AbiVersion {
    V7,
    V8,
    V9,
    V10,
    V11,
    V12,
}

impl AbiVersion {
    /// Every version, oldest first.
    pub const ALL: [AbiVersion; 6] = [
        AbiVersion::V7,
        AbiVersion::V8,
        AbiVersion::V9,
        AbiVersion::V10,
        AbiVersion::V11,
        AbiVersion::V12,
    ];

    /// The version number (7 … 12).
    pub fn number(self) -> u32 {
        match self {
            AbiVersion::V7 => 7,
            AbiVersion::V8 => 8,
            AbiVersion::V9 => 9,
            AbiVersion::V10 => 10,
            AbiVersion::V11 => 11,
            AbiVersion::V12 => 12,
        }
    }

    /// The version with this number.
    pub fn from_number(n: u32) -> Option<AbiVersion> {
        AbiVersion::ALL.into_iter().find(|v| v.number() == n)
    }

    /// The exported table's symbol, NUL-terminated (`ncclNetPlugin_vN`).
    pub fn symbol(self) -> &'static core::ffi::CStr {
        match self {
            AbiVersion::V7 => c"ncclNetPlugin_v7",
            AbiVersion::V8 => c"ncclNetPlugin_v8",
            AbiVersion::V9 => c"ncclNetPlugin_v9",
            AbiVersion::V10 => c"ncclNetPlugin_v10",
            AbiVersion::V11 => c"ncclNetPlugin_v11",
            AbiVersion::V12 => c"ncclNetPlugin_v12",
        }
    }

    /// Size in bytes of the version's function table.
    pub fn table_size(self) -> usize {
        match self {
            AbiVersion::V7 | AbiVersion::V8 => 152,
            AbiVersion::V9 | AbiVersion::V10 => 160,
            AbiVersion::V11 | AbiVersion::V12 => 176,
        }
    }

    /// Sizes are `size_t` in `isend`/`irecv` (v9+); `int` before.
    pub fn has_size_t_sizes(self) -> bool {
        self >= AbiVersion::V9
    }
}

#[cfg(target_pointer_width = "64")]
const _: () = {
    use core::mem::size_of;
    assert!(size_of::<ncclNet_v7_t>() == 152);
    assert!(size_of::<ncclNet_v8_t>() == 152);
    assert!(size_of::<ncclNet_v9_t>() == 160);
    assert!(size_of::<ncclNet_v10_t>() == 160);
    assert!(size_of::<ncclNet_v11_t>() == 176);
    assert!(size_of::<ncclNet_v12_t>() == 176);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_names_cover_known_codes_and_reject_others() {
        assert_eq!(ncclResult_t::RemoteError.name(), Some("ncclRemoteError"));
        assert_eq!(ncclResult_t(8).name(), None);
        assert_eq!(format!("{:?}", ncclResult_t(42)), "ncclResult_t(42)");
        assert_eq!(
            format!("{:?}", ncclResult_t::InvalidUsage),
            "ncclInvalidUsage"
        );
    }

    #[test]
    fn option_fn_pointer_is_pointer_sized() {
        // NULL table entries rely on the niche: None must be the all-zero pointer.
        assert_eq!(core::mem::size_of::<Option<TestFn>>(), 8);
        let none: Option<TestFn> = None;
        // SAFETY: Option<fn> has the same size as usize (asserted above); reading it as bits is sound.
        let bits: usize = unsafe { core::mem::transmute(none) };
        assert_eq!(bits, 0);
    }

    #[test]
    fn versions_name_their_symbols_and_table_sizes() {
        for v in AbiVersion::ALL {
            let sym = v.symbol().to_str().unwrap();
            assert_eq!(sym, format!("ncclNetPlugin_v{}", v.number()));
            assert_eq!(AbiVersion::from_number(v.number()), Some(v));
        }
        assert_eq!(AbiVersion::from_number(6), None);
        assert_eq!(
            AbiVersion::V12.table_size(),
            core::mem::size_of::<ncclNet_v12_t>()
        );
        assert_eq!(
            AbiVersion::V7.table_size(),
            core::mem::size_of::<ncclNet_v7_t>()
        );
        assert!(!AbiVersion::V8.has_size_t_sizes() && AbiVersion::V9.has_size_t_sizes());
    }
}
