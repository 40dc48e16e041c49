//! Run-time loading of libibverbs.
//!
//! The plugin never links libibverbs: NCCL loads the plugin with `RTLD_NOW|RTLD_LOCAL`, and a
//! `NEEDED` entry would make that `dlopen` fail outright on a host without rdma-core (or with an
//! rdma-core too old for a versioned symbol), leaving the user with a bare loader error. Instead
//! the library is opened here, once, and every symbol is resolved with `dlvsym` at a pinned
//! version, the way a program built against the 1.1 ABI would bind. Symbols added later
//! (`ibv_reg_mr_iova2`, `ibv_reg_dmabuf_mr`, the GID-table queries) are optional: their absence is
//! a capability, reported, never a load failure. The library is never closed: providers keep
//! threads and state that must outlive the plugin.

use crate::dl::Library;
use crate::sys::*;
use core::ffi::{c_char, c_int, c_uint, c_void};
use std::fmt;
use std::sync::OnceLock;

/// Environment variable naming the libibverbs to open instead of `libibverbs.so.1`.
pub const LIB_ENV: &str = "FERRO_IBVERBS_LIB";
/// Default soname.
pub const DEFAULT_LIB: &str = "libibverbs.so.1";

/// Why libibverbs could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// `dlopen` failed (typically: rdma-core is not installed).
    NotFound { lib: String, reason: String },
    /// A required symbol is missing at its pinned version.
    MissingSymbol {
        lib: String,
        symbol: &'static str,
        version: &'static str,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::NotFound { lib, reason } => write!(
                f,
                "cannot load {lib} ({reason}); install rdma-core's libibverbs (Debian/Ubuntu: ibverbs-providers, RHEL: rdma-core)"
            ),
            LoadError::MissingSymbol {
                lib,
                symbol,
                version,
            } => {
                write!(
                    f,
                    "{lib} lacks {symbol}@{version}; it is not a usable libibverbs"
                )
            }
        }
    }
}

impl std::error::Error for LoadError {}

