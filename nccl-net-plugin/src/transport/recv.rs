//! The receive side's verbs work: posting what the core decides for a receive (zero-length
//! receives, staging its clear-to-send entries and the write when one is due), and flushes.

use super::comm::{Comm, ReceiverMem, ReqHandle, Side};
use super::endpoint::FlushQp;
use super::progress::{receiver_completion, retry_answer};
use super::registration::{MemKind, MrHandle};
use crate::error::{Error, Result};
use crate::profiler::Phandles;
use ferro_proto::comm::recv::{FlushTarget, PostRecv, RecvBuf, RecvCore, RecvStep};
use ferro_proto::fifo::ENTRY_SIZE;
use ferro_proto::health::{FlushRefused, verdict};
use ferro_verbs::{Fixed, RemoteAddr, SendChain};

impl Comm {
    /// `irecv`: `Ok(None)` (a NULL request) when 32 receives are outstanding. Inlined into the
    /// shim's `irecv` (one frame per call); the retry is out of line.
    #[inline(always)]
    pub fn irecv(
        &self,
        bufs: &[RecvBuf],
        phandles: Phandles<'_>,
    ) -> Result<Option<*mut ReqHandle>> {
        let Side::Receiver { mem, core, .. } = &self.side else {
            return Err(not_a_receiver());
        };
        let mut core = self.lock(core)?;
        let post = match core.irecv(bufs).map_err(|e| self.core_error(e))? {
            RecvStep::Retry => return self.irecv_retry(mem, &mut core),
            RecvStep::Post(p) => p,
        };
        // A receive with no scatter entry: it only consumes the immediate. Its `wr_id` names
        // the QP, so a recovery knows which of the group's QPs delivered. The common group is
        // one QP: posted without a loop.
        let (first, end) = (post.qps.start, post.qps.end);
        core.health.counters.recv_posts += 1;
        if let Err(e) = self.ep.qp(first).post_recv_empty(post.recv_wr_id_on(first)) {
            return Err(self.fail(&mut core, e));
        }
        if end > first + 1 {
            self.post_recv_rest(&mut core, &post)?;
        }
        crate::profiler::on_recv_posted(self, &post, bufs, phandles);
        // Staged now, written now or by a later call (coalesced with the receives after it):
        // each entry encoded from its buffer straight into the staging.
        let off = post.stage_offset();
        for (i, e) in post.entries(bufs).enumerate() {
            mem.cts_stage
                .write_words(off + i * ENTRY_SIZE, &e.encode_words());
        }
        if let Some(w) = &post.cts {
            self.post_cts(mem, &mut core, w)?;
        }
        self.keep_staged(&core);
        core.unlock();
        Ok(Some(self.req_ptr(post.req)))
    }

    /// A retried `irecv` (32 receives outstanding): it waits for completions, which need the
    /// sender to have every entry, so everything staged is written first.
    #[inline(never)]
    fn irecv_retry(
        &self,
        mem: &ReceiverMem,
        core: &mut RecvCore,
    ) -> Result<Option<*mut ReqHandle>> {
        if let Some(w) = core.cts_flush() {
            self.post_cts(mem, core, &w)?;
        }
        let _ = self.on_wait(core, receiver_completion(mem));
        retry_answer(core)
    }

    /// The receives of a group split over several QPs, past its first (posted by the caller).
    #[inline(never)]
    fn post_recv_rest(&self, core: &mut RecvCore, post: &PostRecv) -> Result<()> {
        for q in post.qps.start + 1..post.qps.end {
            core.health.counters.recv_posts += 1;
            if let Err(e) = self.ep.qp(q).post_recv_empty(post.recv_wr_id_on(q)) {
                return Err(self.fail(core, e));
            }
        }
        Ok(())
    }

    /// Posts the read of one flush on member `m`'s flush QP `f`: the byte at the target under
    /// its key on that member (the caller's receive buffer, registered on this member and valid
    /// until NCCL deregisters it, after the flush completes), into the member's own registered
    /// landing buffer.
    pub(super) fn post_flush_read(
        f: &FlushQp,
        m: usize,
        wr_id: u64,
        target: &FlushTarget,
    ) -> std::result::Result<(), ferro_verbs::Error> {
        let mut chain = SendChain::<Fixed<1>>::fixed();
        let remote = RemoteAddr {
            addr: target.addr,
            rkey: target.rkeys[m],
        };
        chain.rdma_read(wr_id, f.buf.sge(0, 0, 1), remote, true);
        f.qp.post(&mut chain)
    }

    /// A refused post: the comm's failure ([`Comm::refused`]), returned as the call's error.
    fn fail(&self, core: &mut RecvCore, e: ferro_verbs::Error) -> Error {
        self.refused(core, &e)
    }

    /// `iflush`: makes received data visible to the GPU by reading one byte of the last non-empty
    /// buffer back through the NIC on the loopback flush QP of every member device (each may
    /// have written part of it). `Ok(None)` when there is nothing to flush: host memory (unless
    /// `FERRO_FLUSH_HOST=1`), only empty buffers, or flushing disabled
    /// (`NCCL_GDR_FLUSH_DISABLE=1`, or no GPUDirect RDMA on this device).
    pub fn iflush(&self, bufs: &[(u64, u32, Option<&MrHandle>)]) -> Result<Option<*mut ReqHandle>> {
        let Side::Receiver {
            core,
            flush,
            mem,
            flush_host,
        } = &self.side
        else {
            return Err(Error::Usage("iflush on a send comm".into()));
        };
        if flush.is_empty() {
            return Ok(None);
        }
        let target = bufs.iter().rev().find(|(_, size, mh)| {
            *size > 0 && mh.is_some_and(|m| m.kind() != MemKind::Host || *flush_host)
        });
        let Some(&(addr, _, Some(mh))) = target else {
            return Ok(None);
        };
        let mut core = self.lock(core)?;
        self.cts_due(mem, &mut core)?;
        let target = FlushTarget {
            addr,
            rkeys: core::array::from_fn(|m| mh.rkey(m)),
        };
        // Members that are down (their QPs failed over) wrote nothing since: no read there.
        let up = || {
            flush
                .iter()
                .enumerate()
                .filter(|(m, _)| !self.ep.is_down(*m))
        };
        let req = core
            .begin_flush_of(up().count() as u16, target)
            .map_err(|e| self.core_error(e))?;
        for (posted, (m, f)) in up().enumerate() {
            // The local side is the member's own registered landing buffer; the remote side is
            // the caller's receive buffer, registered on this member (valid until NCCL
            // deregisters it, after the flush completes).
            core.health.counters.send_posts += 1;
            if let Err(e) = Comm::post_flush_read(f, m, core.flush_wr_id_now(req), &target) {
                return Err(match verdict::flush_refused(posted) {
                    FlushRefused::AbortFlush => {
                        core.abort_flush(req);
                        Error::System(format!("{}: flush: {e}", self.describe()))
                    }
                    FlushRefused::FailComm => self.fail(&mut core, e),
                });
            }
        }
        Ok(Some(self.req_ptr(req)))
    }
}

#[cold]
#[inline(never)]
fn not_a_receiver() -> Error {
    Error::Usage("irecv on a send comm".into())
}
