//! Environment configuration: NCCL's own `NCCL_IB_*` names with NCCL's meaning, read once.
//!
//! Every value is validated; an invalid one produces a warning naming the variable, the value and
//! the default used instead. Parsing is pure (`Config::from_lookup`) so it is unit-tested without
//! touching the process environment.

use ferro_verbs::gid::GidPolicy;
use ferro_verbs::sysfs::AddrFamily;
use std::net::IpAddr;

/// The effective configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `NCCL_IB_GID_INDEX` (-1 = automatic).
    pub gid_index: i64,
    /// `NCCL_IB_ADDR_FAMILY`.
    pub addr_family: AddrFamily,
    /// `NCCL_IB_ADDR_RANGE` (CIDR).
    pub addr_range: Option<(IpAddr, u8)>,
    /// `NCCL_IB_ROCE_VERSION_NUM`.
    pub roce_version: u8,
    /// `NCCL_IB_DISABLE`.
    pub disable: bool,
    /// `NCCL_IB_QPS_PER_CONNECTION` (1..=128).
    pub qps_per_connection: u16,
    /// `NCCL_IB_SPLIT_DATA_ON_QPS`.
    pub split_data_on_qps: bool,
    /// `NCCL_IB_MERGE_NICS`: whether `makeVDevice` may fuse devices into a virtual NIC.
    pub merge_nics: bool,
    /// `NCCL_IB_RETURN_ASYNC_EVENTS`: whether a fatal asynchronous event (a port down, a QP or
    /// CQ error, a device error) fails the comms it affects; 0 only logs it.
    pub return_async_events: bool,
    /// `NCCL_IB_TIMEOUT` (ACK timeout exponent, 1..=31).
    pub timeout: u8,
    /// `NCCL_IB_RETRY_CNT` (0..=7).
    pub retry_cnt: u8,
    /// `NCCL_IB_TC` (traffic class, 0..=255).
    pub traffic_class: u8,
    /// `NCCL_IB_SL` (service level, 0..=15).
    pub service_level: u8,
    /// `NCCL_IB_PKEY` (P_Key *index*).
    pub pkey_index: u16,
    /// `NCCL_IB_HCA`.
    pub hca: Option<HcaFilter>,
    /// `NCCL_IB_PCI_RELAXED_ORDERING`: 0 off, 1 on, 2 on when libibverbs has `ibv_reg_mr_iova2`.
    pub relaxed_ordering: u8,
    /// `NCCL_GDR_FLUSH_DISABLE`.
    pub gdr_flush_disable: bool,
    /// `NCCL_IB_USE_INLINE`: clear-to-send writes of one entry go inline (`IBV_SEND_INLINE`;
    /// the QPs are created with room for one 64-byte entry), as NCCL's IB transport does.
    pub use_inline: bool,
    /// `FERRO_FLUSH_HOST`: also flush receives into host memory (diagnostics and tests of the
    /// flush path on NICs without GPUDirect RDMA).
    pub flush_host: bool,
    /// `FERRO_GID_INDEX`: per-device GID indexes, overriding `NCCL_IB_GID_INDEX`.
    pub gid_overrides: Vec<GidOverride>,
    /// `FERRO_STALL_WARN_S`: seconds without progress before a comm with work outstanding
    /// logs a stall warning (then again at doubling intervals); 0 disables.
    pub stall_warn_s: u32,
    /// `NCCL_SOCKET_IFNAME`: which interfaces the out-of-band listener may bind (NCCL's
    /// syntax, matched by `oob::listen_ip`); `None` when unset or empty.
    pub socket_ifname: Option<String>,
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

impl Default for Config {
    fn default() -> Self {
        Config {
            gid_index: -1,
            addr_family: AddrFamily::V4,
            addr_range: None,
            roce_version: 2,
            disable: false,
            qps_per_connection: 1,
            split_data_on_qps: false,
            merge_nics: true,
            return_async_events: true,
            timeout: 20,
            retry_cnt: 7,
            traffic_class: 0,
            service_level: 0,
            pkey_index: 0,
            hca: None,
            relaxed_ordering: 2,
            gdr_flush_disable: false,
            use_inline: false,
            flush_host: false,
            gid_overrides: Vec::new(),
            stall_warn_s: 60,
            socket_ifname: None,
        }
    }
}

