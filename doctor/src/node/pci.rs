//! PCIe facts read from sysfs (no driver needed): GPUs and RDMA NICs, where they sit in the PCI
//! tree, their links, ACS on the bridges above them, IOMMU groups and SR-IOV parents; and the
//! distance between a NIC and a GPU in NCCL's terms.
//!
//! NCCL builds its topology from the same sysfs paths: walking up from a device it skips one
//! level and keeps the next (so a PCIe switch's downstream and upstream ports become one switch
//! node) until it reaches a component that is not a PCI address, the root complex, which it
//! attaches to the CPU of the device's NUMA node. The path between a NIC and a GPU is then:
//! `PIX` through one switch, `PXB` through several switches, `PHB` through the CPU (root
//! complex), `SYS` across CPUs (NUMA nodes).

use ferro_verbs::sysfs::PciAddr;
use std::fmt;
use std::path::{Path, PathBuf};

/// PCI vendor ID of NVIDIA.
pub const NVIDIA_VENDOR: u16 = 0x10de;
/// ACS control bits that force peer-to-peer traffic up to the root complex: P2P Request
/// Redirect (bit 2) and P2P Completion Redirect (bit 3).
pub const ACS_REDIRECT_BITS: u16 = 0b1100;
/// Extended capability ID of ACS.
const ACS_CAP_ID: u32 = 0x000d;

/// A PCIe link: current and maximum speed (GT/s) and width (lanes).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Link {
    pub speed_gts: Option<f64>,
    pub max_speed_gts: Option<f64>,
    pub width: Option<u32>,
    pub max_width: Option<u32>,
}

/// A bridge on the way up from a device (switch port or root port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bridge {
    pub bdf: PciAddr,
    /// The ACS control register, when config space shows an ACS capability (`None`: no ACS
    /// capability or config space not readable beyond 256 bytes, e.g. without root).
    pub acs_ctl: Option<u16>,
}

/// One PCI function (a GPU or the function behind an RDMA device).
#[derive(Debug, Clone, PartialEq)]
pub struct PciFn {
    /// `0000:41:00.0`.
    pub bdf: PciAddr,
    /// Path components under `devices/`, root complex first, this function last:
    /// `["pci0000:40", "0000:40:01.1", "0000:41:00.0"]`.
    pub path: Vec<String>,
    pub vendor: Option<u16>,
    pub class: Option<u32>,
    /// `numa_node`; `None` when unknown (-1 or unreadable).
    pub numa: Option<i32>,
    pub link: Link,
    /// `iommu_group/type`: `identity`, `DMA`, `DMA-FQ`, ...; `None` without an IOMMU group.
    pub iommu_group_type: Option<String>,
    /// SR-IOV: the physical function this virtual function belongs to (`physfn` link).
    pub physfn: Option<String>,
    /// Kernel driver bound to it (`driver` link): `mlx5_core`, `nvidia`, ...
    pub driver: Option<String>,
    /// Bridges from the device up to the root complex, nearest first.
    pub bridges: Vec<Bridge>,
}

/// NCCL's path types (best first), in NCCL's order: the ones a GPU-to-NIC PCIe path can have
/// (`LOC`, `PIX`, `PXB`, `PHB`, `SYS`) and those `NCCL_NET_GDR_LEVEL` may also name (`NVL`,
/// `NVB`, `C2C`, `P2C`, `PXN`), so a level compares with a distance as NCCL compares them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Distance {
    /// Same device.
    Loc,
    /// Over NVLink.
    Nvl,
    /// Over NVLink through another GPU.
    Nvb,
    /// Over the CPU-to-GPU chip link (Grace: NVLink-C2C).
    C2c,
    /// Through one PCIe switch.
    Pix,
    /// Through several PCIe switches, not through the CPU.
    Pxb,
    /// PCIe to the CPU, then the chip link (C2C) to the GPU.
    P2c,
    /// Through another GPU's PCIe path (PXN: NVLink to a GPU near the NIC).
    Pxn,
    /// Through the CPU's root complex (same NUMA node).
    Phb,
    /// Across the interconnect between CPUs (NUMA nodes).
    Sys,
}

