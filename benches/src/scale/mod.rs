//! The scale mode (`ferro-bench scale`): for each N, N comms each way between the two processes,
//! opened with `--connect-threads` threads at once, then driven round-robin by one thread on
//! each side as NCCL's proxy thread drives its connections. Each side measures itself: connect
//! and accept times, memory, descriptors and verbs objects per comm (against a reading taken
//! before the comms), the cost of `test` on idle comms, streaming small and large messages over
//! all comms both ways with every byte verified, and teardown (which must give back every
//! descriptor and verbs object). The client reports its figures to the server, which prints
//! both sides and writes the CSV, JSON and a plot of the cost per comm against N.
//!
//! One phase, per N (server → client commands on the session's control comm):
//! 1. `Scale { n, threads, stream }`; both sides read themselves, open the comms, read again,
//!    register the two message pools on every comm, read again;
//! 2. both post one identity receive per comm and time `test` on those idle receives;
//! 3. the client reports that it is done measuring; the server, done too, sends `Go`;
//! 4. both send their identities (a receive comm learns which peer send comm it belongs to),
//!    stream the small, then the large messages, deregister, close (timed), read themselves;
//! 5. the client sends its figures.

mod connect;
mod output;
mod procfs;
mod stream;

use crate::counted::{self, callgrind};
use crate::error::{Error, Result};
use crate::model::percentile;
use crate::progress::progress;
use crate::session::{Cmd, Session, WORDS};
use crate::units::{fmt_size, parse_size};
use ferro_nccl_standin::net::{ListenComm, Request as Req};
use ferro_nccl_standin::{Handle, NcclExt as _};
use procfs::{Snapshot, Verbs};
use std::path::PathBuf;
use std::time::Instant;
use stream::Pools;

pub(crate) use output::{Meta, svg, table, to_csv, to_json};

/// The scale mode's options (server side).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Opts {
    pub(crate) comms: Vec<usize>,
    pub(crate) threads: usize,
    pub(crate) stream: StreamPlan,
    pub(crate) verbs: bool,
    pub(crate) svg: Option<PathBuf>,
    /// Sweeps of `test` over the N idle receives, after the timed ones, in a function of their
    /// own for an instruction counter (`count_sweeps.sh`); 0: none. Server side only.
    pub(crate) count_sweeps: u32,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            comms: vec![16, 256, 1024, 4096],
            threads: 4,
            stream: StreamPlan::default(),
            verbs: true,
            svg: None,
            count_sweeps: 0,
        }
    }
}

/// Largest N (each process holds 2 N comms).
pub(crate) const MAX_COMMS: usize = 65_536;

impl Opts {
    /// Whether `opt` is one of the scale mode's own options.
    pub(crate) fn knows(opt: &str) -> bool {
        matches!(
            opt,
            "--comms"
                | "--connect-threads"
                | "--small-per-comm"
                | "--big-size"
                | "--big-per-comm"
                | "--window"
                | "--verbs"
                | "--svg"
                | "--count-sweeps"
        )
    }

    /// Sets one option.
    pub(crate) fn set(&mut self, opt: &str, val: &str) -> Result<()> {
        let num = |v: &str| -> Result<u64> {
            v.trim()
                .parse()
                .map_err(|_| Error::new(format!("{opt}: bad value {v:?}")))
        };
        match opt {
            "--comms" => {
                let v: Result<Vec<usize>> = val
                    .split(',')
                    .filter(|s| !s.trim().is_empty())
                    .map(|s| {
                        let n = parse_size(s)? as usize;
                        if !(1..=MAX_COMMS).contains(&n) {
                            return Err(Error::new(format!("--comms: {n} is not 1..{MAX_COMMS}")));
                        }
                        Ok(n)
                    })
                    .collect();
                self.comms = v?;
                if self.comms.is_empty() {
                    return Err(Error::new("--comms: no value"));
                }
            }
            "--connect-threads" => {
                self.threads = num(val)? as usize;
                if !(1..=64).contains(&self.threads) {
                    return Err(Error::new("--connect-threads must be 1..64"));
                }
            }
            "--small-per-comm" => self.stream.small_per_comm = num(val)?.min(0xffff) as u16,
            "--big-per-comm" => self.stream.big_per_comm = num(val)?.min(0xff) as u8,
            "--big-size" => {
                let b = parse_size(val)?;
                if !(8..=(64 << 20)).contains(&b) || b % 8 != 0 {
                    return Err(Error::new("--big-size must be a multiple of 8, 8 .. 64M"));
                }
                self.stream.big_kib_or_bytes = b;
            }
            "--window" => {
                let w = num(val)?;
                if !(1..=32).contains(&w) {
                    return Err(Error::new("--window must be 1..32"));
                }
                self.stream.window = w as u8;
            }
            "--verbs" => self.verbs = num(val)? != 0,
            "--svg" => self.svg = Some(PathBuf::from(val)),
            "--count-sweeps" => {
                let k = num(val)?;
                if k > 1 << 20 {
                    return Err(Error::new("--count-sweeps must be 0..1048576"));
                }
                self.count_sweeps = k as u32;
            }
            _ => return Err(Error::new(format!("{opt} is not a scale option"))),
        }
        Ok(())
    }
}

