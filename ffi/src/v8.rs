//! ABI v8 (`ncclNetPlugin_v8`, NCCL 2.20+): `size_t` in `regMr`, `regIsGlobal` in the properties.

use crate::common::*;
use core::ffi::{c_char, c_int, c_void};

/// `ncclNetProperties_v8_t` (64 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclNetProperties_v8_t {
    pub name: *mut c_char,
    pub pciPath: *mut c_char,
    pub guid: u64,
    pub ptrSupport: c_int,
    pub regIsGlobal: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub maxComms: c_int,
    pub maxRecvs: c_int,
    pub netDeviceType: c_int,
    pub netDeviceVersion: c_int,
}

pub type GetPropertiesFn =
    unsafe extern "C" fn(dev: c_int, props: *mut ncclNetProperties_v8_t) -> ncclResult_t;
/// `isend` of v7 and v8: `int` size.
pub type IsendFn = unsafe extern "C" fn(
    sendComm: *mut c_void,
    data: *mut c_void,
    size: c_int,
    tag: c_int,
    mhandle: *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t;
/// `irecv` of v7 and v8: `int` sizes.
pub type IrecvFn = unsafe extern "C" fn(
    recvComm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut c_int,
    tags: *mut c_int,
    mhandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t;

/// `ncclNet_v8_t` (152 bytes): the name followed by 18 function pointers, in this order.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclNet_v8_t {
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

// SAFETY: the table is immutable after construction: a pointer to a static NUL-terminated name and
// plain function pointers. Sharing it between threads (NCCL reads it from several) is sound.
unsafe impl Sync for ncclNet_v8_t {}

/// Symbol name NCCL looks up for this table.
pub const NCCL_NET_PLUGIN_V8_SYMBOL: &str = "ncclNetPlugin_v8";

#[cfg(target_pointer_width = "64")]
const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<ncclNet_v8_t>() == 152);
    assert!(align_of::<ncclNet_v8_t>() == 8);
    assert!(offset_of!(ncclNet_v8_t, name) == 0);
    assert!(offset_of!(ncclNet_v8_t, init) == 8);
    assert!(offset_of!(ncclNet_v8_t, devices) == 16);
    assert!(offset_of!(ncclNet_v8_t, getProperties) == 24);
    assert!(offset_of!(ncclNet_v8_t, listen) == 32);
    assert!(offset_of!(ncclNet_v8_t, connect) == 40);
    assert!(offset_of!(ncclNet_v8_t, accept) == 48);
    assert!(offset_of!(ncclNet_v8_t, regMr) == 56);
    assert!(offset_of!(ncclNet_v8_t, regMrDmaBuf) == 64);
    assert!(offset_of!(ncclNet_v8_t, deregMr) == 72);
    assert!(offset_of!(ncclNet_v8_t, isend) == 80);
    assert!(offset_of!(ncclNet_v8_t, irecv) == 88);
    assert!(offset_of!(ncclNet_v8_t, iflush) == 96);
    assert!(offset_of!(ncclNet_v8_t, test) == 104);
    assert!(offset_of!(ncclNet_v8_t, closeSend) == 112);
    assert!(offset_of!(ncclNet_v8_t, closeRecv) == 120);
    assert!(offset_of!(ncclNet_v8_t, closeListen) == 128);
    assert!(offset_of!(ncclNet_v8_t, getDeviceMr) == 136);
    assert!(offset_of!(ncclNet_v8_t, irecvConsumed) == 144);

    assert!(size_of::<ncclNetProperties_v8_t>() == 64);
    assert!(offset_of!(ncclNetProperties_v8_t, name) == 0);
    assert!(offset_of!(ncclNetProperties_v8_t, pciPath) == 8);
    assert!(offset_of!(ncclNetProperties_v8_t, guid) == 16);
    assert!(offset_of!(ncclNetProperties_v8_t, ptrSupport) == 24);
    assert!(offset_of!(ncclNetProperties_v8_t, regIsGlobal) == 28);
    assert!(offset_of!(ncclNetProperties_v8_t, speed) == 32);
    assert!(offset_of!(ncclNetProperties_v8_t, port) == 36);
    assert!(offset_of!(ncclNetProperties_v8_t, latency) == 40);
    assert!(offset_of!(ncclNetProperties_v8_t, maxComms) == 44);
    assert!(offset_of!(ncclNetProperties_v8_t, maxRecvs) == 48);
    assert!(offset_of!(ncclNetProperties_v8_t, netDeviceType) == 52);
    assert!(offset_of!(ncclNetProperties_v8_t, netDeviceVersion) == 56);
};