/// A rejected setting: `"NCCL_IB_GID_INDEX=abc is not an integer; using the default -1"`.
pub type Warning = String;

fn int_in(
    get: &dyn Fn(&str) -> Option<String>,
    warnings: &mut Vec<Warning>,
    name: &str,
    default: i64,
    min: i64,
    max: i64,
) -> i64 {
    let Some(raw) = get(name) else { return default };
    let text = raw.trim();
    if text.is_empty() {
        return default;
    }
    match text.parse::<i64>() {
        Ok(v) if (min..=max).contains(&v) => v,
        Ok(v) => {
            warnings.push(format!(
                "{name}={v} is outside {min}..={max}; using the default {default}"
            ));
            default
        }
        Err(_) => {
            warnings.push(format!(
                "{name}={raw:?} is not an integer; using the default {default}"
            ));
            default
        }
    }
}

impl Config {
    /// Reads the configuration through `get` (the environment in production).
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> (Config, Vec<Warning>) {
        let mut w = Vec::new();
        let d = Config::default();
        let gid_index = int_in(get, &mut w, "NCCL_IB_GID_INDEX", d.gid_index, -1, 65535);
        let roce_version = int_in(get, &mut w, "NCCL_IB_ROCE_VERSION_NUM", 2, 1, 2) as u8;
        let disable = int_in(get, &mut w, "NCCL_IB_DISABLE", 0, 0, 1) == 1;
        let qps_per_connection =
            int_in(get, &mut w, "NCCL_IB_QPS_PER_CONNECTION", 1, 1, 128) as u16;
        let split_data_on_qps = int_in(get, &mut w, "NCCL_IB_SPLIT_DATA_ON_QPS", 0, 0, 1) == 1;
        let merge_nics = int_in(get, &mut w, "NCCL_IB_MERGE_NICS", 1, 0, 1) == 1;
        let return_async_events = int_in(get, &mut w, "NCCL_IB_RETURN_ASYNC_EVENTS", 1, 0, 1) == 1;
        let timeout = int_in(get, &mut w, "NCCL_IB_TIMEOUT", i64::from(d.timeout), 1, 31) as u8;
        let retry_cnt = int_in(
            get,
            &mut w,
            "NCCL_IB_RETRY_CNT",
            i64::from(d.retry_cnt),
            0,
            7,
        ) as u8;
        let traffic_class = int_in(get, &mut w, "NCCL_IB_TC", 0, 0, 255) as u8;
        let service_level = int_in(get, &mut w, "NCCL_IB_SL", 0, 0, 15) as u8;
        let pkey_index = int_in(get, &mut w, "NCCL_IB_PKEY", 0, 0, 65535) as u16;
        let addr_family = match get("NCCL_IB_ADDR_FAMILY").as_deref().map(str::trim) {
            None | Some("") => d.addr_family,
            Some("AF_INET") => AddrFamily::V4,
            Some("AF_INET6") => AddrFamily::V6,
            Some(other) => {
                w.push(format!("NCCL_IB_ADDR_FAMILY={other:?} is neither AF_INET nor AF_INET6; using the default AF_INET"));
                d.addr_family
            }
        };
        let addr_range = match get("NCCL_IB_ADDR_RANGE").as_deref().map(str::trim) {
            None | Some("") => None,
            Some(text) => match ferro_verbs::gid::parse_cidr(text) {
                Ok(r) => Some(r),
                Err(e) => {
                    w.push(format!(
                        "NCCL_IB_ADDR_RANGE={text:?} is not a CIDR range ({e}); using no range"
                    ));
                    None
                }
            },
        };
        let hca = match get("NCCL_IB_HCA").as_deref().map(str::trim) {
            None | Some("") => None,
            Some(text) => match HcaFilter::parse(text) {
                Ok(f) => Some(f),
                Err(e) => {
                    w.push(format!(
                        "NCCL_IB_HCA={text:?} is invalid ({e}); using every device"
                    ));
                    None
                }
            },
        };
        let gid_overrides = match get("FERRO_GID_INDEX").as_deref().map(str::trim) {
            None | Some("") => Vec::new(),
            Some(text) => parse_gid_overrides(text).unwrap_or_else(|e| {
                w.push(format!(
                    "FERRO_GID_INDEX={text:?} is invalid ({e}); using no per-device override"
                ));
                Vec::new()
            }),
        };
        let relaxed_ordering = int_in(get, &mut w, "NCCL_IB_PCI_RELAXED_ORDERING", 2, 0, 2) as u8;
        let gdr_flush_disable = int_in(get, &mut w, "NCCL_GDR_FLUSH_DISABLE", 0, 0, 1) == 1;
        let use_inline = int_in(get, &mut w, "NCCL_IB_USE_INLINE", 0, 0, 1) == 1;
        let flush_host = int_in(get, &mut w, "FERRO_FLUSH_HOST", 0, 0, 1) == 1;
        let stall_warn_s = int_in(get, &mut w, "FERRO_STALL_WARN_S", 60, 0, 86_400) as u32;
        let socket_ifname = get("NCCL_SOCKET_IFNAME").filter(|v| !v.is_empty());
        let cfg = Config {
            socket_ifname,
            stall_warn_s,
            relaxed_ordering,
            gdr_flush_disable,
            use_inline,
            flush_host,
            hca,
            gid_overrides,
            gid_index,
            addr_family,
            addr_range,
            roce_version,
            disable,
            qps_per_connection,
            split_data_on_qps,
            merge_nics,
            return_async_events,
            timeout,
            retry_cnt,
            traffic_class,
            service_level,
            pkey_index,
        };
        (cfg, w)
    }

