//! The way in from NCCL's `void*` pointers: each is checked by its magic word
//! ([`super::objects`]) before it is used as a listen comm, a comm, a memory handle or a request,
//! and `close` ends a comm or listen comm (withdrawn from what other threads read, magic word
//! overwritten, freed).

use super::comm::{Comm, ReqHandle};
use super::handshake::ListenComm;
use super::objects::{ObjectKind, magic_of, poison};
use super::registration::MrHandle;
use crate::error::{Error, Result};
use crate::info;
use ferro_ffi::log_flags::NET;
use ferro_proto::comm::Done;

/// # Safety
/// `p` must be NULL or a pointer this plugin returned from `connect`/`accept` and not yet closed.
#[inline]
pub unsafe fn comm_ref<'a>(p: *mut core::ffi::c_void) -> Result<&'a Comm> {
    const SEND: u64 = ObjectKind::SendComm.magic();
    const RECV: u64 = ObjectKind::RecvComm.magic();
    // SAFETY: forwarded contract.
    match unsafe { magic_of(p) } {
        // SAFETY: the magic identifies a live Comm allocated by us.
        Some(SEND | RECV) => Ok(unsafe { &*p.cast::<Comm>() }),
        Some(_) => Err(Error::Usage(
            "not a send/receive comm of this plugin".into(),
        )),
        None => Err(Error::Usage("comm is NULL".into())),
    }
}

/// # Safety
/// As [`comm_ref`], for listen comms.
pub unsafe fn listen_ref<'a>(p: *mut core::ffi::c_void) -> Result<&'a ListenComm> {
    // SAFETY: forwarded contract.
    match unsafe { magic_of(p) } {
        // SAFETY: the magic identifies a live ListenComm allocated by us.
        Some(m) if m == ObjectKind::ListenComm.magic() => Ok(unsafe { &*p.cast::<ListenComm>() }),
        Some(_) => Err(Error::Usage("not a listen comm of this plugin".into())),
        None => Err(Error::Usage("listen comm is NULL".into())),
    }
}

/// # Safety
/// `p` must be NULL or an `mhandle` this plugin returned and not yet deregistered.
#[inline]
pub unsafe fn mr_ref<'a>(p: *mut core::ffi::c_void) -> Result<Option<&'a MrHandle>> {
    // SAFETY: forwarded contract.
    match unsafe { magic_of(p) } {
        Some(m) if m == ObjectKind::MemHandle.magic() => {
            // SAFETY: the magic identifies a live MrHandle allocated by us.
            Ok(Some(unsafe { &*p.cast::<MrHandle>() }))
        }
        Some(_) => Err(Error::Usage("not a memory handle of this plugin".into())),
        None => Ok(None),
    }
}

/// `test` on a request pointer: `Ok(true)` when done, after `on_done` was handed the sizes.
///
/// # Safety
/// `p` must be a request pointer this plugin returned whose comm is still open.
#[inline(always)]
pub unsafe fn test_request(
    p: *mut core::ffi::c_void,
    on_done: impl Fn(&Done) + Copy,
) -> Result<bool> {
    // SAFETY: forwarded contract.
    if unsafe { magic_of(p) } != Some(ObjectKind::Request.magic()) {
        return Err(not_a_request());
    }
    // SAFETY: a ReqHandle lives inside its comm's handle array; the comm is open per the contract.
    let h = unsafe { &*p.cast::<ReqHandle>() };
    // SAFETY: the back-pointer was set at comm creation and the comm is alive.
    let comm = unsafe { &*h.comm };
    let done = comm.test(h.idx, on_done)?;
    if done {
        crate::profiler::on_done(comm, h.idx);
    }
    Ok(done)
}

#[cold]
#[inline(never)]
fn not_a_request() -> Error {
    Error::Usage("test on a pointer that is not a request of this plugin".into())
}

/// Frees a comm or listen comm of the given kind (closeSend / closeRecv / closeListen).
///
/// # Safety
/// `p` must be NULL or a pointer returned by this plugin, not yet closed.
pub unsafe fn close(p: *mut core::ffi::c_void, kind: ObjectKind) -> Result<()> {
    // SAFETY: forwarded contract.
    let m = unsafe { magic_of(p) }
        .ok_or_else(|| Error::Usage(format!("close of a NULL {}", kind.name())))?;
    if matches!(kind, ObjectKind::MemHandle | ObjectKind::Request) {
        return Err(Error::Internal(format!("close of a {}", kind.name())));
    }
    if m != kind.magic() {
        return Err(Error::Usage(format!(
            "close of an object that is not a {} of this plugin",
            kind.name()
        )));
    }
    if matches!(kind, ObjectKind::SendComm | ObjectKind::RecvComm) {
        // Before anything else: no other thread may reach the comm once its end begins.
        // SAFETY: the magic says `p` is a live comm of ours; the shared reference ends with
        // this statement, before the magic word is overwritten and the comm freed.
        unsafe { &*p.cast::<Comm>() }.withdraw();
    }
    // The magic word is overwritten next.
    // SAFETY: the magic says `p` is a live object of ours; no reference to it is held here.
    unsafe { poison(p) };
    match kind {
        // SAFETY: allocated by Box::into_raw in the shim; closing ends its life exactly once.
        ObjectKind::ListenComm => drop(unsafe { Box::from_raw(p.cast::<ListenComm>()) }),
        ObjectKind::SendComm | ObjectKind::RecvComm => {
            // SAFETY: as above.
            let comm = unsafe { Box::from_raw(p.cast::<Comm>()) };
            info!(NET, "{}", comm.close_line());
            drop(comm);
        }
        ObjectKind::MemHandle | ObjectKind::Request => {}
    }
    Ok(())
}
