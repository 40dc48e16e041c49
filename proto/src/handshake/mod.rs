//! Connection setup as a state machine without I/O: the out-of-band exchange of `Connect`,
//! `Accept` (or `Reject`) and `Ready` between the connecting and the accepting side, every check
//! on what the peer sent, and the handshake time-out.
//!
//! A [`Handshake`] is fed what the transport's socket gave ([`Handshake::handle_bytes`],
//! [`Handshake::peer_closed`]) and the time, as a [`Duration`] since any fixed epoch the caller
//! picks; it answers with bytes to write ([`Handshake::poll_transmit`], then
//! [`Handshake::advance`] by what was written) and [`Event`]s: when the verbs resources must be
//! created or connected, when the connection is up, or why it failed. The transport reads only
//! as many bytes as [`Handshake::wanted`] asks for, so a message that is not expected yet stays
//! in the socket; bytes fed early are held until the machine reads again.
//!
//! The connecting side: TCP connect ([`Handshake::tcp_connected`]), write `Connect` (its QPs,
//! its CTS FIFO, the traffic class and service level it chose, and the listener's secret), read
//! `Accept` (or `Reject`; an `Accept` that does not echo the traffic class and service level is
//! refused), connect its QPs
//! ([`Event::PeerMeta`], then [`Handshake::qps_connected`]), write `Ready`; connected once it
//! is written. The accepting side: read `Connect`, check the secret (a wrong one is dropped
//! without an answer), the settings and the QP count, ask for its own QPs
//! ([`Event::NeedLocalMeta`], then [`Handshake::local_meta`]), check the link layers, connect
//! its QPs, write `Accept`, read `Ready`; connected when it arrives, so it never writes to a QP
//! the peer has not made ready. A refusal of the settings, the QP count or the link layers is
//! also sent to the connecting side as a `Reject` carrying the refusal's text.
//!
//! A handshake in which no byte moved for [`HANDSHAKE_TIMEOUT`] fails at the next
//! [`Handshake::handle_timeout`], naming the stage it was in. On the accepting side, a peer that
//! has not presented the secret is a stranger ([`Handshake::is_stranger`]): it has
//! [`strangers::SECRET_DEADLINE`] in total from being accepted to do so, however its bytes
//! trickle in; the listener's other bounds on strangers are in [`strangers`].
//!
//! Those bounds can drop a real peer too: one whose process stalled between its TCP connection
//! and its `Connect`, or whose connection a flood of strangers pushed out. So the connecting
//! side connects again ([`Handshake::may_redial`], [`Handshake::redial`]) when the listener
//! closes or resets the connection before answering (no byte of `Accept` or `Reject` came: the
//! listener holds nothing of it), up to [`REDIALS_MAX`] times, keeping its QPs and its `Connect`.

pub mod checks;
mod error;
pub mod strangers;
pub mod sweep;
#[cfg(test)]
mod tests;

pub use error::HandshakeError;
pub use strangers::SECRET_DEADLINE;

use crate::handle::SECRET_SIZE;
use crate::plan::QpLayout;
use crate::wire::{self, Msg, QpMeta, Reader};
use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

/// A handshake in which no byte moves for this long is abandoned.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(120);

/// How many new TCP connections the connecting side makes, after the first, when the listener
/// drops one before answering ([`Handshake::redial`]). Each needs a connection the listener
/// accepted and then closed, so a listener that refuses or is gone ends the handshake at once,
/// and one that drops every connection (a wrong secret: a stale handle) ends it after these.
pub const REDIALS_MAX: u32 = 4;

/// The settings both sides must agree on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// `NCCL_IB_QPS_PER_CONNECTION`.
    pub qps_per_conn: u16,
    /// `NCCL_IB_SPLIT_DATA_ON_QPS`.
    pub split: bool,
}

/// What this side tells the peer about itself: its QPs and protocol region, and the name of
/// each member device (for messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalSide {
    pub meta: QpMeta,
    /// Each member device's name, in member order.
    pub names: Vec<String>,
}

