//! Safe owners of verbs objects.
//!
//! One owner per object, created the moment the verb succeeds, destroyed exactly once in `Drop`.
//! Each child keeps its parent alive through an `Arc` (`Mr → Pd → Context`, `Qp → Pd + Cq`,
//! `Cq → Context`), so destruction order is always child first, whatever order the plugin's
//! comms are closed in. `Drop` never panics: a failed destroy is reported through the hook set
//! with [`set_drop_error_hook`] and the object is leaked.

use crate::error::{Error, Result};
use crate::loader::{Verbs, verbs};
use crate::ops;
use crate::sys::*;
use core::ffi::{CStr, c_int, c_uint, c_void};
use core::ptr::NonNull;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};

static DROP_HOOK: OnceLock<fn(&str)> = OnceLock::new();

/// Where failures in `Drop` are reported (the plugin forwards them to NCCL's WARN).
pub fn set_drop_error_hook(hook: fn(&str)) {
    let _ = DROP_HOOK.set(hook);
}

fn report_drop_error(msg: &str) {
    match DROP_HOOK.get() {
        Some(h) => h(msg),
        None => eprintln!("ferro-verbs: {msg}"),
    }
}

/// Live verbs objects created through this crate, by kind (for leak checks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveCounts {
    pub contexts: i64,
    pub pds: i64,
    pub cqs: i64,
    pub qps: i64,
    pub mrs: i64,
}

static LIVE: [AtomicI64; 5] = [const { AtomicI64::new(0) }; 5];
const K_CTX: usize = 0;
const K_PD: usize = 1;
const K_CQ: usize = 2;
const K_QP: usize = 3;
const K_MR: usize = 4;

fn live_inc(k: usize) {
    LIVE[k].fetch_add(1, Ordering::Relaxed);
}
fn live_dec(k: usize) {
    LIVE[k].fetch_sub(1, Ordering::Relaxed);
}

/// Counts of live objects.
pub fn live_counts() -> LiveCounts {
    let g = |k: usize| LIVE[k].load(Ordering::Relaxed);
    LiveCounts {
        contexts: g(K_CTX),
        pds: g(K_PD),
        cqs: g(K_CQ),
        qps: g(K_QP),
        mrs: g(K_MR),
    }
}

fn lib() -> Result<&'static Verbs> {
    verbs().map_err(|e| Error::new("dlopen libibverbs", libc::ENOSYS).context(e.to_string()))
}

