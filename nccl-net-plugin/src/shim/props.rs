//! Each version's properties layout, filled from the core's [`DeviceProps`]: only the fields a
//! version has, with the values the core decided. The fields every version shares are written
//! once (`layout!`); each version lists only its own, each value computed by one helper.

use crate::plugin::DeviceProps;
use core::ffi::c_int;
use ferro_ffi::*;

fn vprops<const N: usize>(p: &DeviceProps) -> (c_int, [c_int; N]) {
    let mut devs = [0; N];
    for (d, m) in devs.iter_mut().zip(&p.members) {
        *d = *m as c_int;
    }
    (p.members.len().min(N) as c_int, devs)
}

/// `vProps` in the v9 to v11 layout (4 members).
fn vprops_v9(p: &DeviceProps) -> ncclNetVDeviceProps_v9_t {
    let (ndevs, devs) = vprops(p);
    ncclNetVDeviceProps_v9_t { ndevs, devs }
}

/// `vProps` in the v12 layout (8 members).
fn vprops_v12(p: &DeviceProps) -> ncclNetVDeviceProps_v12_t {
    let (ndevs, devs) = vprops(p);
    ncclNetVDeviceProps_v12_t { ndevs, devs }
}

/// `maxP2pBytes` / `maxCollBytes`: what one request carries (`plugin::MAX_REQUEST_BYTES`,
/// 4 GiB - 1), as is; the clamp into NCCL's accepted range (1 byte to 1 TiB) never changes it.
fn max_bytes(p: &DeviceProps) -> usize {
    usize::try_from(p.max_p2p_bytes)
        .unwrap_or(usize::MAX)
        .clamp(1, NCCL_MAX_NET_SIZE_BYTES)
}

/// Requests one multi-request may combine: this plugin does not combine requests.
const MAX_MULTI_REQUEST_SIZE: c_int = 1;

/// The struct `$t` from `$p`: the eleven fields every version has, written here once, then the
/// version's own fields as given.
macro_rules! layout {
    ($t:ident, $p:ident $(, $field:ident: $value:expr)* $(,)?) => {
        $t {
            name: $p.name,
            pciPath: $p.pci_path,
            guid: $p.guid,
            ptrSupport: $p.ptr_support,
            speed: $p.speed,
            port: $p.port,
            latency: 0.0,
            maxComms: $p.max_comms,
            maxRecvs: $p.max_recvs,
            netDeviceType: NCCL_NET_DEVICE_HOST,
            netDeviceVersion: NCCL_NET_DEVICE_INVALID_VERSION,
            $($field: $value,)*
        }
    };
}

pub(super) fn v7(p: &DeviceProps) -> ncclNetProperties_v7_t {
    layout!(ncclNetProperties_v7_t, p)
}

pub(super) fn v8(p: &DeviceProps) -> ncclNetProperties_v8_t {
    layout!(
        ncclNetProperties_v8_t,
        p,
        regIsGlobal: c_int::from(p.reg_is_global),
    )
}

/// v9 and v10 (one layout).
pub(super) fn v9(p: &DeviceProps) -> ncclNetProperties_v9_t {
    layout!(
        ncclNetProperties_v9_t,
        p,
        regIsGlobal: c_int::from(p.reg_is_global),
        forceFlush: c_int::from(p.force_flush),
        vProps: vprops_v9(p),
        maxP2pBytes: max_bytes(p),
        maxCollBytes: max_bytes(p),
    )
}

pub(super) fn v11(p: &DeviceProps) -> ncclNetProperties_v11_t {
    layout!(
        ncclNetProperties_v11_t,
        p,
        regIsGlobal: c_int::from(p.reg_is_global),
        forceFlush: c_int::from(p.force_flush),
        vProps: vprops_v9(p),
        maxP2pBytes: max_bytes(p),
        maxCollBytes: max_bytes(p),
        maxMultiRequestSize: MAX_MULTI_REQUEST_SIZE,
    )
}

