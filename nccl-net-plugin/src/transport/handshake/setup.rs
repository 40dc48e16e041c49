//! One connection being set up, either side: its socket, its handshake machine driven as far as
//! the socket allows, the verbs resources the machine asks for, and the comm it becomes.

use super::{configure_health, io_err, local_side, peer_keys};
use crate::error::{Error, Result};
use crate::plugin;
use crate::transport::access;
use crate::transport::comm::{Comm, CommPtr, ReceiverMem, SenderMem, Side};
use crate::transport::endpoint::{Endpoint, FlushQp, RegBuf, Role};
use crate::transport::lock::CoreLock;
use crate::vnic::VDevice;
use crate::{info, warn};
use ferro_ffi::log_flags::NET;
use ferro_proto::comm::recv::RecvCore;
use ferro_proto::comm::send::{Oversize, SendCore};
use ferro_proto::fifo::{FIFO_BYTES, SIZES_BYTES};
use ferro_proto::handshake::{Event, Handshake, HandshakeError, LocalSide, Stage};
use ferro_proto::plan::QpLayout;
use ferro_proto::qp_retry::{ConnectProgress, Next};
use ferro_proto::route;
use ferro_proto::wire::QpMeta;
use ferro_verbs::sys::IBV_LINK_LAYER_ETHERNET;
use std::io::{ErrorKind, Read, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// TCP keepalive on a comm's out-of-band connection, so that a peer host that vanished without
/// closing it (power loss, a partitioned network) is noticed too: the first probe after this
/// much silence, then one every [`KEEPALIVE_INTERVAL`], and the connection fails after
/// [`KEEPALIVE_PROBES`] unanswered ones: at most 10 + 6 x 5 = 40 s after the peer went silent.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_PROBES: u32 = 6;

/// The verbs resources of a side being set up, as far as the handshake got.
#[derive(Debug)]
pub(super) enum Resources {
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
pub(super) struct Ready {
    ep: Endpoint,
    side: Side,
}

/// One connection being set up (either side): its socket, its machine, its resources.
#[derive(Debug)]
pub(super) struct Setup {
    pub(super) sock: TcpStream,
    pub(super) peer: SocketAddr,
    pub(super) dev: &'static VDevice,
    pub(super) hs: Handshake,
    pub(super) res: Resources,
    /// This side's QPs being connected to the peer's, between [`Event::PeerMeta`] and the
    /// machine being told they are.
    pub(super) qps: Option<QpConnect>,
}

/// The peer's QPs and how far this side's QPs got in connecting to them.
#[derive(Debug)]
pub(super) struct QpConnect {
    peer: QpMeta,
    progress: ConnectProgress,
}

impl Setup {
    /// Advances as far as the socket allows; `Some` when connected. An accepting side whose
    /// own setup fails after the peer presented the secret tells the peer why (a `Reject`,
    /// offered without waiting), so that the peer fails naming the cause rather than dialling
    /// again as a dropped stranger would.
    pub(super) fn drive(&mut self, now: Duration) -> Result<Option<Box<Ready>>> {
        let r = self.drive_as_far(now);
        if let Err(e) = &r
            && !self.hs.is_finished()
        {
            self.hs.abandon(&e.to_string());
            self.send_last_words();
        }
        r
    }

    fn drive_as_far(&mut self, now: Duration) -> Result<Option<Box<Ready>>> {
        loop {
            let mut moved = self.poll_tcp(now)?;
            moved |= self.write(now)?;
            moved |= self.read(now)?;
            let (mut acted, ready) = self.act()?;
            if ready.is_some() {
                return Ok(ready);
            }
            acted |= self.connect_qps(now)?;
            let (more, ready) = self.act()?;
            acted |= more;
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
            if self.hs.redials() > 0 {
                // It accepted this side before: the peer (or its listener) is gone since.
                return Err(Error::Remote(format!(
                    "cannot connect to {} again after it dropped the connection before answering (connection {}): {e} (did the peer process exit?)",
                    self.peer,
                    self.hs.redials() + 1
                )));
            }
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
        #[cfg(feature = "test-faults")]
        if self.hs.stage() == Stage::SendConnect
            && self.hs.redials() == 0
            && crate::transport::faults::connect_held(self.hs.started(), now)
        {
            return Ok(false);
        }
        let mut moved = false;
        while let Some(bytes) = self.hs.poll_transmit() {
            match (&self.sock).write(bytes) {
                Ok(0) => {
                    if self.redial(now, "closed the connection")? {
                        return Ok(true);
                    }
                    self.hs.peer_closed();
                }
                Ok(k) => {
                    self.hs.advance(k, now);
                    moved = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e)
                    if dropped(&e)
                        && self.redial(now, &format!("dropped the connection ({e})"))? =>
                {
                    return Ok(true);
                }
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
                Ok(0) => {
                    if self.redial(now, "closed the connection")? {
                        return Ok(true);
                    }
                    self.hs.peer_closed();
                }
                Ok(k) => {
                    self.hs.handle_bytes(&buf[..k], now);
                    moved = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(moved),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e)
                    if dropped(&e)
                        && self.redial(now, &format!("dropped the connection ({e})"))? =>
                {
                    return Ok(true);
                }
                Err(e) => return Err(io_err("reading from", self.peer, e)),
            }
        }
    }

    /// Connecting side: replaces a connection the listener closed or reset (`how`) before
    /// answering by a new TCP connect, when the machine allows it ([`Handshake::may_redial`]);
    /// whether it did. Logged as a WARN: the listener dropped this side as a stranger (it had
    /// not presented the secret within the deadline, this process stalled, or a flood of
    /// strangers pushed it out).
    fn redial(&mut self, now: Duration, how: &str) -> Result<bool> {
        if !self.hs.may_redial() {
            return Ok(false);
        }
        let stage = self.hs.stage();
        let sock = super::dial(self.peer)?;
        let n = self.hs.redial(now);
        warn!(
            NET,
            "{}: the listener at {} {how} before answering, {stage}, {:.1} s after this connect started (a listener drops a connection that has not presented its secret within {} s or that a flood of strangers pushed out): connecting again (connection {n} of {})",
            self.dev.label(),
            self.peer,
            now.saturating_sub(self.hs.started()).as_secs_f64(),
            ferro_proto::handshake::SECRET_DEADLINE.as_secs(),
            ferro_proto::handshake::REDIALS_MAX + 1
        );
        self.sock = sock;
        Ok(true)
    }

    /// Does what the machine asks; whether it asked anything, and the comm's parts once
    /// connected. A failure is returned after the machine's last bytes (a `Reject`) were
    /// offered to the socket.
    fn act(&mut self) -> Result<(bool, Option<Box<Ready>>)> {
        let mut acted = false;
        while let Some(ev) = self.hs.poll_event() {
            acted = true;
            match ev {
                Event::NeedLocalMeta { peer, layout } => {
                    let local = self.receiver_resources(&peer, layout)?;
                    self.hs.local_meta(local);
                }
                Event::PeerMeta(peer) => self.begin_qps(peer)?,
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
        if cfg.subnet_aware_routing {
            let gids: Vec<[u8; 16]> = peer
                .devs
                .iter()
                .filter(|d| d.link_layer == IBV_LINK_LAYER_ETHERNET)
                .map(|d| d.gid)
                .collect();
            self.dev = super::on_peer_subnet(self.dev, &gids, Some(self.dev.members.len()))?;
        }
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

    /// Either side, once the peer's QPs are known: checks them against this side's (the
    /// connecting side first sets the accepting side's ECE answer, the options both support)
    /// and starts connecting this side's QPs to them, one state change at a time
    /// ([`Self::connect_qps`]).
    fn begin_qps(&mut self, peer: QpMeta) -> Result<()> {
        let ep = match &self.res {
            Resources::Sender { ep, .. } => {
                ep.set_peer_eces(&peer.eces)?;
                ep
            }
            Resources::Receiver { ep, .. } => ep,
            Resources::None => {
                return Err(Error::Internal(
                    "handshake asked to connect QPs that were never made".into(),
                ));
            }
        };
        ep.begin_connect(&peer)?;
        let cfg = &plugin::get()?.config;
        if cfg.warn_rail_local && route::leaves_rails(self.dev.members.len(), peer.devs.len()) {
            info!(
                NET,
                "{}: the peer {} has {} member device{} and this side {}: QPs of several members share one member of the other side, so traffic leaves its rail; to silence this, set NCCL_IB_WARN_RAIL_LOCAL=0",
                self.dev.label(),
                self.peer,
                peer.devs.len(),
                if peer.devs.len() == 1 { "" } else { "s" },
                self.dev.members.len()
            );
        }
        self.qps = Some(QpConnect {
            progress: ConnectProgress::new(ep.nqps()),
            peer,
        });
        Ok(())
    }

    /// Either side: makes the state changes of its QPs that are due at `now` (INIT -> RTR ->
    /// RTS, QP by QP), retrying one that failed with what `NCCL_IB_MQP_RETRY_*` retries once its
    /// time has come (the calls in between answer "not yet"; nothing sleeps). Once every QP is
    /// ready to send, the rest of the connect ([`Self::qps_ready`]) and the machine is told.
    /// Whether anything was done.
    fn connect_qps(&mut self, now: Duration) -> Result<bool> {
        let Some(c) = &mut self.qps else {
            return Ok(false);
        };
        let ep = match &self.res {
            Resources::Sender { ep, .. } | Resources::Receiver { ep, .. } => ep,
            Resources::None => {
                return Err(Error::Internal(
                    "QPs being connected without resources".into(),
                ));
            }
        };
        let policy = plugin::get()?.config.mqp_retry();
        let mut moved = false;
        loop {
            match c.progress.next(now) {
                Next::Done => break,
                Next::WaitUntil(_) => return Ok(moved),
                Next::Change { qp, to } => match ep.connect_change(&c.peer, qp, to)? {
                    Ok(()) => {
                        if c.progress.failures() > 0 {
                            info!(
                                NET,
                                "{}: {} to {to} succeeded at attempt {}",
                                self.dev.label(),
                                ep.describe_qp(qp),
                                c.progress.failures() + 1
                            );
                        }
                        c.progress.succeeded();
                        moved = true;
                    }
                    Err(e) => match c.progress.failed(&policy, e.errno, now) {
                        Ok(due) => {
                            info!(
                                NET,
                                "{}: {} to {to}: {e}; retry {}/{} due in {} ms (connect and accept answer \"not yet\" until then)",
                                self.dev.label(),
                                ep.describe_qp(qp),
                                c.progress.failures(),
                                policy.retries,
                                due.saturating_sub(now).as_millis()
                            );
                            return Ok(moved);
                        }
                        Err(gave_up) => {
                            let text = format!(
                                "{}: connection with {}: {} to {to} failed after {} attempt{} with errno {} ({e}){}",
                                self.dev.label(),
                                self.peer,
                                ep.describe_qp(qp),
                                gave_up.attempts,
                                if gave_up.attempts == 1 { "" } else { "s" },
                                gave_up.errno,
                                if gave_up.retried {
                                    "; NCCL_IB_MQP_RETRY_CNT's retries are spent"
                                } else {
                                    ""
                                }
                            );
                            warn!(NET, "{text}");
                            return Err(Error::System(text));
                        }
                    },
                },
            }
        }
        let c = self.qps.take();
        if let Some(c) = c {
            self.qps_ready(&c.peer)?;
        }
        self.hs.qps_connected();
        Ok(true)
    }

    /// Either side, its QPs ready to send: the connecting side keeps where the peer's sizes
    /// region is; the receiver makes its flush QPs.
    fn qps_ready(&mut self, peer: &QpMeta) -> Result<()> {
        match &mut self.res {
            Resources::Sender { mem, .. } => {
                mem.peer_sizes = (peer.mr_addr, peer_keys(peer));
            }
            Resources::Receiver { ep, flush, .. } => {
                let cfg = &plugin::get()?.config;
                let gdr_flush =
                    self.dev.members.iter().any(|m| m.gdr.is_on()) && !cfg.gdr_flush_disable;
                if gdr_flush || cfg.flush_host {
                    *flush = ep.flush_qps()?;
                }
            }
            Resources::None => {
                return Err(Error::Internal(
                    "handshake connected QPs without resources".into(),
                ));
            }
        }
        Ok(())
    }

    /// The comm's parts, with its protocol core.
    fn ready(&mut self) -> Result<Box<Ready>> {
        match std::mem::replace(&mut self.res, Resources::None) {
            Resources::Sender { ep, mem, oversize } => {
                let mut core = SendCore::new(ep.layout());
                configure_health(&mut core)?;
                core.set_oversize(oversize);
                core.set_plan(ep.max_write, mem.ar);
                Ok(Box::new(Ready {
                    ep,
                    side: Side::Sender {
                        mem,
                        core: crate::transport::send_cell::SendCell::new(core),
                    },
                }))
            }
            Resources::Receiver { ep, mem, flush } => {
                let mut core = RecvCore::new(ep.layout());
                configure_health(&mut core)?;
                Ok(Box::new(Ready {
                    ep,
                    side: Side::Receiver {
                        mem,
                        core: CoreLock::new(core),
                        flush,
                        flush_host: plugin::get()?.config.flush_host,
                    },
                }))
            }
            Resources::None => Err(Error::Internal(
                "handshake connected without resources".into(),
            )),
        }
    }

    /// The comm of a finished handshake; its socket stays open as the liveness signal, with
    /// TCP keepalive on.
    pub(super) fn into_comm(self, r: Box<Ready>) -> CommPtr {
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
        let Ready { ep, side } = *r;
        Comm::create(ep, side, self.sock, self.peer)
    }

    pub(super) fn timed_out(&self) -> bool {
        matches!(self.hs.failure(), Some(HandshakeError::TimedOut { .. }))
    }
}

/// Whether a socket error says the peer dropped the connection (reset or closed it).
fn dropped(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe
    )
}
