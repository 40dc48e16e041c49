//! How each setting is parsed from its text and shown in the summary: the parsers the
//! `settings!` table names, the reading of one variable with its warning, and `Show`.

use super::{GidOverride, HcaFilter, Warning, parse_gid_overrides};
use ferro_verbs::sysfs::AddrFamily;
use std::net::IpAddr;

/// How a value appears in the summary (and as the default in a warning).
pub(super) trait Show {
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
pub(super) fn read<T: Show>(
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
pub(super) fn int<T: TryFrom<i64>>(min: i64, max: i64) -> impl Fn(&str) -> Result<T, String> {
    move |text| match text.parse::<i64>() {
        Ok(v) if (min..=max).contains(&v) => {
            T::try_from(v).map_err(|_| format!("{v} does not fit the setting's type"))
        }
        Ok(v) => Err(format!("{v} is outside {min}..={max}")),
        Err(_) => Err(format!("{text:?} is not an integer")),
    }
}

/// -1 (NCCL's "not set": `None`) or an integer in `min..=max`.
pub(super) fn unset_or(min: i64, max: i64) -> impl Fn(&str) -> Result<Option<u8>, String> {
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
pub(super) fn flag(text: &str) -> Result<bool, String> {
    int::<u8>(0, 1)(text).map(|v| v == 1)
}

/// 0 or 1, given (unset is the caller's default).
pub(super) fn some_flag(text: &str) -> Result<Option<bool>, String> {
    flag(text).map(Some)
}

/// Any integer; true unless 0.
pub(super) fn nonzero(text: &str) -> Result<bool, String> {
    int::<i64>(i64::MIN, i64::MAX)(text).map(|v| v != 0)
}

/// An integer in `min..=max`, kept as set (`None` when unset).
pub(super) fn opt_int<T: TryFrom<i64>>(
    min: i64,
    max: i64,
) -> impl Fn(&str) -> Result<Option<T>, String> {
    move |text| int::<T>(min, max)(text).map(Some)
}

/// Any text, taken as given.
pub(super) fn text(text: &str) -> Result<Option<String>, String> {
    Ok(Some(text.to_string()))
}

pub(super) fn addr_family(text: &str) -> Result<AddrFamily, String> {
    match text {
        "AF_INET" => Ok(AddrFamily::V4),
        "AF_INET6" => Ok(AddrFamily::V6),
        other => Err(format!("{other:?} is neither AF_INET nor AF_INET6")),
    }
}

pub(super) fn cidr(text: &str) -> Result<Option<(IpAddr, u8)>, String> {
    ferro_verbs::gid::parse_cidr(text)
        .map(Some)
        .map_err(|e| format!("{text:?} is not a CIDR range ({e})"))
}

pub(super) fn hca(text: &str) -> Result<Option<HcaFilter>, String> {
    HcaFilter::parse(text)
        .map(Some)
        .map_err(|e| format!("{text:?} is invalid ({e})"))
}

pub(super) fn gid_overrides(text: &str) -> Result<Vec<GidOverride>, String> {
    parse_gid_overrides(text).map_err(|e| format!("{text:?} is invalid ({e})"))
}
