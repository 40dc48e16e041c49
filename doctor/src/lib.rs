//! `nccl-net-doctor`: "will the plugin work on this host, and why (not)?" in one screen.
//!
//! The module is split in three layers, so that everything but the first is tested without RDMA
//! hardware:
//!
//! 1. **Collection** ([`collect`]): runs the plugin's own [`discover`] (same configuration, same
//!    GID choice, same `usable` verdicts as `init`), reads sysfs for devices libibverbs does not
//!    list, and gathers host facts (locked-memory limit, IOMMU mode, `/dev/shm`, `/dev/infiniband`,
//!    NCCL environment variables).
//! 2. **Model** ([`Report`] and its parts): plain data, buildable by hand; the verdicts
//!    ([`port_verdict`], [`overall`]) and findings ([`memlock_finding`], [`shm_finding`], ...) are
//!    pure functions of it.
//! 3. **Rendering**: [`render_text`] (the screen) and [`to_json`] / [`render_json`] (`--json`).
//!
//! Exit status ([`exit_code`]): 0 when the plugin would expose at least one device port to NCCL,
//! 1 when none would (no libibverbs, no device, no usable port, or `NCCL_IB_DISABLE=1`); the
//! binary uses 2 for usage errors.
//!
//! # JSON report (`--json`)
//!
//! One object. Keys are stable and snake_case; a key is never omitted, absent values are `null`.
//! Byte sizes are integers in bytes; GUIDs are strings in sysfs form (`0002:c903:0031:7c01`).
//!
//! - `format_version`: 1 (bumped when a key changes meaning or disappears).
//! - `plugin`: `{name, version}`.
//! - `config`: `{summary, warnings: [string], ib_disable, gid_index, addr_family ("AF_INET" |
//!   "AF_INET6"), addr_range (CIDR string | null), roce_version}`.
//! - `libibverbs`: `{loaded, library (opened or attempted), override_variable
//!   ("FERRO_IBVERBS_LIB"), override_value, capabilities: {ibv_reg_mr_iova2, ibv_reg_dmabuf_mr} |
//!   null, error, hint}`.
//! - `sysfs_root`: the sysfs tree read (`/sys` unless `--sysfs-root`).
//! - `devices`: `[{name, listed_by_libibverbs, node_guid, sys_image_guid, fw_ver, max_qp,
//!   pci_path (null: virtual device), error, notes: [string], ports: [port]}]`, where `port` is
//!   `{port, state ("ACTIVE", "DOWN", ...), link_layer ("InfiniBand" | "Ethernet" | other),
//!   speed_mbps, speed_text ("1X SDR"), active_mtu, lid, netdev, gids: [gid], gid_choice: {index,
//!   gid, type, reason} | null, gid_error, usable, reason (why not usable, else null), verdict
//!   (the verdict line)}` and `gid` is `{index, gid (8-group form), compact, type ("IB" |
//!   "RoCE v1" | "RoCE v2" | "unknown"), family ("v4" | "v6" | null), netdev, selected}`; only
//!   non-zero GID entries are listed.
//! - `enumeration_errors`: `[string]`, failures of the enumeration itself.
//! - `no_devices_explanation`: the explanation printed when libibverbs loaded but lists no device,
//!   else null.
//! - `host`: `{memlock: {soft_bytes, hard_bytes (null: unlimited), unlimited, cap_ipc_lock,
//!   warning, note, error}, iommu: {mode ("not_set" | "off" | "passthrough" | "translated" |
//!   "unknown"), description, gdr_friendly}, dev_shm: {size_bytes, available_bytes, warning,
//!   error}, dev_infiniband: {present, entries: [string], warning}, gpu_direct: {
//!   plugin_offers_gpu_memory, nvidia_driver_loaded, nvidia_peermem_loaded, description}, env:
//!   {nccl_net_plugin, nccl_net, nccl_ib_hca, nccl_socket_ifname, ferro_ibverbs_lib}}`.
//! - `warnings`: `[string]`, every configuration, host and environment warning in one list.
//! - `verdict`: `{ok, usable_ports, lines: [string], summary, exit_code}`.

mod args;
mod collect;
mod findings;
mod format;
mod json;
mod model;
pub mod node;
#[cfg(test)]
mod tests;
mod text;
mod verdict;

pub use args::*;
pub use collect::*;
pub use findings::*;
pub use format::*;
pub use json::*;
pub use model::*;
pub use node::{Check, NodeFacts, Roots, Status, collect_node, node_checks};
pub use text::*;
pub use verdict::*;

/// A finite `RLIMIT_MEMLOCK` below this draws a warning: registering large buffers will fail.
pub const MEMLOCK_WARN_BELOW: u64 = 64 << 20;
/// A `/dev/shm` smaller than this draws a warning (Docker's default is 64 MiB).
pub const SHM_WARN_BELOW: u64 = 1 << 30;
/// The NCCL variables the doctor shows as seen.
pub const NCCL_ENV_VARS: [&str; 4] = [
    "NCCL_NET_PLUGIN",
    "NCCL_NET",
    "NCCL_IB_HCA",
    "NCCL_SOCKET_IFNAME",
];
/// Bit of `CAP_IPC_LOCK` in the capability masks of `/proc/self/status`.
const CAP_IPC_LOCK_BIT: u32 = 14;
/// Width the text report wraps prose at.
const WIDTH: usize = 100;
/// What NCCL does without an RDMA network.
const FALLBACK: &str = "NCCL would fall back to its socket transport.";
