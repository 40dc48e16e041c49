//! e: a peer is SIGKILLed mid-transfer (`--victim sender` or `--victim receiver`).
//!
//! Both ranks stream 8 MiB messages. After posting message 2 the victim prints `KILLME` and
//! keeps going until the driver kills it. The survivor keeps posting and testing; some call on
//! its comm must return an error within 60 s of the kill (soft-RoCE never completes writes to
//! a dead QP, so the plugin needs its own liveness signal). After that error, a new post on the
//! same comm must fail too (possibly via a request whose `test` fails), and close must return.

use super::common::*;
use super::{Ctx, Victim};
use crate::blocking::Backoff;
use crate::buffer::{Buffer, seed};
use crate::error::{HResult, HarnessError, NcclExt};
use crate::net::{Mr, Net, RecvComm, RecvSlot, Request, SendComm};
use crate::{bail, ensure};
use ferro_ffi::ncclResult_t;
use std::time::{Duration, Instant};

const LEN: usize = 8 << 20;
const KILL_AFTER: usize = 2;
/// How long after the kill the survivor may take to see an error.
const DEATH_NOTICE: Duration = Duration::from_secs(60);
/// How long the victim waits to be killed before giving up.
const VICTIM_PATIENCE: Duration = Duration::from_secs(120);
/// Time for calls after the first error to fail as well.
const AFTERMATH: Duration = Duration::from_secs(10);

enum Side<'a> {
    Send(&'a SendComm, &'a Mr),
    Recv(&'a RecvComm, &'a Mr),
}

impl Side<'_> {
    fn post(&self, net: &Net, buf: &Buffer) -> Result<Option<Request>, ncclResult_t> {
        match self {
            Side::Send(c, mr) => net.isend(c, buf, 0, LEN, TAG, mr),
            Side::Recv(c, mr) => net.irecv(
                c,
                &[RecvSlot {
                    buf,
                    offset: 0,
                    len: LEN,
                    tag: TAG,
                    mr,
                }],
            ),
        }
    }

    fn post_name(&self) -> &'static str {
        match self {
            Side::Send(..) => "isend",
            Side::Recv(..) => "irecv",
        }
    }
}

fn msg_seed(ctx: &Ctx, k: usize) -> u64 {
    seed(&[ctx.opts.scenario.id(), k as u64])
}

/// The victim: transfer until killed.
fn victim(ctx: &mut Ctx, side: &Side<'_>, buf: &Buffer) -> HResult<String> {
    let net = ctx.net;
    let mut asked: Option<Instant> = None;
    let mut k = 0usize;
    loop {
        if let Side::Send(..) = side {
            buf.fill_pattern(0, LEN, msg_seed(ctx, k));
        }
        let mut b = Backoff::new(format!("{} of message {k}", side.post_name()), OP_TIMEOUT);
        let req = loop {
            if let Some(r) = side.post(net, buf).call(side.post_name())? {
                break r;
            }
            b.pause()?;
        };
        if k == KILL_AFTER {
            ctx.note(&format!("message {k} posted; asking to be killed"));
            ctx.ctl.kill_me();
            asked = Some(Instant::now());
        }
        net.wait(req, OP_TIMEOUT)?;
        if asked.is_some_and(|t| t.elapsed() > VICTIM_PATIENCE) {
            bail!("asked to be killed {VICTIM_PATIENCE:?} ago and still alive");
        }
        k += 1;
    }
}

struct Death {
    call: &'static str,
    code: ncclResult_t,
    after_kill: Option<Duration>,
    messages: usize,
}

/// The survivor: transfer until a call fails; check it happens within DEATH_NOTICE of the kill.
fn survive(ctx: &mut Ctx, side: &Side<'_>, buf: &Buffer) -> HResult<Death> {
    let net = ctx.net;
    let start = Instant::now();
    let mut killed_at: Option<Instant> = None;
    let mut k = 0usize;
    loop {
        if let Side::Send(..) = side {
            buf.fill_pattern(0, LEN, msg_seed(ctx, k));
        }
        let mut req: Option<Request> = None;
        let sizes = loop {
            if killed_at.is_none() && ctx.ctl.peer_killed() {
                killed_at = Some(Instant::now());
                ctx.note(&format!("peer killed; {k} messages completed"));
            }
            if let Some(t) = killed_at {
                ensure!(
                    t.elapsed() <= DEATH_NOTICE,
                    "no call returned an error within {DEATH_NOTICE:?} of the peer's death (message {k}: {})",
                    if req.is_some() {
                        "posted, test keeps saying not done"
                    } else {
                        "the post keeps returning NULL"
                    }
                );
            } else {
                ensure!(
                    start.elapsed() < Duration::from_secs(300),
                    "the driver never killed the peer"
                );
            }
            let failed = if let Some(r) = &req {
                match net.test(r) {
                    Ok((true, sizes)) => break sizes,
                    Ok((false, _)) => None,
                    Err(code) => Some(("test", code)),
                }
            } else {
                match side.post(net, buf) {
                    Ok(r) => {
                        req = r;
                        None
                    }
                    Err(code) => Some((side.post_name(), code)),
                }
            };
            if let Some((call, code)) = failed {
                return Ok(Death {
                    call,
                    code,
                    after_kill: killed_at.map(|t| t.elapsed()),
                    messages: k,
                });
            }
            std::thread::sleep(Duration::from_micros(200));
        };
        ensure!(
            sizes.first() == Some(&size_c(LEN)),
            "message {k}: test reported sizes {sizes:?}, expected [{LEN}]"
        );
        if let Side::Recv(..) = side {
            buf.verify_pattern(0, LEN, msg_seed(ctx, k))
                .map_err(|e| format!("message {k}: {e}"))?;
        }
        k += 1;
    }
}