/// Names of the RDMA devices libibverbs sees. "No devices" is `Ok(vec![])`, both when the kernel
/// has no RDMA support (`NULL` + `ENOSYS`) and when the list is simply empty.
pub fn device_names() -> Result<Vec<String>> {
    let v = lib()?;
    let mut n: c_int = 0;
    // SAFETY: n is a valid out-pointer.
    let list = unsafe { (v.get_device_list)(&mut n) };
    if list.is_null() {
        let err = Error::last("ibv_get_device_list");
        return if err.errno == libc::ENOSYS || err.errno == 0 {
            Ok(Vec::new())
        } else {
            Err(err)
        };
    }
    let count = usize::try_from(n).unwrap_or(0);
    let mut names = Vec::with_capacity(count);
    for i in 0..count {
        // SAFETY: list holds `n` device pointers (NULL-terminated array from libibverbs).
        let dev = unsafe { *list.add(i) };
        if dev.is_null() {
            break;
        }
        // SAFETY: dev is an element of the live list.
        let name = unsafe { (v.get_device_name)(dev) };
        if !name.is_null() {
            // SAFETY: libibverbs returns a NUL-terminated name owned by the device.
            names.push(
                unsafe { CStr::from_ptr(name) }
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
    // SAFETY: list came from get_device_list and is freed once.
    unsafe { (v.free_device_list)(list) };
    Ok(names)
}

/// An open device (`struct ibv_context`).
#[derive(Debug)]
pub struct Context {
    v: &'static Verbs,
    ptr: NonNull<ibv_context>,
    name: String,
}

// SAFETY: libibverbs contexts may be used from any thread; the verbs are thread-safe at the C level
// and this owner only hands out the pointer to verbs calls.
unsafe impl Send for Context {}
// SAFETY: as above; no Rust-side mutable state.
unsafe impl Sync for Context {}

impl Context {
    /// Opens the device called `name`.
    pub fn open(name: &str) -> Result<Arc<Context>> {
        let v = lib()?;
        let mut n: c_int = 0;
        // SAFETY: n is a valid out-pointer.
        let list = unsafe { (v.get_device_list)(&mut n) };
        if list.is_null() {
            return Err(Error::last("ibv_get_device_list").context(name.to_string()));
        }
        let mut found = core::ptr::null_mut();
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: index within the list's length.
            let dev = unsafe { *list.add(i) };
            if dev.is_null() {
                break;
            }
            // SAFETY: dev is live while the list is.
            let dn = unsafe { (v.get_device_name)(dev) };
            // SAFETY: NUL-terminated name owned by the device.
            if !dn.is_null() && unsafe { CStr::from_ptr(dn) }.to_bytes() == name.as_bytes() {
                found = dev;
                break;
            }
        }
        let ctx = if found.is_null() {
            None
        } else {
            // SAFETY: found is an element of the live list; contexts outlive the list.
            Some(unsafe { (v.open_device)(found) })
        };
        let err = Error::last("ibv_open_device");
        // SAFETY: list came from get_device_list, freed once.
        unsafe { (v.free_device_list)(list) };
        let ctx = match ctx {
            None => {
                return Err(Error::new("ibv_open_device", libc::ENODEV)
                    .context(format!("no device named {name}")));
            }
            Some(p) => NonNull::new(p).ok_or_else(|| err.context(name.to_string()))?,
        };
        live_inc(K_CTX);
        Ok(Arc::new(Context {
            v,
            ptr: ctx,
            name: name.to_string(),
        }))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn as_ptr(&self) -> *mut ibv_context {
        self.ptr.as_ptr()
    }

    pub fn verbs(&self) -> &'static Verbs {
        self.v
    }

    pub fn query_device(&self) -> Result<ibv_device_attr> {
        // SAFETY: ibv_device_attr is plain old data; all-zero is a valid value.
        let mut attr: ibv_device_attr = unsafe { core::mem::zeroed() };
        // SAFETY: live context, valid out-pointer.
        let rc = unsafe { (self.v.query_device)(self.as_ptr(), &mut attr) };
        if rc != 0 {
            return Err(Error::new("ibv_query_device", rc).context(self.name.clone()));
        }
        Ok(attr)
    }

    pub fn query_port(&self, port: u8) -> Result<ibv_port_attr> {
        let mut attr = ibv_port_attr::default();
        // SAFETY: live context; attr is zeroed and at least as large as the compat struct.
        let rc = unsafe { (self.v.query_port)(self.as_ptr(), port, &mut attr) };
        if rc != 0 {
            return Err(
                Error::new("ibv_query_port", rc).context(format!("{} port {port}", self.name))
            );
        }
        Ok(attr)
    }

    pub fn query_gid(&self, port: u8, index: u32) -> Result<ibv_gid> {
        let mut gid = ibv_gid::default();
        let idx = c_int::try_from(index).map_err(|_| Error::new("ibv_query_gid", libc::EINVAL))?;
        // SAFETY: live context, valid out-pointer.
        let rc = unsafe { (self.v.query_gid)(self.as_ptr(), port, idx, &mut gid) };
        if rc != 0 {
            return Err(Error::last("ibv_query_gid")
                .context(format!("{} port {port} index {index}", self.name)));
        }
        Ok(gid)
    }
}

/// What an asynchronous event refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventTarget {
    Port(u8),
    /// A QP, by number.
    Qp(u32),
    /// A CQ, by its address (compare with [`Cq::as_ptr`]).
    Cq(usize),
    Device,
    Other,
}

/// One asynchronous event of a device (already acknowledged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncEvent {
    /// `IBV_EVENT_*`.
    pub kind: c_uint,
    pub target: EventTarget,
}

impl AsyncEvent {
    pub fn name(&self) -> &'static str {
        event_type_name(self.kind)
    }
}

