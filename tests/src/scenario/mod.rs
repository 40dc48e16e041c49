//! What each rank does in each multi-process scenario. The `nccl-harness` binary parses its
//! arguments into [`Opts`] and calls [`main_entry`]; each scenario is one function over a
//! [`Ctx`] that returns a one-line summary (PASS) or an error (FAIL).
//!
//! Every two-rank scenario uses rank 0 as the receiver (it accepts on its listen comm) and rank 1
//! as the sender (it connects to rank 0's handle). Every rank listens and publishes its handle;
//! rank r is given the handle of rank (r+1) % n.

mod abi;
mod big;
mod close;
mod common;
mod connect;
mod flap;
mod flood;
mod hostile;
mod inflight;
mod kill;
mod probe;
mod ring;
mod sweep;
mod vnic;

pub use common::*;
pub use flap::{Flap, LINK, set_link};

use crate::error::{HResult, HarnessError, NcclExt};
use crate::handle::Handle;
use crate::logger::{self, format_logs};
use crate::net::{ListenComm, Net, Properties};
use crate::rank::Ctl;
use core::ffi::c_int;
use std::time::Duration;

/// The scenarios, by the name given to `--scenario`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Loads and inits the plugin, prints what happened (`INIT`, `DEVICES`, `LOG` lines); no peers.
    InitProbe,
    /// a: connect/accept in both orders and simultaneously, three connections on one listen comm.
    ConnectOrders,
    /// b: sizes 0 .. 16 MiB, pattern-verified, sizes reported by `test` checked.
    SizeSweep,
    /// c: 32 sends and 32 receives in flight before any `test`.
    Inflight32,
    /// c: grouped receives of maxRecvs buffers, tags sent in shuffled order.
    GroupedRecv,
    /// d: close with sends/receives in flight; then a new connection still works.
    CloseInflight,
    /// d: many connect/transfer/close cycles without fd or verbs-object growth.
    Cycles,
    /// e: one rank is SIGKILLed mid-transfer; the survivor must see an error.
    PeerKill,
    /// f: garbage handles, raw TCP clients on the listen port; real peers still get through.
    HostilePeers,
    /// g: ring all-reduce (reduce-scatter + all-gather) over the plugin API.
    RingAllreduce,
    /// What the table version (`FERRO_NET_ABI`) adds: properties, size limits, the receive hint,
    /// profiler events, traffic class, v11 contexts.
    AbiFeatures,
    /// A virtual NIC (`--dev a+b`, v9+): its properties, refused fusions, and traffic over
    /// every member device, byte for byte, with the members' own packet counters.
    VirtualNic,
    /// One message of 2.1 GiB (above 2^31) through a v9+ table: split into several writes,
    /// every byte checked, `test` reporting `INT_MAX`.
    BigMessage,
    /// The link of the device goes down under 32 sends in flight (`--flap transient`: for 2 s;
    /// `for-good`: until the end): recovered in place, or a bounded failure.
    LinkFlap,
    /// f: 2,000 silent clients and a trickling one on the listen port; the real peer still
    /// connects and moves 1 MiB in a bound, and the fds come back.
    ListenerFlood,
}

