//! Memory registration: `regMr` (host memory, or CUDA memory through nvidia-peermem) through the
//! device's page-granular registration cache, `regMrDmaBuf`, and `deregMr`. The handle NCCL gets
//! is a boxed [`MrHandle`] that starts with its magic word; on a virtual NIC it holds one
//! registration per member device (each through that device's cache and protection domain).

use super::comm::Comm;
use super::objects::{ObjectKind, magic_of, poison};
use crate::error::{Error, Result};
use crate::plugin::{self, NetDevice};
use ferro_proto::Keys;
use ferro_verbs::Mr;
use ferro_verbs::sys::*;
use std::sync::Arc;

/// What memory a registration covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemKind {
    Host,
    /// CUDA memory registered by address (nvidia-peermem).
    Cuda,
    /// CUDA memory registered through a DMA-BUF file descriptor.
    DmaBuf,
}

/// One member device's registration of a buffer.
#[derive(Debug)]
struct MemberMr {
    dev: &'static NetDevice,
    mr: Arc<Mr>,
    /// The cache entry this holds a reference on (None for uncached DMA-BUF registrations).
    key: Option<crate::mrcache::Key>,
}

impl MemberMr {
    /// Gives the cache reference back; the registration goes when the last one does (outside
    /// the cache lock: the returned MR is dropped by the caller).
    fn release(self) -> Result<()> {
        let freed = match self.key {
            Some(key) => lock_cache(self.dev)?.release(key),
            None => None,
        };
        drop(freed);
        Ok(())
    }
}

/// A registration handed to NCCL as `mhandle`: one MR per member device of the comm's
/// (virtual) device, in member order.
#[derive(Debug)]
#[repr(C)]
pub struct MrHandle {
    /// [`ObjectKind::MemHandle`]'s magic word; first field.
    pub(super) magic: u64,
    members: Vec<MemberMr>,
    kind: MemKind,
    /// The members' local and remote keys, by member (zeros past the last), taken once at
    /// registration: every `isend` and `irecv` reads them.
    lkeys: Keys,
    rkeys: Keys,
    /// The (virtual) device of the comm the handle was registered through: a comm of this
    /// device fits it without comparing member lists.
    made_on: Option<&'static crate::vnic::VDevice>,
}

impl MrHandle {
    fn new(
        members: Vec<MemberMr>,
        kind: MemKind,
        made_on: &'static crate::vnic::VDevice,
    ) -> MrHandle {
        MrHandle {
            magic: ObjectKind::MemHandle.magic(),
            lkeys: core::array::from_fn(|m| members.get(m).map_or(0, |x| x.mr.lkey())),
            rkeys: core::array::from_fn(|m| members.get(m).map_or(0, |x| x.mr.rkey())),
            members,
            kind,
            made_on: Some(made_on),
        }
    }

    /// The remote key on member `m` (0 if the handle has no such member).
    pub fn rkey(&self, m: usize) -> u32 {
        self.rkeys.get(m).copied().unwrap_or(0)
    }

    /// The remote keys by member.
    #[inline]
    pub fn rkeys(&self) -> Keys {
        self.rkeys
    }

    /// The local keys by member.
    #[inline]
    pub fn lkeys(&self) -> &Keys {
        &self.lkeys
    }

    pub fn kind(&self) -> MemKind {
        self.kind
    }

    /// Whether the handle was registered on exactly the member devices of `comm` (a handle
    /// of another device names keys the comm's QPs cannot use).
    #[inline]
    pub fn fits(&self, comm: &Comm) -> bool {
        self.made_on.is_some_and(|d| core::ptr::eq(d, comm.ep.vdev)) || self.same_members(comm)
    }

    /// [`MrHandle::fits`] by the member lists (a handle registered through a comm of another
    /// device with the same members fits too).
    #[cold]
    fn same_members(&self, comm: &Comm) -> bool {
        let mine = self.members.iter().map(|m| m.dev.index);
        let theirs = comm.ep.vdev.members.iter().map(|m| m.index);
        mine.eq(theirs)
    }
}

/// Registers on every member of `comm`'s device with `one`; on a failure, the members already
/// registered are released and the error names the member.
fn reg_members(
    comm: &Comm,
    kind: MemKind,
    mut one: impl FnMut(
        &'static NetDevice,
        &Arc<ferro_verbs::Pd>,
    ) -> Result<(Arc<Mr>, Option<crate::mrcache::Key>)>,
) -> Result<Box<MrHandle>> {
    let mut members = Vec::with_capacity(comm.ep.rails.len());
    for rail in &comm.ep.rails {
        match one(rail.dev, &rail.pd) {
            Ok((mr, key)) => members.push(MemberMr {
                dev: rail.dev,
                mr,
                key,
            }),
            Err(e) => {
                for m in members {
                    let _ = m.release();
                }
                return Err(if comm.ep.vdev.is_virtual {
                    e.prefixed(&format!(
                        "member {} of {}",
                        rail.dev.ibdev, comm.ep.vdev.name
                    ))
                } else {
                    e
                });
            }
        }
    }
    Ok(Box::new(MrHandle::new(members, kind, comm.ep.vdev)))
}

