//! A registered memory region: an untyped byte range the NIC may read or write, by key. It
//! keeps its protection domain alive.

use crate::error::{Error, Result};
use crate::live::{self, Kind, report_drop_error};
use crate::pd::Pd;
use crate::sys::*;
use crate::wr::Sge;
use core::ffi::{c_int, c_void};
use core::ptr::NonNull;
use std::sync::Arc;

/// A registered memory region: an untyped byte range the NIC may read or write.
#[derive(Debug)]
pub struct Mr {
    pd: Arc<Pd>,
    ptr: NonNull<ibv_mr>,
    lkey: u32,
    rkey: u32,
    addr: u64,
    len: usize,
}

// SAFETY: an MR is an immutable registration; lkey/rkey are plain values.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Mr {
    fn wrap(pd: &Arc<Pd>, p: *mut ibv_mr, op: &'static str, what: String) -> Result<Mr> {
        let ptr = NonNull::new(p).ok_or_else(|| Error::last(op).context(what))?;
        // SAFETY: ptr is a live MR just returned by the library.
        let (lkey, rkey, addr, len) = unsafe {
            let m = &*ptr.as_ptr();
            (m.lkey, m.rkey, m.addr as u64, m.length)
        };
        live::inc(Kind::Mr);
        Ok(Mr {
            pd: pd.clone(),
            ptr,
            lkey,
            rkey,
            addr,
            len,
        })
    }

    /// Registers `len` bytes at `addr`.
    ///
    /// # Safety
    /// The range must be mapped memory that stays mapped until this `Mr` is dropped; the NIC may
    /// read and (with write access) write it concurrently with the program, so no Rust reference
    /// to it may be held across operations.
    pub unsafe fn reg(pd: &Arc<Pd>, addr: *mut c_void, len: usize, access: u32) -> Result<Mr> {
        let v = pd.ctx.v;
        let what = format!("{} addr {addr:p} len {len} access {access:#x}", pd.ctx.name);
        let p = match v.reg_mr_iova2 {
            // SAFETY: live PD; the range contract is the caller's.
            Some(f) => unsafe { f(pd.as_ptr(), addr, len, addr as u64, access) },
            // SAFETY: as above; access fits in a c_int (flags below 2^31).
            None => unsafe { (v.reg_mr)(pd.as_ptr(), addr, len, access as c_int) },
        };
        Self::wrap(pd, p, "ibv_reg_mr", what)
    }

    /// Registers a DMA-BUF range (`ibv_reg_dmabuf_mr`), addressed by the peer at `iova`.
    ///
    /// # Safety
    /// `fd` must be a DMA-BUF file descriptor whose backing stays alive while registered.
    pub unsafe fn reg_dmabuf(
        pd: &Arc<Pd>,
        offset: u64,
        len: usize,
        iova: u64,
        fd: c_int,
        access: u32,
    ) -> Result<Mr> {
        let f = pd.ctx.v.reg_dmabuf_mr.ok_or_else(|| {
            Error::new("ibv_reg_dmabuf_mr", libc::EOPNOTSUPP).context(
                "libibverbs has no ibv_reg_dmabuf_mr (rdma-core older than 34)".to_string(),
            )
        })?;
        let what = format!("{} fd {fd} offset {offset} len {len}", pd.ctx.name);
        // SAFETY: live PD; fd contract is the caller's.
        let p = unsafe { f(pd.as_ptr(), offset, len, iova, fd, access as c_int) };
        Self::wrap(pd, p, "ibv_reg_dmabuf_mr", what)
    }

    pub fn lkey(&self) -> u32 {
        self.lkey
    }
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
    pub fn addr(&self) -> u64 {
        self.addr
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    /// A scatter entry of `len` bytes at offset `off` of this registration; `None` when the
    /// range is not inside it. Posting it is safe: the memory is registered for as long as this
    /// `Mr` lives, and once it is dropped its key is dead, so a request still naming it fails
    /// with a protection error instead of touching the memory.
    pub fn sge(&self, off: usize, len: u32) -> Option<Sge> {
        Sge::within(self.addr, self.len, self.lkey, off, len)
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: live MR, deregistered once.
        let rc = unsafe { (self.pd.ctx.v.dereg_mr)(self.ptr.as_ptr()) };
        if rc != 0 {
            report_drop_error(&format!("ibv_dereg_mr({}) failed: {rc}", self.pd.ctx.name));
        }
        live::dec(Kind::Mr);
    }
}
