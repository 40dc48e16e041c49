//! What one device's asynchronous events said so far ([`DeviceHealth`]), what each event is
//! worth a log line, and what it means for a comm on the device ([`DeviceFault`]).

use std::collections::HashMap;
use std::fmt;

/// The record of one device's events: ports down, a fatal error, QPs and CQs with an error.
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

#[derive(Debug, Default)]
pub struct DeviceHealth {
    /// The device's name, for messages.
    device: String,
    /// Ports whose last event was `IBV_EVENT_PORT_ERR`.
    ports_down: Vec<u8>,
    /// The fatal device error, if one came.
    fatal: bool,
    /// QPs (by number) and CQs (by identity) with an error event, with its name.
    bad_qps: HashMap<u32, &'static str>,
    bad_cqs: HashMap<usize, &'static str>,
}

/// How loud an event's log line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
}

/// The log line an event is worth.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventLog {
    pub level: Level,
    pub message: String,
}

/// Why a comm on a device cannot go on, from the device's events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceFault {
    /// The device that said so.
    pub device: String,
    pub cause: DeviceCause,
    /// Over a virtual NIC: which member it is, and of which virtual device.
    pub member: Option<Member>,
}

/// What went wrong on the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceCause {
    /// The device reported a fatal error.
    Fatal,
    /// The comm's port went down.
    PortDown { port: u8 },
    /// One of the comm's QPs reported an error event (its name).
    Qp { qpn: u32, event: &'static str },
    /// The comm's CQ reported an error event (its name).
    Cq { event: &'static str },
}

/// A member device of a virtual NIC, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub device: String,
    pub port: u8,
    /// The virtual device's name.
    pub of: String,
}

impl DeviceFault {
    /// The same fault, said of member `device:port` of the virtual device `of`.
    pub fn of_member(self, device: &str, port: u8, of: &str) -> DeviceFault {
        DeviceFault {
            member: Some(Member {
                device: device.to_string(),
                port,
                of: of.to_string(),
            }),
            ..self
        }
    }
}

impl DeviceFault {
    /// Whether recovery in place can repair it: the port went down (it may come back, or the
    /// comm's share moves to another member), or one of the comm's QPs failed. A fatal device
    /// error and a CQ error cannot be repaired by rebuilding QPs.
    pub fn is_repairable(&self) -> bool {
        matches!(
            self.cause,
            DeviceCause::PortDown { .. } | DeviceCause::Qp { .. }
        )
    }
}

impl fmt::Display for DeviceFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(m) = &self.member {
            write!(f, "member {}:{} of {}: ", m.device, m.port, m.of)?;
        }
        let dev = &self.device;
        match &self.cause {
            DeviceCause::Fatal => write!(
                f,
                "{dev}: the device reported a fatal error (IBV_EVENT_DEVICE_FATAL)"
            ),
            DeviceCause::PortDown { port } => {
                write!(f, "{dev} port {port} went down (IBV_EVENT_PORT_ERR)")
            }
            DeviceCause::Qp { qpn, event } => write!(f, "{dev}: {event} on QP {qpn}"),
            DeviceCause::Cq { event } => write!(f, "{dev}: {event} on the comm's CQ"),
        }
    }
}

impl DeviceHealth {
    /// A device named `device` that has reported nothing yet.
    pub fn new(device: impl Into<String>) -> DeviceHealth {
        DeviceHealth {
            device: device.into(),
            ..DeviceHealth::default()
        }
    }

