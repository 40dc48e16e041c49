//! The listener's bounds on strangers: connections that have not (yet) presented the listen
//! secret. This module owns the rules, not the sockets: how many strangers one listener keeps
//! ([`MAX_STRANGERS`]) and which one a full table drops ([`eviction`]), how long one may take to
//! present the secret ([`SECRET_DEADLINE`], enforced by [`super::Handshake::handle_timeout`]),
//! how what a stranger sent is shown in a log line ([`shown`]), and when a line about repeated
//! events (dropped strangers, failing `accept` calls) is due ([`LogTally`]), so that a flood
//! of them cannot flood the log.
//!
//! A connection stops being a stranger once its `Connect` carried the right secret: from then on
//! it is the real peer, which no cap ever drops, and only the no-progress bound
//! ([`super::HANDSHAKE_TIMEOUT`]) applies to it.

use std::fmt::Write as _;
use std::time::Duration;

/// How many strangers one listener keeps at most; one more accepted drops the oldest.
///
/// A listener has at most a few real connections being set up at once (NCCL accepts one
/// connection per listen comm and channel), so 256 leaves room for many slow real peers, while
/// bounding what a flood costs: at most 256 sockets (file descriptors) per listener. A real
/// peer writes its `Connect` in the same `connect` call that sees its TCP connection complete,
/// so it is read long before 256 newer connections could push it out.
pub const MAX_STRANGERS: usize = 256;

/// How long a stranger has from being accepted to present the secret, in total: bytes that
/// trickle in do not extend it. A real peer presents it within milliseconds (its first message
/// is 100-odd bytes, written at once); 5 s is generous for a slow or busy connecting side and
/// short enough that a silent or trickling client holds its slot briefly.
pub const SECRET_DEADLINE: Duration = Duration::from_secs(5);

/// How many bytes of what a stranger sent a log line shows at most.
pub const SHOWN_BYTES: usize = 64;

/// At most one log line per this interval about repeated events of one kind on one listener
/// (after the first, which is logged at once).
pub const REPORT_INTERVAL: Duration = Duration::from_secs(10);

/// The index of the connection a full table drops: the oldest stranger, when more than
/// [`MAX_STRANGERS`] are pending; `None` while there is room. `pending` is in the order the
/// connections were accepted (oldest first); `is_stranger` says which have not presented the
/// secret. A connection that presented it is never chosen.
pub fn eviction<T>(pending: &[T], is_stranger: impl Fn(&T) -> bool) -> Option<usize> {
    let strangers = pending.iter().filter(|p| is_stranger(p)).count();
    if strangers <= MAX_STRANGERS {
        return None;
    }
    pending.iter().position(is_stranger)
}

/// What a stranger sent, fit for a log line: the first [`SHOWN_BYTES`] bytes, printable ASCII
/// as it is and every other byte escaped (`\n`, `\\`, `\x1b`), with the full length said when
/// the rest was cut.
pub fn shown(bytes: &[u8]) -> String {
    shown_up_to(bytes, SHOWN_BYTES)
}

/// [`shown`] with another limit (for text from a peer that presented the secret, or that this
/// side connected to: a `Reject`'s reason).
pub fn shown_up_to(bytes: &[u8], limit: usize) -> String {
    let mut out = String::with_capacity(limit.min(bytes.len()) + 24);
    for &b in bytes.iter().take(limit) {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            b' '..=b'~' => out.push(char::from(b)),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    if bytes.len() > limit {
        let _ = write!(out, "... ({} bytes in all)", bytes.len());
    }
    out
}

/// What a due log line covers: `count` events since the last line, `total` since the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    pub count: u64,
    pub total: u64,
}

/// Counts repeated events of one kind and says when a log line about them is due: the first
/// event at once, then at most one line per [`REPORT_INTERVAL`], each covering every event since
/// the previous line, so none goes unreported and a flood costs one line per interval.
#[derive(Debug, Default, Clone)]
pub struct LogTally {
    unreported: u64,
    total: u64,
    last_line: Option<Duration>,
}

impl LogTally {
    pub fn new() -> LogTally {
        LogTally::default()
    }

    /// One more event at `now`; the line to log now, if one is due.
    pub fn record(&mut self, now: Duration) -> Option<Report> {
        self.unreported += 1;
        self.total += 1;
        self.poll(now)
    }

