//! Connection setup without blocking: `listen`, `connect` and `accept`.
//!
//! Each connection being set up is a [`Handshake`] whose [`Stage`] carries exactly what that
//! stage needs. The connecting side: TCP connect, write `Connect` (its QPs and CTS FIFO), read
//! `Accept` (or `Reject`), bring its QPs to RTS, write `Ready`. The accepting side: read
//! `Connect`, check the settings that must agree, create and connect its QPs, write `Accept`,
//! read `Ready`. Every call advances as far as the socket allows and returns; NCCL calls again.
//! `connect`'s progress is kept in a registry keyed by a token written into the handle.

use super::comm::{Comm, CommPtr, ReceiverMem, SendScratch, SenderMem, Side};
use super::endpoint::{Endpoint, FlushQp, RegBuf};
use super::handles::ObjectKind;
use crate::error::{Error, Result};
use crate::plugin;
use crate::vnic::{self, VDevice};
use crate::{info, oob, warn};
use ferro_ffi::log_flags::{INIT, NET};
use ferro_proto::comm::CommHealth;
use ferro_proto::comm::recv::RecvCore;
use ferro_proto::comm::send::SendCore;
use ferro_proto::fifo::{FIFO_BYTES, SIZES_BYTES};
use ferro_proto::handle::{self, HANDLE_SIZE, SECRET_SIZE};
use ferro_proto::plan::QpLayout;
use ferro_proto::wire::{self, Msg, QpMeta, Reader};
use ferro_proto::{Keys, MAX_QPS};
use ferro_verbs::sys::*;
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// A handshake that makes no progress for this long is abandoned.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(120);

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
    pending: Mutex<Vec<Handshake>>,
}

/// The connecting (sending) side's resources while it is set up.
#[derive(Debug)]
struct SenderSetup {
    ep: Endpoint,
    mem: SenderMem,
    /// The listener's secret, from the handle.
    secret: [u8; SECRET_SIZE],
}

/// The accepting (receiving) side's resources while it is set up.
#[derive(Debug)]
struct ReceiverSetup {
    ep: Endpoint,
    mem: ReceiverMem,
    flush: Vec<FlushQp>,
}

/// Bytes being written to the peer.
#[derive(Debug)]
struct Outgoing {
    bytes: Vec<u8>,
    pos: usize,
}

impl Outgoing {
    fn new(msg: &Msg) -> Outgoing {
        Outgoing {
            bytes: wire::encode(msg),
            pos: 0,
        }
    }
}

/// Where a connection being set up stands.
#[derive(Debug)]
enum Stage {
    /// Connecting side: the TCP connect is in progress.
    TcpConnect(SenderSetup),
    /// Connecting side: writing `Connect`.
    WriteConnect(SenderSetup, Outgoing),
    /// Connecting side: reading `Accept` or `Reject`.
    ReadAccept(SenderSetup),
    /// Connecting side: writing `Ready`; the comm is ready once it is written.
    WriteReady(SenderSetup, Outgoing),
    /// Accepting side: reading `Connect`, which must carry the listener's secret.
    ReadConnect([u8; SECRET_SIZE]),
    /// Accepting side: writing `Accept`.
    WriteAccept(ReceiverSetup, Outgoing),
    /// Accepting side: reading `Ready`; the comm is ready when it arrives.
    ReadReady(ReceiverSetup),
    /// Only while a stage is being advanced (or after a failure).
    Gone,
}

/// What advancing one stage gave.
enum Step {
    /// Moved on: advance the next stage at once.
    Next(Stage),
    /// The socket has nothing more for now.
    Blocked(Stage),
    Connected(Box<Ready>),
}

/// A side whose handshake finished: what its comm is made of, with the handshake's socket.
#[derive(Debug)]
struct Ready {
    ep: Endpoint,
    side: Side,
}

/// One connection being set up (either side).
#[derive(Debug)]
struct Handshake {
    sock: TcpStream,
    peer: SocketAddr,
    dev: &'static VDevice,
    reader: Reader,
    last_progress: Instant,
    stage: Stage,
}

