//! The devices' asynchronous events: a port going down or coming back, QP and CQ errors, a
//! fatal device error. Without them a downed port leaves receives pending forever (soft-RoCE
//! and some NICs give no work completion at all).
//!
//! No thread reads them: each device's event file descriptor is made non-blocking, and the
//! comms drain it during their periodic look (every so many waiting calls, see
//! `ferro_proto::health::LIVENESS_EVERY`), which NCCL's progress thread makes continuously while
//! it waits. So nothing can outlive an unloading `dlclose` or keep the process alive, and a
//! comm that waits learns of a failure within milliseconds.
//!
//! What a look costs, with any number of comms on the device: one `read` on an empty
//! non-blocking descriptor by the one comm that gets the device's reader lock (a try-lock: a
//! comm that finds another one reading goes on without reading, as the events are being read),
//! and one atomic load to judge the comm. The record of what the events said is only locked to
//! write an event that was read, and to judge a comm once the device has reported something that
//! can fail a comm (a port down, a fatal error, a QP or CQ error): a device that never did
//! judges every comm without a lock. So looks of different comms never wait for each other on a
//! healthy device, and never wait for a `read` at all.
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, TryLockError};

/// One device's event reader and what it learned.
#[derive(Debug)]
pub struct DeviceEvents {
    ctx: Arc<Context>,
    /// Events can only be read without blocking once the descriptor is non-blocking; if that
    /// failed, they are not read at all (a WARN says so once).
    readable: bool,
    /// What the events said so far.
    book: EventBook,
}

/// A device's record of its events: read in by one thread at a time, judged by any number.
#[derive(Debug)]
struct EventBook {
    /// Held by the thread reading the descriptor.
    reader: Mutex<()>,
    /// What the events said so far (the fault policy's record of the device): written when an
    /// event was read, read to judge a comm once `faulted`.
    health: RwLock<DeviceHealth>,
    /// Whether an event that can fail a comm was recorded (set after the record was written):
    /// until then every verdict is "go on", given without the record's lock.
    faulted: AtomicBool,
}

impl EventBook {
    fn new(device: &str) -> EventBook {
        EventBook {
            reader: Mutex::new(()),
            health: RwLock::new(DeviceHealth::new(device)),
            faulted: AtomicBool::new(false),
        }
    }

    /// Reads events with `next` until it has none, records each and logs it; returns how many.
    /// With `wait`, waits for a thread that is reading; without, `None` (nothing read) when
    /// one is.
    fn read_in(&self, wait: bool, mut next: impl FnMut() -> Option<DeviceEvent>) -> Option<usize> {
        let _reading = if wait {
            self.reader.lock().unwrap_or_else(|p| p.into_inner())
        } else {
            match self.reader.try_lock() {
                Ok(g) => g,
                Err(TryLockError::WouldBlock) => return None,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
            }
        };
        let mut n = 0;
        while let Some(ev) = next() {
            n += 1;
            let log = self
                .health
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .apply(ev);
            if can_fail_a_comm(&ev) {
                self.faulted.store(true, Ordering::Release);
            }
            match log.level {
                Level::Warn => warn!(NET, "{}", log.message),
                Level::Info => info!(NET, "{}", log.message),
            }
        }
        Some(n)
    }

    /// [`DeviceHealth::verdict_for`], without a lock while the device never reported anything
    /// that can fail a comm.
    fn verdict(&self, port: u8, uses_qp: impl Fn(u32) -> bool, cq: usize) -> Option<DeviceFault> {
        if !self.faulted.load(Ordering::Acquire) {
            return None;
        }
        self.health
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .verdict_for(port, uses_qp, cq)
    }
}

