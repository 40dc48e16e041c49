//! How an endpoint's QPs are brought to INIT, RTR and RTS against the peer's: the handshake's
//! connect, one state change at a time (so that a failed change can be retried at a later call,
//! `ferro_proto::qp_retry`), the reconnects of a recovery in place, and the address of the
//! peer (a RoCE GRH; on InfiniBand by LID, or by FLID through a router, `ferro_proto::route`).

use super::Endpoint;
use crate::error::{Error, Result};
use crate::plugin::{self, NetDevice};
use ferro_proto::path::QpPath;
use ferro_proto::qp_retry::Transition;
use ferro_proto::route;
use ferro_proto::wire::{DevMeta, QpMeta};
use ferro_verbs::Qp;
use ferro_verbs::sys::*;

impl Endpoint {
    /// Before the handshake connects the QPs: checks the peer's QP and device counts against
    /// this side's and keeps the peer's devices (for the connect changes and later reconnects).
    pub(in crate::transport) fn begin_connect(&self, peer: &QpMeta) -> Result<()> {
        if peer.qpns.len() != self.qps.len() || peer.devs.len() != self.base.remote_devs {
            return Err(Error::Remote(format!(
                "peer has {} QPs over {} devices, this side expects {} over {}",
                peer.qpns.len(),
                peer.devs.len(),
                self.qps.len(),
                self.base.remote_devs
            )));
        }
        let _ = self.peer_devs.set(peer.devs.clone());
        Ok(())
    }

    /// One state change of the handshake's connect: data QP `q` to `to` (RTR against the peer's
    /// QP `q` on the peer's member device `q % peer.devs.len()`, or RTS). The outer error is
    /// one no retry can mend; the inner one is `ibv_modify_qp`'s, with its errno, for the
    /// retry policy to judge.
    pub(in crate::transport) fn connect_change(
        &self,
        peer: &QpMeta,
        q: usize,
        to: Transition,
    ) -> Result<std::result::Result<(), ferro_verbs::Error>> {
        let devs = self
            .peer_devs
            .get()
            .ok_or_else(|| Error::Internal("a connect change before begin_connect".into()))?;
        #[cfg(feature = "test-faults")]
        if let Some(e) = crate::transport::faults::connect_change_failure(self.qp(q), to) {
            return Ok(Err(e));
        }
        match to {
            Transition::Rtr => {
                let lay = self.layout();
                self.qp_to_rtr(
                    self.qp(q),
                    self.rail_of(q).dev,
                    peer.qpns[q],
                    &devs[lay.remote_dev(q)],
                    0,
                    self.data_qp_path(q),
                )
            }
            Transition::Rts => qp_to_rts(self.qp(q), 0),
        }
    }

    /// The label of the device and port data QP `q` runs on, and its number (for messages).
    pub(in crate::transport) fn describe_qp(&self, q: usize) -> String {
        let dev = self.rail_of(q).dev;
        format!(
            "{}:{} QP {} (qpn {})",
            dev.ibdev,
            dev.port,
            q,
            self.qp(q).qpn()
        )
    }

    /// INIT -> RTR -> RTS of every data QP against the peer's QPs `qpns` (handshake order) on
    /// the peer's devices the handshake named, starting at the packet numbers of `epoch`. The
    /// outer error is one no retry can mend; the inner one is the first failed
    /// `ibv_modify_qp`, with its errno, after which every data QP was put back to INIT (the
    /// same QPs can be connected again).
    pub(super) fn connect_to(
        &self,
        qpns: &[u32],
        epoch: u32,
    ) -> Result<std::result::Result<(), ferro_verbs::Error>> {
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
        let lay = self.layout();
        for (q, &remote_qpn) in qpns.iter().enumerate() {
            let remote = &devs[lay.remote_dev(q)];
            let path = self.data_qp_path(q);
            let qp = self.qp(q);
            #[cfg(feature = "test-faults")]
            let injected = crate::transport::faults::connect_change_failure(qp, Transition::Rtr);
            #[cfg(not(feature = "test-faults"))]
            let injected = None;
            let changed = match injected {
                Some(e) => Err(e),
                None => {
                    self.try_connect_qp(qp, self.rail_of(q).dev, remote_qpn, remote, epoch, path)?
                }
            };
            if let Err(e) = changed {
                self.back_to_init()?;
                return Ok(Err(e.context(self.describe_qp(q))));
            }
        }
        Ok(Ok(()))
    }

    /// Every data QP back to INIT (through RESET), keeping its number: after a failed connect.
    fn back_to_init(&self) -> Result<()> {
        for q in 0..self.qps.len() {
            let qp = self.qp(q);
            to_state(qp, IBV_QPS_RESET)?;
            to_init(qp, self.rail_of(q).dev, super::access::DATA_QP)?;
        }
        Ok(())
    }

    /// One QP on `dev`: INIT -> RTR -> RTS against `remote_qpn` on the peer device `peer`,
    /// with the packet numbers of recovery epoch `epoch`, its traffic class (RoCE) and service
    /// level from `path`.
    pub(super) fn connect_qp(
        &self,
        qp: &Qp,
        dev: &NetDevice,
        remote_qpn: u32,
        peer: &DevMeta,
        epoch: u32,
        path: QpPath,
    ) -> Result<()> {
        Ok(self.try_connect_qp(qp, dev, remote_qpn, peer, epoch, path)??)
    }