impl Distance {
    /// Every path type a level may name, in NCCL's order.
    pub const ALL: [Distance; 10] = [
        Distance::Loc,
        Distance::Nvl,
        Distance::Nvb,
        Distance::C2c,
        Distance::Pix,
        Distance::Pxb,
        Distance::P2c,
        Distance::Pxn,
        Distance::Phb,
        Distance::Sys,
    ];
    /// The levels of the old numeric form, by number (4 and above: `SYS`).
    const NUMBERED: [Distance; 5] = [
        Distance::Loc,
        Distance::Pix,
        Distance::Pxb,
        Distance::Phb,
        Distance::Sys,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Distance::Loc => "LOC",
            Distance::Nvl => "NVL",
            Distance::Nvb => "NVB",
            Distance::C2c => "C2C",
            Distance::Pix => "PIX",
            Distance::Pxb => "PXB",
            Distance::P2c => "P2C",
            Distance::Pxn => "PXN",
            Distance::Phb => "PHB",
            Distance::Sys => "SYS",
        }
    }

    /// `NCCL_NET_GDR_LEVEL` as NCCL reads it: a path type's exact name (upper case, no
    /// surrounding space: `sys` is not `SYS`), else, when the value starts with a digit, the
    /// number its leading digits make in C's notation (`0x` hexadecimal, a leading `0` octal)
    /// as an old level: 0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and above SYS. Anything else is not a level
    /// (NCCL ignores it and keeps its default).
    pub fn parse_level(text: &str) -> Option<Distance> {
        if let Some(d) = Distance::ALL.into_iter().find(|d| d.name() == text) {
            return Some(d);
        }
        if !text.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        let n = c_leading_number(text);
        Some(Distance::NUMBERED[usize::try_from(n).unwrap_or(usize::MAX).min(4)])
    }
}

/// The value of the leading digits of `text` as C's `strtol(text, NULL, 0)` reads them (base
/// from the prefix; saturating instead of overflowing).
fn c_leading_number(text: &str) -> u64 {
    let (digits, radix) = if let Some(hex) = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .filter(|h| h.starts_with(|c: char| c.is_ascii_hexdigit()))
    {
        (hex, 16)
    } else if text.len() > 1 && text.starts_with('0') {
        (&text[1..], 8)
    } else {
        (text, 10)
    };
    digits
        .chars()
        .map_while(|c| c.to_digit(radix))
        .fold(0u64, |n, d| {
            n.saturating_mul(u64::from(radix))
                .saturating_add(u64::from(d))
        })
}

impl fmt::Display for Distance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Reads one PCI function through `<sys>/bus/pci/devices/<bdf>` (or any link to its directory).
pub fn read_pci_fn(sys: &Path, link: &Path) -> Option<PciFn> {
    let real = std::fs::canonicalize(link).ok()?;
    let devices = std::fs::canonicalize(sys.join("devices")).ok()?;
    let rel = real.strip_prefix(&devices).ok()?;
    let path: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let bdf: PciAddr = path.last()?.parse().ok()?;
    let hex = |name: &str| read(&real.join(name)).and_then(|s| parse_hex(&s));
    let link_info = Link {
        speed_gts: read(&real.join("current_link_speed")).and_then(|s| parse_speed(&s)),
        max_speed_gts: read(&real.join("max_link_speed")).and_then(|s| parse_speed(&s)),
        width: read(&real.join("current_link_width")).and_then(|s| s.parse().ok()),
        max_width: read(&real.join("max_link_width")).and_then(|s| s.parse().ok()),
    };
    let name_of = |l: &str| {
        std::fs::canonicalize(real.join(l))
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
    };
    // Bridges: every PCI-address component above the device, nearest first.
    let mut bridges = Vec::new();
    let mut dir = real.clone();
    for comp in path.iter().rev().skip(1) {
        dir.pop();
        let Ok(bdf) = comp.parse::<PciAddr>() else {
            break;
        };
        bridges.push(Bridge {
            bdf,
            acs_ctl: std::fs::read(dir.join("config"))
                .ok()
                .and_then(|c| acs_control(&c)),
        });
    }
    Some(PciFn {
        bdf,
        vendor: hex("vendor").and_then(|v| u16::try_from(v).ok()),
        class: hex("class"),
        numa: read(&real.join("numa_node"))
            .and_then(|s| s.parse::<i32>().ok())
            .filter(|n| *n >= 0),
        link: link_info,
        iommu_group_type: read(&real.join("iommu_group/type")),
        physfn: name_of("physfn"),
        driver: name_of("driver"),
        path,
        bridges,
    })
}

/// Every NVIDIA display or 3D controller under `<sys>/bus/pci/devices`, sorted by address.
pub fn list_gpus(sys: &Path) -> Vec<PciFn> {
    let dir = sys.join("bus/pci/devices");
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut gpus: Vec<PciFn> = rd
        .filter_map(Result::ok)
        .filter_map(|e| read_pci_fn(sys, &e.path()))
        .filter(|f| f.vendor == Some(NVIDIA_VENDOR) && f.class.is_some_and(|c| c >> 16 == 0x03))
        .collect();
    gpus.sort_by_key(|g| g.bdf);
    gpus
}

