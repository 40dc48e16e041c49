//! `ferro-bench report --dir DIR`: the side-by-side comparison with perftest.
//!
//! Inputs in DIR (written by `benches/compare.sh`):
//! - `perftest.csv`: `tool,run,<numbers of the tool's result line>` (the line perftest prints
//!   under its table header; `*_bw`: bytes, iterations, BW peak, BW average [MiB/s], MsgRate
//!   [Mpps]; `*_lat`: bytes, iterations, t_min, t_max, t_typical, t_avg, t_stdev, 99 %, 99.9 %
//!   [µs, one-way]);
//! - `ferro-*.csv`: ferro-bench `--csv` files (any number of runs and configurations).
//!
//! Outputs in DIR (or `--out`): `summary.txt` (also printed), `summary.json`, `compare.csv`,
//! `bandwidth.svg`. Per size, runs are reduced to their median.

use crate::error::{Context as _, Error, Result};
use crate::report::{fmt_size, json_num, json_str, median, write_file};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const MIB: f64 = 1_048_576.0;

/// The runs of one measured value, per tool (or ferro configuration) and size, each with the
/// round it was measured in (when known).
#[derive(Debug, Default)]
struct Series {
    /// size -> (round, value)
    samples: BTreeMap<u64, Vec<(Option<u32>, f64)>>,
}

impl Series {
    fn add(&mut self, size: u64, round: Option<u32>, v: f64) {
        if v.is_finite() {
            self.samples.entry(size).or_default().push((round, v));
        }
    }
    /// Median over runs.
    fn get(&self, size: u64) -> Option<f64> {
        let v: Vec<f64> = self.samples.get(&size)?.iter().map(|s| s.1).collect();
        (!v.is_empty()).then(|| median(&v))
    }
    fn in_round(&self, size: u64, round: u32) -> Option<f64> {
        self.samples
            .get(&size)?
            .iter()
            .find(|s| s.0 == Some(round))
            .map(|s| s.1)
    }
    fn runs(&self, size: u64) -> usize {
        self.samples.get(&size).map_or(0, Vec::len)
    }
    fn sizes(&self) -> impl Iterator<Item = u64> + '_ {
        self.samples.keys().copied()
    }
}

/// A ferro-bench configuration: (qps, split, window).
type Cfg = (u32, u32, u32);

#[derive(Debug, Default)]
struct Data {
    /// perftest bandwidth tools: tool -> GB/s
    pt_bw: BTreeMap<String, Series>,
    /// perftest bandwidth tools: tool -> msg/s
    pt_rate: BTreeMap<String, Series>,
    /// perftest latency: tool -> typical one-way µs
    pt_lat_typ: BTreeMap<String, Series>,
    pt_lat_avg: BTreeMap<String, Series>,
    pt_lat_p99: BTreeMap<String, Series>,
    /// ferro-bench bw/rate: cfg -> GB/s, msg/s
    fb_bw: BTreeMap<Cfg, Series>,
    fb_rate: BTreeMap<Cfg, Series>,
    /// ferro-bench lat: (qps, split) -> median / p99 one-way µs
    fb_lat_med: BTreeMap<(u32, u32), Series>,
    fb_lat_p99: BTreeMap<(u32, u32), Series>,
    files: Vec<String>,
}

fn f(v: &str) -> Result<f64> {
    v.trim()
        .parse::<f64>()
        .map_err(|_| Error::new(format!("bad number {v:?}")))
}

fn u(v: &str) -> Result<u64> {
    v.trim()
        .parse::<u64>()
        .map_err(|_| Error::new(format!("bad integer {v:?}")))
}

