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

use crate::config::Config;
use crate::discovery::{self, DeviceReport, PortReport, PortVerdict as PortDecision, discover};
use ferro_verbs::gid::{GidChoice, GidError, select_gid};
use ferro_verbs::loader::{Capabilities, DEFAULT_LIB, LIB_ENV, LoadError};
use ferro_verbs::sysfs::{
    self, AddrFamily, GidEntry, GidType, IommuMode, LinkLayer, PortState, SysDevice, SysPort,
    format_guid,
};
use serde_json::{Value, json};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

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

// ---------------------------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------------------------

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
    /// `RLIMIT_MEMLOCK`, or why it could not be read.
    pub memlock: Result<Memlock, String>,
    /// Whether `CAP_IPC_LOCK` is effective (`None`: unknown).
    pub cap_ipc_lock: Option<bool>,
    /// From `/proc/cmdline`; `None` when unreadable.
    pub iommu: Option<IommuMode>,
    /// `/dev/shm`, or why it could not be measured.
    pub shm: Result<Shm, String>,
    /// Entries of `/dev/infiniband`; `None` when it does not exist.
    pub dev_infiniband: Option<Vec<String>>,
    pub gpu: GpuFacts,
    pub env: NcclEnv,
}

/// The locked-memory limit; `None` means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memlock {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

/// Size of `/dev/shm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shm {
    pub size_bytes: u64,
    pub available_bytes: u64,
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
    fn warning(text: impl Into<String>) -> Self {
        Finding {
            level: Level::Warning,
            text: text.into(),
        }
    }

    fn note(text: impl Into<String>) -> Self {
        Finding {
            level: Level::Note,
            text: text.into(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Findings (pure)
// ---------------------------------------------------------------------------------------------

/// The locked-memory limit (`soft`, `None` = unlimited) judged for RDMA registration.
///
/// Below [`MEMLOCK_WARN_BELOW`] is a warning, unless `CAP_IPC_LOCK` is effective: the kernel does
/// not enforce the limit on pinned RDMA memory for such a process, so it is only a note.
pub fn memlock_finding(soft: Option<u64>, cap_ipc_lock: Option<bool>) -> Option<Finding> {
    let limit = soft?;
    if limit >= MEMLOCK_WARN_BELOW {
        return None;
    }
    let size = format_bytes(limit);
    if cap_ipc_lock == Some(true) {
        return Some(Finding::note(format!(
            "{size} is below {}, but CAP_IPC_LOCK is effective, so the kernel does not apply it to RDMA \
             registrations (unless this runs in a user namespace); `ulimit -l unlimited` is still the safe setting",
            format_bytes(MEMLOCK_WARN_BELOW)
        )));
    }
    Some(Finding::warning(format!(
        "locked-memory limit {size} is below {}: RDMA registration of large buffers will fail (ENOMEM); \
         run `ulimit -l unlimited`, in containers `--ulimit memlock=-1` (Docker) or add CAP_IPC_LOCK",
        format_bytes(MEMLOCK_WARN_BELOW)
    )))
}

/// `/dev/shm` of `size` bytes judged for NCCL (below [`SHM_WARN_BELOW`] is a warning).
pub fn shm_finding(size: u64) -> Option<Finding> {
    (size < SHM_WARN_BELOW).then(|| {
        Finding::warning(format!(
            "/dev/shm is {} (below {}): NCCL uses it for intra-node transport and runs out of it \
             (Docker's default is 64 MiB); run with `--shm-size=8g` or `--ipc=host`",
            format_bytes(size),
            format_bytes(SHM_WARN_BELOW)
        ))
    })
}

/// `/dev/infiniband` missing while the kernel shows RDMA devices: the container lacks them.
pub fn dev_infiniband_finding(present: bool, kernel_has_devices: bool) -> Option<Finding> {
    (!present && kernel_has_devices).then(|| {
        Finding::warning(
            "/dev/infiniband is missing although the kernel has RDMA devices: mount it into the container \
             (`--device=/dev/infiniband`, or in Kubernetes an RDMA device plugin)",
        )
    })
}

/// Remarks on `NCCL_NET_PLUGIN` and `NCCL_NET`.
pub fn env_findings(env: &NcclEnv, plugin_name: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    match env.net_plugin.as_deref().map(str::trim) {
        None | Some("") => out.push(Finding::note(
            "NCCL_NET_PLUGIN is unset: NCCL loads libnccl-net.so from the library path; set \
             NCCL_NET_PLUGIN=ferro (for libnccl-net-ferro.so) or to the plugin's path unless it is installed under that name",
        )),
        Some(v) if v.eq_ignore_ascii_case("none") => out.push(Finding::warning(
            "NCCL_NET_PLUGIN=none: NCCL loads no network plugin, so this plugin is never used",
        )),
        Some(_) => {}
    }
    if let Some(net) = env.net.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        if !net.eq_ignore_ascii_case(plugin_name) {
            out.push(Finding::warning(format!(
                "NCCL_NET={net}: NCCL uses only the network named {net:?}, not {plugin_name}; unset it or set NCCL_NET={plugin_name}"
            )));
        }
    }
    out
}

/// Whether the capability masks in `/proc/self/status` text have `CAP_IPC_LOCK` effective.
pub fn cap_ipc_lock_from_status(status: &str) -> Option<bool> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    let mask = u64::from_str_radix(hex, 16).ok()?;
    Some(mask & (1 << CAP_IPC_LOCK_BIT) != 0)
}

/// Why libibverbs does not list a device that sysfs shows.
pub fn unlisted_reason(
    library_loaded: bool,
    dev_infiniband_present: bool,
    custom_sysfs_root: bool,
) -> String {
    if !library_loaded {
        "libibverbs is not loaded".to_string()
    } else if custom_sysfs_root {
        "not listed by libibverbs (it reads the real /sys; --sysfs-root only changes what the doctor reads)".to_string()
    } else if !dev_infiniband_present {
        "not listed by libibverbs: /dev/infiniband is missing (mount it into the container: --device=/dev/infiniband)"
            .to_string()
    } else {
        "not listed by libibverbs: no provider library for its driver (install rdma-core's ibverbs-providers) \
         or no access to /dev/infiniband/uverbs*"
            .to_string()
    }
}

/// What to do about a libibverbs load failure (beyond the loader's own message).
pub fn load_hint(err: &LoadError, override_value: Option<&str>) -> Option<String> {
    if let Some(v) = override_value {
        return Some(format!(
            "{LIB_ENV}={v} chose this library; unset it to use {DEFAULT_LIB}"
        ));
    }
    match err {
        // The loader's message already says what to install.
        LoadError::NotFound { .. } => None,
        LoadError::MissingSymbol { .. } => Some(
            "install rdma-core's libibverbs (Debian/Ubuntu: libibverbs1 ibverbs-providers, RHEL: rdma-core)".to_string(),
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// Verdicts (pure)
// ---------------------------------------------------------------------------------------------

/// The verdict for one port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortVerdict {
    pub usable: bool,
    /// `"rxe0 port 1: OK — RoCE v2 GID 1 (::ffff:127.0.0.1) via lo, 2500 Mbps"`.
    pub line: String,
}

/// Verdict of `port` of `dev`; a device-level error makes every port unusable.
pub fn port_verdict(dev: &Device, port: &Port) -> PortVerdict {
    let head = format!("{} port {}", dev.name, port.num);
    match port_problem(dev, port) {
        Some(why) => PortVerdict {
            usable: false,
            line: format!("{head}: NOT USABLE — {why}"),
        },
        None => PortVerdict {
            usable: true,
            line: format!("{head}: OK — {}", ok_detail(port)),
        },
    }
}

/// Why `port` of `dev` is not usable (the device's problem first), or `None` when it is.
pub fn port_problem(dev: &Device, port: &Port) -> Option<String> {
    match (&dev.error, &port.usable) {
        (Some(d), Err(p)) if d != p => Some(format!("{d}; also {p}")),
        (Some(e), _) | (None, Err(e)) => Some(e.clone()),
        (None, Ok(())) => None,
    }
}

fn ok_detail(port: &Port) -> String {
    let speed = port
        .speed_mbps
        .map_or("speed unknown".to_string(), |m| format!("{m} Mbps"));
    if !port.link_layer.is_ethernet() {
        return format!("InfiniBand LID {}, {speed}", port.lid);
    }
    match &port.gid {
        Ok(c) => {
            let kind = match c.gid.gid_type {
                GidType::RoceV1 => "RoCE v1",
                GidType::RoceV2 => "RoCE v2",
                GidType::Ib | GidType::Unknown => "RoCE",
            };
            let via = c
                .gid
                .netdev
                .as_ref()
                .or(port.netdev.as_ref())
                .map_or(String::new(), |n| format!(" via {n}"));
            let caveat = if c.gid.is_link_local() {
                " (link-local: not routable between subnets)"
            } else {
                ""
            };
            format!("{kind} GID {} ({}){caveat}{via}, {speed}", c.index, c.gid)
        }
        Err(e) => format!("RoCE, {speed} (GID: {e})"),
    }
}

/// One verdict line per device port (and per port-less device that has an error).
pub fn verdict_lines(r: &Report) -> Vec<PortVerdict> {
    let mut out = Vec::new();
    for d in &r.devices {
        if d.ports.is_empty() {
            let why = d
                .error
                .clone()
                .unwrap_or_else(|| "the device has no ports".to_string());
            out.push(PortVerdict {
                usable: false,
                line: format!("{}: NOT USABLE — {why}", d.name),
            });
        }
        out.extend(d.ports.iter().map(|p| port_verdict(d, p)));
    }
    out
}

/// The overall verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overall {
    /// The plugin would expose at least one device port to NCCL.
    pub ok: bool,
    /// Ports the hardware checks pass for (`ok` also needs `NCCL_IB_DISABLE` unset).
    pub usable_ports: usize,
    /// One line.
    pub summary: String,
}

/// The overall verdict of a report.
pub fn overall(r: &Report) -> Overall {
    let lines = verdict_lines(r);
    let usable: Vec<String> = r
        .devices
        .iter()
        .flat_map(|d| {
            d.ports
                .iter()
                .filter(move |p| port_verdict(d, p).usable)
                .map(move |p| format!("{}:{}", d.name, p.num))
        })
        .collect();
    let n = usable.len();
    let (ok, summary) = if r.library.outcome.is_err() {
        (
            false,
            format!("NOT USABLE — libibverbs could not be loaded. {FALLBACK}"),
        )
    } else if !r.devices.iter().any(|d| d.listed_by_verbs) {
        (false, format!("NOT USABLE — no RDMA devices. {FALLBACK}"))
    } else if n == 0 {
        (
            false,
            format!(
                "NOT USABLE — none of the {} RDMA port(s) above is usable. {FALLBACK}",
                lines.len()
            ),
        )
    } else if r.config.disable {
        (
            false,
            format!(
                "NOT USABLE — NCCL_IB_DISABLE=1 disables the plugin ({n} port(s) would otherwise be usable). {FALLBACK}"
            ),
        )
    } else {
        let warnings = warnings(r).len();
        let tail = match warnings {
            0 => String::new(),
            1 => " (1 warning above)".to_string(),
            w => format!(" ({w} warnings above)"),
        };
        (
            true,
            format!(
                "OK — the plugin would expose {n} NCCL network device(s): {}{tail}",
                usable.join(", ")
            ),
        )
    };
    Overall {
        ok,
        usable_ports: n,
        summary,
    }
}

/// 0 when the plugin would expose a device port, 1 otherwise.
pub fn exit_code(r: &Report) -> u8 {
    if overall(r).ok { 0 } else { 1 }
}

/// The explanation shown when libibverbs loaded but lists no device (else `None`).
pub fn no_devices_explanation(r: &Report) -> Option<String> {
    if r.library.outcome.is_err() || r.devices.iter().any(|d| d.listed_by_verbs) {
        return None;
    }
    let lib = &r.library.name;
    let class = r.sysfs_root.join("class/infiniband");
    let present = r.host.dev_infiniband.is_some();
    if r.devices.is_empty() {
        let cause = if present {
            format!(
                "The kernel shows no RDMA device (nothing in {}): no RDMA driver is loaded.",
                class.display()
            )
        } else {
            format!(
                "The kernel has no RDMA driver loaded (nothing in {}), or /dev/infiniband is not mounted into this container.",
                class.display()
            )
        };
        return Some(format!(
            "No RDMA devices: libibverbs ({lib}) loaded but lists no devices. {cause} {FALLBACK}"
        ));
    }
    let names: Vec<&str> = r.devices.iter().map(|d| d.name.as_str()).collect();
    let cause = if r.sysfs_root != Path::new("/sys") {
        "libibverbs reads the real /sys, not the tree given with --sysfs-root.".to_string()
    } else if present {
        "Their libibverbs provider is missing (install rdma-core's ibverbs-providers), or /dev/infiniband/uverbs* is not accessible.".to_string()
    } else {
        "/dev/infiniband is not mounted into this container (`--device=/dev/infiniband`)."
            .to_string()
    };
    Some(format!(
        "No RDMA devices: libibverbs ({lib}) loaded but lists none of the {} RDMA device(s) in {} ({}). {cause} {FALLBACK}",
        names.len(),
        class.display(),
        names.join(", ")
    ))
}

/// Every configuration, host and environment warning, in report order.
pub fn warnings(r: &Report) -> Vec<String> {
    let mut out: Vec<String> = r.config_warnings.clone();
    out.extend(
        host_findings(r)
            .into_iter()
            .filter(|f| f.level == Level::Warning)
            .map(|f| f.text),
    );
    out
}

/// Findings about host facts and the environment, in display order.
pub fn host_findings(r: &Report) -> Vec<Finding> {
    let h = &r.host;
    let mut out = Vec::new();
    if let Ok(m) = &h.memlock {
        out.extend(memlock_finding(m.soft, h.cap_ipc_lock));
    }
    if let Ok(s) = &h.shm {
        out.extend(shm_finding(s.size_bytes));
    }
    out.extend(dev_infiniband_finding(
        h.dev_infiniband.is_some(),
        !r.devices.is_empty(),
    ));
    out.extend(env_findings(&h.env, &r.plugin_name));
    out
}

fn gpu_description(r: &Report) -> String {
    let g = r.host.gpu;
    // The plugin offers GPU memory per device, as detected (see each device's "GPU memory" line).
    let plugin = "decided per device (see each device's \"GPU memory\" line)";
    let modules = match (g.nvidia_driver, g.peermem) {
        (false, _) => "NVIDIA driver not loaded".to_string(),
        (true, true) => "NVIDIA driver and nvidia_peermem loaded".to_string(),
        (true, false) => "NVIDIA driver loaded, nvidia_peermem not loaded".to_string(),
    };
    let dmabuf = match &r.library.outcome {
        Ok(c) if c.reg_dmabuf_mr => "; libibverbs can register DMA-BUF",
        Ok(_) => "; libibverbs cannot register DMA-BUF (rdma-core older than 34)",
        Err(_) => "",
    };
    format!("GPUDirect RDMA: {plugin}; {modules}{dmabuf}")
}

// ---------------------------------------------------------------------------------------------
// Small formatting helpers
// ---------------------------------------------------------------------------------------------

/// `64 MiB`, `1.5 GiB`, `512 B`.
pub fn format_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut unit = 0;
    let mut div: u64 = 1;
    while unit + 1 < UNITS.len() && n / div >= 1024 {
        div *= 1024;
        unit += 1;
    }
    if n % div == 0 {
        format!("{} {}", n / div, UNITS[unit])
    } else {
        format!("{:.1} {}", n as f64 / div as f64, UNITS[unit])
    }
}

fn gid_type_name(t: GidType) -> &'static str {
    match t {
        GidType::Ib => "IB",
        GidType::RoceV1 => "RoCE v1",
        GidType::RoceV2 => "RoCE v2",
        GidType::Unknown => "unknown",
    }
}

