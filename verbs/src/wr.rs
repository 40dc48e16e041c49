//! Work requests, typed: the only place raw `ibv_send_wr` / `ibv_recv_wr` / `ibv_sge` values
//! are built.
//!
//! A [`SendChain`] owns its requests and their scatter entries (one entry at most per request)
//! and is filled with typed pushes ([`SendChain::rdma_write`], [`SendChain::rdma_read`]). It holds
//! no live pointer between posts: the `next` and `sg_list` links are written by [`Qp::post`]
//! just before the call, from wherever the chain is at that moment, so a chain can be moved,
//! kept in a `Vec` or sent to another thread freely. Storage is either a `Vec` that keeps its
//! capacity across [`SendChain::clear`] (no allocation once warm) or a fixed array on the stack
//! ([`Fixed`], for chains of one or two requests).
//!
//! What makes posting safe is where a local scatter entry ([`Sge`]) comes from: a live
//! [`Mr`](crate::Mr), bounds-checked ([`Mr::sge`](crate::Mr::sge)), or one `unsafe` constructor
//! ([`Sge::from_raw`]) for keys the caller got elsewhere and vouches for. Remote addresses are
//! plain values: a remote access reaches only what the peer registered under that key.
//!
//! [`Qp::post`]: crate::Qp::post

use crate::sys::*;

/// A local scatter entry: `len` bytes at `addr`, registered under the local key `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    addr: u64,
    len: u32,
    lkey: u32,
}

impl Sge {
    /// An entry from raw parts, such as a registration cache's `(address, key)` pair.
    ///
    /// # Safety
    /// `addr..addr + len` must lie in memory registered under `lkey` in the protection domain
    /// of the QP the entry is posted on, and the caller keeps that memory registered (and
    /// mapped) until the work request completes or the QP is destroyed. For an RDMA read the NIC
    /// writes the range: no Rust reference to it may exist meanwhile.
    pub const unsafe fn from_raw(addr: u64, len: u32, lkey: u32) -> Sge {
        Sge { addr, len, lkey }
    }

    /// `len` bytes at offset `off` of a region of `region_len` bytes at `base` under `lkey`;
    /// `None` when the range does not lie inside the region.
    pub(crate) fn within(
        base: u64,
        region_len: usize,
        lkey: u32,
        off: usize,
        len: u32,
    ) -> Option<Sge> {
        let end = off.checked_add(usize::try_from(len).ok()?)?;
        if end > region_len {
            return None;
        }
        let addr = base.checked_add(u64::try_from(off).ok()?)?;
        Some(Sge { addr, len, lkey })
    }

    pub fn addr(&self) -> u64 {
        self.addr
    }

    pub fn len(&self) -> u32 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn lkey(&self) -> u32 {
        self.lkey
    }
}

/// Where a remote access goes: an address in the peer's registered memory and its remote key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteAddr {
    pub addr: u64,
    pub rkey: u32,
}

/// How a write is sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendFlags {
    /// Ask for a completion (`IBV_SEND_SIGNALED`).
    pub signaled: bool,
    /// Copy the payload into the request at post time (`IBV_SEND_INLINE`). Honoured only for a
    /// non-empty payload that fits the inline room the QP was created with; otherwise the
    /// request goes as a plain one.
    pub inline: bool,
}

/// One request of a chain, with its scatter entry. Opaque: only the pushes of [`SendChain`]
/// fill it.
#[derive(Debug, Clone, Copy)]
pub struct WrSlot {
    wr: ibv_send_wr,
    sge: ibv_sge,
    /// Inline asked for (the flag itself is decided when the chain is linked).
    inline: bool,
}

// SAFETY: the only pointers in a slot are the request's `next` and `sg_list`. They are null or
// point into the chain that holds the slot, are rewritten by `SendChain::link` right before
// every post, and are read only by the provider during that post; Rust never dereferences them,
// so a slot carries nothing tied to the thread that filled it.
unsafe impl Send for WrSlot {}

