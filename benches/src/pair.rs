//! The paired ping-pong (`lat --against PATH`): two plugins measured in the same two processes,
//! in alternating blocks of round trips, each block of one next to a block of the other.
//!
//! Under the emulator the host's speed changes from second to second (a vCPU thread sharing a
//! host core for a while, QEMU's own threads), by up to 2x; runs of one plugin after the other,
//! seconds apart, each see a different host. Here both plugins are loaded in both processes
//! (`dlopen(RTLD_LOCAL)` keeps them apart), each with its own pair of connections, and the
//! server alternates: a block of `--block` round trips on one plugin, then one on the other
//! (the first plugin first in even pairs, the second first in odd ones, so that neither always
//! runs right after the switch), for the time target of both. The figure of merit is the median
//! over the block pairs of the ratio of the two blocks' median one-way latencies: a change of
//! speed that lasts longer than a block pair (tens of milliseconds) cancels out of it.
//!
//! The server sends one command at a time and waits for it to be carried out; the client
//! carries out whichever of its two control receives completes.

use crate::bench::{self, lat_batch};
use crate::error::{Error, Result};
use crate::model::{Mode, median, percentile};
use crate::plan::Plan;
use crate::progress::progress;
use crate::session::{self, Cmd, IdleWatch, Session};
use crate::units::fmt_size;
use crate::{BenchOpts, Common, plugin};
use ferro_nccl_standin::net::Request as Req;
use ferro_nccl_standin::{Handle, NcclExt as _, Net};
use std::cell::RefCell;
use std::io::Write as _;
use std::path::Path;
use std::process::Child;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Fewest block pairs per size, whatever the time target.
const MIN_BLOCKS: usize = 5;

/// One plugin's figures over all its blocks of one size: one-way latencies (us) or block
/// bandwidths (GB/s).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Spread {
    pub(crate) median: f64,
    pub(crate) p10: f64,
    pub(crate) p99: f64,
}

impl Spread {
    fn of(v: &[f64]) -> Spread {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        Spread {
            median: median(&s),
            p10: percentile(&s, 10.0),
            p99: percentile(&s, 99.0),
        }
    }
}

/// One size's figures: both plugins' spread over all their blocks, and the per-block ratios
/// (first plugin / second).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PairRow {
    pub(crate) size: u64,
    pub(crate) block: u64,
    pub(crate) a: Spread,
    pub(crate) b: Spread,
    /// Median of block `i` of the first plugin over median of block `i` of the second.
    pub(crate) ratios: Vec<f64>,
    /// Bandwidth (higher is better) rather than latency.
    pub(crate) higher_is_better: bool,
}

impl PairRow {
    fn new(
        size: u64,
        block: u64,
        a: &[f64],
        b: &[f64],
        ratios: Vec<f64>,
        higher_is_better: bool,
    ) -> PairRow {
        PairRow {
            size,
            block,
            a: Spread::of(a),
            b: Spread::of(b),
            ratios,
            higher_is_better,
        }
    }

    /// The median of the per-block ratios.
    pub(crate) fn ratio(&self) -> f64 {
        median(&self.ratios)
    }

    /// (25th, 75th) percentiles of the per-block ratios.
    pub(crate) fn ratio_quartiles(&self) -> (f64, f64) {
        let mut s = self.ratios.clone();
        s.sort_by(f64::total_cmp);
        (percentile(&s, 25.0), percentile(&s, 75.0))
    }

    /// Block pairs in which the first plugin did better: a lower median latency, a higher
    /// bandwidth.
    pub(crate) fn a_ahead(&self) -> usize {
        let ahead = |r: f64| {
            if self.higher_is_better {
                r > 1.0
            } else {
                r < 1.0
            }
        };
        self.ratios.iter().filter(|&&r| ahead(r)).count()
    }
}

/// The server of a paired run: starts the client, loads both plugins, connects both, measures
/// and reports.
pub(crate) fn serve(c: &Common, o: &BenchOpts, against: &Path, spawn: bool) -> Result<()> {
    if !matches!(o.mode, Mode::Lat | Mode::Bw) || o.scale.is_some() {
        return Err(Error::new("--against measures lat or bw only"));
    }
    if !spawn {
        return Err(Error::new(
            "--against needs `run` (the client process loads both plugins and is started here)",
        ));
    }
    if o.json.is_some() {
        return Err(Error::new("--against writes --csv only"));
    }
    let sizes = crate::sizes_of(o)?;
    let _ = crate::apply_env(c);
    let ch = crate::spawn_client(c, &crate::plugin_path(c)?)?;
    progress(&format!("started the client process (pid {})", ch.id()));
    let ch = Rc::new(RefCell::new(ch));
    let result = serve_with(c, o, against, &sizes, &ch);
    crate::reap_client(&ch, result)
}

