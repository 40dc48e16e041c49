//! The NVIDIA side of GPUDirect: which kernel modules are loaded (open or proprietary driver,
//! nvidia-peermem, nvidia-fs, gdrdrv) and, per RDMA device, which GPUDirect RDMA path NCCL would
//! use: DMA-BUF (kernel >= 5.12, open kernel modules, a provider that takes DMA-BUF) or
//! nvidia-peermem; NCCL tries DMA-BUF first when both work.

use super::*;
use ferro_dmabuf::host::DMABUF_MIN_KERNEL;

/// Which NVIDIA kernel modules are loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// The open GPU kernel modules (dual MIT/GPL): CUDA offers DMA-BUF.
    Open,
    /// The proprietary modules: no DMA-BUF export for RDMA, only nvidia-peermem.
    Proprietary,
    Unknown,
}

impl Flavor {
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Open => "open",
            Flavor::Proprietary => "proprietary",
            Flavor::Unknown => "unknown",
        }
    }
}

/// The NVIDIA kernel driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvidiaDriver {
    /// `<sys>/module/nvidia` exists.
    pub loaded: bool,
    pub version: Option<String>,
    pub flavor: Flavor,
    /// What the flavor was read from.
    pub evidence: Vec<String>,
}

/// Reads `<proc>/driver/nvidia/version` (its first line names the open modules as "Open Kernel
/// Module") and `<sys>/module/nvidia/{version,taint}` (`P` in the taint: a proprietary license).
pub fn read_nvidia(roots: &Roots) -> NvidiaDriver {
    let module = roots.sys.join("module/nvidia");
    let loaded = module.is_dir();
    let mut evidence = Vec::new();
    let proc_version = pci::read(&roots.proc.join("driver/nvidia/version"));
    let first = proc_version
        .as_deref()
        .and_then(|t| t.lines().next())
        .map(str::to_string);
    let mut flavor = Flavor::Unknown;
    if let Some(line) = &first {
        evidence.push(format!("/proc/driver/nvidia/version: {}", squash(line)));
        if line.contains("Open Kernel Module") {
            flavor = Flavor::Open;
        } else if line.contains("Kernel Module") {
            flavor = Flavor::Proprietary;
        }
    }
    if let Some(taint) = pci::read(&module.join("taint")) {
        evidence.push(format!("/sys/module/nvidia/taint: {taint:?}"));
        if flavor == Flavor::Unknown {
            flavor = if taint.contains('P') {
                Flavor::Proprietary
            } else {
                Flavor::Open
            };
        }
    }
    let version = pci::read(&module.join("version")).or_else(|| {
        // "NVRM version: NVIDIA UNIX ... Kernel Module  550.54.15  Release Build ..."
        first.as_deref().and_then(|l| {
            l.split_whitespace()
                .find(|w| w.contains('.') && w.chars().all(|c| c.is_ascii_digit() || c == '.'))
                .map(str::to_string)
        })
    });
    NvidiaDriver {
        loaded,
        version,
        flavor,
        evidence,
    }
}

/// `version: 2.17.5` from `<proc>/driver/nvidia-fs/version`.
pub(crate) fn nvidia_fs_proc_version(proc: &Path) -> Option<String> {
    let text = pci::read(&proc.join("driver/nvidia-fs/version"))?;
    let line = text
        .lines()
        .find(|l| l.to_ascii_lowercase().contains("version"))?;
    Some(line.rsplit(':').next()?.trim().to_string()).filter(|s| !s.is_empty())
}

fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether an RDMA provider registers DMA-BUF memory, from its kernel driver: `Some(true)` for
/// mlx5 (ConnectX, the Network Operator's NICs), `Some(false)` for software devices (rxe, siw),
/// `None` when not known here (the plugin's own probe at `init` decides).
pub fn provider_takes_dmabuf(nic: &RdmaNic) -> Option<bool> {
    if nic.name.starts_with("rxe") || nic.name.starts_with("siw") {
        return Some(false);
    }
    match nic.pci.as_ref().and_then(|p| p.driver.as_deref()) {
        Some("mlx5_core") => Some(true),
        _ => None,
    }
}