/// Where a handshake stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Connecting side: the TCP connect is in progress.
    TcpConnect,
    /// Connecting side: writing `Connect`.
    SendConnect,
    /// Connecting side: reading `Accept` or `Reject`.
    AwaitAccept,
    /// Connecting side: the transport connects its QPs to the peer's.
    ConnectorQps,
    /// Connecting side: writing `Ready`.
    SendReady,
    /// Accepting side: reading `Connect`.
    AwaitConnect,
    /// Accepting side: the transport creates its QPs and regions.
    LocalMeta,
    /// Accepting side: the transport connects its QPs to the peer's.
    AcceptorQps,
    /// Accepting side: writing `Accept`.
    SendAccept,
    /// Accepting side: reading `Ready`.
    AwaitReady,
    /// Both sides' QPs are connected and the peer knows it.
    Connected,
    /// Refused or broken (a `Reject` may still be waiting to be written).
    Failed,
}

impl Stage {
    /// Whether this is a stage of the connecting side.
    pub fn is_connector(self) -> bool {
        matches!(
            self,
            Stage::TcpConnect
                | Stage::SendConnect
                | Stage::AwaitAccept
                | Stage::ConnectorQps
                | Stage::SendReady
        )
    }

    /// Whether the machine writes in this stage (a failed one may still owe a `Reject`).
    fn writes(self) -> bool {
        matches!(
            self,
            Stage::SendConnect | Stage::SendReady | Stage::SendAccept | Stage::Failed
        )
    }

    /// Whether the machine reads a message in this stage.
    fn reads(self) -> bool {
        matches!(
            self,
            Stage::AwaitAccept | Stage::AwaitConnect | Stage::AwaitReady
        )
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::TcpConnect => "waiting for the TCP connection",
            Stage::SendConnect => "sending Connect",
            Stage::AwaitAccept => "waiting for Accept",
            Stage::ConnectorQps | Stage::AcceptorQps => "connecting the QPs",
            Stage::SendReady => "sending Ready",
            Stage::AwaitConnect => "waiting for Connect",
            Stage::LocalMeta => "creating the QPs",
            Stage::SendAccept => "sending Accept",
            Stage::AwaitReady => "waiting for Ready",
            Stage::Connected => "connected",
            Stage::Failed => "failed",
        })
    }
}

/// What the transport must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Accepting side: the peer's `Connect` passed every check; create this side's QPs (in
    /// `layout`) and regions, then hand their description to [`Handshake::local_meta`].
    NeedLocalMeta { peer: QpMeta, layout: QpLayout },
    /// Either side: connect this side's QPs to these, then call [`Handshake::qps_connected`].
    PeerMeta(QpMeta),
    /// The handshake is over; the comm may be built.
    Connected,
    /// The handshake failed; drop the connection once [`Handshake::poll_transmit`] is empty
    /// (best effort: it may hold a `Reject`).
    Failed(HandshakeError),
}

/// What only one side knows.
#[derive(Debug)]
enum Role {
    Connector {
        local: LocalSide,
        /// New TCP connections made after the first ([`Handshake::redial`]).
        redials: u32,
    },
    Acceptor {
        secret: [u8; SECRET_SIZE],
        settings: Settings,
        local_devs: usize,
        /// Whether the peer's `Connect` carried the right secret (it is no stranger).
        secret_ok: bool,
        /// The peer's `Connect`, once it passed the checks.
        peer_meta: Option<QpMeta>,
    },
}

/// One side of one connection being set up.
#[derive(Debug)]
pub struct Handshake {
    role: Role,
    stage: Stage,
    /// The peer's address, for messages.
    peer: String,
    reader: Reader,
    out: Vec<u8>,
    out_pos: usize,
    events: VecDeque<Event>,
    /// When the machine was made (the TCP connect started, or the connection was accepted).
    started: Duration,
    last_progress: Duration,
    /// Why it failed, once it did.
    failure: Option<HandshakeError>,
}

impl Handshake {
    fn new(role: Role, stage: Stage, peer: String, now: Duration) -> Handshake {
        Handshake {
            role,
            stage,
            peer,
            reader: Reader::new(),
            out: Vec::new(),
            out_pos: 0,
            events: VecDeque::new(),
            started: now,
            last_progress: now,
            failure: None,
        }
    }

    /// The connecting side, whose TCP connect to `peer` has just started: `local` describes
    /// its QPs and CTS FIFO, `secret` is the listener's, from the handle.
    pub fn connector(
        mut local: LocalSide,
        secret: [u8; SECRET_SIZE],
        peer: impl Into<String>,
        now: Duration,
    ) -> Handshake {
        local.meta.secret = secret;
        Handshake::new(
            Role::Connector { local, redials: 0 },
            Stage::TcpConnect,
            peer.into(),
            now,
        )
    }

