//! GID types: the address family of a GID, its RoCE type, one GID table entry, and the text
//! forms sysfs uses.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// Address family of a GID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AddrFamily {
    /// IPv4 (IPv4-mapped GID, `::ffff:a.b.c.d`), `AF_INET`.
    #[default]
    V4,
    /// IPv6, `AF_INET6`.
    V6,
}

impl AddrFamily {
    /// `IPv4` / `IPv6`.
    pub fn ip_name(self) -> &'static str {
        match self {
            Self::V4 => "IPv4",
            Self::V6 => "IPv6",
        }
    }
}

impl fmt::Display for AddrFamily {
    /// `AF_INET` / `AF_INET6` (the spelling of `NCCL_IB_ADDR_FAMILY`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::V4 => "AF_INET",
            Self::V6 => "AF_INET6",
        })
    }
}

impl FromStr for AddrFamily {
    type Err = String;

    /// Accepts `AF_INET` / `AF_INET6` (as `NCCL_IB_ADDR_FAMILY`), also `ipv4`/`ipv6`/`4`/`6`,
    /// case-insensitively.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "af_inet" | "inet" | "ipv4" | "v4" | "4" => Ok(Self::V4),
            "af_inet6" | "inet6" | "ipv6" | "v6" | "6" => Ok(Self::V6),
            other => Err(format!(
                "unknown address family '{other}' (expected AF_INET or AF_INET6)"
            )),
        }
    }
}

/// GID type from `gid_attrs/types/<i>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GidType {
    /// InfiniBand GID (`IB/RoCE v1` on an InfiniBand port).
    Ib,
    /// RoCE v1 (`IB/RoCE v1` on an Ethernet port).
    RoceV1,
    /// RoCE v2 (`RoCE v2`).
    RoceV2,
    /// Unreadable (empty slot) or unrecognised.
    Unknown,
}

impl GidType {
    /// Interprets sysfs text; `IB/RoCE v1` depends on the port's link layer.
    pub fn parse(text: &str, link_layer: &LinkLayer) -> Self {
        match text.trim() {
            "RoCE v2" => Self::RoceV2,
            "IB/RoCE v1" => {
                if link_layer.is_ethernet() {
                    Self::RoceV1
                } else {
                    Self::Ib
                }
            }
            "IB" => Self::Ib,
            "RoCE v1" | "RoCE" => Self::RoceV1,
            _ => Self::Unknown,
        }
    }

    /// RoCE version number (1 or 2), `None` for IB/unknown.
    pub fn roce_version(self) -> Option<u8> {
        match self {
            Self::RoceV1 => Some(1),
            Self::RoceV2 => Some(2),
            Self::Ib | Self::Unknown => None,
        }
    }
}

impl fmt::Display for GidType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Ib => "IB",
            Self::RoceV1 => "RoCE v1",
            Self::RoceV2 => "RoCE v2",
            Self::Unknown => "unknown type",
        })
    }
}

/// One slot of a port's GID table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GidEntry {
    /// Table index (the `sgid_index` used in address vectors).
    pub index: u32,
    /// The GID bytes, network order.
    pub gid: [u8; 16],
    /// Type from `gid_attrs/types/<i>`.
    pub gid_type: GidType,
    /// Netdev from `gid_attrs/ndevs/<i>`.
    pub netdev: Option<String>,
}

impl GidEntry {
    /// Builds an entry.
    pub fn new(index: u32, gid: [u8; 16], gid_type: GidType, netdev: Option<String>) -> Self {
        Self {
            index,
            gid,
            gid_type,
            netdev,
        }
    }

    /// The GID as an IPv6 address.
    pub fn ipv6(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.gid)
    }

    /// All bytes zero (empty slot).
    pub fn is_zero(&self) -> bool {
        self.gid.iter().all(|&b| b == 0)
    }

    /// In `fe80::/10`.
    pub fn is_link_local(&self) -> bool {
        self.gid[0] == 0xfe && (self.gid[1] & 0xc0) == 0x80
    }

    /// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`).
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        self.ipv6().to_ipv4_mapped()
    }

    /// `V4` for IPv4-mapped GIDs, `V6` otherwise, `None` for the zero GID.
    pub fn family(&self) -> Option<AddrFamily> {
        if self.is_zero() {
            None
        } else if self.ipv4().is_some() {
            Some(AddrFamily::V4)
        } else {
            Some(AddrFamily::V6)
        }
    }

    /// The address: `IpAddr::V4` for IPv4-mapped GIDs, `IpAddr::V6` otherwise.
    pub fn ip(&self) -> IpAddr {
        match self.ipv4() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(self.ipv6()),
        }
    }

    /// The 8-group form printed by sysfs and `show_gids`:
    /// `0000:0000:0000:0000:0000:ffff:7f00:0001`.
    pub fn raw_text(&self) -> String {
        format_gid_raw(&self.gid)
    }
}

impl fmt::Display for GidEntry {
    /// Compact IPv6 text (`::ffff:127.0.0.1`, `fe80::1`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.ipv6(), f)
    }
}

