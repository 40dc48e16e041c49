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
            timeout: 20,
            retry_cnt: 7,
            traffic_class: 0,
            service_level: 0,
            pkey_index: 0,
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
        let cfg = Config {
            gid_index,
            addr_family,
            addr_range,
            roce_version,
            disable,
            qps_per_connection,
            split_data_on_qps,
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
            family: self.addr_family,
            range: self.addr_range,
            roce_version: self.roce_version,
        }
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
        )
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
}
