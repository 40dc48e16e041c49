//! Recovery in place, executed: the verbs and socket work of each step the protocol core asks
//! for (`ferro_proto::recovery`, the cores' `Recovering` steps; see the design's "Recovery in
//! place"). Nothing is decided here: the core says when to stop, what to tell the peer, when to
//! rebuild, connect and resume, and what to post again; this module moves the QPs through their
//! states, drains the CQs, writes and reads the messages on the out-of-band connection, posts
//! the receives, flush reads, clear-to-send write and replayed writes, and logs what happened.
//!
//! Every step runs under the comm's lock, from calls that wait (`test`, a retried `isend` or
//! `irecv`): a stopped comm takes its steps at every such call. The QPs are rebuilt in place
//! (error, reset, init, then connected again at the packet numbers of the new epoch), so their
//! numbers, the CQs and every registration stay; a rebuild waits until the member device's port
//! is active again.

use super::comm::{Comm, Side};
use super::progress::{CoreOps, RecoverOps, now, receiver_completion};
use crate::error::{Error, Result};
use crate::{info, warn};
use ferro_ffi::log_flags::NET;
use ferro_proto::comm::recovering::Recovering;
use ferro_proto::comm::recv::RecvCore;
use ferro_proto::comm::send::SendCore;
use ferro_proto::comm::wr_id::{self, WrId};
use ferro_proto::health::{Failure, Fault, Socket, Verdict};
use ferro_proto::recovery::{PeerQps, RecoveryError, Step};
use ferro_proto::wire::{self, Msg};
use ferro_verbs::sys::*;
use std::io::{ErrorKind, Write};
use std::time::{Duration, Instant};

/// How long the receiver's drain waits for every posted receive to complete (flushed or with
/// its immediate) after its QPs were moved to the error state.
const DRAIN_BOUND: Duration = Duration::from_millis(200);

/// How long writing one recovery message may wait for room in the socket's buffer (never
/// needed in practice: the messages are small and the exchange is a handful of them).
const WRITE_BOUND: Duration = Duration::from_millis(100);

impl RecoverOps for SendCore {
    fn drive_recovery(comm: &Comm, core: &mut Self) {
        comm.drive(core);
    }
}

impl RecoverOps for RecvCore {
    fn drive_recovery(comm: &Comm, core: &mut Self) {
        comm.drive(core);
    }
}

/// What each side does at the steps where the two differ.
trait SideSteps: CoreOps {
    /// Stops sending and receiving on the comm's QPs before the core stops; the receiver also
    /// drains its CQs so that its report holds every immediate that arrived.
    fn quiesce(comm: &Comm, core: &mut Self);

    /// `Step::Connect`: `Ok(false)` when it must wait (no member's port is active yet).
    fn connect(comm: &Comm, core: &mut Self, peer: &PeerQps) -> Result<bool>;

    /// The core ran again after a message of the peer (the sender's `Resume`).
    fn resumed(comm: &Comm, core: &mut Self) -> Result<()>;
}

impl SideSteps for SendCore {
    fn quiesce(comm: &Comm, _core: &mut Self) {
        comm.ep.quiesce();
    }

    /// The sender's QPs are rebuilt and connected to the receiver's in one step (the receiver's
    /// exist already), then reported.
    fn connect(comm: &Comm, core: &mut Self, peer: &PeerQps) -> Result<bool> {
        let Some(down) = comm.usable_members() else {
            return Ok(false);
        };
        let qpns = comm.ep.rebuild(down)?;
        if let Err(e) = comm.ep.reconnect(peer, core.recovery.epoch())? {
            return comm.connect_failed(core, &e);
        }
        let m = core.qps_rebuilt(qpns, down);
        comm.tell_peer(&[m])?;
        Ok(true)
    }

    /// The replay first (by increasing group, each planned as it was first written and kept
    /// to the QPs whose immediates did not arrive), then new groups as usual.
    fn resumed(comm: &Comm, core: &mut Self) -> Result<()> {
        let Side::Sender { mem, .. } = &comm.side else {
            return Ok(());
        };
        let mut scratch = comm.lock(&mem.scratch)?;
        let super::comm::SendScratch { writes, chain } = &mut *scratch;
        let mut posts = 0;
        for g in core.replay() {
            let slot = Comm::sizes_slot(mem, g.seq);
            ferro_proto::recovery::plan::replay_writes_into(
                &g,
                &comm.ep.layout(),
                slot,
                comm.ep.max_write,
                mem.ar,
                writes,
            );
            posts += comm.post_writes(writes, g.wr_id(), false, chain)?;
        }
        core.health.counters.send_posts += posts;
        Ok(())
    }
}

