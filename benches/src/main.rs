//! Test side, the benchmark `ferro-bench`: micro-benchmark of an ncclNet v8 plugin between two
//! processes.
//!
//! The plugin is loaded as NCCL loads it (`dlopen(RTLD_NOW | RTLD_LOCAL)`, `dlsym
//! ("ncclNetPlugin_v8")`) and called only through its table. See `ferro-bench --help`.

mod bench;
mod comms;
mod compare;
mod counted;
mod error;
mod model;
mod pair;
mod plan;
mod plugin;
mod progress;
mod report;
mod scale;
mod session;
mod units;

use error::{Context as _, Error, Result};
use ferro_nccl_standin::net::ListenComm;
use ferro_nccl_standin::{Handle, NcclExt as _, Net};
use model::Meta;
use model::Mode;
use plan::Plan;
use progress::progress;
use session::{PeerCheck, WaitCfg};
use std::cell::RefCell;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};
use units::parse_size;

/// `ferro-bench --help`.
const USAGE: &str = include_str!("usage.txt");

#[derive(Debug, Clone)]
struct Common {
    plugin: Option<PathBuf>,
    dev: String,
    qps: Option<u32>,
    split: Option<u32>,
    timeout_s: f64,
    yield_cpu: bool,
    /// `--pace-us`: the pause before each data-path call of `bw`, in microseconds.
    pace_us: u64,
    /// `--against PATH`, `--against-dev NAME`: the second plugin of a paired `lat` or `bw` run.
    against: Option<PathBuf>,
    against_dev: Option<String>,
    quiet: bool,
    verbose: bool,
}

#[derive(Debug, Clone)]
struct BenchOpts {
    mode: Mode,
    min: Option<u64>,
    max: Option<u64>,
    sizes: Option<Vec<u64>>,
    window: usize,
    time_s: f64,
    iters: Option<u64>,
    warmup: u64,
    json: Option<PathBuf>,
    csv: Option<PathBuf>,
    label: String,
    comms: usize,
    post_ahead: u64,
    /// `--block`: round trips (lat) or messages (bw) per block of a paired run (`--against`);
    /// 0 when not given (100 round trips, 8 messages).
    block: u64,
    /// The scale mode and its options (it has its own measurement loop and output).
    scale: Option<Box<scale::Opts>>,
}

#[derive(Debug)]
enum Action {
    Serve { opts: BenchOpts, spawn: bool },
    Client { handle: Option<String> },
    Devices,
    Report(Vec<String>),
    Help,
}

fn parse_mode(s: &str) -> Option<Mode> {
    match s {
        "bw" => Some(Mode::Bw),
        "lat" => Some(Mode::Lat),
        "rate" => Some(Mode::Rate),
        "comms" => Some(Mode::Comms),
        _ => None,
    }
}

fn num<T: std::str::FromStr>(opt: &str, v: &str) -> Result<T> {
    v.trim()
        .parse()
        .map_err(|_| Error::new(format!("{opt}: bad value {v:?}")))
}

