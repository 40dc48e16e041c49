//! Loading the plugin the way NCCL does, and calling it only through one of its tables (v7 to
//! v12: [`Table`]; `FERRO_NET_ABI=<N>` picks the version for [`Net::load`], default 8).
//!
//! [`Net`] has one method per table entry. Each returns `Result<_, ncclResult_t>`; for the
//! non-blocking entries `Ok(None)` is NCCL's "NULL, call again" answer (connect/accept/isend/
//! irecv). The `*_blocking` helpers and [`Net::wait`] loop with a deadline and fail instead of
//! hanging. Comms, registrations and requests are the plugin's raw pointers in small newtypes;
//! closing or deregistering consumes them.

use crate::buffer::Buffer;
use crate::error::{HResult, HarnessError, NcclExt};
use crate::handle::Handle;
use crate::logger;
use crate::props::c_string;
pub use crate::props::{PROP_UNSET, PROP_UNSET_BYTES, PROP_UNSET_I16, Properties};
use crate::raw;
use crate::table::Table;
use core::ffi::{CStr, c_int, c_void};
use ferro_ffi::{
    AbiVersion, FerroNetStatsFn, NCCL_NET_TRAFFIC_CLASS_UNDEF, ferroNetStats_v1_t,
    ncclDebugLogger_t, ncclProfilerCallback_t, ncclResult_t,
};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicPtr, Ordering};

/// Environment variable choosing the table version [`Net::load`] uses (7 … 12; default 8).
pub const ABI_ENV: &str = "FERRO_NET_ABI";

/// The version named by `FERRO_NET_ABI` (default v8); an invalid value is an error naming it.
pub fn abi_from_env() -> Result<AbiVersion, String> {
    match std::env::var(ABI_ENV) {
        Err(_) => Ok(AbiVersion::V8),
        Ok(v) if v.is_empty() => Ok(AbiVersion::V8),
        Ok(v) => v
            .trim_start_matches('v')
            .parse::<u32>()
            .ok()
            .and_then(AbiVersion::from_number)
            .ok_or_else(|| format!("{ABI_ENV}={v}: not a net ABI version (7 to 12)")),
    }
}

pub use crate::loader::{Library, open_library};

/// A plugin call's outcome: the value, or the non-success code it returned.
pub type NetResult<T> = Result<T, ncclResult_t>;

/// File name of the plugin in the cargo target profile directory.
pub const PLUGIN_FILE: &str = "libnccl_net_ferro.so";
/// Environment variable naming the plugin to load instead.
pub const PLUGIN_ENV: &str = "FERRO_PLUGIN_SO";
/// What to do when the plugin is not built.
pub const BUILD_HINT: &str = "build the plugin first: cargo build -p nccl-net-plugin";

/// Value stored in each `sizes[]` slot before `test`.
pub const SIZE_UNSET: c_int = -0x3c3c_3c3d;
/// Extra `sizes[]` slots past `n` that `test` must leave alone.
const SIZES_GUARD: usize = 8;

/// The cargo profile directory (`target/<profile>`) of an executable in it or in its `deps/`.
pub fn profile_dir(exe: &Path) -> Option<PathBuf> {
    let parent = exe.parent()?;
    if parent.file_name().is_some_and(|n| n == "deps") {
        parent.parent().map(Path::to_path_buf)
    } else {
        Some(parent.to_path_buf())
    }
}

/// Where the plugin is: `$FERRO_PLUGIN_SO`, else `libnccl_net_ferro.so` in the profile directory
/// of the running executable. Errors say how to fix it.
pub fn plugin_path() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(PLUGIN_ENV).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("{PLUGIN_ENV}={} does not name a file", p.display()))
        };
    }
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the running executable: {e}"))?;
    let dir =
        profile_dir(&exe).ok_or_else(|| format!("no profile directory above {}", exe.display()))?;
    let p = dir.join(PLUGIN_FILE);
    if p.is_file() {
        Ok(p)
    } else {
        let release = if dir.file_name().is_some_and(|n| n == "release") {
            " --release"
        } else {
            ""
        };
        Err(format!(
            "{} is missing: {BUILD_HINT}{release} (or set {PLUGIN_ENV})",
            p.display()
        ))
    }
}

