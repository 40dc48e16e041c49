//! One side's verbs resources for a connection: its RC queue pairs over the member devices of
//! its (virtual) device, one CQ per member, how they are brought to INIT, RTR and RTS against
//! the peer's, the loopback QPs used for flushes, and the small registered host buffers the
//! protocol keeps (FIFOs, sizes, flush landing), registered on every member.

use super::access;
use crate::error::{Error, Result};
use crate::events::{self, DeviceEvents};
use crate::plugin::{self, NetDevice};
use crate::vnic::VDevice;
use ferro_proto::Keys;
use ferro_proto::health::DeviceFault;
use ferro_proto::path::QpPath;
use ferro_proto::plan::{self, QpLayout};
use ferro_proto::wire::{DevMeta, QpMeta};
use ferro_verbs::sys::*;
use ferro_verbs::{Cq, HostBuf, Mr, Pd, Qp, QpCaps, Sge};
use std::sync::{Arc, OnceLock};

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

/// One member device's share of an endpoint: its protection domain, the CQ its QPs complete
/// on, and its asynchronous events.
#[derive(Debug)]
pub(super) struct Rail {
    pub(super) dev: &'static NetDevice,
    pub(super) pd: Arc<Pd>,
    pub(super) cq: Arc<Cq>,
    /// The device's asynchronous events (port down, QP/CQ errors), checked while comms wait.
    pub(super) events: Arc<DeviceEvents>,
}

/// Verbs resources of one side of a connection, over every member device of its (virtual)
/// device: QP `q` is on rail `q % rails.len()` and reaches the peer's member
/// `q % layout.remote_devs` (see [`QpLayout`]).
#[derive(Debug)]
pub(super) struct Endpoint {
    pub(super) vdev: &'static VDevice,
    pub(super) rails: Vec<Rail>,
    pub(super) qps: Vec<Qp>,
    pub(super) layout: QpLayout,
    /// The traffic class and service level of the connection, as the sending side chose them
    /// (the handshake carries them to the receiving side): kept for the reconnects of a
    /// recovery, which must use the same.
    pub(super) path: QpPath,
    /// Receiving side: `NCCL_IB_FIFO_TC`, which replaces the traffic class of its data QPs
    /// (they carry its clear-to-send writes) on RoCE. `None` on the sending side.
    fifo_tc: Option<u8>,
    /// Most bytes one RDMA write may carry on every member (longer chunks go in pieces).
    pub(super) max_write: u32,
    /// The peer's member devices, from the handshake: what a recovery reconnects to.
    peer_devs: OnceLock<Vec<DevMeta>>,
}

/// The packet sequence number both sides start their rebuilt QPs at in recovery epoch `epoch`
/// (0 in epoch 0, as the handshake's): a packet of an earlier epoch still on the wire falls
/// outside the new window and is dropped by the receiving QP.
fn start_psn(epoch: u32) -> u32 {
    (epoch << 16) & 0xFF_FFFF
}

impl Endpoint {
    /// `layout.nqps` RC QPs in INIT, spread over the members of `vdev`, each member's on one CQ
    /// of its protection domain; queues sized for the worst case the advertised limits allow
    /// ([`plan::queue_depths`]). `path` is the connection's traffic class and service level;
    /// `fifo_tc` the receiving side's `NCCL_IB_FIFO_TC` (`None` on the sending side).
    pub(super) fn new(
        vdev: &'static VDevice,
        layout: QpLayout,
        path: QpPath,
        fifo_tc: Option<u8>,
    ) -> Result<Endpoint> {
        let depths = plan::queue_depths(layout.nqps);
        // Bytes a work request may carry inline on these QPs (`NCCL_IB_USE_INLINE=1`: one
        // clear-to-send entry, as NCCL's IB transport asks; else 0). Each QP keeps this and
        // sends a request inline only up to it ([`Qp::post`]), so the flag never outruns what
        // the QPs were created with.
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
        let mut rails = Vec::with_capacity(vdev.members.len());
        for &dev in &vdev.members {
            let events = events::of(&dev.ctx);
            events.drain_now();
            rails.push(Rail {
                dev,
                pd: dev.pd().clone(),
                cq: Cq::new(&dev.ctx, depths.cqe)?,
                events,
            });
        }
        let mut qps = Vec::with_capacity(layout.nqps);
        for q in 0..layout.nqps {
            let rail = &rails[layout.local_dev(q)];
            let qp = Qp::new_rc(&rail.pd, &rail.cq, &rail.cq, caps)?;
            to_init(&qp, rail.dev, access::DATA_QP)?;
            qps.push(qp);
        }
        Ok(Endpoint {
            vdev,
            rails,
            qps,
            layout,
            path,
            fifo_tc,
            max_write: vdev.max_write_bytes(),
            peer_devs: OnceLock::new(),
        })
    }

