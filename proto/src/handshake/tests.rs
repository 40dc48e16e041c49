//! Unit tests of the handshake machine: every refusal, every ordering of bytes, and the
//! time-out at every stage. The two-sided test with random split points is
//! `proto/tests/host_handshake_two_sided.rs`.

use super::checks::{LINK_LAYER_ETHERNET, LINK_LAYER_INFINIBAND};
use super::*;
use crate::WIRE_VERSION;
use crate::path::QpPath;
use crate::wire::{DevMeta, HEADER, WireError};

const SECRET: [u8; SECRET_SIZE] = [0x5a; SECRET_SIZE];
const ONE: Settings = Settings {
    qps_per_conn: 1,
    split: false,
};
const T0: Duration = Duration::from_secs(1000);
const CONNECTOR: &str = "10.0.0.1:40000";
const ACCEPTOR: &str = "10.0.0.2:50000";

fn dev(link_layer: u8, i: usize) -> DevMeta {
    DevMeta {
        link_layer,
        port: 1,
        lid: i as u16,
        mtu: 1024,
        gid: [i as u8; 16],
        gid_index: 1,
        mr_rkey: 100 + i as u32,
    }
}

/// A side of `devs` members on `link_layer` with `nqps` QPs numbered from `first_qpn`.
fn side(settings: Settings, link_layer: u8, devs: usize, nqps: usize, first_qpn: u32) -> LocalSide {
    LocalSide {
        meta: QpMeta {
            qps_per_conn: settings.qps_per_conn,
            split: settings.split,
            path: QpPath { tc: 32, sl: 3 },
            devs: (0..devs).map(|i| dev(link_layer, i)).collect(),
            mr_addr: 0x1000 * u64::from(first_qpn),
            qpns: (0..nqps as u32).map(|q| first_qpn + q).collect(),
            eces: Vec::new(),
            secret: [0; SECRET_SIZE],
        },
        names: (0..devs).map(|i| format!("rxe{i}")).collect(),
    }
}

fn connector_side() -> LocalSide {
    side(ONE, LINK_LAYER_ETHERNET, 1, 1, 10)
}

fn acceptor_side() -> LocalSide {
    side(ONE, LINK_LAYER_ETHERNET, 1, 1, 20)
}

fn connector_with(local: LocalSide, secret: [u8; SECRET_SIZE]) -> Handshake {
    let mut c = Handshake::connector(local, secret, ACCEPTOR, T0);
    c.tcp_connected(T0);
    c
}

fn connector() -> Handshake {
    connector_with(connector_side(), SECRET)
}

fn acceptor() -> Handshake {
    Handshake::acceptor(SECRET, ONE, 1, CONNECTOR, T0)
}

/// Everything `h` wants written, marked written.
fn take_out(h: &mut Handshake) -> Vec<u8> {
    let out = h.poll_transmit().map(<[u8]>::to_vec).unwrap_or_default();
    h.advance(out.len(), T0);
    out
}

fn events(h: &mut Handshake) -> Vec<Event> {
    std::iter::from_fn(|| h.poll_event()).collect()
}

fn failure(h: &mut Handshake) -> HandshakeError {
    let evs = events(h);
    assert_eq!(h.stage(), Stage::Failed, "events: {evs:?}");
    match evs.last() {
        Some(Event::Failed(e)) => {
            assert_eq!(h.failure(), Some(e));
            e.clone()
        }
        other => panic!("expected a failure, got {other:?}"),
    }
}

/// What a transport does on an event: create or connect the QPs. `true` on `Connected`.
fn act(h: &mut Handshake, local: &LocalSide) -> bool {
    let mut connected = false;
    for ev in events(h) {
        match ev {
            Event::NeedLocalMeta { .. } => h.local_meta(local.clone()),
            Event::PeerMeta(_) => h.qps_connected(),
            Event::Connected => connected = true,
            Event::Failed(e) => panic!("unexpected failure: {e}"),
        }
    }
    // `local_meta` may have queued the next event.
    for ev in events(h) {
        match ev {
            Event::PeerMeta(_) => h.qps_connected(),
            Event::Connected => connected = true,
            other => panic!("unexpected {other:?}"),
        }
    }
    connected
}