fn serve_with(
    c: &Common,
    o: &BenchOpts,
    against: &Path,
    sizes: &[u64],
    ch: &Rc<RefCell<Child>>,
) -> Result<()> {
    let net_a = crate::load(c)?;
    let net_b = crate::load_at(against)?;
    let dev_a = plugin::find_device(&net_a, &c.dev)?;
    let dev_b = plugin::find_device(&net_b, c.against_dev.as_deref().unwrap_or(&c.dev))?;
    let names = [dev_a.name.clone(), dev_b.name.clone()];
    let (ha, la) = net_a.listen(dev_a.index).call("listen")?;
    let (hb, lb) = net_b.listen(dev_b.index).call("listen")?;
    crate::pass_handle(
        &mut ch.borrow_mut(),
        &format!("{}\n{}", ha.to_hex(), hb.to_hex()),
    )?;
    let wait = crate::wait_cfg(c);
    let peer = || Some(crate::peer_check(ch.clone()));
    let mut sa = Session::accept(&net_a, dev_a, la, wait, peer())?;
    let mut sb = Session::accept(&net_b, dev_b, lb, wait, peer())?;
    progress(&format!(
        "connected both plugins both ways ({:.2} s, {:.2} s)",
        sa.setup_s, sb.setup_s
    ));
    let plan = Plan {
        mode: o.mode,
        sizes: sizes.to_vec(),
        window: if o.mode == Mode::Lat { 1 } else { o.window },
        max_iters: o.iters,
        target: Duration::from_secs_f64(o.time_s),
        warmup: o.warmup,
        comms: 1,
        post_ahead: o.post_ahead,
    };
    let block = match (o.block, o.mode) {
        (0, Mode::Lat) => 100,
        (0, _) => 8,
        (n, _) => n,
    };
    let rows = server(&mut sa, &mut sb, &plan, block)?;
    sa.close()?;
    sb.close()?;
    let who = [describe(&net_a, &names[0]), describe(&net_b, &names[1])];
    print!("{}", table(&who, &plan, &rows));
    std::io::stdout()
        .flush()
        .map_err(|e| Error::new(format!("writing the table: {e}")))?;
    if let Some(p) = &o.csv {
        crate::report::write_file(p, &csv(&who, &o.label, &rows))?;
        progress(&format!("wrote {}", p.display()));
    }
    Ok(())
}

fn describe(net: &Net, dev: &str) -> String {
    format!("{} ({}) on {dev}", plugin::name(net), net.path().display())
}

/// Runs the plan's sizes, alternating blocks between `a` and `b`: `block` round trips (lat) or
/// `block` messages (bw) each.
fn server(
    a: &mut Session<'_>,
    b: &mut Session<'_>,
    plan: &Plan,
    block: u64,
) -> Result<Vec<PairRow>> {
    bench::hello(a, plan)?;
    bench::hello(b, plan)?;
    let lat = plan.mode == Mode::Lat;
    let mut rows = Vec::new();
    for &size in &plan.sizes {
        // One block on `s`: its one-way latencies (us), or its bandwidth (GB/s).
        let one = |s: &mut Session<'_>, n: u64| -> Result<Vec<f64>> {
            if lat {
                let rtt = lat_batch(s, size, n, plan.post_ahead)?.rtt;
                return Ok(rtt.iter().map(|r| r * 0.5e6).collect());
            }
            let bp = Plan {
                max_iters: Some(n),
                // The block is its message count; the time target does not cut it short.
                target: Duration::from_secs(3600),
                ..plan.clone()
            };
            Ok(vec![bench::server_bw(s, &bp, size, None)?.algbw_gbs])
        };
        let warm = if lat { plan.warmup.max(1) } else { block };
        one(a, warm)?;
        one(b, warm)?;
        let (mut wa, mut wb, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        // Both plugins share the time target's double.
        let target = 2.0 * plan.target.as_secs_f64();
        let cap = plan.max_iters.unwrap_or(u64::MAX);
        let start = Instant::now();
        while (ratios.len() < MIN_BLOCKS || start.elapsed().as_secs_f64() < target)
            && (wa.len() as u64) < cap
        {
            let (ba, bb) = if ratios.len() % 2 == 0 {
                let ba = one(a, block)?;
                (ba, one(b, block)?)
            } else {
                let bb = one(b, block)?;
                (one(a, block)?, bb)
            };
            ratios.push(median(&ba) / median(&bb).max(f64::MIN_POSITIVE));
            wa.extend(ba);
            wb.extend(bb);
        }
        let row = PairRow::new(size, block, &wa, &wb, ratios, !lat);
        progress(&format!(
            "{} {}: {} block pairs of {block}: median {:.4} against {:.4}, per-block ratio median {:.3}",
            plan.mode.name(),
            fmt_size(size),
            row.ratios.len(),
            row.a.median,
            row.b.median,
            row.ratio()
        ));
        rows.push(row);
    }
    a.send_cmd(Cmd::Done)?;
    b.send_cmd(Cmd::Done)?;
    Ok(rows)
}