impl Context {
    /// Makes `ibv_get_async_event` non-blocking on this context (its `async_fd` gets
    /// `O_NONBLOCK`), so events can be read from data-path calls without a thread.
    pub fn set_async_nonblocking(&self) -> Result<()> {
        // SAFETY: live context; async_fd is an fd owned by the context, read here only.
        let fd = unsafe { (*self.as_ptr()).async_fd };
        // SAFETY: fcntl on an fd; F_GETFL/F_SETFL take and return plain flags.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above.
        if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            return Err(Error::last("fcntl(async_fd, O_NONBLOCK)").context(self.name.clone()));
        }
        Ok(())
    }

    /// The next asynchronous event, if one is pending (after [`Context::set_async_nonblocking`];
    /// otherwise this blocks until one arrives). The event is acknowledged before it is
    /// returned, so destroying the object it names never waits for it.
    pub fn next_async_event(&self) -> Result<Option<AsyncEvent>> {
        // SAFETY: plain-old-data out-parameter.
        let mut ev: ibv_async_event = unsafe { core::mem::zeroed() };
        // SAFETY: live context, valid out-pointer.
        if unsafe { (self.v.get_async_event)(self.as_ptr(), &mut ev) } != 0 {
            let e = std::io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
                Some(code) => {
                    Err(Error::new("ibv_get_async_event", code).context(self.name.clone()))
                }
                None => Ok(None),
            };
        }
        let target = match ev.event_type {
            IBV_EVENT_PORT_ACTIVE
            | IBV_EVENT_PORT_ERR
            | IBV_EVENT_LID_CHANGE
            | IBV_EVENT_PKEY_CHANGE
            | IBV_EVENT_SM_CHANGE
            | IBV_EVENT_CLIENT_REREGISTER
            | IBV_EVENT_GID_CHANGE => {
                // SAFETY: for port events the element union holds `int port_num`, which is at the
                // start of the union; reading 4 bytes of the pointer-sized union is in bounds.
                let port = unsafe { core::ptr::addr_of!(ev.element).cast::<c_int>().read() };
                EventTarget::Port(u8::try_from(port).unwrap_or(0))
            }
            IBV_EVENT_QP_FATAL
            | IBV_EVENT_QP_REQ_ERR
            | IBV_EVENT_QP_ACCESS_ERR
            | IBV_EVENT_COMM_EST
            | IBV_EVENT_SQ_DRAINED
            | IBV_EVENT_PATH_MIG
            | IBV_EVENT_PATH_MIG_ERR
            | IBV_EVENT_QP_LAST_WQE_REACHED => {
                let qp = ev.element.cast::<ibv_qp>();
                if qp.is_null() {
                    EventTarget::Other
                } else {
                    // SAFETY: the QP an unacknowledged event names cannot be destroyed (destroy
                    // waits for the acknowledgement, which comes below), so it is live here.
                    EventTarget::Qp(unsafe { (*qp).qp_num })
                }
            }
            IBV_EVENT_CQ_ERR => EventTarget::Cq(ev.element as usize),
            IBV_EVENT_DEVICE_FATAL => EventTarget::Device,
            _ => EventTarget::Other,
        };
        let out = AsyncEvent {
            kind: ev.event_type,
            target,
        };
        // SAFETY: ev came from ibv_get_async_event and is acknowledged exactly once.
        unsafe { (self.v.ack_async_event)(&mut ev) };
        Ok(Some(out))
    }
}

impl Context {
    /// The device's whole GID table in one call (`_ibv_query_gid_table`, rdma-core 32+): the valid
    /// entries of every port, with type and netdev index. `None` when libibverbs lacks the call;
    /// `max_entries` bounds the answer (the sum of the ports' `gid_tbl_len`).
    pub fn query_gid_table(&self, max_entries: usize) -> Option<Result<Vec<ibv_gid_entry>>> {
        let f = self.v.query_gid_table?;
        let mut entries = vec![ibv_gid_entry::default(); max_entries.max(1)];
        // SAFETY: live context; the buffer holds max_entries entries of the size passed.
        let n = unsafe {
            f(
                self.as_ptr(),
                entries.as_mut_ptr().cast(),
                entries.len(),
                0,
                core::mem::size_of::<ibv_gid_entry>(),
            )
        };
        if n < 0 {
            let code = i32::try_from(-n).unwrap_or(libc::EINVAL);
            return Some(Err(
                Error::new("ibv_query_gid_table", code).context(self.name.clone())
            ));
        }
        entries.truncate(usize::try_from(n).unwrap_or(0));
        Some(Ok(entries))
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the context is live and every child holds an Arc to it, so none remains.
        let rc = unsafe { (self.v.close_device)(self.as_ptr()) };
        if rc != 0 {
            report_drop_error(&format!("ibv_close_device({}) failed: {rc}", self.name));
        }
        live_dec(K_CTX);
    }
}

