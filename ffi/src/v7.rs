//! ABI v7 (`ncclNetPlugin_v7`, the only table NCCL 2.19 loads): `int` sizes in `regMr`, `isend`
//! and `irecv`; properties without `regIsGlobal` (56 bytes).

use crate::common::*;
use crate::v8::{IrecvFn, IsendFn};
use core::ffi::{c_char, c_int, c_void};

/// `ncclNetProperties_v7_t` (56 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclNetProperties_v7_t {
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
}

pub type GetPropertiesFn =
    unsafe extern "C" fn(dev: c_int, props: *mut ncclNetProperties_v7_t) -> ncclResult_t;
/// `regMr` of v7: `int` size.
pub type RegMrFn = unsafe extern "C" fn(
    comm: *mut c_void,
    data: *mut c_void,
    size: c_int,
    type_: c_int,
    mhandle: *mut *mut c_void,
) -> ncclResult_t;

/// `ncclNet_v7_t` (152 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclNet_v7_t {
    pub name: *const c_char,
    pub init: Option<InitFn>,
    pub devices: Option<DevicesFn>,
    pub getProperties: Option<GetPropertiesFn>,
    pub listen: Option<ListenFn>,
    pub connect: Option<ConnectFn>,
    pub accept: Option<AcceptFn>,
    pub regMr: Option<RegMrFn>,
    pub regMrDmaBuf: Option<RegMrDmaBufFn>,
    pub deregMr: Option<DeregMrFn>,
    pub isend: Option<IsendFn>,
    pub irecv: Option<IrecvFn>,
    pub iflush: Option<IflushFn>,
    pub test: Option<TestFn>,
    pub closeSend: Option<CloseFn>,
    pub closeRecv: Option<CloseFn>,
    pub closeListen: Option<CloseFn>,
    pub getDeviceMr: Option<GetDeviceMrFn>,
    pub irecvConsumed: Option<IrecvConsumedFn>,
}

// SAFETY: immutable after construction (a static name and function pointers).
unsafe impl Sync for ncclNet_v7_t {}

#[cfg(target_pointer_width = "64")]
const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<ncclNet_v7_t>() == 152);
    assert!(align_of::<ncclNet_v7_t>() == 8);
    assert!(offset_of!(ncclNet_v7_t, name) == 0);
    assert!(offset_of!(ncclNet_v7_t, init) == 8);
    assert!(offset_of!(ncclNet_v7_t, devices) == 16);
    assert!(offset_of!(ncclNet_v7_t, getProperties) == 24);
    assert!(offset_of!(ncclNet_v7_t, listen) == 32);
    assert!(offset_of!(ncclNet_v7_t, connect) == 40);
    assert!(offset_of!(ncclNet_v7_t, accept) == 48);
    assert!(offset_of!(ncclNet_v7_t, regMr) == 56);
    assert!(offset_of!(ncclNet_v7_t, regMrDmaBuf) == 64);
    assert!(offset_of!(ncclNet_v7_t, deregMr) == 72);
    assert!(offset_of!(ncclNet_v7_t, isend) == 80);
    assert!(offset_of!(ncclNet_v7_t, irecv) == 88);
    assert!(offset_of!(ncclNet_v7_t, iflush) == 96);
    assert!(offset_of!(ncclNet_v7_t, test) == 104);
    assert!(offset_of!(ncclNet_v7_t, closeSend) == 112);
    assert!(offset_of!(ncclNet_v7_t, closeRecv) == 120);
    assert!(offset_of!(ncclNet_v7_t, closeListen) == 128);
    assert!(offset_of!(ncclNet_v7_t, getDeviceMr) == 136);
    assert!(offset_of!(ncclNet_v7_t, irecvConsumed) == 144);

    assert!(size_of::<ncclNetProperties_v7_t>() == 56);
    assert!(offset_of!(ncclNetProperties_v7_t, name) == 0);
    assert!(offset_of!(ncclNetProperties_v7_t, pciPath) == 8);
    assert!(offset_of!(ncclNetProperties_v7_t, guid) == 16);
    assert!(offset_of!(ncclNetProperties_v7_t, ptrSupport) == 24);
    assert!(offset_of!(ncclNetProperties_v7_t, speed) == 28);
    assert!(offset_of!(ncclNetProperties_v7_t, port) == 32);
    assert!(offset_of!(ncclNetProperties_v7_t, latency) == 36);
    assert!(offset_of!(ncclNetProperties_v7_t, maxComms) == 40);
    assert!(offset_of!(ncclNetProperties_v7_t, maxRecvs) == 44);
    assert!(offset_of!(ncclNetProperties_v7_t, netDeviceType) == 48);
    assert!(offset_of!(ncclNetProperties_v7_t, netDeviceVersion) == 52);
};
