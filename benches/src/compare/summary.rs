//! The comparison: per-size medians side by side, ratios per round, the summary lines, the
//! CSV and the JSON fields.

use super::data::{Cfg, Data, Series, cfg_name};
use crate::model::median;
use crate::units::fmt_size;
use serde_json::Value;
use std::collections::BTreeSet;
use std::fmt::Write as _;

pub(super) fn cell(v: Option<f64>, prec: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.prec$}"))
}

/// A CSV value: empty when missing.
pub(super) fn csv_cell(v: Option<f64>) -> String {
    v.map_or(String::new(), |v| format!("{v}"))
}

pub(super) fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// `num / den` at one size: the median of the per-round ratios where both were measured in
/// the same round (back to back, so a change of the host's load between rounds cancels out),
/// else the ratio of the medians.
pub(super) fn pratio(num: Option<&Series>, den: Option<&Series>, size: u64) -> Option<f64> {
    let (n, d) = (num?, den?);
    let per_round: Vec<f64> = n
        .samples
        .get(&size)?
        .iter()
        .filter_map(|&(r, v)| ratio(Some(v), d.in_round(size, r?)))
        .collect();
    if per_round.is_empty() {
        ratio(n.get(size), d.get(size))
    } else {
        Some(median(&per_round))
    }
}

/// Everything the report says, computed once.
#[derive(Debug, Default)]
pub(super) struct Summary {
    pub(super) text: String,
    pub(super) json_fields: Vec<(String, Value)>,
    pub(super) csv: String,
}

