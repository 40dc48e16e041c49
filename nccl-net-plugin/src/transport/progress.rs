//! How a comm makes progress while NCCL waits on it: draining the CQs into the core, `test`,
//! and the periodic look of every waiting call (every `LIVENESS_EVERY` unfinished `test`s or
//! retried `isend`/`irecv`s) at the device's events, the out-of-band socket and the clock. What
//! those facts mean (continue, warn, fail, poll once more and then fail) is the fault policy's
//! (`ferro_proto::health`); this module gathers the facts and executes its verdicts. The same
//! look writes out the clear-to-send entries other receive comms hold staged (`super::cts`).

use super::comm::{Comm, ReceiverMem, Side, failure_error};
use super::endpoint::{Rail, RegBuf};
use crate::error::{Error, Result};
use crate::warn;
use ferro_ffi::log_flags::NET;
use ferro_proto::MAX_RECVS;
use ferro_proto::comm::recovering::Recovering;
use ferro_proto::comm::recv::RecvCore;
use ferro_proto::comm::send::SendCore;
use ferro_proto::comm::wr_id;
use ferro_proto::comm::{CommHealth, CoreError, Done};
use ferro_proto::fifo;
use ferro_proto::health::{FailedCompletion, Look, PeerGone, Socket, Verdict, verdict};
use ferro_verbs::sys::*;
use std::io::{ErrorKind, Read};
use std::sync::atomic::{Ordering, fence};

/// One step of a recovery in place for either side's core, executed by the transport (each side
/// is implemented in `super::recovery`).
pub(super) trait RecoverOps {
    /// Takes the steps the core asks for now (stop, answer the peer's messages, rebuild,
    /// connect, resume, replay), or fails the comm when it cannot.
    fn drive_recovery(comm: &Comm, core: &mut Self);
}

/// What `test` and the periodic look need from either side's core.
pub(super) trait CoreOps: Recovering + RecoverOps {
    /// Whether `test` polls a member's CQ in a call of its own rather than inline: the
    /// cheaper of the two for this side, as counted (the sender's `test` body is smaller with
    /// the poll and its completion handling out of line; the receiver's with them inline).
    const POLL_OUT_OF_LINE: bool;
    fn is_pending(&self, req: u32) -> bool;
    /// The request's result when done (it is then freed), else the comm's failure
    /// (`ferro_proto::comm::test_outcome`).
    fn test(&mut self, req: u32) -> std::result::Result<Option<Done>, CoreError>;
    /// Whether the request is in flight and done, in one look-up: when it is, `on_done` is
    /// handed its result where it lies and the request is freed (what a `test` whose poll
    /// found completions asks first).
    fn take_ready_with(&mut self, req: u32, on_done: impl FnOnce(&Done)) -> bool;
    fn health(&self) -> &CommHealth;
    fn health_mut(&mut self) -> &mut CommHealth;
    fn is_waiting(&self) -> bool;
    fn describe_wait(&self) -> String;
}

macro_rules! core_ops {
    ($t:ty, $out_of_line:expr, { $($extra:tt)* }) => {
        impl CoreOps for $t {
            const POLL_OUT_OF_LINE: bool = $out_of_line;
            $($extra)*
            #[inline(always)]
            fn test(&mut self, req: u32) -> std::result::Result<Option<Done>, CoreError> {
                <$t>::test(self, req)
            }
            #[inline(always)]
            fn is_pending(&self, req: u32) -> bool {
                <$t>::is_pending(self, req)
            }
            fn health(&self) -> &CommHealth {
                &self.health
            }
            fn health_mut(&mut self) -> &mut CommHealth {
                &mut self.health
            }
            fn is_waiting(&self) -> bool {
                <$t>::is_waiting(self)
            }
            fn describe_wait(&self) -> String {
                <$t>::describe_wait(self)
            }
        }
    };
}

