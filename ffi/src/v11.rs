//! ABI v11 (`ncclNetPlugin_v11`, NCCL 2.28+): `init` once per communicator with a context that
//! `listen`/`connect` take and `finalize` releases; `setNetAttr` hints; `maxMultiRequestSize`.

use crate::common::*;
use crate::v10::{IrecvFn, IsendFn};
use core::ffi::{c_char, c_int, c_void};

/// `ncclNetProperties_v11_t` (112 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclNetProperties_v11_t {
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
    pub vProps: ncclNetVDeviceProps_v11_t,
    /// Most bytes one `isend`/`irecv` buffer may carry.
    pub maxP2pBytes: usize,
    pub maxCollBytes: usize,
    /// Most requests one multi-request may combine (NCCL does not read it yet).
    pub maxMultiRequestSize: c_int,
}

/// `init(&ctx, commId, config, logger, profiler)`: once per communicator.
pub type InitFn = unsafe extern "C" fn(
    ctx: *mut *mut c_void,
    commId: u64,
    config: *mut ncclNetCommConfig_v11_t,
    logFunction: ncclDebugLogger_t,
    profFunction: ncclProfilerCallback_t,
) -> ncclResult_t;
pub type GetPropertiesFn =
    unsafe extern "C" fn(dev: c_int, props: *mut ncclNetProperties_v11_t) -> ncclResult_t;
pub type ListenFn = unsafe extern "C" fn(
    ctx: *mut c_void,
    dev: c_int,
    handle: *mut c_void,
    listenComm: *mut *mut c_void,
) -> ncclResult_t;
pub type ConnectFn = unsafe extern "C" fn(
    ctx: *mut c_void,
    dev: c_int,
    handle: *mut c_void,
    sendComm: *mut *mut c_void,
    sendDevComm: *mut *mut ncclNetDeviceHandle_v11_t,
) -> ncclResult_t;
pub type MakeVDeviceFn =
    unsafe extern "C" fn(d: *mut c_int, props: *mut ncclNetVDeviceProps_v11_t) -> ncclResult_t;
pub type FinalizeFn = unsafe extern "C" fn(ctx: *mut c_void) -> ncclResult_t;
pub type SetNetAttrFn =
    unsafe extern "C" fn(ctx: *mut c_void, attr: *mut ncclNetAttr_v11_t) -> ncclResult_t;

/// `ncclNet_v11_t` (176 bytes): v10's members with the context, then `finalize`, `setNetAttr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclNet_v11_t {
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
    pub finalize: Option<FinalizeFn>,
    pub setNetAttr: Option<SetNetAttrFn>,
}

// SAFETY: immutable after construction (a static name and function pointers).
unsafe impl Sync for ncclNet_v11_t {}

#[cfg(target_pointer_width = "64")]
const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<ncclNet_v11_t>() == 176);
    assert!(align_of::<ncclNet_v11_t>() == 8);
    assert!(offset_of!(ncclNet_v11_t, name) == 0);
    assert!(offset_of!(ncclNet_v11_t, init) == 8);
    assert!(offset_of!(ncclNet_v11_t, devices) == 16);
    assert!(offset_of!(ncclNet_v11_t, getProperties) == 24);
    assert!(offset_of!(ncclNet_v11_t, listen) == 32);
    assert!(offset_of!(ncclNet_v11_t, connect) == 40);
    assert!(offset_of!(ncclNet_v11_t, accept) == 48);
    assert!(offset_of!(ncclNet_v11_t, regMr) == 56);
    assert!(offset_of!(ncclNet_v11_t, regMrDmaBuf) == 64);
    assert!(offset_of!(ncclNet_v11_t, deregMr) == 72);
    assert!(offset_of!(ncclNet_v11_t, isend) == 80);
    assert!(offset_of!(ncclNet_v11_t, irecv) == 88);
    assert!(offset_of!(ncclNet_v11_t, iflush) == 96);
    assert!(offset_of!(ncclNet_v11_t, test) == 104);
    assert!(offset_of!(ncclNet_v11_t, closeSend) == 112);
    assert!(offset_of!(ncclNet_v11_t, closeRecv) == 120);
    assert!(offset_of!(ncclNet_v11_t, closeListen) == 128);
    assert!(offset_of!(ncclNet_v11_t, getDeviceMr) == 136);
    assert!(offset_of!(ncclNet_v11_t, irecvConsumed) == 144);
    assert!(offset_of!(ncclNet_v11_t, makeVDevice) == 152);
    assert!(offset_of!(ncclNet_v11_t, finalize) == 160);
    assert!(offset_of!(ncclNet_v11_t, setNetAttr) == 168);

    assert!(size_of::<ncclNetProperties_v11_t>() == 112);
    assert!(align_of::<ncclNetProperties_v11_t>() == 8);
    assert!(offset_of!(ncclNetProperties_v11_t, name) == 0);
    assert!(offset_of!(ncclNetProperties_v11_t, pciPath) == 8);
    assert!(offset_of!(ncclNetProperties_v11_t, guid) == 16);
    assert!(offset_of!(ncclNetProperties_v11_t, ptrSupport) == 24);
    assert!(offset_of!(ncclNetProperties_v11_t, regIsGlobal) == 28);
    assert!(offset_of!(ncclNetProperties_v11_t, forceFlush) == 32);
    assert!(offset_of!(ncclNetProperties_v11_t, speed) == 36);
    assert!(offset_of!(ncclNetProperties_v11_t, port) == 40);
    assert!(offset_of!(ncclNetProperties_v11_t, latency) == 44);
    assert!(offset_of!(ncclNetProperties_v11_t, maxComms) == 48);
    assert!(offset_of!(ncclNetProperties_v11_t, maxRecvs) == 52);
    assert!(offset_of!(ncclNetProperties_v11_t, netDeviceType) == 56);
    assert!(offset_of!(ncclNetProperties_v11_t, netDeviceVersion) == 60);
    assert!(offset_of!(ncclNetProperties_v11_t, vProps) == 64);
    assert!(offset_of!(ncclNetProperties_v11_t, maxP2pBytes) == 88);
    assert!(offset_of!(ncclNetProperties_v11_t, maxCollBytes) == 96);
    assert!(offset_of!(ncclNetProperties_v11_t, maxMultiRequestSize) == 104);
};