/// A listen comm (`listen`'s out-pointer).
#[derive(Debug)]
pub struct ListenComm(*mut c_void);
/// A send comm (`connect`'s out-pointer).
#[derive(Debug)]
pub struct SendComm(*mut c_void);
/// A receive comm (`accept`'s out-pointer).
#[derive(Debug)]
pub struct RecvComm(*mut c_void);
/// A memory registration (`regMr`'s mhandle).
#[derive(Debug)]
pub struct Mr(*mut c_void);

/// An outstanding request from `isend`/`irecv`. `n` is the number of buffers (1 for a send).
/// `Copy`, so that loops keep requests in fixed rings without allocating; a request the plugin
/// reported done is dead, and testing it again is a caller's error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    ptr: *mut c_void,
    n: usize,
}

impl ListenComm {
    pub fn as_ptr(&self) -> *mut c_void {
        self.0
    }
}
impl Mr {
    pub fn as_ptr(&self) -> *mut c_void {
        self.0
    }
}
impl Request {
    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr
    }
    /// Number of buffers (sizes reported by `test`).
    pub fn n(&self) -> usize {
        self.n
    }
}

/// A send or receive comm (what `regMr`/`deregMr` accept).
pub trait Comm {
    fn as_ptr(&self) -> *mut c_void;
}
impl Comm for SendComm {
    fn as_ptr(&self) -> *mut c_void {
        self.0
    }
}
impl Comm for RecvComm {
    fn as_ptr(&self) -> *mut c_void {
        self.0
    }
}

/// One buffer of a (possibly grouped) receive.
#[derive(Debug, Clone, Copy)]
pub struct RecvSlot<'a> {
    pub buf: &'a Buffer,
    pub offset: usize,
    /// Bytes posted (the most the sender may write).
    pub len: usize,
    pub tag: c_int,
    pub mr: &'a Mr,
}

/// The loaded plugin.
#[derive(Debug)]
pub struct Net {
    table: Table<'static>,
    /// The v11+ context from the last `init` (NULL before).
    ctx: AtomicPtr<c_void>,
    path: PathBuf,
    /// The loaded library (`None` for a table linked into this process).
    lib: Option<Library>,
    /// The plugin's statistics function (not part of NCCL's ABI), when the loaded library
    /// exports it.
    stats: Option<FerroNetStatsFn>,
}

// SAFETY: `table` points at the plugin's immutable exported static in a library that is never
// unloaded (the harness never calls dlclose); NCCL itself calls the table from several threads,
// so its entries must be callable from any thread. The context is an opaque pointer the plugin
// allows on any thread (NCCL's service and progress threads share it).
unsafe impl Send for Net {}
// SAFETY: as above; `Net` has no interior mutability.
unsafe impl Sync for Net {}

impl Net {
    /// Loads the plugin found by [`plugin_path`].
    pub fn load() -> Result<Net, String> {
        Self::load_from(&plugin_path()?)
    }