/// A protection domain.
#[derive(Debug)]
pub struct Pd {
    ctx: Arc<Context>,
    ptr: NonNull<ibv_pd>,
}

// SAFETY: PDs are thread-safe C objects; this owner has no mutable Rust state.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Pd {
    pub fn new(ctx: &Arc<Context>) -> Result<Arc<Pd>> {
        // SAFETY: live context.
        let p = unsafe { (ctx.v.alloc_pd)(ctx.as_ptr()) };
        let ptr =
            NonNull::new(p).ok_or_else(|| Error::last("ibv_alloc_pd").context(ctx.name.clone()))?;
        live_inc(K_PD);
        Ok(Arc::new(Pd {
            ctx: ctx.clone(),
            ptr,
        }))
    }

    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    pub fn as_ptr(&self) -> *mut ibv_pd {
        self.ptr.as_ptr()
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: live PD; all MRs/QPs hold an Arc to it, so none remains.
        let rc = unsafe { (self.ctx.v.dealloc_pd)(self.as_ptr()) };
        if rc != 0 {
            report_drop_error(&format!("ibv_dealloc_pd({}) failed: {rc}", self.ctx.name));
        }
        live_dec(K_PD);
    }
}

/// A completion queue.
#[derive(Debug)]
pub struct Cq {
    ctx: Arc<Context>,
    ptr: NonNull<ibv_cq>,
}

// SAFETY: providers serialise CQ access internally (verbs are thread-safe); no Rust-side state.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

impl Cq {
    pub fn new(ctx: &Arc<Context>, cqe: u32) -> Result<Arc<Cq>> {
        let n = c_int::try_from(cqe).map_err(|_| Error::new("ibv_create_cq", libc::EINVAL))?;
        // SAFETY: live context; no channel, vector 0.
        let p = unsafe {
            (ctx.v.create_cq)(
                ctx.as_ptr(),
                n,
                core::ptr::null_mut(),
                core::ptr::null_mut(),
                0,
            )
        };
        let ptr = NonNull::new(p).ok_or_else(|| {
            Error::last("ibv_create_cq").context(format!("{} cqe={cqe}", ctx.name))
        })?;
        live_inc(K_CQ);
        Ok(Arc::new(Cq {
            ctx: ctx.clone(),
            ptr,
        }))
    }

    pub fn as_ptr(&self) -> *mut ibv_cq {
        self.ptr.as_ptr()
    }

    /// Polls up to `wc.len()` completions.
    pub fn poll(&self, wc: &mut [ibv_wc]) -> Result<usize> {
        // SAFETY: the CQ is live for as long as self.
        unsafe { ops::poll_cq(self.as_ptr(), wc) }
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: live CQ; QPs using it hold an Arc, so none remains.
        let rc = unsafe { (self.ctx.v.destroy_cq)(self.as_ptr()) };
        if rc != 0 {
            report_drop_error(&format!("ibv_destroy_cq({}) failed: {rc}", self.ctx.name));
        }
        live_dec(K_CQ);
    }
}

