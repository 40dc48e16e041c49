//! The listener: `listen`, and `accept` with the core's bounds on strangers
//! ([`ferro_proto::handshake::strangers`]): it keeps at most [`MAX_STRANGERS`] connections
//! that have not presented its secret, dropping the oldest of them when one more comes, drops a
//! stranger that has not presented it within [`ferro_proto::handshake::SECRET_DEADLINE`],
//! reports dropped strangers and failing `accept` calls in one line per interval, and never
//! returns an `accept` error to NCCL: the listener stays usable and the connection waiting in
//! the kernel is taken at a later call.

use super::setup::{Resources, Setup};
use super::{now, settings};
use crate::error::{Error, Result};
use crate::plugin;
use crate::transport::comm::CommPtr;
use crate::transport::objects::ObjectKind;
use crate::vnic::{self, VDevice};
use crate::{info, oob, warn};
use ferro_ffi::log_flags::{INIT, NET};
use ferro_proto::handle::{self, HANDLE_SIZE, SECRET_SIZE};
use ferro_proto::handshake::Handshake;
use ferro_proto::handshake::strangers::{self, LogTally, MAX_STRANGERS, Report};
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// A listening endpoint.
#[derive(Debug)]
#[repr(C)]
pub struct ListenComm {
    /// [`ObjectKind::ListenComm`]'s magic word; first field.
    magic: u64,
    dev: &'static VDevice,
    listener: TcpListener,
    addr: SocketAddr,
    /// What a connecting side must present (it is in the handle).
    secret: [u8; SECRET_SIZE],
    pending: Mutex<Pending>,
}

/// A listener's connections being set up, and the tallies of what it reports about them.
#[derive(Debug, Default)]
struct Pending {
    /// In the order they were accepted, oldest first.
    setups: Vec<Setup>,
    /// Strangers dropped (refused, gone, out of time, or evicted from a full table).
    dropped: LogTally,
    /// The latest of them, for the next summary line.
    last_dropped: String,
    /// `accept` calls that failed.
    accept_failed: LogTally,
    /// The latest failure, for the next summary line.
    last_accept_error: String,
}

/// How many new connections one `accept` call takes at most (the rest wait in the kernel for
/// the next call), so that one call stays short whatever is queued: taking one costs a few
/// system calls, and NCCL calls `accept` again at once while it waits for a connection.
const ACCEPTS_PER_CALL: usize = 64;