/// The fault policy's settings of a new comm: `FERRO_STALL_WARN_S` as its stall threshold (zero:
/// the watchdog is off) and `NCCL_IB_RETURN_ASYNC_EVENTS` (whether device events fail it).
fn configure_health(health: &mut CommHealth) -> Result<()> {
    let config = &plugin::get()?.config;
    health.set_stall_threshold(Duration::from_secs(u64::from(config.stall_warn_s)));
    health.set_return_async_events(config.return_async_events);
    Ok(())
}

fn io_err(what: &str, peer: SocketAddr, e: std::io::Error) -> Error {
    Error::Remote(format!("{what} {peer}: {e}"))
}

impl Handshake {
    fn new(sock: TcpStream, peer: SocketAddr, dev: &'static VDevice, stage: Stage) -> Handshake {
        Handshake {
            sock,
            peer,
            dev,
            reader: Reader::new(),
            last_progress: Instant::now(),
            stage,
        }
    }

    /// Advances as far as possible without blocking; `Some` when connected.
    fn progress(&mut self) -> Result<Option<Box<Ready>>> {
        loop {
            let stage = std::mem::replace(&mut self.stage, Stage::Gone);
            match self.step(stage)? {
                Step::Next(s) => self.stage = s,
                Step::Blocked(s) => {
                    self.stage = s;
                    return Ok(None);
                }
                Step::Connected(c) => return Ok(Some(c)),
            }
        }
    }

    fn stalled(&self) -> bool {
        self.last_progress.elapsed() > HANDSHAKE_TIMEOUT
    }

