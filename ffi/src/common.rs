//! What every ABI version shares: result codes, the logger, pointer-support bits and limits, the
//! device handle, the function types whose C signature is the same in v7 … v12, and the auxiliary
//! structs of v9+ (virtual-device members, communicator config, profiler callback, v11 attributes).
//! Layouts are pinned at the bottom of this file.

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

/// `ncclNetDeviceHandle_v7_t` (32 bytes); v8 … v12 use the same type. Host plugins never create one.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclNetDeviceHandle_v7_t {
    pub netDeviceType: c_int,
    pub netDeviceVersion: c_int,
    pub handle: *mut c_void,
    pub size: usize,
    pub needsProxyProgress: c_int,
}
pub type ncclNetDeviceHandle_v8_t = ncclNetDeviceHandle_v7_t;
pub type ncclNetDeviceHandle_v9_t = ncclNetDeviceHandle_v7_t;
pub type ncclNetDeviceHandle_v10_t = ncclNetDeviceHandle_v7_t;
pub type ncclNetDeviceHandle_v11_t = ncclNetDeviceHandle_v7_t;
pub type ncclNetDeviceHandle_v12_t = ncclNetDeviceHandle_v7_t;

/// `NCCL_NET_OPTIONAL_RECV_COMPLETION`: the value NCCL (2.24+) may leave in `*request` before an
/// `irecv` of LL/LL128 data; the plugin still writes a real request (or NULL) back.
pub const NCCL_NET_OPTIONAL_RECV_COMPLETION: usize = 0x1;
/// `NCCL_MAX_NET_SIZE_BYTES` (1 TiB): the upper bound NCCL accepts for `maxP2pBytes`/`maxCollBytes`.
pub const NCCL_MAX_NET_SIZE_BYTES: usize = 1 << 40;
/// `NCCL_NET_TRAFFIC_CLASS_UNDEF` (v10+): the communicator did not set a traffic class.
pub const NCCL_NET_TRAFFIC_CLASS_UNDEF: c_int = -1;
/// `NCCL_NET_ID_UNDEF` (v12): no rail or plane id known.
pub const NCCL_NET_ID_UNDEF: i16 = -1;
/// Members of one virtual device: 4 in v9 … v11, 8 in v12.
pub const NCCL_NET_MAX_DEVS_PER_NIC_V9: usize = 4;
pub const NCCL_NET_MAX_DEVS_PER_NIC_V12: usize = 8;

/// `ncclNetVDeviceProps_v9_t` (v9, v10 and v11 share it): up to 4 physical device indices.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ncclNetVDeviceProps_v9_t {
    pub ndevs: c_int,
    pub devs: [c_int; NCCL_NET_MAX_DEVS_PER_NIC_V9],
}
pub type ncclNetVDeviceProps_v10_t = ncclNetVDeviceProps_v9_t;
pub type ncclNetVDeviceProps_v11_t = ncclNetVDeviceProps_v9_t;

/// `ncclNetVDeviceProps_v12_t`: up to 8 physical device indices.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ncclNetVDeviceProps_v12_t {
    pub ndevs: c_int,
    pub devs: [c_int; NCCL_NET_MAX_DEVS_PER_NIC_V12],
}

/// `ncclNetCommConfig_v10_t` (v11 and v12 share it): the communicator's settings for the network.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ncclNetCommConfig_v10_t {
    /// `NCCL_NET_TRAFFIC_CLASS_UNDEF` (-1) when the communicator did not set one.
    pub trafficClass: c_int,
}
pub type ncclNetCommConfig_v11_t = ncclNetCommConfig_v10_t;
pub type ncclNetCommConfig_v12_t = ncclNetCommConfig_v10_t;

/// `ncclNetCommAttr_v11_t` (v12 shares it): hints about one direction of a communicator's traffic.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ncclNetCommAttr_v11_t {
    pub maxConcurrentPeers: i32,
    pub minConcurrentPeers: i32,
    pub maxFlowsPerPeer: i32,
    pub minFlowsPerPeer: i32,
}

