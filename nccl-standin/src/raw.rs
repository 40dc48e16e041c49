//! The table calls themselves, over raw pointers and (on the data path) without allocating. The
//! typed [`crate::net::Net`], the benchmark and the in-process tests (which count allocations or
//! misuse the table on purpose) all call the plugin through these; a NULL table entry is
//! `ncclInternalError`.
//!
//! Every call takes a [`Table`] of any ABI version (a `&ncclNet_v8_t` converts to one) and
//! converts its arguments to what that version's entry takes: sizes `int` (v7, v8) or `size_t`
//! (v9+; v7's `regMr` too is `int`), profiler handles (v10+), the connect config (v10), the
//! per-communicator context (v11+). A size that a version cannot express is refused here with
//! `ncclInvalidArgument` before the plugin is called.

use crate::table::{Table, any_table};
use core::ffi::{c_int, c_void};
use ferro_ffi::{
    NCCL_NET_TRAFFIC_CLASS_UNDEF, ncclDebugLogger_t, ncclNetAttr_v11_t, ncclNetCommConfig_v10_t,
    ncclNetDeviceHandle_v8_t, ncclProfilerCallback_t, ncclResult_t,
};

pub use crate::props::AnyProps;

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

/// A size for a version with `int` sizes.
fn int_size(size: usize) -> NetResult<c_int> {
    c_int::try_from(size).map_err(|_| ncclResult_t::InvalidArgument)
}

/// Most buffers one `irecv` may pass through these calls (the conversions use stack arrays).
pub const MAX_IRECV_BUFFERS: usize = 64;

/// `regMr`: the memory handle.
///
/// # Safety
/// `comm` is a live comm of this table's plugin; `[data, data + size)` stays mapped until the
/// handle is deregistered.
pub unsafe fn reg_mr<'a>(
    t: impl Into<Table<'a>>,
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    ptr_type: c_int,
) -> NetResult<*mut c_void> {
    let mut mh = core::ptr::null_mut();
    let t = t.into();
    let narrow = match t {
        Table::V7(_) => int_size(size)?,
        _ => 0,
    };
    // SAFETY: (every arm) per this function's contract; a valid out-pointer.
    let r = unsafe {
        match t {
            Table::V7(t) => entry(t.regMr)?(comm, data, narrow, ptr_type, &mut mh),
            Table::V8(t) => entry(t.regMr)?(comm, data, size, ptr_type, &mut mh),
            Table::V9(t) => entry(t.regMr)?(comm, data, size, ptr_type, &mut mh),
            Table::V10(t) => entry(t.regMr)?(comm, data, size, ptr_type, &mut mh),
            Table::V11(t, _) => entry(t.regMr)?(comm, data, size, ptr_type, &mut mh),
            Table::V12(t, _) => entry(t.regMr)?(comm, data, size, ptr_type, &mut mh),
        }
    };
    check(r)?;
    Ok(mh)
}

/// `deregMr`.
///
/// # Safety
/// `mh` came from `regMr` on `comm` and is not used again.
pub unsafe fn dereg_mr<'a>(
    t: impl Into<Table<'a>>,
    comm: *mut c_void,
    mh: *mut c_void,
) -> NetResult<()> {
    // SAFETY: per this function's contract.
    check(any_table!(t.into(), t => unsafe { entry(t.deregMr)?(comm, mh) }))
}

/// `isend`: the request, NULL when the plugin cannot take the send yet.
///
/// # Safety
/// `comm` is a live send comm; `[data, data + size)` lies in the memory registered as `mh` and
/// stays untouched until the request completes.
pub unsafe fn isend<'a>(
    t: impl Into<Table<'a>>,
    comm: *mut c_void,
    data: *mut c_void,
    size: c_int,
    tag: c_int,
    mh: *mut c_void,
) -> NetResult<*mut c_void> {
    let t = t.into();
    if t.version().has_size_t_sizes() {
        // A negative int becomes a huge size_t, as a C caller's conversion would.
        // SAFETY: forwarded contract.
        unsafe {
            isend_bytes(
                t,
                comm,
                data,
                size as isize as usize,
                tag,
                mh,
                core::ptr::null_mut(),
            )
        }
    } else {
        let f = match t {
            Table::V7(t) => entry(t.isend)?,
            Table::V8(t) => entry(t.isend)?,
            _ => return Err(ncclResult_t::InternalError),
        };
        let mut req = core::ptr::null_mut();
        // SAFETY: per this function's contract; a valid out-pointer.
        check(unsafe { f(comm, data, size, tag, mh, &mut req) })?;
        Ok(req)
    }
}

