//! A connecting and an accepting handshake machine wired together through a fake wire: two byte
//! queues, with every write and every read cut at random points and the sides taking turns in
//! a random order. A fake transport answers the machines' events as the plugin's does (it
//! "creates" QPs for the layout the acceptor computed and "connects" them at once).
//!
//! With matching settings both sides must connect, each holding the other's metadata, for
//! every member count from 1 to 3 per side, split or not. With a mismatch (settings, the QP
//! count, link layers), the acceptor must fail with the typed refusal and the connector with
//! `PeerRejected` carrying the same text.

// The fake wire is test code: a broken invariant is a test failure, so it panics.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use ferro_proto::handle::SECRET_SIZE;
use ferro_proto::handshake::checks::{self, LINK_LAYER_ETHERNET, LINK_LAYER_INFINIBAND};
use ferro_proto::handshake::{Event, Handshake, HandshakeError, LocalSide, Settings, Stage};
use ferro_proto::plan::QpLayout;
use ferro_proto::wire::{DevMeta, QpMeta};
use proptest::prelude::*;
use std::collections::VecDeque;
use std::time::Duration;

const SECRET: [u8; SECRET_SIZE] = [0xc3; SECRET_SIZE];
const NOW: Duration = Duration::from_secs(7);

/// A side's description: `devs` members on `link_layer`, `nqps` QPs numbered from `base`.
fn side(settings: Settings, link_layer: u8, devs: usize, nqps: usize, base: u32) -> LocalSide {
    LocalSide {
        meta: QpMeta {
            qps_per_conn: settings.qps_per_conn,
            split: settings.split,
            path: ferro_proto::path::QpPath { tc: 106, sl: 5 },
            devs: (0..devs)
                .map(|i| DevMeta {
                    link_layer,
                    port: 1 + i as u8,
                    lid: base as u16 + i as u16,
                    mtu: 4096,
                    gid: [base as u8 + i as u8; 16],
                    gid_index: 3,
                    mr_rkey: base + 50 + i as u32,
                })
                .collect(),
            mr_addr: u64::from(base) << 20,
            qpns: (0..nqps as u32).map(|q| base + q).collect(),
            eces: Vec::new(),
            secret: [0; SECRET_SIZE],
        },
        names: (0..devs).map(|i| format!("dev{base}_{i}")).collect(),
    }
}

/// One end of the fake wire, with what its fake transport saw.
struct End {
    hs: Handshake,
    /// Bytes on their way to this end.
    inbound: VecDeque<u8>,
    /// Accepting side: what it answers [`Event::NeedLocalMeta`] with.
    local: Option<LocalSide>,
    /// The layout the acceptor asked its QPs for.
    layout: Option<QpLayout>,
    /// The peer metadata this end's QPs were connected to.
    connected_to: Option<QpMeta>,
    connected: bool,
    failed: Option<HandshakeError>,
}

impl End {
    fn new(hs: Handshake, local: Option<LocalSide>) -> End {
        End {
            hs,
            inbound: VecDeque::new(),
            local,
            layout: None,
            connected_to: None,
            connected: false,
            failed: None,
        }
    }

    /// Writes at most `cut` bytes to `peer`, reads at most `cut` bytes, answers events.
    fn turn(&mut self, peer: &mut VecDeque<u8>, cut: usize) {
        if let Some(bytes) = self.hs.poll_transmit() {
            let n = bytes.len().min(cut);
            peer.extend(&bytes[..n]);
            self.hs.advance(n, NOW);
        }
        let n = self.hs.wanted().min(cut).min(self.inbound.len());
        if n > 0 {
            let bytes: Vec<u8> = self.inbound.drain(..n).collect();
            self.hs.handle_bytes(&bytes, NOW);
        }
        while let Some(ev) = self.hs.poll_event() {
            match ev {
                Event::NeedLocalMeta { peer, layout } => {
                    assert_eq!(peer.secret, SECRET, "the acceptor gets the secret");
                    self.layout = Some(layout);
                    self.hs.local_meta(self.local.clone().expect("acceptor"));
                }
                Event::PeerMeta(meta) => {
                    assert!(self.connected_to.is_none(), "QPs connected twice");
                    self.connected_to = Some(meta);
                    self.hs.qps_connected();
                }
                Event::Connected => {
                    assert!(self.connected_to.is_some(), "connected before the QPs");
                    self.connected = true;
                }
                Event::Failed(e) => self.failed = Some(e),
            }
        }
    }
}

