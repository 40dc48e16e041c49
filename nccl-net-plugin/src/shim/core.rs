//! The version-independent core of every exported table: one function per table entry, taking
//! the arguments in their widest form (sizes as `u64`, optional profiler handles, an optional
//! per-connection traffic class). The per-version entry points in [`super::tables`] only convert
//! their arguments to these and run them inside [`super::boundary`].
//!
//! Everything a version adds that the core does not use is accepted and checked here, so no
//! behaviour differs between versions except where a version defines it.

use super::out;
use crate::error::{Error, Result};
use crate::plugin::{self, DeviceProps};
use crate::profiler::Phandles;
use crate::transport;
use core::ffi::{c_int, c_void};
use core::mem::MaybeUninit;
use ferro_ffi::{
    NCCL_NET_OPTIONAL_RECV_COMPLETION, ncclDebugLogger_t, ncclNetDeviceHandle_v7_t,
    ncclProfilerCallback_t,
};
use ferro_proto::comm::send::Oversize;
use ferro_proto::handle::HANDLE_SIZE;

fn drop_hook(msg: &str) {
    crate::warn!(ferro_ffi::log_flags::NET, "{msg}");
}

/// A size argument as a version passes it: `int` (v7, v8) or `size_t` (v9+).
pub(super) trait SizeArg: Copy + core::fmt::Display {
    /// The size in bytes, or `None` for a negative `int`.
    fn bytes(self) -> Option<u64>;
}

impl SizeArg for c_int {
    fn bytes(self) -> Option<u64> {
        u64::try_from(self).ok()
    }
}

impl SizeArg for usize {
    fn bytes(self) -> Option<u64> {
        u64::try_from(self).ok()
    }
}

/// Checks one request buffer's size against what one request carries on `dev` (its
/// `maxP2pBytes`, 4 GiB - 1: a request's size is 32 bits on the wire): a size that does not fit
/// is an error naming it and the limit, never a truncation. v7/v8 `int` sizes never exceed it,
/// so those versions refuse negative sizes only.
#[inline]
fn request_bytes<S: SizeArg>(dev: &crate::vnic::VDevice, what: &str, size: S) -> Result<u32> {
    match size.bytes() {
        Some(bytes) if bytes <= dev.max_request_bytes() => {
            u32::try_from(bytes).map_err(|_| too_large_for_u32(what, bytes))
        }
        _ => Err(size_refused(dev, what, size)),
    }
}

/// [`request_bytes`]'s refusal of a negative size or one above the device's limit.
#[cold]
#[inline(never)]
fn size_refused<S: SizeArg>(dev: &crate::vnic::VDevice, what: &str, size: S) -> Error {
    let Some(bytes) = size.bytes() else {
        return Error::Usage(format!("{what} has negative size {size}"));
    };
    let max = dev.max_request_bytes();
    Error::Usage(format!(
        "{what} of {bytes} bytes exceeds what one request carries on {} ({max} bytes, the maxP2pBytes reported for the device: sizes are 32 bits on the wire); nothing was posted",
        dev.label()
    ))
}

#[cold]
#[inline(never)]
fn too_large_for_u32(what: &str, bytes: u64) -> Error {
    Error::Usage(format!(
        "{what} of {bytes} bytes exceeds the 32-bit size a request carries"
    ))
}

/// A request's size as `test` reports it: `int` in every ABI version, so a receive of more than
/// `INT_MAX` bytes (possible from v9 on, up to 4 GiB - 1) is reported as `INT_MAX`, never as a
/// wrapped negative number. The data is all there; only the count is capped.
fn reported_size(bytes: u32) -> c_int {
    c_int::try_from(bytes).unwrap_or(c_int::MAX)
}

/// `init`: the process-wide device state, built once (later calls return the same outcome).
pub(super) fn init(logger: ncclDebugLogger_t, profiler: ncclProfilerCallback_t) -> Result<()> {
    crate::log::set_logger(logger);
    ferro_verbs::set_drop_error_hook(drop_hook);
    crate::profiler::set_callback(profiler);
    plugin::init().map(|_| ())
}

pub(super) fn devices(ndev: *mut c_int) -> Result<()> {
    let n = c_int::try_from(crate::vnic::count()).unwrap_or(c_int::MAX);
    out("ndev", ndev, n)
}

