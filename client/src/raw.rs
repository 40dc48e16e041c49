//! The table calls themselves, over raw pointers and (on the data path) without allocating. The
//! typed [`crate::net::Net`], the benchmark and the in-process tests (which count allocations or
//! misuse the table on purpose) all call the plugin through these; a NULL table entry is
//! `ncclInternalError`.

use core::ffi::{c_int, c_void};
use ferro_ffi::{
    ncclDebugLogger_t, ncclNet_v8_t, ncclNetDeviceHandle_v8_t, ncclNetProperties_v8_t, ncclResult_t,
};

/// A call's outcome: the value, or the non-success code it returned.
pub type NetResult<T> = Result<T, ncclResult_t>;

fn check(r: ncclResult_t) -> NetResult<()> {
    if r == ncclResult_t::Success {
        Ok(())
    } else {
        Err(r)
    }
}

/// A table entry, or `ncclInternalError` when the plugin left it NULL.
fn entry<T: Copy>(f: Option<T>) -> NetResult<T> {
    f.ok_or(ncclResult_t::InternalError)
}

/// `regMr`: the memory handle.
///
/// # Safety
/// `comm` is a live comm of this table's plugin; `[data, data + size)` stays mapped until the
/// handle is deregistered.
pub unsafe fn reg_mr(
    t: &ncclNet_v8_t,
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    ptr_type: c_int,
) -> NetResult<*mut c_void> {
    let f = entry(t.regMr)?;
    let mut mh = core::ptr::null_mut();
    // SAFETY: per this function's contract; a valid out-pointer.
    check(unsafe { f(comm, data, size, ptr_type, &mut mh) })?;
    Ok(mh)
}

/// `deregMr`.
///
/// # Safety
/// `mh` came from `regMr` on `comm` and is not used again.
pub unsafe fn dereg_mr(t: &ncclNet_v8_t, comm: *mut c_void, mh: *mut c_void) -> NetResult<()> {
    let f = entry(t.deregMr)?;
    // SAFETY: per this function's contract.
    check(unsafe { f(comm, mh) })
}

/// `isend`: the request, NULL when the plugin cannot take the send yet.
///
/// # Safety
/// `comm` is a live send comm; `[data, data + size)` lies in the memory registered as `mh` and
/// stays untouched until the request completes.
pub unsafe fn isend(
    t: &ncclNet_v8_t,
    comm: *mut c_void,
    data: *mut c_void,
    size: c_int,
    tag: c_int,
    mh: *mut c_void,
) -> NetResult<*mut c_void> {
    let f = entry(t.isend)?;
    let mut req = core::ptr::null_mut();
    // SAFETY: per this function's contract; a valid out-pointer.
    check(unsafe { f(comm, data, size, tag, mh, &mut req) })?;
    Ok(req)
}

/// `irecv` of `data.len()` buffers (the four slices are one entry per buffer): the request,
/// NULL when the plugin cannot take it yet.
///
/// # Safety
/// `comm` is a live receive comm; every buffer lies in its registered memory and stays unused
/// until the request completes.
pub unsafe fn irecv(
    t: &ncclNet_v8_t,
    comm: *mut c_void,
    data: &mut [*mut c_void],
    sizes: &mut [c_int],
    tags: &mut [c_int],
    mhs: &mut [*mut c_void],
) -> NetResult<*mut c_void> {
    let n = data.len();
    if sizes.len() != n || tags.len() != n || mhs.len() != n {
        return Err(ncclResult_t::InvalidArgument);
    }
    let f = entry(t.irecv)?;
    let mut req = core::ptr::null_mut();
    // SAFETY: per this function's contract; four arrays of n entries (the plugin only reads them
    // during the call); a valid out-pointer.
    check(unsafe {
        f(
            comm,
            c_int::try_from(n).unwrap_or(c_int::MAX),
            data.as_mut_ptr(),
            sizes.as_mut_ptr(),
            tags.as_mut_ptr(),
            mhs.as_mut_ptr(),
            &mut req,
        )
    })?;
    Ok(req)
}

