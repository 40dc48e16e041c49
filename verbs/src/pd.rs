//! A protection domain: the scope of memory registrations and queue pairs on one device. It
//! keeps its [`Context`] alive.

use crate::context::Context;
use crate::error::{Error, Result};
use crate::live::{self, Kind, report_drop_error};
use crate::sys::*;
use core::ptr::NonNull;
use std::sync::Arc;

/// A protection domain.
#[derive(Debug)]
pub struct Pd {
    pub(crate) ctx: Arc<Context>,
    ptr: NonNull<ibv_pd>,
}

// SAFETY: PDs are thread-safe C objects; this owner has no mutable Rust state.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Pd {
    pub fn new(ctx: &Arc<Context>) -> Result<Arc<Pd>> {
        // SAFETY: live context.
        let p = unsafe { (ctx.v.alloc_pd)(ctx.as_ptr()) };
        let ptr =
            NonNull::new(p).ok_or_else(|| Error::last("ibv_alloc_pd").context(ctx.name.clone()))?;
        live::inc(Kind::Pd);
        Ok(Arc::new(Pd {
            ctx: ctx.clone(),
            ptr,
        }))
    }

    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    pub fn as_ptr(&self) -> *mut ibv_pd {
        self.ptr.as_ptr()
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: live PD; all MRs/QPs hold an Arc to it, so none remains.
        let rc = unsafe { (self.ctx.v.dealloc_pd)(self.as_ptr()) };
        if rc != 0 {
            report_drop_error(&format!("ibv_dealloc_pd({}) failed: {rc}", self.ctx.name));
        }
        live::dec(Kind::Pd);
    }
}
