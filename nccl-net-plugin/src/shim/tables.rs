//! The exported tables, v7 to v12, and their entry points. An entry whose C signature is the same
//! in several versions is one function shared by their tables; the others differ only in how they
//! convert arguments for [`super::core`] (sizes `int` or `size_t`, profiler handles, config,
//! context). Every body runs inside [`super::boundary`].

use super::context::{self, NetContext};
use super::core::SizeArg;
use super::{boundary, core, out, props};
use crate::error::{Error, Result};
use crate::transport::ObjectKind;
use ::core::ffi::{c_int, c_void};
use ferro_ffi::*;
use ferro_proto::comm::send::Oversize;

// ---- entries shared by every version -------------------------------------------------------

unsafe extern "C" fn devices(ndev: *mut c_int) -> ncclResult_t {
    boundary("devices", || core::devices(ndev))
}

/// `makeVDevice` with either version's member list (`N` = 4 before v12, 8 from v12).
fn make_vdevice<const N: usize>(d: *mut c_int, props: Option<(c_int, &[c_int; N])>) -> Result<()> {
    let (ndevs, devs) = props.ok_or_else(|| Error::Usage("makeVDevice with props NULL".into()))?;
    core::make_vdevice(d, ndevs, devs, N)
}

/// `makeVDevice` of v9, v10 and v11 (up to 4 members).
unsafe extern "C" fn make_vdevice_v9(
    d: *mut c_int,
    props: *mut ncclNetVDeviceProps_v9_t,
) -> ncclResult_t {
    // SAFETY: NCCL passes NULL or its props struct, valid for the call.
    let p = unsafe { props.as_ref() }.map(|p| (p.ndevs, &p.devs));
    boundary("makeVDevice", || make_vdevice(d, p))
}

/// `makeVDevice` of v12 (up to 8 members).
unsafe extern "C" fn make_vdevice_v12(
    d: *mut c_int,
    props: *mut ncclNetVDeviceProps_v12_t,
) -> ncclResult_t {
    // SAFETY: NCCL passes NULL or its props struct, valid for the call.
    let p = unsafe { props.as_ref() }.map(|p| (p.ndevs, &p.devs));
    boundary("makeVDevice", || make_vdevice(d, p))
}

unsafe extern "C" fn accept(
    listen_comm: *mut c_void,
    recv_comm: *mut *mut c_void,
    recv_dev_comm: *mut *mut ncclNetDeviceHandle_v7_t,
) -> ncclResult_t {
    boundary("accept", || {
        core::accept(listen_comm, recv_comm, recv_dev_comm)
    })
}

unsafe extern "C" fn reg_mr_dma_buf(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    type_: c_int,
    offset: u64,
    fd: c_int,
    mhandle: *mut *mut c_void,
) -> ncclResult_t {
    boundary("regMrDmaBuf", || {
        core::reg_mr_dma_buf(comm, data, size, type_, offset, fd, mhandle)
    })
}

unsafe extern "C" fn dereg_mr(comm: *mut c_void, mhandle: *mut c_void) -> ncclResult_t {
    boundary("deregMr", || core::dereg_mr(comm, mhandle))
}

unsafe extern "C" fn iflush(
    recv_comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut c_int,
    mhandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    boundary("iflush", || {
        core::iflush(recv_comm, n, data, sizes, mhandles, request)
    })
}

unsafe extern "C" fn test(
    request: *mut c_void,
    done: *mut c_int,
    sizes: *mut c_int,
) -> ncclResult_t {
    boundary("test", || core::test(request, done, sizes))
}

unsafe extern "C" fn close_send(comm: *mut c_void) -> ncclResult_t {
    // SAFETY: NCCL passes a send comm of ours (checked by its magic) and never uses it again.
    boundary("closeSend", || unsafe {
        core::close(comm, ObjectKind::SendComm)
    })
}

unsafe extern "C" fn close_recv(comm: *mut c_void) -> ncclResult_t {
    // SAFETY: NCCL passes a receive comm of ours (checked by its magic) and never uses it again.
    boundary("closeRecv", || unsafe {
        core::close(comm, ObjectKind::RecvComm)
    })
}

