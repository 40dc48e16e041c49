//! An open device (`struct ibv_context`): the device list it is opened from, its queries
//! (device, port, GID, whole GID table) and its asynchronous events, read without a thread.

use crate::error::{Error, Result};
use crate::live::{self, Kind, report_drop_error};
use crate::loader::{Verbs, verbs};
use crate::sys::*;
use core::ffi::{CStr, c_int, c_uint};
use core::ptr::NonNull;
use std::sync::Arc;

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
    pub(crate) v: &'static Verbs,
    ptr: NonNull<ibv_context>,
    pub(crate) name: String,
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
        live::inc(Kind::Context);
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
    /// A CQ, by its address (compare with [`Cq::as_ptr`](crate::Cq::as_ptr)).
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

impl Context {
    /// The port's speed in Mbps from `ibv_query_port_speed` (which answers in units of 100
    /// Mbps). `None` when libibverbs lacks the call.
    pub fn query_port_speed(&self, port: u8) -> Option<Result<u64>> {
        let f = self.v.query_port_speed?;
        let mut speed: u64 = 0;
        // SAFETY: live context; `speed` is a valid u64 the call writes.
        let rc = unsafe { f(self.as_ptr(), port, &mut speed) };
        if rc != 0 {
            return Some(Err(
                Error::new("ibv_query_port_speed", rc).context(self.name.clone())
            ));
        }
        Some(Ok(speed.saturating_mul(100)))
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the context is live and every child holds an Arc to it, so none remains.
        let rc = unsafe { (self.v.close_device)(self.as_ptr()) };
        if rc != 0 {
            report_drop_error(&format!("ibv_close_device({}) failed: {rc}", self.name));
        }
        live::dec(Kind::Context);
    }
}
