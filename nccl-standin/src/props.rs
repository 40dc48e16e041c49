//! Device properties as the stand-in reads them: every version's `getProperties` layout
//! (v7 … v12), one wide form of them ([`WideProps`]: every field any version has, `None` where a
//! version lacks it) and the copied, typed form tests check ([`Properties`], with the "unset"
//! markers stored before the call). Each version's widening and narrowing comes from one field
//! list ([`Layout`], implemented by `layout!`), so a field is named once per version, not once
//! per conversion.

use core::ffi::{CStr, c_char, c_int};
use ferro_ffi::{
    AbiVersion, ncclNetProperties_v7_t, ncclNetProperties_v8_t, ncclNetProperties_v9_t,
    ncclNetProperties_v11_t, ncclNetProperties_v12_t, ncclNetVDeviceProps_v9_t,
    ncclNetVDeviceProps_v12_t,
};

/// The members of a virtual device (`vProps`) in the widest array (v12's 8 entries), with the
/// length of the array of the version they came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VDevs {
    pub ndevs: c_int,
    pub devs: [c_int; 8],
    /// Entries in the version's array (4 before v12, 8 from v12).
    pub capacity: usize,
}

impl VDevs {
    /// The member list `ndevs` names; a count that does not fit the version's array is kept as
    /// the one-entry list `[ndevs]`, so that a check can still see it.
    pub fn members(&self) -> Vec<c_int> {
        let devs = &self.devs[..self.capacity.min(self.devs.len())];
        match usize::try_from(self.ndevs) {
            Ok(n) if n <= devs.len() => devs[..n].to_vec(),
            _ => vec![self.ndevs],
        }
    }
}

/// Every field of any version's properties struct, under its C name. The fields all versions
/// share are plain; the others are `None` when the version the values came from lacks them.
#[allow(
    non_snake_case,
    reason = "the C field names, so that `layout!` can name both sides"
)]
#[derive(Debug, Clone, Copy)]
pub struct WideProps {
    pub name: *mut c_char,
    pub pciPath: *mut c_char,
    pub guid: u64,
    pub ptrSupport: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub maxComms: c_int,
    pub maxRecvs: c_int,
    pub netDeviceType: c_int,
    pub netDeviceVersion: c_int,
    /// v8+.
    pub regIsGlobal: Option<c_int>,
    /// v9+.
    pub forceFlush: Option<c_int>,
    /// v9+.
    pub vProps: Option<VDevs>,
    /// v9+.
    pub maxP2pBytes: Option<usize>,
    /// v9+.
    pub maxCollBytes: Option<usize>,
    /// v11+.
    pub maxMultiRequestSize: Option<c_int>,
    /// v12.
    pub railId: Option<i16>,
    /// v12.
    pub planeId: Option<i16>,
}

/// Nothing set: NULL names, zeros, and no version-specific field.
const EMPTY: WideProps = WideProps {
    name: core::ptr::null_mut(),
    pciPath: core::ptr::null_mut(),
    guid: 0,
    ptrSupport: 0,
    speed: 0,
    port: 0,
    latency: 0.0,
    maxComms: 0,
    maxRecvs: 0,
    netDeviceType: 0,
    netDeviceVersion: 0,
    regIsGlobal: None,
    forceFlush: None,
    vProps: None,
    maxP2pBytes: None,
    maxCollBytes: None,
    maxMultiRequestSize: None,
    railId: None,
    planeId: None,
};

/// How a version-specific field is held in [`WideProps`]: as itself, except `vProps`, whose
/// array differs between versions.
trait Field: Copy {
    type Wide: Copy + Default;
    fn widen(self) -> Self::Wide;
    fn narrow(w: Self::Wide) -> Self;
}

macro_rules! same_field {
    ($($t:ty),*) => {$(
        impl Field for $t {
            type Wide = $t;
            fn widen(self) -> $t {
                self
            }
            fn narrow(w: $t) -> $t {
                w
            }
        }
    )*};
}
same_field!(c_int, usize, i16);

macro_rules! vdevs_field {
    ($($t:ty => $n:literal),*) => {$(
        impl Field for $t {
            type Wide = VDevs;
            fn widen(self) -> VDevs {
                let mut devs = [0; 8];
                devs[..$n].copy_from_slice(&self.devs);
                VDevs {
                    ndevs: self.ndevs,
                    devs,
                    capacity: $n,
                }
            }
            fn narrow(w: VDevs) -> $t {
                let mut devs = [0; $n];
                devs.copy_from_slice(&w.devs[..$n]);
                Self {
                    ndevs: w.ndevs,
                    devs,
                }
            }
        }
    )*};
}
vdevs_field!(ncclNetVDeviceProps_v9_t => 4, ncclNetVDeviceProps_v12_t => 8);