impl WrSlot {
    /// A request with `local` as its scatter entry (none for an empty or missing one).
    #[inline]
    fn new(
        wr_id: u64,
        opcode: u32,
        local: Option<Sge>,
        remote: RemoteAddr,
        imm: Option<u32>,
        flags: SendFlags,
    ) -> WrSlot {
        let (sge, num_sge) = match local {
            Some(s) if s.len > 0 => (
                ibv_sge {
                    addr: s.addr,
                    length: s.len,
                    lkey: s.lkey,
                },
                1,
            ),
            _ => (ibv_sge::default(), 0),
        };
        let mut wr = ibv_send_wr {
            wr_id,
            num_sge,
            opcode,
            send_flags: if flags.signaled { IBV_SEND_SIGNALED } else { 0 },
            imm_data: imm.unwrap_or(0).to_be(),
            ..Default::default()
        };
        wr.wr.rdma = ibv_rdma_info {
            remote_addr: remote.addr,
            rkey: remote.rkey,
        };
        WrSlot {
            wr,
            sge,
            inline: flags.inline && num_sge == 1,
        }
    }

    /// Links this request where it lies now, before `next`: its `sg_list` to its own entry (null
    /// without one) and `IBV_SEND_INLINE` when asked for and the payload fits `inline_room`.
    /// Returns the request, valid until the slot is next moved or changed.
    #[inline]
    fn link(&mut self, next: *mut ibv_send_wr, inline_room: u32) -> *mut ibv_send_wr {
        self.wr.next = next;
        self.wr.sg_list = if self.wr.num_sge > 0 {
            &mut self.sge
        } else {
            core::ptr::null_mut()
        };
        if self.inline && self.sge.length <= inline_room {
            self.wr.send_flags |= IBV_SEND_INLINE;
        } else {
            self.wr.send_flags &= !IBV_SEND_INLINE;
        }
        &mut self.wr
    }

    /// An RDMA write of `local` to `remote`, with immediate `imm` when given (the opcode
    /// follows from it).
    #[inline]
    fn rdma_write(
        wr_id: u64,
        local: Option<Sge>,
        remote: RemoteAddr,
        imm: Option<u32>,
        flags: SendFlags,
    ) -> WrSlot {
        let opcode = if imm.is_some() {
            IBV_WR_RDMA_WRITE_WITH_IMM
        } else {
            IBV_WR_RDMA_WRITE
        };
        WrSlot::new(wr_id, opcode, local, remote, imm, flags)
    }