const FIX_PEERMEM: &str = "GPU Operator: set driver.rdma.enabled=true in the ClusterPolicy (and \
    driver.rdma.useHostMofed=true when MOFED is installed on the host rather than by the Network \
    Operator) so the driver container loads nvidia-peermem";
const FIX_OPEN: &str = "or set driver.useOpenKernelModules=true (kernel >= 5.12) so NCCL \
    can register GPU memory through DMA-BUF without nvidia-peermem";

/// One check per RDMA device: which GPUDirect RDMA path NCCL would use with it, or why none.
pub fn gdr_checks(f: &NodeFacts) -> Vec<Check> {
    let nv = &f.nvidia;
    if f.gpus.is_empty() && !nv.loaded {
        return vec![Check::new(
            "gdr.path",
            "node",
            Status::Info,
            "no NVIDIA GPU on this node: GPUDirect RDMA does not apply",
        )
        .evidence("no PCI function of vendor 0x10de with a display or 3D class in /sys/bus/pci/devices")];
    }
    if !nv.loaded {
        return vec![
            Check::new(
                "gdr.path",
                "node",
                Status::Fail,
                format!(
                    "{} NVIDIA GPU(s) but the nvidia kernel module is not loaded: no CUDA, no GPUDirect",
                    f.gpus.len()
                ),
            )
            .evidence("/sys/module/nvidia is absent")
            .fix("check the GPU Operator's driver pod on this node (nvidia-driver-daemonset) and its logs"),
        ];
    }
    if f.nics.is_empty() {
        return vec![Check::new(
            "gdr.path",
            "node",
            Status::Info,
            format!(
                "{} NVIDIA GPU(s) but no RDMA device: NCCL's traffic between nodes goes over its socket transport",
                f.gpus.len()
            ),
        )
        .evidence("/sys/class/infiniband is empty or absent")];
    }
    let kernel = f.kernel.version();
    let kernel_ok = kernel.is_none_or(|v| v >= DMABUF_MIN_KERNEL);
    let kernel_text = match &f.kernel {
        Kernel::Known { release, .. } => format!("kernel {release}"),
        Kernel::Unknown(why) => format!("kernel unknown ({why})"),
    };
    let peermem = f.peermem.is_loaded();
    let peermem_text = match &f.peermem {
        Peermem::Loaded { marker, version } => format!(
            "{} loaded ({}{})",
            f.peermem.module_name().unwrap_or("nvidia_peermem"),
            marker.display(),
            version
                .as_ref()
                .map_or(String::new(), |v| format!(", version {v}"))
        ),
        Peermem::NotLoaded => "nvidia_peermem not loaded (no /sys/module/nvidia_peermem, no \
                               /sys/kernel/mm/memory_peers/nv_mem)"
            .to_string(),
    };
    let driver_text = format!(
        "NVIDIA driver {} ({} kernel modules)",
        nv.version.as_deref().unwrap_or("?"),
        nv.flavor.name()
    );
    let mut out = Vec::new();
    for nic in &f.nics {
        let provider = provider_takes_dmabuf(nic);
        let mut blockers = Vec::new();
        if !kernel_ok {
            blockers.push(format!(
                "kernel {} < {DMABUF_MIN_KERNEL}",
                kernel.map_or("?".to_string(), |v| v.to_string())
            ));
        }
        match nv.flavor {
            Flavor::Open => {}
            Flavor::Proprietary => {
                blockers.push("proprietary NVIDIA kernel modules: CUDA exports DMA-BUF for RDMA only with the open modules".to_string());
            }
            Flavor::Unknown => blockers.push("NVIDIA kernel module flavour unknown".to_string()),
        }
        if provider == Some(false) {
            blockers.push(format!("{}'s provider does not take DMA-BUF", nic.name));
        }
        let dmabuf = blockers.is_empty();
        let provider_text = match (provider, nic.pci.as_ref().and_then(|p| p.driver.as_deref())) {
            (Some(true), Some(d)) => format!("{}: driver {d} takes DMA-BUF", nic.name),
            (Some(false), _) => format!("{}: software RDMA device, no DMA-BUF", nic.name),
            (_, d) => format!(
                "{}: driver {} (DMA-BUF support decided by the plugin's probe at init)",
                nic.name,
                d.unwrap_or("?")
            ),
        };
        let mut c = match (dmabuf, peermem) {
            (true, true) => Check::new(
                "gdr.path",
                &nic.name,
                Status::Ok,
                format!(
                    "{}: GPUDirect RDMA via DMA-BUF (nvidia-peermem is loaded too; NCCL uses it only with NCCL_DMABUF_ENABLE=0)",
                    nic.name
                ),
            ),
            (true, false) => Check::new(
                "gdr.path",
                &nic.name,
                Status::Ok,
                format!("{}: GPUDirect RDMA via DMA-BUF", nic.name),
            ),
            (false, true) => Check::new(
                "gdr.path",
                &nic.name,
                Status::Ok,
                format!(
                    "{}: GPUDirect RDMA via nvidia-peermem (DMA-BUF not possible: {})",
                    nic.name,
                    blockers.join("; ")
                ),
            ),
            (false, false) => {
                let only_peermem = nv.flavor == Flavor::Proprietary || !kernel_ok;
                let why = if only_peermem {
                    "nvidia-peermem is the only GPUDirect RDMA path here and it is not loaded"
                } else {
                    "neither DMA-BUF nor nvidia-peermem is available"
                };
                let fix = if kernel_ok && nv.flavor == Flavor::Proprietary {
                    format!("{FIX_PEERMEM}, {FIX_OPEN}")
                } else {
                    format!("{FIX_PEERMEM}; or run a kernel >= 5.12 with the open kernel modules")
                };
                Check::new(
                    "gdr.path",
                    &nic.name,
                    Status::Fail,
                    format!(
                        "{}: no GPUDirect RDMA: {why}; DMA-BUF not possible: {}; NCCL stages GPU data through host memory",
                        nic.name,
                        blockers.join("; ")
                    ),
                )
                .fix(fix)
            }
        };
        c.evidence.push(kernel_text.clone());
        c.evidence.push(driver_text.clone());
        c.evidence.extend(nv.evidence.iter().cloned());
        c.evidence.push(peermem_text.clone());
        c.evidence.push(provider_text);
        if let Some(m) = &f.mofed {
            c.evidence.push(format!(
                "MOFED (mlx_compat {}) provides the RDMA stack",
                m.version.as_deref().unwrap_or("?")
            ));
        }
        out.push(c);
    }
    out
}