/// What each side streams, packed into one command word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StreamPlan {
    /// 8-byte messages per comm and direction.
    pub(crate) small_per_comm: u16,
    /// Large messages per comm and direction.
    pub(crate) big_per_comm: u8,
    /// Size of the large messages, bytes (a multiple of 8, at most 64 MiB).
    pub(crate) big_kib_or_bytes: u64,
    /// Messages in flight per comm.
    pub(crate) window: u8,
}

impl Default for StreamPlan {
    fn default() -> Self {
        StreamPlan {
            small_per_comm: 4,
            big_per_comm: 1,
            big_kib_or_bytes: 1 << 20,
            window: 2,
        }
    }
}

/// The small messages' size.
pub(crate) const SMALL: usize = 8;
/// Slots of the pools for large messages (each in-flight large message owns one).
const BIG_SLOTS: usize = 8;

impl StreamPlan {
    pub(crate) fn big(&self) -> usize {
        self.big_kib_or_bytes as usize
    }

    /// bits 0..16 small, 16..24 big count, 24..32 window, 32..64 big size / 8.
    pub(crate) fn pack(&self) -> u64 {
        u64::from(self.small_per_comm)
            | u64::from(self.big_per_comm) << 16
            | u64::from(self.window) << 24
            | (self.big_kib_or_bytes / 8) << 32
    }

    pub(crate) fn unpack(w: u64) -> StreamPlan {
        StreamPlan {
            small_per_comm: (w & 0xffff) as u16,
            big_per_comm: (w >> 16 & 0xff) as u8,
            window: ((w >> 24 & 0xff) as u8).max(1),
            big_kib_or_bytes: (w >> 32) * 8,
        }
    }

    /// Bytes of each pool for `n` comms: the identity slots, the small messages in flight, and
    /// [`BIG_SLOTS`] large messages.
    fn pool_bytes(&self, n: usize) -> usize {
        let small = n * usize::from(self.window) * SMALL;
        small.max(self.big() * BIG_SLOTS).max(n * SMALL)
    }
}

/// One side's figures of one phase.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Side {
    pub(crate) before: Snapshot,
    pub(crate) connected: Snapshot,
    pub(crate) registered: Snapshot,
    pub(crate) after: Snapshot,
    pub(crate) connect_median_ns: u64,
    pub(crate) connect_p99_ns: u64,
    pub(crate) accept_median_ns: u64,
    pub(crate) accept_p99_ns: u64,
    pub(crate) open_wall_ns: u64,
    pub(crate) idle_test_ns: f64,
    pub(crate) sweep_ns_per_comm: f64,
    pub(crate) small_msgs: u64,
    pub(crate) small_ns: u64,
    pub(crate) big_msgs: u64,
    pub(crate) big_ns: u64,
    pub(crate) close_ns: u64,
}

const NONE: u64 = u64::MAX;

fn put_opt(w: &mut Vec<u64>, v: Option<u64>) {
    w.push(v.unwrap_or(NONE));
}

fn get_opt(v: u64) -> Option<u64> {
    (v != NONE).then_some(v)
}

