//! A connected pair of comms between the two benchmark processes, set up only through the
//! plugin, plus the small control protocol the server uses to drive the client.
//!
//! Set-up (the server listens and publishes its handle; the client gets it out of band):
//! 1. client `connect(handle)` / server `accept` give the client→server comm;
//! 2. the client listens too and sends its own 128-byte handle over that comm;
//! 3. server `connect(handle2)` / client `accept` give the server→client comm.
//!
//! Control messages (64 bytes, tag [`TAG_CTRL`]) travel server→client; after each bw phase the
//! client answers with one report (its counters, client→server). The data pattern of every
//! phase is fixed by its command, so the receive-driven ordering of each comm is never ambiguous.

use crate::error::{Context as _, Error, Result};
use crate::plugin::DevProps;
use core::ffi::c_int;
use ferro_ffi::NCCL_PTR_TYPE_HOST;
use ferro_nccl_standin::mapped::HostBuf;
use ferro_nccl_standin::net::{Comm, ListenComm, Mr, RecvComm, Request as Req, SendComm};
use ferro_nccl_standin::{Handle, NcclExt as _, Net};
use std::time::{Duration, Instant};

/// Tag of control messages and of the handle exchange.
pub(crate) const TAG_CTRL: c_int = 0x0fe1;
/// Tag of benchmark data.
pub(crate) const TAG_DATA: c_int = 1;

const CTRL_BYTES: usize = 64;
/// Words of a report ([`Session::send_words`]): fits the 4 KiB control buffers.
pub(crate) const WORDS: usize = 64;
const WORDS_BYTES: usize = WORDS * 8;
const CTRL_MAGIC: u32 = u32::from_le_bytes(*b"FBNC");
/// The client's counter report after a bw phase (client → server).
const REPORT_MAGIC: u32 = u32::from_le_bytes(*b"FBNR");

/// The little-endian integer in bytes `r` of a control message (at most 8 bytes).
fn le_word(m: &[u8], r: core::ops::Range<usize>) -> u64 {
    let mut b = [0u8; 8];
    b[..r.len()].copy_from_slice(&m[r]);
    u64::from_le_bytes(b)
}

/// A command from the server to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmd {
    /// Allocate and register the data buffers: the client's send buffer (the server's receive
    /// buffer) of `client_send` bytes and the client's receive buffer (the server's send
    /// buffer) of `client_recv` bytes.
    Hello { client_send: u64, client_recv: u64 },
    /// Send `size`-byte messages with up to `window` in flight, buffer slot `i % slots`, until
    /// [`Cmd::Stop`] arrives.
    Bw { size: u64, window: u64, slots: u64 },
    /// End of a `Bw` phase: the receiver consumed `count` messages in all.
    Stop { count: u64 },
    /// Echo `count` messages of `size` bytes (ping on server→client, echo on client→server),
    /// keeping `ahead` receives posted ahead (0: each receive posted just before the send
    /// that precedes it, see [`crate::plan::LAT_DEPTH`]).
    Lat { size: u64, count: u64, ahead: u64 },
    /// Close and exit.
    Done,
    /// Open `n` more comms (the first time), then send `size`-byte messages round-robin over
    /// them with up to `window` in flight on each, until [`Cmd::Stop`] (whose count is per comm).
    Comms { n: u64, size: u64, window: u64 },
    /// One scale phase: `n` comms each way, opened with `threads` threads; `stream` packs the
    /// streaming plan (see `scale::StreamPlan`).
    Scale { n: u64, threads: u64, stream: u64 },
    /// Scale phase: both sides measured their idle comms; start sending.
    Go,
}

impl Cmd {
    pub(crate) fn encode(self) -> [u8; CTRL_BYTES] {
        let (code, a, b, c) = match self {
            Cmd::Hello {
                client_send,
                client_recv,
            } => (1u32, client_send, client_recv, 0),
            Cmd::Bw {
                size,
                window,
                slots,
            } => (2, size, window, slots),
            Cmd::Stop { count } => (3, count, 0, 0),
            Cmd::Lat { size, count, ahead } => (4, size, count, ahead),
            Cmd::Done => (5, 0, 0, 0),
            Cmd::Comms { n, size, window } => (6, n, size, window),
            Cmd::Scale { n, threads, stream } => (7, n, threads, stream),
            Cmd::Go => (8, 0, 0, 0),
        };
        let mut m = [0u8; CTRL_BYTES];
        m[0..4].copy_from_slice(&CTRL_MAGIC.to_le_bytes());
        m[4..8].copy_from_slice(&code.to_le_bytes());
        m[8..16].copy_from_slice(&a.to_le_bytes());
        m[16..24].copy_from_slice(&b.to_le_bytes());
        m[24..32].copy_from_slice(&c.to_le_bytes());
        m
    }