fn family_name(g: &GidEntry) -> Option<&'static str> {
    g.family().map(|f| match f {
        AddrFamily::V4 => "v4",
        AddrFamily::V6 => "v6",
    })
}

/// Appends `text` word-wrapped at [`WIDTH`]: the first line after `first`, the others after `rest`.
fn wrap(out: &mut String, first: &str, rest: &str, text: &str) {
    let mut line = String::from(first);
    let mut empty = true;
    for word in text.split_whitespace() {
        if !empty && line.chars().count() + 1 + word.chars().count() > WIDTH {
            out.push_str(&line);
            out.push('\n');
            line = String::from(rest);
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    out.push_str(&line);
    out.push('\n');
}

fn or_unset(v: Option<&str>) -> String {
    v.map_or("unset".to_string(), |s| format!("{s:?}"))
}

// ---------------------------------------------------------------------------------------------
// Text rendering
// ---------------------------------------------------------------------------------------------

/// The one-screen text report.
pub fn render_text(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "nccl-net-doctor: {} {} (NCCL network plugin over ibverbs)",
        r.plugin_name, r.plugin_version
    );

    o.push_str("\nConfiguration\n");
    wrap(&mut o, "  ", "    ", &r.config.summary());
    for w in &r.config_warnings {
        wrap(&mut o, "  warning: ", "    ", w);
    }

    o.push_str("\nlibibverbs\n");
    render_library(&mut o, &r.library);

    o.push_str("\nDevices\n");
    if let Some(text) = no_devices_explanation(r) {
        wrap(&mut o, "  ", "  ", &text);
    } else if r.library.outcome.is_err() && r.devices.is_empty() {
        o.push_str("  not enumerated (libibverbs is not loaded)\n");
    }
    for d in &r.devices {
        render_device(&mut o, d);
    }
    for e in &r.enumeration_errors {
        wrap(&mut o, "  warning: ", "    ", e);
    }

    o.push_str("\nHost\n");
    render_host(&mut o, r);

    o.push_str("\nVerdict\n");
    for v in verdict_lines(r) {
        wrap(&mut o, "  ", "      ", &v.line);
    }
    wrap(&mut o, "  => ", "     ", &overall(r).summary);
    o
}

fn render_library(o: &mut String, lib: &Library) {
    let ov = match &lib.override_value {
        Some(v) => format!("{LIB_ENV}={v:?}"),
        None => format!("{LIB_ENV} unset"),
    };
    match &lib.outcome {
        Ok(caps) => {
            let _ = writeln!(o, "  loaded {} ({ov})", lib.name);
            let iova2 = if caps.reg_mr_iova2 {
                "yes"
            } else {
                "no (rdma-core older than 22: no relaxed ordering)"
            };
            let dmabuf = if caps.reg_dmabuf_mr {
                "yes"
            } else {
                "no (rdma-core older than 34: no DMA-BUF registration)"
            };
            let _ = writeln!(
                o,
                "  ibv_reg_mr_iova2: {iova2}; ibv_reg_dmabuf_mr: {dmabuf}"
            );
        }
        Err(e) => {
            wrap(o, "  NOT LOADED: ", "    ", &e.message);
            if lib.override_value.is_none() {
                let _ = writeln!(o, "  ({LIB_ENV} can name a libibverbs at another path)");
            }
            if let Some(h) = &e.hint {
                wrap(o, "  hint: ", "    ", h);
            }
        }
    }
}

fn render_device(o: &mut String, d: &Device) {
    let fw = d.fw_ver.as_deref().filter(|s| !s.is_empty()).unwrap_or("?");
    let qps = d.max_qp.map_or(String::new(), |q| format!(", max QPs {q}"));
    let pci = d
        .pci_path
        .as_ref()
        .map_or("virtual (no PCI device)".to_string(), |p| {
            format!("PCI {p}")
        });
    let _ = writeln!(o, "  {}: fw {fw}{qps}, {pci}", d.name);
    let guid = |g: Option<u64>| g.map_or("?".to_string(), format_guid);
    let _ = writeln!(
        o,
        "    node GUID {}, sys image GUID {}",
        guid(d.node_guid),
        guid(d.sys_image_guid)
    );
    if let Some(g) = &d.gdr {
        wrap(o, "    GPU memory: ", "      ", g);
    }
    if let Some(e) = &d.error {
        wrap(o, "    error: ", "      ", e);
    }
    for n in &d.notes {
        wrap(o, "    note: ", "      ", n);
    }
    for p in &d.ports {
        render_port(o, p);
    }
}

fn render_port(o: &mut String, p: &Port) {
    let mut line = format!("    port {}: {}, {}", p.num, p.state, p.link_layer);
    match (p.speed_mbps, p.speed_text.is_empty()) {
        (Some(m), false) => {
            let _ = write!(line, ", {m} Mbps ({})", p.speed_text);
        }
        (Some(m), true) => {
            let _ = write!(line, ", {m} Mbps");
        }
        (None, false) => {
            let _ = write!(line, ", {}", p.speed_text);
        }
        (None, true) => line.push_str(", speed unknown"),
    }
    if let Some(mtu) = p.active_mtu {
        let _ = write!(line, ", active MTU {mtu}");
    }
    if let Some(n) = &p.netdev {
        let _ = write!(line, ", netdev {n}");
    }
    if !p.link_layer.is_ethernet() {
        let _ = write!(line, ", LID {}", p.lid);
    }
    o.push_str(&line);
    o.push('\n');
    o.push_str(&gid_table(p));
    match &p.gid {
        Ok(c) => wrap(o, "      GID choice: ", "        ", &c.reason),
        Err(e) if p.link_layer.is_ethernet() => wrap(o, "      GID: ", "        ", e),
        Err(e) => wrap(
            o,
            "      GID: ",
            "        ",
            &format!("{e} (InfiniBand addresses by LID; not fatal)"),
        ),
    }
}

/// The port's non-zero GID entries like `show_gids`, the plugin's choice marked `*`.
pub fn gid_table(p: &Port) -> String {
    let mut o = String::new();
    let rows: Vec<&GidEntry> = p.gids.iter().filter(|g| !g.is_zero()).collect();
    let zeros = p.gids.len() - rows.len();
    if rows.is_empty() {
        if p.gids.is_empty() {
            o.push_str("      GID table: not readable from sysfs\n");
        } else {
            let _ = writeln!(o, "      GID table: only empty entries ({zeros})");
        }
        return o;
    }
    let chosen = p.gid.as_ref().ok().map(|c| c.index);
    let compact: Vec<String> = rows.iter().map(|g| g.to_string()).collect();
    let w = compact
        .iter()
        .map(String::len)
        .max()
        .unwrap_or(0)
        .max("address".len());
    let _ = writeln!(
        o,
        "        {:>5}  {:<39}  {:<w$}  {:<7}  af  netdev",
        "index", "GID", "address", "type"
    );
    for (g, c) in rows.iter().zip(&compact) {
        let mark = if Some(g.index) == chosen { '*' } else { ' ' };
        let _ = writeln!(
            o,
            "      {mark} {:>5}  {}  {c:<w$}  {:<7}  {:<2}  {}",
            g.index,
            g.raw_text(),
            gid_type_name(g.gid_type),
            family_name(g).unwrap_or("-"),
            g.netdev.as_deref().unwrap_or("-")
        );
    }
    if zeros > 0 {
        let _ = writeln!(o, "        ({zeros} empty entries not shown)");
    }
    o
}

fn render_host(o: &mut String, r: &Report) {
    let h = &r.host;
    match &h.memlock {
        Ok(m) => {
            let soft = m.soft.map_or("unlimited".to_string(), format_bytes);
            let hard = m.hard.map_or("unlimited".to_string(), format_bytes);
            let _ = writeln!(
                o,
                "  locked memory (RLIMIT_MEMLOCK): {soft} (hard limit {hard})"
            );
            if let Some(f) = memlock_finding(m.soft, h.cap_ipc_lock) {
                render_finding(o, &f);
            }
        }
        Err(e) => {
            let _ = writeln!(o, "  locked memory (RLIMIT_MEMLOCK): unknown ({e})");
        }
    }
    match &h.iommu {
        Some(m) => wrap(o, "  ", "    ", &m.describe()),
        None => o.push_str("  IOMMU: unknown (cannot read /proc/cmdline)\n"),
    }
    match &h.shm {
        Ok(s) => {
            let _ = writeln!(
                o,
                "  /dev/shm: {} ({} free)",
                format_bytes(s.size_bytes),
                format_bytes(s.available_bytes)
            );
            if let Some(f) = shm_finding(s.size_bytes) {
                render_finding(o, &f);
            }
        }
        Err(e) => {
            let _ = writeln!(o, "  /dev/shm: {e}");
        }
    }
    match &h.dev_infiniband {
        Some(entries) if entries.is_empty() => o.push_str("  /dev/infiniband: present, empty\n"),
        Some(entries) => {
            wrap(o, "  /dev/infiniband: ", "    ", &entries.join(" "));
        }
        None => o.push_str("  /dev/infiniband: absent\n"),
    }
    if let Some(f) = dev_infiniband_finding(h.dev_infiniband.is_some(), !r.devices.is_empty()) {
        render_finding(o, &f);
    }
    wrap(o, "  ", "    ", &gpu_description(r));
    let env: Vec<String> = h
        .env
        .pairs()
        .iter()
        .map(|(k, v)| format!("{k}={}", or_unset(*v)))
        .collect();
    wrap(o, "  ", "    ", &env.join("  "));
    for f in env_findings(&h.env, &r.plugin_name) {
        render_finding(o, &f);
    }
}

fn render_finding(o: &mut String, f: &Finding) {
    let first = match f.level {
        Level::Warning => "    warning: ",
        Level::Note => "    note: ",
    };
    wrap(o, first, "      ", &f.text);
}

// ---------------------------------------------------------------------------------------------
// JSON rendering
// ---------------------------------------------------------------------------------------------

/// The report as one JSON object (keys in the module documentation).
pub fn to_json(r: &Report) -> Value {
    let c = &r.config;
    let h = &r.host;
    let lib = &r.library;
    let finding_text =
        |f: Option<Finding>, level: Level| f.filter(|f| f.level == level).map(|f| f.text);
    let memlock = match &h.memlock {
        Ok(m) => {
            let f = memlock_finding(m.soft, h.cap_ipc_lock);
            json!({
                "soft_bytes": m.soft, "hard_bytes": m.hard, "unlimited": m.soft.is_none(),
                "cap_ipc_lock": h.cap_ipc_lock,
                "warning": finding_text(f.clone(), Level::Warning), "note": finding_text(f, Level::Note),
                "error": null,
            })
        }
        Err(e) => json!({
            "soft_bytes": null, "hard_bytes": null, "unlimited": false, "cap_ipc_lock": h.cap_ipc_lock,
            "warning": null, "note": null, "error": e,
        }),
    };
    let iommu = match &h.iommu {
        Some(m) => json!({
            "mode": match m {
                IommuMode::NotSet => "not_set",
                IommuMode::Off => "off",
                IommuMode::Passthrough => "passthrough",
                IommuMode::On(_) => "translated",
            },
            "description": m.describe(),
            "gdr_friendly": m.gdr_friendly(),
        }),
        None => {
            json!({"mode": "unknown", "description": "cannot read /proc/cmdline", "gdr_friendly": null})
        }
    };
    let shm = match &h.shm {
        Ok(s) => json!({
            "size_bytes": s.size_bytes, "available_bytes": s.available_bytes,
            "warning": shm_finding(s.size_bytes).map(|f| f.text), "error": null,
        }),
        Err(e) => json!({"size_bytes": null, "available_bytes": null, "warning": null, "error": e}),
    };
    let o = overall(r);
    json!({
        "format_version": 1,
        "plugin": {"name": r.plugin_name, "version": r.plugin_version},
        "config": {
            "summary": c.summary(),
            "warnings": r.config_warnings,
            "ib_disable": c.disable,
            "gid_index": c.gid_index,
            "addr_family": c.addr_family.to_string(),
            "addr_range": c.addr_range.map(|(ip, p)| format!("{ip}/{p}")),
            "roce_version": c.roce_version,
        },
        "libibverbs": {
            "loaded": lib.outcome.is_ok(),
            "library": lib.name,
            "override_variable": LIB_ENV,
            "override_value": lib.override_value,
            "capabilities": lib.outcome.as_ref().ok().map(|caps| json!({
                "ibv_reg_mr_iova2": caps.reg_mr_iova2,
                "ibv_reg_dmabuf_mr": caps.reg_dmabuf_mr,
            })),
            "error": lib.outcome.as_ref().err().map(|e| e.message.clone()),
            "hint": lib.outcome.as_ref().err().and_then(|e| e.hint.clone()),
        },
        "sysfs_root": r.sysfs_root.display().to_string(),
        "devices": r.devices.iter().map(device_json).collect::<Vec<_>>(),
        "enumeration_errors": r.enumeration_errors,
        "no_devices_explanation": no_devices_explanation(r),
        "host": {
            "memlock": memlock,
            "iommu": iommu,
            "dev_shm": shm,
            "dev_infiniband": {
                "present": h.dev_infiniband.is_some(),
                "entries": h.dev_infiniband.clone().unwrap_or_default(),
                "warning": dev_infiniband_finding(h.dev_infiniband.is_some(), !r.devices.is_empty()).map(|f| f.text),
            },
            "gpu_direct": {
                "plugin_offers_gpu_memory": true,
                "nvidia_driver_loaded": h.gpu.nvidia_driver,
                "nvidia_peermem_loaded": h.gpu.peermem,
                "description": gpu_description(r),
            },
            "env": {
                "nccl_net_plugin": h.env.net_plugin,
                "nccl_net": h.env.net,
                "nccl_ib_hca": h.env.ib_hca,
                "nccl_socket_ifname": h.env.socket_ifname,
                "ferro_ibverbs_lib": lib.override_value,
            },
        },
        "warnings": warnings(r),
        "verdict": {
            "ok": o.ok,
            "usable_ports": o.usable_ports,
            "lines": verdict_lines(r).into_iter().map(|v| v.line).collect::<Vec<_>>(),
            "summary": o.summary,
            "exit_code": exit_code(r),
        },
    })
}

fn device_json(d: &Device) -> Value {
    json!({
        "name": d.name,
        "listed_by_libibverbs": d.listed_by_verbs,
        "node_guid": d.node_guid.map(format_guid),
        "sys_image_guid": d.sys_image_guid.map(format_guid),
        "fw_ver": d.fw_ver,
        "max_qp": d.max_qp,
        "pci_path": d.pci_path,
        "error": d.error,
        "notes": d.notes,
        "gdr": d.gdr,
        "ptr_support": d.ptr_support,
        "ports": d.ports.iter().map(|p| port_json(d, p)).collect::<Vec<_>>(),
    })
}

fn port_json(d: &Device, p: &Port) -> Value {
    let chosen = p.gid.as_ref().ok().map(|c| c.index);
    let v = port_verdict(d, p);
    let reason = port_problem(d, p);
    json!({
        "port": p.num,
        "state": p.state.to_string(),
        "link_layer": p.link_layer.to_string(),
        "speed_mbps": p.speed_mbps,
        "speed_text": p.speed_text,
        "active_mtu": p.active_mtu,
        "lid": p.lid,
        "netdev": p.netdev,
        "gids": p.gids.iter().filter(|g| !g.is_zero()).map(|g| json!({
            "index": g.index,
            "gid": g.raw_text(),
            "compact": g.to_string(),
            "type": gid_type_name(g.gid_type),
            "family": family_name(g),
            "netdev": g.netdev,
            "selected": Some(g.index) == chosen,
        })).collect::<Vec<_>>(),
        "gid_choice": p.gid.as_ref().ok().map(|c| json!({
            "index": c.index,
            "gid": c.gid.to_string(),
            "type": gid_type_name(c.gid.gid_type),
            "reason": c.reason,
        })),
        "gid_error": p.gid.as_ref().err(),
        "usable": v.usable,
        "reason": reason,
        "verdict": v.line,
    })
}

/// [`to_json`], pretty-printed, with a trailing newline.
pub fn render_json(r: &Report) -> String {
    let mut s = serde_json::to_string_pretty(&to_json(r))
        .unwrap_or_else(|e| format!("{{\"error\": {:?}}}", e.to_string()));
    s.push('\n');
    s
}

// ---------------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------------

/// `--help` text.
pub const HELP: &str = "\
nccl-net-doctor: will the Ferro NCCL network plugin work on this host, and why (not)?

Usage: nccl-net-doctor [--json] [--sysfs-root PATH]

Options:
  --json              print the report as one JSON object (keys: see the doctor module docs)
  --sysfs-root PATH   read the RDMA sysfs tree under PATH instead of /sys (for fake trees;
                      libibverbs itself always reads the real /sys)
  -h, --help          print this help

The report uses the plugin's own configuration (NCCL_IB_* variables), device discovery and GID
choice. Exit status: 0 when at least one device port is usable, 1 when none is (including no
libibverbs and NCCL_IB_DISABLE=1), 2 on usage errors.
";

/// Parsed options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub json: bool,
    pub sysfs_root: PathBuf,
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Help,
    Run(Options),
}

