//! The measurements. The server (receiver of `bw`, initiator of `lat`) decides everything and
//! drives the client with control messages; results are measured and reported on the server.
//!
//! - `bw`/`rate`: the client sends `size`-byte messages, the server keeps up to `window` receives
//!   posted. Time runs from the first to the last receive completion (so `count` is the number
//!   of messages after the first). The server keeps posting while the size's time target
//!   allows, predicting the finish from the rate seen so far (or the previous size's rate), so
//!   each size takes about `--time` seconds whatever the speed; `--iters` caps the count.
//! - `lat`: ping-pong. The server times `isend(ping)` → echo received; one-way latency is half
//!   of that round trip. Both sides keep `--post-ahead` receives posted ahead (default
//!   [`LAT_DEPTH`], as NCCL posts the receives of the next steps early), so a receive's
//!   clear-to-send is not on the critical path; with 0 each receive is posted just before the
//!   send that precedes its message, as NCCL's proxy does when it is not ahead. A warm-up
//!   batch, then measured batches (each sized by the mean round trip so far) until the time
//!   target is reached.

use crate::counted;
use crate::error::{Error, Result};
use crate::model::{LatStats, Mode, OpCounts, Row};
use crate::plan::{LAT_DEPTH, Plan};
use crate::progress::progress;
use crate::session::{Cmd, IdleWatch, Session, TAG_DATA, test, wait_for};
use crate::units::fmt_size;
use ferro_ffi::ferroNetStats_v1_t;
use ferro_nccl_standin::NcclExt as _;
use ferro_nccl_standin::net::Request as Req;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

// ----------------------------------------------------------------------------------- server

/// Runs the plan on the server and returns one row per size.
pub(crate) fn server(s: &mut Session<'_>, plan: &Plan) -> Result<Vec<Row>> {
    hello(s, plan)?;
    let mut rows = Vec::new();
    let mut prior_rate: Option<f64> = None; // bytes/s of the previous size (bw)
    let mut prior_rtt: Option<(u64, f64)> = None; // (size, median round trip s) (lat)
    for (k, &size) in plan.sizes.iter().enumerate() {
        let label = format!(
            "{} {}/{} {}",
            plan.mode.name(),
            k + 1,
            plan.sizes.len(),
            fmt_size(size)
        );
        let row = match plan.mode {
            Mode::Bw | Mode::Rate => {
                let r = server_bw(s, plan, size, prior_rate).map_err(|e| e.context(&label))?;
                if r.elapsed_s > 0.0 && r.count > 0 {
                    prior_rate = Some((r.count * size.max(1)) as f64 / r.elapsed_s);
                }
                progress(&format!(
                    "{label}: {} msgs in {:.2} s: {:.4} GB/s, {:.0} msg/s",
                    r.count, r.elapsed_s, r.algbw_gbs, r.msg_rate
                ));
                r
            }
            Mode::Comms => {
                let r = crate::comms::server(s, plan, size).map_err(|e| e.context(&label))?;
                progress(&format!(
                    "{label}: {} comms, {} msgs in {:.2} s: {:.0} msg/s in all",
                    plan.comms, r.count, r.elapsed_s, r.msg_rate
                ));
                r
            }
            Mode::Lat => {
                let r = server_lat(s, plan, size, prior_rtt).map_err(|e| e.context(&label))?;
                if let Some(l) = &r.lat {
                    prior_rtt = Some((size, 2.0 * l.median_us * 1e-6));
                    progress(&format!(
                        "{label}: {} round trips in {:.2} s: one-way median {:.2} us, p99 {:.2} us (mean round trip {:.1} us: ping isend {:.1} us, ping send completion after {:.1} us)",
                        r.count,
                        r.elapsed_s,
                        l.median_us,
                        l.p99_us,
                        2.0 * l.avg_us,
                        l.isend_us,
                        l.send_done_us
                    ));
                }
                r
            }
        };
        rows.push(row);
    }
    s.send_cmd(Cmd::Done)?;
    Ok(rows)
}

/// Tells the client the data buffers the plan needs and allocates this side's.
pub(crate) fn hello(s: &mut Session<'_>, plan: &Plan) -> Result<()> {
    let (client_send, client_recv) = plan.buffers();
    s.send_cmd(Cmd::Hello {
        client_send,
        client_recv,
    })?;
    s.alloc_data(client_recv, client_send)
}