/// The acceptor past `Connect`: its `Accept` written, waiting for `Ready`.
fn acceptor_awaiting_ready() -> Handshake {
    let mut a = acceptor();
    let mut c = connector();
    a.handle_bytes(&take_out(&mut c), T0);
    assert!(!act(&mut a, &acceptor_side()));
    take_out(&mut a);
    assert_eq!(a.stage(), Stage::AwaitReady);
    a
}

/// Feeds `bytes` one at a time.
fn feed_bytewise(h: &mut Handshake, bytes: &[u8]) {
    for b in bytes {
        h.handle_bytes(std::slice::from_ref(b), T0);
    }
}

#[test]
fn both_sides_connect_with_each_others_metadata_even_one_byte_at_a_time() {
    let (cs, as_) = (connector_side(), acceptor_side());
    let mut c = connector_with(cs.clone(), SECRET);
    let mut a = acceptor();
    assert_eq!(a.wanted(), HEADER);
    feed_bytewise(&mut a, &take_out(&mut c));
    assert_eq!(c.stage(), Stage::AwaitAccept);
    let mut seen_by_acceptor = None;
    for ev in events(&mut a) {
        if let Event::NeedLocalMeta { peer, layout } = ev {
            assert_eq!(layout, QpLayout::new(1, false, 1, 1));
            seen_by_acceptor = Some(peer);
            a.local_meta(as_.clone());
        }
    }
    let mut sent = cs.meta.clone();
    sent.secret = SECRET;
    assert_eq!(seen_by_acceptor, Some(sent.clone()));
    assert_eq!(events(&mut a), vec![Event::PeerMeta(sent)]);
    // Accept waits until the acceptor's QPs are connected.
    assert_eq!(a.poll_transmit(), None);
    a.qps_connected();
    feed_bytewise(&mut c, &take_out(&mut a));
    assert_eq!(events(&mut c), vec![Event::PeerMeta(as_.meta.clone())]);
    assert_eq!(c.poll_transmit(), None, "Ready waits for the QPs");
    c.qps_connected();
    feed_bytewise(&mut a, &take_out(&mut c));
    assert_eq!(events(&mut c), vec![Event::Connected]);
    assert_eq!(events(&mut a), vec![Event::Connected]);
    assert_eq!((c.stage(), a.stage()), (Stage::Connected, Stage::Connected));
}

#[test]
fn a_wrong_secret_is_refused_without_an_answer() {
    let mut wrong = SECRET;
    wrong[0] ^= 0xff;
    let mut c = connector_with(connector_side(), wrong);
    let mut a = acceptor();
    a.handle_bytes(&take_out(&mut c), T0);
    let e = failure(&mut a);
    assert_eq!(
        e,
        HandshakeError::WrongSecret {
            peer: CONNECTOR.into()
        }
    );
    assert!(e.to_string().contains("wrong listen secret"));
    assert_eq!(a.poll_transmit(), None, "a stray client gets no Reject");
}

/// The acceptor refuses `local`'s `Connect` and sends the refusal back: the connector reports
/// it as `PeerRejected` with the same text.
fn refused(
    connector_side: LocalSide,
    acceptor_settings: Settings,
    local_devs: usize,
) -> HandshakeError {
    let mut c = connector_with(connector_side, SECRET);
    let mut a = Handshake::acceptor(SECRET, acceptor_settings, local_devs, CONNECTOR, T0);
    a.handle_bytes(&take_out(&mut c), T0);
    let e = failure(&mut a);
    let reject = take_out(&mut a);
    assert!(!reject.is_empty(), "{e}: a Reject is sent");
    c.handle_bytes(&reject, T0);
    assert_eq!(
        failure(&mut c),
        HandshakeError::PeerRejected {
            peer: ACCEPTOR.into(),
            reason: e.to_string()
        }
    );
    e
}

