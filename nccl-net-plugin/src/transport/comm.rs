//! A connected send or receive comm: its verbs endpoint, its registered protocol memory, its
//! out-of-band socket (the liveness signal), the request handles NCCL holds, and the protocol
//! core (`ferro_proto::comm`) that decides everything, behind the comm's one mutex.
//!
//! `test` is shared by both sides: take the request if it is done, else drain the CQ into the
//! core, take it again, and every so many unfinished calls look at the out-of-band socket.

use super::endpoint::{Endpoint, FlushQp, Rail, RegBuf};
use super::handles::{ObjectKind, ReqHandle};
use crate::error::{Error, Result};
use crate::warn;
use ferro_ffi::log_flags::NET;
use ferro_proto::Keys;
use ferro_proto::comm::recv::RecvCore;
use ferro_proto::comm::send::SendCore;
use ferro_proto::comm::{CommHealth, CoreError, Done, Failure, FailureKind};
use ferro_verbs::SendChain;
use ferro_verbs::sys::*;
use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The sender's protocol memory: its CTS FIFO (written by the peer), a staging area for the
/// sizes of multi-buffer groups, and where the peer's sizes FIFO is.
#[derive(Debug)]
pub(super) struct SenderMem {
    pub(super) fifo: RegBuf,
    pub(super) sizes_stage: RegBuf,
    /// The peer's sizes FIFO: its address and its key on each of the peer's members.
    pub(super) peer_sizes: (u64, Keys),
    /// Buffers reused by every group's posts, so the data path allocates nothing once they
    /// have grown to their working size. Only locked while the core's lock is held.
    pub(super) scratch: Mutex<SendScratch>,
}

/// The planned writes of a group and the work requests of one QP's chain (both keep their
/// capacity from group to group).
#[derive(Debug, Default)]
pub(super) struct SendScratch {
    pub(super) writes: Vec<ferro_proto::plan::Write>,
    pub(super) chain: SendChain,
}

/// The receiver's protocol memory: CTS staging (local copies written to the peer), its sizes
/// FIFO (written by the peer), and where the peer's CTS FIFO is.
#[derive(Debug)]
pub(super) struct ReceiverMem {
    pub(super) cts_stage: RegBuf,
    pub(super) sizes: RegBuf,
    /// The peer's CTS FIFO: its address and its key on each of the peer's members.
    pub(super) peer_fifo: (u64, Keys),
}

/// Which side a comm is, with that side's memory and protocol core.
#[allow(
    clippy::large_enum_variant,
    reason = "one per comm, inside the comm's own Box; the send core's fixed arrays avoid allocating per message"
)]
#[derive(Debug)]
pub(super) enum Side {
    Sender {
        mem: SenderMem,
        core: Mutex<SendCore>,
    },
    Receiver {
        mem: ReceiverMem,
        core: Mutex<RecvCore>,
        /// With GPUDirect RDMA (or `FERRO_FLUSH_HOST`): per member device, a QP connected to
        /// itself, used to read back one byte of received data so it is visible before NCCL
        /// consumes it (empty: no flushing).
        flush: Vec<FlushQp>,
    },
}

/// A connected send or receive comm.
#[derive(Debug)]
#[repr(C)]
pub struct Comm {
    /// [`ObjectKind::SendComm`] or [`ObjectKind::RecvComm`]'s magic word; first field.
    pub(super) magic: u64,
    pub(super) ep: Endpoint,
    pub(super) side: Side,
    pub(super) sock: TcpStream,
    pub(super) peer: SocketAddr,
    handles: Box<[ReqHandle]>,
    /// NCCL profiler events of this comm's work (v10+; empty without a profiler).
    pub(crate) profiler: crate::profiler::CommEvents,
}

// SAFETY: the raw pointers inside (request handles' back-pointers to this comm, verbs objects)
// are only dereferenced under the comm's mutex or refer to thread-safe verbs objects.
unsafe impl Send for Comm {}
// SAFETY: as above; all mutable state is behind the core's mutex.
unsafe impl Sync for Comm {}

impl Drop for Comm {
    fn drop(&mut self) {
        if matches!(self.side, Side::Receiver { .. }) {
            super::cts::unregister(self);
        }
    }
}

/// A comm that is not yet NCCL's: freed if dropped (an error path), or handed to NCCL with
/// [`CommPtr::into_raw`], after which `close` frees it.
#[derive(Debug)]
pub struct CommPtr(*mut Comm);

impl CommPtr {
    pub fn into_raw(self) -> *mut core::ffi::c_void {
        let p = self.0;
        std::mem::forget(self);
        p.cast()
    }
}

