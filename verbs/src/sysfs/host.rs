//! Host facts for diagnostics: the IOMMU mode from the kernel command line.

use super::read::read_trimmed;
use std::fmt;
use std::path::Path;

/// IOMMU mode as requested on the kernel command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IommuMode {
    /// No IOMMU option on the command line: kernel/firmware defaults apply.
    NotSet,
    /// IOMMU disabled (`intel_iommu=off`, `amd_iommu=off`, `iommu=off`).
    Off,
    /// Passthrough / identity mapping (`iommu=pt`, `iommu.passthrough=1`).
    Passthrough,
    /// Translated DMA; the detail lists the options that asked for it.
    On(String),
}

impl IommuMode {
    /// Whether this mode is known to be fine for GPUDirect RDMA (`None`: depends on defaults).
    pub fn gdr_friendly(&self) -> Option<bool> {
        match self {
            Self::Off | Self::Passthrough => Some(true),
            Self::On(_) => Some(false),
            Self::NotSet => None,
        }
    }

    /// One line: the mode and what it means for GPUDirect RDMA.
    pub fn describe(&self) -> String {
        match self {
            Self::NotSet => "IOMMU: no option on the kernel command line (kernel/firmware default \
                             applies); if the IOMMU ends up translating DMA, GPUDirect RDMA \
                             peer-to-peer can be slow or fail: iommu=pt is the usual setting"
                .to_string(),
            Self::Off => "IOMMU: off; fine for GPUDirect RDMA (NIC and GPU use physical \
                          addresses, peer-to-peer works)"
                .to_string(),
            Self::Passthrough => "IOMMU: passthrough; good for GPUDirect RDMA (no DMA \
                                  translation, peer-to-peer works)"
                .to_string(),
            Self::On(detail) => format!(
                "IOMMU: translated DMA mode ({detail}); can slow down or break GPUDirect RDMA \
                 peer-to-peer between NIC and GPU: consider iommu=pt"
            ),
        }
    }
}

impl fmt::Display for IommuMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// Kernel boolean (`kstrtobool`): 1/y/on true, 0/n/off false.
fn parse_kbool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "y" | "yes" | "on" | "true" => Some(true),
        "0" | "n" | "no" | "off" | "false" => Some(false),
        _ => None,
    }
}

/// IOMMU mode from a kernel command line (`/proc/cmdline`).
///
/// Understands `intel_iommu=on|off[,...]`, `amd_iommu=on|off[,...]`, `iommu=pt|nopt|off|on|force`,
/// `iommu.passthrough=0|1` and `iommu.strict=0|1`. Later options override earlier ones. "Off" wins
/// over passthrough; passthrough wins over "on". `iommu.strict` alone does not say the IOMMU is on
/// and is only reported as detail of the translated mode.
pub fn iommu_mode(cmdline: &str) -> IommuMode {
    let mut enabled: Option<bool> = None;
    let mut passthrough: Option<bool> = None;
    let mut strict: Option<bool> = None;
    let mut relevant: Vec<&str> = Vec::new();

    for tok in cmdline.split_whitespace() {
        let Some((key, value)) = tok.split_once('=') else {
            continue;
        };
        let value = value.trim_matches('"');
        match key {
            "intel_iommu" | "amd_iommu" => {
                for opt in value.split(',') {
                    match opt {
                        "on" | "force_enable" => enabled = Some(true),
                        "off" => enabled = Some(false),
                        "strict" | "fullflush" => strict = Some(true),
                        _ => {}
                    }
                }
            }
            "iommu" => {
                for opt in value.split(',') {
                    match opt {
                        "pt" => passthrough = Some(true),
                        "nopt" => passthrough = Some(false),
                        "off" => enabled = Some(false),
                        "on" | "force" => enabled = Some(true),
                        _ => {}
                    }
                }
            }
            "iommu.passthrough" => passthrough = parse_kbool(value).or(passthrough),
            "iommu.strict" => strict = parse_kbool(value).or(strict),
            _ => continue,
        }
        relevant.push(tok);
    }

    if enabled == Some(false) {
        return IommuMode::Off;
    }
    if passthrough == Some(true) {
        return IommuMode::Passthrough;
    }
    if enabled == Some(true) || passthrough == Some(false) {
        let mut detail = relevant.join(" ");
        match strict {
            Some(true) => detail.push_str(", strict invalidation"),
            Some(false) => detail.push_str(", lazy invalidation"),
            None => {}
        }
        return IommuMode::On(detail);
    }
    IommuMode::NotSet
}

/// Reads `<proc>/cmdline` (normally `/proc/cmdline`), trimmed; `None` if unreadable.
pub fn read_cmdline(proc: &Path) -> Option<String> {
    read_trimmed(&proc.join("cmdline")).ok()
}