impl Data {
    fn add_perftest(&mut self, text: &str) -> Result<()> {
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with("tool,") || line.starts_with('#') {
                continue;
            }
            let c: Vec<&str> = line.split(',').map(str::trim).collect();
            let bad = |why: &str| Error::new(format!("perftest.csv line {}: {why}: {line}", i + 1));
            if c.len() < 4 {
                return Err(bad("too few fields"));
            }
            let tool = c[0].to_string();
            let round = c[1].parse::<u32>().ok();
            let v = &c[2..];
            let size = u(v[0]).map_err(|e| bad(&e.to_string()))?;
            if tool.ends_with("_bw") {
                if v.len() < 5 {
                    return Err(bad("a bw line has 5 numbers"));
                }
                let avg = f(v[3]).map_err(|e| bad(&e.to_string()))?;
                let mpps = f(v[4]).map_err(|e| bad(&e.to_string()))?;
                self.pt_bw
                    .entry(tool.clone())
                    .or_default()
                    .add(size, round, avg * MIB / 1e9);
                self.pt_rate
                    .entry(tool)
                    .or_default()
                    .add(size, round, mpps * 1e6);
            } else if tool.ends_with("_lat") {
                if v.len() < 8 {
                    return Err(bad("a lat line has at least 8 numbers"));
                }
                let typ = f(v[4]).map_err(|e| bad(&e.to_string()))?;
                let avg = f(v[5]).map_err(|e| bad(&e.to_string()))?;
                let p99 = f(v[7]).map_err(|e| bad(&e.to_string()))?;
                self.pt_lat_typ
                    .entry(tool.clone())
                    .or_default()
                    .add(size, round, typ);
                self.pt_lat_avg
                    .entry(tool.clone())
                    .or_default()
                    .add(size, round, avg);
                self.pt_lat_p99
                    .entry(tool)
                    .or_default()
                    .add(size, round, p99);
            } else {
                return Err(bad("unknown tool"));
            }
        }
        Ok(())
    }

    fn add_ferro(&mut self, name: &str, text: &str) -> Result<()> {
        let mut lines = text.lines();
        let header: Vec<&str> = lines
            .next()
            .ok_or_else(|| Error::new(format!("{name}: empty")))?
            .split(',')
            .collect();
        let col = |n: &str| {
            header
                .iter()
                .position(|h| *h == n)
                .ok_or_else(|| Error::new(format!("{name}: no column {n}")))
        };
        let (mode, size, gbs, rate) = (
            col("mode")?,
            col("size")?,
            col("algbw_gbs")?,
            col("msg_rate")?,
        );
        let (med, p99) = (col("lat_median_us")?, col("lat_p99_us")?);
        let (window, qps, split) = (col("window")?, col("qps")?, col("split")?);
        let label = col("label")?;
        for (i, line) in lines.enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let c: Vec<&str> = line.split(',').collect();
            let at = |k: usize| {
                c.get(k)
                    .copied()
                    .ok_or_else(|| Error::new(format!("{name} line {}: too few fields", i + 2)))
            };
            let sz = u(at(size)?)?;
            let round = c.get(label).and_then(|l| round_of_label(l));
            let (q, s) = (u(at(qps)?)? as u32, u(at(split)?)? as u32);
            match at(mode)? {
                "bw" | "rate" => {
                    let w = u(at(window)?)? as u32;
                    self.fb_bw
                        .entry((q, s, w))
                        .or_default()
                        .add(sz, round, f(at(gbs)?)?);
                    self.fb_rate
                        .entry((q, s, w))
                        .or_default()
                        .add(sz, round, f(at(rate)?)?);
                }
                "lat" => {
                    self.fb_lat_med
                        .entry((q, s))
                        .or_default()
                        .add(sz, round, f(at(med)?)?);
                    self.fb_lat_p99
                        .entry((q, s))
                        .or_default()
                        .add(sz, round, f(at(p99)?)?);
                }
                other => return Err(Error::new(format!("{name}: unknown mode {other:?}"))),
            }
        }
        self.files.push(name.to_string());
        Ok(())
    }
}

fn load(dir: &Path) -> Result<Data> {
    let mut d = Data::default();
    let pt = dir.join("perftest.csv");
    if pt.exists() {
        let text = std::fs::read_to_string(&pt).ctx(format!("reading {}", pt.display()))?;
        d.add_perftest(&text)?;
        d.files.push("perftest.csv".into());
    }
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .ctx(format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("ferro-") && n.ends_with(".csv"))
        })
        .collect();
    names.sort();
    for p in names {
        let text = std::fs::read_to_string(&p).ctx(format!("reading {}", p.display()))?;
        let name = p
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("?")
            .to_string();
        d.add_ferro(&name, &text)?;
    }
    Ok(d)
}

fn cell(v: Option<f64>, prec: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.prec$}"))
}

