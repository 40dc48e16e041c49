//! What each ABI version adds, checked through that version's own table (`FERRO_NET_ABI`):
//! - properties in the version's layout: `regIsGlobal` (v8+), `forceFlush`, `vProps`,
//!   `maxP2pBytes`/`maxCollBytes` (v9+: 4 GiB - 1, a request's 32-bit size on the wire, see
//!   `plugin::MAX_REQUEST_BYTES`), `maxMultiRequestSize` (v11+), `railId`/`planeId` (v12);
//! - a request size above what one request carries is an error naming the size and the limit,
//!   never a truncation (v9+: above `maxP2pBytes`; v7/v8: a negative `int`), and v7/v8 refuse
//!   no size their `int` can say (`INT_MAX` is taken);
//! - `irecv` called with NCCL's optional-completion hint (`*request == 0x1`, v9+) still writes a
//!   real request or NULL back;
//! - v10+: a profiler callback given to `init` sees, for every buffer given a profiler handle,
//!   one event per QP its work is on (`NCCL_IB_QPS_PER_CONNECTION` with
//!   `NCCL_IB_SPLIT_DATA_ON_QPS=1`: one per QP, on distinct QPs; else one), each Start while its
//!   request is outstanding, each stopped exactly once and before `test` reports the request
//!   done (or, for a receive left outstanding, by closing the comm); descriptors: type QP, the
//!   device, a QP of the comm (the process's QPs as the kernel lists them, `rdma res show qp`),
//!   the opcode (write with immediate for a lone send, plain write for a send of a group of
//!   buffers, receive), one `wr_id` per buffer, lengths adding up to the size sent or the
//!   buffer posted. A send that only matched a buffer of a receive group has no event until the
//!   next send posts the group; a transfer without profiler handles has none at all;
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
use std::sync::{Mutex, MutexGuard};

/// Message sizes moved in each direction of the checks.
const SIZES: [usize; 4] = [0, 1, 65537, 1 << 20];

/// What one request carries from v9 on (`maxP2pBytes`): 4 GiB - 1.
const MAX_REQUEST: usize = u32::MAX as usize;

/// Profiler handles the harness passes: fake pointers (the plugin only hands them to the
/// callback). Message `i` of [`SIZES`] uses `PH_SINGLE + i`; the grouped transfer `PH_GROUP + i`;
/// the receive left outstanding at close `PH_OPEN`.
const PH_SINGLE: usize = 0x7000;
const PH_GROUP: usize = 0x7100;
const PH_OPEN: usize = 0x7200;

/// The descriptor opcodes (`ibv_wr_opcode` for writes, `IBV_WC_RECV` for receives).
const OP_WRITE: i32 = 0;
const OP_WRITE_WITH_IMM: i32 = 1;
const OP_RECV: i32 = 128;

/// What the fake profiler saw, and what the harness told it to expect.
#[derive(Debug)]
struct Seen {
    calls: usize,
    /// Started events: (event handle, phandle, descriptor).
    started: Vec<(usize, usize, ncclProfilerNetIbDescr_v1_t)>,
    /// Stopped event handles.
    stopped: Vec<usize>,
    /// Calls that broke the contract (bad type, unknown or repeated handle, bad plugin id, a
    /// Start for a request that is not outstanding, a QP that is not the comm's).
    problems: Vec<String>,
    /// Profiler handles whose request is outstanding, with where their events begin in `started`.
    live: Vec<(usize, usize)>,
    /// The QP numbers of the comm being driven, as the kernel lists them.
    comm_qps: Vec<u32>,
    /// Buffers whose events were checked, and how many events they had.
    buffers: usize,
    events: usize,
}

impl Seen {
    const fn new() -> Seen {
        Seen {
            calls: 0,
            started: Vec::new(),
            stopped: Vec::new(),
            problems: Vec::new(),
            live: Vec::new(),
            comm_qps: Vec::new(),
            buffers: 0,
            events: 0,
        }
    }