/// One bandwidth/rate measurement.
pub(crate) fn server_bw(
    s: &mut Session<'_>,
    plan: &Plan,
    size: u64,
    prior_rate: Option<f64>,
) -> Result<Row> {
    let window = plan.window.max(1);
    let slots = plan.slots(size);
    let before = s.net.stats(&s.recv).call("ferroNetStats_v1")?;
    s.send_cmd(Cmd::Bw {
        size,
        window: window as u64,
        slots,
    })?;
    let net = s.net;
    let recv = &s.recv;
    let rb = s
        .data_recv
        .as_ref()
        .ok_or_else(|| Error::new("no data buffer"))?;
    let usize_of = |v: u64| usize::try_from(v).map_err(|_| Error::new("size overflow"));
    let size_us = usize_of(size)?;
    // Posted-but-untested receives, in order (the plugin completes them in order per QP; we
    // test the oldest, as NCCL's proxy does).
    let mut ring: VecDeque<Req> = VecDeque::with_capacity(window);
    let max_total = plan.max_iters.map_or(u64::MAX, |m| m.saturating_add(1));
    let (mut posted, mut done) = (0u64, 0u64);
    let mut t_first: Option<Instant> = None;
    let mut t_last: Option<Instant> = None;
    let target = plan.target.as_secs_f64();
    let mut idle = IdleWatch::default();
    let what = || format!("bw {}: waiting for receive completions", fmt_size(size));
    loop {
        // Post while the window and the time target allow (judged at the last completion, so
        // that no clock is read here).
        let mut plugin_full = false;
        while ring.len() < window && posted < max_total {
            let outstanding = posted - done;
            let rate = match (t_first, t_last) {
                (Some(a), Some(b)) if done >= 2 && b > a => {
                    Some(((done - 1) * size.max(1)) as f64 / (b - a).as_secs_f64())
                }
                _ => prior_rate,
            };
            let elapsed = match (t_first, t_last) {
                (Some(a), Some(b)) => (b - a).as_secs_f64(),
                _ => 0.0,
            };
            let allow = posted < 2
                || match rate {
                    Some(r) if r > 0.0 => {
                        elapsed + ((outstanding + 1) * size.max(1)) as f64 / r <= target
                    }
                    _ => outstanding == 0 || (outstanding + 1) * size <= 4 << 20,
                };
            if !allow {
                break;
            }
            let off = usize_of((posted % slots) * size)?;
            // SAFETY: slot `posted % slots` lies inside the registered receive buffer
            // (slots * size <= the buffer size). When fewer than `window` slots fit, one slot can be
            // the target of several outstanding receives; they all carry the same benchmark
            // data and nothing reads the buffer, as in perftest.
            match unsafe { counted::data_irecv(rb, net, recv, off, size_us, TAG_DATA) }? {
                Some(r) => {
                    ring.push_back(r);
                    posted += 1;
                }
                None => {
                    plugin_full = true;
                    break;
                }
            }
        }
        let Some(&front) = ring.front() else {
            if plugin_full {
                // Not expected with nothing in flight, but "not now" means try again.
                idle.idle(&s.wait, &mut s.peer, &what)?;
                continue;
            }
            break;
        };
        s.wait.pace();
        match counted::data_test(net, front)? {
            Some(n) => {
                let now = Instant::now();
                if n != size_us {
                    return Err(Error::new(format!(
                        "received {n} bytes, expected {size_us}"
                    )));
                }
                ring.pop_front();
                done += 1;
                if t_first.is_none() {
                    t_first = Some(now);
                } else {
                    t_last = Some(now);
                }
                idle.progress();
            }
            None => idle.idle(&s.wait, &mut s.peer, &what)?,
        }
    }
    let after = s.net.stats(&s.recv).call("ferroNetStats_v1")?;
    s.send_cmd(Cmd::Stop { count: posted })?;
    let client = s.recv_report()?;
    let (count, elapsed_s) = match (t_first, t_last) {
        (Some(a), Some(b)) => (done - 1, (b - a).as_secs_f64()),
        _ => (0, 0.0),
    };
    let mut row = Row::bw(plan.mode, size, count, elapsed_s, window, slots);
    if let (Some(b), Some(a), Some(c)) = (before, after, client) {
        row.ops = Some(OpCounts::per_message(
            [deltas(&b, &a), c],
            a.messages - b.messages,
        ));
    }
    Ok(row)
}