/// `listen`: binds, fills the handle (with the device's member count, which the connecting
/// side needs to create its QPs).
pub fn listen(dev_index: i32, handle_out: &mut [u8; HANDLE_SIZE]) -> Result<Box<ListenComm>> {
    let dev = vnic::get(dev_index)?;
    let cfg = &plugin::get()?.config;
    let (ip, why) = oob::listen_ip(
        dev.first().netdev.as_deref(),
        &oob::interfaces(),
        cfg.socket_ifname.as_deref(),
    );
    let listener = TcpListener::bind(SocketAddr::new(ip, 0)).map_err(|e| {
        Error::System(format!(
            "{}: cannot listen on {ip} ({why}): {e}",
            dev.label()
        ))
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::System(format!("listener: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::System(format!("listener: {e}")))?;
    let secret = random_secret()?;
    *handle_out = handle::encode(addr, secret);
    handle::set_devs(handle_out, dev.members.len());
    if cfg.subnet_aware_routing {
        handle::set_gids(handle_out, &super::roce_gids(dev));
    }
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| info!(INIT | NET, "out-of-band connections on {ip} ({why})"));
    Ok(Box::new(ListenComm {
        magic: ObjectKind::ListenComm.magic(),
        dev,
        listener,
        addr,
        secret,
        pending: Mutex::new(Pending::default()),
    }))
}

/// A listener's secret from the kernel's random generator.
fn random_secret() -> Result<[u8; SECRET_SIZE]> {
    let mut s = [0u8; SECRET_SIZE];
    let mut filled = 0;
    while filled < SECRET_SIZE {
        // The system call rather than glibc's getrandom(): that wrapper is glibc 2.25, and the
        // plugin must load with glibc 2.17 (the portable build's symbol baseline).
        // SAFETY: writes at most SECRET_SIZE - filled bytes into the rest of `s`.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getrandom,
                s[filled..].as_mut_ptr(),
                SECRET_SIZE - filled,
                0,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return Err(Error::System(format!(
                "getrandom for the listen secret: {e}"
            )));
        }
        filled += n as usize;
    }
    Ok(s)
}

impl ListenComm {
    /// `accept`: advances the pending connections (oldest first), then accepts new TCP
    /// connections; returns the first that is ready. A stray or garbage connection is dropped
    /// and never blocks the others; a failing `accept` is reported and retried at a later call.
    pub fn accept(&self) -> Result<Option<CommPtr>> {
        let now = now();
        let settings = settings()?;
        let mut pending = self
            .pending
            .lock()
            .map_err(|_| Error::Internal("listen comm poisoned".into()))?;
        let p = &mut *pending;
        // The connections already here first: a real peer's `Connect` that has arrived is read
        // before newcomers could crowd it out.
        let mut i = 0;
        while i < p.setups.len() {
            match p.setups[i].drive(now) {
                Ok(Some(ready)) => {
                    let s = p.setups.remove(i);
                    return Ok(Some(s.into_comm(ready)));
                }
                Ok(None) => i += 1,
                Err(e) => {
                    let s = p.setups.remove(i);
                    self.dropping(p, &s, &e.to_string(), now);
                }
            }
        }
        for _ in 0..ACCEPTS_PER_CALL {
            match self.listener.accept() {
                Ok((sock, peer)) => {
                    if sock.set_nonblocking(true).is_err() {
                        continue;
                    }
                    let _ = sock.set_nodelay(true);
                    // Its own time: the secret's deadline runs from now, not from the start of
                    // a call that may have taken many connections before this one.
                    let now = self::now();
                    let mut s = Setup {
                        sock,
                        peer,
                        dev: self.dev,
                        hs: Handshake::acceptor(
                            self.secret,
                            settings,
                            self.dev.members.len(),
                            peer.to_string(),
                            now,
                        ),
                        res: Resources::None,
                        qps: None,
                    };
                    // What it already sent is read at once: a real peer stops being a stranger.
                    match s.drive(now) {
                        Ok(Some(ready)) => return Ok(Some(s.into_comm(ready))),
                        Ok(None) => p.setups.push(s),
                        Err(e) => self.dropping(p, &s, &e.to_string(), now),
                    }
                    self.evict(p, now);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    self.accept_failed(p, &e, now);
                    // A connection that went away before it was taken costs only itself; other
                    // failures (no file descriptors or memory left) wait for a later call.
                    if !matches!(e.raw_os_error(), Some(libc::ECONNABORTED | libc::EPROTO)) {
                        break;
                    }
                }
            }
        }
        self.report_due(p, now);
        Ok(None)
    }

    /// Drops the oldest strangers while there are more than [`MAX_STRANGERS`].
    fn evict(&self, p: &mut Pending, now: Duration) {
        while let Some(i) = strangers::eviction(&p.setups, |s| s.hs.is_stranger()) {
            let s = p.setups.remove(i);
            let why = format!(
                "it was the oldest of more than {MAX_STRANGERS} connections that have not presented the listen secret"
            );
            self.dropping(p, &s, &why, now);
        }
    }

    /// Reports a dropped connection (its socket closes when `s` goes): a stranger's drop in the
    /// listener's tally (one line per interval), a real peer's failure in a line of its own.
    fn dropping(&self, p: &mut Pending, s: &Setup, why: &str, now: Duration) {
        if !s.hs.is_stranger() {
            if s.timed_out() {
                warn!(NET, "{}: dropping {why}", self.dev.label());
            } else {
                warn!(
                    NET,
                    "{}: dropping incoming connection from {} on {}: {why}",
                    self.dev.label(),
                    s.peer,
                    self.addr
                );
            }
            return;
        }
        p.last_dropped = format!("from {}: {why}", s.peer);
        if let Some(r) = p.dropped.record(now) {
            self.report_dropped(r, &p.last_dropped);
        }
    }

    fn report_dropped(&self, r: Report, latest: &str) {
        warn!(
            NET,
            "{}: dropped {} on {} that did not present the listen secret ({} since listening); the latest {latest}",
            self.dev.label(),
            connections(r.count),
            self.addr,
            r.total
        );
    }

    fn accept_failed(&self, p: &mut Pending, e: &std::io::Error, now: Duration) {
        p.last_accept_error = e.to_string();
        if let Some(r) = p.accept_failed.record(now) {
            self.report_accept_failed(r, &p.last_accept_error);
        }
    }

    fn report_accept_failed(&self, r: Report, latest: &str) {
        warn!(
            NET,
            "{}: accept on {} failed {} ({} since listening), the latest with: {latest}; connections waiting are taken at a later call",
            self.dev.label(),
            self.addr,
            times(r.count),
            r.total
        );
    }

    /// The summary lines whose interval has passed.
    fn report_due(&self, p: &mut Pending, now: Duration) {
        if let Some(r) = p.dropped.poll(now) {
            self.report_dropped(r, &p.last_dropped);
        }
        if let Some(r) = p.accept_failed.poll(now) {
            self.report_accept_failed(r, &p.last_accept_error);
        }
    }
}

/// Closing a listener reports what its summaries have not said yet.
impl Drop for ListenComm {
    fn drop(&mut self) {
        let p = self.pending.get_mut().unwrap_or_else(|e| e.into_inner());
        let (dropped, failed) = (p.dropped.flush(), p.accept_failed.flush());
        let (last_dropped, last_error) = (
            std::mem::take(&mut p.last_dropped),
            std::mem::take(&mut p.last_accept_error),
        );
        if let Some(r) = dropped {
            self.report_dropped(r, &last_dropped);
        }
        if let Some(r) = failed {
            self.report_accept_failed(r, &last_error);
        }
    }
}

fn connections(n: u64) -> String {
    if n == 1 {
        "1 connection".into()
    } else {
        format!("{n} connections")
    }
}

fn times(n: u64) -> String {
    if n == 1 {
        "once".into()
    } else {
        format!("{n} times")
    }
}
