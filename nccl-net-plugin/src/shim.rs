//! The C boundary. Nothing here decides anything: arguments are checked for NULL and converted,
//! safe code is called, and its `Result` becomes an `ncclResult_t`. Every body runs inside
//! [`boundary`], which turns a panic into `ncclInternalError` with a WARN.

use crate::error::{Error, Result};
use crate::{plugin, warn};
use core::ffi::{c_int, c_void};
use ferro_ffi::log_flags::{ALL, NET};
use ferro_ffi::*;
use std::panic::{catch_unwind, AssertUnwindSafe};

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
            warn!(ALL, "{func}: internal error (caught panic: {what}); please report this");
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

unsafe extern "C" fn get_properties(dev: c_int, props: *mut ncclNetProperties_v8_t) -> ncclResult_t {
    boundary("getProperties", || out("props", props, plugin::device(dev)?.properties()))
}

fn missing(func: &str) -> Result<()> {
    Err(Error::Internal(format!("{func} is not implemented in this build of the plugin")))
}

unsafe extern "C" fn listen(_dev: c_int, _handle: *mut c_void, _listen_comm: *mut *mut c_void) -> ncclResult_t {
    boundary("listen", || missing("listen"))
}

unsafe extern "C" fn connect(
    _dev: c_int,
    _handle: *mut c_void,
    _send_comm: *mut *mut c_void,
    _send_dev_comm: *mut *mut ncclNetDeviceHandle_v8_t,
) -> ncclResult_t {
    boundary("connect", || missing("connect"))
}

unsafe extern "C" fn accept(
    _listen_comm: *mut c_void,
    _recv_comm: *mut *mut c_void,
    _recv_dev_comm: *mut *mut ncclNetDeviceHandle_v8_t,
) -> ncclResult_t {
    boundary("accept", || missing("accept"))
}

unsafe extern "C" fn reg_mr(
    _comm: *mut c_void,
    _data: *mut c_void,
    _size: usize,
    _type: c_int,
    _mhandle: *mut *mut c_void,
) -> ncclResult_t {
    boundary("regMr", || missing("regMr"))
}

unsafe extern "C" fn reg_mr_dma_buf(
    _comm: *mut c_void,
    _data: *mut c_void,
    _size: usize,
    _type: c_int,
    _offset: u64,
    _fd: c_int,
    _mhandle: *mut *mut c_void,
) -> ncclResult_t {
    boundary("regMrDmaBuf", || missing("regMrDmaBuf"))
}

unsafe extern "C" fn dereg_mr(_comm: *mut c_void, _mhandle: *mut c_void) -> ncclResult_t {
    boundary("deregMr", || missing("deregMr"))
}

unsafe extern "C" fn isend(
    _send_comm: *mut c_void,
    _data: *mut c_void,
    _size: c_int,
    _tag: c_int,
    _mhandle: *mut c_void,
    _request: *mut *mut c_void,
) -> ncclResult_t {
    boundary("isend", || missing("isend"))
}

unsafe extern "C" fn irecv(
    _recv_comm: *mut c_void,
    _n: c_int,
    _data: *mut *mut c_void,
    _sizes: *mut c_int,
    _tags: *mut c_int,
    _mhandles: *mut *mut c_void,
    _request: *mut *mut c_void,
) -> ncclResult_t {
    boundary("irecv", || missing("irecv"))
}

unsafe extern "C" fn iflush(
    _recv_comm: *mut c_void,
    _n: c_int,
    _data: *mut *mut c_void,
    _sizes: *mut c_int,
    _mhandles: *mut *mut c_void,
    _request: *mut *mut c_void,
) -> ncclResult_t {
    boundary("iflush", || missing("iflush"))
}

unsafe extern "C" fn test(_request: *mut c_void, _done: *mut c_int, _sizes: *mut c_int) -> ncclResult_t {
    boundary("test", || missing("test"))
}

unsafe extern "C" fn close_send(_comm: *mut c_void) -> ncclResult_t {
    boundary("closeSend", || missing("closeSend"))
}

unsafe extern "C" fn close_recv(_comm: *mut c_void) -> ncclResult_t {
    boundary("closeRecv", || missing("closeRecv"))
}

unsafe extern "C" fn close_listen(_comm: *mut c_void) -> ncclResult_t {
    boundary("closeListen", || missing("closeListen"))
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
