//! The receive side of recovery in place: stopping (a failure seen here, or the peer's
//! request), the report of what arrived ([`ReceiverState`]), and resuming: the receives to
//! post again on the rebuilt QPs, the flushes to post again, and the clear-to-send write that
//! announces every outstanding group once more. The rules are in [`crate::recovery`] and
//! `docs/DESIGN.md`, "Recovery in place".

use super::{CtsWrite, RecvCore, RecvReq};
use crate::comm::CoreError;
use crate::comm::wr_id::WrId;
use crate::recovery::{GroupArrivals, ReceiverState, RecoveryError};
use std::time::Duration;

/// Receives to post again for one outstanding group: one on each QP in `qps` (bit `q` for QP
/// `q`) whose immediate had not arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repost {
    pub req: u32,
    pub seq: u64,
    pub qps: u128,
    epoch: u32,
}

impl Repost {
    /// The QPs to post a receive on, in order.
    pub fn qps(&self) -> impl Iterator<Item = usize> + '_ {
        (0..128).filter(|&q| self.qps & (1u128 << q) != 0)
    }

    /// The `wr_id` of the receive on QP `q`, in the new epoch.
    pub fn wr_id(&self, q: usize) -> u64 {
        WrId::recv_on(self.req, q, self.epoch)
    }
}

/// What the transport does when the receive comm resumes, in this order: post the receives of
/// `reposts` (by increasing group, so each QP gets them in the order the sender replays), post
/// the reads of every flush in `flushes` again, post `cts`, then tell the peer it resumed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvResume {
    pub epoch: u32,
    pub reposts: Vec<Repost>,
    /// Flush requests whose reads are posted again (every read of each), with the `wr_id` of
    /// [`RecvCore::flush_wr_id_now`].
    pub flushes: Vec<u32>,
    /// The entries of every outstanding group, written again (the sender finds the same bytes
    /// for a group it already read, and takes nothing twice).
    pub cts: Option<CtsWrite>,
}

impl RecvCore {
    /// The most one recovery may take; zero (the default) turns recovery off, and a failure
    /// fails the comm as it always did.
    pub fn set_recovery_budget(&mut self, budget: Duration) {
        self.recovery.set_budget(budget);
    }

    /// The comm's QPs failed (`cause` says how): the comm stops at the next epoch (a failure
    /// during a recovery restarts it) and the new epoch is returned, to be sent to the peer
    /// with [`RecvCore::receiver_state`]. The transport drains its completion queues into the
    /// core before, with its QPs already in the error state, so nothing arrives after.
    pub fn begin_recovery(&mut self, now: Duration, cause: &str) -> Result<u32, RecoveryError> {
        self.recovery_usable(now)?;
        let old = self.recovery.epoch();
        let epoch = self.recovery.stop(now, cause)?;
        self.health.counters.recoveries += u64::from(epoch - old);
        Ok(epoch)
    }

    /// The peer asked to recover at `epoch`: a later epoch than this side's stops (or
    /// restarts) it there (`Ok(true)`: answer with the same request and the state); the
    /// current or an older one changes nothing.
    pub fn on_peer_recover(&mut self, epoch: u32, now: Duration) -> Result<bool, RecoveryError> {
        self.recovery_usable(now)?;
        let old = self.recovery.epoch();
        let new = self.recovery.adopt(epoch, now)?;
        if new {
            self.health.counters.recoveries += u64::from(epoch - old);
        }
        Ok(new)
    }

    fn recovery_usable(&mut self, now: Duration) -> Result<(), RecoveryError> {
        self.health.check().map_err(RecoveryError::Failed)?;
        self.check_recovery(now).map_err(|e| match e {
            CoreError::Failed(f) => RecoveryError::Failed(f),
            other => RecoveryError::Inconsistent(other.to_string()),
        })
    }

    /// At every look while stopped: fails the comm (sticky) when its recovery has run past
    /// the budget, with a failure naming what was pending and what was tried.
    pub fn check_recovery(&mut self, now: Duration) -> Result<(), CoreError> {
        if self.recovery.is_stopped() && self.recovery.expired(now) {
            let f = self.recovery.gave_up(now, "receive", &self.describe_wait());
            return Err(self.health.fail(f).clone().into());
        }
        Ok(())
    }

    /// The report of a stopped comm: the groups posted and, for each one not complete, which
    /// QPs' immediates arrived.
    pub fn receiver_state(&self) -> Result<ReceiverState, RecoveryError> {
        if !self.recovery.is_stopped() {
            return Err(RecoveryError::NotReady("the comm is not recovering"));
        }
        let mut outstanding: Vec<GroupArrivals> = self
            .reqs
            .iter()
            .filter_map(|(_, r)| match *r {
                RecvReq::Recv {
                    seq,
                    done: None,
                    arrived,
                    ..
                } => Some(GroupArrivals { seq, arrived }),
                _ => None,
            })
            .collect();
        outstanding.sort_unstable_by_key(|g| g.seq);
        Ok(ReceiverState {
            epoch: self.recovery.epoch(),
            next_seq: self.seq,
            outstanding,
        })
    }

    /// The rebuilt QPs are connected to the peer's (whose answer named `epoch`): the comm runs
    /// again. Returns what to post before telling the peer.
    pub fn resume(&mut self, epoch: u32, now: Duration) -> Result<RecvResume, RecoveryError> {
        self.health.check().map_err(RecoveryError::Failed)?;
        self.recovery.expect(epoch)?;
        let mut reposts = Vec::new();
        let mut flushes = Vec::new();
        for (req, r) in self.reqs.iter_mut() {
            match r {
                RecvReq::Recv {
                    seq,
                    done: None,
                    arrived,
                    ..
                } => {
                    let qps = self
                        .layout
                        .group_qps(*seq)
                        .filter(|&q| q < 128)
                        .fold(0u128, |m, q| m | (1u128 << q))
                        & !*arrived;
                    reposts.push(Repost {
                        req,
                        seq: *seq,
                        qps,
                        epoch,
                    });
                }
                RecvReq::Flush { remaining, reads } if *remaining > 0 => {
                    *remaining = *reads;
                    flushes.push(req);
                }
                _ => {}
            }
        }
        reposts.sort_unstable_by_key(|r| r.seq);
        let cts = reposts.first().map(|oldest| {
            self.cts_next = self.seq;
            self.cts_writes += 1;
            self.health.counters.cts_writes += 1;
            CtsWrite {
                epoch,
                ..CtsWrite::new(oldest.seq, self.seq, self.last_n, true)
            }
        });
        if cts.is_none() {
            self.cts_next = self.seq;
        }
        let c = &mut self.health.counters;
        c.qps_rebuilt += self.layout.nqps as u64;
        let took = self.recovery.finish(now);
        c.recovery_ns += u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        Ok(RecvResume {
            epoch,
            reposts,
            flushes,
            cts,
        })
    }
}