    fn step(&mut self, stage: Stage) -> Result<Step> {
        Ok(match stage {
            Stage::TcpConnect(setup) => {
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
                    return Ok(Step::Blocked(Stage::TcpConnect(setup)));
                }
                self.last_progress = Instant::now();
                let lay = setup.ep.layout;
                let mut meta = setup
                    .ep
                    .meta(&setup.mem.fifo, lay.qps_per_conn() as u16, lay.split);
                meta.secret = setup.secret;
                let out = Outgoing::new(&Msg::Connect(meta));
                Step::Next(Stage::WriteConnect(setup, out))
            }
            Stage::WriteConnect(setup, mut out) => {
                if !self.write(&mut out)? {
                    return Ok(Step::Blocked(Stage::WriteConnect(setup, out)));
                }
                Step::Next(Stage::ReadAccept(setup))
            }
            Stage::ReadAccept(mut setup) => match self.read()? {
                None => Step::Blocked(Stage::ReadAccept(setup)),
                Some(Msg::Accept(meta)) => {
                    check_link_layers(&setup.ep, &meta, self.peer)?;
                    setup.ep.connect_qps(&meta)?;
                    setup.mem.peer_sizes = (meta.mr_addr, peer_keys(&meta));
                    Step::Next(Stage::WriteReady(setup, Outgoing::new(&Msg::Ready)))
                }
                Some(m) => return Err(self.unexpected(m)),
            },
            Stage::WriteReady(setup, mut out) => {
                if !self.write(&mut out)? {
                    return Ok(Step::Blocked(Stage::WriteReady(setup, out)));
                }
                let SenderSetup { ep, mem, .. } = setup;
                let mut core = SendCore::new(ep.layout);
                configure_health(&mut core.health)?;
                Step::Connected(Box::new(Ready {
                    ep,
                    side: Side::Sender {
                        mem,
                        core: Mutex::new(core),
                    },
                }))
            }
            Stage::ReadConnect(secret) => match self.read()? {
                None => Step::Blocked(Stage::ReadConnect(secret)),
                Some(Msg::Connect(meta)) => {
                    if !handle::secrets_match(&meta.secret, &secret) {
                        return Err(Error::Remote(format!(
                            "{} presented a wrong listen secret: it does not hold this listener's handle (a stray or hostile client, or a handle from another job); refused",
                            self.peer
                        )));
                    }
                    let setup = self.receiver_setup(&meta)?;
                    let lay = setup.ep.layout;
                    let out = Outgoing::new(&Msg::Accept(setup.ep.meta(
                        &setup.mem.sizes,
                        lay.qps_per_conn() as u16,
                        lay.split,
                    )));
                    Step::Next(Stage::WriteAccept(setup, out))
                }
                Some(m) => return Err(self.unexpected(m)),
            },
            Stage::WriteAccept(setup, mut out) => {
                if !self.write(&mut out)? {
                    return Ok(Step::Blocked(Stage::WriteAccept(setup, out)));
                }
                Step::Next(Stage::ReadReady(setup))
            }
            Stage::ReadReady(setup) => match self.read()? {
                None => Step::Blocked(Stage::ReadReady(setup)),
                Some(Msg::Ready) => {
                    let ReceiverSetup { ep, mem, flush } = setup;
                    let mut core = RecvCore::new(ep.layout);
                    configure_health(&mut core.health)?;
                    Step::Connected(Box::new(Ready {
                        ep,
                        side: Side::Receiver {
                            mem,
                            core: Mutex::new(core),
                            flush,
                        },
                    }))
                }
                Some(m) => return Err(self.unexpected(m)),
            },
            Stage::Gone => {
                return Err(Error::Internal("handshake advanced after it failed".into()));
            }
        })
    }

    /// The accepting side's checks and resources for the connecting side's `Connect`.
    fn receiver_setup(&self, meta: &QpMeta) -> Result<ReceiverSetup> {
        let cfg = &plugin::get()?.config;
        let split = cfg.split_data_on_qps;
        let reject = |why: String| {
            let _ = (&self.sock).write_all(&wire::encode(&Msg::Reject(why.clone())));
            Error::Usage(why)
        };
        if meta.qps_per_conn != cfg.qps_per_connection || meta.split != split {
            return Err(reject(format!(
                "settings differ between ranks: NCCL_IB_QPS_PER_CONNECTION {} here vs {} at {}, NCCL_IB_SPLIT_DATA_ON_QPS {} here vs {} there",
                cfg.qps_per_connection,
                meta.qps_per_conn,
                self.peer,
                u8::from(split),
                u8::from(meta.split)
            )));
        }
        let layout = QpLayout::new(
            usize::from(cfg.qps_per_connection),
            split,
            self.dev.members.len(),
            meta.devs.len(),
        );
        if meta.qpns.len() != layout.nqps {
            return Err(reject(format!(
                "{} sent {} QPs for its {} devices; {} expected for {} x max({}, {} devices here)",
                self.peer,
                meta.qpns.len(),
                meta.devs.len(),
                layout.nqps,
                cfg.qps_per_connection,
                meta.devs.len(),
                self.dev.members.len()
            )));
        }
        let ep = Endpoint::new(self.dev, layout, cfg.traffic_class)?;
        if let Err(e) = check_link_layers(&ep, meta, self.peer) {
            return Err(reject(e.to_string()));
        }
        let pds = ep.pds();
        let cts_stage = RegBuf::new(&pds, FIFO_BYTES, IBV_ACCESS_LOCAL_WRITE)?;
        let sizes = RegBuf::new(
            &pds,
            SIZES_BYTES,
            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
        )?;
        ep.connect_qps(meta)?;
        let gdr_flush = self.dev.members.iter().any(|m| m.gdr.is_on()) && !cfg.gdr_flush_disable;
        let flush = if gdr_flush || cfg.flush_host {
            ep.flush_qps()?
        } else {
            Vec::new()
        };
        Ok(ReceiverSetup {
            ep,
            mem: ReceiverMem {
                cts_stage,
                sizes,
                peer_fifo: (meta.mr_addr, peer_keys(meta)),
            },
            flush,
        })
    }

    /// The comm of a finished handshake; its socket stays open as the liveness signal, with
    /// TCP keepalive on.
    fn into_comm(self, r: Box<Ready>) -> CommPtr {
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

    fn unexpected(&self, m: Msg) -> Error {
        match m {
            Msg::Reject(why) => {
                Error::Usage(format!("peer {} refused the connection: {why}", self.peer))
            }
            m => Error::Remote(format!(
                "unexpected handshake message from {}: {m:?}",
                self.peer
            )),
        }
    }

    /// Writes what is left of `out`; `true` when all of it is written.
    fn write(&mut self, out: &mut Outgoing) -> Result<bool> {
        while out.pos < out.bytes.len() {
            match (&self.sock).write(&out.bytes[out.pos..]) {
                Ok(0) => {
                    return Err(Error::Remote(format!(
                        "peer {} closed during the handshake",
                        self.peer
                    )));
                }
                Ok(k) => {
                    out.pos += k;
                    self.last_progress = Instant::now();
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err("sending to", self.peer, e)),
            }
        }
        Ok(true)
    }

    /// The next whole message, if the socket has it.
    fn read(&mut self) -> Result<Option<Msg>> {
        loop {
            if let Some(m) = self
                .reader
                .poll()
                .map_err(|e| Error::Remote(format!("from {}: {e}", self.peer)))?
            {
                return Ok(Some(m));
            }
            let mut buf = vec![0u8; self.reader.wanted()];
            match (&self.sock).read(&mut buf) {
                Ok(0) => {
                    return Err(Error::Remote(format!(
                        "peer {} closed the connection during the handshake",
                        self.peer
                    )));
                }
                Ok(k) => {
                    self.reader.push(&buf[..k]);
                    self.last_progress = Instant::now();
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err("reading from", self.peer, e)),
            }
        }
    }
}