impl Scenario {
    pub const ALL: [Scenario; 15] = [
        Scenario::InitProbe,
        Scenario::ConnectOrders,
        Scenario::SizeSweep,
        Scenario::Inflight32,
        Scenario::GroupedRecv,
        Scenario::CloseInflight,
        Scenario::Cycles,
        Scenario::PeerKill,
        Scenario::HostilePeers,
        Scenario::RingAllreduce,
        Scenario::AbiFeatures,
        Scenario::VirtualNic,
        Scenario::BigMessage,
        Scenario::LinkFlap,
        Scenario::ListenerFlood,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::InitProbe => "init-probe",
            Scenario::ConnectOrders => "connect-orders",
            Scenario::SizeSweep => "size-sweep",
            Scenario::Inflight32 => "inflight-32",
            Scenario::GroupedRecv => "grouped-recv",
            Scenario::CloseInflight => "close-inflight",
            Scenario::Cycles => "cycles",
            Scenario::PeerKill => "peer-kill",
            Scenario::HostilePeers => "hostile-peers",
            Scenario::RingAllreduce => "ring-allreduce",
            Scenario::AbiFeatures => "abi-features",
            Scenario::VirtualNic => "virtual-nic",
            Scenario::BigMessage => "big-message",
            Scenario::LinkFlap => "link-flap",
            Scenario::ListenerFlood => "listener-flood",
        }
    }

    pub fn from_name(s: &str) -> Option<Scenario> {
        Self::ALL.into_iter().find(|x| x.name() == s)
    }

    /// Whether the scenario needs exactly two ranks (the others: any number ≥ 1 or ≥ 2).
    fn two_ranks(self) -> bool {
        !matches!(self, Scenario::InitProbe | Scenario::RingAllreduce)
    }

    /// A small number distinguishing the scenarios' data patterns.
    pub fn id(self) -> u64 {
        Self::ALL.iter().position(|s| *s == self).unwrap_or(99) as u64 + 1
    }

    fn run(self, ctx: &mut Ctx) -> HResult<String> {
        match self {
            Scenario::InitProbe => Err(HarnessError::Failed("init-probe has no peers".into())),
            Scenario::ConnectOrders => connect::run(ctx),
            Scenario::SizeSweep => sweep::run(ctx),
            Scenario::Inflight32 => inflight::run_inflight(ctx),
            Scenario::GroupedRecv => inflight::run_grouped(ctx),
            Scenario::CloseInflight => close::run_close_inflight(ctx),
            Scenario::Cycles => close::run_cycles(ctx),
            Scenario::PeerKill => kill::run(ctx),
            Scenario::HostilePeers => hostile::run(ctx),
            Scenario::RingAllreduce => ring::run(ctx),
            Scenario::AbiFeatures => abi::run(ctx),
            Scenario::VirtualNic => vnic::run(ctx),
            Scenario::BigMessage => big::run(ctx),
            Scenario::LinkFlap => flap::run(ctx),
            Scenario::ListenerFlood => flood::run(ctx),
        }
    }
}

/// Which side `peer-kill` kills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Victim {
    Sender,
    Receiver,
}

/// Command-line options of a rank.
#[derive(Debug, Clone)]
pub struct Opts {
    pub scenario: Scenario,
    pub rank: usize,
    pub nranks: usize,
    /// Device name to use (default rxe0).
    pub dev: String,
    /// Iterations/cycles, where the scenario has a count.
    pub iters: Option<usize>,
    pub victim: Victim,
    /// Sleep used to order connect/accept calls (default 1500 ms).
    pub delay: Duration,
    /// How `link-flap` takes the link away.
    pub flap: Flap,
}

/// The command line as `clap` sees it; [`parse_args`] checks it and makes [`Opts`].
#[derive(Debug, clap::Parser)]
#[command(
    name = "nccl-harness",
    about = "One rank of a multi-process plugin scenario",
    args_override_self = true
)]
struct Cli {
    /// The scenario to run.
    #[arg(long, value_name = "NAME", value_parser = parse_scenario)]
    scenario: Scenario,
    /// This rank.
    #[arg(long, value_name = "R", default_value_t = 0)]
    rank: usize,
    /// The number of ranks.
    #[arg(long, value_name = "N", default_value_t = 1)]
    nranks: usize,
    /// The device (a virtual NIC as `a+b`).
    #[arg(long, value_name = "DEV", default_value = crate::guest::DEV)]
    dev: String,
    /// Iterations/cycles, where the scenario has a count.
    #[arg(long, value_name = "N")]
    iters: Option<usize>,
    /// Which side `peer-kill` kills.
    #[arg(long, value_enum, default_value = "sender")]
    victim: Victim,
    /// The sleep that orders connect/accept calls.
    #[arg(long, value_name = "MS", default_value_t = 1500)]
    delay_ms: u64,
    /// How `link-flap` takes the link away.
    #[arg(long, value_enum, default_value = "transient")]
    flap: Flap,
}

fn parse_scenario(name: &str) -> Result<Scenario, String> {
    Scenario::from_name(name).ok_or_else(|| {
        format!(
            "unknown scenario; known: {:?}",
            Scenario::ALL.map(Scenario::name)
        )
    })
}

