//! ABI v9 (`ncclNetPlugin_v9`, NCCL 2.24+): `size_t` sizes in `isend`/`irecv`, `makeVDevice`,
//! and properties with `forceFlush`, the virtual device's members and the per-request limits.

use crate::common::*;
use core::ffi::{c_char, c_int, c_void};

/// `ncclNetProperties_v9_t` (104 bytes; v10 has the same layout).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclNetProperties_v9_t {
    pub name: *mut c_char,
    pub pciPath: *mut c_char,
    pub guid: u64,
    pub ptrSupport: c_int,
    pub regIsGlobal: c_int,
    /// 1: NCCL flushes after every GPUDirect receive, whatever the GPU.
    pub forceFlush: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub maxComms: c_int,
    pub maxRecvs: c_int,
    pub netDeviceType: c_int,
    pub netDeviceVersion: c_int,
    pub vProps: ncclNetVDeviceProps_v9_t,
    /// Most bytes one `isend`/`irecv` buffer may carry.
    pub maxP2pBytes: usize,
    pub maxCollBytes: usize,
}

pub type GetPropertiesFn =
    unsafe extern "C" fn(dev: c_int, props: *mut ncclNetProperties_v9_t) -> ncclResult_t;
/// `isend` of v9: `size_t` size.
pub type IsendFn = unsafe extern "C" fn(
    sendComm: *mut c_void,
    data: *mut c_void,
    size: usize,
    tag: c_int,
    mhandle: *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t;
/// `irecv` of v9: `size_t` sizes.
pub type IrecvFn = unsafe extern "C" fn(
    recvComm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut usize,
    tags: *mut c_int,
    mhandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t;
/// `makeVDevice(int* d, props)`: fuses physical devices into a new one, whose index goes to `*d`.
pub type MakeVDeviceFn =
    unsafe extern "C" fn(d: *mut c_int, props: *mut ncclNetVDeviceProps_v9_t) -> ncclResult_t;

/// `ncclNet_v9_t` (160 bytes): v8's members, then `makeVDevice`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclNet_v9_t {
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
    pub makeVDevice: Option<MakeVDeviceFn>,
}

// SAFETY: immutable after construction (a static name and function pointers).
unsafe impl Sync for ncclNet_v9_t {}

#[cfg(target_pointer_width = "64")]
const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<ncclNet_v9_t>() == 160);
    assert!(align_of::<ncclNet_v9_t>() == 8);
    assert!(offset_of!(ncclNet_v9_t, name) == 0);
    assert!(offset_of!(ncclNet_v9_t, init) == 8);
    assert!(offset_of!(ncclNet_v9_t, devices) == 16);
    assert!(offset_of!(ncclNet_v9_t, getProperties) == 24);
    assert!(offset_of!(ncclNet_v9_t, listen) == 32);
    assert!(offset_of!(ncclNet_v9_t, connect) == 40);
    assert!(offset_of!(ncclNet_v9_t, accept) == 48);
    assert!(offset_of!(ncclNet_v9_t, regMr) == 56);
    assert!(offset_of!(ncclNet_v9_t, regMrDmaBuf) == 64);
    assert!(offset_of!(ncclNet_v9_t, deregMr) == 72);
    assert!(offset_of!(ncclNet_v9_t, isend) == 80);
    assert!(offset_of!(ncclNet_v9_t, irecv) == 88);
    assert!(offset_of!(ncclNet_v9_t, iflush) == 96);
    assert!(offset_of!(ncclNet_v9_t, test) == 104);
    assert!(offset_of!(ncclNet_v9_t, closeSend) == 112);
    assert!(offset_of!(ncclNet_v9_t, closeRecv) == 120);
    assert!(offset_of!(ncclNet_v9_t, closeListen) == 128);
    assert!(offset_of!(ncclNet_v9_t, getDeviceMr) == 136);
    assert!(offset_of!(ncclNet_v9_t, irecvConsumed) == 144);
    assert!(offset_of!(ncclNet_v9_t, makeVDevice) == 152);

    assert!(size_of::<ncclNetProperties_v9_t>() == 104);
    assert!(align_of::<ncclNetProperties_v9_t>() == 8);
    assert!(offset_of!(ncclNetProperties_v9_t, name) == 0);
    assert!(offset_of!(ncclNetProperties_v9_t, pciPath) == 8);
    assert!(offset_of!(ncclNetProperties_v9_t, guid) == 16);
    assert!(offset_of!(ncclNetProperties_v9_t, ptrSupport) == 24);
    assert!(offset_of!(ncclNetProperties_v9_t, regIsGlobal) == 28);
    assert!(offset_of!(ncclNetProperties_v9_t, forceFlush) == 32);
    assert!(offset_of!(ncclNetProperties_v9_t, speed) == 36);
    assert!(offset_of!(ncclNetProperties_v9_t, port) == 40);
    assert!(offset_of!(ncclNetProperties_v9_t, latency) == 44);
    assert!(offset_of!(ncclNetProperties_v9_t, maxComms) == 48);
    assert!(offset_of!(ncclNetProperties_v9_t, maxRecvs) == 52);
    assert!(offset_of!(ncclNetProperties_v9_t, netDeviceType) == 56);
    assert!(offset_of!(ncclNetProperties_v9_t, netDeviceVersion) == 60);
    assert!(offset_of!(ncclNetProperties_v9_t, vProps) == 64);
    assert!(offset_of!(ncclNetProperties_v9_t, maxP2pBytes) == 88);
    assert!(offset_of!(ncclNetProperties_v9_t, maxCollBytes) == 96);
};