fn put_snap(w: &mut Vec<u64>, s: &Snapshot) {
    for v in [s.rss_kib, s.lck_kib, s.pin_kib, s.fds] {
        put_opt(w, v);
    }
    match s.verbs {
        Some(v) => w.extend([1, v.qp, v.cq, v.cqe, v.mr, v.mr_bytes]),
        None => w.extend([0; 6]),
    }
}

fn get_snap(it: &mut impl Iterator<Item = u64>) -> Snapshot {
    let mut next = || it.next().unwrap_or(NONE);
    let (rss, lck, pin, fds) = (next(), next(), next(), next());
    let has = next();
    let v = Verbs {
        qp: next(),
        cq: next(),
        cqe: next(),
        mr: next(),
        mr_bytes: next(),
    };
    Snapshot {
        rss_kib: get_opt(rss),
        lck_kib: get_opt(lck),
        pin_kib: get_opt(pin),
        fds: get_opt(fds),
        verbs: (has == 1).then_some(v),
    }
}

impl Side {
    /// The words of a report (the client's figures, sent to the server).
    pub(crate) fn encode(&self) -> [u64; WORDS] {
        let mut w = Vec::with_capacity(WORDS);
        for s in [&self.before, &self.connected, &self.registered, &self.after] {
            put_snap(&mut w, s);
        }
        w.extend([
            self.connect_median_ns,
            self.connect_p99_ns,
            self.accept_median_ns,
            self.accept_p99_ns,
            self.open_wall_ns,
            self.idle_test_ns.to_bits(),
            self.sweep_ns_per_comm.to_bits(),
            self.small_msgs,
            self.small_ns,
            self.big_msgs,
            self.big_ns,
            self.close_ns,
        ]);
        let mut out = [0u64; WORDS];
        out[..w.len()].copy_from_slice(&w);
        out
    }

    pub(crate) fn decode(w: &[u64; WORDS]) -> Side {
        let mut it = w.iter().copied();
        let before = get_snap(&mut it);
        let connected = get_snap(&mut it);
        let registered = get_snap(&mut it);
        let after = get_snap(&mut it);
        let mut next = || it.next().unwrap_or(0);
        Side {
            before,
            connected,
            registered,
            after,
            connect_median_ns: next(),
            connect_p99_ns: next(),
            accept_median_ns: next(),
            accept_p99_ns: next(),
            open_wall_ns: next(),
            idle_test_ns: f64::from_bits(next()),
            sweep_ns_per_comm: f64::from_bits(next()),
            small_msgs: next(),
            small_ns: next(),
            big_msgs: next(),
            big_ns: next(),
            close_ns: next(),
        }
    }
}

/// Median and p99 (nearest rank) of nanosecond samples.
fn median_p99(v: &[u64]) -> (u64, u64) {
    let mut s: Vec<f64> = v.iter().map(|&x| x as f64).collect();
    s.sort_by(f64::total_cmp);
    (crate::model::median(&s) as u64, percentile(&s, 99.0) as u64)
}

/// Which side of a phase this is, for the two exchanges between the sides: the listen handles
/// (the server sends its own first), and, between the idle measurement and the data, who waits
/// for whom.
enum Sync<'a> {
    /// Server: wait for the client's report, then send `Go`; before that, `count_sweeps`
    /// counted sweeps over the idle receives (see [`Opts::count_sweeps`]).
    Server {
        client: &'a mut Option<Side>,
        count_sweeps: u32,
    },
    /// Client: report, then wait for `Go`.
    Client,
}

/// Handles per report message (16 words each).
const HANDLES_PER_REPORT: usize = WORDS / 16;

fn send_handles(s: &mut Session<'_>, hs: &[Handle]) -> Result<()> {
    for chunk in hs.chunks(HANDLES_PER_REPORT) {
        let mut w = [0u64; WORDS];
        for (k, h) in chunk.iter().enumerate() {
            for (j, b) in h.0.chunks_exact(8).enumerate() {
                let mut x = [0u8; 8];
                x.copy_from_slice(b);
                w[16 * k + j] = u64::from_le_bytes(x);
            }
        }
        s.send_words(&w)?;
    }
    Ok(())
}