    /// [`Self::connect_qp`] with a failed `ibv_modify_qp` handed back apart (the inner error,
    /// with its errno); the QP is then left in the state before the change that failed.
    fn try_connect_qp(
        &self,
        qp: &Qp,
        dev: &NetDevice,
        remote_qpn: u32,
        peer: &DevMeta,
        epoch: u32,
        path: QpPath,
    ) -> Result<std::result::Result<(), ferro_verbs::Error>> {
        match self.qp_to_rtr(qp, dev, remote_qpn, peer, epoch, path)? {
            Ok(()) => qp_to_rts(qp, epoch),
            Err(e) => Ok(Err(e)),
        }
    }

    /// INIT -> RTR against `remote_qpn` on the peer device `peer` (as [`Self::connect_qp`]); the
    /// inner error is `ibv_modify_qp`'s.
    fn qp_to_rtr(
        &self,
        qp: &Qp,
        dev: &NetDevice,
        remote_qpn: u32,
        peer: &DevMeta,
        epoch: u32,
        path: QpPath,
    ) -> Result<std::result::Result<(), ferro_verbs::Error>> {
        let mut ah = ibv_ah_attr {
            dlid: peer.lid,
            sl: path.sl,
            port_num: dev.port,
            ..Default::default()
        };
        // RoCE: always a GRH to the peer's GID. InfiniBand: by LID within the subnet, through
        // the router by the peer's FLID with a GRH beyond it (or where the port requires one).
        let global = match (&dev.gid, dev.ib_gid) {
            (Some(g), _) => Some((g.index, peer.gid)),
            (None, Some((index, local))) => {
                let r = route::ib_route(&local, &peer.gid, peer.lid, dev.grh_required);
                if r.flid_missing {
                    flid_missing_once(&dev.ibdev, dev.port);
                }
                ah.dlid = r.dlid;
                r.dgid.map(|dgid| (index, dgid))
            }
            (None, None) => None,
        };
        if let Some((index, dgid)) = global {
            ah.is_global = 1;
            ah.grh = ibv_global_route {
                dgid: ibv_gid { raw: dgid },
                flow_label: 0,
                sgid_index: u8::try_from(index)
                    .map_err(|_| Error::Usage(format!("GID index {index} exceeds 255")))?,
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
        Ok(qp.modify(
            &mut a,
            IBV_QP_STATE
                | IBV_QP_AV
                | IBV_QP_PATH_MTU
                | IBV_QP_DEST_QPN
                | IBV_QP_RQ_PSN
                | IBV_QP_MAX_DEST_RD_ATOMIC
                | IBV_QP_MIN_RNR_TIMER,
        ))
    }
}

/// A peer on another InfiniBand subnet whose GID has no FLID: said once per process.
fn flid_missing_once(dev: &str, port: u8) {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        crate::warn!(
            ferro_ffi::log_flags::NET,
            "{dev}:{port}: a peer is on another InfiniBand subnet but its GID has no FLID; addressing it by its LID, which only a router forwarding by LID delivers (NCCL_IB_ROUTABLE_FLID_GID_INDEX names the GID index with a routable FLID)"
        );
    });
}

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

/// The packet sequence number both sides start their rebuilt QPs at in recovery epoch `epoch`
/// (0 in epoch 0, as the handshake's): a packet of an earlier epoch still on the wire falls
/// outside the new window and is dropped by the receiving QP.
pub(super) fn start_psn(epoch: u32) -> u32 {
    (epoch << 16) & 0xFF_FFFF
}

/// RESET -> INIT on the device's port with the plugin's P_Key index.
pub(super) fn to_init(qp: &Qp, dev: &NetDevice, access: u32) -> Result<()> {
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

/// RTR -> RTS with the plugin's timeout and retry count, at the packet numbers of recovery
/// epoch `epoch`; the inner error is `ibv_modify_qp`'s.
pub(super) fn qp_to_rts(
    qp: &Qp,
    epoch: u32,
) -> Result<std::result::Result<(), ferro_verbs::Error>> {
    let cfg = &plugin::get()?.config;
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_RTS,
        timeout: cfg.timeout,
        retry_cnt: cfg.retry_cnt,
        rnr_retry: 7,
        sq_psn: start_psn(epoch),
        max_rd_atomic: 1,
        ..Default::default()
    };
    Ok(qp.modify(
        &mut a,
        IBV_QP_STATE
            | IBV_QP_TIMEOUT
            | IBV_QP_RETRY_CNT
            | IBV_QP_RNR_RETRY
            | IBV_QP_SQ_PSN
            | IBV_QP_MAX_QP_RD_ATOMIC,
    ))
}

/// A QP to `state` (error or reset), nothing else changed.
pub(super) fn to_state(qp: &Qp, state: u32) -> Result<()> {
    let mut a = ibv_qp_attr {
        qp_state: state,
        ..Default::default()
    };
    qp.modify(&mut a, IBV_QP_STATE)?;
    Ok(())
}