core_ops!(SendCore, true, {
    #[inline(always)]
    fn take_ready_with(&mut self, req: u32, on_done: impl FnOnce(&Done)) -> bool {
        match SendCore::take_ready(self, req) {
            Some(d) => {
                on_done(&d);
                true
            }
            None => false,
        }
    }
});
core_ops!(RecvCore, false, {
    #[inline(always)]
    fn take_ready_with(&mut self, req: u32, on_done: impl FnOnce(&Done)) -> bool {
        RecvCore::take_ready_with(self, req, on_done)
    }
});

/// Completions taken from a CQ per `ibv_poll_cq` call (the loop polls again while they fill it).
const WCS_PER_POLL: usize = 16;

pub(super) use super::clock::now;

/// Hands a successful completion of a send comm's CQ to its core (inlined into the poll of
/// `test`, like the receiver's).
#[inline(always)]
pub(super) fn sender_completion(core: &mut SendCore, wc: &ibv_wc) {
    core.handle_completion(wc.wr_id);
}

/// Hands a successful completion of a receive comm's CQ to its core, which reads the sizes FIFO
/// when a multi-buffer group finishes.
pub(super) fn receiver_completion(
    mem: &ReceiverMem,
) -> impl Fn(&mut RecvCore, &ibv_wc) + Copy + '_ {
    // Inlined into the poll of `test`, which is itself inlined: a call per completion
    // otherwise (its frame, and the core's state reloaded).
    #[inline(always)]
    move |core, wc| {
        core.handle_completion(wc.wr_id, u32::from_be(wc.imm_data), |seq, n| {
            read_sizes(&mem.sizes, seq, n)
        })
    }
}

/// A retried call's answer: NULL, unless the periodic look found the comm failed.
pub(super) fn retry_answer<C: CoreOps, T>(core: &C) -> Result<Option<T>> {
    match core.health().failure() {
        Some(f) => Err(failure_error(f.clone())),
        None => Ok(None),
    }
}

/// The sizes of group `seq`'s `n` buffers from the receiver's sizes FIFO (written by the peer
/// before the immediate that finished the group).
pub(super) fn read_sizes(sizes: &RegBuf, seq: u64, n: usize) -> [u32; MAX_RECVS] {
    let mut out = [0u32; MAX_RECVS];
    fence(Ordering::Acquire);
    let off = fifo::sizes_offset(seq);
    for (i, o) in out.iter_mut().enumerate().take(n) {
        *o = sizes.read_u32_le(off + 4 * i);
    }
    out
}

impl Comm {
    /// Drains every member device's CQ, handing each successful completion to `on_wc`; a
    /// failed completion becomes the comm's sticky failure.
    pub(super) fn poll<C: CoreOps>(&self, core: &mut C, on_wc: impl FnMut(&mut C, &ibv_wc)) {
        let _ = self.poll_inline(core, on_wc);
    }

    /// [`Comm::poll`], inlined into `test`: a waiting `test` is mostly this poll, and a call of
    /// its own (saving and restoring registers, a frame for the completions) costs about as
    /// much as an empty poll's own work.
    /// Returns whether every CQ was empty (nothing handed to the core, no failure found).
    #[inline(always)]
    fn poll_inline<C: CoreOps>(
        &self,
        core: &mut C,
        mut on_wc: impl FnMut(&mut C, &ibv_wc),
    ) -> bool {
        // One member device (the common comm): its CQ, without the loop's state.
        if let [rail] = &self.ep.rails[..] {
            return if C::POLL_OUT_OF_LINE {
                self.poll_rail_call(0, rail, core, &mut on_wc)
            } else {
                self.poll_rail(0, rail, core, &mut on_wc)
            };
        }
        let mut quiet = true;
        for (m, rail) in self.ep.rails.iter().enumerate() {
            quiet &= self.poll_rail_call(m, rail, core, &mut on_wc);
        }
        quiet
    }

    /// [`Comm::poll_rail`] in a call of its own.
    #[inline(never)]
    fn poll_rail_call<C: CoreOps>(
        &self,
        m: usize,
        rail: &Rail,
        core: &mut C,
        on_wc: &mut impl FnMut(&mut C, &ibv_wc),
    ) -> bool {
        self.poll_rail(m, rail, core, on_wc)
    }

