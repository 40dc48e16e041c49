//! Connection setup without blocking: `listen`, `connect` and `accept`, over the protocol
//! core's handshake machine ([`ferro_proto::handshake`]).
//!
//! The machine decides everything (messages, checks, refusals, the time-out); this module owns
//! what it cannot: the sockets (a non-blocking TCP connect, the accept loop, reading what the
//! machine wants read, writing what it wants written), the verbs resources it asks for (the
//! endpoint, the protocol regions, the flush QPs, connecting the QPs), the registry that keeps
//! `connect`'s progress under a token written into the handle, TCP keepalive, and turning a
//! finished handshake into a [`Comm`]. Every call reads the clock once and passes it in
//! (`accept` once more for each connection it takes, whose secret's deadline starts then).
//!
//! A listener applies the core's bounds on strangers ([`hs::strangers`]): it keeps at most
//! [`MAX_STRANGERS`] connections that have not presented its secret, dropping the oldest of
//! them when one more comes, drops a stranger that has not presented it within
//! [`hs::SECRET_DEADLINE`], reports dropped strangers and failing `accept` calls in one line per
//! interval, and never returns an `accept` error to NCCL: the listener stays usable and the
//! connection waiting in the kernel is taken at a later call.

use super::access;
use super::comm::{Comm, CommPtr, ReceiverMem, SendScratch, SenderMem, Side};
use super::endpoint::{Endpoint, FlushQp, RegBuf, Role};
use super::objects::ObjectKind;
use crate::error::{Error, Result};
use crate::plugin;
use crate::vnic::{self, VDevice};
use crate::{info, oob, warn};
use ferro_ffi::log_flags::{INIT, NET};
use ferro_proto::comm::recovering::Recovering;
use ferro_proto::comm::recv::RecvCore;
use ferro_proto::comm::send::{Oversize, SendCore};
use ferro_proto::fifo::{FIFO_BYTES, SIZES_BYTES};
use ferro_proto::handle::{self, HANDLE_SIZE, SECRET_SIZE};
use ferro_proto::handshake::strangers::{self, LogTally, MAX_STRANGERS, Report};
use ferro_proto::handshake::sweep::SweepPacer;
use ferro_proto::handshake::{
    self as hs, Event, HANDSHAKE_TIMEOUT, Handshake, HandshakeError, LocalSide, Settings, Stage,
};
use ferro_proto::path::QpPath;
use ferro_proto::plan::QpLayout;
use ferro_proto::wire::QpMeta;
use ferro_proto::{Keys, MAX_DEVS};
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// TCP keepalive on a comm's out-of-band connection, so that a peer host that vanished without
/// closing it (power loss, a partitioned network) is noticed too: the first probe after this
/// much silence, then one every [`KEEPALIVE_INTERVAL`], and the connection fails after
/// [`KEEPALIVE_PROBES`] unanswered ones: at most 10 + 6 x 5 = 40 s after the peer went silent.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_PROBES: u32 = 6;

/// A listening endpoint.
#[derive(Debug)]
#[repr(C)]
pub struct ListenComm {
    /// [`ObjectKind::ListenComm`]'s magic word; first field.
    magic: u64,
    dev: &'static VDevice,
    listener: TcpListener,
    addr: SocketAddr,
    /// What a connecting side must present (it is in the handle).
    secret: [u8; SECRET_SIZE],
    pending: Mutex<Pending>,
}

/// A listener's connections being set up, and the tallies of what it reports about them.
#[derive(Debug, Default)]
struct Pending {
    /// In the order they were accepted, oldest first.
    setups: Vec<Setup>,
    /// Strangers dropped (refused, gone, out of time, or evicted from a full table).
    dropped: LogTally,
    /// The latest of them, for the next summary line.
    last_dropped: String,
    /// `accept` calls that failed.
    accept_failed: LogTally,
    /// The latest failure, for the next summary line.
    last_accept_error: String,
}