unsafe extern "C" fn close_listen(comm: *mut c_void) -> ncclResult_t {
    // SAFETY: NCCL passes a listen comm of ours (checked by its magic) and never uses it again.
    boundary("closeListen", || unsafe {
        core::close(comm, ObjectKind::ListenComm)
    })
}

// ---- v7 … v9: init with the logger, listen and connect without context or config ----------

unsafe extern "C" fn init(logger: ncclDebugLogger_t) -> ncclResult_t {
    boundary("init", || core::init(logger, None))
}

unsafe extern "C" fn listen(
    dev: c_int,
    handle: *mut c_void,
    listen_comm: *mut *mut c_void,
) -> ncclResult_t {
    boundary("listen", || core::listen(dev, handle, listen_comm))
}

/// `connect` of the v8 to v9 tables: a send larger than the posted receive is truncated to it.
unsafe extern "C" fn connect(
    dev: c_int,
    handle: *mut c_void,
    send_comm: *mut *mut c_void,
    send_dev_comm: *mut *mut ncclNetDeviceHandle_v7_t,
) -> ncclResult_t {
    connect_with(Oversize::Truncate, dev, handle, send_comm, send_dev_comm)
}

/// v7 (NCCL 2.19): its comms refuse a send larger than the posted receive, as 2.19's IB
/// transport did (v8+ truncate it).
unsafe extern "C" fn connect_v7(
    dev: c_int,
    handle: *mut c_void,
    send_comm: *mut *mut c_void,
    send_dev_comm: *mut *mut ncclNetDeviceHandle_v7_t,
) -> ncclResult_t {
    connect_with(Oversize::Refuse, dev, handle, send_comm, send_dev_comm)
}

/// The body both `connect` entries without a traffic class share.
fn connect_with(
    oversize: Oversize,
    dev: c_int,
    handle: *mut c_void,
    send_comm: *mut *mut c_void,
    send_dev_comm: *mut *mut ncclNetDeviceHandle_v7_t,
) -> ncclResult_t {
    boundary("connect", || {
        core::connect(dev, None, oversize, handle, send_comm, send_dev_comm)
    })
}

// ---- sizes: int (v7, v8) or size_t (v8+ regMr, v9+ isend/irecv) ---------------------------

// One function per entry, generic over the size type: `S` = `c_int` (v7 `regMr`, v7/v8
// `isend`/`irecv`) or `usize` (v8+ `regMr`, v9 `isend`/`irecv`); each table takes the instance
// its C signature names.

unsafe extern "C" fn reg_mr<S: SizeArg>(
    comm: *mut c_void,
    data: *mut c_void,
    size: S,
    type_: c_int,
    mhandle: *mut *mut c_void,
) -> ncclResult_t {
    boundary("regMr", || core::reg_mr(comm, data, size, type_, mhandle))
}

/// `isend` without a profiler handle (before v10).
unsafe extern "C" fn isend<S: SizeArg>(
    send_comm: *mut c_void,
    data: *mut c_void,
    size: S,
    tag: c_int,
    mhandle: *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    boundary("isend", || {
        core::isend(
            send_comm,
            data,
            size,
            tag,
            mhandle,
            ::core::ptr::null_mut(),
            request,
        )
    })
}

/// `irecv` without profiler handles (before v10).
unsafe extern "C" fn irecv<S: SizeArg>(
    recv_comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut S,
    tags: *mut c_int,
    mhandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    boundary("irecv", || {
        core::irecv(
            recv_comm,
            n,
            data,
            sizes,
            tags,
            mhandles,
            ::core::ptr::null_mut(),
            request,
        )
    })
}

// ---- v10+: profiler handles, connect config -----------------------------------------------