    /// The accepting side of a TCP connection just accepted from `peer`, on a listener whose
    /// handle carries `secret`, with `local_devs` member devices and these settings.
    pub fn acceptor(
        secret: [u8; SECRET_SIZE],
        settings: Settings,
        local_devs: usize,
        peer: impl Into<String>,
        now: Duration,
    ) -> Handshake {
        Handshake::new(
            Role::Acceptor {
                secret,
                settings,
                local_devs,
                secret_ok: false,
                peer_meta: None,
            },
            Stage::AwaitConnect,
            peer.into(),
            now,
        )
    }

    pub fn stage(&self) -> Stage {
        self.stage
    }

    /// The peer's address as given.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// Why the handshake failed (also given once as [`Event::Failed`]).
    pub fn failure(&self) -> Option<&HandshakeError> {
        self.failure.as_ref()
    }

    /// Accepting side: whether the peer has not presented the right secret (yet). A stranger
    /// must do so within [`SECRET_DEADLINE`] of being accepted, and a listener's full table drops
    /// its oldest stranger ([`strangers::eviction`]); a peer that presented it is neither.
    pub fn is_stranger(&self) -> bool {
        matches!(
            self.role,
            Role::Acceptor {
                secret_ok: false,
                ..
            }
        )
    }

    /// Whether the handshake is over, connected or failed.
    pub fn is_finished(&self) -> bool {
        matches!(self.stage, Stage::Connected | Stage::Failed)
    }

    /// How many bytes the machine takes from the socket now (0 when it reads nothing at this
    /// stage: the bytes stay in the socket).
    pub fn wanted(&self) -> usize {
        if self.stage.reads() {
            self.reader.wanted()
        } else {
            0
        }
    }

    /// The connecting side's TCP connect completed.
    pub fn tcp_connected(&mut self, now: Duration) {
        if self.stage != Stage::TcpConnect {
            return self.out_of_order("tcp_connected");
        }
        let Role::Connector { local, .. } = &self.role else {
            return self.out_of_order("tcp_connected");
        };
        let connect = wire::encode(&Msg::Connect(local.meta.clone()));
        self.last_progress = now;
        self.send(connect, Stage::SendConnect);
    }

    /// Bytes read from the socket. Every whole message is handled at once while this side
    /// reads; others are held until it reads again. A finished handshake takes no bytes (the
    /// comm owns the socket, and it ignores what the peer sends).
    pub fn handle_bytes(&mut self, bytes: &[u8], now: Duration) {
        if self.is_finished() || bytes.is_empty() {
            return;
        }
        self.last_progress = now;
        self.reader.push(bytes);
        self.handle_messages();
    }

    /// The peer closed its end (a read returned 0 bytes, or a write could write nothing).
    pub fn peer_closed(&mut self) {
        if !self.is_finished() {
            self.fail(HandshakeError::PeerClosed {
                peer: self.peer.clone(),
            });
        }
    }

    /// Connecting side: whether a connection lost now (closed or reset by the listener) may be
    /// replaced by a new one ([`Handshake::redial`]) instead of failing the handshake: its TCP
    /// connection had completed, the listener has not answered (no byte of `Accept` or `Reject`
    /// came, so it holds nothing of this connection: it dropped a stranger), and fewer than
    /// [`REDIALS_MAX`] new connections were made.
    pub fn may_redial(&self) -> bool {
        matches!(self.role, Role::Connector { redials, .. } if redials < REDIALS_MAX)
            && matches!(self.stage, Stage::SendConnect | Stage::AwaitAccept)
            && self.reader.received() == 0
    }

    /// Connecting side: the transport replaced a lost connection by a new TCP connect (after
    /// [`Handshake::may_redial`] allowed it). The machine starts again from the TCP connect with
    /// the same QPs and `Connect` (written whole again); the new connection counts as progress.
    /// Returns which connection this is (2 for the first redial).
    pub fn redial(&mut self, now: Duration) -> u32 {
        if !self.may_redial() {
            self.out_of_order("redial");
            return 0;
        }
        let Role::Connector { redials, .. } = &mut self.role else {
            return 0;
        };
        *redials += 1;
        let n = *redials + 1;
        self.out.clear();
        self.out_pos = 0;
        self.stage = Stage::TcpConnect;
        self.last_progress = now;
        n
    }

    /// Connecting side: how many new connections replaced lost ones (0 on the accepting side).
    pub fn redials(&self) -> u32 {
        match self.role {
            Role::Connector { redials, .. } => redials,
            Role::Acceptor { .. } => 0,
        }
    }

