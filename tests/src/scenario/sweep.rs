//! b: message sizes 0, 1, 4095, 4096, 65537, 1 MiB and 16 MiB. Each size gets its own
//! page-aligned buffers, registered (HOST) for that size and deregistered after it; the receiver
//! posts `size + 4096` rounded up to a page, so every receive is larger than its message.
//! Checks: sizes reported by `test` on both sides, the data byte for byte, and that nothing was
//! written past the message end.
//!
//! With `NCCL_IB_ADAPTIVE_ROUTING=1` the sweep adds the sizes around `NCCL_IB_AR_THRESHOLD`
//! (8192 unless set): one byte under, at, one byte over, and one split chunk's alignment over;
//! the sender then checks that its close line counts the immediates sent apart from their data
//! (one per QP that carried some of a message above the threshold: one when unsplit, one per
//! non-empty chunk when `NCCL_IB_SPLIT_DATA_ON_QPS=1`). Without it (rxe is RoCE, where the
//! default is off) the close line must count none.

use super::Ctx;
use super::common::*;
use crate::buffer::{Buffer, PAGE, round_up, seed};
use crate::ensure;
use crate::error::{HResult, HarnessError, NcclExt};
use crate::logger;

/// The sizes swept.
const SIZES: [usize; 7] = [0, 1, 4095, 4096, 65537, 1 << 20, 16 << 20];

/// Adaptive routing as this process's environment sets it for the plugin.
#[derive(Debug, Clone, Copy)]
struct AdaptiveRouting {
    threshold: usize,
    nqps: usize,
    split: bool,
}

impl AdaptiveRouting {
    /// `Some` when `NCCL_IB_ADAPTIVE_ROUTING=1`.
    fn from_env() -> Option<AdaptiveRouting> {
        let var = |k: &str| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
        };
        (var("NCCL_IB_ADAPTIVE_ROUTING") == Some(1)).then(|| AdaptiveRouting {
            threshold: var("NCCL_IB_AR_THRESHOLD").unwrap_or(8192),
            nqps: var("NCCL_IB_QPS_PER_CONNECTION").unwrap_or(1).max(1),
            split: var("NCCL_IB_SPLIT_DATA_ON_QPS") == Some(1),
        })
    }

    /// Immediates a message of `size` bytes sends apart from its data: none up to the
    /// threshold; above it one per QP that carries some of it (split: chunks of
    /// `ceil(size / nqps)` rounded up to 128 bytes, the last ones possibly empty).
    fn apart(self, size: usize) -> usize {
        if size <= self.threshold {
            0
        } else if !self.split {
            1
        } else {
            let chunk = size.div_ceil(self.nqps).div_ceil(128) * 128;
            (0..self.nqps).filter(|q| q * chunk < size).count()
        }
    }
}

/// The sizes this run sweeps, in increasing order.
fn sizes(ar: Option<AdaptiveRouting>) -> Vec<usize> {
    let mut s = SIZES.to_vec();
    if let Some(ar) = ar {
        let t = ar.threshold;
        s.extend([t.saturating_sub(1), t, t + 1, t + 128]);
        s.sort_unstable();
        s.dedup();
    }
    s
}

/// The count of immediates sent apart in this process's send-comm close line (0 when the line
/// names none).
fn immediates_apart_closed() -> HResult<usize> {
    let close: Vec<String> = logger::logs()
        .into_iter()
        .map(|l| l.text)
        .filter(|t| t.contains("send comm closed"))
        .collect();
    ensure!(close.len() == 1, "expected one send close line: {close:?}");
    let line = &close[0];
    let Some(i) = line.find(" immediates apart") else {
        return Ok(0);
    };
    line[..i]
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| HarnessError::Failed(format!("unreadable close line: {line}")))
}

fn iterations(size: usize) -> usize {
    if size >= 16 << 20 { 2 } else { 3 }
}

pub(super) fn run(ctx: &mut Ctx) -> HResult<String> {
    let net = ctx.net;
    let id = ctx.opts.scenario.id();
    let ar = AdaptiveRouting::from_env();
    let sizes = sizes(ar);
    let mut messages = 0;
    let mut bytes = 0usize;
    let mut apart = 0usize;
    let (send, recv) = if ctx.is_receiver() {
        (
            None,
            Some(net.accept_blocking(ctx.listen()?, CONNECT_TIMEOUT)?),
        )
    } else {
        let mut h = ctx.peer_handle();
        (
            Some(net.connect_blocking(ctx.dev, &mut h, CONNECT_TIMEOUT)?),
            None,
        )
    };
    for &size in &sizes {
        if let Some(rc) = &recv {
            let cap = round_up(size + PAGE, PAGE);
            let buf = Buffer::new(cap)?;
            let mr = net.reg_host(rc, &buf).call("regMr")?;
            for it in 0..iterations(size) {
                recv_checked(
                    net,
                    rc,
                    &buf,
                    cap,
                    &mr,
                    size,
                    seed(&[id, size as u64, it as u64, 0]),
                    &format!("size {size} iteration {it}"),
                )?;
                messages += 1;
                bytes += size;
            }
            net.dereg_mr(rc, mr).call("deregMr")?;
        }
        if let Some(sc) = &send {
            let buf = Buffer::new(size)?;
            let mr = net.reg_host(sc, &buf).call("regMr")?;
            for it in 0..iterations(size) {
                buf.fill_pattern(0, size, seed(&[id, size as u64, it as u64, 0]));
                send_wait(
                    net,
                    SendOp {
                        comm: sc,
                        buf: &buf,
                        off: 0,
                        len: size,
                        tag: TAG,
                        mr: &mr,
                    },
                )?;
                messages += 1;
                bytes += size;
                apart += ar.map_or(0, |a| a.apart(size));
            }
            net.dereg_mr(sc, mr).call("deregMr")?;
        }
        ctx.note(&format!("size {size}: ok"));
    }
    let mut said = String::new();
    if let Some(sc) = send {
        net.close_send(sc).call("closeSend")?;
        let closed = immediates_apart_closed()?;
        ensure!(
            closed == apart,
            "the close line counts {closed} immediates sent apart, {apart} expected ({ar:?})"
        );
        said = format!(", {closed} immediates apart ({ar:?})");
    }
    if let Some(rc) = recv {
        net.close_recv(rc).call("closeRecv")?;
    }
    Ok(format!(
        "{messages} messages, {bytes} bytes, sizes {sizes:?}, all verified{said}"
    ))
}
