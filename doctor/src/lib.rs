//! A tool over the plugin's layers, the host check `nccl-net-doctor`: "will the plugin work on
//! this host, and why (not)?" in one screen.
//!
//! The module is split in layers, so that everything but collection is tested without RDMA
//! hardware:
//!
//! 1. **Collection** ([`collect`]): runs the plugin's own
//!    [`discover`](nccl_net_ferro::discovery::discover) (same configuration, same GID choice,
//!    same `usable` verdicts as `init`), reads sysfs for devices libibverbs does not
//!    list, and gathers host facts (locked-memory limit, `CAP_IPC_LOCK` and `/dev/shm`, read under
//!    the roots by [`node::read_limits`]; IOMMU mode, `/dev/infiniband`, NCCL environment
//!    variables).
//! 2. **Model** ([`Report`] and its parts): plain data, buildable by hand; the verdicts
//!    ([`port_verdict`], [`overall`]) and findings ([`dev_infiniband_finding`], [`env_findings`],
//!    ...) are pure functions of it. Locked memory and `/dev/shm` are judged in one place, the
//!    `pod.memlock` and `pod.shm` checks ([`node::limits`]).
//! 3. **Rendering**: [`render_text`] (the screen) and [`to_json`] / [`render_json`] (`--json`).
//! 4. **Node and pod** ([`node`]): "is this node and this pod set up right for GPUDirect RDMA?"
//!    (NVIDIA kernel modules and the GPUDirect RDMA path per device, GPUDirect Storage, GDRCopy,
//!    IOMMU mode, PCIe distance in NCCL's terms, ACS, link width and speed, SR-IOV, and the pod's
//!    view: `NCCL_SOCKET_IFNAME`, `/dev/infiniband/uverbs*`, `CAP_IPC_LOCK`/memlock, `/dev/shm`,
//!    container), and NCCL ([`node::nccl`]: the installed `libnccl.so.2` and its version, the
//!    plugin file `NCCL_NET_PLUGIN` resolves to, whether it loads and which table NCCL picks,
//!    shadowing copies, `NCCL_NET`), each a [`Check`] with its evidence and fix, read from a
//!    [`Roots`] (`--root`). Under `--root` every section reads the given tree: the host section's
//!    `/dev/infiniband` and kernel command line too.
//! 5. **Policy** ([`node::policy`], `--gdr-policy`): `required` (the default) keeps "no
//!    GPUDirect RDMA path" a failure; `optional` reports it `ok`, "host staging by design", with
//!    the reason.
//!
//! Output: text (the default), `--json` / `--output json` (below) and `--output nfd`, a
//! node-feature-discovery feature file (`key=value` lines under `ferro.nccl-net/`; see
//! [`render_nfd`]).
//!
//! # Exit status ([`exit_code`]), stable for readiness probes
//!
//! - 0: the plugin would expose at least one device port to NCCL and no node or pod check failed;
//! - 1: the plugin would expose none (no libibverbs, no device, no usable port, or
//!   `NCCL_IB_DISABLE=1`);
//! - 2: usage error (the binary);
//! - 3: the plugin would expose a port, but a node or pod check has status `fail` (GPUDirect RDMA
//!   has no path under `--gdr-policy required`, `NCCL_SOCKET_IFNAME` names nothing usable, no
//!   uverbs device in the container, no NVIDIA module with GPUs present, the plugin NCCL would
//!   load does not load or is another plugin, `NCCL_NET` names another network while the plugin
//!   is installed). Warnings never change the exit status.
//!
//! # JSON report (`--json`)
//!
//! One object. Keys are stable and snake_case; a key is never omitted, absent values are `null`.
//! Byte sizes are integers in bytes; GUIDs are strings in sysfs form (`0002:c903:0031:7c01`).
//!
//! - `format_version`: 2 (bumped when a key changes meaning or disappears; 2 added exit status
//!   3 and the `node` object; consumers should check it equals the version they were written for).
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
//!   "unknown"), description, gdr_friendly}, dev_shm: {size_bytes, available_bytes (null: not
//!   measurable), warning, error}, dev_infiniband: {present, entries: [string], warning},
//!   gpu_direct: {plugin_offers_gpu_memory, nvidia_driver_loaded, nvidia_peermem_loaded,
//!   description}, env: {nccl_net_plugin, nccl_net, nccl_ib_hca, nccl_socket_ifname,
//!   ferro_ibverbs_lib}}`. `memlock` and `dev_shm` are read under `--root` like the node facts
//!   (`<proc>/self/limits`, `<proc>/self/status`, the `/dev/shm` entry of `<proc>/self/mounts`);
//!   `iommu` comes from `<proc>/cmdline` and `dev_infiniband` from `<dev>/infiniband`, under
//!   `--root` too. `env`'s NCCL_NET_PLUGIN and NCCL_NET remarks are judged by the `nccl.plugin`
//!   and `nccl.net` checks when `node` is collected.
//!   Their `warning` (and `memlock`'s `note`) is the summary of the `pod.memlock` / `pod.shm` check
//!   when that check's status is `warning` (`info`), else null: the same judgement, not a second
//!   one.
//! - `node`: `{roots: {sys, proc, dev}, kernel (release | null), nvidia: {loaded, version,
//!   kernel_modules ("open" | "proprietary" | "unknown")}, nvidia_peermem_loaded, nvidia_fs:
//!   {version} | null, gdrdrv: {version} | null, mofed: {version} | null, iommu ("off" |
//!   "passthrough" | "translated-strict" | "translated-lazy" | "translated" | "unknown"), gpus:
//!   [pci], rdma_devices: [{name, pci: pci | null, netdevs, uverbs, uverbs_present}], container
//!   ("kubernetes" | "container" | "host"), sriov_vfio_vfs: [{bdf, parent}], nccl: {library
//!   (path | null), library_real_path, version ("2.21.5" | null), plugin (the file NCCL would
//!   load | null), plugin_is_ferro (bool | null), plugin_tables ([int] | null), library_path:
//!   [string]}, checks: [check], status (the worst check status),
//!   counts: {ok, info, warning, fail}}` or null when not collected, where `pci` is `{bdf,
//!   numa_node, driver, link: {width, max_width, speed_gts, max_speed_gts}, iommu_group_type,
//!   sriov_physfn}` and `check` is `{id, subject, status ("ok" | "info" | "warning" | "fail"),
//!   summary, evidence: [string], fix (string | null)}`. Check ids: `gdr.path`, `iommu`, `gds`,
//!   `gdrcopy`, `pcie.distance`, `pcie.acs`, `pcie.link`, `sriov`, `sriov.vfio`,
//!   `pod.socket_ifname`, `pod.uverbs`, `pod.memlock`, `pod.shm`, `pod.container`,
//!   `nccl.library`, `nccl.plugin`, `nccl.shadow`, `nccl.net`. The checks are those after
//!   `--gdr-policy`.
//! - `warnings`: `[string]`, every configuration, host and environment warning, and the summary
//!   of every node check with status `warning` or `fail`, in one list.
//! - `verdict`: `{ok, usable_ports, lines: [string], summary, node_status (the worst node check
//!   status | null), node_summary (string | null), exit_code, gdr_policy ("required" |
//!   "optional")}`.

mod args;
mod collect;
mod findings;
mod format;
mod json;
mod model;
mod nfd;
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
pub use nfd::*;
pub use node::limits::{
    Limits, MEMLOCK_WARN_BELOW, Memlock, SHM_WARN_BELOW, Shm, ShmProblem, cap_ipc_lock_from_status,
};
pub use node::{Check, NodeFacts, Roots, Status, collect_node, node_checks};
pub use text::*;
pub use verdict::*;

/// The NCCL variables the doctor shows as seen.
pub const NCCL_ENV_VARS: [&str; 4] = [
    "NCCL_NET_PLUGIN",
    "NCCL_NET",
    "NCCL_IB_HCA",
    "NCCL_SOCKET_IFNAME",
];
/// Width the text report wraps prose at.
const WIDTH: usize = 100;
/// What NCCL does without an RDMA network.
const FALLBACK: &str = "NCCL would fall back to its socket transport.";
