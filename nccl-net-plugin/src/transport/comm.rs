//! A connected send or receive comm, as data: its verbs endpoint, its registered protocol memory,
//! its out-of-band socket (the liveness signal), the request handles NCCL holds, and the protocol
//! core (`ferro_proto::comm`) that decides everything, behind the comm's one mutex; how it is
//! created and withdrawn, and what it reports (counters, close line). What the comm *does* is in
//! the modules above it: `progress` (polling, `test`, the periodic look), `cts`, `send`, `recv`.

use super::endpoint::{Endpoint, FlushQp, RegBuf};
use super::lock::{CoreGuard, CoreLock};
use super::objects::ObjectKind;
use super::receivers;
use crate::error::{Error, Result};
use ferro_proto::Keys;
use ferro_proto::comm::recv::RecvCore;
use ferro_proto::comm::{CoreError, Failure, FailureKind};
use ferro_proto::path::QpPath;
use ferro_proto::plan::AdaptiveRouting;
use ferro_verbs::SendChain;
use std::net::{SocketAddr, TcpStream};
use std::sync::Mutex;

/// The sender's protocol memory: its CTS FIFO (written by the peer), a staging area for the
/// sizes of multi-buffer groups, and where the peer's sizes FIFO is.
#[derive(Debug)]
pub(super) struct SenderMem {
    pub(super) fifo: RegBuf,
    pub(super) sizes_stage: RegBuf,
    /// The peer's sizes FIFO: its address and its key on each of the peer's members.
    pub(super) peer_sizes: (u64, Keys),
    /// Adaptive routing, decided once per connection from its device's link layer and the
    /// configuration (the receiver needs no say: it learns sizes from immediates either way).
    pub(super) ar: AdaptiveRouting,
    /// Buffers reused by every group's posts, so the data path allocates nothing once they
    /// have grown to their working size. Only locked while the core's lock is held.
    pub(super) scratch: CoreLock<SendScratch>,
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
        core: super::send_cell::SendCell,
    },
    Receiver {
        mem: ReceiverMem,
        core: CoreLock<RecvCore>,
        /// With GPUDirect RDMA (or `FERRO_FLUSH_HOST`): per member device, a QP connected to
        /// itself, used to read back one byte of received data so it is visible before NCCL
        /// consumes it (empty: no flushing).
        flush: Vec<FlushQp>,
        /// `FERRO_FLUSH_HOST`, taken when the comm was built: host buffers are flushed too.
        flush_host: bool,
    },
}

/// What the out-of-band connection brought after the handshake: the recovery exchange's
/// messages, decoded and queued until the comm's recovery takes them (only read and taken while
/// the core's lock is held). The peer's failure notice is told apart by its first bytes.
#[derive(Debug, Default)]
pub(super) struct OobRx {
    reader: ferro_proto::wire::Reader,
    msgs: std::collections::VecDeque<ferro_proto::wire::Msg>,
}

impl OobRx {
    /// Takes bytes read from the socket; returns the peer's failure notice if they are one.
    /// Bytes that are neither (never sent by a peer of ours) are dropped, as before recovery.
    pub(super) fn push(&mut self, bytes: &[u8]) -> Option<String> {
        if self.reader.received() == 0 {
            if let Some(why) = ferro_proto::health::facts::decode_notice(bytes) {
                return Some(why);
            }
        }
        self.reader.push(bytes);
        loop {
            match self.reader.poll() {
                Ok(Some(m)) => self.msgs.push_back(m),
                Ok(None) => return None,
                Err(_) => {
                    self.reader = ferro_proto::wire::Reader::new();
                    return None;
                }
            }
        }
    }

    pub(super) fn has_messages(&self) -> bool {
        !self.msgs.is_empty()
    }

    pub(super) fn pop(&mut self) -> Option<ferro_proto::wire::Msg> {
        self.msgs.pop_front()
    }
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
    /// The recovery messages read from `sock`.
    pub(super) oob: Mutex<OobRx>,
    handles: Box<[ReqHandle]>,
    /// NCCL profiler events of this comm's work (v10+; empty without a profiler).
    pub(crate) profiler: crate::profiler::CommEvents,
    /// A receive comm's place in the queue of comms with staged clear-to-send entries
    /// ([`receivers`]), from its creation to its withdrawal; `None` for a send comm.
    pub(super) place: Option<receivers::Place>,
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
        // SAFETY: allocated by Box::into_raw in Comm::create, never handed out and not freed;
        // the shared reference ends with this statement.
        unsafe { &*self.0 }.withdraw();
        // SAFETY: as above; withdrawn from the receiver registry, so no other thread refers
        // to it.
        drop(unsafe { Box::from_raw(self.0) });
    }
}