unsafe extern "C" fn isend_profiled(
    send_comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    tag: c_int,
    mhandle: *mut c_void,
    phandle: *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    boundary("isend", || {
        core::isend(send_comm, data, size, tag, mhandle, phandle, request)
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn irecv_profiled(
    recv_comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut usize,
    tags: *mut c_int,
    mhandles: *mut *mut c_void,
    phandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    boundary("irecv", || {
        core::irecv(recv_comm, n, data, sizes, tags, mhandles, phandles, request)
    })
}

unsafe extern "C" fn init_v10(
    logger: ncclDebugLogger_t,
    profiler: ncclProfilerCallback_t,
) -> ncclResult_t {
    boundary("init", || core::init(logger, profiler))
}

/// The traffic class in a config pointer NCCL passed (NULL: not set).
fn config_traffic_class(config: *const ncclNetCommConfig_v10_t) -> Result<Option<u8>> {
    if config.is_null() {
        return Ok(None);
    }
    // SAFETY: non-NULL; NCCL passes a valid config for the duration of the call (copied here).
    core::traffic_class(unsafe { (*config).trafficClass })
}

unsafe extern "C" fn connect_v10(
    dev: c_int,
    config: *mut ncclNetCommConfig_v10_t,
    handle: *mut c_void,
    send_comm: *mut *mut c_void,
    send_dev_comm: *mut *mut ncclNetDeviceHandle_v7_t,
) -> ncclResult_t {
    boundary("connect", || {
        let tc = config_traffic_class(config)?;
        core::connect(
            dev,
            tc,
            Oversize::Truncate,
            handle,
            send_comm,
            send_dev_comm,
        )
    })
}

// ---- v11, v12: per-communicator context ---------------------------------------------------

unsafe extern "C" fn init_v11(
    ctx: *mut *mut c_void,
    comm_id: u64,
    config: *mut ncclNetCommConfig_v11_t,
    logger: ncclDebugLogger_t,
    profiler: ncclProfilerCallback_t,
) -> ncclResult_t {
    boundary("init", || {
        if ctx.is_null() {
            return Err(Error::Usage("ctx is NULL".into()));
        }
        // A failed init leaves NULL behind, which finalize accepts.
        out("ctx", ctx, ::core::ptr::null_mut())?;
        let tc = config_traffic_class(config)?;
        core::init(logger, profiler)?;
        out(
            "ctx",
            ctx,
            Box::into_raw(NetContext::new(comm_id, tc)).cast(),
        )
    })
}

unsafe extern "C" fn listen_v11(
    ctx: *mut c_void,
    dev: c_int,
    handle: *mut c_void,
    listen_comm: *mut *mut c_void,
) -> ncclResult_t {
    boundary("listen", || {
        // SAFETY: NCCL passes the context init returned for this communicator (magic-checked).
        unsafe { NetContext::from_ptr(ctx) }?;
        core::listen(dev, handle, listen_comm)
    })
}

unsafe extern "C" fn connect_v11(
    ctx: *mut c_void,
    dev: c_int,
    handle: *mut c_void,
    send_comm: *mut *mut c_void,
    send_dev_comm: *mut *mut ncclNetDeviceHandle_v7_t,
) -> ncclResult_t {
    boundary("connect", || {
        // SAFETY: NCCL passes the context init returned for this communicator (magic-checked).
        let c = unsafe { NetContext::from_ptr(ctx) }?;
        core::connect(
            dev,
            c.traffic_class,
            Oversize::Truncate,
            handle,
            send_comm,
            send_dev_comm,
        )
    })
}

unsafe extern "C" fn finalize(ctx: *mut c_void) -> ncclResult_t {
    // SAFETY: NCCL passes a context init returned (or NULL after a failed init), once.
    boundary("finalize", || unsafe { context::finalize(ctx) })
}

unsafe extern "C" fn set_net_attr(ctx: *mut c_void, attr: *mut ncclNetAttr_v11_t) -> ncclResult_t {
    boundary("setNetAttr", || {
        // SAFETY: NCCL passes the context init returned for this communicator (magic-checked).
        let c = unsafe { NetContext::from_ptr(ctx) }?;
        if attr.is_null() {
            return Err(Error::Usage("setNetAttr with attr NULL".into()));
        }
        // SAFETY: non-NULL; NCCL passes a valid attribute struct for the call (copied here).
        c.set_attr(unsafe { attr.read() });
        Ok(())
    })
}

// ---- properties, one per layout -----------------------------------------------------------

unsafe extern "C" fn get_properties_v7(dev: c_int, p: *mut ncclNetProperties_v7_t) -> ncclResult_t {
    boundary("getProperties", || {
        out("props", p, props::v7(&core::properties(dev)?))
    })
}

unsafe extern "C" fn get_properties_v8(dev: c_int, p: *mut ncclNetProperties_v8_t) -> ncclResult_t {
    boundary("getProperties", || {
        out("props", p, props::v8(&core::properties(dev)?))
    })
}

unsafe extern "C" fn get_properties_v9(dev: c_int, p: *mut ncclNetProperties_v9_t) -> ncclResult_t {
    boundary("getProperties", || {
        out("props", p, props::v9(&core::properties(dev)?))
    })
}

unsafe extern "C" fn get_properties_v11(
    dev: c_int,
    p: *mut ncclNetProperties_v11_t,
) -> ncclResult_t {
    boundary("getProperties", || {
        out("props", p, props::v11(&core::properties(dev)?))
    })
}

unsafe extern "C" fn get_properties_v12(
    dev: c_int,
    p: *mut ncclNetProperties_v12_t,
) -> ncclResult_t {
    boundary("getProperties", || {
        out("props", p, props::v12(&core::properties(dev)?))
    })
}

// ---- Ferro's own statistics (not part of NCCL's ABI) ---------------------------------------

/// `ferroNetStats_v1`: the process's allocation count, and `comm`'s counters when non-NULL.
pub(crate) unsafe extern "C" fn ferro_net_stats(
    comm: *mut c_void,
    stats: *mut ferroNetStats_v1_t,
) -> ncclResult_t {
    boundary("ferroNetStats", || {
        let mut s = ferroNetStats_v1_t {
            allocations: crate::stats::allocations(),
            ..Default::default()
        };
        if !comm.is_null() {
            // SAFETY: the caller passes a send or receive comm of ours (checked by its magic).
            let c = unsafe { crate::transport::comm_ref(comm) }?;
            let n = c.counters()?;
            s.messages = n.messages;
            s.bytes = n.bytes;
            s.requests = n.requests;
            s.retries = n.retries;
            s.send_posts = n.send_posts;
            s.recv_posts = n.recv_posts;
            s.cts_writes = n.cts_writes;
            s.polls = n.polls;
            s.empty_polls = n.empty_polls;
            s.completions = n.completions;
        }
        out("stats", stats, s)
    })
}

// ---- the tables ---------------------------------------------------------------------------

const NAME: *const ::core::ffi::c_char = crate::PLUGIN_NAME.as_ptr();

pub(crate) const TABLE_V7: ncclNet_v7_t = ncclNet_v7_t {
    name: NAME,
    init: Some(init),
    devices: Some(devices),
    getProperties: Some(get_properties_v7),
    listen: Some(listen),
    connect: Some(connect_v7),
    accept: Some(accept),
    regMr: Some(reg_mr::<c_int>),
    regMrDmaBuf: Some(reg_mr_dma_buf),
    deregMr: Some(dereg_mr),
    isend: Some(isend::<c_int>),
    irecv: Some(irecv::<c_int>),
    iflush: Some(iflush),
    test: Some(test),
    closeSend: Some(close_send),
    closeRecv: Some(close_recv),
    closeListen: Some(close_listen),
    // Host plugin: no device-side memory handles and no consumption callbacks (NCCL null-checks).
    getDeviceMr: None,
    irecvConsumed: None,
};

pub(crate) const TABLE_V8: ncclNet_v8_t = ncclNet_v8_t {
    name: NAME,
    init: Some(init),
    devices: Some(devices),
    getProperties: Some(get_properties_v8),
    listen: Some(listen),
    connect: Some(connect),
    accept: Some(accept),
    regMr: Some(reg_mr::<usize>),
    regMrDmaBuf: Some(reg_mr_dma_buf),
    deregMr: Some(dereg_mr),
    isend: Some(isend::<c_int>),
    irecv: Some(irecv::<c_int>),
    iflush: Some(iflush),
    test: Some(test),
    closeSend: Some(close_send),
    closeRecv: Some(close_recv),
    closeListen: Some(close_listen),
    getDeviceMr: None,
    irecvConsumed: None,
};

pub(crate) const TABLE_V9: ncclNet_v9_t = ncclNet_v9_t {
    name: NAME,
    init: Some(init),
    devices: Some(devices),
    getProperties: Some(get_properties_v9),
    listen: Some(listen),
    connect: Some(connect),
    accept: Some(accept),
    regMr: Some(reg_mr::<usize>),
    regMrDmaBuf: Some(reg_mr_dma_buf),
    deregMr: Some(dereg_mr),
    isend: Some(isend::<usize>),
    irecv: Some(irecv::<usize>),
    iflush: Some(iflush),
    test: Some(test),
    closeSend: Some(close_send),
    closeRecv: Some(close_recv),
    closeListen: Some(close_listen),
    getDeviceMr: None,
    irecvConsumed: None,
    makeVDevice: Some(make_vdevice_v9),
};

pub(crate) const TABLE_V10: ncclNet_v10_t = ncclNet_v10_t {
    name: NAME,
    init: Some(init_v10),
    devices: Some(devices),
    getProperties: Some(get_properties_v9),
    listen: Some(listen),
    connect: Some(connect_v10),
    accept: Some(accept),
    regMr: Some(reg_mr::<usize>),
    regMrDmaBuf: Some(reg_mr_dma_buf),
    deregMr: Some(dereg_mr),
    isend: Some(isend_profiled),
    irecv: Some(irecv_profiled),
    iflush: Some(iflush),
    test: Some(test),
    closeSend: Some(close_send),
    closeRecv: Some(close_recv),
    closeListen: Some(close_listen),
    getDeviceMr: None,
    irecvConsumed: None,
    makeVDevice: Some(make_vdevice_v9),
};

pub(crate) const TABLE_V11: ncclNet_v11_t = ncclNet_v11_t {
    name: NAME,
    init: Some(init_v11),
    devices: Some(devices),
    getProperties: Some(get_properties_v11),
    listen: Some(listen_v11),
    connect: Some(connect_v11),
    accept: Some(accept),
    regMr: Some(reg_mr::<usize>),
    regMrDmaBuf: Some(reg_mr_dma_buf),
    deregMr: Some(dereg_mr),
    isend: Some(isend_profiled),
    irecv: Some(irecv_profiled),
    iflush: Some(iflush),
    test: Some(test),
    closeSend: Some(close_send),
    closeRecv: Some(close_recv),
    closeListen: Some(close_listen),
    getDeviceMr: None,
    irecvConsumed: None,
    makeVDevice: Some(make_vdevice_v9),
    finalize: Some(finalize),
    setNetAttr: Some(set_net_attr),
};

pub(crate) const TABLE_V12: ncclNet_v12_t = ncclNet_v12_t {
    name: NAME,
    init: Some(init_v11),
    devices: Some(devices),
    getProperties: Some(get_properties_v12),
    listen: Some(listen_v11),
    connect: Some(connect_v11),
    accept: Some(accept),
    regMr: Some(reg_mr::<usize>),
    regMrDmaBuf: Some(reg_mr_dma_buf),
    deregMr: Some(dereg_mr),
    isend: Some(isend_profiled),
    irecv: Some(irecv_profiled),
    iflush: Some(iflush),
    test: Some(test),
    closeSend: Some(close_send),
    closeRecv: Some(close_recv),
    closeListen: Some(close_listen),
    getDeviceMr: None,
    irecvConsumed: None,
    makeVDevice: Some(make_vdevice_v12),
    finalize: Some(finalize),
    setNetAttr: Some(set_net_attr),
};