/// `isend` of `size` bytes (`size_t` from v9; refused when a v7/v8 `int` cannot hold it), with a
/// profiler handle (passed from v10, dropped before).
///
/// # Safety
/// As [`isend`]; `phandle` is NULL or stays valid until the request completes.
pub unsafe fn isend_bytes<'a>(
    t: impl Into<Table<'a>>,
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    tag: c_int,
    mh: *mut c_void,
    phandle: *mut c_void,
) -> NetResult<*mut c_void> {
    let mut req = core::ptr::null_mut();
    let t = t.into();
    let narrow = if t.version().has_size_t_sizes() {
        0
    } else {
        int_size(size)?
    };
    // SAFETY: (every arm) per this function's contract; a valid out-pointer.
    let r = unsafe {
        match t {
            Table::V7(t) => entry(t.isend)?(comm, data, narrow, tag, mh, &mut req),
            Table::V8(t) => entry(t.isend)?(comm, data, narrow, tag, mh, &mut req),
            Table::V9(t) => entry(t.isend)?(comm, data, size, tag, mh, &mut req),
            Table::V10(t) => entry(t.isend)?(comm, data, size, tag, mh, phandle, &mut req),
            Table::V11(t, _) => entry(t.isend)?(comm, data, size, tag, mh, phandle, &mut req),
            Table::V12(t, _) => entry(t.isend)?(comm, data, size, tag, mh, phandle, &mut req),
        }
    };
    check(r)?;
    Ok(req)
}

/// `irecv` of `data.len()` buffers (the four slices are one entry per buffer): the request,
/// NULL when the plugin cannot take it yet.
///
/// # Safety
/// `comm` is a live receive comm; every buffer lies in its registered memory and stays unused
/// until the request completes.
pub unsafe fn irecv<'a>(
    t: impl Into<Table<'a>>,
    comm: *mut c_void,
    data: &mut [*mut c_void],
    sizes: &mut [c_int],
    tags: &mut [c_int],
    mhs: &mut [*mut c_void],
) -> NetResult<*mut c_void> {
    let n = data.len();
    if sizes.len() != n || tags.len() != n || mhs.len() != n || n > MAX_IRECV_BUFFERS {
        return Err(ncclResult_t::InvalidArgument);
    }
    let t = t.into();
    if t.version().has_size_t_sizes() {
        let mut wide = [0usize; MAX_IRECV_BUFFERS];
        for (w, s) in wide.iter_mut().zip(sizes.iter()) {
            // A negative int becomes a huge size_t, as a C caller's conversion would.
            *w = *s as isize as usize;
        }
        // SAFETY: forwarded contract.
        return unsafe {
            irecv_bytes(
                t,
                comm,
                data,
                &wide[..n],
                tags,
                mhs,
                None,
                core::ptr::null_mut(),
            )
        };
    }
    let f = match t {
        Table::V7(t) => entry(t.irecv)?,
        Table::V8(t) => entry(t.irecv)?,
        _ => return Err(ncclResult_t::InternalError),
    };
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

/// `isend` and then `irecv` of one 16-byte buffer at `data` on `comm`, each called with
/// `*request` preset to `preset`: each call's code and what it left in `*request`. For checking
/// that a refused call still writes the request (NULL), as the contract asks.
///
/// # Safety
/// `comm` is anything (a refused call reads at most its magic word: it must point to readable
/// memory or be NULL); `data` is a live buffer of 16 bytes.
pub unsafe fn request_after_refusal<'a>(
    t: impl Into<Table<'a>>,
    comm: *mut c_void,
    data: *mut c_void,
    preset: *mut c_void,
) -> [(ncclResult_t, *mut c_void); 2] {
    let (mut sreq, mut rreq) = (preset, preset);
    let mut datas = [data];
    let mut tags: [c_int; 1] = [0];
    let mut mhs: [*mut c_void; 1] = [core::ptr::null_mut()];
    let mut int_sizes: [c_int; 1] = [16];
    let mut wide_sizes: [usize; 1] = [16];
    let mut phs: [*mut c_void; 1] = [core::ptr::null_mut()];
    let null = core::ptr::null_mut();
    let missing = ncclResult_t::InternalError;
    // Both calls on table `t` with receive sizes of the version's width (`$sizes`) and, from
    // v10, the profiler handle and handles (`$ph`, `$phs`).
    macro_rules! both {
        ($t:expr, $sizes:expr $(, $ph:expr, $phs:expr)?) => {
            (
                $t.isend
                    .map_or(missing, |f| f(comm, data, 16, 0, null, $($ph,)? &mut sreq)),
                $t.irecv.map_or(missing, |f| {
                    f(
                        comm,
                        1,
                        datas.as_mut_ptr(),
                        $sizes.as_mut_ptr(),
                        tags.as_mut_ptr(),
                        mhs.as_mut_ptr(),
                        $($phs,)?
                        &mut rreq,
                    )
                }),
            )
        };
    }
    // SAFETY: (every arm) valid one-entry arrays and out-pointers; `comm` per the contract.
    let (s, r) = unsafe {
        match t.into() {
            Table::V7(t) => both!(t, int_sizes),
            Table::V8(t) => both!(t, int_sizes),
            Table::V9(t) => both!(t, wide_sizes),
            Table::V10(t) => both!(t, wide_sizes, null, phs.as_mut_ptr()),
            Table::V11(t, _) => both!(t, wide_sizes, null, phs.as_mut_ptr()),
            Table::V12(t, _) => both!(t, wide_sizes, null, phs.as_mut_ptr()),
        }
    };
    [(s, sreq), (r, rreq)]
}

