//! The report: plain data the collection fills and every verdict and renderer reads.

use crate::*;
use ferro_verbs::gid::GidChoice;
use ferro_verbs::loader::Capabilities;
use ferro_verbs::sysfs::{GidEntry, IommuMode, LinkLayer, PortState};
use nccl_net_ferro::config::{Config, VariableRow};
use std::path::PathBuf;

/// Everything the doctor found; plain data (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// `PLUGIN_NAME`.
    pub plugin_name: String,
    /// `VERSION`.
    pub plugin_version: String,
    /// The effective configuration, as the plugin would read it.
    pub config: Config,
    /// Rejected settings.
    pub config_warnings: Vec<String>,
    /// Every variable NCCL 2.30's IB transport reads, its value here and how the plugin stands
    /// to it (the table in `docs/configuration.md`).
    pub nccl_variables: Vec<VariableRow>,
    /// libibverbs.
    pub library: Library,
    /// The sysfs tree that was read.
    pub sysfs_root: PathBuf,
    /// Devices libibverbs lists, then devices only sysfs shows (`listed_by_verbs == false`).
    pub devices: Vec<Device>,
    /// Failures of the enumeration itself.
    pub enumeration_errors: Vec<String>,
    /// Host facts.
    pub host: HostFacts,
    /// GPUDirect RDMA, node and pod facts (`None`: not collected).
    pub node: Option<NodeFacts>,
    /// Whether this node needs a GPUDirect RDMA path (`--gdr-policy`; set by the caller, the
    /// collection leaves the default `required`).
    pub gdr_policy: GdrPolicy,
}

/// The libibverbs the plugin would load.
#[derive(Debug, Clone, PartialEq)]
pub struct Library {
    /// What was opened, or attempted: `libibverbs.so.1` or the override.
    pub name: String,
    /// `FERRO_IBVERBS_LIB` when set (non-empty).
    pub override_value: Option<String>,
    /// Its optional entry points, or why it could not be loaded.
    pub outcome: Result<Capabilities, LibraryError>,
}

/// Why libibverbs could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibraryError {
    /// One sentence (the loader's message).
    pub message: String,
    /// What to do about it, when the message does not already say.
    pub hint: Option<String>,
}

/// One RDMA device.
#[derive(Debug, Clone, PartialEq)]
pub struct Device {
    pub name: String,
    /// False for devices sysfs shows but libibverbs does not list.
    pub listed_by_verbs: bool,
    pub node_guid: Option<u64>,
    pub sys_image_guid: Option<u64>,
    pub fw_ver: Option<String>,
    pub max_qp: Option<i32>,
    /// Canonical PCI path; `None` for virtual devices (rxe, siw).
    pub pci_path: Option<String>,
    /// Why the device cannot be used at all (open/query failure, not listed by libibverbs).
    pub error: Option<String>,
    /// Problems met reading sysfs.
    pub notes: Vec<String>,
    /// GPUDirect RDMA for this device in one sentence (the plugin's INFO line), when known.
    pub gdr: Option<String>,
    /// `NCCL_PTR_*` bits the plugin would advertise for this device.
    pub ptr_support: Option<i32>,
    pub ports: Vec<Port>,
}

/// One port.
#[derive(Debug, Clone, PartialEq)]
pub struct Port {
    pub num: u8,
    pub state: PortState,
    pub link_layer: LinkLayer,
    pub speed_mbps: Option<u32>,
    /// `"1X SDR"`, `"4X EDR"`; empty when unknown.
    pub speed_text: String,
    pub active_mtu: Option<u32>,
    pub lid: u16,
    pub netdev: Option<String>,
    /// The GID table from sysfs, zero entries included (rendering skips them).
    pub gids: Vec<GidEntry>,
    /// The entry the plugin would use, or why none.
    pub gid: Result<GidChoice, String>,
    /// The plugin's verdict for this port (`Err`: why it is not exposed to NCCL).
    pub usable: Result<(), String>,
}

/// Facts about the host outside the RDMA devices.
#[derive(Debug, Clone, PartialEq)]
pub struct HostFacts {
    /// Locked memory, `CAP_IPC_LOCK` and `/dev/shm`, read under the roots by
    /// [`node::read_limits`] and judged only by the `pod.memlock` and `pod.shm` checks.
    pub limits: Limits,
    /// From `/proc/cmdline`; `None` when unreadable.
    pub iommu: Option<IommuMode>,
    /// Entries of `/dev/infiniband`; `None` when it does not exist.
    pub dev_infiniband: Option<Vec<String>>,
    pub gpu: GpuFacts,
    pub env: NcclEnv,
}

/// Kernel modules that matter for GPUDirect RDMA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GpuFacts {
    /// `nvidia` is loaded.
    pub nvidia_driver: bool,
    /// `nvidia_peermem` (or the older `nv_peer_mem`) is loaded.
    pub peermem: bool,
}

/// NCCL variables as seen by this process.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NcclEnv {
    pub net_plugin: Option<String>,
    pub net: Option<String>,
    pub ib_hca: Option<String>,
    pub socket_ifname: Option<String>,
}

impl NcclEnv {
    /// Pairs of (variable, value) in [`NCCL_ENV_VARS`] order.
    pub fn pairs(&self) -> [(&'static str, Option<&str>); 4] {
        [
            (NCCL_ENV_VARS[0], self.net_plugin.as_deref()),
            (NCCL_ENV_VARS[1], self.net.as_deref()),
            (NCCL_ENV_VARS[2], self.ib_hca.as_deref()),
            (NCCL_ENV_VARS[3], self.socket_ifname.as_deref()),
        ]
    }
}

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Will break or slow down real jobs.
    Warning,
    /// Worth knowing; not a problem by itself.
    Note,
}

/// A remark about a host fact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub level: Level,
    pub text: String,
}

impl Finding {
    pub(crate) fn warning(text: impl Into<String>) -> Self {
        Finding {
            level: Level::Warning,
            text: text.into(),
        }
    }

    pub(crate) fn note(text: impl Into<String>) -> Self {
        Finding {
            level: Level::Note,
            text: text.into(),
        }
    }
}
