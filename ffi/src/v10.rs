//! ABI v10 (`ncclNetPlugin_v10`, NCCL 2.26+): `init` takes the profiler callback, `connect` the
//! communicator's config (traffic class), `isend`/`irecv` the profiler handles. Properties and
//! virtual-device members keep v9's layout.

use crate::common::*;
use crate::v9::MakeVDeviceFn;
use core::ffi::{c_char, c_int, c_void};

/// `ncclNetProperties_v10_t`: v9's layout (104 bytes).
pub type ncclNetProperties_v10_t = crate::v9::ncclNetProperties_v9_t;

pub type InitFn = unsafe extern "C" fn(
    logFunction: ncclDebugLogger_t,
    profFunction: ncclProfilerCallback_t,
) -> ncclResult_t;
pub type GetPropertiesFn =
    unsafe extern "C" fn(dev: c_int, props: *mut ncclNetProperties_v10_t) -> ncclResult_t;
/// `connect` of v10: the communicator's config (a stack object of the caller) before the handle.
pub type ConnectFn = unsafe extern "C" fn(
    dev: c_int,
    config: *mut ncclNetCommConfig_v10_t,
    handle: *mut c_void,
    sendComm: *mut *mut c_void,
    sendDevComm: *mut *mut ncclNetDeviceHandle_v10_t,
) -> ncclResult_t;
/// `isend` of v10 … v12: `size_t` size and the profiler handle.
pub type IsendFn = unsafe extern "C" fn(
    sendComm: *mut c_void,
    data: *mut c_void,
    size: usize,
    tag: c_int,
    mhandle: *mut c_void,
    phandle: *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t;
/// `irecv` of v10 … v12: `size_t` sizes and one profiler handle per buffer.
pub type IrecvFn = unsafe extern "C" fn(
    recvComm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut usize,
    tags: *mut c_int,
    mhandles: *mut *mut c_void,
    phandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t;

/// `ncclNet_v10_t` (160 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclNet_v10_t {
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
unsafe impl Sync for ncclNet_v10_t {}

#[cfg(target_pointer_width = "64")]
const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<ncclNet_v10_t>() == 160);
    assert!(align_of::<ncclNet_v10_t>() == 8);
    assert!(offset_of!(ncclNet_v10_t, name) == 0);
    assert!(offset_of!(ncclNet_v10_t, init) == 8);
    assert!(offset_of!(ncclNet_v10_t, devices) == 16);
    assert!(offset_of!(ncclNet_v10_t, getProperties) == 24);
    assert!(offset_of!(ncclNet_v10_t, listen) == 32);
    assert!(offset_of!(ncclNet_v10_t, connect) == 40);
    assert!(offset_of!(ncclNet_v10_t, accept) == 48);
    assert!(offset_of!(ncclNet_v10_t, regMr) == 56);
    assert!(offset_of!(ncclNet_v10_t, regMrDmaBuf) == 64);
    assert!(offset_of!(ncclNet_v10_t, deregMr) == 72);
    assert!(offset_of!(ncclNet_v10_t, isend) == 80);
    assert!(offset_of!(ncclNet_v10_t, irecv) == 88);
    assert!(offset_of!(ncclNet_v10_t, iflush) == 96);
    assert!(offset_of!(ncclNet_v10_t, test) == 104);
    assert!(offset_of!(ncclNet_v10_t, closeSend) == 112);
    assert!(offset_of!(ncclNet_v10_t, closeRecv) == 120);
    assert!(offset_of!(ncclNet_v10_t, closeListen) == 128);
    assert!(offset_of!(ncclNet_v10_t, getDeviceMr) == 136);
    assert!(offset_of!(ncclNet_v10_t, irecvConsumed) == 144);
    assert!(offset_of!(ncclNet_v10_t, makeVDevice) == 152);
    assert!(size_of::<ncclNetProperties_v10_t>() == 104);
};