fn reg_access() -> u32 {
    let base = super::access::USER;
    let ro = plugin::get().is_ok_and(|p| p.relaxed_ordering);
    if ro {
        base | IBV_ACCESS_RELAXED_ORDERING
    } else {
        base
    }
}

/// The address of a buffer to register (never NULL).
fn buffer_addr(call: &str, data: u64, size: usize) -> Result<usize> {
    if data == 0 {
        return Err(Error::Usage(format!(
            "{call} of a NULL buffer ({size} bytes)"
        )));
    }
    usize::try_from(data).map_err(|_| Error::Usage(format!("{call}: address out of range")))
}

fn lock_cache(dev: &NetDevice) -> Result<std::sync::MutexGuard<'_, crate::mrcache::RegCache<Mr>>> {
    dev.cache
        .lock()
        .map_err(|_| Error::Internal("registration cache poisoned".into()))
}

/// `regMr`: host memory, or CUDA memory through nvidia-peermem. Registrations go through the
/// device's cache, so a sub-range of a registered range (or another buffer in the same pages)
/// costs a reference count, not a registration.
pub fn reg_mr(comm: &Comm, data: u64, size: usize, ptr_type: i32) -> Result<Box<MrHandle>> {
    let kind = match ptr_type {
        ferro_ffi::NCCL_PTR_HOST => MemKind::Host,
        ferro_ffi::NCCL_PTR_CUDA => MemKind::Cuda,
        other => {
            return Err(Error::Usage(format!(
                "{}: regMr with unknown memory type {other}",
                comm.ep.vdev.label()
            )));
        }
    };
    let addr = buffer_addr("regMr", data, size)?;
    let access = reg_access();
    reg_members(comm, kind, |dev, pd| {
        if kind == MemKind::Cuda && !dev.gdr.peermem.is_usable() {
            return Err(Error::Usage(format!(
                "{}: regMr of CUDA memory refused: nvidia-peermem path unavailable ({}); {}",
                dev.ibdev,
                dev.gdr.peermem.reasons().join(", "),
                dev.gdr.summary
            )));
        }
        let mut cache = lock_cache(dev)?;
        let (mr, key) = cache.acquire(addr, size, |start, len| {
            // SAFETY: NCCL keeps the buffer allocated until deregMr (its documented contract),
            // and the cache holds the registration only while some handle over these pages is
            // alive; the page-rounded range lies in the same mapping as the buffer.
            unsafe { Mr::reg(pd, start as *mut core::ffi::c_void, len, access) }
        })?;
        Ok((mr, Some(key)))
    })
}

/// Where a DMA-BUF registration of `data` (at `offset` in the DMA-BUF) starts when it is
/// widened to whole pages, as the registration cache keys ranges: the page start, and the
/// offset of that page in the DMA-BUF. `None` when the DMA-BUF does not reach back to the page
/// start (the registration then covers exactly what was asked and is not cached).
fn dmabuf_page_cover(data: usize, offset: u64, page: usize) -> Option<(usize, u64)> {
    let start = data - data % page;
    let head = (data - start) as u64;
    offset.checked_sub(head).map(|fd_offset| (start, fd_offset))
}

