//! The C boundary. Nothing here decides anything: arguments are checked for NULL and converted,
//! safe code is called, and its `Result` becomes an `ncclResult_t`. Every body runs inside
//! [`boundary`], which turns a panic into `ncclInternalError` with a WARN.

use crate::error::{Error, Result};
use crate::{plugin, transport, warn};
use core::ffi::{c_int, c_void};
use ferro_ffi::log_flags::{ALL, NET};
use ferro_ffi::*;
use ferro_proto::handle::HANDLE_SIZE;
use std::panic::{AssertUnwindSafe, catch_unwind};

fn boundary(func: &str, body: impl FnOnce() -> Result<()>) -> ncclResult_t {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => ncclResult_t::Success,
        Ok(Err(e)) => {
            warn!(NET, "{func}: {e}");
            e.code()
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            warn!(
                ALL,
                "{func}: internal error (caught panic: {what}); please report this"
            );
            ncclResult_t::InternalError
        }
    }
}

/// Writes `value` through an out-pointer NCCL gave us.
fn out<T>(name: &str, p: *mut T, value: T) -> Result<()> {
    if p.is_null() {
        return Err(Error::Usage(format!("{name} is NULL")));
    }
    // SAFETY: non-NULL; NCCL passes a valid, aligned out-pointer for this argument.
    unsafe { p.write(value) };
    Ok(())
}

fn drop_hook(msg: &str) {
    warn!(NET, "{msg}");
}

unsafe extern "C" fn init(logger: ncclDebugLogger_t) -> ncclResult_t {
    crate::log::set_logger(logger);
    boundary("init", || {
        ferro_verbs::objects::set_drop_error_hook(drop_hook);
        plugin::init().map(|_| ())
    })
}

unsafe extern "C" fn devices(ndev: *mut c_int) -> ncclResult_t {
    boundary("devices", || {
        let n = c_int::try_from(plugin::device_count()).unwrap_or(c_int::MAX);
        out("ndev", ndev, n)
    })
}

unsafe extern "C" fn get_properties(
    dev: c_int,
    props: *mut ncclNetProperties_v8_t,
) -> ncclResult_t {
    boundary("getProperties", || {
        out("props", props, plugin::device(dev)?.properties())
    })
}

fn handle_mut<'a>(handle: *mut c_void) -> Result<&'a mut [u8; HANDLE_SIZE]> {
    if handle.is_null() {
        return Err(Error::Usage("handle is NULL".into()));
    }
    // SAFETY: NCCL passes a buffer of NCCL_NET_HANDLE_MAXSIZE (128) bytes, exclusively ours for
    // the duration of the call; [u8; 128] has alignment 1.
    Ok(unsafe { &mut *handle.cast::<[u8; HANDLE_SIZE]>() })
}

unsafe extern "C" fn listen(
    dev: c_int,
    handle: *mut c_void,
    listen_comm: *mut *mut c_void,
) -> ncclResult_t {
    boundary("listen", || {
        let h = handle_mut(handle)?;
        if listen_comm.is_null() {
            return Err(Error::Usage("listenComm is NULL".into()));
        }
        let l = transport::listen(dev, h)?;
        out("listenComm", listen_comm, Box::into_raw(l).cast())
    })
}

unsafe extern "C" fn connect(
    dev: c_int,
    handle: *mut c_void,
    send_comm: *mut *mut c_void,
    send_dev_comm: *mut *mut ncclNetDeviceHandle_v8_t,
) -> ncclResult_t {
    boundary("connect", || {
        if send_comm.is_null() {
            return Err(Error::Usage("sendComm is NULL".into()));
        }
        if !send_dev_comm.is_null() {
            out("sendDevComm", send_dev_comm, core::ptr::null_mut())?;
        }
        let c = transport::connect(dev, handle_mut(handle)?)?;
        out(
            "sendComm",
            send_comm,
            c.map_or(core::ptr::null_mut(), transport::CommPtr::into_raw),
        )
    })
}

