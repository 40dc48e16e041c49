//! Every way connection setup can be refused, as one typed error whose text names the peer and
//! the cause (the accepting side sends this text back in its `Reject`). Text the peer sent is
//! shown escaped and cut ([`super::strangers::shown`]): it may come from a stranger.

use super::{Settings, Stage};
use crate::MAX_QPS;
use crate::handshake::checks::link_layer_name;
use crate::handshake::strangers::{shown, shown_up_to};
use crate::path::QpPath;
use crate::wire::{Msg, WireError};
use std::fmt;
use std::time::Duration;

/// Why a handshake failed. `peer` is the peer's address as the transport names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeError {
    /// The connecting side does not hold this listener's handle.
    WrongSecret { peer: String },
    /// `NCCL_IB_QPS_PER_CONNECTION` or `NCCL_IB_SPLIT_DATA_ON_QPS` differ between the sides.
    SettingsDiffer {
        peer: String,
        local: Settings,
        remote: Settings,
    },
    /// The connecting side built another number of QPs than both member counts call for.
    QpCount {
        peer: String,
        got: usize,
        peer_devs: usize,
        expected: usize,
        qps_per_conn: u16,
        local_devs: usize,
    },
    /// A member device of one side has another link layer than one of the other side's.
    LinkLayers {
        local_dev: String,
        local_port: u8,
        local: u8,
        peer: String,
        peer_port: u8,
        remote: u8,
    },
    /// Connecting side: the `Accept` does not echo the traffic class and service level this side
    /// sent, so the two sides' QPs would leave on different priorities.
    PathNotEchoed {
        peer: String,
        sent: QpPath,
        echoed: QpPath,
    },
    /// The connection would have more QPs than [`MAX_QPS`].
    TooManyQps {
        qps_per_conn: u16,
        devs: usize,
        nqps: usize,
    },
    /// A message this side does not expect at this point.
    Unexpected { peer: String, msg: Box<Msg> },
    /// The peer answered `Reject`, with its reason.
    PeerRejected { peer: String, reason: String },
    /// The peer's bytes are not a valid message.
    Wire { peer: String, error: WireError },
    /// The peer closed the connection before the handshake ended.
    PeerClosed { peer: String },
    /// Accepting side: its own setup failed (`reason`) after the peer presented the secret; the
    /// peer is told in a `Reject` ([`super::Handshake::abandon`]).
    Abandoned { peer: String, reason: String },
    /// Accepting side: a stranger did not present the secret within `after`
    /// ([`super::SECRET_DEADLINE`]), having sent `received` bytes of a message meanwhile.
    NoSecret {
        peer: String,
        after: Duration,
        received: usize,
    },
    /// No byte moved for [`super::HANDSHAKE_TIMEOUT`] in `stage`.
    TimedOut {
        peer: String,
        stage: Stage,
        after: Duration,
    },
    /// The transport called `call` in a stage where it does not belong (a bug).
    OutOfOrder { call: &'static str, stage: Stage },
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandshakeError::WrongSecret { peer } => write!(
                f,
                "{peer} presented a wrong listen secret: it does not hold this listener's handle (a stray or hostile client, or a handle from another job); refused"
            ),
            HandshakeError::SettingsDiffer {
                peer,
                local,
                remote,
            } => write!(
                f,
                "settings differ between ranks: NCCL_IB_QPS_PER_CONNECTION {} here vs {} at {peer}, NCCL_IB_SPLIT_DATA_ON_QPS {} here vs {} there",
                local.qps_per_conn,
                remote.qps_per_conn,
                u8::from(local.split),
                u8::from(remote.split)
            ),
            HandshakeError::QpCount {
                peer,
                got,
                peer_devs,
                expected,
                qps_per_conn,
                local_devs,
            } => write!(
                f,
                "{peer} sent {got} QPs for its {peer_devs} devices; {expected} expected for {qps_per_conn} x max({peer_devs}, {local_devs} devices here)"
            ),
            HandshakeError::LinkLayers {
                local_dev,
                local_port,
                local,
                peer,
                peer_port,
                remote,
            } => write!(
                f,
                "{local_dev}:{local_port} is {} but a device of {peer} (port {peer_port}) is {}: the link layers of both sides must match",
                link_layer_name(*local),
                link_layer_name(*remote)
            ),
            HandshakeError::PathNotEchoed { peer, sent, echoed } => write!(
                f,
                "{peer} accepted with traffic class {} and service level {}, but this side sent {} and {}: the receiving side must build its QPs with the sender's",
                echoed.tc, echoed.sl, sent.tc, sent.sl
            ),
            HandshakeError::TooManyQps {
                qps_per_conn,
                devs,
                nqps,
            } => write!(
                f,
                "NCCL_IB_QPS_PER_CONNECTION={qps_per_conn} x {devs} devices (the larger side) is {nqps} QPs, above the {MAX_QPS} a connection may have"
            ),
            HandshakeError::Unexpected { peer, msg } => {
                write!(
                    f,
                    "unexpected handshake message from {peer}: {}",
                    summary(msg)
                )
            }
            HandshakeError::PeerRejected { peer, reason } => write!(
                f,
                "peer {peer} refused the connection: {}",
                shown_up_to(reason.as_bytes(), REASON_BYTES)
            ),
            HandshakeError::Wire { peer, error } => write!(f, "from {peer}: {error}"),
            HandshakeError::PeerClosed { peer } => {
                write!(f, "peer {peer} closed the connection during the handshake")
            }
            HandshakeError::NoSecret {
                peer,
                after,
                received,
            } => write!(
                f,
                "connection from {peer} did not present the listen secret within {} s of being accepted ({received} bytes of a message received)",
                after.as_secs()
            ),
            HandshakeError::TimedOut { peer, stage, after } => {
                if stage.is_connector() {
                    write!(
                        f,
                        "connecting to {peer}: no progress for {} s ({stage})",
                        after.as_secs()
                    )
                } else {
                    write!(
                        f,
                        "connection from {peer}: no handshake progress for {} s ({stage})",
                        after.as_secs()
                    )
                }
            }
            HandshakeError::Abandoned { peer, reason } => {
                write!(f, "setting up the connection from {peer} failed: {reason}")
            }
            HandshakeError::OutOfOrder { call, stage } => {
                write!(f, "handshake: {call} called while {stage}")
            }
        }
    }
}

impl std::error::Error for HandshakeError {}

/// How much of a peer's `Reject` reason a message shows (this plugin's own reasons are shorter).
const REASON_BYTES: usize = 512;

/// A message named by its kind (and its bounded fields), never dumping what the peer filled in:
/// a `Connect` carries a secret, and a `Reject`'s text is the peer's.
fn summary(msg: &Msg) -> String {
    match msg {
        Msg::Connect(_) => "Connect".into(),
        Msg::Accept(_) => "Accept".into(),
        Msg::Ready => "Ready".into(),
        Msg::Reject(text) => format!("Reject \"{}\"", shown(text.as_bytes())),
        Msg::Recover { epoch } => format!("Recover (epoch {epoch})"),
        Msg::ReceiverState(_) => "ReceiverState".into(),
        Msg::Rebuilt { epoch, qpns, .. } => format!("Rebuilt (epoch {epoch}, {} QPs)", qpns.len()),
        Msg::Resume { epoch } => format!("Resume (epoch {epoch})"),
    }
}