/// How many new connections one `accept` call takes at most (the rest wait in the kernel for
/// the next call), so that one call stays short whatever is queued: taking one costs a few
/// system calls, and NCCL calls `accept` again at once while it waits for a connection.
const ACCEPTS_PER_CALL: usize = 64;

/// The verbs resources of a side being set up, as far as the handshake got.
#[derive(Debug)]
enum Resources {
    /// Connecting side: made before the TCP connect starts.
    /// `oversize`: what a send larger than its buffer does (the ABI version's rule).
    Sender {
        ep: Endpoint,
        mem: SenderMem,
        oversize: Oversize,
    },
    /// Accepting side: made when the machine has checked the peer's `Connect`.
    Receiver {
        ep: Endpoint,
        mem: ReceiverMem,
        flush: Vec<FlushQp>,
    },
    /// Accepting side before that (or after the resources went into the comm).
    None,
}

/// A side whose handshake finished: what its comm is made of.
#[derive(Debug)]
struct Ready {
    ep: Endpoint,
    side: Side,
}

/// One connection being set up (either side): its socket, its machine, its resources.
#[derive(Debug)]
struct Setup {
    sock: TcpStream,
    peer: SocketAddr,
    dev: &'static VDevice,
    hs: Handshake,
    res: Resources,
}

/// The time passed to the handshake machines: since the first call that needed it.
fn now() -> Duration {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed()
}

/// The fault policy's settings of a new comm: `FERRO_STALL_WARN_S` as its stall threshold (zero:
/// the watchdog is off), `NCCL_IB_RETURN_ASYNC_EVENTS` (whether device events fail it) and
/// `FERRO_RECOVERY_BUDGET_S` (recovery in place, zero: off).
fn configure_health<C: Recovering>(core: &mut C) -> Result<()> {
    let config = &plugin::get()?.config;
    core.set_recovery_budget(config.recovery_budget());
    core.recovery_parts().0.set_limits(
        config
            .resiliency_start_delay_ms
            .map(|ms| Duration::from_millis(u64::from(ms))),
        config.resiliency_attempts_max,
    );
    let health = core.recovery_parts().1;
    health.set_stall_threshold(Duration::from_secs(u64::from(config.stall_warn_s)));
    health.set_return_async_events(config.return_async_events);
    Ok(())
}

/// The settings both sides must agree on, as configured here.
fn settings() -> Result<Settings> {
    let cfg = &plugin::get()?.config;
    Ok(Settings {
        qps_per_conn: cfg.qps_per_connection,
        split: cfg.split_data_on_qps,
    })
}

fn io_err(what: &str, peer: SocketAddr, e: std::io::Error) -> Error {
    Error::Remote(format!("{what} {peer}: {e}"))
}

/// This side's description for the peer: the endpoint's QPs with `region`, and its members'
/// names.
fn local_side(ep: &Endpoint, region: &RegBuf) -> Result<LocalSide> {
    let lay = ep.layout();
    Ok(LocalSide {
        meta: ep.meta(region, lay.qps_per_conn() as u16, lay.split)?,
        names: ep.rails.iter().map(|r| r.dev.ibdev.clone()).collect(),
    })
}

/// The peer's protocol-region keys by member.
fn peer_keys(meta: &QpMeta) -> Keys {
    core::array::from_fn(|i| meta.devs.get(i).map_or(0, |d| d.mr_rkey))
}

impl Setup {
    /// Advances as far as the socket allows; `Some` when connected.
    fn drive(&mut self, now: Duration) -> Result<Option<Ready>> {
        loop {
            let mut moved = self.poll_tcp(now)?;
            moved |= self.write(now)?;
            moved |= self.read(now)?;
            let (acted, ready) = self.act()?;
            if ready.is_some() {
                return Ok(ready);
            }
            if !(moved || acted) {
                break;
            }
        }
        self.hs.handle_timeout(now);
        Ok(self.act()?.1)
    }