unsafe extern "C" fn accept(
    listen_comm: *mut c_void,
    recv_comm: *mut *mut c_void,
    recv_dev_comm: *mut *mut ncclNetDeviceHandle_v8_t,
) -> ncclResult_t {
    boundary("accept", || {
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
    })
}

unsafe extern "C" fn reg_mr(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    type_: c_int,
    mhandle: *mut *mut c_void,
) -> ncclResult_t {
    boundary("regMr", || {
        // SAFETY: NCCL passes a send or receive comm of ours (checked by its magic).
        let c = unsafe { transport::comm_ref(comm) }?;
        let m = transport::reg_mr(c, data as u64, size, type_)?;
        out("mhandle", mhandle, Box::into_raw(m).cast())
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
        // SAFETY: NCCL passes a send or receive comm of ours (checked by its magic).
        let c = unsafe { transport::comm_ref(comm) }?;
        let m = transport::reg_mr_dmabuf(c, data as u64, size, type_, offset, fd)?;
        out("mhandle", mhandle, Box::into_raw(m).cast())
    })
}

unsafe extern "C" fn dereg_mr(comm: *mut c_void, mhandle: *mut c_void) -> ncclResult_t {
    boundary("deregMr", || {
        // SAFETY: NCCL passes a comm of ours (checked by its magic).
        let _c = unsafe { transport::comm_ref(comm) }?;
        // SAFETY: NCCL passes an mhandle from regMr (checked by its magic) and never uses it again.
        unsafe { transport::dereg_mr(mhandle) }
    })
}

unsafe extern "C" fn isend(
    send_comm: *mut c_void,
    data: *mut c_void,
    size: c_int,
    tag: c_int,
    mhandle: *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    boundary("isend", || {
        // SAFETY: NCCL passes a comm of ours (checked by its magic).
        let c = unsafe { transport::comm_ref(send_comm) }?;
        // SAFETY: NCCL passes NULL or an mhandle of ours (checked by its magic).
        let m = unsafe { transport::mr_ref(mhandle) }?;
        let size = u32::try_from(size)
            .map_err(|_| Error::Usage(format!("isend of negative size {size}")))?;
        let r = c.isend(data as u64, size, tag, m)?;
        out(
            "request",
            request,
            r.map_or(core::ptr::null_mut(), |r| r.cast()),
        )
    })
}

unsafe extern "C" fn irecv(
    recv_comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut c_int,
    tags: *mut c_int,
    mhandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    boundary("irecv", || {
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
        if data.is_null() || sizes.is_null() || tags.is_null() || mhandles.is_null() {
            return Err(Error::Usage("irecv with a NULL array".into()));
        }
        let mut bufs = [transport::RecvBuf {
            addr: 0,
            size: 0,
            tag: 0,
            rkey: 0,
        }; plugin::MAX_RECVS];
        for (i, buf) in bufs.iter_mut().enumerate().take(n) {
            // SAFETY: NCCL passes arrays of n elements each (checked non-NULL above).
            let (d, s, t, m) =
                unsafe { (*data.add(i), *sizes.add(i), *tags.add(i), *mhandles.add(i)) };
            let s = u32::try_from(s)
                .map_err(|_| Error::Usage(format!("irecv buffer {i} has negative size {s}")))?;
            // SAFETY: NULL or an mhandle of ours (checked by its magic).
            let m = unsafe { transport::mr_ref(m) }?;
            let rkey = match (s, m) {
                (_, Some(m)) => m.rkey(),
                (0, None) => 0,
                (_, None) => {
                    return Err(Error::Usage(format!(
                        "irecv buffer {i} of {s} bytes without a memory handle"
                    )));
                }
            };
            *buf = transport::RecvBuf {
                addr: d as u64,
                size: s,
                tag: t,
                rkey,
            };
        }
        let r = c.irecv(&bufs[..n])?;
        out(
            "request",
            request,
            r.map_or(core::ptr::null_mut(), |r| r.cast()),
        )
    })
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
            *buf = (d as u64, u32::try_from(s).unwrap_or(0), m);
        }
        let r = c.iflush(&bufs[..n])?;
        out(
            "request",
            request,
            r.map_or(core::ptr::null_mut(), |r| r.cast()),
        )
    })
}

