//! The facts the fault policy judges, as plain values: what the transport read from the
//! device's asynchronous events, the out-of-band socket and the completion queue, and the time.
//! The transport gathers them; nothing here reads anything.

pub use super::device::{DeviceEvent, DeviceFault, QpError};
use std::time::Duration;

/// What one read of the out-of-band socket said. After the handshake the only bytes a peer
/// sends on it are a failure notice (the text of the error that failed its end, then it stops
/// writing); otherwise only its end matters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Socket {
    /// Open, with nothing (or something ignored) to read.
    Quiet,
    /// The peer is gone, and how.
    Gone(PeerGone),
}

/// What starts a failure notice on the out-of-band socket; the failure's text follows (UTF-8).
pub const NOTICE_PREFIX: &[u8] = b"FERRO-FAILED ";

/// A failure notice as it is written on the out-of-band socket.
pub fn encode_notice(why: &str) -> Vec<u8> {
    [NOTICE_PREFIX, why.as_bytes()].concat()
}

/// What bytes read from the out-of-band socket after the handshake say: a failure notice (its
/// text) if they start like one, else nothing (anything else is ignored, as before notices).
pub fn decode_notice(bytes: &[u8]) -> Option<String> {
    bytes
        .strip_prefix(NOTICE_PREFIX)
        .map(|why| String::from_utf8_lossy(why).into_owned())
}

/// How the peer's out-of-band connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerGone {
    /// End of file: the peer closed the connection (its process exited or was killed).
    Closed,
    /// The connection timed out after unanswered keepalive probes, with the error's text.
    TimedOut(String),
    /// Any other error (a reset, ...), with its text.
    Error(String),
    /// The peer failed its end of the comm and said why (its failure notice).
    Failed(String),
}

/// The facts of one periodic look at a comm that waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Look {
    /// The time of the look (any monotonic time base; only differences count).
    pub now: Duration,
    /// Why the comm's devices say it cannot go on, if they do
    /// ([`DeviceHealth::verdict_for`](super::DeviceHealth::verdict_for) of each member).
    pub device: Option<DeviceFault>,
    /// The peer's out-of-band socket.
    pub socket: Socket,
    /// Whether the comm has work outstanding.
    pub waiting: bool,
    /// Whether the comm is stopped for recovery in place.
    pub recovering: bool,
    /// A member device of a virtual NIC that the comm's QPs moved away from (failover) and
    /// whose port is active again, as `device:port`: the comm can fail back.
    pub member_back: Option<String>,
}

/// A work completion that came back with an error status, with the member device it was
/// polled on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailedCompletion<'a> {
    /// The member device and port whose CQ returned it.
    pub device: &'a str,
    pub port: u8,
    /// `IBV_WC_*` status, its name, and the provider's vendor error.
    pub status: u32,
    pub status_name: &'a str,
    pub vendor_err: u32,
    pub opcode: u32,
    pub qp_num: u32,
}
