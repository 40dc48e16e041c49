//! A completion queue and its polling. It keeps its [`Context`] alive.

use crate::context::Context;
use crate::error::{Error, Result};
use crate::live::{self, Kind, report_drop_error};
use crate::ops;
use crate::sys::*;
use core::ffi::c_int;
use core::ptr::NonNull;
use std::sync::Arc;

/// A completion queue.
#[derive(Debug)]
pub struct Cq {
    ctx: Arc<Context>,
    ptr: NonNull<ibv_cq>,
}

// SAFETY: providers serialise CQ access internally (verbs are thread-safe); no Rust-side state.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

impl Cq {
    pub fn new(ctx: &Arc<Context>, cqe: u32) -> Result<Arc<Cq>> {
        let n = c_int::try_from(cqe).map_err(|_| Error::new("ibv_create_cq", libc::EINVAL))?;
        // SAFETY: live context; no channel, vector 0.
        let p = unsafe {
            (ctx.v.create_cq)(
                ctx.as_ptr(),
                n,
                core::ptr::null_mut(),
                core::ptr::null_mut(),
                0,
            )
        };
        let ptr = NonNull::new(p).ok_or_else(|| {
            Error::last("ibv_create_cq").context(format!("{} cqe={cqe}", ctx.name))
        })?;
        live::inc(Kind::Cq);
        Ok(Arc::new(Cq {
            ctx: ctx.clone(),
            ptr,
        }))
    }

    pub fn as_ptr(&self) -> *mut ibv_cq {
        self.ptr.as_ptr()
    }

    /// Polls up to `wc.len()` completions.
    pub fn poll(&self, wc: &mut [ibv_wc]) -> Result<usize> {
        // SAFETY: the CQ is live for as long as self.
        unsafe { ops::poll_cq(self.as_ptr(), wc) }
    }

    /// Polls up to `room.len()` completions into room that is not initialised first (no
    /// zeroing per poll on the data path); returns the completions polled.
    #[inline]
    pub fn poll_into<'w>(
        &self,
        room: &'w mut [core::mem::MaybeUninit<ibv_wc>],
    ) -> Result<&'w [ibv_wc]> {
        // SAFETY: the CQ is live for as long as self.
        unsafe { ops::poll_cq_uninit(self.as_ptr(), room) }
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: live CQ; QPs using it hold an Arc, so none remains.
        let rc = unsafe { (self.ctx.v.destroy_cq)(self.as_ptr()) };
        if rc != 0 {
            report_drop_error(&format!("ibv_destroy_cq({}) failed: {rc}", self.ctx.name));
        }
        live::dec(Kind::Cq);
    }
}
