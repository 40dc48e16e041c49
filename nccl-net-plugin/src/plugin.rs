//! Process-wide plugin state: the devices exposed to NCCL, built once by `init`.

use crate::config::Config;
use crate::discovery::{Discovery, PortVerdict, discover};
use crate::error::{Error, Result};
use crate::mrcache::RegCache;
use crate::rails::RailPlane;
use crate::{info, warn};
use ferro_dmabuf::GdrDecision;
use ferro_ffi::{NCCL_PTR_HOST, log_flags::*};
use ferro_verbs::Context;
use ferro_verbs::gid::GidChoice;
use ferro_verbs::sysfs::LinkLayer;
use std::ffi::CString;
use std::path::Path;
use std::sync::{Arc, OnceLock};

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|p| *p > 0).unwrap_or(4096)
}

/// Most buffers one grouped `irecv` may carry.
pub const MAX_RECVS: usize = 8;

/// One NCCL network device: an ACTIVE port of an RDMA device.
#[derive(Debug)]
pub struct NetDevice {
    pub index: usize,
    pub ibdev: String,
    pub port: u8,
    pub ctx: Arc<Context>,
    pub link_layer: LinkLayer,
    pub gid: Option<GidChoice>,
    /// InfiniBand: the GID this port is known by beyond its subnet and its index
    /// (`NCCL_IB_ROUTABLE_FLID_GID_INDEX` when that GID has a FLID, else index 0), sent to the
    /// peer and used when the peer is on another subnet ([`ferro_proto::route::ib_route`]).
    pub ib_gid: Option<(u32, [u8; 16])>,
    /// The port requires a global route header even within its subnet.
    pub grh_required: bool,
    pub lid: u16,
    pub active_mtu: u32,
    /// Largest message one work request may carry (the port's `max_msg_sz`).
    pub max_msg_sz: u32,
    pub speed_mbps: u32,
    pub netdev: Option<String>,
    pub guid: u64,
    pub max_qp: i32,
    /// Its rail, plane and plane index (`NCCL_IB_HCA`'s `<hca>:<port>:<rail>:<plane>`).
    pub rail_plane: RailPlane,
    // Owned strings the properties point into; they live as long as the process (static state).
    name_c: CString,
    pci_c: Option<CString>,
    /// One protection domain per device, shared by its comms and registrations.
    pd: Arc<ferro_verbs::Pd>,
    /// What GPU memory the device can register, and why.
    pub gdr: GdrDecision,
    /// Registration cache (regIsGlobal = 1): page-granular, reference-counted, per PD.
    pub cache: std::sync::Mutex<RegCache<ferro_verbs::Mr>>,
}

impl NetDevice {
    /// The device's protection domain.
    pub fn pd(&self) -> &Arc<ferro_verbs::Pd> {
        &self.pd
    }

    /// The device's properties, independent of any ABI version; each exported table fills its own
    /// layout from them. Pointers refer to strings owned by this (never freed) device.
    pub fn properties(&self) -> DeviceProps {
        DeviceProps {
            name: self.name_c.as_ptr().cast_mut(),
            pci_path: self
                .pci_c
                .as_ref()
                .map_or(core::ptr::null_mut(), |c| c.as_ptr().cast_mut()),
            guid: self.guid,
            ptr_support: self.gdr.ptr_support_bits | NCCL_PTR_HOST,
            reg_is_global: true,
            // NCCL decides from the GPU whether GPUDirect receives need a flush; this plugin flushes
            // whenever NCCL asks and has no device that needs one more often.
            force_flush: false,
            speed: i32::try_from(self.speed_mbps).unwrap_or(i32::MAX),
            port: i32::from(self.port),
            max_comms: self.max_qp.max(1),
            max_recvs: MAX_RECVS as i32,
            members: vec![self.index],
            max_p2p_bytes: self.max_request_bytes(),
            rail_id: self.rail_plane.rail,
            plane_id: self.rail_plane.plane,
        }
    }