/// The NCCL distance between two functions (see the module documentation).
pub fn distance(a: &PciFn, b: &PciFn) -> Distance {
    if a.bdf == b.bdf {
        return Distance::Loc;
    }
    let (sa, ra) = nccl_parents(&a.path);
    let (sb, rb) = nccl_parents(&b.path);
    // The nearest switch both hang under.
    let common = sa.iter().position(|s| sb.contains(s));
    match common {
        Some(i) if ra == rb => {
            let j = sb.iter().position(|s| *s == sa[i]).unwrap_or(usize::MAX);
            if i == 0 && j == 0 {
                Distance::Pix
            } else {
                Distance::Pxb
            }
        }
        _ if ra == rb || a.numa.unwrap_or(0) == b.numa.unwrap_or(0) => Distance::Phb,
        _ => Distance::Sys,
    }
}

/// The switch nodes NCCL sees above a device (nearest first) and its root complex.
fn nccl_parents(path: &[String]) -> (Vec<String>, String) {
    let mut switches = Vec::new();
    let mut i = path.len().saturating_sub(1);
    loop {
        // Skip one level (a downstream port, or the root port), keep the next.
        if i < 2 || !PciAddr::is_pci_addr(&path[i - 1]) || !PciAddr::is_pci_addr(&path[i - 2]) {
            let root = path
                .iter()
                .find(|c| !PciAddr::is_pci_addr(c))
                .cloned()
                .unwrap_or_default();
            return (switches, root);
        }
        i -= 2;
        switches.push(path[i].clone());
    }
}

/// The bridges between two functions that lie under their nearest common ancestor (where
/// peer-to-peer traffic turns around), the common one included when it is a bridge.
pub fn bridges_between<'a>(a: &'a PciFn, b: &'a PciFn) -> Vec<&'a Bridge> {
    let shared = a
        .path
        .iter()
        .zip(&b.path)
        .take_while(|(x, y)| x == y)
        .count();
    let mut out: Vec<&Bridge> = Vec::new();
    for f in [a, b] {
        // bridges[k] is path[len - 2 - k].
        for (k, br) in f.bridges.iter().enumerate() {
            let pos = f.path.len() - 2 - k;
            if pos + 1 >= shared && !out.iter().any(|x| x.bdf == br.bdf) {
                out.push(br);
            }
        }
    }
    out
}

/// The ACS control register from a config-space dump (extended capabilities start at 0x100).
pub fn acs_control(config: &[u8]) -> Option<u16> {
    let u32_at = |o: usize| {
        config
            .get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let mut off = 0x100usize;
    for _ in 0..64 {
        let header = u32_at(off)?;
        if header == 0 || header == u32::MAX {
            return None;
        }
        if header & 0xffff == ACS_CAP_ID {
            let b = config.get(off + 6..off + 8)?;
            return Some(u16::from_le_bytes([b[0], b[1]]));
        }
        let next = ((header >> 20) & 0xffc) as usize;
        if next < 0x100 {
            return None;
        }
        off = next;
    }
    None
}

/// `16.0 GT/s PCIe` → 16.0; `Unknown` → `None`.
pub fn parse_speed(s: &str) -> Option<f64> {
    s.split_whitespace().next()?.parse().ok()
}

fn parse_hex(s: &str) -> Option<u32> {
    u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
}

pub(crate) fn read(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Names of the entries of a directory, sorted (empty when it does not exist).
pub(crate) fn dir_names(p: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(p)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// `<sys>/class/infiniband/<dev>/device`, the link to the device's PCI function.
pub(crate) fn rdma_device_link(sys: &Path, dev: &str) -> PathBuf {
    sys.join("class/infiniband").join(dev).join("device")
}

/// The SR-IOV virtual functions of the RDMA NICs' physical functions (their `virtfnN` links)
/// that are bound to `vfio-pci`.
pub(crate) fn vfio_vfs(sys: &Path, nics: &[super::RdmaNic]) -> Vec<super::VfioVf> {
    let mut out = Vec::new();
    for n in nics {
        let Some(pf) = &n.pci else { continue };
        let dir = sys.join("bus/pci/devices").join(pf.bdf.to_string());
        for entry in dir_names(&dir)
            .into_iter()
            .filter(|e| e.starts_with("virtfn"))
        {
            let vf = dir.join(&entry);
            let driver = std::fs::canonicalize(vf.join("driver"))
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
            let bdf = std::fs::canonicalize(&vf)
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
            if let (Some("vfio-pci"), Some(bdf)) = (driver.as_deref(), bdf) {
                out.push(super::VfioVf {
                    bdf,
                    parent: n.name.clone(),
                });
            }
        }
    }
    out.sort_by(|a, b| a.bdf.cmp(&b.bdf));
    out.dedup();
    out
}
