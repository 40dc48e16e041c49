//! Environment configuration: NCCL's own `NCCL_IB_*` names with NCCL's meaning, and Ferro's
//! own `FERRO_*` ones, read once (at `init`) into one snapshot that the rest of the plugin is
//! handed: nothing else reads the environment.
//!
//! Every variable is one entry of the `settings!` table below: its field, type, name, default
//! and parser, written once; the struct, its defaults, the reading and the one-line summary are
//! generated from it. Every value is validated; an invalid one produces a warning naming the
//! variable, the value and the default used instead. Parsing is pure (`Config::from_lookup`) so
//! it is unit-tested without touching the process environment.

use ferro_proto::plan::AdaptiveRouting;
use ferro_verbs::gid::GidPolicy;
use ferro_verbs::sysfs::AddrFamily;
use std::net::IpAddr;

/// Declares the configuration: one entry per variable,
/// `field: Type = "NAME", default, parser [, or "what the fallback is called"];`.
/// The parser turns the (trimmed, non-empty) value into the field or says what is wrong with it;
/// an unset or empty variable is the default.
macro_rules! settings {
    ($(
        $(#[doc = $doc:literal])*
        $field:ident : $ty:ty = $name:literal, $default:expr, $parse:expr $(, or $fallback:literal)?;
    )*) => {
        /// The effective configuration.
        #[derive(Debug, Clone, PartialEq)]
        pub struct Config {
            $( $(#[doc = $doc])* pub $field: $ty, )*
        }

        impl Default for Config {
            fn default() -> Self {
                Config { $( $field: $default, )* }
            }
        }

        /// Every variable the configuration reads, in the order the summary gives them.
        pub const VARIABLES: &[&str] = &[$($name),*];

        impl Config {
            /// Reads the configuration through `get` (the environment in production).
            pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> (Config, Vec<Warning>) {
                let mut w = Vec::new();
                let cfg = Config {
                    $( $field: read(get, &mut w, $name, $default, $parse, settings!(@or $($fallback)?)), )*
                };
                (cfg, w)
            }

            /// One line with every effective value, for the INFO log and the doctor.
            pub fn summary(&self) -> String {
                let parts: [String; VARIABLES.len()] =
                    [$( format!("{}={}", $name, Show::show(&self.$field)) ),*];
                parts.join(" ")
            }
        }
    };
    (@or) => { None };
    (@or $f:literal) => { Some($f) };
}

settings! {
    /// `NCCL_IB_DISABLE`.
    disable: bool = "NCCL_IB_DISABLE", false, flag;
    /// `NCCL_IB_QPS_PER_CONNECTION` (1..=128).
    qps_per_connection: u16 = "NCCL_IB_QPS_PER_CONNECTION", 1, int(1, 128);
    /// `NCCL_IB_SPLIT_DATA_ON_QPS`.
    split_data_on_qps: bool = "NCCL_IB_SPLIT_DATA_ON_QPS", false, flag;
    /// `NCCL_IB_TIMEOUT` (ACK timeout exponent, 1..=31).
    timeout: u8 = "NCCL_IB_TIMEOUT", 20, int(1, 31);
    /// `NCCL_IB_RETRY_CNT` (0..=7).
    retry_cnt: u8 = "NCCL_IB_RETRY_CNT", 7, int(0, 7);
    /// `NCCL_IB_TC`: the traffic class (0..=255) of the connections this side connects;
    /// -1 (unset): the communicator's (ABI v10+), else 0. The accepting side takes the
    /// connecting side's ([`ferro_proto::path`]).
    traffic_class: Option<u8> = "NCCL_IB_TC", None, unset_or(0, 255);
    /// `NCCL_IB_SL`: the service level (0..=15), chosen the same way as the traffic class.
    service_level: Option<u8> = "NCCL_IB_SL", None, unset_or(0, 15);
    /// `NCCL_IB_FIFO_TC`: on RoCE, the traffic class (0..=255) of the accepting side's QPs,
    /// which carry its clear-to-send writes; -1 (unset): the connecting side's.
    fifo_tc: Option<u8> = "NCCL_IB_FIFO_TC", None, unset_or(0, 255);
    /// `NCCL_IB_PKEY` (P_Key *index*).
    pkey_index: u16 = "NCCL_IB_PKEY", 0, int(0, 65535);
    /// `NCCL_IB_GID_INDEX` (-1 = automatic).
    gid_index: i64 = "NCCL_IB_GID_INDEX", -1, int(-1, 65535);
    /// `NCCL_IB_ROCE_VERSION_NUM`.
    roce_version: u8 = "NCCL_IB_ROCE_VERSION_NUM", 2, int(1, 2);
    /// `NCCL_IB_ADDR_FAMILY`.
    addr_family: AddrFamily = "NCCL_IB_ADDR_FAMILY", AddrFamily::V4, addr_family;
    /// `NCCL_IB_ADDR_RANGE` (CIDR).
    addr_range: Option<(IpAddr, u8)> = "NCCL_IB_ADDR_RANGE", None, cidr, or "no range";
    /// `NCCL_IB_MERGE_NICS`: whether `makeVDevice` may fuse devices into a virtual NIC.
    merge_nics: bool = "NCCL_IB_MERGE_NICS", true, flag;
    /// `NCCL_IB_RETURN_ASYNC_EVENTS`: whether a fatal asynchronous event (a port down, a QP or
    /// CQ error, a device error) fails the comms it affects; 0 only logs it.
    return_async_events: bool = "NCCL_IB_RETURN_ASYNC_EVENTS", true, flag;
    /// `NCCL_IB_PCI_RELAXED_ORDERING`: 0 off, 1 on, 2 on when libibverbs has `ibv_reg_mr_iova2`.
    relaxed_ordering: u8 = "NCCL_IB_PCI_RELAXED_ORDERING", 2, int(0, 2);
    /// `NCCL_GDR_FLUSH_DISABLE`.
    gdr_flush_disable: bool = "NCCL_GDR_FLUSH_DISABLE", false, flag;
    /// `NCCL_IB_USE_INLINE`: clear-to-send writes of one entry go inline (`IBV_SEND_INLINE`;
    /// the QPs are created with room for one 64-byte entry), as NCCL's IB transport does.
    use_inline: bool = "NCCL_IB_USE_INLINE", false, flag;
    /// `NCCL_IB_ADAPTIVE_ROUTING`: 1 sends a lone buffer of more than `NCCL_IB_AR_THRESHOLD`
    /// bytes as plain RDMA WRITEs and then a 0-byte write with immediate, so that the
    /// immediate never overtakes the data on an adaptive-routed fabric. Unset is `None` (`auto`
    /// in the summary): the connection's link layer decides, on for InfiniBand and off for
    /// RoCE ([`Config::adaptive_routing`]).
    adaptive_routing: Option<bool> = "NCCL_IB_ADAPTIVE_ROUTING", None, some_flag,
        or "the link layer's default (1 on InfiniBand, 0 on RoCE)";
    /// `NCCL_IB_AR_THRESHOLD`: the bytes a lone buffer must exceed for adaptive routing to
    /// apply (from `u32::MAX` on, it never does: no request is larger).
    ar_threshold: u64 = "NCCL_IB_AR_THRESHOLD", 8192, int(0, i64::MAX);
    /// `NCCL_DMABUF_ENABLE` (NCCL's meaning: any integer; 0 turns DMA-BUF registration off).
    dmabuf_enable: bool = "NCCL_DMABUF_ENABLE", true, nonzero;
    /// `FERRO_GDR_DISABLE`: 1 turns GPUDirect RDMA off entirely (DMA-BUF and nvidia-peermem),
    /// so NCCL stages through host memory.
    gdr_disable: bool = "FERRO_GDR_DISABLE", false, flag;
    /// `FERRO_FLUSH_HOST`: also flush receives into host memory (diagnostics and tests of the
    /// flush path on NICs without GPUDirect RDMA).
    flush_host: bool = "FERRO_FLUSH_HOST", false, flag;
    /// `FERRO_STALL_WARN_S`: seconds without progress before a comm with work outstanding
    /// logs a stall warning (then again at doubling intervals); 0 disables.
    stall_warn_s: u32 = "FERRO_STALL_WARN_S", 60, int(0, 86_400);
    /// `FERRO_RECOVERY_BUDGET_S`: the most seconds one recovery in place of a comm may take,
    /// from its stop to its resume (a link flap, a QP error; see the design's "Recovery in
    /// place"); 0 turns recovery off: a port down, a QP error event or a failed completion fails
    /// the comm at once. Unset: 30, or 0 when `NCCL_IB_RESILIENCY_PORT_RECOVERY=0` is set
    /// ([`Config::recovery_budget`]).
    recovery_budget_s: Option<u32> = "FERRO_RECOVERY_BUDGET_S", None, opt_int(0, 3_600),
        or "30 s (0 with NCCL_IB_RESILIENCY_PORT_RECOVERY=0)";
    /// `NCCL_IB_RESILIENCY_PORT_RECOVERY` (NCCL 2.30.3+, its default 0 = off): set to 0, recovery
    /// in place is off unless `FERRO_RECOVERY_BUDGET_S` is set; set to 1, it is on (as it is
    /// by default here).
    resiliency_port_recovery: Option<bool> = "NCCL_IB_RESILIENCY_PORT_RECOVERY", None, some_flag,
        or "unset";
    /// `NCCL_IB_RESILIENCY_PORT_RECOVERY_START_DELAY` (ms, NCCL's default 200): how long a
    /// stopped comm waits before it rebuilds its QPs, counted from its stop (unset: no wait
    /// beyond the port being active).
    resiliency_start_delay_ms: Option<u32> = "NCCL_IB_RESILIENCY_PORT_RECOVERY_START_DELAY", None,
        opt_int(0, 600_000), or "unset";
    /// `NCCL_IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX` (NCCL's default 5): the most epochs one
    /// recovery may enter (a failure during a recovery restarts it) before the comm fails
    /// (unset: only the budget bounds it).
    resiliency_attempts_max: Option<u32> = "NCCL_IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX", None,
        opt_int(1, 1_000), or "unset";
    /// `FERRO_IBVERBS_LIB`: the libibverbs to open instead of `libibverbs.so.1` (a path or a
    /// name the dynamic loader finds).
    ibverbs_lib: Option<String> = "FERRO_IBVERBS_LIB", None, text;
    /// `FERRO_LOG_STDERR`: without NCCL's logger (tools, tests), log lines go to stderr.
    log_stderr: bool = "FERRO_LOG_STDERR", false, flag;
    /// `NCCL_SOCKET_IFNAME`: which interfaces the out-of-band listener may bind (NCCL's
    /// syntax, matched by `oob::listen_ip`); `None` when unset or empty.
    socket_ifname: Option<String> = "NCCL_SOCKET_IFNAME", None, text;
    /// `NCCL_IB_HCA`.
    hca: Option<HcaFilter> = "NCCL_IB_HCA", None, hca, or "every device";
    /// `FERRO_GID_INDEX`: per-device GID indexes, overriding `NCCL_IB_GID_INDEX`.
    gid_overrides: Vec<GidOverride> = "FERRO_GID_INDEX", Vec::new(), gid_overrides,
        or "no per-device override";
}

/// Seconds one recovery in place may take when neither `FERRO_RECOVERY_BUDGET_S` nor
/// `NCCL_IB_RESILIENCY_PORT_RECOVERY` says otherwise.
pub const DEFAULT_RECOVERY_BUDGET_S: u32 = 30;

/// Variables of NCCL's resiliency (2.29.7 / 2.30.3) that tune its own mechanism, which this plugin
/// does not have, with why: read only to say so.
pub const NOT_APPLICABLE: &[(&str, &str)] = &[
    (
        "NCCL_IB_RESILIENCY_PORT_FAILOVER",
        "NCCL's failover probes the receiver's completion records with RDMA READs over another member of a fused NIC; recovery in place here agrees on what was delivered over the out-of-band connection instead (FERRO_RECOVERY_BUDGET_S), for every comm",
    ),
    (
        "NCCL_IB_RESILIENCY_PORT_FAILOVER_MAX_ATTEMPTS",
        "no RDMA READ probes here (see NCCL_IB_RESILIENCY_PORT_FAILOVER); a recovery is bounded by FERRO_RECOVERY_BUDGET_S and NCCL_IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX",
    ),
    (
        "NCCL_IB_RESILIENCY_PORT_FAILOVER_PROBE_DELAY",
        "no RDMA READ probes here (see NCCL_IB_RESILIENCY_PORT_FAILOVER)",
    ),
    (
        "NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_INTERVAL",
        "NCCL's port recovery sends alive messages over its own QPs; here the peers agree over the out-of-band connection, and a port is used again once it reports itself ACTIVE",
    ),
    (
        "NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_SIZE",
        "no alive messages here (see NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_INTERVAL)",
    ),
    (
        "NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_SEQUENCE_SIZE",
        "no alive messages here (see NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_INTERVAL)",
    ),
    (
        "NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_TIMEOUT",
        "no alive messages here; a recovery is bounded by FERRO_RECOVERY_BUDGET_S",
    ),
    (
        "NCCL_IB_RESILIENCY_PORT_RECOVERY_ACK_TIMEOUT",
        "no alive messages or acknowledgements here; a recovery is bounded by FERRO_RECOVERY_BUDGET_S",
    ),
];

/// A rejected setting: `NCCL_IB_GID_INDEX="abc" is not an integer; using the default -1`.
pub type Warning = String;

/// How a value appears in the summary (and as the default in a warning).
trait Show {
    fn show(&self) -> String;
}

macro_rules! show_display {
    ($($t:ty),*) => { $(impl Show for $t { fn show(&self) -> String { self.to_string() } })* };
}
show_display!(u8, u16, u32, u64, i64);

impl Show for bool {
    fn show(&self) -> String {
        u8::from(*self).to_string()
    }
}

impl Show for Option<bool> {
    fn show(&self) -> String {
        self.map_or("auto".to_string(), |b| b.show())
    }
}

impl Show for AddrFamily {
    fn show(&self) -> String {
        match self {
            AddrFamily::V4 => "AF_INET",
            AddrFamily::V6 => "AF_INET6",
        }
        .to_string()
    }
}

/// A setting whose unset value is NCCL's -1.
impl Show for Option<u8> {
    fn show(&self) -> String {
        self.map_or("-1".to_string(), |v| v.to_string())
    }
}

impl Show for Option<(IpAddr, u8)> {
    fn show(&self) -> String {
        self.map_or("unset".to_string(), |(ip, p)| format!("{ip}/{p}"))
    }
}

impl Show for Option<u32> {
    fn show(&self) -> String {
        self.map_or("unset".to_string(), |v| v.to_string())
    }
}

impl Show for Option<String> {
    fn show(&self) -> String {
        self.clone().unwrap_or_else(|| "unset".to_string())
    }
}

impl Show for Option<HcaFilter> {
    fn show(&self) -> String {
        self.as_ref().map_or("unset".to_string(), |h| h.raw.clone())
    }
}

impl Show for Vec<GidOverride> {
    fn show(&self) -> String {
        if self.is_empty() {
            return "unset".to_string();
        }
        self.iter()
            .map(|o| match o.port {
                Some(p) => format!("{}:{p}={}", o.dev, o.index),
                None => format!("{}={}", o.dev, o.index),
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Reads one variable: unset or empty is the default; a value the parser refuses is the default
/// with a warning `NAME=<what is wrong>; using <fallback, or "the default <default>">`.
fn read<T: Show>(
    get: &dyn Fn(&str) -> Option<String>,
    warnings: &mut Vec<Warning>,
    name: &str,
    default: T,
    parse: impl Fn(&str) -> Result<T, String>,
    fallback: Option<&str>,
) -> T {
    let Some(raw) = get(name) else { return default };
    let text = raw.trim();
    if text.is_empty() {
        return default;
    }
    parse(text).unwrap_or_else(|e| {
        let fallback =
            fallback.map_or_else(|| format!("the default {}", default.show()), str::to_string);
        warnings.push(format!("{name}={e}; using {fallback}"));
        default
    })
}

/// An integer in `min..=max`.
fn int<T: TryFrom<i64>>(min: i64, max: i64) -> impl Fn(&str) -> Result<T, String> {
    move |text| match text.parse::<i64>() {
        Ok(v) if (min..=max).contains(&v) => {
            T::try_from(v).map_err(|_| format!("{v} does not fit the setting's type"))
        }
        Ok(v) => Err(format!("{v} is outside {min}..={max}")),
        Err(_) => Err(format!("{text:?} is not an integer")),
    }
}

/// -1 (NCCL's "not set": `None`) or an integer in `min..=max`.
fn unset_or(min: i64, max: i64) -> impl Fn(&str) -> Result<Option<u8>, String> {
    move |text| match text.parse::<i64>() {
        Ok(-1) => Ok(None),
        Ok(v) if (min..=max).contains(&v) => u8::try_from(v)
            .map(Some)
            .map_err(|_| format!("{v} does not fit the setting's type")),
        Ok(v) => Err(format!("{v} is neither -1 (not set) nor in {min}..={max}")),
        Err(_) => Err(format!("{text:?} is not an integer")),
    }
}

/// 0 or 1.
fn flag(text: &str) -> Result<bool, String> {
    int::<u8>(0, 1)(text).map(|v| v == 1)
}

/// 0 or 1, given (unset is the caller's default).
fn some_flag(text: &str) -> Result<Option<bool>, String> {
    flag(text).map(Some)
}

/// Any integer; true unless 0.
fn nonzero(text: &str) -> Result<bool, String> {
    int::<i64>(i64::MIN, i64::MAX)(text).map(|v| v != 0)
}

/// An integer in `min..=max`, kept as set (`None` when unset).
fn opt_int<T: TryFrom<i64>>(min: i64, max: i64) -> impl Fn(&str) -> Result<Option<T>, String> {
    move |text| int::<T>(min, max)(text).map(Some)
}

/// Any text, taken as given.
fn text(text: &str) -> Result<Option<String>, String> {
    Ok(Some(text.to_string()))
}

fn addr_family(text: &str) -> Result<AddrFamily, String> {
    match text {
        "AF_INET" => Ok(AddrFamily::V4),
        "AF_INET6" => Ok(AddrFamily::V6),
        other => Err(format!("{other:?} is neither AF_INET nor AF_INET6")),
    }
}

fn cidr(text: &str) -> Result<Option<(IpAddr, u8)>, String> {
    ferro_verbs::gid::parse_cidr(text)
        .map(Some)
        .map_err(|e| format!("{text:?} is not a CIDR range ({e})"))
}

fn hca(text: &str) -> Result<Option<HcaFilter>, String> {
    HcaFilter::parse(text)
        .map(Some)
        .map_err(|e| format!("{text:?} is invalid ({e})"))
}

fn gid_overrides(text: &str) -> Result<Vec<GidOverride>, String> {
    parse_gid_overrides(text).map_err(|e| format!("{text:?} is invalid ({e})"))
}

/// `NCCL_IB_HCA`: `[^][=]name[:port][,name[:port]...]`. Names are prefixes unless `=` is given;
/// `^` turns the list into an exclusion list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HcaFilter {
    pub raw: String,
    pub exclude: bool,
    pub exact: bool,
    pub entries: Vec<(String, Option<u8>)>,
}

impl HcaFilter {
    pub fn parse(raw: &str) -> Result<HcaFilter, String> {
        let mut rest = raw.trim();
        let exclude = rest.starts_with('^');
        if exclude {
            rest = &rest[1..];
        }
        let exact = rest.starts_with('=');
        if exact {
            rest = &rest[1..];
        }
        let mut entries = Vec::new();
        for item in rest.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, port) = match item.split_once(':') {
                Some((n, p)) => {
                    let port = p
                        .parse::<u8>()
                        .ok()
                        .filter(|p| *p > 0)
                        .ok_or_else(|| format!("bad port {p:?} in {item:?}"))?;
                    (n, Some(port))
                }
                None => (item, None),
            };
            if name.is_empty() {
                return Err(format!("empty device name in {item:?}"));
            }
            entries.push((name.to_string(), port));
        }
        if entries.is_empty() {
            return Err("no device named".into());
        }
        Ok(HcaFilter {
            raw: raw.to_string(),
            exclude,
            exact,
            entries,
        })
    }

    /// Whether the plugin may use `dev` port `port`.
    pub fn allows(&self, dev: &str, port: u8) -> bool {
        let hit = self.entries.iter().any(|(name, p)| {
            let name_ok = if self.exact {
                dev == name
            } else {
                dev.starts_with(name.as_str())
            };
            name_ok && p.is_none_or(|p| p == port)
        });
        hit != self.exclude
    }
}

/// One `FERRO_GID_INDEX` entry: `dev[:port]=index`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidOverride {
    pub dev: String,
    pub port: Option<u8>,
    pub index: u32,
}

/// Parses `FERRO_GID_INDEX` (`mlx5_0=3,mlx5_1:1=5`).
pub fn parse_gid_overrides(raw: &str) -> Result<Vec<GidOverride>, String> {
    let mut out = Vec::new();
    for item in raw.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (target, index) = item
            .split_once('=')
            .ok_or_else(|| format!("{item:?} is not dev[:port]=index"))?;
        let index = index
            .trim()
            .parse::<u32>()
            .map_err(|_| format!("bad index in {item:?}"))?;
        let (dev, port) = match target.trim().split_once(':') {
            Some((d, p)) => (
                d,
                Some(
                    p.parse::<u8>()
                        .ok()
                        .filter(|p| *p > 0)
                        .ok_or_else(|| format!("bad port in {item:?}"))?,
                ),
            ),
            None => (target.trim(), None),
        };
        if dev.is_empty() {
            return Err(format!("empty device name in {item:?}"));
        }
        out.push(GidOverride {
            dev: dev.to_string(),
            port,
            index,
        });
    }
    Ok(out)
}

impl Config {
    /// Reads the process environment: the one place the plugin does.
    pub fn from_env() -> (Config, Vec<Warning>) {
        Self::from_lookup(&|k| std::env::var(k).ok())
    }

    /// The process's configuration, read from the environment at its first use (`init`, or an
    /// earlier log line) and never again, with the warnings of that reading for `init` to log.
    pub fn process() -> &'static (Config, Vec<Warning>) {
        static PROCESS: std::sync::OnceLock<(Config, Vec<Warning>)> = std::sync::OnceLock::new();
        PROCESS.get_or_init(Config::from_env)
    }

    /// The budget of one recovery in place (zero: off): `FERRO_RECOVERY_BUDGET_S` when set;
    /// else off when `NCCL_IB_RESILIENCY_PORT_RECOVERY=0` is set (the operator asked for NCCL's
    /// behaviour without port recovery); else 30 s.
    pub fn recovery_budget(&self) -> std::time::Duration {
        let secs = match (self.recovery_budget_s, self.resiliency_port_recovery) {
            (Some(s), _) => s,
            (None, Some(false)) => 0,
            (None, _) => DEFAULT_RECOVERY_BUDGET_S,
        };
        std::time::Duration::from_secs(u64::from(secs))
    }

    /// The INFO lines for variables of NCCL's IB transport that are set but have no meaning
    /// here, each with why (said once, at `init`).
    pub fn not_applicable(get: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
        NOT_APPLICABLE
            .iter()
            .filter_map(|(name, why)| {
                let v = get(name)?;
                (!v.trim().is_empty()).then(|| format!("{name}={} does not apply: {why}", v.trim()))
            })
            .collect()
    }

    /// Adaptive routing for a connection over a device of this link layer (every member of a
    /// virtual NIC has the same): `NCCL_IB_ADAPTIVE_ROUTING`, or when unset on for InfiniBand
    /// and off for RoCE, above `NCCL_IB_AR_THRESHOLD`.
    pub fn adaptive_routing(&self, ethernet: bool) -> AdaptiveRouting {
        if self.adaptive_routing.unwrap_or(!ethernet) {
            AdaptiveRouting::above(u32::try_from(self.ar_threshold).unwrap_or(u32::MAX))
        } else {
            AdaptiveRouting::OFF
        }
    }

    /// The GID selection policy these settings describe.
    pub fn gid_policy(&self) -> GidPolicy {
        GidPolicy {
            explicit_index: u32::try_from(self.gid_index).ok(),
            explicit_origin: None,
            family: self.addr_family,
            range: self.addr_range,
            roce_version: self.roce_version,
        }
    }

    /// The policy for one port: a `FERRO_GID_INDEX` entry for it (port-specific first) wins over
    /// `NCCL_IB_GID_INDEX`.
    pub fn gid_policy_for(&self, dev: &str, port: u8) -> GidPolicy {
        let mut p = self.gid_policy();
        let hit = self
            .gid_overrides
            .iter()
            .find(|o| o.dev == dev && o.port == Some(port))
            .or_else(|| {
                self.gid_overrides
                    .iter()
                    .find(|o| o.dev == dev && o.port.is_none())
            });
        if let Some(o) = hit {
            p.explicit_index = Some(o.index);
            p.explicit_origin = Some(match o.port {
                Some(port) => format!("FERRO_GID_INDEX={}:{port}={}", o.dev, o.index),
                None => format!("FERRO_GID_INDEX={}={}", o.dev, o.index),
            });
        }
        p
    }
}

#[cfg(test)]
mod hca_tests {
    use super::*;

    #[test]
    fn hca_prefix_exact_exclude_and_ports() {
        let f = HcaFilter::parse("mlx5_1").unwrap();
        assert!(f.allows("mlx5_1", 1) && f.allows("mlx5_10", 1) && !f.allows("mlx5_2", 1));
        let f = HcaFilter::parse("=mlx5_1").unwrap();
        assert!(f.allows("mlx5_1", 1) && !f.allows("mlx5_10", 1));
        let f = HcaFilter::parse("^mlx5_1").unwrap();
        assert!(!f.allows("mlx5_1", 1) && !f.allows("mlx5_10", 2) && f.allows("mlx5_2", 1));
        let f = HcaFilter::parse("^=rxe1").unwrap();
        assert!(f.allows("rxe0", 1) && !f.allows("rxe1", 1) && f.allows("rxe10", 1));
        let f = HcaFilter::parse("mlx5_0:1,mlx5_1:2").unwrap();
        assert!(
            f.allows("mlx5_0", 1)
                && !f.allows("mlx5_0", 2)
                && f.allows("mlx5_1", 2)
                && !f.allows("mlx5_1", 1)
        );
        assert!(HcaFilter::parse("").is_err());
        assert!(HcaFilter::parse("mlx5_0:x").is_err());
        assert!(HcaFilter::parse("^").is_err());
    }

    #[test]
    fn gid_overrides_parse_and_win_per_device() {
        let o = parse_gid_overrides("mlx5_0=3, mlx5_1:1=5").unwrap();
        assert_eq!(
            o,
            vec![
                GidOverride {
                    dev: "mlx5_0".into(),
                    port: None,
                    index: 3
                },
                GidOverride {
                    dev: "mlx5_1".into(),
                    port: Some(1),
                    index: 5
                },
            ]
        );
        assert!(parse_gid_overrides("mlx5_0").is_err());
        assert!(parse_gid_overrides("mlx5_0=x").is_err());
        assert!(parse_gid_overrides("=3").is_err());
        let c = Config {
            gid_index: 1,
            gid_overrides: o,
            ..Config::default()
        };
        assert_eq!(c.gid_policy_for("mlx5_0", 1).explicit_index, Some(3));
        assert_eq!(
            c.gid_policy_for("mlx5_0", 1).explicit_origin.as_deref(),
            Some("FERRO_GID_INDEX=mlx5_0=3")
        );
        assert_eq!(c.gid_policy_for("mlx5_1", 1).explicit_index, Some(5));
        assert_eq!(
            c.gid_policy_for("mlx5_1", 2).explicit_index,
            Some(1),
            "falls back to NCCL_IB_GID_INDEX"
        );
        assert_eq!(c.gid_policy_for("mlx5_9", 1).explicit_origin, None);
        assert!(c.summary().contains("FERRO_GID_INDEX=mlx5_0=3,mlx5_1:1=5"));
    }

    #[test]
    fn invalid_hca_and_override_warn_and_fall_back() {
        let get = |k: &str| match k {
            "NCCL_IB_HCA" => Some("mlx5_0:0".to_string()),
            "FERRO_GID_INDEX" => Some("nonsense".to_string()),
            _ => None,
        };
        let (c, w) = Config::from_lookup(&get);
        assert_eq!(c.hca, None);
        assert!(c.gid_overrides.is_empty());
        assert!(
            w.iter()
                .any(|x| x.starts_with("NCCL_IB_HCA=\"mlx5_0:0\"")
                    && x.contains("using every device")),
            "{w:?}"
        );
        assert!(w.iter().any(|x| x.starts_with("FERRO_GID_INDEX=")), "{w:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(pairs: &[(&str, &str)]) -> (Config, Vec<Warning>) {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(&|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_without_environment() {
        let (c, w) = parse(&[]);
        assert_eq!(c, Config::default());
        assert!(w.is_empty());
        assert_eq!(c.gid_policy().explicit_index, None);
    }

    #[test]
    fn valid_values_are_taken() {
        let (c, w) = parse(&[
            ("NCCL_IB_GID_INDEX", "3"),
            ("NCCL_IB_ADDR_FAMILY", "AF_INET6"),
            ("NCCL_IB_ROCE_VERSION_NUM", "1"),
            ("NCCL_IB_ADDR_RANGE", "192.0.2.0/24"),
        ]);
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(c.gid_index, 3);
        assert_eq!(c.addr_family, AddrFamily::V6);
        assert_eq!(c.roce_version, 1);
        assert_eq!(c.gid_policy().explicit_index, Some(3));
        assert!(c.summary().contains("NCCL_IB_ADDR_RANGE=192.0.2.0/24"));
    }

    #[test]
    fn invalid_values_warn_with_name_value_and_default() {
        let (c, w) = parse(&[
            ("NCCL_IB_GID_INDEX", "abc"),
            ("NCCL_IB_ROCE_VERSION_NUM", "7"),
            ("NCCL_IB_ADDR_FAMILY", "AF_UNIX"),
            ("NCCL_IB_ADDR_RANGE", "10.0.0.0/99"),
        ]);
        assert_eq!(c, Config::default());
        assert_eq!(w.len(), 4, "{w:?}");
        assert!(
            w[0].contains("NCCL_IB_GID_INDEX=\"abc\"") && w[0].contains("default -1"),
            "{}",
            w[0]
        );
        assert!(
            w[1].contains("NCCL_IB_ROCE_VERSION_NUM=7") && w[1].contains("default 2"),
            "{}",
            w[1]
        );
        assert!(w.iter().any(|x| x.contains("AF_UNIX")));
        assert!(w.iter().any(|x| x.contains("NCCL_IB_ADDR_RANGE")));
    }

    #[test]
    fn dmabuf_enable_follows_nccl_and_gdr_disable_takes_0_or_1() {
        let (c, w) = parse(&[("NCCL_DMABUF_ENABLE", " 0 "), ("FERRO_GDR_DISABLE", "1")]);
        assert!(!c.dmabuf_enable && c.gdr_disable && w.is_empty(), "{w:?}");
        // NCCL only tests for 0: any other integer leaves DMA-BUF on.
        let (c, w) = parse(&[("NCCL_DMABUF_ENABLE", "2"), ("FERRO_GDR_DISABLE", "")]);
        assert!(c.dmabuf_enable && !c.gdr_disable && w.is_empty(), "{w:?}");
        let (c, w) = parse(&[("NCCL_DMABUF_ENABLE", "yes"), ("FERRO_GDR_DISABLE", "2")]);
        assert!(c.dmabuf_enable && !c.gdr_disable);
        assert_eq!(
            w,
            vec![
                "NCCL_DMABUF_ENABLE=\"yes\" is not an integer; using the default 1".to_string(),
                "FERRO_GDR_DISABLE=2 is outside 0..=1; using the default 0".to_string(),
            ]
        );
    }

    #[test]
    fn every_variable_is_in_the_summary_once_with_its_default() {
        let s = Config::default().summary();
        for v in VARIABLES {
            assert_eq!(s.matches(&format!("{v}=")).count(), 1, "{v} in {s}");
        }
        assert!(
            s.starts_with("NCCL_IB_DISABLE=0 NCCL_IB_QPS_PER_CONNECTION=1 "),
            "{s}"
        );
        assert!(
            s.contains(" NCCL_IB_HCA=unset FERRO_GID_INDEX=unset"),
            "{s}"
        );
    }

    #[test]
    fn traffic_classes_and_the_service_level_are_unset_by_default_and_at_minus_one() {
        let (c, w) = parse(&[]);
        assert_eq!(
            (c.traffic_class, c.service_level, c.fifo_tc),
            (None, None, None)
        );
        assert!(w.is_empty());
        assert!(
            c.summary()
                .contains(" NCCL_IB_TC=-1 NCCL_IB_SL=-1 NCCL_IB_FIFO_TC=-1 "),
            "{}",
            c.summary()
        );
        let (c, w) = parse(&[
            ("NCCL_IB_TC", "-1"),
            ("NCCL_IB_SL", "-1"),
            ("NCCL_IB_FIFO_TC", "-1"),
        ]);
        assert_eq!(
            (c.traffic_class, c.service_level, c.fifo_tc),
            (None, None, None)
        );
        assert!(w.is_empty(), "{w:?}");
        let (c, w) = parse(&[
            ("NCCL_IB_TC", "0"),
            ("NCCL_IB_SL", "15"),
            ("NCCL_IB_FIFO_TC", "255"),
        ]);
        assert_eq!(
            (c.traffic_class, c.service_level, c.fifo_tc),
            (Some(0), Some(15), Some(255)),
            "0 is a value, not unset"
        );
        assert!(w.is_empty(), "{w:?}");
        assert!(
            c.summary()
                .contains(" NCCL_IB_TC=0 NCCL_IB_SL=15 NCCL_IB_FIFO_TC=255 ")
        );
    }

    #[test]
    fn a_traffic_class_or_service_level_out_of_range_warns_and_stays_unset() {
        let (c, w) = parse(&[
            ("NCCL_IB_TC", "256"),
            ("NCCL_IB_SL", "16"),
            ("NCCL_IB_FIFO_TC", "-2"),
        ]);
        assert_eq!(
            (c.traffic_class, c.service_level, c.fifo_tc),
            (None, None, None)
        );
        assert_eq!(
            w,
            vec![
                "NCCL_IB_TC=256 is neither -1 (not set) nor in 0..=255; using the default -1"
                    .to_string(),
                "NCCL_IB_SL=16 is neither -1 (not set) nor in 0..=15; using the default -1"
                    .to_string(),
                "NCCL_IB_FIFO_TC=-2 is neither -1 (not set) nor in 0..=255; using the default -1"
                    .to_string(),
            ]
        );
    }

    #[test]
    fn the_socket_interface_is_taken_as_given_and_empty_means_unset() {
        assert_eq!(parse(&[]).0.socket_ifname, None);
        assert_eq!(parse(&[("NCCL_SOCKET_IFNAME", "")]).0.socket_ifname, None);
        let (c, w) = parse(&[("NCCL_SOCKET_IFNAME", "^docker,lo")]);
        assert_eq!(c.socket_ifname.as_deref(), Some("^docker,lo"));
        assert!(w.is_empty(), "{w:?}");
        assert!(c.summary().contains(" NCCL_SOCKET_IFNAME=^docker,lo "));
    }

    #[test]
    fn recovery_is_on_for_30_s_unless_the_budget_or_ncclss_port_recovery_says_otherwise() {
        let secs = |pairs: &[(&str, &str)]| parse(pairs).0.recovery_budget().as_secs();
        assert_eq!(secs(&[]), 30);
        assert_eq!(secs(&[("NCCL_IB_RESILIENCY_PORT_RECOVERY", "1")]), 30);
        assert_eq!(secs(&[("NCCL_IB_RESILIENCY_PORT_RECOVERY", "0")]), 0);
        assert_eq!(
            secs(&[
                ("NCCL_IB_RESILIENCY_PORT_RECOVERY", "0"),
                ("FERRO_RECOVERY_BUDGET_S", "5")
            ]),
            5
        );
        assert_eq!(secs(&[("FERRO_RECOVERY_BUDGET_S", "0")]), 0);
        let (_, w) = parse(&[("FERRO_RECOVERY_BUDGET_S", "-1")]);
        assert_eq!(
            w,
            [
                "FERRO_RECOVERY_BUDGET_S=-1 is outside 0..=3600; using 30 s (0 with NCCL_IB_RESILIENCY_PORT_RECOVERY=0)"
            ]
        );
    }

    #[test]
    fn adaptive_routing_defaults_to_on_for_infiniband_and_off_for_roce() {
        let (c, w) = parse(&[]);
        assert!(w.is_empty(), "{w:?}");
        assert_eq!((c.adaptive_routing, c.ar_threshold), (None, 8192));
        assert_eq!(c.adaptive_routing(false), AdaptiveRouting::above(8192));
        assert_eq!(c.adaptive_routing(true), AdaptiveRouting::OFF);
        assert!(
            c.summary()
                .contains(" NCCL_IB_ADAPTIVE_ROUTING=auto NCCL_IB_AR_THRESHOLD=8192 "),
            "{}",
            c.summary()
        );
    }

    #[test]
    fn adaptive_routing_set_either_way_overrides_the_link_layer() {
        let (c, w) = parse(&[
            ("NCCL_IB_ADAPTIVE_ROUTING", "1"),
            ("NCCL_IB_AR_THRESHOLD", "65536"),
        ]);
        assert!(w.is_empty(), "{w:?}");
        for ethernet in [false, true] {
            assert_eq!(c.adaptive_routing(ethernet), AdaptiveRouting::above(65536));
        }
        assert!(c.summary().contains(" NCCL_IB_ADAPTIVE_ROUTING=1 "));
        let (c, _) = parse(&[("NCCL_IB_ADAPTIVE_ROUTING", "0")]);
        for ethernet in [false, true] {
            assert_eq!(c.adaptive_routing(ethernet), AdaptiveRouting::OFF);
        }
        // A threshold no request can pass: on, but it never applies.
        let (c, w) = parse(&[
            ("NCCL_IB_ADAPTIVE_ROUTING", "1"),
            ("NCCL_IB_AR_THRESHOLD", "8589934592"),
        ]);
        assert!(w.is_empty(), "{w:?}");
        assert!(!c.adaptive_routing(true).applies_to(u32::MAX));
    }

    #[test]
    fn invalid_adaptive_routing_settings_warn_and_keep_the_defaults() {
        let (c, w) = parse(&[
            ("NCCL_IB_ADAPTIVE_ROUTING", "2"),
            ("NCCL_IB_AR_THRESHOLD", "-1"),
        ]);
        assert_eq!((c.adaptive_routing, c.ar_threshold), (None, 8192));
        assert_eq!(
            w,
            vec![
                "NCCL_IB_ADAPTIVE_ROUTING=2 is outside 0..=1; using the link layer's default (1 on InfiniBand, 0 on RoCE)".to_string(),
                "NCCL_IB_AR_THRESHOLD=-1 is outside 0..=9223372036854775807; using the default 8192".to_string(),
            ]
        );
    }

    #[test]
    fn nccls_own_resiliency_tunables_are_said_not_to_apply_when_set() {
        let get = |name: &str| {
            (name == "NCCL_IB_RESILIENCY_PORT_RECOVERY_ACK_TIMEOUT").then(|| "1000".to_string())
        };
        let lines = Config::not_applicable(&get);
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0]
                .starts_with("NCCL_IB_RESILIENCY_PORT_RECOVERY_ACK_TIMEOUT=1000 does not apply: "),
            "{lines:?}"
        );
        assert!(Config::not_applicable(&|_| None).is_empty());
    }

    #[test]
    fn merging_and_returning_async_events_are_on_unless_set_to_zero() {
        let (c, w) = parse(&[]);
        assert!(c.merge_nics && c.return_async_events && w.is_empty());
        let (c, w) = parse(&[
            ("NCCL_IB_MERGE_NICS", "0"),
            ("NCCL_IB_RETURN_ASYNC_EVENTS", "0"),
        ]);
        assert!(!c.merge_nics && !c.return_async_events && w.is_empty());
        assert!(
            c.summary()
                .contains("NCCL_IB_MERGE_NICS=0 NCCL_IB_RETURN_ASYNC_EVENTS=0")
        );
        let (c, w) = parse(&[("NCCL_IB_RETURN_ASYNC_EVENTS", "2")]);
        assert!(c.return_async_events);
        assert!(
            w.len() == 1
                && w[0].contains("NCCL_IB_RETURN_ASYNC_EVENTS=2")
                && w[0].contains("default 1"),
            "{w:?}"
        );
    }
}