/// Parses a GID as sysfs prints it (8 groups of 4 hex digits); compact IPv6 text is accepted too.
pub fn parse_gid(text: &str) -> Option<[u8; 16]> {
    text.trim().parse::<Ipv6Addr>().ok().map(|a| a.octets())
}

/// Formats GID bytes as 8 colon-separated groups of 4 lowercase hex digits.
pub fn format_gid_raw(gid: &[u8; 16]) -> String {
    let groups: Vec<String> = gid
        .chunks_exact(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect();
    groups.join(":")
}

/// One port's GID table from `ibv_query_gid_table` entries, in the form the sysfs reader gives:
/// every index below `table_len`, empty slots as the zero GID of unknown type (as sysfs shows
/// them), netdevs named through `ifname` (interface index to name).
pub fn table_from_verbs(
    entries: &[crate::sys::ibv_gid_entry],
    port: u8,
    table_len: u32,
    link_layer: &LinkLayer,
    ifname: impl Fn(u32) -> Option<String>,
) -> Vec<GidEntry> {
    let mut table: Vec<GidEntry> = (0..table_len)
        .map(|i| GidEntry::new(i, [0; 16], GidType::Unknown, None))
        .collect();
    for e in entries.iter().filter(|e| e.port_num == u32::from(port)) {
        let Some(slot) = table.get_mut(e.gid_index as usize) else {
            continue;
        };
        let gid_type = match (e.gid_type, link_layer) {
            (_, LinkLayer::InfiniBand) => GidType::Ib,
            (crate::sys::IBV_GID_TYPE_ROCE_V1, _) => GidType::RoceV1,
            (crate::sys::IBV_GID_TYPE_ROCE_V2, _) => GidType::RoceV2,
            _ => GidType::Unknown,
        };
        let gid = e.gid.raw;
        let netdev = (e.ndev_ifindex != 0)
            .then(|| ifname(e.ndev_ifindex))
            .flatten();
        *slot = GidEntry::new(e.gid_index, gid, gid_type, netdev);
    }
    table
}

/// Port link layer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LinkLayer {
    /// InfiniBand.
    InfiniBand,
    /// Ethernet (RoCE).
    Ethernet,
    /// Anything else, as printed (empty when the file could not be read).
    Unknown(String),
}

impl LinkLayer {
    /// From sysfs text (`InfiniBand` / `Ethernet`).
    pub fn parse(text: &str) -> Self {
        match text.trim() {
            "InfiniBand" => Self::InfiniBand,
            "Ethernet" => Self::Ethernet,
            other => Self::Unknown(other.to_string()),
        }
    }

    /// From `ibv_port_attr::link_layer` (`IBV_LINK_LAYER_*`): 0 (unspecified, old drivers) and 1
    /// are InfiniBand, 2 is Ethernet.
    pub fn from_verbs(code: u8) -> Self {
        match code {
            0 | 1 => Self::InfiniBand,
            2 => Self::Ethernet,
            n => Self::Unknown(format!("link layer {n}")),
        }
    }

    /// Whether GIDs on this port are RoCE GIDs (Ethernet link layer).
    pub fn is_ethernet(&self) -> bool {
        matches!(self, Self::Ethernet)
    }
}

impl fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InfiniBand => f.write_str("InfiniBand"),
            Self::Ethernet => f.write_str("Ethernet"),
            Self::Unknown(s) if s.is_empty() => f.write_str("unknown"),
            Self::Unknown(s) => f.write_str(s),
        }
    }
}

#[cfg(test)]
mod verbs_table_tests {
    use super::*;
    use crate::sys::{IBV_GID_TYPE_ROCE_V2, ibv_gid, ibv_gid_entry};

    #[test]
    fn a_verbs_gid_table_reads_like_the_sysfs_one_with_empty_slots_filled() {
        let mut raw = [0u8; 16];
        raw[10] = 0xff;
        raw[11] = 0xff;
        raw[12..].copy_from_slice(&[127, 0, 0, 1]);
        let entries = [
            ibv_gid_entry {
                gid: ibv_gid { raw },
                gid_index: 1,
                port_num: 1,
                gid_type: IBV_GID_TYPE_ROCE_V2,
                ndev_ifindex: 1,
            },
            ibv_gid_entry {
                gid: ibv_gid { raw },
                gid_index: 0,
                port_num: 2,
                gid_type: IBV_GID_TYPE_ROCE_V2,
                ndev_ifindex: 1,
            },
        ];
        let t = table_from_verbs(&entries, 1, 4, &LinkLayer::Ethernet, |i| {
            (i == 1).then(|| "lo".to_string())
        });
        assert_eq!(t.len(), 4);
        assert!(t[0].is_zero() && t[0].gid_type == GidType::Unknown && t[0].netdev.is_none());
        assert_eq!(t[1].gid_type, GidType::RoceV2);
        assert_eq!(t[1].netdev.as_deref(), Some("lo"));
        assert_eq!(t[1].ipv4(), Some(Ipv4Addr::LOCALHOST));
        assert!(
            t[2].is_zero() && t[3].is_zero(),
            "port 2's entry is not port 1's"
        );
    }
}