    /// Events started for `ph` since index `from` of `started`.
    fn events_of(
        &self,
        ph: usize,
        from: usize,
    ) -> Vec<(usize, usize, ncclProfilerNetIbDescr_v1_t)> {
        self.started[from..]
            .iter()
            .filter(|e| e.1 == ph)
            .copied()
            .collect()
    }
}

static SEEN: Mutex<Seen> = Mutex::new(Seen::new());

fn seen() -> MutexGuard<'static, Seen> {
    SEEN.lock().unwrap_or_else(|p| p.into_inner())
}

/// NCCL's profiler callback, played by the harness: Start hands out a fresh event handle.
unsafe extern "C" fn fake_profiler(
    e_handle: *mut *mut c_void,
    type_: c_int,
    phandle: *mut c_void,
    plugin_id: i64,
    ext: *mut c_void,
) -> ncclResult_t {
    let mut seen = seen();
    seen.calls += 1;
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
            let ph = phandle as usize;
            if ph == 0 {
                seen.problems.push("Start with a NULL phandle".into());
            } else if !seen.live.iter().any(|l| l.0 == ph) {
                seen.problems.push(format!(
                    "Start for phandle {ph:#x} whose request is not outstanding (never posted, or already reported done)"
                ));
            }
            if !seen.comm_qps.contains(&(d.qp.qpNum as u32)) {
                let qps = seen.comm_qps.clone();
                seen.problems.push(format!(
                    "Start on QP {} (phandle {ph:#x}), not one of the comm's QPs {qps:?}",
                    d.qp.qpNum
                ));
            }
            let h = 0x1000 + seen.started.len();
            seen.started.push((h, ph, d));
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

/// How the connections of this process spread a message over QPs (the variables the plugin
/// reads at `init`).
#[derive(Debug, Clone, Copy)]
struct QpLayout {
    nqps: usize,
    split: bool,
}

impl QpLayout {
    fn from_env() -> QpLayout {
        let var = |k: &str| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
        };
        QpLayout {
            nqps: var("NCCL_IB_QPS_PER_CONNECTION").unwrap_or(1).max(1),
            split: var("NCCL_IB_SPLIT_DATA_ON_QPS") == Some(1),
        }
    }

    /// Events per buffer: one per QP its group's work is on.
    fn events(self) -> usize {
        if self.split { self.nqps } else { 1 }
    }
}

/// The QP numbers the kernel lists for this process (`rdma res show qp`: one line per QP, with
/// `lqpn N` and the creating thread's `pid T`).
fn process_qps() -> HResult<Vec<u32>> {
    let out = std::process::Command::new("rdma")
        .args(["res", "show", "qp"])
        .output()
        .map_err(|e| HarnessError::Failed(format!("rdma res show qp: {e}")))?;
    ensure!(
        out.status.success(),
        "rdma res show qp: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mine: Vec<String> = std::fs::read_dir("/proc/self/task")
        .map_err(|e| HarnessError::Failed(format!("/proc/self/task: {e}")))?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .chain([std::process::id().to_string()])
        .collect();
    let mut qps = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let field = |k: &str| w.windows(2).find(|p| p[0] == k).map(|p| p[1]);
        if field("pid").is_some_and(|p| mine.iter().any(|m| m == p)) {
            if let Some(n) = field("lqpn").and_then(|v| v.parse().ok()) {
                qps.push(n);
            }
        }
    }
    Ok(qps)
}

/// The QPs this process has now and did not have in `before`: those of a comm just connected.
fn new_qps(before: &[u32]) -> HResult<Vec<u32>> {
    let qps: Vec<u32> = process_qps()?
        .into_iter()
        .filter(|q| !before.contains(q))
        .collect();
    ensure!(
        !qps.is_empty(),
        "no new QP of this process in `rdma res show qp` after connecting"
    );
    Ok(qps)
}

/// From now on Starts must name one of `qps` (the comm being driven).
fn driving(qps: &[u32]) {
    seen().comm_qps = qps.to_vec();
}

/// The request of profiler handle `ph` is about to be posted.
fn begin(ph: usize) {
    let mut s = seen();
    let at = s.started.len();
    s.live.push((ph, at));
}

