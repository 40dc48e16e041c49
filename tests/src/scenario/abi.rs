//! What each ABI version adds, checked through that version's own table (`FERRO_NET_ABI`):
//! - properties in the version's layout: `regIsGlobal` (v8+), `forceFlush`, `vProps`,
//!   `maxP2pBytes`/`maxCollBytes` (v9+: 4 GiB - 1, a request's 32-bit size on the wire, see
//!   `plugin::MAX_REQUEST_BYTES`), `maxMultiRequestSize` (v11+), `railId`/`planeId` (v12);
//! - a request size above what one request carries is an error naming the size and the limit,
//!   never a truncation (v9+: above `maxP2pBytes`; v7/v8: a negative `int`), and v7/v8 refuse
//!   no size their `int` can say (`INT_MAX` is taken);
//! - `irecv` called with NCCL's optional-completion hint (`*request == 0x1`, v9+) still writes a
//!   real request or NULL back;
//! - v10+: a profiler callback given to `init` sees one Start per buffer with a profiler handle,
//!   each with an IB QP descriptor (type, device, length, QP number), and a Stop for every Start;
//!   out-of-range traffic classes are refused (v10: in `connect`'s config, v11+: in `init`'s);
//! - v11+: a second context in the same process (its own `init`) carries a second connection, is
//!   finalized while the first keeps moving data, `setNetAttr` is taken from two threads at once,
//!   and `finalize` after a failed `init` succeeds.
//!
//! Rank 0 receives, rank 1 sends. Messages: [`SIZES`], each pattern-verified.

use super::Ctx;
use super::common::*;
use crate::buffer::{Buffer, PAGE, round_up, seed};
use crate::error::{HResult, HarnessError, NcclExt};
use crate::logger::{self, format_logs};
use crate::net::{Comm, Net, RecvComm, SendComm};
use crate::{bail, ensure, raw};
use core::ffi::{c_int, c_void};
use ferro_ffi::{
    AbiVersion, NCCL_NET_TRAFFIC_CLASS_UNDEF, NCCL_PROFILE_QP, log_level, ncclNetAttr_v11_t,
    ncclNetCommAttr_v11_t, ncclProfilerNetIbDescr_v1_t, ncclResult_t, profiler_event,
};
use std::sync::Mutex;

/// Message sizes moved in each direction of the checks.
const SIZES: [usize; 4] = [0, 1, 65537, 1 << 20];

/// What one request carries from v9 on (`maxP2pBytes`): 4 GiB - 1.
const MAX_REQUEST: usize = u32::MAX as usize;

/// What the fake profiler saw.
#[derive(Debug, Default)]
struct Seen {
    /// Started events: (event handle, phandle, descriptor).
    started: Vec<(usize, usize, ncclProfilerNetIbDescr_v1_t)>,
    /// Stopped event handles.
    stopped: Vec<usize>,
    /// Calls that broke the contract (bad type, unknown or repeated handle, bad plugin id).
    problems: Vec<String>,
}

static SEEN: Mutex<Option<Seen>> = Mutex::new(None);

/// NCCL's profiler callback, played by the harness: Start hands out a fresh event handle.
unsafe extern "C" fn fake_profiler(
    e_handle: *mut *mut c_void,
    type_: c_int,
    phandle: *mut c_void,
    plugin_id: i64,
    ext: *mut c_void,
) -> ncclResult_t {
    let mut g = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    let seen = g.get_or_insert_with(Seen::default);
    if e_handle.is_null() {
        seen.problems.push("eHandle pointer is NULL".into());
        return ncclResult_t::InvalidArgument;
    }
    match type_ {
        profiler_event::START => {
            if plugin_id != 0x10001 {
                seen.problems
                    .push(format!("Start with pluginId {plugin_id:#x} (want 0x10001)"));
            }
            // SAFETY: the plugin passes its descriptor (layout pinned in ferro-ffi) for the call.
            let d = unsafe { ext.cast::<ncclProfilerNetIbDescr_v1_t>().read() };
            let h = 0x1000 + seen.started.len();
            seen.started.push((h, phandle as usize, d));
            // SAFETY: non-NULL (checked above), the plugin's pre-set slot.
            unsafe { e_handle.write(h as *mut c_void) };
        }
        profiler_event::STOP => {
            // SAFETY: non-NULL (checked above).
            let h = unsafe { e_handle.read() } as usize;
            if !seen.started.iter().any(|s| s.0 == h) {
                seen.problems.push(format!("Stop of unknown event {h:#x}"));
            } else if seen.stopped.contains(&h) {
                seen.problems.push(format!("second Stop of event {h:#x}"));
            }
            seen.stopped.push(h);
        }
        other => seen.problems.push(format!("callback type {other}")),
    }
    ncclResult_t::Success
}