/// The properties every version's layout is filled from.
pub(super) fn properties(dev: c_int) -> Result<DeviceProps> {
    Ok(crate::vnic::get(dev)?.properties())
}

/// `makeVDevice` (v9+): fuses the physical devices `devs[0..ndevs]` into a virtual NIC and
/// writes its index to `*d`. `max_members` is the version's limit (its `devs` array length).
pub(super) fn make_vdevice(
    d: *mut c_int,
    ndevs: c_int,
    devs: &[c_int],
    max_members: usize,
) -> Result<()> {
    if d.is_null() {
        return Err(Error::Usage("makeVDevice with d NULL".into()));
    }
    let n = usize::try_from(ndevs)
        .ok()
        .filter(|n| (1..=devs.len().min(max_members)).contains(n))
        .ok_or_else(|| {
            Error::Usage(format!(
                "makeVDevice with ndevs={ndevs} (this ABI version takes 1 to {max_members})"
            ))
        })?;
    let index = crate::vnic::make(&devs[..n], max_members)?;
    out("d", d, c_int::try_from(index).unwrap_or(c_int::MAX))
}

/// A memory handle must have been registered on the comm's own device(s).
#[inline]
fn check_fits(c: &transport::Comm, m: Option<&transport::MrHandle>) -> Result<()> {
    match m {
        Some(m) if !m.fits(c) => Err(foreign_handle(c)),
        _ => Ok(()),
    }
}

#[cold]
#[inline(never)]
fn without_handle(i: usize, s: u32) -> Error {
    Error::Usage(format!(
        "irecv buffer {i} of {s} bytes without a memory handle"
    ))
}

/// [`check_fits`]'s error, out of line (a receive checks each buffer's handle in place).
#[cold]
#[inline(never)]
fn foreign_handle(c: &transport::Comm) -> Error {
    Error::Usage(format!(
        "{}: memory handle registered on another device than the comm's",
        c.device().label()
    ))
}

/// The first step of `isend`, `irecv` and `iflush`, before anything else happens: refuses a
/// NULL `request` (nothing is matched or posted, so no request slot is taken and no data is in
/// flight behind an error), then writes NULL to `*request`, so that every later return, an
/// error included, leaves it written (NULL: no request), as the contract asks; success
/// overwrites it.
#[inline]
fn clear_request(call: &str, request: *mut *mut c_void) -> Result<()> {
    if request.is_null() {
        return Err(null_request(call));
    }
    // SAFETY: non-NULL; NCCL passes a valid, aligned out-pointer for the request.
    unsafe { request.write(core::ptr::null_mut()) };
    Ok(())
}

#[cold]
#[inline(never)]
fn null_request(call: &str) -> Error {
    Error::Usage(format!("{call} with request NULL; nothing was posted"))
}

fn handle_mut<'a>(handle: *mut c_void) -> Result<&'a mut [u8; HANDLE_SIZE]> {
    if handle.is_null() {
        return Err(Error::Usage("handle is NULL".into()));
    }
    // SAFETY: NCCL passes a buffer of NCCL_NET_HANDLE_MAXSIZE (128) bytes, exclusively ours for
    // the duration of the call; [u8; 128] has alignment 1.
    Ok(unsafe { &mut *handle.cast::<[u8; HANDLE_SIZE]>() })
}

pub(super) fn listen(dev: c_int, handle: *mut c_void, listen_comm: *mut *mut c_void) -> Result<()> {
    let h = handle_mut(handle)?;
    if listen_comm.is_null() {
        return Err(Error::Usage("listenComm is NULL".into()));
    }
    let l = transport::listen(dev, h)?;
    out("listenComm", listen_comm, Box::into_raw(l).cast())
}

/// The communicator's traffic class as v10+ pass it (-1: not set). It stands for the
/// connection's traffic class and service level where `NCCL_IB_TC` / `NCCL_IB_SL` are not set.
pub(super) fn traffic_class(tc: c_int) -> Result<Option<u8>> {
    match tc {
        ferro_ffi::NCCL_NET_TRAFFIC_CLASS_UNDEF => Ok(None),
        0..=255 => Ok(Some(tc as u8)),
        _ => Err(Error::Argument(format!(
            "communicator traffic class {tc} is outside 0..=255 (-1: not set)"
        ))),
    }
}

