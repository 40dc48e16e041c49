//! Link flaps under traffic: recovery in place, seen from NCCL's side of the table.
//!
//! Both ranks use one soft-RoCE device (`--dev rxe1`, on `dummy1`), so taking `dummy1` down
//! takes the link away from both ends at once. The receiver posts 24 single receives of 1 MiB
//! and one grouped receive of 8 x 1 MiB (32 sends in flight, NCCL's most); after a barrier the
//! sender posts half the sends, takes the link down with `ip link set ... down`, posts the other
//! half while it is down, and brings it up 2 s after it went down. (Soft-RoCE between two QPs of
//! one device never puts a packet on the link, so only the receiver waiting on the downed port
//! makes the flap visible there; on a NIC the writes in flight fail too.)
//!
//! `--flap transient` (down 2 s, then up): every request completes without an error, every byte
//! is right, and both ranks' plugins said they stopped to recover and recovered; the close
//! lines carry the recovery counters (QPs rebuilt, sends and bytes replayed, time). Then a flap
//! while idle (nothing in flight) and 4 more messages: no further recovery is needed.
//!
//! `--flap peer-killed`: the link goes down under traffic, the receiver stops to recover, the
//! sender is killed (SIGKILL) and the link comes back: the receiver's requests fail within a
//! bound of the kill (the peer's connection is gone), naming the dead peer.
//!
//! `--flap failover` (both ranks on `--dev rxe0+rxe1`): rxe1's link goes down under 32 MiB in
//! flight; the comm moves rxe1's QPs to rxe0 and goes on without an error; a round while rxe1 is
//! down moves no packet over rxe1 (its kernel counters stand still); once rxe1 is back, the QPs
//! move home and rxe1's counters move again (failback). Every byte of every round is verified.
//!
//! `--flap for-good` (down until the end, with a small `FERRO_RECOVERY_BUDGET_S`): the requests
//! fail within the budget plus a bound, with the WARN that says recovery gave up; the sender
//! brings the link back before it exits.

use super::Ctx;
use super::common::*;
use super::inflight::connect_pair;
use crate::buffer::{Buffer, Rng, seed};
use crate::error::{HResult, HarnessError, NcclExt};
use crate::logger;
use crate::net::{RecvComm, RecvSlot, Request, SendComm};
use crate::{bail, ensure};
use std::process::Command;
use std::time::{Duration, Instant};

/// How the link misbehaves (`--flap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Flap {
    /// Down for [`DOWN_FOR`], then up.
    Transient,
    /// Down until the scenario ends.
    ForGood,
    /// Down; the sender is killed while the receiver recovers; then up.
    PeerKilled,
    /// Over a virtual NIC (`--dev rxe0+rxe1`): rxe1's link goes down under traffic and stays
    /// down for a round; then up.
    Failover,
}

/// The netdev under rxe1 in the guest.
pub const LINK: &str = "dummy1";
const DOWN_FOR: Duration = Duration::from_secs(2);
const MIB: usize = 1 << 20;
const SINGLES: usize = 24;
const GROUP: usize = 8;
const GROUP_TAG: i32 = 100;
/// Rounds of 32 messages while the link flaps.
const ROUNDS: usize = 2;

