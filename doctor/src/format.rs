//! Small formatting helpers shared by the renderers: byte sizes, GID names, wrapping.

use crate::*;
use ferro_verbs::sysfs::{AddrFamily, GidEntry, GidType};

/// `64 MiB`, `1.5 GiB`, `512 B`.
pub fn format_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut unit = 0;
    let mut div: u64 = 1;
    while unit + 1 < UNITS.len() && n / div >= 1024 {
        div *= 1024;
        unit += 1;
    }
    if n % div == 0 {
        format!("{} {}", n / div, UNITS[unit])
    } else {
        format!("{:.1} {}", n as f64 / div as f64, UNITS[unit])
    }
}

pub(crate) fn gid_type_name(t: GidType) -> &'static str {
    match t {
        GidType::Ib => "IB",
        GidType::RoceV1 => "RoCE v1",
        GidType::RoceV2 => "RoCE v2",
        GidType::Unknown => "unknown",
    }
}

pub(crate) fn family_name(g: &GidEntry) -> Option<&'static str> {
    g.family().map(|f| match f {
        AddrFamily::V4 => "v4",
        AddrFamily::V6 => "v6",
    })
}

/// Appends `text` word-wrapped at [`WIDTH`]: the first line after `first`, the others after `rest`.
/// Runs of whitespace become one space; a word longer than a line is never broken.
pub(crate) fn wrap(out: &mut String, first: &str, rest: &str, text: &str) {
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let options = textwrap::Options::new(WIDTH)
        .initial_indent(first)
        .subsequent_indent(rest)
        .break_words(false)
        .word_separator(textwrap::WordSeparator::AsciiSpace)
        .wrap_algorithm(textwrap::WrapAlgorithm::FirstFit);
    if words.is_empty() {
        out.push_str(first);
        out.push('\n');
        return;
    }
    for line in textwrap::wrap(&words, &options) {
        out.push_str(&line);
        out.push('\n');
    }
}

pub(crate) fn or_unset(v: Option<&str>) -> String {
    v.map_or("unset".to_string(), |s| format!("{s:?}"))
}