/// Capacities asked of a new RC QP.
#[derive(Debug, Clone, Copy)]
pub struct QpCaps {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// A reliable-connected queue pair.
#[derive(Debug)]
pub struct Qp {
    pd: Arc<Pd>,
    _send_cq: Arc<Cq>,
    _recv_cq: Arc<Cq>,
    ptr: NonNull<ibv_qp>,
    qpn: u32,
}

// SAFETY: posting and modifying QPs is thread-safe in libibverbs providers; no Rust-side state
// beyond the immutable qpn.
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

impl Qp {
    pub fn new_rc(pd: &Arc<Pd>, send_cq: &Arc<Cq>, recv_cq: &Arc<Cq>, caps: QpCaps) -> Result<Qp> {
        let mut attr = ibv_qp_init_attr {
            qp_context: core::ptr::null_mut(),
            send_cq: send_cq.as_ptr(),
            recv_cq: recv_cq.as_ptr(),
            srq: core::ptr::null_mut(),
            cap: ibv_qp_cap {
                max_send_wr: caps.max_send_wr,
                max_recv_wr: caps.max_recv_wr,
                max_send_sge: caps.max_send_sge,
                max_recv_sge: caps.max_recv_sge,
                max_inline_data: caps.max_inline_data,
            },
            qp_type: IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: live PD and CQs; attr fully initialised.
        let p = unsafe { (pd.ctx.v.create_qp)(pd.as_ptr(), &mut attr) };
        let ptr = NonNull::new(p)
            .ok_or_else(|| Error::last("ibv_create_qp").context(pd.ctx.name.clone()))?;
        // SAFETY: ptr is a live QP just created.
        let qpn = unsafe { (*ptr.as_ptr()).qp_num };
        live_inc(K_QP);
        Ok(Qp {
            pd: pd.clone(),
            _send_cq: send_cq.clone(),
            _recv_cq: recv_cq.clone(),
            ptr,
            qpn,
        })
    }

    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    pub fn as_ptr(&self) -> *mut ibv_qp {
        self.ptr.as_ptr()
    }

    pub fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    /// `ibv_modify_qp` with the given attribute mask.
    pub fn modify(&self, attr: &mut ibv_qp_attr, mask: c_int) -> Result<()> {
        // SAFETY: live QP; attr is a valid, initialised attribute struct.
        let rc = unsafe { (self.pd.ctx.v.modify_qp)(self.as_ptr(), attr, mask) };
        if rc != 0 {
            return Err(Error::new("ibv_modify_qp", rc).context(format!(
                "{} qpn {} to state {} (mask {mask:#x})",
                self.pd.ctx.name, self.qpn, attr.qp_state
            )));
        }
        Ok(())
    }

    /// `ibv_query_qp` of the attributes in `mask` (`EOPNOTSUPP` when libibverbs lacks it).
    pub fn query(&self, mask: c_int) -> Result<ibv_qp_attr> {
        let Some(f) = self.pd.ctx.v.query_qp else {
            return Err(Error::new("ibv_query_qp", libc::EOPNOTSUPP));
        };
        let mut attr = ibv_qp_attr::default();
        // SAFETY: all-zero bytes are a valid ibv_qp_init_attr (NULL pointers, zero counts).
        let mut init: ibv_qp_init_attr = unsafe { core::mem::zeroed() };
        // SAFETY: live QP; valid out-structs of the types libibverbs fills.
        let rc = unsafe { f(self.as_ptr(), &mut attr, mask, &mut init) };
        if rc != 0 {
            return Err(Error::new("ibv_query_qp", rc)
                .context(format!("{} qpn {}", self.pd.ctx.name, self.qpn)));
        }
        Ok(attr)
    }

    /// Posts a chain of send work requests.
    ///
    /// # Safety
    /// Every scatter entry must describe registered memory that stays valid and unmoved until the
    /// corresponding work request completes (or the QP is destroyed).
    pub unsafe fn post_send(&self, wr: *mut ibv_send_wr) -> Result<()> {
        // SAFETY: live QP; wr validity per the caller's contract.
        unsafe { ops::post_send(self.as_ptr(), wr) }
    }

    /// Posts a chain of receive work requests.
    ///
    /// # Safety
    /// As [`Qp::post_send`].
    pub unsafe fn post_recv(&self, wr: *mut ibv_recv_wr) -> Result<()> {
        // SAFETY: live QP; wr validity per the caller's contract.
        unsafe { ops::post_recv(self.as_ptr(), wr) }
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: live QP, destroyed once.
        let rc = unsafe { (self.pd.ctx.v.destroy_qp)(self.as_ptr()) };
        if rc != 0 {
            report_drop_error(&format!(
                "ibv_destroy_qp({} qpn {}) failed: {rc}",
                self.pd.ctx.name, self.qpn
            ));
        }
        live_dec(K_QP);
    }
}

/// A registered memory region: an untyped byte range the NIC may read or write.
#[derive(Debug)]
pub struct Mr {
    pd: Arc<Pd>,
    ptr: NonNull<ibv_mr>,
    lkey: u32,
    rkey: u32,
    addr: u64,
    len: usize,
}

// SAFETY: an MR is an immutable registration; lkey/rkey are plain values.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Mr {
    fn wrap(pd: &Arc<Pd>, p: *mut ibv_mr, op: &'static str, what: String) -> Result<Mr> {
        let ptr = NonNull::new(p).ok_or_else(|| Error::last(op).context(what))?;
        // SAFETY: ptr is a live MR just returned by the library.
        let (lkey, rkey, addr, len) = unsafe {
            let m = &*ptr.as_ptr();
            (m.lkey, m.rkey, m.addr as u64, m.length)
        };
        live_inc(K_MR);
        Ok(Mr {
            pd: pd.clone(),
            ptr,
            lkey,
            rkey,
            addr,
            len,
        })
    }

