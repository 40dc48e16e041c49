//! Verdicts (pure): one line per port rendered from the plugin's own port verdict, the overall
//! verdict and the exit status.

use crate::*;
use ferro_verbs::sysfs::GidType;
use std::path::Path;

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

pub(crate) fn ok_detail(port: &Port) -> String {
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

/// 0 when the plugin would expose a device port and no node or pod check failed; 1 when the
/// plugin would expose none; 3 when it would, but a node or pod check failed (GPUDirect RDMA
/// or the job's networking will not work as intended).
pub fn exit_code(r: &Report) -> u8 {
    if !overall(r).ok {
        1
    } else if node_status(r) == Some(Status::Fail) {
        3
    } else {
        0
    }
}

/// The node and pod checks of the report, the host's locked memory and `/dev/shm` judged among
/// them (empty when the node facts were not collected).
pub fn report_checks(r: &Report) -> Vec<Check> {
    node::policy::apply_gdr_policy(raw_report_checks(r), r.gdr_policy)
}

/// [`report_checks`] before the GPUDirect RDMA policy (`--gdr-policy`) is applied.
pub fn raw_report_checks(r: &Report) -> Vec<Check> {
    r.node
        .as_ref()
        .map(|f| node_checks(f, &r.host.limits))
        .unwrap_or_default()
}

/// The worst status of the node and pod checks (`None`: not collected).
pub fn node_status(r: &Report) -> Option<Status> {
    r.node.as_ref().map(|_| node::worst(&report_checks(r)))
}

/// One line on the node and pod checks, for the verdict (`None`: not collected).
pub fn node_summary(r: &Report) -> Option<String> {
    let checks = report_checks(r);
    r.node.as_ref()?;
    let n = |s: Status| checks.iter().filter(|c| c.status == s).count();
    let (fail, warn) = (n(Status::Fail), n(Status::Warning));
    Some(match (fail, warn) {
        (0, 0) => "GPUDirect RDMA, node and pod: no problem found".to_string(),
        (0, w) => format!("GPUDirect RDMA, node and pod: {w} warning(s) above"),
        (f, w) => {
            // Exit status 3 only applies when the plugin itself would work (else it is 1).
            let status = if overall(r).ok {
                " (exit status 3)"
            } else {
                ""
            };
            format!(
                "GPUDirect RDMA, node and pod: {f} failed check(s) and {w} warning(s) above{status}"
            )
        }
    })
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
    out.extend(
        report_checks(r)
            .into_iter()
            .filter(|c| c.status >= Status::Warning)
            .map(|c| c.summary),
    );
    out
}

/// Findings about host facts and the environment, in display order.
pub fn host_findings(r: &Report) -> Vec<Finding> {
    let h = &r.host;
    let mut out = Vec::new();
    out.extend(dev_infiniband_finding(
        h.dev_infiniband.is_some(),
        !r.devices.is_empty(),
    ));
    out.extend(shown_env_findings(r));
    out
}

/// The remarks on `NCCL_NET_PLUGIN` and `NCCL_NET` the report shows among the host facts: none
/// when the node facts were collected, whose `nccl.plugin` and `nccl.net` checks judge these
/// variables knowing what is installed (one judgement, not two).
pub fn shown_env_findings(r: &Report) -> Vec<Finding> {
    if r.node.is_some() {
        Vec::new()
    } else {
        env_findings(&r.host.env, &r.plugin_name)
    }
}

pub(crate) fn gpu_description(r: &Report) -> String {
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