    /// Most bytes one request buffer may carry ([`MAX_REQUEST_BYTES`], whatever the port).
    pub fn max_request_bytes(&self) -> u64 {
        MAX_REQUEST_BYTES
    }

    /// Most bytes one RDMA write may carry on this port ([`ferro_proto::plan::write_limit`] of
    /// its `max_msg_sz`): longer chunks of a request go as several writes.
    pub fn max_write_bytes(&self) -> u32 {
        ferro_proto::plan::write_limit(self.max_msg_sz)
    }
}

/// Most bytes one request buffer may carry (`maxP2pBytes` = `maxCollBytes` of v9+): a request's
/// size is 32 bits everywhere on the wire (clear-to-send entry, sizes record, immediate), and a
/// buffer longer than one write carries is written in several ([`NetDevice::max_write_bytes`]).
/// v7 and v8 pass `int` sizes, which never reach it. `test` reports sizes as `int` in every
/// version: a receive of more than `INT_MAX` bytes is reported as `INT_MAX` (see
/// `shim::core::test`).
pub const MAX_REQUEST_BYTES: u64 = u32::MAX as u64;

/// One device's properties as the core knows them; [`crate::shim`] writes them into each ABI
/// version's layout (fields a version lacks are left out, fields it adds get their values here).
#[derive(Debug, Clone)]
pub struct DeviceProps {
    pub name: *mut core::ffi::c_char,
    pub pci_path: *mut core::ffi::c_char,
    pub guid: u64,
    pub ptr_support: i32,
    pub reg_is_global: bool,
    pub force_flush: bool,
    pub speed: i32,
    pub port: i32,
    pub max_comms: i32,
    pub max_recvs: i32,
    /// The physical devices behind this one (itself, for a physical device).
    pub members: Vec<usize>,
    /// Most bytes one `isend`/`irecv` buffer may carry (`maxP2pBytes`, `maxCollBytes`).
    pub max_p2p_bytes: u64,
    /// `railId` / `planeId` (v12; -1: undefined), see [`crate::rails`].
    pub rail_id: i16,
    pub plane_id: i16,
}

/// The initialised plugin.
#[derive(Debug)]
pub struct Plugin {
    pub config: Config,
    pub devices: Vec<NetDevice>,
    /// Registrations ask for PCIe relaxed ordering (decided once, from the configuration and
    /// libibverbs' capabilities).
    pub relaxed_ordering: bool,
}

static PLUGIN: OnceLock<std::result::Result<Plugin, Error>> = OnceLock::new();

/// An InfiniBand port's GID for routing beyond its subnet: the one at `routable` when it has a
/// FLID, else index 0, from the port's GID table ([`ferro_proto::route::ib_gid_index`]); `None`
/// on RoCE or without a table.
fn ib_gid(p: &crate::discovery::PortReport, routable: u32) -> Option<(u32, [u8; 16])> {
    if !matches!(p.link_layer, LinkLayer::InfiniBand) {
        return None;
    }
    let table = &p.sys.as_ref()?.gids;
    let at = |i: u32| table.iter().find(|g| g.index == i).map(|g| g.gid);
    let index = ferro_proto::route::ib_gid_index(routable, at);
    at(index).map(|g| (index, g))
}