/// The client of a paired run: loads both plugins, reads both handles (one line each), connects
/// both, and carries out each command as it arrives on either control channel.
pub(crate) fn client(c: &Common, against: &Path) -> Result<()> {
    let _ = crate::apply_env(c);
    let net_a = crate::load(c)?;
    let net_b = crate::load_at(against)?;
    let dev_a = plugin::find_device(&net_a, &c.dev)?;
    let dev_b = plugin::find_device(&net_b, c.against_dev.as_deref().unwrap_or(&c.dev))?;
    let ha = Handle::from_hex(&session::read_handle_line()?)?;
    let hb = Handle::from_hex(&session::read_handle_line()?)?;
    let wait = crate::wait_cfg(c);
    let mut sa = Session::connect(&net_a, dev_a, ha, wait)?;
    let mut sb = Session::connect(&net_b, dev_b, hb, wait)?;
    progress("connected both plugins both ways");
    let mut idle = IdleWatch::default();
    let mut ca = Some(sa.post_cmd_recv()?);
    let mut cb = Some(sb.post_cmd_recv()?);
    while ca.is_some() || cb.is_some() {
        if command_arrived(&mut sa, &mut ca, c.verbose)?
            || command_arrived(&mut sb, &mut cb, c.verbose)?
        {
            idle.progress();
        } else {
            idle.idle(&wait, &mut None, &|| {
                "waiting for the server's next command on either plugin".into()
            })?;
        }
    }
    sa.close()?;
    sb.close()
}

/// If the command awaited on `s`'s control receive `ctrl` arrived: carries it out, leaves the
/// next command's receive in `ctrl` (`None` after `Done`) and says so.
fn command_arrived(s: &mut Session<'_>, ctrl: &mut Option<Req>, verbose: bool) -> Result<bool> {
    let Some(r) = *ctrl else {
        return Ok(false);
    };
    let Some(n) = session::test(s.net, r)? else {
        return Ok(false);
    };
    let cmd = s.read_cmd(n)?;
    *ctrl = bench::client_exec(s, cmd, verbose)?;
    Ok(true)
}

/// The table on stdout.
pub(crate) fn table(who: &[String; 2], plan: &Plan, rows: &[PairRow]) -> String {
    let mut t = String::new();
    let head = format!("# ferro-bench {}, paired: ", plan.mode.name());
    t.push_str(&format!(
        "{head}A = {}\n#{}B = {}\n",
        who[0],
        " ".repeat(head.len() - 1),
        who[1]
    ));
    if plan.mode == Mode::Lat {
        t.push_str(&format!(
            "# one-way latency (half the round trip), us; blocks of round trips alternating A, B in the same two processes; receives posted ahead: {}\n",
            plan.post_ahead
        ));
    } else {
        t.push_str(&format!(
            "# bandwidth, GB/s (1e9 bytes), of each block of messages; blocks alternating A, B in the same two processes; {} in flight\n",
            plan.window
        ));
    }
    t.push_str(&format!(
        "{:>8} {:>7} {:>10} {:>10} {:>9} {:>9} {:>10} {:>15} {:>9}\n",
        "size", "blocks", "A median", "B median", "A p10", "B p10", "A/B", "A/B p25-p75", "A ahead"
    ));
    // Latencies in us to 0.01; bandwidths in GB/s to 0.00001.
    let p = if plan.mode == Mode::Lat { 2 } else { 5 };
    for r in rows {
        let (q1, q3) = r.ratio_quartiles();
        t.push_str(&format!(
            "{:>8} {:>7} {:>10.p$} {:>10.p$} {:>9.p$} {:>9.p$} {:>10.3} {:>15} {:>9}\n",
            fmt_size(r.size),
            r.ratios.len(),
            r.a.median,
            r.b.median,
            r.a.p10,
            r.b.p10,
            r.ratio(),
            format!("{q1:.3}-{q3:.3}"),
            format!("{}/{}", r.a_ahead(), r.ratios.len())
        ));
    }
    t.push_str("# A/B: median over the block pairs of (A's block median / B's block median)\n");
    t
}