/// After the first error: a new post on the same comm must fail (directly or through `test`).
fn aftermath(ctx: &Ctx, side: &Side<'_>, buf: &Buffer) -> HResult<String> {
    let net = ctx.net;
    let mut b = Backoff::new("a post on the dead comm to fail", AFTERMATH);
    loop {
        match side.post(net, buf) {
            Err(code) => return Ok(format!("a later {} returned {code:?}", side.post_name())),
            Ok(Some(req)) => {
                let mut b2 = Backoff::new(
                    "test of a request posted on the dead comm to fail",
                    AFTERMATH,
                );
                loop {
                    match net.test(&req) {
                        Err(code) => {
                            return Ok(format!(
                                "a later {} was accepted but its test returned {code:?}",
                                side.post_name()
                            ));
                        }
                        Ok((true, sizes)) => {
                            bail!("a request posted on the dead comm completed (sizes {sizes:?})")
                        }
                        Ok((false, _)) => b2.pause()?,
                    }
                }
            }
            Ok(None) => b.pause().map_err(|_| {
                HarnessError::Failed(format!(
                    "after the error, {} kept returning NULL for {AFTERMATH:?} instead of an error",
                    side.post_name()
                ))
            })?,
        }
    }
}

/// Checks and describes the survivor's outcome (before its comm is closed).
fn report(ctx: &mut Ctx, d: Death, side: &Side<'_>, buf: &Buffer) -> HResult<String> {
    ensure!(
        d.messages >= KILL_AFTER,
        "{} failed with {:?} after only {} messages, before the peer was asked to die",
        d.call,
        d.code,
        d.messages
    );
    if d.after_kill.is_none() {
        // The error beat the driver's notice; make sure the kill really happened.
        ctx.ctl
            .expect(
                "KILLED",
                &|l| l.starts_with("KILLED "),
                Duration::from_secs(10),
            )
            .map_err(|_| {
                HarnessError::Failed(format!(
                    "{} failed with {:?} but the peer was never killed",
                    d.call, d.code
                ))
            })?;
    }
    let later = aftermath(ctx, side, buf)?;
    let when = d
        .after_kill
        .map_or("before the driver's notice".to_string(), |t| {
            format!("{:.1} s after the kill", t.as_secs_f64())
        });
    Ok(format!(
        "peer ({:?}) killed after {} messages; {} returned {:?} {when}; {later}",
        ctx.opts.victim, d.messages, d.call, d.code
    ))
}

fn outcome(what: &str, r: Result<(), ncclResult_t>) -> String {
    match r {
        Ok(()) => format!("{what} returned ncclSuccess"),
        Err(c) => format!("{what} returned {c:?}"),
    }
}

pub(super) fn run(ctx: &mut Ctx) -> HResult<String> {
    let net = ctx.net;
    let buf = Buffer::new(LEN)?;
    let i_am_victim = match ctx.opts.victim {
        Victim::Sender => !ctx.is_receiver(),
        Victim::Receiver => ctx.is_receiver(),
    };
    if ctx.is_receiver() {
        let rc = net.accept_blocking(ctx.listen()?, CONNECT_TIMEOUT)?;
        let mr = net.reg_host(&rc, &buf).call("regMr")?;
        let summary = {
            let side = Side::Recv(&rc, &mr);
            if i_am_victim {
                return victim(ctx, &side, &buf);
            }
            let d = survive(ctx, &side, &buf)?;
            report(ctx, d, &side, &buf)?
        };
        let dereg = outcome("deregMr", net.dereg_mr(&rc, mr));
        let close = outcome("closeRecv", net.close_recv(rc));
        Ok(format!("{summary}; {dereg}; {close}"))
    } else {
        let mut h = ctx.peer_handle();
        let sc = net.connect_blocking(ctx.dev, &mut h, CONNECT_TIMEOUT)?;
        let mr = net.reg_host(&sc, &buf).call("regMr")?;
        let summary = {
            let side = Side::Send(&sc, &mr);
            if i_am_victim {
                return victim(ctx, &side, &buf);
            }
            let d = survive(ctx, &side, &buf)?;
            report(ctx, d, &side, &buf)?
        };
        let dereg = outcome("deregMr", net.dereg_mr(&sc, mr));
        let close = outcome("closeSend", net.close_send(sc));
        Ok(format!("{summary}; {dereg}; {close}"))
    }
}