/// Moves [`SIZES`] over one connection, through the raw calls with profiler handles (v10+) and
/// the optional-completion hint (v9+); returns the messages moved.
fn transfer(
    ctx: &Ctx,
    net: &Net,
    send: Option<&SendComm>,
    recv: Option<&RecvComm>,
    round: u64,
) -> HResult<usize> {
    let v = net.version();
    let t = net.table();
    let id = ctx.opts.scenario.id();
    for (i, &size) in SIZES.iter().enumerate() {
        let s = seed(&[id, round, i as u64]);
        let phandle = (0x7000 + i) as *mut c_void;
        if let Some(rc) = recv {
            let cap = round_up(size + PAGE, PAGE);
            let buf = Buffer::new(cap)?;
            buf.fill_byte(0, cap, CANARY);
            let mr = net.reg_host(rc, &buf).call("regMr")?;
            let mut b = crate::net::Backoff::new("irecv to be posted", OP_TIMEOUT);
            let hint = if v >= AbiVersion::V9 {
                ferro_ffi::NCCL_NET_OPTIONAL_RECV_COMPLETION as *mut c_void
            } else {
                core::ptr::null_mut()
            };
            let req = loop {
                let mut ph = [phandle];
                // SAFETY: a live receive comm; the buffer is registered and stays mapped.
                let r = unsafe {
                    raw::irecv_bytes(
                        t,
                        rc.as_ptr(),
                        &mut [buf.base()],
                        &[cap],
                        &mut [TAG],
                        &mut [mr.as_ptr()],
                        Some(&mut ph),
                        hint,
                    )
                }
                .call("irecv")?;
                ensure!(
                    r != hint || hint.is_null(),
                    "irecv left NCCL's optional-completion hint (0x1) in *request"
                );
                if !r.is_null() {
                    break r;
                }
                b.pause()?;
            };
            let got = wait_raw(net, req)?;
            check_received(
                &buf,
                0,
                cap,
                got,
                size,
                s,
                &format!("v{} size {size}", v.number()),
            )?;
            net.dereg_mr(rc, mr).call("deregMr")?;
        }
        if let Some(sc) = send {
            let buf = Buffer::new(size.max(1))?;
            buf.fill_pattern(0, size, s);
            let mr = net.reg_host(sc, &buf).call("regMr")?;
            let mut b = crate::net::Backoff::new("isend to be posted", OP_TIMEOUT);
            let req = loop {
                // SAFETY: a live send comm; the buffer is registered and stays mapped.
                let r = unsafe {
                    raw::isend_bytes(t, sc.as_ptr(), buf.base(), size, TAG, mr.as_ptr(), phandle)
                }
                .call("isend")?;
                if !r.is_null() {
                    break r;
                }
                b.pause()?;
            };
            let sent = wait_raw(net, req)?;
            ensure!(
                sent == size_c(size),
                "send of {size} bytes: test reported {sent}"
            );
            net.dereg_mr(sc, mr).call("deregMr")?;
        }
    }
    Ok(SIZES.len())
}

/// Tests a raw request until done; returns its (first) size.
fn wait_raw(net: &Net, req: *mut c_void) -> HResult<c_int> {
    let mut b = crate::net::Backoff::new("request to complete", OP_TIMEOUT);
    loop {
        let mut sizes = [-1 as c_int; 8];
        // SAFETY: a live request not yet reported done; room for its sizes.
        if unsafe { raw::test(net.table(), req, sizes.as_mut_ptr()) }.call("test")? == 1 {
            return Ok(sizes[0]);
        }
        b.pause()?;
    }
}

