//! The devices NCCL sees, physical and virtual: the index space of `devices()`,
//! `getProperties`, `listen` and `connect`, and `makeVDevice` (ABI v9+), which fuses physical
//! devices into a virtual NIC appended to that list.
//!
//! Every device NCCL names is a [`VDevice`]: the physical ones are one-member devices at indexes
//! `0..n` (built from the plugin's device list on first use), and every successful
//! `makeVDevice` appends one. A connection over a device of several members spreads its QPs over
//! the members (see `ferro_proto::plan::QpLayout`), and a registration through it holds one MR
//! per member. The list only grows and its entries live as long as the process (NCCL keeps
//! device indexes for the life of its communicators).
//!
//! Which fusions are refused is decided by [`decide`], a pure function of the request and the
//! physical devices' facts, tested on the host.

use crate::error::{Error, Result};
use crate::info;
use crate::plugin::{self, DeviceProps, NetDevice};
use ferro_ffi::log_flags::{INIT, NET};
use ferro_proto::MAX_DEVS;
use std::ffi::CString;
use std::sync::{OnceLock, RwLock};

/// Most devices (physical and virtual) the list holds; a `makeVDevice` beyond it is refused.
pub const MAX_DEVICES: usize = 128;

/// A device as NCCL indexes it: one physical device, or a virtual NIC over several.
#[derive(Debug)]
pub struct VDevice {
    pub index: usize,
    /// `a+b+...` of the members' names (a physical device: its own name).
    pub name: String,
    name_c: CString,
    /// The physical devices behind it, in member order (QP `q` runs on member `q % len`).
    pub members: Vec<&'static NetDevice>,
    /// Made by `makeVDevice` (even with one member), not one of the physical devices.
    pub is_virtual: bool,
}

impl VDevice {
    /// The first member: its port, PCI path and GUID stand for the device, as in NCCL.
    pub fn first(&self) -> &'static NetDevice {
        self.members[0]
    }

    /// How the device is named in messages: `rxe0:1` for a physical device, `rxe0+rxe1` for a
    /// virtual one.
    pub fn label(&self) -> String {
        if self.is_virtual {
            self.name.clone()
        } else {
            format!("{}:{}", self.first().ibdev, self.first().port)
        }
    }

    /// Most bytes one request buffer may carry: the same on every device (a request's size is
    /// 32 bits on the wire), so the same on a virtual NIC.
    pub fn max_request_bytes(&self) -> u64 {
        plugin::MAX_REQUEST_BYTES
    }

    /// Most bytes one RDMA write may carry on every member (longer chunks go in pieces).
    pub fn max_write_bytes(&self) -> u32 {
        self.members
            .iter()
            .map(|m| m.max_write_bytes())
            .min()
            .unwrap_or(ferro_proto::plan::MIN_WRITE_LIMIT)
    }

    /// The properties NCCL reads: a physical device's own; for a virtual one, NCCL's rules:
    /// the name `a+b`, the summed speed, GPU memory support only when every member has it,
    /// the rest from the first member, and the member list.
    pub fn properties(&self) -> DeviceProps {
        let first = self.first().properties();
        if !self.is_virtual {
            return first;
        }
        let all = || self.members.iter().map(|m| m.properties());
        let rail_planes: Vec<crate::rails::RailPlane> =
            self.members.iter().map(|m| m.rail_plane).collect();
        let (rail_id, plane_id) = crate::rails::fused(&rail_planes);
        DeviceProps {
            name: self.name_c.as_ptr().cast_mut(),
            ptr_support: all().fold(first.ptr_support, |acc, p| acc & p.ptr_support),
            force_flush: all().any(|p| p.force_flush),
            speed: all().fold(0i32, |acc, p| acc.saturating_add(p.speed)),
            max_comms: all().map(|p| p.max_comms).min().unwrap_or(first.max_comms),
            members: self.members.iter().map(|m| m.index).collect(),
            max_p2p_bytes: self.max_request_bytes(),
            rail_id,
            plane_id,
            ..first
        }
    }
}

/// What [`decide`] needs to know of a physical device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberFacts {
    pub name: String,
    pub ethernet: bool,
}

