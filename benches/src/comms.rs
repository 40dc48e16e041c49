//! The many-comms mode: `n` comms in the data direction, all driven round-robin by one thread
//! on each side, as one NCCL proxy thread drives the connections of many channels. The server
//! keeps up to `window` receives posted on every comm and tests each comm's oldest once per
//! pass; the client keeps up to `window` sends in flight on every comm. The figure is the
//! aggregate message rate, from the first to the last receive completion on any comm.

use crate::error::{Error, Result};
use crate::model::{Mode, Row};
use crate::plan::Plan;
use crate::session::{Cmd, IdleWatch, Session, TAG_DATA, test};
use crate::units::fmt_size;
use ferro_nccl_standin::NcclExt as _;
use ferro_nccl_standin::net::Request as Req;
use std::collections::VecDeque;
use std::time::Instant;

/// Server side of one size: returns the row (count and rate over all comms).
pub(crate) fn server(s: &mut Session<'_>, plan: &Plan, size: u64) -> Result<Row> {
    let n = plan.comms.max(1);
    let window = plan.window.max(1);
    let slots = plan.slots(size);
    s.send_cmd(Cmd::Comms {
        n: n as u64,
        size,
        window: window as u64,
    })?;
    s.open_extra(n)?;
    let net = s.net;
    let rb = s
        .data_recv
        .as_ref()
        .ok_or_else(|| Error::new("no data buffer"))?;
    let len = usize::try_from(size).map_err(|_| Error::new("size overflow"))?;
    let comms = &s.extra_recv;
    let mut rings: Vec<VecDeque<Req>> = vec![VecDeque::with_capacity(window); n];
    let mut posted = vec![0u64; n];
    // Receives per comm: unlimited until the time target is reached, then every comm is
    // brought to the same count, which the Stop command tells the client.
    let mut limit = u64::MAX;
    let cap = plan.max_iters.map_or(u64::MAX, |m| m / n as u64 + 1);
    let (mut done, mut t_first, mut t_last) = (0u64, None::<Instant>, None::<Instant>);
    let target = plan.target.as_secs_f64();
    let mut idle = IdleWatch::default();
    let what = || format!("comms {}: waiting for receive completions", fmt_size(size));
    loop {
        let mut progressed = false;
        for (i, (comm, mr)) in comms.iter().enumerate() {
            while rings[i].len() < window && posted[i] < limit.min(cap) {
                let off = usize::try_from((posted[i] % slots) * size)
                    .map_err(|_| Error::new("overflow"))?;
                // SAFETY: the slot lies inside the registered receive buffer; several comms
                // and receives may share a slot: nothing reads the data (as in perftest).
                match unsafe { net.irecv_ptr(comm, rb.buf.at(off)?.cast(), len, TAG_DATA, mr) }
                    .call("irecv")?
                {
                    Some(r) => {
                        rings[i].push_back(r);
                        posted[i] += 1;
                    }
                    None => break,
                }
            }
            let Some(&front) = rings[i].front() else {
                continue;
            };
            if let Some(got) = test(net, front)? {
                if got != len {
                    return Err(Error::new(format!("received {got} bytes, expected {len}")));
                }
                rings[i].pop_front();
                done += 1;
                progressed = true;
                let now = Instant::now();
                match t_first {
                    None => t_first = Some(now),
                    Some(a) => {
                        t_last = Some(now);
                        if limit == u64::MAX && (now - a).as_secs_f64() >= target {
                            limit = posted.iter().copied().max().unwrap_or(0);
                        }
                    }
                }
            }
        }
        if cap != u64::MAX && limit == u64::MAX && posted.iter().all(|&p| p >= cap) {
            limit = cap;
        }
        let finished = limit != u64::MAX
            && rings.iter().all(VecDeque::is_empty)
            && posted.iter().all(|&p| p >= limit.min(cap));
        if finished {
            break;
        }
        if progressed {
            idle.progress();
        } else {
            idle.idle(&s.wait, &mut s.peer, &what)?;
        }
    }
    s.send_cmd(Cmd::Stop {
        count: limit.min(cap),
    })?;
    let (count, elapsed_s) = match (t_first, t_last) {
        (Some(a), Some(b)) => (done - 1, (b - a).as_secs_f64()),
        _ => (0, 0.0),
    };
    Ok(Row::bw(Mode::Comms, size, count, elapsed_s, window, slots))
}

/// Client side of one size: sends round-robin until the Stop command's per-comm count.
pub(crate) fn client(s: &mut Session<'_>, n: u64, size: u64, window: u64, ctrl: Req) -> Result<()> {
    let n = usize::try_from(n.clamp(1, 1024)).unwrap_or(1);
    s.open_extra(n)?;
    let net = s.net;
    let sb = s
        .data_send
        .as_ref()
        .ok_or_else(|| Error::new("no data buffer"))?;
    let window = usize::try_from(window.clamp(1, 1024)).unwrap_or(1);
    let len = usize::try_from(size).map_err(|_| Error::new("size overflow"))?;
    let slots = (sb.buf.len() as u64 / size.max(1)).clamp(1, window as u64);
    let comms = &s.extra_send;
    let mut rings: Vec<VecDeque<Req>> = vec![VecDeque::with_capacity(window); n];
    let mut sent = vec![0u64; n];
    let mut stop: Option<u64> = None;
    let mut idle = IdleWatch::default();
    let what = || format!("comms {}: sending", fmt_size(size));
    loop {
        let mut progressed = false;
        for (i, (comm, mr)) in comms.iter().enumerate() {
            while rings[i].len() < window && stop.is_none_or(|c| sent[i] < c) {
                let off = usize::try_from((sent[i] % slots) * size)
                    .map_err(|_| Error::new("overflow"))?;
                // SAFETY: the slot lies inside the registered send buffer, unchanged while
                // sends are in flight.
                match unsafe { net.isend_ptr(comm, sb.buf.at(off)?.cast(), len, TAG_DATA, mr) }
                    .call("isend")?
                {
                    Some(r) => {
                        rings[i].push_back(r);
                        sent[i] += 1;
                        progressed = true;
                    }
                    None => break,
                }
            }
            if let Some(&front) = rings[i].front() {
                if test(net, front)?.is_some() {
                    rings[i].pop_front();
                    progressed = true;
                }
            }
        }
        if stop.is_none() {
            if let Some(got) = test(net, ctrl)? {
                match s.read_cmd(got)? {
                    Cmd::Stop { count } => {
                        if let Some(i) = sent.iter().position(|&c| c > count) {
                            return Err(Error::new(format!(
                                "comm {i} sent {} messages, the server consumed {count}",
                                sent[i]
                            )));
                        }
                        stop = Some(count);
                    }
                    other => {
                        return Err(Error::new(format!(
                            "expected Stop during a comms phase, got {other:?}"
                        )));
                    }
                }
                progressed = true;
            }
        }
        if let Some(c) = stop {
            if rings.iter().all(VecDeque::is_empty) && sent.iter().all(|&x| x == c) {
                return Ok(());
            }
        }
        if progressed {
            idle.progress();
        } else {
            idle.idle(&s.wait, &mut s.peer, &what)?;
        }
    }
}