    /// Connecting side: whether the TCP connect completed just now.
    fn poll_tcp(&mut self, now: Duration) -> Result<bool> {
        if self.hs.stage() != Stage::TcpConnect {
            return Ok(false);
        }
        if let Some(e) = self
            .sock
            .take_error()
            .map_err(|e| io_err("connect to", self.peer, e))?
        {
            return Err(Error::System(format!(
                "cannot connect to {}: {e} (is the peer's listener reachable from here? check NCCL_SOCKET_IFNAME)",
                self.peer
            )));
        }
        if self.sock.peer_addr().is_err() {
            return Ok(false);
        }
        self.hs.tcp_connected(now);
        Ok(true)
    }

    /// Writes what the machine has to send; whether any byte went.
    fn write(&mut self, now: Duration) -> Result<bool> {
        let mut moved = false;
        while let Some(bytes) = self.hs.poll_transmit() {
            match (&self.sock).write(bytes) {
                Ok(0) => self.hs.peer_closed(),
                Ok(k) => {
                    self.hs.advance(k, now);
                    moved = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err("sending to", self.peer, e)),
            }
            if self.hs.is_finished() {
                break;
            }
        }
        Ok(moved)
    }

    /// Reads what the machine wants (never more: bytes after the handshake belong to the
    /// comm); whether any byte came.
    fn read(&mut self, now: Duration) -> Result<bool> {
        let mut moved = false;
        loop {
            let wanted = self.hs.wanted();
            if wanted == 0 {
                return Ok(moved);
            }
            let mut buf = vec![0u8; wanted];
            match (&self.sock).read(&mut buf) {
                Ok(0) => self.hs.peer_closed(),
                Ok(k) => {
                    self.hs.handle_bytes(&buf[..k], now);
                    moved = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(moved),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err("reading from", self.peer, e)),
            }
        }
    }

    /// Does what the machine asks; whether it asked anything, and the comm's parts once
    /// connected. A failure is returned after the machine's last bytes (a `Reject`) were
    /// offered to the socket.
    fn act(&mut self) -> Result<(bool, Option<Ready>)> {
        let mut acted = false;
        while let Some(ev) = self.hs.poll_event() {
            acted = true;
            match ev {
                Event::NeedLocalMeta { peer, layout } => {
                    let local = self.receiver_resources(&peer, layout)?;
                    self.hs.local_meta(local);
                }
                Event::PeerMeta(peer) => {
                    self.connect_qps(&peer)?;
                    self.hs.qps_connected();
                }
                Event::Connected => return Ok((true, Some(self.ready()?))),
                Event::Failed(e) => {
                    self.send_last_words();
                    return Err(e.into());
                }
            }
        }
        Ok((acted, None))
    }

    /// Offers what the failed machine still has to say (a `Reject`) without waiting for it.
    fn send_last_words(&mut self) {
        while let Some(bytes) = self.hs.poll_transmit() {
            match (&self.sock).write(bytes) {
                Ok(k) if k > 0 => self.hs.advance(k, Duration::ZERO),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                _ => return,
            }
        }
    }

    /// Accepting side: its QPs (in the layout the machine computed, with the traffic class and
    /// service level the connecting side chose, and `NCCL_IB_FIFO_TC`) and protocol regions.
    fn receiver_resources(&mut self, peer: &QpMeta, layout: QpLayout) -> Result<LocalSide> {
        let cfg = &plugin::get()?.config;
        let ep = Endpoint::new(self.dev, layout, Role::Receiving, peer.path, cfg.fifo_tc)?;
        let pds = ep.pds();
        let cts_stage = RegBuf::new(&pds, FIFO_BYTES, access::STAGING)?;
        let sizes = RegBuf::new(&pds, SIZES_BYTES, access::PEER_WRITTEN)?;
        // The connecting side's ECE first: the answer then says what both support.
        ep.set_peer_eces(&peer.eces)?;
        let local = local_side(&ep, &sizes)?;
        self.res = Resources::Receiver {
            ep,
            mem: ReceiverMem {
                cts_stage,
                sizes,
                peer_fifo: (peer.mr_addr, peer_keys(peer)),
            },
            flush: Vec::new(),
        };
        Ok(local)
    }