/// Why a `makeVDevice` is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FuseError {
    Disabled,
    Count { ndevs: i32, max: usize },
    NotPhysical { dev: i32, nphys: usize },
    Repeated { dev: usize },
    LinkLayers { a: String, b: String },
    Full,
}

impl std::fmt::Display for FuseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FuseError::Disabled => write!(f, "NCCL_IB_MERGE_NICS=0 forbids fusing devices"),
            FuseError::Count { ndevs, max } => {
                write!(
                    f,
                    "{ndevs} members asked for; this ABI version takes 1 to {max}"
                )
            }
            FuseError::NotPhysical { dev, nphys } => write!(
                f,
                "member {dev} is not a physical device (those are 0 to {})",
                nphys.saturating_sub(1)
            ),
            FuseError::Repeated { dev } => write!(f, "member {dev} is named twice"),
            FuseError::LinkLayers { a, b } => write!(
                f,
                "{a} and {b} have different link layers (InfiniBand and RoCE cannot share a connection)"
            ),
            FuseError::Full => write!(f, "the device list is full ({MAX_DEVICES} devices)"),
        }
    }
}

/// Whether the physical devices `req` (NCCL's `devs[0..ndevs]`) may be fused, given the
/// physical devices' facts, the ABI version's member limit and `NCCL_IB_MERGE_NICS`.
pub fn decide(
    req: &[i32],
    phys: &[MemberFacts],
    max_members: usize,
    merge_nics: bool,
    have: usize,
) -> std::result::Result<Vec<usize>, FuseError> {
    if !merge_nics && req.len() > 1 {
        return Err(FuseError::Disabled);
    }
    if req.is_empty() || req.len() > max_members.min(MAX_DEVS) {
        return Err(FuseError::Count {
            ndevs: req.len() as i32,
            max: max_members.min(MAX_DEVS),
        });
    }
    let mut out: Vec<usize> = Vec::with_capacity(req.len());
    for &d in req {
        let i =
            usize::try_from(d)
                .ok()
                .filter(|i| *i < phys.len())
                .ok_or(FuseError::NotPhysical {
                    dev: d,
                    nphys: phys.len(),
                })?;
        if out.contains(&i) {
            return Err(FuseError::Repeated { dev: i });
        }
        if let Some(&f) = out.first() {
            if phys[f].ethernet != phys[i].ethernet {
                return Err(FuseError::LinkLayers {
                    a: phys[f].name.clone(),
                    b: phys[i].name.clone(),
                });
            }
        }
        out.push(i);
    }
    if have >= MAX_DEVICES {
        return Err(FuseError::Full);
    }
    Ok(out)
}

static TABLE: OnceLock<RwLock<Vec<&'static VDevice>>> = OnceLock::new();

/// The device list, seeded with the physical devices on first use after a successful `init`.
fn table() -> Result<&'static RwLock<Vec<&'static VDevice>>> {
    let p = plugin::get()?;
    Ok(TABLE.get_or_init(|| {
        let list = p
            .devices
            .iter()
            .map(|d| {
                &*Box::leak(Box::new(VDevice {
                    index: d.index,
                    name: d.ibdev.clone(),
                    name_c: CString::new(d.ibdev.clone()).unwrap_or_default(),
                    members: vec![d],
                    is_virtual: false,
                }))
            })
            .collect();
        RwLock::new(list)
    }))
}

/// Devices NCCL may use: physical, then virtual (0 when `init` has not succeeded).
pub fn count() -> usize {
    table().map_or(0, |t| t.read().map_or(0, |l| l.len()))
}

/// The device with NCCL index `dev`.
pub fn get(dev: i32) -> Result<&'static VDevice> {
    let t = table()?;
    let l = t
        .read()
        .map_err(|_| Error::Internal("device list poisoned".into()))?;
    usize::try_from(dev)
        .ok()
        .and_then(|i| l.get(i).copied())
        .ok_or_else(|| {
            Error::Usage(format!(
                "device index {dev} out of range (have {})",
                l.len()
            ))
        })
}

