//! The data path: RC queue pairs driven by the receiver-driven CTS protocol of `ferro-proto`.
//!
//! Objects handed to NCCL as `void*`:
//! - [`ListenComm`], [`Comm`] (send or receive side), [`MrHandle`]: `Box::into_raw`, each starting
//!   with a magic word that the shims check before use, so a stray pointer of the wrong kind is an
//!   error rather than a type confusion;
//! - requests: pointers into a per-comm array of immutable [`ReqHandle`]s (stable for the comm's
//!   life) that name the comm and a slot of its request table; the mutable state lives behind the
//!   comm's own mutex. There is no global lock on the data path.
//!
//! Every function here is non-blocking. `connect`/`accept` advance a state machine and return
//! `None` until the connection is ready (NCCL calls again).

use crate::error::{Error, Result};
use crate::plugin::{self, NetDevice};
use crate::{info, oob, warn};
use ferro_ffi::log_flags::{INIT, NET};
use ferro_proto::fifo::{self, CtsEntry, ENTRY_SIZE, FIFO_BYTES, SIZES_BYTES};
use ferro_proto::handle::{self, HANDLE_SIZE};
use ferro_proto::plan::{self, SendItem, SizesSlot};
use ferro_proto::wire::{self, Msg, QpMeta, Reader};
use ferro_proto::{MAX_RECVS, SLOTS};
use ferro_verbs::sys::*;
use ferro_verbs::{Cq, HostBuf, Mr, Pd, Qp, QpCaps};
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

const LISTEN_MAGIC: u64 = 0x4c49_5354_4652_5231; // "LISTFRR1"
const SEND_MAGIC: u64 = 0x5345_4e44_4652_5231;
const RECV_MAGIC: u64 = 0x5245_4356_4652_5231;
const MR_MAGIC: u64 = 0x4d52_4844_4652_5231;
const REQ_MAGIC: u64 = 0x5245_5155_4652_5231;

/// A handshake that makes no progress for this long is abandoned.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(120);
/// `test` checks the out-of-band socket for a dead peer every this many calls that find their
/// request unfinished (counting calls rather than reading the clock keeps `test` cheap: clock
/// reads are system calls on some virtual machines).
const LIVENESS_EVERY: u32 = 256;
/// Send requests one comm can hold: NCCL may post `NCCL_NET_MAX_REQUESTS x maxRecvs` isends.
const SEND_REQS: usize = SLOTS * MAX_RECVS;
const RECV_REQS: usize = SLOTS;

/// Signal one CTS write in this many.
const CTS_SIGNAL_EVERY: u64 = 16;

const WR_SEND: u64 = 0;
const WR_RECV: u64 = 1 << 62;
const WR_CTS: u64 = 2 << 62;
const WR_FLUSH: u64 = 3 << 62;
const WR_KIND: u64 = 3 << 62;

// ---------------------------------------------------------------------------------------------
// Queue pairs

fn mtu_code(bytes: u32) -> u32 {
    match bytes {
        0..=256 => 1,
        257..=512 => 2,
        513..=1024 => 3,
        1025..=2048 => 4,
        _ => 5,
    }
}

/// Verbs resources of one side of a connection.
#[derive(Debug)]
struct Endpoint {
    dev: &'static NetDevice,
    qps: Vec<Qp>,
    cq: Arc<Cq>,
    pd: Arc<Pd>,
}