/// The CSV (`--csv`), one row per size.
pub(crate) fn csv(who: &[String; 2], label: &str, rows: &[PairRow]) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let head = [
        "tool",
        "mode",
        "unit",
        "size",
        "block",
        "blocks",
        "a_median",
        "b_median",
        "a_p10",
        "b_p10",
        "a_p99",
        "b_p99",
        "ratio_median",
        "ratio_p25",
        "ratio_p75",
        "a_ahead_blocks",
        "a",
        "b",
        "label",
    ];
    let _ = w.write_record(head);
    for r in rows {
        let (q1, q3) = r.ratio_quartiles();
        let rec = [
            "ferro-bench".to_string(),
            (if r.higher_is_better {
                "bw-paired"
            } else {
                "lat-paired"
            })
            .to_string(),
            (if r.higher_is_better { "GB/s" } else { "us" }).to_string(),
            r.size.to_string(),
            r.block.to_string(),
            r.ratios.len().to_string(),
            format!("{:.5}", r.a.median),
            format!("{:.5}", r.b.median),
            format!("{:.5}", r.a.p10),
            format!("{:.5}", r.b.p10),
            format!("{:.5}", r.a.p99),
            format!("{:.5}", r.b.p99),
            format!("{:.4}", r.ratio()),
            format!("{q1:.4}"),
            format!("{q3:.4}"),
            r.a_ahead().to_string(),
            who[0].clone(),
            who[1].clone(),
            label.to_string(),
        ];
        let _ = w.write_record(&rec);
    }
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_figure_of_merit_is_the_median_of_the_per_block_ratios() {
        let r = PairRow::new(
            8,
            3,
            &[1.0, 2.0, 3.0],
            &[2.0, 2.0, 2.0],
            vec![0.9, 1.2, 0.8, 0.95],
            false,
        );
        assert!((r.ratio() - 0.925).abs() < 1e-12);
        assert_eq!(r.a_ahead(), 3);
        let bw = PairRow::new(8, 3, &[2.0], &[1.0], vec![0.9, 1.2, 1.1, 0.95], true);
        assert_eq!(bw.a_ahead(), 2, "for bandwidth, a ratio above 1 is ahead");
        assert_eq!(r.ratio_quartiles(), (0.8, 0.95));
    }

    #[test]
    fn the_csv_has_one_row_per_size_under_its_header() {
        let rows = vec![PairRow::new(
            8,
            2,
            &[1.0, 1.0],
            &[2.0, 2.0],
            vec![0.5; 5],
            false,
        )];
        let who = [
            "a (x) on rxe0".to_string(),
            "b, quoted (y) on rxe0".to_string(),
        ];
        let text = csv(&who, "run 1", &rows);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("tool,mode,unit,size,block,blocks,a_median"));
        assert!(lines[1].starts_with("ferro-bench,lat-paired,us,8,2,5,1.00000,2.00000"));
        assert!(
            lines[1].contains("\"b, quoted (y) on rxe0\""),
            "{}",
            lines[1]
        );
        assert!(lines[1].ends_with(",run 1"));
    }

    #[test]
    fn the_table_names_both_plugins_and_gives_the_ratio() {
        let rows = vec![PairRow::new(
            8,
            2,
            &[1.0, 1.0],
            &[2.0, 2.0],
            vec![0.5; 5],
            false,
        )];
        let plan = Plan {
            mode: crate::model::Mode::Lat,
            sizes: vec![8],
            window: 1,
            max_iters: None,
            target: Duration::from_secs(1),
            warmup: 3,
            comms: 1,
            post_ahead: 0,
        };
        let who = ["ferro".to_string(), "reference".to_string()];
        let t = table(&who, &plan, &rows);
        assert!(
            t.contains("A = ferro") && t.contains("B = reference"),
            "{t}"
        );
        assert!(t.contains("0.500") && t.contains("5/5"), "{t}");
    }
}