/// The version's properties, as the plugin filled them.
fn check_properties(ctx: &Ctx, v: AbiVersion) -> HResult<String> {
    let p = &ctx.props;
    let unset = p.unset_fields();
    ensure!(
        unset.is_empty(),
        "v{}: properties left unset: {unset:?}",
        v.number()
    );
    if v >= AbiVersion::V8 {
        ensure!(p.reg_is_global == 1, "regIsGlobal {}", p.reg_is_global);
    }
    if v >= AbiVersion::V9 {
        ensure!(p.force_flush == Some(0), "forceFlush {:?}", p.force_flush);
        ensure!(
            p.vdevs.as_deref() == Some(&[ctx.dev][..]),
            "vProps {:?} (want the device itself, [{}])",
            p.vdevs,
            ctx.dev
        );
        // What a 32-bit size carries, whatever the port's max_msg_sz (8 MiB on rxe): longer
        // buffers go as several writes.
        ensure!(
            p.max_p2p_bytes == Some(MAX_REQUEST) && p.max_coll_bytes == Some(MAX_REQUEST),
            "maxP2pBytes {:?} maxCollBytes {:?} (want {MAX_REQUEST}: a request's 32-bit size)",
            p.max_p2p_bytes,
            p.max_coll_bytes
        );
    }
    if v >= AbiVersion::V11 {
        ensure!(
            p.max_multi_request_size == Some(1),
            "maxMultiRequestSize {:?}",
            p.max_multi_request_size
        );
    }
    if v == AbiVersion::V12 {
        ensure!(
            (p.rail_id, p.plane_id) == (Some(-1), Some(-1)),
            "railId {:?} planeId {:?}",
            p.rail_id,
            p.plane_id
        );
    }
    Ok(format!("v{} properties ok", v.number()))
}

/// Sizes no request can carry are refused with ncclInvalidUsage, before anything is posted,
/// and the WARN line names the size and the limit: v9+ one byte above `maxP2pBytes` (2^32,
/// which a 32-bit size would wrap to 0); v7/v8 a negative `int`. v7/v8 take `INT_MAX`, the
/// largest size they can say: no receive is posted at this point, so the answer is a NULL
/// request (call again), not an error.
fn check_oversized(net: &Net, send: &SendComm, v: AbiVersion, max: Option<usize>) -> HResult<()> {
    let buf = Buffer::new(PAGE)?;
    let mr = net.reg_host(send, &buf).call("regMr")?;
    let t = net.table();
    if let Some(max) = max {
        let size = max + 1;
        let mark = logger::log_mark();
        // SAFETY: a live send comm; the plugin must refuse the size before touching the memory.
        let r = unsafe {
            raw::isend_bytes(
                t,
                send.as_ptr(),
                buf.base(),
                size,
                TAG,
                mr.as_ptr(),
                core::ptr::null_mut(),
            )
        };
        ensure!(
            r == Err(ncclResult_t::InvalidUsage),
            "v{} isend of {size} bytes returned {r:?} (want ncclInvalidUsage)",
            v.number()
        );
        let warns = logger::logs_since(mark);
        ensure!(
            warns.iter().any(|l| l.level == log_level::WARN
                && l.text.contains(&format!("{size} bytes"))
                && l.text.contains(&format!("({max} bytes"))),
            "v{} isend of {size} bytes: no WARN line names the size and the limit {max}:\n{}",
            v.number(),
            format_logs(&warns)
        );
    } else {
        // SAFETY: as above.
        let r = unsafe { raw::isend(t, send.as_ptr(), buf.base(), -1, TAG, mr.as_ptr()) };
        ensure!(
            r == Err(ncclResult_t::InvalidUsage),
            "v{} isend of size -1 returned {r:?} (want ncclInvalidUsage)",
            v.number()
        );
        // SAFETY: a live send comm with no receive posted by the peer (it posts nothing more on
        // this connection), so the plugin answers NULL and never reads the page-sized buffer.
        let r = unsafe { raw::isend(t, send.as_ptr(), buf.base(), c_int::MAX, TAG, mr.as_ptr()) };
        ensure!(
            r == Ok(core::ptr::null_mut()),
            "v{} isend of INT_MAX bytes returned {r:?} (want a NULL request: taken, no receive posted yet)",
            v.number()
        );
    }
    net.dereg_mr(send, mr).call("deregMr")?;
    Ok(())
}