impl Drop for CommPtr {
    fn drop(&mut self) {
        // SAFETY: allocated by Box::into_raw in Comm::create and never handed out.
        drop(unsafe { Box::from_raw(self.0) });
    }
}

/// Maps a refusal of the protocol core to the plugin's error, naming the comm where useful.
fn core_error(comm: &Comm, e: CoreError) -> Error {
    match e {
        CoreError::NotInFlight { .. } => Error::Usage(e.to_string()),
        CoreError::TableFull { .. } => Error::Internal(format!("{}: {e}", comm.describe())),
        CoreError::Usage(m) => Error::Usage(format!("{}: {m}", comm.describe())),
        CoreError::Failed(f) => failure_error(f),
    }
}

pub(super) fn failure_error(f: Failure) -> Error {
    match f.kind {
        FailureKind::Remote => Error::Remote(f.message),
        FailureKind::System => Error::System(f.message),
        FailureKind::Usage => Error::Usage(f.message),
    }
}

/// What `test` and the periodic look need from either side's core.
pub(super) trait CoreOps {
    /// "send" or "receive", for messages.
    const SIDE: &'static str;
    fn take_done(&mut self, req: u32) -> std::result::Result<Option<Done>, CoreError>;
    fn health(&self) -> &CommHealth;
    fn health_mut(&mut self) -> &mut CommHealth;
    fn is_waiting(&self) -> bool;
    fn describe_wait(&self) -> String;
}

macro_rules! core_ops {
    ($t:ty, $side:literal) => {
        impl CoreOps for $t {
            const SIDE: &'static str = $side;
            fn take_done(&mut self, req: u32) -> std::result::Result<Option<Done>, CoreError> {
                <$t>::take_done(self, req)
            }
            fn health(&self) -> &CommHealth {
                &self.health
            }
            fn health_mut(&mut self) -> &mut CommHealth {
                &mut self.health
            }
            fn is_waiting(&self) -> bool {
                <$t>::is_waiting(self)
            }
            fn describe_wait(&self) -> String {
                <$t>::describe_wait(self)
            }
        }
    };
}
core_ops!(SendCore, "send");
core_ops!(RecvCore, "receive");

/// `NCCL_IB_RETURN_ASYNC_EVENTS` (1 when the plugin is not initialised).
fn return_async_events() -> bool {
    crate::plugin::get().is_ok_and(|p| p.config.return_async_events)
}

/// The time since the plugin first looked at the clock: the watchdog's time base.
fn now() -> Duration {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed()
}

/// Hands a successful completion of a send comm's CQ to its core.
pub(super) fn sender_completion(core: &mut SendCore, wc: &ibv_wc) {
    core.handle_completion(wc.wr_id);
}

/// Hands a successful completion of a receive comm's CQ to its core, which reads the sizes FIFO
/// when a multi-buffer group finishes.
pub(super) fn receiver_completion(
    mem: &ReceiverMem,
) -> impl Fn(&mut RecvCore, &ibv_wc) + Copy + '_ {
    move |core, wc| {
        core.handle_completion(wc.wr_id, u32::from_be(wc.imm_data), |seq, n| {
            super::recv::read_sizes(&mem.sizes, seq, n)
        })
    }
}

/// A retried call's answer: NULL, unless the periodic look found the comm failed.
pub(super) fn retry_answer<C: CoreOps, T>(core: &C) -> Result<Option<T>> {
    match core.health().failure() {
        Some(f) => Err(failure_error(f.clone())),
        None => Ok(None),
    }
}

