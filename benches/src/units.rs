//! Sizes in bytes as people write them (`64K`, `1M`) and as the tables print them.

use crate::error::{Error, Result};

/// "8 B", "4 KiB", "1 MiB", or plain bytes when not a whole unit.
pub(crate) fn fmt_size(b: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (u, n) in UNITS {
        if b >= u && b % u == 0 {
            return format!("{} {n}", b / u);
        }
    }
    format!("{b} B")
}

/// Parses "4096", "4K", "4KiB", "1M", "64MiB", "1G".
pub(crate) fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| Error::new(format!("bad size {s:?}")))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => return Err(Error::new(format!("bad size unit {other:?} in {s:?}"))),
    };
    n.checked_mul(mult)
        .ok_or_else(|| Error::new(format!("size {s:?} overflows")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4K").unwrap(), 4096);
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size(" 1g ").unwrap(), 1 << 30);
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("").is_err());
        assert_eq!(fmt_size(8), "8 B");
        assert_eq!(fmt_size(65536), "64 KiB");
        assert_eq!(fmt_size(4 << 20), "4 MiB");
        assert_eq!(fmt_size(1000), "1000 B");
    }
}