    fn empty() -> WrSlot {
        WrSlot {
            wr: ibv_send_wr::default(),
            sge: ibv_sge::default(),
            inline: false,
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for Vec<super::WrSlot> {}
    impl<const N: usize> Sealed for super::Fixed<N> {}
}

/// Where a chain keeps its requests: a `Vec` (grows, keeps its capacity) or [`Fixed`]. Sealed:
/// these two are the only stores, and a slot can only be filled by the chain's typed pushes.
pub trait Store: sealed::Sealed {
    fn slots(&self) -> &[WrSlot];
    fn slots_mut(&mut self) -> &mut [WrSlot];
    /// Appends a request (a [`Fixed`] store panics when full).
    fn push(&mut self, slot: WrSlot);
    fn clear(&mut self);
}

impl Store for Vec<WrSlot> {
    fn slots(&self) -> &[WrSlot] {
        self
    }

    fn slots_mut(&mut self) -> &mut [WrSlot] {
        self
    }

    fn push(&mut self, slot: WrSlot) {
        Vec::push(self, slot);
    }

    fn clear(&mut self) {
        Vec::clear(self);
    }
}

/// Room for `N` requests inline in the chain (on the stack for a local chain).
#[derive(Debug, Clone, Copy)]
pub struct Fixed<const N: usize> {
    slots: [WrSlot; N],
    len: usize,
}

impl<const N: usize> Default for Fixed<N> {
    fn default() -> Self {
        Fixed {
            slots: [WrSlot::empty(); N],
            len: 0,
        }
    }
}

impl<const N: usize> Store for Fixed<N> {
    fn slots(&self) -> &[WrSlot] {
        &self.slots[..self.len]
    }

    fn slots_mut(&mut self) -> &mut [WrSlot] {
        &mut self.slots[..self.len]
    }

    fn push(&mut self, slot: WrSlot) {
        assert!(
            self.len < N,
            "a fixed chain holds at most {N} work requests"
        );
        self.slots[self.len] = slot;
        self.len += 1;
    }

    fn clear(&mut self) {
        self.len = 0;
    }
}

/// A chain of send work requests, posted in one `ibv_post_send` by [`Qp::post`](crate::Qp::post).
#[derive(Debug, Clone, Default)]
pub struct SendChain<S: Store = Vec<WrSlot>> {
    store: S,
}

impl SendChain {
    /// An empty chain whose storage grows as needed and is kept across [`SendChain::clear`].
    pub fn new() -> Self {
        SendChain { store: Vec::new() }
    }
}

impl<const N: usize> SendChain<Fixed<N>> {
    /// An empty chain of at most `N` requests, stored inline (no allocation).
    pub fn fixed() -> Self {
        SendChain {
            store: Fixed::default(),
        }
    }
}

impl<S: Store> SendChain<S> {
    /// Drops every request, keeping the storage.
    pub fn clear(&mut self) {
        self.store.clear();
    }

    pub fn len(&self) -> usize {
        self.store.slots().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends an RDMA write of `local` (none, or an empty entry: a write of no bytes, which
    /// carries no scatter entry) to `remote`, with an immediate (in host order; it is sent in
    /// network order) when `imm` is given.
    pub fn rdma_write(
        &mut self,
        wr_id: u64,
        local: Option<Sge>,
        remote: RemoteAddr,
        imm: Option<u32>,
        flags: SendFlags,
    ) {
        self.store
            .push(WrSlot::rdma_write(wr_id, local, remote, imm, flags));
    }

    /// Appends an RDMA read of `remote` into `local` (which the NIC writes).
    pub fn rdma_read(&mut self, wr_id: u64, local: Sge, remote: RemoteAddr, signaled: bool) {
        let flags = SendFlags {
            signaled,
            inline: false,
        };
        self.store.push(WrSlot::new(
            wr_id,
            IBV_WR_RDMA_READ,
            Some(local),
            remote,
            None,
            flags,
        ));
    }

    /// Links the chain where it lies now and returns its first request (null when empty):
    /// each `next` to the following request (the last one's null), each `sg_list` to the
    /// request's own entry (null without one), and `IBV_SEND_INLINE` on the requests that asked
    /// for it and whose payload fits `inline_room` bytes. The pointers are valid until the
    /// chain is next moved or changed.
    pub(crate) fn link(&mut self, inline_room: u32) -> *mut ibv_send_wr {
        let mut next: *mut ibv_send_wr = core::ptr::null_mut();
        for slot in self.store.slots_mut().iter_mut().rev() {
            next = slot.link(next, inline_room);
        }
        next
    }

    /// The chain's storage (for tests of the links).
    #[cfg(test)]
    fn slots(&self) -> &[WrSlot] {
        self.store.slots()
    }
}

/// One RDMA write alone, without a chain (the common post of a send path): the request and its
/// scatter entry built once, field by field, on this frame (no slot filled then moved and
/// linked), then handed to `post` (by [`Qp::post_write`](crate::Qp::post_write)). The same
/// request as [`SendChain::rdma_write`] into an empty chain linked with `inline_room`.
#[inline(always)]
pub(crate) fn with_lone_write<R>(
    wr_id: u64,
    local: Option<Sge>,
    remote: RemoteAddr,
    imm: Option<u32>,
    flags: SendFlags,
    inline_room: u32,
    post: impl FnOnce(*mut ibv_send_wr) -> R,
) -> R {
    let mut sge = match local {
        Some(s) if s.len > 0 => ibv_sge {
            addr: s.addr,
            length: s.len,
            lkey: s.lkey,
        },
        _ => ibv_sge::default(),
    };
    let has_sge = sge.length > 0;
    let inline = flags.inline && has_sge && sge.length <= inline_room;
    let mut wr = ibv_send_wr {
        wr_id,
        next: core::ptr::null_mut(),
        sg_list: if has_sge {
            &mut sge
        } else {
            core::ptr::null_mut()
        },
        num_sge: core::ffi::c_int::from(has_sge),
        opcode: if imm.is_some() {
            IBV_WR_RDMA_WRITE_WITH_IMM
        } else {
            IBV_WR_RDMA_WRITE
        },
        send_flags: (if flags.signaled { IBV_SEND_SIGNALED } else { 0 })
            | (if inline { IBV_SEND_INLINE } else { 0 }),
        imm_data: imm.unwrap_or(0).to_be(),
        wr: ibv_send_wr_wr {
            rdma: ibv_rdma_info {
                remote_addr: remote.addr,
                rkey: remote.rkey,
            },
        },
        qp_type_xrc_remote_srqn: 0,
        _tail: [0; 6],
    };
    post(&mut wr)
}

/// A receive with no scatter entry, alone in its chain: it only consumes an immediate.
pub(crate) fn empty_recv(wr_id: u64) -> ibv_recv_wr {
    ibv_recv_wr {
        wr_id,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