/// Parses the arguments after the program name; `Err` is a usage error message.
pub fn parse_args<I: IntoIterator<Item = OsString>>(args: I) -> Result<Command, String> {
    let mut opts = Options {
        json: false,
        sysfs_root: PathBuf::from("/sys"),
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy();
        match text.as_ref() {
            "-h" | "--help" => return Ok(Command::Help),
            "--json" => opts.json = true,
            "--sysfs-root" => match args.next() {
                Some(p) if !p.is_empty() => opts.sysfs_root = PathBuf::from(p),
                _ => return Err("--sysfs-root needs a PATH".to_string()),
            },
            other => match other.strip_prefix("--sysfs-root=") {
                Some("") => return Err("--sysfs-root needs a PATH".to_string()),
                Some(_) => {
                    // Keep non-UTF-8 paths intact: cut the prefix from the raw bytes.
                    use std::os::unix::ffi::OsStrExt;
                    let bytes = arg.as_bytes();
                    let path = std::ffi::OsStr::from_bytes(&bytes["--sysfs-root=".len()..]);
                    opts.sysfs_root = PathBuf::from(path);
                }
                None => return Err(format!("unknown argument {other:?}")),
            },
        }
    }
    Ok(Command::Run(opts))
}

// ---------------------------------------------------------------------------------------------
// Collection
// ---------------------------------------------------------------------------------------------

