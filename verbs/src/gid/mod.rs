//! GID index selection: explicit (`NCCL_IB_GID_INDEX`) or automatic for RoCE.
//!
//! Pure logic over a port's GID table as read by [`crate::sysfs`] (or built from
//! `ibv_query_gid`). The automatic choice copes with the cases that break simpler schemes:
//!
//! - sparse tables (Kubernetes macvlan pods where only, say, indexes 4..7 hold GIDs and the type of
//!   empty slots cannot be read);
//! - IPv6-only ports while `AF_INET` is wanted: the best usable IPv6 GID is picked instead of
//!   falling back to the link-local index 0, which is not routable and makes every transfer fail
//!   with retry-exceeded;
//! - duplicate v1/v2 entries for the same address (the RoCE version decides).
//!
//! Zero and link-local (`fe80::/10`) GIDs are never picked automatically.

use std::fmt;
use std::net::IpAddr;

pub mod types;

pub use types::{AddrFamily, GidEntry, GidType, LinkLayer};

/// What the caller wants (`NCCL_IB_GID_INDEX`, `NCCL_IB_ADDR_FAMILY`, `NCCL_IB_ADDR_RANGE`,
/// `NCCL_IB_ROCE_VERSION_NUM`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidPolicy {
    /// Use exactly this index (it must exist and be non-zero).
    pub explicit_index: Option<u32>,
    /// Preferred address family (default IPv4).
    pub family: AddrFamily,
    /// Only GIDs inside this CIDR are candidates (see [`parse_cidr`]).
    pub range: Option<(IpAddr, u8)>,
    /// Preferred RoCE version, 1 or 2 (default 2).
    pub roce_version: u8,
    /// Where an explicit index came from, for messages (default `NCCL_IB_GID_INDEX=<index>`).
    pub explicit_origin: Option<String>,
}

impl Default for GidPolicy {
    fn default() -> Self {
        Self {
            explicit_index: None,
            family: AddrFamily::V4,
            range: None,
            roce_version: 2,
            explicit_origin: None,
        }
    }
}

/// The chosen GID and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidChoice {
    /// The GID index to use as `sgid_index`.
    pub index: u32,
    /// The table entry at that index.
    pub gid: GidEntry,
    /// A short sentence explaining the choice, for init-time logs.
    pub reason: String,
}

/// Why no GID could be chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GidError {
    /// The requested index is not in the table.
    IndexNotFound {
        /// The requested index.
        index: u32,
        /// Where the request came from (e.g. `explicit NCCL_IB_GID_INDEX`).
        origin: String,
        /// Indexes holding non-zero GIDs.
        valid: Vec<u32>,
    },
    /// The requested index holds the zero GID (empty slot).
    ZeroGid {
        /// The requested index.
        index: u32,
        /// Where the request came from.
        origin: String,
        /// Indexes holding non-zero GIDs.
        valid: Vec<u32>,
    },
    /// Automatic selection found nothing usable; the message says what the table held.
    NoUsableGid(String),
}

impl fmt::Display for GidError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::IndexNotFound {
                index,
                origin,
                valid,
            } => write!(
                f,
                "GID index {index} ({origin}) is not in the port's GID table; \
                 valid non-zero indexes: {valid:?}"
            ),
            Self::ZeroGid {
                index,
                origin,
                valid,
            } => write!(
                f,
                "GID index {index} ({origin}) holds an all-zero GID (empty slot); \
                 valid non-zero indexes: {valid:?}"
            ),
            Self::NoUsableGid(msg) => write!(f, "no usable GID: {msg}"),
        }
    }
}

impl std::error::Error for GidError {}

/// Parses a CIDR such as `10.0.0.0/8` or `2001:db8::/32`.
///
/// # Errors
/// When the text is not `ADDRESS/PREFIX` or the prefix is longer than the address.
pub fn parse_cidr(s: &str) -> Result<(IpAddr, u8), String> {
    let s = s.trim();
    let (addr, prefix) = s
        .split_once('/')
        .ok_or_else(|| format!("'{s}' is not a CIDR (expected ADDRESS/PREFIX)"))?;
    let addr: IpAddr = addr
        .trim()
        .parse()
        .map_err(|e| format!("'{s}': bad address '{addr}': {e}"))?;
    let prefix: u8 = prefix
        .trim()
        .parse()
        .map_err(|e| format!("'{s}': bad prefix length '{prefix}': {e}"))?;
    let max = match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    };
    if prefix > max {
        return Err(format!(
            "'{s}': prefix length {prefix} is longer than {max}"
        ));
    }
    Ok((addr, prefix))
}

