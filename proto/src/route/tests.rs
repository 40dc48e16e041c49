use super::*;

fn v4(a: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&a);
    g
}

/// An InfiniBand GID: subnet prefix with `subnet` in its low 16 bits and `flid` in bytes 4..6.
fn ib(subnet: u16, flid: u16, guid: u8) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0xc0;
    g[4..6].copy_from_slice(&flid.to_be_bytes());
    g[6..8].copy_from_slice(&subnet.to_be_bytes());
    g[15] = guid;
    g
}

#[test]
fn a_peer_with_another_member_count_leaves_the_rails() {
    assert!(!leaves_rails(2, 2));
    assert!(leaves_rails(2, 1));
    assert!(leaves_rails(1, 4));
}

#[test]
fn zero_and_link_local_gids_name_no_subnet() {
    assert!(!valid_gid(&[0; 16]));
    let mut ll = [0u8; 16];
    ll[0] = 0xfe;
    ll[1] = 0x80;
    ll[15] = 1;
    assert!(!valid_gid(&ll));
    assert!(valid_gid(&v4([10, 0, 0, 1])));
}

#[test]
fn ipv4_gids_compare_their_prefix_and_others_their_subnet_prefix() {
    let (a, b) = (v4([10, 1, 2, 3]), v4([10, 1, 2, 200]));
    assert!(same_subnet(&a, &b, 24));
    assert!(!same_subnet(&a, &v4([10, 1, 3, 3]), 24));
    assert!(same_subnet(&a, &v4([10, 1, 3, 3]), 16));
    assert!(!same_subnet(&a, &v4([10, 1, 2, 4]), 32));
    let mut x = [0u8; 16];
    x[0] = 0x20;
    x[1] = 0x01;
    x[15] = 1;
    let mut y = x;
    y[15] = 2;
    assert!(same_subnet(&x, &y, 24));
    y[7] = 9;
    assert!(!same_subnet(&x, &y, 24));
}

#[test]
fn the_device_on_the_peers_subnet_replaces_one_that_is_not() {
    let devices = vec![
        vec![Some(v4([10, 0, 0, 1]))],
        vec![Some(v4([10, 0, 1, 1]))],
        vec![Some(v4([10, 0, 2, 1]))],
    ];
    let peer = [v4([10, 0, 2, 9]), [0; 16]];
    assert_eq!(device_on_peer_subnet(&devices, 0, &peer, 24), Some(2));
    // The default already reaches the peer: kept.
    assert_eq!(device_on_peer_subnet(&devices, 2, &peer, 24), None);
    // Nothing reaches it: kept.
    assert_eq!(
        device_on_peer_subnet(&devices, 0, &[v4([192, 168, 0, 1])], 24),
        None
    );
    // A peer that gave no GID (or only zero slots): kept.
    assert_eq!(device_on_peer_subnet(&devices, 0, &[[0; 16]; 2], 24), None);
}

#[test]
fn every_roce_member_of_a_virtual_nic_must_reach_the_peer() {
    let devices = vec![
        // Fused: one member on the peer's subnet, one not.
        vec![Some(v4([10, 0, 0, 1])), Some(v4([10, 0, 9, 1]))],
        // Fused: both members reach one of the peer's two subnets.
        vec![Some(v4([10, 0, 0, 2])), Some(v4([10, 0, 1, 2]))],
        // InfiniBand members take no part: no RoCE member, never chosen.
        vec![None],
    ];
    let peer = [v4([10, 0, 0, 7]), v4([10, 0, 1, 7])];
    assert_eq!(device_on_peer_subnet(&devices, 0, &peer, 24), Some(1));
    assert_eq!(device_on_peer_subnet(&devices, 2, &peer, 24), Some(1));
}

#[test]
fn an_infiniband_port_uses_the_routable_flid_gid_index_only_when_it_has_a_flid() {
    let table = [ib(1, 0, 1), ib(1, 0x42, 1)];
    let at = |i: u32| table.get(i as usize).copied();
    assert_eq!(ib_gid_index(1, at), 1);
    let no_flid = [ib(1, 0, 1), ib(1, 0, 1)];
    assert_eq!(ib_gid_index(1, |i| no_flid.get(i as usize).copied()), 0);
    assert_eq!(ib_gid_index(7, at), 0, "an index outside the table");
    assert_eq!(flid(&ib(1, 0x1234, 0)), 0x1234);
}

#[test]
fn a_peer_on_this_subnet_is_addressed_by_lid_alone() {
    let r = ib_route(&ib(5, 0x10, 1), &ib(5, 0x20, 2), 7, false);
    assert_eq!(
        r,
        IbRoute {
            dlid: 7,
            dgid: None,
            flid_missing: false
        }
    );
    // The port requires a GRH: the LID with a GRH to the peer's GID.
    let r = ib_route(&ib(5, 0x10, 1), &ib(5, 0x20, 2), 7, true);
    assert_eq!((r.dlid, r.dgid), (7, Some(ib(5, 0x20, 2))));
}

#[test]
fn a_peer_on_another_subnet_is_addressed_by_its_flid_with_a_grh() {
    let r = ib_route(&ib(5, 0x10, 1), &ib(6, 0x20, 2), 7, false);
    assert_eq!(
        r,
        IbRoute {
            dlid: 0x20,
            dgid: Some(ib(6, 0x20, 2)),
            flid_missing: false
        }
    );
    // Without a FLID: its LID, with the GRH, and a warning.
    let r = ib_route(&ib(5, 0x10, 1), &ib(6, 0, 2), 7, false);
    assert_eq!((r.dlid, r.flid_missing), (7, true));
    assert!(r.dgid.is_some());
}

#[test]
fn a_peer_that_sends_no_gid_is_addressed_by_lid_as_before() {
    let r = ib_route(&ib(5, 0x10, 1), &[0; 16], 7, false);
    assert_eq!(
        r,
        IbRoute {
            dlid: 7,
            dgid: None,
            flid_missing: false
        }
    );
    let r = ib_route(&[0; 16], &ib(6, 0x20, 2), 7, true);
    assert_eq!((r.dlid, r.dgid), (7, None));
}