/// One version's properties struct, converted to and from [`WideProps`].
pub trait Layout: Copy {
    /// The fields this version has; the others `None`.
    fn widen(&self) -> WideProps;
    /// This version's struct from `w`'s fields (one `w` does not have: zero).
    fn narrow(w: &WideProps) -> Self;
}

/// Implements [`Layout`] for each version from its list of fields beyond the eleven every
/// version shares.
macro_rules! layout {
    ($($t:ty { $($opt:ident),* })*) => {$(
        impl Layout for $t {
            #[allow(clippy::needless_update, reason = "v12 has every field")]
            fn widen(&self) -> WideProps {
                WideProps {
                    name: self.name,
                    pciPath: self.pciPath,
                    guid: self.guid,
                    ptrSupport: self.ptrSupport,
                    speed: self.speed,
                    port: self.port,
                    latency: self.latency,
                    maxComms: self.maxComms,
                    maxRecvs: self.maxRecvs,
                    netDeviceType: self.netDeviceType,
                    netDeviceVersion: self.netDeviceVersion,
                    $($opt: Some(Field::widen(self.$opt)),)*
                    ..EMPTY
                }
            }

            fn narrow(w: &WideProps) -> Self {
                Self {
                    name: w.name,
                    pciPath: w.pciPath,
                    guid: w.guid,
                    ptrSupport: w.ptrSupport,
                    speed: w.speed,
                    port: w.port,
                    latency: w.latency,
                    maxComms: w.maxComms,
                    maxRecvs: w.maxRecvs,
                    netDeviceType: w.netDeviceType,
                    netDeviceVersion: w.netDeviceVersion,
                    $($opt: Field::narrow(w.$opt.unwrap_or_default()),)*
                }
            }
        }
    )*};
}

layout! {
    ncclNetProperties_v7_t {}
    ncclNetProperties_v8_t { regIsGlobal }
    ncclNetProperties_v9_t { regIsGlobal, forceFlush, vProps, maxP2pBytes, maxCollBytes }
    ncclNetProperties_v11_t {
        regIsGlobal, forceFlush, vProps, maxP2pBytes, maxCollBytes, maxMultiRequestSize
    }
    ncclNetProperties_v12_t {
        regIsGlobal, forceFlush, vProps, maxP2pBytes, maxCollBytes, maxMultiRequestSize, railId,
        planeId
    }
}

/// Properties in the layout of the table's version (v10 shares v9's).
#[derive(Debug, Clone, Copy)]
pub enum AnyProps {
    V7(ncclNetProperties_v7_t),
    V8(ncclNetProperties_v8_t),
    V9(ncclNetProperties_v9_t),
    V11(ncclNetProperties_v11_t),
    V12(ncclNetProperties_v12_t),
}

impl AnyProps {
    /// `version`'s layout holding `w`'s fields (those the version has).
    pub fn narrow(version: AbiVersion, w: &WideProps) -> AnyProps {
        match version {
            AbiVersion::V7 => AnyProps::V7(Layout::narrow(w)),
            AbiVersion::V8 => AnyProps::V8(Layout::narrow(w)),
            AbiVersion::V9 | AbiVersion::V10 => AnyProps::V9(Layout::narrow(w)),
            AbiVersion::V11 => AnyProps::V11(Layout::narrow(w)),
            AbiVersion::V12 => AnyProps::V12(Layout::narrow(w)),
        }
    }

    /// The fields of whichever layout this is.
    pub fn widen(&self) -> WideProps {
        match self {
            AnyProps::V7(p) => p.widen(),
            AnyProps::V8(p) => p.widen(),
            AnyProps::V9(p) => p.widen(),
            AnyProps::V11(p) => p.widen(),
            AnyProps::V12(p) => p.widen(),
        }
    }
}

/// Value the harness stores in integer property fields before `getProperties`, to see which
/// fields the plugin did not fill.
pub const PROP_UNSET: c_int = -0x5a5a_5a5b;

/// `getProperties` output, with the strings copied.
#[derive(Debug, Clone, PartialEq)]
pub struct Properties {
    pub name: Option<String>,
    pub pci_path: Option<String>,
    pub guid: u64,
    pub ptr_support: c_int,
    pub reg_is_global: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
    pub net_device_type: c_int,
    pub net_device_version: c_int,
    /// v9+: `forceFlush`.
    pub force_flush: Option<c_int>,
    /// v9+: the physical devices behind this one (`vProps`).
    pub vdevs: Option<Vec<c_int>>,
    /// v9+: `maxP2pBytes`, `maxCollBytes`.
    pub max_p2p_bytes: Option<usize>,
    pub max_coll_bytes: Option<usize>,
    /// v11+: `maxMultiRequestSize`.
    pub max_multi_request_size: Option<c_int>,
    /// v12: `railId`, `planeId`.
    pub rail_id: Option<i16>,
    pub plane_id: Option<i16>,
}