impl SideSteps for RecvCore {
    fn quiesce(comm: &Comm, core: &mut Self) {
        comm.ep.quiesce();
        let Side::Receiver { mem, flush, .. } = &comm.side else {
            return;
        };
        comm.ep.quiesce_flush_qps(flush);
        // Every receive posted in this epoch completes once now: with its immediate (handed
        // to the core, which still counts it) or flushed. Drain until every one is accounted
        // for, so nothing that arrived is missing from the report.
        let deadline = Instant::now() + DRAIN_BOUND;
        let epoch = core.recovery.epoch() as u8;
        let on_wc = receiver_completion(mem);
        let mut flushed = 0;
        let mut wcs = [ibv_wc::default(); 16];
        while flushed < core.receives_outstanding() && Instant::now() < deadline {
            for rail in &comm.ep.rails {
                let Ok(n) = rail.cq.poll(&mut wcs) else {
                    continue;
                };
                for wc in &wcs[..n] {
                    if wc.status == IBV_WC_SUCCESS {
                        crate::profiler::on_completion(comm, wc);
                        on_wc(core, wc);
                    } else if matches!(WrId::decode(wc.wr_id), WrId::Recv { .. })
                        && wr_id::epoch_of(wc.wr_id) == epoch
                    {
                        flushed += 1;
                    }
                }
            }
            std::thread::yield_now();
        }
    }

    /// The receiver's QPs were rebuilt before: connect them to the sender's, then post what
    /// the core gives back (receives, flush reads, the clear-to-send write), then tell the
    /// sender to replay.
    fn connect(comm: &Comm, core: &mut Self, peer: &PeerQps) -> Result<bool> {
        let Side::Receiver { mem, flush, .. } = &comm.side else {
            return Ok(true);
        };
        let epoch = core.recovery.epoch();
        if let Err(e) = comm.ep.reconnect(peer, epoch)? {
            return comm.connect_failed(core, &e);
        }
        let r = core
            .resume(epoch, now())
            .map_err(|e| Error::Remote(e.to_string()))?;
        for p in &r.reposts {
            for q in p.qps() {
                core.health.counters.recv_posts += 1;
                comm.ep
                    .qp(q)
                    .post_recv_empty(p.wr_id(q))
                    .map_err(|e| Error::System(format!("reposting a receive: {e}")))?;
            }
        }
        for (req, target) in &r.flushes {
            for (m, f) in flush
                .iter()
                .enumerate()
                .filter(|(m, _)| !comm.ep.is_down(*m))
            {
                core.health.counters.send_posts += 1;
                Comm::post_flush_read(f, m, core.flush_wr_id_now(*req), target)
                    .map_err(|e| Error::System(format!("posting a flush again: {e}")))?;
            }
        }
        if let Some(w) = &r.cts {
            comm.post_cts(mem, core, w)?;
        }
        comm.tell_peer(&[Msg::Resume { epoch }])?;
        comm.said_resumed(core);
        Ok(true)
    }

    fn resumed(_comm: &Comm, _core: &mut Self) -> Result<()> {
        Ok(())
    }
}

impl Comm {
    /// A state change that connects this side's QPs to the peer's failed during a recovery
    /// (`e`): tried again when `NCCL_IB_MQP_RETRY_*` says so (a move to RTR that timed out while
    /// the fabric converges after the port came back), within the recovery budget, with a WARN;
    /// otherwise the recovery fails with it. `Ok(false)`: not connected yet.
    fn connect_failed<C: SideSteps>(&self, core: &mut C, e: &ferro_verbs::Error) -> Result<bool> {
        let policy = crate::plugin::get()?.config.mqp_retry();
        let t = now();
        let epoch = core.recovery().epoch();
        let (n, next) = core
            .recovery_parts()
            .0
            .connect_failed(t, e.errno, &e.to_string(), &policy);
        let Some(at) = next else {
            return Err(Error::System(format!(
                "connecting the QPs again failed (try {n}) with errno {}: {e}; not retried (NCCL_IB_MQP_RETRY_ALL, NCCL_IB_MQP_RETRY_CNT={})",
                e.errno, policy.retries
            )));
        };
        warn!(
            NET,
            "{}: recovery in place (epoch {epoch}): connecting the QPs again failed with errno {} ({e}); retry {n}/{} due in {} ms (NCCL_IB_MQP_RETRY_SLEEP_MSEC), within the recovery budget of {} s",
            self.describe(),
            e.errno,
            policy.retries,
            at.saturating_sub(t).as_millis(),
            core.recovery().budget().as_secs()
        );
        Ok(false)
    }