/// One latency measurement: a warm-up batch, then the measured batch.
fn server_lat(
    s: &mut Session<'_>,
    plan: &Plan,
    size: u64,
    prior_rtt: Option<(u64, f64)>,
) -> Result<Row> {
    let target = plan.target.as_secs_f64();
    // Warm-up count: at most --warmup, and no more than ~20 % of the target by the estimate.
    let est = prior_rtt.map(|(psize, rtt)| rtt * (size as f64 / psize.max(1) as f64).max(1.0));
    let warm = match est {
        Some(e) if e > 0.0 => ((0.2 * target / e) as u64).clamp(1, plan.warmup.max(1)),
        _ => plan.warmup.max(1),
    };
    let w = lat_batch(s, size, warm, plan.post_ahead)?;
    // Measured batches until the time target is reached: each batch is sized by the mean round
    // trip seen so far (tails included), so a slow tail cannot stretch the run much.
    let mut b = Batch::default();
    let start = Instant::now();
    let cap = plan.max_iters.unwrap_or(u64::MAX).max(1);
    loop {
        let done = b.rtt.len() as u64;
        let elapsed = start.elapsed().as_secs_f64();
        if done >= cap || (done >= MIN_LAT_SAMPLES && elapsed >= 0.95 * target) {
            break;
        }
        let seen = if done > 0 { &b.rtt } else { &w.rtt };
        let mean = (seen.iter().sum::<f64>() / seen.len().max(1) as f64).max(1e-7);
        let n = (((target - elapsed).max(0.0) / mean) as u64)
            .max(MIN_LAT_SAMPLES.saturating_sub(done))
            .max(1)
            .min(cap - done);
        let more = lat_batch(s, size, n, plan.post_ahead)?;
        b.rtt.extend(more.rtt);
        b.isend_s += more.isend_s;
        b.send_done_s += more.send_done_s;
    }
    let elapsed_s: f64 = b.rtt.iter().sum();
    let one_way_us: Vec<f64> = b.rtt.iter().map(|r| r * 0.5e6).collect();
    let mut lat = LatStats::from_samples(&one_way_us);
    let k = b.rtt.len().max(1) as f64;
    lat.isend_us = b.isend_s * 1e6 / k;
    lat.send_done_us = b.send_done_s * 1e6 / k;
    Ok(Row::lat(size, b.rtt.len() as u64, elapsed_s, lat))
}

/// Fewest measured round trips per size.
const MIN_LAT_SAMPLES: u64 = 5;

#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// Round trip of each iteration, seconds.
    pub(crate) rtt: Vec<f64>,
    /// Total time inside the successful isend call (and its "not yet" retries).
    isend_s: f64,
    /// Total time from the start of an iteration to the ping's send completion.
    send_done_s: f64,
}

/// `count` round trips with `ahead` echo receives posted ahead (0: each just before its ping).
pub(crate) fn lat_batch(s: &mut Session<'_>, size: u64, count: u64, ahead: u64) -> Result<Batch> {
    let ahead = ahead.min(LAT_DEPTH);
    s.send_cmd(Cmd::Lat { size, count, ahead })?;
    let net = s.net;
    let (send, recv) = (&s.send, &s.recv);
    let sb = s
        .data_send
        .as_ref()
        .ok_or_else(|| Error::new("no data buffer"))?;
    let rb = s
        .data_recv
        .as_ref()
        .ok_or_else(|| Error::new("no data buffer"))?;
    let len = usize::try_from(size).map_err(|_| Error::new("size overflow"))?;
    let wait = s.wait;
    let peer = &mut s.peer;
    let post_echo = |peer: &mut Option<crate::session::PeerCheck>, k: u64| {
        let off = (k % LAT_DEPTH) as usize * len;
        wait_for(&wait, peer, &|| format!("posting echo receive {k}"), || {
            // SAFETY: slot k % LAT_DEPTH of the registered receive buffer (LAT_DEPTH slots of
            // the largest size); at most LAT_DEPTH receives are in flight, on distinct slots.
            unsafe { rb.irecv(net, recv, off, len, TAG_DATA) }
        })
    };
    let mut out = Batch {
        rtt: Vec::with_capacity(usize::try_from(count).unwrap_or(0)),
        ..Batch::default()
    };
    let mut echoes: VecDeque<Req> = VecDeque::new();
    for k in 0..count.min(ahead) {
        echoes.push_back(post_echo(peer, k)?);
    }
    for i in 0..count {
        if ahead == 0 {
            echoes.push_back(post_echo(peer, i)?);
        }
        let echo = echoes
            .pop_front()
            .ok_or_else(|| Error::new("internal: no echo receive posted"))?;
        let t0 = Instant::now();
        let ping = wait_for(&wait, peer, &|| format!("sending ping {i}"), || {
            // SAFETY: the start of the registered send buffer; one send at a time, waited for
            // below before the next.
            unsafe { sb.isend(net, send, 0, len, TAG_DATA) }
        })?;
        let t_posted = Instant::now();
        let (mut ping_done, mut echo_done): (Option<Instant>, Option<Instant>) = (None, None);
        wait_for(&wait, peer, &|| format!("round trip {i}"), || {
            if echo_done.is_none() {
                if let Some(n) = test(net, echo)? {
                    if n != len {
                        return Err(Error::new(format!("echo of {n} bytes, expected {len}")));
                    }
                    echo_done = Some(Instant::now());
                }
            }
            if ping_done.is_none() && test(net, ping)?.is_some() {
                ping_done = Some(Instant::now());
            }
            Ok(ping_done.zip(echo_done))
        })?;
        if let (Some(pd), Some(ed)) = (ping_done, echo_done) {
            out.rtt.push((ed - t0).as_secs_f64());
            out.isend_s += (t_posted - t0).as_secs_f64();
            out.send_done_s += (pd - t0).as_secs_f64();
        }
        if ahead > 0 && i + ahead < count {
            echoes.push_back(post_echo(peer, i + ahead)?);
        }
    }
    Ok(out)
}

