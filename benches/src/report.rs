//! The renderers of a run's results: the nccl-tests-like table, JSON and CSV, and writing them.

use crate::error::{Context as _, Result};
use crate::model::{LatStats, Meta, Mode, OpCounts, Row};
use serde_json::{Map, Value, json};
use std::fmt::Write as _;
use std::path::Path;

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
        Mode::Bw | Mode::Rate | Mode::Comms => {
            let _ = writeln!(
                t,
                "# {:>12} {:>10} {:>12} {:>12} {:>12} {:>11} {:>11} {:>9} {:>9}",
                "size(B)",
                "count",
                "time(us)",
                "algbw(GB/s)",
                "msg/s",
                "sendpost/m",
                "recvpost/m",
                "polls/m",
                "allocs/m"
            );
            for r in rows {
                let o = |f: fn(&OpCounts) -> f64| {
                    r.ops.map_or("-".to_string(), |o| format!("{:.3}", f(&o)))
                };
                let _ = writeln!(
                    t,
                    "  {:>12} {:>10} {:>12.2} {:>12.6} {:>12.1} {:>11} {:>11} {:>9} {:>9}",
                    r.size,
                    r.count,
                    r.time_us,
                    r.algbw_gbs,
                    r.msg_rate,
                    o(|o| o.send_posts),
                    o(|o| o.recv_posts),
                    o(|o| o.polls),
                    o(|o| o.allocations)
                );
            }
            let _ = writeln!(
                t,
                "# time = mean time per message from the first to the last receive completion"
            );
            let _ = writeln!(
                t,
                "# sendpost/m, recvpost/m, polls/m, allocs/m: ibv_post_send and ibv_post_recv calls, CQ polls and plugin heap allocations per message, both processes together (the plugin's own counters)"
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

/// The run as JSON (`--json`).
pub(crate) fn to_json(meta: &Meta, rows: &[Row]) -> String {
    let results: Vec<Value> = rows
        .iter()
        .map(|r| {
            let mut f = Map::new();
            f.insert("size".into(), json!(r.size));
            f.insert("count".into(), json!(r.count));
            f.insert("elapsed_s".into(), num(r.elapsed_s));
            f.insert("time_us".into(), num(r.time_us));
            f.insert("algbw_gbs".into(), num(r.algbw_gbs));
            f.insert("msg_rate".into(), num(r.msg_rate));
            if let Some(l) = r.lat {
                f.insert("lat_median_us".into(), num(l.median_us));
                f.insert("lat_p99_us".into(), num(l.p99_us));
                f.insert("lat_min_us".into(), num(l.min_us));
                f.insert("lat_avg_us".into(), num(l.avg_us));
                f.insert("lat_max_us".into(), num(l.max_us));
                f.insert("ping_isend_us".into(), num(l.isend_us));
                f.insert("ping_send_done_us".into(), num(l.send_done_us));
            } else {
                f.insert("slots".into(), json!(r.slots));
            }
            if let Some(o) = r.ops {
                f.insert("send_posts_per_msg".into(), num(o.send_posts));
                f.insert("recv_posts_per_msg".into(), num(o.recv_posts));
                f.insert("cts_writes_per_msg".into(), num(o.cts_writes));
                f.insert("polls_per_msg".into(), num(o.polls));
                f.insert("empty_polls_per_msg".into(), num(o.empty_polls));
                f.insert("allocs_per_msg".into(), num(o.allocations));
            }
            Value::Object(f)
        })
        .collect();
    let doc = json!({
        "tool": "ferro-bench",
        "mode": meta.mode.name(),
        "plugin": meta.plugin_path,
        "plugin_name": meta.plugin_name,
        "device": meta.dev,
        "device_speed_mbps": meta.dev_speed_mbps,
        "qps_per_connection": meta.qps,
        "split_data_on_qps": meta.split,
        "window": meta.window,
        "target_s_per_size": num(meta.target_s),
        "setup_s": num(meta.setup_s),
        "label": meta.label,
        "results": results,
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
}

/// A finite number as JSON (non-finite values become null).
fn num(v: f64) -> Value {
    if v.is_finite() { json!(v) } else { Value::Null }
}

pub(crate) const CSV_HEADER: &str = "tool,mode,size,count,elapsed_s,time_us,algbw_gbs,msg_rate,lat_median_us,lat_p99_us,lat_min_us,lat_avg_us,lat_max_us,window,qps,split,device,label,send_posts_per_msg,recv_posts_per_msg,cts_writes_per_msg,polls_per_msg,empty_polls_per_msg,allocs_per_msg";

/// One per-message count as a CSV cell (empty without counters).
fn of(ops: Option<OpCounts>, f: fn(&OpCounts) -> f64) -> String {
    ops.map_or(String::new(), |o| format!("{:.4}", f(&o)))
}

/// The CSV file: [`CSV_HEADER`], then one record per row (fields quoted where they need it).
pub(crate) fn to_csv(meta: &Meta, rows: &[Row]) -> String {
    // Writing into a Vec cannot fail: the results are ignored.
    let mut w = csv::Writer::from_writer(Vec::new());
    let _ = w.write_record(CSV_HEADER.split(','));
    for r in rows {
        let l = r.lat;
        let lf =
            |f: fn(&LatStats) -> f64| l.as_ref().map_or(String::new(), |l| format!("{}", f(l)));
        let window = if r.mode == Mode::Lat { 1 } else { meta.window };
        let _ = w.write_record([
            "ferro-bench".to_string(),
            meta.mode.name().to_string(),
            r.size.to_string(),
            r.count.to_string(),
            r.elapsed_s.to_string(),
            r.time_us.to_string(),
            r.algbw_gbs.to_string(),
            r.msg_rate.to_string(),
            lf(|l| l.median_us),
            lf(|l| l.p99_us),
            lf(|l| l.min_us),
            lf(|l| l.avg_us),
            lf(|l| l.max_us),
            window.to_string(),
            meta.qps.to_string(),
            meta.split.to_string(),
            meta.dev.clone(),
            meta.label.clone(),
            of(r.ops, |o| o.send_posts),
            of(r.ops, |o| o.recv_posts),
            of(r.ops, |o| o.cts_writes),
            of(r.ops, |o| o.polls),
            of(r.ops, |o| o.empty_polls),
            of(r.ops, |o| o.allocations),
        ]);
    }
    String::from_utf8_lossy(&w.into_inner().unwrap_or_default()).into_owned()
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
        // The label keeps its comma and quotes: the record is quoted where it needs it, and
        // reads back with as many fields as the header.
        assert!(lines[1].ends_with(",rxe0,\"a,\"\"b\"\"\",,,,,,"), "{c}");
        let mut rd = csv::Reader::from_reader(c.as_bytes());
        let header = rd.headers().unwrap().clone();
        let rec = rd.records().next().unwrap().unwrap();
        assert_eq!(header.len(), rec.len(), "{c}");
        assert_eq!(
            &rec[header.iter().position(|h| h == "label").unwrap()],
            "a,\"b\""
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