    /// Reads the process environment.
    pub fn from_env() -> (Config, Vec<Warning>) {
        Self::from_lookup(&|k| std::env::var(k).ok())
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

    /// One line with every effective value, for the INFO log and the doctor.
    pub fn summary(&self) -> String {
        let range = self
            .addr_range
            .map_or("unset".to_string(), |(ip, p)| format!("{ip}/{p}"));
        format!(
            "NCCL_IB_DISABLE={} NCCL_IB_QPS_PER_CONNECTION={} NCCL_IB_SPLIT_DATA_ON_QPS={} NCCL_IB_TIMEOUT={} NCCL_IB_RETRY_CNT={} NCCL_IB_TC={} NCCL_IB_SL={} NCCL_IB_PKEY={} NCCL_IB_GID_INDEX={} NCCL_IB_ADDR_FAMILY={} NCCL_IB_ADDR_RANGE={} NCCL_IB_ROCE_VERSION_NUM={}",
            u8::from(self.disable),
            self.qps_per_connection,
            u8::from(self.split_data_on_qps),
            self.timeout,
            self.retry_cnt,
            self.traffic_class,
            self.service_level,
            self.pkey_index,
            self.gid_index,
            if self.addr_family == AddrFamily::V4 {
                "AF_INET"
            } else {
                "AF_INET6"
            },
            range,
            self.roce_version
        ) + &format!(
            " NCCL_IB_MERGE_NICS={} NCCL_IB_RETURN_ASYNC_EVENTS={} NCCL_IB_PCI_RELAXED_ORDERING={} NCCL_GDR_FLUSH_DISABLE={} NCCL_IB_USE_INLINE={} FERRO_FLUSH_HOST={} FERRO_STALL_WARN_S={} NCCL_IB_HCA={} FERRO_GID_INDEX={}",
            u8::from(self.merge_nics),
            u8::from(self.return_async_events),
            self.relaxed_ordering,
            u8::from(self.gdr_flush_disable),
            u8::from(self.use_inline),
            u8::from(self.flush_host),
            self.stall_warn_s,
            self.hca.as_ref().map_or("unset", |h| h.raw.as_str()),
            if self.gid_overrides.is_empty() {
                "unset".to_string()
            } else {
                self.gid_overrides
                    .iter()
                    .map(|o| match o.port {
                        Some(p) => format!("{}:{p}={}", o.dev, o.index),
                        None => format!("{}={}", o.dev, o.index),
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            }
        )
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
    fn the_socket_interface_is_taken_as_given_and_empty_means_unset() {
        assert_eq!(parse(&[]).0.socket_ifname, None);
        assert_eq!(parse(&[("NCCL_SOCKET_IFNAME", "")]).0.socket_ifname, None);
        let (c, w) = parse(&[("NCCL_SOCKET_IFNAME", "^docker,lo")]);
        assert_eq!(c.socket_ifname.as_deref(), Some("^docker,lo"));
        assert!(w.is_empty(), "{w:?}");
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