// ----------------------------------------------------------------------------------- client

/// Sender-side counters of one bw phase (printed with `-v`: where the sender waits).
#[derive(Debug, Default)]
struct SendStats {
    /// isend calls answered "not yet" (no receive posted by the server).
    not_yet: u64,
    /// Loop passes with a full window (waiting for completions).
    window_full: u64,
    passes: u64,
    /// test calls (on sends and on the control receive).
    tests: u64,
    /// Wall time of the phase, seconds.
    elapsed_s: f64,
}

/// Follows the server's commands until `Done`.
pub(crate) fn client(s: &mut Session<'_>, verbose: bool) -> Result<()> {
    let mut ctrl = s.post_cmd_recv()?;
    while let Some(next) = client_step(s, ctrl, verbose)? {
        ctrl = next;
    }
    Ok(())
}

/// Waits for the server's next command on the control receive `ctrl` and carries it out;
/// returns the control receive of the command after it, `None` after `Done`.
fn client_step(s: &mut Session<'_>, ctrl: Req, verbose: bool) -> Result<Option<Req>> {
    let cmd = s.wait_cmd(ctrl)?;
    client_exec(s, cmd, verbose)
}

/// Carries out `cmd`, the server's command that arrived (its control receive completed);
/// returns the control receive of the command after it, `None` after `Done`.
pub(crate) fn client_exec(s: &mut Session<'_>, cmd: Cmd, verbose: bool) -> Result<Option<Req>> {
    let mut ctrl;
    match cmd {
        Cmd::Hello {
            client_send,
            client_recv,
        } => {
            ctrl = s.post_cmd_recv()?;
            s.alloc_data(client_send, client_recv)?;
        }
        Cmd::Bw {
            size,
            window,
            slots,
        } => {
            ctrl = s.post_cmd_recv()?;
            let before = s.net.stats(&s.send).call("ferroNetStats_v1")?;
            let st = client_bw(s, size, window, slots, ctrl)?;
            let after = s.net.stats(&s.send).call("ferroNetStats_v1")?;
            s.send_report(before.zip(after).map(|(b, a)| deltas(&b, &a)))?;
            if verbose {
                progress(&format!(
                    "client: bw {}: {} isend 'not yet' answers, {} of {} passes with a full window, {} test calls, {:.1} us per pass",
                    fmt_size(size),
                    st.not_yet,
                    st.window_full,
                    st.passes,
                    st.tests,
                    st.elapsed_s * 1e6 / st.passes.max(1) as f64
                ));
            }
            ctrl = s.post_cmd_recv()?;
        }
        Cmd::Lat { size, count, ahead } => {
            ctrl = client_lat(s, size, count, ahead.min(LAT_DEPTH), verbose)?;
        }
        Cmd::Comms { n, size, window } => {
            ctrl = s.post_cmd_recv()?;
            crate::comms::client(s, n, size, window, ctrl)?;
            ctrl = s.post_cmd_recv()?;
        }
        Cmd::Scale { n, threads, stream } => {
            crate::scale::client(s, n, threads, stream)?;
            ctrl = s.post_cmd_recv()?;
        }
        Cmd::Go => return Err(Error::new("unexpected Go outside a scale phase")),
        Cmd::Stop { .. } => return Err(Error::new("unexpected Stop outside a bw phase")),
        Cmd::Done => return Ok(None),
    }
    Ok(Some(ctrl))
}

