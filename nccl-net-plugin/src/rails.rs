//! What makes the devices of nodes built alike line up: their order (by PCI address, so that
//! every node numbers them alike) and the rail and plane `NCCL_IB_HCA` gives them, reported to
//! NCCL as the v12 properties' `railId` and `planeId`. Pure decisions on plain facts; discovery
//! and the plugin's device list apply them.

use std::path::Path;

/// NCCL's "no rail / no plane" (`NCCL_NET_ID_UNDEF`).
pub const UNDEF: i16 = -1;

/// Distinct plane ids a host may use, the "undefined" plane included (NCCL's limit: its plane
/// bitmask of a fused device is 16 bits wide and its top bit marks a fused device).
pub const MAX_PLANES: usize = 13;

/// Bit 14 of a fused device's `planeId`: set whenever several members are fused, so that the
/// id never equals a physical plane's; the bits below are the members' plane indexes.
pub const PLANE_VIRTUAL_BIT: i16 = 1 << 14;

/// The sort key of a PCI path: its last component (`0000:3b:00.1`) read as one hexadecimal
/// number (separators skipped); `None` without a path or with a last component that is not
/// hexadecimal.
pub fn pci_key(path: Option<&Path>) -> Option<u64> {
    let last = path?.file_name()?.to_str()?;
    let digits: String = last.chars().filter(|c| *c != ':' && *c != '.').collect();
    if digits.is_empty() {
        return None;
    }
    u64::from_str_radix(&digits, 16).ok()
}

/// The order in which devices are listed: by PCI address, devices without one last in the order
/// given (a stable sort), when `by_pci` (`NCCL_IB_DEVICE_PCI_ORDER=1`); else as given. Returns
/// the indexes into `paths`.
pub fn pci_order(paths: &[Option<&Path>], by_pci: bool) -> Vec<usize> {
    let mut order: Vec<usize> = (0..paths.len()).collect();
    if by_pci {
        order.sort_by_key(|&i| match pci_key(paths[i]) {
            Some(k) => (0u8, k),
            None => (1u8, 0),
        });
    }
    order
}

/// The PCI path reported to NCCL as `pciPath`: the device's own with its function digit zeroed
/// (the ports of a multi-port NIC are one PCI device to NCCL's topology) and, with
/// `NCCL_IB_MERGE_VFS=1`, its device number too (a virtual function is placed at its physical
/// function), as NCCL's IB transport reports it. A path whose last component is not a PCI
/// address (`dddd:bb:dd.f`) is kept as is.
pub fn reported_pci_path(path: &Path, merge_vfs: bool) -> std::path::PathBuf {
    let Some(last) = path.file_name().and_then(|n| n.to_str()) else {
        return path.to_path_buf();
    };
    let b = last.as_bytes();
    let is_addr = b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && b.iter()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit());
    if !is_addr {
        return path.to_path_buf();
    }
    let mut out = last.to_string();
    out.replace_range(11..12, "0");
    if merge_vfs {
        out.replace_range(8..10, "00");
    }
    path.with_file_name(out)
}

/// Why the planes of a host cannot be reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlaneError {
    /// More distinct planes than NCCL can tell apart.
    TooMany { limit: usize },
    /// A plane id with the fused-device bit set.
    Reserved { plane: i16 },
}

impl std::fmt::Display for PlaneError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlaneError::TooMany { limit } => write!(
                f,
                "more than {} distinct plane ids in NCCL_IB_HCA",
                limit - 1
            ),
            PlaneError::Reserved { plane } => write!(
                f,
                "plane id {plane} in NCCL_IB_HCA has bit 14 set, which marks a fused device"
            ),
        }
    }
}

/// Each device's plane index, in device order: the position of its plane among the distinct
/// planes met so far, the undefined plane being index 0. Every node that lists the same planes
/// in the same device order gets the same indexes.
pub fn plane_indexes(planes: &[i16]) -> Result<Vec<u8>, PlaneError> {
    let mut seen = vec![UNDEF];
    planes
        .iter()
        .map(|&p| {
            let at = match seen.iter().position(|s| *s == p) {
                Some(at) => at,
                None => {
                    if p != UNDEF && p & PLANE_VIRTUAL_BIT != 0 {
                        return Err(PlaneError::Reserved { plane: p });
                    }
                    if seen.len() == MAX_PLANES {
                        return Err(PlaneError::TooMany { limit: MAX_PLANES });
                    }
                    seen.push(p);
                    seen.len() - 1
                }
            };
            Ok(u8::try_from(at).unwrap_or(u8::MAX))
        })
        .collect()
}

/// One member's rail, plane and plane index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RailPlane {
    pub rail: i16,
    pub plane: i16,
    pub plane_index: u8,
}

