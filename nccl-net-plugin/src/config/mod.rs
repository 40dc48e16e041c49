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

mod hca;
pub mod nccl;
mod parse;

pub use hca::{GidOverride, HcaEntry, HcaFilter, parse_gid_overrides};
pub use nccl::{NCCL_2_30, NcclVariable, Standing, VariableRow};
use parse::*;

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
    /// recovery may enter (a peer that stops again at a later epoch restarts it there) before
    /// the comm fails
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
    /// `NCCL_IB_MQP_RETRY_CNT`: how many times a QP state change that connects a QP (to RTR,
    /// to RTS) is tried again after it failed with a retryable error, at most; each retry waits
    /// without blocking ([`ferro_proto::qp_retry`]).
    mqp_retry_cnt: u32 = "NCCL_IB_MQP_RETRY_CNT", 34, int(0, 10_000);
    /// `NCCL_IB_MQP_RETRY_SLEEP_MSEC`: retry `k` of a failed QP state change is due this many
    /// milliseconds x `k` after the failure.
    mqp_retry_sleep_ms: u32 = "NCCL_IB_MQP_RETRY_SLEEP_MSEC", 100, int(0, 60_000);
    /// `NCCL_IB_MQP_RETRY_ALL`: nonzero retries every failed QP state change, not only one that
    /// timed out (`ETIMEDOUT`).
    mqp_retry_all: bool = "NCCL_IB_MQP_RETRY_ALL", false, nonzero;
    /// `NCCL_IB_WARN_RAIL_LOCAL`: nonzero says at INFO, at each connection, when the peer's
    /// (virtual) device has another member count than this side's, so that QPs of several
    /// members share one member of the other side ([`ferro_proto::route::leaves_rails`]).
    warn_rail_local: bool = "NCCL_IB_WARN_RAIL_LOCAL", false, nonzero;
    /// `NCCL_IB_SUBNET_AWARE_ROUTING`: nonzero puts the GIDs of the listener's first two RoCE
    /// members in the listen handle, and the connecting side (from the handle) and the accepting
    /// side (from the peer's `Connect`) use a device whose RoCE members are all on a subnet of
    /// the peer's, where the device NCCL named is not ([`ferro_proto::route`]).
    subnet_aware_routing: bool = "NCCL_IB_SUBNET_AWARE_ROUTING", false, nonzero;
    /// `NCCL_IB_SUBNET_PREFIX_LEN` (1..=32): the bits of IPv4-mapped RoCE GIDs compared by
    /// subnet-aware routing (other GIDs compare their 64-bit subnet prefix).
    subnet_prefix_len: u8 = "NCCL_IB_SUBNET_PREFIX_LEN", 24, int(1, 32);
    /// `NCCL_IB_ROUTABLE_FLID_GID_INDEX`: on InfiniBand, the GID index used (and sent to the
    /// peer) when the port's GID there has a nonzero FLID, else index 0; a peer on another
    /// subnet is then reached through the IB router by its FLID, with a GRH
    /// ([`ferro_proto::route::ib_route`]).
    routable_flid_gid_index: u32 = "NCCL_IB_ROUTABLE_FLID_GID_INDEX", 1, int(0, 65_535);
    /// `NCCL_IB_ECE_ENABLE`: 1 exchanges each QP's enhanced connection establishment options
    /// in the handshake (`ibv_query_ece` / `ibv_set_ece`) where the provider has them.
    ece_enable: bool = "NCCL_IB_ECE_ENABLE", true, flag;
    /// `NCCL_IB_MERGE_VFS`: 1 reports a virtual function's `pciPath` at its physical function
    /// (device number and function zeroed), so that NCCL's topology sees one NIC; 0 zeroes only
    /// the function ([`crate::rails::reported_pci_path`]).
    merge_vfs: bool = "NCCL_IB_MERGE_VFS", true, flag;
    /// `NCCL_IB_DEVICE_PCI_ORDER`: 1 lists the devices in the order of their PCI addresses (those
    /// without one last), so that nodes built alike number their devices alike; 0 keeps
    /// libibverbs' order ([`crate::rails::pci_order`]).
    device_pci_order: bool = "NCCL_IB_DEVICE_PCI_ORDER", true, flag;
    /// `NCCL_IB_QUERY_PORT_SPEED` (NCCL 2.30.7): 1 takes a port's speed from
    /// `ibv_query_port_speed` where libibverbs has it (rdma-core with `IBVERBS_1.16`), else
    /// from `ibv_query_port`'s speed and width; 0 always from the latter.
    query_port_speed: bool = "NCCL_IB_QUERY_PORT_SPEED", true, flag;
    /// `NCCL_IB_HCA` (NCCL 2.30's grammar, with rails and planes: [`HcaFilter`]).
    hca: Option<HcaFilter> = "NCCL_IB_HCA", None, hca, or "every device";
    /// `FERRO_GID_INDEX`: per-device GID indexes, overriding `NCCL_IB_GID_INDEX`.
    gid_overrides: Vec<GidOverride> = "FERRO_GID_INDEX", Vec::new(), gid_overrides,
        or "no per-device override";
}

/// Seconds one recovery in place may take when neither `FERRO_RECOVERY_BUDGET_S` nor
/// `NCCL_IB_RESILIENCY_PORT_RECOVERY` says otherwise.
pub const DEFAULT_RECOVERY_BUDGET_S: u32 = 30;

/// A rejected setting: `NCCL_IB_GID_INDEX="abc" is not an integer; using the default -1`.
pub type Warning = String;

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
        NCCL_2_30
            .iter()
            .filter_map(|v| match v.standing {
                Standing::NotApplicable(why) => Some((v.name, why)),
                _ => None,
            })
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

    /// The retry policy of failed QP state changes these settings describe.
    pub fn mqp_retry(&self) -> ferro_proto::qp_retry::RetryPolicy {
        ferro_proto::qp_retry::RetryPolicy {
            retries: self.mqp_retry_cnt,
            sleep: std::time::Duration::from_millis(u64::from(self.mqp_retry_sleep_ms)),
            all: self.mqp_retry_all,
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
mod tests;
