//! The scale mode's results: one row per N with both sides' figures, reduced to per-comm
//! values, and their renderings: the table, CSV, JSON and an SVG plot of the cost per comm
//! against N (log-log). A reading that one side could not take shows as "-" (CSV: empty,
//! JSON: null).

use super::Side;
use super::procfs::Snapshot;
use crate::compare::svg::{format_pow10, xml_escape};
use serde_json::{Map, Value, json};
use std::fmt::Write as _;

/// The run's configuration, stored with the results.
#[derive(Debug, Clone)]
pub(crate) struct Meta {
    pub(crate) plugin_path: String,
    pub(crate) plugin_name: String,
    pub(crate) dev: String,
    pub(crate) qps: u32,
    pub(crate) label: String,
}

/// One N.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) n: usize,
    pub(crate) threads: usize,
    pub(crate) big: usize,
    pub(crate) server: Side,
    pub(crate) client: Side,
}

/// The per-comm figures of one side. Each process holds N send and N receive comms, so its
/// growth divided by N is what one connection costs its two ends together.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PerComm {
    pub(crate) connect_median_us: f64,
    pub(crate) connect_p99_us: f64,
    pub(crate) accept_median_us: f64,
    pub(crate) open_all_s: f64,
    pub(crate) rss_kib: Option<f64>,
    pub(crate) lck_kib: Option<f64>,
    pub(crate) pin_kib: Option<f64>,
    pub(crate) fds: Option<f64>,
    pub(crate) qp: Option<f64>,
    pub(crate) cq: Option<f64>,
    pub(crate) cqe: Option<f64>,
    pub(crate) mr: Option<f64>,
    pub(crate) mr_kib: Option<f64>,
    /// MRs per comm that registering the two message pools added.
    pub(crate) data_mr: Option<f64>,
    pub(crate) idle_test_ns: f64,
    pub(crate) sweep_ns: f64,
    pub(crate) small_ns_per_msg: f64,
    pub(crate) big_gbs: f64,
    pub(crate) close_us: f64,
    /// What teardown left behind against the reading before the comms: fds, QPs, CQs, MRs.
    pub(crate) left: [Option<i64>; 4],
}

fn per(a: Option<u64>, b: Option<u64>, n: usize) -> Option<f64> {
    Some((b? as f64 - a? as f64) / n.max(1) as f64)
}

fn diff(a: Option<u64>, b: Option<u64>) -> Option<i64> {
    Some(b? as i64 - a? as i64)
}

fn verbs_of<T>(s: &Snapshot, f: impl Fn(&super::Verbs) -> T) -> Option<T> {
    s.verbs.as_ref().map(f)
}

impl PerComm {
    pub(crate) fn of(s: &Side, n: usize, big: usize) -> PerComm {
        let (a, b, c, d) = (&s.before, &s.connected, &s.registered, &s.after);
        let v = |x: &Snapshot, f: fn(&super::Verbs) -> u64| verbs_of(x, f);
        PerComm {
            connect_median_us: s.connect_median_ns as f64 * 1e-3,
            connect_p99_us: s.connect_p99_ns as f64 * 1e-3,
            accept_median_us: s.accept_median_ns as f64 * 1e-3,
            open_all_s: s.open_wall_ns as f64 * 1e-9,
            rss_kib: per(a.rss_kib, b.rss_kib, n),
            lck_kib: per(a.lck_kib, b.lck_kib, n),
            pin_kib: per(a.pin_kib, b.pin_kib, n),
            fds: per(a.fds, b.fds, n),
            qp: per(v(a, |x| x.qp), v(b, |x| x.qp), n),
            cq: per(v(a, |x| x.cq), v(b, |x| x.cq), n),
            cqe: per(v(a, |x| x.cqe), v(b, |x| x.cqe), n),
            mr: per(v(a, |x| x.mr), v(b, |x| x.mr), n),
            mr_kib: per(v(a, |x| x.mr_bytes), v(b, |x| x.mr_bytes), n).map(|x| x / 1024.0),
            data_mr: per(v(b, |x| x.mr), v(c, |x| x.mr), n),
            idle_test_ns: s.idle_test_ns,
            sweep_ns: s.sweep_ns_per_comm,
            small_ns_per_msg: if s.small_msgs == 0 {
                0.0
            } else {
                s.small_ns as f64 / s.small_msgs as f64
            },
            big_gbs: if s.big_ns == 0 {
                0.0
            } else {
                (s.big_msgs * big as u64) as f64 / s.big_ns as f64
            },
            close_us: s.close_ns as f64 * 1e-3 / n.max(1) as f64,
            left: [
                diff(a.fds, d.fds),
                diff(v(a, |x| x.qp), v(d, |x| x.qp)),
                diff(v(a, |x| x.cq), v(d, |x| x.cq)),
                diff(v(a, |x| x.mr), v(d, |x| x.mr)),
            ],
        }
    }
}