    /// The line about events not reported yet, if one is due at `now` (call it now and then, so
    /// that the last events of a burst are reported once the interval has passed).
    pub fn poll(&mut self, now: Duration) -> Option<Report> {
        let due = self
            .last_line
            .is_none_or(|t| now.saturating_sub(t) >= REPORT_INTERVAL);
        if self.unreported == 0 || !due {
            return None;
        }
        self.last_line = Some(now);
        Some(self.take())
    }

    /// The line about events not reported yet, due or not (when the listener closes).
    pub fn flush(&mut self) -> Option<Report> {
        (self.unreported > 0).then(|| self.take())
    }

    /// Events since the start.
    pub fn total(&self) -> u64 {
        self.total
    }

    fn take(&mut self) -> Report {
        let count = std::mem::take(&mut self.unreported);
        Report {
            count,
            total: self.total,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Duration = Duration::from_secs(1000);

    #[test]
    fn there_is_no_eviction_while_the_strangers_fit() {
        let pending = vec![true; MAX_STRANGERS];
        assert_eq!(eviction(&pending, |s| *s), None);
        // Authenticated peers do not count towards the cap.
        let mut with_peers = vec![false; 10];
        with_peers.extend(vec![true; MAX_STRANGERS]);
        assert_eq!(eviction(&with_peers, |s| *s), None);
    }

    #[test]
    fn a_full_table_drops_the_oldest_stranger_and_never_an_authenticated_peer() {
        // The oldest entries are authenticated peers; the oldest stranger comes after them.
        let mut pending = vec![false, false, true, false];
        pending.extend(vec![true; MAX_STRANGERS]);
        assert_eq!(eviction(&pending, |s| *s), Some(2));
        // Evicting until the table fits removes strangers only, oldest first.
        let mut evicted = Vec::new();
        let mut ages: Vec<(usize, bool)> = pending.iter().copied().enumerate().collect();
        ages.extend((0..5).map(|i| (1000 + i, true)));
        while let Some(i) = eviction(&ages, |(_, s)| *s) {
            evicted.push(ages.remove(i));
        }
        assert_eq!(evicted.len(), 6);
        assert!(evicted.iter().all(|(_, s)| *s));
        assert_eq!(
            evicted.iter().map(|(age, _)| *age).collect::<Vec<_>>(),
            vec![2, 4, 5, 6, 7, 8]
        );
        assert_eq!(ages.iter().filter(|(_, s)| !*s).count(), 3);
    }

    #[test]
    fn what_a_stranger_sent_is_escaped_and_cut_at_64_bytes() {
        assert_eq!(shown(b"hello"), "hello");
        assert_eq!(
            shown(b"a\nb\r\t\x1b[31m\\\"\x00\xff"),
            "a\\nb\\r\\t\\x1b[31m\\\\\\\"\\x00\\xff"
        );
        let long = [b'x'; 1000];
        let s = shown(&long);
        assert_eq!(s, format!("{}... (1000 bytes in all)", "x".repeat(64)));
        assert!(!shown(&[b'\n'; 100]).contains('\n'));
        assert_eq!(shown(&[b'y'; SHOWN_BYTES]), "y".repeat(SHOWN_BYTES));
    }

    #[test]
    fn the_first_event_is_reported_at_once_and_a_burst_costs_one_line_per_interval() {
        let mut t = LogTally::new();
        assert_eq!(t.record(T0), Some(Report { count: 1, total: 1 }));
        for i in 0..1999 {
            assert_eq!(t.record(T0 + Duration::from_millis(i)), None);
        }
        assert_eq!(
            t.poll(T0 + REPORT_INTERVAL - Duration::from_millis(1)),
            None
        );
        assert_eq!(
            t.poll(T0 + REPORT_INTERVAL),
            Some(Report {
                count: 1999,
                total: 2000
            })
        );
        assert_eq!(t.poll(T0 + 5 * REPORT_INTERVAL), None, "nothing new");
        // The next event after a quiet interval is reported at once.
        assert_eq!(
            t.record(T0 + 5 * REPORT_INTERVAL),
            Some(Report {
                count: 1,
                total: 2001
            })
        );
        assert_eq!(t.total(), 2001);
    }

    #[test]
    fn flushing_reports_what_is_left_even_before_the_interval() {
        let mut t = LogTally::new();
        assert_eq!(t.flush(), None);
        t.record(T0);
        t.record(T0);
        t.record(T0);
        assert_eq!(t.flush(), Some(Report { count: 2, total: 3 }));
        assert_eq!(t.flush(), None);
    }
}