    /// When the machine was made (the TCP connect started, or the connection was accepted).
    pub fn started(&self) -> Duration {
        self.started
    }

    /// Accepting side: this side's own setup failed (`reason`: its QPs could not be made or
    /// connected) after the peer presented the secret. The failure goes to the peer as a
    /// `Reject`, so that it fails naming the cause instead of taking the silence for the drop of
    /// a stranger, which it would dial again for ([`Handshake::may_redial`]). Nothing for a
    /// stranger (it gets no answer) or a finished handshake.
    pub fn abandon(&mut self, reason: &str) {
        if self.is_finished() || self.stage.is_connector() || self.is_stranger() {
            return;
        }
        self.reject(HandshakeError::Abandoned {
            peer: self.peer.clone(),
            reason: reason.to_string(),
        });
    }

    /// The bytes to write next, if any (a failed handshake may still have its `Reject`).
    pub fn poll_transmit(&self) -> Option<&[u8]> {
        Some(&self.out[self.out_pos..]).filter(|b| self.stage.writes() && !b.is_empty())
    }

    /// `n` bytes of [`Handshake::poll_transmit`] were written.
    pub fn advance(&mut self, n: usize, now: Duration) {
        if !self.stage.writes() {
            return;
        }
        let n = n.min(self.out.len() - self.out_pos);
        if n == 0 {
            return;
        }
        self.out_pos += n;
        if self.stage != Stage::Failed {
            self.last_progress = now;
        }
        if self.out_pos < self.out.len() {
            return;
        }
        self.out.clear();
        self.out_pos = 0;
        match self.stage {
            Stage::SendConnect => self.stage = Stage::AwaitAccept,
            Stage::SendReady => {
                self.stage = Stage::Connected;
                self.events.push_back(Event::Connected);
            }
            Stage::SendAccept => self.stage = Stage::AwaitReady,
            _ => return,
        }
        // A message that arrived before this side read again (the peer's `Ready` before our
        // `Accept` was written, say) is taken now.
        self.handle_messages();
    }

    /// Accepting side, after [`Event::NeedLocalMeta`]: this side's QPs and sizes FIFO. The
    /// link layers are checked against the peer's; then [`Event::PeerMeta`] follows.
    pub fn local_meta(&mut self, local: LocalSide) {
        if self.stage != Stage::LocalMeta {
            return self.out_of_order("local_meta");
        }
        let Role::Acceptor {
            peer_meta: Some(peer_meta),
            ..
        } = &self.role
        else {
            return self.out_of_order("local_meta");
        };
        let peer_meta = peer_meta.clone();
        if let Err(e) =
            checks::link_layers(&local.meta.devs, &local.names, &peer_meta.devs, &self.peer)
        {
            return self.reject(e);
        }
        let accept = wire::encode(&Msg::Accept(local.meta));
        // Held until the QPs are connected.
        self.out = accept;
        self.out_pos = 0;
        self.stage = Stage::AcceptorQps;
        self.events.push_back(Event::PeerMeta(peer_meta));
    }

    /// Either side, after [`Event::PeerMeta`]: this side's QPs are connected to the peer's.
    pub fn qps_connected(&mut self) {
        match self.stage {
            Stage::ConnectorQps => self.send(wire::encode(&Msg::Ready), Stage::SendReady),
            Stage::AcceptorQps => self.stage = Stage::SendAccept,
            _ => self.out_of_order("qps_connected"),
        }
    }

    /// Fails the handshake if a stranger has not presented the secret within
    /// [`SECRET_DEADLINE`] of being accepted (bytes that came meanwhile do not extend it), or if
    /// no byte moved for longer than [`HANDSHAKE_TIMEOUT`] before `now`.
    pub fn handle_timeout(&mut self, now: Duration) {
        if self.is_finished() {
            return;
        }
        if self.is_stranger() && now.saturating_sub(self.started) > SECRET_DEADLINE {
            return self.fail(HandshakeError::NoSecret {
                peer: self.peer.clone(),
                after: SECRET_DEADLINE,
                received: self.reader.received(),
            });
        }
        if now.saturating_sub(self.last_progress) > HANDSHAKE_TIMEOUT {
            self.fail(HandshakeError::TimedOut {
                peer: self.peer.clone(),
                stage: self.stage,
                after: HANDSHAKE_TIMEOUT,
            });
        }
    }