/// Whether `gid` lies inside `range`. An IPv4 range matches IPv4-mapped GIDs only; an IPv6 range
/// is compared against the raw 128-bit GID.
pub fn gid_in_range(gid: &GidEntry, range: (IpAddr, u8)) -> bool {
    let (base, prefix) = match range {
        (IpAddr::V4(v4), p) => (v4.to_ipv6_mapped(), u32::from(p.min(32)) + 96),
        (IpAddr::V6(v6), p) => (v6, u32::from(p.min(128))),
    };
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix)
    };
    (u128::from(gid.ipv6()) & mask) == (u128::from(base) & mask)
}

fn format_range(range: (IpAddr, u8)) -> String {
    format!("{}/{}", range.0, range.1)
}

/// Indexes of non-zero GIDs, sorted.
fn valid_indexes(table: &[GidEntry]) -> Vec<u32> {
    let mut v: Vec<u32> = table
        .iter()
        .filter(|g| !g.is_zero())
        .map(|g| g.index)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Picks the table entry at `index`, or explains why it cannot be used.
fn pick_index(table: &[GidEntry], index: u32, origin: &str) -> Result<GidEntry, GidError> {
    match table.iter().find(|g| g.index == index) {
        None => Err(GidError::IndexNotFound {
            index,
            origin: origin.to_string(),
            valid: valid_indexes(table),
        }),
        Some(g) if g.is_zero() => Err(GidError::ZeroGid {
            index,
            origin: origin.to_string(),
            valid: valid_indexes(table),
        }),
        Some(g) => Ok(g.clone()),
    }
}

/// `3 ::ffff:10.0.0.1 RoCE v2`
fn describe_entry(g: &GidEntry) -> String {
    format!("{} {} {}", g.index, g, g.gid_type)
}

/// Lists the non-zero entries and counts the zero ones, for error messages.
fn describe_table(entries: &[&GidEntry], zero_count: usize) -> String {
    let listed: Vec<String> = entries.iter().map(|g| describe_entry(g)).collect();
    let mut s = format!("[{}]", listed.join(", "));
    if zero_count > 0 {
        s.push_str(&format!(" and {zero_count} zero entries"));
    }
    s
}

fn wanted_type(roce_version: u8) -> GidType {
    if roce_version == 1 {
        GidType::RoceV1
    } else {
        GidType::RoceV2
    }
}

/// Chooses the GID index for a port.
///
/// - An explicit index wins (on any link layer); it must exist and be non-zero (a link-local GID is
///   accepted when asked for explicitly).
/// - InfiniBand: index 0.
/// - Otherwise (Ethernet/RoCE, or an unknown link layer): automatic. Zero and link-local GIDs are
///   skipped; with a range set, GIDs outside it are skipped. Among the rest, the wanted address
///   family comes first, then the wanted RoCE version; ties go to the lowest index. If no GID of the
///   wanted family is usable, the best one of the other family is picked and the reason says so.
///
/// # Errors
/// [`GidError::IndexNotFound`] / [`GidError::ZeroGid`] for a bad explicit index (or a missing
/// index 0 on InfiniBand); [`GidError::NoUsableGid`] when automatic selection finds nothing.
pub fn select_gid(
    link_layer: &LinkLayer,
    table: &[GidEntry],
    policy: &GidPolicy,
) -> Result<GidChoice, GidError> {
    if let Some(index) = policy.explicit_index {
        let origin = match &policy.explicit_origin {
            Some(o) => format!("explicit {o}"),
            None => format!("explicit NCCL_IB_GID_INDEX={index}"),
        };
        let gid = pick_index(table, index, &origin)?;
        let mut reason = format!("{origin}: {} {}", gid, gid.gid_type);
        if gid.is_link_local() && link_layer.is_ethernet() {
            reason.push_str(" (link-local: not routable)");
        }
        return Ok(GidChoice { index, gid, reason });
    }

    if matches!(link_layer, LinkLayer::InfiniBand) {
        let gid = pick_index(table, 0, "InfiniBand port")?;
        return Ok(GidChoice {
            index: 0,
            gid,
            reason: "InfiniBand port: GID index 0".to_string(),
        });
    }

    select_auto(table, policy)
}

fn select_auto(table: &[GidEntry], policy: &GidPolicy) -> Result<GidChoice, GidError> {
    let want_type = wanted_type(policy.roce_version);
    let range_text = policy
        .range
        .map(|r| format!(", range {}", format_range(r)))
        .unwrap_or_default();

    // Routable entries (non-zero, not link-local), and of those the ones inside the range.
    let routable: Vec<&GidEntry> = table
        .iter()
        .filter(|g| !g.is_zero() && !g.is_link_local())
        .collect();
    let candidates: Vec<&GidEntry> = routable
        .iter()
        .copied()
        .filter(|g| policy.range.is_none_or(|r| gid_in_range(g, r)))
        .collect();

    // Best: family match, then version match, then lowest index.
    let best = candidates.iter().copied().min_by_key(|g| {
        (
            g.family() != Some(policy.family),
            g.gid_type != want_type,
            g.index,
        )
    });

    let Some(best) = best else {
        let zero_count = table.iter().filter(|g| g.is_zero()).count();
        let nonzero: Vec<&GidEntry> = table.iter().filter(|g| !g.is_zero()).collect();
        let msg = if table.is_empty() {
            "the port's GID table is empty".to_string()
        } else if routable.is_empty() {
            format!(
                "only link-local/zero GIDs: {}",
                describe_table(&nonzero, zero_count)
            )
        } else {
            let range = policy.range.map(format_range).unwrap_or_default();
            format!(
                "no GID inside NCCL_IB_ADDR_RANGE {range}: {}",
                describe_table(&nonzero, zero_count)
            )
        };
        return Err(GidError::NoUsableGid(msg));
    };

    let fam_ok = best.family() == Some(policy.family);
    let type_ok = best.gid_type == want_type;
    let reason = if fam_ok && type_ok {
        format!(
            "auto: first {want_type} {} GID {best} (family {}, RoCE v{}{range_text})",
            policy.family.ip_name(),
            policy.family,
            policy.roce_version,
        )
    } else if fam_ok {
        format!(
            "auto: no {want_type} {} GID, using {best} {} (family {}{range_text})",
            policy.family.ip_name(),
            best.gid_type,
            policy.family,
        )
    } else {
        let other = best.family().map_or("other", AddrFamily::ip_name);
        format!(
            "auto: no {} GID on this port{}, using {other} {best} {}",
            policy.family.ip_name(),
            policy
                .range
                .map(|r| format!(" in range {}", format_range(r)))
                .unwrap_or_default(),
            best.gid_type,
        )
    };

    Ok(GidChoice {
        index: best.index,
        gid: best.clone(),
        reason,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::sysfs::testutil::{FakeSysfs, rxe_on_dummy, rxe_on_lo};
    use crate::sysfs::{list_devices, parse_gid};

    fn e(index: u32, text: &str, gid_type: GidType) -> GidEntry {
        GidEntry::new(
            index,
            parse_gid(text).unwrap(),
            gid_type,
            Some("eth0".into()),
        )
    }

    fn zero(index: u32) -> GidEntry {
        GidEntry::new(index, [0; 16], GidType::Unknown, None)
    }

    const ETH: LinkLayer = LinkLayer::Ethernet;

    fn auto() -> GidPolicy {
        GidPolicy::default()
    }

    /// fe80 pair, IPv4 pair, IPv6 pair, zero slots: the usual RoCE NIC table.
    fn typical() -> Vec<GidEntry> {
        vec![
            e(0, "fe80::a288:c2ff:fe3a:10aa", GidType::RoceV1),
            e(1, "fe80::a288:c2ff:fe3a:10aa", GidType::RoceV2),
            e(2, "::ffff:10.0.0.5", GidType::RoceV1),
            e(3, "::ffff:10.0.0.5", GidType::RoceV2),
            e(4, "2001:db8::5", GidType::RoceV1),
            e(5, "2001:db8::5", GidType::RoceV2),
            zero(6),
            zero(7),
        ]
    }

    #[test]
    fn defaults() {
        let p = GidPolicy::default();
        assert_eq!(p.family, AddrFamily::V4);
        assert_eq!(p.roce_version, 2);
        assert_eq!(p.explicit_index, None);
        assert_eq!(p.range, None);
    }

    #[test]
    fn ipv4_pair_picks_v2() {
        let c = select_gid(&ETH, &typical(), &auto()).unwrap();
        assert_eq!(c.index, 3);
        assert_eq!(c.gid.ipv4(), Some([10, 0, 0, 5].into()));
        assert!(
            c.reason.starts_with("auto: first RoCE v2 IPv4 GID"),
            "{}",
            c.reason
        );
        assert!(c.reason.contains("::ffff:10.0.0.5"), "{}", c.reason);
        assert!(c.reason.contains("AF_INET"), "{}", c.reason);
    }

    #[test]
    fn order_of_table_does_not_matter() {
        let mut t = typical();
        t.reverse();
        assert_eq!(select_gid(&ETH, &t, &auto()).unwrap().index, 3);
    }

    #[test]
    fn duplicate_ipv4_addresses_lowest_index_wins() {
        let mut t = typical();
        t.push(e(8, "::ffff:10.0.1.5", GidType::RoceV2));
        assert_eq!(select_gid(&ETH, &t, &auto()).unwrap().index, 3);
    }

    #[test]
    fn ipv6_wanted() {
        let p = GidPolicy {
            family: AddrFamily::V6,
            ..auto()
        };
        let c = select_gid(&ETH, &typical(), &p).unwrap();
        assert_eq!(c.index, 5, "global IPv6 v2, never the fe80 pair");
        assert!(c.reason.contains("AF_INET6"), "{}", c.reason);
    }

    #[test]
    fn ipv6_only_table_falls_back_to_global_ipv6() {
        // Broadcom bnxt_re with IPv6 only: AF_INET finds nothing; index 0 (link-local) must not win.
        let t = vec![
            e(0, "fe80::1", GidType::RoceV1),
            e(1, "fe80::1", GidType::RoceV2),
            e(2, "2001:db8::2", GidType::RoceV1),
            e(3, "2001:db8::2", GidType::RoceV2),
            zero(4),
        ];
        let c = select_gid(&ETH, &t, &auto()).unwrap();
        assert_eq!(c.index, 3);
        assert_eq!(
            c.reason,
            "auto: no IPv4 GID on this port, using IPv6 2001:db8::2 RoCE v2"
        );
    }

    #[test]
    fn sparse_macvlan_table() {
        // Only 4..7 exist; types of other slots would be unreadable, and they are absent here.
        let t = vec![
            e(4, "fe80::44:1", GidType::RoceV1),
            e(5, "fe80::44:1", GidType::RoceV2),
            e(6, "::ffff:192.168.10.7", GidType::RoceV1),
            e(7, "::ffff:192.168.10.7", GidType::RoceV2),
        ];
        let c = select_gid(&ETH, &t, &auto()).unwrap();
        assert_eq!(c.index, 7);
    }

    #[test]
    fn sparse_with_unknown_types() {
        // Type files unreadable everywhere: still picks the IPv4 GID, lowest index.
        let t = vec![
            zero(0),
            GidEntry::new(
                5,
                parse_gid("::ffff:10.1.1.1").unwrap(),
                GidType::Unknown,
                None,
            ),
            GidEntry::new(
                6,
                parse_gid("::ffff:10.1.1.1").unwrap(),
                GidType::Unknown,
                None,
            ),
        ];
        let c = select_gid(&ETH, &t, &auto()).unwrap();
        assert_eq!(c.index, 5);
        assert!(
            c.reason.starts_with("auto: no RoCE v2 IPv4 GID, using"),
            "{}",
            c.reason
        );
    }

    #[test]
    fn only_link_local_and_zero_is_error() {
        let t = vec![
            e(0, "fe80::1", GidType::RoceV2),
            e(1, "fe80::1", GidType::RoceV1),
            zero(2),
            zero(3),
        ];
        let err = select_gid(&ETH, &t, &auto()).unwrap_err();
        let GidError::NoUsableGid(msg) = &err else {
            panic!("{err:?}");
        };
        assert_eq!(
            msg,
            "only link-local/zero GIDs: [0 fe80::1 RoCE v2, 1 fe80::1 RoCE v1] and 2 zero entries"
        );
        assert!(
            err.to_string()
                .starts_with("no usable GID: only link-local")
        );
    }

    #[test]
    fn all_zero_and_empty_tables_are_errors() {
        let err = select_gid(&ETH, &[zero(0), zero(1)], &auto()).unwrap_err();
        assert_eq!(
            err,
            GidError::NoUsableGid("only link-local/zero GIDs: [] and 2 zero entries".into())
        );
        let err = select_gid(&ETH, &[], &auto()).unwrap_err();
        assert_eq!(
            err,
            GidError::NoUsableGid("the port's GID table is empty".into())
        );
    }

    #[test]
    fn explicit_existing_index() {
        let p = GidPolicy {
            explicit_index: Some(2),
            ..auto()
        };
        let c = select_gid(&ETH, &typical(), &p).unwrap();
        assert_eq!(c.index, 2);
        assert_eq!(c.gid.gid_type, GidType::RoceV1);
        assert!(
            c.reason.starts_with("explicit NCCL_IB_GID_INDEX=2"),
            "{}",
            c.reason
        );
    }

    #[test]
    fn explicit_link_local_is_allowed_but_flagged() {
        let p = GidPolicy {
            explicit_index: Some(0),
            ..auto()
        };
        let c = select_gid(&ETH, &typical(), &p).unwrap();
        assert_eq!(c.index, 0);
        assert!(c.reason.contains("link-local"), "{}", c.reason);
    }

    #[test]
    fn explicit_missing_index() {
        let p = GidPolicy {
            explicit_index: Some(3),
            ..auto()
        };
        let t = vec![
            e(4, "fe80::1", GidType::RoceV1),
            e(5, "::ffff:10.0.0.1", GidType::RoceV2),
            zero(6),
        ];
        let err = select_gid(&ETH, &t, &p).unwrap_err();
        assert_eq!(
            err,
            GidError::IndexNotFound {
                index: 3,
                origin: "explicit NCCL_IB_GID_INDEX=3".into(),
                valid: vec![4, 5],
            }
        );
        let s = err.to_string();
        assert!(s.contains("GID index 3") && s.contains("[4, 5]"), "{s}");
    }

    #[test]
    fn explicit_zero_slot() {
        let p = GidPolicy {
            explicit_index: Some(7),
            ..auto()
        };
        let err = select_gid(&ETH, &typical(), &p).unwrap_err();
        assert!(matches!(err, GidError::ZeroGid { index: 7, .. }), "{err:?}");
        assert!(err.to_string().contains("[0, 1, 2, 3, 4, 5]"), "{err}");
    }

    #[test]
    fn explicit_wins_on_infiniband() {
        let t = vec![
            e(0, "fe80::2:c903:31:7c01", GidType::Ib),
            e(1, "fec0::2:c903:31:7c01", GidType::Ib),
        ];
        let p = GidPolicy {
            explicit_index: Some(1),
            ..auto()
        };
        assert_eq!(select_gid(&LinkLayer::InfiniBand, &t, &p).unwrap().index, 1);
    }

    #[test]
    fn range_filters_candidates() {
        let mut t = typical();
        t.push(e(8, "::ffff:192.168.1.9", GidType::RoceV1));
        t.push(e(9, "::ffff:192.168.1.9", GidType::RoceV2));
        let p = GidPolicy {
            range: Some(parse_cidr("192.168.0.0/16").unwrap()),
            ..auto()
        };
        let c = select_gid(&ETH, &t, &p).unwrap();
        assert_eq!(c.index, 9);
        assert!(c.reason.contains("range 192.168.0.0/16"), "{}", c.reason);

        let p = GidPolicy {
            range: Some(parse_cidr("10.0.0.0/8").unwrap()),
            ..auto()
        };
        assert_eq!(select_gid(&ETH, &t, &p).unwrap().index, 3);
    }

    #[test]
    fn range_excluding_everything_is_error() {
        let p = GidPolicy {
            range: Some(parse_cidr("172.16.0.0/12").unwrap()),
            ..auto()
        };
        let err = select_gid(&ETH, &typical(), &p).unwrap_err();
        let GidError::NoUsableGid(msg) = err else {
            panic!("wrong error");
        };
        assert!(
            msg.starts_with("no GID inside NCCL_IB_ADDR_RANGE 172.16.0.0/12"),
            "{msg}"
        );
        assert!(msg.contains("3 ::ffff:10.0.0.5 RoCE v2"), "{msg}");
    }

    #[test]
    fn ipv6_range_with_family_fallback() {
        // AF_INET wanted but the range only admits IPv6: the IPv6 GID in range is used.
        let p = GidPolicy {
            range: Some(parse_cidr("2001:db8::/32").unwrap()),
            ..auto()
        };
        let c = select_gid(&ETH, &typical(), &p).unwrap();
        assert_eq!(c.index, 5);
        assert!(
            c.reason
                .starts_with("auto: no IPv4 GID on this port in range 2001:db8::/32"),
            "{}",
            c.reason
        );
    }

    #[test]
    fn roce_v1_wanted() {
        let p = GidPolicy {
            roce_version: 1,
            ..auto()
        };
        let c = select_gid(&ETH, &typical(), &p).unwrap();
        assert_eq!(c.index, 2);
        assert!(
            c.reason.starts_with("auto: first RoCE v1 IPv4 GID"),
            "{}",
            c.reason
        );
    }

    #[test]
    fn family_beats_version() {
        // IPv4 only as v1, IPv6 as v2: family wins, v1 IPv4 is chosen.
        let t = vec![
            e(0, "fe80::1", GidType::RoceV2),
            e(1, "2001:db8::1", GidType::RoceV2),
            e(2, "::ffff:10.0.0.1", GidType::RoceV1),
        ];
        let c = select_gid(&ETH, &t, &auto()).unwrap();
        assert_eq!(c.index, 2);
        assert!(
            c.reason.contains("using ::ffff:10.0.0.1 RoCE v1"),
            "{}",
            c.reason
        );
    }

    #[test]
    fn infiniband_uses_index_zero() {
        let t = vec![e(0, "fe80::2:c903:31:7c01", GidType::Ib), zero(1)];
        let c = select_gid(&LinkLayer::InfiniBand, &t, &auto()).unwrap();
        assert_eq!(c.index, 0);
        assert_eq!(c.reason, "InfiniBand port: GID index 0");
        let err = select_gid(&LinkLayer::InfiniBand, &[], &auto()).unwrap_err();
        assert!(matches!(err, GidError::IndexNotFound { index: 0, .. }));
    }

    #[test]
    fn unknown_link_layer_is_treated_as_roce() {
        let c = select_gid(&LinkLayer::Unknown(String::new()), &typical(), &auto()).unwrap();
        assert_eq!(c.index, 3);
    }

    #[test]
    fn cidr_parsing() {
        assert_eq!(
            parse_cidr("10.0.0.0/8").unwrap(),
            ("10.0.0.0".parse().unwrap(), 8)
        );
        assert_eq!(
            parse_cidr(" 2001:db8::/32 ").unwrap(),
            ("2001:db8::".parse().unwrap(), 32)
        );
        assert!(parse_cidr("10.0.0.0").is_err());
        assert!(parse_cidr("10.0.0.0/33").is_err());
        assert!(parse_cidr("2001:db8::/129").is_err());
        assert!(parse_cidr("10.0.0/8").is_err());
        assert!(parse_cidr("10.0.0.0/x").is_err());
    }

    #[test]
    fn range_matching() {
        let g4 = e(0, "::ffff:10.1.2.3", GidType::RoceV2);
        let g6 = e(1, "2001:db8:1::3", GidType::RoceV2);
        assert!(gid_in_range(&g4, parse_cidr("10.1.0.0/16").unwrap()));
        assert!(gid_in_range(&g4, parse_cidr("10.1.2.3/32").unwrap()));
        assert!(!gid_in_range(&g4, parse_cidr("10.2.0.0/16").unwrap()));
        assert!(gid_in_range(&g4, parse_cidr("0.0.0.0/0").unwrap()));
        assert!(
            !gid_in_range(&g6, parse_cidr("0.0.0.0/0").unwrap()),
            "v4 range, v6 GID"
        );
        assert!(gid_in_range(&g6, parse_cidr("2001:db8::/32").unwrap()));
        assert!(!gid_in_range(&g6, parse_cidr("2001:db9::/32").unwrap()));
        assert!(gid_in_range(&g6, parse_cidr("::/0").unwrap()));
        assert!(gid_in_range(
            &g4,
            parse_cidr("::ffff:10.0.0.0/104").unwrap()
        ));
    }

    #[test]
    fn from_fake_sysfs() {
        let fs = rxe_on_dummy(rxe_on_lo(FakeSysfs::new()));
        let devs = list_devices(fs.root()).unwrap();
        let lo = devs[0].port(1).unwrap();
        let c = select_gid(&lo.link_layer, &lo.gids, &auto()).unwrap();
        assert_eq!(
            (c.index, c.gid.to_string()),
            (1, "::ffff:127.0.0.1".to_string())
        );
        let dummy = devs[1].port(1).unwrap();
        let c = select_gid(&dummy.link_layer, &dummy.gids, &auto()).unwrap();
        assert_eq!(
            (c.index, c.gid.to_string()),
            (3, "::ffff:192.0.2.2".to_string())
        );
        let v6 = GidPolicy {
            family: AddrFamily::V6,
            ..auto()
        };
        assert_eq!(
            select_gid(&dummy.link_layer, &dummy.gids, &v6)
                .unwrap()
                .index,
            5
        );
    }
}