/// `regMrDmaBuf`: CUDA memory through a DMA-BUF file descriptor. Like other registrations it
/// goes through the device's cache, keyed by the page range (as NCCL's IB transport does, the
/// fd is not part of the key: a later registration of the same pages shares the MR). NCCL
/// closes `fd` after the call; the registration keeps the buffer alive.
pub fn reg_mr_dmabuf(
    comm: &Comm,
    data: u64,
    size: usize,
    ptr_type: i32,
    offset: u64,
    fd: i32,
) -> Result<Box<MrHandle>> {
    if ptr_type == ferro_ffi::NCCL_PTR_HOST && fd < 0 {
        return reg_mr(comm, data, size, ptr_type);
    }
    let addr = buffer_addr("regMrDmaBuf", data, size)?;
    let access = reg_access();
    reg_members(comm, MemKind::DmaBuf, |dev, pd| {
        if !dev.gdr.dmabuf.is_usable() {
            return Err(Error::Usage(format!(
                "{}: regMrDmaBuf refused: DMA-BUF path unavailable ({}); {}",
                dev.ibdev,
                dev.gdr.dmabuf.reasons().join(", "),
                dev.gdr.summary
            )));
        }
        let mut cache = lock_cache(dev)?;
        let Some((page_start, fd_page_offset)) = dmabuf_page_cover(addr, offset, cache.page())
        else {
            drop(cache);
            // SAFETY: NCCL hands a DMA-BUF fd exported for this GPU range; the registration
            // pins it.
            let mr = unsafe { Mr::reg_dmabuf(pd, offset, size, data, fd, access) }?;
            return Ok((Arc::new(mr), None));
        };
        let (mr, key) = cache.acquire(addr, size, |start, len| {
            debug_assert_eq!(start, page_start);
            // SAFETY: NCCL hands a DMA-BUF fd exported for this GPU range (NCCL exports whole
            // pages); the page-widened range starts `fd_page_offset` bytes into it, and the
            // registration pins it for as long as the cache holds the entry.
            unsafe { Mr::reg_dmabuf(pd, fd_page_offset, len, start as u64, fd, access) }
        })?;
        Ok((mr, Some(key)))
    })
}

/// `deregMr`: drops the handle's reference; the registration goes when the last one does.
///
/// # Safety
/// `p` must be NULL or an `mhandle` returned by `regMr`/`regMrDmaBuf`, not yet deregistered.
pub unsafe fn dereg_mr(p: *mut core::ffi::c_void) -> Result<()> {
    // SAFETY: forwarded contract.
    let h = unsafe { retire(p) }?;
    let MrHandle { members, .. } = *h;
    let mut first_err = Ok(());
    for m in members {
        if let Err(e) = m.release() {
            first_err = first_err.and(Err(e));
        }
    }
    first_err
}

/// Takes a memory handle back from NCCL: checks its magic word, poisons it
/// ([`super::objects::poison`]: a second `deregMr` is then likely refused) and returns the box
/// to free.
///
/// # Safety
/// As [`dereg_mr`].
unsafe fn retire(p: *mut core::ffi::c_void) -> Result<Box<MrHandle>> {
    // SAFETY: forwarded contract.
    if unsafe { magic_of(p) } != Some(ObjectKind::MemHandle.magic()) {
        return Err(Error::Usage(
            "deregMr of a pointer that is not a memory handle of this plugin (or one already deregistered)".into(),
        ));
    }
    // SAFETY: the magic says `p` is a live MrHandle; no reference to it is held here.
    unsafe { poison(p) };
    // SAFETY: allocated by Box::into_raw in the shim; deregMr ends its life exactly once.
    Ok(unsafe { Box::from_raw(p.cast::<MrHandle>()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deregistered_handle_is_poisoned_so_a_second_dereg_is_refused() {
        let h = Box::new(MrHandle {
            magic: ObjectKind::MemHandle.magic(),
            members: Vec::new(),
            kind: MemKind::Host,
            lkeys: [0; ferro_proto::MAX_DEVS],
            rkeys: [0; ferro_proto::MAX_DEVS],
            made_on: None,
        });
        let p: *mut core::ffi::c_void = Box::into_raw(h).cast();
        // SAFETY: a handle as the shim hands it out, not yet deregistered.
        let taken = unsafe { retire(p) }.expect("the first deregMr takes the handle");
        // Instead of freeing it, the test keeps the (poisoned) handle alive, as a raw pointer
        // again: looking at it a second time is sound here, as it would not be after a real
        // deregMr.
        let p: *mut core::ffi::c_void = Box::into_raw(taken).cast();
        // SAFETY: `p` points to a live MrHandle.
        assert!(unsafe { super::super::handles::mr_ref(p) }.is_err());
        // SAFETY: as above.
        match unsafe { retire(p) } {
            Err(e) => assert!(e.to_string().contains("already deregistered"), "{e}"),
            Ok(again) => {
                // Never free the same box twice, even when the test fails.
                std::mem::forget(again);
                panic!("a second deregMr of the same handle was accepted");
            }
        }
        // SAFETY: from Box::into_raw above, freed once.
        drop(unsafe { Box::from_raw(p.cast::<MrHandle>()) });
    }

    #[test]
    fn a_dmabuf_range_is_widened_to_its_page_when_the_fd_reaches_back_that_far() {
        assert_eq!(dmabuf_page_cover(0x20_0000, 0, 4096), Some((0x20_0000, 0)));
        assert_eq!(
            dmabuf_page_cover(0x20_0100, 0x1100, 4096),
            Some((0x20_0000, 0x1000))
        );
        assert_eq!(
            dmabuf_page_cover(0x20_0100, 0x80, 4096),
            None,
            "the fd starts inside the page: register exactly, uncached"
        );
    }
}
