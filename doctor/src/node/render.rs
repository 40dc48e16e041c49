//! The node and pod checks in the text report and in `--json` (`node` key).

use super::*;
use crate::format::wrap;
use serde_json::{Value, json};

/// The "GPUDirect RDMA, node and pod" section of the text report.
pub fn render_node_text(o: &mut String, checks: &[Check]) {
    for c in checks {
        let head = format!("  [{}] ", c.status.name());
        let rest = " ".repeat(head.len() + 2);
        wrap(o, &head, &rest, &c.summary);
        for e in &c.evidence {
            wrap(o, &format!("{rest}evidence: "), &format!("{rest}  "), e);
        }
        if let Some(fix) = &c.fix {
            wrap(o, &format!("{rest}fix: "), &format!("{rest}  "), fix);
        }
    }
}

/// One check as JSON.
pub fn check_json(c: &Check) -> Value {
    json!({
        "id": c.id,
        "subject": c.subject,
        "status": c.status.name(),
        "summary": c.summary,
        "evidence": c.evidence,
        "fix": c.fix,
    })
}

/// The `node` object of the JSON report.
pub fn node_json(f: &NodeFacts, checks: &[Check]) -> Value {
    let count = |s: Status| checks.iter().filter(|c| c.status == s).count();
    let pci = |p: &PciFn| {
        json!({
            "bdf": p.bdf.to_string(),
            "numa_node": p.numa,
            "driver": p.driver,
            "link": {
                "width": p.link.width, "max_width": p.link.max_width,
                "speed_gts": p.link.speed_gts, "max_speed_gts": p.link.max_speed_gts,
            },
            "iommu_group_type": p.iommu_group_type,
            "sriov_physfn": p.physfn,
        })
    };
    json!({
        "roots": {
            "sys": f.roots.sys.display().to_string(),
            "proc": f.roots.proc.display().to_string(),
            "dev": f.roots.dev.display().to_string(),
        },
        "kernel": match &f.kernel {
            Kernel::Known { release, .. } => Some(release.clone()),
            Kernel::Unknown(_) => None,
        },
        "nvidia": {
            "loaded": f.nvidia.loaded,
            "version": f.nvidia.version,
            "kernel_modules": f.nvidia.flavor.name(),
        },
        "nvidia_peermem_loaded": f.peermem.is_loaded(),
        "nvidia_fs": f.nvidia_fs.as_ref().map(|m| json!({"version": m.version})),
        "gdrdrv": f.gdrdrv.as_ref().map(|m| json!({"version": m.version})),
        "mofed": f.mofed.as_ref().map(|m| json!({"version": m.version})),
        "iommu": f.iommu.state.name(),
        "gpus": f.gpus.iter().map(pci).collect::<Vec<_>>(),
        "rdma_devices": f.nics.iter().map(|n| json!({
            "name": n.name,
            "pci": n.pci.as_ref().map(pci),
            "netdevs": n.netdevs,
            "uverbs": n.uverbs,
            "uverbs_present": n.uverbs_present,
        })).collect::<Vec<_>>(),
        "container": match &f.pod.container {
            Some(pod::Container::Pod(_)) => "kubernetes",
            Some(pod::Container::Container(_)) => "container",
            Some(pod::Container::Host) | None => "host",
        },
        "sriov_vfio_vfs": f.vfio_vfs.iter().map(|v| json!({"bdf": v.bdf, "parent": v.parent})).collect::<Vec<_>>(),
        "nccl": nccl_json(&f.nccl),
        "checks": checks.iter().map(check_json).collect::<Vec<_>>(),
        "status": worst(checks).name(),
        "counts": {
            "ok": count(Status::Ok), "info": count(Status::Info),
            "warning": count(Status::Warning), "fail": count(Status::Fail),
        },
    })
}

/// The `nccl` object of the `node` object.
fn nccl_json(n: &nccl::NcclFacts) -> Value {
    let lib = n.library.as_ref();
    let chosen = n.candidates.iter().find(|c| c.loads());
    json!({
        "library": lib.map(|l| l.copies[0].path.display().to_string()),
        "library_real_path": lib.map(|l| l.copies[0].real.display().to_string()),
        "version": lib.and_then(|l| l.version).map(|v| v.to_string()),
        "plugin": chosen.map(|c| c.copies[0].path.display().to_string()),
        "plugin_is_ferro": chosen.map(|c| c.ours),
        "plugin_tables": chosen.map(nccl::Candidate::tables),
        "library_path": n.search.dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>(),
    })
}