    /// One member's CQ, drained (inline, or in a call of its own: [`CoreOps::POLL_OUT_OF_LINE`]).
    #[inline(always)]
    fn poll_rail<C: CoreOps>(
        &self,
        m: usize,
        rail: &Rail,
        core: &mut C,
        on_wc: &mut impl FnMut(&mut C, &ibv_wc),
    ) -> bool {
        // Not zeroed: the provider fills what it reports (a poll that finds nothing, the
        // common case while waiting, then costs no initialisation).
        let mut room = [core::mem::MaybeUninit::<ibv_wc>::uninit(); WCS_PER_POLL];
        let mut quiet = true;
        loop {
            core.health_mut().counters.polls += 1;
            let wcs = match rail.cq.poll_into(&mut room) {
                Ok([]) => {
                    // The common answer while waiting: nothing more to do.
                    core.health_mut().counters.empty_polls += 1;
                    return quiet;
                }
                Ok(wcs) => wcs,
                Err(e) => {
                    self.poll_refused(core, &e);
                    return false;
                }
            };
            quiet = false;
            let n = wcs.len();
            if let Some(c) = core.health_mut().counters.member_completions.get_mut(m) {
                *c += n as u64;
            }
            for wc in wcs {
                if wc.status == IBV_WC_SUCCESS {
                    crate::profiler::on_completion(self, wc);
                    on_wc(core, wc);
                } else {
                    self.failed_completion(core, rail, wc);
                }
            }
            if n < WCS_PER_POLL {
                return false;
            }
        }
    }

    /// `ibv_poll_cq` refused: the fault policy's verdict on it.
    #[cold]
    #[inline(never)]
    fn poll_refused<C: CoreOps>(&self, core: &mut C, e: &ferro_verbs::Error) {
        let v = verdict::refused(&self.describe(), e);
        self.execute(core, v, &mut |_| {});
    }

    /// A completion in error polled from `rail`'s CQ: no news when it is work of an earlier
    /// epoch (its QP was torn down by a recovery) or polled while the comm is stopped (flushed
    /// as expected); else the fault policy's verdict on it, executed inside the poll (the poll
    /// under way is the last one).
    #[cold]
    #[inline(never)]
    fn failed_completion<C: CoreOps>(&self, core: &mut C, rail: &Rail, wc: &ibv_wc) {
        if !core.recovery().counts(wr_id::epoch_of(wc.wr_id)) {
            return;
        }
        let failed = FailedCompletion {
            device: &rail.dev.ibdev,
            port: rail.dev.port,
            status: wc.status,
            status_name: wc_status_name(wc.status),
            vendor_err: wc.vendor_err,
            opcode: wc.opcode,
            qp_num: wc.qp_num,
        };
        let recover = core.health().recovers_in_place();
        let v = verdict::failed_completion(&self.describe(), &failed, recover);
        self.execute(core, v, &mut |_| {});
    }