/// `ncclNetAttr_v11_t` (v12 shares it): the hints `setNetAttr` passes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ncclNetAttr_v11_t {
    pub sendCommAttr: ncclNetCommAttr_v11_t,
    pub recvCommAttr: ncclNetCommAttr_v11_t,
    pub op: u32,
    pub algo: u32,
    pub proto: u32,
}
pub type ncclNetAttr_v12_t = ncclNetAttr_v11_t;

/// Profiler callback types (`type` argument of [`ncclProfilerCallback_t`]).
pub mod profiler_event {
    use core::ffi::c_int;
    pub const START: c_int = 0;
    pub const STOP: c_int = 1;
    pub const UPDATE: c_int = 2;
    pub const UPDATE_AND_STOP: c_int = 3;
}

/// `ncclProfilerCallback_t` (v10+): `(void** eHandle, int type, void* phandle, int64_t pluginId,
/// void* extData)`. Start (0) may leave `*eHandle` untouched (no profiler listening), so callers
/// pre-set it to NULL; Stop (1) passes `*eHandle` on without a NULL check.
pub type ncclProfilerCallback_t = Option<
    unsafe extern "C" fn(
        eHandle: *mut *mut c_void,
        type_: c_int,
        pHandle: *mut c_void,
        pluginId: i64,
        extData: *mut c_void,
    ) -> ncclResult_t,
>;

/// `pluginId` upper 16 bits: the descriptor's kind (`NCCL_PROFILER_NET_TYPE_IB`), lower 16 bits:
/// its version (1).
pub const NCCL_PROFILER_NET_TYPE_IB: i64 = 0x10000;
pub const NCCL_PROFILER_NET_IB_VER: i64 = 1;
/// `ncclProfileQp`: the descriptor describes one work request on a queue pair.
pub const NCCL_PROFILE_QP: u8 = 1;

/// The QP part of [`ncclProfilerNetIbDescr_v1_t`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ncclProfilerNetIbQp_v1_t {
    pub device: c_int,
    pub wr_id: u64,
    pub opcode: c_int,
    pub qpNum: c_int,
    pub length: usize,
}

/// `ncclProfilerNetIbDescr_v1_t` (40 bytes): what a network event describes (`extData` of Start).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ncclProfilerNetIbDescr_v1_t {
    pub type_: u8,
    pub qp: ncclProfilerNetIbQp_v1_t,
}