    pub(crate) fn decode(m: &[u8]) -> Result<Cmd> {
        let word = |r: core::ops::Range<usize>| le_word(m, r);
        if m.len() != CTRL_BYTES || word(0..4) != u64::from(CTRL_MAGIC) {
            return Err(Error::new(format!(
                "bad control message ({} bytes, magic {:#x})",
                m.len(),
                if m.len() >= 4 { word(0..4) } else { 0 }
            )));
        }
        let (a, b, c) = (word(8..16), word(16..24), word(24..32));
        Ok(match word(4..8) {
            1 => Cmd::Hello {
                client_send: a,
                client_recv: b,
            },
            2 => Cmd::Bw {
                size: a,
                window: b,
                slots: c,
            },
            3 => Cmd::Stop { count: a },
            4 => Cmd::Lat {
                size: a,
                count: b,
                ahead: c,
            },
            5 => Cmd::Done,
            6 => Cmd::Comms {
                n: a,
                size: b,
                window: c,
            },
            7 => Cmd::Scale {
                n: a,
                threads: b,
                stream: c,
            },
            8 => Cmd::Go,
            other => return Err(Error::new(format!("unknown control command {other}"))),
        })
    }
}

/// How waiting loops behave.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WaitCfg {
    /// Give up when nothing progresses for this long.
    pub(crate) timeout: Duration,
    /// `sched_yield` between polls that found nothing (default: spin, as NCCL's proxy does).
    pub(crate) yield_cpu: bool,
    /// `bw` only: sleep this long before each data-path `isend` and `test` (never inside the
    /// counted calls), so that nearly every call finds its work ready (`--pace-us`).
    pub(crate) pace: Option<Duration>,
}

impl WaitCfg {
    /// The pause of `--pace-us`, if any.
    pub(crate) fn pace(&self) {
        if let Some(p) = self.pace {
            std::thread::sleep(p);
        }
    }
}

/// Checked now and then while waiting: `Err` when the peer is known to be gone.
pub(crate) type PeerCheck = Box<dyn FnMut() -> Result<()>>;

/// Idle polls between two looks at the clock. Reading the clock is not free: under QEMU/TCG the
/// guest's clocksource is the HPET, and every read is an emulated MMIO access (~2 µs, under
/// QEMU's global lock), so polling loops must not read it on every pass.
const POLLS_PER_CLOCK_READ: u32 = 1024;

/// The no-progress timeout and the peer check of a polling loop, reading the clock only every
/// [`POLLS_PER_CLOCK_READ`] idle polls and never on progress.
#[derive(Debug, Default)]
pub(crate) struct IdleWatch {
    polls: u32,
    since: Option<Instant>,
}

impl IdleWatch {
    /// Something progressed.
    pub(crate) fn progress(&mut self) {
        self.polls = 0;
        self.since = None;
    }

    /// A poll found nothing: yields if asked to; now and then checks the peer and the timeout.
    pub(crate) fn idle(
        &mut self,
        cfg: &WaitCfg,
        peer: &mut Option<PeerCheck>,
        what: &dyn Fn() -> String,
    ) -> Result<()> {
        if cfg.yield_cpu {
            std::thread::yield_now();
        }
        self.polls = self.polls.wrapping_add(1);
        if self.polls % POLLS_PER_CLOCK_READ != 0 {
            return Ok(());
        }
        if let Some(p) = peer.as_mut() {
            p().map_err(|e| e.context(what()))?;
        }
        let now = Instant::now();
        match self.since {
            None => self.since = Some(now),
            Some(t) if now.duration_since(t) > cfg.timeout => {
                return Err(Error::new(format!(
                    "{}: no progress for {:.0} s (--timeout)",
                    what(),
                    cfg.timeout.as_secs_f64()
                )));
            }
            Some(_) => {}
        }
        Ok(())
    }
}