#[test]
fn different_settings_are_refused_and_the_refusal_reaches_the_connector() {
    let four = Settings {
        qps_per_conn: 4,
        split: false,
    };
    let e = refused(side(four, LINK_LAYER_ETHERNET, 1, 4, 10), ONE, 1);
    assert!(matches!(e, HandshakeError::SettingsDiffer { .. }));
    assert!(
        e.to_string()
            .contains("NCCL_IB_QPS_PER_CONNECTION 1 here vs 4 at 10.0.0.1:40000")
    );
    let split = Settings {
        qps_per_conn: 1,
        split: true,
    };
    let e = refused(side(split, LINK_LAYER_ETHERNET, 1, 1, 10), ONE, 1);
    assert!(e.to_string().starts_with("settings differ between ranks"));
}

#[test]
fn a_qp_count_that_does_not_fit_both_member_counts_is_refused() {
    // The connector built 1 QP for 1 member a side; the listener has 2 members.
    let e = refused(connector_side(), ONE, 2);
    assert_eq!(
        e,
        HandshakeError::QpCount {
            peer: CONNECTOR.into(),
            got: 1,
            peer_devs: 1,
            expected: 2,
            qps_per_conn: 1,
            local_devs: 2
        }
    );
}

#[test]
fn different_link_layers_are_refused_by_the_acceptor_with_a_reject() {
    let mut c = connector();
    let mut a = acceptor();
    a.handle_bytes(&take_out(&mut c), T0);
    assert!(matches!(
        events(&mut a).as_slice(),
        [Event::NeedLocalMeta { .. }]
    ));
    a.local_meta(side(ONE, LINK_LAYER_INFINIBAND, 1, 1, 20));
    let e = failure(&mut a);
    assert!(matches!(
        e,
        HandshakeError::LinkLayers {
            local: LINK_LAYER_INFINIBAND,
            remote: LINK_LAYER_ETHERNET,
            ..
        }
    ));
    assert!(
        e.to_string()
            .contains("the link layers of both sides must match")
    );
    c.handle_bytes(&take_out(&mut a), T0);
    assert!(matches!(
        failure(&mut c),
        HandshakeError::PeerRejected { reason, .. } if reason == e.to_string()
    ));
}

#[test]
fn the_connector_refuses_an_accept_from_another_link_layer_without_connecting() {
    let mut c = connector();
    take_out(&mut c);
    let ib = side(ONE, LINK_LAYER_INFINIBAND, 1, 1, 20);
    c.handle_bytes(&wire::encode(&Msg::Accept(ib.meta)), T0);
    let e = failure(&mut c);
    assert_eq!(
        e.to_string(),
        "rxe0:1 is RoCE but a device of 10.0.0.2:50000 (port 1) is InfiniBand: the link layers of both sides must match"
    );
    assert_eq!(c.poll_transmit(), None);
}

#[test]
fn the_connector_refuses_an_accept_that_does_not_echo_its_traffic_class_and_service_level() {
    for echoed in [QpPath { tc: 0, sl: 3 }, QpPath { tc: 32, sl: 0 }] {
        let mut c = connector();
        take_out(&mut c);
        let mut a = acceptor_side();
        a.meta.path = echoed;
        c.handle_bytes(&wire::encode(&Msg::Accept(a.meta)), T0);
        let e = failure(&mut c);
        assert_eq!(
            e,
            HandshakeError::PathNotEchoed {
                peer: ACCEPTOR.into(),
                sent: QpPath { tc: 32, sl: 3 },
                echoed
            }
        );
        assert_eq!(
            c.poll_transmit(),
            None,
            "refused without connecting or answering"
        );
    }
    let mut c = connector();
    take_out(&mut c);
    c.handle_bytes(&wire::encode(&Msg::Accept(acceptor_side().meta)), T0);
    assert_eq!(
        events(&mut c),
        vec![Event::PeerMeta(acceptor_side().meta)],
        "the same values are accepted"
    );
}

#[test]
fn too_many_qps_are_refused_before_anything_is_created() {
    let s = Settings {
        qps_per_conn: 64,
        split: false,
    };
    assert!(matches!(
        checks::connector_layout(s, 1, 3),
        Err(HandshakeError::TooManyQps { nqps: 192, .. })
    ));
}

