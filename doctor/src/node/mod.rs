//! "Is this node and this pod set up right for GPUDirect RDMA?": the checks of what GPU Operator,
//! Network Operator and SR-IOV setups get wrong.
//!
//! Same layers as the rest of the doctor: [`collect_node`] gathers [`NodeFacts`] from a `/sys`,
//! `/proc` and `/dev` root (so tests use fake trees) plus the interface addresses
//! (`getifaddrs`, passed in), and [`read_limits`] the locked-memory and `/dev/shm` facts the
//! report keeps with its host facts; [`node_checks`] turns both into [`Check`]s, each with its
//! evidence and its fix; the renderers show them (`text.rs`, `json.rs`).
//!
//! Concepts: [`gpu`] (NVIDIA kernel modules: open or proprietary, nvidia-peermem, nvidia-fs,
//! gdrdrv; which GPUDirect RDMA path NCCL would use), [`iommu`] (mode from the command line and
//! sysfs), [`pci`] (facts) and [`topology`] (NCCL distance, ACS, links, SR-IOV), [`pod`] (the
//! pod's view: interfaces, `/dev/infiniband`, container), [`limits`] (locked memory,
//! `CAP_IPC_LOCK` and `/dev/shm`: their one reader and their one judgement), [`nccl`] (the
//! installed NCCL and the plugin file it would load, read as ELF under the root) and [`policy`]
//! (`--gdr-policy`: whether no GPUDirect RDMA path fails or is host staging by design).

#[cfg(test)]
pub(crate) mod fake;
pub mod gpu;
pub mod iommu;
pub mod limits;
pub mod nccl;
pub mod pci;
pub mod pod;
pub mod policy;
pub mod render;
#[cfg(test)]
mod tests;
pub mod topology;

pub use gpu::{Flavor, NvidiaDriver};
pub use iommu::{IommuFacts, IommuState};
pub use limits::{Limits, Memlock, Shm, ShmProblem, read_limits};
pub use pci::{Distance, PciFn};
pub use pod::PodFacts;
pub use render::{check_json, node_json, render_node_text};

use ferro_dmabuf::{Kernel, Peermem};
use nccl_net_ferro::oob::IfAddr;
use std::path::{Path, PathBuf};

/// Where the facts are read from: `/sys`, `/proc` and `/dev` on a real host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    pub sys: PathBuf,
    pub proc: PathBuf,
    pub dev: PathBuf,
    /// The file system libraries are looked up in (`/` on a real host): `etc/ld.so.conf` and
    /// the library directories are read under it.
    pub fs: PathBuf,
}

impl Roots {
    /// The real host.
    pub fn system() -> Roots {
        Roots::under(Path::new("/"))
    }

    /// `<root>/sys`, `<root>/proc`, `<root>/dev` (a fake tree, or a host mounted elsewhere).
    pub fn under(root: &Path) -> Roots {
        Roots {
            sys: root.join("sys"),
            proc: root.join("proc"),
            dev: root.join("dev"),
            fs: root.to_path_buf(),
        }
    }
}

/// An RDMA device as the node and the pod see it.
#[derive(Debug, Clone, PartialEq)]
pub struct RdmaNic {
    pub name: String,
    /// Its PCI function; `None` for virtual devices (rxe, siw).
    pub pci: Option<PciFn>,
    /// Network interfaces of the function (`device/net/*`), in this network namespace.
    pub netdevs: Vec<String>,
    /// `uverbsN`, the character device libibverbs opens for it.
    pub uverbs: Option<String>,
    /// Whether `<dev>/infiniband/<uverbs>` exists (the device was given to this container).
    pub uverbs_present: bool,
}

/// A kernel module and its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    pub name: String,
    pub version: Option<String>,
}

/// Everything the node and pod checks look at.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFacts {
    pub roots: Roots,
    pub kernel: Kernel,
    pub nvidia: NvidiaDriver,
    pub peermem: Peermem,
    /// `nvidia_fs` (GPUDirect Storage), when loaded.
    pub nvidia_fs: Option<Module>,
    /// `gdrdrv` (GDRCopy), when loaded.
    pub gdrdrv: Option<Module>,
    /// `mlx_compat` is loaded: the RDMA stack is MOFED (DOCA-OFED), not the inbox drivers.
    pub mofed: Option<Module>,
    pub iommu: IommuFacts,
    pub gpus: Vec<PciFn>,
    pub nics: Vec<RdmaNic>,
    /// SR-IOV virtual functions of the RDMA NICs bound to `vfio-pci` (no netdev, no RDMA device).
    pub vfio_vfs: Vec<VfioVf>,
    pub pod: PodFacts,
    /// NCCL and the plugin it would load.
    pub nccl: nccl::NcclFacts,
}

/// A virtual function of an RDMA NIC bound to `vfio-pci` (handed to a VM or DPDK): it has no
/// netdev and no RDMA device, so NCCL cannot use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VfioVf {
    /// `0000:41:00.2`.
    pub bdf: String,
    /// Its physical function's RDMA device (`mlx5_0`).
    pub parent: String,
}

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// Set up right.
    Ok,
    /// Worth knowing (also: not applicable here).
    Info,
    /// Slower than it should be, or fragile.
    Warning,
    /// GPUDirect RDMA or the job's networking will not work as intended.
    Fail,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Info => "info",
            Status::Warning => "warning",
            Status::Fail => "fail",
        }
    }
}