/// `irecv` with `size_t` sizes (refused when a v7/v8 `int` cannot hold one), profiler handles
/// (passed from v10, dropped before) and the value `*request` holds when the plugin is called
/// (NCCL may leave its optional-completion hint, 0x1, there).
///
/// # Safety
/// As [`irecv`]; `phandles`, when given, has one entry per buffer, valid until completion.
#[allow(clippy::too_many_arguments)]
pub unsafe fn irecv_bytes<'a>(
    t: impl Into<Table<'a>>,
    comm: *mut c_void,
    data: &mut [*mut c_void],
    sizes: &[usize],
    tags: &mut [c_int],
    mhs: &mut [*mut c_void],
    phandles: Option<&mut [*mut c_void]>,
    request_in: *mut c_void,
) -> NetResult<*mut c_void> {
    let n = data.len();
    if sizes.len() != n
        || tags.len() != n
        || mhs.len() != n
        || n > MAX_IRECV_BUFFERS
        || phandles.as_ref().is_some_and(|p| p.len() != n)
    {
        return Err(ncclResult_t::InvalidArgument);
    }
    let nn = c_int::try_from(n).unwrap_or(c_int::MAX);
    let ph = phandles.map_or(core::ptr::null_mut(), |p| p.as_mut_ptr());
    let mut wide = [0usize; MAX_IRECV_BUFFERS];
    wide[..n].copy_from_slice(sizes);
    let mut narrow = [0 as c_int; MAX_IRECV_BUFFERS];
    let mut req = request_in;
    let (d, tg, m) = (data.as_mut_ptr(), tags.as_mut_ptr(), mhs.as_mut_ptr());
    let t = t.into();
    if !t.version().has_size_t_sizes() {
        for (o, s) in narrow.iter_mut().zip(sizes) {
            *o = int_size(*s)?;
        }
    }
    let (w, x) = (wide.as_mut_ptr(), narrow.as_mut_ptr());
    // SAFETY: (every arm) per this function's contract; arrays of n entries, valid for the call;
    // a valid out-pointer.
    let r = unsafe {
        match t {
            Table::V7(t) => entry(t.irecv)?(comm, nn, d, x, tg, m, &mut req),
            Table::V8(t) => entry(t.irecv)?(comm, nn, d, x, tg, m, &mut req),
            Table::V9(t) => entry(t.irecv)?(comm, nn, d, w, tg, m, &mut req),
            Table::V10(t) => entry(t.irecv)?(comm, nn, d, w, tg, m, ph, &mut req),
            Table::V11(t, _) => entry(t.irecv)?(comm, nn, d, w, tg, m, ph, &mut req),
            Table::V12(t, _) => entry(t.irecv)?(comm, nn, d, w, tg, m, ph, &mut req),
        }
    };
    check(r)?;
    Ok(req)
}

