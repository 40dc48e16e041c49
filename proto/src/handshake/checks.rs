//! The pure checks of connection setup: which settings must agree, how many QPs each side
//! builds, whether both sides' devices can share a QP, and whether the accepting side adopted
//! the connecting side's traffic class and service level. Each returns the typed refusal the
//! handshake reports (and, on the accepting side, sends back in a `Reject`).

use super::{HandshakeError, Settings};
use crate::MAX_QPS;
use crate::handle::{self, SECRET_SIZE};
use crate::path::QpPath;
use crate::plan::QpLayout;
use crate::wire::{DevMeta, QpMeta};

/// `link_layer` of [`DevMeta`] for RoCE (Ethernet), as verbs encodes it.
pub const LINK_LAYER_ETHERNET: u8 = 2;
/// `link_layer` of [`DevMeta`] for InfiniBand, as verbs encodes it.
pub const LINK_LAYER_INFINIBAND: u8 = 1;

/// How a link layer is named in messages: RoCE for Ethernet, InfiniBand otherwise.
pub fn link_layer_name(link_layer: u8) -> &'static str {
    if link_layer == LINK_LAYER_ETHERNET {
        "RoCE"
    } else {
        "InfiniBand"
    }
}

/// The connecting side's QPs: `qps_per_conn` for each member of the larger side, refused when
/// that passes [`MAX_QPS`].
pub fn connector_layout(
    local: Settings,
    local_devs: usize,
    remote_devs: usize,
) -> Result<QpLayout, HandshakeError> {
    let layout = QpLayout::new(
        usize::from(local.qps_per_conn),
        local.split,
        local_devs,
        remote_devs,
    );
    if layout.nqps > MAX_QPS {
        return Err(HandshakeError::TooManyQps {
            qps_per_conn: local.qps_per_conn,
            devs: local_devs.max(remote_devs),
            nqps: layout.nqps,
        });
    }
    Ok(layout)
}

/// Whether the connecting side presented this listener's secret (compared in constant time).
pub fn secret(
    presented: &[u8; SECRET_SIZE],
    expected: &[u8; SECRET_SIZE],
    peer: &str,
) -> Result<(), HandshakeError> {
    if handle::secrets_match(presented, expected) {
        Ok(())
    } else {
        Err(HandshakeError::WrongSecret { peer: peer.into() })
    }
}

/// `NCCL_IB_QPS_PER_CONNECTION` and `NCCL_IB_SPLIT_DATA_ON_QPS` must be the same on both sides.
pub fn settings(local: Settings, peer_meta: &QpMeta, peer: &str) -> Result<(), HandshakeError> {
    let remote = Settings {
        qps_per_conn: peer_meta.qps_per_conn,
        split: peer_meta.split,
    };
    if remote == local {
        Ok(())
    } else {
        Err(HandshakeError::SettingsDiffer {
            peer: peer.into(),
            local,
            remote,
        })
    }
}

/// The accepting side's QPs for a connecting side's `Connect` (whose settings agree): the same
/// count the connecting side must have built, or a refusal naming both.
pub fn acceptor_layout(
    local: Settings,
    local_devs: usize,
    peer_meta: &QpMeta,
    peer: &str,
) -> Result<QpLayout, HandshakeError> {
    let layout = QpLayout::new(
        usize::from(local.qps_per_conn),
        local.split,
        local_devs,
        peer_meta.devs.len(),
    );
    if peer_meta.qpns.len() != layout.nqps {
        return Err(HandshakeError::QpCount {
            peer: peer.into(),
            got: peer_meta.qpns.len(),
            peer_devs: peer_meta.devs.len(),
            expected: layout.nqps,
            qps_per_conn: local.qps_per_conn,
            local_devs,
        });
    }
    Ok(layout)
}

/// Every member device of both sides must have one link layer (a QP joins InfiniBand to
/// InfiniBand or RoCE to RoCE). `local_names` names this side's members, in member order.
pub fn link_layers(
    local: &[DevMeta],
    local_names: &[String],
    remote: &[DevMeta],
    peer: &str,
) -> Result<(), HandshakeError> {
    for (i, mine) in local.iter().enumerate() {
        if let Some(theirs) = remote.iter().find(|d| d.link_layer != mine.link_layer) {
            return Err(HandshakeError::LinkLayers {
                local_dev: local_names
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| format!("member {i}")),
                local_port: mine.port,
                local: mine.link_layer,
                peer: peer.into(),
                peer_port: theirs.port,
                remote: theirs.link_layer,
            });
        }
    }
    Ok(())
}