impl Endpoint {
    fn new(dev: &'static NetDevice, nqps: usize) -> Result<Endpoint> {
        let pd = dev.pd().clone();
        let cq = Cq::new(&dev.ctx, (1024 + 2 * SLOTS * nqps) as u32)?;
        let caps = QpCaps {
            max_send_wr: 512,
            max_recv_wr: 2 * SLOTS as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let cfg = &plugin::get()?.config;
        let mut qps = Vec::with_capacity(nqps);
        for _ in 0..nqps {
            let qp = Qp::new_rc(&pd, &cq, &cq, caps)?;
            let mut a = ibv_qp_attr {
                qp_state: IBV_QPS_INIT,
                pkey_index: cfg.pkey_index,
                port_num: dev.port,
                qp_access_flags: IBV_ACCESS_REMOTE_WRITE
                    | IBV_ACCESS_REMOTE_READ
                    | IBV_ACCESS_LOCAL_WRITE,
                ..Default::default()
            };
            qp.modify(
                &mut a,
                IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
            )?;
            qps.push(qp);
        }
        Ok(Endpoint { dev, qps, cq, pd })
    }

    fn meta(&self, mr_addr: u64, mr_rkey: u32, split: bool) -> QpMeta {
        QpMeta {
            nqps: self.qps.len() as u16,
            split,
            link_layer: if self.dev.link_layer.is_ethernet() {
                IBV_LINK_LAYER_ETHERNET
            } else {
                IBV_LINK_LAYER_INFINIBAND
            },
            port: self.dev.port,
            mtu: self.dev.active_mtu,
            lid: self.dev.lid,
            gid: self.dev.gid.as_ref().map_or([0; 16], |g| g.gid.gid),
            gid_index: self.dev.gid.as_ref().map_or(0, |g| g.index),
            mr_addr,
            mr_rkey,
            qpns: self.qps.iter().map(Qp::qpn).collect(),
        }
    }

    /// INIT -> RTR -> RTS against the peer's QPs.
    fn connect_qps(&self, peer: &QpMeta) -> Result<()> {
        if peer.qpns.len() != self.qps.len() {
            return Err(Error::Remote(format!(
                "peer has {} QPs, this side {}",
                peer.qpns.len(),
                self.qps.len()
            )));
        }
        for (qp, &remote_qpn) in self.qps.iter().zip(&peer.qpns) {
            self.connect_qp(qp, remote_qpn, peer)?;
        }
        Ok(())
    }

    /// One QP: INIT -> RTR -> RTS against `remote_qpn` on the peer described by `peer`.
    fn connect_qp(&self, qp: &Qp, remote_qpn: u32, peer: &QpMeta) -> Result<()> {
        let cfg = &plugin::get()?.config;
        let mtu = mtu_code(self.dev.active_mtu.min(peer.mtu));
        {
            let mut ah = ibv_ah_attr {
                dlid: peer.lid,
                sl: cfg.service_level,
                port_num: self.dev.port,
                ..Default::default()
            };
            if let Some(g) = &self.dev.gid {
                ah.is_global = 1;
                ah.grh = ibv_global_route {
                    dgid: ibv_gid { raw: peer.gid },
                    flow_label: 0,
                    sgid_index: u8::try_from(g.index)
                        .map_err(|_| Error::Usage(format!("GID index {} exceeds 255", g.index)))?,
                    hop_limit: 255,
                    traffic_class: cfg.traffic_class,
                };
            }
            let mut a = ibv_qp_attr {
                qp_state: IBV_QPS_RTR,
                path_mtu: mtu,
                dest_qp_num: remote_qpn,
                rq_psn: 0,
                max_dest_rd_atomic: 1,
                min_rnr_timer: 12,
                ah_attr: ah,
                ..Default::default()
            };
            qp.modify(
                &mut a,
                IBV_QP_STATE
                    | IBV_QP_AV
                    | IBV_QP_PATH_MTU
                    | IBV_QP_DEST_QPN
                    | IBV_QP_RQ_PSN
                    | IBV_QP_MAX_DEST_RD_ATOMIC
                    | IBV_QP_MIN_RNR_TIMER,
            )?;
            let mut a = ibv_qp_attr {
                qp_state: IBV_QPS_RTS,
                timeout: cfg.timeout,
                retry_cnt: cfg.retry_cnt,
                rnr_retry: 7,
                sq_psn: 0,
                max_rd_atomic: 1,
                ..Default::default()
            };
            qp.modify(
                &mut a,
                IBV_QP_STATE
                    | IBV_QP_TIMEOUT
                    | IBV_QP_RETRY_CNT
                    | IBV_QP_RNR_RETRY
                    | IBV_QP_SQ_PSN
                    | IBV_QP_MAX_QP_RD_ATOMIC,
            )?;
        }
        Ok(())
    }

    /// A QP connected to itself with a 4-byte landing buffer, for flushes (RDMA READ of received
    /// data through the NIC).
    fn flush_qp(&self) -> Result<FlushQp> {
        let caps = QpCaps {
            max_send_wr: 2 * SLOTS as u32,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = Qp::new_rc(&self.pd, &self.cq, &self.cq, caps)?;
        let cfg = &plugin::get()?.config;
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_INIT,
            pkey_index: cfg.pkey_index,
            port_num: self.dev.port,
            qp_access_flags: IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE,
            ..Default::default()
        };
        qp.modify(
            &mut a,
            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
        )?;
        let me = self.meta(0, 0, false);
        self.connect_qp(&qp, qp.qpn(), &me)?;
        let buf = RegBuf::new(&self.pd, 4, IBV_ACCESS_LOCAL_WRITE)?;
        Ok(FlushQp { qp, buf })
    }
}

/// A host buffer with its registration (the MR is declared first, so it is dropped first).
#[derive(Debug)]
struct RegBuf {
    mr: Mr,
    buf: HostBuf,
}

impl RegBuf {
    fn new(pd: &Arc<Pd>, len: usize, access: u32) -> Result<RegBuf> {
        let buf = HostBuf::new(len)?;
        // SAFETY: buf is owned by the RegBuf and outlives the MR (field order drops the MR first).
        let mr = unsafe { Mr::reg(pd, buf.as_ptr().cast(), buf.len(), access)? };
        Ok(RegBuf { mr, buf })
    }
    fn addr(&self, off: usize) -> u64 {
        self.buf.as_ptr() as u64 + off as u64
    }
    /// Volatile copy of `N` bytes at `off` (memory the NIC writes).
    fn read<const N: usize>(&self, off: usize) -> [u8; N] {
        let mut out = [0u8; N];
        assert!(off + N <= self.buf.len());
        let base = self.buf.as_ptr().wrapping_add(off);
        if N % 8 == 0 && (base as usize) % 8 == 0 {
            for (i, chunk) in out.chunks_exact_mut(8).enumerate() {
                // SAFETY: in bounds (asserted) and 8-byte aligned (checked); the buffer lives as
                // long as self; volatile because the NIC may write it concurrently.
                let w = unsafe { base.cast::<u64>().add(i).read_volatile() };
                chunk.copy_from_slice(&w.to_ne_bytes());
            }
        } else {
            for (i, b) in out.iter_mut().enumerate() {
                // SAFETY: in bounds (asserted); volatile as above.
                *b = unsafe { base.add(i).read_volatile() };
            }
        }
        out
    }
    fn write(&self, off: usize, bytes: &[u8]) {
        assert!(off + bytes.len() <= self.buf.len());
        // SAFETY: in bounds; the region is only read by the NIC after a later post.
        unsafe {
            core::ptr::copy_nonoverlapping(bytes.as_ptr(), self.buf.as_ptr().add(off), bytes.len())
        };
    }
}

// ---------------------------------------------------------------------------------------------
// Comms and requests

/// What NCCL gets as a request pointer: immutable, names the comm and a slot.
#[derive(Debug)]
#[repr(C)]
pub struct ReqHandle {
    magic: u64,
    comm: *const Comm,
    idx: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReqState {
    Free,
    /// A send; `done` once its group's writes completed.
    Send {
        size: u32,
        done: bool,
    },
    /// A (grouped) receive waiting for `remaining` immediates.
    Recv {
        seq: u64,
        n: u8,
        remaining: u16,
        imm_sum: u32,
        done: bool,
        sizes: [u32; MAX_RECVS],
    },
    /// A flush: a 1-byte RDMA READ on the loopback flush QP.
    Flush {
        done: bool,
    },
}

#[derive(Debug)]
struct SendGroup {
    seq: u64,
    entries: Vec<CtsEntry>,
    taken: [bool; MAX_RECVS],
    items: [Option<SendItem>; MAX_RECVS],
    reqs: [u32; MAX_RECVS],
}

#[derive(Debug, Default, Clone)]
struct InFlight {
    remaining: u32,
    reqs: Vec<u32>,
}

#[derive(Debug)]
struct Inner {
    error: Option<Error>,
    reqs: Vec<ReqState>,
    free: Vec<u32>,
    // Send side.
    send_seq: u64,
    group: Option<SendGroup>,
    inflight: Vec<InFlight>,
    // Receive side.
    recv_seq: u64,
    recv_posted: usize,
    /// Unfinished `test` calls since the last liveness check.
    tests_since_check: u32,
}

#[derive(Debug)]
enum Side {
    /// Sender: its CTS FIFO (written by the peer), a sizes staging area, the peer's sizes FIFO.
    Send {
        fifo: RegBuf,
        sizes_stage: RegBuf,
        peer_sizes: (u64, u32),
    },
    /// Receiver: CTS staging (local copies written to the peer), its sizes FIFO, the peer's FIFO.
    Recv {
        cts_stage: RegBuf,
        sizes: RegBuf,
        peer_fifo: (u64, u32),
    },
}

/// A connected send or receive comm.
#[derive(Debug)]
#[repr(C)]
pub struct Comm {
    magic: u64,
    ep: Endpoint,
    side: Side,
    split: bool,
    sock: TcpStream,
    peer: SocketAddr,
    handles: Box<[ReqHandle]>,
    inner: Mutex<Inner>,
    /// Receive side with GPUDirect RDMA (or `FERRO_FLUSH_HOST`): a QP connected to itself, used
    /// to read back one byte of received data so it is visible before NCCL consumes it.
    flush: Option<FlushQp>,
}

#[derive(Debug)]
struct FlushQp {
    qp: Qp,
    buf: RegBuf,
}

// SAFETY: the raw pointers inside (request handles' back-pointers to this comm, verbs objects)
// are only dereferenced under the comm's mutex or refer to thread-safe verbs objects.
unsafe impl Send for Comm {}
// SAFETY: as above; all mutable state is behind `inner`.
unsafe impl Sync for Comm {}

impl Comm {
    fn new(
        ep: Endpoint,
        side: Side,
        split: bool,
        sock: TcpStream,
        peer: SocketAddr,
        flush: Option<FlushQp>,
    ) -> Box<Comm> {
        let nreq = match side {
            Side::Send { .. } => SEND_REQS,
            Side::Recv { .. } => RECV_REQS,
        };
        let magic = match side {
            Side::Send { .. } => SEND_MAGIC,
            Side::Recv { .. } => RECV_MAGIC,
        };
        let inner = Inner {
            error: None,
            reqs: vec![ReqState::Free; nreq],
            free: (0..nreq as u32).rev().collect(),
            send_seq: 0,
            group: None,
            inflight: vec![InFlight::default(); SLOTS],
            recv_seq: 0,
            recv_posted: 0,
            tests_since_check: 0,
        };
        let mut c = Box::new(Comm {
            magic,
            ep,
            side,
            split,
            sock,
            peer,
            handles: Box::new([]),
            inner: Mutex::new(inner),
            flush,
        });
        let me: *const Comm = &*c;
        c.handles = (0..nreq as u32)
            .map(|idx| ReqHandle {
                magic: REQ_MAGIC,
                comm: me,
                idx,
            })
            .collect();
        c
    }

