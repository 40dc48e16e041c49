//! Network events for NCCL's profiler (ABI v10+). When NCCL passes a profiler callback to `init`,
//! each request `isend`/`irecv` returns starts one event per buffer that has a profiler handle
//! (`phandle`), described by an IB QP descriptor (`ncclProfilerNetIbDescr_v1_t`); `test`
//! reporting the request done stops them, and so does closing the comm with the request still
//! outstanding. A handle is never used after its request finished: the events are keyed by the
//! request and removed when they stop.
//!
//! Without a callback nothing is recorded: every hook returns after one relaxed atomic load.

use crate::transport::{Comm, ReqHandle};
use core::ffi::c_void;
use ferro_ffi::{
    NCCL_PROFILE_QP, NCCL_PROFILER_NET_IB_VER, NCCL_PROFILER_NET_TYPE_IB, ncclProfilerCallback_t,
    ncclProfilerNetIbDescr_v1_t, ncclProfilerNetIbQp_v1_t, profiler_event,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

/// Work request opcodes named in the descriptor (`ibv_wr_opcode` values).
const OPCODE_RDMA_WRITE_WITH_IMM: i32 = 1;
/// A receive (`IBV_WC_RECV`, as NCCL's IB transport names the receive side's work).
const OPCODE_RECV: i32 = 128;

type Callback = unsafe extern "C" fn(
    *mut *mut c_void,
    i32,
    *mut c_void,
    i64,
    *mut c_void,
) -> ferro_ffi::ncclResult_t;

static ENABLED: AtomicBool = AtomicBool::new(false);
static CALLBACK: OnceLock<Mutex<Option<Callback>>> = OnceLock::new();

/// Open events: request pointer -> (its comm, the profiler's event handles).
type Open = HashMap<usize, (usize, Vec<usize>)>;
static OPEN: OnceLock<Mutex<Open>> = OnceLock::new();

fn open() -> std::sync::MutexGuard<'static, Open> {
    OPEN.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

fn callback() -> Option<Callback> {
    *CALLBACK
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Records the callback NCCL passed to `init` (NULL: no events). The last one given wins: NCCL
/// passes the same function every time.
pub fn set_callback(cb: ncclProfilerCallback_t) {
    if let Some(cb) = cb {
        *CALLBACK
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(cb);
        ENABLED.store(true, Ordering::Release);
    }
}

fn plugin_id() -> i64 {
    NCCL_PROFILER_NET_TYPE_IB | NCCL_PROFILER_NET_IB_VER
}

/// A request was returned by `isend` (`send`) or `irecv`: one Start per buffer with a profiler
/// handle, `lengths[i]` bytes each.
pub fn on_post(
    comm: &Comm,
    req: Option<*mut ReqHandle>,
    phandles: &[*mut c_void],
    lengths: &[u32],
    send: bool,
) {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    let (Some(req), Some(cb)) = (req, callback()) else {
        return;
    };
    let mut handles = Vec::new();
    for (i, &ph) in phandles.iter().enumerate() {
        if ph.is_null() {
            continue;
        }
        let mut descr = ncclProfilerNetIbDescr_v1_t {
            type_: NCCL_PROFILE_QP,
            qp: ncclProfilerNetIbQp_v1_t {
                device: comm.device().index as i32,
                wr_id: req as u64,
                opcode: if send {
                    OPCODE_RDMA_WRITE_WITH_IMM
                } else {
                    OPCODE_RECV
                },
                qpNum: comm.first_qpn() as i32,
                length: lengths.get(i).copied().unwrap_or(0) as usize,
            },
        };
        let mut e: *mut c_void = core::ptr::null_mut();
        // SAFETY: NCCL's callback with a valid event-handle out-pointer (pre-set to NULL, as a
        // Start without a listening profiler leaves it untouched), the phandle NCCL gave for this
        // buffer, and a descriptor that lives for the call.
        let _ = unsafe {
            cb(
                &mut e,
                profiler_event::START,
                ph,
                plugin_id(),
                (&mut descr as *mut ncclProfilerNetIbDescr_v1_t).cast(),
            )
        };
        if !e.is_null() {
            handles.push(e as usize);
        }
    }
    if !handles.is_empty() {
        open().insert(req as usize, (comm as *const Comm as usize, handles));
    }
}

fn stop(cb: Callback, handles: Vec<usize>) {
    for h in handles {
        let mut e = h as *mut c_void;
        // SAFETY: an event handle the profiler set at Start and has not seen stopped.
        let _ = unsafe {
            cb(
                &mut e,
                profiler_event::STOP,
                core::ptr::null_mut(),
                plugin_id(),
                core::ptr::null_mut(),
            )
        };
    }
}

/// `test` reported `req` done: its events stop.
pub fn on_done(req: *mut c_void) {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    let taken = open().remove(&(req as usize));
    if let (Some((_, handles)), Some(cb)) = (taken, callback()) {
        stop(cb, handles);
    }
}

/// The comm is being closed: the events of its outstanding requests stop.
pub fn on_close(comm: *mut c_void) {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    let mut gone = Vec::new();
    open().retain(|_, (c, handles)| {
        if *c == comm as usize {
            gone.append(handles);
            false
        } else {
            true
        }
    });
    if let Some(cb) = callback() {
        stop(cb, gone);
    }
}