pub(super) fn v12(p: &DeviceProps) -> ncclNetProperties_v12_t {
    layout!(
        ncclNetProperties_v12_t,
        p,
        regIsGlobal: c_int::from(p.reg_is_global),
        forceFlush: c_int::from(p.force_flush),
        vProps: vprops_v12(p),
        maxP2pBytes: max_bytes(p),
        maxCollBytes: max_bytes(p),
        maxMultiRequestSize: MAX_MULTI_REQUEST_SIZE,
        // From NCCL_IB_HCA's `<hca>:<port>:<rail>:<plane>` entries (NCCL_NET_ID_UNDEF otherwise).
        railId: p.rail_id,
        planeId: p.plane_id,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> DeviceProps {
        DeviceProps {
            name: c"rxe0".as_ptr().cast_mut(),
            pci_path: core::ptr::null_mut(),
            guid: 0x1122,
            ptr_support: NCCL_PTR_HOST,
            reg_is_global: true,
            force_flush: false,
            speed: 10_000,
            port: 1,
            max_comms: 100,
            max_recvs: 8,
            members: vec![3],
            max_p2p_bytes: 1 << 31,
            rail_id: NCCL_NET_ID_UNDEF,
            plane_id: NCCL_NET_ID_UNDEF,
        }
    }

    #[test]
    fn every_layout_carries_the_same_core_values() {
        let p = sample();
        let (a, b, c, d, e) = (v7(&p), v8(&p), v9(&p), v11(&p), v12(&p));
        assert_eq!([a.speed, b.speed, c.speed, d.speed, e.speed], [10_000; 5]);
        assert_eq!([a.port, b.port, c.port, d.port, e.port], [1; 5]);
        assert_eq!(
            [a.maxRecvs, b.maxRecvs, c.maxRecvs, d.maxRecvs, e.maxRecvs],
            [8; 5]
        );
        assert_eq!(b.regIsGlobal, 1);
        assert_eq!((c.forceFlush, d.forceFlush, e.forceFlush), (0, 0, 0));
        assert_eq!((c.vProps.ndevs, c.vProps.devs), (1, [3, 0, 0, 0]));
        assert_eq!((e.vProps.ndevs, e.vProps.devs[0]), (1, 3));
        assert_eq!([c.maxP2pBytes, d.maxP2pBytes, e.maxP2pBytes], [1 << 31; 3]);
        assert_eq!(d.maxMultiRequestSize, 1);
        assert_eq!((e.railId, e.planeId), (-1, -1));
    }

    #[test]
    fn v12_reports_the_rail_and_plane_it_is_given() {
        let p = DeviceProps {
            rail_id: 2,
            plane_id: crate::rails::PLANE_VIRTUAL_BIT | 0b110,
            ..sample()
        };
        let e = v12(&p);
        assert_eq!((e.railId, e.planeId), (2, (1 << 14) | 0b110));
    }

    #[test]
    fn max_bytes_stay_within_what_nccl_accepts() {
        let mut p = sample();
        p.max_p2p_bytes = u64::MAX;
        assert_eq!(v9(&p).maxP2pBytes, NCCL_MAX_NET_SIZE_BYTES);
        p.max_p2p_bytes = 1;
        assert_eq!(v9(&p).maxCollBytes, 1);
        p.max_p2p_bytes = 0;
        assert_eq!(v9(&p).maxCollBytes, 1);
    }

    #[test]
    fn v9_and_later_report_the_32_bit_request_limit_as_is() {
        let mut p = sample();
        p.max_p2p_bytes = crate::plugin::MAX_REQUEST_BYTES;
        let (c, d, e) = (v9(&p), v11(&p), v12(&p));
        for (p2p, coll) in [
            (c.maxP2pBytes, c.maxCollBytes),
            (d.maxP2pBytes, d.maxCollBytes),
            (e.maxP2pBytes, e.maxCollBytes),
        ] {
            assert_eq!((p2p, coll), (4_294_967_295, 4_294_967_295));
        }
    }
}
