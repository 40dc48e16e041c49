//! The verdict policy on GPUDirect RDMA (`--gdr-policy`): a node without a GPUDirect RDMA path
//! is a failure where the design needs one (`required`, the default), and a valid node where
//! the design stages GPU data through host memory (`optional`).
//!
//! Only the checks that say "GPUDirect RDMA is off here" change, and only in status and wording:
//! a NIC's `gdr.path` failure (no DMA-BUF, no nvidia-peermem) and a GPU's `pcie.distance` warning
//! (its nearest NIC beyond `NCCL_NET_GDR_LEVEL`) become `ok` checks that say "host staging by
//! design" with the reason, their evidence kept. A node whose GPUs have no driver still fails:
//! that is no CUDA at all, not a choice of path.

use super::{Check, Status};
use crate::GdrPolicy;

/// Whether `c` says that GPUDirect RDMA is off for a NIC or a GPU.
pub fn says_gdr_off(c: &Check) -> bool {
    match (c.id, c.status) {
        ("gdr.path", Status::Fail) => c.subject != "node",
        ("pcie.distance", Status::Warning) => c.subject.starts_with("GPU "),
        _ => false,
    }
}

/// `checks` under `policy`.
pub fn apply_gdr_policy(checks: Vec<Check>, policy: GdrPolicy) -> Vec<Check> {
    if policy == GdrPolicy::Required {
        return checks;
    }
    checks
        .into_iter()
        .map(|c| {
            if !says_gdr_off(&c) {
                return c;
            }
            let mut relaxed = Check::new(
                c.id,
                c.subject.clone(),
                Status::Ok,
                format!(
                    "host staging by design (--gdr-policy optional): {}",
                    c.summary
                ),
            );
            relaxed.evidence = c.evidence;
            relaxed
        })
        .collect()
}

/// Whether some NIC has a GPUDirect RDMA path (a `gdr.path` check of a NIC that is `ok` before
/// any policy).
pub fn gdr_on(raw: &[Check]) -> bool {
    raw.iter()
        .any(|c| c.id == "gdr.path" && c.subject != "node" && c.status == Status::Ok)
}
