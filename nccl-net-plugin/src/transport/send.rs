//! The send side's verbs work: reading the clear-to-send FIFO for the core, and posting the
//! writes of a complete group as the core and `ferro_proto::plan` lay them out. A retried
//! `isend` that only waits is answered without the core's lock (`super::send_cell`).

use super::comm::{Comm, ReqHandle, SendScratch, SenderMem, Side};
use super::progress::{retry_answer, sender_completion};
use super::registration::{MemKind, MrHandle};
use crate::error::{Error, Result};
use crate::info;
use core::ffi::c_void;
use ferro_ffi::log_flags::NET;
use ferro_proto::comm::send::{ReadyGroup, SendCore, SendStep};
use ferro_proto::comm::{CoreError, Failure};
use ferro_proto::fifo::{self, CtsEntry, ENTRY_WORDS};
use ferro_proto::plan::{self, SizesSlot};
use ferro_verbs::wr::Store;
use ferro_verbs::{RemoteAddr, SendChain, SendFlags, Sge};
use std::sync::atomic::{Ordering, fence};

impl Comm {
    /// `isend`: `Ok(None)` (a NULL request) until the receiver's buffer for this send is known.
    /// `phandle` is NCCL's profiler handle for it (NULL: none).
    ///
    /// Inlined into the exported entry: the common retry (the head group's clear-to-send not
    /// written yet) is answered here without the lock (`super::send_cell::SendCell`);
    /// everything else is [`Comm::isend_locked`], under it.
    #[inline(always)]
    pub fn isend(
        &self,
        data: u64,
        size: u32,
        tag: i32,
        mh: Option<&MrHandle>,
        phandle: *mut c_void,
    ) -> Result<Option<*mut ReqHandle>> {
        let Side::Sender { mem, core } = &self.side else {
            return Err(not_a_send_comm());
        };
        if size > 0 && mh.is_none() {
            return Err(no_memory_handle());
        }
        if core.retry_unlocked(|seq| entry_arrived(mem, seq, 0)) {
            return Ok(None);
        }
        // The comm's lock, taken once for the whole call. Retries are rare past the unlocked
        // answer (the periodic look's call, a hint withheld): they take the core's own path.
        let mut core = core.lock_publishing()?;
        let answer = self.isend_locked(mem, &mut core, data, size, tag, mh, phandle);
        core.unlock();
        answer
    }

    /// A retried `isend`'s answer: NULL, after the wait hook (the periodic look, a recovery's
    /// steps), unless the comm failed.
    /// Only called for a comm that had not failed: when the hook did nothing (the common
    /// answer), the comm is as it was.
    #[inline(always)]
    fn send_wait_answer(&self, core: &mut SendCore) -> Result<Option<*mut ReqHandle>> {
        if !self.on_wait(core, sender_completion) {
            return Ok(None);
        }
        retry_answer(core)
    }

