//! Where a connection's packets go, decided from GIDs and LIDs: whether the peer's device is on
//! the same rails as this side's (`NCCL_IB_WARN_RAIL_LOCAL`), which local device shares a subnet
//! with the peer (`NCCL_IB_SUBNET_AWARE_ROUTING`, `NCCL_IB_SUBNET_PREFIX_LEN`), and how an
//! InfiniBand QP addresses a peer behind an IB router (by its FLID, with a GRH; the GID index
//! with a routable FLID, `NCCL_IB_ROUTABLE_FLID_GID_INDEX`).
//!
//! A GID is its 16 raw bytes in network order. An all-zero GID is "not known" (a peer that sends
//! none, an empty handle slot), never a subnet.

/// NCCL's default prefix length for comparing IPv4-mapped RoCE GIDs.
pub const DEFAULT_SUBNET_PREFIX_LEN: u8 = 24;
/// NCCL's default GID index whose FLID, when nonzero, makes an InfiniBand port routable.
pub const DEFAULT_ROUTABLE_FLID_GID_INDEX: u32 = 1;

/// Whether a connection leaves its rails: the two sides' (virtual) devices have different
/// member counts, so QPs of several members of one side share one member of the other.
pub fn leaves_rails(local_members: usize, peer_members: usize) -> bool {
    local_members != peer_members
}

/// A GID that names a subnet: not zero, not link-local (`fe80::/64`).
pub fn valid_gid(gid: &[u8; 16]) -> bool {
    let zero = gid.iter().all(|&b| b == 0);
    let link_local = gid[0] == 0xfe && gid[1] & 0xc0 == 0x80 && gid[2..8].iter().all(|&b| b == 0);
    !zero && !link_local
}

/// An IPv4-mapped GID (`::ffff:a.b.c.d`, as RoCE v2 writes an IPv4 address): its address.
fn ipv4(gid: &[u8; 16]) -> Option<u32> {
    (gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff)
        .then(|| u32::from_be_bytes([gid[12], gid[13], gid[14], gid[15]]))
}

/// Whether two GIDs are on one subnet: two IPv4-mapped GIDs compare their first `prefix_len`
/// bits of the IPv4 address (1 to 32), any other pair its 64-bit subnet prefix.
pub fn same_subnet(local: &[u8; 16], remote: &[u8; 16], prefix_len: u8) -> bool {
    match (ipv4(local), ipv4(remote)) {
        (Some(a), Some(b)) => {
            let bits = u32::from(prefix_len.clamp(1, 32));
            let mask = u32::MAX << (32 - bits);
            a & mask == b & mask
        }
        _ => local[..8] == remote[..8],
    }
}

/// A device's RoCE members' GIDs, for [`device_on_peer_subnet`]: `None` for a member that is not
/// RoCE (it does not take part) or has no GID.
pub type MemberGids = Vec<Option<[u8; 16]>>;

/// Whether every RoCE member of a device with a valid GID shares a subnet with one of the
/// peer's valid GIDs, and it has at least one such member.
fn reaches(members: &MemberGids, peer: &[[u8; 16]], prefix_len: u8) -> bool {
    let mut checked = 0;
    for g in members.iter().flatten() {
        checked += 1;
        if !(valid_gid(g)
            && peer
                .iter()
                .any(|r| valid_gid(r) && same_subnet(g, r, prefix_len)))
        {
            return false;
        }
    }
    checked > 0
}

/// Subnet-aware routing: the device to use instead of `default` so that every RoCE member is on
/// a subnet of the peer's GIDs (`peer`: the listener's GIDs from the handle, or the connecting
/// side's from its `Connect`), or `None` to keep `default`: when the peer gave no valid GID (an
/// InfiniBand peer, one without the setting, one subnet everywhere), when `default` already
/// reaches it (a virtual NIC keeps its bandwidth), or when no other device does. `devices` is
/// every device by index, its members' GIDs as [`MemberGids`]; the first that reaches wins.
pub fn device_on_peer_subnet(
    devices: &[MemberGids],
    default: usize,
    peer: &[[u8; 16]],
    prefix_len: u8,
) -> Option<usize> {
    if !peer.iter().any(valid_gid) {
        return None;
    }
    if devices
        .get(default)
        .is_some_and(|d| reaches(d, peer, prefix_len))
    {
        return None;
    }
    (0..devices.len()).find(|&i| i != default && reaches(&devices[i], peer, prefix_len))
}

/// The FLID of an InfiniBand GID (bytes 4 and 5: the router-assigned LID of a port reachable
/// from other subnets); 0 when it has none.
pub fn flid(gid: &[u8; 16]) -> u16 {
    u16::from_be_bytes([gid[4], gid[5]])
}

/// The GID index an InfiniBand port uses: `routable` (`NCCL_IB_ROUTABLE_FLID_GID_INDEX`) when the
/// port's GID there has a nonzero FLID, else 0. `gid_at` reads the port's GID table.
pub fn ib_gid_index(routable: u32, gid_at: impl Fn(u32) -> Option<[u8; 16]>) -> u32 {
    match gid_at(routable) {
        Some(g) if flid(&g) != 0 => routable,
        _ => 0,
    }
}

/// How an InfiniBand QP addresses its peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IbRoute {
    /// The destination LID: the peer's LID, or its FLID when it is on another subnet.
    pub dlid: u16,
    /// With a global route header to this destination GID (another subnet, or the port requires
    /// one).
    pub dgid: Option<[u8; 16]>,
    /// The peer is on another subnet but its GID has no FLID: its LID is used, which only an IB
    /// router that forwards by LID can deliver (warn).
    pub flid_missing: bool,
}

/// The address of an InfiniBand peer: on this side's subnet (the low 16 bits of the two GIDs'
/// subnet prefixes are equal) by LID alone unless the port requires a GRH; on another subnet
/// through the router, with a GRH to its GID and its FLID as the destination LID. A peer whose
/// GID is unknown (zero: it sends none) is addressed by LID, as before GIDs were exchanged.
pub fn ib_route(
    local_gid: &[u8; 16],
    remote_gid: &[u8; 16],
    remote_lid: u16,
    grh_required: bool,
) -> IbRoute {
    let known = remote_gid.iter().any(|&b| b != 0) && local_gid.iter().any(|&b| b != 0);
    let same = !known || local_gid[6..8] == remote_gid[6..8];
    if same {
        return IbRoute {
            dlid: remote_lid,
            dgid: (grh_required && known).then_some(*remote_gid),
            flid_missing: false,
        };
    }
    let f = flid(remote_gid);
    IbRoute {
        dlid: if f == 0 { remote_lid } else { f },
        dgid: Some(*remote_gid),
        flid_missing: f == 0,
    }
}

#[cfg(test)]
mod tests;
