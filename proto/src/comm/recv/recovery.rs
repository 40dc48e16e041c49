//! The receive side of recovery in place: stopping (a failure seen here, or the peer's
//! request), the report of what arrived ([`ReceiverState`]), and resuming: the receives to
//! post again on the rebuilt QPs, the flushes to post again, and the clear-to-send write that
//! announces every outstanding group once more. The rules are in [`crate::recovery`] and
//! `docs/DESIGN.md`, "Recovery in place".

use super::{CtsWrite, FlushTarget, RecvCore, RecvReq, ReqKind};
use crate::comm::recovering::Recovering;
use crate::comm::wr_id::WrId;
use crate::health::CommHealth;
use crate::recovery::{GroupArrivals, ReceiverState, Recovery, RecoveryError, Step};
use crate::wire::Msg;
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
    /// [`RecvCore::flush_wr_id_now`], and what each reads.
    pub flushes: Vec<(u32, FlushTarget)>,
    /// The entries of every outstanding group, written again (the sender finds the same bytes
    /// for a group it already read, and takes nothing twice).
    pub cts: Option<CtsWrite>,
}

impl Recovering for RecvCore {
    const SIDE: &'static str = "receive";

    #[inline]
    fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    fn recovery_parts(&mut self) -> (&mut Recovery, &mut CommHealth) {
        (&mut self.recovery, &mut self.health)
    }

    fn recovery_pending(&self) -> String {
        self.describe_wait()
    }

    fn stop_messages(&self, epoch: u32) -> Result<Vec<Msg>, RecoveryError> {
        Ok(vec![
            Msg::Recover { epoch },
            Msg::ReceiverState(self.receiver_state()?),
        ])
    }

    fn on_recovery_msg(&mut self, msg: Msg, now: Duration) -> Result<Vec<Msg>, RecoveryError> {
        match msg {
            Msg::Recover { epoch } => {
                if self.on_peer_recover(epoch, now)? {
                    self.stop_messages(epoch)
                } else {
                    Ok(Vec::new())
                }
            }
            Msg::Rebuilt { epoch, qpns, down } => {
                self.recovery.set_peer_qpns(epoch, qpns, down);
                Ok(Vec::new())
            }
            other => Err(RecoveryError::Inconsistent(format!(
                "the receive comm got {:?} during recovery",
                other.kind()
            ))),
        }
    }

    /// Stopped: rebuild this side's QPs first (and report them), then connect them to the
    /// sender's once its `Rebuilt` came, then resume ([`RecvCore::resume`]) and say so.
    fn recovery_step(&self) -> Step {
        let r = &self.recovery;
        if !r.is_stopped() {
            Step::Run
        } else if !r.is_rebuilt() {
            Step::Rebuild
        } else if let Some(q) = r.peer_qpns() {
            Step::Connect(q.clone())
        } else {
            Step::Wait
        }
    }
}

impl RecvCore {
    /// Receives posted in the current epoch whose immediates have not arrived: after the QPs
    /// are moved to the error state, each of them completes once (flushed, or with its
    /// immediate), so a drain that has seen this many flushed receives has seen every
    /// immediate that arrived.
    pub fn receives_outstanding(&self) -> usize {
        self.reqs
            .iter()
            .map(|(_, r)| match *r {
                RecvReq {
                    remaining: 1..,
                    kind: ReqKind::Recv { seq, arrived, .. },
                } => (self.layout.group_qps(seq).filter(|&q| q < 128))
                    .filter(|&q| arrived & (1u128 << q) == 0)
                    .count(),
                _ => 0,
            })
            .sum()
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
                RecvReq {
                    remaining: 1..,
                    kind: ReqKind::Recv { seq, arrived, .. },
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
                RecvReq {
                    remaining: 1..,
                    kind: ReqKind::Recv { seq, arrived, .. },
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
                RecvReq {
                    remaining,
                    kind: ReqKind::Flush { reads, target },
                } if *remaining > 0 => {
                    *remaining = *reads;
                    flushes.push((req, *target));
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
