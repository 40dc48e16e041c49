//! The test (parent) side of multi-process scenarios: spawns one `nccl-harness` process per
//! rank, wires their listen handles, runs barriers and kills, enforces a timeout, and collects
//! each rank's verdict and output. The line protocol is described in [`crate::rank`].

use crate::buffer::Rng;
use crate::handle::{HANDLE_MAGIC, Handle};
use crate::logger::verbose;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Default time a group may run before every remaining rank is killed.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// A raw TCP client the driver opens to rank 0's listen address once every rank has published
/// its handle and before any rank learns its peer: the plugin's accept must cope with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawClient {
    /// Connects and sends this many pseudo-random bytes (never the plugin's magic).
    Garbage(usize),
    /// Connects, sends nothing, and stays connected until the group ends.
    Silent,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct GroupSpec {
    pub scenario: String,
    pub nranks: usize,
    /// Arguments for every rank (after `--scenario S --rank R --nranks N`).
    pub args: Vec<String>,
    /// Extra arguments for one rank.
    pub rank_args: Vec<(usize, Vec<String>)>,
    /// Extra environment for every rank.
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    pub raw_clients: Vec<RawClient>,
}

impl GroupSpec {
    pub fn new(scenario: &str, nranks: usize) -> Self {
        GroupSpec {
            scenario: scenario.to_string(),
            nranks,
            args: Vec::new(),
            rank_args: Vec::new(),
            env: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            raw_clients: Vec::new(),
        }
    }

    pub fn args(mut self, a: &[&str]) -> Self {
        self.args.extend(a.iter().map(|s| s.to_string()));
        self
    }

    pub fn rank_args(mut self, rank: usize, a: &[&str]) -> Self {
        self.rank_args
            .push((rank, a.iter().map(|s| s.to_string()).collect()));
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    pub fn raw_client(mut self, c: RawClient) -> Self {
        self.raw_clients.push(c);
        self
    }
}

/// How one rank ended.
#[derive(Debug, Clone)]
pub struct RankReport {
    pub rank: usize,
    pub status: Option<ExitStatus>,
    /// The `PASS ...`/`FAIL ...` line, if one was printed.
    pub verdict: Option<String>,
    pub stdout: Vec<String>,
    pub stderr: String,
    /// The driver SIGKILLed it on request (`KILLME`).
    pub killed_by_driver: bool,
    /// The driver killed it at the group timeout.
    pub timed_out: bool,
}

impl RankReport {
    /// Exit status 0 and a `PASS` verdict.
    pub fn passed(&self) -> bool {
        self.status.is_some_and(|s| s.success())
            && self
                .verdict
                .as_deref()
                .is_some_and(|v| v.starts_with("PASS"))
    }

    /// Stdout lines that start with `prefix`, with the prefix removed.
    pub fn lines_with(&self, prefix: &str) -> Vec<String> {
        self.stdout
            .iter()
            .filter_map(|l| l.strip_prefix(prefix))
            .map(str::to_string)
            .collect()
    }
}

/// How the group ended.
#[derive(Debug, Clone)]
pub struct GroupReport {
    pub scenario: String,
    pub ranks: Vec<RankReport>,
    /// Informational lines from the driver (kills, raw clients).
    pub notes: Vec<String>,
    /// Problems of the driver itself (spawn failures, timeouts, raw clients that could not connect).
    pub errors: Vec<String>,
    pub elapsed: Duration,
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    let skip = all.len().saturating_sub(lines);
    let mut s = String::new();
    if skip > 0 {
        s.push_str(&format!("      ... ({skip} earlier lines)\n"));
    }
    for l in &all[skip..] {
        s.push_str("      ");
        s.push_str(l);
        s.push('\n');
    }
    s
}

impl GroupReport {
    /// Everything, for a failure message.
    pub fn dump(&self) -> String {
        let mut s = format!(
            "scenario {} ({} ranks, {:.1} s)\n",
            self.scenario,
            self.ranks.len(),
            self.elapsed.as_secs_f64()
        );
        for e in &self.errors {
            s.push_str(&format!("  driver error: {e}\n"));
        }
        for n in &self.notes {
            s.push_str(&format!("  note: {n}\n"));
        }
        for r in &self.ranks {
            s.push_str(&format!(
                "  rank {}: status {:?}{}{} verdict {:?}\n",
                r.rank,
                r.status,
                if r.killed_by_driver {
                    " (killed on request)"
                } else {
                    ""
                },
                if r.timed_out {
                    " (killed at the timeout)"
                } else {
                    ""
                },
                r.verdict
            ));
            let out: Vec<&String> = r
                .stdout
                .iter()
                .filter(|l| !l.starts_with("HANDLE "))
                .collect();
            if !out.is_empty() {
                s.push_str("    stdout:\n");
                s.push_str(&tail(
                    &out.iter()
                        .map(|l| l.as_str())
                        .collect::<Vec<_>>()
                        .join("\n"),
                    40,
                ));
            }
            if !r.stderr.trim().is_empty() {
                s.push_str("    stderr:\n");
                s.push_str(&tail(&r.stderr, 80));
            }
        }
        s
    }

