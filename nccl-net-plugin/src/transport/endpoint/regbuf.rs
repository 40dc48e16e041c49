//! The small registered host buffers the protocol keeps (FIFOs, sizes, flush landing), each
//! registered on every member device, and the only access to their bytes.

use crate::error::Result;
use ferro_proto::Keys;
use ferro_verbs::{HostBuf, Mr, Pd, Sge};
use std::sync::Arc;

/// A host buffer with its registration on each member device (the MRs are declared first, so
/// they are dropped first). The NIC may write it at any time: its bytes are accessed only through
/// the buffer's bounds-checked volatile view ([`HostBuf::volatile`]), never referenced, and the
/// NIC reaches it only through scatter entries built from its registrations ([`RegBuf::sge`]).
#[derive(Debug)]
pub(in crate::transport) struct RegBuf {
    mrs: Vec<Mr>,
    buf: HostBuf,
}

impl RegBuf {
    /// `len` bytes registered under each of `pds` (one per member device, in member order).
    pub(in crate::transport) fn new(pds: &[Arc<Pd>], len: usize, access: u32) -> Result<RegBuf> {
        let buf = HostBuf::new(len)?;
        let mrs = pds
            .iter()
            .map(|pd| {
                // SAFETY: buf is owned by the RegBuf and outlives the MRs (field order drops
                // the MRs first).
                unsafe { Mr::reg(pd, buf.as_ptr().cast(), buf.len(), access) }
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(RegBuf { mrs, buf })
    }

    /// The local key on member `m`.
    pub(in crate::transport) fn lkey(&self, m: usize) -> u32 {
        self.mrs.get(m).map_or(0, Mr::lkey)
    }

    /// The remote key on member `m`.
    pub(in crate::transport) fn rkey(&self, m: usize) -> u32 {
        self.mrs.get(m).map_or(0, Mr::rkey)
    }

    /// The local keys by member.
    pub(in crate::transport) fn lkeys(&self) -> Keys {
        core::array::from_fn(|m| self.lkey(m))
    }

    pub(in crate::transport) fn addr(&self, off: usize) -> u64 {
        self.buf.as_ptr() as u64 + off as u64
    }

    /// A scatter entry of `len` bytes at `off` under member `m`'s registration.
    ///
    /// # Panics
    /// When there is no member `m` or the range is not inside the buffer (offsets and lengths
    /// come from the protocol's fixed layout).
    pub(in crate::transport) fn sge(&self, m: usize, off: usize, len: u32) -> Sge {
        let Some(sge) = self.mrs.get(m).and_then(|mr| mr.sge(off, len)) else {
            panic!(
                "{len} bytes at offset {off} on member {m} are outside a buffer of {} bytes registered on {} members",
                self.buf.len(),
                self.mrs.len()
            );
        };
        sge
    }

    /// The `N` little-endian `u64` words at `off` (memory the NIC writes: volatile loads).
    #[inline]
    pub(in crate::transport) fn read_words<const N: usize>(&self, off: usize) -> [u64; N] {
        self.buf.volatile().read_words::<N>(off)
    }

    /// The little-endian `u32` at `off` (volatile, as [`RegBuf::read_words`]).
    #[inline(always)]
    pub(in crate::transport) fn read_u32_le(&self, off: usize) -> u32 {
        self.buf.volatile().read_u32_le(off)
    }

    /// Copies `bytes` to `off` (staging the NIC reads after a later post).
    pub(in crate::transport) fn write(&self, off: usize, bytes: &[u8]) {
        self.buf.volatile().write(off, bytes);
    }

    /// Stores `N` `u64` words at `off`, little-endian ([`ferro_verbs::VolatileRegion::write_words`]).
    #[inline(always)]
    pub(in crate::transport) fn write_words<const N: usize>(&self, off: usize, words: &[u64; N]) {
        self.buf.volatile().write_words(off, words);
    }
}