    /// Reads the out-of-band socket: the recovery messages it brings are queued for
    /// [`RecoverOps::drive_recovery`]; the peer's failure notice and the connection's end
    /// (closed, reset, timed out) are the facts returned.
    pub(super) fn socket(&self) -> Socket {
        let Ok(mut rx) = self.oob.lock() else {
            return Socket::Quiet;
        };
        let mut b = [0u8; 1024];
        loop {
            match (&self.sock).read(&mut b) {
                Ok(0) => return Socket::Gone(PeerGone::Closed),
                Ok(n) => {
                    if let Some(why) = rx.push(&b[..n]) {
                        return Socket::Gone(PeerGone::Failed(why));
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Socket::Quiet,
                Err(e) if e.kind() == ErrorKind::TimedOut => {
                    return Socket::Gone(PeerGone::TimedOut(e.to_string()));
                }
                Err(e) => return Socket::Gone(PeerGone::Error(e.to_string())),
            }
        }
    }

    /// Called on every call that waits (an unfinished `test`, a retried `isend` or `irecv`):
    /// every so many of them, gather the facts (the device's asynchronous events, the peer's
    /// out-of-band connection, the clock), ask the fault policy, and execute its verdict.
    ///
    /// A comm that recovers in place (or wants to) takes its recovery's steps at every call that
    /// waits, and so does one whose look brought recovery messages from the peer.
    /// Returns whether it did anything (drove a recovery or looked): when not, the comm's
    /// requests and health are as the caller left them.
    #[inline(always)]
    pub(super) fn on_wait<C: CoreOps>(
        &self,
        core: &mut C,
        on_wc: impl FnMut(&mut C, &ibv_wc),
    ) -> bool {
        self.wait_hook(core, on_wc, false)
    }

    /// [`Comm::on_wait`]; `healthy`: the caller found the comm not failed before a poll that
    /// found nothing (which fails nothing), so only a recovery's step can have failed it since.
    #[inline(always)]
    fn wait_hook<C: CoreOps>(
        &self,
        core: &mut C,
        on_wc: impl FnMut(&mut C, &ibv_wc),
        healthy: bool,
    ) -> bool {
        let r = core.recovery();
        let recovering = r.is_stopped() || r.is_wanted();
        if recovering {
            C::drive_recovery(self, core);
        }
        let due = if healthy && !recovering {
            core.health_mut().look_due_healthy()
        } else {
            core.health_mut().look_due()
        };
        if !due {
            return recovering;
        }
        self.look(core, on_wc);
        true
    }

    /// The periodic look itself ([`Comm::on_wait`], every `LIVENESS_EVERY` waiting calls): kept
    /// out of line, so the waiting calls in between carry only the counter.
    #[inline(never)]
    fn look<C: CoreOps>(&self, core: &mut C, mut on_wc: impl FnMut(&mut C, &ibv_wc)) {
        super::cts::flush_others(self);
        let now = now();
        let recovering = core.recovery().is_stopped();
        // The peer's connection and the device's events are system calls: read at most once a
        // millisecond (`GatherPace`); the looks in between judge what was recorded already.
        // The events are read (and each logged) whatever the policy then makes of them.
        let read = core.health_mut().gather_due(now, recovering);
        let look = Look {
            device: self.ep.device_verdict(read),
            socket: if read { self.socket() } else { Socket::Quiet },
            now,
            waiting: core.is_waiting(),
            recovering,
            member_back: self.ep.member_back(),
        };
        let v = core.health_mut().decide(look);
        self.execute(core, v, &mut |c| self.poll(c, &mut on_wc));
        let news = self.oob.lock().is_ok_and(|rx| rx.has_messages());
        if core.health().failure().is_none() && (news || core.recovery().is_wanted()) {
            C::drive_recovery(self, core);
        }
    }

    /// A post or poll that libibverbs refused (`what`: its error): the fault policy's verdict
    /// executed on the comm (today its sticky failure), and the failure in force as the
    /// call's error.
    pub(super) fn refused<C: CoreOps>(&self, core: &mut C, what: &dyn std::fmt::Display) -> Error {
        let comm = self.describe();
        self.execute(core, verdict::refused(&comm, what), &mut |_| {});
        match core.health().failure() {
            Some(f) => failure_error(f.clone()),
            // The comm goes on, but this call's post was refused all the same.
            None => Error::System(format!("{comm}: {what}")),
        }
    }

    /// Executes a verdict of the fault policy on this comm. `poll_once_more` drains the CQs
    /// before a [`Verdict::PollThenFail`] fails the comm, so work that completed before the
    /// fault still counts; the failure then says what was still pending.
    pub(super) fn execute<C: CoreOps>(
        &self,
        core: &mut C,
        verdict: Verdict,
        poll_once_more: &mut dyn FnMut(&mut C),
    ) {
        match verdict {
            Verdict::Continue => {}
            Verdict::Recover(cause) => core.recovery_parts().0.want(&cause),
            Verdict::Warn(stall) => warn!(
                NET,
                "{}",
                stall.warning(
                    &self.describe(),
                    C::SIDE,
                    &core.describe_wait(),
                    &core.health().counters.summary(C::SIDE == "send"),
                )
            ),
            Verdict::Fail(f) => {
                core.health_mut().fail(f);
            }
            Verdict::PollThenFail(fault) => {
                poll_once_more(core);
                let f = fault.failure(&self.describe(), &core.describe_wait());
                core.health_mut().fail(f);
            }
        }
    }

    /// `test` on one side's core: [`Tested::Done`] when the request is done (it is then freed,
    /// and `on_done` was handed its sizes). The answer while waiting (pending before this call's
    /// poll, every CQ empty, no look due, the comm healthy) is reached with one look-up of the
    /// request, one poll per member CQ and a counter, and moves no sizes; a poll that found
    /// completions takes a finished request in one more look-up; everything else takes the
    /// core's full `test`.
    #[inline(always)]
    fn test_with<C: CoreOps>(
        &self,
        core: &mut C,
        idx: u32,
        on_wc: impl FnMut(&mut C, &ibv_wc) + Copy,
        on_done: impl Fn(&Done) + Copy,
    ) -> Result<Tested> {
        if core.is_pending(idx) {
            if core.health().failure().is_some() {
                // The wait hook still runs (a recovery's step, the periodic look); the core's
                // `test` below then reports the failure.
                let _ = self.on_wait(core, on_wc);
            } else if self.poll_inline(core, on_wc) {
                // Every CQ empty: the request is still pending and the comm still healthy,
                // without asking again; unless the wait hook changed something, that is all.
                if !self.wait_hook(core, on_wc, true) {
                    return Ok(Tested::Quiet);
                }
            } else if core.take_ready_with(idx, on_done) {
                // Completed by this poll: done, even if the poll also found the comm failed.
                return Ok(Tested::Done);
            } else if core.is_pending(idx)
                && !self.on_wait(core, on_wc)
                && core.health().failure().is_none()
            {
                return Ok(Tested::Pending);
            }
        }
        // Done (and freed), not in flight (a usage error), or the comm's failure for a request
        // still pending: a request that the last poll completed is done, even once the comm
        // failed (the look may have polled once more before failing it).
        match core.test(idx) {
            Ok(Some(d)) => {
                on_done(&d);
                Ok(Tested::Done)
            }
            Ok(None) => Ok(Tested::Pending),
            Err(e) => Err(self.core_error(e)),
        }
    }

    /// `test`: `Ok(true)` when the request is done (it is then freed, after `on_done` was
    /// handed its sizes).
    #[inline(always)]
    pub(super) fn test(&self, idx: u32, on_done: impl Fn(&Done) + Copy) -> Result<bool> {
        match &self.side {
            Side::Sender { core, .. } => {
                let mut core = core.lock()?;
                // The common answer: done by an earlier call's poll (one poll completes a
                // window of sends). Taken in one look-up; nothing the lock-free retry's hint
                // depends on (the comm's failure, its recovery, the head group) changed.
                if let Some(size) = core.take_ready_size(idx) {
                    core.unlock_unchanged();
                    on_done(&Done::one(size));
                    return Ok(true);
                }
                let done = self.test_with(&mut *core, idx, sender_completion, on_done);
                core.unlock();
                Ok(done? == Tested::Done)
            }
            Side::Receiver { core, mem, .. } => {
                let mut core = self.lock(core)?;
                let tested = self.test_with(&mut *core, idx, receiver_completion(mem), on_done);
                // Staged clear-to-send entries go out once the sender runs low (the poll
                // above has just counted what it used). A quiet call changed neither what is
                // staged (only `irecv` stages) nor what the sender holds (only a completion
                // lowers it), and every call on the comm ends with this question answered:
                // the answer is still "not due", and the call answers at once.
                if let Ok(Tested::Quiet) = tested {
                    core.unlock();
                    return Ok(false);
                }
                // (A failed comm writes nothing: the core's write, if due, is `None` then.)
                let due = self.cts_due(mem, &mut core);
                core.unlock();
                due?;
                Ok(tested? == Tested::Done)
            }
        }
    }
}

/// What [`Comm::test_with`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tested {
    /// Done: the request is freed and its sizes were handed on.
    Done,
    /// Not done; this call may have changed the comm (completions, a recovery step, a look).
    Pending,
    /// Not done, and nothing changed: every CQ was empty and the wait hook did nothing.
    Quiet,
}