/// `test`: whether the request is done; `sizes` (NULL allowed) receives its sizes when it is.
///
/// # Safety
/// `req` is a request the plugin returned and has not reported done; `sizes` is NULL or has room
/// for the request's buffer count.
pub unsafe fn test<'a>(
    t: impl Into<Table<'a>>,
    req: *mut c_void,
    sizes: *mut c_int,
) -> NetResult<c_int> {
    let mut done: c_int = -1;
    // SAFETY: per this function's contract; a valid `done` pointer.
    check(any_table!(t.into(), t => unsafe { entry(t.test)?(req, &mut done, sizes) }))?;
    Ok(done)
}

/// `init` with a logger (NULL: the plugin logs to stderr). For v11+ the context it creates is
/// returned by [`init_ctx`]; this one finalizes it at once (only the process-wide set-up stays).
pub fn init<'a>(t: impl Into<Table<'a>>, logger: ncclDebugLogger_t) -> NetResult<()> {
    let t = t.into();
    let ctx = init_ctx(t, logger, None, 0, NCCL_NET_TRAFFIC_CLASS_UNDEF)?;
    finalize(t.with_ctx(ctx))
}

/// `init` as each version takes it: the logger (all), the profiler callback (v10+), and for v11+
/// the communicator id and config, returning the context (NULL before v11). `traffic_class` is
/// the config's (`NCCL_NET_TRAFFIC_CLASS_UNDEF`: not set).
pub fn init_ctx<'a>(
    t: impl Into<Table<'a>>,
    logger: ncclDebugLogger_t,
    profiler: ncclProfilerCallback_t,
    comm_id: u64,
    traffic_class: c_int,
) -> NetResult<*mut c_void> {
    let mut ctx = core::ptr::null_mut();
    let mut cfg = ncclNetCommConfig_v10_t {
        trafficClass: traffic_class,
    };
    // SAFETY: (every arm) the logger and callback are NULL or C functions valid for the whole
    // process; the config and context out-pointer are valid for the call.
    let r = unsafe {
        match t.into() {
            Table::V7(t) => entry(t.init)?(logger),
            Table::V8(t) => entry(t.init)?(logger),
            Table::V9(t) => entry(t.init)?(logger),
            Table::V10(t) => entry(t.init)?(logger, profiler),
            Table::V11(t, _) => entry(t.init)?(&mut ctx, comm_id, &mut cfg, logger, profiler),
            Table::V12(t, _) => entry(t.init)?(&mut ctx, comm_id, &mut cfg, logger, profiler),
        }
    };
    check(r)?;
    Ok(ctx)
}

/// `finalize` of the table's context (v11+; nothing to do before v11).
pub fn finalize<'a>(t: impl Into<Table<'a>>) -> NetResult<()> {
    // SAFETY: (both arms) the context is NULL or one init returned, not finalized before.
    match t.into() {
        // SAFETY: the context is NULL or one init returned; valid arguments.
        Table::V11(t, ctx) => check(unsafe { entry(t.finalize)?(ctx) }),
        // SAFETY: the context is NULL or one init returned; valid arguments.
        Table::V12(t, ctx) => check(unsafe { entry(t.finalize)?(ctx) }),
        _ => Ok(()),
    }
}

/// `setNetAttr` on the table's context (v11+; `ncclInternalError` before: no such entry).
pub fn set_net_attr<'a>(t: impl Into<Table<'a>>, attr: &mut ncclNetAttr_v11_t) -> NetResult<()> {
    // SAFETY: (both arms) the context is one init returned; a valid attribute pointer.
    match t.into() {
        // SAFETY: the context is NULL or one init returned; valid arguments.
        Table::V11(t, ctx) => check(unsafe { entry(t.setNetAttr)?(ctx, attr) }),
        // SAFETY: the context is NULL or one init returned; valid arguments.
        Table::V12(t, ctx) => check(unsafe { entry(t.setNetAttr)?(ctx, attr) }),
        _ => Err(ncclResult_t::InternalError),
    }
}

/// `devices`.
pub fn devices<'a>(t: impl Into<Table<'a>>) -> NetResult<c_int> {
    let f = entry(t.into().devices_fn())?;
    let mut n: c_int = 0;
    // SAFETY: a valid out-pointer.
    check(unsafe { f(&mut n) })?;
    Ok(n)
}