pub(super) fn build(d: &Data) -> Summary {
    let mut t = String::new();
    let mut js: Vec<(String, Value)> = Vec::new();
    let mut csv = String::from("table,size,column,value\n");
    let base_cfg: Option<Cfg> = d
        .fb_bw
        .keys()
        .copied()
        .filter(|c| c.0 == 1)
        .max_by_key(|c| (c.2, u32::MAX - c.1));
    let others: Vec<Cfg> = d
        .fb_bw
        .keys()
        .copied()
        .filter(|c| Some(*c) != base_cfg)
        .collect();
    let write = d.pt_bw.get("ib_write_bw");
    let send = d.pt_bw.get("ib_send_bw");
    let base = base_cfg.and_then(|c| d.fb_bw.get(&c));

    // ---- bandwidth table
    let mut sizes: BTreeSet<u64> = BTreeSet::new();
    for s in d.pt_bw.values().chain(d.fb_bw.values()) {
        sizes.extend(s.sizes());
    }
    let _ = writeln!(
        t,
        "Bandwidth, GB/s (1e9 B/s; perftest's MiB/s converted), median of runs; ratios (/write, /send, /1QP) = median of the per-round ratios"
    );
    let mut hdr = vec![
        "size".to_string(),
        "ib_write_bw".into(),
        "ib_send_bw".into(),
        base_cfg.map_or("ferro 1QP".into(), cfg_name),
        "/write".into(),
        "/send".into(),
    ];
    for c in &others {
        hdr.push(cfg_name(*c));
        hdr.push("/1QP".into());
    }
    hdr.push("ferro msg/s".into());
    hdr.push("write msg/s".into());
    hdr.push("runs".into());
    let widths: Vec<usize> = hdr.iter().map(|h| h.len().max(9)).collect();
    let row = |cells: &[String]| -> String {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let _ = write!(s, "{:>w$}  ", c, w = widths.get(i).copied().unwrap_or(9));
        }
        s.trim_end().to_string()
    };
    let _ = writeln!(t, "{}", row(&hdr));
    for &sz in &sizes {
        let w = write.and_then(|s| s.get(sz));
        let se = send.and_then(|s| s.get(sz));
        let b = base.and_then(|s| s.get(sz));
        let mut cells = vec![
            fmt_size(sz),
            cell(w, 4),
            cell(se, 4),
            cell(b, 4),
            cell(pratio(base, write, sz), 2),
            cell(pratio(base, send, sz), 2),
        ];
        let _ = writeln!(csv, "bw,{sz},ib_write_bw_gbs,{}", csv_cell(w));
        let _ = writeln!(csv, "bw,{sz},ib_send_bw_gbs,{}", csv_cell(se));
        let _ = writeln!(csv, "bw,{sz},ferro_1qp_gbs,{}", csv_cell(b));
        for c in &others {
            let o = d.fb_bw.get(c).and_then(|s| s.get(sz));
            cells.push(cell(o, 4));
            cells.push(cell(pratio(d.fb_bw.get(c), base, sz), 2));
            let _ = writeln!(
                csv,
                "bw,{sz},{}_gbs,{}",
                cfg_name(*c).replace(' ', "_"),
                csv_cell(o)
            );
        }
        let fr = base_cfg
            .and_then(|c| d.fb_rate.get(&c))
            .and_then(|s| s.get(sz));
        let wr = d.pt_rate.get("ib_write_bw").and_then(|s| s.get(sz));
        cells.push(cell(fr, 0));
        cells.push(cell(wr, 0));
        let runs = format!(
            "{}/{}",
            base.map_or(0, |s| s.runs(sz)),
            write.map_or(0, |s| s.runs(sz))
        );
        cells.push(runs);
        let _ = writeln!(t, "{}", row(&cells));
    }
    let _ = writeln!(t, "(runs = ferro/ib_write_bw runs per size)");

    // ---- latency table
    let wl = d.pt_lat_typ.get("ib_write_lat");
    let wl_avg = d.pt_lat_avg.get("ib_write_lat");
    let wl_p99 = d.pt_lat_p99.get("ib_write_lat");
    let fl = d
        .fb_lat_med
        .get(&(1, 0))
        .or_else(|| d.fb_lat_med.values().next());
    let fl99 = d
        .fb_lat_p99
        .get(&(1, 0))
        .or_else(|| d.fb_lat_p99.values().next());
    let mut lsizes: BTreeSet<u64> = BTreeSet::new();
    for s in [wl, fl].into_iter().flatten() {
        lsizes.extend(s.sizes());
    }
    if !lsizes.is_empty() {
        let _ = writeln!(t);
        let _ = writeln!(
            t,
            "One-way latency, us (half the round trip), median of runs; ratio = plugin median / ib_write_lat typical, median of the per-round ratios"
        );
        let lh = [
            "size",
            "write typical",
            "write avg",
            "write p99",
            "ferro median",
            "ferro p99",
            "ratio",
        ];
        let lw: Vec<usize> = lh.iter().map(|h| h.len().max(9)).collect();
        let lrow = |cells: &[String]| -> String {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                let _ = write!(s, "{:>w$}  ", c, w = lw.get(i).copied().unwrap_or(9));
            }
            s.trim_end().to_string()
        };
        let _ = writeln!(
            t,
            "{}",
            lrow(&lh.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        );
        for &sz in &lsizes {
            let a = wl.and_then(|s| s.get(sz));
            let b = fl.and_then(|s| s.get(sz));
            let cells = vec![
                fmt_size(sz),
                cell(a, 2),
                cell(wl_avg.and_then(|s| s.get(sz)), 2),
                cell(wl_p99.and_then(|s| s.get(sz)), 2),
                cell(b, 2),
                cell(fl99.and_then(|s| s.get(sz)), 2),
                cell(pratio(fl, wl, sz), 2),
            ];
            let _ = writeln!(csv, "lat,{sz},ib_write_lat_typical_us,{}", csv_cell(a));
            let _ = writeln!(csv, "lat,{sz},ferro_median_us,{}", csv_cell(b));
            let _ = writeln!(t, "{}", lrow(&cells));
        }
    }

    // ---- summary
    let _ = writeln!(t);
    let _ = writeln!(t, "Summary");
    let big: Vec<u64> = sizes.iter().copied().filter(|&s| s >= 1 << 20).collect();
    let med_ratio = |num: Option<&Series>, den: Option<&Series>| -> Option<f64> {
        let r: Vec<f64> = big.iter().filter_map(|&s| pratio(num, den, s)).collect();
        (!r.is_empty()).then(|| median(&r))
    };
    let bw_w = med_ratio(base, write);
    let bw_s = med_ratio(base, send);
    let _ = writeln!(
        t,
        "  bandwidth plugin/ib_write_bw at >= 1 MiB (median over sizes): {}",
        cell(bw_w, 3)
    );
    let _ = writeln!(
        t,
        "  bandwidth plugin/ib_send_bw  at >= 1 MiB (median over sizes): {}",
        cell(bw_s, 3)
    );
    js.push(("bw_ratio_vs_ib_write_bw_ge_1MiB".into(), opt_num(bw_w)));
    js.push(("bw_ratio_vs_ib_send_bw_ge_1MiB".into(), opt_num(bw_s)));
    let l8 = fl.and_then(|s| s.get(8));
    let w8 = wl.and_then(|s| s.get(8));
    let _ = writeln!(
        t,
        "  8-byte latency: plugin median {} us vs ib_write_lat typical {} us: ratio {}",
        cell(l8, 2),
        cell(w8, 2),
        cell(pratio(fl, wl, 8), 2)
    );
    js.push(("lat8_plugin_median_us".into(), opt_num(l8)));
    js.push(("lat8_ib_write_lat_typical_us".into(), opt_num(w8)));
    js.push(("lat8_ratio".into(), opt_num(pratio(fl, wl, 8))));
    let fb_rate = base_cfg.and_then(|c| d.fb_rate.get(&c));
    let pt_rate = d.pt_rate.get("ib_write_bw");
    let r8 = fb_rate.and_then(|s| s.get(8));
    let pr8 = pt_rate.and_then(|s| s.get(8));
    let _ = writeln!(
        t,
        "  8-byte message rate (window {}): plugin {} msg/s vs ib_write_bw {} msg/s: ratio {}",
        base_cfg.map_or("?".into(), |c| c.2.to_string()),
        cell(r8, 0),
        cell(pr8, 0),
        cell(pratio(fb_rate, pt_rate, 8), 2)
    );
    js.push((
        "rate8_ratio_vs_ib_write_bw".into(),
        opt_num(pratio(fb_rate, pt_rate, 8)),
    ));
    if let Some(c) = base_cfg {
        let op = |n: &'static str| d.fb_ops.get(&(c, n)).and_then(|s| s.get(8));
        let _ = writeln!(
            t,
            "  per 8-byte message at window {} (both sides, the plugin's counters): {} ibv_post_send, {} ibv_post_recv, {} CQ polls, {} allocations",
            c.2,
            cell(op("send_posts_per_msg"), 3),
            cell(op("recv_posts_per_msg"), 3),
            cell(op("polls_per_msg"), 2),
            cell(op("allocs_per_msg"), 3)
        );
        for n in super::data::OP_COLUMNS {
            js.push((format!("{}_8B", n), opt_num(op(n))));
        }
    }
    if !d.init.is_empty() {
        let col = |k: usize| -> Vec<f64> {
            d.init
                .iter()
                .filter_map(|r| match k {
                    0 => Some(r.0),
                    1 => Some(r.1),
                    _ => r.2,
                })
                .collect()
        };
        let med = |v: Vec<f64>| (!v.is_empty()).then(|| median(&v));
        let (dv, pl, op) = (med(col(0)), med(col(1)), med(col(2)));
        let _ = writeln!(
            t,
            "  start-up (median over rounds): ferro-bench devices (load, init, properties) {} ms with {} file opens; ibv_devinfo {} ms: ratio {}",
            cell(pl.map(|v| v / 1e3), 1),
            cell(op, 0),
            cell(dv.map(|v| v / 1e3), 1),
            cell(ratio(pl, dv), 2)
        );
        js.push(("init_plugin_ms".into(), opt_num(pl.map(|v| v / 1e3))));
        js.push(("init_ibv_devinfo_ms".into(), opt_num(dv.map(|v| v / 1e3))));
        js.push(("init_plugin_file_opens".into(), opt_num(op)));
    }
    for (w, series) in &d.fb_comms {
        let r = series.get(8);
        let _ = writeln!(
            t,
            "  many comms (ferro-bench comms: 16 comms, window {w} each, one thread per side): {} msg/s in all at 8 B ({} of the single comm's rate)",
            cell(r, 0),
            cell(ratio(r, r8), 2)
        );
        js.push((format!("comms_rate8_window{w}"), opt_num(r)));
    }
    for c in &others {
        let r = med_ratio(d.fb_bw.get(c), base);
        let _ = writeln!(
            t,
            "  {} vs 1 QP bandwidth at >= 1 MiB (median over sizes): {}",
            cfg_name(*c),
            cell(r, 3)
        );
        js.push((
            format!("bw_ratio_{}_vs_1qp_ge_1MiB", cfg_name(*c).replace(' ', "_")),
            opt_num(r),
        ));
    }
    // ---- how steady the host was: perftest's own figures, round by round
    let per_round = |s: Option<&Series>, size: u64| -> Vec<(u32, f64)> {
        let mut v: Vec<(u32, f64)> = s
            .and_then(|s| s.samples.get(&size))
            .map(|v| v.iter().filter_map(|&(r, x)| Some((r?, x))).collect())
            .unwrap_or_default();
        v.sort_by_key(|p| p.0);
        v
    };
    let steady = [
        ("ib_write_lat 8 B typical (us)", per_round(wl, 8)),
        ("ib_write_bw 1 MiB (GB/s)", per_round(write, 1 << 20)),
    ];
    for (name, v) in &steady {
        if v.len() < 2 {
            continue;
        }
        let vals: Vec<String> = v.iter().map(|(r, x)| format!("r{r} {x:.4}")).collect();
        let (lo, hi) = v.iter().fold((f64::INFINITY, 0f64), |(lo, hi), &(_, x)| {
            (lo.min(x), hi.max(x))
        });
        let _ = writeln!(
            t,
            "  host steadiness, {name} per round: {}{}",
            vals.join(", "),
            if lo > 0.0 && hi / lo > 2.0 {
                "  <- rounds differ by more than 2x: the host was busy (another guest?); \
                 the per-round ratios above still compare like with like, absolute figures do not"
            } else {
                ""
            }
        );
    }
    Summary {
        text: t,
        json_fields: js,
        csv,
    }
}

/// A ratio or figure as JSON: null when missing or not finite.
pub(super) fn opt_num(v: Option<f64>) -> Value {
    v.filter(|x| x.is_finite()).map_or(Value::Null, Value::from)
}
