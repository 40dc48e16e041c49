//! The inputs: perftest's result lines and ferro-bench's CSV files, parsed into series of
//! samples per tool, configuration and size.

use crate::error::{Context as _, Error, Result};
use crate::model::median;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub(super) const MIB: f64 = 1_048_576.0;

/// The runs of one measured value, per tool (or ferro configuration) and size, each with the
/// round it was measured in (when known).
#[derive(Debug, Default)]
pub(super) struct Series {
    /// size -> (round, value)
    pub(super) samples: BTreeMap<u64, Vec<(Option<u32>, f64)>>,
}

impl Series {
    pub(super) fn add(&mut self, size: u64, round: Option<u32>, v: f64) {
        if v.is_finite() {
            self.samples.entry(size).or_default().push((round, v));
        }
    }
    /// Median over runs.
    pub(super) fn get(&self, size: u64) -> Option<f64> {
        let v: Vec<f64> = self.samples.get(&size)?.iter().map(|s| s.1).collect();
        (!v.is_empty()).then(|| median(&v))
    }
    pub(super) fn in_round(&self, size: u64, round: u32) -> Option<f64> {
        self.samples
            .get(&size)?
            .iter()
            .find(|s| s.0 == Some(round))
            .map(|s| s.1)
    }
    pub(super) fn runs(&self, size: u64) -> usize {
        self.samples.get(&size).map_or(0, Vec::len)
    }
    pub(super) fn sizes(&self) -> impl Iterator<Item = u64> + '_ {
        self.samples.keys().copied()
    }
}

/// A ferro-bench configuration: (qps, split, window).
pub(super) type Cfg = (u32, u32, u32);

