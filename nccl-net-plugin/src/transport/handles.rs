//! The objects NCCL holds as `void*`, and how a pointer from NCCL is checked before use.
//!
//! Listen comms, send/receive comms and memory handles are `Box::into_raw` pointers; request
//! pointers point into a comm's array of immutable [`ReqHandle`]s (stable for the comm's life).
//! Every one starts with a magic word naming its [`ObjectKind`], so a pointer of the wrong kind,
//! or NULL, gives an error instead of a type confusion. `close` overwrites the magic word before
//! the memory is freed.

use super::comm::Comm;
use super::handshake::ListenComm;
use super::registration::MrHandle;
use crate::error::{Error, Result};
use crate::info;
use ferro_ffi::log_flags::NET;
use ferro_proto::comm::Done;

/// The kinds of object NCCL gets from the plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    ListenComm,
    SendComm,
    RecvComm,
    MemHandle,
    Request,
}

/// The word a closed comm's magic is overwritten with.
const CLOSED_MAGIC: u64 = 0x434c_4f53_4544_2121; // "CLOSED!!"

impl ObjectKind {
    pub const fn magic(self) -> u64 {
        match self {
            ObjectKind::ListenComm => 0x4c49_5354_4652_5231, // "LISTFRR1"
            ObjectKind::SendComm => 0x5345_4e44_4652_5231,
            ObjectKind::RecvComm => 0x5245_4356_4652_5231,
            ObjectKind::MemHandle => 0x4d52_4844_4652_5231,
            ObjectKind::Request => 0x5245_5155_4652_5231,
        }
    }

    fn name(self) -> &'static str {
        match self {
            ObjectKind::ListenComm => "listen comm",
            ObjectKind::SendComm => "send comm",
            ObjectKind::RecvComm => "receive comm",
            ObjectKind::MemHandle => "memory handle",
            ObjectKind::Request => "request",
        }
    }
}

/// What NCCL gets as a request pointer: immutable, names the comm and a slot of its request
/// table (the state lives in the comm's protocol core).
#[derive(Debug)]
#[repr(C)]
pub struct ReqHandle {
    magic: u64,
    comm: *const Comm,
    idx: u32,
}

impl ReqHandle {
    pub(super) fn new(comm: *const Comm, idx: u32) -> ReqHandle {
        ReqHandle {
            magic: ObjectKind::Request.magic(),
            comm,
            idx,
        }
    }
}

/// Reads the magic word at the start of a plugin object.
///
/// # Safety
/// `p` must be NULL or point to at least 8 readable bytes (any object NCCL got from us).
pub(super) unsafe fn magic_of(p: *const core::ffi::c_void) -> Option<u64> {
    // SAFETY: per the contract.
    (!p.is_null()).then(|| unsafe { p.cast::<u64>().read() })
}

/// # Safety
/// `p` must be NULL or a pointer this plugin returned from `connect`/`accept` and not yet closed.
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

/// `test` on a request pointer: `Some` with the sizes when done.
///
/// # Safety
/// `p` must be a request pointer this plugin returned whose comm is still open.
pub unsafe fn test_request(p: *mut core::ffi::c_void) -> Result<Option<Done>> {
    // SAFETY: forwarded contract.
    if unsafe { magic_of(p) } != Some(ObjectKind::Request.magic()) {
        return Err(Error::Usage(
            "test on a pointer that is not a request of this plugin".into(),
        ));
    }
    // SAFETY: a ReqHandle lives inside its comm's handle array; the comm is open per the contract.
    let h = unsafe { &*p.cast::<ReqHandle>() };
    // SAFETY: the back-pointer was set at comm creation and the comm is alive.
    let comm = unsafe { &*h.comm };
    let done = comm.test(h.idx);
    if let Ok(Some(_)) = done {
        crate::profiler::on_done(comm, h.idx);
    }
    done
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
        Comm::withdraw(p.cast());
    }
    // The magic word is overwritten next, so that a later use of the dangling pointer is
    // likely caught by the magic check (it is still undefined behaviour; NCCL never does it).
    // SAFETY: the magic says `p` is a live object of ours whose first field is the u64 magic.
    unsafe { p.cast::<u64>().write_volatile(CLOSED_MAGIC) };
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
