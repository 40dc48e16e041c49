//! The devices' asynchronous events: a port going down or coming back, QP and CQ errors, a
//! fatal device error. Without them a downed port leaves receives pending forever (soft-RoCE
//! and some NICs give no work completion at all).
//!
//! No thread reads them: each device's event file descriptor is made non-blocking, and the
//! comms drain it during their periodic look (every so many waiting calls, see
//! `ferro_proto::comm::LIVENESS_EVERY`), which NCCL's progress thread makes continuously while
//! it waits. So nothing can outlive an unloading `dlclose` or keep the process alive, and a
//! comm that waits learns of a failure within milliseconds. The cost is one `read` on an empty
//! non-blocking descriptor per look.

use crate::{info, warn};
use ferro_ffi::log_flags::{INIT, NET};
use ferro_verbs::sys::*;
use ferro_verbs::{Context, EventTarget};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// What the events of one device said so far.
#[derive(Debug, Default)]
struct Health {
    /// Ports whose last event was `IBV_EVENT_PORT_ERR`.
    ports_down: Vec<u8>,
    /// The fatal device error, if one came.
    fatal: bool,
    /// QPs (by number) and CQs (by address) with an error event, with its name.
    bad_qps: HashMap<u32, &'static str>,
    bad_cqs: HashMap<usize, &'static str>,
}

/// One device's event reader and what it learned.
#[derive(Debug)]
pub struct DeviceEvents {
    ctx: Arc<Context>,
    /// Events can only be read without blocking once the descriptor is non-blocking; if that
    /// failed, they are not read at all (a WARN says so once).
    readable: bool,
    health: Mutex<Health>,
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
        health: Mutex::new(Health::default()),
    });
    all.push(e.clone());
    e
}

impl DeviceEvents {
    /// Reads every pending event, logs it and remembers what it means for comms.
    fn drain(&self, h: &mut Health) {
        if !self.readable {
            return;
        }
        let dev = self.ctx.name();
        loop {
            let ev = match self.ctx.next_async_event() {
                Ok(Some(ev)) => ev,
                Ok(None) => return,
                Err(e) => {
                    warn!(NET, "{dev}: reading asynchronous events failed: {e}");
                    return;
                }
            };
            match (ev.kind, ev.target) {
                (IBV_EVENT_PORT_ERR, EventTarget::Port(p)) => {
                    if !h.ports_down.contains(&p) {
                        h.ports_down.push(p);
                    }
                    warn!(
                        NET,
                        "{dev} port {p}: {}: the port went down (link lost: check the cable, the switch port or the netdev); comms on it fail",
                        ev.name()
                    );
                }
                (IBV_EVENT_PORT_ACTIVE, EventTarget::Port(p)) => {
                    h.ports_down.retain(|&d| d != p);
                    info!(
                        NET,
                        "{dev} port {p}: {}: the port is active again; new connections can use it",
                        ev.name()
                    );
                }
                (IBV_EVENT_DEVICE_FATAL, _) => {
                    h.fatal = true;
                    warn!(
                        NET,
                        "{dev}: {}: the device failed; every comm on it fails",
                        ev.name()
                    );
                }
                (
                    IBV_EVENT_QP_FATAL | IBV_EVENT_QP_REQ_ERR | IBV_EVENT_QP_ACCESS_ERR,
                    EventTarget::Qp(qpn),
                ) => {
                    h.bad_qps.insert(qpn, ev.name());
                    warn!(NET, "{dev}: {} on QP {qpn}", ev.name());
                }
                (IBV_EVENT_CQ_ERR, EventTarget::Cq(cq)) => {
                    h.bad_cqs.insert(cq, ev.name());
                    warn!(NET, "{dev}: {} on CQ {cq:#x}", ev.name());
                }
                _ => info!(NET, "{dev}: asynchronous event {}", ev.name()),
            }
        }
    }

    /// Reads and logs pending events (a new connection does, so a port's return is said
    /// before it is used).
    pub fn drain_now(&self) {
        let mut h = self.health.lock().unwrap_or_else(|p| p.into_inner());
        self.drain(&mut h);
    }

    /// Reads pending events, then says why a comm on `port` whose QPs are those for which
    /// `uses_qp` is true, with the CQ at `cq`, cannot go on, if it cannot. Allocates nothing
    /// unless it has something to say.
    pub fn verdict(&self, port: u8, uses_qp: impl Fn(u32) -> bool, cq: usize) -> Option<String> {
        let mut h = self.health.lock().unwrap_or_else(|p| p.into_inner());
        self.drain(&mut h);
        let dev = self.ctx.name();
        if h.fatal {
            return Some(format!(
                "{dev}: the device reported a fatal error (IBV_EVENT_DEVICE_FATAL)"
            ));
        }
        if h.ports_down.contains(&port) {
            return Some(format!("{dev} port {port} went down (IBV_EVENT_PORT_ERR)"));
        }
        if let Some((qpn, what)) = h.bad_qps.iter().find(|(q, _)| uses_qp(**q)) {
            return Some(format!("{dev}: {what} on QP {qpn}"));
        }
        h.bad_cqs
            .get(&cq)
            .map(|what| format!("{dev}: {what} on the comm's CQ"))
    }
}
