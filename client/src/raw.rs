//! The data-path table calls themselves, over raw pointers and without allocating: `regMr`,
//! `deregMr`, `isend`, `irecv`, `test`. The typed [`crate::net::Net`], the benchmark's timed
//! loops and the in-process tests (which count allocations or misuse the table on purpose) all
//! call the plugin through these.

use core::ffi::{c_int, c_void};
use ferro_ffi::{ncclNet_v8_t, ncclResult_t};

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