/// `test`: whether the request is done; `sizes` (NULL allowed) receives its sizes when it is.
///
/// # Safety
/// `req` is a request the plugin returned and has not reported done; `sizes` is NULL or has room
/// for the request's buffer count.
pub unsafe fn test(t: &ncclNet_v8_t, req: *mut c_void, sizes: *mut c_int) -> NetResult<c_int> {
    let f = entry(t.test)?;
    let mut done: c_int = -1;
    // SAFETY: per this function's contract; a valid `done` pointer.
    check(unsafe { f(req, &mut done, sizes) })?;
    Ok(done)
}

/// `init` with a logger (NULL: the plugin logs to stderr).
pub fn init(t: &ncclNet_v8_t, logger: ncclDebugLogger_t) -> NetResult<()> {
    let f = entry(t.init)?;
    // SAFETY: the argument is NULL or a C variadic logger valid for the whole process.
    check(unsafe { f(logger) })
}

/// `devices`.
pub fn devices(t: &ncclNet_v8_t) -> NetResult<c_int> {
    let f = entry(t.devices)?;
    let mut n: c_int = 0;
    // SAFETY: a valid out-pointer.
    check(unsafe { f(&mut n) })?;
    Ok(n)
}

/// `getProperties` into `p` (the caller chooses the initial values, e.g. markers for fields the
/// plugin must fill).
pub fn get_properties(
    t: &ncclNet_v8_t,
    dev: c_int,
    p: &mut ncclNetProperties_v8_t,
) -> NetResult<()> {
    let f = entry(t.getProperties)?;
    // SAFETY: a valid out-pointer to a v8 properties struct.
    check(unsafe { f(dev, p) })
}

/// `listen`: writes the handle, returns the listen comm.
pub fn listen(t: &ncclNet_v8_t, dev: c_int, handle: &mut [u8; 128]) -> NetResult<*mut c_void> {
    let f = entry(t.listen)?;
    let mut comm = core::ptr::null_mut();
    // SAFETY: a 128-byte handle buffer (NCCL_NET_HANDLE_MAXSIZE) and a valid out-pointer.
    check(unsafe { f(dev, handle.as_mut_ptr().cast(), &mut comm) })?;
    Ok(comm)
}

/// `connect`: the send comm (NULL: call again with the same handle) and the device handle it
/// produced (a host plugin leaves it NULL).
pub fn connect(
    t: &ncclNet_v8_t,
    dev: c_int,
    handle: &mut [u8; 128],
) -> NetResult<(*mut c_void, *mut ncclNetDeviceHandle_v8_t)> {
    let f = entry(t.connect)?;
    let mut comm = core::ptr::null_mut();
    let mut dev_comm = core::ptr::null_mut();
    // SAFETY: the handle is 128 writable bytes (the plugin may keep progress in it, as NCCL
    // allows); both out-pointers are valid.
    check(unsafe { f(dev, handle.as_mut_ptr().cast(), &mut comm, &mut dev_comm) })?;
    Ok((comm, dev_comm))
}

/// `accept`: the receive comm (NULL: call again) and its device handle (NULL for a host plugin).
///
/// # Safety
/// `listen` is a live listen comm of this table's plugin.
pub unsafe fn accept(
    t: &ncclNet_v8_t,
    listen: *mut c_void,
) -> NetResult<(*mut c_void, *mut ncclNetDeviceHandle_v8_t)> {
    let f = entry(t.accept)?;
    let mut comm = core::ptr::null_mut();
    let mut dev_comm = core::ptr::null_mut();
    // SAFETY: per this function's contract; valid out-pointers.
    check(unsafe { f(listen, &mut comm, &mut dev_comm) })?;
    Ok((comm, dev_comm))
}

/// Which comm `close` releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommKind {
    Send,
    Recv,
    Listen,
}

/// `closeSend`, `closeRecv` or `closeListen`.
///
/// # Safety
/// `comm` is a live comm of that kind, not used again.
pub unsafe fn close(t: &ncclNet_v8_t, kind: CommKind, comm: *mut c_void) -> NetResult<()> {
    let f = entry(match kind {
        CommKind::Send => t.closeSend,
        CommKind::Recv => t.closeRecv,
        CommKind::Listen => t.closeListen,
    })?;
    // SAFETY: per this function's contract.
    check(unsafe { f(comm) })
}
