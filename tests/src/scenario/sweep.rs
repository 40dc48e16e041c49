//! b: message sizes 0, 1, 4095, 4096, 65537, 1 MiB and 16 MiB. Each size gets its own
//! page-aligned buffers, registered (HOST) for that size and deregistered after it; the receiver
//! posts `size + 4096` rounded up to a page, so every receive is larger than its message.
//! Checks: sizes reported by `test` on both sides, the data byte for byte, and that nothing was
//! written past the message end.

use super::Ctx;
use super::common::*;
use crate::buffer::{Buffer, PAGE, round_up, seed};
use crate::error::{HResult, NcclExt};

/// The sizes swept.
const SIZES: [usize; 7] = [0, 1, 4095, 4096, 65537, 1 << 20, 16 << 20];

fn iterations(size: usize) -> usize {
    if size >= 16 << 20 { 2 } else { 3 }
}

pub(super) fn run(ctx: &mut Ctx) -> HResult<String> {
    let net = ctx.net;
    let id = ctx.opts.scenario.id();
    let mut messages = 0;
    let mut bytes = 0usize;
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
    for size in SIZES {
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
            }
            net.dereg_mr(sc, mr).call("deregMr")?;
        }
        ctx.note(&format!("size {size}: ok"));
    }
    if let Some(sc) = send {
        net.close_send(sc).call("closeSend")?;
    }
    if let Some(rc) = recv {
        net.close_recv(rc).call("closeRecv")?;
    }
    Ok(format!(
        "{messages} messages, {bytes} bytes, sizes {SIZES:?}, all verified"
    ))
}