/// Value stored in `size_t` property fields before `getProperties`.
pub const PROP_UNSET_BYTES: usize = 0x5a5a_5a5a_5a5a_5a5a;
/// Value stored in `int16_t` property fields before `getProperties`.
pub const PROP_UNSET_I16: i16 = -0x5a5b;

impl Properties {
    /// The version's layout with every field at its "unset" marker.
    pub(crate) fn unset_raw(version: AbiVersion) -> AnyProps {
        let unset = WideProps {
            name: std::ptr::null_mut(),
            pciPath: std::ptr::null_mut(),
            guid: 0x5a5a_5a5a_5a5a_5a5a,
            ptrSupport: PROP_UNSET,
            speed: PROP_UNSET,
            port: PROP_UNSET,
            latency: f32::NAN,
            maxComms: PROP_UNSET,
            maxRecvs: PROP_UNSET,
            netDeviceType: PROP_UNSET,
            netDeviceVersion: PROP_UNSET,
            regIsGlobal: Some(PROP_UNSET),
            forceFlush: Some(PROP_UNSET),
            vProps: Some(VDevs {
                ndevs: PROP_UNSET,
                devs: [PROP_UNSET; 8],
                capacity: 8,
            }),
            maxP2pBytes: Some(PROP_UNSET_BYTES),
            maxCollBytes: Some(PROP_UNSET_BYTES),
            maxMultiRequestSize: Some(PROP_UNSET),
            railId: Some(PROP_UNSET_I16),
            planeId: Some(PROP_UNSET_I16),
        };
        AnyProps::narrow(version, &unset)
    }

    /// The copied form of what the plugin wrote (fields the version lacks are `None`; v7 has no
    /// `regIsGlobal`, reported as 0 as NCCL's adapters do).
    pub(crate) fn from_raw(p: &AnyProps) -> Properties {
        let w = p.widen();
        Properties {
            name: c_string(w.name),
            pci_path: c_string(w.pciPath),
            guid: w.guid,
            ptr_support: w.ptrSupport,
            reg_is_global: w.regIsGlobal.unwrap_or(0),
            speed: w.speed,
            port: w.port,
            latency: w.latency,
            max_comms: w.maxComms,
            max_recvs: w.maxRecvs,
            net_device_type: w.netDeviceType,
            net_device_version: w.netDeviceVersion,
            force_flush: w.forceFlush,
            vdevs: w.vProps.map(|v| v.members()),
            max_p2p_bytes: w.maxP2pBytes,
            max_coll_bytes: w.maxCollBytes,
            max_multi_request_size: w.maxMultiRequestSize,
            rail_id: w.railId,
            plane_id: w.planeId,
        }
    }

    /// Fields still holding the harness's "unset" markers.
    pub fn unset_fields(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        let ints = [
            ("ptrSupport", self.ptr_support),
            ("regIsGlobal", self.reg_is_global),
            ("speed", self.speed),
            ("port", self.port),
            ("maxComms", self.max_comms),
            ("maxRecvs", self.max_recvs),
            ("netDeviceType", self.net_device_type),
            ("netDeviceVersion", self.net_device_version),
        ];
        for (name, value) in ints {
            if value == PROP_UNSET {
                v.push(name);
            }
        }
        let optional_ints = [
            ("forceFlush", self.force_flush),
            ("maxMultiRequestSize", self.max_multi_request_size),
        ];
        for (name, value) in optional_ints {
            if value == Some(PROP_UNSET) {
                v.push(name);
            }
        }
        if self
            .vdevs
            .as_ref()
            .is_some_and(|d| d.is_empty() || d.contains(&PROP_UNSET))
        {
            v.push("vProps");
        }
        for (name, value) in [
            ("maxP2pBytes", self.max_p2p_bytes),
            ("maxCollBytes", self.max_coll_bytes),
        ] {
            if value == Some(PROP_UNSET_BYTES) {
                v.push(name);
            }
        }
        for (name, value) in [("railId", self.rail_id), ("planeId", self.plane_id)] {
            if value == Some(PROP_UNSET_I16) {
                v.push(name);
            }
        }
        if self.guid == 0x5a5a_5a5a_5a5a_5a5a {
            v.push("guid");
        }
        if self.latency.is_nan() {
            v.push("latency");
        }
        if self.name.is_none() {
            v.push("name");
        }
        v
    }
}