    /// Records what `event` means for comms on the device; returns the line to log for it.
    pub fn apply(&mut self, event: DeviceEvent) -> EventLog {
        let dev = &self.device;
        let name = event.name();
        let (level, message) = match event {
            DeviceEvent::PortDown { port } => {
                if !self.ports_down.contains(&port) {
                    self.ports_down.push(port);
                }
                (
                    Level::Warn,
                    format!(
                        "{dev} port {port}: {name}: the port went down (link lost: check the cable, the switch port or the netdev); comms with work on it stop and recover in place once it is active again, within FERRO_RECOVERY_BUDGET_S (with 0 they fail)"
                    ),
                )
            }
            DeviceEvent::PortActive { port } => {
                self.ports_down.retain(|&d| d != port);
                (
                    Level::Info,
                    format!(
                        "{dev} port {port}: {name}: the port is active again; comms that wait for it recover, new connections can use it"
                    ),
                )
            }
            DeviceEvent::DeviceFatal => {
                self.fatal = true;
                (
                    Level::Warn,
                    format!("{dev}: {name}: the device failed; every comm on it fails"),
                )
            }
            DeviceEvent::QpError { qpn, .. } => {
                self.bad_qps.insert(qpn, name);
                (Level::Warn, format!("{dev}: {name} on QP {qpn}"))
            }
            DeviceEvent::CqError { cq } => {
                self.bad_cqs.insert(cq, name);
                (Level::Warn, format!("{dev}: {name} on CQ {cq:#x}"))
            }
            DeviceEvent::Other { .. } => (Level::Info, format!("{dev}: asynchronous event {name}")),
        };
        EventLog { level, message }
    }

    /// Forgets the error events of QP `qpn`: its comm rebuilt it (a reset keeps the number) or
    /// destroyed it (a later QP may get the number).
    pub fn forget_qp(&mut self, qpn: u32) {
        self.bad_qps.remove(&qpn);
    }

    /// Forgets the error events of the CQ `cq`: its comm destroyed it.
    pub fn forget_cq(&mut self, cq: usize) {
        self.bad_cqs.remove(&cq);
    }

    /// Whether `port`'s last event said it went down.
    pub fn is_port_down(&self, port: u8) -> bool {
        self.ports_down.contains(&port)
    }

