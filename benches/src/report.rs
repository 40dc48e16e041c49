//! Results: the rows, the nccl-tests-like table, JSON and CSV.

use crate::bench::Mode;
use crate::error::{Context as _, Error, Result};
use std::fmt::Write as _;
use std::path::Path;

/// Latency statistics of one size (one-way = half the round trip), microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct LatStats {
    pub(crate) median_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) min_us: f64,
    pub(crate) avg_us: f64,
    pub(crate) max_us: f64,
    /// Mean time in the ping's isend call (with its "not yet" retries).
    pub(crate) isend_us: f64,
    /// Mean time from the start of the round trip to the ping's send completion.
    pub(crate) send_done_us: f64,
}

/// Nearest-rank percentile of sorted samples (`p` in 0..=100).
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Median (mean of the middle two for an even count).
pub(crate) fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => 0.5 * (s[n / 2 - 1] + s[n / 2]),
    }
}

impl LatStats {
    pub(crate) fn from_samples(us: &[f64]) -> LatStats {
        let mut s = us.to_vec();
        s.sort_by(f64::total_cmp);
        if s.is_empty() {
            return LatStats::default();
        }
        LatStats {
            median_us: median(&s),
            p99_us: percentile(&s, 99.0),
            min_us: s[0],
            avg_us: s.iter().sum::<f64>() / s.len() as f64,
            max_us: s[s.len() - 1],
            isend_us: 0.0,
            send_done_us: 0.0,
        }
    }
}

/// One size's result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub(crate) mode: Mode,
    pub(crate) size: u64,
    /// Measured messages (bw: after the first completion) or round trips (lat).
    pub(crate) count: u64,
    pub(crate) elapsed_s: f64,
    /// Mean time per message (bw) or mean one-way latency (lat), µs.
    pub(crate) time_us: f64,
    /// GB/s (1e9 bytes): size per message time (bw), or size per median one-way time (lat).
    pub(crate) algbw_gbs: f64,
    /// Messages (bw) or round trips (lat) per second.
    pub(crate) msg_rate: f64,
    pub(crate) window: usize,
    pub(crate) slots: u64,
    pub(crate) lat: Option<LatStats>,
}

impl Row {
    pub(crate) fn bw(
        mode: Mode,
        size: u64,
        count: u64,
        elapsed_s: f64,
        window: usize,
        slots: u64,
    ) -> Row {
        let ok = count > 0 && elapsed_s > 0.0;
        Row {
            mode,
            size,
            count,
            elapsed_s,
            time_us: if ok {
                elapsed_s * 1e6 / count as f64
            } else {
                0.0
            },
            algbw_gbs: if ok {
                (count * size) as f64 / elapsed_s / 1e9
            } else {
                0.0
            },
            msg_rate: if ok { count as f64 / elapsed_s } else { 0.0 },
            window,
            slots,
            lat: None,
        }
    }

    pub(crate) fn lat(size: u64, count: u64, elapsed_s: f64, lat: LatStats) -> Row {
        Row {
            mode: Mode::Lat,
            size,
            count,
            elapsed_s,
            time_us: lat.avg_us,
            algbw_gbs: if lat.median_us > 0.0 {
                size as f64 / (lat.median_us * 1e-6) / 1e9
            } else {
                0.0
            },
            msg_rate: if elapsed_s > 0.0 {
                count as f64 / elapsed_s
            } else {
                0.0
            },
            window: 1,
            slots: 1,
            lat: Some(lat),
        }
    }
}

/// What a run was (printed in the header and stored with the results).
#[derive(Debug, Clone)]
pub(crate) struct Meta {
    pub(crate) mode: Mode,
    pub(crate) plugin_path: String,
    pub(crate) plugin_name: String,
    pub(crate) dev: String,
    pub(crate) dev_speed_mbps: i32,
    pub(crate) qps: u32,
    pub(crate) split: u32,
    pub(crate) window: usize,
    pub(crate) target_s: f64,
    pub(crate) label: String,
    pub(crate) setup_s: f64,
}

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