pub(crate) fn c_string(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: getProperties' contract: name/pciPath are NULL or NUL-terminated strings that stay
    // valid until the plugin is unloaded, and the harness never unloads it.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field set to a distinct value.
    fn full() -> WideProps {
        WideProps {
            name: c"mlx5_0".as_ptr().cast_mut(),
            pciPath: c"/sys/x".as_ptr().cast_mut(),
            guid: 0x1122_3344,
            ptrSupport: 3,
            speed: 400_000,
            port: 2,
            latency: 1.5,
            maxComms: 1000,
            maxRecvs: 8,
            netDeviceType: 4,
            netDeviceVersion: 5,
            regIsGlobal: Some(1),
            forceFlush: Some(6),
            vProps: Some(VDevs {
                ndevs: 2,
                devs: [7, 9, 11, 13, 15, 17, 19, 21],
                capacity: 8,
            }),
            maxP2pBytes: Some(1 << 31),
            maxCollBytes: Some(1 << 30),
            maxMultiRequestSize: Some(12),
            railId: Some(3),
            planeId: Some(-1),
        }
    }

    fn present(w: &WideProps) -> [bool; 8] {
        [
            w.regIsGlobal.is_some(),
            w.forceFlush.is_some(),
            w.vProps.is_some(),
            w.maxP2pBytes.is_some(),
            w.maxCollBytes.is_some(),
            w.maxMultiRequestSize.is_some(),
            w.railId.is_some(),
            w.planeId.is_some(),
        ]
    }

    #[test]
    fn each_version_keeps_exactly_the_fields_its_layout_has() {
        let w = full();
        let cases = [
            (AbiVersion::V7, [false; 8]),
            (
                AbiVersion::V8,
                [true, false, false, false, false, false, false, false],
            ),
            (
                AbiVersion::V9,
                [true, true, true, true, true, false, false, false],
            ),
            (
                AbiVersion::V10,
                [true, true, true, true, true, false, false, false],
            ),
            (
                AbiVersion::V11,
                [true, true, true, true, true, true, false, false],
            ),
            (AbiVersion::V12, [true; 8]),
        ];
        for (v, expected) in cases {
            let back = AnyProps::narrow(v, &w).widen();
            assert_eq!(present(&back), expected, "{v:?}");
            assert_eq!(
                (
                    back.name,
                    back.pciPath,
                    back.guid,
                    back.ptrSupport,
                    back.speed
                ),
                (w.name, w.pciPath, w.guid, w.ptrSupport, w.speed),
                "{v:?}"
            );
            assert_eq!(
                (back.port, back.maxComms, back.maxRecvs, back.latency),
                (w.port, w.maxComms, w.maxRecvs, w.latency),
                "{v:?}"
            );
            assert_eq!(
                (back.netDeviceType, back.netDeviceVersion),
                (w.netDeviceType, w.netDeviceVersion),
                "{v:?}"
            );
            for (got, want) in [
                (back.regIsGlobal, w.regIsGlobal),
                (back.forceFlush, w.forceFlush),
                (back.maxMultiRequestSize, w.maxMultiRequestSize),
            ] {
                assert!(got.is_none() || got == want, "{v:?}: {got:?} vs {want:?}");
            }
            for (got, want) in [
                (back.maxP2pBytes, w.maxP2pBytes),
                (back.maxCollBytes, w.maxCollBytes),
            ] {
                assert!(got.is_none() || got == want, "{v:?}: {got:?} vs {want:?}");
            }
            for (got, want) in [(back.railId, w.railId), (back.planeId, w.planeId)] {
                assert!(got.is_none() || got == want, "{v:?}: {got:?} vs {want:?}");
            }
        }
    }

    #[test]
    fn members_are_read_within_the_array_of_the_version_they_came_from() {
        let mut w = full();
        let v9 = AnyProps::narrow(AbiVersion::V9, &w).widen();
        let v12 = AnyProps::narrow(AbiVersion::V12, &w).widen();
        assert_eq!(v9.vProps.map(|v| v.members()), Some(vec![7, 9]));
        assert_eq!(v12.vProps.map(|v| v.members()), Some(vec![7, 9]));
        // Five members fit v12's array of 8 but not v9's array of 4.
        w.vProps = w.vProps.map(|v| VDevs { ndevs: 5, ..v });
        let v9 = AnyProps::narrow(AbiVersion::V9, &w).widen();
        let v12 = AnyProps::narrow(AbiVersion::V12, &w).widen();
        assert_eq!(v9.vProps.map(|v| v.members()), Some(vec![5]));
        assert_eq!(
            v12.vProps.map(|v| v.members()),
            Some(vec![7, 9, 11, 13, 15])
        );
    }
}