    fn lock(&self) -> Result<MutexGuard<'_, Inner>> {
        self.inner
            .lock()
            .map_err(|_| Error::Internal("comm unusable after an earlier internal error".into()))
    }

    fn describe(&self) -> String {
        format!(
            "{}:{} peer {}",
            self.ep.dev.ibdev, self.ep.dev.port, self.peer
        )
    }

    fn req_ptr(&self, idx: u32) -> *mut ReqHandle {
        (&self.handles[idx as usize] as *const ReqHandle).cast_mut()
    }

    fn alloc(&self, inner: &mut Inner, st: ReqState) -> Result<u32> {
        let idx = inner.free.pop().ok_or_else(|| {
            Error::Internal(format!(
                "{}: more than {} requests in flight on one comm",
                self.describe(),
                inner.reqs.len()
            ))
        })?;
        inner.reqs[idx as usize] = st;
        Ok(idx)
    }

    /// Drains the CQ, updating requests. Errors are sticky.
    fn poll(&self, inner: &mut Inner) -> Result<()> {
        let mut wcs = [ibv_wc::default(); 16];
        loop {
            let n = self
                .ep
                .cq
                .poll(&mut wcs)
                .map_err(|e| Error::System(format!("{}: {e}", self.describe())))?;
            for wc in &wcs[..n] {
                if wc.status != IBV_WC_SUCCESS {
                    let e = Error::Remote(format!(
                        "{}: work completion failed: {} (status {}, vendor error {:#x}, opcode {}, QP {})",
                        self.describe(),
                        wc_status_name(wc.status),
                        wc.status,
                        wc.vendor_err,
                        wc.opcode,
                        wc.qp_num
                    ));
                    inner.error.get_or_insert(e);
                    continue;
                }
                match wc.wr_id & WR_KIND {
                    WR_SEND => {
                        let slot = (wc.wr_id % SLOTS as u64) as usize;
                        let f = &mut inner.inflight[slot];
                        f.remaining = f.remaining.saturating_sub(1);
                        if f.remaining == 0 {
                            for r in std::mem::take(&mut f.reqs) {
                                if let ReqState::Send { done, .. } = &mut inner.reqs[r as usize] {
                                    *done = true;
                                }
                            }
                        }
                    }
                    WR_RECV => {
                        let idx = (wc.wr_id & !WR_KIND) as usize;
                        let imm = u32::from_be(wc.imm_data);
                        let mut finished = None;
                        if let Some(ReqState::Recv {
                            seq,
                            n,
                            remaining,
                            imm_sum,
                            done,
                            ..
                        }) = inner.reqs.get_mut(idx)
                        {
                            *imm_sum = imm_sum.wrapping_add(imm);
                            *remaining = remaining.saturating_sub(1);
                            if *remaining == 0 && !*done {
                                *done = true;
                                finished = Some((*seq, *n, *imm_sum));
                            }
                        }
                        if let Some((seq, n, sum)) = finished {
                            let sizes = self.read_sizes(seq, n, sum);
                            if let Some(ReqState::Recv { sizes: s, .. }) = inner.reqs.get_mut(idx) {
                                *s = sizes;
                            }
                            inner.recv_posted -= 1;
                        }
                    }
                    WR_FLUSH => {
                        let idx = (wc.wr_id & !WR_KIND) as usize;
                        if let Some(ReqState::Flush { done }) = inner.reqs.get_mut(idx) {
                            *done = true;
                        }
                    }
                    _ => {} // CTS writes: nothing to do.
                }
            }
            if n < wcs.len() {
                return Ok(());
            }
        }
    }

    fn read_sizes(&self, seq: u64, n: u8, imm_sum: u32) -> [u32; MAX_RECVS] {
        let mut out = [0u32; MAX_RECVS];
        if n == 1 {
            out[0] = imm_sum;
        } else if let Side::Recv { sizes, .. } = &self.side {
            fence(Ordering::Acquire);
            let off = fifo::sizes_offset(seq);
            for (i, o) in out.iter_mut().enumerate().take(usize::from(n)) {
                *o = u32::from_le_bytes(sizes.read::<4>(off + 4 * i));
            }
        }
        out
    }

    /// Checks the out-of-band socket; a closed or reset connection means the peer is gone.
    fn check_peer(&self, inner: &mut Inner) {
        inner.tests_since_check += 1;
        if inner.tests_since_check < LIVENESS_EVERY {
            return;
        }
        inner.tests_since_check = 0;
        let mut b = [0u8; 64];
        let gone = match (&self.sock).read(&mut b) {
            Ok(0) => Some("closed the connection".to_string()),
            Ok(_) => None, // nothing is expected after the handshake; ignore
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                None
            }
            Err(e) => Some(format!("connection error: {e}")),
        };
        if let Some(why) = gone {
            // Anything that completed before the peer left still counts.
            let _ = self.poll(inner);
            inner.error.get_or_insert(Error::Remote(format!(
                "{}: peer {why} (process exited or was killed?) while requests were outstanding",
                self.describe()
            )));
        }
    }

    // --- send side -------------------------------------------------------------------------