fn recv_handles(s: &mut Session<'_>, n: usize) -> Result<Vec<Handle>> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let w = s.recv_words()?;
        for k in 0..HANDLES_PER_REPORT.min(n - out.len()) {
            let mut h = Handle::zeroed();
            for (j, b) in h.0.chunks_exact_mut(8).enumerate() {
                b.copy_from_slice(&w[16 * k + j].to_le_bytes());
            }
            out.push(h);
        }
    }
    Ok(out)
}

/// `registered` as the comms' reading plus what registering added (measured by the main
/// thread alone, once the connect threads that made the comms' objects are gone).
fn plus_registration(connected: &Snapshot, pre: &Snapshot, post: &Snapshot) -> Snapshot {
    let verbs = match (connected.verbs, pre.verbs, post.verbs) {
        (Some(c), Some(a), Some(b)) => Some(Verbs {
            qp: (c.qp + b.qp).saturating_sub(a.qp),
            cq: (c.cq + b.cq).saturating_sub(a.cq),
            cqe: (c.cqe + b.cqe).saturating_sub(a.cqe),
            mr: (c.mr + b.mr).saturating_sub(a.mr),
            mr_bytes: (c.mr_bytes + b.mr_bytes).saturating_sub(a.mr_bytes),
        }),
        _ => None,
    };
    Snapshot { verbs, ..*post }
}

/// One side of one phase: one listen comm per connect thread (their handles exchanged with
/// the peer, the server's first), then [`phase_on`]; the listen comms are closed at the end.
fn phase(
    s: &mut Session<'_>,
    n: usize,
    threads: usize,
    plan: StreamPlan,
    verbs: bool,
    sync: Sync<'_>,
) -> Result<Side> {
    let net = s.net;
    let who = s.role_name();
    let mut listens = Vec::with_capacity(threads);
    let mut mine = Vec::with_capacity(threads);
    for _ in 0..threads {
        let (h, l) = net.listen(s.dev.index).call("listen")?;
        mine.push(h);
        listens.push(l);
    }
    let peers = if matches!(sync, Sync::Server { .. }) {
        send_handles(s, &mine)?;
        recv_handles(s, threads)?
    } else {
        let p = recv_handles(s, threads)?;
        send_handles(s, &mine)?;
        p
    };
    let res = phase_on(s, n, plan, verbs, sync, &peers, &listens);
    for l in listens {
        if let Err(e) = net.close_listen(l).call("closeListen") {
            return Err(Error::from(e).context(format!("{who}: closing a listen comm")));
        }
    }
    res
}

