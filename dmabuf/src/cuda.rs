//! The CUDA driver, loaded at run time if it is installed, and what each GPU says about
//! DMA-BUF and GPUDirect RDMA.
//!
//! The plugin never links libcuda: a host without an NVIDIA driver is an ordinary host (NCCL then
//! never hands the plugin GPU memory). `libcuda.so.1` is opened with `RTLD_NOW|RTLD_LOCAL` and
//! never closed (closing the CUDA driver under a running CUDA application is not safe).
//!
//! Attribute numbers are those of the `CUdevice_attribute` enum in the CUDA driver API header
//! `cuda.h` (CUDA 12.x): `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED = 116` (added in
//! CUDA 11.3) and `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124` (added in CUDA 11.7). Checked
//! against several public transcriptions of that header (the header itself with its doc comments,
//! bindgen output, ctypes autogen): all agree on 116 and 124. Older drivers reject unknown
//! attribute numbers with `CUDA_ERROR_INVALID_VALUE`, which is read here as "not supported" for
//! DMA-BUF (NCCL also requires driver 11.7 for it) and as "unknown" for GPUDirect RDMA.

use core::ffi::{CStr, c_char, c_int, c_uint, c_void};
use ferro_verbs::dl::{Library, OpenError};
use std::fmt;

/// The soname opened by [`probe_cuda`].
pub const CUDA_LIB: &str = "libcuda.so.1";

/// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED` (cuda.h, CUDA ≥ 11.3).
pub const CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: c_int = 116;
/// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED` (cuda.h, CUDA ≥ 11.7).
pub const CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: c_int = 124;
/// `CUDA_SUCCESS`.
pub const CUDA_SUCCESS: c_int = 0;
/// `CUDA_ERROR_NO_DEVICE`: the driver is installed but sees no GPU.
pub const CUDA_ERROR_NO_DEVICE: c_int = 100;
/// The first driver version (`cuDriverGetVersion`, 1000·major + 10·minor) with DMA-BUF export.
pub const DMABUF_MIN_DRIVER: i32 = 11070;

