//! The devices' asynchronous events: a port going down or coming back, QP and CQ errors, a
//! fatal device error. Without them a downed port leaves receives pending forever (soft-RoCE
//! and some NICs give no work completion at all).
//!
//! No thread reads them: each device's event file descriptor is made non-blocking, and the
//! comms drain it during their periodic look (every so many waiting calls, see
//! `ferro_proto::health::LIVENESS_EVERY`), which NCCL's progress thread makes continuously while
//! it waits. So nothing can outlive an unloading `dlclose` or keep the process alive, and a
//! comm that waits learns of a failure within milliseconds. The cost is one `read` on an empty
//! non-blocking descriptor per look.
//!
//! This module only reads the descriptor, turns each event into a typed fact and logs it; what
//! an event means for the device's comms (the record of ports down, bad QPs and CQs, a fatal
//! error, and the verdict for one comm) is the fault policy's `ferro_proto::health::DeviceHealth`.

use crate::{info, warn};
use ferro_ffi::log_flags::{INIT, NET};
use ferro_proto::health::device::Level;
use ferro_proto::health::facts::QpError;
use ferro_proto::health::{DeviceEvent, DeviceFault, DeviceHealth};
use ferro_verbs::sys::*;
use ferro_verbs::{AsyncEvent, Context, EventTarget};
use std::sync::{Arc, Mutex, OnceLock};

/// One device's event reader and what it learned.
#[derive(Debug)]
pub struct DeviceEvents {
    ctx: Arc<Context>,
    /// Events can only be read without blocking once the descriptor is non-blocking; if that
    /// failed, they are not read at all (a WARN says so once).
    readable: bool,
    /// What the events said so far (the fault policy's record of the device).
    health: Mutex<DeviceHealth>,
}

/// The event reader of `ctx`'s device (one per device, shared by its ports and comms).
pub fn of(ctx: &Arc<Context>) -> Arc<DeviceEvents> {
    static ALL: OnceLock<Mutex<Vec<Arc<DeviceEvents>>>> = OnceLock::new();
    let mut all = ALL
        .get_or_init(|| Mutex::new(Vec::new()))
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(e) = all.iter().find(|e| Arc::ptr_eq(&e.ctx, ctx)) {
        return e.clone();
    }
    let readable = match ctx.set_async_nonblocking() {
        Ok(()) => true,
        Err(e) => {
            warn!(
                INIT | NET,
                "{}: cannot read asynchronous events without blocking ({e}); a port that goes down will only be noticed through a dead peer or a failed completion",
                ctx.name()
            );
            false
        }
    };
    let e = Arc::new(DeviceEvents {
        ctx: ctx.clone(),
        readable,
        health: Mutex::new(DeviceHealth::new(ctx.name())),
    });
    all.push(e.clone());
    e
}

/// An event as the fault policy sees it. An event whose target does not fit its kind (never
/// seen) is only said, as any other event.
fn typed(ev: &AsyncEvent) -> DeviceEvent {
    match (ev.kind, ev.target) {
        (IBV_EVENT_PORT_ERR, EventTarget::Port(port)) => DeviceEvent::PortDown { port },
        (IBV_EVENT_PORT_ACTIVE, EventTarget::Port(port)) => DeviceEvent::PortActive { port },
        (IBV_EVENT_DEVICE_FATAL, _) => DeviceEvent::DeviceFatal,
        (IBV_EVENT_QP_FATAL, EventTarget::Qp(qpn)) => DeviceEvent::QpError {
            qpn,
            error: QpError::Fatal,
        },
        (IBV_EVENT_QP_REQ_ERR, EventTarget::Qp(qpn)) => DeviceEvent::QpError {
            qpn,
            error: QpError::RequestError,
        },
        (IBV_EVENT_QP_ACCESS_ERR, EventTarget::Qp(qpn)) => DeviceEvent::QpError {
            qpn,
            error: QpError::AccessError,
        },
        (IBV_EVENT_CQ_ERR, EventTarget::Cq(cq)) => DeviceEvent::CqError { cq },
        _ => DeviceEvent::Other { name: ev.name() },
    }
}

impl DeviceEvents {
    /// Reads every pending event, logs it and records what it means for comms.
    fn drain(&self, h: &mut DeviceHealth) {
        if !self.readable {
            return;
        }
        loop {
            let ev = match self.ctx.next_async_event() {
                Ok(Some(ev)) => ev,
                Ok(None) => return,
                Err(e) => {
                    warn!(
                        NET,
                        "{}: reading asynchronous events failed: {e}",
                        self.ctx.name()
                    );
                    return;
                }
            };
            let log = h.apply(typed(&ev));
            match log.level {
                Level::Warn => warn!(NET, "{}", log.message),
                Level::Info => info!(NET, "{}", log.message),
            }
        }
    }

