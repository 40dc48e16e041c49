//! Checks on the PCIe topology: the distance from each GPU to its nearest NIC against
//! `NCCL_NET_GDR_LEVEL`, ACS redirection on the bridges between them, links below their maximum,
//! and SR-IOV virtual functions.
//!
//! NCCL enables GPUDirect RDMA for a GPU and a NIC when their distance is at most
//! `NCCL_NET_GDR_LEVEL`, by default `PXB` (`ncclTopoCheckGdr` in NCCL's `src/graph/paths.cc`, read
//! for 2.19 to 2.28; NCCL lowers the default on AMD Rome CPUs and raises it on C2C systems, which
//! this check does not model).

use super::pci::{ACS_REDIRECT_BITS, bridges_between, distance};
use super::*;

/// NCCL's default `NCCL_NET_GDR_LEVEL`.
pub const DEFAULT_GDR_LEVEL: Distance = Distance::Pxb;

/// All topology checks.
pub fn topology_checks(f: &NodeFacts) -> Vec<Check> {
    let mut out = Vec::new();
    let nics: Vec<(&RdmaNic, &PciFn)> = f
        .nics
        .iter()
        .filter_map(|n| n.pci.as_ref().map(|p| (n, p)))
        .collect();
    if !f.gpus.is_empty() && !nics.is_empty() {
        let (level, level_text) = match f.pod.net_gdr_level.as_deref() {
            None => (
                DEFAULT_GDR_LEVEL,
                "NCCL_NET_GDR_LEVEL unset (NCCL's default PXB)".to_string(),
            ),
            Some(v) => match Distance::parse_level(v) {
                Some(d) => (d, format!("NCCL_NET_GDR_LEVEL={v}")),
                None => {
                    out.push(
                        Check::new(
                            "pcie.distance",
                            "NCCL_NET_GDR_LEVEL",
                            Status::Warning,
                            format!("NCCL_NET_GDR_LEVEL={v:?} is not a level NCCL knows (it compares names exactly, in upper case); NCCL ignores it and uses PXB"),
                        )
                        .fix("use one of NCCL's names, in upper case: LOC, NVL, NVB, C2C, PIX, PXB, P2C, PXN, PHB, SYS (or the old numbers 0 to 4)"),
                    );
                    (
                        DEFAULT_GDR_LEVEL,
                        format!("NCCL_NET_GDR_LEVEL={v:?} (invalid)"),
                    )
                }
            },
        };
        for g in &f.gpus {
            out.extend(gpu_checks(g, &nics, level, &level_text));
        }
    }
    out.extend(link_checks(f));
    out.extend(sriov_checks(f));
    out
}

fn gpu_checks(
    g: &PciFn,
    nics: &[(&RdmaNic, &PciFn)],
    level: Distance,
    level_text: &str,
) -> Vec<Check> {
    let subject = format!("GPU {}", g.bdf);
    let mut pairs: Vec<(Distance, &RdmaNic, &PciFn)> =
        nics.iter().map(|(n, p)| (distance(g, p), *n, *p)).collect();
    pairs.sort_by_key(|(d, n, _)| (*d, n.name.clone()));
    let evidence: Vec<String> = pairs
        .iter()
        .map(|(d, n, p)| {
            format!(
                "{} ({}, NUMA {}): {d}; GPU NUMA {}",
                n.name,
                p.bdf,
                numa(p.numa),
                numa(g.numa)
            )
        })
        .collect();
    let (best, nic, nic_pci) = pairs[0];
    let mut c = if best <= level {
        Check::new(
            "pcie.distance",
            &subject,
            Status::Ok,
            format!(
                "GPU {}: nearest NIC {} is {best} ({}); {level_text} allows GPUDirect RDMA",
                g.bdf,
                nic.name,
                meaning(best)
            ),
        )
    } else {
        Check::new(
            "pcie.distance",
            &subject,
            Status::Warning,
            format!(
                "GPU {}: nearest NIC {} is {best} ({}), beyond {level_text}: NCCL disables GPUDirect \
                 RDMA for this GPU and stages its network traffic through host memory",
                g.bdf,
                nic.name,
                meaning(best)
            ),
        )
        .fix(format!(
            "place a NIC under the same PCIe switch as the GPU, or accept host staging; \
             NCCL_NET_GDR_LEVEL={best} would enable GPUDirect RDMA over this path, which is often slower than staging"
        ))
    };
    c.evidence = evidence;
    let mut out = vec![c];
    if best <= Distance::Pxb {
        out.push(acs_check(g, nic, nic_pci));
    }
    out
}