    /// The process-wide instance ([`Net::load`] once).
    pub fn global() -> Result<&'static Net, String> {
        static NET: OnceLock<Result<Net, String>> = OnceLock::new();
        NET.get_or_init(Net::load).as_ref().map_err(Clone::clone)
    }

    /// `dlopen(path, RTLD_NOW|RTLD_LOCAL)` + `dlsym("ncclNetPlugin_v<N>")` of the version
    /// `FERRO_NET_ABI` names (default 8). The library is never closed.
    pub fn load_from(path: &Path) -> Result<Net, String> {
        Self::load_version(path, abi_from_env()?)
    }

    /// As [`Net::load_from`], for the table of `version`.
    pub fn load_version(path: &Path, version: AbiVersion) -> Result<Net, String> {
        let lib = open_library(path)?;
        let table = lib
            .table(version)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Net {
            table,
            ctx: AtomicPtr::new(std::ptr::null_mut()),
            path: path.to_path_buf(),
            lib: Some(lib),
            stats: lib.stats_fn(),
        })
    }

    /// A table linked into this process (the plugin crate's own in-process tests).
    pub fn linked(table: impl Into<Table<'static>>) -> Net {
        Net {
            table: table.into(),
            ctx: AtomicPtr::new(std::ptr::null_mut()),
            path: PathBuf::new(),
            lib: None,
            stats: None,
        }
    }

    /// The table's ABI version.
    pub fn version(&self) -> AbiVersion {
        self.table.version()
    }

    /// Looks up another symbol of the plugin (NULL if absent, or for a linked table).
    pub fn dlsym(&self, name: &CStr) -> *mut c_void {
        self.lib
            .and_then(|l| l.symbol(&name.to_string_lossy()))
            .map_or(std::ptr::null_mut(), |p| p.as_ptr())
    }

    /// The exported table with the current v11+ context (for calls the wrapper does not offer,
    /// such as deliberate NULLs, and for [`raw`]).
    pub fn table(&self) -> Table<'static> {
        self.table.with_ctx(self.ctx.load(Ordering::Acquire))
    }

    /// The loaded file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The table's `name`.
    pub fn name(&self) -> Option<String> {
        c_string(self.table().name_ptr())
    }

    /// `init` with the harness's recording C logger.
    pub fn init(&self) -> NetResult<()> {
        self.init_with(logger::nccl_logger())
    }

    /// `init` with any logger (or NULL). For v11+ this is a communicator's `init`: the context
    /// it returns replaces the previous one, which is finalized.
    pub fn init_with(&self, logger: ncclDebugLogger_t) -> NetResult<()> {
        self.init_full(logger, None, 0, NCCL_NET_TRAFFIC_CLASS_UNDEF)
    }

    /// `init` with everything a version may take: logger, profiler callback (v10+), communicator
    /// id and traffic class (v11+; v10 passes the traffic class to `connect` instead).
    pub fn init_full(
        &self,
        logger: ncclDebugLogger_t,
        profiler: ncclProfilerCallback_t,
        comm_id: u64,
        traffic_class: c_int,
    ) -> NetResult<()> {
        let ctx = raw::init_ctx(self.table, logger, profiler, comm_id, traffic_class)?;
        let old = self.ctx.swap(ctx, Ordering::AcqRel);
        if !old.is_null() {
            raw::finalize(self.table.with_ctx(old))?;
        }
        Ok(())
    }

    /// `finalize` of the current context (v11+; nothing before v11).
    pub fn finalize(&self) -> NetResult<()> {
        let old = self.ctx.swap(std::ptr::null_mut(), Ordering::AcqRel);
        raw::finalize(self.table.with_ctx(old))
    }

    /// `devices`.
    pub fn devices(&self) -> NetResult<c_int> {
        raw::devices(self.table())
    }

    /// `makeVDevice` (v9+): the index of the virtual device fused from `devs` (`ndevs` is their
    /// count; [`raw::make_vdevice`] passes any count).
    pub fn make_vdevice(&self, devs: &[c_int]) -> NetResult<c_int> {
        let ndevs = c_int::try_from(devs.len()).map_err(|_| ncclResult_t::InvalidArgument)?;
        raw::make_vdevice(self.table(), ndevs, devs)
    }

    /// `getProperties`, with unfilled fields left at [`PROP_UNSET`] (see [`Properties::unset_fields`]).
    pub fn get_properties(&self, dev: c_int) -> NetResult<Properties> {
        let mut p = Properties::unset_raw(self.version());
        raw::get_properties_any(self.table(), dev, &mut p)?;
        Ok(Properties::from_raw(&p))
    }

    /// The index of the device named `name`.
    pub fn device_by_name(&self, name: &str) -> HResult<c_int> {
        let n = self.devices().call("devices")?;
        let mut seen = Vec::new();
        for dev in 0..n {
            let p = self.get_properties(dev).call("getProperties")?;
            if p.name.as_deref() == Some(name) {
                return Ok(dev);
            }
            seen.push(p.name.unwrap_or_else(|| "(NULL)".into()));
        }
        Err(HarnessError::Failed(format!(
            "no device named {name}; the plugin has {seen:?}"
        )))
    }

    /// `listen`: the handle to give to peers, and the listen comm.
    pub fn listen(&self, dev: c_int) -> NetResult<(Handle, ListenComm)> {
        let mut h = Handle::zeroed();
        let comm = raw::listen(self.table(), dev, &mut h.0)?;
        assert!(
            !comm.is_null(),
            "listen returned success with a NULL listenComm (the contract forbids it)"
        );
        Ok((h, ListenComm(comm)))
    }

    /// `connect`: `Ok(None)` means "call again with the same handle buffer".
    pub fn connect(&self, dev: c_int, handle: &mut Handle) -> NetResult<Option<SendComm>> {
        let (comm, dev_comm) = raw::connect(self.table(), dev, &mut handle.0)?;
        assert!(
            dev_comm.is_null(),
            "connect produced a device handle; a host plugin must leave it NULL"
        );
        Ok((!comm.is_null()).then_some(SendComm(comm)))
    }

    /// `accept`: `Ok(None)` means "call again".
    pub fn accept(&self, listen: &ListenComm) -> NetResult<Option<RecvComm>> {
        // SAFETY: a live listen comm.
        let (comm, dev_comm) = unsafe { raw::accept(self.table(), listen.0) }?;
        assert!(
            dev_comm.is_null(),
            "accept produced a device handle; a host plugin must leave it NULL"
        );
        Ok((!comm.is_null()).then_some(RecvComm(comm)))
    }

    /// The plugin's counters for `comm` and its process's allocation count (`ferroNetStats_v1`,
    /// not part of NCCL's ABI); `Ok(None)` when the loaded library does not export it.
    pub fn stats(&self, comm: &impl Comm) -> NetResult<Option<ferroNetStats_v1_t>> {
        let Some(f) = self.stats else {
            return Ok(None);
        };
        let mut out = ferroNetStats_v1_t::default();
        // SAFETY: a live comm of this plugin; a valid out-pointer.
        let r = unsafe { f(comm.as_ptr(), &mut out) };
        if r == ncclResult_t::Success {
            Ok(Some(out))
        } else {
            Err(r)
        }
    }

    /// `regMr` of `offset..offset+len` of `buf` with `type_` (`NCCL_PTR_HOST` for host memory).
    pub fn reg_mr(
        &self,
        comm: &impl Comm,
        buf: &Buffer,
        offset: usize,
        len: usize,
        type_: c_int,
    ) -> NetResult<Mr> {
        // SAFETY: the range lies in a Buffer, which stays mapped for the life of the process.
        unsafe { self.reg_ptr(comm, buf.ptr_at(offset, len), len, type_) }
    }

    /// `regMr` of `[data, data + len)`, memory the caller owns (the benchmark's mappings).
    ///
    /// # Safety
    /// The range stays mapped until the registration is released with [`Net::dereg_mr`] (or
    /// the process ends).
    pub unsafe fn reg_ptr(
        &self,
        comm: &impl Comm,
        data: *mut c_void,
        len: usize,
        type_: c_int,
    ) -> NetResult<Mr> {
        // SAFETY: a live comm; the range per this function's contract.
        let mh = unsafe { raw::reg_mr(self.table(), comm.as_ptr(), data, len, type_) }?;
        Ok(Mr(mh))
    }

    /// `regMr` of a whole buffer as host memory.
    pub fn reg_host(&self, comm: &impl Comm, buf: &Buffer) -> NetResult<Mr> {
        self.reg_mr(comm, buf, 0, buf.len(), ferro_ffi::NCCL_PTR_TYPE_HOST)
    }

    /// `deregMr`.
    pub fn dereg_mr(&self, comm: &impl Comm, mr: Mr) -> NetResult<()> {
        // SAFETY: a live comm and an mhandle that regMr returned for it, consumed here.
        unsafe { raw::dereg_mr(self.table(), comm.as_ptr(), mr.0) }
    }

    /// `isend` of `offset..offset+len` of `buf`: `Ok(None)` means "not posted, call again".
    pub fn isend(
        &self,
        comm: &SendComm,
        buf: &Buffer,
        offset: usize,
        len: usize,
        tag: c_int,
        mr: &Mr,
    ) -> NetResult<Option<Request>> {
        // SAFETY: the data lies in a Buffer, which stays mapped for the life of the process, so
        // the plugin may read it until the request completes or the comm is closed.
        unsafe { self.isend_ptr(comm, buf.ptr_at(offset, len), len, tag, mr) }
    }

    /// `isend` of `[data, data + len)`, without allocating: `Ok(None)` means "not posted, call
    /// again".
    ///
    /// # Safety
    /// The range lies in the memory registered as `mr` and stays mapped and unchanged until the
    /// request completes.
    pub unsafe fn isend_ptr(
        &self,
        comm: &SendComm,
        data: *mut c_void,
        len: usize,
        tag: c_int,
        mr: &Mr,
    ) -> NetResult<Option<Request>> {
        // SAFETY: a live send comm; the data per this function's contract.
        let req = unsafe {
            raw::isend_bytes(
                self.table(),
                comm.0,
                data,
                len,
                tag,
                mr.0,
                std::ptr::null_mut(),
            )
        }?;
        Ok((!req.is_null()).then_some(Request { ptr: req, n: 1 }))
    }

    /// `irecv` of one or more buffers (a grouped receive when `slots.len() > 1`).
    pub fn irecv(&self, comm: &RecvComm, slots: &[RecvSlot<'_>]) -> NetResult<Option<Request>> {
        let mut data: Vec<*mut c_void> = slots
            .iter()
            .map(|s| s.buf.ptr_at(s.offset, s.len))
            .collect();
        let sizes: Vec<usize> = slots.iter().map(|s| s.len).collect();
        let mut tags: Vec<c_int> = slots.iter().map(|s| s.tag).collect();
        let mut mhs: Vec<*mut c_void> = slots.iter().map(|s| s.mr.0).collect();
        // SAFETY: a live recv comm; n arrays of n entries each, valid for the call (the plugin
        // copies them, as NCCL passes stack arrays); the buffers stay mapped for the life of the
        // process.
        let req = unsafe {
            raw::irecv_bytes(
                self.table(),
                comm.0,
                &mut data,
                &sizes,
                &mut tags,
                &mut mhs,
                None,
                std::ptr::null_mut(),
            )
        }?;
        Ok((!req.is_null()).then_some(Request {
            ptr: req,
            n: slots.len(),
        }))
    }

    /// `irecv` of a single buffer.
    pub fn irecv_one(
        &self,
        comm: &RecvComm,
        buf: &Buffer,
        offset: usize,
        len: usize,
        tag: c_int,
        mr: &Mr,
    ) -> NetResult<Option<Request>> {
        // SAFETY: the buffer lies in a Buffer, which stays mapped for the life of the process.
        unsafe { self.irecv_ptr(comm, buf.ptr_at(offset, len), len, tag, mr) }
    }

    /// `irecv` of the single buffer `[data, data + len)`, without allocating.
    ///
    /// # Safety
    /// The range lies in the memory registered as `mr` and stays mapped and unused until the
    /// request completes.
    pub unsafe fn irecv_ptr(
        &self,
        comm: &RecvComm,
        data: *mut c_void,
        len: usize,
        tag: c_int,
        mr: &Mr,
    ) -> NetResult<Option<Request>> {
        // SAFETY: a live recv comm; one-entry arrays valid for the call (the plugin copies them,
        // as NCCL passes stack arrays); the buffer per this function's contract.
        let req = unsafe {
            raw::irecv_bytes(
                self.table(),
                comm.0,
                &mut [data],
                &[len],
                &mut [tag],
                &mut [mr.0],
                None,
                std::ptr::null_mut(),
            )
        }?;
        Ok((!req.is_null()).then_some(Request { ptr: req, n: 1 }))
    }

    /// `test`: `(false, [])` while in flight; `(true, sizes)` once done (`sizes` has `n` entries
    /// for a receive, 1 for a send). A done request is dead: do not test it again.
    pub fn test(&self, req: &Request) -> NetResult<(bool, Vec<c_int>)> {
        let mut sizes = vec![SIZE_UNSET; req.n.max(1)];
        if self.test_into(req, &mut sizes)? {
            Ok((true, sizes))
        } else {
            Ok((false, Vec::new()))
        }
    }

    /// `test` without allocating: `Ok(true)` once done, with the request's sizes in
    /// `sizes[..n]` (`sizes` needs room for `n`: 1 for a send). A done request is dead: do not
    /// test it again.
    pub fn test_into(&self, req: &Request, sizes: &mut [c_int]) -> NetResult<bool> {
        let n = req.n.max(1);
        assert!(
            n <= raw::MAX_IRECV_BUFFERS && sizes.len() >= n,
            "room for {} sizes, the request has {n}",
            sizes.len()
        );
        let mut all = [SIZE_UNSET; raw::MAX_IRECV_BUFFERS + SIZES_GUARD];
        // SAFETY: a request the plugin returned and has not reported done; room for n sizes plus
        // a guard.
        let done = unsafe { raw::test(self.table(), req.ptr, all.as_mut_ptr()) }?;
        assert!(
            all[n..n + SIZES_GUARD].iter().all(|s| *s == SIZE_UNSET),
            "test wrote sizes past the request's {n} buffer(s): {:?}",
            &all[..n + SIZES_GUARD]
        );
        match done {
            0 => Ok(false),
            1 => {
                sizes[..n].copy_from_slice(&all[..n]);
                Ok(true)
            }
            other => panic!("test returned success with *done = {other} (must be 0 or 1)"),
        }
    }

    /// `test` with `sizes` = NULL (as NCCL's bootstrap and flush paths call it).
    pub fn test_without_sizes(&self, req: &Request) -> NetResult<bool> {
        // SAFETY: a live request; `sizes` NULL is allowed by the contract.
        let done = unsafe { raw::test(self.table(), req.ptr, std::ptr::null_mut()) }?;
        match done {
            0 => Ok(false),
            1 => Ok(true),
            other => panic!("test returned success with *done = {other} (must be 0 or 1)"),
        }
    }

    /// `closeSend`.
    pub fn close_send(&self, comm: SendComm) -> NetResult<()> {
        // SAFETY: a live send comm, consumed here.
        unsafe { raw::close(self.table(), raw::CommKind::Send, comm.0) }
    }

    /// `closeRecv`.
    pub fn close_recv(&self, comm: RecvComm) -> NetResult<()> {
        // SAFETY: a live recv comm, consumed here.
        unsafe { raw::close(self.table(), raw::CommKind::Recv, comm.0) }
    }

    /// `closeListen`.
    pub fn close_listen(&self, comm: ListenComm) -> NetResult<()> {
        // SAFETY: a live listen comm, consumed here.
        unsafe { raw::close(self.table(), raw::CommKind::Listen, comm.0) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferro_ffi::ncclNet_v8_t;

    /// A `test` that reports done with size 42 in the first slot, and writes the slot after it
    /// too when the request pointer is non-NULL (a plugin writing past the request's buffers).
    unsafe extern "C" fn fake_test(
        req: *mut c_void,
        done: *mut c_int,
        sizes: *mut c_int,
    ) -> ncclResult_t {
        // SAFETY: Net::test_into passes a valid `done` and room for the request's sizes plus a
        // guard.
        unsafe {
            *done = 1;
            *sizes = 42;
            if !req.is_null() {
                *sizes.add(1) = 43;
            }
        }
        ncclResult_t::Success
    }

    static V8: ncclNet_v8_t = ncclNet_v8_t {
        name: c"fake".as_ptr(),
        init: None,
        devices: None,
        getProperties: None,
        listen: None,
        connect: None,
        accept: None,
        regMr: None,
        regMrDmaBuf: None,
        deregMr: None,
        isend: None,
        irecv: None,
        iflush: None,
        test: Some(fake_test),
        closeSend: None,
        closeRecv: None,
        closeListen: None,
        getDeviceMr: None,
        irecvConsumed: None,
    };

    #[test]
    fn test_into_hands_back_the_sizes_of_a_done_request_without_allocating() {
        let net = Net::linked(&V8);
        let req = Request {
            ptr: std::ptr::null_mut(),
            n: 1,
        };
        let mut sizes = [0; 1];
        assert_eq!(net.test_into(&req, &mut sizes), Ok(true));
        assert_eq!(sizes, [42]);
        assert_eq!(net.test(&req), Ok((true, vec![42])));
    }

    #[test]
    #[should_panic(expected = "test wrote sizes past the request's 1 buffer(s)")]
    fn a_plugin_that_writes_sizes_past_the_request_is_caught() {
        let net = Net::linked(&V8);
        let mut x = 0u8;
        let req = Request {
            ptr: (&raw mut x).cast(),
            n: 1,
        };
        let _ = net.test_into(&req, &mut [0; 1]);
    }

    #[test]
    fn profile_dir_handles_deps_and_bins() {
        assert_eq!(
            profile_dir(Path::new("/w/target/debug/deps/host_load-1234")),
            Some(PathBuf::from("/w/target/debug"))
        );
        assert_eq!(
            profile_dir(Path::new("/w/target/release/nccl-harness")),
            Some(PathBuf::from("/w/target/release"))
        );
    }
}
