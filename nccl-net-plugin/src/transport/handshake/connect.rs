//! `connect`: starts a connection (its QPs and regions first, then the non-blocking TCP
//! connect) and continues it at each call, keeping its progress in a registry under a token
//! written into the handle; abandoned connects are reaped.

use super::setup::{Resources, Setup};
use super::{local_side, now, settings};
use crate::error::{Error, Result};
use crate::plugin;
use crate::transport::access;
use crate::transport::comm::{CommPtr, SendScratch, SenderMem};
use crate::transport::endpoint::{Endpoint, RegBuf, Role};
use crate::transport::lock::CoreLock;
use crate::vnic;
use crate::warn;
use ferro_ffi::log_flags::NET;
use ferro_proto::MAX_DEVS;
use ferro_proto::comm::send::Oversize;
use ferro_proto::fifo::{FIFO_BYTES, SIZES_BYTES};
use ferro_proto::handle::{self, HANDLE_SIZE};
use ferro_proto::handshake::sweep::SweepPacer;
use ferro_proto::handshake::{self as hs, HANDSHAKE_TIMEOUT, Handshake};
use ferro_proto::path::QpPath;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

static CONNECTS: OnceLock<Mutex<HashMap<u64, Setup>>> = OnceLock::new();
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

fn connects() -> MutexGuard<'static, HashMap<u64, Setup>> {
    let m = CONNECTS.get_or_init(|| Mutex::new(HashMap::new()));
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts a connection to the listener named by the handle: QPs (for both sides' member
/// devices), FIFO, then the socket.
fn start_connect(
    dev_index: i32,
    h: &[u8; HANDLE_SIZE],
    traffic_class: Option<u8>,
    oversize: Oversize,
    now: Duration,
) -> Result<Setup> {
    let mut dev = vnic::get(dev_index)?;
    let addr = handle::decode(h).map_err(|e| Error::Argument(e.to_string()))?;
    let remote_devs = handle::devs(h).map_err(|e| Error::Argument(e.to_string()))?;
    let cfg = &plugin::get()?.config;
    if cfg.subnet_aware_routing {
        dev = super::on_peer_subnet(dev, &handle::gids(h), None)?;
    }
    let layout = hs::checks::connector_layout(settings()?, dev.members.len(), remote_devs)
        .map_err(|e| Error::from(e).prefixed(&dev.label()))?;
    // The QPs and regions first, then the TCP connect: the listener sees the connection only
    // when `Connect` can follow at once (its secret's deadline runs from then), and a side that
    // cannot make its QPs leaves no half-open connection behind.
    // This side decides the connection's traffic class and service level; the accepting side
    // builds its QPs with them.
    let path = QpPath::choose(cfg.traffic_class, cfg.service_level, traffic_class);
    let ep = Endpoint::new(dev, layout, Role::Sending, path, None)?;
    let pds = ep.pds();
    let fifo = RegBuf::new(&pds, FIFO_BYTES, access::PEER_WRITTEN)?;
    let sizes_stage = RegBuf::new(&pds, SIZES_BYTES, access::STAGING)?;
    let sock = super::dial(addr)?;
    let machine = Handshake::connector(
        local_side(&ep, &fifo)?,
        handle::secret(h),
        addr.to_string(),
        now,
    );
    Ok(Setup {
        sock,
        peer: addr,
        dev,
        hs: machine,
        res: Resources::Sender {
            ep,
            mem: SenderMem {
                fifo,
                sizes_stage,
                peer_sizes: (0, [0; MAX_DEVS]),
                ar: cfg.adaptive_routing(dev.first().link_layer.is_ethernet()),
                scratch: CoreLock::new(SendScratch::default()),
            },
            oversize,
        },
        qps: None,
    })
}

/// Drops connects whose caller stopped calling (they made no progress for the handshake
/// bound), so an abandoned connect does not keep its socket and QPs forever; one call per
/// [`SWEEP_INTERVAL`](ferro_proto::handshake::sweep::SWEEP_INTERVAL) does it, so that a `connect` call stays O(1) in the connects in progress.
fn reap_abandoned_connects(now: Duration) {
    static PACER: SweepPacer = SweepPacer::new();
    if !PACER.due(now) {
        return;
    }
    connects().retain(|_, p| {
        p.hs.handle_timeout(now);
        if !p.timed_out() {
            return true;
        }
        warn!(
            NET,
            "{}: dropping an abandoned connect to {}: no progress for {} s",
            p.dev.label(),
            p.peer,
            HANDSHAKE_TIMEOUT.as_secs()
        );
        false
    });
}

/// `connect`: starts or continues; `Ok(None)` means "call again". `traffic_class` (the
/// communicator's, v10+) is the connection's traffic class and service level where
/// `NCCL_IB_TC` / `NCCL_IB_SL` are not set ([`QpPath::choose`]); it is read when the connection
/// starts (NCCL passes the same config on every retry). `oversize` is what the
/// comm does with a send larger than its buffer: the rule of the ABI version `connect` was
/// called through (v7 refuses, later versions truncate).
pub fn connect(
    dev_index: i32,
    h: &mut [u8; HANDLE_SIZE],
    traffic_class: Option<u8>,
    oversize: Oversize,
) -> Result<Option<CommPtr>> {
    let now = now();
    reap_abandoned_connects(now);
    let token = handle::token(h);
    let mut p = if token == 0 {
        start_connect(dev_index, h, traffic_class, oversize, now)?
    } else {
        connects().remove(&token).ok_or_else(|| {
            Error::Argument(format!("connect handle carries unknown progress token {token:#x}: the handle is corrupt or was reused"))
        })?
    };
    match p.drive(now) {
        Ok(Some(ready)) => {
            handle::set_token(h, 0);
            Ok(Some(p.into_comm(ready)))
        }
        Ok(None) => {
            let t = if token == 0 {
                NEXT_TOKEN.fetch_add(1, Ordering::Relaxed)
            } else {
                token
            };
            handle::set_token(h, t);
            connects().insert(t, p);
            Ok(None)
        }
        Err(e) => {
            handle::set_token(h, 0);
            Err(e)
        }
    }
}
