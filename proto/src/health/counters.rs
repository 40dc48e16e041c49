//! Per-comm counters: what a comm did, for the line logged when it closes and for the stall
//! warnings. Plain integers, incremented where the core decides something (or, for verbs
//! calls, by the transport), so they cost nothing beyond the increments.

use std::fmt::Write as _;

/// What one comm did so far.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Messages matched to a posted buffer (send comm) or received into one (receive comm).
    pub messages: u64,
    /// Their bytes (after truncation, as placed in the receiver's buffers).
    pub bytes: u64,
    /// Requests handed to NCCL (sends, receives, flushes).
    pub requests: u64,
    /// Calls answered with a NULL request (NCCL retries them).
    pub retries: u64,
    /// Of the send retries: the receiver had not posted the group yet (clear-to-send wait).
    pub cts_waits: u64,
    /// Of the send retries: the tag's buffers in the head group were taken (a send running
    /// ahead of other tags).
    pub tag_ahead: u64,
    /// Of the send retries: the FIFO slot's previous group still had writes in flight.
    pub slot_busy: u64,
    /// Of the send retries: a group's writes did not fit in a QP's send queue yet.
    pub queue_full: u64,
    /// Sends larger than the posted buffer, truncated to it.
    pub truncated: u64,
    /// Successful work completions handled.
    pub completions: u64,
    /// Failures recorded (failed completions, failed posts, a dead peer).
    pub errors: u64,
    /// `ibv_post_send` calls made (a chain of work requests is one call), counted by the
    /// transport.
    pub send_posts: u64,
    /// `ibv_post_recv` calls made, counted by the transport.
    pub recv_posts: u64,
    /// Immediates the send comm wrote apart from their data under adaptive routing (0-byte
    /// writes with immediate after a lone buffer's plain writes, one per QP that carried some
    /// of it), in groups' first posts; counted by the transport.
    pub immediates_apart: u64,
    /// Clear-to-send writes made (receive comm): each carries the entries of one or more
    /// receive groups.
    pub cts_writes: u64,
    /// CQ polls made, and how many of them found nothing.
    pub polls: u64,
    pub empty_polls: u64,
    /// Work completions polled from each member device's CQ, by member (a physical device has
    /// member 0 only), counted by the transport.
    pub member_completions: [u64; crate::MAX_DEVS],
    /// Recovery epochs entered (a recovery restarted by a second failure counts again).
    pub recoveries: u64,
    /// QPs rebuilt by recoveries that resumed.
    pub qps_rebuilt: u64,
    /// Sends of groups replayed after a recovery (send comm), and the data bytes replayed.
    pub sends_replayed: u64,
    pub bytes_replayed: u64,
    /// Time spent stopped for recovery, from each stop to the resume, in nanoseconds.
    pub recovery_ns: u64,
}

impl Counters {
    /// One line, e.g. "sent 12 messages (4096 bytes), 12 requests, 3 retries (clear-to-send 2,
    /// tag ahead 1, slot busy 0), 0 truncated, 12 completions, 0 errors, 12 send posts,
    /// 0 receive posts, 30 polls (18 empty)"; a receive comm adds its clear-to-send writes.
    pub fn summary(&self, sending: bool) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "{} {} messages ({} bytes), {} requests, {} retries",
            if sending { "sent" } else { "received" },
            self.messages,
            self.bytes,
            self.requests,
            self.retries
        );
        if sending {
            let _ = write!(
                s,
                " (clear-to-send {}, tag ahead {}, slot busy {}), {} truncated",
                self.cts_waits, self.tag_ahead, self.slot_busy, self.truncated
            );
        }
        let _ = write!(
            s,
            ", {} completions, {} errors, {} send posts, {} receive posts",
            self.completions, self.errors, self.send_posts, self.recv_posts
        );
        if !sending {
            let _ = write!(s, " ({} clear-to-send writes)", self.cts_writes);
        }
        let _ = write!(s, ", {} polls ({} empty)", self.polls, self.empty_polls);
        if sending && self.queue_full > 0 {
            let _ = write!(s, ", {} waits for send-queue room", self.queue_full);
        }
        if sending && self.immediates_apart > 0 {
            let _ = write!(
                s,
                ", {} immediates apart (adaptive routing)",
                self.immediates_apart
            );
        }
        if self.recoveries > 0 {
            let _ = write!(
                s,
                ", {} recoveries ({} QPs rebuilt",
                self.recoveries, self.qps_rebuilt
            );
            if sending {
                let _ = write!(
                    s,
                    ", {} sends replayed ({} bytes)",
                    self.sends_replayed, self.bytes_replayed
                );
            }
            let _ = write!(s, ", {} ms in recovery)", self.recovery_ns / 1_000_000);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_names_every_counter() {
        let c = Counters {
            messages: 12,
            bytes: 4096,
            requests: 12,
            retries: 3,
            cts_waits: 2,
            tag_ahead: 1,
            completions: 12,
            send_posts: 12,
            polls: 30,
            empty_polls: 18,
            ..Counters::default()
        };
        assert_eq!(
            c.summary(true),
            "sent 12 messages (4096 bytes), 12 requests, 3 retries (clear-to-send 2, tag ahead 1, slot busy 0), 0 truncated, 12 completions, 0 errors, 12 send posts, 0 receive posts, 30 polls (18 empty)"
        );
        assert!(c.summary(false).starts_with("received 12 messages"));
        assert!(
            c.summary(false)
                .contains("12 send posts, 0 receive posts (0 clear-to-send writes), 30 polls")
        );
        assert!(!c.summary(false).contains("truncated"));
        assert!(
            !c.summary(true).contains("recover"),
            "a comm that never recovered says nothing of it"
        );
    }

    #[test]
    fn a_send_comm_under_adaptive_routing_counts_its_immediates_apart() {
        let c = Counters {
            immediates_apart: 6,
            ..Counters::default()
        };
        assert!(
            c.summary(true)
                .ends_with(", 0 polls (0 empty), 6 immediates apart (adaptive routing)"),
            "{}",
            c.summary(true)
        );
        assert!(!c.summary(false).contains("apart"));
        assert!(
            !Counters::default().summary(true).contains("apart"),
            "a comm that sent none says nothing of them"
        );
    }

    #[test]
    fn a_comm_that_recovered_says_how_often_and_what_it_cost() {
        let c = Counters {
            recoveries: 2,
            qps_rebuilt: 8,
            sends_replayed: 3,
            bytes_replayed: 4096,
            recovery_ns: 1_500_000_000,
            ..Counters::default()
        };
        assert!(
            c.summary(true).ends_with(
                ", 0 polls (0 empty), 2 recoveries (8 QPs rebuilt, 3 sends replayed (4096 bytes), 1500 ms in recovery)"
            ),
            "{}",
            c.summary(true)
        );
        assert!(
            c.summary(false)
                .ends_with(", 2 recoveries (8 QPs rebuilt, 1500 ms in recovery)")
        );
    }
}