/// Runs both machines to the end through the fake wire, cutting reads and writes at the
/// points in `cuts` (cycled) and letting the side `order` picks go next (cycled, inverted
/// every other round).
fn run(c: &mut End, a: &mut End, cuts: &[usize], order: &[bool]) {
    c.hs.tcp_connected(NOW);
    for step in 0..100_000 {
        // Once both are over, what is left on the wire is for nobody.
        if c.hs.is_finished() && a.hs.is_finished() {
            return;
        }
        let cut = cuts[step % cuts.len()];
        // The pattern is inverted every other round, so neither side starves.
        let flip = (step / order.len()) % 2 == 1;
        if order[step % order.len()] != flip {
            c.turn(&mut a.inbound, cut);
        } else {
            a.turn(&mut c.inbound, cut);
        }
    }
    panic!(
        "no end after 100000 turns: connector {:?}, acceptor {:?}",
        c.hs.stage(),
        a.hs.stage()
    );
}

fn settings(qps_per_conn: u16, split: bool) -> Settings {
    Settings {
        qps_per_conn,
        split,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn both_sides_connect_with_each_others_metadata_whatever_the_split_points(
        qpc in 1u16..=3,
        split in any::<bool>(),
        cdevs in 1usize..=3,
        adevs in 1usize..=3,
        cuts in prop::collection::vec(1usize..=40, 1..16),
        order in prop::collection::vec(any::<bool>(), 1..16),
    ) {
        let s = settings(qpc, split);
        let layout = checks::connector_layout(s, cdevs, adevs).unwrap();
        let cside = side(s, LINK_LAYER_ETHERNET, cdevs, layout.nqps, 100);
        let aside = side(s, LINK_LAYER_ETHERNET, adevs, layout.nqps, 200);
        let mut c = End::new(
            Handshake::connector(cside.clone(), SECRET, "acceptor", NOW),
            None,
        );
        let mut a = End::new(
            Handshake::acceptor(SECRET, s, adevs, "connector", NOW),
            Some(aside.clone()),
        );
        run(&mut c, &mut a, &cuts, &order);
        prop_assert_eq!(c.failed.as_ref(), None);
        prop_assert_eq!(a.failed.as_ref(), None);
        prop_assert!(c.connected && a.connected);
        prop_assert_eq!((c.hs.stage(), a.hs.stage()), (Stage::Connected, Stage::Connected));
        let mut sent = cside.meta.clone();
        sent.secret = SECRET;
        prop_assert_eq!(a.connected_to.as_ref(), Some(&sent));
        prop_assert_eq!(c.connected_to.as_ref(), Some(&aside.meta));
        // Both sides build the same layout, mirrored.
        prop_assert_eq!(a.layout, Some(QpLayout::new(usize::from(qpc), split, adevs, cdevs)));
    }

    #[test]
    fn any_mismatch_is_refused_alike_on_both_sides(
        mismatch in 0u8..4,
        qpc in 1u16..=3,
        split in any::<bool>(),
        cdevs in 1usize..=3,
        adevs in 2usize..=3,
        cuts in prop::collection::vec(1usize..=40, 1..16),
        order in prop::collection::vec(any::<bool>(), 1..16),
    ) {
        let s = settings(qpc, split);
        let cdevs = if mismatch == 2 { 1 } else { cdevs };
        // What the connector runs with, and which refusal that must give.
        let (cs, c_remote_devs, a_link) = match mismatch {
            0 => (settings(qpc % 3 + 1, split), adevs, LINK_LAYER_ETHERNET),
            1 => (settings(qpc, !split), adevs, LINK_LAYER_ETHERNET),
            // The connector believes the listener has 1 member: too few QPs.
            2 => (s, 1, LINK_LAYER_ETHERNET),
            _ => (s, adevs, LINK_LAYER_INFINIBAND),
        };
        let clayout = checks::connector_layout(cs, cdevs, c_remote_devs).unwrap();
        let alayout = QpLayout::new(usize::from(qpc), split, adevs, cdevs);
        let cside = side(cs, LINK_LAYER_ETHERNET, cdevs, clayout.nqps, 100);
        let aside = side(s, a_link, adevs, alayout.nqps, 200);
        let mut c = End::new(Handshake::connector(cside, SECRET, "acceptor", NOW), None);
        let mut a = End::new(
            Handshake::acceptor(SECRET, s, adevs, "connector", NOW),
            Some(aside),
        );
        run(&mut c, &mut a, &cuts, &order);
        let refusal = a.failed.clone().expect("the acceptor refuses");
        let kind_ok = match mismatch {
            0 | 1 => matches!(refusal, HandshakeError::SettingsDiffer { .. }),
            2 => matches!(refusal, HandshakeError::QpCount { .. }),
            _ => matches!(refusal, HandshakeError::LinkLayers { .. }),
        };
        prop_assert!(kind_ok, "mismatch {} gave {:?}", mismatch, refusal);
        prop_assert_eq!(
            c.failed,
            Some(HandshakeError::PeerRejected {
                peer: "acceptor".into(),
                reason: refusal.to_string()
            })
        );
        prop_assert!(!c.connected && !a.connected);
        prop_assert!(c.connected_to.is_none(), "the connector never connects its QPs");
    }
}
