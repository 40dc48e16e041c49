//! NCCL external network plugin ABI, version 8 (`ncclNet_v8_t`).
//!
//! Every type here is written by hand from the documented layout (see `docs/DESIGN.md`, "ABI") and
//! pinned by compile-time size/offset assertions at the bottom of this file. Nothing in this crate
//! calls anything; it only describes what crosses the C boundary.
//!
//! Values that come *from* C (result codes, pointer-support bits) are transparent integer newtypes
//! with named constants, never Rust enums, so an unexpected value cannot be undefined behaviour.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

use core::ffi::{c_char, c_int, c_ulong, c_void};

/// `ncclResult_t`: a C enum, carried as a 32-bit integer.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ncclResult_t(pub c_int);

impl ncclResult_t {
    pub const Success: Self = Self(0);
    pub const UnhandledCudaError: Self = Self(1);
    pub const SystemError: Self = Self(2);
    pub const InternalError: Self = Self(3);
    pub const InvalidArgument: Self = Self(4);
    pub const InvalidUsage: Self = Self(5);
    pub const RemoteError: Self = Self(6);
    pub const InProgress: Self = Self(7);

    /// The constant's name, or `None` for a value outside the known set.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "ncclSuccess",
            1 => "ncclUnhandledCudaError",
            2 => "ncclSystemError",
            3 => "ncclInternalError",
            4 => "ncclInvalidArgument",
            5 => "ncclInvalidUsage",
            6 => "ncclRemoteError",
            7 => "ncclInProgress",
            _ => return None,
        })
    }
}

impl core::fmt::Debug for ncclResult_t {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "ncclResult_t({})", self.0),
        }
    }
}

/// Log levels passed to the logger (`ncclDebugLogLevel`).
pub mod log_level {
    use core::ffi::c_int;
    pub const NONE: c_int = 0;
    pub const VERSION: c_int = 1;
    pub const WARN: c_int = 2;
    pub const INFO: c_int = 3;
    pub const ABORT: c_int = 4;
    pub const TRACE: c_int = 5;
}

/// Subsystem flags passed to the logger (`ncclDebugLogSubSys`).
pub mod log_flags {
    use core::ffi::c_ulong;
    pub const INIT: c_ulong = 0x1;
    pub const COLL: c_ulong = 0x2;
    pub const P2P: c_ulong = 0x4;
    pub const SHM: c_ulong = 0x8;
    pub const NET: c_ulong = 0x10;
    pub const GRAPH: c_ulong = 0x20;
    pub const TUNING: c_ulong = 0x40;
    pub const ENV: c_ulong = 0x80;
    pub const ALLOC: c_ulong = 0x100;
    pub const CALL: c_ulong = 0x200;
    pub const PROXY: c_ulong = 0x400;
    pub const REG: c_ulong = 0x2000;
    pub const ALL: c_ulong = !0;
}

/// `ncclDebugLogger_t`: `void (*)(level, flags, filefunc, line, fmt, ...)`, a C variadic function.
/// Call it with the format `"%s"` and one preformatted C string, never with text as the format.
pub type ncclDebugLogger_t = Option<
    unsafe extern "C" fn(
        level: c_int,
        flags: c_ulong,
        filefunc: *const c_char,
        line: c_int,
        fmt: *const c_char,
        ...
    ),
>;

/// Bits of `ncclNetProperties_v8_t::ptrSupport`.
pub const NCCL_PTR_HOST: c_int = 0x1;
pub const NCCL_PTR_CUDA: c_int = 0x2;
pub const NCCL_PTR_DMABUF: c_int = 0x4;

/// Largest opaque listen handle NCCL carries between ranks.
pub const NCCL_NET_HANDLE_MAXSIZE: usize = 128;
/// Requests NCCL may keep in flight on one comm (per buffer of a grouped receive).
pub const NCCL_NET_MAX_REQUESTS: usize = 32;
/// `type` argument of regMr/regMrDmaBuf: host memory.
pub const NCCL_PTR_TYPE_HOST: c_int = NCCL_PTR_HOST;
/// `type` argument of regMr/regMrDmaBuf: CUDA device memory.
pub const NCCL_PTR_TYPE_CUDA: c_int = NCCL_PTR_CUDA;

/// `ncclNetDeviceType`.
pub const NCCL_NET_DEVICE_HOST: c_int = 0;
pub const NCCL_NET_DEVICE_UNPACK: c_int = 1;
/// `netDeviceVersion` for host devices (`NCCL_NET_DEVICE_INVALID_VERSION`).
pub const NCCL_NET_DEVICE_INVALID_VERSION: c_int = 0;

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