/// What one GPU supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuInfo {
    /// CUDA device ordinal.
    pub index: i32,
    /// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED` is 1 (false when the driver cannot answer).
    pub dma_buf: bool,
    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED`; `None` when the driver is too old to say.
    pub gdr: Option<bool>,
}

/// The CUDA driver on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CudaState {
    /// `libcuda.so.1` could not be opened: the `dlerror` text.
    NotInstalled(String),
    /// The driver loaded but reports no GPU.
    NoDevice,
    /// The driver is present but unusable (missing symbol, failing call): what failed.
    Error(String),
    /// The driver and at least one GPU.
    Present {
        /// `cuDriverGetVersion` (e.g. 12040 for 12.4).
        driver_version: i32,
        devices: Vec<GpuInfo>,
    },
}

impl fmt::Display for CudaState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CudaState::NotInstalled(why) => write!(f, "no CUDA driver ({why})"),
            CudaState::NoDevice => write!(f, "CUDA driver sees no GPU"),
            CudaState::Error(why) => write!(f, "CUDA driver error: {why}"),
            CudaState::Present {
                driver_version,
                devices,
            } => write!(f, "CUDA driver {driver_version}, {} GPU(s)", devices.len()),
        }
    }
}

type CuInitFn = unsafe extern "C" fn(flags: c_uint) -> c_int;
type CuDriverGetVersionFn = unsafe extern "C" fn(version: *mut c_int) -> c_int;
type CuDeviceGetCountFn = unsafe extern "C" fn(count: *mut c_int) -> c_int;
type CuDeviceGetFn = unsafe extern "C" fn(device: *mut c_int, ordinal: c_int) -> c_int;
type CuDeviceGetAttributeFn =
    unsafe extern "C" fn(value: *mut c_int, attrib: c_int, device: c_int) -> c_int;
type CuGetErrorNameFn = unsafe extern "C" fn(error: c_int, name: *mut *const c_char) -> c_int;

macro_rules! required {
    ($lib:expr, $handle:expr, $name:literal, $ty:ty) => {{
        let Some(p) = $handle.sym($name) else {
            return CudaState::Error(format!("{} lacks {}", $lib, $name));
        };
        // SAFETY: `$ty` transcribes the C prototype of `$name` from cuda.h (CUresult and CUdevice
        // are `int`, CUdevice_attribute is an `int`-sized enum).
        unsafe { core::mem::transmute::<*mut c_void, $ty>(p.as_ptr()) }
    }};
}

struct Api {
    get_error_name: Option<CuGetErrorNameFn>,
}

impl Api {
    /// `"cuInit: CUDA_ERROR_X (n)"`.
    fn describe(&self, call: &str, rc: c_int) -> String {
        let name = self.get_error_name.and_then(|f| {
            let mut p: *const c_char = core::ptr::null();
            // SAFETY: f is cuGetErrorName; p is a valid out-pointer.
            let r = unsafe { f(rc, &mut p) };
            if r != CUDA_SUCCESS || p.is_null() {
                return None;
            }
            // SAFETY: the driver returns a pointer to a static NUL-terminated string.
            Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        });
        match name {
            Some(n) => format!("{call}: {n} ({rc})"),
            None => format!("{call}: CUDA error {rc}"),
        }
    }
}

/// Opens `libcuda.so.1` and asks it about every GPU.
pub fn probe_cuda() -> CudaState {
    probe_cuda_lib(CUDA_LIB)
}

/// As [`probe_cuda`], from the library `lib` (a soname or path; tests use stand-ins).
pub fn probe_cuda_lib(lib: &str) -> CudaState {
    let handle = match Library::open(lib) {
        Ok(h) => h,
        Err(OpenError::NulInName) => {
            return CudaState::NotInstalled(format!("{lib:?}: NUL in library name"));
        }
        Err(OpenError::Loader(msg)) => return CudaState::NotInstalled(msg),
    };
    // The handle is deliberately never closed.
    let cu_init = required!(lib, handle, "cuInit", CuInitFn);
    let cu_driver_get_version = required!(lib, handle, "cuDriverGetVersion", CuDriverGetVersionFn);
    let cu_device_get_count = required!(lib, handle, "cuDeviceGetCount", CuDeviceGetCountFn);
    let cu_device_get = required!(lib, handle, "cuDeviceGet", CuDeviceGetFn);
    let cu_device_get_attribute =
        required!(lib, handle, "cuDeviceGetAttribute", CuDeviceGetAttributeFn);
    let get_error_name = handle.sym("cuGetErrorName").map(|p| {
        // SAFETY: as in `required!`: `CuGetErrorNameFn` transcribes cuGetErrorName (CUDA ≥ 6.0).
        unsafe { core::mem::transmute::<*mut c_void, CuGetErrorNameFn>(p.as_ptr()) }
    });
    let api = Api { get_error_name };

    // SAFETY: cuInit(0) is the documented first call; idempotent and thread-safe.
    let rc = unsafe { cu_init(0) };
    if rc == CUDA_ERROR_NO_DEVICE {
        return CudaState::NoDevice;
    }
    if rc != CUDA_SUCCESS {
        return CudaState::Error(api.describe("cuInit", rc));
    }
    let mut driver_version: c_int = 0;
    // SAFETY: valid out-pointer; the driver is initialised.
    let rc = unsafe { cu_driver_get_version(&mut driver_version) };
    if rc != CUDA_SUCCESS {
        return CudaState::Error(api.describe("cuDriverGetVersion", rc));
    }
    let mut count: c_int = 0;
    // SAFETY: valid out-pointer; the driver is initialised.
    let rc = unsafe { cu_device_get_count(&mut count) };
    if rc == CUDA_ERROR_NO_DEVICE {
        return CudaState::NoDevice;
    }
    if rc != CUDA_SUCCESS {
        return CudaState::Error(api.describe("cuDeviceGetCount", rc));
    }
    if count <= 0 {
        return CudaState::NoDevice;
    }
    let mut devices = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    for index in 0..count {
        let mut dev: c_int = 0;
        // SAFETY: valid out-pointer; ordinal below the reported count.
        let rc = unsafe { cu_device_get(&mut dev, index) };
        if rc != CUDA_SUCCESS {
            return CudaState::Error(api.describe(&format!("cuDeviceGet({index})"), rc));
        }
        let attr = |a: c_int| -> Option<bool> {
            let mut v: c_int = 0;
            // SAFETY: valid out-pointer; dev came from cuDeviceGet. An attribute this driver does
            // not know is rejected with an error code, never undefined behaviour.
            let rc = unsafe { cu_device_get_attribute(&mut v, a, dev) };
            (rc == CUDA_SUCCESS).then_some(v != 0)
        };
        devices.push(GpuInfo {
            index,
            dma_buf: attr(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED).unwrap_or(false),
            gdr: attr(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED),
        });
    }
    CudaState::Present {
        driver_version,
        devices,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn real_loader_on_a_host_without_the_nvidia_driver_reports_not_installed() {
        let state = probe_cuda();
        if Path::new("/proc/driver/nvidia/version").exists() {
            // A GPU host: the driver must load and answer, whatever it says.
            eprintln!("NVIDIA driver present: {state:?}");
            assert!(!matches!(state, CudaState::NotInstalled(_)), "{state:?}");
            return;
        }
        match state {
            CudaState::NotInstalled(why) => {
                assert!(why.contains("libcuda.so.1"), "{why}");
            }
            other => panic!("expected NotInstalled without an NVIDIA driver, got {other:?}"),
        }
    }

    #[test]
    fn missing_library_by_path() {
        let s = probe_cuda_lib("/nonexistent/libcuda.so.1");
        assert!(
            matches!(s, CudaState::NotInstalled(ref why) if why.contains("No such file")),
            "{s:?}"
        );
        assert!(matches!(
            probe_cuda_lib("lib\0cuda"),
            CudaState::NotInstalled(_)
        ));
    }

    #[test]
    fn a_library_without_the_cuda_symbols_is_an_error_naming_the_symbol() {
        // libm loads everywhere and exports no CUDA.
        assert_eq!(
            probe_cuda_lib("libm.so.6"),
            CudaState::Error("libm.so.6 lacks cuInit".into())
        );
    }

    #[test]
    fn display() {
        assert_eq!(
            CudaState::Present {
                driver_version: 12040,
                devices: vec![]
            }
            .to_string(),
            "CUDA driver 12040, 0 GPU(s)"
        );
        assert_eq!(CudaState::NoDevice.to_string(), "CUDA driver sees no GPU");
    }
}