/// The rest of a phase, with the listen comms open and the peer's handles known.
fn phase_on(
    s: &mut Session<'_>,
    n: usize,
    plan: StreamPlan,
    verbs: bool,
    sync: Sync<'_>,
    peers: &[Handle],
    listens: &[ListenComm],
) -> Result<Side> {
    let net = s.net;
    let who = s.role_name();
    let side_id = u64::from(who == "client");
    let threads = listens.len();
    let pools = Pools::new(plan.pool_bytes(n))?;
    // The stand-in keeps the log lines of a plugin that has a logger; none should be counted.
    ferro_nccl_standin::logger::clear_logs();
    let mut r = Side {
        before: procfs::snapshot(verbs),
        ..Default::default()
    };
    let (opened, connected) =
        connect::open(net, s.dev.index, peers, listens, n, s.wait.timeout, || {
            ferro_nccl_standin::logger::clear_logs();
            procfs::snapshot(verbs)
        })
        .map_err(|e| e.context(format!("{who}: opening {n} comms each way")))?;
    (r.connect_median_ns, r.connect_p99_ns) = median_p99(&opened.connect_ns);
    (r.accept_median_ns, r.accept_p99_ns) = median_p99(&opened.accept_ns);
    r.open_wall_ns = opened.wall_ns;
    r.connected = connected;
    progress(&format!(
        "{who}: {n} comms each way open in {:.2} s with {threads} thread(s) (connect median {:.1} ms, p99 {:.1} ms; per comm: {:.1} connect calls, {:.1} accept calls, {:.2} ms user + {:.2} ms system CPU)",
        opened.wall_ns as f64 * 1e-9,
        r.connect_median_ns as f64 * 1e-6,
        r.connect_p99_ns as f64 * 1e-6,
        opened.connect_calls as f64 / n.max(1) as f64,
        opened.accept_calls as f64 / n.max(1) as f64,
        opened.cpu_ns.0 as f64 * 1e-6 / n.max(1) as f64,
        opened.cpu_ns.1 as f64 * 1e-6 / n.max(1) as f64
    ));
    let pre = procfs::snapshot(verbs);
    let mut w = stream::wire(net, &pools, opened.sends, opened.recvs)?;
    r.registered = plus_registration(&r.connected, &pre, &procfs::snapshot(verbs));
    let result = (|| -> Result<()> {
        let ids = stream::post_ids(net, &pools, &w)?;
        (r.idle_test_ns, r.sweep_ns_per_comm) = stream::idle_costs(net, &ids)?;
        match sync {
            Sync::Server {
                client,
                count_sweeps,
            } => {
                if count_sweeps > 0 {
                    counted_sweeps(net, &ids, n, count_sweeps)?;
                }
                let words = s.recv_words()?;
                *client = Some(Side::decode(&words));
                s.send_cmd(Cmd::Go)?;
            }
            Sync::Client => {
                let go = s.post_cmd_recv()?;
                s.send_words(&r.encode())?;
                match s.wait_cmd(go)? {
                    Cmd::Go => {}
                    other => return Err(Error::new(format!("expected Go, got {other:?}"))),
                }
            }
        }
        stream::exchange_ids(net, &pools, &mut w, ids, side_id, &s.wait, &mut s.peer)?;
        let window = usize::from(plan.window);
        let small = stream::stream(
            net,
            &pools,
            &w,
            side_id,
            SMALL,
            u64::from(plan.small_per_comm),
            window,
            &s.wait,
            &mut s.peer,
        )?;
        (r.small_msgs, r.small_ns) = (small.messages, small.elapsed_ns);
        let big = stream::stream(
            net,
            &pools,
            &w,
            side_id,
            plan.big(),
            u64::from(plan.big_per_comm),
            1,
            &s.wait,
            &mut s.peer,
        )?;
        (r.big_msgs, r.big_ns) = (big.messages, big.elapsed_ns);
        Ok(())
    })();
    let t = Instant::now();
    let closed = stream::unwire(net, w);
    r.close_ns = t.elapsed().as_nanos() as u64;
    result.map_err(|e| e.context(format!("{who}: {n} comms")))?;
    if let Some(e) = closed {
        return Err(e.context(format!("{who}: closing {n} comms")));
    }
    ferro_nccl_standin::logger::clear_logs();
    r.after = procfs::snapshot(verbs);
    Ok(r)
}

/// `sweeps` sweeps of `test` over the `n` idle receives `ids`, instrumented by callgrind (when
/// the process runs under it with `--instr-atstart=no`) and collected inside
/// [`counted::idle_sweeps`] only, then the counts dumped under a name that says `n` and
/// `sweeps` (`count_sweeps.sh` divides by their product). The time is shown too (meaningless
/// under valgrind).
fn counted_sweeps(net: &ferro_nccl_standin::Net, ids: &[Req], n: usize, sweeps: u32) -> Result<()> {
    callgrind::start_instrumentation();
    let t = Instant::now();
    let res = counted::idle_sweeps(net, ids, sweeps);
    let ns = t.elapsed().as_nanos() as f64;
    callgrind::stop_instrumentation();
    callgrind::dump_stats_at(&format!(
        "ferro-bench scale counted sweeps n={n} sweeps={sweeps}"
    ));
    res.map_err(|e| e.context(format!("{n} comms: the counted sweeps")))?;
    progress(&format!(
        "scale N = {n}: {sweeps} counted sweeps, {:.0} ns/comm",
        ns / (f64::from(sweeps) * n as f64)
    ));
    Ok(())
}

