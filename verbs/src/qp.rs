//! A reliable-connected queue pair: its creation, state changes and queries, and posting work
//! requests built with [`crate::wr`]. It keeps its protection domain and CQs alive.

use crate::cq::Cq;
use crate::error::{Error, Result};
use crate::live::{self, Kind, report_drop_error};
use crate::ops;
use crate::pd::Pd;
use crate::sys::*;
use crate::wr::{self, SendChain, Store};
use core::ffi::c_int;
use core::ptr::NonNull;
use std::sync::Arc;

/// Capacities asked of a new RC QP.
#[derive(Debug, Clone, Copy)]
pub struct QpCaps {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// A reliable-connected queue pair.
#[derive(Debug)]
pub struct Qp {
    pd: Arc<Pd>,
    _send_cq: Arc<Cq>,
    _recv_cq: Arc<Cq>,
    ptr: NonNull<ibv_qp>,
    qpn: u32,
    /// The inline room asked at creation: a request asking for inline goes inline only up to
    /// this many bytes.
    max_inline: u32,
}

// SAFETY: posting and modifying QPs is thread-safe in libibverbs providers; no Rust-side state
// beyond the immutable qpn and inline room.
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

impl Qp {
    pub fn new_rc(pd: &Arc<Pd>, send_cq: &Arc<Cq>, recv_cq: &Arc<Cq>, caps: QpCaps) -> Result<Qp> {
        let mut attr = ibv_qp_init_attr {
            qp_context: core::ptr::null_mut(),
            send_cq: send_cq.as_ptr(),
            recv_cq: recv_cq.as_ptr(),
            srq: core::ptr::null_mut(),
            cap: ibv_qp_cap {
                max_send_wr: caps.max_send_wr,
                max_recv_wr: caps.max_recv_wr,
                max_send_sge: caps.max_send_sge,
                max_recv_sge: caps.max_recv_sge,
                max_inline_data: caps.max_inline_data,
            },
            qp_type: IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: live PD and CQs; attr fully initialised.
        let p = unsafe { (pd.ctx.v.create_qp)(pd.as_ptr(), &mut attr) };
        let ptr = NonNull::new(p)
            .ok_or_else(|| Error::last("ibv_create_qp").context(pd.ctx.name.clone()))?;
        // SAFETY: ptr is a live QP just created.
        let qpn = unsafe { (*ptr.as_ptr()).qp_num };
        live::inc(Kind::Qp);
        Ok(Qp {
            pd: pd.clone(),
            _send_cq: send_cq.clone(),
            _recv_cq: recv_cq.clone(),
            ptr,
            qpn,
            max_inline: caps.max_inline_data,
        })
    }

    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    pub fn as_ptr(&self) -> *mut ibv_qp {
        self.ptr.as_ptr()
    }

    pub fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    /// `ibv_modify_qp` with the given attribute mask.
    pub fn modify(&self, attr: &mut ibv_qp_attr, mask: c_int) -> Result<()> {
        // SAFETY: live QP; attr is a valid, initialised attribute struct.
        let rc = unsafe { (self.pd.ctx.v.modify_qp)(self.as_ptr(), attr, mask) };
        if rc != 0 {
            return Err(Error::new("ibv_modify_qp", rc).context(format!(
                "{} qpn {} to state {} (mask {mask:#x})",
                self.pd.ctx.name, self.qpn, attr.qp_state
            )));
        }
        Ok(())
    }

    /// `ibv_query_ece`: the QP's enhanced connection establishment options; `Ok(None)` when
    /// libibverbs lacks the call or the provider does not support it (`EOPNOTSUPP`).
    pub fn query_ece(&self) -> Result<Option<ibv_ece>> {
        let Some(f) = self.pd.ctx.v.query_ece else {
            return Ok(None);
        };
        let mut ece = ibv_ece::default();
        // SAFETY: live QP; `ece` is a valid struct the call writes.
        let rc = unsafe { f(self.as_ptr(), &mut ece) };
        match rc {
            0 => Ok(Some(ece)),
            rc if rc.abs() == libc::EOPNOTSUPP => Ok(None),
            rc => Err(Error::new("ibv_query_ece", rc.abs())
                .context(format!("{} qpn {}", self.pd.ctx.name, self.qpn))),
        }
    }

    /// `ibv_set_ece`: sets the options the peer reported; `Ok(false)` when libibverbs lacks the
    /// call or the provider does not support it (`EOPNOTSUPP`).
    pub fn set_ece(&self, ece: &ibv_ece) -> Result<bool> {
        let Some(f) = self.pd.ctx.v.set_ece else {
            return Ok(false);
        };
        let mut ece = *ece;
        // SAFETY: live QP; `ece` is a valid struct the call reads.
        let rc = unsafe { f(self.as_ptr(), &mut ece) };
        match rc {
            0 => Ok(true),
            rc if rc.abs() == libc::EOPNOTSUPP => Ok(false),
            rc => Err(Error::new("ibv_set_ece", rc.abs())
                .context(format!("{} qpn {}", self.pd.ctx.name, self.qpn))),
        }
    }

    /// `ibv_query_qp` of the attributes in `mask` (`EOPNOTSUPP` when libibverbs lacks it).
    pub fn query(&self, mask: c_int) -> Result<ibv_qp_attr> {
        let Some(f) = self.pd.ctx.v.query_qp else {
            return Err(Error::new("ibv_query_qp", libc::EOPNOTSUPP));
        };
        let mut attr = ibv_qp_attr::default();
        // SAFETY: all-zero bytes are a valid ibv_qp_init_attr (NULL pointers, zero counts).
        let mut init: ibv_qp_init_attr = unsafe { core::mem::zeroed() };
        // SAFETY: live QP; valid out-structs of the types libibverbs fills.
        let rc = unsafe { f(self.as_ptr(), &mut attr, mask, &mut init) };
        if rc != 0 {
            return Err(Error::new("ibv_query_qp", rc)
                .context(format!("{} qpn {}", self.pd.ctx.name, self.qpn)));
        }
        Ok(attr)
    }

    /// Bytes a request may carry inline on this QP (as asked at creation).
    pub fn max_inline(&self) -> u32 {
        self.max_inline
    }

    /// Posts `chain` in one `ibv_post_send`; an empty chain posts nothing. A request that asked
    /// for inline goes inline only when its payload fits [`Qp::max_inline`].
    pub fn post<S: Store>(&self, chain: &mut SendChain<S>) -> Result<()> {
        if chain.is_empty() {
            return Ok(());
        }
        let head = chain.link(self.max_inline);
        // SAFETY: live QP. `head` starts the chain just linked inside `chain`, which this call
        // borrows mutably, so it neither moves nor changes until the provider returns, and the
        // provider copies the requests (inline payloads included) before returning. Every local
        // scatter entry comes from a live `Mr`, bounds-checked (`Mr::sge`), or from
        // `Sge::from_raw`, whose caller vouched for its registration; a remote address reaches
        // only what the peer registered under its key.
        unsafe { ops::post_send(self.as_ptr(), head) }
    }

    /// Posts one RDMA write alone: the same request as [`Qp::post`] of a chain holding only
    /// [`SendChain::rdma_write`] of these arguments, built on this call's stack.
    #[inline]
    pub fn post_write(
        &self,
        wr_id: u64,
        local: Option<wr::Sge>,
        remote: wr::RemoteAddr,
        imm: Option<u32>,
        flags: wr::SendFlags,
    ) -> Result<()> {
        wr::with_lone_write(wr_id, local, remote, imm, flags, self.max_inline, |head| {
            // SAFETY: live QP. `head` is the request just built on `with_lone_write`'s frame,
            // with its scatter entry beside it, both unchanged until the provider returns; the
            // provider copies the request (an inline payload included) before returning. The
            // local entry, if any, comes from `Sge::from_raw` or a live `Mr` (as for
            // `Qp::post`), whose maker vouched for its registration; a remote address reaches
            // only what the peer registered under its key.
            unsafe { ops::post_send(self.as_ptr(), head) }
        })
    }

    /// Posts one receive with no scatter entry: it only consumes an immediate (a write with
    /// immediate's completion on this side).
    pub fn post_recv_empty(&self, wr_id: u64) -> Result<()> {
        let mut wr = wr::empty_recv(wr_id);
        // SAFETY: live QP; a single receive request with no scatter entry (nothing for the NIC
        // to write), on this stack frame for the duration of the call.
        unsafe { ops::post_recv(self.as_ptr(), &mut wr) }
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: live QP, destroyed once.
        let rc = unsafe { (self.pd.ctx.v.destroy_qp)(self.as_ptr()) };
        if rc != 0 {
            report_drop_error(&format!(
                "ibv_destroy_qp({} qpn {}) failed: {rc}",
                self.pd.ctx.name, self.qpn
            ));
        }
        live::dec(Kind::Qp);
    }
}
