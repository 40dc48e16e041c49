//! The IOMMU mode: what the kernel command line asks for, and what sysfs shows the kernel did
//! (the IOMMU units in `class/iommu`, and the default domain type of the GPUs' and NICs' IOMMU
//! groups: `identity` is passthrough, `DMA` translated with strict invalidation, `DMA-FQ`
//! translated with lazy, batched invalidation).

use super::*;
use ferro_verbs::sysfs::{IommuMode, iommu_mode, read_cmdline};

/// The effective mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IommuState {
    /// No IOMMU translating DMA.
    Off,
    /// Identity mapping for the devices.
    Passthrough,
    /// Translated, IOTLB invalidated on every unmap.
    TranslatedStrict,
    /// Translated, invalidations batched (flush queue).
    TranslatedLazy,
    /// Translated, strictness not known.
    Translated,
    Unknown,
}

impl IommuState {
    pub fn name(self) -> &'static str {
        match self {
            IommuState::Off => "off",
            IommuState::Passthrough => "passthrough",
            IommuState::TranslatedStrict => "translated-strict",
            IommuState::TranslatedLazy => "translated-lazy",
            IommuState::Translated => "translated",
            IommuState::Unknown => "unknown",
        }
    }

    pub fn translates(self) -> bool {
        matches!(
            self,
            IommuState::TranslatedStrict | IommuState::TranslatedLazy | IommuState::Translated
        )
    }
}

/// What the IOMMU check rests on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IommuFacts {
    pub state: IommuState,
    /// `/proc/cmdline` parsed (`None`: unreadable).
    pub cmdline: Option<IommuMode>,
    /// Entries of `class/iommu` (`dmar0`, `ivhd0`): the IOMMU units the kernel drives.
    pub units: Vec<String>,
    /// `(device, group type)` for the GPUs and NICs that have an IOMMU group.
    pub group_types: Vec<(String, String)>,
}

/// Reads the command line, `class/iommu`, and the IOMMU group type of `devices`.
pub fn read_iommu(roots: &Roots, devices: &[&PciFn]) -> IommuFacts {
    let cmdline = read_cmdline(&roots.proc).map(|c| iommu_mode(&c));
    let units = pci::dir_names(&roots.sys.join("class/iommu"));
    let group_types: Vec<(String, String)> = devices
        .iter()
        .filter_map(|d| d.iommu_group_type.clone().map(|t| (d.bdf.to_string(), t)))
        .collect();
    let state = decide_state(cmdline.as_ref(), &units, &group_types);
    IommuFacts {
        state,
        cmdline,
        units,
        group_types,
    }
}

/// sysfs wins over the command line (it is what the kernel did); the worst group type counts.
pub fn decide_state(
    cmdline: Option<&IommuMode>,
    units: &[String],
    group_types: &[(String, String)],
) -> IommuState {
    let has = |t: &str| group_types.iter().any(|(_, g)| g == t);
    if has("DMA") {
        return IommuState::TranslatedStrict;
    }
    if has("DMA-FQ") {
        return IommuState::TranslatedLazy;
    }
    if has("identity") {
        return IommuState::Passthrough;
    }
    match cmdline {
        Some(IommuMode::Off) => IommuState::Off,
        Some(IommuMode::Passthrough) => IommuState::Passthrough,
        Some(IommuMode::On(detail)) if detail.ends_with("strict invalidation") => {
            IommuState::TranslatedStrict
        }
        Some(IommuMode::On(detail)) if detail.ends_with("lazy invalidation") => {
            IommuState::TranslatedLazy
        }
        Some(IommuMode::On(_)) => IommuState::Translated,
        // No option and no IOMMU unit: nothing translates.
        Some(IommuMode::NotSet) if units.is_empty() => IommuState::Off,
        _ => IommuState::Unknown,
    }
}

/// The IOMMU check with its consequence for GPUDirect RDMA.
pub fn iommu_check(f: &NodeFacts) -> Check {
    let i = &f.iommu;
    let (status, summary) = match i.state {
        IommuState::Off => (
            Status::Ok,
            "IOMMU off: NIC and GPU reach each other's memory by bus address; fine for GPUDirect RDMA",
        ),
        IommuState::Passthrough => (
            Status::Ok,
            "IOMMU in passthrough: no DMA translation for the devices; the recommended mode for GPUDirect RDMA",
        ),
        IommuState::TranslatedStrict => (
            Status::Warning,
            "IOMMU translates DMA with strict invalidation: every NIC access to GPU or host memory goes \
             through the IOMMU (IOTLB misses), peer traffic is usually redirected through the root \
             complex, and registration maps every page: GPUDirect RDMA loses bandwidth or fails to register",
        ),
        IommuState::TranslatedLazy => (
            Status::Warning,
            "IOMMU translates DMA (lazy invalidation): cheaper unmaps than strict mode, but NIC accesses \
             to GPU memory are still translated and peer traffic usually goes through the root complex: \
             GPUDirect RDMA loses bandwidth",
        ),
        IommuState::Translated => (
            Status::Warning,
            "IOMMU enabled in translated mode on the kernel command line: GPUDirect RDMA traffic is \
             translated and usually redirected through the root complex",
        ),
        IommuState::Unknown => (
            Status::Info,
            "IOMMU mode not known (no option on the command line, IOMMU units present, no group type readable)",
        ),
    };
    let mut c = Check::new("iommu", "node", status, summary);
    if i.state.translates() {
        c = c.fix("boot with iommu=pt (intel_iommu=on iommu=pt on Intel, amd_iommu=on iommu=pt on AMD) \
                   so devices get identity mappings; a VM needs the hypervisor's IOMMU set up for peer-to-peer instead");
    }
    c.evidence.push(match &i.cmdline {
        Some(m) => format!("/proc/cmdline: {}", cmdline_name(m)),
        None => "/proc/cmdline unreadable".to_string(),
    });
    c.evidence.push(if i.units.is_empty() {
        "/sys/class/iommu: no IOMMU unit".to_string()
    } else {
        format!("/sys/class/iommu: {}", i.units.join(" "))
    });
    for (dev, t) in &i.group_types {
        c.evidence.push(format!("{dev}: iommu_group/type = {t}"));
    }
    c
}

fn cmdline_name(m: &IommuMode) -> String {
    match m {
        IommuMode::NotSet => "no IOMMU option".to_string(),
        IommuMode::Off => "IOMMU off".to_string(),
        IommuMode::Passthrough => "passthrough (iommu=pt)".to_string(),
        IommuMode::On(d) => format!("translated ({d})"),
    }
}
