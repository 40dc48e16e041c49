//! f: a listener strangers cannot exhaust.
//!
//! Rank 0 floods its own listen port from this process: a first wave of silent TCP clients,
//! then (at the barrier) a second wave while rank 1, the real peer, connects and sends 1 MiB,
//! which rank 0 receives and verifies within a bound. All the while the listener may hold no
//! more than its cap of strangers (sampled from the process's fd count). Then a client that
//! speaks the start of a valid `Connect` one byte at a time must be dropped when the secret's
//! deadline has passed, however its bytes trickle; every flood connection must have been closed
//! by the listener; the WARN lines about all of them must be a few summaries; and once the
//! clients and the comm are closed, the process's fd count must return to where it started.

use super::Ctx;
use super::common::*;
use crate::buffer::{Buffer, PAGE, round_up, seed};
use crate::error::{HResult, HarnessError, NcclExt};
use crate::guest::open_fds;
use crate::handle::HANDLE_MAGIC;
use crate::logger;
use crate::net::{ListenComm, Net};
use crate::{bail, ensure};
use ferro_ffi::log_level;
use std::io::{ErrorKind, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Flood connections in each wave (two waves: 2,000 in all).
const WAVE: usize = 1000;
/// The listener's cap on strangers (the plugin's `MAX_STRANGERS`).
const MAX_STRANGERS: usize = 256;
/// The plugin's total deadline for presenting the secret (`SECRET_DEADLINE`).
const SECRET_DEADLINE: Duration = Duration::from_secs(5);
/// How late after the deadline the trickling client may be dropped (the listener checks at
/// its `accept` calls, which this rank makes every few milliseconds).
const DEADLINE_SLACK: Duration = Duration::from_secs(3);
/// The real peer's connection and its 1 MiB must get through within this, flood or not.
const REAL_PEER_BOUND: Duration = Duration::from_secs(30);
/// At most this many WARN lines for all the dropped strangers.
const MAX_WARNS: usize = 6;
const LEN: usize = 1 << 20;

pub(super) fn run(ctx: &mut Ctx) -> HResult<String> {
    if ctx.is_receiver() {
        receiver(ctx)
    } else {
        ctx.ctl.barrier("flooded", BARRIER_TIMEOUT)?;
        let net = ctx.net;
        let started = Instant::now();
        let mut h = ctx.peer_handle();
        let sc = net.connect_blocking(ctx.dev, &mut h, CONNECT_TIMEOUT)?;
        let connected = started.elapsed();
        let buf = Buffer::new(round_up(LEN + PAGE, PAGE))?;
        let mr = net.reg_host(&sc, &buf).call("regMr")?;
        buf.fill_pattern(0, LEN, seed(&[ctx.opts.scenario.id()]));
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
        Ok(format!(
            "connected during the second flood wave in {connected:?}; sent {LEN} bytes"
        ))
    }
}

fn receiver(ctx: &mut Ctx) -> HResult<String> {
    let net = ctx.net;
    let fds_at_start = open_fds().map_err(HarnessError::Failed)?;
    let limit = raise_fd_limit(fds_at_start + 2 * WAVE + MAX_STRANGERS + 256)?;
    let addr = ctx
        .handle
        .socket_addr()
        .ok_or_else(|| HarnessError::Failed("own handle has no address".into()))?;
    let mark = logger::log_mark();
    let opened = Arc::new(AtomicUsize::new(0));
    let listen = ctx
        .listen
        .as_ref()
        .ok_or_else(|| HarnessError::Failed("the listen comm was already closed".into()))?;
    // The first wave, with the listener taking (and dropping) connections meanwhile.
    let first_wave = Instant::now();
    let wave = flood(addr, WAVE, Arc::clone(&opened));
    let mut longest_call = Duration::ZERO;
    let mut most_held = 0;
    let mut polls = 0u64;
    while !wave.is_finished() {
        if timed_accept(net, listen, &mut longest_call)? {
            bail!("accept returned a comm while only strangers were connecting");
        }
        polls += 1;
        if polls % 64 == 0 {
            most_held = most_held.max(held_by_listener(fds_at_start, &opened)?);
        }
        thread::sleep(Duration::from_micros(200));
    }
    let mut clients = join(wave)?;
    let first_wave = first_wave.elapsed();
    most_held = most_held.max(held_by_listener(fds_at_start, &opened)?);
    // The second wave while the real peer connects.
    ctx.ctl.barrier("flooded", BARRIER_TIMEOUT)?;
    let started = Instant::now();
    let wave = flood(addr, WAVE, Arc::clone(&opened));
    let (rc, nulls) = net.accept_blocking_counted(listen, REAL_PEER_BOUND)?;
    let accepted = started.elapsed();
    let cap = round_up(LEN + PAGE, PAGE);
    let buf = Buffer::new(cap)?;
    let mr = net.reg_host(&rc, &buf).call("regMr")?;
    recv_checked(
        net,
        &rc,
        &buf,
        cap,
        &mr,
        LEN,
        seed(&[ctx.opts.scenario.id()]),
        "the real peer's 1 MiB",
    )?;
    let moved = started.elapsed();
    ensure!(
        moved <= REAL_PEER_BOUND,
        "the real peer's connection and 1 MiB took {moved:?} (bound {REAL_PEER_BOUND:?})"
    );
    net.dereg_mr(&rc, mr).call("deregMr")?;
    net.close_recv(rc).call("closeRecv")?;
    while !wave.is_finished() {
        if timed_accept(net, listen, &mut longest_call)? {
            bail!("accept returned a second comm: a stranger got in");
        }
        most_held = most_held.max(held_by_listener(fds_at_start, &opened)?);
        thread::sleep(Duration::from_millis(1));
    }
    clients.extend(join(wave)?);
    let both_waves = started.elapsed();
    ensure!(
        most_held <= MAX_STRANGERS + 8,
        "the listener held {most_held} connections at once (cap {MAX_STRANGERS} strangers)"
    );
    // A client trickling the start of a valid message, accepted after both waves.
    let wire_version = ctx.handle.wire_version();
    let trickler = thread::spawn(move || trickle(addr, wire_version));
    let bound = Instant::now() + SECRET_DEADLINE + DEADLINE_SLACK + Duration::from_secs(2);
    while !trickler.is_finished() {
        ensure!(
            Instant::now() < bound,
            "the trickling client is still connected after {:?}",
            SECRET_DEADLINE + DEADLINE_SLACK
        );
        if timed_accept(net, listen, &mut longest_call)? {
            bail!("accept returned a comm for the trickling client");
        }
        thread::sleep(Duration::from_millis(5));
    }
    let (kept, sent) = trickler
        .join()
        .map_err(|_| HarnessError::Failed("the trickling client panicked".into()))??;
    ensure!(
        kept >= SECRET_DEADLINE - Duration::from_millis(100)
            && kept <= SECRET_DEADLINE + DEADLINE_SLACK,
        "the trickling client was dropped after {kept:?} having sent {sent} bytes; the secret's deadline is {SECRET_DEADLINE:?}"
    );
    // Every flood connection was dropped by the listener (evicted or out of time).
    let open = clients.iter().filter(|s| !closed_by_peer(s)).count();
    ensure!(
        open == 0,
        "{open} of {} flood connections are still open at the listener after the deadline",
        clients.len()
    );
    let flood_total = clients.len();
    drop(clients);
    // The process's fds come back to where they started (the listener closes what it still
    // holds at its next calls).
    let back = Instant::now() + Duration::from_secs(10);
    let mut fds = open_fds().map_err(HarnessError::Failed)?;
    while fds > fds_at_start {
        ensure!(
            Instant::now() < back,
            "{fds} fds open, {fds_at_start} at the start"
        );
        if net.accept(listen).call("accept")?.is_some() {
            bail!("accept returned a comm after the test's clients closed");
        }
        thread::sleep(Duration::from_millis(10));
        fds = open_fds().map_err(HarnessError::Failed)?;
    }
    let warns: Vec<String> = logger::logs_since(mark)
        .into_iter()
        .filter(|l| l.level == log_level::WARN)
        .map(|l| l.text)
        .collect();
    ensure!(
        warns.len() <= MAX_WARNS,
        "{} WARN lines for {flood_total} dropped strangers:\n{}",
        warns.len(),
        warns.join("\n")
    );
    Ok(format!(
        "{flood_total} flood connections (fd limit {limit}; first wave {first_wave:?}, the second with the real peer {both_waves:?}) and a trickling client: the real peer accepted in {accepted:?} ({nulls} NULL answers), 1 MiB verified in {moved:?}; at most {most_held} connections held at once; longest accept call without the real peer {longest_call:?}; the trickler dropped after {kept:?} ({sent} bytes sent); fds {fds_at_start} -> {fds}; {} WARN lines",
        warns.len()
    ))
}

/// One `accept` call, expected to answer NULL; whether it returned a comm. Tracks the longest.
fn timed_accept(net: &Net, listen: &ListenComm, longest: &mut Duration) -> HResult<bool> {
    let t = Instant::now();
    let got = net.accept(listen).call("accept")?;
    *longest = (*longest).max(t.elapsed());
    Ok(got.is_some())
}

/// Raises the limit on open files to at least `want` if it is lower: the soft limit up to the
/// hard one, and the hard one too where this process may (root); the new soft limit.
fn raise_fd_limit(want: usize) -> HResult<u64> {
    let want = want as u64;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit for getrlimit to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        bail!("getrlimit: {}", std::io::Error::last_os_error());
    }
    if lim.rlim_cur >= want {
        return Ok(lim.rlim_cur);
    }
    let raised = libc::rlimit {
        rlim_cur: want.max(lim.rlim_max),
        rlim_max: want.max(lim.rlim_max),
    };
    // SAFETY: `raised` is a valid rlimit.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        bail!(
            "the flood needs {want} open files; soft limit {}, hard limit {}, and raising them failed: {}",
            lim.rlim_cur,
            lim.rlim_max,
            std::io::Error::last_os_error()
        );
    }
    Ok(raised.rlim_cur)
}