/// The first nvidia-fs release whose GPUDirect Storage needs the open kernel modules.
pub const GDS_NEEDS_OPEN_MODULES: (u32, u32, u32) = (2, 17, 5);

/// `2.17.5` -> (2, 17, 5); missing parts are 0.
fn dotted(v: &str) -> Option<(u32, u32, u32)> {
    let mut parts = v.trim().split('.').map(|p| p.parse::<u32>().ok());
    let major = parts.next()??;
    let minor = parts.next().flatten().unwrap_or(0);
    let patch = parts.next().flatten().unwrap_or(0);
    Some((major, minor, patch))
}

/// GPUDirect Storage (nvidia-fs) and GDRCopy (gdrdrv).
pub fn gds_checks(f: &NodeFacts) -> Vec<Check> {
    let mut out = Vec::new();
    let translated = f.iommu.state.translates();
    out.push(match &f.nvidia_fs {
        None => Check::new(
            "gds",
            "node",
            Status::Info,
            "nvidia-fs not loaded: GPUDirect Storage is not deployed (GPU Operator gds.enabled=false); \
             cuFile works in compatibility mode through host memory; NCCL does not need it",
        )
        .evidence("/sys/module/nvidia_fs is absent"),
        Some(m) => {
            let v = m.version.as_deref().unwrap_or("?");
            let needs_open = m
                .version
                .as_deref()
                .and_then(dotted)
                .is_some_and(|n| n >= GDS_NEEDS_OPEN_MODULES);
            let c = if needs_open && f.nvidia.flavor == Flavor::Proprietary {
                Check::new(
                    "gds",
                    "node",
                    Status::Warning,
                    format!(
                        "nvidia-fs {v} loaded, but GPUDirect Storage from nvidia-fs 2.17.5 on needs the \
                         NVIDIA open kernel modules and this node runs the proprietary ones: expect cuFile \
                         to fall back to compatibility mode through host memory (IOMMU {})",
                        f.iommu.state.name()
                    ),
                )
                .fix("GPU Operator: set driver.useOpenKernelModules=true (or driver.kernelModuleType=open) in the ClusterPolicy")
                .evidence(format!(
                    "NVIDIA driver {} ({} kernel modules)",
                    f.nvidia.version.as_deref().unwrap_or("?"),
                    f.nvidia.flavor.name()
                ))
            } else if translated {
                Check::new(
                    "gds",
                    "node",
                    Status::Warning,
                    format!(
                        "nvidia-fs {v} loaded, but the IOMMU translates DMA ({}): GPUDirect Storage's \
                         peer-to-peer DMA is documented for IOMMU off or passthrough; expect cuFile to \
                         fall back to compatibility mode (gdscheck -p shows it)",
                        f.iommu.state.name()
                    ),
                )
                .fix("boot with iommu=pt (intel_iommu=on iommu=pt, or amd_iommu=on iommu=pt)")
            } else {
                Check::new(
                    "gds",
                    "node",
                    Status::Ok,
                    format!(
                        "nvidia-fs {v} loaded (GPUDirect Storage), usable with the IOMMU {}",
                        f.iommu.state.name()
                    ),
                )
            };
            c.evidence(format!("/sys/module/nvidia_fs: version {v}"))
        }
    });
    let enabled = f.pod.gdrcopy_enable.as_deref().map(str::trim) == Some("1");
    out.push(match (&f.gdrdrv, enabled) {
        (Some(m), true) => Check::new(
            "gdrcopy",
            "node",
            Status::Ok,
            format!(
                "gdrdrv {} loaded and NCCL_GDRCOPY_ENABLE=1: NCCL keeps its proxy flags in GPU memory mapped through GDRCopy",
                m.version.as_deref().unwrap_or("?")
            ),
        ),
        (Some(m), false) => Check::new(
            "gdrcopy",
            "node",
            Status::Info,
            format!(
                "gdrdrv {} loaded (GPU Operator gdrcopy.enabled=true), but NCCL uses GDRCopy only with \
                 NCCL_GDRCOPY_ENABLE=1 (off by default): flags stay in host memory, flushes go through \
                 the network plugin (an RDMA read)",
                m.version.as_deref().unwrap_or("?")
            ),
        ),
        (None, true) => Check::new(
            "gdrcopy",
            "node",
            Status::Warning,
            "NCCL_GDRCOPY_ENABLE=1 but gdrdrv is not loaded: NCCL cannot open GDRCopy and keeps its \
             flags in host memory",
        )
        .fix("GPU Operator: set gdrcopy.enabled=true in the ClusterPolicy, or unset NCCL_GDRCOPY_ENABLE"),
        (None, false) => Check::new(
            "gdrcopy",
            "node",
            Status::Info,
            "gdrdrv not loaded (GDRCopy absent): NCCL keeps its proxy flags in host memory and flushes \
             GPUDirect receives through the network plugin (an RDMA read); that is NCCL's default anyway",
        ),
    }
    .evidence(format!(
        "/sys/module/gdrdrv {}; NCCL_GDRCOPY_ENABLE={}",
        if f.gdrdrv.is_some() { "present" } else { "absent" },
        f.pod.gdrcopy_enable.as_deref().unwrap_or("unset")
    )));
    out
}