/// The counters a bw phase reports, as deltas: send posts, receive posts, clear-to-send
/// writes, polls, empty polls, allocations.
fn deltas(b: &ferroNetStats_v1_t, a: &ferroNetStats_v1_t) -> [u64; 6] {
    [
        a.send_posts - b.send_posts,
        a.recv_posts - b.recv_posts,
        a.cts_writes - b.cts_writes,
        a.polls - b.polls,
        a.empty_polls - b.empty_polls,
        a.allocations - b.allocations,
    ]
}

fn client_bw(
    s: &mut Session<'_>,
    size: u64,
    window: u64,
    slots: u64,
    ctrl: Req,
) -> Result<SendStats> {
    let net = s.net;
    let send = &s.send;
    let sb = s
        .data_send
        .as_ref()
        .ok_or_else(|| Error::new("no data buffer"))?;
    let window = usize::try_from(window.clamp(1, 1024)).unwrap_or(1);
    let slots = slots.max(1);
    if slots.saturating_mul(size) > sb.buf.len() as u64 {
        return Err(Error::new(format!(
            "{slots} slots of {size} bytes exceed the {}-byte buffer",
            sb.buf.len()
        )));
    }
    let len = usize::try_from(size).map_err(|_| Error::new("size overflow"))?;
    let mut ring: VecDeque<Req> = VecDeque::with_capacity(window);
    let mut sent = 0u64;
    let mut stop: Option<u64> = None;
    let mut st = SendStats::default();
    let mut idle = IdleWatch::default();
    let what = || format!("bw {}: sending", fmt_size(size));
    let started = Instant::now();
    loop {
        st.passes += 1;
        let mut progressed = false;
        if ring.len() >= window {
            st.window_full += 1;
        }
        // The window counts from the oldest send not yet tested done, so a send never runs
        // more than `window` sequence numbers ahead of one still in flight.
        while ring.len() < window && stop.is_none_or(|c| sent < c) {
            let off = usize::try_from((sent % slots) * size).map_err(|_| Error::new("overflow"))?;
            s.wait.pace();
            // SAFETY: the slot lies inside the registered send buffer (checked above); its
            // contents are never changed while sends are in flight.
            match unsafe { counted::data_isend(sb, net, send, off, len, TAG_DATA) }? {
                Some(r) => {
                    ring.push_back(r);
                    sent += 1;
                    progressed = true;
                }
                None => {
                    st.not_yet += 1;
                    break;
                }
            }
        }
        while let Some(&front) = ring.front() {
            st.tests += 1;
            s.wait.pace();
            if counted::data_test(net, front)?.is_none() {
                break;
            }
            ring.pop_front();
            progressed = true;
        }
        if stop.is_none() {
            st.tests += 1;
            if let Some(n) = test(net, ctrl)? {
                match s.read_cmd(n)? {
                    Cmd::Stop { count } => {
                        if count != sent {
                            return Err(Error::new(format!(
                                "the server consumed {count} messages, this side sent {sent}"
                            )));
                        }
                        stop = Some(count);
                    }
                    other => {
                        return Err(Error::new(format!(
                            "expected Stop during a bw phase, got {other:?}"
                        )));
                    }
                }
                progressed = true;
            }
        }
        if stop.is_some() && ring.is_empty() {
            st.elapsed_s = started.elapsed().as_secs_f64();
            return Ok(st);
        }
        if progressed {
            idle.progress();
        } else {
            idle.idle(&s.wait, &mut s.peer, &what)?;
        }
    }
}