    /// The report of `rank`.
    pub fn rank(&self, rank: usize) -> &RankReport {
        &self.ranks[rank]
    }

    /// One line per rank (its verdict) and the driver's notes; the asserts print it (visible
    /// with `--nocapture`).
    pub fn summary(&self) -> String {
        let mut s = format!(
            "scenario {} ({:.1} s)\n",
            self.scenario,
            self.elapsed.as_secs_f64()
        );
        for r in &self.ranks {
            s.push_str(&format!(
                "  rank {}: {}\n",
                r.rank,
                r.verdict.as_deref().unwrap_or("(no verdict)")
            ));
        }
        for n in &self.notes {
            s.push_str(&format!("  note: {n}\n"));
        }
        s
    }

    /// Panics (with the full dump) unless the driver had no errors and every rank passed.
    pub fn assert_all_passed(&self) {
        eprint!("{}", self.summary());
        let bad: Vec<usize> = self
            .ranks
            .iter()
            .filter(|r| !r.passed())
            .map(|r| r.rank)
            .collect();
        assert!(
            self.errors.is_empty() && bad.is_empty(),
            "ranks {bad:?} did not pass\n{}",
            self.dump()
        );
    }

    /// Panics (with the full dump) unless the driver had no errors and `rank` passed.
    pub fn assert_passed(&self, rank: usize) {
        eprint!("{}", self.summary());
        assert!(
            self.errors.is_empty() && self.ranks[rank].passed(),
            "rank {rank} did not pass\n{}",
            self.dump()
        );
    }
}

enum Event {
    Line(usize, String),
    Eof(usize),
}

struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Vec<String>,
    stderr: Arc<Mutex<String>>,
    stderr_thread: Option<std::thread::JoinHandle<()>>,
    status: Option<ExitStatus>,
    verdict: Option<String>,
    handle: Option<Handle>,
    eof: bool,
    killed: bool,
    timed_out: bool,
}

impl Proc {
    fn tell(&mut self, line: &str) {
        if let Some(s) = &mut self.stdin {
            if writeln!(s, "{line}").and_then(|_| s.flush()).is_err() {
                self.stdin = None;
            }
        }
    }

    fn live(&self) -> bool {
        self.status.is_none() && !self.killed
    }
}