#[test]
fn a_reject_instead_of_accept_fails_the_connector_with_the_reason() {
    let mut c = connector();
    take_out(&mut c);
    c.handle_bytes(&wire::encode(&Msg::Reject("no thanks".into())), T0);
    let e = failure(&mut c);
    assert_eq!(
        e.to_string(),
        "peer 10.0.0.2:50000 refused the connection: no thanks"
    );
}

#[test]
fn a_message_of_the_wrong_kind_for_the_stage_is_unexpected() {
    let mut a = acceptor();
    a.handle_bytes(&wire::encode(&Msg::Ready), T0);
    assert_eq!(
        failure(&mut a),
        HandshakeError::Unexpected {
            peer: CONNECTOR.into(),
            msg: Box::new(Msg::Ready)
        }
    );
    let mut c = connector();
    take_out(&mut c);
    c.handle_bytes(&wire::encode(&Msg::Connect(acceptor_side().meta)), T0);
    let e = failure(&mut c);
    assert!(matches!(e, HandshakeError::Unexpected { .. }));
    assert!(
        e.to_string()
            .starts_with("unexpected handshake message from 10.0.0.2:50000")
    );
    // A second Connect where Ready belongs.
    let mut a = acceptor_awaiting_ready();
    a.handle_bytes(&take_out(&mut connector()), T0);
    assert!(matches!(failure(&mut a), HandshakeError::Unexpected { .. }));
}

#[test]
fn garbage_magic_is_refused_after_the_header() {
    let mut a = acceptor();
    a.handle_bytes(&[0x41; HEADER - 1], T0);
    assert_eq!(a.stage(), Stage::AwaitConnect);
    a.handle_bytes(&[0x41], T0);
    let e = failure(&mut a);
    assert!(matches!(
        e,
        HandshakeError::Wire {
            error: WireError::BadMagic(_),
            ..
        }
    ));
    assert!(
        e.to_string()
            .starts_with("from 10.0.0.1:40000: peer sent bytes that are not")
    );
    assert_eq!(a.wanted(), 0, "a failed handshake reads nothing more");
}

#[test]
fn a_wrong_wire_version_is_refused_naming_both_versions() {
    let mut b = take_out(&mut connector());
    b[8..10].copy_from_slice(&(WIRE_VERSION + 1).to_le_bytes());
    let mut a = acceptor();
    a.handle_bytes(&b, T0);
    assert_eq!(
        failure(&mut a),
        HandshakeError::Wire {
            peer: CONNECTOR.into(),
            error: WireError::Version {
                got: WIRE_VERSION + 1,
                want: WIRE_VERSION
            }
        }
    );
}

#[test]
fn a_peer_that_closes_midway_fails_the_handshake() {
    let mut c = connector();
    take_out(&mut c);
    c.peer_closed();
    let e = failure(&mut c);
    assert_eq!(
        e.to_string(),
        "peer 10.0.0.2:50000 closed the connection during the handshake"
    );
    // After the end, a close changes nothing.
    let mut a = acceptor_awaiting_ready();
    a.handle_bytes(&wire::encode(&Msg::Ready), T0);
    assert_eq!(events(&mut a), vec![Event::Connected]);
    a.peer_closed();
    assert_eq!((a.stage(), a.poll_event()), (Stage::Connected, None));
}

#[test]
fn several_messages_in_one_read_are_taken_in_turn() {
    // Connect and Ready in one read: Ready waits until Accept is written, then connects.
    let mut c = connector();
    let mut bytes = take_out(&mut c);
    bytes.extend(wire::encode(&Msg::Ready));
    let mut a = acceptor();
    a.handle_bytes(&bytes, T0);
    assert_eq!(a.stage(), Stage::LocalMeta);
    assert_eq!(a.wanted(), 0, "nothing more is read while the QPs are made");
    assert!(!act(&mut a, &acceptor_side()));
    assert_eq!(a.stage(), Stage::SendAccept);
    take_out(&mut a);
    assert_eq!(events(&mut a), vec![Event::Connected]);
}

