//! One side's verbs resources for a connection: its RC queue pairs on one CQ, how they are
//! brought to INIT, RTR and RTS against the peer's, the loopback QP used for flushes, and the
//! small registered host buffers the protocol keeps (FIFOs, sizes, flush landing).

use crate::error::{Error, Result};
use crate::events::{self, DeviceEvents};
use crate::plugin::{self, NetDevice};
use ferro_proto::plan;
use ferro_proto::wire::QpMeta;
use ferro_verbs::sys::*;
use ferro_verbs::{Cq, HostBuf, Mr, Pd, Qp, QpCaps};
use std::sync::Arc;

/// Path MTU code (`IBV_MTU_*`) for a byte count.
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
pub(super) struct Endpoint {
    pub(super) dev: &'static NetDevice,
    pub(super) qps: Vec<Qp>,
    pub(super) cq: Arc<Cq>,
    pub(super) pd: Arc<Pd>,
    /// The device's asynchronous events (port down, QP/CQ errors), checked while comms wait.
    pub(super) events: Arc<DeviceEvents>,
    /// RoCE traffic class of this connection's QPs: `NCCL_IB_TC`, or the communicator's own.
    pub(super) traffic_class: u8,
    /// Bytes a work request may carry inline on these QPs (`NCCL_IB_USE_INLINE=1`: one
    /// clear-to-send entry, as NCCL's IB transport asks; else 0). Posts use `IBV_SEND_INLINE`
    /// only up to this, so the flag never outruns what the QPs were created with.
    pub(super) max_inline: u32,
}

impl Endpoint {
    /// `nqps` RC QPs in INIT on one CQ of the device's protection domain, their queues sized for
    /// the worst case the advertised limits allow ([`plan::queue_depths`]).
    pub(super) fn new(dev: &'static NetDevice, nqps: usize, traffic_class: u8) -> Result<Endpoint> {
        let pd = dev.pd().clone();
        let depths = plan::queue_depths(nqps);
        let cq = Cq::new(&dev.ctx, depths.cqe)?;
        let max_inline = if crate::plugin::get().is_ok_and(|p| p.config.use_inline) {
            ferro_proto::fifo::ENTRY_SIZE as u32
        } else {
            0
        };
        let caps = QpCaps {
            max_send_wr: depths.send_wr,
            max_recv_wr: depths.recv_wr,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: max_inline,
        };
        let mut qps = Vec::with_capacity(nqps);
        for _ in 0..nqps {
            let qp = Qp::new_rc(&pd, &cq, &cq, caps)?;
            to_init(
                &qp,
                dev,
                IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE,
            )?;
            qps.push(qp);
        }
        let events = events::of(&dev.ctx);
        events.drain_now();
        Ok(Endpoint {
            dev,
            qps,
            cq,
            pd,
            events,
            traffic_class,
            max_inline,
        })
    }

    /// What the peer needs to reach these QPs, with the one registered region it may write
    /// (the sender's CTS FIFO, or the receiver's sizes FIFO).
    pub(super) fn meta(&self, mr_addr: u64, mr_rkey: u32, split: bool) -> QpMeta {
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
            secret: [0; ferro_proto::handle::SECRET_SIZE],
        }
    }

    /// INIT -> RTR -> RTS against the peer's QPs.
    pub(super) fn connect_qps(&self, peer: &QpMeta) -> Result<()> {
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
                traffic_class: self.traffic_class,
            };
        }
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_RTR,
            path_mtu: mtu_code(self.dev.active_mtu.min(peer.mtu)),
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
        Ok(())
    }

    /// Why this endpoint cannot go on, from the device's asynchronous events (its port went
    /// down, one of its QPs or its CQ failed, the device failed), if it cannot.
    pub(super) fn device_verdict(&self) -> Option<String> {
        self.events.verdict(
            self.dev.port,
            |qpn| self.qps.iter().any(|q| q.qpn() == qpn),
            self.cq.as_ptr() as usize,
        )
    }

    /// A QP connected to itself with a 4-byte landing buffer, for flushes (RDMA READ of received
    /// data through the NIC).
    pub(super) fn flush_qp(&self) -> Result<FlushQp> {
        let caps = QpCaps {
            max_send_wr: plan::queue_depths(self.qps.len()).flush_wr,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = Qp::new_rc(&self.pd, &self.cq, &self.cq, caps)?;
        to_init(
            &qp,
            self.dev,
            IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE,
        )?;
        let me = self.meta(0, 0, false);
        self.connect_qp(&qp, qp.qpn(), &me)?;
        let buf = RegBuf::new(&self.pd, 4, IBV_ACCESS_LOCAL_WRITE)?;
        Ok(FlushQp { qp, buf })
    }
}

/// RESET -> INIT on the device's port with the plugin's P_Key index.
fn to_init(qp: &Qp, dev: &NetDevice, access: u32) -> Result<()> {
    let cfg = &plugin::get()?.config;
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_INIT,
        pkey_index: cfg.pkey_index,
        port_num: dev.port,
        qp_access_flags: access,
        ..Default::default()
    };
    qp.modify(
        &mut a,
        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
    )?;
    Ok(())
}

/// The loopback QP of a receive comm that flushes, and its landing buffer.
#[derive(Debug)]
pub(super) struct FlushQp {
    pub(super) qp: Qp,
    pub(super) buf: RegBuf,
}

/// A host buffer with its registration (the MR is declared first, so it is dropped first).
/// The NIC may write it at any time: it is only read with volatile loads, never referenced.
#[derive(Debug)]
pub(super) struct RegBuf {
    pub(super) mr: Mr,
    buf: HostBuf,
}

impl RegBuf {
    pub(super) fn new(pd: &Arc<Pd>, len: usize, access: u32) -> Result<RegBuf> {
        let buf = HostBuf::new(len)?;
        // SAFETY: buf is owned by the RegBuf and outlives the MR (field order drops the MR first).
        let mr = unsafe { Mr::reg(pd, buf.as_ptr().cast(), buf.len(), access)? };
        Ok(RegBuf { mr, buf })
    }

    pub(super) fn addr(&self, off: usize) -> u64 {
        self.buf.as_ptr() as u64 + off as u64
    }

    /// Volatile copy of `N` bytes at `off` (memory the NIC writes).
    pub(super) fn read<const N: usize>(&self, off: usize) -> [u8; N] {
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

    pub(super) fn write(&self, off: usize, bytes: &[u8]) {
        assert!(off + bytes.len() <= self.buf.len());
        // SAFETY: in bounds; the region is only read by the NIC after a later post.
        unsafe {
            core::ptr::copy_nonoverlapping(bytes.as_ptr(), self.buf.as_ptr().add(off), bytes.len())
        };
    }
}
