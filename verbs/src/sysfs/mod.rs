//! RDMA device discovery from a sysfs tree (`/sys/class/infiniband`).
//!
//! Every function takes the sysfs root (normally `/sys`) as a parameter, so the whole module can be
//! exercised against a fake tree built in a temporary directory.
//!
//! Reading is forgiving: a host without RDMA (no `class/infiniband`) is an empty list, and a device
//! whose individual files cannot be read or parsed still yields an entry, with the problem recorded
//! in [`SysDevice::notes`]. Only a failure to list `class/infiniband` itself is an error.
//!
//! The module also holds a few pure helpers used with `ibv_query_port` results (link speed
//! decoding) and host facts for diagnostics (IOMMU mode from the kernel command line).
//!
//! - [`error`]: the one error (listing `class/infiniband` failed);
//! - [`model`]: devices, ports, port state, link layer, rate;
//! - [`read`]: reading the tree;
//! - [`parse`]: small parsers of sysfs text;
//! - [`pci`]: PCI addresses ([`PciAddr`]), the one parser of `dddd:bb:dd.f` (the doctor uses it too);
//! - [`speed`]: link speed decoding;
//! - [`host`]: the IOMMU mode;
//! - GID types live with GID selection in [`crate::gid`] and are re-exported here.

mod error;
mod host;
mod model;
mod parse;
pub mod pci;
mod read;
mod speed;

#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) mod testutil;

pub use crate::gid::types::{AddrFamily, GidEntry, GidType, format_gid_raw, parse_gid};
pub use error::SysfsError;
pub use host::{IommuMode, iommu_mode, read_cmdline};
pub use model::{LinkLayer, PortState, Rate, SysDevice, SysPort};
pub use parse::{format_guid, parse_guid};
pub use pci::{PciAddr, PciAddrError};
pub use read::{list_devices, list_devices_with, read_device, read_device_with};
pub use speed::{ib_speed_mbps, lane_speed_mbps, speed_name, width_lanes};
