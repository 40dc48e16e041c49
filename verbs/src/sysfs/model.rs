//! What discovery reads about a device and its ports: [`SysDevice`], [`SysPort`], port state,
//! link layer and rate.

use super::GidEntry;
use super::PciAddr;
use super::parse::leading_number;
pub use crate::gid::types::LinkLayer;
use std::fmt;
use std::path::{Path, PathBuf};

/// One RDMA device from `class/infiniband/<name>`.
#[derive(Debug, Clone, PartialEq)]
pub struct SysDevice {
    /// Device name, e.g. `mlx5_0` or `rxe0`.
    pub name: String,
    /// `node_guid`, parsed from `0011:2233:4455:6677` (big-endian as printed).
    pub node_guid: Option<u64>,
    /// `sys_image_guid`, same format as `node_guid`.
    pub sys_image_guid: Option<u64>,
    /// `node_type` as printed, e.g. `1: CA`.
    pub node_type: Option<String>,
    /// `fw_ver` as printed.
    pub fw_ver: Option<String>,
    /// Canonical path of the PCI function behind the device (`device` link), `None` for virtual
    /// devices such as rxe.
    pub pci_path: Option<PathBuf>,
    /// Ports, sorted by number.
    pub ports: Vec<SysPort>,
    /// Network interface the device is layered on (`parent` file, exposed by rxe).
    pub parent_netdev: Option<String>,
    /// Problems met while reading this device (unreadable or unparsable files), one line each,
    /// naming the field. Missing optional files are not problems and are not noted.
    pub notes: Vec<String>,
}

impl SysDevice {
    /// The PCI address (`0000:03:00.0`), i.e. the last component of [`Self::pci_path`].
    pub fn pci_address(&self) -> Option<&str> {
        self.pci_path
            .as_deref()
            .and_then(Path::file_name)
            .and_then(|n| n.to_str())
            .filter(|n| PciAddr::is_pci_addr(n))
    }

    /// The port with number `num`, if present.
    pub fn port(&self, num: u8) -> Option<&SysPort> {
        self.ports.iter().find(|p| p.num == num)
    }
}

/// One port from `class/infiniband/<dev>/ports/<n>`.
#[derive(Debug, Clone, PartialEq)]
pub struct SysPort {
    /// Port number (1-based).
    pub num: u8,
    /// Logical port state (`state`).
    pub state: PortState,
    /// Physical state as printed (`phys_state`, e.g. `5: LinkUp`).
    pub phys_state: Option<String>,
    /// Link layer (`link_layer`).
    pub link_layer: LinkLayer,
    /// Link rate (`rate`).
    pub rate: Option<Rate>,
    /// LID (`lid`, printed as hex); 0 on RoCE.
    pub lid: Option<u16>,
    /// Raw GID table, sorted by index. Holds every slot whose `gids/<i>` file exists and parses,
    /// zero GIDs included: callers filter.
    pub gids: Vec<GidEntry>,
    /// Netdev of the first GID entry that has one, else the device's `parent` netdev.
    pub netdev: Option<String>,
}

/// Logical port state (`enum ibv_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortState {
    /// 1: DOWN
    Down,
    /// 2: INIT
    Init,
    /// 3: ARMED
    Armed,
    /// 4: ACTIVE
    Active,
    /// 5: ACTIVE_DEFER
    ActiveDefer,
    /// Any other code; `Other(0)` also stands for "could not be read".
    Other(u8),
}

impl PortState {
    /// From the numeric code used by sysfs and by `ibv_port_attr::state`.
    pub fn from_code(code: u8) -> Self {
        match code {
            1 => Self::Down,
            2 => Self::Init,
            3 => Self::Armed,
            4 => Self::Active,
            5 => Self::ActiveDefer,
            n => Self::Other(n),
        }
    }

    /// From sysfs text such as `4: ACTIVE` (the leading number decides).
    pub fn parse(text: &str) -> Option<Self> {
        leading_number(text).map(Self::from_code)
    }

    /// Whether the port can carry traffic.
    pub fn is_active(self) -> bool {
        matches!(self, Self::Active)
    }
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Down => f.write_str("DOWN"),
            Self::Init => f.write_str("INIT"),
            Self::Armed => f.write_str("ARMED"),
            Self::Active => f.write_str("ACTIVE"),
            Self::ActiveDefer => f.write_str("ACTIVE_DEFER"),
            Self::Other(n) => write!(f, "state {n}"),
        }
    }
}

/// Link rate as printed by sysfs (`100 Gb/sec (4X EDR)`).
#[derive(Debug, Clone, PartialEq)]
pub struct Rate {
    /// Gigabits per second (first number of the text).
    pub gbps: f64,
    /// The text as printed (trimmed).
    pub text: String,
}

impl Rate {
    /// Parses `100 Gb/sec (4X EDR)`, `2.5 Gb/sec (1X SDR)`, ...
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let gbps: f64 = text.split_whitespace().next()?.parse().ok()?;
        if !gbps.is_finite() || gbps < 0.0 {
            return None;
        }
        Some(Self {
            gbps,
            text: text.to_string(),
        })
    }

    /// Megabits per second (rounded), the unit NCCL's `speed` property uses.
    pub fn mbps(&self) -> u32 {
        // `as` saturates for out-of-range floats; a link rate never gets near u32::MAX Mbps.
        (self.gbps * 1000.0).round() as u32
    }
}