/// What NCCL gets as a request pointer: immutable, names the comm and a slot of its request
/// table (the state lives in the comm's protocol core).
#[derive(Debug)]
#[repr(C)]
pub struct ReqHandle {
    magic: u64,
    pub(super) comm: *const Comm,
    pub(super) idx: u32,
}

impl ReqHandle {
    pub(super) fn new(comm: *const Comm, idx: u32) -> ReqHandle {
        ReqHandle {
            magic: ObjectKind::Request.magic(),
            comm,
            idx,
        }
    }
}

impl crate::profiler::EventSource for Comm {
    fn events(&self) -> &crate::profiler::CommEvents {
        &self.profiler
    }

    fn member_devices(&self) -> Vec<i32> {
        self.device()
            .members
            .iter()
            .map(|m| m.index as i32)
            .collect()
    }

    fn qp_numbers(&self) -> Vec<u32> {
        Comm::qp_numbers(self).collect()
    }

    fn layout(&self) -> ferro_proto::plan::QpLayout {
        Comm::layout(self)
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

/// A QP's access flags as the kernel reports them.
fn access_flags(qp: &ferro_verbs::Qp) -> Result<u32> {
    qp.query(ferro_verbs::sys::IBV_QP_ACCESS_FLAGS)
        .map(|a| a.qp_access_flags)
        .map_err(|e| Error::System(e.to_string()))
}

/// A QP's traffic class (its GRH's) and service level, as the kernel reports them back.
fn kernel_path(qp: &ferro_verbs::Qp) -> Result<QpPath> {
    qp.query(ferro_verbs::sys::IBV_QP_AV)
        .map(|a| QpPath {
            tc: a.ah_attr.grh.traffic_class,
            sl: a.ah_attr.sl,
        })
        .map_err(|e| Error::System(e.to_string()))
}

/// A QP's transport retry settings as the kernel reports them back: the ACK timeout exponent,
/// the transport and RNR retry counts, and the P_Key index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpRetryAttrs {
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub pkey_index: u16,
}

fn retry_attrs(qp: &ferro_verbs::Qp) -> Result<QpRetryAttrs> {
    use ferro_verbs::sys::{IBV_QP_PKEY_INDEX, IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY, IBV_QP_TIMEOUT};
    qp.query(IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_PKEY_INDEX)
        .map(|a| QpRetryAttrs {
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            pkey_index: a.pkey_index,
        })
        .map_err(|e| Error::System(e.to_string()))
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
        Ok(self.qp_paths()?.into_iter().map(|p| p.tc).collect())
    }

    /// The traffic class and service level of each of the comm's data QPs, as the kernel
    /// reports them back (`ibv_query_qp`). Soft-RoCE keeps no service level: it reports 0.
    pub fn qp_paths(&self) -> Result<Vec<QpPath>> {
        (0..self.ep.nqps())
            .map(|q| kernel_path(self.ep.qp(q)))
            .collect()
    }

    /// The traffic class and service level this side gave each of its data QPs when it
    /// connected them (and gives them again when a recovery reconnects them).
    pub fn qp_paths_given(&self) -> Vec<QpPath> {
        (0..self.ep.nqps())
            .map(|q| self.ep.data_qp_path(q))
            .collect()
    }

    /// The traffic class and service level of a receive comm's flush QPs, one per member
    /// device, as the kernel reports them back (empty: the comm does not flush, or is a send
    /// comm).
    pub fn flush_qp_paths(&self) -> Result<Vec<QpPath>> {
        match &self.side {
            Side::Receiver { flush, .. } => flush.iter().map(|f| kernel_path(&f.qp)).collect(),
            Side::Sender { .. } => Ok(Vec::new()),
        }
    }