/// `ip link set LINK up|down`. The link keeps its IPv6 address while down
/// (`keep_addr_on_down`), so rxe1's IPv6 GID is still there for the tests that run after.
pub fn set_link(up: bool) -> HResult<()> {
    let state = if up { "up" } else { "down" };
    let keep = format!("/proc/sys/net/ipv6/conf/{LINK}/keep_addr_on_down");
    std::fs::write(&keep, "1")
        .map_err(|e| HarnessError::Failed(format!("cannot write {keep}: {e}")))?;
    let out = Command::new("ip")
        .args(["link", "set", LINK, state])
        .output()
        .map_err(|e| HarnessError::Failed(format!("cannot run ip link set {LINK} {state}: {e}")))?;
    ensure!(
        out.status.success(),
        "ip link set {LINK} {state}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

fn msg_seed(ctx: &Ctx, round: usize, i: usize) -> u64 {
    seed(&[ctx.opts.scenario.id(), round as u64, i as u64])
}

/// Message `i` of a round: 24 singles with [`TAG`], then the group's 8 with tags 100..107.
fn tag_of(i: usize) -> i32 {
    if i < SINGLES {
        TAG
    } else {
        GROUP_TAG + (i - SINGLES) as i32
    }
}

/// The receiver's side of one round of `n` messages (`n` > [`SINGLES`] adds the group).
fn post_receives(
    ctx: &Ctx,
    rc: &RecvComm,
    buf: &Buffer,
    mr: &crate::net::Mr,
    n: usize,
) -> HResult<Vec<Request>> {
    buf.fill_byte(0, n * MIB, CANARY);
    let mut reqs = Vec::new();
    for i in 0..n.min(SINGLES) {
        let slot = RecvSlot {
            buf,
            offset: i * MIB,
            len: MIB,
            tag: TAG,
            mr,
        };
        reqs.push(ctx.net.irecv_blocking(rc, &[slot], OP_TIMEOUT)?);
    }
    if n > SINGLES {
        let slots: Vec<RecvSlot<'_>> = (SINGLES..n)
            .map(|i| RecvSlot {
                buf,
                offset: i * MIB,
                len: MIB,
                tag: tag_of(i),
                mr,
            })
            .collect();
        reqs.push(ctx.net.irecv_blocking(rc, &slots, OP_TIMEOUT)?);
    }
    Ok(reqs)
}

fn check_receives(ctx: &Ctx, buf: &Buffer, sizes: &[Vec<i32>], round: usize) -> HResult<()> {
    let flat: Vec<i32> = sizes.iter().flatten().copied().collect();
    for (i, &got) in flat.iter().enumerate() {
        check_received(
            buf,
            i * MIB,
            MIB,
            got,
            MIB,
            msg_seed(ctx, round, i),
            &format!("round {round} message {i} (tag {})", tag_of(i)),
        )?;
    }
    Ok(())
}

/// Posts the sends of messages `range` of a round of `n` (filled with their patterns).
fn post_sends(
    ctx: &Ctx,
    sc: &SendComm,
    buf: &Buffer,
    mr: &crate::net::Mr,
    range: std::ops::Range<usize>,
    round: usize,
) -> HResult<Vec<Request>> {
    for i in range.clone() {
        buf.fill_pattern(i * MIB, MIB, msg_seed(ctx, round, i));
    }
    let mut order: Vec<usize> = range.clone().collect();
    // The group's sends in a shuffled order, after the singles (matched in posting order).
    if range.end > SINGLES && range.start <= SINGLES {
        let from = SINGLES - range.start;
        Rng::new(msg_seed(ctx, round, 999)).shuffle(&mut order[from..]);
    }
    let ops: Vec<SendOp<'_>> = order
        .iter()
        .map(|&i| SendOp {
            comm: sc,
            buf,
            off: i * MIB,
            len: MIB,
            tag: tag_of(i),
            mr,
        })
        .collect();
    post_sends_in_order(ctx.net, &ops)
}

/// Posts each send in turn, retrying a NULL answer until it is taken, as NCCL's proxy does:
/// sends with the same tag must reach the plugin in their order (retrying a later one while an
/// earlier one is refused would let it match the earlier one's buffer).
fn post_sends_in_order(net: &crate::net::Net, ops: &[SendOp<'_>]) -> HResult<Vec<Request>> {
    let mut reqs = Vec::with_capacity(ops.len());
    for op in ops {
        reqs.push(net.isend_blocking(op.comm, op.buf, op.off, op.len, op.tag, op.mr, OP_TIMEOUT)?);
    }
    Ok(reqs)
}

/// Lines of this process's plugin log that contain `what`.
fn log_lines(what: &str) -> Vec<String> {
    logger::logs()
        .into_iter()
        .map(|l| l.text)
        .filter(|m| m.contains(what))
        .collect()
}

/// The time in recovery a recovered line reports (`..., 2710 ms in recovery)`).
fn ms_in_recovery(line: &str) -> Option<u64> {
    let end = line.rfind(" ms in recovery")?;
    let start = line[..end]
        .rfind(|c: char| !c.is_ascii_digit())
        .map_or(0, |i| i + 1);
    line[start..end].parse().ok()
}

const STOPPED: &str = "to recover in place";
const RECOVERED: &str = "recovered in place";

pub(super) fn run(ctx: &mut Ctx) -> HResult<String> {
    match ctx.opts.flap {
        Flap::Transient => transient(ctx),
        Flap::ForGood => for_good(ctx),
        Flap::PeerKilled => peer_killed(ctx),
        Flap::Failover => failover(ctx),
    }
}

/// Takes the link down now and brings it up [`DOWN_FOR`] later, on another thread; the thread
/// returns when the link came up.
fn flap_in_background() -> HResult<std::thread::JoinHandle<HResult<Instant>>> {
    set_link(false)?;
    Ok(std::thread::spawn(|| {
        std::thread::sleep(DOWN_FOR);
        set_link(true)?;
        Ok(Instant::now())
    }))
}

fn transient(ctx: &mut Ctx) -> HResult<String> {
    let n = SINGLES + GROUP;
    let buf = Buffer::new(n * MIB)?;
    let (send, recv) = connect_pair(ctx)?;
    let net = ctx.net;
    // Rounds 0..ROUNDS: the flap starts right after round 0's sends are posted and lasts
    // [`DOWN_FOR`]; the rounds after it keep traffic outstanding past the link's return.
    let t0 = Instant::now();
    let (flap_summary, resumed_after) = if let Some(rc) = &recv {
        let mr = net.reg_host(rc, &buf).call("regMr")?;
        for round in 0..ROUNDS {
            let reqs = post_receives(ctx, rc, &buf, &mr, n)?;
            ctx.ctl
                .barrier(&format!("posted{round}"), BARRIER_TIMEOUT)?;
            let sizes = net.wait_all(reqs, Duration::from_secs(120))?;
            check_receives(ctx, &buf, &sizes, round)?;
            ctx.note(&format!(
                "round {round}: 32 MiB verified at {} ms",
                t0.elapsed().as_millis()
            ));
        }
        net.dereg_mr(rc, mr).call("deregMr")?;
        (format!("receiver: {ROUNDS} x 32 MiB verified"), None)
    } else if let Some(sc) = &send {
        let mr = net.reg_host(sc, &buf).call("regMr")?;
        let mut flap = None;
        // Completions in order; the first one after the link is up tells how long traffic
        // took to resume.
        let mut times = Vec::new();
        for round in 0..ROUNDS {
            ctx.ctl
                .barrier(&format!("posted{round}"), BARRIER_TIMEOUT)?;
            let reqs = if round == 0 {
                // Half the sends, then the link goes down with the other half still to come
                // (so the receiver waits on the link while it is down), then the rest.
                let mut reqs = post_sends(ctx, sc, &buf, &mr, 0..n / 2, round)?;
                flap = Some(flap_in_background()?);
                ctx.note(&format!("link down at {} ms", t0.elapsed().as_millis()));
                std::thread::sleep(Duration::from_millis(500));
                reqs.extend(post_sends(ctx, sc, &buf, &mr, n / 2..n, round)?);
                ctx.note(&format!(
                    "round 0 posted at {} ms",
                    t0.elapsed().as_millis()
                ));
                reqs
            } else {
                post_sends(ctx, sc, &buf, &mr, 0..n, round)?
            };
            for r in reqs {
                let s = net.wait(r, Duration::from_secs(120))?;
                ensure!(s.first() == Some(&size_c(MIB)), "a send reported {s:?}");
                times.push(Instant::now());
            }
            ctx.note(&format!(
                "round {round}: 32 sends done at {} ms",
                t0.elapsed().as_millis()
            ));
        }
        let up = flap
            .ok_or_else(|| HarnessError::Failed("no flap".into()))?
            .join()
            .map_err(|_| HarnessError::Failed("the flap thread panicked".into()))??;
        ctx.note(&format!("link up at {} ms", (up - t0).as_millis()));
        let resumed = times.iter().find(|t| **t >= up).map(|t| *t - up);
        net.dereg_mr(sc, mr).call("deregMr")?;
        (format!("sender: {ROUNDS} x 32 sends completed"), resumed)
    } else {
        bail!("neither side")
    };
    let events = log_lines("IBV_EVENT_PORT").len();
    let stopped = log_lines(STOPPED).len();
    let recovered = log_lines(RECOVERED).len();
    ensure!(
        stopped >= 1 && recovered >= 1,
        "the link went down for {DOWN_FOR:?} under 32 MiB in flight, but this rank's plugin said {stopped} time(s) that it stopped and {recovered} that it recovered (expected both; it logged {events} port event line(s))"
    );
    // NCCL_IB_RESILIENCY_PORT_RECOVERY_START_DELAY: no rebuild before the delay has passed
    // since the stop, so every recovery this rank made took at least that long (the link is
    // down for DOWN_FOR, shorter than the delay the test gives).
    if let Some(delay) = std::env::var("NCCL_IB_RESILIENCY_PORT_RECOVERY_START_DELAY")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        let took: Vec<u64> = log_lines(RECOVERED)
            .iter()
            .filter_map(|l| ms_in_recovery(l))
            .collect();
        ensure!(
            !took.is_empty() && took.iter().all(|&ms| ms >= delay),
            "NCCL_IB_RESILIENCY_PORT_RECOVERY_START_DELAY={delay}: every recovery must wait that long before rebuilding, but the recovered lines say {took:?} ms in recovery"
        );
        ctx.note(&format!(
            "start delay {delay} ms: recoveries took {took:?} ms"
        ));
    }
    ctx.ctl.barrier("round0", BARRIER_TIMEOUT)?;
    // Round 1: a flap while idle, then 4 messages: no further recovery.
    if send.is_some() {
        set_link(false)?;
        std::thread::sleep(Duration::from_secs(1));
        set_link(true)?;
        std::thread::sleep(Duration::from_millis(500));
    }
    ctx.ctl.barrier("idle-flap", BARRIER_TIMEOUT)?;
    if let Some(rc) = &recv {
        let mr = net.reg_host(rc, &buf).call("regMr")?;
        let reqs = post_receives(ctx, rc, &buf, &mr, 4)?;
        ctx.ctl.barrier("posted1", BARRIER_TIMEOUT)?;
        let sizes = net.wait_all(reqs, OP_TIMEOUT)?;
        check_receives(ctx, &buf, &sizes, ROUNDS)?;
        net.dereg_mr(rc, mr).call("deregMr")?;
    }
    if let Some(sc) = &send {
        let mr = net.reg_host(sc, &buf).call("regMr")?;
        ctx.ctl.barrier("posted1", BARRIER_TIMEOUT)?;
        let reqs = post_sends(ctx, sc, &buf, &mr, 0..4, ROUNDS)?;
        net.wait_all(reqs, OP_TIMEOUT)?;
        net.dereg_mr(sc, mr).call("deregMr")?;
    }
    let stopped_after = log_lines(STOPPED).len();
    ensure!(
        stopped_after == stopped,
        "a flap while idle made the plugin stop {} more time(s): {:?}",
        stopped_after - stopped,
        log_lines(STOPPED)
    );
    if let Some(sc) = send {
        net.close_send(sc).call("closeSend")?;
    }
    if let Some(rc) = recv {
        net.close_recv(rc).call("closeRecv")?;
    }
    let close = log_lines("comm closed");
    let counters = close
        .iter()
        .find_map(|l| {
            let i = l.find(" recoveries (")?;
            let from = l[..i].rfind(", ").map_or(i, |j| j + 2);
            Some(l[from..].to_string())
        })
        .ok_or_else(|| {
            HarnessError::Failed(format!(
                "the close line carries no recovery counters: {close:?}"
            ))
        })?;
    let resumed = resumed_after.map_or(String::new(), |d| {
        format!(
            ", first send done {} ms after the link came up",
            d.as_millis()
        )
    });
    Ok(format!(
        "{flap_summary}; link {LINK} down {DOWN_FOR:?} under load: recovered{resumed}; close line: {counters}; an idle flap needed no recovery"
    ))
}

fn for_good(ctx: &mut Ctx) -> HResult<String> {
    let n = 8;
    let buf = Buffer::new(n * MIB)?;
    let (send, recv) = connect_pair(ctx)?;
    let net = ctx.net;
    let (comm_name, took, outcome) = if let Some(rc) = &recv {
        let mr = net.reg_host(rc, &buf).call("regMr")?;
        let reqs = post_receives(ctx, rc, &buf, &mr, n)?;
        ctx.ctl.barrier("posted", BARRIER_TIMEOUT)?;
        let t0 = Instant::now();
        let outcome = net.wait_all(reqs, Duration::from_secs(90));
        let took = t0.elapsed();
        net.dereg_mr(rc, mr).call("deregMr")?;
        ("receive", took, outcome)
    } else if let Some(sc) = &send {
        let mr = net.reg_host(sc, &buf).call("regMr")?;
        ctx.ctl.barrier("posted", BARRIER_TIMEOUT)?;
        let mut reqs = post_sends(ctx, sc, &buf, &mr, 0..n / 2, 0)?;
        set_link(false)?;
        let t0 = Instant::now();
        // The receiver waits on the downed port for the other half.
        std::thread::sleep(Duration::from_secs(1));
        reqs.extend(post_sends(ctx, sc, &buf, &mr, n / 2..n, 0)?);
        let outcome = net.wait_all(reqs, Duration::from_secs(90));
        let took = t0.elapsed();
        set_link(true)?;
        net.dereg_mr(sc, mr).call("deregMr")?;
        ("send", took, outcome)
    } else {
        bail!("neither side")
    };
    let err = match outcome {
        Ok(_) => bail!(
            "the link stayed down, yet every {comm_name} request completed (was it down at all?)"
        ),
        Err(e) => e.to_string(),
    };
    let budget = std::env::var("FERRO_RECOVERY_BUDGET_S")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(30);
    // The budget, then at most one look (a few waiting calls) and the peer's notice.
    let bound = Duration::from_secs(budget + 20);
    ensure!(
        took <= bound,
        "the {comm_name} requests failed only after {took:?}, past the budget of {budget} s plus 20 s"
    );
    let gave_up = log_lines("recovery in place gave up");
    ensure!(
        !gave_up.is_empty() || !log_lines("the peer failed the comm").is_empty(),
        "the {comm_name} comm failed ({err}) without saying that recovery gave up; its log: {:?}",
        log_lines("")
    );
    ctx.ctl.barrier("failed", BARRIER_TIMEOUT)?;
    if let Some(sc) = send {
        net.close_send(sc).call("closeSend")?;
    }
    if let Some(rc) = recv {
        net.close_recv(rc).call("closeRecv")?;
    }
    Ok(format!(
        "link {LINK} down for good: the {comm_name} requests failed after {:.1} s with: {err}; WARN: {}",
        took.as_secs_f64(),
        gave_up
            .first()
            .map_or("(the peer's notice)", |s| s.as_str())
    ))
}

/// How soon after the sender's death (and the link's return) the receiver must fail.
const DEATH_NOTICE: Duration = Duration::from_secs(20);
/// How long the driver's notice of a kill may trail the kill itself (it is sent right after the
/// `SIGKILL`; a loaded guest delays it by milliseconds, not seconds).
const NOTICE_SKEW: Duration = Duration::from_secs(2);

fn peer_killed(ctx: &mut Ctx) -> HResult<String> {
    let n = 8;
    let buf = Buffer::new(n * MIB)?;
    let (send, recv) = connect_pair(ctx)?;
    let net = ctx.net;
    if let Some(sc) = &send {
        let mr = net.reg_host(sc, &buf).call("regMr")?;
        ctx.ctl.barrier("posted", BARRIER_TIMEOUT)?;
        let _reqs = post_sends(ctx, sc, &buf, &mr, 0..n / 2, 0)?;
        set_link(false)?;
        // The receiver waits on the downed port for the other half, and stops to recover.
        std::thread::sleep(Duration::from_secs(2));
        ctx.note("asking to be killed while the receiver recovers");
        ctx.ctl.kill_me();
        std::thread::sleep(Duration::from_secs(60));
        bail!("asked to be killed 60 s ago and still alive");
    }
    let Some(rc) = &recv else {
        bail!("neither side")
    };
    let mr = net.reg_host(rc, &buf).call("regMr")?;
    let reqs = post_receives(ctx, rc, &buf, &mr, n)?;
    ctx.ctl.barrier("posted", BARRIER_TIMEOUT)?;
    let start = Instant::now();
    let mut killed_at = None;
    let mut pending: Vec<Request> = reqs;
    let err = loop {
        if killed_at.is_none() && ctx.ctl.peer_killed() {
            killed_at = Some(Instant::now());
            set_link(true)?;
        }
        if let Some(t) = killed_at {
            ensure!(
                t.elapsed() <= DEATH_NOTICE,
                "no call failed within {DEATH_NOTICE:?} of the sender's death"
            );
        } else {
            ensure!(
                start.elapsed() < Duration::from_secs(120),
                "the driver never killed the sender"
            );
        }
        let mut failed = None;
        pending.retain(|r| match net.test(r) {
            Ok((done, _)) => !done,
            Err(code) => {
                failed.get_or_insert(code);
                false
            }
        });
        if let Some(code) = failed {
            break code;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    // The kernel resets the sender's connections the moment it dies, while the driver's notice of
    // the kill comes after it over another pipe, so the failure can arrive first (as in the
    // `kill` scenario). It counts as after the kill if the notice follows within `NOTICE_SKEW`
    // (and the WARN below must name the dead peer as the cause); a failure with no kill behind it
    // never gets the notice.
    if killed_at.is_none() {
        ctx.ctl
            .expect("KILLED", &|l| l.starts_with("KILLED "), NOTICE_SKEW)
            .map_err(|_| {
                HarnessError::Failed(format!(
                    "a receive failed ({err:?}) before the sender was killed (no kill notice within {NOTICE_SKEW:?} of the failure)"
                ))
            })?;
    }
    let after = killed_at.map(|t| t.elapsed());
    let stopped = log_lines(STOPPED).len();
    ensure!(
        stopped >= 1,
        "the receiver failed ({err:?}) but never stopped to recover"
    );
    let why = log_lines("peer")
        .into_iter()
        .find(|l| l.contains("closed the connection") || l.contains("connection error"))
        .unwrap_or_default();
    ensure!(
        !why.is_empty(),
        "the failure does not name the dead peer: {:?}",
        log_lines("")
    );
    net.dereg_mr(rc, mr).call("deregMr")?;
    Ok(format!(
        "the sender was killed while the receiver recovered: {err:?} {}; WARN: {why}",
        after.map_or(
            "before the driver's notice of the kill".to_string(),
            |t| format!("{:.1} s after the kill", t.as_secs_f64())
        )
    ))
}

/// A device's received-packet count from the kernel (`hw_counters/rcvd_pkts`, port 1).
fn rcvd_pkts(dev: &str) -> HResult<u64> {
    let path = format!("/sys/class/infiniband/{dev}/ports/1/hw_counters/rcvd_pkts");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| HarnessError::Failed(format!("cannot read {path}: {e}")))?;
    text.trim()
        .parse()
        .map_err(|e| HarnessError::Failed(format!("{path}: {text:?}: {e}")))
}

/// One round of 32 messages; the sender takes the link down half way when `down_midway`.
fn failover_round(
    ctx: &mut Ctx,
    pair: (&Option<SendComm>, &Option<RecvComm>),
    buf: &Buffer,
    round: usize,
    down_midway: bool,
) -> HResult<Duration> {
    let n = SINGLES + GROUP;
    let net = ctx.net;
    let t0 = Instant::now();
    if let Some(rc) = pair.1 {
        let mr = net.reg_host(rc, buf).call("regMr")?;
        let reqs = post_receives(ctx, rc, buf, &mr, n)?;
        ctx.ctl
            .barrier(&format!("fo-posted{round}"), BARRIER_TIMEOUT)?;
        let sizes = net.wait_all(reqs, Duration::from_secs(120))?;
        let took = t0.elapsed();
        check_receives(ctx, buf, &sizes, round)?;
        net.dereg_mr(rc, mr).call("deregMr")?;
        return Ok(took);
    }
    let Some(sc) = pair.0 else {
        bail!("neither side")
    };
    let mr = net.reg_host(sc, buf).call("regMr")?;
    ctx.ctl
        .barrier(&format!("fo-posted{round}"), BARRIER_TIMEOUT)?;
    let mut reqs = post_sends(ctx, sc, buf, &mr, 0..n / 2, round)?;
    if down_midway {
        set_link(false)?;
        std::thread::sleep(Duration::from_millis(500));
    }
    reqs.extend(post_sends(ctx, sc, buf, &mr, n / 2..n, round)?);
    net.wait_all(reqs, Duration::from_secs(120))?;
    let took = t0.elapsed();
    net.dereg_mr(sc, mr).call("deregMr")?;
    Ok(took)
}

fn failover(ctx: &mut Ctx) -> HResult<String> {
    let n = SINGLES + GROUP;
    let buf = Buffer::new(n * MIB)?;
    let (send, recv) = connect_pair(ctx)?;
    let pair = (&send, &recv);
    // Round 0: rxe1 goes down half way; the comm fails over to rxe0.
    let t_down = failover_round(ctx, pair, &buf, 0, true)?;
    let moved = log_lines("(failover)").len();
    ensure!(
        moved >= 1,
        "rxe1 went down under traffic but this rank never said its QPs moved (failover); stops: {:?}",
        log_lines(STOPPED)
    );
    // Round 1: rxe1 still down: nothing goes over it.
    let before = rcvd_pkts("rxe1")?;
    let t_one = failover_round(ctx, pair, &buf, 1, false)?;
    let during = rcvd_pkts("rxe1")? - before;
    ensure!(
        during == 0,
        "rxe1 is down, yet it received {during} packets during a round"
    );
    ctx.ctl.barrier("fo-round1", BARRIER_TIMEOUT)?;
    if send.is_some() {
        set_link(true)?;
    }
    ctx.ctl.barrier("fo-up", BARRIER_TIMEOUT)?;
    std::thread::sleep(Duration::from_secs(1));
    // Rounds 2 and 3: rxe1 is back; the QPs move home (failback) and rxe1 carries traffic.
    let before = rcvd_pkts("rxe1")?;
    failover_round(ctx, pair, &buf, 2, false)?;
    let t_back = failover_round(ctx, pair, &buf, 3, false)?;
    let after = rcvd_pkts("rxe1")? - before;
    ensure!(
        after > 0,
        "rxe1 is back, yet it received no packet in two rounds (no failback?); stops: {:?}",
        log_lines(STOPPED)
    );
    let failback = log_lines("(failback)").len();
    if let Some(sc) = send {
        ctx.net.close_send(sc).call("closeSend")?;
    }
    if let Some(rc) = recv {
        ctx.net.close_recv(rc).call("closeRecv")?;
    }
    let close = log_lines("comm closed");
    let per_member = close
        .iter()
        .find_map(|l| {
            l.find("completions per member device")
                .map(|i| l[i..].to_string())
        })
        .unwrap_or_default();
    Ok(format!(
        "rxe1 down under load: failed over ({moved} line(s)), 32 MiB in {} ms; a round on rxe0 alone while rxe1 was down: {} ms ({during} packets on rxe1); after rxe1 came back: {failback} failback stop(s), {after} packets on rxe1, a round in {} ms; {per_member}",
        t_down.as_millis(),
        t_one.as_millis(),
        t_back.as_millis()
    ))
}
