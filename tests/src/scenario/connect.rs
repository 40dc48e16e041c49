//! a: connect/accept in both call orders (and at once), three connections on one listen comm,
//! then a message on each connection (posted on all three, sent in reverse order) to show the
//! comms are distinct and all work.

use super::Ctx;
use super::common::*;
use crate::buffer::{Buffer, PAGE, round_up, seed};
use crate::error::{HResult, NcclExt};

const ORDERS: [&str; 3] = [
    "client-connects-first",
    "server-accepts-first",
    "simultaneous",
];

fn msg_len(k: usize) -> usize {
    8192 + 100 * k
}

fn msg_seed(ctx: &Ctx, k: usize) -> u64 {
    seed(&[ctx.opts.scenario.id(), k as u64, msg_len(k) as u64])
}

pub(super) fn run(ctx: &mut Ctx) -> HResult<String> {
    let net = ctx.net;
    let slot = round_up(msg_len(ORDERS.len()) + PAGE, PAGE);
    let buf = Buffer::new(slot * ORDERS.len())?;
    let mut retries = Vec::new();
    if ctx.is_receiver() {
        let mut comms = Vec::new();
        for order in ORDERS {
            ctx.ctl.barrier(order, BARRIER_TIMEOUT)?;
            if order == "client-connects-first" {
                // Let the client's connect calls run before the first accept call.
                std::thread::sleep(ctx.opts.delay);
            }
            let (c, n) = net.accept_blocking_counted(ctx.listen()?, CONNECT_TIMEOUT)?;
            ctx.note(&format!("{order}: accepted after {n} NULL answers"));
            retries.push(n);
            comms.push(c);
        }
        buf.fill_byte(0, buf.len(), CANARY);
        let mut mrs = Vec::new();
        let mut reqs = Vec::new();
        for (k, c) in comms.iter().enumerate() {
            let mr = net.reg_host(c, &buf).call("regMr")?;
            reqs.push(net.irecv_blocking(
                c,
                &[crate::net::RecvSlot {
                    buf: &buf,
                    offset: k * slot,
                    len: slot,
                    tag: TAG,
                    mr: &mr,
                }],
                OP_TIMEOUT,
            )?);
            mrs.push(mr);
        }
        let sizes = net.wait_all(reqs, OP_TIMEOUT)?;
        for (k, s) in sizes.iter().enumerate() {
            let got = s.first().copied().unwrap_or(-1);
            check_received(
                &buf,
                k * slot,
                slot,
                got,
                msg_len(k),
                msg_seed(ctx, k),
                &format!("connection {k} ({})", ORDERS[k]),
            )?;
        }
        for (c, mr) in comms.into_iter().zip(mrs) {
            net.dereg_mr(&c, mr).call("deregMr")?;
            net.close_recv(c).call("closeRecv")?;
        }
    } else {
        let mut comms = Vec::new();
        for order in ORDERS {
            ctx.ctl.barrier(order, BARRIER_TIMEOUT)?;
            if order == "server-accepts-first" {
                std::thread::sleep(ctx.opts.delay);
            }
            let mut h = ctx.peer_handle();
            let (c, n) = net.connect_blocking_counted(ctx.dev, &mut h, CONNECT_TIMEOUT)?;
            ctx.note(&format!("{order}: connected after {n} NULL answers"));
            retries.push(n);
            comms.push(c);
        }
        let mut mrs = Vec::new();
        for c in &comms {
            mrs.push(net.reg_host(c, &buf).call("regMr")?);
        }
        for k in (0..ORDERS.len()).rev() {
            buf.fill_pattern(k * slot, msg_len(k), msg_seed(ctx, k));
            send_wait(
                net,
                SendOp {
                    comm: &comms[k],
                    buf: &buf,
                    off: k * slot,
                    len: msg_len(k),
                    tag: TAG,
                    mr: &mrs[k],
                },
            )?;
        }
        for (c, mr) in comms.into_iter().zip(mrs) {
            net.dereg_mr(&c, mr).call("deregMr")?;
            net.close_send(c).call("closeSend")?;
        }
    }
    Ok(format!(
        "3 connections on one listen comm ({}), NULL answers per connection {retries:?}; one message each verified",
        ORDERS.join(", ")
    ))
}