/// Echoes `count` pings; returns the posted receive of the next command. Keeps `ahead`
/// receives posted ahead (the pings, then the next command), each posted after the echo of
/// the previous ping has gone out; with `ahead == 0`, one receive, the next one posted just
/// before the echo of the ping before it.
fn client_lat(
    s: &mut Session<'_>,
    size: u64,
    count: u64,
    ahead: u64,
    verbose: bool,
) -> Result<Req> {
    let net = s.net;
    let len = usize::try_from(size).map_err(|_| Error::new("size overflow"))?;
    let wait = s.wait;
    // Receive k of the batch: ping k for k < count, then the next command.
    let post = |s: &mut Session<'_>, k: u64| -> Result<Req> {
        if k >= count {
            return s.post_cmd_recv();
        }
        let (recv, rb) = (&s.recv, s.data_recv.as_ref());
        let rb = rb.ok_or_else(|| Error::new("no data buffer"))?;
        let off = (k % LAT_DEPTH) as usize * len;
        wait_for(
            &wait,
            &mut s.peer,
            &|| format!("posting ping receive {k}"),
            || {
                // SAFETY: slot k % LAT_DEPTH of the registered receive buffer (LAT_DEPTH slots of
                // the largest size); at most LAT_DEPTH receives are in flight, on distinct slots.
                unsafe { rb.irecv(net, recv, off, len, TAG_DATA) }
            },
        )
    };
    let mut posted: VecDeque<Req> = VecDeque::new();
    let mut next = 0u64;
    while next <= count && next < ahead.max(1) {
        posted.push_back(post(s, next)?);
        next += 1;
    }
    let mut ph = Phases::new([
        "wait for ping",
        "isend echo",
        "echo completion",
        "post next receive",
    ]);
    // Phase times only with -v: reading the clock is slow under emulation (HPET).
    let clock = |on: bool| on.then(Instant::now);
    for i in 0..count {
        let ping = posted
            .pop_front()
            .ok_or_else(|| Error::new("internal: no ping receive posted"))?;
        let t0 = clock(verbose);
        let n = wait_for(
            &wait,
            &mut s.peer,
            &|| format!("waiting for ping {i}"),
            || test(net, ping),
        )?;
        if n != len {
            return Err(Error::new(format!("ping of {n} bytes, expected {len}")));
        }
        if ahead == 0 && next <= count {
            posted.push_back(post(s, next)?);
            next += 1;
        }
        let t1 = clock(verbose);
        let (send, sb) = (&s.send, s.data_send.as_ref());
        let sb = sb.ok_or_else(|| Error::new("no data buffer"))?;
        let echo = wait_for(&wait, &mut s.peer, &|| format!("sending echo {i}"), || {
            // SAFETY: the start of the registered send buffer; one send at a time, waited for
            // below.
            unsafe { sb.isend(net, send, 0, len, TAG_DATA) }
        })?;
        let t2 = clock(verbose);
        wait_for(
            &wait,
            &mut s.peer,
            &|| format!("completing echo {i}"),
            || test(net, echo),
        )?;
        let t3 = clock(verbose);
        if ahead > 0 && next <= count {
            posted.push_back(post(s, next)?);
            next += 1;
        }
        if let (Some(t0), Some(t1), Some(t2), Some(t3)) = (t0, t1, t2, t3) {
            ph.add([t1 - t0, t2 - t1, t3 - t2, t3.elapsed()]);
        }
    }
    if verbose {
        progress(&format!(
            "client: lat {} x{count}: {}",
            fmt_size(size),
            ph.summary()
        ));
    }
    let ctrl = posted
        .pop_front()
        .ok_or_else(|| Error::new("internal: no command receive posted"))?;
    if !posted.is_empty() {
        return Err(Error::new("internal: receives left over after a lat batch"));
    }
    Ok(ctrl)
}

/// Per-phase time accumulators (mean and max), for `-v` diagnostics.
#[derive(Debug)]
struct Phases<const N: usize> {
    names: [&'static str; N],
    sum: [Duration; N],
    max: [Duration; N],
    n: u32,
}

impl<const N: usize> Phases<N> {
    fn new(names: [&'static str; N]) -> Self {
        Phases {
            names,
            sum: [Duration::ZERO; N],
            max: [Duration::ZERO; N],
            n: 0,
        }
    }

    fn add(&mut self, d: [Duration; N]) {
        for (k, v) in d.into_iter().enumerate() {
            self.sum[k] += v;
            self.max[k] = self.max[k].max(v);
        }
        self.n += 1;
    }

    fn summary(&self) -> String {
        let n = self.n.max(1);
        self.names
            .iter()
            .enumerate()
            .map(|(k, name)| {
                format!(
                    "{name} mean {:.1} us (max {:.1})",
                    (self.sum[k] / n).as_secs_f64() * 1e6,
                    self.max[k].as_secs_f64() * 1e6
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}