    pub fn isend(
        &self,
        data: u64,
        size: u32,
        tag: i32,
        mh: Option<&MrHandle>,
    ) -> Result<Option<*mut ReqHandle>> {
        let Side::Send {
            fifo,
            sizes_stage,
            peer_sizes,
        } = &self.side
        else {
            return Err(Error::Usage("isend on a receive comm".into()));
        };
        let mut g = self.lock()?;
        let inner = &mut *g;
        if let Some(e) = &inner.error {
            return Err(e.clone());
        }
        if inner.group.is_none() {
            let seq = inner.send_seq;
            let first = CtsEntry::decode(&fifo.read::<ENTRY_SIZE>(fifo::entry_offset(seq, 0)), seq);
            let Some(first) = first else { return Ok(None) };
            let mut entries = vec![first];
            for i in 1..usize::from(first.nreqs) {
                match CtsEntry::decode(&fifo.read::<ENTRY_SIZE>(fifo::entry_offset(seq, i)), seq) {
                    Some(e) if e.nreqs == first.nreqs => entries.push(e),
                    _ => return Ok(None),
                }
            }
            fence(Ordering::Acquire);
            inner.group = Some(SendGroup {
                seq,
                entries,
                taken: [false; MAX_RECVS],
                items: [None; MAX_RECVS],
                reqs: [0; MAX_RECVS],
            });
        }
        let Some(grp) = inner.group.as_ref() else {
            return Err(Error::Internal("send group vanished".into()));
        };
        let i = fifo::match_send(&grp.entries, &grp.taken[..grp.entries.len()], tag, size)
            .map_err(|e| Error::Usage(format!("{}: {e}", self.describe())))?;
        let lkey = match (size, mh) {
            (0, _) => 0,
            (_, Some(m)) => m.mr.lkey(),
            (_, None) => {
                return Err(Error::Usage(
                    "isend of a non-empty buffer without a memory handle".into(),
                ));
            }
        };
        let e = grp.entries[i];
        let idx = self.alloc(inner, ReqState::Send { size, done: false })?;
        let Some(grp) = inner.group.as_mut() else {
            return Err(Error::Internal("send group vanished".into()));
        };
        grp.taken[i] = true;
        grp.items[i] = Some(SendItem {
            addr: data,
            lkey,
            size,
            remote_addr: e.addr,
            rkey: e.rkey,
        });
        grp.reqs[i] = idx;
        if grp.taken[..grp.entries.len()].iter().all(|t| *t) {
            let Some(grp) = inner.group.take() else {
                return Err(Error::Internal("send group vanished".into()));
            };
            let n = grp.entries.len();
            let items: Vec<SendItem> = grp.items[..n].iter().flatten().copied().collect();
            let soff = fifo::sizes_offset(grp.seq);
            let sizes_bytes: Vec<u8> = items.iter().flat_map(|it| it.size.to_le_bytes()).collect();
            sizes_stage.write(soff, &sizes_bytes);
            let slot = SizesSlot {
                local_addr: sizes_stage.addr(soff),
                lkey: sizes_stage.mr.lkey(),
                remote_addr: peer_sizes.0 + soff as u64,
                rkey: peer_sizes.1,
            };
            let writes = plan::plan_group(grp.seq, &items, self.ep.qps.len(), self.split, slot);
            let finals = writes.iter().filter(|w| w.imm.is_some()).count() as u32;
            let sl = (grp.seq % SLOTS as u64) as usize;
            inner.inflight[sl] = InFlight {
                remaining: finals,
                reqs: grp.reqs[..n].to_vec(),
            };
            inner.send_seq += 1;
            if let Err(e) = self.post_writes(grp.seq, &writes) {
                inner.error.get_or_insert(e.clone());
                return Err(e);
            }
        }
        Ok(Some(self.req_ptr(idx)))
    }

    fn post_writes(&self, seq: u64, writes: &[plan::Write]) -> Result<()> {
        for (q, qp) in self.ep.qps.iter().enumerate() {
            let mine: Vec<&plan::Write> = writes.iter().filter(|w| w.qp == q).collect();
            if mine.is_empty() {
                continue;
            }
            let mut sges: Vec<ibv_sge> = mine
                .iter()
                .map(|w| ibv_sge {
                    addr: w.local_addr,
                    length: w.len,
                    lkey: w.lkey,
                })
                .collect();
            let mut wrs: Vec<ibv_send_wr> = Vec::with_capacity(mine.len());
            for (k, w) in mine.iter().enumerate() {
                let mut wr = ibv_send_wr {
                    wr_id: WR_SEND | seq,
                    sg_list: if w.len > 0 {
                        &mut sges[k]
                    } else {
                        core::ptr::null_mut()
                    },
                    num_sge: i32::from(w.len > 0),
                    opcode: if w.imm.is_some() {
                        IBV_WR_RDMA_WRITE_WITH_IMM
                    } else {
                        IBV_WR_RDMA_WRITE
                    },
                    send_flags: if w.imm.is_some() {
                        IBV_SEND_SIGNALED
                    } else {
                        0
                    },
                    imm_data: w.imm.unwrap_or(0).to_be(),
                    ..Default::default()
                };
                wr.wr.rdma = ibv_rdma_info {
                    remote_addr: w.remote_addr,
                    rkey: w.rkey,
                };
                wrs.push(wr);
            }
            for k in 1..wrs.len() {
                let next: *mut ibv_send_wr = &mut wrs[k];
                wrs[k - 1].next = next;
            }
            // SAFETY: the chain lives until post returns (the provider copies WRs); every SGE
            // names memory registered under this comm's PD by NCCL (deregistered only after the
            // request completes, per NCCL's contract) or by this comm (owned by it).
            unsafe { qp.post_send(&mut wrs[0]) }
                .map_err(|e| Error::System(format!("{}: {e}", self.describe())))?;
        }
        Ok(())
    }

    // --- receive side ----------------------------------------------------------------------

    pub fn irecv(&self, bufs: &[(u64, u32, i32, u32)]) -> Result<Option<*mut ReqHandle>> {
        let Side::Recv {
            cts_stage,
            peer_fifo,
            ..
        } = &self.side
        else {
            return Err(Error::Usage("irecv on a send comm".into()));
        };
        if bufs.is_empty() || bufs.len() > MAX_RECVS {
            return Err(Error::Usage(format!(
                "irecv with n={} (must be 1..={MAX_RECVS})",
                bufs.len()
            )));
        }
        let mut g = self.lock()?;
        let inner = &mut *g;
        if let Some(e) = &inner.error {
            return Err(e.clone());
        }
        if inner.recv_posted >= SLOTS || inner.free.is_empty() {
            return Ok(None);
        }
        let seq = inner.recv_seq;
        let qps = plan::group_qps(seq, self.ep.qps.len(), self.split);
        let st = ReqState::Recv {
            seq,
            n: bufs.len() as u8,
            remaining: qps.len() as u16,
            imm_sum: 0,
            done: false,
            sizes: [0; MAX_RECVS],
        };
        let idx = self.alloc(inner, st)?;
        let fail = |inner: &mut Inner, e: Error| {
            inner.error.get_or_insert(e.clone());
            e
        };
        for &q in &qps {
            let mut wr = ibv_recv_wr {
                wr_id: WR_RECV | u64::from(idx),
                ..Default::default()
            };
            // SAFETY: a receive with no scatter entries (it only consumes the immediate).
            if let Err(e) = unsafe { self.ep.qps[q].post_recv(&mut wr) } {
                return Err(fail(
                    inner,
                    Error::System(format!("{}: {e}", self.describe())),
                ));
            }
        }
        let n = bufs.len();
        let off = fifo::entry_offset(seq, 0);
        for (i, &(addr, size, tag, rkey)) in bufs.iter().enumerate() {
            let e = CtsEntry {
                seq: seq + 1,
                addr,
                rkey,
                size,
                tag,
                nreqs: n as u16,
                idx: i as u16,
            };
            cts_stage.write(off + i * ENTRY_SIZE, &e.encode());
        }
        let mut sge = ibv_sge {
            addr: cts_stage.addr(off),
            length: (n * ENTRY_SIZE) as u32,
            lkey: cts_stage.mr.lkey(),
        };
        let mut wr = ibv_send_wr {
            wr_id: WR_CTS | seq,
            sg_list: &mut sge,
            num_sge: 1,
            opcode: IBV_WR_RDMA_WRITE,
            // Only every 16th CTS write is signaled: its completion retires the unsignaled ones
            // before it on QP 0, so the send queue (512) never fills, and the receiver's CQ
            // carries one CTS completion per 16 receives instead of one each.
            send_flags: if seq % CTS_SIGNAL_EVERY == 0 {
                IBV_SEND_SIGNALED
            } else {
                0
            },
            ..Default::default()
        };
        wr.wr.rdma = ibv_rdma_info {
            remote_addr: peer_fifo.0 + off as u64,
            rkey: peer_fifo.1,
        };
        // SAFETY: the SGE names this comm's registered CTS staging slot, untouched until the
        // group completes (32 receives later at the earliest).
        if let Err(e) = unsafe { self.ep.qps[0].post_send(&mut wr) } {
            return Err(fail(
                inner,
                Error::System(format!("{}: {e}", self.describe())),
            ));
        }
        inner.recv_seq += 1;
        inner.recv_posted += 1;
        Ok(Some(self.req_ptr(idx)))
    }

