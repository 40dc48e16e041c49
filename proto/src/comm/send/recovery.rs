//! The send side of recovery in place: stopping (a failure seen here, or the peer's request),
//! applying the receiver's report of what arrived, the list of shares to replay, and resuming.
//! The rules are in [`crate::recovery`] and `docs/DESIGN.md`, "Recovery in place".

use super::{SendCore, slot};
use crate::SLOTS;
use crate::comm::recovering::Recovering;
use crate::comm::wr_id::WrId;
use crate::health::CommHealth;
use crate::recovery::{ReceiverState, Recovery, RecoveryError, ReplayGroup, Step};
use crate::wire::Msg;
use std::time::Duration;

/// The QPs of a group as a bit mask (bit `q` for QP `q`).
fn mask_of(qps: std::ops::Range<usize>) -> u128 {
    qps.filter(|&q| q < 128).fold(0, |m, q| m | (1u128 << q))
}

impl Recovering for SendCore {
    const SIDE: &'static str = "send";

    #[inline]
    fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    fn recovery_parts(&mut self) -> (&mut Recovery, &mut CommHealth) {
        (&mut self.recovery, &mut self.health)
    }

    fn recovery_pending(&self) -> String {
        format!(
            "{}; {} groups posted and not yet delivered",
            self.describe_wait(),
            self.undelivered()
        )
    }

    fn entered_epoch(&mut self) {
        self.peer_state_applied = false;
    }

    fn stop_messages(&self, epoch: u32) -> Result<Vec<Msg>, RecoveryError> {
        Ok(vec![Msg::Recover { epoch }])
    }

    fn on_recovery_msg(&mut self, msg: Msg, now: Duration) -> Result<Vec<Msg>, RecoveryError> {
        match msg {
            Msg::Recover { epoch } => Ok(if self.on_peer_recover(epoch, now)? {
                vec![Msg::Recover { epoch }]
            } else {
                Vec::new()
            }),
            Msg::ReceiverState(st) => match self.apply_peer_state(&st) {
                Err(RecoveryError::WrongEpoch { got, want }) if got < want => Ok(Vec::new()),
                other => other.map(|()| Vec::new()),
            },
            Msg::Rebuilt { epoch, qpns, down } => {
                self.recovery.set_peer_qpns(epoch, qpns, down);
                Ok(Vec::new())
            }
            Msg::Resume { epoch } => {
                if self.recovery.is_stopped() && epoch == self.recovery.epoch() {
                    self.resume(epoch, now)?;
                }
                Ok(Vec::new())
            }
            other => Err(RecoveryError::Inconsistent(format!(
                "the send comm got {:?} during recovery",
                other.kind()
            ))),
        }
    }

    /// Stopped: wait for the receiver's report and its rebuilt QPs, then rebuild and connect
    /// this side's to them (once), then wait for its `Resume`.
    fn recovery_step(&self) -> Step {
        let r = &self.recovery;
        if !r.is_stopped() {
            return Step::Run;
        }
        match r.peer_qpns() {
            Some(q) if self.peer_state_applied && !r.is_rebuilt() => Step::Connect(q.clone()),
            _ => Step::Wait,
        }
    }
}

impl SendCore {
    fn undelivered(&self) -> usize {
        self.inflight.iter().filter(|f| f.remaining > 0).count()
    }

    /// Applies the receiver's report of the current epoch: groups it completed are delivered
    /// (their sends are done), the others are replayed on the QPs whose immediates did not
    /// arrive. A report of another epoch is refused; one that contradicts what this side saw
    /// (a group acknowledged here but incomplete there, a group written here that the receiver
    /// never posted) fails with [`RecoveryError::Inconsistent`].
    pub fn apply_peer_state(&mut self, st: &ReceiverState) -> Result<(), RecoveryError> {
        self.health.check().map_err(RecoveryError::Failed)?;
        self.recovery.expect(st.epoch)?;
        if !st.is_well_formed() {
            return Err(RecoveryError::Inconsistent(format!(
                "a malformed report ({} groups outstanding of {} posted)",
                st.outstanding.len(),
                st.next_seq
            )));
        }
        if st.next_seq < self.seq {
            return Err(RecoveryError::Inconsistent(format!(
                "the receiver posted {} groups, the sender wrote {}",
                st.next_seq, self.seq
            )));
        }
        for g in st.outstanding.iter().filter(|g| g.seq < self.seq) {
            let f = &self.inflight[slot(g.seq)];
            if f.seq != g.seq || f.remaining == 0 {
                return Err(RecoveryError::Inconsistent(format!(
                    "group {} is incomplete at the receiver but every write of it was acknowledged here",
                    g.seq
                )));
            }
        }
        for s in 0..SLOTS {
            let f = self.inflight[s];
            if f.remaining == 0 {
                continue;
            }
            match st.arrivals(f.seq) {
                None => self.deliver_slot(s),
                Some(arrived) => {
                    let missing = mask_of(self.layout.group_qps(f.seq)) & !arrived;
                    if missing == 0 {
                        return Err(RecoveryError::Inconsistent(format!(
                            "group {} has every immediate at the receiver but is not complete",
                            f.seq
                        )));
                    }
                    let f = &mut self.inflight[s];
                    f.replay = missing;
                    f.remaining = missing.count_ones();
                }
            }
        }
        self.peer_state_applied = true;
        Ok(())
    }

    /// A group's writes all arrived: its sends are done.
    fn deliver_slot(&mut self, s: usize) {
        let f = &mut self.inflight[s];
        if f.remaining > 0 {
            match f.held_on {
                Some(held) => self.room.give_back_held(held),
                None => self.room.give_back(f.seq, &f.items[..f.n], &self.layout),
            }
        }
        f.remaining = 0;
        f.replay = 0;
        for &r in &f.reqs[..f.n] {
            if let Some(q) = self.reqs.get_mut(r) {
                q.done = true;
            }
        }
    }

    /// The shares to write again once the comm resumes, by increasing sequence number (so each
    /// QP gets them in the order the receiver reposts its receives), in the current epoch.
    pub fn replay(&self) -> impl Iterator<Item = ReplayGroup<'_>> {
        let epoch = self.recovery.epoch();
        (self.seq.saturating_sub(SLOTS as u64)..self.seq).filter_map(move |seq| {
            let f = &self.inflight[slot(seq)];
            (f.seq == seq && f.replay != 0 && f.remaining > 0).then_some(ReplayGroup {
                seq,
                qps: f.replay,
                items: &f.items[..f.n],
                reqs: &f.reqs[..f.n],
                wr_id: WrId::Send { seq }.encode_in(epoch),
            })
        })
    }

    /// The receiver resumed at `epoch` (its QPs are rebuilt and its receives reposted): the
    /// comm runs again; the transport writes [`SendCore::replay`] first, then new groups.
    pub fn resume(&mut self, epoch: u32, now: Duration) -> Result<(), RecoveryError> {
        self.health.check().map_err(RecoveryError::Failed)?;
        self.recovery.expect(epoch)?;
        if !self.peer_state_applied {
            return Err(RecoveryError::NotReady(
                "the receiver's state was not applied before its resume",
            ));
        }
        let (mut sends, mut bytes) = (0, 0);
        for g in self.replay() {
            sends += g.items().len() as u64;
            bytes += g.bytes(&self.layout);
        }
        let c = &mut self.health.counters;
        c.sends_replayed += sends;
        c.bytes_replayed += bytes;
        c.qps_rebuilt += self.layout.nqps as u64;
        let took = self.recovery.finish(now);
        c.recovery_ns += u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.last_wait = None;
        Ok(())
    }
}
