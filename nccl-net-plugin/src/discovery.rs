//! What RDMA hardware this host has, as the plugin and the doctor see it: libibverbs' view
//! (device attributes, port attributes) merged with sysfs (GID table with types, netdev, PCI path).

use crate::config::Config;
use ferro_dmabuf::{CudaState, GdrDecision, Inputs, decide};
use ferro_verbs::gid::types::table_from_verbs;
use ferro_verbs::gid::{GidChoice, GidError, select_gid};
use ferro_verbs::sys::{ibv_port_attr, mtu_bytes};
use ferro_verbs::sysfs::{self, LinkLayer, PortState, SysDevice, SysPort};
use ferro_verbs::{Context, LoadError, Pd};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// Whether the plugin exposes a port to NCCL and, if not, why. Decided once, by
/// [`port_verdict`], for `init` and the doctor alike; both only render it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortVerdict {
    Usable,
    /// `NCCL_IB_HCA` leaves the port out (its value).
    ExcludedByHca {
        filter: String,
    },
    NotActive {
        state: PortState,
    },
    UnknownLinkLayer {
        link_layer: LinkLayer,
    },
    /// A RoCE port without a GID the plugin can use (the GID selection's reason).
    NoUsableGid {
        error: GidError,
    },
}

impl PortVerdict {
    pub fn is_usable(&self) -> bool {
        matches!(self, PortVerdict::Usable)
    }
}

impl fmt::Display for PortVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortVerdict::Usable => f.write_str("usable"),
            PortVerdict::ExcludedByHca { filter } => write!(f, "excluded by NCCL_IB_HCA={filter}"),
            PortVerdict::NotActive { state } => write!(f, "port state is {state:?}, not ACTIVE"),
            PortVerdict::UnknownLinkLayer { link_layer } => {
                write!(f, "unknown link layer {link_layer:?}")
            }
            PortVerdict::NoUsableGid { error } => match error {
                GidError::NoUsableGid(_) => write!(f, "{error}"),
                _ => write!(f, "no usable GID: {error}"),
            },
        }
    }
}

/// The one rule for which ports become NCCL devices: not excluded by `NCCL_IB_HCA`, ACTIVE,
/// a known link layer, and on RoCE a usable GID.
pub fn port_verdict(
    cfg: &Config,
    dev: &str,
    num: u8,
    state: PortState,
    link_layer: &LinkLayer,
    gid: &Result<GidChoice, GidError>,
) -> PortVerdict {
    if let Some(f) = cfg.hca.as_ref().filter(|f| !f.allows(dev, num)) {
        PortVerdict::ExcludedByHca {
            filter: f.raw.clone(),
        }
    } else if !state.is_active() {
        PortVerdict::NotActive { state }
    } else if matches!(link_layer, LinkLayer::Unknown(_)) {
        PortVerdict::UnknownLinkLayer {
            link_layer: link_layer.clone(),
        }
    } else if let (true, Err(e)) = (link_layer.is_ethernet(), gid) {
        PortVerdict::NoUsableGid { error: e.clone() }
    } else {
        PortVerdict::Usable
    }
}

/// One port.
#[derive(Debug)]
pub struct PortReport {
    pub num: u8,
    pub state: PortState,
    pub link_layer: LinkLayer,
    /// Active MTU in bytes (from `ibv_query_port`).
    pub active_mtu: Option<u32>,
    /// Largest message one work request may carry on this port (`max_msg_sz`).
    pub max_msg_sz: u32,
    /// Link speed in Mbps (lane speed x width from `ibv_query_port`, else sysfs `rate`).
    pub speed_mbps: Option<u32>,
    /// `"4X EDR"`-style text.
    pub speed_text: String,
    pub lid: u16,
    /// The port requires a global route header even within its subnet (`IBV_QPF_GRH_REQUIRED`
    /// in `ibv_query_port`'s flags; false where libibverbs does not report it).
    pub grh_required: bool,
    /// The sysfs view (GID table, netdev), when readable.
    pub sys: Option<SysPort>,
    /// The GID index the plugin would use, or why none (RoCE only; IB uses the LID).
    pub gid: Result<GidChoice, GidError>,
    /// Whether the plugin exposes this port to NCCL, and why not.
    pub verdict: PortVerdict,
}