    /// The rail QP `q` is on.
    pub(super) fn rail_of(&self, q: usize) -> &Rail {
        &self.rails[self.layout.local_dev(q)]
    }

    /// Every member's protection domain, in member order (for protocol buffers).
    pub(super) fn pds(&self) -> Vec<Arc<Pd>> {
        self.rails.iter().map(|r| r.pd.clone()).collect()
    }

    /// What the peer needs to reach this side's members over the QPs, with the one registered
    /// region it may write (the sender's CTS FIFO, or the receiver's sizes FIFO), `qps_per_conn`
    /// and split mode (which both sides must agree on).
    pub(super) fn meta(&self, region: &RegBuf, qps_per_conn: u16, split: bool) -> QpMeta {
        QpMeta {
            qps_per_conn,
            split,
            path: self.path,
            devs: self
                .rails
                .iter()
                .enumerate()
                .map(|(i, r)| dev_meta(r.dev, region.rkey(i)))
                .collect(),
            mr_addr: region.addr(0),
            qpns: self.qps.iter().map(Qp::qpn).collect(),
            secret: [0; ferro_proto::handle::SECRET_SIZE],
        }
    }

    /// INIT -> RTR -> RTS against the peer's QPs: QP `q` against the peer's QP `q`, on the
    /// peer's member device `q % peer.devs.len()`.
    pub(super) fn connect_qps(&self, peer: &QpMeta) -> Result<()> {
        if peer.qpns.len() != self.qps.len() || peer.devs.len() != self.layout.remote_devs {
            return Err(Error::Remote(format!(
                "peer has {} QPs over {} devices, this side expects {} over {}",
                peer.qpns.len(),
                peer.devs.len(),
                self.qps.len(),
                self.layout.remote_devs
            )));
        }
        let _ = self.peer_devs.set(peer.devs.clone());
        self.connect_to(&peer.qpns, 0)
    }

    /// INIT -> RTR -> RTS of every data QP against the peer's QPs `qpns` (handshake order) on
    /// the peer's devices the handshake named, starting at the packet numbers of `epoch`.
    fn connect_to(&self, qpns: &[u32], epoch: u32) -> Result<()> {
        let devs = self
            .peer_devs
            .get()
            .ok_or_else(|| Error::Internal("reconnect before the handshake connected".into()))?;
        if qpns.len() != self.qps.len() {
            return Err(Error::Remote(format!(
                "the peer rebuilt {} QPs, this side has {}",
                qpns.len(),
                self.qps.len()
            )));
        }
        for (q, (qp, &remote_qpn)) in self.qps.iter().zip(qpns).enumerate() {
            let remote = &devs[self.layout.remote_dev(q)];
            let path = self.data_qp_path(q);
            self.connect_qp(qp, self.rail_of(q).dev, remote_qpn, remote, epoch, path)?;
        }
        Ok(())
    }

    /// The traffic class and service level data QP `q` is given: the connection's, with
    /// `NCCL_IB_FIFO_TC` as the class of the receiving side's QPs on RoCE when it is set.
    pub(super) fn data_qp_path(&self, q: usize) -> QpPath {
        let roce = self.rail_of(q).dev.link_layer.is_ethernet();
        QpPath {
            tc: self.path.receiver_tc(self.fifo_tc, roce),
            sl: self.path.sl,
        }
    }

    /// Recovery: moves every data QP to the error state, so nothing more is sent or received
    /// on it and everything posted completes (flushed). A QP already in error stays there.
    pub(super) fn quiesce(&self) {
        for qp in &self.qps {
            let _ = to_state(qp, IBV_QPS_ERR);
        }
    }

    /// Recovery: brings every data QP back to INIT (error -> reset -> init: its queues are
    /// emptied and the QP number is kept), and forgets the device events recorded against
    /// them. Returns the QP numbers, in the handshake's order.
    pub(super) fn rebuild(&self) -> Result<Vec<u32>> {
        for (q, qp) in self.qps.iter().enumerate() {
            let rail = self.rail_of(q);
            let _ = to_state(qp, IBV_QPS_ERR);
            to_state(qp, IBV_QPS_RESET)?;
            to_init(qp, rail.dev, access::DATA_QP)?;
            rail.events.forget_qp(qp.qpn());
        }
        Ok(self.qps.iter().map(Qp::qpn).collect())
    }