/// `makeVDevice` (v9+): fuses the physical devices `devs` and returns the new device's index.
/// `ndevs` is passed as given, so that it may disagree with `devs` (to check the plugin's
/// refusals of counts the typed [`crate::net::Net::make_vdevice`] never sends); `devs` longer
/// than the version's array (4, v12: 8) is refused here with `ncclInvalidArgument`; a table
/// before v9 has no such entry (`ncclInternalError`).
pub fn make_vdevice<'a>(t: impl Into<Table<'a>>, ndevs: c_int, devs: &[c_int]) -> NetResult<c_int> {
    let mut d: c_int = -1;
    let mut small = ferro_ffi::ncclNetVDeviceProps_v9_t {
        ndevs,
        devs: [0; 4],
    };
    let mut large = ferro_ffi::ncclNetVDeviceProps_v12_t {
        ndevs,
        devs: [0; 8],
    };
    let fill = |dst: &mut [c_int]| -> NetResult<()> {
        dst.get_mut(..devs.len())
            .ok_or(ncclResult_t::InvalidArgument)?
            .copy_from_slice(devs);
        Ok(())
    };
    // SAFETY: (every arm) valid out-pointer and props for the call.
    let r = unsafe {
        match t.into() {
            Table::V9(t) => {
                fill(&mut small.devs)?;
                entry(t.makeVDevice)?(&mut d, &mut small)
            }
            Table::V10(t) => {
                fill(&mut small.devs)?;
                entry(t.makeVDevice)?(&mut d, &mut small)
            }
            Table::V11(t, _) => {
                fill(&mut small.devs)?;
                entry(t.makeVDevice)?(&mut d, &mut small)
            }
            Table::V12(t, _) => {
                fill(&mut large.devs)?;
                entry(t.makeVDevice)?(&mut d, &mut large)
            }
            Table::V7(_) | Table::V8(_) => return Err(ncclResult_t::InternalError),
        }
    };
    check(r)?;
    Ok(d)
}

/// `getProperties` into `p`, whose variant must match the table's layout (the caller chooses
/// the initial values, e.g. markers for fields the plugin must fill).
pub fn get_properties_any<'a>(
    t: impl Into<Table<'a>>,
    dev: c_int,
    p: &mut AnyProps,
) -> NetResult<()> {
    // SAFETY: (every arm) a valid out-pointer of the version's properties type.
    let r = unsafe {
        match (t.into(), p) {
            (Table::V7(t), AnyProps::V7(p)) => entry(t.getProperties)?(dev, p),
            (Table::V8(t), AnyProps::V8(p)) => entry(t.getProperties)?(dev, p),
            (Table::V9(t), AnyProps::V9(p)) => entry(t.getProperties)?(dev, p),
            (Table::V10(t), AnyProps::V9(p)) => entry(t.getProperties)?(dev, p),
            (Table::V11(t, _), AnyProps::V11(p)) => entry(t.getProperties)?(dev, p),
            (Table::V12(t, _), AnyProps::V12(p)) => entry(t.getProperties)?(dev, p),
            _ => return Err(ncclResult_t::InvalidArgument),
        }
    };
    check(r)
}

/// `listen`: writes the handle, returns the listen comm (v11+: on the table's context).
pub fn listen<'a>(
    t: impl Into<Table<'a>>,
    dev: c_int,
    handle: &mut [u8; 128],
) -> NetResult<*mut c_void> {
    let mut comm = core::ptr::null_mut();
    let h = handle.as_mut_ptr().cast();
    // SAFETY: (every arm) a 128-byte handle buffer (NCCL_NET_HANDLE_MAXSIZE) and a valid
    // out-pointer; the context is the one init returned.
    let r = unsafe {
        match t.into() {
            Table::V11(t, ctx) => entry(t.listen)?(ctx, dev, h, &mut comm),
            Table::V12(t, ctx) => entry(t.listen)?(ctx, dev, h, &mut comm),
            Table::V7(t) => entry(t.listen)?(dev, h, &mut comm),
            Table::V8(t) => entry(t.listen)?(dev, h, &mut comm),
            Table::V9(t) => entry(t.listen)?(dev, h, &mut comm),
            Table::V10(t) => entry(t.listen)?(dev, h, &mut comm),
        }
    };
    check(r)?;
    Ok(comm)
}

/// `connect`: the send comm (NULL: call again with the same handle) and the device handle it
/// produced (a host plugin leaves it NULL).
pub fn connect<'a>(
    t: impl Into<Table<'a>>,
    dev: c_int,
    handle: &mut [u8; 128],
) -> NetResult<(*mut c_void, *mut ncclNetDeviceHandle_v8_t)> {
    connect_tc(t, dev, NCCL_NET_TRAFFIC_CLASS_UNDEF, handle)
}