    /// `iflush`: makes received data visible to the GPU by reading one byte of the last non-empty
    /// buffer back through the NIC on the loopback flush QP. `Ok(None)` when there is nothing to
    /// flush: host memory (unless `FERRO_FLUSH_HOST=1`), only empty buffers, or flushing disabled
    /// (`NCCL_GDR_FLUSH_DISABLE=1`, or no GPUDirect RDMA on this device).
    pub fn iflush(&self, bufs: &[(u64, u32, Option<&MrHandle>)]) -> Result<Option<*mut ReqHandle>> {
        if !matches!(self.side, Side::Recv { .. }) {
            return Err(Error::Usage("iflush on a send comm".into()));
        }
        let Some(flush) = &self.flush else {
            return Ok(None);
        };
        let flush_host = plugin::get().is_ok_and(|p| p.config.flush_host);
        let target = bufs.iter().rev().find(|(_, size, mh)| {
            *size > 0 && mh.is_some_and(|m| m.kind() != MemKind::Host || flush_host)
        });
        let Some(&(addr, _, Some(mh))) = target else {
            return Ok(None);
        };
        let mut g = self.lock()?;
        let inner = &mut *g;
        if let Some(e) = &inner.error {
            return Err(e.clone());
        }
        if inner.free.is_empty() {
            return Ok(None);
        }
        let idx = self.alloc(inner, ReqState::Flush { done: false })?;
        let mut sge = ibv_sge {
            addr: flush.buf.addr(0),
            length: 1,
            lkey: flush.buf.mr.lkey(),
        };
        let mut wr = ibv_send_wr {
            wr_id: WR_FLUSH | u64::from(idx),
            sg_list: &mut sge,
            num_sge: 1,
            opcode: IBV_WR_RDMA_READ,
            send_flags: IBV_SEND_SIGNALED,
            ..Default::default()
        };
        wr.wr.rdma = ibv_rdma_info {
            remote_addr: addr,
            rkey: mh.rkey(),
        };
        // SAFETY: the SGE names the comm's own registered 4-byte landing buffer; the remote side
        // is the caller's registered receive buffer (valid until NCCL deregisters it, after the
        // flush completes).
        if let Err(e) = unsafe { flush.qp.post_send(&mut wr) } {
            inner.reqs[idx as usize] = ReqState::Free;
            inner.free.push(idx);
            return Err(Error::System(format!("{}: flush: {e}", self.describe())));
        }
        Ok(Some(self.req_ptr(idx)))
    }

    /// `test`: `Some(sizes)` when done (the request is then freed).
    fn test(&self, idx: u32) -> Result<Option<([u32; MAX_RECVS], usize)>> {
        let mut g = self.lock()?;
        let inner = &mut *g;
        let i = idx as usize;
        let done_now = |st: &ReqState| match *st {
            ReqState::Send { size, done: true } => Some(([size, 0, 0, 0, 0, 0, 0, 0], 1)),
            ReqState::Recv {
                n,
                done: true,
                sizes,
                ..
            } => Some((sizes, usize::from(n))),
            ReqState::Flush { done: true } => Some(([0; MAX_RECVS], 0)),
            _ => None,
        };
        if inner.reqs.get(i).copied() == Some(ReqState::Free) || i >= inner.reqs.len() {
            return Err(Error::Usage(format!(
                "test on a request that is not in flight (slot {idx})"
            )));
        }
        if let Some(r) = done_now(&inner.reqs[i]) {
            inner.reqs[i] = ReqState::Free;
            inner.free.push(idx);
            return Ok(Some(r));
        }
        if inner.error.is_none() {
            if let Err(e) = self.poll(inner) {
                inner.error.get_or_insert(e);
            }
        }
        if let Some(r) = done_now(&inner.reqs[i]) {
            inner.reqs[i] = ReqState::Free;
            inner.free.push(idx);
            return Ok(Some(r));
        }
        if inner.error.is_none() {
            self.check_peer(inner);
        }
        if let Some(e) = &inner.error {
            return Err(e.clone());
        }
        Ok(None)
    }
}

// ---------------------------------------------------------------------------------------------
// Memory registration

/// What memory a registration covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemKind {
    Host,
    /// CUDA memory registered by address (nvidia-peermem).
    Cuda,
    /// CUDA memory registered through a DMA-BUF file descriptor.
    DmaBuf,
}

/// A registration handed to NCCL as `mhandle`.
#[derive(Debug)]
#[repr(C)]
pub struct MrHandle {
    magic: u64,
    mr: Arc<Mr>,
    /// The cache entry this handle holds a reference on (None for DMA-BUF registrations).
    key: Option<crate::mrcache::Key>,
    dev: &'static NetDevice,
    kind: MemKind,
}

impl MrHandle {
    pub fn rkey(&self) -> u32 {
        self.mr.rkey()
    }
    pub fn kind(&self) -> MemKind {
        self.kind
    }
}

fn reg_access() -> u32 {
    let base = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    let ro = plugin::get().is_ok_and(|p| p.relaxed_ordering);
    if ro {
        base | IBV_ACCESS_RELAXED_ORDERING
    } else {
        base
    }
}

