//! What a benchmark run measures and reports: the mode, the per-size rows, latency statistics
//! and the run's metadata. Plain data; the renderers are in `report`.

/// What the server measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Bw,
    Lat,
    Rate,
    /// Many comms driven round-robin by one thread (one NCCL proxy thread and its channels).
    Comms,
}

impl Mode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Bw => "bw",
            Mode::Lat => "lat",
            Mode::Rate => "rate",
            Mode::Comms => "comms",
        }
    }
}

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
    /// Verbs work and allocations per message, both processes together, as the plugin counts
    /// them (bw/rate with a plugin that exports its statistics).
    pub(crate) ops: Option<OpCounts>,
}

/// Per-message counts of one bw/rate size, summed over the sender's and the receiver's data
/// comms (and both processes' allocations), from the plugin's own counters.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct OpCounts {
    /// `ibv_post_send` calls (data writes, clear-to-send writes).
    pub(crate) send_posts: f64,
    /// `ibv_post_recv` calls.
    pub(crate) recv_posts: f64,
    /// Clear-to-send writes (each announces one or more receives).
    pub(crate) cts_writes: f64,
    /// CQ polls, and how many of them found nothing.
    pub(crate) polls: f64,
    pub(crate) empty_polls: f64,
    /// Heap allocations made by the plugin.
    pub(crate) allocations: f64,
}

impl OpCounts {
    /// The deltas of both sides' counters over `messages` messages.
    pub(crate) fn per_message(sides: [[u64; 6]; 2], messages: u64) -> OpCounts {
        let m = messages.max(1) as f64;
        let f = |i: usize| (sides[0][i] + sides[1][i]) as f64 / m;
        OpCounts {
            send_posts: f(0),
            recv_posts: f(1),
            cts_writes: f(2),
            polls: f(3),
            empty_polls: f(4),
            allocations: f(5),
        }
    }
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
            ops: None,
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
            ops: None,
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