fn open_raw_clients(
    addr: SocketAddr,
    clients: &[RawClient],
    notes: &mut Vec<String>,
    errors: &mut Vec<String>,
) -> Vec<TcpStream> {
    let mut streams = Vec::new();
    let mut rng = Rng::new(0x6a7b_a6e0);
    for c in clients {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
            Ok(mut s) => match c {
                RawClient::Garbage(n) => {
                    let mut bytes = rng.bytes(*n);
                    if bytes.len() >= 8 && bytes[..8] == HANDLE_MAGIC.to_le_bytes() {
                        bytes[0] ^= 0xff;
                    }
                    match s.write_all(&bytes) {
                        Ok(()) => notes.push(format!(
                            "raw client: connected to {addr} and sent {n} garbage bytes"
                        )),
                        Err(e) => notes.push(format!(
                            "raw client: connected to {addr}; sending garbage failed: {e}"
                        )),
                    }
                    streams.push(s);
                }
                RawClient::Silent => {
                    notes.push(format!(
                        "raw client: connected to {addr}, sending nothing, staying open"
                    ));
                    streams.push(s);
                }
            },
            Err(e) => errors.push(format!("raw client {c:?} could not connect to {addr}: {e}")),
        }
    }
    streams
}

/// What the plugin did with each raw client by the end (informational).
fn raw_client_fates(streams: &mut [TcpStream], notes: &mut Vec<String>) {
    for (i, s) in streams.iter_mut().enumerate() {
        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
        let mut b = [0u8; 256];
        let fate = match s.read(&mut b) {
            Ok(0) => "closed by the plugin".to_string(),
            Ok(n) => format!("the plugin sent {n} bytes"),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                "still open".to_string()
            }
            Err(e) => format!("error {e} (reset by the plugin?)"),
        };
        notes.push(format!("raw client {i} at the end: {fate}"));
    }
}