/// Gathers the report for this host, reading RDMA sysfs under `sys_root`.
pub fn collect(sys_root: &Path) -> Report {
    let (config, config_warnings) = Config::from_env();
    let disc = discover(sys_root, &config);
    let override_value = std::env::var(LIB_ENV).ok().filter(|s| !s.is_empty());
    let library = Library {
        name: match &disc.lib {
            Ok(name) => name.clone(),
            Err(LoadError::NotFound { lib, .. } | LoadError::MissingSymbol { lib, .. }) => {
                lib.clone()
            }
        },
        override_value: override_value.clone(),
        outcome: match ferro_verbs::verbs() {
            Ok(v) => Ok(v.capabilities()),
            Err(e) => Err(LibraryError {
                message: e.to_string(),
                hint: load_hint(e, override_value.as_deref()),
            }),
        },
    };
    let host = collect_host(sys_root);
    let mut enumeration_errors = disc.errors.clone();

    let mut devices: Vec<Device> = disc.devices.iter().map(device_from_report).collect();
    // Devices the kernel shows that libibverbs does not list (missing provider, /dev/infiniband
    // not mounted, libibverbs absent): shown from sysfs, with the plugin's GID choice.
    let sys_devices = match sysfs::list_devices(sys_root) {
        Ok(d) => d,
        Err(e) => {
            if disc.lib.is_err() {
                enumeration_errors.push(format!("reading sysfs: {e}"));
            }
            Vec::new()
        }
    };
    let why = unlisted_reason(
        library.outcome.is_ok(),
        host.dev_infiniband.is_some(),
        sys_root != Path::new("/sys"),
    );
    for s in sys_devices
        .iter()
        .filter(|s| !disc.devices.iter().any(|d| d.name == s.name))
    {
        devices.push(device_from_sysfs(s, &config, &why));
    }

    Report {
        plugin_name: crate::PLUGIN_NAME.to_string_lossy().into_owned(),
        plugin_version: crate::VERSION.to_string(),
        config,
        config_warnings,
        library,
        sysfs_root: sys_root.to_path_buf(),
        devices,
        enumeration_errors,
        host,
    }
}