fn build() -> std::result::Result<Plugin, Error> {
    let (config, warnings) = Config::process().clone();
    for w in &warnings {
        warn!(INIT | ENV, "{w}");
    }
    for line in Config::not_applicable(&|name| std::env::var(name).ok()) {
        info!(INIT | ENV, "{line}");
    }
    if config.disable {
        return Err(Error::System("disabled by NCCL_IB_DISABLE=1".into()));
    }
    // As NCCL's IB transport does, before anything is registered: registered pages stay safe
    // when the process forks (data loaders, checkpoint writers and compilers fork under NCCL).
    if let Ok(v) = ferro_verbs::loader::open(config.ibverbs_lib.as_deref()) {
        if let Err(rc) = v.fork_init() {
            warn!(
                INIT,
                "ibv_fork_init failed ({rc}): a child process that writes to registered pages after fork() may corrupt transfers"
            );
        }
    }
    let disc: Discovery = discover(Path::new("/sys"), &config);
    let lib = match &disc.lib {
        Ok(lib) => lib.clone(),
        Err(e) => {
            return Err(Error::System(format!(
                "{e}; NCCL will use its next network transport"
            )));
        }
    };
    if let Ok(v) = ferro_verbs::verbs() {
        let caps = v.capabilities();
        let yes = |b: bool| if b { "yes" } else { "no" };
        info!(
            INIT,
            "loaded {} (ibv_reg_mr_iova2: {}{}; ibv_reg_dmabuf_mr: {}{})",
            v.lib,
            yes(caps.reg_mr_iova2),
            if caps.reg_mr_iova2 {
                ""
            } else {
                ", no relaxed ordering"
            },
            yes(caps.reg_dmabuf_mr),
            if caps.reg_dmabuf_mr {
                ""
            } else {
                ", rdma-core older than 34: DMA-BUF registration unavailable"
            }
        );
    }
    for e in &disc.errors {
        warn!(INIT, "{e}");
    }
    let mut devices = Vec::new();
    for d in &disc.devices {
        if let Some(e) = &d.error {
            warn!(INIT, "{}: skipped: {e}", d.name);
            continue;
        }
        let (Some(ctx), Some(pd), Some(gdr)) = (&d.ctx, &d.pd, &d.gdr) else {
            continue;
        };
        if d.ports.iter().any(|p| p.verdict.is_usable()) {
            info!(INIT | NET, "{}", gdr.summary);
        }
        for p in &d.ports {
            if !p.verdict.is_usable() {
                // A GID that does not work is a configuration error: say it loudly. Inactive or
                // filtered ports are normal.
                if let PortVerdict::NoUsableGid { error } = &p.verdict {
                    warn!(
                        INIT,
                        "{} port {}: {error}; the port is not used", d.name, p.num
                    );
                } else {
                    info!(INIT, "{} port {}: not used: {}", d.name, p.num, p.verdict);
                }
                continue;
            }
            let pci_c = d
                .pci_path
                .as_ref()
                .map(|p| crate::rails::reported_pci_path(p, config.merge_vfs))
                .and_then(|p| CString::new(p.to_string_lossy().into_owned()).ok());
            let (rail, plane) = config
                .hca
                .as_ref()
                .map_or((crate::rails::UNDEF, crate::rails::UNDEF), |h| {
                    h.rail_plane(&d.name, p.num)
                });
            devices.push(NetDevice {
                index: devices.len(),
                ibdev: d.name.clone(),
                port: p.num,
                ctx: ctx.clone(),
                link_layer: p.link_layer.clone(),
                gid: p
                    .gid
                    .as_ref()
                    .ok()
                    .filter(|_| p.link_layer.is_ethernet())
                    .cloned(),
                ib_gid: ib_gid(p, config.routable_flid_gid_index),
                grh_required: p.grh_required,
                lid: p.lid,
                active_mtu: p.active_mtu.unwrap_or(1024),
                max_msg_sz: p.max_msg_sz,
                speed_mbps: p.speed_mbps.unwrap_or(0),
                netdev: p.sys.as_ref().and_then(|s| s.netdev.clone()),
                guid: d.sys_image_guid,
                max_qp: d.max_qp,
                rail_plane: RailPlane {
                    rail,
                    plane,
                    plane_index: 0,
                },
                name_c: CString::new(d.name.clone()).unwrap_or_default(),
                pci_c,
                pd: pd.clone(),
                gdr: gdr.clone(),
                cache: std::sync::Mutex::new(RegCache::new(page_size())),
            });
        }
    }
    if devices.is_empty() {
        let seen = if disc.devices.is_empty() {
            "libibverbs lists no RDMA devices (no RDMA-capable kernel driver, or /dev/infiniband not mounted into the container)".to_string()
        } else {
            format!(
                "none of {} RDMA device(s) has a usable ACTIVE port",
                disc.devices.len()
            )
        };
        return Err(Error::System(format!(
            "no usable RDMA device: {seen}; NCCL will use its next network transport"
        )));
    }
    // Plane indexes are counted in device order (after the PCI sort), as NCCL counts them.
    let planes: Vec<i16> = devices.iter().map(|d| d.rail_plane.plane).collect();
    let indexes = crate::rails::plane_indexes(&planes).map_err(|e| Error::Usage(e.to_string()))?;
    for (d, i) in devices.iter_mut().zip(indexes) {
        d.rail_plane.plane_index = i;
    }
    let list: Vec<String> = devices
        .iter()
        .map(|d| {
            let gid = d
                .gid
                .as_ref()
                .map_or(String::new(), |g| format!(" GID {} ({})", g.index, g.gid));
            let via = d
                .netdev
                .as_ref()
                .map_or(String::new(), |n| format!(" via {n}"));
            let rp = &d.rail_plane;
            let rail_plane = if (rp.rail, rp.plane) == (crate::rails::UNDEF, crate::rails::UNDEF) {
                String::new()
            } else {
                format!(" rail {} plane {}", rp.rail, rp.plane)
            };
            format!(
                "[{}]{}:{}/{}{}{}{} {} Mbps",
                d.index,
                d.ibdev,
                d.port,
                if d.link_layer.is_ethernet() {
                    "RoCE"
                } else {
                    "IB"
                },
                via,
                gid,
                rail_plane,
                d.speed_mbps
            )
        })
        .collect();
    let ro = relaxed_ordering(&config);
    info!(
        INIT | NET,
        "Using {} ({}{}); {}",
        list.join(" ; "),
        lib,
        if ro { ", [RO]" } else { "" },
        config.summary()
    );
    Ok(Plugin {
        config,
        devices,
        relaxed_ordering: ro,
    })
}