/// Runs the scenario: `exe --scenario S --rank r --nranks n ARGS` for each rank.
pub fn run_group(exe: &Path, spec: &GroupSpec) -> GroupReport {
    let start = Instant::now();
    let n = spec.nranks;
    let (tx, rx) = mpsc::channel::<Event>();
    let mut procs: Vec<Proc> = Vec::new();
    let mut notes = Vec::new();
    let mut errors = Vec::new();
    let echo = verbose();

    for r in 0..n {
        let mut cmd = Command::new(exe);
        cmd.arg("--scenario")
            .arg(&spec.scenario)
            .arg("--rank")
            .arg(r.to_string())
            .arg("--nranks")
            .arg(n.to_string());
        cmd.args(&spec.args);
        for (rr, a) in &spec.rank_args {
            if *rr == r {
                cmd.args(a);
            }
        }
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                errors.push(format!("cannot start rank {r} ({}): {e}", exe.display()));
                break;
            }
        };
        let stdin = child.stdin.take();
        if let Some(out) = child.stdout.take() {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    match line {
                        Ok(l) => {
                            if echo {
                                eprintln!("[rank {r} stdout] {l}");
                            }
                            if tx.send(Event::Line(r, l)).is_err() {
                                return;
                            }
                        }
                        Err(_) => break,
                    }
                }
                let _ = tx.send(Event::Eof(r));
            });
        }
        let stderr = Arc::new(Mutex::new(String::new()));
        let stderr_thread = child.stderr.take().map(|err| {
            let sink = Arc::clone(&stderr);
            std::thread::spawn(move || {
                for line in BufReader::new(err).lines() {
                    let Ok(l) = line else { break };
                    if echo {
                        eprintln!("[rank {r} stderr] {l}");
                    }
                    let mut s = sink.lock().unwrap_or_else(|p| p.into_inner());
                    s.push_str(&l);
                    s.push('\n');
                }
            })
        });
        procs.push(Proc {
            child,
            stdin,
            stdout: Vec::new(),
            stderr,
            stderr_thread,
            status: None,
            verdict: None,
            handle: None,
            eof: false,
            killed: false,
            timed_out: false,
        });
    }
    drop(tx);

    let mut barriers: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    let mut peers_sent = false;
    let mut raw_streams: Vec<TcpStream> = Vec::new();
    let mut all_exited_at: Option<Instant> = None;
    let spawned_all = procs.len() == n;
    if !spawned_all {
        for p in &mut procs {
            let _ = p.child.kill();
        }
    }

    loop {
        let exited = procs.iter().all(|p| p.status.is_some());
        if exited {
            let t = *all_exited_at.get_or_insert_with(Instant::now);
            // Collect the last lines; stdout EOF follows exit closely.
            if procs.iter().all(|p| p.eof) || t.elapsed() > Duration::from_secs(5) {
                break;
            }
        }
        if start.elapsed() > spec.timeout {
            for (r, p) in procs.iter_mut().enumerate() {
                if p.status.is_none() && !p.timed_out {
                    let _ = p.child.kill();
                    p.timed_out = true;
                    errors.push(format!(
                        "rank {r} still running after {:?}: killed",
                        spec.timeout
                    ));
                }
            }
        }
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(Event::Line(r, line)) => {
                if let Some(hex) = line.strip_prefix("HANDLE ") {
                    match Handle::from_hex(hex) {
                        Ok(h) => procs[r].handle = Some(h),
                        Err(e) => errors.push(format!("rank {r} printed a bad handle: {e}")),
                    }
                    if !peers_sent && spawned_all && procs.iter().all(|p| p.handle.is_some()) {
                        peers_sent = true;
                        if !spec.raw_clients.is_empty() {
                            match procs[0].handle.as_ref().and_then(Handle::socket_addr) {
                                Some(addr) => {
                                    raw_streams = open_raw_clients(
                                        addr,
                                        &spec.raw_clients,
                                        &mut notes,
                                        &mut errors,
                                    )
                                }
                                None => errors.push(format!(
                                    "rank 0's handle has no socket address: {:?}",
                                    procs[0].handle
                                )),
                            }
                        }
                        for i in 0..n {
                            if let Some(peer) = procs[(i + 1) % n].handle {
                                procs[i].tell(&format!("PEER {}", peer.to_hex()));
                            }
                        }
                    }
                } else if let Some(name) = line.strip_prefix("BARRIER ") {
                    barriers.entry(name.to_string()).or_default().insert(r);
                } else if line == "KILLME" {
                    let _ = procs[r].child.kill();
                    procs[r].killed = true;
                    procs[r].stdin = None;
                    notes.push(format!(
                        "rank {r} asked to be killed: SIGKILL sent at {:.1} s",
                        start.elapsed().as_secs_f64()
                    ));
                    for (i, p) in procs.iter_mut().enumerate() {
                        if i != r {
                            p.tell(&format!("KILLED {r}"));
                        }
                    }
                } else if line.starts_with("PASS") || line.starts_with("FAIL") {
                    procs[r].verdict = Some(line.clone());
                }
                procs[r].stdout.push(line);
            }
            Ok(Event::Eof(r)) => procs[r].eof = true,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                for p in &mut procs {
                    p.eof = true;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        for p in &mut procs {
            if p.status.is_none() {
                if let Ok(Some(s)) = p.child.try_wait() {
                    p.status = Some(s);
                    p.stdin = None;
                }
            }
        }
        // Release every barrier that all live ranks have reached.
        let live: BTreeSet<usize> = procs
            .iter()
            .enumerate()
            .filter(|(_, p)| p.live())
            .map(|(i, _)| i)
            .collect();
        let ready: Vec<String> = barriers
            .iter()
            .filter(|(_, at)| !live.is_empty() && live.is_subset(at))
            .map(|(name, _)| name.clone())
            .collect();
        for name in ready {
            barriers.remove(&name);
            for i in &live {
                procs[*i].tell(&format!("GO {name}"));
            }
        }
    }

    raw_client_fates(&mut raw_streams, &mut notes);
    drop(raw_streams);

    let mut ranks = Vec::new();
    for (r, mut p) in procs.into_iter().enumerate() {
        if let Some(t) = p.stderr_thread.take() {
            let _ = t.join();
        }
        let stderr = p.stderr.lock().unwrap_or_else(|e| e.into_inner()).clone();
        ranks.push(RankReport {
            rank: r,
            status: p.status,
            verdict: p.verdict,
            stdout: p.stdout,
            stderr,
            killed_by_driver: p.killed,
            timed_out: p.timed_out,
        });
    }
    GroupReport {
        scenario: spec.scenario.clone(),
        ranks,
        notes,
        errors,
        elapsed: start.elapsed(),
    }
}