#[test]
fn a_ready_that_arrives_before_accept_is_sent_waits_for_it() {
    let mut c = connector();
    let mut a = acceptor();
    a.handle_bytes(&take_out(&mut c), T0);
    assert!(!act(&mut a, &acceptor_side()));
    let accept = a.poll_transmit().unwrap().to_vec();
    a.advance(accept.len() - 1, T0);
    a.handle_bytes(&wire::encode(&Msg::Ready), T0);
    assert_eq!((a.stage(), a.poll_event()), (Stage::SendAccept, None));
    a.advance(1, T0);
    assert_eq!(events(&mut a), vec![Event::Connected]);
}

#[test]
fn a_message_after_the_end_is_left_alone() {
    let mut a = acceptor_awaiting_ready();
    let mut bytes = wire::encode(&Msg::Ready);
    bytes.extend(wire::encode(&Msg::Ready));
    a.handle_bytes(&bytes, T0);
    assert_eq!(events(&mut a), vec![Event::Connected]);
    a.handle_bytes(&wire::encode(&Msg::Reject("late".into())), T0);
    assert_eq!((a.stage(), a.poll_event()), (Stage::Connected, None));
    assert_eq!(a.wanted(), 0);
    // The connector never reads after Accept: a late message there is not taken either.
    let mut c = connector();
    take_out(&mut c);
    let mut bytes = wire::encode(&Msg::Accept(acceptor_side().meta));
    bytes.extend(wire::encode(&Msg::Reject("late".into())));
    c.handle_bytes(&bytes, T0);
    assert!(matches!(events(&mut c).as_slice(), [Event::PeerMeta(_)]));
    c.qps_connected();
    take_out(&mut c);
    assert_eq!(events(&mut c), vec![Event::Connected]);
}

#[test]
fn calls_out_of_order_fail_the_handshake_as_a_bug() {
    let mut a = acceptor();
    a.qps_connected();
    assert_eq!(
        failure(&mut a),
        HandshakeError::OutOfOrder {
            call: "qps_connected",
            stage: Stage::AwaitConnect
        }
    );
    let mut c = connector();
    c.local_meta(connector_side());
    assert!(matches!(failure(&mut c), HandshakeError::OutOfOrder { .. }));
    let mut c = connector();
    c.tcp_connected(T0);
    assert!(matches!(failure(&mut c), HandshakeError::OutOfOrder { .. }));
}

/// A handshake brought to `stage` at time `T0` (the last byte moved then).
fn at_stage(stage: Stage) -> Handshake {
    match stage {
        Stage::TcpConnect => Handshake::connector(connector_side(), SECRET, ACCEPTOR, T0),
        Stage::SendConnect => connector(),
        Stage::AwaitAccept => {
            let mut c = connector();
            take_out(&mut c);
            c
        }
        Stage::SendReady => {
            let mut c = at_stage(Stage::AwaitAccept);
            c.handle_bytes(&wire::encode(&Msg::Accept(acceptor_side().meta)), T0);
            events(&mut c);
            c.qps_connected();
            c
        }
        Stage::AwaitConnect => acceptor(),
        Stage::SendAccept => {
            let mut a = acceptor();
            a.handle_bytes(&take_out(&mut connector()), T0);
            act(&mut a, &acceptor_side());
            a
        }
        Stage::AwaitReady => acceptor_awaiting_ready(),
        other => panic!("no waiting stage {other:?}"),
    }
}

/// Every waiting stage but the acceptor's `AwaitConnect`, whose peer is still a stranger with
/// a shorter, total bound (see the tests below).
#[test]
fn a_stall_just_under_the_timeout_survives_and_just_over_fails_naming_the_stage() {
    for stage in [
        Stage::TcpConnect,
        Stage::SendConnect,
        Stage::AwaitAccept,
        Stage::SendReady,
        Stage::SendAccept,
        Stage::AwaitReady,
    ] {
        let mut h = at_stage(stage);
        assert_eq!(h.stage(), stage);
        assert_eq!(h.poll_timeout(), Some(T0 + HANDSHAKE_TIMEOUT));
        h.handle_timeout(T0 + HANDSHAKE_TIMEOUT);
        assert_eq!((h.stage(), h.poll_event()), (stage, None), "{stage:?}");
        h.handle_timeout(T0 + HANDSHAKE_TIMEOUT + Duration::from_millis(1));
        let e = failure(&mut h);
        let peer = if stage.is_connector() {
            ACCEPTOR
        } else {
            CONNECTOR
        };
        assert_eq!(
            e,
            HandshakeError::TimedOut {
                peer: peer.into(),
                stage,
                after: HANDSHAKE_TIMEOUT
            }
        );
        assert!(
            e.to_string().contains("no progress for 120 s")
                || e.to_string().contains("no handshake progress for 120 s")
        );
        assert!(e.to_string().contains(&stage.to_string()));
    }
}