fn acs_check(g: &PciFn, nic: &RdmaNic, p: &PciFn) -> Check {
    let subject = format!("GPU {} / {}", g.bdf, nic.name);
    let bridges = bridges_between(g, p);
    let redirecting: Vec<String> = bridges
        .iter()
        .filter_map(|b| {
            b.acs_ctl
                .filter(|c| c & ACS_REDIRECT_BITS != 0)
                .map(|c| format!("{} (ACS control {c:#06x})", b.bdf))
        })
        .collect();
    let evidence: Vec<String> = bridges
        .iter()
        .map(|b| match b.acs_ctl {
            Some(c) => format!("bridge {}: ACS control {c:#06x}", b.bdf),
            None => format!("bridge {}: no ACS capability readable", b.bdf),
        })
        .collect();
    let mut c = if !redirecting.is_empty() {
        Check::new(
            "pcie.acs",
            subject,
            Status::Warning,
            format!(
                "ACS redirects peer-to-peer requests on {} between GPU {} and {}: GPUDirect RDMA \
                 traffic goes up to the root complex instead of across the switch",
                redirecting.join(", "),
                g.bdf,
                nic.name
            ),
        )
        .fix(
            "disable ACS P2P redirection on these switch ports (a BIOS setting, or clearing the ACS \
             control register with setpci at boot, as NVIDIA's GPUDirect RDMA documentation describes); \
             bare-metal nodes with IOMMU passthrough do not need it for isolation",
        )
    } else if bridges.iter().any(|b| b.acs_ctl.is_some()) {
        Check::new(
            "pcie.acs",
            subject,
            Status::Ok,
            format!(
                "no ACS redirection between GPU {} and {}: peer traffic stays in the switch",
                g.bdf, nic.name
            ),
        )
    } else {
        Check::new(
            "pcie.acs",
            subject,
            Status::Info,
            format!(
                "ACS between GPU {} and {} not known: the bridges' extended config space is not readable \
                 (run the doctor as root, or in a privileged container)",
                g.bdf, nic.name
            ),
        )
    };
    c.evidence = evidence;
    c
}

fn link_checks(f: &NodeFacts) -> Vec<Check> {
    let mut all: Vec<(String, &PciFn, bool)> = f
        .gpus
        .iter()
        .map(|g| (format!("GPU {}", g.bdf), g, true))
        .collect();
    all.extend(f.nics.iter().filter_map(|n| {
        n.pci
            .as_ref()
            .map(|p| (format!("{} ({})", n.name, p.bdf), p, false))
    }));
    let mut out = Vec::new();
    let mut at_max = 0;
    for (name, p, is_gpu) in &all {
        let l = &p.link;
        let width_low = matches!((l.width, l.max_width), (Some(w), Some(m)) if w < m);
        let speed_low =
            matches!((l.speed_gts, l.max_speed_gts), (Some(s), Some(m)) if s + 0.01 < m);
        if !width_low && !speed_low {
            at_max += 1;
            continue;
        }
        let text = format!(
            "x{} of x{}, {} of {} GT/s",
            opt(l.width),
            opt(l.max_width),
            opt(l.speed_gts),
            opt(l.max_speed_gts)
        );
        let c = if width_low || !is_gpu {
            Check::new(
                "pcie.link",
                name,
                Status::Warning,
                format!("{name}: PCIe link below its maximum ({text}): it caps GPUDirect RDMA bandwidth"),
            )
            .fix("reseat the card or move it to a full-width slot; check the slot's bifurcation and speed settings in the BIOS")
        } else {
            Check::new(
                "pcie.link",
                name,
                Status::Info,
                format!(
                    "{name}: link speed below its maximum ({text}); GPUs lower their link speed when idle, check again under load"
                ),
            )
        };
        out.push(c.evidence(format!(
            "{}: current_link_width/max_link_width, current_link_speed/max_link_speed",
            p.bdf
        )));
    }
    if at_max > 0 && out.is_empty() {
        out.push(Check::new(
            "pcie.link",
            "node",
            Status::Ok,
            format!("all {at_max} GPU and NIC PCIe links run at their maximum width and speed"),
        ));
    }
    out
}