pub type GetDeviceListFn = unsafe extern "C" fn(num: *mut c_int) -> *mut *mut ibv_device;
pub type FreeDeviceListFn = unsafe extern "C" fn(list: *mut *mut ibv_device);
pub type GetDeviceNameFn = unsafe extern "C" fn(dev: *mut ibv_device) -> *const c_char;
pub type OpenDeviceFn = unsafe extern "C" fn(dev: *mut ibv_device) -> *mut ibv_context;
pub type CloseDeviceFn = unsafe extern "C" fn(ctx: *mut ibv_context) -> c_int;
pub type QueryDeviceFn =
    unsafe extern "C" fn(ctx: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int;
pub type QueryPortFn =
    unsafe extern "C" fn(ctx: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> c_int;
pub type QueryGidFn =
    unsafe extern "C" fn(ctx: *mut ibv_context, port: u8, index: c_int, gid: *mut ibv_gid) -> c_int;
pub type AllocPdFn = unsafe extern "C" fn(ctx: *mut ibv_context) -> *mut ibv_pd;
pub type DeallocPdFn = unsafe extern "C" fn(pd: *mut ibv_pd) -> c_int;
pub type RegMrFn = unsafe extern "C" fn(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut ibv_mr;
pub type RegMrIova2Fn = unsafe extern "C" fn(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr;
pub type RegDmabufMrFn = unsafe extern "C" fn(
    pd: *mut ibv_pd,
    offset: u64,
    len: usize,
    iova: u64,
    fd: c_int,
    access: c_int,
) -> *mut ibv_mr;
pub type DeregMrFn = unsafe extern "C" fn(mr: *mut ibv_mr) -> c_int;
pub type CreateCqFn = unsafe extern "C" fn(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq;
pub type DestroyCqFn = unsafe extern "C" fn(cq: *mut ibv_cq) -> c_int;
pub type CreateQpFn =
    unsafe extern "C" fn(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp;
pub type ModifyQpFn =
    unsafe extern "C" fn(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int;
pub type DestroyQpFn = unsafe extern "C" fn(qp: *mut ibv_qp) -> c_int;
/// `ibv_query_qp(qp, attr, mask, init_attr)`.
pub type QueryQpFn = unsafe extern "C" fn(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int;
/// `_ibv_query_gid_ex(ctx, port, index, entry, flags, entry_size)`.
pub type QueryGidExFn = unsafe extern "C" fn(
    ctx: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut c_void,
    flags: u32,
    entry_size: usize,
) -> c_int;
/// `_ibv_query_gid_table(ctx, entries, max_entries, flags, entry_size)`.
pub type QueryGidTableFn = unsafe extern "C" fn(
    ctx: *mut ibv_context,
    entries: *mut c_void,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize;
/// `ibv_query_port_speed(ctx, port, speed)`: the port's speed in units of 100 Mbps.
pub type QueryPortSpeedFn =
    unsafe extern "C" fn(ctx: *mut ibv_context, port: u8, speed: *mut u64) -> c_int;
/// `ibv_query_ece(qp, ece)` and `ibv_set_ece(qp, ece)`.
pub type EceFn = unsafe extern "C" fn(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int;
pub type ForkInitFn = unsafe extern "C" fn() -> c_int;
pub type GetAsyncEventFn =
    unsafe extern "C" fn(ctx: *mut ibv_context, ev: *mut ibv_async_event) -> c_int;
pub type AckAsyncEventFn = unsafe extern "C" fn(ev: *mut ibv_async_event);

/// The resolved libibverbs entry points.
#[derive(Debug)]
pub struct Verbs {
    /// What was opened (the soname or the override path).
    pub lib: String,
    pub get_device_list: GetDeviceListFn,
    pub free_device_list: FreeDeviceListFn,
    pub get_device_name: GetDeviceNameFn,
    pub open_device: OpenDeviceFn,
    pub close_device: CloseDeviceFn,
    pub query_device: QueryDeviceFn,
    pub query_port: QueryPortFn,
    pub query_gid: QueryGidFn,
    pub alloc_pd: AllocPdFn,
    pub dealloc_pd: DeallocPdFn,
    pub reg_mr: RegMrFn,
    pub dereg_mr: DeregMrFn,
    pub create_cq: CreateCqFn,
    pub destroy_cq: DestroyCqFn,
    pub create_qp: CreateQpFn,
    pub modify_qp: ModifyQpFn,
    pub destroy_qp: DestroyQpFn,
    pub fork_init: ForkInitFn,
    pub get_async_event: GetAsyncEventFn,
    pub ack_async_event: AckAsyncEventFn,
    /// `ibv_reg_mr_iova2@IBVERBS_1.8` (rdma-core 22+): needed for relaxed ordering.
    pub reg_mr_iova2: Option<RegMrIova2Fn>,
    /// `ibv_reg_dmabuf_mr@IBVERBS_1.12` (rdma-core 34+): DMA-BUF registration.
    pub reg_dmabuf_mr: Option<RegDmabufMrFn>,
    /// `ibv_query_qp` (IBVERBS_1.1; optional: only tests read QP attributes back).
    pub query_qp: Option<QueryQpFn>,
    /// `_ibv_query_gid_ex@IBVERBS_1.11` (rdma-core 32+): one GID entry with its type and netdev.
    pub query_gid_ex: Option<QueryGidExFn>,
    /// `_ibv_query_gid_table@IBVERBS_1.11` (rdma-core 32+): the whole GID table at once.
    pub query_gid_table: Option<QueryGidTableFn>,
    /// `ibv_query_port_speed@IBVERBS_1.16`: the port's speed, including rates that
    /// `ibv_query_port`'s speed and width codes do not describe.
    pub query_port_speed: Option<QueryPortSpeedFn>,
    /// `ibv_query_ece@IBVERBS_1.10` / `ibv_set_ece@IBVERBS_1.10` (rdma-core 31+): enhanced
    /// connection establishment, where the provider has it.
    pub query_ece: Option<EceFn>,
    pub set_ece: Option<EceFn>,
}

/// What optional entry points the loaded library has, for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    pub reg_mr_iova2: bool,
    pub reg_dmabuf_mr: bool,
    pub query_gid_ex: bool,
    pub query_gid_table: bool,
    pub query_port_speed: bool,
}

impl Verbs {
    pub fn capabilities(&self) -> Capabilities {
        Capabilities {
            reg_mr_iova2: self.reg_mr_iova2.is_some(),
            reg_dmabuf_mr: self.reg_dmabuf_mr.is_some(),
            query_gid_ex: self.query_gid_ex.is_some(),
            query_gid_table: self.query_gid_table.is_some(),
            query_port_speed: self.query_port_speed.is_some(),
        }
    }

    /// `ibv_fork_init`: makes registered memory safe across `fork()` (a child writing its copy
    /// of a registered page must not move the parent's page under the NIC). Must run before
    /// any registration; on kernels with copy-on-fork for pinned pages it costs nothing.
    /// Returns the error code when the library refuses.
    pub fn fork_init(&self) -> Result<(), c_int> {
        // SAFETY: no arguments; libibverbs serialises it internally.
        match unsafe { (self.fork_init)() } {
            0 => Ok(()),
            rc => Err(rc),
        }
    }
}

static VERBS: OnceLock<Result<Verbs, LoadError>> = OnceLock::new();

/// Opens libibverbs once per process from `lib` (`None` or empty: [`DEFAULT_LIB`]) and returns the
/// table, or why not. The first call decides; later calls, and [`verbs`], return its outcome. The
/// caller's configuration says which library ([`LIB_ENV`]); this crate reads no environment.
pub fn open(lib: Option<&str>) -> Result<&'static Verbs, &'static LoadError> {
    VERBS
        .get_or_init(|| load(lib.filter(|s| !s.is_empty()).unwrap_or(DEFAULT_LIB)))
        .as_ref()
}

/// The table [`open`] opened (or, if nothing opened it yet, [`DEFAULT_LIB`]'s), or why not.
pub fn verbs() -> Result<&'static Verbs, &'static LoadError> {
    open(None)
}

pub use crate::dl::dl_error;

macro_rules! required {
    ($lib:ident, $name:literal, $ver:literal, $ty:ty) => {{
        let p = $lib
            .vsym($name, $ver)
            .ok_or_else(|| LoadError::MissingSymbol {
                lib: $lib.name().to_string(),
                symbol: $name,
                version: $ver,
            })?;
        // SAFETY: the symbol was resolved at the ABI version whose C prototype `$ty` transcribes.
        unsafe { core::mem::transmute::<*mut c_void, $ty>(p.as_ptr()) }
    }};
}

macro_rules! optional {
    ($lib:ident, $name:literal, $ver:literal, $ty:ty) => {{
        $lib.vsym($name, $ver).map(|p| {
            // SAFETY: as in `required!`: resolved at the version whose prototype `$ty` transcribes.
            unsafe { core::mem::transmute::<*mut c_void, $ty>(p.as_ptr()) }
        })
    }};
}

/// Opens `lib` with `RTLD_NOW|RTLD_LOCAL` and resolves the table. Public for tests that point it
/// at stand-in libraries; production code calls [`verbs`].
pub fn load(lib: &str) -> Result<Verbs, LoadError> {
    let l = Library::open(lib).map_err(|e| LoadError::NotFound {
        lib: lib.into(),
        reason: e.to_string(),
    })?;
    Ok(Verbs {
        lib: lib.into(),
        get_device_list: required!(l, "ibv_get_device_list", "IBVERBS_1.1", GetDeviceListFn),
        free_device_list: required!(l, "ibv_free_device_list", "IBVERBS_1.1", FreeDeviceListFn),
        get_device_name: required!(l, "ibv_get_device_name", "IBVERBS_1.1", GetDeviceNameFn),
        open_device: required!(l, "ibv_open_device", "IBVERBS_1.1", OpenDeviceFn),
        close_device: required!(l, "ibv_close_device", "IBVERBS_1.1", CloseDeviceFn),
        query_device: required!(l, "ibv_query_device", "IBVERBS_1.1", QueryDeviceFn),
        query_port: required!(l, "ibv_query_port", "IBVERBS_1.1", QueryPortFn),
        query_gid: required!(l, "ibv_query_gid", "IBVERBS_1.1", QueryGidFn),
        alloc_pd: required!(l, "ibv_alloc_pd", "IBVERBS_1.1", AllocPdFn),
        dealloc_pd: required!(l, "ibv_dealloc_pd", "IBVERBS_1.1", DeallocPdFn),
        reg_mr: required!(l, "ibv_reg_mr", "IBVERBS_1.1", RegMrFn),
        dereg_mr: required!(l, "ibv_dereg_mr", "IBVERBS_1.1", DeregMrFn),
        create_cq: required!(l, "ibv_create_cq", "IBVERBS_1.1", CreateCqFn),
        destroy_cq: required!(l, "ibv_destroy_cq", "IBVERBS_1.1", DestroyCqFn),
        create_qp: required!(l, "ibv_create_qp", "IBVERBS_1.1", CreateQpFn),
        modify_qp: required!(l, "ibv_modify_qp", "IBVERBS_1.1", ModifyQpFn),
        destroy_qp: required!(l, "ibv_destroy_qp", "IBVERBS_1.1", DestroyQpFn),
        fork_init: required!(l, "ibv_fork_init", "IBVERBS_1.1", ForkInitFn),
        get_async_event: required!(l, "ibv_get_async_event", "IBVERBS_1.1", GetAsyncEventFn),
        ack_async_event: required!(l, "ibv_ack_async_event", "IBVERBS_1.1", AckAsyncEventFn),
        reg_mr_iova2: optional!(l, "ibv_reg_mr_iova2", "IBVERBS_1.8", RegMrIova2Fn),
        reg_dmabuf_mr: optional!(l, "ibv_reg_dmabuf_mr", "IBVERBS_1.12", RegDmabufMrFn),
        query_qp: optional!(l, "ibv_query_qp", "IBVERBS_1.1", QueryQpFn),
        query_gid_ex: optional!(l, "_ibv_query_gid_ex", "IBVERBS_1.11", QueryGidExFn),
        query_gid_table: optional!(l, "_ibv_query_gid_table", "IBVERBS_1.11", QueryGidTableFn),
        query_port_speed: optional!(l, "ibv_query_port_speed", "IBVERBS_1.16", QueryPortSpeedFn),
        query_ece: optional!(l, "ibv_query_ece", "IBVERBS_1.10", EceFn),
        set_ece: optional!(l, "ibv_set_ece", "IBVERBS_1.10", EceFn),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::err_expect)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_is_a_clean_error_naming_it() {
        let e = load("/nonexistent/libibverbs.so.1")
            .err()
            .expect("must fail");
        match &e {
            LoadError::NotFound { lib, reason } => {
                assert_eq!(lib, "/nonexistent/libibverbs.so.1");
                assert!(reason.contains("No such file"), "{reason}");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(e.to_string().contains("install rdma-core"));
    }

    #[test]
    fn a_library_without_the_verbs_symbols_is_rejected_with_the_symbol_name() {
        // libm is present everywhere and exports no verbs.
        let e = load("libm.so.6").err().expect("must fail");
        assert_eq!(
            e,
            LoadError::MissingSymbol {
                lib: "libm.so.6".into(),
                symbol: "ibv_get_device_list",
                version: "IBVERBS_1.1"
            }
        );
    }
}