    /// Recovery: connects the rebuilt QPs to the peer's rebuilt ones of `epoch`.
    pub(super) fn reconnect(&self, peer_qpns: &[u32], epoch: u32) -> Result<()> {
        self.connect_to(peer_qpns, epoch)
    }

    /// Recovery: whether every member device this endpoint's QPs are on can carry them again
    /// (its port is not recorded down by an event and reports itself ACTIVE); if not, the
    /// first that cannot, as `device:port`.
    pub(super) fn port_not_ready(&self) -> Option<String> {
        self.rails.iter().find_map(|r| {
            let active = !r.events.is_port_down(r.dev.port)
                && r.dev
                    .ctx
                    .query_port(r.dev.port)
                    .is_ok_and(|a| a.state == IBV_PORT_ACTIVE);
            (!active).then(|| format!("{}:{}", r.dev.ibdev, r.dev.port))
        })
    }

    /// Recovery: the receiver's flush QPs, each connected to itself again (error -> reset ->
    /// init -> RTR -> RTS).
    pub(super) fn rebuild_flush_qps(&self, flush: &[FlushQp]) -> Result<()> {
        for (f, r) in flush.iter().zip(&self.rails) {
            let _ = to_state(&f.qp, IBV_QPS_ERR);
            to_state(&f.qp, IBV_QPS_RESET)?;
            to_init(&f.qp, r.dev, access::FLUSH_QP)?;
            self.connect_qp(&f.qp, r.dev, f.qp.qpn(), &dev_meta(r.dev, 0), 0, self.path)?;
            r.events.forget_qp(f.qp.qpn());
        }
        Ok(())
    }