/// `connect`. `oversize` is the rule of the table's version for a send larger than the
/// posted receive (v7 refuses it, v8+ truncate it).
pub(super) fn connect(
    dev: c_int,
    traffic_class: Option<u8>,
    oversize: Oversize,
    handle: *mut c_void,
    send_comm: *mut *mut c_void,
    send_dev_comm: *mut *mut ncclNetDeviceHandle_v7_t,
) -> Result<()> {
    if send_comm.is_null() {
        return Err(Error::Usage("sendComm is NULL".into()));
    }
    if !send_dev_comm.is_null() {
        out("sendDevComm", send_dev_comm, core::ptr::null_mut())?;
    }
    let c = transport::connect(dev, handle_mut(handle)?, traffic_class, oversize)?;
    out(
        "sendComm",
        send_comm,
        c.map_or(core::ptr::null_mut(), transport::CommPtr::into_raw),
    )
}

pub(super) fn accept(
    listen_comm: *mut c_void,
    recv_comm: *mut *mut c_void,
    recv_dev_comm: *mut *mut ncclNetDeviceHandle_v7_t,
) -> Result<()> {
    if recv_comm.is_null() {
        return Err(Error::Usage("recvComm is NULL".into()));
    }
    if !recv_dev_comm.is_null() {
        out("recvDevComm", recv_dev_comm, core::ptr::null_mut())?;
    }
    // SAFETY: NCCL passes the listen comm we returned from listen (checked by its magic).
    let l = unsafe { transport::listen_ref(listen_comm) }?;
    let c = l.accept()?;
    out(
        "recvComm",
        recv_comm,
        c.map_or(core::ptr::null_mut(), transport::CommPtr::into_raw),
    )
}

pub(super) fn reg_mr<S: SizeArg>(
    comm: *mut c_void,
    data: *mut c_void,
    size: S,
    type_: c_int,
    mhandle: *mut *mut c_void,
) -> Result<()> {
    // SAFETY: NCCL passes a send or receive comm of ours (checked by its magic).
    let c = unsafe { transport::comm_ref(comm) }?;
    let size = size
        .bytes()
        .and_then(|s| usize::try_from(s).ok())
        .ok_or_else(|| Error::Usage(format!("regMr of negative size {size}")))?;
    let m = transport::reg_mr(c, data as u64, size, type_)?;
    out("mhandle", mhandle, Box::into_raw(m).cast())
}

pub(super) fn reg_mr_dma_buf(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    type_: c_int,
    offset: u64,
    fd: c_int,
    mhandle: *mut *mut c_void,
) -> Result<()> {
    // SAFETY: NCCL passes a send or receive comm of ours (checked by its magic).
    let c = unsafe { transport::comm_ref(comm) }?;
    let m = transport::reg_mr_dmabuf(c, data as u64, size, type_, offset, fd)?;
    out("mhandle", mhandle, Box::into_raw(m).cast())
}

pub(super) fn dereg_mr(comm: *mut c_void, mhandle: *mut c_void) -> Result<()> {
    // SAFETY: NCCL passes a comm of ours (checked by its magic).
    let _c = unsafe { transport::comm_ref(comm) }?;
    // SAFETY: NCCL passes an mhandle from regMr (checked by its magic) and never uses it again.
    unsafe { transport::dereg_mr(mhandle) }
}

/// `isend`. `phandle` is the profiler handle of v10+ (NULL before v10 and for NCCL's bootstrap).
/// Inlined into each version's entry point: one pass of checks on the arguments, then the
/// transport's `isend`.
#[inline(always)]
pub(super) fn isend<S: SizeArg>(
    send_comm: *mut c_void,
    data: *mut c_void,
    size: S,
    tag: c_int,
    mhandle: *mut c_void,
    phandle: *mut c_void,
    request: *mut *mut c_void,
) -> Result<()> {
    clear_request("isend", request)?;
    // SAFETY: NCCL passes a comm of ours (checked by its magic).
    let c = unsafe { transport::comm_ref(send_comm) }?;
    // SAFETY: NCCL passes NULL or an mhandle of ours (checked by its magic).
    let m = unsafe { transport::mr_ref(mhandle) }?;
    check_fits(c, m)?;
    let size = request_bytes(c.device(), "isend", size)?;
    if let Some(r) = c.isend(data as u64, size, tag, m, phandle)? {
        // SAFETY: checked non-NULL by `clear_request` above (which wrote NULL: a retry leaves
        // it so).
        unsafe { request.write(r.cast()) };
    }
    Ok(())
}