/// Whether a recorded `ev` can make [`DeviceHealth::verdict_for`] fail a comm: a port that is
/// active again or an event that is only said cannot, on a device that reported nothing else.
fn can_fail_a_comm(ev: &DeviceEvent) -> bool {
    !matches!(
        ev,
        DeviceEvent::PortActive { .. } | DeviceEvent::Other { .. }
    )
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
        book: EventBook::new(ctx.name()),
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
    /// The next pending event, typed; `None` when there is none (or reading failed: said).
    fn next_event(&self) -> Option<DeviceEvent> {
        match self.ctx.next_async_event() {
            Ok(ev) => ev.as_ref().map(typed),
            Err(e) => {
                warn!(
                    NET,
                    "{}: reading asynchronous events failed: {e}",
                    self.ctx.name()
                );
                None
            }
        }
    }

    /// Reads every pending event, logs it and records what it means for comms; `wait`: see
    /// [`EventBook::read_in`].
    fn drain(&self, wait: bool) {
        if self.readable {
            self.book.read_in(wait, || self.next_event());
        }
    }

    /// Forgets the error events recorded against QP `qpn` (its comm rebuilt or destroyed it).
    pub fn forget_qp(&self, qpn: u32) {
        self.book
            .health
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .forget_qp(qpn);
    }

    /// Forgets the error events recorded against the CQ at `cq` (its comm destroyed it).
    pub fn forget_cq(&self, cq: usize) {
        self.book
            .health
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .forget_cq(cq);
    }

    /// Reads pending events (unless another comm is reading them right now), then says whether
    /// `port` is down (its last event was `IBV_EVENT_PORT_ERR`).
    pub fn is_port_down(&self, port: u8) -> bool {
        self.drain(false);
        self.book
            .health
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_port_down(port)
    }

    /// Reads and logs pending events, waiting for a comm that is reading them (a new
    /// connection does, so a port's return is said before it is used).
    pub fn drain_now(&self) {
        self.drain(true);
    }

    /// Reads pending events if `read` (unless another comm is reading them right now), then
    /// says why a comm on `port` whose QPs are those for which `uses_qp` is true, with the CQ
    /// at `cq`, cannot go on, if it cannot ([`DeviceHealth::verdict_for`]). Allocates nothing
    /// unless it has something to say.
    pub fn verdict(
        &self,
        read: bool,
        port: u8,
        uses_qp: impl Fn(u32) -> bool,
        cq: usize,
    ) -> Option<DeviceFault> {
        if read {
            self.drain(false);
        }
        self.book.verdict(port, uses_qp, cq)
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

    fn mine(qpn: u32) -> bool {
        qpn == 7
    }

    /// An event source that hands out `events`, then nothing.
    fn source(events: Vec<DeviceEvent>) -> impl FnMut() -> Option<DeviceEvent> {
        let mut events = events.into_iter();
        move || events.next()
    }

    /// Runs `f` on another thread; whether it returned within 5 s (a thread that waits is
    /// left behind, to finish once the test lets go).
    fn returns_without_waiting(f: impl FnOnce() + Send + 'static) -> bool {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            f();
            let _ = tx.send(());
        });
        rx.recv_timeout(std::time::Duration::from_secs(5)).is_ok()
    }

    #[test]
    fn a_look_on_a_device_that_never_failed_judges_without_the_record_lock() {
        let book = Arc::new(EventBook::new("rxe0"));
        let read = book.read_in(
            false,
            source(vec![
                DeviceEvent::PortActive { port: 1 },
                DeviceEvent::Other {
                    name: "IBV_EVENT_GID_CHANGE",
                },
            ]),
        );
        assert_eq!(read, Some(2));
        let writer = book.health.write().unwrap();
        let b = book.clone();
        assert!(
            returns_without_waiting(move || assert_eq!(b.verdict(1, mine, 0x40), None)),
            "the verdict waited for the record"
        );
        drop(writer);
    }

    #[test]
    fn a_look_while_another_comm_reads_the_descriptor_neither_waits_nor_reads() {
        let book = Arc::new(EventBook::new("rxe0"));
        let reading = book.reader.lock().unwrap();
        let b = book.clone();
        assert!(
            returns_without_waiting(move || {
                let read = b.read_in(false, || panic!("read while another comm reads"));
                assert_eq!(read, None);
            }),
            "the look waited for the reader"
        );
        drop(reading);
        assert_eq!(book.read_in(false, source(Vec::new())), Some(0));
    }

    #[test]
    fn an_event_read_by_one_comm_fails_the_comms_it_concerns() {
        let book = EventBook::new("rxe0");
        assert_eq!(book.verdict(1, mine, 0x40), None);
        book.read_in(false, source(vec![DeviceEvent::PortDown { port: 1 }]));
        let fault = book.verdict(1, mine, 0x40).expect("port 1 is down");
        assert_eq!(
            fault.to_string(),
            "rxe0 port 1 went down (IBV_EVENT_PORT_ERR)"
        );
        assert_eq!(book.verdict(2, mine, 0x40), None, "port 2 is not");
        book.read_in(true, source(vec![DeviceEvent::PortActive { port: 1 }]));
        assert_eq!(book.verdict(1, mine, 0x40), None, "port 1 is back");
        book.read_in(
            true,
            source(vec![DeviceEvent::QpError {
                qpn: 7,
                error: QpError::Fatal,
            }]),
        );
        assert!(book.verdict(2, mine, 0x40).is_some(), "QP 7 is this comm's");
        assert_eq!(
            book.verdict(2, |q| q == 8, 0x40),
            None,
            "QP 7 is not this one's"
        );
    }

    #[test]
    fn only_ports_going_active_and_events_that_are_only_said_cannot_fail_a_comm() {
        assert!(!can_fail_a_comm(&DeviceEvent::PortActive { port: 1 }));
        assert!(!can_fail_a_comm(&DeviceEvent::Other { name: "x" }));
        assert!(can_fail_a_comm(&DeviceEvent::PortDown { port: 1 }));
        assert!(can_fail_a_comm(&DeviceEvent::DeviceFatal));
        assert!(can_fail_a_comm(&DeviceEvent::CqError { cq: 1 }));
        assert!(can_fail_a_comm(&DeviceEvent::QpError {
            qpn: 1,
            error: QpError::AccessError
        }));
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