    /// [`Comm::isend`] past its shortcut, under the comm's lock: the core matches the send, and
    /// the group it completes, if any, is written.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn isend_locked(
        &self,
        mem: &SenderMem,
        core: &mut SendCore,
        data: u64,
        size: u32,
        tag: i32,
        mh: Option<&MrHandle>,
        phandle: *mut c_void,
    ) -> Result<Option<*mut ReqHandle>> {
        const NO_KEYS: ferro_proto::Keys = [0; ferro_proto::MAX_DEVS];
        let lkeys = match mh {
            Some(m) if size > 0 => m.lkeys(),
            _ => &NO_KEYS,
        };
        let failed_before = core.health.failure().is_some();
        let step = match core.isend(
            tag,
            size,
            data,
            lkeys,
            #[inline(always)]
            |seq, i| read_entry(mem, seq, i),
        ) {
            Ok(step) => step,
            Err(e) => return Err(self.isend_refused(failed_before, e)),
        };
        if core.has_truncation_note() {
            self.report_truncation(core);
        }
        match step {
            SendStep::Retry(_) => self.send_wait_answer(core),
            SendStep::Matched { req } => {
                crate::profiler::on_send_matched(self, req, phandle);
                Ok(Some(self.req_ptr(req)))
            }
            SendStep::Post { req } => {
                // NCCL_IB_USE_INLINE: a payload of up to one clear-to-send entry's size (the QPs'
                // inline room) may be copied into the work request by the CPU at post time, so
                // only a lone send from host memory qualifies.
                let from_host = mh.is_none_or(|m| m.kind() == MemKind::Host);
                match core.lone_write() {
                    // The common group, one write the core laid out on its straight path:
                    // posted as it is, on the stack, without the planner.
                    Some((w, wr_id)) => match self.post_one(&w, wr_id, from_host) {
                        Ok(()) => core.health.counters.send_posts += 1,
                        Err(e) => return Err(send_post_failed(core, e)),
                    },
                    None => self.post_ready_group(mem, core, from_host)?,
                }
                crate::profiler::on_send_posted(self, req, phandle, || core.ready_group());
                Ok(Some(self.req_ptr(req)))
            }
        }
    }

    /// The group the core completed, planned and posted in full (the general path): what was
    /// posted is counted; a failed post fails the comm.
    #[inline(never)]
    fn post_ready_group(
        &self,
        mem: &SenderMem,
        core: &mut SendCore,
        from_host: bool,
    ) -> Result<()> {
        let (mut posts, mut apart) = (0, 0);
        let group = core.ready_group();
        let inline_ok = group.items().len() == 1 && from_host;
        let posted = self.post_group(mem, &group, inline_ok, &mut posts, &mut apart);
        core.health.counters.send_posts += posts;
        core.health.counters.immediates_apart += apart;
        posted.map_err(|e| send_post_failed(core, e))
    }

    /// The error of an `isend` the core refused. A comm that failed here (a v7 comm refusing an
    /// oversized send) tells the receiver why at its next periodic look.
    #[cold]
    #[inline(never)]
    fn isend_refused(&self, failed_before: bool, e: CoreError) -> Error {
        if let (false, CoreError::Failed(f)) = (failed_before, &e) {
            self.notify_peer(f);
        }
        self.core_error(e)
    }

    /// Says (once per comm) that a send was truncated to its receive buffer.
    #[cold]
    #[inline(never)]
    fn report_truncation(&self, core: &mut SendCore) {
        if let Some(t) = core.take_truncation_note() {
            info!(
                NET,
                "{}: a send of {} bytes (tag {}, group {}) is larger than the receiver's buffer of {} bytes; truncated to the posted size, as NCCL's IB transport does (said once per comm; the count is in the comm's close line)",
                self.describe(),
                t.size,
                t.tag,
                t.seq,
                t.capacity
            );
        }
    }

    /// The sizes slot of group `seq`: the local staging of its sizes and the peer's sizes FIFO.
    pub(super) fn sizes_slot(mem: &SenderMem, seq: u64) -> SizesSlot {
        let soff = fifo::sizes_offset(seq);
        SizesSlot {
            local_addr: mem.sizes_stage.addr(soff),
            lkeys: mem.sizes_stage.lkeys(),
            remote_addr: mem.peer_sizes.0 + soff as u64,
            rkeys: mem.peer_sizes.1,
        }
    }

    /// Writes a complete group: its sizes into the staging slot, then every write of the plan,
    /// one chain per QP, in reused buffers. Adds the posts made to `posts`, and the immediates
    /// the plan sent apart from their data (adaptive routing) to `apart`.
    fn post_group(
        &self,
        mem: &SenderMem,
        group: &ReadyGroup<'_>,
        inline_ok: bool,
        posts: &mut u64,
        apart: &mut u64,
    ) -> Result<()> {
        let layout = self.ep.layout();
        if let Some(w) = plan::lone_write_on(
            group.qps(),
            group.items(),
            &layout,
            self.ep.max_write,
            mem.ar,
        ) {
            // The common group, one write: posted as it is planned, on the stack, without the
            // scratch buffers (nor their lock). A lone buffer's size travels as its immediate:
            // nothing is staged.
            self.post_one(&w, group.wr_id(), inline_ok)?;
            *posts += 1;
            return Ok(());
        }
        if group.items().len() > 1 {
            // Only a group of several buffers sends its sizes (from the staging slot).
            let soff = fifo::sizes_offset(group.seq);
            for (i, it) in group.items().iter().enumerate() {
                mem.sizes_stage.write(soff + 4 * i, &it.size.to_le_bytes());
            }
        }
        let slot = Comm::sizes_slot(mem, group.seq);
        let mut scratch = self.lock(&mem.scratch)?;
        let SendScratch { writes, chain } = &mut *scratch;
        plan::plan_group_into(
            group.seq,
            group.items(),
            &layout,
            slot,
            self.ep.max_write,
            mem.ar,
            writes,
        );
        let planned_apart = writes.iter().filter(|w| w.is_immediate_apart()).count() as u64;
        *posts += self.post_writes(writes, group.wr_id(), inline_ok, chain)?;
        *apart += planned_apart;
        Ok(())
    }

    /// Posts planned writes as one chain per QP (the write with immediate last on each; the
    /// order of the plain data writes among themselves, pieces of a long chunk included, does
    /// not matter: the immediate's completion comes after all of them). Returns the posts made.
    pub(super) fn post_writes(
        &self,
        writes: &mut [plan::Write],
        wr_id: u64,
        inline_ok: bool,
        chain: &mut SendChain,
    ) -> Result<u64> {
        // A plan is usually in this order already (one QP, its immediate last): no sort then.
        if !writes.is_sorted_by_key(|w| (w.qp, w.imm.is_some())) {
            writes.sort_unstable_by_key(|w| (w.qp, w.imm.is_some()));
        }
        let mut posts = 0;
        for run in writes.chunk_by(|a, b| a.qp == b.qp) {
            self.post_chain(run, wr_id, inline_ok, chain)?;
            posts += 1;
        }
        Ok(posts)
    }

    /// Posts the lone write `w` (a group's whole plan) by itself; inlined into the straight
    /// path of `isend`.
    #[inline(always)]
    fn post_one(&self, w: &plan::Write, wr_id: u64, inline_ok: bool) -> Result<()> {
        if w.qp >= self.ep.nqps() {
            return Ok(());
        }
        let (local, remote, flags) = write_parts(w, inline_ok);
        self.ep
            .qp(w.qp)
            .post_write(wr_id, local, remote, w.imm, flags)
            .map_err(|e| self.post_failed(e))
    }

    #[cold]
    #[inline(never)]
    fn post_failed(&self, e: ferro_verbs::Error) -> Error {
        Error::System(format!("{}: {e}", self.describe()))
    }

    /// Posts `run` (writes of one QP) as one chain.
    fn post_chain<S: Store>(
        &self,
        run: &[plan::Write],
        wr_id: u64,
        inline_ok: bool,
        chain: &mut SendChain<S>,
    ) -> Result<()> {
        let Some(qp) = run
            .first()
            .filter(|w| w.qp < self.ep.nqps())
            .map(|w| self.ep.qp(w.qp))
        else {
            return Ok(());
        };
        chain.clear();
        for w in run {
            let (local, remote, flags) = write_parts(w, inline_ok);
            chain.rdma_write(wr_id, local, remote, w.imm, flags);
        }
        qp.post(chain).map_err(|e| self.post_failed(e))
    }
}

