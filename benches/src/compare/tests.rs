//! Tests of the comparison on hand-made inputs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

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
    let r = get("bw_ratio_vs_ib_write_bw_ge_1MiB").as_f64().unwrap();
    let want = 0.5 * (0.03 / (38.15 * MIB / 1e9) + 0.04 / (40.05 * MIB / 1e9));
    assert!((r - want).abs() < 1e-9, "{r} vs {want}");
    let l = get("lat8_ratio").as_f64().unwrap();
    assert!((l - 25.2 / 12.6).abs() < 1e-9);
    // 4 QPs were only measured in round 1: 0.07 / 0.03.
    let q = get("bw_ratio_ferro_4QP_split0_w32_vs_1qp_ge_1MiB")
        .as_f64()
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
    let e = d
        .add_ferro(
            "x.csv",
            &format!("{}\nferro-bench,bw\n", crate::report::CSV_HEADER),
        )
        .unwrap_err();
    assert!(
        e.to_string().contains("x.csv line 2: too few fields"),
        "{e}"
    );
}

#[test]
fn a_label_with_a_comma_reads_back_from_the_csv_ferro_bench_writes() {
    use crate::model::{Meta, Mode, Row};
    let meta = Meta {
        mode: Mode::Bw,
        plugin_path: "/x/lib.so".into(),
        plugin_name: "Ferro".into(),
        dev: "rxe0".into(),
        dev_speed_mbps: 10000,
        qps: 2,
        split: 0,
        window: 32,
        target_s: 1.0,
        label: "fast, tuned: round 7".into(),
        setup_s: 0.5,
    };
    let csv = crate::report::to_csv(&meta, &[Row::bw(Mode::Bw, 1 << 20, 100, 2.0, 32, 32)]);
    let mut d = Data::default();
    d.add_ferro("ferro-bw.csv", &csv).unwrap();
    let s = &d.fb_bw[&(2, 0, 32)];
    assert_eq!(s.in_round(1 << 20, 7), s.get(1 << 20), "{csv}");
    assert!(s.get(1 << 20).is_some());
}
