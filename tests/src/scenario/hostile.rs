//! f: hostile input on both ends of the handshake.
//!
//! The driver has already opened two raw TCP clients to rank 0's listen port (one sent 64
//! random bytes, one sends nothing and stays connected) before rank 1 gets the handle.
//! Rank 1 first calls connect with forged handles (random bytes, all zeros, the real handle with
//! another wire version, the real handle with an unknown address family): each must fail cleanly
//! within a bound. Then it makes two real connections and sends on each; rank 0's accept must
//! not stall behind the silent client, and both real transfers must arrive intact.

use super::Ctx;
use super::common::*;
use crate::buffer::{Buffer, PAGE, Rng, round_up, seed};
use crate::checks::connect_must_fail;
use crate::ensure;
use crate::error::{HResult, NcclExt};
use crate::handle::Handle;
use crate::logger;
use ferro_ffi::log_level;
use std::time::Duration;

const CONNECTIONS: usize = 2;
const LEN: usize = 64 << 10;

pub(super) fn run(ctx: &mut Ctx) -> HResult<String> {
    let net = ctx.net;
    let id = ctx.opts.scenario.id();
    let cap = round_up(LEN + PAGE, PAGE);
    let buf = Buffer::new(cap)?;
    if ctx.is_receiver() {
        let mark = logger::log_mark();
        let mut retries = Vec::new();
        for c in 0..CONNECTIONS {
            let (rc, n) = net.accept_blocking_counted(ctx.listen()?, CONNECT_TIMEOUT)?;
            retries.push(n);
            let mr = net.reg_host(&rc, &buf).call("regMr")?;
            recv_checked(
                net,
                &rc,
                &buf,
                cap,
                &mr,
                LEN,
                seed(&[id, c as u64]),
                &format!("real connection {c}"),
            )?;
            net.dereg_mr(&rc, mr).call("deregMr")?;
            net.close_recv(rc).call("closeRecv")?;
        }
        let warns = logger::logs_since(mark)
            .into_iter()
            .filter(|l| l.level == log_level::WARN)
            .count();
        Ok(format!(
            "{CONNECTIONS} real connections accepted and verified despite a garbage and a silent client (accept NULL answers {retries:?}); {warns} WARN lines logged meanwhile"
        ))
    } else {
        let mut problems = Vec::new();
        let mut random = Handle::zeroed();
        random
            .0
            .copy_from_slice(&Rng::new(seed(&[id, 99])).bytes(128));
        let bound = Duration::from_secs(20);
        connect_must_fail(
            net,
            ctx.dev,
            random,
            "connect(random handle)",
            bound,
            &mut problems,
        );
        connect_must_fail(
            net,
            ctx.dev,
            Handle::zeroed(),
            "connect(all-zero handle)",
            bound,
            &mut problems,
        );
        let mut other_version = ctx.peer_handle();
        other_version.set_wire_version(other_version.wire_version().wrapping_add(1));
        connect_must_fail(
            net,
            ctx.dev,
            other_version,
            "connect(real handle, wire version + 1)",
            bound,
            &mut problems,
        );
        let mut bad_family = ctx.peer_handle();
        bad_family.set_family(0x7777);
        connect_must_fail(
            net,
            ctx.dev,
            bad_family,
            "connect(real handle, address family 0x7777)",
            bound,
            &mut problems,
        );
        ensure!(
            problems.is_empty(),
            "forged handles: {}",
            problems.join("; ")
        );
        for c in 0..CONNECTIONS {
            let mut h = ctx.peer_handle();
            let sc = net.connect_blocking(ctx.dev, &mut h, CONNECT_TIMEOUT)?;
            let mr = net.reg_host(&sc, &buf).call("regMr")?;
            buf.fill_pattern(0, LEN, seed(&[id, c as u64]));
            send_wait(
                net,
                SendOp {
                    comm: &sc,
                    buf: &buf,
                    off: 0,
                    len: LEN,
                    tag: TAG,
                    mr: &mr,
                },
            )?;
            net.dereg_mr(&sc, mr).call("deregMr")?;
            net.close_send(sc).call("closeSend")?;
        }
        Ok(format!(
            "4 forged handles refused cleanly; {CONNECTIONS} real connections sent {LEN} bytes each"
        ))
    }
}