#[test]
fn any_byte_moved_restarts_the_timeout() {
    let later = T0 + Duration::from_secs(100);
    // A byte read (from a peer that presented the secret: a stranger's bytes do not count).
    let mut a = acceptor_awaiting_ready();
    a.handle_bytes(&wire::encode(&Msg::Ready)[..1], later);
    a.handle_timeout(T0 + HANDSHAKE_TIMEOUT + Duration::from_secs(1));
    assert_eq!(a.stage(), Stage::AwaitReady);
    assert_eq!(a.poll_timeout(), Some(later + HANDSHAKE_TIMEOUT));
    // A byte written.
    let mut c = connector();
    c.advance(1, later);
    c.handle_timeout(T0 + HANDSHAKE_TIMEOUT + Duration::from_secs(1));
    assert_eq!(c.stage(), Stage::SendConnect);
    // The TCP connect completing.
    let mut c = Handshake::connector(connector_side(), SECRET, ACCEPTOR, T0);
    c.tcp_connected(later);
    c.handle_timeout(T0 + HANDSHAKE_TIMEOUT + Duration::from_secs(1));
    assert_eq!(c.stage(), Stage::SendConnect);
    // Nothing moved: an empty read does not count.
    let mut a = acceptor_awaiting_ready();
    a.handle_bytes(&[], later);
    a.handle_timeout(T0 + HANDSHAKE_TIMEOUT + Duration::from_secs(1));
    assert_eq!(a.stage(), Stage::Failed);
}

#[test]
fn a_finished_handshake_never_times_out() {
    let mut a = acceptor_awaiting_ready();
    a.handle_bytes(&wire::encode(&Msg::Ready), T0);
    events(&mut a);
    a.handle_timeout(T0 + 10 * HANDSHAKE_TIMEOUT);
    assert_eq!(
        (a.stage(), a.poll_event(), a.poll_timeout()),
        (Stage::Connected, None, None)
    );
}

#[test]
fn a_stranger_has_the_secret_deadline_in_all_however_its_bytes_trickle_in() {
    let connect = take_out(&mut connector());
    let mut a = acceptor();
    assert!(a.is_stranger());
    assert_eq!(a.poll_timeout(), Some(T0 + SECRET_DEADLINE));
    // One byte every 100 ms, up to the deadline: each is progress, none extends it.
    let mut t = T0;
    for b in &connect[..50] {
        t += Duration::from_millis(100);
        a.handle_bytes(std::slice::from_ref(b), t);
        a.handle_timeout(t);
        assert_eq!(a.stage(), Stage::AwaitConnect);
        assert_eq!(a.poll_timeout(), Some(T0 + SECRET_DEADLINE));
    }
    a.handle_timeout(T0 + SECRET_DEADLINE);
    assert_eq!(a.stage(), Stage::AwaitConnect, "just at the deadline");
    a.handle_timeout(T0 + SECRET_DEADLINE + Duration::from_millis(1));
    let e = failure(&mut a);
    assert_eq!(
        e,
        HandshakeError::NoSecret {
            peer: CONNECTOR.into(),
            after: SECRET_DEADLINE,
            received: 50
        }
    );
    assert_eq!(
        e.to_string(),
        "connection from 10.0.0.1:40000 did not present the listen secret within 5 s of being accepted (50 bytes of a message received)"
    );
    // A silent one alike.
    let mut a = acceptor();
    a.handle_timeout(T0 + SECRET_DEADLINE + Duration::from_millis(1));
    assert!(matches!(
        failure(&mut a),
        HandshakeError::NoSecret { received: 0, .. }
    ));
}