fn device_from_report(d: &DeviceReport) -> Device {
    let sys = d.sys.as_ref();
    // The verbs values are only meaningful when the device could be queried.
    let queried = d.error.is_none();
    Device {
        name: d.name.clone(),
        listed_by_verbs: true,
        node_guid: if queried {
            Some(d.node_guid)
        } else {
            sys.and_then(|s| s.node_guid)
        },
        sys_image_guid: if queried {
            Some(d.sys_image_guid)
        } else {
            sys.and_then(|s| s.sys_image_guid)
        },
        fw_ver: if queried {
            Some(d.fw_ver.clone())
        } else {
            sys.and_then(|s| s.fw_ver.clone())
        },
        max_qp: queried.then_some(d.max_qp),
        pci_path: d.pci_path.as_ref().map(|p| p.display().to_string()),
        error: d
            .error
            .as_ref()
            .map(|e| format!("cannot open or query the device: {e}")),
        notes: sys.map(|s| s.notes.clone()).unwrap_or_default(),
        gdr: d.gdr.as_ref().map(|g| g.summary.clone()),
        ptr_support: d
            .gdr
            .as_ref()
            .map(|g| g.ptr_support_bits | ferro_ffi::NCCL_PTR_HOST),
        ports: d.ports.iter().map(port_from_report).collect(),
    }
}

fn port_from_report(p: &PortReport) -> Port {
    let gid = p.gid.clone().map_err(|e| e.to_string());
    let netdev = p.sys.as_ref().and_then(|s| s.netdev.clone());
    let usable = explain(&p.verdict, &p.link_layer, netdev.as_deref());
    Port {
        num: p.num,
        state: p.state,
        link_layer: p.link_layer.clone(),
        speed_mbps: p.speed_mbps,
        speed_text: p.speed_text.clone(),
        active_mtu: p.active_mtu,
        lid: p.lid,
        netdev,
        gids: p.sys.as_ref().map(|s| s.gids.clone()).unwrap_or_default(),
        gid,
        usable,
    }
}

/// Renders the plugin's verdict on a port (see `discovery::port_verdict`) in terms of what the
/// user should look at: `Ok` when the port is usable.
pub fn explain(
    verdict: &PortDecision,
    link_layer: &LinkLayer,
    netdev: Option<&str>,
) -> Result<(), String> {
    let state = match verdict {
        PortDecision::Usable => return Ok(()),
        PortDecision::NotActive { state } => *state,
        PortDecision::NoUsableGid {
            error: e @ GidError::NoUsableGid(_),
        } => {
            let fix = match netdev {
                Some(n) => format!(
                    "give {n} an IP address, or set NCCL_IB_GID_INDEX to a non-zero, routable entry"
                ),
                None => "set NCCL_IB_GID_INDEX to a non-zero, routable entry".to_string(),
            };
            return Err(format!("{e}; {fix}"));
        }
        PortDecision::NoUsableGid { error } => return Err(error.to_string()),
        other => return Err(other.to_string()),
    };
    let hint = match (state, link_layer) {
        (PortState::Down, LinkLayer::Ethernet) => match netdev {
            Some(n) => {
                format!(": no link (check the cable and switch port, and `ip link set {n} up`)")
            }
            None => ": no link (check the cable and switch port)".to_string(),
        },
        (PortState::Down, _) => ": no physical link (check the cable and switch port)".to_string(),
        (PortState::Init, LinkLayer::InfiniBand) => {
            ": no subnet manager has activated the port (run opensm or enable the switch's SM)"
                .to_string()
        }
        (PortState::Armed, _) => ": the subnet manager has not activated the port yet".to_string(),
        _ => ", not ACTIVE".to_string(),
    };
    Err(format!("port state {state}{hint}"))
}

fn device_from_sysfs(s: &SysDevice, cfg: &Config, why: &str) -> Device {
    Device {
        name: s.name.clone(),
        listed_by_verbs: false,
        node_guid: s.node_guid,
        sys_image_guid: s.sys_image_guid,
        fw_ver: s.fw_ver.clone(),
        max_qp: None,
        pci_path: s.pci_path.as_ref().map(|p| p.display().to_string()),
        error: Some(why.to_string()),
        notes: s.notes.clone(),
        gdr: None,
        ptr_support: None,
        ports: s
            .ports
            .iter()
            .map(|p| port_from_sysfs(&s.name, p, cfg))
            .collect(),
    }
}

/// A port of a device libibverbs does not list, judged from sysfs by the plugin's own rule
/// (`discovery::port_verdict`); the device's own error comes on top.
fn port_from_sysfs(dev: &str, p: &SysPort, cfg: &Config) -> Port {
    let choice = select_gid(&p.link_layer, &p.gids, &cfg.gid_policy_for(dev, p.num));
    let verdict = discovery::port_verdict(cfg, dev, p.num, p.state, &p.link_layer, &choice);
    let usable = explain(&verdict, &p.link_layer, p.netdev.as_deref());
    let gid = choice.map_err(|e| e.to_string());
    // `2.5 Gb/sec (1X SDR)` -> `1X SDR`.
    let speed_text = p
        .rate
        .as_ref()
        .and_then(|r| {
            r.text
                .split_once('(')
                .and_then(|(_, t)| t.strip_suffix(')'))
                .map(str::to_string)
        })
        .unwrap_or_default();
    Port {
        num: p.num,
        state: p.state,
        link_layer: p.link_layer.clone(),
        speed_mbps: p.rate.as_ref().map(sysfs::Rate::mbps),
        speed_text,
        active_mtu: None,
        lid: p.lid.unwrap_or(0),
        netdev: p.netdev.clone(),
        gids: p.gids.clone(),
        gid,
        usable,
    }
}

fn collect_host(sys_root: &Path) -> HostFacts {
    let env_var = |k: &str| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned());
    let dev_infiniband = std::fs::read_dir("/dev/infiniband").ok().map(|rd| {
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect();
        names.sort();
        names
    });
    let module = |m: &str| sys_root.join("module").join(m).exists();
    HostFacts {
        memlock: memlock_limit(),
        cap_ipc_lock: std::fs::read_to_string("/proc/self/status")
            .ok()
            .as_deref()
            .and_then(cap_ipc_lock_from_status),
        iommu: sysfs::read_cmdline(Path::new("/proc")).map(|c| sysfs::iommu_mode(&c)),
        shm: statvfs_size(Path::new("/dev/shm")),
        dev_infiniband,
        gpu: GpuFacts {
            nvidia_driver: module("nvidia"),
            peermem: module("nvidia_peermem") || module("nv_peer_mem"),
        },
        env: NcclEnv {
            net_plugin: env_var("NCCL_NET_PLUGIN"),
            net: env_var("NCCL_NET"),
            ib_hca: env_var("NCCL_IB_HCA"),
            socket_ifname: env_var("NCCL_SOCKET_IFNAME"),
        },
    }
}

