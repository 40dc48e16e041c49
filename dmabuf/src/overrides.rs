//! Environment overrides for GPU-memory registration, read through a lookup closure.
//!
//! - `NCCL_DMABUF_ENABLE` (NCCL's own variable, default 1): an integer; 0 turns DMA-BUF off,
//!   any other integer leaves it on (NCCL's `ncclParamDmaBufEnable() == 0` test).
//! - `FERRO_GDR_DISABLE` (this plugin's, default 0): 1 turns GPUDirect RDMA off entirely, both
//!   the DMA-BUF and the nvidia-peermem path, so NCCL stages through host memory.
//!
//! Unset and empty values mean the default. An invalid value gives a warning naming the variable,
//! the value and the default used instead, in the wording of the plugin's `config.rs`.

/// `NCCL_DMABUF_ENABLE`.
pub const ENV_DMABUF_ENABLE: &str = "NCCL_DMABUF_ENABLE";
/// `FERRO_GDR_DISABLE`.
pub const ENV_GDR_DISABLE: &str = "FERRO_GDR_DISABLE";

/// The effective overrides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overrides {
    /// `NCCL_DMABUF_ENABLE != 0`.
    pub dmabuf_enable: bool,
    /// `FERRO_GDR_DISABLE == 1`.
    pub gdr_disable: bool,
    /// One line per rejected value, for the plugin's WARN log.
    pub warnings: Vec<String>,
}

impl Default for Overrides {
    fn default() -> Self {
        Overrides {
            dmabuf_enable: true,
            gdr_disable: false,
            warnings: Vec::new(),
        }
    }
}

/// Reads an integer variable; `None` when unset or empty, or (with a warning) when invalid.
fn int_var(
    get: &dyn Fn(&str) -> Option<String>,
    warnings: &mut Vec<String>,
    name: &str,
    default: i64,
    range: Option<(i64, i64)>,
) -> Option<i64> {
    let raw = get(name)?;
    let text = raw.trim();
    if text.is_empty() {
        return None;
    }
    match text.parse::<i64>() {
        Ok(v) => match range {
            Some((min, max)) if !(min..=max).contains(&v) => {
                warnings.push(format!(
                    "{name}={v} is outside {min}..={max}; using the default {default}"
                ));
                None
            }
            _ => Some(v),
        },
        Err(_) => {
            warnings.push(format!(
                "{name}={raw:?} is not an integer; using the default {default}"
            ));
            None
        }
    }
}

impl Overrides {
    /// Reads both variables through `get` (the process environment in production).
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Overrides {
        let mut warnings = Vec::new();
        let dmabuf_enable =
            int_var(get, &mut warnings, ENV_DMABUF_ENABLE, 1, None).unwrap_or(1) != 0;
        let gdr_disable =
            int_var(get, &mut warnings, ENV_GDR_DISABLE, 0, Some((0, 1))).unwrap_or(0) == 1;
        Overrides {
            dmabuf_enable,
            gdr_disable,
            warnings,
        }
    }

    /// Reads the process environment.
    pub fn from_env() -> Overrides {
        Self::from_lookup(&|k| std::env::var(k).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(pairs: &[(&str, &str)]) -> Overrides {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        Overrides::from_lookup(&|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_when_unset_or_empty() {
        assert_eq!(parse(&[]), Overrides::default());
        assert_eq!(
            parse(&[(ENV_DMABUF_ENABLE, ""), (ENV_GDR_DISABLE, "  ")]),
            Overrides::default()
        );
    }

    #[test]
    fn dmabuf_enable_follows_nccl() {
        assert!(!parse(&[(ENV_DMABUF_ENABLE, "0")]).dmabuf_enable);
        assert!(!parse(&[(ENV_DMABUF_ENABLE, " 0 ")]).dmabuf_enable);
        assert!(parse(&[(ENV_DMABUF_ENABLE, "1")]).dmabuf_enable);
        // NCCL only tests for 0.
        let o = parse(&[(ENV_DMABUF_ENABLE, "2")]);
        assert!(o.dmabuf_enable);
        assert!(o.warnings.is_empty());
    }

    #[test]
    fn gdr_disable() {
        let o = parse(&[(ENV_GDR_DISABLE, "1")]);
        assert!(o.gdr_disable && o.dmabuf_enable && o.warnings.is_empty());
        assert!(!parse(&[(ENV_GDR_DISABLE, "0")]).gdr_disable);
    }

    #[test]
    fn invalid_values_warn_with_name_value_and_default() {
        let o = parse(&[(ENV_DMABUF_ENABLE, "yes"), (ENV_GDR_DISABLE, "2")]);
        assert!(o.dmabuf_enable, "invalid value keeps the default");
        assert!(!o.gdr_disable, "out-of-range value keeps the default");
        assert_eq!(
            o.warnings,
            vec![
                "NCCL_DMABUF_ENABLE=\"yes\" is not an integer; using the default 1".to_string(),
                "FERRO_GDR_DISABLE=2 is outside 0..=1; using the default 0".to_string(),
            ]
        );
        let o = parse(&[(ENV_GDR_DISABLE, "true")]);
        assert!(!o.gdr_disable);
        assert_eq!(
            o.warnings,
            vec!["FERRO_GDR_DISABLE=\"true\" is not an integer; using the default 0".to_string()]
        );
    }
}
