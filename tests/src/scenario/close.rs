//! d: closing with requests in flight, and connect/transfer/close cycles without leaks.
//!
//! `close-inflight`: the receiver posts 4 receives of 1 MiB, the sender posts up to 4 sends of
//! 1 MiB; after a barrier both deregister and close without testing anything (NCCL's teardown
//! order: deregMr, then close). Then a new connection on the same listen comm must work.
//!
//! `cycles`: N (default 100) rounds of connect/accept, register, one 4 KiB message, deregister,
//! close. Each process counts its open fds and its verbs objects (`rdma resource show`) after
//! cycle 10 and after the last cycle: nothing may grow.

use super::Ctx;
use super::common::*;
use crate::blocking::Backoff;
use crate::buffer::{Buffer, PAGE, seed};
use crate::error::{HResult, NcclExt};
use crate::guest::{VerbsCounts, open_fds, verbs_counts};
use crate::net::Request;
use crate::{bail, ensure};
use std::time::Duration;

const INFLIGHT: usize = 4;
const INFLIGHT_LEN: usize = 1 << 20;
const AFTER_LEN: usize = 64 << 10;

pub(super) fn run_close_inflight(ctx: &mut Ctx) -> HResult<String> {
    let net = ctx.net;
    let id = ctx.opts.scenario.id();
    let buf = Buffer::new(INFLIGHT * INFLIGHT_LEN)?;
    let posted;
    if ctx.is_receiver() {
        let rc = net.accept_blocking(ctx.listen()?, CONNECT_TIMEOUT)?;
        let mr = net.reg_host(&rc, &buf).call("regMr")?;
        let mut reqs: Vec<Request> = Vec::new();
        for i in 0..INFLIGHT {
            reqs.push(net.irecv_blocking(
                &rc,
                &[crate::net::RecvSlot {
                    buf: &buf,
                    offset: i * INFLIGHT_LEN,
                    len: INFLIGHT_LEN,
                    tag: TAG,
                    mr: &mr,
                }],
                OP_TIMEOUT,
            )?);
        }
        posted = reqs.len();
        ctx.ctl.barrier("posted", BARRIER_TIMEOUT)?;
        net.dereg_mr(&rc, mr).call("deregMr (receives in flight)")?;
        net.close_recv(rc).call("closeRecv (receives in flight)")?;
        // The requests died with their comm: they are never tested.
        drop(reqs);
        ctx.ctl.barrier("closed", BARRIER_TIMEOUT)?;
        let rc = net.accept_blocking(ctx.listen()?, CONNECT_TIMEOUT)?;
        let after = Buffer::new(AFTER_LEN + PAGE)?;
        let mr = net.reg_host(&rc, &after).call("regMr")?;
        after.fill_byte(0, after.len(), CANARY);
        let got = recv_wait(
            net,
            RecvOp {
                comm: &rc,
                buf: &after,
                off: 0,
                cap: after.len(),
                tag: TAG,
                mr: &mr,
            },
        )?;
        check_received(
            &after,
            0,
            after.len(),
            got,
            AFTER_LEN,
            seed(&[id, 1]),
            "message on the next connection",
        )?;
        net.dereg_mr(&rc, mr).call("deregMr")?;
        net.close_recv(rc).call("closeRecv")?;
    } else {
        let mut h = ctx.peer_handle();
        let sc = net.connect_blocking(ctx.dev, &mut h, CONNECT_TIMEOUT)?;
        let mr = net.reg_host(&sc, &buf).call("regMr")?;
        buf.fill_pattern(0, buf.len(), seed(&[id, 0]));
        let mut reqs: Vec<Request> = Vec::new();
        for i in 0..INFLIGHT {
            // A send may stay unposted (NULL) if the plugin wants the receiver to make progress
            // first; the point is closing with whatever is in flight.
            let mut b = Backoff::new("isend", Duration::from_secs(5));
            loop {
                if let Some(r) = net
                    .isend(&sc, &buf, i * INFLIGHT_LEN, INFLIGHT_LEN, TAG, &mr)
                    .call("isend")?
                {
                    reqs.push(r);
                    break;
                }
                if b.pause().is_err() {
                    break;
                }
            }
        }
        posted = reqs.len();
        ctx.ctl.barrier("posted", BARRIER_TIMEOUT)?;
        net.dereg_mr(&sc, mr).call("deregMr (sends in flight)")?;
        net.close_send(sc).call("closeSend (sends in flight)")?;
        drop(reqs);
        ctx.ctl.barrier("closed", BARRIER_TIMEOUT)?;
        let mut h = ctx.peer_handle();
        let sc = net.connect_blocking(ctx.dev, &mut h, CONNECT_TIMEOUT)?;
        let after = Buffer::new(AFTER_LEN)?;
        let mr = net.reg_host(&sc, &after).call("regMr")?;
        after.fill_pattern(0, AFTER_LEN, seed(&[id, 1]));
        send_wait(
            net,
            SendOp {
                comm: &sc,
                buf: &after,
                off: 0,
                len: AFTER_LEN,
                tag: TAG,
                mr: &mr,
            },
        )?;
        net.dereg_mr(&sc, mr).call("deregMr")?;
        net.close_send(sc).call("closeSend")?;
    }
    Ok(format!(
        "closed with {posted}/{INFLIGHT} {} of {INFLIGHT_LEN} bytes in flight, untested; the next connection moved {AFTER_LEN} bytes",
        if ctx.is_receiver() {
            "receives"
        } else {
            "sends"
        }
    ))
}

