//! g: ring all-reduce over the plugin API. Rank r connects to rank (r+1) % n and accepts from
//! rank (r-1) % n (both at once, as NCCL's proxy does). Each iteration sums a 4 MiB f32 vector:
//! reduce-scatter (n-1 steps: send chunk (r-s) % n, receive chunk (r-s-1) % n into a scratch
//! buffer and add it) then all-gather (n-1 steps: send chunk (r+1-s) % n, receive chunk
//! (r-s) % n in place). Values are small integers, so float sums are exact and every element is
//! checked on every rank.

use super::Ctx;
use super::common::*;
use crate::buffer::Buffer;
use crate::error::{HResult, NcclExt};
use crate::{bail, ensure};

const TOTAL: usize = 4 << 20;
const ELEMS: usize = TOTAL / 4;

fn value(rank: usize, it: usize, i: usize) -> f32 {
    ((rank + 1) * (i % 7 + 1) + it) as f32
}

fn expected(n: usize, it: usize, i: usize) -> f32 {
    (n * (n + 1) / 2 * (i % 7 + 1) + n * it) as f32
}

pub(super) fn run(ctx: &mut Ctx) -> HResult<String> {
    let net = ctx.net;
    let n = ctx.opts.nranks;
    let r = ctx.opts.rank;
    let iters = ctx.opts.iters.unwrap_or(10);
    ensure!(
        TOTAL % (4 * n) == 0,
        "{TOTAL} bytes of f32 do not split into {n} chunks"
    );
    let chunk = TOTAL / n;
    let chunk_elems = chunk / 4;
    let data = Buffer::new(TOTAL)?;
    let scratch = Buffer::new(chunk)?;
    let mut h = ctx.peer_handle();
    let (send, recv) =
        net.connect_accept_blocking(ctx.dev, &mut h, ctx.listen()?, CONNECT_TIMEOUT)?;
    let data_send_mr = net.reg_host(&send, &data).call("regMr (data, send comm)")?;
    let data_recv_mr = net.reg_host(&recv, &data).call("regMr (data, recv comm)")?;
    let scratch_mr = net
        .reg_host(&recv, &scratch)
        .call("regMr (scratch, recv comm)")?;
    let tag = r as i32; // as NCCL: the sender's rank
    let prev_tag = ((r + n - 1) % n) as i32;
    for it in 0..iters {
        data.fill_f32(0, ELEMS, |i| value(r, it, i));
        // Reduce-scatter.
        for s in 0..n - 1 {
            let sc = (r + n - s) % n;
            let rc = (r + 2 * n - s - 1) % n;
            let (sent, got) = exchange(
                net,
                SendOp {
                    comm: &send,
                    buf: &data,
                    off: sc * chunk,
                    len: chunk,
                    tag,
                    mr: &data_send_mr,
                },
                RecvOp {
                    comm: &recv,
                    buf: &scratch,
                    off: 0,
                    cap: chunk,
                    tag: prev_tag,
                    mr: &scratch_mr,
                },
                OP_TIMEOUT,
            )?;
            ensure!(
                sent == size_c(chunk) && got == size_c(chunk),
                "iteration {it} reduce-scatter step {s}: sizes sent {sent}, received {got}, expected {chunk}"
            );
            data.add_f32_from(rc * chunk_elems, &scratch, 0, chunk_elems);
        }
        // All-gather.
        for s in 0..n - 1 {
            let sc = (r + 1 + n - s) % n;
            let rc = (r + n - s) % n;
            let (sent, got) = exchange(
                net,
                SendOp {
                    comm: &send,
                    buf: &data,
                    off: sc * chunk,
                    len: chunk,
                    tag,
                    mr: &data_send_mr,
                },
                RecvOp {
                    comm: &recv,
                    buf: &data,
                    off: rc * chunk,
                    cap: chunk,
                    tag: prev_tag,
                    mr: &data_recv_mr,
                },
                OP_TIMEOUT,
            )?;
            ensure!(
                sent == size_c(chunk) && got == size_c(chunk),
                "iteration {it} all-gather step {s}: sizes sent {sent}, received {got}, expected {chunk}"
            );
        }
        if let Some((i, got, want)) = data.find_f32_mismatch(0, ELEMS, |i| expected(n, it, i)) {
            bail!(
                "iteration {it}: element {i} (chunk {}) is {got}, expected {want}",
                i / chunk_elems
            );
        }
        ctx.note(&format!("iteration {it}: all-reduce verified"));
    }
    net.dereg_mr(&send, data_send_mr).call("deregMr")?;
    net.dereg_mr(&recv, data_recv_mr).call("deregMr")?;
    net.dereg_mr(&recv, scratch_mr).call("deregMr")?;
    net.close_send(send).call("closeSend")?;
    net.close_recv(recv).call("closeRecv")?;
    Ok(format!(
        "{iters} ring all-reduces of {TOTAL} bytes (f32 sum) over {n} ranks, chunks of {chunk} bytes, verified"
    ))
}