pub(super) fn run(ctx: &mut Ctx) -> HResult<String> {
    let net = ctx.net;
    let v = net.version();
    let mut notes = vec![check_properties(ctx, v)?];
    if v >= AbiVersion::V10 {
        // NCCL passes the same profiler callback to every init (v11+: every communicator's).
        net.init_full(
            crate::logger::nccl_logger(),
            Some(fake_profiler),
            0xabc0 + ctx.opts.rank as u64,
            NCCL_NET_TRAFFIC_CLASS_UNDEF,
        )
        .call("init with a profiler")?;
    }
    let (send, recv) = if ctx.is_receiver() {
        let r = net.accept_blocking(ctx.listen()?, CONNECT_TIMEOUT)?;
        (None, Some(r))
    } else {
        let mut h = ctx.peer_handle();
        if v == AbiVersion::V10 {
            let mut bad = ctx.peer_handle();
            let r = raw::connect_tc(net.table(), ctx.dev, 300, &mut bad.0);
            ensure!(
                matches!(r, Err(ncclResult_t::InvalidArgument)),
                "v10 connect with traffic class 300 returned {r:?}"
            );
        }
        (
            Some(net.connect_blocking(ctx.dev, &mut h, CONNECT_TIMEOUT)?),
            None,
        )
    };
    let mut messages = transfer(ctx, net, send.as_ref(), recv.as_ref(), 0)?;
    if let Some(sc) = &send {
        let max = (v >= AbiVersion::V9).then(|| ctx.props.max_p2p_bytes.unwrap_or(0));
        check_oversized(net, sc, v, max)?;
        notes.push(match max {
            Some(max) => format!("a send of {} bytes refused, naming the limit", max + 1),
            None => "a send of -1 bytes refused, one of INT_MAX taken".into(),
        });
    }
    if let (Some(rc), Some(max)) = (&recv, ctx.props.max_p2p_bytes) {
        let buf = Buffer::new(PAGE)?;
        let mr = net.reg_host(rc, &buf).call("regMr")?;
        // SAFETY: a live receive comm; the plugin must refuse the size before posting anything.
        let r = unsafe {
            raw::irecv_bytes(
                net.table(),
                rc.as_ptr(),
                &mut [buf.base()],
                &[max + 1],
                &mut [TAG],
                &mut [mr.as_ptr()],
                None,
                core::ptr::null_mut(),
            )
        };
        ensure!(
            r == Err(ncclResult_t::InvalidUsage),
            "irecv of a {} byte buffer returned {r:?} (want ncclInvalidUsage)",
            max + 1
        );
        net.dereg_mr(rc, mr).call("deregMr")?;
        notes.push("oversized receive refused".into());
    }
    if v >= AbiVersion::V11 {
        messages += second_context(ctx, send.as_ref(), recv.as_ref())?;
        notes.push("second context ok, finalized while the first moved data".into());
    }
    if let Some(sc) = send {
        net.close_send(sc).call("closeSend")?;
    }
    if let Some(rc) = recv {
        net.close_recv(rc).call("closeRecv")?;
    }
    if v >= AbiVersion::V10 {
        notes.push(check_profiler_events(ctx)?);
    }
    Ok(format!(
        "{messages} messages verified; {}",
        notes.join("; ")
    ))
}