impl Comm {
    /// The (virtual) device this comm's QPs are on.
    pub fn device(&self) -> &'static crate::vnic::VDevice {
        self.ep.vdev
    }

    /// Over a virtual NIC: the work completions polled on each member device's CQ, for the
    /// close line (how the comm's traffic spread over the members); empty otherwise.
    fn per_device(&self, c: &ferro_proto::comm::counters::Counters) -> String {
        if !self.ep.vdev.is_virtual {
            return String::new();
        }
        let list: Vec<String> = self
            .ep
            .rails
            .iter()
            .zip(c.member_completions)
            .map(|(r, n)| format!("{}:{} {n}", r.dev.ibdev, r.dev.port))
            .collect();
        format!("; completions per member device: {}", list.join(", "))
    }

    /// The traffic class each of the comm's QPs was given, as the kernel reports it back.
    pub fn qp_traffic_classes(&self) -> Result<Vec<u8>> {
        self.ep
            .qps
            .iter()
            .map(|q| {
                q.query(ferro_verbs::sys::IBV_QP_AV)
                    .map(|a| a.ah_attr.grh.traffic_class)
                    .map_err(|e| Error::System(e.to_string()))
            })
            .collect()
    }

    /// The numbers of the comm's data QPs, by QP index (named in profiler events).
    pub fn qp_numbers(&self) -> impl Iterator<Item = u32> + '_ {
        self.ep.qps.iter().map(|q| q.qpn())
    }

    /// How the comm's QPs map onto the member devices and which QPs each group uses.
    pub fn layout(&self) -> ferro_proto::plan::QpLayout {
        self.ep.layout
    }

    /// A new comm on the heap, handed over as a raw pointer from the start: the request
    /// handles hold back-pointers to it, so it is only ever written through that pointer, never
    /// through a `Box` or `&mut` that would invalidate them.
    pub(super) fn create(ep: Endpoint, side: Side, sock: TcpStream, peer: SocketAddr) -> CommPtr {
        let (kind, nreq) = match side {
            Side::Sender { .. } => (ObjectKind::SendComm, ferro_proto::comm::send::SEND_REQS),
            Side::Receiver { .. } => (ObjectKind::RecvComm, ferro_proto::comm::recv::RECV_REQS),
        };
        let p = Box::into_raw(Box::new(Comm {
            magic: kind.magic(),
            ep,
            side,
            sock,
            peer,
            handles: Box::new([]),
            profiler: Default::default(),
        }));
        let handles: Box<[ReqHandle]> =
            (0..nreq as u32).map(|idx| ReqHandle::new(p, idx)).collect();
        // SAFETY: p is the only pointer to this fresh allocation; the field is assigned through
        // it (no reference to the comm is created), so the copies of p in the handles stay valid.
        unsafe { (*p).handles = handles };
        if kind == ObjectKind::RecvComm {
            super::cts::register(p);
        }
        CommPtr(p)
    }

    pub(super) fn describe(&self) -> String {
        format!("{} peer {}", self.ep.vdev.label(), self.peer)
    }

    pub(super) fn req_ptr(&self, idx: u32) -> *mut ReqHandle {
        (&self.handles[idx as usize] as *const ReqHandle).cast_mut()
    }

    pub(super) fn lock<'a, C>(&self, m: &'a Mutex<C>) -> Result<MutexGuard<'a, C>> {
        m.lock()
            .map_err(|_| Error::Internal("comm unusable after an earlier internal error".into()))
    }

    pub(super) fn core_error(&self, e: CoreError) -> Error {
        core_error(self, e)
    }

    /// Drains every member device's CQ, handing each successful completion to `on_wc`; a
    /// failed completion becomes the comm's sticky failure.
    pub(super) fn poll<C: CoreOps>(&self, core: &mut C, mut on_wc: impl FnMut(&mut C, &ibv_wc)) {
        for (m, rail) in self.ep.rails.iter().enumerate() {
            self.poll_rail(m, rail, core, &mut on_wc);
        }
    }

    fn poll_rail<C: CoreOps>(
        &self,
        m: usize,
        rail: &Rail,
        core: &mut C,
        on_wc: &mut impl FnMut(&mut C, &ibv_wc),
    ) {
        let mut wcs = [ibv_wc::default(); 16];
        loop {
            core.health_mut().counters.polls += 1;
            let n = match rail.cq.poll(&mut wcs) {
                Ok(0) => {
                    core.health_mut().counters.empty_polls += 1;
                    0
                }
                Ok(n) => n,
                Err(e) => {
                    core.health_mut()
                        .fail(Failure::system(format!("{}: {e}", self.describe())));
                    return;
                }
            };
            if let Some(c) = core.health_mut().counters.member_completions.get_mut(m) {
                *c += n as u64;
            }
            for wc in &wcs[..n] {
                if wc.status == IBV_WC_SUCCESS {
                    crate::profiler::on_completion(self, wc);
                    on_wc(core, wc);
                } else {
                    core.health_mut().fail(Failure::remote(format!(
                        "{}: work completion failed on {}:{}: {} (status {}, vendor error {:#x}, opcode {}, QP {})",
                        self.describe(),
                        rail.dev.ibdev,
                        rail.dev.port,
                        wc_status_name(wc.status),
                        wc.status,
                        wc.vendor_err,
                        wc.opcode,
                        wc.qp_num
                    )));
                }
            }
            if n < wcs.len() {
                return;
            }
        }
    }

    /// Reads the out-of-band socket; a closed, reset or timed-out connection means the peer is
    /// gone. The answer says how, with the likely cause.
    fn peer_gone(&self) -> Option<String> {
        let mut b = [0u8; 64];
        match (&self.sock).read(&mut b) {
            Ok(0) => Some("closed the connection (process exited or was killed?)".to_string()),
            Ok(_) => None, // nothing is expected after the handshake; ignore
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                None
            }
            Err(e) if e.kind() == ErrorKind::TimedOut => Some(format!(
                "stopped answering: the out-of-band connection timed out after unanswered keepalive probes ({e}; host down or network partitioned?)"
            )),
            Err(e) => Some(format!(
                "connection error: {e} (process killed or host rebooted?)"
            )),
        }
    }

    /// Called on every call that waits (an unfinished `test`, a retried `isend` or `irecv`):
    /// every so many of them, look at the device's asynchronous events, the peer's out-of-band
    /// connection and the clock (stall watchdog). A dead peer becomes the comm's sticky
    /// failure after a last poll, so anything that completed before it left still counts.
    pub(super) fn on_wait<C: CoreOps>(&self, core: &mut C, on_wc: impl FnMut(&mut C, &ibv_wc)) {
        if core.health().failure().is_some() || !core.health_mut().tick_waiting() {
            return;
        }
        super::cts::flush_others(self);
        // The events are read (and each logged) either way; with NCCL_IB_RETURN_ASYNC_EVENTS=0
        // they do not fail the comm, as in NCCL's IB transport (the watchdog still says what
        // the comm waits for if it stops making progress).
        let verdict = self.ep.device_verdict();
        if let Some(why) = verdict.filter(|_| return_async_events()) {
            self.poll(core, on_wc);
            let f = Failure::system(format!(
                "{}: {why}; {}",
                self.describe(),
                core.describe_wait()
            ));
            core.health_mut().fail(f);
            return;
        }
        if let Some(why) = self.peer_gone() {
            self.poll(core, on_wc);
            let f = Failure::remote(format!(
                "{}: peer {why} while requests were outstanding; {}",
                self.describe(),
                core.describe_wait()
            ));
            core.health_mut().fail(f);
            return;
        }
        let waiting = core.is_waiting();
        if let Some(stall) = core.health_mut().check_stall(now(), waiting) {
            warn!(
                NET,
                "{}: {} comm made no progress for {} s: {}; {}",
                self.describe(),
                C::SIDE,
                stall.idle.as_secs(),
                core.describe_wait(),
                core.health().counters.summary(C::SIDE == "send")
            );
        }
    }

    /// `test` on one side's core.
    fn test_with<C: CoreOps>(
        &self,
        core: &mut C,
        idx: u32,
        on_wc: impl FnMut(&mut C, &ibv_wc) + Copy,
    ) -> Result<Option<Done>> {
        if let Some(d) = core.take_done(idx).map_err(|e| self.core_error(e))? {
            return Ok(Some(d));
        }
        if core.health().failure().is_none() {
            self.poll(core, on_wc);
        }
        if let Some(d) = core.take_done(idx).map_err(|e| self.core_error(e))? {
            return Ok(Some(d));
        }
        self.on_wait(core, on_wc);
        match core.health().failure() {
            Some(f) => Err(failure_error(f.clone())),
            None => Ok(None),
        }
    }

    /// The line logged when the comm closes: what it did, from its counters.
    pub(super) fn close_line(&self) -> String {
        let (what, counters) = match &self.side {
            Side::Sender { core, .. } => ("send", core.lock().ok().map(|c| c.health.counters)),
            Side::Receiver { core, .. } => ("receive", core.lock().ok().map(|c| c.health.counters)),
        };
        match counters {
            Some(c) => format!(
                "{}: {what} comm closed: {}{}",
                self.describe(),
                c.summary(what == "send"),
                self.per_device(&c)
            ),
            None => format!(
                "{}: {what} comm closed: counters unavailable",
                self.describe()
            ),
        }
    }

    /// A copy of the comm's counters.
    pub fn counters(&self) -> Result<ferro_proto::comm::counters::Counters> {
        Ok(match &self.side {
            Side::Sender { core, .. } => self.lock(core)?.health.counters,
            Side::Receiver { core, .. } => self.lock(core)?.health.counters,
        })
    }

    /// `test`: `Some` when the request is done (it is then freed).
    pub(super) fn test(&self, idx: u32) -> Result<Option<Done>> {
        match &self.side {
            Side::Sender { core, .. } => {
                let mut core = self.lock(core)?;
                self.test_with(&mut *core, idx, sender_completion)
            }
            Side::Receiver { core, mem, .. } => {
                let mut core = self.lock(core)?;
                let done = self.test_with(&mut *core, idx, receiver_completion(mem));
                // Staged clear-to-send entries go out once the sender runs low (the poll
                // above has just counted what it used).
                if core.health.failure().is_none() {
                    self.cts_due(mem, &mut core)?;
                }
                done
            }
        }
    }
}