#[test]
fn a_peer_that_presented_the_secret_is_no_stranger_and_keeps_the_no_progress_bound() {
    let mut a = acceptor();
    a.handle_bytes(&take_out(&mut connector()), T0 + Duration::from_secs(1));
    assert!(!a.is_stranger());
    // Its setup is slow (the transport has not made its QPs yet): the secret's deadline is
    // long past, and only the no-progress bound applies.
    assert_eq!(a.stage(), Stage::LocalMeta);
    assert_eq!(
        a.poll_timeout(),
        Some(T0 + Duration::from_secs(1) + HANDSHAKE_TIMEOUT)
    );
    a.handle_timeout(T0 + Duration::from_secs(1) + HANDSHAKE_TIMEOUT);
    assert_eq!(a.stage(), Stage::LocalMeta);
    // A connector is never a stranger.
    let mut c = connector();
    assert!(!c.is_stranger());
    c.handle_timeout(T0 + 2 * SECRET_DEADLINE);
    assert_eq!(c.stage(), Stage::SendConnect);
}

#[test]
fn a_wrong_secret_leaves_the_peer_a_stranger() {
    let mut a = acceptor();
    let mut other = [0u8; SECRET_SIZE];
    other[0] = 1;
    a.handle_bytes(&take_out(&mut connector_with(connector_side(), other)), T0);
    assert!(matches!(
        failure(&mut a),
        HandshakeError::WrongSecret { .. }
    ));
    assert!(a.is_stranger());
}

#[test]
fn a_strangers_reject_is_only_unexpected_and_its_text_is_shown_escaped_and_cut() {
    let text = format!("\x1b[2J\nFAKE LOG LINE {}", "z".repeat(500));
    let mut a = acceptor();
    a.handle_bytes(&wire::encode(&Msg::Reject(text.clone())), T0);
    let e = failure(&mut a);
    assert_eq!(
        e,
        HandshakeError::Unexpected {
            peer: CONNECTOR.into(),
            msg: Box::new(Msg::Reject(text))
        }
    );
    let shown = e.to_string();
    assert!(
        shown.starts_with(
            "unexpected handshake message from 10.0.0.1:40000: Reject \"\\x1b[2J\\nFAKE LOG LINE zz"
        ),
        "{shown}"
    );
    assert!(shown.ends_with("... (519 bytes in all)\""), "{shown}");
    assert!(!shown.contains('\n') && !shown.contains('\x1b'));
    assert!(shown.len() < 200, "{shown}");
}

#[test]
fn an_unexpected_connect_is_named_without_its_secret() {
    let mut c = connector();
    take_out(&mut c);
    let mut meta = acceptor_side().meta;
    meta.secret = [0xab; SECRET_SIZE];
    c.handle_bytes(&wire::encode(&Msg::Connect(meta)), T0);
    assert_eq!(
        failure(&mut c).to_string(),
        "unexpected handshake message from 10.0.0.2:50000: Connect"
    );
}

#[test]
fn a_reject_reason_is_shown_escaped() {
    let mut c = connector();
    take_out(&mut c);
    c.handle_bytes(&wire::encode(&Msg::Reject("no\nthanks\x07".into())), T0);
    assert_eq!(
        failure(&mut c).to_string(),
        "peer 10.0.0.2:50000 refused the connection: no\\nthanks\\x07"
    );
}

#[test]
fn a_connection_the_listener_dropped_before_answering_may_be_dialled_again_with_the_same_connect() {
    let mut c = connector();
    let first = take_out(&mut c);
    assert_eq!(c.stage(), Stage::AwaitAccept);
    assert!(c.may_redial());
    // The listener dropped it (a stranger past its deadline): a new connection, the same Connect.
    let later = T0 + Duration::from_secs(7);
    assert_eq!(c.redial(later), 2);
    assert_eq!((c.stage(), c.redials()), (Stage::TcpConnect, 1));
    assert_eq!(
        c.poll_transmit(),
        None,
        "nothing is written before the TCP connect completes"
    );
    c.tcp_connected(later);
    // The new connection is progress: the no-progress bound runs from it.
    assert_eq!(c.poll_timeout(), Some(later + HANDSHAKE_TIMEOUT));
    assert_eq!(take_out(&mut c), first);
    // And it connects as the first would have.
    let mut a = acceptor();
    a.handle_bytes(&first, later);
    assert!(!act(&mut a, &acceptor_side()));
    c.handle_bytes(&take_out(&mut a), later);
    assert!(!act(&mut c, &connector_side()));
    a.handle_bytes(&take_out(&mut c), later);
    assert!(act(&mut a, &acceptor_side()));
    assert!(act(&mut c, &connector_side()));
    assert_eq!(c.stage(), Stage::Connected);
}

