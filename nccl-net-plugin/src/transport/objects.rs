//! The objects NCCL holds as `void*` and their magic words: listen comms, send/receive comms and
//! memory handles are `Box::into_raw` pointers; request pointers point into a comm's array of
//! immutable request handles (stable for the comm's life). Every one starts with a magic word
//! naming its [`ObjectKind`], so a pointer of the wrong kind, or NULL, gives an error instead of
//! a type confusion (checked in `super::handles`).

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

    pub(super) fn name(self) -> &'static str {
        match self {
            ObjectKind::ListenComm => "listen comm",
            ObjectKind::SendComm => "send comm",
            ObjectKind::RecvComm => "receive comm",
            ObjectKind::MemHandle => "memory handle",
            ObjectKind::Request => "request",
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

/// Overwrites the magic word of an object whose end has begun with [`CLOSED_MAGIC`], by a
/// volatile write (a plain store right before the free could be dropped by the compiler), so
/// that a later use of the dangling pointer, such as a second `close` or `deregMr`, is likely
/// caught by the magic check (it is still undefined behaviour; NCCL never does it).
///
/// # Safety
/// `p` points to a live object of this plugin whose magic was checked (its first field is the
/// u64 magic word), and no reference to it is alive.
pub(super) unsafe fn poison(p: *mut core::ffi::c_void) {
    // SAFETY: per the contract.
    unsafe { p.cast::<u64>().write_volatile(CLOSED_MAGIC) };
}