// Function types whose C signature is the same in every version v7 … v12.
pub type DevicesFn = unsafe extern "C" fn(ndev: *mut c_int) -> ncclResult_t;
/// `listen` of v7 … v10 (v11 adds the context first).
pub type ListenFn = unsafe extern "C" fn(
    dev: c_int,
    handle: *mut c_void,
    listenComm: *mut *mut c_void,
) -> ncclResult_t;
pub type AcceptFn = unsafe extern "C" fn(
    listenComm: *mut c_void,
    recvComm: *mut *mut c_void,
    recvDevComm: *mut *mut ncclNetDeviceHandle_v7_t,
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
/// `iflush`: sizes stay `int*` in every version.
pub type IflushFn = unsafe extern "C" fn(
    recvComm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut c_int,
    mhandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t;
/// `test`: sizes stay `int*` in every version.
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
/// `init` of v7 … v9: the logger only.
pub type InitFn = unsafe extern "C" fn(logFunction: ncclDebugLogger_t) -> ncclResult_t;
/// `regMr` of v8 … v12 (`size_t` size; v7 has `int`).
pub type RegMrFn = unsafe extern "C" fn(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    type_: c_int,
    mhandle: *mut *mut c_void,
) -> ncclResult_t;
/// `connect` of v7 … v9 (v10 adds the config, v11 the context).
pub type ConnectFn = unsafe extern "C" fn(
    dev: c_int,
    handle: *mut c_void,
    sendComm: *mut *mut c_void,
    sendDevComm: *mut *mut ncclNetDeviceHandle_v7_t,
) -> ncclResult_t;

// Layout pins (x86_64 / aarch64 LP64), from the compiler-verified offsets.
#[cfg(target_pointer_width = "64")]
const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<ncclResult_t>() == 4);
    assert!(size_of::<ncclNetDeviceHandle_v7_t>() == 32);
    assert!(offset_of!(ncclNetDeviceHandle_v7_t, netDeviceType) == 0);
    assert!(offset_of!(ncclNetDeviceHandle_v7_t, netDeviceVersion) == 4);
    assert!(offset_of!(ncclNetDeviceHandle_v7_t, handle) == 8);
    assert!(offset_of!(ncclNetDeviceHandle_v7_t, size) == 16);
    assert!(offset_of!(ncclNetDeviceHandle_v7_t, needsProxyProgress) == 24);

    assert!(size_of::<ncclNetVDeviceProps_v9_t>() == 20);
    assert!(align_of::<ncclNetVDeviceProps_v9_t>() == 4);
    assert!(offset_of!(ncclNetVDeviceProps_v9_t, ndevs) == 0);
    assert!(offset_of!(ncclNetVDeviceProps_v9_t, devs) == 4);
    assert!(size_of::<ncclNetVDeviceProps_v12_t>() == 36);
    assert!(align_of::<ncclNetVDeviceProps_v12_t>() == 4);
    assert!(offset_of!(ncclNetVDeviceProps_v12_t, ndevs) == 0);
    assert!(offset_of!(ncclNetVDeviceProps_v12_t, devs) == 4);

    assert!(size_of::<ncclNetCommConfig_v10_t>() == 4);
    assert!(offset_of!(ncclNetCommConfig_v10_t, trafficClass) == 0);

    assert!(size_of::<ncclNetCommAttr_v11_t>() == 16);
    assert!(offset_of!(ncclNetCommAttr_v11_t, maxConcurrentPeers) == 0);
    assert!(offset_of!(ncclNetCommAttr_v11_t, minConcurrentPeers) == 4);
    assert!(offset_of!(ncclNetCommAttr_v11_t, maxFlowsPerPeer) == 8);
    assert!(offset_of!(ncclNetCommAttr_v11_t, minFlowsPerPeer) == 12);
    assert!(size_of::<ncclNetAttr_v11_t>() == 44);
    assert!(align_of::<ncclNetAttr_v11_t>() == 4);
    assert!(offset_of!(ncclNetAttr_v11_t, sendCommAttr) == 0);
    assert!(offset_of!(ncclNetAttr_v11_t, recvCommAttr) == 16);
    assert!(offset_of!(ncclNetAttr_v11_t, op) == 32);
    assert!(offset_of!(ncclNetAttr_v11_t, algo) == 36);
    assert!(offset_of!(ncclNetAttr_v11_t, proto) == 40);

    assert!(size_of::<ncclProfilerNetIbDescr_v1_t>() == 40);
    assert!(offset_of!(ncclProfilerNetIbDescr_v1_t, type_) == 0);
    assert!(offset_of!(ncclProfilerNetIbDescr_v1_t, qp) == 8);
    assert!(
        offset_of!(ncclProfilerNetIbDescr_v1_t, qp) + offset_of!(ncclProfilerNetIbQp_v1_t, device)
            == 8
    );
    assert!(
        offset_of!(ncclProfilerNetIbDescr_v1_t, qp) + offset_of!(ncclProfilerNetIbQp_v1_t, wr_id)
            == 16
    );
    assert!(
        offset_of!(ncclProfilerNetIbDescr_v1_t, qp) + offset_of!(ncclProfilerNetIbQp_v1_t, opcode)
            == 24
    );
    assert!(
        offset_of!(ncclProfilerNetIbDescr_v1_t, qp) + offset_of!(ncclProfilerNetIbQp_v1_t, qpNum)
            == 28
    );
    assert!(
        offset_of!(ncclProfilerNetIbDescr_v1_t, qp) + offset_of!(ncclProfilerNetIbQp_v1_t, length)
            == 32
    );
};