/// Opens `n` silent connections to `addr` and keeps them; counts them in `opened`.
fn flood(
    addr: SocketAddr,
    n: usize,
    opened: Arc<AtomicUsize>,
) -> JoinHandle<HResult<Vec<TcpStream>>> {
    thread::spawn(move || {
        let mut held = Vec::with_capacity(n);
        for i in 0..n {
            let s = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).map_err(|e| {
                HarnessError::Failed(format!("flood connection {i} to {addr}: {e}"))
            })?;
            held.push(s);
            opened.fetch_add(1, Ordering::Relaxed);
        }
        Ok(held)
    })
}

fn join(wave: JoinHandle<HResult<Vec<TcpStream>>>) -> HResult<Vec<TcpStream>> {
    wave.join()
        .map_err(|_| HarnessError::Failed("a flood thread panicked".into()))?
}

/// Connections the listener holds now: the fds beyond the start and the flood's own.
fn held_by_listener(fds_at_start: usize, opened: &AtomicUsize) -> HResult<usize> {
    let fds = open_fds().map_err(HarnessError::Failed)?;
    Ok(fds
        .saturating_sub(fds_at_start)
        .saturating_sub(opened.load(Ordering::Relaxed)))
}

/// Whether the listener closed its end of `s` (a read sees the end or a reset).
fn closed_by_peer(mut s: &TcpStream) -> bool {
    if s.set_nonblocking(true).is_err() {
        return true;
    }
    let mut b = [0u8; 16];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != ErrorKind::WouldBlock,
    }
}