/// The nccl-tests-like table.
pub(crate) fn table(meta: &Meta, rows: &[Row]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "# ferro-bench {}: plugin {} ({}), device {} ({} Mb/s), window {}, QPs/connection {}, split {}, ~{:.1} s per size{}",
        meta.mode.name(),
        meta.plugin_name,
        meta.plugin_path,
        meta.dev,
        meta.dev_speed_mbps,
        if meta.mode == Mode::Lat {
            "1 (ping-pong)".to_string()
        } else {
            meta.window.to_string()
        },
        meta.qps,
        meta.split,
        meta.target_s,
        if meta.label.is_empty() {
            String::new()
        } else {
            format!(", label {}", meta.label)
        }
    );
    match meta.mode {
        Mode::Bw | Mode::Rate => {
            let _ = writeln!(
                t,
                "# {:>12} {:>10} {:>12} {:>12} {:>12}",
                "size(B)", "count", "time(us)", "algbw(GB/s)", "msg/s"
            );
            for r in rows {
                let _ = writeln!(
                    t,
                    "  {:>12} {:>10} {:>12.2} {:>12.6} {:>12.1}",
                    r.size, r.count, r.time_us, r.algbw_gbs, r.msg_rate
                );
            }
            let _ = writeln!(
                t,
                "# time = mean time per message from the first to the last receive completion"
            );
        }
        Mode::Lat => {
            let _ = writeln!(
                t,
                "# {:>12} {:>10} {:>12} {:>12} {:>12} {:>12}",
                "size(B)", "iters", "time(us)", "algbw(GB/s)", "lat(us)", "p99(us)"
            );
            for r in rows {
                let l = r.lat.unwrap_or_default();
                let _ = writeln!(
                    t,
                    "  {:>12} {:>10} {:>12.2} {:>12.6} {:>12.2} {:>12.2}",
                    r.size, r.count, r.time_us, r.algbw_gbs, l.median_us, l.p99_us
                );
            }
            let _ = writeln!(
                t,
                "# one-way latency = half the round trip; time = mean, lat = median, algbw = size / median"
            );
        }
    }
    t
}

/// JSON string escaping.
pub(crate) fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// A finite number as JSON (non-finite values become null).
pub(crate) fn json_num(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        "null".into()
    }
}

