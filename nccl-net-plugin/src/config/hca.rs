//! The device-selection syntaxes: `NCCL_IB_HCA` (which devices and ports become NCCL devices)
//! and `FERRO_GID_INDEX` (per-device GID indexes).

/// `NCCL_IB_HCA`: `[^][=]name[:port[:rail[:plane]]][,...]` (NCCL 2.30's grammar). Names are
/// prefixes unless `=` is given; `^` turns the list into an exclusion list. An empty or absent
/// port is any port; the rail and plane (non-negative integers) a device of an inclusion list
/// gets are reported to NCCL as its `railId` / `planeId` (v12).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HcaFilter {
    pub raw: String,
    pub exclude: bool,
    pub exact: bool,
    pub entries: Vec<HcaEntry>,
}

/// One entry of `NCCL_IB_HCA`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HcaEntry {
    pub name: String,
    /// `None`: any port.
    pub port: Option<u8>,
    pub rail: Option<u16>,
    pub plane: Option<u16>,
}

/// The largest rail or plane id an entry may give: ids travel as 16-bit signed values, and bit
/// 14 of a plane id marks a fused device ([`crate::rails::PLANE_VIRTUAL_BIT`]).
const MAX_RAIL: u16 = i16::MAX as u16;
const MAX_PLANE: u16 = (1 << 14) - 1;

impl HcaEntry {
    fn parse(item: &str) -> Result<HcaEntry, String> {
        let mut parts = item.split(':');
        let name = parts.next().unwrap_or_default();
        if name.is_empty() {
            return Err(format!("empty device name in {item:?}"));
        }
        let field = |text: Option<&str>, what: &str, min: u16, max: u16| match text {
            None | Some("") => Ok(None),
            Some(t) => t
                .parse::<u16>()
                .ok()
                .filter(|v| (min..=max).contains(v))
                .map(Some)
                .ok_or_else(|| format!("bad {what} {t:?} in {item:?} ({min}..={max})")),
        };
        let port = field(parts.next(), "port", 1, u16::from(u8::MAX))?
            .map(|p| u8::try_from(p).unwrap_or(u8::MAX));
        let rail = field(parts.next(), "rail", 0, MAX_RAIL)?;
        let plane = field(parts.next(), "plane", 0, MAX_PLANE)?;
        if parts.next().is_some() {
            return Err(format!("{item:?} has more than name:port:rail:plane"));
        }
        Ok(HcaEntry {
            name: name.to_string(),
            port,
            rail,
            plane,
        })
    }
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
        let entries = rest
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(HcaEntry::parse)
            .collect::<Result<Vec<_>, _>>()?;
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

    /// The first entry naming `dev` port `port`.
    fn entry(&self, dev: &str, port: u8) -> Option<&HcaEntry> {
        self.entries.iter().find(|e| {
            let name_ok = if self.exact {
                dev == e.name
            } else {
                dev.starts_with(e.name.as_str())
            };
            name_ok && e.port.is_none_or(|p| p == port)
        })
    }

    /// Whether the plugin may use `dev` port `port`.
    pub fn allows(&self, dev: &str, port: u8) -> bool {
        self.entry(dev, port).is_some() != self.exclude
    }

    /// The `(rail, plane)` the list gives `dev` port `port` (-1 each where none is given, and
    /// always for an exclusion list), as NCCL reports them.
    pub fn rail_plane(&self, dev: &str, port: u8) -> (i16, i16) {
        let id = |v: Option<u16>| {
            v.and_then(|v| i16::try_from(v).ok())
                .unwrap_or(crate::rails::UNDEF)
        };
        match self.entry(dev, port).filter(|_| !self.exclude) {
            Some(e) => (id(e.rail), id(e.plane)),
            None => (crate::rails::UNDEF, crate::rails::UNDEF),
        }
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

#[cfg(test)]
mod hca_tests {
    use super::*;
    use crate::config::Config;

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
    fn hca_entries_take_a_rail_and_a_plane_after_the_port() {
        let f = HcaFilter::parse("=mlx5_0:1:3:0,mlx5_1::3:1,mlx5_2:1,mlx5_3:::2").unwrap();
        assert_eq!(f.rail_plane("mlx5_0", 1), (3, 0));
        assert!(!f.allows("mlx5_0", 2), "the port still filters");
        assert!(f.allows("mlx5_1", 2), "an empty port is any port");
        assert_eq!(f.rail_plane("mlx5_1", 2), (3, 1));
        assert_eq!(f.rail_plane("mlx5_2", 1), (-1, -1));
        assert_eq!(f.rail_plane("mlx5_3", 1), (-1, 2));
        assert_eq!(f.rail_plane("mlx5_9", 1), (-1, -1));
        let f = HcaFilter::parse("^mlx5_0:1:3:0").unwrap();
        assert_eq!(
            f.rail_plane("mlx5_1", 1),
            (-1, -1),
            "an exclusion list gives no ids"
        );
        for bad in [
            "mlx5_0:1:x",
            "mlx5_0:1:-1",
            "mlx5_0:1:0:16384",
            "mlx5_0:1:0:0:0",
            "mlx5_0:256",
        ] {
            assert!(HcaFilter::parse(bad).is_err(), "{bad}");
        }
        assert!(HcaFilter::parse("mlx5_0:1:32767:16383").is_ok());
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