/// Connects and sends a valid header of a `Connect` announcing a 400-byte body, then body
/// bytes, one byte every 100 ms, until the listener closes the connection. How long it was
/// kept, and how many bytes were sent.
fn trickle(addr: SocketAddr, wire_version: u16) -> HResult<(Duration, usize)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .map_err(|e| HarnessError::Failed(format!("trickling client: connect: {e}")))?;
    let started = Instant::now();
    let _ = s.set_nodelay(true);
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(|e| HarnessError::Failed(format!("trickling client: {e}")))?;
    let mut msg = Vec::new();
    msg.extend_from_slice(&HANDLE_MAGIC.to_le_bytes());
    msg.extend_from_slice(&wire_version.to_le_bytes());
    msg.extend_from_slice(&1u16.to_le_bytes());
    msg.extend_from_slice(&400u32.to_le_bytes());
    msg.resize(16 + 400, 0);
    let mut sent = 0;
    while started.elapsed() < Duration::from_secs(60) {
        if sent < msg.len() {
            match s.write(&msg[sent..=sent]) {
                Ok(1) => sent += 1,
                _ => return Ok((started.elapsed(), sent)),
            }
        }
        let mut b = [0u8; 16];
        match s.read(&mut b) {
            Ok(0) => return Ok((started.elapsed(), sent)),
            Ok(_) => bail!("trickling client: the listener answered a stranger"),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return Ok((started.elapsed(), sent)),
        }
    }
    bail!("trickling client: still connected after 60 s, having sent {sent} bytes")
}