    /// The ACK timeout, retry counts and P_Key index of each of the comm's data QPs, as the
    /// kernel reports them back (`ibv_query_qp`).
    pub fn qp_retry_attrs(&self) -> Result<Vec<QpRetryAttrs>> {
        (0..self.ep.nqps())
            .map(|q| retry_attrs(self.ep.qp(q)))
            .collect()
    }

    /// The access flags (`qp_access_flags`) of the comm's data QPs, as the kernel reports them
    /// back: what the peer may do through each to this side's memory.
    pub fn qp_access_flags(&self) -> Result<Vec<u32>> {
        (0..self.ep.nqps())
            .map(|q| access_flags(self.ep.qp(q)))
            .collect()
    }

    /// The access flags of a receive comm's flush QPs, one per member device (empty: the comm
    /// does not flush, or is a send comm).
    pub fn flush_qp_access_flags(&self) -> Result<Vec<u32>> {
        match &self.side {
            Side::Receiver { flush, .. } => flush.iter().map(|f| access_flags(&f.qp)).collect(),
            Side::Sender { .. } => Ok(Vec::new()),
        }
    }

    /// The numbers of the comm's data QPs, by QP index (named in profiler events).
    pub fn qp_numbers(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.ep.nqps()).map(|q| self.ep.qp(q).qpn())
    }

    /// How the comm's QPs map onto the member devices and which QPs each group uses.
    pub fn layout(&self) -> ferro_proto::plan::QpLayout {
        self.ep.layout()
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
            oob: Mutex::new(OobRx::default()),
            handles: Box::new([]),
            profiler: Default::default(),
            place: None,
        }));
        let handles: Box<[ReqHandle]> =
            (0..nreq as u32).map(|idx| ReqHandle::new(p, idx)).collect();
        // SAFETY: p is the only pointer to this fresh allocation; the field is assigned through
        // it (no reference to the comm is created), so the copies of p in the handles stay valid.
        unsafe { (*p).handles = handles };
        if kind == ObjectKind::RecvComm {
            let place = receivers::Place::new(receivers::list().add(p as usize));
            // SAFETY: as above; no other thread can reach the comm before it is queued, which
            // only its own calls do.
            unsafe { (*p).place = Some(place) };
        }
        CommPtr(p)
    }

    /// The first step of a comm's end, before its magic word is overwritten and before it is
    /// freed: takes it out of the one structure other threads reach it through (the receiver
    /// registry of clear-to-send writes), waiting for a thread that is visiting it. O(1); a
    /// no-op for a send comm.
    pub(super) fn withdraw(&self) {
        if let Some(place) = &self.place {
            receivers::list().remove(place.ticket);
        }
    }

    pub(super) fn describe(&self) -> String {
        format!("{} peer {}", self.ep.vdev.label(), self.peer)
    }

    pub(super) fn req_ptr(&self, idx: u32) -> *mut ReqHandle {
        (&self.handles[idx as usize] as *const ReqHandle).cast_mut()
    }

    #[inline]
    pub(super) fn lock<'a, C>(&self, m: &'a CoreLock<C>) -> Result<CoreGuard<'a, C>> {
        Ok(m.lock()?)
    }

    pub(super) fn core_error(&self, e: CoreError) -> Error {
        core_error(self, e)
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

    /// Tells the peer why this end failed: the failure notice on the out-of-band socket, then
    /// the end of what this side writes on it. The socket is non-blocking and the notice far
    /// smaller than its buffer; if it cannot be written, the peer still sees the comm end
    /// when it is closed.
    pub(super) fn notify_peer(&self, f: &Failure) {
        use std::io::Write;
        let notice = ferro_proto::health::facts::encode_notice(&f.message);
        if let Err(e) = (&self.sock).write_all(&notice) {
            crate::warn!(
                ferro_ffi::log_flags::NET,
                "{}: could not tell the peer why the comm failed: {e}",
                self.describe()
            );
        }
        let _ = self.sock.shutdown(std::net::Shutdown::Write);
    }

    /// A copy of the comm's counters.
    pub fn counters(&self) -> Result<ferro_proto::comm::counters::Counters> {
        Ok(match &self.side {
            Side::Sender { core, .. } => core.lock()?.health.counters,
            Side::Receiver { core, .. } => self.lock(core)?.health.counters,
        })
    }
}
