//! c: many requests in flight, and grouped receives.
//!
//! `inflight-32`: the receiver posts 32 receives and the sender posts 32 sends (NCCL's
//! `NCCL_NET_MAX_REQUESTS`) before either calls `test`; sizes differ per message (one is 0
//! bytes). Matching is by posting order, so message i must land in receive i.
//!
//! `grouped-recv`: the receiver posts one `irecv` of n = maxRecvs buffers with tags 0..n-1; the
//! sender sends n messages with those tags in a shuffled order. Each buffer must receive the
//! message carrying its tag, and `test` must report each buffer's size.

use super::Ctx;
use super::common::*;
use crate::buffer::{Buffer, PAGE, Rng, round_up, seed};
use crate::error::{HResult, NcclExt};
use crate::net::{RecvComm, RecvSlot, SendComm};
use crate::{bail, ensure};
use ferro_ffi::NCCL_NET_MAX_REQUESTS;

const ROUNDS: usize = 2;
const SLOT: usize = 64 << 10;

fn inflight_len(round: usize, i: usize) -> usize {
    (i * 1999 + round * 7) % (SLOT - PAGE)
}

/// Rank 0 accepts, rank 1 connects: one comm each side of the pair.
pub(super) fn connect_pair(ctx: &Ctx) -> HResult<(Option<SendComm>, Option<RecvComm>)> {
    if ctx.is_receiver() {
        Ok((
            None,
            Some(ctx.net.accept_blocking(ctx.listen()?, CONNECT_TIMEOUT)?),
        ))
    } else {
        let mut h = ctx.peer_handle();
        Ok((
            Some(ctx.net.connect_blocking(ctx.dev, &mut h, CONNECT_TIMEOUT)?),
            None,
        ))
    }
}

pub(super) fn run_inflight(ctx: &mut Ctx) -> HResult<String> {
    let net = ctx.net;
    let k = NCCL_NET_MAX_REQUESTS;
    let id = ctx.opts.scenario.id();
    let buf = Buffer::new(k * SLOT)?;
    let (send, recv) = connect_pair(ctx)?;
    for round in 0..ROUNDS {
        if let Some(rc) = &recv {
            let mr = net.reg_host(rc, &buf).call("regMr")?;
            buf.fill_byte(0, buf.len(), CANARY);
            let mut reqs = Vec::new();
            for i in 0..k {
                let slot = RecvSlot {
                    buf: &buf,
                    offset: i * SLOT,
                    len: SLOT,
                    tag: TAG,
                    mr: &mr,
                };
                reqs.push(net.irecv_blocking(rc, &[slot], OP_TIMEOUT)?);
            }
            let sizes = net.wait_all(reqs, OP_TIMEOUT)?;
            for (i, s) in sizes.iter().enumerate() {
                let len = inflight_len(round, i);
                let got = s.first().copied().unwrap_or(-1);
                check_received(
                    &buf,
                    i * SLOT,
                    SLOT,
                    got,
                    len,
                    seed(&[id, round as u64, i as u64, len as u64]),
                    &format!("round {round} receive {i}"),
                )?;
            }
            net.dereg_mr(rc, mr).call("deregMr")?;
        }
        if let Some(sc) = &send {
            let mr = net.reg_host(sc, &buf).call("regMr")?;
            for i in 0..k {
                let len = inflight_len(round, i);
                buf.fill_pattern(
                    i * SLOT,
                    len,
                    seed(&[id, round as u64, i as u64, len as u64]),
                );
            }
            let mut reqs = Vec::new();
            for i in 0..k {
                // In order: sends match receives in posting order.
                reqs.push(net.isend_blocking(
                    sc,
                    &buf,
                    i * SLOT,
                    inflight_len(round, i),
                    TAG,
                    &mr,
                    OP_TIMEOUT,
                )?);
            }
            let sizes = net.wait_all(reqs, OP_TIMEOUT)?;
            for (i, s) in sizes.iter().enumerate() {
                let len = inflight_len(round, i);
                ensure!(
                    s.first() == Some(&size_c(len)),
                    "round {round} send {i} of {len} bytes: test reported {s:?}"
                );
            }
            net.dereg_mr(sc, mr).call("deregMr")?;
        }
        ctx.note(&format!("round {round}: {k} in flight, ok"));
    }
    if let Some(sc) = send {
        net.close_send(sc).call("closeSend")?;
    }
    if let Some(rc) = recv {
        net.close_recv(rc).call("closeRecv")?;
    }
    Ok(format!(
        "{ROUNDS} rounds of {k} receives and {k} sends posted before any test; all verified"
    ))
}