/// Connecting side: the `Accept` must echo the traffic class and service level this side sent
/// in `Connect` (the accepting side builds its QPs with them).
pub fn path_echoed(sent: QpPath, accept: &QpMeta, peer: &str) -> Result<(), HandshakeError> {
    if accept.path == sent {
        Ok(())
    } else {
        Err(HandshakeError::PathNotEchoed {
            peer: peer.into(),
            sent,
            echoed: accept.path,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(link_layer: u8, port: u8) -> DevMeta {
        DevMeta {
            link_layer,
            port,
            lid: 0,
            mtu: 1024,
            gid: [0; 16],
            gid_index: 0,
            mr_rkey: 0,
        }
    }

    fn meta(qps_per_conn: u16, split: bool, devs: usize, nqps: usize) -> QpMeta {
        QpMeta {
            qps_per_conn,
            split,
            path: QpPath::default(),
            devs: vec![dev(LINK_LAYER_ETHERNET, 1); devs],
            mr_addr: 0,
            qpns: (0..nqps as u32).collect(),
            eces: Vec::new(),
            secret: [0; SECRET_SIZE],
        }
    }

    const ONE: Settings = Settings {
        qps_per_conn: 1,
        split: false,
    };

    #[test]
    fn the_connector_builds_qps_per_connection_times_the_larger_side() {
        let s = Settings {
            qps_per_conn: 2,
            split: true,
        };
        assert_eq!(connector_layout(s, 1, 3), Ok(QpLayout::new(2, true, 1, 3)));
        assert_eq!(connector_layout(s, 1, 3).map(|l| l.nqps), Ok(6));
    }

    #[test]
    fn more_qps_than_a_connection_may_have_are_refused_with_the_product() {
        let s = Settings {
            qps_per_conn: 32,
            split: false,
        };
        assert_eq!(connector_layout(s, 4, 1).map(|l| l.nqps), Ok(128));
        let e = connector_layout(s, 2, 5).unwrap_err();
        assert_eq!(
            e,
            HandshakeError::TooManyQps {
                qps_per_conn: 32,
                devs: 5,
                nqps: 160
            }
        );
        assert_eq!(
            e.to_string(),
            "NCCL_IB_QPS_PER_CONNECTION=32 x 5 devices (the larger side) is 160 QPs, above the 128 a connection may have"
        );
    }

    #[test]
    fn a_wrong_secret_is_refused_and_the_right_one_passes() {
        let s = [3u8; SECRET_SIZE];
        let mut t = s;
        assert_eq!(secret(&t, &s, "p"), Ok(()));
        t[15] ^= 1;
        assert_eq!(
            secret(&t, &s, "p"),
            Err(HandshakeError::WrongSecret { peer: "p".into() })
        );
    }

    #[test]
    fn settings_differ_when_either_the_qp_count_or_the_split_mode_differs() {
        assert_eq!(settings(ONE, &meta(1, false, 1, 1), "p"), Ok(()));
        let e = settings(ONE, &meta(4, false, 1, 4), "10.0.0.2:99").unwrap_err();
        assert_eq!(
            e.to_string(),
            "settings differ between ranks: NCCL_IB_QPS_PER_CONNECTION 1 here vs 4 at 10.0.0.2:99, NCCL_IB_SPLIT_DATA_ON_QPS 0 here vs 0 there"
        );
        assert!(matches!(
            settings(ONE, &meta(1, true, 1, 1), "p"),
            Err(HandshakeError::SettingsDiffer {
                remote: Settings {
                    qps_per_conn: 1,
                    split: true
                },
                ..
            })
        ));
    }

    #[test]
    fn the_acceptor_expects_qps_for_the_larger_side_of_both() {
        let s = Settings {
            qps_per_conn: 2,
            split: false,
        };
        // 2 members here, 1 there: 4 QPs.
        assert_eq!(
            acceptor_layout(s, 2, &meta(2, false, 1, 4), "p"),
            Ok(QpLayout::new(2, false, 2, 1))
        );
        let e = acceptor_layout(s, 2, &meta(2, false, 1, 2), "10.0.0.2:99").unwrap_err();
        assert_eq!(
            e.to_string(),
            "10.0.0.2:99 sent 2 QPs for its 1 devices; 4 expected for 2 x max(1, 2 devices here)"
        );
    }

    #[test]
    fn link_layers_must_be_the_same_on_every_member_of_both_sides() {
        let roce = [dev(LINK_LAYER_ETHERNET, 1), dev(LINK_LAYER_ETHERNET, 2)];
        let names = ["rxe0".to_string(), "rxe1".to_string()];
        assert_eq!(link_layers(&roce, &names, &roce, "p"), Ok(()));
        let mixed = [dev(LINK_LAYER_ETHERNET, 1), dev(LINK_LAYER_INFINIBAND, 7)];
        let e = link_layers(&roce, &names, &mixed, "10.0.0.2:99").unwrap_err();
        assert_eq!(
            e.to_string(),
            "rxe0:1 is RoCE but a device of 10.0.0.2:99 (port 7) is InfiniBand: the link layers of both sides must match"
        );
        let ib = [dev(LINK_LAYER_INFINIBAND, 1)];
        assert!(matches!(
            link_layers(&ib, &names[..1], &roce[..1], "p"),
            Err(HandshakeError::LinkLayers {
                local: LINK_LAYER_INFINIBAND,
                remote: LINK_LAYER_ETHERNET,
                ..
            })
        ));
    }
}