/// `listen`: binds, fills the handle (with the device's member count, which the connecting
/// side needs to create its QPs).
pub fn listen(dev_index: i32, handle_out: &mut [u8; HANDLE_SIZE]) -> Result<Box<ListenComm>> {
    let dev = vnic::get(dev_index)?;
    let ifname = std::env::var("NCCL_SOCKET_IFNAME").ok();
    let (ip, why) = oob::listen_ip(
        dev.first().netdev.as_deref(),
        &oob::interfaces(),
        ifname.as_deref(),
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
        pending: Mutex::new(Vec::new()),
    }))
}

/// Both sides' member devices must share one link layer (a QP joins InfiniBand to InfiniBand
/// or RoCE to RoCE).
fn check_link_layers(ep: &Endpoint, peer: &QpMeta, addr: SocketAddr) -> Result<()> {
    for r in &ep.rails {
        let mine = if r.dev.link_layer.is_ethernet() {
            IBV_LINK_LAYER_ETHERNET
        } else {
            IBV_LINK_LAYER_INFINIBAND
        };
        if let Some(d) = peer.devs.iter().find(|d| d.link_layer != mine) {
            let name = |l: u8| {
                if l == IBV_LINK_LAYER_ETHERNET {
                    "RoCE"
                } else {
                    "InfiniBand"
                }
            };
            return Err(Error::Usage(format!(
                "{}:{} is {} but a device of {addr} (port {}) is {}: the link layers of both sides must match",
                r.dev.ibdev,
                r.dev.port,
                name(mine),
                d.port,
                name(d.link_layer)
            )));
        }
    }
    Ok(())
}

/// The peer's protocol-region keys by member.
fn peer_keys(meta: &QpMeta) -> Keys {
    core::array::from_fn(|i| meta.devs.get(i).map_or(0, |d| d.mr_rkey))
}