/// Server: every N of the options; returns one row per N with both sides' figures.
pub(crate) fn server(s: &mut Session<'_>, o: &Opts) -> Result<Vec<output::Row>> {
    let fd_limit = procfs::raise_fd_limit();
    progress(&format!(
        "scale: N = {:?}, {} connect thread(s), {} x 8 B and {} x {} per comm each way; open files limit {}, memlock {}",
        o.comms,
        o.threads,
        o.stream.small_per_comm,
        o.stream.big_per_comm,
        fmt_size(o.stream.big() as u64),
        fd_limit.map_or("?".into(), |v| v.to_string()),
        procfs::memlock_kib().map_or("unlimited".into(), |k| format!("{k} KiB"))
    ));
    let mut rows = Vec::new();
    for &n in &o.comms {
        s.send_cmd(Cmd::Scale {
            n: n as u64,
            threads: o.threads as u64,
            stream: o.stream.pack() | u64::from(o.verbs) << 63,
        })?;
        let mut client = None;
        let server = phase(
            s,
            n,
            o.threads,
            o.stream,
            o.verbs,
            Sync::Server {
                client: &mut client,
                count_sweeps: o.count_sweeps,
            },
        )?;
        let words = s.recv_words()?;
        let client_side = Side::decode(&words);
        let row = output::Row {
            n,
            threads: o.threads,
            big: o.stream.big(),
            server,
            client: client_side,
        };
        progress(&output::progress_line(&row));
        rows.push(row);
    }
    s.send_cmd(Cmd::Done)?;
    Ok(rows)
}

/// Client: one phase (its command arrived; no command receive is posted).
pub(crate) fn client(s: &mut Session<'_>, n: u64, threads: u64, stream: u64) -> Result<()> {
    procfs::raise_fd_limit();
    let verbs = stream >> 63 == 1;
    let plan = StreamPlan::unpack(stream & !(1 << 63));
    let n = usize::try_from(n).map_err(|_| Error::new("N overflow"))?;
    let r = phase(
        s,
        n.clamp(1, MAX_COMMS),
        usize::try_from(threads).unwrap_or(1).clamp(1, 64),
        plan,
        verbs,
        Sync::Client,
    )?;
    s.send_words(&r.encode())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_plan_survives_its_command_word() {
        let p = StreamPlan {
            small_per_comm: 300,
            big_per_comm: 3,
            big_kib_or_bytes: 64 << 20,
            window: 32,
        };
        assert_eq!(StreamPlan::unpack(p.pack()), p);
        assert_eq!(
            StreamPlan::unpack(StreamPlan::default().pack()),
            StreamPlan::default()
        );
    }

    #[test]
    fn a_side_survives_its_report_including_missing_readings() {
        let snap = Snapshot {
            rss_kib: Some(1234),
            lck_kib: None,
            pin_kib: Some(0),
            fds: Some(17),
            verbs: Some(Verbs {
                qp: 3,
                cq: 2,
                cqe: 300,
                mr: 5,
                mr_bytes: 1 << 20,
            }),
        };
        let s = Side {
            before: snap,
            connected: Snapshot::default(),
            registered: snap,
            after: Snapshot {
                verbs: None,
                ..snap
            },
            connect_median_ns: 1,
            connect_p99_ns: 2,
            accept_median_ns: 3,
            accept_p99_ns: 4,
            open_wall_ns: 5,
            idle_test_ns: 6.5,
            sweep_ns_per_comm: 7.25,
            small_msgs: 8,
            small_ns: 9,
            big_msgs: 10,
            big_ns: 11,
            close_ns: 12,
        };
        assert_eq!(Side::decode(&s.encode()), s);
    }

    #[test]
    fn scale_options_parse_and_bad_values_are_refused() {
        let mut o = Opts::default();
        o.set("--comms", "16,256,1K").unwrap();
        assert_eq!(o.comms, vec![16, 256, 1024]);
        o.set("--connect-threads", "1").unwrap();
        o.set("--count-sweeps", "256").unwrap();
        assert_eq!(o.count_sweeps, 256);
        assert_eq!(o.threads, 1);
        o.set("--big-size", "64K").unwrap();
        assert_eq!(o.stream.big(), 65536);
        assert!(o.set("--comms", "0").is_err());
        assert!(o.set("--connect-threads", "0").is_err());
        assert!(o.set("--big-size", "12").is_err());
        assert!(o.set("--window", "33").is_err());
        assert!(o.set("--sizes", "8").is_err());
    }

    #[test]
    fn the_pools_hold_every_identity_and_the_large_slots() {
        let p = StreamPlan::default();
        assert!(p.pool_bytes(4096) >= 4096 * SMALL * usize::from(p.window));
        assert!(p.pool_bytes(16) >= BIG_SLOTS << 20);
    }
}
