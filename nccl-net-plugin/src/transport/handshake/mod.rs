//! Connection setup without blocking: `listen`, `connect` and `accept`, over the protocol
//! core's handshake machine ([`ferro_proto::handshake`]).
//!
//! The machine decides everything (messages, checks, refusals, the time-out); this module owns
//! what it cannot, by concept:
//! - [`setup`]: one connection being set up (either side): its socket, driving the machine,
//!   the verbs resources it asks for (the endpoint, the protocol regions, the flush QPs,
//!   connecting the QPs), TCP keepalive, and turning a finished handshake into a [`Comm`];
//! - [`listen`]: the listener, `accept` and its bounds on strangers;
//! - [`connect`]: `connect`, and the registry that keeps its progress under a token written
//!   into the handle;
//! - here: what both share: the clock, the settings, this side's description, and [`dial`],
//!   the non-blocking TCP connect (a connect's first, or a new one after the listener dropped
//!   the last before answering).
//!
//! Every call reads the clock once and passes it in (`accept` once more for each connection it
//! takes, whose secret's deadline starts then).
//!
//! [`Comm`]: super::comm::Comm

mod connect;
mod listen;
mod setup;

pub use connect::connect;
pub use listen::{ListenComm, listen};

use super::endpoint::{Endpoint, RegBuf};
use crate::error::{Error, Result};
use crate::info;
use crate::plugin;
use crate::vnic::{self, VDevice};
use ferro_ffi::log_flags::NET;
use ferro_proto::Keys;
use ferro_proto::comm::recovering::Recovering;
use ferro_proto::handshake::{LocalSide, Settings};
use ferro_proto::route::{self, MemberGids};
use ferro_proto::wire::QpMeta;
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The time passed to the handshake machines: the transport's one clock (the watchdog's and
/// recovery's too).
pub(super) use super::progress::now;

/// The fault policy's settings of a new comm: `FERRO_STALL_WARN_S` as its stall threshold (zero:
/// the watchdog is off), `NCCL_IB_RETURN_ASYNC_EVENTS` (whether device events fail it) and
/// `FERRO_RECOVERY_BUDGET_S` (recovery in place, zero: off).
pub(super) fn configure_health<C: Recovering>(core: &mut C) -> Result<()> {
    let config = &plugin::get()?.config;
    core.set_recovery_budget(config.recovery_budget());
    core.recovery_parts().0.set_limits(
        config
            .resiliency_start_delay_ms
            .map(|ms| Duration::from_millis(u64::from(ms))),
        config.resiliency_attempts_max,
    );
    let health = core.recovery_parts().1;
    health.set_stall_threshold(Duration::from_secs(u64::from(config.stall_warn_s)));
    health.set_return_async_events(config.return_async_events);
    Ok(())
}

/// The settings both sides must agree on, as configured here.
pub(super) fn settings() -> Result<Settings> {
    let cfg = &plugin::get()?.config;
    Ok(Settings {
        qps_per_conn: cfg.qps_per_connection,
        split: cfg.split_data_on_qps,
    })
}

pub(super) fn io_err(what: &str, peer: SocketAddr, e: std::io::Error) -> Error {
    Error::Remote(format!("{what} {peer}: {e}"))
}

/// This side's description for the peer: the endpoint's QPs with `region`, and its members'
/// names.
pub(super) fn local_side(ep: &Endpoint, region: &RegBuf) -> Result<LocalSide> {
    let lay = ep.layout();
    Ok(LocalSide {
        meta: ep.meta(region, lay.qps_per_conn() as u16, lay.split)?,
        names: ep.rails.iter().map(|r| r.dev.ibdev.clone()).collect(),
    })
}

/// The peer's protocol-region keys by member.
pub(super) fn peer_keys(meta: &QpMeta) -> Keys {
    core::array::from_fn(|i| meta.devs.get(i).map_or(0, |d| d.mr_rkey))
}

/// The GIDs of a device's RoCE members, in member order (for the listen handle).
pub(super) fn roce_gids(dev: &VDevice) -> Vec<[u8; 16]> {
    dev.members
        .iter()
        .filter(|m| m.link_layer.is_ethernet())
        .filter_map(|m| m.gid.as_ref().map(|g| g.gid.gid))
        .collect()
}

/// Subnet-aware routing (`NCCL_IB_SUBNET_AWARE_ROUTING`): the device to use instead of `dev` so
/// that its RoCE members share a subnet with the peer's GIDs `peer`, or `dev` itself
/// ([`route::device_on_peer_subnet`]). With `members`, only devices with that many members are
/// candidates (the accepting side, whose QP layout was agreed for its member count).
pub(super) fn on_peer_subnet(
    dev: &'static VDevice,
    peer: &[[u8; 16]],
    members: Option<usize>,
) -> Result<&'static VDevice> {
    let cfg = &plugin::get()?.config;
    let mut devices: Vec<MemberGids> = Vec::with_capacity(vnic::count());
    for i in 0..vnic::count() {
        let d = vnic::get(i as i32)?;
        devices.push(if members.is_some_and(|n| n != d.members.len()) {
            Vec::new()
        } else {
            d.members
                .iter()
                .map(|m| {
                    m.link_layer
                        .is_ethernet()
                        .then(|| m.gid.as_ref().map_or([0; 16], |g| g.gid.gid))
                })
                .collect()
        });
    }
    let Some(i) = route::device_on_peer_subnet(&devices, dev.index, peer, cfg.subnet_prefix_len)
    else {
        return Ok(dev);
    };
    let other = vnic::get(i as i32)?;
    info!(
        NET,
        "{}: subnet-aware routing: using {} instead, whose RoCE ports share a subnet (prefix length {} for IPv4) with the peer's GIDs {} (NCCL_IB_SUBNET_AWARE_ROUTING)",
        dev.label(),
        other.label(),
        cfg.subnet_prefix_len,
        peer.iter()
            .filter(|g| route::valid_gid(g))
            .map(|g| std::net::Ipv6Addr::from(*g).to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(other)
}

/// Starts a non-blocking TCP connect to `addr` (the first of a connection, or a new one after
/// the listener dropped the last before answering).
pub(super) fn dial(addr: SocketAddr) -> Result<TcpStream> {
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )
    .map_err(|e| Error::System(format!("socket: {e}")))?;
    sock.set_nonblocking(true)
        .map_err(|e| Error::System(format!("socket: {e}")))?;
    let _ = sock.set_nodelay(true);
    match sock.connect(&addr.into()) {
        Ok(()) => {}
        Err(e)
            if e.raw_os_error() == Some(libc::EINPROGRESS) || e.kind() == ErrorKind::WouldBlock => {
        }
        Err(e) => return Err(Error::System(format!("cannot connect to {addr}: {e}"))),
    }
    Ok(sock.into())
}
