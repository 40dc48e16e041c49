//! A connected send or receive comm: its verbs endpoint, its registered protocol memory, its
//! out-of-band socket (the liveness signal), the request handles NCCL holds, and the protocol
//! core (`ferro_proto::comm`) that decides everything, behind the comm's one mutex.
//!
//! `test` is shared by both sides: take the request if it is done, else drain the CQ into the
//! core, take it again, and every so many unfinished calls look at the device's events, the
//! out-of-band socket and the clock. What those facts mean (continue, warn, fail, poll once more
//! and then fail) is the fault policy's (`ferro_proto::health`); this module gathers the facts
//! and executes its verdicts.

use super::endpoint::{Endpoint, FlushQp, Rail, RegBuf};
use super::handles::{ObjectKind, ReqHandle};
use crate::error::{Error, Result};
use crate::warn;
use ferro_ffi::log_flags::NET;
use ferro_proto::Keys;
use ferro_proto::comm::recv::RecvCore;
use ferro_proto::comm::send::SendCore;
use ferro_proto::comm::{CommHealth, CoreError, Done, Failure, FailureKind};
use ferro_proto::health::{FailedCompletion, Look, PeerGone, Socket, Verdict, verdict};
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
        Comm::withdraw(self.0);
        // SAFETY: allocated by Box::into_raw in Comm::create and never handed out; withdrawn
        // from the receiver list, so no other thread refers to it.
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

    /// The first step of a comm's end, before its magic word is overwritten and before it is
    /// freed: takes it out of the one structure other threads reach it through (the receiver
    /// list of clear-to-send writes), waiting for a thread that is visiting it. A no-op for a
    /// send comm.
    pub(super) fn withdraw(p: *const Comm) {
        super::cts::unregister(p);
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
                    let v = verdict::refused(&self.describe(), &e);
                    self.execute(core, v, &mut |_| {});
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
                    let failed = FailedCompletion {
                        device: &rail.dev.ibdev,
                        port: rail.dev.port,
                        status: wc.status,
                        status_name: wc_status_name(wc.status),
                        vendor_err: wc.vendor_err,
                        opcode: wc.opcode,
                        qp_num: wc.qp_num,
                    };
                    let v = verdict::failed_completion(&self.describe(), &failed);
                    // Inside a poll: the poll under way is the last one.
                    self.execute(core, v, &mut |_| {});
                }
            }
            if n < wcs.len() {
                return;
            }
        }
    }

    /// Reads the out-of-band socket. Nothing is expected on it after the handshake: only its
    /// end (closed, reset, timed out) is a fact.
    fn socket(&self) -> Socket {
        let mut b = [0u8; 64];
        match (&self.sock).read(&mut b) {
            Ok(0) => Socket::Gone(PeerGone::Closed),
            Ok(_) => Socket::Quiet, // nothing is expected after the handshake; ignore
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                Socket::Quiet
            }
            Err(e) if e.kind() == ErrorKind::TimedOut => {
                Socket::Gone(PeerGone::TimedOut(e.to_string()))
            }
            Err(e) => Socket::Gone(PeerGone::Error(e.to_string())),
        }
    }

    /// Called on every call that waits (an unfinished `test`, a retried `isend` or `irecv`):
    /// every so many of them, gather the facts (the device's asynchronous events, the peer's
    /// out-of-band connection, the clock), ask the fault policy, and execute its verdict.
    pub(super) fn on_wait<C: CoreOps>(&self, core: &mut C, mut on_wc: impl FnMut(&mut C, &ibv_wc)) {
        if !core.health_mut().look_due() {
            return;
        }
        super::cts::flush_others(self);
        // The events are read (and each logged) whatever the policy then makes of them.
        let look = Look {
            device: self.ep.device_verdict(),
            socket: self.socket(),
            now: now(),
            waiting: core.is_waiting(),
        };
        let v = core.health_mut().decide(look);
        self.execute(core, v, &mut |c| self.poll(c, &mut on_wc));
    }

    /// A post or poll that libibverbs refused (`what`: its error): the fault policy's verdict
    /// executed on the comm (today its sticky failure), and the failure in force as the
    /// call's error.
    pub(super) fn refused<C: CoreOps>(&self, core: &mut C, what: &dyn std::fmt::Display) -> Error {
        let comm = self.describe();
        self.execute(core, verdict::refused(&comm, what), &mut |_| {});
        match core.health().failure() {
            Some(f) => failure_error(f.clone()),
            // The comm goes on, but this call's post was refused all the same.
            None => Error::System(format!("{comm}: {what}")),
        }
    }

    /// Executes a verdict of the fault policy on this comm. `poll_once_more` drains the CQs
    /// before a [`Verdict::PollThenFail`] fails the comm, so work that completed before the
    /// fault still counts; the failure then says what was still pending.
    pub(super) fn execute<C: CoreOps>(
        &self,
        core: &mut C,
        verdict: Verdict,
        poll_once_more: &mut dyn FnMut(&mut C),
    ) {
        match verdict {
            Verdict::Continue => {}
            Verdict::Warn(stall) => warn!(
                NET,
                "{}",
                stall.warning(
                    &self.describe(),
                    C::SIDE,
                    &core.describe_wait(),
                    &core.health().counters.summary(C::SIDE == "send"),
                )
            ),
            Verdict::Fail(f) => {
                core.health_mut().fail(f);
            }
            Verdict::PollThenFail(fault) => {
                poll_once_more(core);
                let f = fault.failure(&self.describe(), &core.describe_wait());
                core.health_mut().fail(f);
            }
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