/// One check's outcome: what, about which subject, the evidence it rests on, and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Stable identifier: `gdr.path`, `gds`, `gdrcopy`, `iommu`, `pcie.distance`, `pcie.acs`,
    /// `pcie.link`, `sriov`, `sriov.vfio`, `pod.socket_ifname`, `pod.uverbs`, `pod.memlock`,
    /// `pod.shm`, `pod.container`, `nccl.library`, `nccl.plugin`, `nccl.shadow`, `nccl.net`.
    pub id: &'static str,
    /// `node`, a device (`mlx5_0`), a GPU (`GPU 0000:41:00.0`), or a variable.
    pub subject: String,
    pub status: Status,
    /// One sentence.
    pub summary: String,
    /// The facts it rests on (files and values).
    pub evidence: Vec<String>,
    /// What to change, when something should change.
    pub fix: Option<String>,
}

impl Check {
    pub(crate) fn new(
        id: &'static str,
        subject: impl Into<String>,
        status: Status,
        summary: impl Into<String>,
    ) -> Check {
        Check {
            id,
            subject: subject.into(),
            status,
            summary: summary.into(),
            evidence: Vec::new(),
            fix: None,
        }
    }

    pub(crate) fn evidence(mut self, e: impl Into<String>) -> Check {
        self.evidence.push(e.into());
        self
    }

    pub(crate) fn fix(mut self, f: impl Into<String>) -> Check {
        self.fix = Some(f.into());
        self
    }
}

/// Gathers the node and pod facts from `roots`; `ifaddrs` are this network namespace's
/// addresses (`nccl_net_ferro::oob::interfaces()` on a real host), `env` the environment.
pub fn collect_node(
    roots: &Roots,
    ifaddrs: Vec<IfAddr>,
    env: &dyn Fn(&str) -> Option<String>,
) -> NodeFacts {
    let sys = &roots.sys;
    let module = |name: &str| {
        sys.join("module").join(name).is_dir().then(|| Module {
            name: name.to_string(),
            version: pci::read(&sys.join("module").join(name).join("version")),
        })
    };
    let gpus = pci::list_gpus(sys);
    // `class/infiniband_verbs/uverbsN/ibdev` names the device of every uverbs node, virtual
    // devices (rxe, which has no `device` link) included.
    let verbs_class = sys.join("class/infiniband_verbs");
    let uverbs_of: Vec<(String, String)> = pci::dir_names(&verbs_class)
        .into_iter()
        .filter_map(|u| pci::read(&verbs_class.join(&u).join("ibdev")).map(|d| (d, u)))
        .collect();
    let nics: Vec<RdmaNic> = pci::dir_names(&sys.join("class/infiniband"))
        .into_iter()
        .map(|name| {
            let link = pci::rdma_device_link(sys, &name);
            let uverbs = uverbs_of
                .iter()
                .find(|(d, _)| *d == name)
                .map(|(_, u)| u.clone())
                .or_else(|| {
                    pci::dir_names(&link.join("infiniband_verbs"))
                        .into_iter()
                        .find(|n| n.starts_with("uverbs"))
                });
            RdmaNic {
                pci: pci::read_pci_fn(sys, &link),
                netdevs: pci::dir_names(&link.join("net")),
                uverbs_present: uverbs
                    .as_ref()
                    .is_some_and(|u| roots.dev.join("infiniband").join(u).exists()),
                uverbs,
                name,
            }
        })
        .collect();
    let mut pci_fns: Vec<&PciFn> = gpus.iter().collect();
    pci_fns.extend(nics.iter().filter_map(|n| n.pci.as_ref()));
    NodeFacts {
        kernel: ferro_dmabuf::host::read_kernel(&roots.proc),
        nvidia: gpu::read_nvidia(roots),
        peermem: ferro_dmabuf::host::detect_peermem(sys),
        nvidia_fs: module("nvidia_fs").map(|mut m| {
            if m.version.is_none() {
                m.version = gpu::nvidia_fs_proc_version(&roots.proc);
            }
            m
        }),
        gdrdrv: module("gdrdrv"),
        mofed: module("mlx_compat"),
        iommu: iommu::read_iommu(roots, &pci_fns),
        pod: pod::read_pod(roots, ifaddrs, env),
        nccl: nccl::collect_nccl(roots, env, &nccl::elf::read_elf),
        vfio_vfs: pci::vfio_vfs(sys, &nics),
        gpus,
        nics,
        roots: roots.clone(),
    }
}

/// Every check, in display order; `limits` (read by [`read_limits`]) are judged among the pod
/// checks.
pub fn node_checks(f: &NodeFacts, limits: &Limits) -> Vec<Check> {
    let mut out = gpu::gdr_checks(f);
    out.push(iommu::iommu_check(f));
    out.extend(gpu::gds_checks(f));
    out.extend(topology::topology_checks(f));
    out.extend(pod::pod_checks(f, limits));
    out.extend(nccl::nccl_checks(&f.nccl));
    out
}

/// The worst status among the checks (`Ok` when there are none).
pub fn worst(checks: &[Check]) -> Status {
    checks.iter().map(|c| c.status).max().unwrap_or(Status::Ok)
}