#[test]
fn a_connection_dropped_halfway_through_writing_connect_is_dialled_again_and_connect_goes_whole() {
    let mut c = connector();
    let whole = c.poll_transmit().map(<[u8]>::to_vec).unwrap_or_default();
    c.advance(10, T0);
    assert_eq!(c.stage(), Stage::SendConnect);
    assert!(c.may_redial());
    c.redial(T0);
    c.tcp_connected(T0);
    assert_eq!(take_out(&mut c), whole);
}

#[test]
fn the_connector_dials_again_at_most_redials_max_times() {
    let mut c = connector();
    for n in 2..=REDIALS_MAX + 1 {
        take_out(&mut c);
        assert!(c.may_redial(), "connection {n}");
        assert_eq!(c.redial(T0), n);
        c.tcp_connected(T0);
    }
    take_out(&mut c);
    assert!(!c.may_redial());
    c.peer_closed();
    assert!(matches!(failure(&mut c), HandshakeError::PeerClosed { .. }));
}

#[test]
fn once_the_listener_answered_or_the_tcp_connect_never_completed_a_lost_connection_is_not_dialled_again()
 {
    // Before the TCP connection completed: a refusal says the listener is not there.
    let c = Handshake::connector(connector_side(), SECRET, ACCEPTOR, T0);
    assert_eq!(c.stage(), Stage::TcpConnect);
    assert!(!c.may_redial());
    // A byte of the answer came: the listener holds this connection's state.
    let mut c = connector();
    take_out(&mut c);
    c.handle_bytes(&[wire::encode(&Msg::Ready)[0]], T0);
    assert!(!c.may_redial());
    // Past the answer.
    let mut c = connector();
    let mut a = acceptor();
    a.handle_bytes(&take_out(&mut c), T0);
    assert!(!act(&mut a, &acceptor_side()));
    c.handle_bytes(&take_out(&mut a), T0);
    assert_eq!(c.stage(), Stage::ConnectorQps);
    assert!(!c.may_redial());
    // The accepting side never dials.
    assert!(!a.may_redial());
    assert_eq!(a.redials(), 0);
    // A redial it was not allowed fails the handshake as a bug.
    c.redial(T0);
    assert!(matches!(
        failure(&mut c),
        HandshakeError::OutOfOrder { call: "redial", .. }
    ));
}

#[test]
fn an_acceptor_whose_own_setup_fails_tells_the_real_peer_in_a_reject_and_a_stranger_nothing() {
    let mut a = acceptor();
    let mut c = connector();
    a.handle_bytes(&take_out(&mut c), T0);
    assert!(!act(&mut a, &acceptor_side()));
    a.abandon("rxe0:1 QP 0 to RTR failed with errno 22");
    let e = failure(&mut a);
    assert_eq!(
        e.to_string(),
        "setting up the connection from 10.0.0.1:40000 failed: rxe0:1 QP 0 to RTR failed with errno 22"
    );
    // The connecting side gets the reason and does not dial again.
    c.handle_bytes(&take_out(&mut a), T0);
    assert!(!c.may_redial());
    assert!(matches!(
        failure(&mut c),
        HandshakeError::PeerRejected { reason, .. } if reason.contains("errno 22")
    ));
    // A stranger is told nothing.
    let mut s = acceptor();
    s.abandon("out of QPs");
    assert_eq!((s.stage(), s.poll_transmit()), (Stage::AwaitConnect, None));
}