/// What one buffer's events must show.
#[derive(Debug, Clone, Copy)]
struct Expect {
    events: usize,
    opcode: i32,
    /// What the lengths add up to: the bytes sent, or the size of the receive buffer.
    bytes: usize,
}

/// The request of `ph` was reported done (or its comm closed): its events are checked, and it
/// is no longer outstanding (a later Start for it is a problem).
fn finish(ctx: &Ctx, ph: usize, want: Expect) -> HResult<()> {
    let mut s = seen();
    let Some(k) = s.live.iter().position(|l| l.0 == ph) else {
        bail!("phandle {ph:#x} was not outstanding");
    };
    let (_, from) = s.live.remove(k);
    let ev = s.events_of(ph, from);
    for (h, _, _) in &ev {
        ensure!(
            s.stopped.contains(h),
            "event {h:#x} of phandle {ph:#x} still open when its request finished"
        );
    }
    ensure!(
        ev.len() == want.events,
        "phandle {ph:#x}: {} events, want {} (one per QP its work is on): {ev:?}",
        ev.len(),
        want.events
    );
    let mut qps: Vec<i32> = ev.iter().map(|e| e.2.qp.qpNum).collect();
    qps.sort_unstable();
    qps.dedup();
    ensure!(
        qps.len() == ev.len(),
        "phandle {ph:#x}: events on QPs {qps:?}, not one per QP: {ev:?}"
    );
    for (_, _, d) in &ev {
        ensure!(d.type_ == NCCL_PROFILE_QP, "descriptor type {}", d.type_);
        ensure!(
            d.qp.device == ctx.dev,
            "descriptor device {} (want {})",
            d.qp.device,
            ctx.dev
        );
        ensure!(
            d.qp.opcode == want.opcode,
            "phandle {ph:#x}: opcode {} (want {})",
            d.qp.opcode,
            want.opcode
        );
        ensure!(
            d.qp.wr_id == ev[0].2.qp.wr_id,
            "phandle {ph:#x}: one buffer's events with different wr_ids: {ev:?}"
        );
    }
    let bytes: usize = ev.iter().map(|e| e.2.qp.length).sum();
    ensure!(
        bytes == want.bytes,
        "phandle {ph:#x}: event lengths add up to {bytes} (want {}): {ev:?}",
        want.bytes
    );
    s.buffers += 1;
    s.events += ev.len();
    Ok(())
}

