//! Bounds-checked access to host memory the NIC writes behind the program's back (FIFOs and
//! landing buffers filled by the peer's RDMA writes), in the manner of a volatile slice: the
//! bytes are copied out with volatile loads and never seen through a Rust reference, so the
//! compiler neither caches nor elides a read of memory it cannot see change.

use crate::hostbuf::HostBuf;
use core::marker::PhantomData;
use core::ptr::NonNull;

/// A view of a [`HostBuf`] for byte access by offset. Every access is bounds-checked and
/// panics when it reaches outside the buffer (a caller's bug: offsets come from the protocol's
/// fixed layout).
#[derive(Debug, Clone, Copy)]
pub struct VolatileRegion<'a> {
    ptr: NonNull<u8>,
    len: usize,
    _buf: PhantomData<&'a HostBuf>,
}

impl HostBuf {
    /// The buffer's bytes, for bounds-checked volatile access.
    pub fn volatile(&self) -> VolatileRegion<'_> {
        VolatileRegion::over(self)
    }
}

/// [`VolatileRegion::at`]'s panic, out of line (the accesses it guards are on the data path).
#[cold]
#[inline(never)]
fn outside(off: usize, n: usize, len: usize) -> ! {
    panic!("{n} bytes at offset {off} are outside a region of {len} bytes")
}