/// `connect` with the communicator's traffic class in the config (passed by v10, whose connect
/// takes a config; v11+ carry it in the context, older versions have none).
pub fn connect_tc<'a>(
    t: impl Into<Table<'a>>,
    dev: c_int,
    traffic_class: c_int,
    handle: &mut [u8; 128],
) -> NetResult<(*mut c_void, *mut ncclNetDeviceHandle_v8_t)> {
    let mut comm = core::ptr::null_mut();
    let mut dev_comm = core::ptr::null_mut();
    let h = handle.as_mut_ptr().cast();
    // A stack object rebuilt for every call, as NCCL passes it.
    let mut cfg = ncclNetCommConfig_v10_t {
        trafficClass: traffic_class,
    };
    // SAFETY: (every arm) the handle is 128 writable bytes (the plugin may keep progress in it, as
    // NCCL allows); out-pointers and the config are valid for the call.
    let r = unsafe {
        match t.into() {
            Table::V7(t) => entry(t.connect)?(dev, h, &mut comm, &mut dev_comm),
            Table::V8(t) => entry(t.connect)?(dev, h, &mut comm, &mut dev_comm),
            Table::V9(t) => entry(t.connect)?(dev, h, &mut comm, &mut dev_comm),
            Table::V10(t) => entry(t.connect)?(dev, &mut cfg, h, &mut comm, &mut dev_comm),
            Table::V11(t, ctx) => entry(t.connect)?(ctx, dev, h, &mut comm, &mut dev_comm),
            Table::V12(t, ctx) => entry(t.connect)?(ctx, dev, h, &mut comm, &mut dev_comm),
        }
    };
    check(r)?;
    Ok((comm, dev_comm))
}

/// `accept`: the receive comm (NULL: call again) and its device handle (NULL for a host plugin).
///
/// # Safety
/// `listen` is a live listen comm of this table's plugin.
pub unsafe fn accept<'a>(
    t: impl Into<Table<'a>>,
    listen: *mut c_void,
) -> NetResult<(*mut c_void, *mut ncclNetDeviceHandle_v8_t)> {
    let mut comm = core::ptr::null_mut();
    let mut dev_comm = core::ptr::null_mut();
    let f = any_table!(t.into(), t => entry(t.accept)?);
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
pub unsafe fn close<'a>(
    t: impl Into<Table<'a>>,
    kind: CommKind,
    comm: *mut c_void,
) -> NetResult<()> {
    let f = any_table!(t.into(), t => entry(match kind {
        CommKind::Send => t.closeSend,
        CommKind::Recv => t.closeRecv,
        CommKind::Listen => t.closeListen,
    })?);
    // SAFETY: per this function's contract.
    check(unsafe { f(comm) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferro_ffi::{ncclNet_v9_t, ncclNetVDeviceProps_v9_t};
    use std::sync::Mutex;

    /// What the fake `makeVDevice` was called with, in order.
    static CALLS: Mutex<Vec<(c_int, [c_int; 4])>> = Mutex::new(Vec::new());

    unsafe extern "C" fn record_vdevice(
        d: *mut c_int,
        props: *mut ncclNetVDeviceProps_v9_t,
    ) -> ncclResult_t {
        // SAFETY: make_vdevice passes valid pointers for the call.
        let (ndevs, devs) = unsafe { ((*props).ndevs, (*props).devs) };
        CALLS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((ndevs, devs));
        // SAFETY: as above.
        unsafe { *d = 7 };
        ncclResult_t::Success
    }

    static V9: ncclNet_v9_t = ncclNet_v9_t {
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
        test: None,
        closeSend: None,
        closeRecv: None,
        closeListen: None,
        getDeviceMr: None,
        irecvConsumed: None,
        makeVDevice: Some(record_vdevice),
    };

    #[test]
    fn make_vdevice_passes_any_count_as_given_and_refuses_more_members_than_the_array_holds() {
        let t = Table::V9(&V9);
        assert_eq!(make_vdevice(t, 2, &[3, 5]), Ok(7));
        assert_eq!(make_vdevice(t, 0, &[]), Ok(7));
        assert_eq!(make_vdevice(t, 5, &[]), Ok(7));
        assert_eq!(
            make_vdevice(t, 5, &[1, 2, 3, 4, 5]),
            Err(ncclResult_t::InvalidArgument)
        );
        let calls = CALLS.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert_eq!(
            calls,
            [(2, [3, 5, 0, 0]), (0, [0; 4]), (5, [0; 4])],
            "the refused call must not reach the plugin"
        );
    }
}
