//! The facts the fault policy judges, as plain values: what the transport read from the
//! device's asynchronous events, the out-of-band socket and the completion queue, and the time.
//! The transport gathers them; nothing here reads anything.

use super::device::DeviceFault;
use std::time::Duration;

/// One asynchronous event of a device, as far as the fault policy cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceEvent {
    /// `IBV_EVENT_PORT_ERR` on a port: its link went down.
    PortDown { port: u8 },
    /// `IBV_EVENT_PORT_ACTIVE` on a port: its link is back.
    PortActive { port: u8 },
    /// `IBV_EVENT_DEVICE_FATAL`: the device failed.
    DeviceFatal,
    /// An error event on a QP, by its number.
    QpError { qpn: u32, error: QpError },
    /// `IBV_EVENT_CQ_ERR` on a CQ, by its identity (the transport uses its address).
    CqError { cq: usize },
    /// Any other event (LID or GID change, path migration, ...), by its `IBV_EVENT_*` name: said
    /// at INFO, changes nothing.
    Other { name: &'static str },
}

/// Which error event a QP reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpError {
    /// `IBV_EVENT_QP_FATAL`.
    Fatal,
    /// `IBV_EVENT_QP_REQ_ERR`.
    RequestError,
    /// `IBV_EVENT_QP_ACCESS_ERR`.
    AccessError,
}

impl QpError {
    /// The event's `IBV_EVENT_*` name, as logs and messages give it.
    pub fn name(self) -> &'static str {
        match self {
            QpError::Fatal => "IBV_EVENT_QP_FATAL",
            QpError::RequestError => "IBV_EVENT_QP_REQ_ERR",
            QpError::AccessError => "IBV_EVENT_QP_ACCESS_ERR",
        }
    }
}

impl DeviceEvent {
    /// The event's `IBV_EVENT_*` name.
    pub fn name(&self) -> &'static str {
        match self {
            DeviceEvent::PortDown { .. } => "IBV_EVENT_PORT_ERR",
            DeviceEvent::PortActive { .. } => "IBV_EVENT_PORT_ACTIVE",
            DeviceEvent::DeviceFatal => "IBV_EVENT_DEVICE_FATAL",
            DeviceEvent::QpError { error, .. } => error.name(),
            DeviceEvent::CqError { .. } => "IBV_EVENT_CQ_ERR",
            DeviceEvent::Other { name } => name,
        }
    }
}

/// What one read of the out-of-band socket said. Nothing is expected on it after the
/// handshake, so only its end matters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Socket {
    /// Open, with nothing (or something ignored) to read.
    Quiet,
    /// The peer is gone, and how.
    Gone(PeerGone),
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