const GROUP_ROUNDS: usize = 4;

fn grouped_len(round: usize, tag: usize) -> usize {
    (tag + 1) * 1000 + round * 17 + tag
}

pub(super) fn run_grouped(ctx: &mut Ctx) -> HResult<String> {
    let net = ctx.net;
    let id = ctx.opts.scenario.id();
    let max_recvs = ctx.props.max_recvs;
    if !(1..=64).contains(&max_recvs) {
        bail!("maxRecvs is {max_recvs}; expected 1..=64");
    }
    let n = max_recvs as usize;
    let slot = round_up(grouped_len(GROUP_ROUNDS, n) + PAGE, PAGE);
    let buf = Buffer::new(n * slot)?;
    let (send, recv) = connect_pair(ctx)?;
    let mut orders = Vec::new();
    for round in 0..GROUP_ROUNDS {
        let pattern =
            |tag: usize| seed(&[id, round as u64, tag as u64, grouped_len(round, tag) as u64]);
        if let Some(rc) = &recv {
            let mr = net.reg_host(rc, &buf).call("regMr")?;
            buf.fill_byte(0, buf.len(), CANARY);
            let slots: Vec<RecvSlot<'_>> = (0..n)
                .map(|t| RecvSlot {
                    buf: &buf,
                    offset: t * slot,
                    len: slot,
                    tag: t as i32,
                    mr: &mr,
                })
                .collect();
            let req = net.irecv_blocking(rc, &slots, OP_TIMEOUT)?;
            let sizes = net.wait(req, OP_TIMEOUT)?;
            ensure!(
                sizes.len() == n,
                "round {round}: test reported {} sizes for {n} buffers: {sizes:?}",
                sizes.len()
            );
            for (t, got) in sizes.iter().enumerate() {
                check_received(
                    &buf,
                    t * slot,
                    slot,
                    *got,
                    grouped_len(round, t),
                    pattern(t),
                    &format!("round {round} buffer with tag {t}"),
                )?;
            }
            net.dereg_mr(rc, mr).call("deregMr")?;
        }
        if let Some(sc) = &send {
            let mr = net.reg_host(sc, &buf).call("regMr")?;
            let mut order: Vec<usize> = (0..n).collect();
            Rng::new(seed(&[id, round as u64])).shuffle(&mut order);
            for t in 0..n {
                buf.fill_pattern(t * slot, grouped_len(round, t), pattern(t));
            }
            let ops: Vec<SendOp<'_>> = order
                .iter()
                .map(|&t| SendOp {
                    comm: sc,
                    buf: &buf,
                    off: t * slot,
                    len: grouped_len(round, t),
                    tag: t as i32,
                    mr: &mr,
                })
                .collect();
            let reqs = post_sends_any_order(net, &ops, OP_TIMEOUT)?;
            let sizes = net.wait_all(reqs, OP_TIMEOUT)?;
            for (op, s) in ops.iter().zip(&sizes) {
                ensure!(
                    s.first() == Some(&size_c(op.len)),
                    "round {round} send with tag {}: test reported {s:?}, sent {}",
                    op.tag,
                    op.len
                );
            }
            orders.push(order);
            net.dereg_mr(sc, mr).call("deregMr")?;
        }
        ctx.note(&format!("grouped round {round}: ok"));
    }
    if let Some(sc) = send {
        net.close_send(sc).call("closeSend")?;
    }
    if let Some(rc) = recv {
        net.close_recv(rc).call("closeRecv")?;
    }
    let orders = if orders.is_empty() {
        String::new()
    } else {
        format!("; send orders {orders:?}")
    };
    Ok(format!(
        "{GROUP_ROUNDS} grouped receives of n = maxRecvs = {n} buffers, tags matched{orders}"
    ))
}