/// `regMr`: host memory, or CUDA memory through nvidia-peermem. Registrations go through the
/// device's cache, so a sub-range of a registered range (or another buffer in the same pages)
/// costs a reference count, not a registration.
pub fn reg_mr(comm: &Comm, data: u64, size: usize, ptr_type: i32) -> Result<Box<MrHandle>> {
    let dev = comm.ep.dev;
    let kind = match ptr_type {
        ferro_ffi::NCCL_PTR_HOST => MemKind::Host,
        ferro_ffi::NCCL_PTR_CUDA => {
            if !dev.gdr.peermem.is_usable() {
                return Err(Error::Usage(format!(
                    "{}: regMr of CUDA memory refused: nvidia-peermem path unavailable ({}); {}",
                    dev.ibdev,
                    dev.gdr.peermem.reasons().join(", "),
                    dev.gdr.summary
                )));
            }
            MemKind::Cuda
        }
        other => {
            return Err(Error::Usage(format!(
                "{}: regMr with unknown memory type {other}",
                dev.ibdev
            )));
        }
    };
    if data == 0 {
        return Err(Error::Usage(format!(
            "regMr of a NULL buffer ({size} bytes)"
        )));
    }
    let addr = usize::try_from(data).map_err(|_| Error::Usage("address out of range".into()))?;
    let pd = comm.ep.pd.clone();
    let access = reg_access();
    let mut cache = dev
        .cache
        .lock()
        .map_err(|_| Error::Internal("registration cache poisoned".into()))?;
    let (mr, key) = cache.acquire(addr, size, |start, len| {
        // SAFETY: NCCL keeps the buffer allocated until deregMr (its documented contract), and the
        // cache holds the registration only while some handle over these pages is alive; the
        // page-rounded range lies in the same mapping as the buffer.
        unsafe { Mr::reg(&pd, start as *mut core::ffi::c_void, len, access) }
    })?;
    Ok(Box::new(MrHandle {
        magic: MR_MAGIC,
        mr,
        key: Some(key),
        dev,
        kind,
    }))
}

/// `regMrDmaBuf`: CUDA memory through a DMA-BUF file descriptor (NCCL closes `fd` after the
/// call; the registration keeps what it needs).
pub fn reg_mr_dmabuf(
    comm: &Comm,
    data: u64,
    size: usize,
    ptr_type: i32,
    offset: u64,
    fd: i32,
) -> Result<Box<MrHandle>> {
    let dev = comm.ep.dev;
    if ptr_type == ferro_ffi::NCCL_PTR_HOST && fd < 0 {
        return reg_mr(comm, data, size, ptr_type);
    }
    if !dev.gdr.dmabuf.is_usable() {
        return Err(Error::Usage(format!(
            "{}: regMrDmaBuf refused: DMA-BUF path unavailable ({}); {}",
            dev.ibdev,
            dev.gdr.dmabuf.reasons().join(", "),
            dev.gdr.summary
        )));
    }
    // SAFETY: NCCL hands a DMA-BUF fd exported for this GPU range; the registration pins it.
    let mr = unsafe { Mr::reg_dmabuf(&comm.ep.pd, offset, size, data, fd, reg_access()) }?;
    Ok(Box::new(MrHandle {
        magic: MR_MAGIC,
        mr: Arc::new(mr),
        key: None,
        dev,
        kind: MemKind::DmaBuf,
    }))
}