pub(crate) fn to_json(meta: &Meta, rows: &[Row]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{{");
    let _ = writeln!(o, "  \"tool\": \"ferro-bench\",");
    let _ = writeln!(o, "  \"mode\": {},", json_str(meta.mode.name()));
    let _ = writeln!(o, "  \"plugin\": {},", json_str(&meta.plugin_path));
    let _ = writeln!(o, "  \"plugin_name\": {},", json_str(&meta.plugin_name));
    let _ = writeln!(o, "  \"device\": {},", json_str(&meta.dev));
    let _ = writeln!(o, "  \"device_speed_mbps\": {},", meta.dev_speed_mbps);
    let _ = writeln!(o, "  \"qps_per_connection\": {},", meta.qps);
    let _ = writeln!(o, "  \"split_data_on_qps\": {},", meta.split);
    let _ = writeln!(o, "  \"window\": {},", meta.window);
    let _ = writeln!(o, "  \"target_s_per_size\": {},", json_num(meta.target_s));
    let _ = writeln!(o, "  \"setup_s\": {},", json_num(meta.setup_s));
    let _ = writeln!(o, "  \"label\": {},", json_str(&meta.label));
    let _ = writeln!(o, "  \"results\": [");
    for (i, r) in rows.iter().enumerate() {
        let mut f = vec![
            format!("\"size\": {}", r.size),
            format!("\"count\": {}", r.count),
            format!("\"elapsed_s\": {}", json_num(r.elapsed_s)),
            format!("\"time_us\": {}", json_num(r.time_us)),
            format!("\"algbw_gbs\": {}", json_num(r.algbw_gbs)),
            format!("\"msg_rate\": {}", json_num(r.msg_rate)),
        ];
        if let Some(l) = r.lat {
            f.push(format!("\"lat_median_us\": {}", json_num(l.median_us)));
            f.push(format!("\"lat_p99_us\": {}", json_num(l.p99_us)));
            f.push(format!("\"lat_min_us\": {}", json_num(l.min_us)));
            f.push(format!("\"lat_avg_us\": {}", json_num(l.avg_us)));
            f.push(format!("\"lat_max_us\": {}", json_num(l.max_us)));
            f.push(format!("\"ping_isend_us\": {}", json_num(l.isend_us)));
            f.push(format!(
                "\"ping_send_done_us\": {}",
                json_num(l.send_done_us)
            ));
        } else {
            f.push(format!("\"slots\": {}", r.slots));
        }
        let _ = writeln!(
            o,
            "    {{{}}}{}",
            f.join(", "),
            if i + 1 < rows.len() { "," } else { "" }
        );
    }
    let _ = writeln!(o, "  ]");
    let _ = writeln!(o, "}}");
    o
}

pub(crate) const CSV_HEADER: &str = "tool,mode,size,count,elapsed_s,time_us,algbw_gbs,msg_rate,lat_median_us,lat_p99_us,lat_min_us,lat_avg_us,lat_max_us,window,qps,split,device,label";

pub(crate) fn to_csv(meta: &Meta, rows: &[Row]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{CSV_HEADER}");
    let label = meta.label.replace([',', '\n', '"'], " ");
    for r in rows {
        let l = r.lat;
        let lf =
            |f: fn(&LatStats) -> f64| l.as_ref().map_or(String::new(), |l| format!("{}", f(l)));
        let _ = writeln!(
            o,
            "ferro-bench,{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            meta.mode.name(),
            r.size,
            r.count,
            r.elapsed_s,
            r.time_us,
            r.algbw_gbs,
            r.msg_rate,
            lf(|l| l.median_us),
            lf(|l| l.p99_us),
            lf(|l| l.min_us),
            lf(|l| l.avg_us),
            lf(|l| l.max_us),
            if r.mode == Mode::Lat { 1 } else { meta.window },
            meta.qps,
            meta.split,
            meta.dev.replace(',', " "),
            label
        );
    }
    o
}

pub(crate) fn write_file(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).ctx(format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, text).ctx(format!("writing {}", path.display()))
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

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&[3.0], 99.0), 3.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        let s = LatStats::from_samples(&[5.0, 1.0, 3.0]);
        assert_eq!(
            (s.min_us, s.median_us, s.max_us, s.avg_us),
            (1.0, 3.0, 5.0, 3.0)
        );
    }

    #[test]
    fn rows_and_outputs() {
        let r = Row::bw(Mode::Bw, 1 << 20, 100, 2.0, 32, 32);
        assert!((r.algbw_gbs - 0.0524288).abs() < 1e-9);
        assert!((r.msg_rate - 50.0).abs() < 1e-9);
        assert!((r.time_us - 20_000.0).abs() < 1e-6);
        let meta = Meta {
            mode: Mode::Bw,
            plugin_path: "/x/lib.so".into(),
            plugin_name: "Ferro".into(),
            dev: "rxe0".into(),
            dev_speed_mbps: 10000,
            qps: 1,
            split: 0,
            window: 32,
            target_s: 1.0,
            label: "a,\"b\"".into(),
            setup_s: 0.5,
        };
        let j = to_json(&meta, std::slice::from_ref(&r));
        assert!(j.contains("\"label\": \"a,\\\"b\\\"\""), "{j}");
        assert!(j.contains("\"size\": 1048576"));
        let c = to_csv(&meta, &[r]);
        let lines: Vec<&str> = c.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[0].split(',').count(),
            lines[1].split(',').count(),
            "{c}"
        );
        let l = Row::lat(8, 10, 1.0, LatStats::from_samples(&[2.0, 4.0]));
        let t = table(
            &Meta {
                mode: Mode::Lat,
                ..meta
            },
            &[l],
        );
        assert!(t.contains("p99(us)"));
    }
}