    /// Registers `len` bytes at `addr`.
    ///
    /// # Safety
    /// The range must be mapped memory that stays mapped until this `Mr` is dropped; the NIC may
    /// read and (with write access) write it concurrently with the program, so no Rust reference
    /// to it may be held across operations.
    pub unsafe fn reg(pd: &Arc<Pd>, addr: *mut c_void, len: usize, access: u32) -> Result<Mr> {
        let v = pd.ctx.v;
        let what = format!("{} addr {addr:p} len {len} access {access:#x}", pd.ctx.name);
        let p = match v.reg_mr_iova2 {
            // SAFETY: live PD; the range contract is the caller's.
            Some(f) => unsafe { f(pd.as_ptr(), addr, len, addr as u64, access) },
            // SAFETY: as above; access fits in a c_int (flags below 2^31).
            None => unsafe { (v.reg_mr)(pd.as_ptr(), addr, len, access as c_int) },
        };
        Self::wrap(pd, p, "ibv_reg_mr", what)
    }

    /// Registers a DMA-BUF range (`ibv_reg_dmabuf_mr`), addressed by the peer at `iova`.
    ///
    /// # Safety
    /// `fd` must be a DMA-BUF file descriptor whose backing stays alive while registered.
    pub unsafe fn reg_dmabuf(
        pd: &Arc<Pd>,
        offset: u64,
        len: usize,
        iova: u64,
        fd: c_int,
        access: u32,
    ) -> Result<Mr> {
        let f = pd.ctx.v.reg_dmabuf_mr.ok_or_else(|| {
            Error::new("ibv_reg_dmabuf_mr", libc::EOPNOTSUPP).context(
                "libibverbs has no ibv_reg_dmabuf_mr (rdma-core older than 34)".to_string(),
            )
        })?;
        let what = format!("{} fd {fd} offset {offset} len {len}", pd.ctx.name);
        // SAFETY: live PD; fd contract is the caller's.
        let p = unsafe { f(pd.as_ptr(), offset, len, iova, fd, access as c_int) };
        Self::wrap(pd, p, "ibv_reg_dmabuf_mr", what)
    }

    pub fn lkey(&self) -> u32 {
        self.lkey
    }
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
    pub fn addr(&self) -> u64 {
        self.addr
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: live MR, deregistered once.
        let rc = unsafe { (self.pd.ctx.v.dereg_mr)(self.ptr.as_ptr()) };
        if rc != 0 {
            report_drop_error(&format!("ibv_dereg_mr({}) failed: {rc}", self.pd.ctx.name));
        }
        live_dec(K_MR);
    }
}

/// Zeroed, page-aligned host memory owned by the plugin (FIFOs, staging). Never exposed as a Rust
/// reference: the NIC writes it, so it is accessed through raw pointers and volatile reads only.
#[derive(Debug)]
pub struct HostBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: plain owned memory; concurrent access is through raw pointers with the caller's ordering.
unsafe impl Send for HostBuf {}
// SAFETY: as above; &HostBuf gives out only raw pointers.
unsafe impl Sync for HostBuf {}

impl HostBuf {
    const ALIGN: usize = 4096;

    pub fn new(len: usize) -> Result<HostBuf> {
        let size = len.max(1).div_ceil(Self::ALIGN) * Self::ALIGN;
        let layout = std::alloc::Layout::from_size_align(size, Self::ALIGN)
            .map_err(|_| Error::new("alloc", libc::EINVAL))?;
        // SAFETY: layout has non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or(Error::new("alloc", libc::ENOMEM))?;
        Ok(HostBuf { ptr, len: size })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for HostBuf {
    fn drop(&mut self) {
        if let Ok(layout) = std::alloc::Layout::from_size_align(self.len, Self::ALIGN) {
            // SAFETY: allocated in `new` with this exact layout; any MR over it was dropped first
            // (owners keep the MR next to the buffer and drop the MR first).
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}
