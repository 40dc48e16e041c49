//! Collection: the plugin's own discovery, sysfs for devices libibverbs does not list, and
//! host facts (locked memory and `/dev/shm` through the node readers, under the roots).

use crate::*;
use ferro_verbs::gid::{GidError, select_gid};
use ferro_verbs::loader::LoadError;
use ferro_verbs::sysfs::{self, LinkLayer, PortState, SysDevice, SysPort};
use nccl_net_ferro::config::Config;
use nccl_net_ferro::discovery::{
    self, DeviceReport, PortReport, PortVerdict as PortDecision, discover,
};
use std::path::Path;

/// Gathers the report for this host, reading RDMA sysfs under `sys_root` (and `/proc`, `/dev`).
pub fn collect(sys_root: &Path) -> Report {
    collect_at(&Roots {
        sys: sys_root.to_path_buf(),
        proc: "/proc".into(),
        dev: "/dev".into(),
        fs: "/".into(),
    })
}

/// Gathers the report reading `/sys`, `/proc` and `/dev` under `roots` (libibverbs and the
/// plugin's discovery still see the real host; the node and pod checks read only the roots).
pub fn collect_at(roots: &Roots) -> Report {
    let sys_root = roots.sys.as_path();
    let (config, config_warnings) = Config::from_env();
    let nccl_variables =
        nccl_net_ferro::config::nccl::rows(&config.summary(), &|n| std::env::var(n).ok());
    let override_value = config.ibverbs_lib.clone();
    let _ = ferro_verbs::loader::open(override_value.as_deref());
    let disc = discover(sys_root, &config);
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
    let host = collect_host(roots);
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
        plugin_name: nccl_net_ferro::PLUGIN_NAME.to_string_lossy().into_owned(),
        plugin_version: nccl_net_ferro::VERSION.to_string(),
        config,
        config_warnings,
        nccl_variables,
        library,
        sysfs_root: sys_root.to_path_buf(),
        devices,
        enumeration_errors,
        host,
        node: Some(collect_node(
            roots,
            nccl_net_ferro::oob::interfaces(),
            &|k| std::env::var(k).ok(),
        )),
        gdr_policy: GdrPolicy::Required,
    }
}

pub(crate) fn device_from_report(d: &DeviceReport) -> Device {
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

pub(crate) fn port_from_report(p: &PortReport) -> Port {
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

pub(crate) fn device_from_sysfs(s: &SysDevice, cfg: &Config, why: &str) -> Device {
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
pub(crate) fn port_from_sysfs(dev: &str, p: &SysPort, cfg: &Config) -> Port {
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

/// The host facts, every one read under `roots` (`/dev/infiniband` under `roots.dev`, the
/// command line under `roots.proc`, modules under `roots.sys`; locked memory and `/dev/shm`
/// through [`node::read_limits`]), so the host section and the node checks describe one tree.
pub(crate) fn collect_host(roots: &Roots) -> HostFacts {
    let sys_root = roots.sys.as_path();
    let env_var = |k: &str| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned());
    let dev_infiniband = std::fs::read_dir(roots.dev.join("infiniband"))
        .ok()
        .map(|rd| {
            let mut names: Vec<String> = rd
                .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect();
            names.sort();
            names
        });
    let module = |m: &str| sys_root.join("module").join(m).exists();
    HostFacts {
        limits: node::read_limits(roots),
        iommu: sysfs::read_cmdline(&roots.proc).map(|c| sysfs::iommu_mode(&c)),
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