const CYCLE_LEN: usize = 4096;
const BASELINE_CYCLE: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sample {
    fds: usize,
    verbs: VerbsCounts,
}

impl Sample {
    fn take() -> HResult<Sample> {
        Ok(Sample {
            fds: open_fds()?,
            verbs: verbs_counts(std::process::id())?,
        })
    }

    fn within(&self, base: &Sample) -> bool {
        self.fds <= base.fds && self.verbs.within(&base.verbs)
    }
}

/// While a connection is open, `rdma resource show` must list at least one QP and one MR of this
/// process: otherwise the leak check below would compare zeros (a changed output format).
fn check_counts_see_open_objects() -> HResult<()> {
    let open = Sample::take()?;
    ensure!(
        open.verbs.qp >= 1 && open.verbs.mr >= 1,
        "with a connection open, rdma resource show lists {:?} for pid {}: cannot measure leaks",
        open.verbs,
        std::process::id()
    );
    Ok(())
}

fn wait_without_sizes(ctx: &Ctx, req: Request) -> HResult<()> {
    let mut b = Backoff::new("request (tested with sizes = NULL) to complete", OP_TIMEOUT);
    while !ctx
        .net
        .test_without_sizes(&req)
        .call("test(sizes = NULL)")?
    {
        b.pause()?;
    }
    Ok(())
}

pub(super) fn run_cycles(ctx: &mut Ctx) -> HResult<String> {
    let net = ctx.net;
    let id = ctx.opts.scenario.id();
    let cycles = ctx.opts.iters.unwrap_or(100);
    ensure!(
        cycles > BASELINE_CYCLE,
        "cycles needs --iters above {BASELINE_CYCLE}, got {cycles}"
    );
    let buf = Buffer::new(CYCLE_LEN + PAGE)?;
    let mut base = None;
    let mut last = None;
    for c in 1..=cycles {
        let s = seed(&[id, c as u64]);
        if ctx.is_receiver() {
            let rc = net.accept_blocking(ctx.listen()?, CONNECT_TIMEOUT)?;
            let mr = net.reg_host(&rc, &buf).call("regMr")?;
            buf.fill_byte(0, buf.len(), CANARY);
            let slot = crate::net::RecvSlot {
                buf: &buf,
                offset: 0,
                len: buf.len(),
                tag: TAG,
                mr: &mr,
            };
            let req = net.irecv_blocking(&rc, &[slot], OP_TIMEOUT)?;
            if c % 2 == 1 {
                wait_without_sizes(ctx, req)?;
                buf.verify_pattern(0, CYCLE_LEN, s)
                    .map_err(|e| format!("cycle {c}: {e}"))?;
            } else {
                let sizes = net.wait(req, OP_TIMEOUT)?;
                check_received(
                    &buf,
                    0,
                    buf.len(),
                    sizes.first().copied().unwrap_or(-1),
                    CYCLE_LEN,
                    s,
                    &format!("cycle {c}"),
                )?;
            }
            if c == BASELINE_CYCLE {
                check_counts_see_open_objects()?;
            }
            net.dereg_mr(&rc, mr).call("deregMr")?;
            net.close_recv(rc).call("closeRecv")?;
        } else {
            let mut h = ctx.peer_handle();
            let sc = net.connect_blocking(ctx.dev, &mut h, CONNECT_TIMEOUT)?;
            let mr = net.reg_host(&sc, &buf).call("regMr")?;
            buf.fill_pattern(0, CYCLE_LEN, s);
            let req = net.isend_blocking(&sc, &buf, 0, CYCLE_LEN, TAG, &mr, OP_TIMEOUT)?;
            if c % 2 == 1 {
                wait_without_sizes(ctx, req)?;
            } else {
                let sizes = net.wait(req, OP_TIMEOUT)?;
                ensure!(
                    sizes.first() == Some(&size_c(CYCLE_LEN)),
                    "cycle {c}: send test reported {sizes:?}"
                );
            }
            if c == BASELINE_CYCLE {
                check_counts_see_open_objects()?;
            }
            net.dereg_mr(&sc, mr).call("deregMr")?;
            net.close_send(sc).call("closeSend")?;
        }
        if c == BASELINE_CYCLE {
            let b = Sample::take()?;
            ctx.note(&format!("after cycle {c}: {b:?}"));
            base = Some(b);
        }
        if c == cycles {
            let Some(b) = base else {
                bail!("no baseline sample")
            };
            // Teardown may finish asynchronously: give it a moment before calling it a leak.
            let mut now = Sample::take()?;
            let mut settle = Backoff::new(
                "resources to return to the baseline",
                Duration::from_secs(3),
            );
            while !now.within(&b) && settle.pause().is_ok() {
                std::thread::sleep(Duration::from_millis(200));
                now = Sample::take()?;
            }
            ctx.note(&format!("after cycle {c}: {now:?}"));
            ensure!(
                now.within(&b),
                "resources grew between cycle {BASELINE_CYCLE} and cycle {c}: {b:?} -> {now:?}"
            );
            last = Some(now);
        }
    }
    let (Some(b), Some(l)) = (base, last) else {
        bail!("samples missing")
    };
    Ok(format!(
        "{cycles} connect/transfer/close cycles; after cycle {BASELINE_CYCLE} vs {cycles}: fds {} -> {}, qp {} -> {}, cq {} -> {}, mr {} -> {}, pd {} -> {}",
        b.fds,
        l.fds,
        b.verbs.qp,
        l.verbs.qp,
        b.verbs.cq,
        l.verbs.cq,
        b.verbs.mr,
        l.verbs.mr,
        b.verbs.pd,
        l.verbs.pd
    ))
}