/// Polls `f` until it returns `Some`, with the no-progress timeout and the peer check.
pub(crate) fn wait_for<T>(
    cfg: &WaitCfg,
    peer: &mut Option<PeerCheck>,
    what: &dyn Fn() -> String,
    mut f: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let mut idle = IdleWatch::default();
    loop {
        if let Some(v) = f().map_err(|e| e.context(what()))? {
            return Ok(v);
        }
        idle.idle(cfg, peer, what)?;
    }
}

/// Which end of the set-up this process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Server,
    Client,
}

/// A registered buffer (on the session's send comm for the `*_send` buffers, on its receive
/// comm for the `*_recv` ones).
#[derive(Debug)]
pub(crate) struct RegBuf {
    pub(crate) buf: HostBuf,
    pub(crate) mr: Mr,
}

impl RegBuf {
    /// `isend` of `len` bytes at `off`; `None` when the plugin cannot take it yet.
    ///
    /// # Safety
    /// `[off, off + len)` lies in the buffer and stays unchanged until the request completes.
    pub(crate) unsafe fn isend(
        &self,
        net: &Net,
        comm: &SendComm,
        off: usize,
        len: usize,
        tag: c_int,
    ) -> Result<Option<Req>> {
        let data = self.buf.at(off)?.cast();
        // SAFETY: registered memory that lives as long as the registration (deregistered in
        // Session::close before the buffer is unmapped); the range per this function's contract.
        Ok(unsafe { net.isend_ptr(comm, data, len, tag, &self.mr) }.call("isend")?)
    }

    /// `irecv` of `len` bytes at `off`; `None` when the plugin cannot take it yet.
    ///
    /// # Safety
    /// `[off, off + len)` lies in the buffer and is not used for anything else until the
    /// request completes.
    pub(crate) unsafe fn irecv(
        &self,
        net: &Net,
        comm: &RecvComm,
        off: usize,
        len: usize,
        tag: c_int,
    ) -> Result<Option<Req>> {
        let data = self.buf.at(off)?.cast();
        // SAFETY: as in `isend`; the range per this function's contract.
        Ok(unsafe { net.irecv_ptr(comm, data, len, tag, &self.mr) }.call("irecv")?)
    }
}

/// `test` without allocating: `Some(size)` once the one-buffer request is done (the request is
/// then gone).
pub(crate) fn test(net: &Net, req: Req) -> Result<Option<usize>> {
    let mut sizes = [0 as c_int; 1];
    if !net.test_into(&req, &mut sizes).call("test")? {
        return Ok(None);
    }
    usize::try_from(sizes[0])
        .map(Some)
        .map_err(|_| Error::new(format!("test reported size {}", sizes[0])))
}

/// Both comms of this process, their control buffers, and (after `Hello`) the data buffers.
pub(crate) struct Session<'n> {
    pub(crate) net: &'n Net,
    pub(crate) dev: DevProps,
    pub(crate) role: Role,
    /// This process → peer.
    pub(crate) send: SendComm,
    /// Peer → this process.
    pub(crate) recv: RecvComm,
    listen: Option<ListenComm>,
    ctrl_send: RegBuf,
    ctrl_recv: RegBuf,
    pub(crate) data_send: Option<RegBuf>,
    pub(crate) data_recv: Option<RegBuf>,
    pub(crate) wait: WaitCfg,
    pub(crate) peer: Option<PeerCheck>,
    /// Seconds spent connecting (both comms).
    pub(crate) setup_s: f64,
    /// The server's listen handle (client), for the comms mode's extra connections.
    server_handle: Option<Handle>,
    /// The comms mode's extra send comms (client), each with the data buffer registered on it.
    pub(crate) extra_send: Vec<(SendComm, Mr)>,
    /// The comms mode's extra receive comms (server), each with the data buffer registered on
    /// it.
    pub(crate) extra_recv: Vec<(RecvComm, Mr)>,
}

impl std::fmt::Debug for Session<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("dev", &self.dev.name)
            .field("role", &self.role)
            .field("send", &self.send)
            .field("recv", &self.recv)
            .finish_non_exhaustive()
    }
}

