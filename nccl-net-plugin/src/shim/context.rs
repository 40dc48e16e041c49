//! The per-communicator context of ABI v11+: `init` creates one for every communicator (many per
//! process), `listen`/`connect` take it, `finalize` frees it. It owns what is the communicator's
//! own: its id, its config (the traffic class, copied: NCCL passes a stack object) and the last
//! hints `setNetAttr` gave. The devices stay process-wide ([`crate::plugin`]).

use crate::error::{Error, Result};
use core::ffi::c_void;
use ferro_ffi::log_flags::NET;
use ferro_ffi::ncclNetAttr_v11_t;
use std::sync::Mutex;

const CTX_MAGIC: u64 = 0x4645_5252_4f43_5458; // "FERROCTX"
const FREED_MAGIC: u64 = 0x4645_5252_4f46_5245; // "FERROFRE"

/// One communicator's context.
#[derive(Debug)]
pub(super) struct NetContext {
    magic: u64,
    pub(super) comm_id: u64,
    /// The communicator's traffic class (`None`: not set). Its connections use it as their
    /// traffic class and service level where `NCCL_IB_TC` / `NCCL_IB_SL` are not set.
    pub(super) traffic_class: Option<u8>,
    /// The last hints from `setNetAttr` (service and progress threads may set them at once).
    pub(super) attr: Mutex<Option<ncclNetAttr_v11_t>>,
}

impl NetContext {
    pub(super) fn new(comm_id: u64, traffic_class: Option<u8>) -> Box<NetContext> {
        crate::info!(
            NET,
            "network context for communicator {comm_id:#018x}: traffic class {}",
            traffic_class.map_or("not set".to_string(), |t| t.to_string())
        );
        Box::new(NetContext {
            magic: CTX_MAGIC,
            comm_id,
            traffic_class,
            attr: Mutex::new(None),
        })
    }

    /// The context behind a pointer NCCL passes back.
    ///
    /// # Safety
    /// `p` is NULL or a pointer `init` returned and `finalize` has not freed.
    pub(super) unsafe fn from_ptr<'a>(p: *mut c_void) -> Result<&'a NetContext> {
        if p.is_null() {
            return Err(Error::Usage(
                "the network context is NULL (init failed or was not called for this communicator)"
                    .into(),
            ));
        }
        // SAFETY: per this function's contract p points to a live NetContext; its first field is
        // the magic word, read before anything else.
        let ctx = unsafe { &*p.cast::<NetContext>() };
        if ctx.magic != CTX_MAGIC {
            return Err(Error::Usage(
                "pointer is not a network context of this plugin (or was finalized)".into(),
            ));
        }
        Ok(ctx)
    }

    /// Records `setNetAttr`'s hints.
    pub(super) fn set_attr(&self, attr: ncclNetAttr_v11_t) {
        *self.attr.lock().unwrap_or_else(|p| p.into_inner()) = Some(attr);
    }
}

/// `finalize`: frees the context. NULL (a failed `init` leaves NULL behind) is accepted.
///
/// # Safety
/// `p` is NULL or a pointer `init` returned that NCCL never uses again.
pub(super) unsafe fn finalize(p: *mut c_void) -> Result<()> {
    if p.is_null() {
        return Ok(());
    }
    // SAFETY: forwarded contract.
    let ctx = unsafe { retire(p) }?;
    crate::info!(
        NET,
        "network context for communicator {:#018x} finalized",
        ctx.comm_id
    );
    drop(ctx);
    Ok(())
}

/// Takes a context back from NCCL: checks its magic word, overwrites it with `FREED_MAGIC` by a
/// volatile write (a plain store right before the free may be dropped by the compiler), and
/// returns the box to free. A later use of the dangling pointer, such as a second `finalize`, is
/// then likely caught by the magic check (still undefined behaviour; NCCL never does it).
///
/// # Safety
/// `p` is a non-NULL pointer `init` returned that NCCL never uses again.
unsafe fn retire(p: *mut c_void) -> Result<Box<NetContext>> {
    // SAFETY: forwarded contract; checks the magic word.
    unsafe { NetContext::from_ptr(p) }?;
    // SAFETY: `p` is a live NetContext (checked above); `magic` is a field of it, written
    // through a raw pointer to it (no reference to the context is alive here).
    unsafe { core::ptr::addr_of_mut!((*p.cast::<NetContext>()).magic).write_volatile(FREED_MAGIC) };
    // SAFETY: allocated by Box::into_raw in init; NCCL hands it back once.
    Ok(unsafe { Box::from_raw(p.cast::<NetContext>()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_lives_from_init_to_finalize_and_is_checked_by_its_magic() {
        let p: *mut c_void = Box::into_raw(NetContext::new(0x42, Some(3))).cast();
        // SAFETY: a pointer init would return, not yet finalized.
        let c = unsafe { NetContext::from_ptr(p) }.expect("valid context");
        assert_eq!((c.comm_id, c.traffic_class), (0x42, Some(3)));
        let attr = ncclNetAttr_v11_t {
            sendCommAttr: ferro_ffi::ncclNetCommAttr_v11_t {
                maxConcurrentPeers: 8,
                minConcurrentPeers: 1,
                maxFlowsPerPeer: 2,
                minFlowsPerPeer: 1,
            },
            recvCommAttr: ferro_ffi::ncclNetCommAttr_v11_t {
                maxConcurrentPeers: -1,
                minConcurrentPeers: 1,
                maxFlowsPerPeer: -1,
                minFlowsPerPeer: 1,
            },
            op: 1 << 6,
            algo: u32::MAX,
            proto: u32::MAX,
        };
        c.set_attr(attr);
        assert_eq!(*c.attr.lock().unwrap(), Some(attr));
        // SAFETY: finalized once, never used again.
        unsafe { finalize(p) }.expect("finalize");
    }

    #[test]
    fn a_finalized_context_is_poisoned_so_a_second_finalize_is_refused() {
        let p: *mut c_void = Box::into_raw(NetContext::new(0x7, None)).cast();
        // SAFETY: a pointer init would return, not yet finalized.
        let taken = unsafe { retire(p) }.expect("the first finalize takes the context");
        // Instead of freeing it, the test keeps the (poisoned) context alive, as a raw pointer
        // again: looking at it a second time is sound here, as it would not be after a real
        // finalize.
        let p: *mut c_void = Box::into_raw(taken).cast();
        // SAFETY: `p` points to a live NetContext.
        assert!(unsafe { NetContext::from_ptr(p) }.is_err());
        // SAFETY: as above.
        match unsafe { retire(p) } {
            Err(e) => assert!(e.to_string().contains("finalized"), "{e}"),
            Ok(again) => {
                // Never free the same box twice, even when the test fails.
                std::mem::forget(again);
                panic!("a second finalize of the same context was accepted");
            }
        }
        // SAFETY: from Box::into_raw above, freed once.
        drop(unsafe { Box::from_raw(p.cast::<NetContext>()) });
    }

    #[test]
    fn finalize_accepts_null_and_refuses_what_is_not_a_context() {
        // SAFETY: NULL is what a failed init leaves.
        assert!(unsafe { finalize(core::ptr::null_mut()) }.is_ok());
        let mut not_ctx = [0u64; 8];
        // SAFETY: a live, aligned buffer the size of a context, without its magic word.
        let r = unsafe { NetContext::from_ptr(not_ctx.as_mut_ptr().cast()) };
        assert!(r.is_err());
        // SAFETY: as above; refused before anything is freed.
        assert!(unsafe { finalize(not_ctx.as_mut_ptr().cast()) }.is_err());
    }
}