/// Whether the sequence word of entry `i` of group `seq` is in the sender's FIFO: while it is
/// not, the clear-to-send has not arrived (the common answer of a retried send), and nothing
/// more is read.
#[inline(always)]
fn entry_arrived(mem: &SenderMem, seq: u64, i: usize) -> bool {
    mem.fifo.read_u32_le(fifo::entry_offset(seq, i)) == fifo::expected_seq_word(seq)
}

/// Entry `i` of group `seq` from the sender's FIFO, if the receiver has written all of it
/// ([`CtsEntry::decode_words`]: its sequence word and its check). Read whole at once, with no
/// look at the sequence word alone first: the core opens a group under the lock, which a
/// retried `isend` only takes once that look (`super::send_cell::SendCell`) found the group's
/// first entry there (or for the periodic look). Inlined into both of the core's readers (the
/// straight path's and the general one's): a call would return the entry through memory.
#[inline(always)]
fn read_entry(mem: &SenderMem, seq: u64, i: usize) -> Option<CtsEntry> {
    let off = fifo::entry_offset(seq, i);
    let e = CtsEntry::decode_words(&mem.fifo.read_words::<ENTRY_WORDS>(off), seq);
    // The entry's fields are used only after this point.
    fence(Ordering::Acquire);
    e
}

/// A post of a completed group failed: the comm fails (nothing more is written on it) and the
/// error is `isend`'s answer.
#[cold]
#[inline(never)]
fn send_post_failed(core: &mut SendCore, e: Error) -> Error {
    core.health.fail(Failure::system(e.to_string()));
    e
}

#[cold]
#[inline(never)]
fn not_a_send_comm() -> Error {
    Error::Usage("isend on a receive comm".into())
}

#[cold]
#[inline(never)]
fn no_memory_handle() -> Error {
    Error::Usage("isend of a non-empty buffer without a memory handle".into())
}

/// A planned write as the verbs layer posts it: its local entry (none for a write of no
/// bytes), the peer's address, and its flags. Only the writes with immediates are signaled:
/// each one's completion retires the unsignaled writes before it on that QP.
#[inline]
fn write_parts(w: &plan::Write, inline_ok: bool) -> (Option<Sge>, RemoteAddr, SendFlags) {
    // SAFETY: a write's local side is memory registered under its QP's member PD, paired with
    // its key by the plan: the comm's own sizes staging (owned by the comm, registered for its
    // lifetime) or the caller's buffer, registered by NCCL through the memory handle given to
    // `isend` (deregistered only after the request completes, per NCCL's contract).
    let local = (w.len > 0).then(|| unsafe { Sge::from_raw(w.local_addr, w.len, w.lkey) });
    let remote = RemoteAddr {
        addr: w.remote_addr,
        rkey: w.rkey,
    };
    let flags = SendFlags {
        signaled: w.imm.is_some(),
        inline: inline_ok,
    };
    (local, remote, flags)
}