unsafe extern "C" fn test(
    request: *mut c_void,
    done: *mut c_int,
    sizes: *mut c_int,
) -> ncclResult_t {
    boundary("test", || {
        if done.is_null() {
            return Err(Error::Usage("test with done NULL".into()));
        }
        // SAFETY: NCCL passes a request of ours (checked by its magic) whose comm is open.
        let r = unsafe { transport::test_request(request) }?;
        match r {
            None => out("done", done, 0),
            Some(d) => {
                if !sizes.is_null() {
                    for (i, v) in d.sizes.iter().take(d.n).enumerate() {
                        // SAFETY: sizes has room for n entries (the request's buffer count).
                        unsafe { sizes.add(i).write(*v as c_int) };
                    }
                }
                out("done", done, 1)
            }
        }
    })
}

unsafe extern "C" fn close_send(comm: *mut c_void) -> ncclResult_t {
    // SAFETY: NCCL passes a send comm of ours (checked by its magic) and never uses it again.
    boundary("closeSend", || unsafe {
        transport::close(comm, transport::ObjectKind::SendComm)
    })
}

unsafe extern "C" fn close_recv(comm: *mut c_void) -> ncclResult_t {
    // SAFETY: NCCL passes a receive comm of ours (checked by its magic) and never uses it again.
    boundary("closeRecv", || unsafe {
        transport::close(comm, transport::ObjectKind::RecvComm)
    })
}

unsafe extern "C" fn close_listen(comm: *mut c_void) -> ncclResult_t {
    // SAFETY: NCCL passes a listen comm of ours (checked by its magic) and never uses it again.
    boundary("closeListen", || unsafe {
        transport::close(comm, transport::ObjectKind::ListenComm)
    })
}

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
            let c = unsafe { transport::comm_ref(comm) }?;
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

pub(crate) const TABLE: ncclNet_v8_t = ncclNet_v8_t {
    name: crate::PLUGIN_NAME.as_ptr(),
    init: Some(init),
    devices: Some(devices),
    getProperties: Some(get_properties),
    listen: Some(listen),
    connect: Some(connect),
    accept: Some(accept),
    regMr: Some(reg_mr),
    regMrDmaBuf: Some(reg_mr_dma_buf),
    deregMr: Some(dereg_mr),
    isend: Some(isend),
    irecv: Some(irecv),
    iflush: Some(iflush),
    test: Some(test),
    closeSend: Some(close_send),
    closeRecv: Some(close_recv),
    closeListen: Some(close_listen),
    // Host plugin: no device-side memory handles and no consumption callbacks (NCCL null-checks).
    getDeviceMr: None,
    irecvConsumed: None,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_and_errors_become_result_codes_not_unwinds() {
        assert_eq!(
            boundary("t", || panic!("boom")),
            ncclResult_t::InternalError
        );
        assert_eq!(
            boundary("t", || Err(Error::Remote("peer".into()))),
            ncclResult_t::RemoteError
        );
        assert_eq!(
            boundary("t", || Err(Error::Usage("x".into()))),
            ncclResult_t::InvalidUsage
        );
        assert_eq!(boundary("t", || Ok(())), ncclResult_t::Success);
    }

    #[test]
    fn out_pointers_are_checked() {
        assert!(out::<c_int>("p", core::ptr::null_mut(), 1).is_err());
        let mut v = 0;
        assert!(out("p", &mut v, 5).is_ok());
        assert_eq!(v, 5);
    }
}