/// `makeVDevice`: appends a virtual NIC over the physical devices `req` and returns its index.
/// `max_members` is the ABI version's limit (4 before v12, 8 from v12).
pub fn make(req: &[i32], max_members: usize) -> Result<usize> {
    let p = plugin::get()?;
    let facts: Vec<MemberFacts> = p
        .devices
        .iter()
        .map(|d| MemberFacts {
            name: d.ibdev.clone(),
            ethernet: d.link_layer.is_ethernet(),
        })
        .collect();
    let t = table()?;
    let mut l = t
        .write()
        .map_err(|_| Error::Internal("device list poisoned".into()))?;
    let members = decide(req, &facts, max_members, p.config.merge_nics, l.len())
        .map_err(|e| Error::Usage(format!("makeVDevice of devices {req:?} refused: {e}")))?;
    let members: Vec<&'static NetDevice> = members.iter().map(|&i| &p.devices[i]).collect();
    let name = members
        .iter()
        .map(|m| m.ibdev.as_str())
        .collect::<Vec<_>>()
        .join("+");
    let index = l.len();
    let v: &'static VDevice = Box::leak(Box::new(VDevice {
        index,
        name_c: CString::new(name.clone()).unwrap_or_default(),
        name,
        members,
        is_virtual: true,
    }));
    l.push(v);
    info!(
        INIT | NET,
        "virtual NIC [{index}] {}: members {}, {} Mbps",
        v.name,
        v.members
            .iter()
            .map(|m| format!("[{}]{}:{}", m.index, m.ibdev, m.port))
            .collect::<Vec<_>>()
            .join(" "),
        v.properties().speed
    );
    Ok(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phys() -> Vec<MemberFacts> {
        let f = |name: &str, ethernet| MemberFacts {
            name: name.into(),
            ethernet,
        };
        vec![
            f("mlx5_0", true),
            f("mlx5_1", true),
            f("mlx5_2", false),
            f("mlx5_3", true),
        ]
    }

    #[test]
    fn devices_of_one_link_layer_fuse_in_the_order_given() {
        assert_eq!(decide(&[1, 0], &phys(), 4, true, 4), Ok(vec![1, 0]));
        assert_eq!(decide(&[3, 0, 1], &phys(), 8, true, 9), Ok(vec![3, 0, 1]));
    }

    #[test]
    fn a_single_device_group_is_accepted_as_nccl_2_24_to_2_26_ask_for_it() {
        assert_eq!(decide(&[2], &phys(), 4, true, 4), Ok(vec![2]));
        assert_eq!(decide(&[2], &phys(), 4, false, 4), Ok(vec![2]));
    }

    #[test]
    fn infiniband_and_roce_members_are_refused_naming_both() {
        let e = decide(&[0, 2], &phys(), 4, true, 4).unwrap_err();
        assert_eq!(
            e,
            FuseError::LinkLayers {
                a: "mlx5_0".into(),
                b: "mlx5_2".into()
            }
        );
        assert!(e.to_string().contains("mlx5_0 and mlx5_2"));
    }

    #[test]
    fn counts_beyond_the_version_limit_virtual_or_repeated_members_are_refused() {
        assert!(matches!(
            decide(&[0, 1, 3, 0, 1], &phys(), 4, true, 4),
            Err(FuseError::Count { ndevs: 5, max: 4 })
        ));
        assert!(matches!(
            decide(&[], &phys(), 4, true, 4),
            Err(FuseError::Count { .. })
        ));
        assert_eq!(
            decide(&[0, 4], &phys(), 4, true, 5),
            Err(FuseError::NotPhysical { dev: 4, nphys: 4 }),
            "index 4 is a virtual device"
        );
        assert!(matches!(
            decide(&[0, -1], &phys(), 4, true, 4),
            Err(FuseError::NotPhysical { dev: -1, .. })
        ));
        assert_eq!(
            decide(&[1, 1], &phys(), 4, true, 4),
            Err(FuseError::Repeated { dev: 1 })
        );
    }

    #[test]
    fn merging_can_be_switched_off_and_the_list_fills_up() {
        assert_eq!(
            decide(&[0, 1], &phys(), 4, false, 4),
            Err(FuseError::Disabled)
        );
        assert_eq!(
            decide(&[0, 1], &phys(), 4, true, MAX_DEVICES),
            Err(FuseError::Full)
        );
    }
}