/// Parses the arguments (without the program name); `Err` is the usage error as printed.
pub fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Opts, String> {
    use clap::{CommandFactory, Parser};
    let argv = std::iter::once("nccl-harness".to_string()).chain(args);
    let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
    let usage = |msg: String| {
        Cli::command()
            .error(clap::error::ErrorKind::ArgumentConflict, msg)
            .to_string()
    };
    if cli.rank >= cli.nranks {
        return Err(usage(format!(
            "--rank {} is not below --nranks {}",
            cli.rank, cli.nranks
        )));
    }
    if cli.scenario.two_ranks() && cli.nranks != 2 {
        return Err(usage(format!("{} needs --nranks 2", cli.scenario.name())));
    }
    if cli.scenario == Scenario::RingAllreduce && cli.nranks < 2 {
        return Err(usage("ring-allreduce needs at least 2 ranks".into()));
    }
    Ok(Opts {
        scenario: cli.scenario,
        rank: cli.rank,
        nranks: cli.nranks,
        dev: cli.dev,
        iters: cli.iters,
        victim: cli.victim,
        delay: Duration::from_millis(cli.delay_ms),
        flap: cli.flap,
    })
}

/// Everything a rank's scenario works with.
#[derive(Debug)]
pub struct Ctx {
    pub net: &'static Net,
    pub ctl: Ctl,
    pub opts: Opts,
    /// Index of the device named `opts.dev`.
    pub dev: c_int,
    pub props: Properties,
    /// This rank's listen comm (taken by scenarios that close it themselves).
    pub listen: Option<ListenComm>,
    pub handle: Handle,
    /// Handle of rank (r+1) % n.
    pub peer: Handle,
}

impl Ctx {
    /// Rank 0 receives in two-rank scenarios.
    pub fn is_receiver(&self) -> bool {
        self.opts.rank == 0
    }

    /// A fresh copy of the peer's handle (one per connection: the plugin may write into it).
    pub fn peer_handle(&self) -> Handle {
        self.peer
    }

    /// The listen comm (fails if a scenario already took it).
    pub fn listen(&self) -> HResult<&ListenComm> {
        self.listen
            .as_ref()
            .ok_or_else(|| HarnessError::Failed("the listen comm was already closed".into()))
    }

    /// Prints a progress line on stderr.
    pub fn note(&self, msg: &str) {
        self.ctl.note(msg);
    }
}

/// Loads and inits the plugin; fails with the plugin's WARN lines.
pub fn init_plugin() -> HResult<&'static Net> {
    let net = Net::global().map_err(HarnessError::Failed)?;
    if let Err(code) = net.init() {
        let warns: Vec<_> = logger::logs()
            .into_iter()
            .filter(|l| l.level == ferro_ffi::log_level::WARN)
            .collect();
        return Err(HarnessError::Failed(format!(
            "init returned {code:?}; plugin WARN lines:\n{}",
            format_logs(&warns)
        )));
    }
    Ok(net)
}

/// The device a rank uses: a physical one by name, or, for `a+b[+...]`, a virtual NIC fused
/// from the named physical devices with `makeVDevice` (v9+), as NCCL's topology code does.
pub fn device_of(net: &Net, name: &str) -> HResult<c_int> {
    if !name.contains('+') {
        return net.device_by_name(name);
    }
    let members = name
        .split('+')
        .map(|m| net.device_by_name(m))
        .collect::<HResult<Vec<_>>>()?;
    net.make_vdevice(&members).call("makeVDevice")
}

fn setup(opts: &Opts, mut ctl: Ctl) -> HResult<Ctx> {
    let net = init_plugin()?;
    let dev = device_of(net, &opts.dev)?;
    let props = net.get_properties(dev).call("getProperties")?;
    let (handle, listen) = net.listen(dev).call("listen")?;
    ctl.publish_handle(&handle);
    let peer = ctl.peer_handle(SETUP_TIMEOUT)?;
    Ok(Ctx {
        net,
        ctl,
        opts: opts.clone(),
        dev,
        props,
        listen: Some(listen),
        handle,
        peer,
    })
}