fn f(v: Option<f64>, prec: usize) -> String {
    v.map_or("-".to_string(), |x| format!("{x:.prec$}"))
}

fn left(l: &[Option<i64>; 4]) -> String {
    l.iter()
        .map(|x| x.map_or("-".to_string(), |v| v.to_string()))
        .collect::<Vec<_>>()
        .join("/")
}

const HEAD: [&str; 23] = [
    "N",
    "thr",
    "side",
    "conn med(us)",
    "conn p99(us)",
    "acc med(us)",
    "open all(s)",
    "RSS KiB/c",
    "VmLck KiB/c",
    "VmPin KiB/c",
    "fds/c",
    "QP/c",
    "CQ/c",
    "CQE/c",
    "MR/c",
    "MR KiB/c",
    "dataMR/c",
    "idle test(ns)",
    "sweep ns/c",
    "8B ns/msg",
    "big GB/s",
    "close us/c",
    "left fd/qp/cq/mr",
];

fn cells(r: &Row, side: &str, p: &PerComm) -> Vec<String> {
    vec![
        r.n.to_string(),
        r.threads.to_string(),
        side.to_string(),
        format!("{:.0}", p.connect_median_us),
        format!("{:.0}", p.connect_p99_us),
        format!("{:.0}", p.accept_median_us),
        format!("{:.2}", p.open_all_s),
        f(p.rss_kib, 1),
        f(p.lck_kib, 1),
        f(p.pin_kib, 1),
        f(p.fds, 2),
        f(p.qp, 2),
        f(p.cq, 2),
        f(p.cqe, 0),
        f(p.mr, 2),
        f(p.mr_kib, 1),
        f(p.data_mr, 2),
        format!("{:.0}", p.idle_test_ns),
        format!("{:.0}", p.sweep_ns),
        format!("{:.0}", p.small_ns_per_msg),
        format!("{:.4}", p.big_gbs),
        format!("{:.0}", p.close_us),
        left(&p.left),
    ]
}

/// The table, both sides of every N, then the cost at each N against the first N.
pub(crate) fn table(m: &Meta, rows: &[Row]) -> String {
    let mut lines = vec![HEAD.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
    for r in rows {
        for (name, s) in [("server", &r.server), ("client", &r.client)] {
            lines.push(cells(r, name, &PerComm::of(s, r.n, r.big)));
        }
    }
    let widths: Vec<usize> = (0..HEAD.len())
        .map(|k| lines.iter().map(|l| l[k].len()).max().unwrap_or(0))
        .collect();
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# ferro-bench scale: plugin {} ({}), dev {}, QPs/connection {}{}",
        m.plugin_name,
        m.plugin_path,
        m.dev,
        m.qps,
        if m.label.is_empty() {
            String::new()
        } else {
            format!(", label {}", m.label)
        }
    );
    let _ = writeln!(
        o,
        "# per comm (/c) = this process's growth / N; it holds N send and N receive comms, so /c is one connection's two ends"
    );
    for l in &lines {
        let cols: Vec<String> = l
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect();
        let _ = writeln!(o, "{}", cols.join("  "));
    }
    if let Some(first) = rows.first() {
        let base = PerComm::of(&first.server, first.n, first.big);
        for r in &rows[1..] {
            let p = PerComm::of(&r.server, r.n, r.big);
            let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
            let _ = writeln!(
                o,
                "# N = {} vs N = {} (server): sweep ns/comm x{:.2}, idle test x{:.2}, 8 B ns/msg x{:.2}, connect median x{:.2}, close per comm x{:.2}",
                r.n,
                first.n,
                ratio(p.sweep_ns, base.sweep_ns),
                ratio(p.idle_test_ns, base.idle_test_ns),
                ratio(p.small_ns_per_msg, base.small_ns_per_msg),
                ratio(p.connect_median_us, base.connect_median_us),
                ratio(p.close_us, base.close_us)
            );
        }
    }
    o
}

const CSV_HEAD: &str = "tool,plugin,plugin_path,dev,qps,label,n,threads,side,connect_median_us,connect_p99_us,accept_median_us,open_all_s,rss_kib_per_comm,vmlck_kib_per_comm,vmpin_kib_per_comm,fds_per_comm,qp_per_comm,cq_per_comm,cqe_per_comm,mr_per_comm,mr_kib_per_comm,data_mr_per_comm,idle_test_ns,sweep_ns_per_comm,small_ns_per_msg,big_size,big_gbs,close_us_per_comm,left_fds,left_qp,left_cq,left_mr";