/// Whether registrations ask for PCIe relaxed ordering (`NCCL_IB_PCI_RELAXED_ORDERING`: 0 off,
/// 1 on, 2 on when libibverbs has `ibv_reg_mr_iova2`, which carries the flag to the kernel).
/// Whether registrations ask for PCIe relaxed ordering: only through `ibv_reg_mr_iova2`, as
/// NCCL's IB transport does (plain `ibv_reg_mr` of an older rdma-core may refuse the flag), so
/// `NCCL_IB_PCI_RELAXED_ORDERING=1` without it means off.
pub fn relaxed_ordering(config: &Config) -> bool {
    config.relaxed_ordering != 0
        && ferro_verbs::verbs().is_ok_and(|v| v.capabilities().reg_mr_iova2)
}

/// `init`: builds the device list once per process; later calls return the same outcome.
pub fn init() -> Result<&'static Plugin> {
    PLUGIN.get_or_init(build).as_ref().map_err(Clone::clone)
}

/// The initialised plugin, or an error if `init` has not succeeded.
pub fn get() -> Result<&'static Plugin> {
    match PLUGIN.get() {
        Some(Ok(p)) => Ok(p),
        Some(Err(e)) => Err(e.clone()),
        None => Err(Error::Usage("the plugin is used before init".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_request_carries_what_a_32_bit_size_can_say_above_nccls_own_cap() {
        assert_eq!(MAX_REQUEST_BYTES, 4_294_967_295);
        // NCCL asks for 1 GiB at most per request, and accepts 1 TiB at most as maxP2pBytes.
        const { assert!(MAX_REQUEST_BYTES > 1 << 30 && MAX_REQUEST_BYTES <= 1 << 40) };
        // Above what v7/v8 int sizes can express, so those versions refuse only negative sizes.
        const { assert!(MAX_REQUEST_BYTES > i32::MAX as u64) };
    }
}