/// `deregMr`: drops the handle's reference; the registration goes when the last one does.
///
/// # Safety
/// `p` must be NULL or an `mhandle` returned by `regMr`/`regMrDmaBuf`, not yet deregistered.
pub unsafe fn dereg_mr(p: *mut core::ffi::c_void) -> Result<()> {
    // SAFETY: forwarded contract.
    if unsafe { magic_of(p) } != Some(MR_MAGIC) {
        return Err(Error::Usage(
            "deregMr of a pointer that is not a memory handle of this plugin".into(),
        ));
    }
    // SAFETY: allocated by Box::into_raw in the shim; deregMr ends its life exactly once.
    let h = unsafe { Box::from_raw(p.cast::<MrHandle>()) };
    let freed = match h.key {
        Some(key) => {
            let mut cache = h
                .dev
                .cache
                .lock()
                .map_err(|_| Error::Internal("registration cache poisoned".into()))?;
            cache.release(key)
        }
        None => None,
    };
    // The MR itself is deregistered here, outside the cache lock, when the last Arc goes.
    drop(freed);
    drop(h);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Connection setup

/// A listening endpoint.
#[derive(Debug)]
#[repr(C)]
pub struct ListenComm {
    magic: u64,
    dev: &'static NetDevice,
    listener: TcpListener,
    addr: SocketAddr,
    pending: Mutex<Vec<Pending>>,
}

/// Where a connection being set up stands (either side).
#[derive(Debug)]
enum Stage {
    /// Connecting side: TCP connect in progress.
    TcpConnect,
    /// Writing `out[pos..]`, then moving to `next`.
    Send {
        pos: usize,
        then: Box<Stage>,
    },
    /// Reading the peer's metadata.
    ReadMeta,
    /// Accepting side: reading the connecting side's "ready".
    ReadReady,
    Done,
}

#[derive(Debug)]
struct Pending {
    sock: TcpStream,
    peer: SocketAddr,
    dev: &'static NetDevice,
    stage: Stage,
    reader: Reader,
    out: Vec<u8>,
    ep: Option<Endpoint>,
    side: Option<Side>,
    split: bool,
    flush: Option<FlushQp>,
    last_progress: Instant,
}

fn io_err(what: &str, peer: SocketAddr, e: std::io::Error) -> Error {
    Error::Remote(format!("{what} {peer}: {e}"))
}

impl Pending {
    /// Advances as far as possible without blocking; `Ok(true)` when connected.
    fn progress(&mut self, accepting: bool) -> Result<bool> {
        loop {
            match &mut self.stage {
                Stage::TcpConnect => {
                    if let Some(e) = self
                        .sock
                        .take_error()
                        .map_err(|e| io_err("connect to", self.peer, e))?
                    {
                        return Err(Error::System(format!(
                            "cannot connect to {}: {e} (is the peer's listener reachable from here? check NCCL_SOCKET_IFNAME)",
                            self.peer
                        )));
                    }
                    if self.sock.peer_addr().is_err() {
                        return Ok(false);
                    }
                    self.last_progress = Instant::now();
                    self.stage = Stage::Send {
                        pos: 0,
                        then: Box::new(Stage::ReadMeta),
                    };
                }
                Stage::Send { pos, then } => {
                    while *pos < self.out.len() {
                        match (&self.sock).write(&self.out[*pos..]) {
                            Ok(0) => {
                                return Err(Error::Remote(format!(
                                    "peer {} closed during the handshake",
                                    self.peer
                                )));
                            }
                            Ok(k) => {
                                *pos += k;
                                self.last_progress = Instant::now();
                            }
                            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                            Err(e) if e.kind() == ErrorKind::Interrupted => {}
                            Err(e) => return Err(io_err("sending to", self.peer, e)),
                        }
                    }
                    let next = std::mem::replace(then, Box::new(Stage::Done));
                    self.stage = *next;
                }
                Stage::ReadMeta | Stage::ReadReady => {
                    let msg = loop {
                        if let Some(m) = self
                            .reader
                            .poll()
                            .map_err(|e| Error::Remote(format!("from {}: {e}", self.peer)))?
                        {
                            break m;
                        }
                        let mut buf = vec![0u8; self.reader.wanted()];
                        match (&self.sock).read(&mut buf) {
                            Ok(0) => {
                                return Err(Error::Remote(format!(
                                    "peer {} closed the connection during the handshake",
                                    self.peer
                                )));
                            }
                            Ok(k) => {
                                self.reader.push(&buf[..k]);
                                self.last_progress = Instant::now();
                            }
                            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                            Err(e) if e.kind() == ErrorKind::Interrupted => {}
                            Err(e) => return Err(io_err("reading from", self.peer, e)),
                        }
                    };
                    self.handle(msg, accepting)?;
                }
                Stage::Done => return Ok(true),
            }
        }
    }

    fn handle(&mut self, msg: Msg, accepting: bool) -> Result<()> {
        match (msg, accepting, &self.stage) {
            (Msg::Connect(meta), true, Stage::ReadMeta) => {
                let cfg = &plugin::get()?.config;
                let split = cfg.split_data_on_qps;
                if usize::from(meta.nqps) != usize::from(cfg.qps_per_connection)
                    || meta.split != split
                {
                    let why = format!(
                        "settings differ between ranks: NCCL_IB_QPS_PER_CONNECTION {} here vs {} at {}, NCCL_IB_SPLIT_DATA_ON_QPS {} here vs {} there",
                        cfg.qps_per_connection,
                        meta.nqps,
                        self.peer,
                        u8::from(split),
                        u8::from(meta.split)
                    );
                    let _ = (&self.sock).write_all(&wire::encode(&Msg::Reject(why.clone())));
                    return Err(Error::Usage(why));
                }
                let ep = Endpoint::new(self.dev, usize::from(meta.nqps))?;
                let cts_stage = RegBuf::new(&ep.pd, FIFO_BYTES, IBV_ACCESS_LOCAL_WRITE)?;
                let sizes = RegBuf::new(
                    &ep.pd,
                    SIZES_BYTES,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                )?;
                ep.connect_qps(&meta)?;
                let gdr_flush = self.dev.gdr.is_on() && !cfg.gdr_flush_disable;
                if gdr_flush || cfg.flush_host {
                    self.flush = Some(ep.flush_qp()?);
                }
                self.out =
                    wire::encode(&Msg::Accept(ep.meta(sizes.addr(0), sizes.mr.rkey(), split)));
                self.side = Some(Side::Recv {
                    cts_stage,
                    sizes,
                    peer_fifo: (meta.mr_addr, meta.mr_rkey),
                });
                self.ep = Some(ep);
                self.split = split;
                self.stage = Stage::Send {
                    pos: 0,
                    then: Box::new(Stage::ReadReady),
                };
            }
            (Msg::Accept(meta), false, Stage::ReadMeta) => {
                let ep = self
                    .ep
                    .as_ref()
                    .ok_or_else(|| Error::Internal("no endpoint".into()))?;
                ep.connect_qps(&meta)?;
                if let Some(Side::Send { peer_sizes, .. }) = &mut self.side {
                    *peer_sizes = (meta.mr_addr, meta.mr_rkey);
                }
                self.out = wire::encode(&Msg::Ready);
                self.stage = Stage::Send {
                    pos: 0,
                    then: Box::new(Stage::Done),
                };
            }
            (Msg::Ready, true, Stage::ReadReady) => self.stage = Stage::Done,
            (Msg::Reject(why), _, _) => {
                return Err(Error::Usage(format!(
                    "peer {} refused the connection: {why}",
                    self.peer
                )));
            }
            (m, _, _) => {
                return Err(Error::Remote(format!(
                    "unexpected handshake message from {}: {m:?}",
                    self.peer
                )));
            }
        }
        Ok(())
    }

    fn into_comm(self) -> Result<Box<Comm>> {
        let ep = self
            .ep
            .ok_or_else(|| Error::Internal("no endpoint".into()))?;
        let side = self.side.ok_or_else(|| Error::Internal("no side".into()))?;
        Ok(Comm::new(
            ep, side, self.split, self.sock, self.peer, self.flush,
        ))
    }
}

/// `listen`: binds, fills the handle.
pub fn listen(dev_index: i32, handle_out: &mut [u8; HANDLE_SIZE]) -> Result<Box<ListenComm>> {
    let dev = plugin::device(dev_index)?;
    let ifname = std::env::var("NCCL_SOCKET_IFNAME").ok();
    let (ip, why) = oob::listen_ip(dev, &oob::interfaces(), ifname.as_deref());
    let listener = TcpListener::bind(SocketAddr::new(ip, 0))
        .map_err(|e| Error::System(format!("{}: cannot listen on {ip} ({why}): {e}", dev.ibdev)))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::System(format!("listener: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::System(format!("listener: {e}")))?;
    *handle_out = handle::encode(addr);
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| info!(INIT | NET, "out-of-band connections on {ip} ({why})"));
    Ok(Box::new(ListenComm {
        magic: LISTEN_MAGIC,
        dev,
        listener,
        addr,
        pending: Mutex::new(Vec::new()),
    }))
}

static CONNECTS: OnceLock<Mutex<HashMap<u64, Pending>>> = OnceLock::new();
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

fn connects() -> MutexGuard<'static, HashMap<u64, Pending>> {
    let m = CONNECTS.get_or_init(|| Mutex::new(HashMap::new()));
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `connect`: starts or continues; `Ok(None)` means "call again".
pub fn connect(dev_index: i32, h: &mut [u8; HANDLE_SIZE]) -> Result<Option<Box<Comm>>> {
    let token = handle::token(h);
    let mut p = if token == 0 {
        let dev = plugin::device(dev_index)?;
        let addr = handle::decode(h).map_err(|e| Error::Argument(e.to_string()))?;
        let cfg = &plugin::get()?.config;
        let sock = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            None,
        )
        .map_err(|e| Error::System(format!("socket: {e}")))?;
        sock.set_nonblocking(true)
            .map_err(|e| Error::System(format!("socket: {e}")))?;
        let _ = sock.set_nodelay(true);
        match sock.connect(&addr.into()) {
            Ok(()) => {}
            Err(e)
                if e.raw_os_error() == Some(libc::EINPROGRESS)
                    || e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(Error::System(format!("cannot connect to {addr}: {e}"))),
        }
        let ep = Endpoint::new(dev, usize::from(cfg.qps_per_connection))?;
        let fifo = RegBuf::new(
            &ep.pd,
            FIFO_BYTES,
            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
        )?;
        let sizes_stage = RegBuf::new(&ep.pd, SIZES_BYTES, IBV_ACCESS_LOCAL_WRITE)?;
        let split = cfg.split_data_on_qps;
        let out = wire::encode(&Msg::Connect(ep.meta(fifo.addr(0), fifo.mr.rkey(), split)));
        Pending {
            sock: sock.into(),
            peer: addr,
            dev,
            stage: Stage::TcpConnect,
            reader: Reader::new(),
            out,
            ep: Some(ep),
            side: Some(Side::Send {
                fifo,
                sizes_stage,
                peer_sizes: (0, 0),
            }),
            split,
            flush: None,
            last_progress: Instant::now(),
        }
    } else {
        connects().remove(&token).ok_or_else(|| {
            Error::Argument(format!("connect handle carries unknown progress token {token:#x}: the handle is corrupt or was reused"))
        })?
    };
    let result = p.progress(false);
    match result {
        Ok(true) => {
            handle::set_token(h, 0);
            Ok(Some(p.into_comm()?))
        }
        Ok(false) if p.last_progress.elapsed() > HANDSHAKE_TIMEOUT => {
            handle::set_token(h, 0);
            Err(Error::Remote(format!(
                "connecting to {}: no progress for {} s",
                p.peer,
                HANDSHAKE_TIMEOUT.as_secs()
            )))
        }
        Ok(false) => {
            let t = if token == 0 {
                NEXT_TOKEN.fetch_add(1, Ordering::Relaxed)
            } else {
                token
            };
            handle::set_token(h, t);
            connects().insert(t, p);
            Ok(None)
        }
        Err(e) => {
            handle::set_token(h, 0);
            Err(e)
        }
    }
}

impl ListenComm {
    /// `accept`: accepts new TCP connections and advances all pending ones; returns the first
    /// that is ready. A stray or garbage connection is dropped with a warning and never blocks
    /// the others.
    pub fn accept(&self) -> Result<Option<Box<Comm>>> {
        let mut pending = self
            .pending
            .lock()
            .map_err(|_| Error::Internal("listen comm poisoned".into()))?;
        loop {
            match self.listener.accept() {
                Ok((sock, peer)) => {
                    if sock.set_nonblocking(true).is_err() {
                        continue;
                    }
                    let _ = sock.set_nodelay(true);
                    pending.push(Pending {
                        sock,
                        peer,
                        dev: self.dev,
                        stage: Stage::ReadMeta,
                        reader: Reader::new(),
                        out: Vec::new(),
                        ep: None,
                        side: None,
                        split: false,
                        flush: None,
                        last_progress: Instant::now(),
                    });
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::System(format!("accept on {}: {e}", self.addr))),
            }
        }
        let mut i = 0;
        while i < pending.len() {
            match pending[i].progress(true) {
                Ok(true) => {
                    let p = pending.swap_remove(i);
                    return Ok(Some(p.into_comm()?));
                }
                Ok(false) if pending[i].last_progress.elapsed() > HANDSHAKE_TIMEOUT => {
                    let p = pending.swap_remove(i);
                    warn!(
                        NET,
                        "{}: dropping connection from {}: no handshake progress for {} s",
                        self.dev.ibdev,
                        p.peer,
                        HANDSHAKE_TIMEOUT.as_secs()
                    );
                }
                Ok(false) => i += 1,
                Err(e) => {
                    let p = pending.swap_remove(i);
                    warn!(
                        NET,
                        "{}: dropping incoming connection from {} on {}: {e}",
                        self.dev.ibdev,
                        p.peer,
                        self.addr
                    );
                }
            }
        }
        Ok(None)
    }
}

// ---------------------------------------------------------------------------------------------
// Pointer validation used by the shims

/// Reads the magic word at the start of a plugin object.
///
/// # Safety
/// `p` must be NULL or point to at least 8 readable bytes (any object NCCL got from us).
unsafe fn magic_of(p: *const core::ffi::c_void) -> Option<u64> {
    // SAFETY: per the contract.
    (!p.is_null()).then(|| unsafe { p.cast::<u64>().read() })
}

/// # Safety
/// `p` must be NULL or a pointer this plugin returned from `connect`/`accept` and not yet closed.
pub unsafe fn comm_ref<'a>(p: *mut core::ffi::c_void) -> Result<&'a Comm> {
    // SAFETY: forwarded contract.
    match unsafe { magic_of(p) } {
        // SAFETY: the magic identifies a live Comm allocated by us.
        Some(SEND_MAGIC) | Some(RECV_MAGIC) => Ok(unsafe { &*p.cast::<Comm>() }),
        Some(_) => Err(Error::Usage(
            "not a send/receive comm of this plugin".into(),
        )),
        None => Err(Error::Usage("comm is NULL".into())),
    }
}

/// # Safety
/// As [`comm_ref`], for listen comms.
pub unsafe fn listen_ref<'a>(p: *mut core::ffi::c_void) -> Result<&'a ListenComm> {
    // SAFETY: forwarded contract.
    match unsafe { magic_of(p) } {
        // SAFETY: the magic identifies a live ListenComm allocated by us.
        Some(LISTEN_MAGIC) => Ok(unsafe { &*p.cast::<ListenComm>() }),
        Some(_) => Err(Error::Usage("not a listen comm of this plugin".into())),
        None => Err(Error::Usage("listen comm is NULL".into())),
    }
}

/// # Safety
/// `p` must be NULL or an `mhandle` this plugin returned and not yet deregistered.
pub unsafe fn mr_ref<'a>(p: *mut core::ffi::c_void) -> Result<Option<&'a MrHandle>> {
    // SAFETY: forwarded contract.
    match unsafe { magic_of(p) } {
        // SAFETY: the magic identifies a live MrHandle allocated by us.
        Some(MR_MAGIC) => Ok(Some(unsafe { &*p.cast::<MrHandle>() })),
        Some(_) => Err(Error::Usage("not a memory handle of this plugin".into())),
        None => Ok(None),
    }
}

/// `test` on a request pointer.
///
/// # Safety
/// `p` must be a request pointer this plugin returned whose comm is still open.
pub unsafe fn test_request(p: *mut core::ffi::c_void) -> Result<Option<([u32; MAX_RECVS], usize)>> {
    // SAFETY: forwarded contract.
    if unsafe { magic_of(p) } != Some(REQ_MAGIC) {
        return Err(Error::Usage(
            "test on a pointer that is not a request of this plugin".into(),
        ));
    }
    // SAFETY: a ReqHandle lives inside its comm's handle array; the comm is open per the contract.
    let h = unsafe { &*p.cast::<ReqHandle>() };
    // SAFETY: the back-pointer was set at comm creation and the comm is alive.
    let comm = unsafe { &*h.comm };
    comm.test(h.idx)
}

/// Frees a comm or listen comm (closeSend / closeRecv / closeListen).
///
/// # Safety
/// `p` must be a pointer returned by this plugin of the kind named by `magic`, not yet closed.
pub unsafe fn close(p: *mut core::ffi::c_void, want: &[u64]) -> Result<()> {
    // SAFETY: forwarded contract.
    let m = unsafe { magic_of(p) }.ok_or_else(|| Error::Usage("close of a NULL comm".into()))?;
    if !want.contains(&m) {
        return Err(Error::Usage("close of an object of the wrong kind".into()));
    }
    match m {
        // SAFETY: allocated by Box::into_raw in the shim; closing ends its life exactly once.
        LISTEN_MAGIC => drop(unsafe { Box::from_raw(p.cast::<ListenComm>()) }),
        SEND_MAGIC | RECV_MAGIC => {
            // SAFETY: as above.
            let c = unsafe { Box::from_raw(p.cast::<Comm>()) };
            // Make any use-after-close detectable rather than silently valid.
            drop(c);
        }
        _ => return Err(Error::Usage("close of an unknown object".into())),
    }
    Ok(())
}

pub const MAGIC_LISTEN: u64 = LISTEN_MAGIC;
pub const MAGIC_SEND: u64 = SEND_MAGIC;
pub const MAGIC_RECV: u64 = RECV_MAGIC;