/// One CSV record per N and side, with the configuration in every record (fields quoted where
/// they need it, by the `csv` crate as the other CSV files are).
pub(crate) fn to_csv(m: &Meta, rows: &[Row]) -> String {
    // Writing into a Vec cannot fail: the results are ignored.
    let mut w = csv::Writer::from_writer(Vec::new());
    let _ = w.write_record(CSV_HEAD.split(','));
    let opt = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.3}"));
    for r in rows {
        for (name, s) in [("server", &r.server), ("client", &r.client)] {
            let p = PerComm::of(s, r.n, r.big);
            let mut cols = vec![
                "ferro-bench-scale".to_string(),
                m.plugin_name.clone(),
                m.plugin_path.clone(),
                m.dev.clone(),
                m.qps.to_string(),
                m.label.clone(),
                r.n.to_string(),
                r.threads.to_string(),
                name.to_string(),
                format!("{:.1}", p.connect_median_us),
                format!("{:.1}", p.connect_p99_us),
                format!("{:.1}", p.accept_median_us),
                format!("{:.4}", p.open_all_s),
            ];
            for v in [
                p.rss_kib, p.lck_kib, p.pin_kib, p.fds, p.qp, p.cq, p.cqe, p.mr, p.mr_kib,
                p.data_mr,
            ] {
                cols.push(opt(v));
            }
            cols.extend([
                format!("{:.1}", p.idle_test_ns),
                format!("{:.1}", p.sweep_ns),
                format!("{:.1}", p.small_ns_per_msg),
                r.big.to_string(),
                format!("{:.6}", p.big_gbs),
                format!("{:.1}", p.close_us),
            ]);
            for l in p.left {
                cols.push(l.map_or(String::new(), |v| v.to_string()));
            }
            let _ = w.write_record(&cols);
        }
    }
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

fn jopt(v: Option<f64>) -> Value {
    v.map_or(Value::Null, |x| json!(x))
}

fn snap_json(s: &Snapshot) -> Value {
    json!({
        "rss_kib": s.rss_kib,
        "vmlck_kib": s.lck_kib,
        "vmpin_kib": s.pin_kib,
        "fds": s.fds,
        "verbs": s.verbs.map(|v| json!({
            "qp": v.qp, "cq": v.cq, "cqe": v.cqe, "mr": v.mr, "mr_bytes": v.mr_bytes
        })),
    })
}

/// The configuration, and per N both sides' per-comm figures and raw readings.
pub(crate) fn to_json(m: &Meta, rows: &[Row]) -> String {
    let mut out = Map::new();
    out.insert("tool".into(), json!("ferro-bench"));
    out.insert("mode".into(), json!("scale"));
    out.insert("plugin".into(), json!(m.plugin_name));
    out.insert("plugin_path".into(), json!(m.plugin_path));
    out.insert("dev".into(), json!(m.dev));
    out.insert("qps".into(), json!(m.qps));
    out.insert("label".into(), json!(m.label));
    let rs: Vec<Value> = rows
        .iter()
        .map(|r| {
            let side = |s: &Side| {
                let p = PerComm::of(s, r.n, r.big);
                json!({
                    "connect_median_us": p.connect_median_us,
                    "connect_p99_us": p.connect_p99_us,
                    "accept_median_us": p.accept_median_us,
                    "open_all_s": p.open_all_s,
                    "per_comm": {
                        "rss_kib": jopt(p.rss_kib),
                        "vmlck_kib": jopt(p.lck_kib),
                        "vmpin_kib": jopt(p.pin_kib),
                        "fds": jopt(p.fds),
                        "qp": jopt(p.qp),
                        "cq": jopt(p.cq),
                        "cqe": jopt(p.cqe),
                        "mr": jopt(p.mr),
                        "mr_kib": jopt(p.mr_kib),
                        "data_mr": jopt(p.data_mr),
                    },
                    "idle_test_ns": p.idle_test_ns,
                    "sweep_ns_per_comm": p.sweep_ns,
                    "small_ns_per_msg": p.small_ns_per_msg,
                    "small_msgs": s.small_msgs,
                    "big_gbs": p.big_gbs,
                    "big_msgs": s.big_msgs,
                    "close_us_per_comm": p.close_us,
                    "left": {"fds": p.left[0], "qp": p.left[1], "cq": p.left[2], "mr": p.left[3]},
                    "readings": {
                        "before": snap_json(&s.before),
                        "connected": snap_json(&s.connected),
                        "registered": snap_json(&s.registered),
                        "after": snap_json(&s.after),
                    },
                })
            };
            json!({
                "n": r.n,
                "threads": r.threads,
                "big_size": r.big,
                "server": side(&r.server),
                "client": side(&r.client),
            })
        })
        .collect();
    out.insert("rows".into(), Value::Array(rs));
    let mut s = serde_json::to_string_pretty(&Value::Object(out)).unwrap_or_default();
    s.push('\n');
    s
}

