//! Host memory the plugin owns and registers for the NIC (FIFOs, staging, landing buffers):
//! zeroed, page-aligned, and never handed out as a Rust reference (see [`crate::volatile`]).

use crate::error::{Error, Result};
use core::ptr::NonNull;

/// Zeroed, page-aligned host memory owned by the plugin (FIFOs, staging). Never exposed as a Rust
/// reference: the NIC writes it, so it is accessed through [`HostBuf::volatile`] (or raw pointers) only.
#[derive(Debug)]
pub struct HostBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: plain owned memory; concurrent access is through raw pointers with the caller's ordering.
unsafe impl Send for HostBuf {}
// SAFETY: as above; &HostBuf gives out only raw pointers.
unsafe impl Sync for HostBuf {}

impl HostBuf {
    const ALIGN: usize = 4096;

    pub fn new(len: usize) -> Result<HostBuf> {
        let size = len.max(1).div_ceil(Self::ALIGN) * Self::ALIGN;
        let layout = std::alloc::Layout::from_size_align(size, Self::ALIGN)
            .map_err(|_| Error::new("alloc", libc::EINVAL))?;
        // SAFETY: layout has non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or(Error::new("alloc", libc::ENOMEM))?;
        Ok(HostBuf { ptr, len: size })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for HostBuf {
    fn drop(&mut self) {
        if let Ok(layout) = std::alloc::Layout::from_size_align(self.len, Self::ALIGN) {
            // SAFETY: allocated in `new` with this exact layout; any MR over it was dropped first
            // (owners keep the MR next to the buffer and drop the MR first).
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}