/// A CSV value: empty when missing.
fn csv_cell(v: Option<f64>) -> String {
    v.map_or(String::new(), |v| format!("{v}"))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// `num / den` at one size: the median of the per-round ratios where both were measured in
/// the same round (back to back, so a change of the host's load between rounds cancels out),
/// else the ratio of the medians.
fn pratio(num: Option<&Series>, den: Option<&Series>, size: u64) -> Option<f64> {
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

/// The round number at the end of a ferro-bench label ("round 3" -> 3).
fn round_of_label(label: &str) -> Option<u32> {
    let t = label.trim();
    let start = t.rfind(|c: char| !c.is_ascii_digit()).map_or(0, |i| i + 1);
    t[start..].parse().ok()
}

fn cfg_name((q, s, w): Cfg) -> String {
    format!(
        "ferro {q}QP{} w{w}",
        if q > 1 {
            format!(" split{s}")
        } else {
            String::new()
        }
    )
}

/// Everything the report says, computed once.
#[derive(Debug, Default)]
struct Summary {
    text: String,
    json_fields: Vec<(String, String)>,
    csv: String,
}

fn build(d: &Data) -> Summary {
    let mut t = String::new();
    let mut js: Vec<(String, String)> = Vec::new();
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

fn opt_num(v: Option<f64>) -> String {
    v.map_or("null".into(), json_num)
}

// ------------------------------------------------------------------------------------ SVG

fn svg(d: &Data) -> String {
    let base_cfg: Option<Cfg> = d
        .fb_bw
        .keys()
        .copied()
        .filter(|c| c.0 == 1)
        .max_by_key(|c| c.2);
    let mut lines: Vec<(String, &Series, &str, bool)> = Vec::new();
    let colors = [
        "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    ];
    let mut k = 0;
    for (tool, s) in &d.pt_bw {
        lines.push((tool.clone(), s, colors[k % colors.len()], true));
        k += 1;
    }
    if let Some(c) = base_cfg {
        if let Some(s) = d.fb_bw.get(&c) {
            lines.push((cfg_name(c), s, colors[k % colors.len()], false));
            k += 1;
        }
    }
    for (c, s) in &d.fb_bw {
        if Some(*c) != base_cfg {
            lines.push((cfg_name(*c), s, colors[k % colors.len()], false));
            k += 1;
        }
    }
    let pts: Vec<(u64, f64)> = lines
        .iter()
        .flat_map(|(_, s, _, _)| s.sizes().filter_map(|z| s.get(z).map(|v| (z, v))))
        .filter(|(z, v)| *z > 0 && *v > 0.0)
        .collect();
    let (w, h) = (760.0, 460.0);
    let (ml, mr, mt, mb) = (80.0, 200.0, 40.0, 60.0);
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(o, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        o,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">Bandwidth vs message size (soft-RoCE, same boot; median of runs)</text>"#,
        (ml + w - mr) / 2.0
    );
    if pts.is_empty() {
        let _ = writeln!(o, r#"<text x="100" y="100">no data</text></svg>"#);
        return o;
    }
    let lx = |z: u64| (z as f64).log2();
    let xmin = pts
        .iter()
        .map(|p| lx(p.0))
        .fold(f64::INFINITY, f64::min)
        .floor();
    let xmax = pts
        .iter()
        .map(|p| lx(p.0))
        .fold(f64::NEG_INFINITY, f64::max)
        .ceil()
        .max(xmin + 1.0);
    let ymin = pts
        .iter()
        .map(|p| p.1.log10())
        .fold(f64::INFINITY, f64::min)
        .floor();
    let ymax = pts
        .iter()
        .map(|p| p.1.log10())
        .fold(f64::NEG_INFINITY, f64::max)
        .ceil()
        .max(ymin + 1.0);
    let px = |x: f64| ml + (x - xmin) / (xmax - xmin) * (w - ml - mr);
    let py = |y: f64| h - mb - (y - ymin) / (ymax - ymin) * (h - mt - mb);
    // Axes and grid.
    let _ = writeln!(
        o,
        r##"<rect x="{ml}" y="{mt}" width="{}" height="{}" fill="none" stroke="#444"/>"##,
        w - ml - mr,
        h - mt - mb
    );
    let step = ((xmax - xmin) / 10.0).ceil().max(1.0) as i64;
    // Ticks aligned on the largest size, so that it is labelled.
    for x in ((xmin as i64)..=(xmax as i64)).filter(|x| (xmax as i64 - x) % step == 0) {
        let xx = px(x as f64);
        let _ = writeln!(
            o,
            r##"<line x1="{xx:.1}" y1="{mt}" x2="{xx:.1}" y2="{}" stroke="#ddd"/><text x="{xx:.1}" y="{}" text-anchor="middle">{}</text>"##,
            h - mb,
            h - mb + 16.0,
            fmt_size(1u64 << x.clamp(0, 62)).replace(' ', "")
        );
    }
    for y in (ymin as i64)..=(ymax as i64) {
        let yy = py(y as f64);
        let _ = writeln!(
            o,
            r##"<line x1="{ml}" y1="{yy:.1}" x2="{}" y2="{yy:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            w - mr,
            ml - 6.0,
            yy + 4.0,
            format_pow10(y)
        );
    }
    let _ = writeln!(
        o,
        r#"<text x="{}" y="{}" text-anchor="middle">message size (bytes, log scale)</text>"#,
        (ml + w - mr) / 2.0,
        h - 18.0
    );
    let _ = writeln!(
        o,
        r#"<text transform="translate(20,{}) rotate(-90)" text-anchor="middle">GB/s (1e9 B/s, log scale)</text>"#,
        (mt + h - mb) / 2.0
    );
    for (i, (name, s, color, dashed)) in lines.iter().enumerate() {
        let p: Vec<String> = s
            .sizes()
            .filter_map(|z| s.get(z).filter(|v| *v > 0.0 && z > 0).map(|v| (z, v)))
            .map(|(z, v)| format!("{:.1},{:.1}", px(lx(z)), py(v.log10())))
            .collect();
        let dash = if *dashed {
            r#" stroke-dasharray="6,4""#
        } else {
            ""
        };
        let _ = writeln!(
            o,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{}"/>"#,
            p.join(" ")
        );
        for pt in &p {
            if let Some((x, y)) = pt.split_once(',') {
                let _ = writeln!(o, r#"<circle cx="{x}" cy="{y}" r="3" fill="{color}"/>"#);
            }
        }
        let ly = mt + 20.0 + 22.0 * i as f64;
        let lx0 = w - mr + 15.0;
        let _ = writeln!(
            o,
            r#"<line x1="{lx0}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
            lx0 + 30.0,
            lx0 + 36.0,
            ly + 4.0,
            xml_escape(name)
        );
    }
    let _ = writeln!(o, "</svg>");
    o
}

fn format_pow10(e: i64) -> String {
    if (-3..=3).contains(&e) {
        let v = 10f64.powi(e as i32);
        format!("{v}")
    } else {
        format!("1e{e}")
    }
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

// ------------------------------------------------------------------------------------ main

pub(crate) fn main(args: Vec<String>) -> Result<()> {
    let mut dir: Option<PathBuf> = None;
    let mut out: Option<PathBuf> = None;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--dir" => dir = it.next().map(PathBuf::from),
            "--out" => out = it.next().map(PathBuf::from),
            "-h" | "--help" => {
                println!("usage: ferro-bench report --dir DIR [--out DIR]");
                return Ok(());
            }
            other => return Err(Error::new(format!("report: unknown argument {other:?}"))),
        }
    }
    let dir = dir.ok_or_else(|| Error::new("report: --dir DIR is required"))?;
    let out = out.unwrap_or_else(|| dir.clone());
    let d = load(&dir)?;
    if d.files.is_empty() {
        return Err(Error::new(format!(
            "report: no perftest.csv or ferro-*.csv in {}",
            dir.display()
        )));
    }
    let s = build(&d);
    print!("{}", s.text);
    write_file(&out.join("summary.txt"), &s.text)?;
    write_file(&out.join("compare.csv"), &s.csv)?;
    let mut j = String::from("{\n");
    let _ = writeln!(
        j,
        "  \"inputs\": [{}],",
        d.files
            .iter()
            .map(|f| json_str(f))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (k, v) in &s.json_fields {
        let _ = writeln!(j, "  {}: {},", json_str(k), v);
    }
    let _ = writeln!(j, "  \"table\": {}", json_str(&s.text));
    j.push_str("}\n");
    write_file(&out.join("summary.json"), &j)?;
    write_file(&out.join("bandwidth.svg"), &svg(&d))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERFTEST: &str = "tool,run,values\n\
        ib_write_bw,1,1048576,40,41.00,38.15,0.000038\n\
        ib_write_bw,2,1048576,40,41.00,40.05,0.000040\n\
        ib_write_bw,1,8,5000,1.20,1.00,0.131072\n\
        ib_send_bw,1,1048576,40,41.00,36.00,0.000036\n\
        ib_write_lat,1,8,1000,10.1,400.0,12.6,30.2,5.5,100.0,300.0\n";

    fn ferro_csv(qps: u32, gbs_1m: f64, round: u32) -> String {
        format!(
            "{}\nferro-bench,bw,8,1000,1.0,1000,0.000008,100000,,,,,,32,{qps},0,rxe0,round {round}\n\
             ferro-bench,bw,1048576,30,1.0,33333,{gbs_1m},30,,,,,,32,{qps},0,rxe0,round {round}\n",
            crate::report::CSV_HEADER
        )
    }

    #[test]
    fn report_combines_runs_and_computes_ratios() {
        let mut d = Data::default();
        d.add_perftest(PERFTEST).unwrap();
        d.add_ferro("ferro-bw-q1-r1.csv", &ferro_csv(1, 0.03, 1))
            .unwrap();
        d.add_ferro("ferro-bw-q1-r2.csv", &ferro_csv(1, 0.04, 2))
            .unwrap();
        d.add_ferro("ferro-bw-q4-r1.csv", &ferro_csv(4, 0.07, 1))
            .unwrap();
        let lat = format!(
            "{}\nferro-bench,lat,8,100,1.0,20,0.0,5000,25.2,80.0,10.0,20.0,90.0,1,1,0,rxe0,r1\n",
            crate::report::CSV_HEADER
        );
        d.add_ferro("ferro-lat-r1.csv", &lat).unwrap();
        // ib_write_bw 1 MiB: median of 38.15 and 40.05 MiB/s = 39.1 MiB/s = 0.041 GB/s.
        let w = d.pt_bw["ib_write_bw"].get(1 << 20).unwrap();
        assert!((w - 39.1 * MIB / 1e9).abs() < 1e-9);
        let s = build(&d);
        assert!(s.text.contains("ib_write_bw"), "{}", s.text);
        let get = |k: &str| {
            s.json_fields
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        // Per-round ratios: 0.03 / 38.15 MiB/s (round 1), 0.04 / 40.05 MiB/s (round 2).
        let r: f64 = get("bw_ratio_vs_ib_write_bw_ge_1MiB").parse().unwrap();
        let want = 0.5 * (0.03 / (38.15 * MIB / 1e9) + 0.04 / (40.05 * MIB / 1e9));
        assert!((r - want).abs() < 1e-9, "{r} vs {want}");
        let l: f64 = get("lat8_ratio").parse().unwrap();
        assert!((l - 25.2 / 12.6).abs() < 1e-9);
        // 4 QPs were only measured in round 1: 0.07 / 0.03.
        let q: f64 = get("bw_ratio_ferro_4QP_split0_w32_vs_1qp_ge_1MiB")
            .parse()
            .unwrap();
        assert!((q - 0.07 / 0.03).abs() < 1e-9, "{q}");
        let svg = svg(&d);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("polyline"));
    }

    #[test]
    fn rounds_come_from_labels() {
        assert_eq!(round_of_label("round 3"), Some(3));
        assert_eq!(round_of_label("r12"), Some(12));
        assert_eq!(round_of_label(""), None);
        assert_eq!(round_of_label("first"), None);
        // Without common rounds the ratio is that of the medians.
        let (mut a, mut b) = (Series::default(), Series::default());
        a.add(8, Some(1), 2.0);
        a.add(8, Some(2), 4.0);
        b.add(8, None, 1.0);
        assert_eq!(pratio(Some(&a), Some(&b), 8), Some(3.0));
        b.add(8, Some(2), 2.0);
        assert_eq!(pratio(Some(&a), Some(&b), 8), Some(2.0));
    }

    #[test]
    fn bad_input_is_reported_with_its_line() {
        let mut d = Data::default();
        let e = d.add_perftest("ib_write_bw,1,abc,1,2,3,4\n").unwrap_err();
        assert!(e.to_string().contains("line 1"), "{e}");
        assert!(d.add_perftest("ib_foo,1,8,1,2,3,4\n").is_err());
        assert!(d.add_ferro("x.csv", "").is_err());
    }
}