/// The progress line of one N.
pub(crate) fn progress_line(r: &Row) -> String {
    let p = PerComm::of(&r.server, r.n, r.big);
    let c = PerComm::of(&r.client, r.n, r.big);
    format!(
        "scale N = {}: connect median {:.0} us (client {:.0} us), all open in {:.2} s; RSS {} KiB/comm, fds {}/comm, QPs {}/comm; sweep {:.0} ns/comm; 8 B {:.0} ns/msg; big {:.4} GB/s; teardown left {} (client {})",
        r.n,
        p.connect_median_us,
        c.connect_median_us,
        p.open_all_s.max(c.open_all_s),
        f(p.rss_kib, 1),
        f(p.fds, 2),
        f(p.qp, 2),
        p.sweep_ns,
        p.small_ns_per_msg,
        p.big_gbs,
        left(&p.left),
        left(&c.left)
    )
}

/// A plotted line: its name, colour and value.
type Series = (&'static str, &'static str, fn(&PerComm) -> f64);

/// The cost per comm against N (log-log): the server's sweep and idle test, the time per 8-byte
/// message, and the median connect time, all in ns.
pub(crate) fn svg(m: &Meta, rows: &[Row]) -> String {
    let series: [Series; 4] = [
        ("test sweep, ns per comm", "#1f77b4", |p| p.sweep_ns),
        ("test on an idle comm, ns", "#ff7f0e", |p| p.idle_test_ns),
        ("8 B streamed, ns per message", "#2ca02c", |p| {
            p.small_ns_per_msg
        }),
        ("connect median, ns", "#d62728", |p| {
            p.connect_median_us * 1e3
        }),
    ];
    let pts: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|(_, _, g)| {
            rows.iter()
                .map(|r| (r.n as f64, g(&PerComm::of(&r.server, r.n, r.big))))
                .filter(|&(n, v)| n > 0.0 && v > 0.0)
                .collect()
        })
        .collect();
    let (w, h) = (760.0, 460.0);
    let (ml, mr, mt, mb) = (80.0, 230.0, 40.0, 60.0);
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(o, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        o,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">Cost per comm against N ({}, server side)</text>"#,
        (ml + w - mr) / 2.0,
        xml_escape(&m.plugin_name)
    );
    let all: Vec<(f64, f64)> = pts.iter().flatten().copied().collect();
    if all.is_empty() {
        let _ = writeln!(o, r#"<text x="100" y="100">no data</text></svg>"#);
        return o;
    }
    let lx = |n: f64| n.log10();
    let x0 = all
        .iter()
        .map(|p| lx(p.0))
        .fold(f64::INFINITY, f64::min)
        .floor();
    let x1 = all
        .iter()
        .map(|p| lx(p.0))
        .fold(f64::NEG_INFINITY, f64::max)
        .ceil()
        .max(x0 + 1.0);
    let y0 = all
        .iter()
        .map(|p| p.1.log10())
        .fold(f64::INFINITY, f64::min)
        .floor();
    let y1 = all
        .iter()
        .map(|p| p.1.log10())
        .fold(f64::NEG_INFINITY, f64::max)
        .ceil()
        .max(y0 + 1.0);
    let px = |n: f64| ml + (lx(n) - x0) / (x1 - x0) * (w - ml - mr);
    let py = |v: f64| h - mb - (v.log10() - y0) / (y1 - y0) * (h - mt - mb);
    for e in (x0 as i64)..=(x1 as i64) {
        let x = px(10f64.powi(e as i32));
        let _ = writeln!(
            o,
            r##"<line x1="{x:.1}" y1="{mt}" x2="{x:.1}" y2="{}" stroke="#ddd"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"##,
            h - mb,
            h - mb + 16.0,
            format_pow10(e)
        );
    }
    for e in (y0 as i64)..=(y1 as i64) {
        let y = py(10f64.powi(e as i32));
        let _ = writeln!(
            o,
            r##"<line x1="{ml}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            w - mr,
            ml - 6.0,
            y + 4.0,
            format_pow10(e)
        );
    }
    let _ = writeln!(
        o,
        r#"<text x="{}" y="{}" text-anchor="middle">N (comms each way)</text>"#,
        (ml + w - mr) / 2.0,
        h - 18.0
    );
    let _ = writeln!(
        o,
        r#"<text x="18" y="{}" transform="rotate(-90 18 {})" text-anchor="middle">ns</text>"#,
        h / 2.0,
        h / 2.0
    );
    for (k, ((name, color, _), p)) in series.iter().zip(&pts).enumerate() {
        let path: Vec<String> = p
            .iter()
            .map(|&(n, v)| format!("{:.1},{:.1}", px(n), py(v)))
            .collect();
        if !path.is_empty() {
            let _ = writeln!(
                o,
                r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
                path.join(" ")
            );
            for &(n, v) in p {
                let _ = writeln!(
                    o,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#,
                    px(n),
                    py(v)
                );
            }
        }
        let ly = mt + 20.0 + 20.0 * k as f64;
        let _ = writeln!(
            o,
            r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
            w - mr + 10.0,
            w - mr + 30.0,
            w - mr + 36.0,
            ly + 4.0,
            xml_escape(name)
        );
    }
    let _ = writeln!(o, "</svg>");
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scale::Verbs;

    fn snap(rss: u64, fds: u64, qp: u64) -> Snapshot {
        Snapshot {
            rss_kib: Some(rss),
            lck_kib: Some(0),
            pin_kib: None,
            fds: Some(fds),
            verbs: Some(Verbs {
                qp,
                cq: qp / 2,
                cqe: qp * 100,
                mr: qp,
                mr_bytes: qp * 4096,
            }),
        }
    }

    fn row(n: usize, sweep: f64) -> Row {
        let s = Side {
            before: snap(1000, 10, 0),
            connected: snap(1000 + 40 * n as u64, 10 + 2 * n as u64, 2 * n as u64),
            registered: snap(1000 + 40 * n as u64, 10 + 2 * n as u64, 2 * n as u64),
            after: snap(1100, 10, 0),
            connect_median_ns: 2_000_000,
            sweep_ns_per_comm: sweep,
            idle_test_ns: 50.0,
            small_msgs: 4 * n as u64,
            small_ns: 4000 * n as u64,
            ..Default::default()
        };
        Row {
            n,
            threads: 4,
            big: 1 << 20,
            server: s,
            client: s,
        }
    }

    #[test]
    fn per_comm_figures_divide_the_growth_by_n_and_a_missing_reading_stays_missing() {
        let r = row(16, 30.0);
        let p = PerComm::of(&r.server, r.n, r.big);
        assert_eq!(p.rss_kib, Some(40.0));
        assert_eq!(p.fds, Some(2.0));
        assert_eq!(p.qp, Some(2.0));
        assert_eq!(p.cqe, Some(200.0));
        assert_eq!(p.pin_kib, None);
        assert_eq!(p.left, [Some(0), Some(0), Some(0), Some(0)]);
        assert_eq!(p.small_ns_per_msg, 1000.0);
        assert_eq!(p.connect_median_us, 2000.0);
    }

    #[test]
    fn the_outputs_have_a_line_per_side_and_n_and_show_missing_values_as_dashes() {
        let m = Meta {
            plugin_path: "/x/lib,a.so".into(),
            plugin_name: "IBext".into(),
            dev: "rxe0".into(),
            qps: 1,
            label: String::new(),
        };
        let rows = [row(16, 30.0), row(256, 33.0)];
        let t = table(&m, &rows);
        assert!(
            t.contains("N = 256 vs N = 16 (server): sweep ns/comm x1.10"),
            "{t}"
        );
        assert_eq!(t.lines().filter(|l| l.contains("server")).count(), 3, "{t}");
        assert!(t.contains(" - "), "{t}");
        let c = to_csv(&m, &rows);
        let lines: Vec<&str> = c.lines().collect();
        assert_eq!(lines.len(), 5);
        let width = CSV_HEAD.split(',').count();
        assert!(lines[1].contains("\"/x/lib,a.so\""));
        assert_eq!(
            lines[1].replace("\"/x/lib,a.so\"", "p").split(',').count(),
            width
        );
        let j: Value = serde_json::from_str(&to_json(&m, &rows)).unwrap();
        assert_eq!(j["rows"][1]["n"], 256);
        assert_eq!(j["rows"][0]["server"]["per_comm"]["vmpin_kib"], Value::Null);
        let s = svg(&m, &rows);
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<polyline").count(), 4, "{s}");
    }
}