#[derive(Debug, Default)]
pub(super) struct Data {
    /// perftest bandwidth tools: tool -> GB/s
    pub(super) pt_bw: BTreeMap<String, Series>,
    /// perftest bandwidth tools: tool -> msg/s
    pub(super) pt_rate: BTreeMap<String, Series>,
    /// perftest latency: tool -> typical one-way µs
    pub(super) pt_lat_typ: BTreeMap<String, Series>,
    pub(super) pt_lat_avg: BTreeMap<String, Series>,
    pub(super) pt_lat_p99: BTreeMap<String, Series>,
    /// ferro-bench bw/rate: cfg -> GB/s, msg/s
    pub(super) fb_bw: BTreeMap<Cfg, Series>,
    pub(super) fb_rate: BTreeMap<Cfg, Series>,
    /// ferro-bench bw/rate per-message counts: (config, column) -> count per message
    pub(super) fb_ops: BTreeMap<(Cfg, &'static str), Series>,
    /// ferro-bench comms (many comms, one thread): window -> aggregate msg/s
    pub(super) fb_comms: BTreeMap<u32, Series>,
    /// Start-up per round: (ibv_devinfo µs, plugin load+init+properties µs, plugin file opens)
    pub(super) init: Vec<(f64, f64, Option<f64>)>,
    /// ferro-bench lat: (qps, split) -> median / p99 one-way µs
    pub(super) fb_lat_med: BTreeMap<(u32, u32), Series>,
    pub(super) fb_lat_p99: BTreeMap<(u32, u32), Series>,
    pub(super) files: Vec<String>,
}

pub(super) fn f(v: &str) -> Result<f64> {
    v.trim()
        .parse::<f64>()
        .map_err(|_| Error::new(format!("bad number {v:?}")))
}

pub(super) fn u(v: &str) -> Result<u64> {
    v.trim()
        .parse::<u64>()
        .map_err(|_| Error::new(format!("bad integer {v:?}")))
}

impl Data {
    pub(super) fn add_perftest(&mut self, text: &str) -> Result<()> {
        for rec in reader(text, false).records() {
            let rec = rec.ctx("perftest.csv")?;
            let c: Vec<&str> = rec.iter().collect();
            if c.iter().all(|f| f.is_empty()) || c[0] == "tool" {
                continue;
            }
            let (n, line) = (line_of(&rec), c.join(","));
            let bad = |why: &str| Error::new(format!("perftest.csv line {n}: {why}: {line}"));
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

    pub(super) fn add_ferro(&mut self, name: &str, text: &str) -> Result<()> {
        let mut rd = reader(text, true);
        let header = rd.headers().ctx(name)?.clone();
        if header.is_empty() {
            return Err(Error::new(format!("{name}: empty")));
        }
        let col = |n: &str| {
            header
                .iter()
                .position(|h| h == n)
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
        // Per-message counts: absent from files written before they existed.
        let ops: Vec<(&'static str, usize)> = OP_COLUMNS
            .iter()
            .filter_map(|&n| col(n).ok().map(|k| (n, k)))
            .collect();
        for rec in rd.records() {
            let rec = rec.ctx(name)?;
            let c: Vec<&str> = rec.iter().collect();
            if c.iter().all(|f| f.is_empty()) {
                continue;
            }
            let n = line_of(&rec);
            let at = |k: usize| {
                c.get(k)
                    .copied()
                    .ok_or_else(|| Error::new(format!("{name} line {n}: too few fields")))
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
                    for &(n, k) in &ops {
                        if let Some(v) = c.get(k).filter(|v| !v.trim().is_empty()) {
                            self.fb_ops
                                .entry(((q, s, w), n))
                                .or_default()
                                .add(sz, round, f(v)?);
                        }
                    }
                }
                "comms" => {
                    let w = u(at(window)?)? as u32;
                    self.fb_comms
                        .entry(w)
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

/// The per-message count columns of ferro-bench's CSV.
pub(super) const OP_COLUMNS: [&str; 4] = [
    "send_posts_per_msg",
    "recv_posts_per_msg",
    "polls_per_msg",
    "allocs_per_msg",
];

/// A CSV reader over one input: fields trimmed, records of any length (files written before a
/// column existed are shorter), `#` lines are comments.
fn reader(text: &str, has_headers: bool) -> csv::Reader<&[u8]> {
    csv::ReaderBuilder::new()
        .has_headers(has_headers)
        .flexible(true)
        .trim(csv::Trim::All)
        .comment(Some(b'#'))
        .from_reader(text.as_bytes())
}

/// The line a record starts on (1-based).
fn line_of(rec: &csv::StringRecord) -> u64 {
    rec.position().map_or(0, csv::Position::line)
}

pub(super) fn load(dir: &Path) -> Result<Data> {
    let mut d = Data::default();
    let pt = dir.join("perftest.csv");
    if pt.exists() {
        let text = std::fs::read_to_string(&pt).ctx(format!("reading {}", pt.display()))?;
        d.add_perftest(&text)?;
        d.files.push("perftest.csv".into());
    }
    let init = dir.join("init.csv");
    if init.exists() {
        let text = std::fs::read_to_string(&init).ctx(format!("reading {}", init.display()))?;
        for rec in reader(&text, true).records() {
            let rec = rec.ctx("init.csv")?;
            let c: Vec<&str> = rec.iter().collect();
            if c.iter().all(|f| f.is_empty()) {
                continue;
            }
            if c.len() < 4 {
                let line = c.join(",");
                return Err(Error::new(format!("init.csv: bad line {line:?}")));
            }
            let opens = (!c[3].is_empty()).then(|| f(c[3])).transpose()?;
            d.init.push((f(c[1])?, f(c[2])?, opens));
        }
        d.files.push("init.csv".into());
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

/// The round number at the end of a ferro-bench label ("round 3" -> 3).
pub(super) fn round_of_label(label: &str) -> Option<u32> {
    let t = label.trim();
    let start = t.rfind(|c: char| !c.is_ascii_digit()).map_or(0, |i| i + 1);
    t[start..].parse().ok()
}

pub(super) fn cfg_name((q, s, w): Cfg) -> String {
    format!(
        "ferro {q}QP{} w{w}",
        if q > 1 {
            format!(" split{s}")
        } else {
            String::new()
        }
    )
}