impl<'a> VolatileRegion<'a> {
    /// The whole of `buf`.
    pub(crate) fn over(buf: &'a HostBuf) -> Self {
        VolatileRegion {
            // The buffer's pointer comes from a successful allocation.
            ptr: NonNull::new(buf.as_ptr()).unwrap_or(NonNull::dangling()),
            len: buf.len(),
            _buf: PhantomData,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The start of `n` bytes at `off`, after checking that they lie inside the region.
    #[inline]
    fn at(&self, off: usize, n: usize) -> *mut u8 {
        if off.checked_add(n).is_none_or(|end| end > self.len) {
            outside(off, n, self.len);
        }
        self.ptr.as_ptr().wrapping_add(off)
    }

    /// A volatile copy of the `N` bytes at `off`: 8-byte loads when `N` is a multiple of 8 and
    /// the address is 8-byte aligned (an entry the NIC wrote in one go is read in as few loads
    /// as possible), byte loads otherwise.
    pub fn read<const N: usize>(&self, off: usize) -> [u8; N] {
        let base = self.at(off, N);
        let mut out = [0u8; N];
        if N % 8 == 0 && (base as usize) % 8 == 0 {
            for (i, chunk) in out.chunks_exact_mut(8).enumerate() {
                // SAFETY: in bounds (checked by `at`) and 8-byte aligned (checked); the buffer
                // lives as long as 'a; volatile because the NIC may write it concurrently.
                let w = unsafe { base.cast::<u64>().add(i).read_volatile() };
                chunk.copy_from_slice(&w.to_ne_bytes());
            }
        } else {
            for (i, b) in out.iter_mut().enumerate() {
                // SAFETY: in bounds (checked by `at`); volatile as above.
                *b = unsafe { base.add(i).read_volatile() };
            }
        }
        out
    }

    /// The little-endian `u32` at `off`: one 4-byte volatile load when the address is 4-byte
    /// aligned (a word the NIC writes is then read whole), byte loads otherwise.
    #[inline]
    pub fn read_u32_le(&self, off: usize) -> u32 {
        let base = self.at(off, 4);
        if (base as usize) % 4 == 0 {
            // SAFETY: in bounds (checked by `at`) and 4-byte aligned (checked); the buffer lives
            // as long as 'a; volatile because the NIC may write it concurrently.
            u32::from_le(unsafe { base.cast::<u32>().read_volatile() })
        } else {
            u32::from_le_bytes(self.read::<4>(off))
        }
    }

    /// A volatile copy of the `N` little-endian `u64` words at `off`, as whole 8-byte loads when
    /// the address is 8-byte aligned (the bytes of [`VolatileRegion::read`] of `8 * N` bytes,
    /// taken as words, with no byte shuffling on the way). Always inlined: a call would hand the
    /// words back through memory (the sender reads a clear-to-send entry with it per message).
    #[inline(always)]
    pub fn read_words<const N: usize>(&self, off: usize) -> [u64; N] {
        let base = self.at(off, 8 * N);
        let mut out = [0u64; N];
        if (base as usize) % 8 == 0 {
            for (i, w) in out.iter_mut().enumerate() {
                // SAFETY: in bounds (checked by `at`) and 8-byte aligned (checked); the buffer
                // lives as long as 'a; volatile because the NIC may write it concurrently.
                *w = u64::from_le(unsafe { base.cast::<u64>().add(i).read_volatile() });
            }
        } else {
            for (i, w) in out.iter_mut().enumerate() {
                let mut b = [0u8; 8];
                for (j, x) in b.iter_mut().enumerate() {
                    // SAFETY: in bounds (checked by `at`); volatile as above.
                    *x = unsafe { base.add(8 * i + j).read_volatile() };
                }
                *w = u64::from_le_bytes(b);
            }
        }
        out
    }

    /// Copies `bytes` to `off`. A plain copy: these are bytes the NIC reads only after a later
    /// post (an opaque call the copy cannot be moved past), never bytes it is writing.
    pub fn write(&self, off: usize, bytes: &[u8]) {
        let dst = self.at(off, bytes.len());
        // SAFETY: in bounds (checked by `at`); `bytes` is a Rust slice, which cannot overlap
        // memory that is never referenced; the buffer lives as long as 'a.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len()) };
    }

    /// Stores the `N` words at `off`, little-endian: whole 8-byte stores when the address is
    /// 8-byte aligned, else the words' bytes. Plain stores, as [`VolatileRegion::write`].
    #[inline(always)]
    pub fn write_words<const N: usize>(&self, off: usize, words: &[u64; N]) {
        let base = self.at(off, 8 * N);
        if (base as usize) % 8 == 0 {
            for (i, w) in words.iter().enumerate() {
                // SAFETY: in bounds (checked by `at`) and 8-byte aligned (checked); the buffer
                // lives as long as 'a and is never referenced.
                unsafe { base.cast::<u64>().add(i).write(w.to_le()) };
            }
        } else {
            for (i, w) in words.iter().enumerate() {
                self.write(off + 8 * i, &w.to_le_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf() -> HostBuf {
        HostBuf::new(64).expect("a page of host memory")
    }

    #[test]
    fn aligned_reads_of_whole_words_return_the_bytes_written() {
        let b = buf();
        let r = b.volatile();
        let bytes: [u8; 16] = core::array::from_fn(|i| i as u8 + 1);
        r.write(8, &bytes);
        assert_eq!(r.read::<16>(8), bytes);
        assert_eq!(r.read::<8>(16), bytes[8..]);
    }

    #[test]
    fn unaligned_and_odd_sized_reads_take_the_byte_path_and_agree() {
        let b = buf();
        let r = b.volatile();
        let bytes: [u8; 32] = core::array::from_fn(|i| 0xa0 + i as u8);
        r.write(0, &bytes);
        assert_eq!(r.read::<16>(3), bytes[3..19]);
        assert_eq!(r.read::<5>(8), bytes[8..13]);
        assert_eq!(r.read::<1>(31), [bytes[31]]);
    }

    #[test]
    fn words_written_read_back_whole_or_as_bytes_aligned_or_not() {
        let b = buf();
        let r = b.volatile();
        let w = [0x0102_0304_0506_0708u64, u64::MAX, 0];
        r.write_words(8, &w);
        assert_eq!(r.read_words::<3>(8), w);
        assert_eq!(r.read::<8>(8), w[0].to_le_bytes());
        r.write_words(33, &[w[0], w[1]]);
        assert_eq!(r.read_words::<2>(33), [w[0], w[1]]);
    }

    #[test]
    fn a_u32_is_read_little_endian() {
        let b = buf();
        let r = b.volatile();
        r.write(4, &[1, 2, 3, 4]);
        assert_eq!(r.read_u32_le(4), 0x0403_0201);
        assert_eq!(r.read_u32_le(0), 0, "host buffers start zeroed");
    }

    #[test]
    fn words_read_aligned_or_not_are_the_little_endian_bytes() {
        let b = buf();
        let r = b.volatile();
        let bytes: [u8; 40] = core::array::from_fn(|i| 0x10 + i as u8);
        r.write(0, &bytes);
        let want = |at: usize| -> [u64; 4] {
            core::array::from_fn(|i| {
                u64::from_le_bytes(bytes[at + 8 * i..at + 8 * i + 8].try_into().unwrap())
            })
        };
        assert_eq!(r.read_words::<4>(8), want(8));
        assert_eq!(r.read_words::<4>(3), want(3));
        assert_eq!(r.read_u32_le(5), 0x1817_1615, "unaligned");
        assert_eq!(r.read_u32_le(8), 0x1b1a_1918, "aligned");
    }

    #[test]
    fn the_last_bytes_of_the_region_are_reachable() {
        let b = buf();
        let r = b.volatile();
        assert_eq!(r.len(), b.len());
        r.write(r.len() - 8, &[9; 8]);
        assert_eq!(r.read::<8>(r.len() - 8), [9; 8]);
        r.write(r.len(), &[]);
    }

    #[test]
    #[should_panic(expected = "outside a region")]
    fn a_read_past_the_end_panics() {
        let b = buf();
        let r = b.volatile();
        let _ = r.read::<8>(r.len() - 7);
    }

    #[test]
    #[should_panic(expected = "outside a region")]
    fn a_write_past_the_end_panics() {
        let b = buf();
        let r = b.volatile();
        r.write(r.len() - 1, &[0, 0]);
    }

    #[test]
    #[should_panic(expected = "outside a region")]
    fn an_offset_that_overflows_panics() {
        let _ = buf().volatile().read_u32_le(usize::MAX - 1);
    }
}