/// `irecv`. `phandles` is NULL or one profiler handle per buffer (v10+). `*request` may hold
/// NCCL's optional-completion hint (0x1) on input; it is ignored and always overwritten.
/// Inlined into each version's entry point, with the transport's `irecv`: one frame for the
/// whole call.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) fn irecv<S: SizeArg>(
    recv_comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut S,
    tags: *mut c_int,
    mhandles: *mut *mut c_void,
    phandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> Result<()> {
    const _: () = assert!(NCCL_NET_OPTIONAL_RECV_COMPLETION != 0);
    clear_request("irecv", request)?;
    // SAFETY: NCCL passes a comm of ours (checked by its magic).
    let c = unsafe { transport::comm_ref(recv_comm) }?;
    let n = usize::try_from(n)
        .ok()
        .filter(|n| (1..=plugin::MAX_RECVS).contains(n))
        .ok_or_else(|| {
            Error::Usage(format!(
                "irecv with n={n} (must be 1..={})",
                plugin::MAX_RECVS
            ))
        })?;
    // One compare and branch per array, each naming its array (four compares of one error
    // are vectorised into more instructions than they are).
    if data.is_null() {
        return Err(null_array("irecv", "data"));
    }
    if sizes.is_null() {
        return Err(null_array("irecv", "sizes"));
    }
    if tags.is_null() {
        return Err(null_array("irecv", "tags"));
    }
    if mhandles.is_null() {
        return Err(null_array("irecv", "mhandles"));
    }
    // Only the first n entries are written and read: no zeroing of the rest per call.
    let mut bufs = [const { MaybeUninit::<transport::RecvBuf>::uninit() }; plugin::MAX_RECVS];
    let dev = c.device();
    for (i, buf) in bufs.iter_mut().enumerate().take(n) {
        // SAFETY: NCCL passes arrays of n elements each (checked non-NULL above).
        let (d, s, t, m) = unsafe { (*data.add(i), *sizes.add(i), *tags.add(i), *mhandles.add(i)) };
        let s = request_bytes(dev, "irecv buffer", s)?;
        // SAFETY: NULL or an mhandle of ours (checked by its magic).
        let m = unsafe { transport::mr_ref(m) }?;
        let rkeys = match (s, m) {
            (_, Some(m)) if m.fits(c) => m.rkeys(),
            (_, Some(_)) => return Err(foreign_handle(c)),
            (0, None) => [0; ferro_proto::MAX_DEVS],
            (_, None) => return Err(without_handle(i, s)),
        };
        buf.write(transport::RecvBuf {
            addr: d as u64,
            size: s,
            tag: t,
            rkeys,
        });
    }
    // SAFETY: the loop above wrote the first n entries (n <= MAX_RECVS; any early return left
    // them unread); MaybeUninit<T> has T's layout.
    let bufs =
        unsafe { core::slice::from_raw_parts(bufs.as_ptr().cast::<transport::RecvBuf>(), n) };
    let ph: &[*mut c_void] = if phandles.is_null() {
        &[]
    } else {
        // SAFETY: a non-NULL phandles array has n elements, like the others.
        unsafe { core::slice::from_raw_parts(phandles, n) }
    };
    let r = c.irecv(bufs, Phandles::of(ph))?;
    out(
        "request",
        request,
        r.map_or(core::ptr::null_mut(), |r| r.cast()),
    )
}

