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
//!
//! - [`data`]: reading the inputs;
//! - [`summary`]: medians, ratios, the text, CSV and JSON fields;
//! - [`svg`]: the plot.

mod data;
mod summary;
pub(crate) mod svg;
#[cfg(test)]
mod tests;

use crate::error::{Error, Result};
use crate::report::write_file;
use data::*;
use serde_json::{Map, Value, json};
use std::path::PathBuf;
use summary::*;
use svg::*;

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
    let mut j = Map::new();
    j.insert("inputs".into(), json!(d.files));
    for (k, v) in &s.json_fields {
        j.insert(k.clone(), v.clone());
    }
    j.insert("table".into(), json!(s.text));
    let j = serde_json::to_string_pretty(&Value::Object(j))
        .map_err(|e| Error::new(e.to_string()))?
        + "\n";
    write_file(&out.join("summary.json"), &j)?;
    write_file(&out.join("bandwidth.svg"), &svg(&d))?;
    Ok(())
}