/// `ncclNetDeviceHandle_v8_t` (32 bytes). Host plugins never create one.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclNetDeviceHandle_v8_t {
    pub netDeviceType: c_int,
    pub netDeviceVersion: c_int,
    pub handle: *mut c_void,
    pub size: usize,
    pub needsProxyProgress: c_int,
}

pub type InitFn = unsafe extern "C" fn(logFunction: ncclDebugLogger_t) -> ncclResult_t;
pub type DevicesFn = unsafe extern "C" fn(ndev: *mut c_int) -> ncclResult_t;
pub type GetPropertiesFn =
    unsafe extern "C" fn(dev: c_int, props: *mut ncclNetProperties_v8_t) -> ncclResult_t;
pub type ListenFn = unsafe extern "C" fn(
    dev: c_int,
    handle: *mut c_void,
    listenComm: *mut *mut c_void,
) -> ncclResult_t;
pub type ConnectFn = unsafe extern "C" fn(
    dev: c_int,
    handle: *mut c_void,
    sendComm: *mut *mut c_void,
    sendDevComm: *mut *mut ncclNetDeviceHandle_v8_t,
) -> ncclResult_t;
pub type AcceptFn = unsafe extern "C" fn(
    listenComm: *mut c_void,
    recvComm: *mut *mut c_void,
    recvDevComm: *mut *mut ncclNetDeviceHandle_v8_t,
) -> ncclResult_t;
pub type RegMrFn = unsafe extern "C" fn(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    type_: c_int,
    mhandle: *mut *mut c_void,
) -> ncclResult_t;
pub type RegMrDmaBufFn = unsafe extern "C" fn(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    type_: c_int,
    offset: u64,
    fd: c_int,
    mhandle: *mut *mut c_void,
) -> ncclResult_t;
pub type DeregMrFn = unsafe extern "C" fn(comm: *mut c_void, mhandle: *mut c_void) -> ncclResult_t;
pub type IsendFn = unsafe extern "C" fn(
    sendComm: *mut c_void,
    data: *mut c_void,
    size: c_int,
    tag: c_int,
    mhandle: *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t;
pub type IrecvFn = unsafe extern "C" fn(
    recvComm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut c_int,
    tags: *mut c_int,
    mhandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t;
pub type IflushFn = unsafe extern "C" fn(
    recvComm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut c_int,
    mhandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t;
pub type TestFn =
    unsafe extern "C" fn(request: *mut c_void, done: *mut c_int, sizes: *mut c_int) -> ncclResult_t;
pub type CloseFn = unsafe extern "C" fn(comm: *mut c_void) -> ncclResult_t;
pub type GetDeviceMrFn = unsafe extern "C" fn(
    comm: *mut c_void,
    mhandle: *mut c_void,
    dptr: *mut *mut c_void,
) -> ncclResult_t;
pub type IrecvConsumedFn =
    unsafe extern "C" fn(recvComm: *mut c_void, n: c_int, request: *mut c_void) -> ncclResult_t;

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

/// Ferro's own statistics record (not part of NCCL's ABI): what `ferroNetStats_v1` fills. All
/// counts since the process (allocations) or the comm (the rest) started.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ferroNetStats_v1_t {
    /// Heap allocations made by the plugin's code in this process.
    pub allocations: u64,
    pub messages: u64,
    pub bytes: u64,
    pub requests: u64,
    pub retries: u64,
    pub send_posts: u64,
    pub recv_posts: u64,
    pub cts_writes: u64,
    pub polls: u64,
    pub empty_polls: u64,
    pub completions: u64,
}

/// `ferroNetStats_v1(comm, out)`: `comm` NULL fills only `allocations`.
pub type FerroNetStatsFn =
    unsafe extern "C" fn(comm: *mut c_void, out: *mut ferroNetStats_v1_t) -> ncclResult_t;

/// Symbol of Ferro's statistics function.
pub const FERRO_NET_STATS_SYMBOL: &str = "ferroNetStats_v1";

// Layout pins (x86_64 / aarch64 LP64), from the documented offsets.
#[cfg(target_pointer_width = "64")]
const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<ncclResult_t>() == 4);
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

    assert!(size_of::<ferroNetStats_v1_t>() == 88);

    assert!(size_of::<ncclNetDeviceHandle_v8_t>() == 32);
    assert!(offset_of!(ncclNetDeviceHandle_v8_t, handle) == 8);
    assert!(offset_of!(ncclNetDeviceHandle_v8_t, size) == 16);
    assert!(offset_of!(ncclNetDeviceHandle_v8_t, needsProxyProgress) == 24);
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
}