fn run(opts: &Opts) -> HResult<String> {
    let ctl = Ctl::start(opts.rank);
    if opts.scenario == Scenario::InitProbe {
        return probe::run(&ctl);
    }
    let mut ctx = setup(opts, ctl)?;
    let summary = opts.scenario.run(&mut ctx)?;
    if let Some(l) = ctx.listen.take() {
        ctx.net.close_listen(l).call("closeListen")?;
    }
    Ok(summary)
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// The whole life of a rank process; returns its exit code (0 PASS, 1 FAIL, 2 usage).
pub fn main_entry(args: impl IntoIterator<Item = String>) -> i32 {
    let opts = match parse_args(args) {
        Ok(o) => o,
        Err(e) => {
            eprint!("nccl-harness: {e}");
            return 2;
        }
    };
    let outcome = std::panic::catch_unwind(|| run(&opts));
    let (line, code) = match outcome {
        Ok(Ok(summary)) => (format!("PASS {}: {summary}", opts.scenario.name()), 0),
        Ok(Err(e)) => (
            format!(
                "FAIL {}: {}",
                opts.scenario.name(),
                one_line(&e.to_string())
            ),
            1,
        ),
        Err(p) => (
            format!(
                "FAIL {}: panic: {}",
                opts.scenario.name(),
                one_line(&panic_text(p.as_ref()))
            ),
            1,
        ),
    };
    if code != 0 {
        let all = logger::logs();
        let skip = all.len().saturating_sub(60);
        eprintln!(
            "[rank {}] plugin log (last {} lines):\n{}",
            opts.rank,
            all.len() - skip,
            format_logs(&all[skip..])
        );
    }
    let mut out = std::io::stdout().lock();
    let _ = std::io::Write::write_all(&mut out, format!("{line}\n").as_bytes());
    let _ = std::io::Write::flush(&mut out);
    code
}

/// Joins lines so a verdict stays on one protocol line.
pub fn one_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command line as the argument vector the parser gets.
    fn args(line: &str) -> Vec<String> {
        line.split(' ')
            .filter(|w| !w.is_empty())
            .map(String::from)
            .collect()
    }

    #[test]
    fn names_round_trip() {
        for s in Scenario::ALL {
            assert_eq!(Scenario::from_name(s.name()), Some(s));
        }
    }

    #[test]
    fn arguments_parse_and_are_checked() {
        let o = parse_args(args(
            "--scenario peer-kill --rank 1 --nranks 2 --victim receiver --iters 3",
        ))
        .expect("ok");
        assert_eq!(o.scenario, Scenario::PeerKill);
        assert_eq!(
            (o.rank, o.nranks, o.iters, o.victim),
            (1, 2, Some(3), Victim::Receiver)
        );
        assert_eq!(o.dev, "rxe0");
        assert!(parse_args(args("--scenario size-sweep --rank 0 --nranks 3")).is_err());
        assert!(parse_args(args("--scenario nope")).is_err());
        assert!(parse_args(args("--rank 0")).is_err());
        assert!(parse_args(args("--scenario ring-allreduce --rank 4 --nranks 4")).is_err());
        assert!(parse_args(args("--scenario ring-allreduce --rank 3 --nranks 4")).is_ok());
    }

    #[test]
    fn every_flag_the_guest_tests_give_is_taken_in_both_forms() {
        let o = parse_args(args(
            "--scenario link-flap --rank 0 --nranks 2 --dev rxe0+rxe1 --delay-ms 20 --flap peer-killed",
        ))
        .expect("ok");
        assert_eq!(
            (
                o.scenario,
                o.dev.as_str(),
                o.delay,
                o.flap,
                o.victim,
                o.iters
            ),
            (
                Scenario::LinkFlap,
                "rxe0+rxe1",
                Duration::from_millis(20),
                Flap::PeerKilled,
                Victim::Sender,
                None
            )
        );
        let o = parse_args(args(
            "--scenario=inflight-32 --nranks=2 --rank=1 --flap=for-good",
        ))
        .expect("ok");
        assert_eq!(
            (o.scenario, o.rank, o.flap),
            (Scenario::Inflight32, 1, Flap::ForGood)
        );
        assert_eq!(o.delay, Duration::from_millis(1500));
        // A flag given twice keeps its last value (a test's shared and per-rank arguments).
        let o = parse_args(args(
            "--scenario peer-kill --nranks 2 --victim sender --victim receiver",
        ))
        .expect("ok");
        assert_eq!(o.victim, Victim::Receiver);
        for (line, says) in [
            ("--scenario nope", "unknown scenario"),
            ("--scenario cycles --nranks 2 --flap sideways", "'sideways'"),
            ("--scenario cycles --nranks 2 --bogus", "'--bogus'"),
            (
                "--scenario cycles --rank 2 --nranks 2",
                "--rank 2 is not below --nranks 2",
            ),
            ("--scenario cycles --nranks 2 --iters x", "'x'"),
        ] {
            let e = parse_args(args(line)).expect_err(line);
            assert!(e.contains(says), "{line}: {e}");
        }
    }
}