fn memlock_limit() -> Result<Memlock, String> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is a valid, writable rlimit for getrlimit to fill.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) };
    if rc != 0 {
        return Err(format!("getrlimit: {}", std::io::Error::last_os_error()));
    }
    let conv = |v: libc::rlim_t| {
        if v == libc::RLIM_INFINITY {
            None
        } else {
            Some(v)
        }
    };
    Ok(Memlock {
        soft: conv(rl.rlim_cur),
        hard: conv(rl.rlim_max),
    })
}

// The statvfs fields are u64 on 64-bit targets but u32 on some 32-bit ones.
#[allow(clippy::useless_conversion)]
fn statvfs_size(path: &Path) -> Result<Shm, String> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| "path contains NUL".to_string())?;
    let mut st = core::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is NUL-terminated; `st` is writable storage for one statvfs struct.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        return Err(if e.kind() == std::io::ErrorKind::NotFound {
            "absent (NCCL's intra-node shared-memory transport needs it)".to_string()
        } else {
            format!("cannot measure: {e}")
        });
    }
    // SAFETY: statvfs returned 0, so it filled the struct.
    let st = unsafe { st.assume_init() };
    let frsize = u64::from(st.f_frsize);
    Ok(Shm {
        size_bytes: u64::from(st.f_blocks).saturating_mul(frsize),
        available_bytes: u64::from(st.f_bavail).saturating_mul(frsize),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use ferro_verbs::sysfs::parse_gid;

    fn entry(index: u32, text: &str, t: GidType, ndev: Option<&str>) -> GidEntry {
        GidEntry::new(index, parse_gid(text).unwrap(), t, ndev.map(str::to_string))
    }

    fn rxe_port() -> Port {
        let gids = vec![
            entry(0, "::ffff:127.0.0.1", GidType::RoceV1, Some("lo")),
            entry(1, "::ffff:127.0.0.1", GidType::RoceV2, Some("lo")),
            GidEntry::new(2, [0; 16], GidType::Unknown, None),
            GidEntry::new(3, [0; 16], GidType::Unknown, None),
        ];
        let gid = select_gid(&LinkLayer::Ethernet, &gids, &Config::default().gid_policy()).unwrap();
        Port {
            num: 1,
            state: PortState::Active,
            link_layer: LinkLayer::Ethernet,
            speed_mbps: Some(2500),
            speed_text: "1X SDR".into(),
            active_mtu: Some(1024),
            lid: 0,
            netdev: Some("lo".into()),
            gids,
            gid: Ok(gid),
            usable: Ok(()),
        }
    }

    fn device(name: &str, ports: Vec<Port>) -> Device {
        Device {
            name: name.into(),
            listed_by_verbs: true,
            node_guid: Some(0x0200_00ff_fe00_0000),
            sys_image_guid: Some(0x0200_00ff_fe00_0000),
            fw_ver: Some("0.0.0".into()),
            max_qp: Some(262_144),
            pci_path: None,
            error: None,
            notes: Vec::new(),
            gdr: Some(format!(
                "{name}: GPUDirect RDMA off: provider rejects dma-buf (EOPNOTSUPP); NCCL will stage through host memory"
            )),
            ptr_support: Some(1),
            ports,
        }
    }

    fn host() -> HostFacts {
        HostFacts {
            memlock: Ok(Memlock {
                soft: None,
                hard: None,
            }),
            cap_ipc_lock: Some(false),
            iommu: Some(IommuMode::Passthrough),
            shm: Ok(Shm {
                size_bytes: 16 << 30,
                available_bytes: 16 << 30,
            }),
            dev_infiniband: Some(vec!["rdma_cm".into(), "uverbs0".into()]),
            gpu: GpuFacts::default(),
            env: NcclEnv {
                net_plugin: Some("ferro".into()),
                ..NcclEnv::default()
            },
        }
    }

    fn report(devices: Vec<Device>) -> Report {
        Report {
            plugin_name: "Ferro".into(),
            plugin_version: "0.1.0".into(),
            config: Config::default(),
            config_warnings: Vec::new(),
            library: Library {
                name: "libibverbs.so.1".into(),
                override_value: None,
                outcome: Ok(Capabilities {
                    reg_mr_iova2: true,
                    reg_dmabuf_mr: true,
                    query_gid_ex: true,
                    query_gid_table: true,
                }),
            },
            sysfs_root: PathBuf::from("/sys"),
            devices,
            enumeration_errors: Vec::new(),
            host: host(),
        }
    }

    fn down_port() -> Port {
        let mut p = rxe_port();
        p.state = PortState::Down;
        p.netdev = Some("ens1f1".into());
        p.usable = explain(
            &PortDecision::NotActive { state: p.state },
            &p.link_layer,
            p.netdev.as_deref(),
        );
        p
    }

    /// Whitespace-normalised text, so wrapping does not matter to `contains`.
    fn squash(s: &str) -> String {
        s.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn verdict_lines_ok_and_not_usable() {
        let r = report(vec![
            device("rxe0", vec![rxe_port()]),
            device("mlx5_1", vec![down_port()]),
        ]);
        let lines: Vec<String> = verdict_lines(&r).into_iter().map(|v| v.line).collect();
        assert_eq!(
            lines[0],
            "rxe0 port 1: OK — RoCE v2 GID 1 (::ffff:127.0.0.1) via lo, 2500 Mbps"
        );
        assert!(
            lines[1].starts_with("mlx5_1 port 1: NOT USABLE — port state DOWN"),
            "{}",
            lines[1]
        );
        assert!(lines[1].contains("ip link set ens1f1 up"), "{}", lines[1]);
        let o = overall(&r);
        assert!(o.ok);
        assert_eq!(o.usable_ports, 1);
        assert!(
            o.summary
                .starts_with("OK — the plugin would expose 1 NCCL network device(s): rxe0:1"),
            "{}",
            o.summary
        );
        assert_eq!(exit_code(&r), 0);
        let text = render_text(&r);
        assert!(
            text.contains(
                "  rxe0 port 1: OK — RoCE v2 GID 1 (::ffff:127.0.0.1) via lo, 2500 Mbps\n"
            ),
            "{text}"
        );
        assert!(text.contains("  => OK — the plugin would expose"), "{text}");
    }

    #[test]
    fn infiniband_and_device_errors() {
        let mut ib = rxe_port();
        ib.link_layer = LinkLayer::InfiniBand;
        ib.lid = 26;
        ib.speed_mbps = Some(100_000);
        let mut broken = device("mlx5_2", vec![rxe_port()]);
        broken.error = Some("cannot open or query the device: ibv_open_device: EACCES".into());
        let mut portless = device("mlx5_3", Vec::new());
        portless.error = Some("cannot open or query the device: x".into());
        let r = report(vec![device("mlx5_0", vec![ib]), broken, portless]);
        let lines: Vec<String> = verdict_lines(&r).into_iter().map(|v| v.line).collect();
        assert_eq!(
            lines[0],
            "mlx5_0 port 1: OK — InfiniBand LID 26, 100000 Mbps"
        );
        assert_eq!(
            lines[1],
            "mlx5_2 port 1: NOT USABLE — cannot open or query the device: ibv_open_device: EACCES"
        );
        assert_eq!(
            lines[2],
            "mlx5_3: NOT USABLE — cannot open or query the device: x"
        );
        assert_eq!(overall(&r).usable_ports, 1);
    }

    #[test]
    fn gid_table_marks_the_choice_and_skips_zero_entries() {
        let t = gid_table(&rxe_port());
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(
            lines[0].contains("index") && lines[0].contains("GID") && lines[0].contains("netdev"),
            "{t}"
        );
        assert_eq!(
            lines[1],
            "            0  0000:0000:0000:0000:0000:ffff:7f00:0001  ::ffff:127.0.0.1  RoCE v1  v4  lo"
        );
        assert_eq!(
            lines[2],
            "      *     1  0000:0000:0000:0000:0000:ffff:7f00:0001  ::ffff:127.0.0.1  RoCE v2  v4  lo"
        );
        assert_eq!(lines[3].trim(), "(2 empty entries not shown)");
        let text = render_text(&report(vec![device("rxe0", vec![rxe_port()])]));
        assert!(
            text.contains("GID choice: auto: first RoCE v2 IPv4 GID"),
            "{text}"
        );
    }

    #[test]
    fn gid_error_is_shown_and_explains_the_verdict() {
        let mut p = rxe_port();
        p.gids = vec![
            entry(0, "fe80::1", GidType::RoceV2, Some("eth0")),
            GidEntry::new(1, [0; 16], GidType::Unknown, None),
        ];
        let error =
            select_gid(&p.link_layer, &p.gids, &Config::default().gid_policy()).unwrap_err();
        let err = error.to_string();
        p.gid = Err(err.clone());
        p.netdev = Some("eth0".into());
        p.usable = explain(
            &PortDecision::NoUsableGid { error },
            &p.link_layer,
            Some("eth0"),
        );
        let r = report(vec![device("mlx5_0", vec![p.clone()])]);
        let text = render_text(&r);
        let t = gid_table(&p);
        assert!(!t.contains('*'), "nothing chosen: {t}");
        assert!(squash(&text).contains(&format!("GID: {err}")), "{text}");
        let line = &verdict_lines(&r)[0].line;
        assert!(
            line.starts_with("mlx5_0 port 1: NOT USABLE — no usable GID: only link-local"),
            "{line}"
        );
        assert!(line.contains("give eth0 an IP address"), "{line}");
        assert_eq!(exit_code(&r), 1);
        assert!(
            overall(&r)
                .summary
                .starts_with("NOT USABLE — none of the 1 RDMA port(s)")
        );
    }

    #[test]
    fn no_device_explanation_on_a_host_without_rdma() {
        let mut r = report(Vec::new());
        r.host.dev_infiniband = None;
        let e = no_devices_explanation(&r).unwrap();
        assert_eq!(
            e,
            "No RDMA devices: libibverbs (libibverbs.so.1) loaded but lists no devices. The kernel has no RDMA \
             driver loaded (nothing in /sys/class/infiniband), or /dev/infiniband is not mounted into this \
             container. NCCL would fall back to its socket transport."
        );
        let text = render_text(&r);
        assert!(squash(&text).contains(&e), "{text}");
        assert!(!text.contains("error"), "no stack of errors: {text}");
        assert_eq!(verdict_lines(&r), Vec::new());
        assert_eq!(
            overall(&r).summary,
            "NOT USABLE — no RDMA devices. NCCL would fall back to its socket transport."
        );
        assert_eq!(exit_code(&r), 1);
    }

    #[test]
    fn devices_only_in_sysfs_are_explained() {
        let mut d = device("mlx5_0", vec![rxe_port()]);
        d.listed_by_verbs = false;
        let why = unlisted_reason(true, false, false);
        d.error = Some(why.clone());
        let mut r = report(vec![d]);
        r.host.dev_infiniband = None;
        let e = no_devices_explanation(&r).unwrap();
        assert!(
            e.contains("lists none of the 1 RDMA device(s) in /sys/class/infiniband (mlx5_0)"),
            "{e}"
        );
        assert!(e.contains("/dev/infiniband is not mounted"), "{e}");
        assert!(
            warnings(&r)
                .iter()
                .any(|w| w.starts_with("/dev/infiniband is missing")),
            "{:?}",
            warnings(&r)
        );
        assert_eq!(
            verdict_lines(&r)[0].line,
            format!("mlx5_0 port 1: NOT USABLE — {why}")
        );
        assert_eq!(exit_code(&r), 1);
        // A port problem of its own is reported after the device's.
        r.devices[0].ports[0] = down_port();
        let line = &verdict_lines(&r)[0].line;
        assert!(
            line.starts_with(&format!(
                "mlx5_0 port 1: NOT USABLE — {why}; also port state DOWN"
            )),
            "{line}"
        );
        assert!(unlisted_reason(true, true, false).contains("ibverbs-providers"));
        assert!(unlisted_reason(true, true, true).contains("--sysfs-root"));
    }

    #[test]
    fn library_not_loaded() {
        let mut r = report(Vec::new());
        let err = LoadError::NotFound {
            lib: "libibverbs.so.1".into(),
            reason: "not found".into(),
        };
        r.library.outcome = Err(LibraryError {
            message: err.to_string(),
            hint: load_hint(&err, None),
        });
        assert_eq!(no_devices_explanation(&r), None);
        let text = render_text(&r);
        assert!(
            squash(&text)
                .contains("NOT LOADED: cannot load libibverbs.so.1 (not found); install rdma-core"),
            "{text}"
        );
        assert!(
            text.contains("=> NOT USABLE — libibverbs could not be loaded."),
            "{text}"
        );
        assert_eq!(exit_code(&r), 1);
        let v = to_json(&r);
        assert_eq!(v["libibverbs"]["loaded"], false);
        assert!(v["libibverbs"]["capabilities"].is_null());
        let missing = LoadError::MissingSymbol {
            lib: "x".into(),
            symbol: "ibv_get_device_list",
            version: "IBVERBS_1.1",
        };
        assert!(load_hint(&missing, None).unwrap().contains("rdma-core"));
        assert!(
            load_hint(&err, Some("/opt/lib.so"))
                .unwrap()
                .starts_with("FERRO_IBVERBS_LIB=/opt/lib.so")
        );
    }

    #[test]
    fn ib_disable_makes_the_verdict_negative() {
        let mut r = report(vec![device("rxe0", vec![rxe_port()])]);
        r.config.disable = true;
        let o = overall(&r);
        assert!(!o.ok);
        assert_eq!(o.usable_ports, 1);
        assert!(o.summary.contains("NCCL_IB_DISABLE=1"), "{}", o.summary);
        assert_eq!(exit_code(&r), 1);
    }

    #[test]
    fn json_has_the_documented_keys_and_is_valid() {
        let mut r = report(vec![
            device("rxe0", vec![rxe_port()]),
            device("mlx5_1", vec![down_port()]),
        ]);
        r.config_warnings
            .push("NCCL_IB_GID_INDEX=\"abc\" is not an integer; using the default -1".into());
        let text = render_json(&r);
        let v: Value = serde_json::from_str(&text).unwrap();
        for k in [
            "format_version",
            "plugin",
            "config",
            "libibverbs",
            "sysfs_root",
            "devices",
            "enumeration_errors",
            "no_devices_explanation",
            "host",
            "warnings",
            "verdict",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        assert_eq!(v["plugin"]["name"], "Ferro");
        assert_eq!(v["config"]["gid_index"], -1);
        assert_eq!(v["libibverbs"]["override_variable"], "FERRO_IBVERBS_LIB");
        assert_eq!(v["libibverbs"]["capabilities"]["ibv_reg_dmabuf_mr"], true);
        let d = &v["devices"][0];
        for k in [
            "name",
            "listed_by_libibverbs",
            "node_guid",
            "sys_image_guid",
            "fw_ver",
            "max_qp",
            "pci_path",
            "error",
            "notes",
            "ports",
        ] {
            assert!(d.get(k).is_some(), "device missing {k}");
        }
        assert_eq!(d["node_guid"], "0200:00ff:fe00:0000");
        assert!(d["pci_path"].is_null());
        let p = &d["ports"][0];
        for k in [
            "port",
            "state",
            "link_layer",
            "speed_mbps",
            "speed_text",
            "active_mtu",
            "lid",
            "netdev",
            "gids",
            "gid_choice",
            "gid_error",
            "usable",
            "reason",
            "verdict",
        ] {
            assert!(p.get(k).is_some(), "port missing {k}");
        }
        assert_eq!(p["state"], "ACTIVE");
        assert_eq!(
            p["gids"].as_array().unwrap().len(),
            2,
            "zero entries skipped"
        );
        assert_eq!(p["gids"][1]["selected"], true);
        assert_eq!(p["gids"][1]["type"], "RoCE v2");
        assert_eq!(p["gids"][1]["family"], "v4");
        assert_eq!(
            p["gids"][0]["gid"],
            "0000:0000:0000:0000:0000:ffff:7f00:0001"
        );
        assert_eq!(p["gids"][0]["compact"], "::ffff:127.0.0.1");
        assert_eq!(p["gid_choice"]["index"], 1);
        assert_eq!(
            p["verdict"],
            "rxe0 port 1: OK — RoCE v2 GID 1 (::ffff:127.0.0.1) via lo, 2500 Mbps"
        );
        assert_eq!(v["devices"][1]["ports"][0]["usable"], false);
        assert!(
            v["devices"][1]["ports"][0]["reason"]
                .as_str()
                .unwrap()
                .starts_with("port state DOWN")
        );
        let h = &v["host"];
        for k in [
            "memlock",
            "iommu",
            "dev_shm",
            "dev_infiniband",
            "gpu_direct",
            "env",
        ] {
            assert!(h.get(k).is_some(), "host missing {k}");
        }
        assert_eq!(h["memlock"]["unlimited"], true);
        assert_eq!(h["iommu"]["mode"], "passthrough");
        assert_eq!(h["env"]["nccl_net_plugin"], "ferro");
        assert!(h["env"]["nccl_net"].is_null());
        assert_eq!(
            v["warnings"][0],
            "NCCL_IB_GID_INDEX=\"abc\" is not an integer; using the default -1"
        );
        assert_eq!(v["verdict"]["ok"], true);
        assert_eq!(v["verdict"]["usable_ports"], 1);
        assert_eq!(v["verdict"]["exit_code"], 0);
        assert_eq!(v["verdict"]["lines"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn json_for_a_host_without_rdma() {
        let mut r = report(Vec::new());
        r.host.dev_infiniband = None;
        r.host.memlock = Ok(Memlock {
            soft: Some(8 << 20),
            hard: Some(8 << 20),
        });
        let v: Value = serde_json::from_str(&render_json(&r)).unwrap();
        assert!(
            v["no_devices_explanation"]
                .as_str()
                .unwrap()
                .starts_with("No RDMA devices:")
        );
        assert_eq!(v["devices"], json!([]));
        assert_eq!(v["verdict"]["ok"], false);
        assert_eq!(v["verdict"]["exit_code"], 1);
        assert_eq!(v["host"]["memlock"]["soft_bytes"], 8 << 20);
        assert!(
            v["host"]["memlock"]["warning"]
                .as_str()
                .unwrap()
                .contains("8 MiB")
        );
        assert_eq!(v["host"]["dev_infiniband"]["present"], false);
        assert!(
            v["host"]["dev_infiniband"]["warning"].is_null(),
            "no RDMA at all: absence is expected"
        );
    }

    #[test]
    fn memlock_thresholds() {
        assert_eq!(memlock_finding(None, Some(false)), None, "unlimited");
        assert_eq!(
            memlock_finding(Some(MEMLOCK_WARN_BELOW), Some(false)),
            None,
            "at the threshold"
        );
        assert_eq!(memlock_finding(Some(1 << 40), None), None);
        let f = memlock_finding(Some(MEMLOCK_WARN_BELOW - 1), None).unwrap();
        assert_eq!(f.level, Level::Warning);
        let f = memlock_finding(Some(8 << 20), Some(false)).unwrap();
        assert_eq!(f.level, Level::Warning);
        assert!(
            f.text.contains("8 MiB") && f.text.contains("--ulimit memlock=-1"),
            "{}",
            f.text
        );
        let f = memlock_finding(Some(64 << 10), Some(true)).unwrap();
        assert_eq!(
            f.level,
            Level::Note,
            "CAP_IPC_LOCK lifts the limit for RDMA pinning"
        );
        // Rendered under the limit line and counted among warnings.
        let mut r = report(vec![device("rxe0", vec![rxe_port()])]);
        r.host.memlock = Ok(Memlock {
            soft: Some(8 << 20),
            hard: None,
        });
        let text = render_text(&r);
        assert!(
            text.contains("locked memory (RLIMIT_MEMLOCK): 8 MiB (hard limit unlimited)"),
            "{text}"
        );
        assert!(
            text.contains("    warning: locked-memory limit 8 MiB"),
            "{text}"
        );
        assert_eq!(warnings(&r).len(), 1);
        assert!(
            overall(&r).summary.ends_with("(1 warning above)"),
            "{}",
            overall(&r).summary
        );
    }

    #[test]
    fn shm_thresholds() {
        assert_eq!(shm_finding(SHM_WARN_BELOW), None);
        assert_eq!(shm_finding(64 << 30), None);
        let f = shm_finding(64 << 20).unwrap();
        assert_eq!(f.level, Level::Warning);
        assert!(
            f.text.starts_with("/dev/shm is 64 MiB (below 1 GiB)"),
            "{}",
            f.text
        );
        assert!(f.text.contains("--shm-size"), "{}", f.text);
        assert!(shm_finding(SHM_WARN_BELOW - 1).is_some());
    }

    #[test]
    fn environment_findings() {
        let plain = NcclEnv {
            net_plugin: Some("ferro".into()),
            ..NcclEnv::default()
        };
        assert!(env_findings(&plain, "Ferro").is_empty());
        let unset = env_findings(&NcclEnv::default(), "Ferro");
        assert_eq!(unset.len(), 1);
        assert_eq!(unset[0].level, Level::Note);
        let other = NcclEnv {
            net_plugin: Some("none".into()),
            net: Some("IB".into()),
            ..NcclEnv::default()
        };
        let f = env_findings(&other, "Ferro");
        assert_eq!(f.len(), 2);
        assert!(f.iter().all(|f| f.level == Level::Warning));
        assert!(f[1].text.starts_with("NCCL_NET=IB"), "{}", f[1].text);
        let ours = NcclEnv {
            net: Some("ferro".into()),
            net_plugin: Some("ferro".into()),
            ..NcclEnv::default()
        };
        assert!(
            env_findings(&ours, "Ferro").is_empty(),
            "NCCL_NET matches case-insensitively"
        );
    }

    #[test]
    fn cap_eff_parsing() {
        assert_eq!(
            cap_ipc_lock_from_status("Name:\tx\nCapEff:\t000001ffffffffff\n"),
            Some(true)
        );
        assert_eq!(
            cap_ipc_lock_from_status("CapEff:\t00000000a80425fb\n"),
            Some(false),
            "Docker's default set"
        );
        assert_eq!(
            cap_ipc_lock_from_status("CapEff:\t0000000000004000\n"),
            Some(true)
        );
        assert_eq!(cap_ipc_lock_from_status("Name:\tx\n"), None);
    }

    #[test]
    fn byte_formatting() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(64 << 10), "64 KiB");
        assert_eq!(format_bytes(64 << 20), "64 MiB");
        assert_eq!(format_bytes(3 << 29), "1.5 GiB");
    }

    #[test]
    fn argument_parsing() {
        let p = |v: &[&str]| parse_args(v.iter().map(OsString::from));
        assert_eq!(
            p(&[]),
            Ok(Command::Run(Options {
                json: false,
                sysfs_root: "/sys".into()
            }))
        );
        assert_eq!(
            p(&["--json", "--sysfs-root", "/tmp/fake"]),
            Ok(Command::Run(Options {
                json: true,
                sysfs_root: "/tmp/fake".into()
            }))
        );
        assert_eq!(
            p(&["--sysfs-root=/x"]),
            Ok(Command::Run(Options {
                json: false,
                sysfs_root: "/x".into()
            }))
        );
        assert_eq!(p(&["--json", "-h"]), Ok(Command::Help));
        assert!(p(&["--sysfs-root"]).is_err());
        assert!(p(&["--sysfs-root="]).is_err());
        assert_eq!(
            p(&["--bogus"]),
            Err("unknown argument \"--bogus\"".to_string())
        );
    }

    #[test]
    fn port_state_explanations() {
        let ib = LinkLayer::InfiniBand;
        let not_active =
            |state| explain(&PortDecision::NotActive { state }, &ib, None).unwrap_err();
        assert!(not_active(PortState::Init).contains("subnet manager"));
        assert_eq!(
            not_active(PortState::Down),
            "port state DOWN: no physical link (check the cable and switch port)"
        );
        assert_eq!(
            not_active(PortState::ActiveDefer),
            "port state ACTIVE_DEFER, not ACTIVE"
        );
        let explicit = PortDecision::NoUsableGid {
            error: GidError::IndexNotFound {
                index: 3,
                origin: "explicit NCCL_IB_GID_INDEX=3".into(),
                valid: vec![0, 1],
            },
        };
        assert_eq!(
            explain(&explicit, &LinkLayer::Ethernet, Some("eth0")),
            Err("GID index 3 (explicit NCCL_IB_GID_INDEX=3) is not in the port's GID table; valid non-zero indexes: [0, 1]".to_string()),
            "an explicit index that does not work is said as it is, without the auto-choice hint"
        );
        assert_eq!(explain(&PortDecision::Usable, &ib, None), Ok(()));
        assert_eq!(
            explain(
                &PortDecision::ExcludedByHca {
                    filter: "^mlx5_1".into()
                },
                &ib,
                None
            ),
            Err("excluded by NCCL_IB_HCA=^mlx5_1".to_string())
        );
    }

    #[test]
    fn wrapping_keeps_words_and_indents() {
        let mut o = String::new();
        let text = "word ".repeat(60);
        wrap(&mut o, "  warning: ", "    ", &text);
        assert!(o.lines().all(|l| l.chars().count() <= WIDTH), "{o}");
        assert!(o.lines().skip(1).all(|l| l.starts_with("    word")), "{o}");
        assert_eq!(squash(&o), squash(&format!("warning: {text}")));
    }
}