pub(super) fn iflush(
    recv_comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut c_int,
    mhandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> Result<()> {
    clear_request("iflush", request)?;
    // SAFETY: NCCL passes a comm of ours (checked by its magic).
    let c = unsafe { transport::comm_ref(recv_comm) }?;
    let n = usize::try_from(n)
        .ok()
        .filter(|n| *n <= plugin::MAX_RECVS)
        .ok_or_else(|| {
            Error::Usage(format!(
                "iflush with n={n} (must be 0..={})",
                plugin::MAX_RECVS
            ))
        })?;
    if n > 0 && (data.is_null() || sizes.is_null() || mhandles.is_null()) {
        return Err(Error::Usage("iflush with a NULL array".into()));
    }
    let mut bufs = [(0u64, 0u32, None); plugin::MAX_RECVS];
    for (i, buf) in bufs.iter_mut().enumerate().take(n) {
        // SAFETY: NCCL passes arrays of n elements each (checked non-NULL above).
        let (d, s, m) = unsafe { (*data.add(i), *sizes.add(i), *mhandles.add(i)) };
        // SAFETY: NULL or an mhandle of ours (checked by its magic).
        let m = unsafe { transport::mr_ref(m) }?;
        check_fits(c, m)?;
        // The sizes `test` reported (INT_MAX for a larger receive): a flush only needs to know
        // which buffers are not empty.
        *buf = (d as u64, u32::try_from(s).unwrap_or(0), m);
    }
    let r = c.iflush(&bufs[..n])?;
    out(
        "request",
        request,
        r.map_or(core::ptr::null_mut(), |r| r.cast()),
    )
}

/// A data-path call with a NULL array argument.
#[cold]
#[inline(never)]
fn null_array(func: &str, array: &str) -> Error {
    Error::Usage(format!("{func} with a NULL array ({array})"))
}

/// `test`: `*done` and, when done, each buffer's size ([`reported_size`]: saturated at
/// `INT_MAX`, as `sizes` is `int*` in every version).
#[inline(always)]
pub(super) fn test(request: *mut c_void, done: *mut c_int, sizes: *mut c_int) -> Result<()> {
    if done.is_null() {
        return Err(Error::Usage("test with done NULL".into()));
    }
    // The sizes are written only when the request is done, straight from the core's record.
    let write_sizes = |d: &ferro_proto::comm::Done| {
        if sizes.is_null() {
            return;
        }
        // A plain count (no iterator adapters): most requests have one buffer.
        for i in 0..d.n.min(d.sizes.len()) {
            // SAFETY: sizes has room for n entries (the request's buffer count).
            unsafe { sizes.add(i).write(reported_size(d.sizes[i])) };
        }
    };
    // SAFETY: NCCL passes a request of ours (checked by its magic) whose comm is open.
    let finished = unsafe { transport::test_request(request, write_sizes) }?;
    // SAFETY: checked non-NULL above; NCCL passes a valid, aligned out-pointer.
    unsafe { done.write(c_int::from(finished)) };
    Ok(())
}

/// `closeSend` / `closeRecv` / `closeListen`.
///
/// # Safety
/// `comm` is NULL or a comm of this kind that NCCL never uses again.
pub(super) unsafe fn close(comm: *mut c_void, kind: transport::ObjectKind) -> Result<()> {
    // SAFETY: forwarded contract (checked by its magic).
    unsafe { transport::close(comm, kind) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traffic_class_minus_one_means_unset_and_out_of_range_is_refused() {
        assert_eq!(traffic_class(-1).ok(), Some(None));
        assert_eq!(traffic_class(0).ok(), Some(Some(0)));
        assert_eq!(traffic_class(255).ok(), Some(Some(255)));
        assert!(traffic_class(256).is_err());
        assert!(traffic_class(-2).is_err());
    }

    #[test]
    fn sizes_above_int_max_are_reported_as_int_max_never_negative() {
        assert_eq!(reported_size(0), 0);
        assert_eq!(reported_size(i32::MAX as u32), c_int::MAX);
        assert_eq!(reported_size(1 << 31), c_int::MAX);
        assert_eq!(reported_size(2_254_857_830), c_int::MAX);
        assert_eq!(reported_size(u32::MAX), c_int::MAX);
    }

    #[test]
    fn sizes_of_either_width_convert_and_negative_ints_do_not() {
        assert_eq!(SizeArg::bytes(-1 as c_int), None);
        assert_eq!(SizeArg::bytes(7 as c_int), Some(7));
        assert_eq!(SizeArg::bytes(usize::MAX), Some(u64::MAX));
    }
}