/// A listener's secret from the kernel's random generator.
fn random_secret() -> Result<[u8; SECRET_SIZE]> {
    let mut s = [0u8; SECRET_SIZE];
    let mut filled = 0;
    while filled < SECRET_SIZE {
        // SAFETY: writes at most SECRET_SIZE - filled bytes into the rest of `s`.
        let n =
            unsafe { libc::getrandom(s[filled..].as_mut_ptr().cast(), SECRET_SIZE - filled, 0) };
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

static CONNECTS: OnceLock<Mutex<HashMap<u64, Handshake>>> = OnceLock::new();
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

fn connects() -> MutexGuard<'static, HashMap<u64, Handshake>> {
    let m = CONNECTS.get_or_init(|| Mutex::new(HashMap::new()));
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts a connection to the listener named by the handle: socket, QPs (for both sides'
/// member devices), FIFO.
fn start_connect(
    dev_index: i32,
    h: &[u8; HANDLE_SIZE],
    traffic_class: Option<u8>,
) -> Result<Handshake> {
    let dev = vnic::get(dev_index)?;
    let addr = handle::decode(h).map_err(|e| Error::Argument(e.to_string()))?;
    let remote_devs = handle::devs(h).map_err(|e| Error::Argument(e.to_string()))?;
    let cfg = &plugin::get()?.config;
    let layout = QpLayout::new(
        usize::from(cfg.qps_per_connection),
        cfg.split_data_on_qps,
        dev.members.len(),
        remote_devs,
    );
    if layout.nqps > MAX_QPS {
        return Err(Error::Usage(format!(
            "{}: NCCL_IB_QPS_PER_CONNECTION={} x {} devices (the larger side) is {} QPs, above the {MAX_QPS} a connection may have",
            dev.label(),
            cfg.qps_per_connection,
            dev.members.len().max(remote_devs),
            layout.nqps
        )));
    }
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
    let tc = traffic_class.unwrap_or(cfg.traffic_class);
    let ep = Endpoint::new(dev, layout, tc)?;
    let pds = ep.pds();
    let fifo = RegBuf::new(
        &pds,
        FIFO_BYTES,
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
    )?;
    let sizes_stage = RegBuf::new(&pds, SIZES_BYTES, IBV_ACCESS_LOCAL_WRITE)?;
    let setup = SenderSetup {
        ep,
        mem: SenderMem {
            fifo,
            sizes_stage,
            peer_sizes: (0, [0; ferro_proto::MAX_DEVS]),
            scratch: Mutex::new(SendScratch::default()),
        },
        secret: handle::secret(h),
    };
    Ok(Handshake::new(
        sock.into(),
        addr,
        dev,
        Stage::TcpConnect(setup),
    ))
}

/// Drops connects whose caller stopped calling (they made no progress for the handshake
/// bound), so an abandoned connect does not keep its socket and QPs forever.
fn reap_abandoned_connects() {
    connects().retain(|_, p| {
        if !p.stalled() {
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
/// communicator's, v10+) replaces `NCCL_IB_TC` for this connection's QPs; it is read when the
/// connection starts (NCCL passes the same config on every retry).
pub fn connect(
    dev_index: i32,
    h: &mut [u8; HANDLE_SIZE],
    traffic_class: Option<u8>,
) -> Result<Option<CommPtr>> {
    reap_abandoned_connects();
    let token = handle::token(h);
    let mut p = if token == 0 {
        start_connect(dev_index, h, traffic_class)?
    } else {
        connects().remove(&token).ok_or_else(|| {
            Error::Argument(format!("connect handle carries unknown progress token {token:#x}: the handle is corrupt or was reused"))
        })?
    };
    match p.progress() {
        Ok(Some(ready)) => {
            handle::set_token(h, 0);
            Ok(Some(p.into_comm(ready)))
        }
        Ok(None) if p.stalled() => {
            handle::set_token(h, 0);
            Err(Error::Remote(format!(
                "connecting to {}: no progress for {} s",
                p.peer,
                HANDSHAKE_TIMEOUT.as_secs()
            )))
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
    /// `accept`: accepts new TCP connections and advances all pending ones; returns the first
    /// that is ready. A stray or garbage connection is dropped with a warning and never blocks
    /// the others.
    pub fn accept(&self) -> Result<Option<CommPtr>> {
        let mut pending = self
            .pending
            .lock()
            .map_err(|_| Error::Internal("listen comm poisoned".into()))?;
        loop {
            match self.listener.accept() {
                Ok((sock, peer)) => {
                    if sock.set_nonblocking(true).is_err() {
                        continue;
                    }
                    let _ = sock.set_nodelay(true);
                    pending.push(Handshake::new(
                        sock,
                        peer,
                        self.dev,
                        Stage::ReadConnect(self.secret),
                    ));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::System(format!("accept on {}: {e}", self.addr))),
            }
        }
        let mut i = 0;
        while i < pending.len() {
            match pending[i].progress() {
                Ok(Some(ready)) => {
                    let p = pending.swap_remove(i);
                    return Ok(Some(p.into_comm(ready)));
                }
                Ok(None) if pending[i].stalled() => {
                    let p = pending.swap_remove(i);
                    warn!(
                        NET,
                        "{}: dropping connection from {}: no handshake progress for {} s",
                        self.dev.label(),
                        p.peer,
                        HANDSHAKE_TIMEOUT.as_secs()
                    );
                }
                Ok(None) => i += 1,
                Err(e) => {
                    let p = pending.swap_remove(i);
                    warn!(
                        NET,
                        "{}: dropping incoming connection from {} on {}: {e}",
                        self.dev.label(),
                        p.peer,
                        self.addr
                    );
                }
            }
        }
        Ok(None)
    }
}
