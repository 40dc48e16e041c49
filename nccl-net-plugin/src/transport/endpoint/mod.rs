//! One side's verbs resources for a connection: its RC queue pairs over the member devices of
//! its (virtual) device, one CQ per member, the loopback QPs used for flushes, failover and
//! rebuild in recovery; by concept:
//! - [`connect`]: how the QPs are brought to INIT, RTR and RTS against the peer's (the
//!   handshake's connect one state change at a time, the reconnects of a recovery, the peer's
//!   address);
//! - [`regbuf`]: the small registered host buffers the protocol keeps (FIFOs, sizes, flush
//!   landing), registered on every member.

use super::access;
use crate::error::{Error, Result};
use crate::events::{self, DeviceEvents};
use crate::plugin::{self, NetDevice};
use crate::vnic::VDevice;
use ferro_proto::health::DeviceFault;
use ferro_proto::path::QpPath;
use ferro_proto::plan::{self, QpLayout};
use ferro_proto::recovery::PeerQps;
use ferro_proto::wire::{DevMeta, Ece, QpMeta};
use ferro_verbs::sys::*;
use ferro_verbs::{Cq, Pd, Qp, QpCaps};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

mod connect;
mod regbuf;

use connect::{to_init, to_state};
pub(super) use regbuf::RegBuf;

/// Says once per process, at INFO, that a device's provider has no enhanced connection
/// establishment (soft-RoCE, or a libibverbs without `ibv_query_ece`): its QPs connect without.
fn ece_unsupported_once(dev: &str) {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        crate::info!(
            ferro_ffi::log_flags::NET,
            "{dev}: no enhanced connection establishment (ibv_query_ece/ibv_set_ece unsupported); QPs connect without it (NCCL_IB_ECE_ENABLE)"
        );
    });
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

/// The QP that carries the receiving side's clear-to-send writes (the only data QP whose send
/// queue that side uses).
pub(super) const CTS_QP: usize = 0;

/// Which side of the connection an endpoint is: it decides which queues its QPs post to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// Posts the data writes; posts no receives.
    Sending,
    /// Posts the receives, and the clear-to-send writes on [`CTS_QP`].
    Receiving,
}

/// Verbs resources of one side of a connection, over every member device of its (virtual)
/// device: QP `q` is on rail `q % rails.len()` and reaches the peer's member
/// `q % layout.remote_devs` (see [`QpLayout`]); after a failover inside a virtual NIC, a QP whose
/// member is down runs as an alternate QP on the next member up.
#[derive(Debug)]
pub(super) struct Endpoint {
    pub(super) vdev: &'static VDevice,
    pub(super) rails: Vec<Rail>,
    /// QP `q` on its home member, as the handshake made it.
    qps: Vec<Qp>,
    /// QP `q`'s stand-in on another member (that member's index, and the QP), made at its first
    /// failover and kept (reset and reconnected) for later ones.
    alternates: Vec<OnceLock<(usize, Qp)>>,
    /// The layout of the handshake; [`Endpoint::layout`] adds the members that are down.
    base: QpLayout,
    /// This side's members that are down (bit per member), set by a recovery's rebuild; only
    /// written under the comm's lock, read by the calls that hold it.
    local_down: AtomicU8,
    /// The peer's members that are down, as its last `Rebuilt` said.
    remote_down: AtomicU8,
    /// The traffic class and service level of the connection, as the sending side chose them
    /// (the handshake carries them to the receiving side): kept for the reconnects of a
    /// recovery, which must use the same.
    pub(super) path: QpPath,
    /// Receiving side: `NCCL_IB_FIFO_TC`, which replaces the traffic class of its data QPs
    /// (they carry its clear-to-send writes) on RoCE. `None` on the sending side.
    fifo_tc: Option<u8>,
    /// Most bytes one RDMA write may carry on every member (longer chunks go in pieces).
    pub(super) max_write: u32,
    /// Which side this is (the depth of its QPs' queues).
    role: Role,
    /// The peer's member devices, from the handshake: what a recovery reconnects to.
    peer_devs: OnceLock<Vec<DevMeta>>,
}