fn sriov_checks(f: &NodeFacts) -> Vec<Check> {
    let mut out = Vec::new();
    for n in &f.nics {
        let Some(p) = &n.pci else { continue };
        let Some(parent) = &p.physfn else { continue };
        let netdev = n.netdevs.join(", ");
        let c = if n.netdevs.is_empty() {
            Check::new(
                "sriov",
                &n.name,
                Status::Warning,
                format!(
                    "{} is SR-IOV virtual function {} of {parent}, but its netdev is not in this network \
                     namespace: RoCE has no GID without it",
                    n.name, p.bdf
                ),
            )
            .fix("attach the VF with the SR-IOV CNI (a Multus NetworkAttachmentDefinition) so its netdev moves into the pod; the RDMA device and the netdev must be in the same namespace")
        } else {
            Check::new(
                "sriov",
                &n.name,
                Status::Ok,
                format!(
                    "{} is SR-IOV virtual function {} of {parent}, netdev {netdev}",
                    n.name, p.bdf
                ),
            )
        };
        out.push(c.evidence(format!(
            "/sys/class/infiniband/{}/device/physfn -> {parent}",
            n.name
        )));
    }
    for v in &f.vfio_vfs {
        out.push(
            Check::new(
                "sriov.vfio",
                &v.parent,
                Status::Warning,
                format!(
                    "SR-IOV virtual function {} of {} is bound to vfio-pci (for a VM or DPDK): it has no \
                     netdev and no RDMA device, so a pod given it cannot run NCCL over RDMA",
                    v.bdf, v.parent
                ),
            )
            .evidence(format!("/sys/bus/pci/devices/{}/driver -> vfio-pci", v.bdf))
            .fix(
                "for RDMA pods, create the VFs with deviceType: netdevice and isRdma: true in the \
                 SriovNetworkNodePolicy (so mlx5_core binds them); keep vfio-pci only for VMs and DPDK",
            ),
        );
    }
    if out.is_empty() && f.nics.iter().any(|n| n.pci.is_some()) {
        out.push(Check::new(
            "sriov",
            "node",
            Status::Info,
            "no RDMA device is an SR-IOV virtual function (whole NICs, or physical functions)",
        ));
    }
    out
}

fn meaning(d: Distance) -> &'static str {
    match d {
        Distance::Loc => "same device",
        Distance::Nvl => "over NVLink",
        Distance::Nvb => "over NVLink through another GPU",
        Distance::C2c => "over the CPU-GPU chip link",
        Distance::P2c => "PCIe to the CPU, then the chip link",
        Distance::Pxn => "through another GPU's PCIe path",
        Distance::Pix => "same PCIe switch",
        Distance::Pxb => "through several PCIe switches",
        Distance::Phb => "through the CPU's root complex",
        Distance::Sys => "across CPU sockets",
    }
}

fn numa(n: Option<i32>) -> String {
    n.map_or("?".to_string(), |n| n.to_string())
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or("?".to_string(), |v| v.to_string())
}