    /// Either side: QPs to RTS against the peer's; the receiver also makes its flush QPs.
    fn connect_qps(&mut self, peer: &QpMeta) -> Result<()> {
        match &mut self.res {
            Resources::Sender { ep, mem, .. } => {
                // The accepting side's answer: the options both support.
                ep.set_peer_eces(&peer.eces)?;
                ep.connect_qps(peer)?;
                mem.peer_sizes = (peer.mr_addr, peer_keys(peer));
            }
            Resources::Receiver { ep, flush, .. } => {
                ep.connect_qps(peer)?;
                let cfg = &plugin::get()?.config;
                let gdr_flush =
                    self.dev.members.iter().any(|m| m.gdr.is_on()) && !cfg.gdr_flush_disable;
                if gdr_flush || cfg.flush_host {
                    *flush = ep.flush_qps()?;
                }
            }
            Resources::None => {
                return Err(Error::Internal(
                    "handshake asked to connect QPs that were never made".into(),
                ));
            }
        }
        Ok(())
    }

    /// The comm's parts, with its protocol core.
    fn ready(&mut self) -> Result<Ready> {
        match std::mem::replace(&mut self.res, Resources::None) {
            Resources::Sender { ep, mem, oversize } => {
                let mut core = SendCore::new(ep.layout());
                configure_health(&mut core)?;
                core.set_oversize(oversize);
                core.set_plan(ep.max_write, mem.ar);
                Ok(Ready {
                    ep,
                    side: Side::Sender {
                        mem,
                        core: Mutex::new(core),
                    },
                })
            }
            Resources::Receiver { ep, mem, flush } => {
                let mut core = RecvCore::new(ep.layout());
                configure_health(&mut core)?;
                Ok(Ready {
                    ep,
                    side: Side::Receiver {
                        mem,
                        core: Mutex::new(core),
                        flush,
                        flush_host: plugin::get()?.config.flush_host,
                    },
                })
            }
            Resources::None => Err(Error::Internal(
                "handshake connected without resources".into(),
            )),
        }
    }

    /// The comm of a finished handshake; its socket stays open as the liveness signal, with
    /// TCP keepalive on.
    fn into_comm(self, r: Ready) -> CommPtr {
        let keepalive = socket2::TcpKeepalive::new()
            .with_time(KEEPALIVE_IDLE)
            .with_interval(KEEPALIVE_INTERVAL)
            .with_retries(KEEPALIVE_PROBES);
        if let Err(e) = socket2::SockRef::from(&self.sock).set_tcp_keepalive(&keepalive) {
            warn!(
                NET,
                "{}: cannot enable TCP keepalive on the connection to {}: {e}; a peer host that vanishes without closing it will not be detected",
                self.dev.label(),
                self.peer
            );
        }
        Comm::create(r.ep, r.side, self.sock, self.peer)
    }

    fn timed_out(&self) -> bool {
        matches!(self.hs.failure(), Some(HandshakeError::TimedOut { .. }))
    }
}