fn parse_args(args: Vec<String>) -> Result<(Action, Common)> {
    let mut common = Common {
        plugin: None,
        dev: "rxe0".into(),
        qps: None,
        split: None,
        timeout_s: 120.0,
        yield_cpu: false,
        pace_us: 0,
        against: None,
        against_dev: None,
        quiet: false,
        verbose: false,
    };
    let mut it = args.into_iter().peekable();
    let first = it.next().unwrap_or_default();
    let mut is_scale = false;
    let (kind, mode) = match first.as_str() {
        "" | "-h" | "--help" | "help" => return Ok((Action::Help, common)),
        "report" => return Ok((Action::Report(it.collect()), common)),
        "run" | "server" => {
            let m = it.next().unwrap_or_default();
            is_scale = m == "scale";
            let mode = parse_mode(&m).or(is_scale.then_some(Mode::Bw));
            let mode = mode.ok_or_else(|| {
                Error::new(format!(
                    "{first}: expected bw, lat, rate, comms or scale, got {m:?}"
                ))
            })?;
            (first.clone(), Some(mode))
        }
        "client" | "devices" => (first.clone(), None),
        "scale" => {
            is_scale = true;
            ("run".to_string(), Some(Mode::Bw))
        }
        m => match parse_mode(m) {
            Some(mode) => ("run".to_string(), Some(mode)),
            None => return Err(Error::new(format!("unknown command {m:?} (see --help)"))),
        },
    };
    let mut opts = BenchOpts {
        mode: mode.unwrap_or(Mode::Bw),
        min: None,
        max: None,
        sizes: None,
        window: 32,
        time_s: 1.0,
        iters: None,
        warmup: 3,
        json: None,
        csv: None,
        label: String::new(),
        comms: 16,
        post_ahead: plan::LAT_DEPTH,
        block: 0,
        scale: is_scale.then(Box::default),
    };
    let mut handle = None;
    let server_side = kind == "run" || kind == "server";
    while let Some(a) = it.next() {
        let (opt, inline) = match a.split_once('=') {
            Some((o, v)) if o.starts_with("--") => (o.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        let takes_value = !matches!(
            opt.as_str(),
            "--yield" | "-q" | "--quiet" | "-v" | "--verbose" | "-h" | "--help"
        );
        let val = if takes_value {
            match inline {
                Some(v) => v,
                None => it
                    .next()
                    .ok_or_else(|| Error::new(format!("{opt} needs a value")))?,
            }
        } else {
            String::new()
        };
        let bench_only = |o: &str| -> Result<()> {
            if server_side {
                Ok(())
            } else {
                Err(Error::new(format!("{o} is a server option")))
            }
        };
        if let Some(sc) = opts.scale.as_mut() {
            if scale::Opts::knows(&opt) {
                bench_only(&opt)?;
                sc.set(&opt, &val)?;
                continue;
            }
        }
        match opt.as_str() {
            "-h" | "--help" => return Ok((Action::Help, common)),
            "--plugin" => common.plugin = Some(PathBuf::from(val)),
            "--dev" => common.dev = val,
            "--qps" => {
                let n: u32 = num(&opt, &val)?;
                if !(1..=128).contains(&n) {
                    return Err(Error::new("--qps must be 1..128"));
                }
                common.qps = Some(n);
            }
            "--split" => {
                let n: u32 = num(&opt, &val)?;
                if n > 1 {
                    return Err(Error::new("--split must be 0 or 1"));
                }
                common.split = Some(n);
            }
            "--timeout" => common.timeout_s = num(&opt, &val)?,
            "--yield" => common.yield_cpu = true,
            "--pace-us" => common.pace_us = num(&opt, &val)?,
            "--against" => common.against = Some(PathBuf::from(val)),
            "--against-dev" => common.against_dev = Some(val),
            "-q" | "--quiet" => common.quiet = true,
            "-v" | "--verbose" => common.verbose = true,
            "--handle" if kind == "client" => handle = Some(val),
            "--min" => {
                bench_only(&opt)?;
                opts.min = Some(parse_size(&val)?);
            }
            "--max" => {
                bench_only(&opt)?;
                opts.max = Some(parse_size(&val)?);
            }
            "--sizes" => {
                bench_only(&opt)?;
                let v: Result<Vec<u64>> = val
                    .split(',')
                    .filter(|s| !s.trim().is_empty())
                    .map(parse_size)
                    .collect();
                opts.sizes = Some(v?);
            }
            "--window" => {
                bench_only(&opt)?;
                opts.window = num(&opt, &val)?;
                if !(1..=32).contains(&opts.window) {
                    return Err(Error::new("--window must be 1..32 (NCCL_NET_MAX_REQUESTS)"));
                }
            }
            "--comms" => {
                bench_only(&opt)?;
                opts.comms = num(&opt, &val)?;
                if !(1..=256).contains(&opts.comms) {
                    return Err(Error::new("--comms must be 1..256"));
                }
            }
            "--time" => {
                bench_only(&opt)?;
                opts.time_s = num(&opt, &val)?;
                if !(opts.time_s > 0.0 && opts.time_s < 3600.0) {
                    return Err(Error::new("--time must be > 0 and < 3600"));
                }
            }
            "--iters" => {
                bench_only(&opt)?;
                let n: u64 = num(&opt, &val)?;
                if n == 0 {
                    return Err(Error::new("--iters must be >= 1"));
                }
                opts.iters = Some(n);
            }
            "--warmup" => {
                bench_only(&opt)?;
                opts.warmup = num(&opt, &val)?;
            }
            "--block" => {
                bench_only(&opt)?;
                opts.block = num(&opt, &val)?;
                if opts.block == 0 {
                    return Err(Error::new("--block must be at least 1"));
                }
            }
            "--post-ahead" => {
                bench_only(&opt)?;
                opts.post_ahead = num(&opt, &val)?;
                if opts.post_ahead > plan::LAT_DEPTH {
                    return Err(Error::new(format!(
                        "--post-ahead must be 0..{}",
                        plan::LAT_DEPTH
                    )));
                }
            }
            "--json" => {
                bench_only(&opt)?;
                opts.json = Some(PathBuf::from(val));
            }
            "--csv" => {
                bench_only(&opt)?;
                opts.csv = Some(PathBuf::from(val));
            }
            "--label" => {
                bench_only(&opt)?;
                opts.label = val;
            }
            other => {
                return Err(Error::new(format!(
                    "unknown option {other:?} for {kind} (see --help)"
                )));
            }
        }
    }
    if common.timeout_s.is_nan() || common.timeout_s <= 0.0 {
        return Err(Error::new("--timeout must be > 0"));
    }
    let cmd = match kind.as_str() {
        "run" => Action::Serve { opts, spawn: true },
        "server" => Action::Serve { opts, spawn: false },
        "client" => Action::Client { handle },
        _ => Action::Devices,
    };
    Ok((cmd, common))
}

/// The sizes of the plan: explicit, or powers of two from min to max.
fn sizes_of(o: &BenchOpts) -> Result<Vec<u64>> {
    let v = match &o.sizes {
        Some(s) => s.clone(),
        None => {
            let (dmin, dmax) = match o.mode {
                Mode::Rate => (8, 4096),
                Mode::Comms => (8, 8),
                _ => (8, 64 << 20),
            };
            let (min, max) = (o.min.unwrap_or(dmin), o.max.unwrap_or(dmax));
            if min > max {
                return Err(Error::new(format!("--min {min} is above --max {max}")));
            }
            let mut v = Vec::new();
            let mut s = min;
            loop {
                v.push(s);
                if s == 0 {
                    s = 1;
                    continue;
                }
                match s.checked_mul(2) {
                    Some(n) if n <= max => s = n,
                    _ => break,
                }
            }
            v
        }
    };
    if v.is_empty() {
        return Err(Error::new("no sizes to measure"));
    }
    if let Some(&big) = v.iter().find(|&&s| s > i32::MAX as u64) {
        return Err(Error::new(format!(
            "size {big} does not fit the plugin API's C int"
        )));
    }
    Ok(v)
}

fn plugin_path(c: &Common) -> Result<PathBuf> {
    if let Some(p) = &c.plugin {
        return Ok(p.clone());
    }
    if let Some(p) = std::env::var_os("FERRO_PLUGIN_SO").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ctx("locating this executable")?;
    let dir = exe
        .parent()
        .ok_or_else(|| Error::new("this executable has no parent folder"))?;
    Ok(dir.join("libnccl_net_ferro.so"))
}

fn env_u32(name: &str, dflt: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(dflt)
}

/// Sets the NCCL variables from --qps/--split (inherited by the child) and returns the values
/// the plugin will see.
fn apply_env(c: &Common) -> (u32, u32) {
    for (name, v) in [
        ("NCCL_IB_QPS_PER_CONNECTION", c.qps),
        ("NCCL_IB_SPLIT_DATA_ON_QPS", c.split),
    ] {
        if let Some(v) = v {
            // SAFETY: called from main before any other thread exists (the plugin is not
            // loaded yet), so nothing reads the environment concurrently.
            unsafe { std::env::set_var(name, v.to_string()) };
        }
    }
    (
        env_u32("NCCL_IB_QPS_PER_CONNECTION", 1),
        env_u32("NCCL_IB_SPLIT_DATA_ON_QPS", 0),
    )
}

fn load(c: &Common) -> Result<Net> {
    load_at(&plugin_path(c)?)
}

fn load_at(path: &std::path::Path) -> Result<Net> {
    let t = Instant::now();
    let n = plugin::load(path).map_err(|e| {
        e.context("loading the plugin (build it with `cargo build --release -p nccl-net-plugin`, or pass --plugin / FERRO_PLUGIN_SO)")
    })?;
    plugin::init(&n)?;
    progress(&format!(
        "loaded plugin {:?} from {} (init {:.2} s)",
        plugin::name(&n),
        n.path().display(),
        t.elapsed().as_secs_f64()
    ));
    Ok(n)
}

fn wait_cfg(c: &Common) -> WaitCfg {
    WaitCfg {
        timeout: Duration::from_secs_f64(c.timeout_s),
        yield_cpu: c.yield_cpu,
        pace: (c.pace_us > 0).then(|| Duration::from_micros(c.pace_us)),
    }
}

/// Starts the client role as a child of this process. It loads the plugin while the server does
/// the same (`init` takes seconds under emulation), then reads the handle from its stdin.
fn spawn_client(c: &Common, plugin: &std::path::Path) -> Result<Child> {
    let exe = std::env::current_exe().ctx("locating this executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("client")
        .arg("--plugin")
        .arg(plugin)
        .arg("--dev")
        .arg(&c.dev)
        .arg("--timeout")
        .arg(c.timeout_s.to_string());
    if c.yield_cpu {
        cmd.arg("--yield");
    }
    if c.pace_us > 0 {
        cmd.arg("--pace-us").arg(c.pace_us.to_string());
    }
    if let Some(p) = &c.against {
        cmd.arg("--against").arg(p);
    }
    if let Some(d) = &c.against_dev {
        cmd.arg("--against-dev").arg(d);
    }
    if c.quiet {
        cmd.arg("--quiet");
    }
    if c.verbose {
        cmd.arg("--verbose");
    }
    cmd.stdin(Stdio::piped()).stdout(Stdio::null());
    cmd.spawn().ctx("starting the client process")
}

/// Writes the handle into the client's stdin pipe (and closes it).
fn pass_handle(child: &mut Child, hex: &str) -> Result<()> {
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| Error::new("no pipe to the client"))?;
    stdin
        .write_all(format!("{hex}\n").as_bytes())
        .ctx("passing the handle to the client")
}

fn serve(c: &Common, o: &BenchOpts, spawn: bool) -> Result<()> {
    if let Some(against) = &c.against {
        return pair::serve(c, o, against, spawn);
    }
    let sizes = sizes_of(o)?;
    let (qps, split) = apply_env(c);
    let mut early = if spawn {
        let ch = spawn_client(c, &plugin_path(c)?)?;
        progress(&format!("started the client process (pid {})", ch.id()));
        Some(ch)
    } else {
        None
    };
    let ready = (|| {
        let net = load(c)?;
        let dev = plugin::find_device(&net, &c.dev)?;
        let (handle, listen) = net.listen(dev.index).call("listen")?;
        Ok((net, dev, handle, listen))
    })();
    let (net, dev, handle, listen) = match ready {
        Ok(v) => v,
        Err(e) => {
            if let Some(ch) = early.as_mut() {
                let _ = ch.kill();
                let _ = ch.wait();
            }
            return Err(e);
        }
    };
    let hex = handle.to_hex();
    let child: Option<Rc<RefCell<Child>>> = if let Some(mut ch) = early {
        if let Err(e) = pass_handle(&mut ch, &hex) {
            let _ = ch.kill();
            let _ = ch.wait();
            return Err(e);
        }
        progress("listening; handle passed to the client through a pipe");
        Some(Rc::new(RefCell::new(ch)))
    } else {
        println!("{hex}");
        std::io::stdout().flush().ctx("writing the handle")?;
        progress("listening; handle printed on stdout");
        None
    };
    let result = serve_inner(c, o, &net, dev, listen, &sizes, (qps, split), child.clone());
    match child {
        Some(ch) => reap_client(&ch, result),
        None => result,
    }
}

/// After the server's work (`result`): waits for the client process to exit (within 60 s), or
/// stops it when the work failed (saying so when the client died first: that is the cause).
fn reap_client(ch: &RefCell<Child>, result: Result<()>) -> Result<()> {
    let mut ch = ch.borrow_mut();
    if let Err(e) = result {
        // Say so when the client died first (that is then the cause); otherwise stop it:
        // it may be waiting for a command that will never come.
        let e = match ch.try_wait() {
            Ok(Some(st)) if !st.success() => e.context(format!("the client process failed ({st})")),
            _ => e,
        };
        let _ = ch.kill();
        let _ = ch.wait();
        return Err(e);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match ch.try_wait().ctx("waiting for the client")? {
            Some(st) if st.success() => return Ok(()),
            Some(st) => return Err(Error::new(format!("the client process failed ({st})"))),
            None if Instant::now() > deadline => {
                let _ = ch.kill();
                let _ = ch.wait();
                return Err(Error::new("the client process did not exit within 60 s"));
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// The waiting loops' check of the client process: an error once it exited with a failure.
fn peer_check(ch: Rc<RefCell<Child>>) -> PeerCheck {
    Box::new(move || match ch.borrow_mut().try_wait() {
        // A clean exit only happens after `Done`; the plugin notices anything else.
        Ok(Some(st)) if !st.success() => {
            Err(Error::new(format!("the client process exited ({st})")))
        }
        Ok(_) => Ok(()),
        Err(e) => Err(Error::new(format!("checking the client process: {e}"))),
    })
}

#[allow(clippy::too_many_arguments)]
fn serve_inner(
    c: &Common,
    o: &BenchOpts,
    net: &Net,
    dev: plugin::DevProps,
    listen: ListenComm,
    sizes: &[u64],
    (qps, split): (u32, u32),
    child: Option<Rc<RefCell<Child>>>,
) -> Result<()> {
    let peer: Option<PeerCheck> = child.map(peer_check);
    let dev_name = dev.name.clone();
    let dev_speed = dev.speed_mbps;
    let mut s = session::Session::accept(net, dev, listen, wait_cfg(c), peer)?;
    progress(&format!(
        "connected both ways on {dev_name} in {:.2} s (QPs/connection {qps}, split {split})",
        s.setup_s
    ));
    if let Some(sc) = &o.scale {
        return serve_scale(net, &dev_name, qps, o, sc, s);
    }
    let plan = Plan {
        mode: o.mode,
        sizes: sizes.to_vec(),
        window: o.window,
        max_iters: o.iters,
        target: Duration::from_secs_f64(o.time_s),
        warmup: o.warmup,
        comms: o.comms,
        post_ahead: o.post_ahead,
    };
    let rows = bench::server(&mut s, &plan)?;
    let setup_s = s.setup_s;
    s.close()?;
    let meta = Meta {
        mode: o.mode,
        plugin_path: net.path().display().to_string(),
        plugin_name: plugin::name(net),
        dev: dev_name,
        dev_speed_mbps: dev_speed,
        qps,
        split,
        window: if o.mode == Mode::Lat { 1 } else { o.window },
        target_s: o.time_s,
        label: o.label.clone(),
        setup_s,
    };
    print!("{}", report::table(&meta, &rows));
    std::io::stdout().flush().ctx("writing the table")?;
    if let Some(p) = &o.json {
        report::write_file(p, &report::to_json(&meta, &rows))?;
        progress(&format!("wrote {}", p.display()));
    }
    if let Some(p) = &o.csv {
        report::write_file(p, &report::to_csv(&meta, &rows))?;
        progress(&format!("wrote {}", p.display()));
    }
    Ok(())
}

/// The scale mode on the server: runs every N, prints the table, writes the files.
fn serve_scale(
    net: &Net,
    dev: &str,
    qps: u32,
    o: &BenchOpts,
    sc: &scale::Opts,
    mut s: session::Session<'_>,
) -> Result<()> {
    let rows = scale::server(&mut s, sc)?;
    s.close()?;
    let meta = scale::Meta {
        plugin_path: net.path().display().to_string(),
        plugin_name: plugin::name(net),
        dev: dev.to_string(),
        qps,
        label: o.label.clone(),
    };
    print!("{}", scale::table(&meta, &rows));
    std::io::stdout().flush().ctx("writing the table")?;
    let files = [
        (&o.json, scale::to_json(&meta, &rows)),
        (&o.csv, scale::to_csv(&meta, &rows)),
        (&sc.svg, scale::svg(&meta, &rows)),
    ];
    for (path, text) in files {
        if let Some(p) = path {
            report::write_file(p, &text)?;
            progress(&format!("wrote {}", p.display()));
        }
    }
    Ok(())
}

fn client(c: &Common, handle: Option<String>) -> Result<()> {
    if let Some(against) = &c.against {
        return pair::client(c, against);
    }
    // The plugin is loaded before the handle is read: in the orchestrated mode the server is
    // loading it at the same time and passes the handle when it listens.
    let given = match handle {
        Some(h) if h != "-" => Some(Handle::from_hex(&h)?),
        _ => None,
    };
    let _ = apply_env(c);
    let net = load(c)?;
    let dev = plugin::find_device(&net, &c.dev)?;
    let h = match given {
        Some(h) => h,
        None => Handle::from_hex(&session::read_handle_line()?)?,
    };
    let mut s = session::Session::connect(&net, dev, h, wait_cfg(c))?;
    progress(&format!("connected both ways in {:.2} s", s.setup_s));
    bench::client(&mut s, c.verbose)?;
    s.close()
}

fn devices(c: &Common) -> Result<()> {
    let _ = apply_env(c);
    let net = load(c)?;
    for d in plugin::devices(&net)? {
        println!(
            "{:>3}  {:<12} {:>8} Mb/s  ptrSupport {:#x}  maxRecvs {}",
            d.index, d.name, d.speed_mbps, d.ptr_support, d.max_recvs
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, common) = match parse_args(args) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("ferro-bench: error: {e}");
            eprintln!("(ferro-bench --help for usage)");
            return ExitCode::from(2);
        }
    };
    progress::set(
        common.quiet,
        match cmd {
            Action::Client { .. } => "ferro-bench client",
            _ => "ferro-bench",
        },
    );
    let r = match cmd {
        Action::Help => {
            print!("{USAGE}");
            Ok(())
        }
        Action::Serve { opts, spawn } => serve(&common, &opts, spawn),
        Action::Client { handle } => client(&common, handle),
        Action::Devices => devices(&common),
        Action::Report(args) => compare::main(args),
    };
    plugin::echo_warnings();
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let who = progress::prefix();
            eprintln!("{who}: error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn default_sizes_are_powers_of_two() {
        let (cmd, _) = parse_args(args("bw")).unwrap();
        let Action::Serve { opts, spawn } = cmd else {
            panic!("not serve")
        };
        assert!(spawn);
        let s = sizes_of(&opts).unwrap();
        assert_eq!(s.first(), Some(&8));
        assert_eq!(s.last(), Some(&(64 << 20)));
        assert_eq!(s.len(), 24);
        let (cmd, _) = parse_args(args("server rate")).unwrap();
        let Action::Serve { opts, spawn } = cmd else {
            panic!("not serve")
        };
        assert!(!spawn);
        assert_eq!(
            sizes_of(&opts).unwrap(),
            vec![8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
        );
    }

    #[test]
    fn options_parse() {
        let (cmd, c) = parse_args(args(
            "run lat --sizes 8,4K,1M --qps 4 --split=1 --dev rxe1 --iters 10 --time 0.5 --json x.json",
        ))
        .unwrap();
        assert_eq!((c.qps, c.split, c.dev.as_str()), (Some(4), Some(1), "rxe1"));
        let Action::Serve { opts, .. } = cmd else {
            panic!("not serve")
        };
        assert_eq!(opts.mode, Mode::Lat);
        assert_eq!(sizes_of(&opts).unwrap(), vec![8, 4096, 1 << 20]);
        assert_eq!(opts.iters, Some(10));
        assert_eq!(opts.post_ahead, plan::LAT_DEPTH);
        let (cmd, _) = parse_args(args("lat --post-ahead 0")).unwrap();
        assert!(matches!(cmd, Action::Serve { opts, .. } if opts.post_ahead == 0));
        assert!(parse_args(args("lat --post-ahead 3")).is_err());
        assert!(parse_args(args("client --post-ahead 0")).is_err());
        assert!(parse_args(args("bw --window 33")).is_err());
        assert!(parse_args(args("bw --split 2")).is_err());
        assert!(parse_args(args("client --sizes 8")).is_err());
        assert!(parse_args(args("bw --bogus")).is_err());
        assert!(parse_args(args("frobnicate")).is_err());
        assert!(
            parse_args(args("bw --min 1M --max 4K"))
                .and_then(|(c, _)| match c {
                    Action::Serve { opts, .. } => sizes_of(&opts),
                    _ => Ok(vec![]),
                })
                .is_err()
        );
        let (cmd, _) = parse_args(args("client --handle abc")).unwrap();
        assert!(matches!(cmd, Action::Client { handle: Some(h) } if h == "abc"));
    }
}