    /// One QP on `dev`: INIT -> RTR -> RTS against `remote_qpn` on the peer device `peer`,
    /// with the packet numbers of recovery epoch `epoch`, its traffic class (RoCE) and service
    /// level from `path`.
    fn connect_qp(
        &self,
        qp: &Qp,
        dev: &NetDevice,
        remote_qpn: u32,
        peer: &DevMeta,
        epoch: u32,
        path: QpPath,
    ) -> Result<()> {
        let cfg = &plugin::get()?.config;
        let mut ah = ibv_ah_attr {
            dlid: peer.lid,
            sl: path.sl,
            port_num: dev.port,
            ..Default::default()
        };
        if let Some(g) = &dev.gid {
            ah.is_global = 1;
            ah.grh = ibv_global_route {
                dgid: ibv_gid { raw: peer.gid },
                flow_label: 0,
                sgid_index: u8::try_from(g.index)
                    .map_err(|_| Error::Usage(format!("GID index {} exceeds 255", g.index)))?,
                hop_limit: 255,
                traffic_class: path.tc,
            };
        }
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_RTR,
            path_mtu: mtu_code(dev.active_mtu.min(peer.mtu)),
            dest_qp_num: remote_qpn,
            rq_psn: start_psn(epoch),
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
            sq_psn: start_psn(epoch),
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

    /// Why this endpoint cannot go on, from its member devices' asynchronous events (a port
    /// went down, one of its QPs or CQs failed, a device failed), if it cannot.
    pub(super) fn device_verdict(&self) -> Option<DeviceFault> {
        self.rails.iter().find_map(|r| {
            r.events
                .verdict(
                    r.dev.port,
                    |qpn| self.qps.iter().any(|q| q.qpn() == qpn),
                    r.cq.as_ptr() as usize,
                )
                .map(|fault| {
                    if self.vdev.is_virtual {
                        fault.of_member(&r.dev.ibdev, r.dev.port, &self.vdev.name)
                    } else {
                        fault
                    }
                })
        })
    }

    /// One QP per member device connected to itself, each with a 4-byte landing buffer, for
    /// flushes (RDMA READ of received data through each NIC that wrote some of it).
    pub(super) fn flush_qps(&self) -> Result<Vec<FlushQp>> {
        let caps = QpCaps {
            max_send_wr: plan::queue_depths(self.qps.len()).flush_wr,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        self.rails
            .iter()
            .map(|r| {
                let qp = Qp::new_rc(&r.pd, &r.cq, &r.cq, caps)?;
                to_init(&qp, r.dev, access::FLUSH_QP)?;
                // The connection's class, never NCCL_IB_FIFO_TC: a flush carries no
                // clear-to-send write (as NCCL's flush QPs).
                self.connect_qp(&qp, r.dev, qp.qpn(), &dev_meta(r.dev, 0), 0, self.path)?;
                let buf = RegBuf::new(std::slice::from_ref(&r.pd), 4, access::FLUSH_LANDING)?;
                Ok(FlushQp { qp, buf })
            })
            .collect()
    }
}

/// What a peer needs to reach `dev`, with the key of a protocol region on it.
fn dev_meta(dev: &NetDevice, mr_rkey: u32) -> DevMeta {
    DevMeta {
        link_layer: if dev.link_layer.is_ethernet() {
            IBV_LINK_LAYER_ETHERNET
        } else {
            IBV_LINK_LAYER_INFINIBAND
        },
        port: dev.port,
        lid: dev.lid,
        mtu: dev.active_mtu,
        gid: dev.gid.as_ref().map_or([0; 16], |g| g.gid.gid),
        gid_index: dev.gid.as_ref().map_or(0, |g| g.index),
        mr_rkey,
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

/// A QP to `state` (error or reset), nothing else changed.
fn to_state(qp: &Qp, state: u32) -> Result<()> {
    let mut a = ibv_qp_attr {
        qp_state: state,
        ..Default::default()
    };
    qp.modify(&mut a, IBV_QP_STATE)?;
    Ok(())
}

impl Drop for Endpoint {
    /// The device events recorded against this endpoint's QPs and CQs are forgotten with them,
    /// so a later comm that gets the same QP number or CQ address starts clean.
    fn drop(&mut self) {
        for (q, qp) in self.qps.iter().enumerate() {
            self.rail_of(q).events.forget_qp(qp.qpn());
        }
        for r in &self.rails {
            r.events.forget_cq(r.cq.as_ptr() as usize);
        }
    }
}

/// The loopback QP of a receive comm that flushes, and its landing buffer.
#[derive(Debug)]
pub(super) struct FlushQp {
    pub(super) qp: Qp,
    pub(super) buf: RegBuf,
}

/// A host buffer with its registration on each member device (the MRs are declared first, so
/// they are dropped first). The NIC may write it at any time: its bytes are accessed only through
/// the buffer's bounds-checked volatile view ([`HostBuf::volatile`]), never referenced, and the
/// NIC reaches it only through scatter entries built from its registrations ([`RegBuf::sge`]).
#[derive(Debug)]
pub(super) struct RegBuf {
    mrs: Vec<Mr>,
    buf: HostBuf,
}

impl RegBuf {
    /// `len` bytes registered under each of `pds` (one per member device, in member order).
    pub(super) fn new(pds: &[Arc<Pd>], len: usize, access: u32) -> Result<RegBuf> {
        let buf = HostBuf::new(len)?;
        let mrs = pds
            .iter()
            .map(|pd| {
                // SAFETY: buf is owned by the RegBuf and outlives the MRs (field order drops
                // the MRs first).
                unsafe { Mr::reg(pd, buf.as_ptr().cast(), buf.len(), access) }
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(RegBuf { mrs, buf })
    }

    /// The local key on member `m`.
    pub(super) fn lkey(&self, m: usize) -> u32 {
        self.mrs.get(m).map_or(0, Mr::lkey)
    }

    /// The remote key on member `m`.
    pub(super) fn rkey(&self, m: usize) -> u32 {
        self.mrs.get(m).map_or(0, Mr::rkey)
    }

    /// The local keys by member.
    pub(super) fn lkeys(&self) -> Keys {
        core::array::from_fn(|m| self.lkey(m))
    }

    pub(super) fn addr(&self, off: usize) -> u64 {
        self.buf.as_ptr() as u64 + off as u64
    }

    /// A scatter entry of `len` bytes at `off` under member `m`'s registration.
    ///
    /// # Panics
    /// When there is no member `m` or the range is not inside the buffer (offsets and lengths
    /// come from the protocol's fixed layout).
    pub(super) fn sge(&self, m: usize, off: usize, len: u32) -> Sge {
        let Some(sge) = self.mrs.get(m).and_then(|mr| mr.sge(off, len)) else {
            panic!(
                "{len} bytes at offset {off} on member {m} are outside a buffer of {} bytes registered on {} members",
                self.buf.len(),
                self.mrs.len()
            );
        };
        sge
    }

    /// Copy of `N` bytes at `off` (memory the NIC writes: volatile loads).
    pub(super) fn read<const N: usize>(&self, off: usize) -> [u8; N] {
        self.buf.volatile().read::<N>(off)
    }

    /// The little-endian `u32` at `off` (volatile, as [`RegBuf::read`]).
    pub(super) fn read_u32_le(&self, off: usize) -> u32 {
        self.buf.volatile().read_u32_le(off)
    }

    /// Copies `bytes` to `off` (staging the NIC reads after a later post).
    pub(super) fn write(&self, off: usize, bytes: &[u8]) {
        self.buf.volatile().write(off, bytes);
    }
}