/// One device.
#[derive(Debug)]
pub struct DeviceReport {
    pub name: String,
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub fw_ver: String,
    pub max_qp: i32,
    pub pci_path: Option<std::path::PathBuf>,
    pub sys: Option<SysDevice>,
    pub ports: Vec<PortReport>,
    /// The open context (None when opening failed; see `error`).
    pub ctx: Option<Arc<Context>>,
    /// The device's protection domain (shared by all its comms and registrations).
    pub pd: Option<Arc<Pd>>,
    /// GPUDirect RDMA: which GPU-memory registration paths work, and why (not).
    pub gdr: Option<GdrDecision>,
    pub error: Option<String>,
}

/// Everything discovered.
#[derive(Debug)]
pub struct Discovery {
    /// The libibverbs that was loaded, or why none could be.
    pub lib: Result<String, LoadError>,
    pub devices: Vec<DeviceReport>,
    /// Errors of the enumeration itself (device list, sysfs).
    pub errors: Vec<String>,
}

fn fw_string(raw: &[core::ffi::c_char]) -> String {
    let bytes: Vec<u8> = raw
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A port's speed in Mbps: `ibv_query_port_speed`'s answer (`queried`, when asked for and
/// non-zero), else the speed and width codes of `ibv_query_port`, else sysfs `rate`.
pub fn port_speed_mbps(
    queried: Option<u64>,
    from_codes: Option<u32>,
    from_sysfs: Option<u32>,
) -> Option<u32> {
    queried
        .filter(|s| *s > 0)
        .map(|s| u32::try_from(s).unwrap_or(u32::MAX))
        .or(from_codes)
        .or(from_sysfs)
}

fn port_report(
    dev: &str,
    attr: &ibv_port_attr,
    num: u8,
    sys: Option<&SysPort>,
    cfg: &Config,
    queried_mbps: Option<u64>,
) -> PortReport {
    let link_layer = match sys {
        Some(s) if !matches!(s.link_layer, LinkLayer::Unknown(_)) => s.link_layer.clone(),
        _ => LinkLayer::from_verbs(attr.link_layer),
    };
    let state = PortState::from_code(u8::try_from(attr.state).unwrap_or(0));
    let lanes = sysfs::width_lanes(attr.active_width);
    let speed_text = match lanes {
        Some(l) => format!("{l}X {}", sysfs::speed_name(attr.active_speed)),
        None => sysfs::speed_name(attr.active_speed).to_string(),
    };
    let speed_mbps = port_speed_mbps(
        queried_mbps,
        sysfs::ib_speed_mbps(attr.active_speed, attr.active_width),
        sys.and_then(|s| s.rate.as_ref()).map(|r| r.mbps()),
    );
    let table = sys.map(|s| s.gids.as_slice()).unwrap_or(&[]);
    let gid = select_gid(&link_layer, table, &cfg.gid_policy_for(dev, num));
    let verdict = port_verdict(cfg, dev, num, state, &link_layer, &gid);
    PortReport {
        num,
        state,
        link_layer,
        active_mtu: mtu_bytes(attr.active_mtu),
        max_msg_sz: attr.max_msg_sz,
        speed_mbps,
        speed_text,
        lid: attr.lid,
        grh_required: attr.flags & ferro_verbs::sys::IBV_QPF_GRH_REQUIRED != 0,
        sys: sys.cloned(),
        gid,
        verdict,
    }
}

/// Fills the device's sysfs view with its GID tables from one `ibv_query_gid_table` call (in
/// the same form sysfs gives, empty slots included), or reads them from sysfs if the call fails.
fn fill_gid_tables(
    ctx: &Context,
    rep: &mut DeviceReport,
    attrs: &[(u8, ferro_verbs::Result<ibv_port_attr>)],
    sys_root: &Path,
) {
    let Some(sys) = rep.sys.as_mut() else { return };
    let table_len = |num: u8| {
        attrs
            .iter()
            .find(|(n, _)| *n == num)
            .and_then(|(_, a)| a.as_ref().ok())
            .map_or(0, |a| u32::try_from(a.gid_tbl_len).unwrap_or(0))
    };
    let total: usize = attrs.iter().map(|(n, _)| table_len(*n) as usize).sum();
    match ctx.query_gid_table(total) {
        Some(Ok(entries)) => {
            let parent = sys.parent_netdev.clone();
            for port in &mut sys.ports {
                port.gids = table_from_verbs(
                    &entries,
                    port.num,
                    table_len(port.num),
                    &port.link_layer,
                    crate::oob::interface_name,
                );
                port.netdev = port
                    .gids
                    .iter()
                    .find_map(|g| g.netdev.clone())
                    .or_else(|| parent.clone());
            }
        }
        other => {
            let why = match other {
                Some(Err(e)) => e.to_string(),
                _ => "not available".to_string(),
            };
            let dir = sys_root.join("class").join("infiniband").join(&rep.name);
            *sys = sysfs::read_device(&dir, &rep.name);
            sys.notes.push(format!(
                "ibv_query_gid_table: {why}; GID table read from sysfs"
            ));
        }
    }
}

/// Enumerates devices and ports. Never fails as a whole: problems are recorded per item.
pub fn discover(sys_root: &Path, cfg: &Config) -> Discovery {
    let lib = ferro_verbs::verbs()
        .map(|v| v.lib.clone())
        .map_err(Clone::clone);
    let mut errors = Vec::new();
    if lib.is_err() {
        return Discovery {
            lib,
            devices: Vec::new(),
            errors,
        };
    }
    // Where libibverbs gives a device's GID tables in one call, sysfs is read without them (three
    // file reads per slot otherwise: thousands per device). A custom root (tests on fake trees,
    // the doctor's --sysfs-root) describes another system than libibverbs does: it keeps the
    // sysfs tables.
    let verbs_gids = sys_root == Path::new("/sys")
        && ferro_verbs::verbs().is_ok_and(|v| v.capabilities().query_gid_table);
    let sys_devices = match sysfs::list_devices_with(sys_root, !verbs_gids) {
        Ok(d) => d,
        Err(e) => {
            errors.push(format!("reading sysfs: {e}"));
            Vec::new()
        }
    };
    let names = match ferro_verbs::device_names() {
        Ok(n) => n,
        Err(e) => {
            errors.push(e.to_string());
            Vec::new()
        }
    };
    // NCCL_IB_DEVICE_PCI_ORDER: by PCI address, so that nodes built alike number devices alike.
    let names: Vec<String> = {
        let paths: Vec<Option<&Path>> = names
            .iter()
            .map(|n| {
                sys_devices
                    .iter()
                    .find(|d| &d.name == n)
                    .and_then(|d| d.pci_path.as_deref())
            })
            .collect();
        crate::rails::pci_order(&paths, cfg.device_pci_order)
            .into_iter()
            .map(|i| names[i].clone())
            .collect()
    };
    let mut devices = Vec::new();
    // The CUDA driver is probed once per process (only if there are devices to judge).
    let cuda: Option<CudaState> = (!names.is_empty()).then(ferro_dmabuf::cuda::probe_cuda);
    let has_dmabuf_sym = ferro_verbs::verbs().is_ok_and(|v| v.capabilities().reg_dmabuf_mr);
    for name in names {
        let sys = sys_devices.iter().find(|d| d.name == name).cloned();
        let mut rep = DeviceReport {
            name: name.clone(),
            node_guid: 0,
            sys_image_guid: 0,
            fw_ver: String::new(),
            max_qp: 0,
            pci_path: sys.as_ref().and_then(|s| s.pci_path.clone()),
            sys,
            ports: Vec::new(),
            ctx: None,
            pd: None,
            gdr: None,
            error: None,
        };
        let ctx = match Context::open(&name) {
            Ok(c) => c,
            Err(e) => {
                rep.error = Some(e.to_string());
                devices.push(rep);
                continue;
            }
        };
        match ctx.query_device() {
            Ok(attr) => {
                // The verbs GUIDs are big-endian; keep them in the order ibv_devinfo prints.
                rep.node_guid = u64::from_be(attr.node_guid);
                rep.sys_image_guid = u64::from_be(attr.sys_image_guid);
                rep.fw_ver = fw_string(&attr.fw_ver);
                rep.max_qp = attr.max_qp;
                let attrs: Vec<(u8, ferro_verbs::Result<ibv_port_attr>)> = (1..=attr.phys_port_cnt)
                    .map(|num| (num, ctx.query_port(num)))
                    .collect();
                if verbs_gids {
                    fill_gid_tables(&ctx, &mut rep, &attrs, sys_root);
                }
                for (num, pa) in attrs {
                    let sys_port = rep.sys.as_ref().and_then(|s| s.port(num));
                    match pa {
                        Ok(pa) => {
                            // NCCL_IB_QUERY_PORT_SPEED: where libibverbs has the call; a
                            // failure falls back to the codes, as NCCL does.
                            let queried = if cfg.query_port_speed {
                                ctx.query_port_speed(num).and_then(|r| r.ok())
                            } else {
                                None
                            };
                            rep.ports
                                .push(port_report(&name, &pa, num, sys_port, cfg, queried))
                        }
                        Err(e) => errors.push(e.to_string()),
                    }
                }
            }
            Err(e) => rep.error = Some(e.to_string()),
        }
        match Pd::new(&ctx) {
            Ok(pd) => {
                let probe = ferro_dmabuf::provider::probe_provider(&pd);
                let inputs = Inputs::from_system(
                    has_dmabuf_sym,
                    probe,
                    cuda.clone().unwrap_or(CudaState::NoDevice),
                    ferro_dmabuf::Overrides {
                        dmabuf_enable: cfg.dmabuf_enable,
                        gdr_disable: cfg.gdr_disable,
                    },
                );
                rep.gdr = Some(decide(&name, &inputs));
                rep.pd = Some(pd);
            }
            Err(e) => rep.error = Some(e.to_string()),
        }
        rep.ctx = Some(ctx);
        devices.push(rep);
    }
    Discovery {
        lib,
        devices,
        errors,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HcaFilter;

    fn verdict(cfg: &Config, state: PortState, ll: LinkLayer, gid_ok: bool) -> PortVerdict {
        let gid = if gid_ok {
            Ok(GidChoice {
                index: 1,
                gid: ferro_verbs::gid::GidEntry::new(
                    1,
                    [1; 16],
                    ferro_verbs::gid::GidType::RoceV2,
                    None,
                ),
                reason: "test".into(),
            })
        } else {
            Err(GidError::NoUsableGid("only link-local GIDs".into()))
        };
        port_verdict(cfg, "rxe0", 1, state, &ll, &gid)
    }

    #[test]
    fn the_queried_port_speed_wins_over_the_codes_and_sysfs_unless_absent_or_zero() {
        assert_eq!(
            port_speed_mbps(Some(800_000), Some(400_000), Some(1)),
            Some(800_000)
        );
        assert_eq!(
            port_speed_mbps(Some(0), Some(400_000), Some(1)),
            Some(400_000)
        );
        assert_eq!(port_speed_mbps(None, Some(400_000), Some(1)), Some(400_000));
        assert_eq!(port_speed_mbps(None, None, Some(10_000)), Some(10_000));
        assert_eq!(port_speed_mbps(None, None, None), None);
        assert_eq!(port_speed_mbps(Some(u64::MAX), None, None), Some(u32::MAX));
    }

    #[test]
    fn the_port_rule_checks_the_hca_filter_then_state_then_link_layer_then_gid() {
        let mut cfg = Config::default();
        assert_eq!(
            verdict(&cfg, PortState::Active, LinkLayer::Ethernet, true),
            PortVerdict::Usable
        );
        assert_eq!(
            verdict(&cfg, PortState::Active, LinkLayer::InfiniBand, false),
            PortVerdict::Usable,
            "InfiniBand needs no GID"
        );
        assert_eq!(
            verdict(&cfg, PortState::Down, LinkLayer::Ethernet, false),
            PortVerdict::NotActive {
                state: PortState::Down
            }
        );
        assert!(matches!(
            verdict(
                &cfg,
                PortState::Active,
                LinkLayer::Unknown("x".into()),
                false
            ),
            PortVerdict::UnknownLinkLayer { .. }
        ));
        let no_gid = verdict(&cfg, PortState::Active, LinkLayer::Ethernet, false);
        assert!(matches!(no_gid, PortVerdict::NoUsableGid { .. }));
        assert_eq!(no_gid.to_string(), "no usable GID: only link-local GIDs");
        cfg.hca = Some(HcaFilter::parse("^rxe0").unwrap());
        assert_eq!(
            verdict(&cfg, PortState::Down, LinkLayer::Ethernet, false).to_string(),
            "excluded by NCCL_IB_HCA=^rxe0",
            "the filter is said first, whatever else is wrong"
        );
    }
}