/// `listen`: binds, fills the handle (with the device's member count, which the connecting
/// side needs to create its QPs).
pub fn listen(dev_index: i32, handle_out: &mut [u8; HANDLE_SIZE]) -> Result<Box<ListenComm>> {
    let dev = vnic::get(dev_index)?;
    let cfg = &plugin::get()?.config;
    let (ip, why) = oob::listen_ip(
        dev.first().netdev.as_deref(),
        &oob::interfaces(),
        cfg.socket_ifname.as_deref(),
    );
    let listener = TcpListener::bind(SocketAddr::new(ip, 0)).map_err(|e| {
        Error::System(format!(
            "{}: cannot listen on {ip} ({why}): {e}",
            dev.label()
        ))
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::System(format!("listener: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::System(format!("listener: {e}")))?;
    let secret = random_secret()?;
    *handle_out = handle::encode(addr, secret);
    handle::set_devs(handle_out, dev.members.len());
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| info!(INIT | NET, "out-of-band connections on {ip} ({why})"));
    Ok(Box::new(ListenComm {
        magic: ObjectKind::ListenComm.magic(),
        dev,
        listener,
        addr,
        secret,
        pending: Mutex::new(Pending::default()),
    }))
}

/// A listener's secret from the kernel's random generator.
fn random_secret() -> Result<[u8; SECRET_SIZE]> {
    let mut s = [0u8; SECRET_SIZE];
    let mut filled = 0;
    while filled < SECRET_SIZE {
        // The system call rather than glibc's getrandom(): that wrapper is glibc 2.25, and the
        // plugin must load with glibc 2.17 (the portable build's symbol baseline).
        // SAFETY: writes at most SECRET_SIZE - filled bytes into the rest of `s`.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getrandom,
                s[filled..].as_mut_ptr(),
                SECRET_SIZE - filled,
                0,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return Err(Error::System(format!(
                "getrandom for the listen secret: {e}"
            )));
        }
        filled += n as usize;
    }
    Ok(s)
}

static CONNECTS: OnceLock<Mutex<HashMap<u64, Setup>>> = OnceLock::new();
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

fn connects() -> MutexGuard<'static, HashMap<u64, Setup>> {
    let m = CONNECTS.get_or_init(|| Mutex::new(HashMap::new()));
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts a connection to the listener named by the handle: QPs (for both sides' member
/// devices), FIFO, then the socket.
fn start_connect(
    dev_index: i32,
    h: &[u8; HANDLE_SIZE],
    traffic_class: Option<u8>,
    oversize: Oversize,
    now: Duration,
) -> Result<Setup> {
    let dev = vnic::get(dev_index)?;
    let addr = handle::decode(h).map_err(|e| Error::Argument(e.to_string()))?;
    let remote_devs = handle::devs(h).map_err(|e| Error::Argument(e.to_string()))?;
    let cfg = &plugin::get()?.config;
    let layout = hs::checks::connector_layout(settings()?, dev.members.len(), remote_devs)
        .map_err(|e| Error::from(e).prefixed(&dev.label()))?;
    // The QPs and regions first, then the TCP connect: the listener sees the connection only
    // when `Connect` can follow at once (its secret's deadline runs from then), and a side that
    // cannot make its QPs leaves no half-open connection behind.
    // This side decides the connection's traffic class and service level; the accepting side
    // builds its QPs with them.
    let path = QpPath::choose(cfg.traffic_class, cfg.service_level, traffic_class);
    let ep = Endpoint::new(dev, layout, Role::Sending, path, None)?;
    let pds = ep.pds();
    let fifo = RegBuf::new(&pds, FIFO_BYTES, access::PEER_WRITTEN)?;
    let sizes_stage = RegBuf::new(&pds, SIZES_BYTES, access::STAGING)?;
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )
    .map_err(|e| Error::System(format!("socket: {e}")))?;
    sock.set_nonblocking(true)
        .map_err(|e| Error::System(format!("socket: {e}")))?;
    let _ = sock.set_nodelay(true);
    match sock.connect(&addr.into()) {
        Ok(()) => {}
        Err(e)
            if e.raw_os_error() == Some(libc::EINPROGRESS) || e.kind() == ErrorKind::WouldBlock => {
        }
        Err(e) => return Err(Error::System(format!("cannot connect to {addr}: {e}"))),
    }
    let machine = Handshake::connector(
        local_side(&ep, &fifo)?,
        handle::secret(h),
        addr.to_string(),
        now,
    );
    Ok(Setup {
        sock: sock.into(),
        peer: addr,
        dev,
        hs: machine,
        res: Resources::Sender {
            ep,
            mem: SenderMem {
                fifo,
                sizes_stage,
                peer_sizes: (0, [0; MAX_DEVS]),
                ar: cfg.adaptive_routing(dev.first().link_layer.is_ethernet()),
                scratch: Mutex::new(SendScratch::default()),
            },
            oversize,
        },
    })
}

/// Drops connects whose caller stopped calling (they made no progress for the handshake
/// bound), so an abandoned connect does not keep its socket and QPs forever; one call per
/// [`SWEEP_INTERVAL`] does it, so that a `connect` call stays O(1) in the connects in progress.
fn reap_abandoned_connects(now: Duration) {
    static PACER: SweepPacer = SweepPacer::new();
    if !PACER.due(now) {
        return;
    }
    connects().retain(|_, p| {
        p.hs.handle_timeout(now);
        if !p.timed_out() {
            return true;
        }
        warn!(
            NET,
            "{}: dropping an abandoned connect to {}: no progress for {} s",
            p.dev.label(),
            p.peer,
            HANDSHAKE_TIMEOUT.as_secs()
        );
        false
    });
}

/// `connect`: starts or continues; `Ok(None)` means "call again". `traffic_class` (the
/// communicator's, v10+) is the connection's traffic class and service level where
/// `NCCL_IB_TC` / `NCCL_IB_SL` are not set ([`QpPath::choose`]); it is read when the connection
/// starts (NCCL passes the same config on every retry). `oversize` is what the
/// comm does with a send larger than its buffer: the rule of the ABI version `connect` was
/// called through (v7 refuses, later versions truncate).
pub fn connect(
    dev_index: i32,
    h: &mut [u8; HANDLE_SIZE],
    traffic_class: Option<u8>,
    oversize: Oversize,
) -> Result<Option<CommPtr>> {
    let now = now();
    reap_abandoned_connects(now);
    let token = handle::token(h);
    let mut p = if token == 0 {
        start_connect(dev_index, h, traffic_class, oversize, now)?
    } else {
        connects().remove(&token).ok_or_else(|| {
            Error::Argument(format!("connect handle carries unknown progress token {token:#x}: the handle is corrupt or was reused"))
        })?
    };
    match p.drive(now) {
        Ok(Some(ready)) => {
            handle::set_token(h, 0);
            Ok(Some(p.into_comm(ready)))
        }
        Ok(None) => {
            let t = if token == 0 {
                NEXT_TOKEN.fetch_add(1, Ordering::Relaxed)
            } else {
                token
            };
            handle::set_token(h, t);
            connects().insert(t, p);
            Ok(None)
        }
        Err(e) => {
            handle::set_token(h, 0);
            Err(e)
        }
    }
}

impl ListenComm {
    /// `accept`: advances the pending connections (oldest first), then accepts new TCP
    /// connections; returns the first that is ready. A stray or garbage connection is dropped
    /// and never blocks the others; a failing `accept` is reported and retried at a later call.
    pub fn accept(&self) -> Result<Option<CommPtr>> {
        let now = now();
        let settings = settings()?;
        let mut pending = self
            .pending
            .lock()
            .map_err(|_| Error::Internal("listen comm poisoned".into()))?;
        let p = &mut *pending;
        // The connections already here first: a real peer's `Connect` that has arrived is read
        // before newcomers could crowd it out.
        let mut i = 0;
        while i < p.setups.len() {
            match p.setups[i].drive(now) {
                Ok(Some(ready)) => {
                    let s = p.setups.remove(i);
                    return Ok(Some(s.into_comm(ready)));
                }
                Ok(None) => i += 1,
                Err(e) => {
                    let s = p.setups.remove(i);
                    self.dropping(p, &s, &e.to_string(), now);
                }
            }
        }
        for _ in 0..ACCEPTS_PER_CALL {
            match self.listener.accept() {
                Ok((sock, peer)) => {
                    if sock.set_nonblocking(true).is_err() {
                        continue;
                    }
                    let _ = sock.set_nodelay(true);
                    // Its own time: the secret's deadline runs from now, not from the start of
                    // a call that may have taken many connections before this one.
                    let now = self::now();
                    let mut s = Setup {
                        sock,
                        peer,
                        dev: self.dev,
                        hs: Handshake::acceptor(
                            self.secret,
                            settings,
                            self.dev.members.len(),
                            peer.to_string(),
                            now,
                        ),
                        res: Resources::None,
                    };
                    // What it already sent is read at once: a real peer stops being a stranger.
                    match s.drive(now) {
                        Ok(Some(ready)) => return Ok(Some(s.into_comm(ready))),
                        Ok(None) => p.setups.push(s),
                        Err(e) => self.dropping(p, &s, &e.to_string(), now),
                    }
                    self.evict(p, now);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    self.accept_failed(p, &e, now);
                    // A connection that went away before it was taken costs only itself; other
                    // failures (no file descriptors or memory left) wait for a later call.
                    if !matches!(e.raw_os_error(), Some(libc::ECONNABORTED | libc::EPROTO)) {
                        break;
                    }
                }
            }
        }
        self.report_due(p, now);
        Ok(None)
    }

    /// Drops the oldest strangers while there are more than [`MAX_STRANGERS`].
    fn evict(&self, p: &mut Pending, now: Duration) {
        while let Some(i) = strangers::eviction(&p.setups, |s| s.hs.is_stranger()) {
            let s = p.setups.remove(i);
            let why = format!(
                "it was the oldest of more than {MAX_STRANGERS} connections that have not presented the listen secret"
            );
            self.dropping(p, &s, &why, now);
        }
    }

    /// Reports a dropped connection (its socket closes when `s` goes): a stranger's drop in the
    /// listener's tally (one line per interval), a real peer's failure in a line of its own.
    fn dropping(&self, p: &mut Pending, s: &Setup, why: &str, now: Duration) {
        if !s.hs.is_stranger() {
            if s.timed_out() {
                warn!(NET, "{}: dropping {why}", self.dev.label());
            } else {
                warn!(
                    NET,
                    "{}: dropping incoming connection from {} on {}: {why}",
                    self.dev.label(),
                    s.peer,
                    self.addr
                );
            }
            return;
        }
        p.last_dropped = format!("from {}: {why}", s.peer);
        if let Some(r) = p.dropped.record(now) {
            self.report_dropped(r, &p.last_dropped);
        }
    }

    fn report_dropped(&self, r: Report, latest: &str) {
        warn!(
            NET,
            "{}: dropped {} on {} that did not present the listen secret ({} since listening); the latest {latest}",
            self.dev.label(),
            connections(r.count),
            self.addr,
            r.total
        );
    }

    fn accept_failed(&self, p: &mut Pending, e: &std::io::Error, now: Duration) {
        p.last_accept_error = e.to_string();
        if let Some(r) = p.accept_failed.record(now) {
            self.report_accept_failed(r, &p.last_accept_error);
        }
    }

    fn report_accept_failed(&self, r: Report, latest: &str) {
        warn!(
            NET,
            "{}: accept on {} failed {} ({} since listening), the latest with: {latest}; connections waiting are taken at a later call",
            self.dev.label(),
            self.addr,
            times(r.count),
            r.total
        );
    }

    /// The summary lines whose interval has passed.
    fn report_due(&self, p: &mut Pending, now: Duration) {
        if let Some(r) = p.dropped.poll(now) {
            self.report_dropped(r, &p.last_dropped);
        }
        if let Some(r) = p.accept_failed.poll(now) {
            self.report_accept_failed(r, &p.last_accept_error);
        }
    }
}

/// Closing a listener reports what its summaries have not said yet.
impl Drop for ListenComm {
    fn drop(&mut self) {
        let p = self.pending.get_mut().unwrap_or_else(|e| e.into_inner());
        let (dropped, failed) = (p.dropped.flush(), p.accept_failed.flush());
        let (last_dropped, last_error) = (
            std::mem::take(&mut p.last_dropped),
            std::mem::take(&mut p.last_accept_error),
        );
        if let Some(r) = dropped {
            self.report_dropped(r, &last_dropped);
        }
        if let Some(r) = failed {
            self.report_accept_failed(r, &last_error);
        }
    }
}

fn connections(n: u64) -> String {
    if n == 1 {
        "1 connection".into()
    } else {
        format!("{n} connections")
    }
}

fn times(n: u64) -> String {
    if n == 1 {
        "once".into()
    } else {
        format!("{n} times")
    }
}