    /// When [`Handshake::handle_timeout`] fails the handshake if nothing moves before (or, for
    /// a stranger, if it has not presented the secret before); `None` once it is finished.
    pub fn poll_timeout(&self) -> Option<Duration> {
        let stalled = self.last_progress + HANDSHAKE_TIMEOUT;
        let due = if self.is_stranger() {
            stalled.min(self.started + SECRET_DEADLINE)
        } else {
            stalled
        };
        (!self.is_finished()).then_some(due)
    }

    /// The next thing the transport must act on.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn send(&mut self, bytes: Vec<u8>, stage: Stage) {
        self.out = bytes;
        self.out_pos = 0;
        self.stage = stage;
    }

    fn fail(&mut self, e: HandshakeError) {
        self.stage = Stage::Failed;
        self.failure = Some(e.clone());
        self.events.push_back(Event::Failed(e));
    }

    /// Fails with `e` and sends its text to the peer as a `Reject`.
    fn reject(&mut self, e: HandshakeError) {
        self.out = wire::encode(&Msg::Reject(e.to_string()));
        self.out_pos = 0;
        self.fail(e);
    }

    fn out_of_order(&mut self, call: &'static str) {
        let stage = self.stage;
        if !self.is_finished() {
            self.fail(HandshakeError::OutOfOrder { call, stage });
        }
    }

    /// Handles whole messages while this side reads.
    fn handle_messages(&mut self) {
        while self.stage.reads() {
            match self.reader.poll() {
                Ok(Some(m)) => self.handle_message(m),
                Ok(None) => return,
                Err(error) => {
                    return self.fail(HandshakeError::Wire {
                        peer: self.peer.clone(),
                        error,
                    });
                }
            }
        }
    }

    fn handle_message(&mut self, m: Msg) {
        match (self.stage, m) {
            (Stage::AwaitAccept, Msg::Accept(peer_meta)) => self.on_accept(peer_meta),
            (Stage::AwaitConnect, Msg::Connect(peer_meta)) => self.on_connect(peer_meta),
            (Stage::AwaitReady, Msg::Ready) => {
                self.stage = Stage::Connected;
                self.events.push_back(Event::Connected);
            }
            // A stranger's "refusal" refuses nothing: it is only an unexpected message.
            (_, Msg::Reject(reason)) if !self.is_stranger() => {
                self.fail(HandshakeError::PeerRejected {
                    peer: self.peer.clone(),
                    reason,
                })
            }
            (_, m) => self.fail(HandshakeError::Unexpected {
                peer: self.peer.clone(),
                msg: Box::new(m),
            }),
        }
    }

    /// Connecting side: the peer accepted. Its link layers must match ours (the acceptor
    /// checked too) and it must echo our traffic class and service level; this side refuses
    /// without an answer.
    fn on_accept(&mut self, peer_meta: QpMeta) {
        let Role::Connector { local, .. } = &self.role else {
            return self.out_of_order("on_accept");
        };
        let checked =
            checks::link_layers(&local.meta.devs, &local.names, &peer_meta.devs, &self.peer)
                .and_then(|()| checks::path_echoed(local.meta.path, &peer_meta, &self.peer));
        if let Err(e) = checked {
            return self.fail(e);
        }
        self.stage = Stage::ConnectorQps;
        self.events.push_back(Event::PeerMeta(peer_meta));
    }

    /// Accepting side: the peer's `Connect`. A wrong secret is dropped without an answer (the
    /// client does not hold the handle); other refusals are sent back as a `Reject`.
    fn on_connect(&mut self, peer_meta: QpMeta) {
        let Role::Acceptor {
            secret,
            settings,
            local_devs,
            secret_ok,
            peer_meta: held,
        } = &mut self.role
        else {
            return self.out_of_order("on_connect");
        };
        if let Err(e) = checks::secret(&peer_meta.secret, secret, &self.peer) {
            return self.fail(e);
        }
        *secret_ok = true;
        let checked = checks::settings(*settings, &peer_meta, &self.peer)
            .and_then(|()| checks::acceptor_layout(*settings, *local_devs, &peer_meta, &self.peer));
        let layout = match checked {
            Ok(layout) => layout,
            Err(e) => return self.reject(e),
        };
        *held = Some(peer_meta.clone());
        self.stage = Stage::LocalMeta;
        self.events.push_back(Event::NeedLocalMeta {
            peer: peer_meta,
            layout,
        });
    }
}