/// v11+: a second communicator's context in this process.
fn second_context(ctx: &Ctx, send: Option<&SendComm>, recv: Option<&RecvComm>) -> HResult<usize> {
    let net = ctx.net;
    let b = Net::load().map_err(HarnessError::Failed)?;
    b.init_full(crate::logger::nccl_logger(), Some(fake_profiler), 0xb0b, 5)
        .call("init of a second context")?;
    let (send_b, recv_b) = if ctx.is_receiver() {
        (
            None,
            Some(net.accept_blocking(ctx.listen()?, CONNECT_TIMEOUT)?),
        )
    } else {
        let mut h = ctx.peer_handle();
        (
            Some(b.connect_blocking(ctx.dev, &mut h, CONNECT_TIMEOUT)?),
            None,
        )
    };
    // Hints from the service and progress threads at once, on both contexts.
    std::thread::scope(|s| {
        let threads: Vec<_> = [net, &b, net, &b]
            .into_iter()
            .map(|n| {
                s.spawn(move || {
                    for i in 0..100 {
                        let peers = ncclNetCommAttr_v11_t {
                            maxConcurrentPeers: i,
                            minConcurrentPeers: 1,
                            maxFlowsPerPeer: -1,
                            minFlowsPerPeer: 1,
                        };
                        let mut a = ncclNetAttr_v11_t {
                            sendCommAttr: peers,
                            recvCommAttr: peers,
                            op: 1 << 6,
                            algo: u32::MAX,
                            proto: u32::MAX,
                        };
                        raw::set_net_attr(n.table(), &mut a).call("setNetAttr")?;
                    }
                    Ok::<(), HarnessError>(())
                })
            })
            .collect();
        threads.into_iter().try_for_each(|t| {
            t.join()
                .map_err(|_| HarnessError::Failed("a setNetAttr thread panicked".into()))?
        })
    })?;
    let mut moved = 0;
    // The second connection carries data (the receiver's comm came from the first context's
    // listen comm, as NCCL's receiver of that communicator would have its own).
    if let Some(sb) = &send_b {
        moved += transfer(ctx, &b, Some(sb), None, 1)?;
    }
    if let Some(rb) = &recv_b {
        moved += transfer(ctx, net, None, Some(rb), 1)?;
    }
    if let Some(sb) = send_b {
        b.close_send(sb).call("closeSend (second context)")?;
        b.finalize().call("finalize of the second context")?;
    }
    if let Some(rb) = recv_b {
        net.close_recv(rb).call("closeRecv (second connection)")?;
        b.finalize().call("finalize of the second context")?;
    }
    // The first context keeps moving data after the second is gone.
    moved += transfer(ctx, net, send, recv, 2)?;
    // A failed init (traffic class out of range) leaves NULL behind; finalize accepts it.
    let c = Net::load().map_err(HarnessError::Failed)?;
    let r = c.init_full(None, None, 0xdead, 999);
    ensure!(
        r == Err(ncclResult_t::InvalidArgument),
        "init with traffic class 999 returned {r:?}"
    );
    c.finalize().call("finalize after a failed init")?;
    Ok(moved)
}

/// Every Start has its Stop, descriptors describe the posted work.
fn check_profiler_events(ctx: &Ctx) -> HResult<String> {
    let g = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    let Some(seen) = g.as_ref() else {
        bail!("the profiler callback was never called");
    };
    ensure!(
        seen.problems.is_empty(),
        "profiler contract: {:?}",
        seen.problems
    );
    ensure!(!seen.started.is_empty(), "no profiler events started");
    for (h, ph, d) in &seen.started {
        ensure!(
            seen.stopped.contains(h),
            "event {h:#x} started, never stopped"
        );
        ensure!(
            (0x7000..0x7000 + SIZES.len()).contains(ph),
            "Start with phandle {ph:#x}, not one given to isend/irecv"
        );
        let i = ph - 0x7000;
        ensure!(d.type_ == NCCL_PROFILE_QP, "descriptor type {}", d.type_);
        ensure!(
            d.qp.device == ctx.dev,
            "descriptor device {} (want {})",
            d.qp.device,
            ctx.dev
        );
        ensure!(d.qp.qpNum != 0, "descriptor QP number 0");
        let want = if ctx.is_receiver() {
            round_up(SIZES[i] + PAGE, PAGE)
        } else {
            SIZES[i]
        };
        ensure!(
            d.qp.length == want,
            "descriptor length {} for message {i} (want {want})",
            d.qp.length
        );
    }
    Ok(format!(
        "{} profiler events, each started and stopped once",
        seen.started.len()
    ))
}