    /// Why a comm on `port` whose QPs are those for which `uses_qp` is true, with the CQ `cq`,
    /// cannot go on, if it cannot: a fatal device error first, then its port down, then an
    /// error on one of its QPs, then on its CQ. Allocates nothing unless it has something to say.
    pub fn verdict_for(
        &self,
        port: u8,
        uses_qp: impl Fn(u32) -> bool,
        cq: usize,
    ) -> Option<DeviceFault> {
        let cause = if self.fatal {
            DeviceCause::Fatal
        } else if self.ports_down.contains(&port) {
            DeviceCause::PortDown { port }
        } else if let Some((&qpn, &event)) = self.bad_qps.iter().find(|(q, _)| uses_qp(**q)) {
            DeviceCause::Qp { qpn, event }
        } else {
            DeviceCause::Cq {
                event: self.bad_cqs.get(&cq)?,
            }
        };
        Some(DeviceFault {
            device: self.device.clone(),
            cause,
            member: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::facts::QpError;

    fn mine(qpn: u32) -> bool {
        qpn == 7 || qpn == 8
    }

    #[test]
    fn a_quiet_device_fails_no_comm() {
        let h = DeviceHealth::new("rxe0");
        assert_eq!(h.verdict_for(1, mine, 0x1000), None);
    }

    #[test]
    fn port_down_fails_the_comms_on_that_port_only() {
        let mut h = DeviceHealth::new("rxe0");
        let log = h.apply(DeviceEvent::PortDown { port: 2 });
        assert_eq!(log.level, Level::Warn);
        assert!(
            log.message
                .starts_with("rxe0 port 2: IBV_EVENT_PORT_ERR: the port went down"),
            "{}",
            log.message
        );
        assert_eq!(h.verdict_for(1, mine, 0x1000), None, "another port");
        let f = h.verdict_for(2, mine, 0x1000).unwrap();
        assert_eq!(f.cause, DeviceCause::PortDown { port: 2 });
        assert_eq!(f.to_string(), "rxe0 port 2 went down (IBV_EVENT_PORT_ERR)");
    }

    #[test]
    fn port_active_after_port_down_clears_it() {
        let mut h = DeviceHealth::new("rxe0");
        h.apply(DeviceEvent::PortDown { port: 1 });
        h.apply(DeviceEvent::PortDown { port: 1 });
        let log = h.apply(DeviceEvent::PortActive { port: 1 });
        assert_eq!(log.level, Level::Info);
        assert_eq!(
            log.message,
            "rxe0 port 1: IBV_EVENT_PORT_ACTIVE: the port is active again; comms that wait for it recover, new connections can use it"
        );
        assert_eq!(h.verdict_for(1, mine, 0x1000), None);
    }

    #[test]
    fn a_fatal_device_error_fails_every_comm_of_the_device() {
        let mut h = DeviceHealth::new("mlx5_0");
        let log = h.apply(DeviceEvent::DeviceFatal);
        assert_eq!(
            (log.level, log.message.as_str()),
            (
                Level::Warn,
                "mlx5_0: IBV_EVENT_DEVICE_FATAL: the device failed; every comm on it fails"
            )
        );
        for (port, cq) in [(1, 0x1000), (2, 0x2000)] {
            let f = h.verdict_for(port, |_| false, cq).unwrap();
            assert_eq!(
                f.to_string(),
                "mlx5_0: the device reported a fatal error (IBV_EVENT_DEVICE_FATAL)"
            );
        }
    }

    #[test]
    fn a_qp_error_on_another_comms_qp_does_not_fail_this_one() {
        let mut h = DeviceHealth::new("rxe0");
        let log = h.apply(DeviceEvent::QpError {
            qpn: 99,
            error: QpError::Fatal,
        });
        assert_eq!(log.message, "rxe0: IBV_EVENT_QP_FATAL on QP 99");
        assert_eq!(h.verdict_for(1, mine, 0x1000), None);
        h.apply(DeviceEvent::QpError {
            qpn: 8,
            error: QpError::AccessError,
        });
        assert_eq!(
            h.verdict_for(1, mine, 0x1000).unwrap().to_string(),
            "rxe0: IBV_EVENT_QP_ACCESS_ERR on QP 8"
        );
    }

    #[test]
    fn a_cq_error_fails_only_the_comm_on_that_cq() {
        let mut h = DeviceHealth::new("rxe0");
        let log = h.apply(DeviceEvent::CqError { cq: 0x2000 });
        assert_eq!(log.message, "rxe0: IBV_EVENT_CQ_ERR on CQ 0x2000");
        assert_eq!(h.verdict_for(1, mine, 0x1000), None);
        assert_eq!(
            h.verdict_for(1, mine, 0x2000).unwrap().to_string(),
            "rxe0: IBV_EVENT_CQ_ERR on the comm's CQ"
        );
    }

    #[test]
    fn a_forgotten_qp_or_cq_no_longer_fails_a_later_comm_that_reuses_its_id() {
        let mut h = DeviceHealth::new("rxe0");
        h.apply(DeviceEvent::QpError {
            qpn: 8,
            error: QpError::Fatal,
        });
        h.apply(DeviceEvent::CqError { cq: 0x1000 });
        assert!(h.verdict_for(1, mine, 0x1000).is_some());
        h.forget_qp(8);
        assert_eq!(
            h.verdict_for(1, mine, 0x1000).unwrap().to_string(),
            "rxe0: IBV_EVENT_CQ_ERR on the comm's CQ"
        );
        h.forget_cq(0x1000);
        assert_eq!(h.verdict_for(1, mine, 0x1000), None);
    }

    #[test]
    fn a_port_is_down_from_its_port_err_to_its_port_active() {
        let mut h = DeviceHealth::new("rxe1");
        assert!(!h.is_port_down(1));
        h.apply(DeviceEvent::PortDown { port: 1 });
        assert!(h.is_port_down(1) && !h.is_port_down(2));
        h.apply(DeviceEvent::PortActive { port: 1 });
        assert!(!h.is_port_down(1));
    }

    #[test]
    fn other_events_are_said_and_change_nothing() {
        let mut h = DeviceHealth::new("rxe0");
        let log = h.apply(DeviceEvent::Other {
            name: "IBV_EVENT_GID_CHANGE",
        });
        assert_eq!(
            (log.level, log.message.as_str()),
            (Level::Info, "rxe0: asynchronous event IBV_EVENT_GID_CHANGE")
        );
        assert_eq!(h.verdict_for(1, |_| true, 0x1000), None);
    }

    #[test]
    fn a_fault_on_a_member_of_a_virtual_nic_names_the_member() {
        let mut h = DeviceHealth::new("rxe1");
        h.apply(DeviceEvent::PortDown { port: 1 });
        let f = h
            .verdict_for(1, mine, 0)
            .unwrap()
            .of_member("rxe1", 1, "rxe0+rxe1");
        assert_eq!(
            f.to_string(),
            "member rxe1:1 of rxe0+rxe1: rxe1 port 1 went down (IBV_EVENT_PORT_ERR)"
        );
    }
}