impl Endpoint {
    /// `layout.nqps` RC QPs in INIT, spread over the members of `vdev`, each member's on one CQ
    /// of its protection domain; queues sized for the worst case the advertised limits allow
    /// ([`plan::queue_depths`]), each queue only as deep as `role` posts to it. `path` is the
    /// connection's traffic class and service level; `fifo_tc` the receiving side's
    /// `NCCL_IB_FIFO_TC` (`None` on the sending side).
    pub(super) fn new(
        vdev: &'static VDevice,
        layout: QpLayout,
        role: Role,
        path: QpPath,
        fifo_tc: Option<u8>,
    ) -> Result<Endpoint> {
        let depths = plan::queue_depths(layout.nqps);
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
            let qp = Qp::new_rc(
                &rail.pd,
                &rail.cq,
                &rail.cq,
                data_qp_caps(layout.nqps, role, q),
            )?;
            to_init(&qp, rail.dev, access::DATA_QP)?;
            qps.push(qp);
        }
        Ok(Endpoint {
            vdev,
            rails,
            alternates: (0..qps.len()).map(|_| OnceLock::new()).collect(),
            qps,
            base: layout,
            local_down: AtomicU8::new(0),
            remote_down: AtomicU8::new(0),
            path,
            fifo_tc,
            max_write: vdev.max_write_bytes(),
            role,
            peer_devs: OnceLock::new(),
        })
    }

    /// How the QPs map onto both sides' members now (the handshake's layout, with the members
    /// a failover moved QPs away from).
    pub(super) fn layout(&self) -> QpLayout {
        self.base.with_down(
            self.local_down.load(Ordering::Relaxed),
            self.remote_down.load(Ordering::Relaxed),
        )
    }

    /// The number of data QPs.
    pub(super) fn nqps(&self) -> usize {
        self.qps.len()
    }

    /// The QP that carries QP `q`'s work now: its own, or its stand-in on another member.
    #[inline(always)]
    pub(super) fn qp(&self, q: usize) -> &Qp {
        if self.local_down.load(Ordering::Relaxed) == 0 {
            // No member of this side is down: every QP runs on its home member.
            return &self.qps[q];
        }
        let lay = self.layout();
        let m = lay.local_dev(q);
        if m != lay.home_local_dev(q) {
            if let Some((am, alt)) = self.alternates[q].get() {
                if *am == m {
                    return alt;
                }
            }
        }
        &self.qps[q]
    }

    /// Whether `qpn` is one of this endpoint's data QPs (own or stand-in).
    fn owns_qp(&self, qpn: u32) -> bool {
        self.qps.iter().any(|q| q.qpn() == qpn)
            || self
                .alternates
                .iter()
                .any(|a| a.get().is_some_and(|(_, q)| q.qpn() == qpn))
    }

    /// Whether member `m` of this side is down (its QPs failed over).
    pub(super) fn is_down(&self, m: usize) -> bool {
        m < 8 && self.local_down.load(Ordering::Relaxed) & (1 << m) != 0
    }

    /// The rail QP `q` is on.
    pub(super) fn rail_of(&self, q: usize) -> &Rail {
        &self.rails[self.layout().local_dev(q)]
    }

    /// Every member's protection domain, in member order (for protocol buffers).
    pub(super) fn pds(&self) -> Vec<Arc<Pd>> {
        self.rails.iter().map(|r| r.pd.clone()).collect()
    }

    /// What the peer needs to reach this side's members over the QPs, with the one registered
    /// region it may write (the sender's CTS FIFO, or the receiver's sizes FIFO), `qps_per_conn`
    /// and split mode (which both sides must agree on).
    pub(super) fn meta(&self, region: &RegBuf, qps_per_conn: u16, split: bool) -> Result<QpMeta> {
        Ok(QpMeta {
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
            qpns: (0..self.nqps()).map(|q| self.qp(q).qpn()).collect(),
            eces: self.local_eces()?,
            secret: [0; ferro_proto::handle::SECRET_SIZE],
        })
    }

    /// Each data QP's enhanced connection establishment for the handshake (after
    /// [`Self::set_peer_eces`] on the accepting side: what both support); empty with
    /// `NCCL_IB_ECE_ENABLE=0` or when no QP has any (the provider lacks it: said once).
    fn local_eces(&self) -> Result<Vec<Option<Ece>>> {
        if !plugin::get()?.config.ece_enable {
            return Ok(Vec::new());
        }
        let mut eces = Vec::with_capacity(self.nqps());
        for q in 0..self.nqps() {
            let ece = self.qp(q).query_ece().map_err(Error::from)?;
            if ece.is_none() {
                ece_unsupported_once(&self.rail_of(q).dev.ibdev);
            }
            eces.push(ece.map(|e| Ece {
                vendor_id: e.vendor_id,
                options: e.options,
                comp_mask: e.comp_mask,
            }));
        }
        if eces.iter().all(Option::is_none) {
            eces.clear();
        }
        Ok(eces)
    }

    /// Sets the peer's enhanced connection establishment on each data QP it gave one for,
    /// before the QPs connect (`NCCL_IB_ECE_ENABLE`); a QP whose provider lacks it connects
    /// without.
    pub(super) fn set_peer_eces(&self, peer: &[Option<Ece>]) -> Result<()> {
        if !plugin::get()?.config.ece_enable {
            return Ok(());
        }
        for (q, ece) in peer.iter().enumerate().take(self.nqps()) {
            let Some(e) = ece else { continue };
            let raw = ibv_ece {
                vendor_id: e.vendor_id,
                options: e.options,
                comp_mask: e.comp_mask,
            };
            if !self.qp(q).set_ece(&raw).map_err(Error::from)? {
                ece_unsupported_once(&self.rail_of(q).dev.ibdev);
            }
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
        for (_, alt) in self.alternates.iter().filter_map(OnceLock::get) {
            let _ = to_state(alt, IBV_QPS_ERR);
        }
    }

    /// Recovery: moves the receiver's flush QPs to the error state (their reads are posted
    /// again at the resume).
    pub(super) fn quiesce_flush_qps(&self, flush: &[FlushQp]) {
        for f in flush {
            let _ = to_state(&f.qp, IBV_QPS_ERR);
        }
    }

    /// Recovery: this side's members that cannot carry QPs now (a port not ACTIVE, or recorded
    /// down by an event), one bit per member.
    pub(super) fn members_down(&self) -> u8 {
        self.rails
            .iter()
            .enumerate()
            .filter(|(m, r)| {
                *m < 8
                    && (r.events.is_port_down(r.dev.port)
                        || !r
                            .dev
                            .ctx
                            .query_port(r.dev.port)
                            .is_ok_and(|a| a.state == IBV_PORT_ACTIVE))
            })
            .fold(0u8, |d, (m, _)| d | (1 << m))
    }

    /// Whether `down` leaves no member to carry the QPs (the comm waits for a port).
    pub(super) fn all_down(&self, down: u8) -> bool {
        (0..self.rails.len().min(8)).all(|m| down & (1 << m) != 0)
    }

    /// The members in `down`, as `device:port` (for messages).
    pub(super) fn describe_members(&self, down: u8) -> String {
        let names: Vec<String> = self
            .rails
            .iter()
            .enumerate()
            .filter(|(m, _)| *m < 8 && down & (1 << m) != 0)
            .map(|(_, r)| format!("{}:{}", r.dev.ibdev, r.dev.port))
            .collect();
        names.join(", ")
    }

    /// A member this side failed over from whose port is active again, as `device:port`.
    pub(super) fn member_back(&self) -> Option<String> {
        let was = self.local_down.load(Ordering::Relaxed);
        if was == 0 {
            return None;
        }
        let back = was & !self.members_down();
        (back != 0).then(|| self.describe_members(back))
    }

    /// Recovery: brings every data QP back to INIT on the member it runs on with the members in
    /// `down` down (error -> reset -> init: its queues are emptied; a QP at home keeps its
    /// number, one whose member is down runs as its stand-in on the next member up, made at its
    /// first failover), moves what is not used to the error state, and forgets the device
    /// events recorded against them. Returns the QP numbers, in the handshake's order.
    pub(super) fn rebuild(&self, down: u8) -> Result<Vec<u32>> {
        self.local_down.store(down, Ordering::Relaxed);
        let lay = self.layout();
        for q in 0..self.qps.len() {
            let (home, m) = (lay.home_local_dev(q), lay.local_dev(q));
            let primary = &self.qps[q];
            self.rails[home].events.forget_qp(primary.qpn());
            let qp = if m == home {
                if let Some((_, alt)) = self.alternates[q].get() {
                    let _ = to_state(alt, IBV_QPS_ERR);
                }
                primary
            } else {
                let _ = to_state(primary, IBV_QPS_ERR);
                let rail = &self.rails[m];
                if self.alternates[q].get().is_none() {
                    let alt = Qp::new_rc(&rail.pd, &rail.cq, &rail.cq, self.caps(q))?;
                    let _ = self.alternates[q].set((m, alt));
                }
                match self.alternates[q].get() {
                    Some((am, alt)) if *am == m => alt,
                    _ => {
                        return Err(Error::System(format!(
                            "QP {q} already failed over to another member than {}:{}; a second failover of one QP is not supported",
                            rail.dev.ibdev, rail.dev.port
                        )));
                    }
                }
            };
            let rail = &self.rails[m];
            let _ = to_state(qp, IBV_QPS_ERR);
            to_state(qp, IBV_QPS_RESET)?;
            to_init(qp, rail.dev, access::DATA_QP)?;
            rail.events.forget_qp(qp.qpn());
        }
        Ok((0..self.qps.len()).map(|q| self.qp(q).qpn()).collect())
    }

    /// Recovery: connects the rebuilt QPs to the peer's rebuilt ones of `epoch`, on the peer's
    /// members as its `Rebuilt` said. A state change that failed is the inner error, with its
    /// errno for the retry policy; the QPs are then back in INIT, ready for another try.
    pub(super) fn reconnect(
        &self,
        peer: &PeerQps,
        epoch: u32,
    ) -> Result<std::result::Result<(), ferro_verbs::Error>> {
        self.remote_down.store(peer.down, Ordering::Relaxed);
        self.connect_to(&peer.qpns, epoch)
    }

    /// Recovery: the receiver's flush QPs of the members that are up, each connected to itself
    /// again (error -> reset -> init -> RTR -> RTS); those of members that are down stay in the
    /// error state (no flush reads go there).
    pub(super) fn rebuild_flush_qps(&self, flush: &[FlushQp]) -> Result<()> {
        for (m, (f, r)) in flush.iter().zip(&self.rails).enumerate() {
            let _ = to_state(&f.qp, IBV_QPS_ERR);
            if self.is_down(m) {
                continue;
            }
            to_state(&f.qp, IBV_QPS_RESET)?;
            to_init(&f.qp, r.dev, access::FLUSH_QP)?;
            self.connect_qp(&f.qp, r.dev, f.qp.qpn(), &dev_meta(r.dev, 0), 0, self.path)?;
            r.events.forget_qp(f.qp.qpn());
        }
        Ok(())
    }

    /// The queues of data QP `q` (for a stand-in made at a failover).
    fn caps(&self, q: usize) -> QpCaps {
        data_qp_caps(self.qps.len(), self.role, q)
    }

    /// Why this endpoint cannot go on, from its member devices' asynchronous events (a port
    /// went down, one of its QPs or CQs failed, a device failed), if it cannot; `read`: the
    /// pending events are read first, else only those recorded already count. A member its QPs
    /// failed over from is not asked (its port is down: that is why they moved).
    pub(super) fn device_verdict(&self, read: bool) -> Option<DeviceFault> {
        self.rails.iter().enumerate().find_map(|(m, r)| {
            if self.is_down(m) {
                return None;
            }
            r.events
                .verdict(
                    read,
                    r.dev.port,
                    |qpn| self.owns_qp(qpn),
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

/// The queues of data QP `q` of a connection of `nqps` QPs on the `role` side
/// ([`plan::queue_depths`]), with the inline room `NCCL_IB_USE_INLINE` asks for.
fn data_qp_caps(nqps: usize, role: Role, q: usize) -> QpCaps {
    let (max_send_wr, max_recv_wr) = queue_caps(plan::queue_depths(nqps), role, q);
    // Bytes a work request may carry inline on these QPs (`NCCL_IB_USE_INLINE=1`: one
    // clear-to-send entry, as NCCL's IB transport asks; else 0). Each QP keeps this and
    // sends a request inline only up to it ([`Qp::post`]), so the flag never outruns what
    // the QPs were created with.
    let max_inline = if crate::plugin::get().is_ok_and(|p| p.config.use_inline) {
        ferro_proto::fifo::ENTRY_SIZE as u32
    } else {
        0
    };
    QpCaps {
        max_send_wr,
        max_recv_wr,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: max_inline,
    }
}

/// `(send, receive)` work requests of data QP `q` on the `role` side: the sending side's send
/// queues hold the writes the send core lets in, its receive queues nothing; the receiving
/// side's receive queues one receive per outstanding group, and only the clear-to-send QP's
/// send queue is used.
fn queue_caps(d: plan::QueueDepths, role: Role, q: usize) -> (u32, u32) {
    match role {
        Role::Sending => (d.send_wr, d.unused_wr),
        Role::Receiving if q == CTS_QP => (d.cts_wr, d.recv_wr),
        Role::Receiving => (d.unused_wr, d.recv_wr),
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
        gid: match (&dev.gid, dev.ib_gid) {
            (Some(g), _) => g.gid.gid,
            (None, Some((_, g))) => g,
            (None, None) => [0; 16],
        },
        gid_index: match (&dev.gid, dev.ib_gid) {
            (Some(g), _) => g.index,
            (None, Some((i, _))) => i,
            (None, None) => 0,
        },
        mr_rkey,
    }
}

impl Drop for Endpoint {
    /// The device events recorded against this endpoint's QPs and CQs are forgotten with them,
    /// so a later comm that gets the same QP number or CQ address starts clean.
    fn drop(&mut self) {
        for (q, qp) in self.qps.iter().enumerate() {
            self.rails[self.base.home_local_dev(q)]
                .events
                .forget_qp(qp.qpn());
        }
        for (m, alt) in self.alternates.iter().filter_map(OnceLock::get) {
            self.rails[*m].events.forget_qp(alt.qpn());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_side_sizes_only_the_queues_it_posts_to() {
        for nqps in [1usize, 2, 4, 128] {
            let d = plan::queue_depths(nqps);
            for q in [0, nqps - 1] {
                assert_eq!(
                    queue_caps(d, Role::Sending, q),
                    (d.send_wr, 1),
                    "the sending side posts writes, never receives"
                );
            }
            assert_eq!(
                queue_caps(d, Role::Receiving, CTS_QP),
                (d.cts_wr, d.recv_wr),
                "the clear-to-send QP's send queue holds the clear-to-send writes"
            );
            if nqps > 1 {
                assert_eq!(
                    queue_caps(d, Role::Receiving, nqps - 1),
                    (1, d.recv_wr),
                    "the receiving side's other QPs send nothing"
                );
            }
            // NCCL's IB transport: 2 x 256 send and 256 receive work requests per QP.
            let (s, r) = queue_caps(d, Role::Receiving, CTS_QP);
            assert!(s <= 512 && r <= 256 && d.send_wr <= 512);
        }
    }
}