    /// Writes recovery messages on the out-of-band connection.
    fn tell_peer(&self, msgs: &[Msg]) -> Result<()> {
        for m in msgs {
            let bytes = wire::encode(m);
            let mut left = &bytes[..];
            let deadline = Instant::now() + WRITE_BOUND;
            while !left.is_empty() {
                match (&self.sock).write(left) {
                    Ok(0) => return Err(Error::Remote("the peer's connection is closed".into())),
                    Ok(n) => left = &left[n..],
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                        std::thread::yield_now();
                    }
                    Err(e) => {
                        return Err(Error::Remote(format!(
                            "telling the peer ({:?}): {e}",
                            m.kind()
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// The INFO line of a comm that runs again, with what its recovery cost.
    fn said_resumed<C: CoreOps>(&self, core: &C) {
        let c = &core.health().counters;
        info!(
            NET,
            "{}: {} comm recovered in place (epoch {}): {}",
            self.describe(),
            C::SIDE,
            core.recovery().epoch(),
            c.summary(C::SIDE == "send")
        );
    }

    /// One round of a recovery: stop if a failure was seen, take the peer's messages, take
    /// every step the core allows now, and give up when the budget is spent.
    fn drive<C: SideSteps>(&self, core: &mut C) {
        if core.health().failure().is_some() {
            return;
        }
        let t = now();
        if let Err(e) = self.drive_steps(core, t) {
            self.give_up(core, &e.to_string());
            return;
        }
        if core.recovery().is_stopped() && core.recovery().expired(t) {
            let pending = core.recovery_pending();
            let f = core.recovery().gave_up(t, C::SIDE, &pending);
            let down = self.ep.members_down();
            let port = if down == 0 {
                String::new()
            } else {
                format!("; port {} is not active", self.ep.describe_members(down))
            };
            self.fail_with(core, format!("{}: {f}{port}", self.describe()));
        }
    }

    fn drive_steps<C: SideSteps>(&self, core: &mut C, t: Duration) -> Result<()> {
        if let Some(cause) = core.recovery_parts().0.take_wanted() {
            self.stop(core, &cause, t)?;
        }
        match self.socket() {
            Socket::Quiet => {}
            Socket::Gone(how) => {
                let v = Verdict::PollThenFail(Fault::PeerGone(how));
                self.execute(core, v, &mut |_| {});
                return Ok(());
            }
        }
        while let Some(m) = self.oob.lock().ok().and_then(|mut rx| rx.pop()) {
            if core.is_news(&m) {
                C::quiesce(self, core);
            }
            let was_stopped = core.recovery().is_stopped();
            let answer = core.on_recovery_msg(m, t).map_err(recovery_error)?;
            self.tell_peer(&answer)?;
            if !was_stopped && core.recovery().is_stopped() {
                self.said_stopped(core, "the peer asked to recover");
            }
            if was_stopped && !core.recovery().is_stopped() {
                C::resumed(self, core)?;
                self.said_resumed(core);
            }
        }
        loop {
            match core.recovery_step() {
                Step::Run | Step::Wait => return Ok(()),
                Step::Rebuild => {
                    if !core.recovery().may_rebuild(t) {
                        return Ok(());
                    }
                    let Some(down) = self.usable_members() else {
                        return Ok(());
                    };
                    let qpns = self.ep.rebuild(down)?;
                    if let Side::Receiver { flush, .. } = &self.side {
                        self.ep.rebuild_flush_qps(flush)?;
                    }
                    let m = core.qps_rebuilt(qpns, down);
                    self.tell_peer(&[m])?;
                }
                Step::Connect(peer) => {
                    if !core.recovery().may_rebuild(t) || !C::connect(self, core, &peer)? {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// The members that are down now, if at least one member can carry the QPs (a virtual NIC
    /// fails over to the members that are up; a comm with every member down waits). A member
    /// newly found down or back is said.
    fn usable_members(&self) -> Option<u8> {
        let down = self.ep.members_down();
        if self.ep.all_down(down) {
            return None;
        }
        if down != 0 {
            warn!(
                NET,
                "{}: member(s) {} down: their QPs move to the members that are up (failover)",
                self.describe(),
                self.ep.describe_members(down)
            );
        }
        Some(down)
    }

    /// Stops the comm at the next epoch: its QPs stop, the core stops, the peer is told.
    fn stop<C: SideSteps>(&self, core: &mut C, cause: &str, t: Duration) -> Result<()> {
        C::quiesce(self, core);
        let msgs = core.start_recovery(t, cause).map_err(recovery_error)?;
        self.said_stopped(core, cause);
        self.tell_peer(&msgs)
    }

    fn said_stopped<C: CoreOps>(&self, core: &C, cause: &str) {
        warn!(
            NET,
            "{}: {} comm stopped to recover in place (epoch {}, budget {} s): {cause}; {}",
            self.describe(),
            C::SIDE,
            core.recovery().epoch(),
            core.recovery().budget().as_secs(),
            core.describe_wait()
        );
    }

    /// A step that could not be taken: the comm fails, naming what was tried and pending.
    fn give_up<C: CoreOps>(&self, core: &mut C, why: &str) {
        let pending = core.recovery_pending();
        self.fail_with(
            core,
            format!(
                "{}: recovery in place failed at epoch {}: {why}; {pending}",
                self.describe(),
                core.recovery().epoch()
            ),
        );
    }

    /// Fails the comm with `message` (one WARN), and tells the peer why.
    fn fail_with<C: CoreOps>(&self, core: &mut C, message: String) {
        warn!(NET, "{message}");
        let f = Failure::remote(message);
        self.notify_peer(&f);
        core.health_mut().fail(f);
    }
}

fn recovery_error(e: RecoveryError) -> Error {
    Error::Remote(e.to_string())
}