    /// Reads and logs pending events (a new connection does, so a port's return is said
    /// before it is used).
    pub fn drain_now(&self) {
        let mut h = self.health.lock().unwrap_or_else(|p| p.into_inner());
        self.drain(&mut h);
    }

    /// Forgets the error events recorded against QP `qpn` (its comm rebuilt or destroyed it).
    pub fn forget_qp(&self, qpn: u32) {
        self.health
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .forget_qp(qpn);
    }

    /// Forgets the error events recorded against the CQ at `cq` (its comm destroyed it).
    pub fn forget_cq(&self, cq: usize) {
        self.health
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .forget_cq(cq);
    }

    /// Reads pending events, then says whether `port` is down (its last event was
    /// `IBV_EVENT_PORT_ERR`).
    pub fn is_port_down(&self, port: u8) -> bool {
        let mut h = self.health.lock().unwrap_or_else(|p| p.into_inner());
        self.drain(&mut h);
        h.is_port_down(port)
    }

    /// Reads pending events, then says why a comm on `port` whose QPs are those for which
    /// `uses_qp` is true, with the CQ at `cq`, cannot go on, if it cannot
    /// ([`DeviceHealth::verdict_for`]). Allocates nothing unless it has something to say.
    pub fn verdict(
        &self,
        port: u8,
        uses_qp: impl Fn(u32) -> bool,
        cq: usize,
    ) -> Option<DeviceFault> {
        let mut h = self.health.lock().unwrap_or_else(|p| p.into_inner());
        self.drain(&mut h);
        h.verdict_for(port, uses_qp, cq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: u32, target: EventTarget) -> DeviceEvent {
        typed(&AsyncEvent { kind, target })
    }

    #[test]
    fn each_event_the_policy_judges_becomes_its_typed_fact() {
        assert_eq!(
            ev(IBV_EVENT_PORT_ERR, EventTarget::Port(2)),
            DeviceEvent::PortDown { port: 2 }
        );
        assert_eq!(
            ev(IBV_EVENT_PORT_ACTIVE, EventTarget::Port(1)),
            DeviceEvent::PortActive { port: 1 }
        );
        assert_eq!(
            ev(IBV_EVENT_DEVICE_FATAL, EventTarget::Device),
            DeviceEvent::DeviceFatal
        );
        assert_eq!(
            ev(IBV_EVENT_QP_REQ_ERR, EventTarget::Qp(9)),
            DeviceEvent::QpError {
                qpn: 9,
                error: QpError::RequestError
            }
        );
        assert_eq!(
            ev(IBV_EVENT_CQ_ERR, EventTarget::Cq(0x40)),
            DeviceEvent::CqError { cq: 0x40 }
        );
    }

    #[test]
    fn an_event_with_a_target_that_does_not_fit_is_only_said() {
        assert_eq!(
            ev(IBV_EVENT_PORT_ERR, EventTarget::Other),
            DeviceEvent::Other {
                name: "IBV_EVENT_PORT_ERR"
            }
        );
        assert_eq!(
            ev(IBV_EVENT_GID_CHANGE, EventTarget::Port(1)),
            DeviceEvent::Other {
                name: "IBV_EVENT_GID_CHANGE"
            }
        );
    }

    #[test]
    fn every_typed_event_is_named_as_libibverbs_names_it() {
        for (kind, target) in [
            (IBV_EVENT_PORT_ERR, EventTarget::Port(1)),
            (IBV_EVENT_PORT_ACTIVE, EventTarget::Port(1)),
            (IBV_EVENT_DEVICE_FATAL, EventTarget::Device),
            (IBV_EVENT_QP_FATAL, EventTarget::Qp(1)),
            (IBV_EVENT_QP_REQ_ERR, EventTarget::Qp(1)),
            (IBV_EVENT_QP_ACCESS_ERR, EventTarget::Qp(1)),
            (IBV_EVENT_CQ_ERR, EventTarget::Cq(1)),
            (IBV_EVENT_LID_CHANGE, EventTarget::Port(1)),
        ] {
            let e = AsyncEvent { kind, target };
            assert_eq!(typed(&e).name(), e.name());
        }
    }
}