impl RailPlane {
    /// A device `NCCL_IB_HCA` gives no rail or plane.
    pub const NONE: RailPlane = RailPlane {
        rail: UNDEF,
        plane: UNDEF,
        plane_index: 0,
    };
}

/// The `(railId, planeId)` of a device made of `members`: a single member's own; for a fused
/// device, the members' rail when they all share one (else undefined), and as plane the
/// fused-device bit with one bit per member's plane index.
pub fn fused(members: &[RailPlane]) -> (i16, i16) {
    match members {
        [] => (UNDEF, UNDEF),
        [one] => (one.rail, one.plane),
        [first, ..] => {
            let rail = if members.iter().all(|m| m.rail == first.rail) {
                first.rail
            } else {
                UNDEF
            };
            let plane = members.iter().fold(PLANE_VIRTUAL_BIT, |acc, m| {
                acc | (1 << u32::from(m.plane_index.min(13)))
            });
            (rail, plane)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn devices_sort_by_pci_address_with_pathless_ones_last_in_their_order() {
        let paths = [
            Some(p("/sys/devices/pci0000:b0/0000:b0:02.0/0000:b1:00.0")),
            None,
            Some(p("/sys/devices/pci0000:00/0000:00:01.0/0000:03:00.1")),
            Some(p("/sys/devices/pci0000:00/0000:00:01.0/0000:03:00.0")),
            None,
        ];
        let refs: Vec<Option<&Path>> = paths.iter().map(|x| x.as_deref()).collect();
        assert_eq!(pci_order(&refs, true), vec![3, 2, 0, 1, 4]);
        assert_eq!(pci_order(&refs, false), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn the_reported_pci_path_folds_ports_and_with_merge_vfs_virtual_functions() {
        let vf = Path::new("/sys/devices/pci0000:00/0000:00:01.0/0000:03:02.5");
        assert_eq!(
            reported_pci_path(vf, false),
            p("/sys/devices/pci0000:00/0000:00:01.0/0000:03:02.0")
        );
        assert_eq!(
            reported_pci_path(vf, true),
            p("/sys/devices/pci0000:00/0000:00:01.0/0000:03:00.0")
        );
        let odd = Path::new("/sys/devices/virtual/net/eth0");
        assert_eq!(
            reported_pci_path(odd, true),
            p("/sys/devices/virtual/net/eth0")
        );
    }

    #[test]
    fn a_pci_key_is_the_last_component_read_as_hexadecimal() {
        assert_eq!(pci_key(Some(Path::new("/x/0000:3b:00.1"))), Some(0x3b001));
        assert!(
            pci_key(Some(Path::new("/x/0000:3b:00.1")))
                > pci_key(Some(Path::new("/x/0000:3a:1f.7")))
        );
        assert_eq!(pci_key(Some(Path::new("/x/virtual"))), None);
        assert_eq!(pci_key(None), None);
    }

    #[test]
    fn plane_indexes_count_distinct_planes_in_device_order_after_the_undefined_one() {
        assert_eq!(
            plane_indexes(&[UNDEF, 4, 7, 4, UNDEF]),
            Ok(vec![0, 1, 2, 1, 0])
        );
        assert_eq!(plane_indexes(&[7, 4]), Ok(vec![1, 2]));
        let twelve: Vec<i16> = (0..12).collect();
        assert!(plane_indexes(&twelve).is_ok());
        let thirteen: Vec<i16> = (0..13).collect();
        assert_eq!(
            plane_indexes(&thirteen),
            Err(PlaneError::TooMany { limit: MAX_PLANES })
        );
        assert_eq!(
            plane_indexes(&[PLANE_VIRTUAL_BIT | 1]),
            Err(PlaneError::Reserved {
                plane: PLANE_VIRTUAL_BIT | 1
            })
        );
    }

    #[test]
    fn a_fused_device_keeps_a_common_rail_and_marks_its_members_planes() {
        let a = RailPlane {
            rail: 2,
            plane: 0,
            plane_index: 1,
        };
        let b = RailPlane {
            rail: 2,
            plane: 1,
            plane_index: 2,
        };
        assert_eq!(fused(&[a]), (2, 0));
        assert_eq!(fused(&[a, b]), (2, PLANE_VIRTUAL_BIT | 0b110));
        let c = RailPlane { rail: 3, ..b };
        assert_eq!(fused(&[a, c]).0, UNDEF, "different rails");
        assert_eq!(
            fused(&[RailPlane::NONE, RailPlane::NONE]),
            (UNDEF, PLANE_VIRTUAL_BIT | 1)
        );
        assert_eq!(fused(&[RailPlane::NONE]), (UNDEF, UNDEF));
    }
}
