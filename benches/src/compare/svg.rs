//! The bandwidth plot (SVG, log-log), plugin next to perftest.

use super::data::{Cfg, Data, Series, cfg_name};
use crate::units::fmt_size;
use std::fmt::Write as _;

pub(super) fn svg(d: &Data) -> String {
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

pub(crate) fn format_pow10(e: i64) -> String {
    if (-3..=3).contains(&e) {
        let v = 10f64.powi(e as i32);
        format!("{v}")
    } else {
        format!("1e{e}")
    }
}

pub(crate) fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

// ------------------------------------------------------------------------------------ main