/// Moves [`SIZES`] over one connection, through the raw calls with the optional-completion hint
/// (v9+) and, when `profiled` (v10+), a profiler handle per buffer whose events are checked when
/// the request is done (without: NULL handles); returns the messages moved.
fn transfer(
    ctx: &Ctx,
    net: &Net,
    send: Option<&SendComm>,
    recv: Option<&RecvComm>,
    round: u64,
    profiled: bool,
) -> HResult<usize> {
    let v = net.version();
    let t = net.table();
    let id = ctx.opts.scenario.id();
    let per_buffer = QpLayout::from_env().events();
    for (i, &size) in SIZES.iter().enumerate() {
        let s = seed(&[id, round, i as u64]);
        let ph = PH_SINGLE + i;
        let phandle = if profiled {
            ph as *mut c_void
        } else {
            core::ptr::null_mut()
        };
        if let Some(rc) = recv {
            let cap = round_up(size + PAGE, PAGE);
            let buf = Buffer::new(cap)?;
            buf.fill_byte(0, cap, CANARY);
            let mr = net.reg_host(rc, &buf).call("regMr")?;
            let mut b = crate::blocking::Backoff::new("irecv to be posted", OP_TIMEOUT);
            let hint = if v >= AbiVersion::V9 {
                ferro_ffi::NCCL_NET_OPTIONAL_RECV_COMPLETION as *mut c_void
            } else {
                core::ptr::null_mut()
            };
            if profiled {
                begin(ph);
            }
            let req = loop {
                let mut phs = [phandle];
                // SAFETY: a live receive comm; the buffer is registered and stays mapped.
                let r = unsafe {
                    raw::irecv_bytes(
                        t,
                        rc.as_ptr(),
                        &mut [buf.base()],
                        &[cap],
                        &mut [TAG],
                        &mut [mr.as_ptr()],
                        profiled.then_some(&mut phs[..]),
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
            let got = wait_raw(net, req)?[0];
            if profiled {
                let want = Expect {
                    events: per_buffer,
                    opcode: OP_RECV,
                    bytes: cap,
                };
                finish(ctx, ph, want)?;
            }
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
            let mut b = crate::blocking::Backoff::new("isend to be posted", OP_TIMEOUT);
            if profiled {
                begin(ph);
            }
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
            let sent = wait_raw(net, req)?[0];
            if profiled {
                let want = Expect {
                    events: per_buffer,
                    opcode: OP_WRITE_WITH_IMM,
                    bytes: size,
                };
                finish(ctx, ph, want)?;
            }
            ensure!(
                sent == size_c(size),
                "send of {size} bytes: test reported {sent}"
            );
            net.dereg_mr(sc, mr).call("deregMr")?;
        }
    }
    Ok(SIZES.len())
}

/// Buffer capacities and message sizes of the grouped transfer.
const GROUP_CAPS: [usize; 2] = [PAGE, 4 * PAGE];
const GROUP_SIZES: [usize; 2] = [100, 2 * PAGE + 1];

/// v10+: one receive group of two buffers, filled by two sends with profiler handles. The first
/// send only matches a buffer (a request, no event); the second posts the group, and both start
/// their events then, as plain writes. Returns the messages moved.
fn grouped_transfer(
    ctx: &Ctx,
    net: &Net,
    send: Option<&SendComm>,
    recv: Option<&RecvComm>,
) -> HResult<usize> {
    let t = net.table();
    let id = ctx.opts.scenario.id();
    let per_buffer = QpLayout::from_env().events();
    let seeds = [seed(&[id, 9, 0]), seed(&[id, 9, 1])];
    if let Some(rc) = recv {
        let bufs = [Buffer::new(GROUP_CAPS[0])?, Buffer::new(GROUP_CAPS[1])?];
        let mut mrs = Vec::new();
        for (b, cap) in bufs.iter().zip(GROUP_CAPS) {
            b.fill_byte(0, cap, CANARY);
            mrs.push(net.reg_host(rc, b).call("regMr")?);
        }
        begin(PH_GROUP);
        begin(PH_GROUP + 1);
        let mut back = crate::blocking::Backoff::new("grouped irecv to be posted", OP_TIMEOUT);
        let req = loop {
            let mut phs = [PH_GROUP as *mut c_void, (PH_GROUP + 1) as *mut c_void];
            // SAFETY: a live receive comm; both buffers are registered and stay mapped.
            let r = unsafe {
                raw::irecv_bytes(
                    t,
                    rc.as_ptr(),
                    &mut [bufs[0].base(), bufs[1].base()],
                    &GROUP_CAPS,
                    &mut [TAG, TAG + 1],
                    &mut [mrs[0].as_ptr(), mrs[1].as_ptr()],
                    Some(&mut phs),
                    core::ptr::null_mut(),
                )
            }
            .call("grouped irecv")?;
            if !r.is_null() {
                break r;
            }
            back.pause()?;
        };
        let got = wait_raw(net, req)?;
        for i in 0..2 {
            let want = Expect {
                events: per_buffer,
                opcode: OP_RECV,
                bytes: GROUP_CAPS[i],
            };
            finish(ctx, PH_GROUP + i, want)?;
            check_received(
                &bufs[i],
                0,
                GROUP_CAPS[i],
                got[i],
                GROUP_SIZES[i],
                seeds[i],
                &format!("grouped receive, buffer {i}"),
            )?;
        }
        for mr in mrs {
            net.dereg_mr(rc, mr).call("deregMr")?;
        }
    }
    if let Some(sc) = send {
        let bufs = [Buffer::new(GROUP_SIZES[0])?, Buffer::new(GROUP_SIZES[1])?];
        let mut mrs = Vec::new();
        for (i, b) in bufs.iter().enumerate() {
            b.fill_pattern(0, GROUP_SIZES[i], seeds[i]);
            mrs.push(net.reg_host(sc, b).call("regMr")?);
        }
        let mut reqs = Vec::new();
        for i in 0..2 {
            let ph = PH_GROUP + i;
            begin(ph);
            let mut back = crate::blocking::Backoff::new("grouped isend to be posted", OP_TIMEOUT);
            let req = loop {
                // SAFETY: a live send comm; the buffer is registered and stays mapped.
                let r = unsafe {
                    raw::isend_bytes(
                        t,
                        sc.as_ptr(),
                        bufs[i].base(),
                        GROUP_SIZES[i],
                        TAG + i as c_int,
                        mrs[i].as_ptr(),
                        ph as *mut c_void,
                    )
                }
                .call("grouped isend")?;
                if !r.is_null() {
                    break r;
                }
                back.pause()?;
            };
            reqs.push(req);
            let s = seen();
            let started = |p: usize| s.started.iter().filter(|e| e.1 == p).count();
            if i == 0 {
                ensure!(
                    started(PH_GROUP) == 0,
                    "a send that only matched a buffer of a group started {} events before the group was posted",
                    started(PH_GROUP)
                );
            } else {
                ensure!(
                    started(PH_GROUP) == per_buffer && started(PH_GROUP + 1) == per_buffer,
                    "after the send that posted the group: {} and {} events (want {per_buffer} each)",
                    started(PH_GROUP),
                    started(PH_GROUP + 1)
                );
            }
        }
        for (i, req) in reqs.into_iter().enumerate() {
            let sent = wait_raw(net, req)?[0];
            ensure!(
                sent == size_c(GROUP_SIZES[i]),
                "grouped send {i}: test reported {sent}"
            );
            let want = Expect {
                events: per_buffer,
                opcode: OP_WRITE,
                bytes: GROUP_SIZES[i],
            };
            finish(ctx, PH_GROUP + i, want)?;
        }
        for mr in mrs {
            net.dereg_mr(sc, mr).call("deregMr")?;
        }
    }
    Ok(1)
}

/// v10+, receiver: a receive with a profiler handle that no send fills, left outstanding; its
/// events must be stopped by closing the comm. Returns the buffer's registration (deregistered
/// before the close; the buffer itself is never freed).
fn post_unfilled(net: &Net, rc: &RecvComm) -> HResult<crate::net::Mr> {
    let buf = Buffer::new(PAGE)?;
    let mr = net.reg_host(rc, &buf).call("regMr")?;
    begin(PH_OPEN);
    let mut back = crate::blocking::Backoff::new("irecv to be posted", OP_TIMEOUT);
    loop {
        let mut phs = [PH_OPEN as *mut c_void];
        // SAFETY: a live receive comm; the buffer is registered and outlives the comm.
        let r = unsafe {
            raw::irecv_bytes(
                net.table(),
                rc.as_ptr(),
                &mut [buf.base()],
                &[PAGE],
                &mut [TAG + 100],
                &mut [mr.as_ptr()],
                Some(&mut phs),
                core::ptr::null_mut(),
            )
        }
        .call("irecv")?;
        if !r.is_null() {
            break;
        }
        back.pause()?;
    }
    Ok(mr)
}

/// Tests a raw request until done; returns its sizes.
fn wait_raw(net: &Net, req: *mut c_void) -> HResult<[c_int; 8]> {
    let mut b = crate::blocking::Backoff::new("request to complete", OP_TIMEOUT);
    loop {
        let mut sizes = [-1 as c_int; 8];
        // SAFETY: a live request not yet reported done; room for its sizes.
        if unsafe { raw::test(net.table(), req, sizes.as_mut_ptr()) }.call("test")? == 1 {
            return Ok(sizes);
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
    let profiled = v >= AbiVersion::V10;
    let qps_before = if profiled { process_qps()? } else { Vec::new() };
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
    let first_qps = if profiled {
        new_qps(&qps_before)?
    } else {
        Vec::new()
    };
    driving(&first_qps);
    let mut messages = transfer(ctx, net, send.as_ref(), recv.as_ref(), 0, profiled)?;
    if profiled {
        messages += grouped_transfer(ctx, net, send.as_ref(), recv.as_ref())?;
        let before = seen().started.len();
        messages += transfer(ctx, net, send.as_ref(), recv.as_ref(), 3, false)?;
        let after = seen().started.len();
        ensure!(
            after == before,
            "{} events started for a transfer without profiler handles",
            after - before
        );
        notes.push(format!(
            "{} QPs of the comm from the kernel: {first_qps:?}",
            first_qps.len()
        ));
    }
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
        messages += second_context(ctx, send.as_ref(), recv.as_ref(), &first_qps)?;
        notes.push("second context ok, finalized while the first moved data".into());
    }
    if let Some(sc) = send {
        net.close_send(sc).call("closeSend")?;
    }
    if let Some(rc) = recv {
        if profiled {
            let mr = post_unfilled(net, &rc)?;
            net.dereg_mr(&rc, mr).call("deregMr")?;
        }
        net.close_recv(rc).call("closeRecv")?;
        if profiled {
            let want = Expect {
                events: QpLayout::from_env().events(),
                opcode: OP_RECV,
                bytes: PAGE,
            };
            finish(ctx, PH_OPEN, want)?;
            notes.push("a receive outstanding at close has its events stopped by the close".into());
        }
    }
    if v >= AbiVersion::V10 {
        notes.push(check_profiler_events()?);
    }
    Ok(format!(
        "{messages} messages verified; {}",
        notes.join("; ")
    ))
}

/// v11+: a second communicator's context in this process.
fn second_context(
    ctx: &Ctx,
    send: Option<&SendComm>,
    recv: Option<&RecvComm>,
    first_qps: &[u32],
) -> HResult<usize> {
    let net = ctx.net;
    let b = Net::load().map_err(HarnessError::Failed)?;
    b.init_full(crate::logger::nccl_logger(), Some(fake_profiler), 0xb0b, 5)
        .call("init of a second context")?;
    let qps_before = process_qps()?;
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
    driving(&new_qps(&qps_before)?);
    let mut moved = 0;
    // The second connection carries data (the receiver's comm came from the first context's
    // listen comm, as NCCL's receiver of that communicator would have its own).
    if let Some(sb) = &send_b {
        moved += transfer(ctx, &b, Some(sb), None, 1, true)?;
    }
    if let Some(rb) = &recv_b {
        moved += transfer(ctx, net, None, Some(rb), 1, true)?;
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
    driving(first_qps);
    moved += transfer(ctx, net, send, recv, 2, true)?;
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

/// Every Start had exactly one Stop, none came for a request that was not outstanding or on a QP
/// that is not the comm's, and every buffer's events were checked (see [`finish`]).
fn check_profiler_events() -> HResult<String> {
    let seen = seen();
    ensure!(seen.calls > 0, "the profiler callback was never called");
    ensure!(
        seen.problems.is_empty(),
        "profiler contract: {:?}",
        seen.problems
    );
    ensure!(!seen.started.is_empty(), "no profiler events started");
    for (h, ph, _) in &seen.started {
        ensure!(
            seen.stopped.contains(h),
            "event {h:#x} (phandle {ph:#x}) started, never stopped"
        );
    }
    ensure!(
        seen.live.is_empty(),
        "requests left unchecked: {:?}",
        seen.live
    );
    ensure!(
        seen.events == seen.started.len(),
        "{} events started, {} belong to the buffers checked",
        seen.started.len(),
        seen.events
    );
    let l = QpLayout::from_env();
    Ok(format!(
        "{} profiler events for {} buffers ({} per buffer: {} QPs, {}), each started while its request was outstanding and stopped once before it finished",
        seen.started.len(),
        seen.buffers,
        l.events(),
        l.nqps,
        if l.split { "split" } else { "not split" }
    ))
}