fn register(net: &Net, comm: &impl Comm, len: usize, fill: u8) -> Result<RegBuf> {
    let buf = HostBuf::new(len, fill)?;
    let mr = reg_host(net, comm, &buf)?;
    Ok(RegBuf { buf, mr })
}

/// `regMr` of all of `buf` as host memory.
fn reg_host(net: &Net, comm: &impl Comm, buf: &HostBuf) -> Result<Mr> {
    // SAFETY: the buffer lives in a RegBuf, which is deregistered before it is freed
    // (Session::close), or outlives the process.
    unsafe { net.reg_ptr(comm, buf.at(0)?.cast(), buf.len(), NCCL_PTR_TYPE_HOST) }
        .call("regMr")
        .map_err(|e| Error::from(e).context(format!("registering {} bytes", buf.len())))
}

impl<'n> Session<'n> {
    /// Server side: `listen` already happened (its handle went to the client); completes both
    /// connections.
    pub(crate) fn accept(
        net: &'n Net,
        dev: DevProps,
        listen: ListenComm,
        wait: WaitCfg,
        mut peer: Option<PeerCheck>,
    ) -> Result<Session<'n>> {
        let start = Instant::now();
        let recv = wait_for(&wait, &mut peer, &|| "accepting the client".into(), || {
            Ok(net.accept(&listen).call("accept")?)
        })?;
        let ctrl_recv = register(net, &recv, 4096, 0)?;
        let req = post_recv(net, &wait, &mut peer, &recv, &ctrl_recv, 128, TAG_CTRL)?;
        let n = wait_for(
            &wait,
            &mut peer,
            &|| "receiving the client's handle".into(),
            || test(net, req),
        )?;
        if n != 128 {
            return Err(Error::new(format!(
                "the client's handle message has {n} bytes, not 128"
            )));
        }
        let mut h = Handle::zeroed();
        h.0.copy_from_slice(&ctrl_recv.buf.read_at0(128)?);
        let send = wait_for(
            &wait,
            &mut peer,
            &|| "connecting back to the client".into(),
            || Ok(net.connect(dev.index, &mut h).call("connect")?),
        )?;
        let ctrl_send = register(net, &send, 4096, 0)?;
        let comms = (send, recv, listen);
        Ok(Self::set_up(
            net,
            dev,
            Role::Server,
            comms,
            (ctrl_send, ctrl_recv),
            wait,
            peer,
            start,
        ))
    }

    /// Client side: connects to the server's handle and lets it connect back.
    pub(crate) fn connect(
        net: &'n Net,
        dev: DevProps,
        mut handle: Handle,
        wait: WaitCfg,
    ) -> Result<Session<'n>> {
        let start = Instant::now();
        let original = handle;
        let mut peer: Option<PeerCheck> = None;
        let send = wait_for(
            &wait,
            &mut peer,
            &|| "connecting to the server".into(),
            || Ok(net.connect(dev.index, &mut handle).call("connect")?),
        )?;
        let mut ctrl_send = register(net, &send, 4096, 0)?;
        let (h2, listen) = net.listen(dev.index).call("listen")?;
        ctrl_send.buf.write_at0(&h2.0)?;
        let req = wait_for(
            &wait,
            &mut peer,
            &|| "sending this side's handle".into(),
            || {
                // SAFETY: 128 bytes at the start of the registered control buffer, unchanged until
                // the request completes (waited for below).
                unsafe { ctrl_send.isend(net, &send, 0, 128, TAG_CTRL) }
            },
        )?;
        wait_for(
            &wait,
            &mut peer,
            &|| "sending this side's handle".into(),
            || test(net, req),
        )?;
        let recv = wait_for(&wait, &mut peer, &|| "accepting the server".into(), || {
            Ok(net.accept(&listen).call("accept")?)
        })?;
        let ctrl_recv = register(net, &recv, 4096, 0)?;
        let comms = (send, recv, listen);
        let mut s = Self::set_up(
            net,
            dev,
            Role::Client,
            comms,
            (ctrl_send, ctrl_recv),
            wait,
            peer,
            start,
        );
        s.server_handle = Some(original);
        Ok(s)
    }

    /// Opens `n` extra comms in the data direction (client → server) if they are not open yet:
    /// the client connects to the server's listen handle again (each connection from a fresh
    /// copy, as NCCL's connectors do), the server accepts on its listen comm; both register
    /// their data buffer on every new comm.
    pub(crate) fn open_extra(&mut self, n: usize) -> Result<()> {
        let net = self.net;
        let no_data = || Error::new("no data buffer");
        match self.role {
            Role::Client => {
                while self.extra_send.len() < n {
                    let i = self.extra_send.len();
                    let mut h = self
                        .server_handle
                        .ok_or_else(|| Error::new("no server handle"))?;
                    let dev = self.dev.index;
                    let what = || format!("connecting extra comm {i}");
                    let c = wait_for(&self.wait, &mut self.peer, &what, || {
                        Ok(net.connect(dev, &mut h).call("connect")?)
                    })?;
                    let rb = self.data_send.as_ref().ok_or_else(no_data)?;
                    let mr = reg_host(net, &c, &rb.buf)?;
                    self.extra_send.push((c, mr));
                }
            }
            Role::Server => {
                while self.extra_recv.len() < n {
                    let i = self.extra_recv.len();
                    let l = self
                        .listen
                        .as_ref()
                        .ok_or_else(|| Error::new("no listen comm"))?;
                    let what = || format!("accepting extra comm {i}");
                    let c = wait_for(&self.wait, &mut self.peer, &what, || {
                        Ok(net.accept(l).call("accept")?)
                    })?;
                    let rb = self.data_recv.as_ref().ok_or_else(no_data)?;
                    let mr = reg_host(net, &c, &rb.buf)?;
                    self.extra_recv.push((c, mr));
                }
            }
        }
        Ok(())
    }

    /// A connected session (both sides end the same way): comms, control buffers, no data
    /// buffers yet, and how long setting up took.
    #[allow(clippy::too_many_arguments)] // the session's own parts, gathered by either side
    fn set_up(
        net: &'n Net,
        dev: DevProps,
        role: Role,
        (send, recv, listen): (SendComm, RecvComm, ListenComm),
        (ctrl_send, ctrl_recv): (RegBuf, RegBuf),
        wait: WaitCfg,
        peer: Option<PeerCheck>,
        start: Instant,
    ) -> Session<'n> {
        Session {
            net,
            dev,
            role,
            send,
            recv,
            listen: Some(listen),
            ctrl_send,
            ctrl_recv,
            data_send: None,
            data_recv: None,
            wait,
            peer,
            setup_s: start.elapsed().as_secs_f64(),
            server_handle: None,
            extra_send: Vec::new(),
            extra_recv: Vec::new(),
        }
    }

    /// Allocates and registers the data buffers (both sides, `Hello`).
    pub(crate) fn alloc_data(&mut self, send_bytes: u64, recv_bytes: u64) -> Result<()> {
        let t = Instant::now();
        let us = |v: u64| usize::try_from(v).map_err(|_| Error::new("buffer too large"));
        self.data_send = Some(register(self.net, &self.send, us(send_bytes)?, 0x5a)?);
        self.data_recv = Some(register(self.net, &self.recv, us(recv_bytes)?, 0)?);
        crate::progress::progress(&format!(
            "{}: registered data buffers ({} to send, {} to receive) in {:.2} s",
            self.role_name(),
            crate::units::fmt_size(send_bytes),
            crate::units::fmt_size(recv_bytes),
            t.elapsed().as_secs_f64()
        ));
        Ok(())
    }

    pub(crate) fn role_name(&self) -> &'static str {
        match self.role {
            Role::Server => "server",
            Role::Client => "client",
        }
    }

    /// Sends a command and waits until it is delivered (server).
    pub(crate) fn send_cmd(&mut self, cmd: Cmd) -> Result<()> {
        self.send_ctrl(&cmd.encode(), &|| {
            format!("sending control message {cmd:?}")
        })
    }

    /// Sends this side's counter deltas of a bw phase to the peer (client → server, after the
    /// phase's last send completed), on the send comm with the control tag.
    pub(crate) fn send_report(&mut self, deltas: Option<[u64; 6]>) -> Result<()> {
        let mut m = [0u8; CTRL_BYTES];
        m[0..4].copy_from_slice(&REPORT_MAGIC.to_le_bytes());
        m[4..8].copy_from_slice(&u32::from(deltas.is_some()).to_le_bytes());
        for (i, v) in deltas.unwrap_or_default().iter().enumerate() {
            m[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        self.send_ctrl(&m, &|| "sending the phase's counters".to_string())
    }

    /// Sends one control-sized message on the send comm with the control tag and waits until it
    /// is delivered.
    fn send_ctrl(&mut self, m: &[u8; CTRL_BYTES], what: &dyn Fn() -> String) -> Result<()> {
        self.ctrl_send.buf.write_at0(m)?;
        let (net, send, cs) = (self.net, &self.send, &self.ctrl_send);
        let req = wait_for(&self.wait, &mut self.peer, what, || {
            // SAFETY: the message at the start of the registered control buffer, unchanged
            // until the request completes (waited for below).
            unsafe { cs.isend(net, send, 0, CTRL_BYTES, TAG_CTRL) }
        })?;
        wait_for(&self.wait, &mut self.peer, what, || test(net, req))?;
        Ok(())
    }

    /// Sends [`WORDS`] little-endian words to the peer (a report larger than a command) and waits
    /// until it is delivered.
    pub(crate) fn send_words(&mut self, words: &[u64; WORDS]) -> Result<()> {
        let mut m = Vec::with_capacity(WORDS_BYTES);
        for w in words {
            m.extend_from_slice(&w.to_le_bytes());
        }
        self.ctrl_send.buf.write_at0(&m)?;
        let (net, send, cs) = (self.net, &self.send, &self.ctrl_send);
        let what = || "sending a report".to_string();
        let req = wait_for(&self.wait, &mut self.peer, &what, || {
            // SAFETY: the report at the start of the registered control buffer, unchanged until
            // the request completes (waited for below).
            unsafe { cs.isend(net, send, 0, WORDS_BYTES, TAG_CTRL) }
        })?;
        wait_for(&self.wait, &mut self.peer, &what, || test(net, req))?;
        Ok(())
    }

    /// Receives a report of [`WORDS`] words from the peer.
    pub(crate) fn recv_words(&mut self) -> Result<[u64; WORDS]> {
        let req = post_recv(
            self.net,
            &self.wait,
            &mut self.peer,
            &self.recv,
            &self.ctrl_recv,
            WORDS_BYTES,
            TAG_CTRL,
        )?;
        let net = self.net;
        let what = || "receiving the peer's report".to_string();
        let n = wait_for(&self.wait, &mut self.peer, &what, || test(net, req))?;
        if n != WORDS_BYTES {
            return Err(Error::new(format!(
                "the peer's report has {n} bytes, not {WORDS_BYTES}"
            )));
        }
        let m = self.ctrl_recv.buf.read_at0(WORDS_BYTES)?;
        let mut out = [0u64; WORDS];
        for (i, o) in out.iter_mut().enumerate() {
            *o = le_word(&m, 8 * i..8 * i + 8);
        }
        Ok(out)
    }

    /// Receives the peer's counter deltas of a bw phase (server); `None` when the peer's plugin
    /// has no statistics.
    pub(crate) fn recv_report(&mut self) -> Result<Option<[u64; 6]>> {
        let req = self.post_cmd_recv()?;
        let net = self.net;
        let what = || "receiving the client's counters".to_string();
        let n = wait_for(&self.wait, &mut self.peer, &what, || test(net, req))?;
        let m = self.ctrl_recv.buf.read_at0(CTRL_BYTES)?;
        if n != CTRL_BYTES || le_word(&m, 0..4) != u64::from(REPORT_MAGIC) {
            return Err(Error::new("the client's counter report is malformed"));
        }
        if le_word(&m, 4..8) == 0 {
            return Ok(None);
        }
        let mut out = [0u64; 6];
        for (i, o) in out.iter_mut().enumerate() {
            *o = le_word(&m, 8 + 8 * i..16 + 8 * i);
        }
        Ok(Some(out))
    }

    /// Posts the receive of the next command (client).
    pub(crate) fn post_cmd_recv(&mut self) -> Result<Req> {
        post_recv(
            self.net,
            &self.wait,
            &mut self.peer,
            &self.recv,
            &self.ctrl_recv,
            CTRL_BYTES,
            TAG_CTRL,
        )
    }

    /// Decodes a completed command receive of `n` bytes.
    pub(crate) fn read_cmd(&self, n: usize) -> Result<Cmd> {
        Cmd::decode(
            &self
                .ctrl_recv
                .buf
                .read_at0(n.min(self.ctrl_recv.buf.len()))?,
        )
    }

    /// Waits for a posted command receive.
    pub(crate) fn wait_cmd(&mut self, req: Req) -> Result<Cmd> {
        let net = self.net;
        let n = wait_for(
            &self.wait,
            &mut self.peer,
            &|| "waiting for the server's next command".into(),
            || test(net, req),
        )?;
        self.read_cmd(n)
    }

    /// Deregisters everything and closes the comms.
    pub(crate) fn close(mut self) -> Result<()> {
        let net = self.net;
        let mut first_err: Option<Error> = None;
        let mut keep = |r: Result<()>| {
            if let Err(e) = r {
                first_err.get_or_insert(e);
            }
        };
        for (c, mr) in std::mem::take(&mut self.extra_send) {
            keep(net.dereg_mr(&c, mr).call("deregMr").map_err(Error::from));
            keep(net.close_send(c).call("closeSend").map_err(Error::from));
        }
        for (c, mr) in std::mem::take(&mut self.extra_recv) {
            keep(net.dereg_mr(&c, mr).call("deregMr").map_err(Error::from));
            keep(net.close_recv(c).call("closeRecv").map_err(Error::from));
        }
        for rb in [self.data_send.take()]
            .into_iter()
            .flatten()
            .chain([self.ctrl_send])
        {
            keep(
                net.dereg_mr(&self.send, rb.mr)
                    .call("deregMr")
                    .map_err(Error::from),
            );
            drop(rb.buf);
        }
        for rb in [self.data_recv.take()]
            .into_iter()
            .flatten()
            .chain([self.ctrl_recv])
        {
            keep(
                net.dereg_mr(&self.recv, rb.mr)
                    .call("deregMr")
                    .map_err(Error::from),
            );
            drop(rb.buf);
        }
        keep(
            net.close_send(self.send)
                .call("closeSend")
                .map_err(Error::from),
        );
        keep(
            net.close_recv(self.recv)
                .call("closeRecv")
                .map_err(Error::from),
        );
        if let Some(l) = self.listen.take() {
            keep(net.close_listen(l).call("closeListen").map_err(Error::from));
        }
        match first_err {
            Some(e) => Err(e.context("closing")),
            None => Ok(()),
        }
    }
}

/// Posts a one-buffer receive of `len` bytes at the start of `rb`, retrying while the plugin
/// says "not now".
fn post_recv(
    net: &Net,
    wait: &WaitCfg,
    peer: &mut Option<PeerCheck>,
    comm: &RecvComm,
    rb: &RegBuf,
    len: usize,
    tag: c_int,
) -> Result<Req> {
    wait_for(
        wait,
        peer,
        &|| format!("posting a receive of {len} bytes"),
        || {
            // SAFETY: len bytes at the start of a registered buffer that lives as long as the
            // session; this protocol never reuses it before the request completes.
            unsafe { rb.irecv(net, comm, 0, len, tag) }
        },
    )
}

/// Reads the first line of stdin (the handle in the orchestrated mode).
pub(crate) fn read_handle_line() -> Result<String> {
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .ctx("reading the server's handle from stdin")?;
    if line.trim().is_empty() {
        return Err(Error::new("no handle on stdin (empty input)"));
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_round_trip() {
        for c in [
            Cmd::Hello {
                client_send: 1 << 26,
                client_recv: 4096,
            },
            Cmd::Bw {
                size: 8,
                window: 32,
                slots: 32,
            },
            Cmd::Stop { count: 123_456 },
            Cmd::Lat {
                size: 4096,
                count: 7,
                ahead: 0,
            },
            Cmd::Done,
            Cmd::Scale {
                n: 4096,
                threads: 4,
                stream: 0x0102_0304,
            },
            Cmd::Go,
        ] {
            assert_eq!(Cmd::decode(&c.encode()).unwrap(), c);
        }
        let mut bad = Cmd::Done.encode();
        bad[0] ^= 1;
        assert!(Cmd::decode(&bad).is_err());
        assert!(Cmd::decode(&[0u8; 10]).is_err());
        let mut unknown = Cmd::Done.encode();
        unknown[4] = 99;
        assert!(Cmd::decode(&unknown).is_err());
    }
}
