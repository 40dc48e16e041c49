//! Page-aligned memory for registrations, with deterministic patterns to fill and verify.
//!
//! A [`Buffer`] is an anonymous mapping that is **never unmapped**: the plugin (and the NIC) may
//! keep using an address after the harness is done with it (a request abandoned by a close, a
//! registration never released after a failure), and memory that stays mapped for the life of the
//! process makes that harmless. Test processes are short-lived; allocate buffers once per scenario
//! step, not per message.
//!
//! Contents are only accessed through raw pointers (never through Rust references), because the
//! NIC writes into receive buffers behind the compiler's back.

use core::ffi::c_void;
use std::ptr::NonNull;

/// Page size assumed for alignment and rounding.
pub const PAGE: usize = 4096;

/// Rounds `n` up to a multiple of `to` (a power of two).
pub fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// Page-aligned, zero-initialised memory that lives until the process exits.
#[derive(Debug, Clone, Copy)]
pub struct Buffer {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Buffer is an address range that stays mapped for the life of the process; it has no
// thread affinity. All accesses are raw-pointer reads/writes whose synchronisation is the
// caller's business (the harness uses each buffer from one thread).
unsafe impl Send for Buffer {}

impl Buffer {
    /// Maps at least `len` bytes (rounded up to whole pages, at least one page).
    pub fn new(len: usize) -> Result<Buffer, String> {
        let len = round_up(len.max(1), PAGE);
        let ptr = crate::mapped::map_anonymous(len, false)?;
        Ok(Buffer { ptr, len })
    }

    /// Length in bytes (a multiple of [`PAGE`]).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (a buffer has at least one page); for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The start address.
    pub fn base(&self) -> *mut c_void {
        self.ptr.as_ptr().cast()
    }

    fn check(&self, offset: usize, len: usize) {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len),
            "range {offset}+{len} outside a buffer of {} bytes",
            self.len
        );
    }

    /// The address of `offset`, after checking that `offset..offset+len` lies inside the buffer.
    pub fn ptr_at(&self, offset: usize, len: usize) -> *mut c_void {
        self.check(offset, len);
        // SAFETY: offset <= self.len (checked), so the result is inside or one past the mapping.
        unsafe { self.ptr.as_ptr().add(offset) }.cast()
    }

    /// Sets `offset..offset+len` to `byte`.
    pub fn fill_byte(&self, offset: usize, len: usize, byte: u8) {
        let p = self.ptr_at(offset, len).cast::<u8>();
        // SAFETY: the range is inside the mapping (ptr_at checked it); raw write, no references.
        unsafe { std::ptr::write_bytes(p, byte, len) };
    }

    fn read_u8(&self, at: usize) -> u8 {
        let p = self.ptr_at(at, 1).cast::<u8>();
        // SAFETY: inside the mapping (checked); a plain read of initialised (zeroed or written) memory.
        unsafe { p.read() }
    }

    /// Checks that `offset..offset+len` is all `byte`; on failure, names the first differing byte.
    pub fn check_byte(&self, offset: usize, len: usize, byte: u8) -> Result<(), String> {
        self.check(offset, len);
        for i in offset..offset + len {
            let got = self.read_u8(i);
            if got != byte {
                return Err(format!(
                    "byte {i} is {got:#04x}, expected the untouched fill {byte:#04x}"
                ));
            }
        }
        Ok(())
    }

    /// Fills `offset..offset+len` with the pattern of `seed` (byte `j` of the range is
    /// [`pattern_byte`]`(seed, j)`).
    pub fn fill_pattern(&self, offset: usize, len: usize, seed: u64) {
        let base = self.ptr_at(offset, len).cast::<u8>();
        let words = len / 8;
        for k in 0..words {
            // SAFETY: 8*k+8 <= len, inside the checked range; unaligned write of a u64.
            unsafe {
                base.add(8 * k)
                    .cast::<u64>()
                    .write_unaligned(pattern_word(seed, k as u64).to_le())
            };
        }
        for j in 8 * words..len {
            // SAFETY: j < len, inside the checked range.
            unsafe { base.add(j).write(pattern_byte(seed, j as u64)) };
        }
    }

    /// Checks `offset..offset+len` against the pattern of `seed`.
    pub fn verify_pattern(&self, offset: usize, len: usize, seed: u64) -> Result<(), String> {
        let base = self.ptr_at(offset, len).cast::<u8>();
        let words = len / 8;
        for k in 0..words {
            // SAFETY: 8*k+8 <= len, inside the checked range; unaligned read of a u64.
            let got = u64::from_le(unsafe { base.add(8 * k).cast::<u64>().read_unaligned() });
            if got != pattern_word(seed, k as u64) {
                for j in 8 * k..8 * k + 8 {
                    let g = self.read_u8(offset + j);
                    let want = pattern_byte(seed, j as u64);
                    if g != want {
                        return Err(format!(
                            "byte {j} of {len} is {g:#04x}, expected {want:#04x}"
                        ));
                    }
                }
            }
        }
        for j in 8 * words..len {
            let g = self.read_u8(offset + j);
            let want = pattern_byte(seed, j as u64);
            if g != want {
                return Err(format!(
                    "byte {j} of {len} is {g:#04x}, expected {want:#04x}"
                ));
            }
        }
        Ok(())
    }

    /// Reads the f32 at element index `i` (the buffer seen as an f32 array).
    pub fn f32_at(&self, i: usize) -> f32 {
        let p = self.ptr_at(i * 4, 4).cast::<f32>();
        // SAFETY: inside the mapping (checked) and 4-byte aligned (page-aligned base, offset 4*i).
        unsafe { p.read() }
    }

    /// Writes the f32 at element index `i`.
    pub fn set_f32(&self, i: usize, v: f32) {
        let p = self.ptr_at(i * 4, 4).cast::<f32>();
        // SAFETY: as in f32_at.
        unsafe { p.write(v) };
    }

    /// Sets f32 elements `first..first+n` to `f(index)` (one bounds check for the whole range).
    pub fn fill_f32(&self, first: usize, n: usize, f: impl Fn(usize) -> f32) {
        let p = self.ptr_at(first * 4, n * 4).cast::<f32>();
        for j in 0..n {
            // SAFETY: j < n and the range first..first+n was checked; 4-byte aligned.
            unsafe { p.add(j).write(f(first + j)) };
        }
    }

    /// Adds f32 elements `src_first..src_first+n` of `src` to elements `first..first+n` of this
    /// buffer (the ranges must not overlap).
    pub fn add_f32_from(&self, first: usize, src: &Buffer, src_first: usize, n: usize) {
        let d = self.ptr_at(first * 4, n * 4).cast::<f32>();
        let s = src.ptr_at(src_first * 4, n * 4).cast::<f32>();
        for j in 0..n {
            // SAFETY: j < n, both ranges checked and 4-byte aligned; callers pass disjoint ranges.
            unsafe { d.add(j).write(d.add(j).read() + s.add(j).read()) };
        }
    }

    /// The first f32 element in `first..first+n` that differs from `f(index)`, as
    /// (index, found, expected).
    pub fn find_f32_mismatch(
        &self,
        first: usize,
        n: usize,
        f: impl Fn(usize) -> f32,
    ) -> Option<(usize, f32, f32)> {
        let p = self.ptr_at(first * 4, n * 4).cast::<f32>();
        for j in 0..n {
            // SAFETY: j < n and the range was checked; 4-byte aligned.
            let got = unsafe { p.add(j).read() };
            let want = f(first + j);
            if got != want {
                return Some((first + j, got, want));
            }
        }
        None
    }

    /// Copies `len` bytes from `from` (of `src`) to `to` (of this buffer); ranges must not overlap.
    pub fn copy_from(&self, to: usize, src: &Buffer, from: usize, len: usize) {
        let d = self.ptr_at(to, len).cast::<u8>();
        let s = src.ptr_at(from, len).cast::<u8>();
        // SAFETY: both ranges are inside their mappings (checked); callers pass disjoint ranges.
        unsafe { std::ptr::copy_nonoverlapping(s, d, len) };
    }
}

/// splitmix64: a fast, well-mixed 64-bit function.
pub fn mix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The seed of a message's pattern, from its identifying numbers (e.g. size, iteration, index).
pub fn seed(parts: &[u64]) -> u64 {
    parts
        .iter()
        .fold(0x5eed_f0e7_7e57_0001, |acc, p| mix64(acc ^ p))
}

/// Word `k` (bytes 8k..8k+8, little-endian) of the pattern of `seed`.
pub fn pattern_word(seed: u64, k: u64) -> u64 {
    mix64(seed ^ k.wrapping_mul(0xd6e8_feb8_6659_fd93))
}

/// Byte `j` of the pattern of `seed`.
pub fn pattern_byte(seed: u64, j: u64) -> u8 {
    pattern_word(seed, j / 8).to_le_bytes()[(j % 8) as usize]
}

/// A small deterministic generator (xorshift over splitmix seeding) for shuffles and noise.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(mix64(seed) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        mix64(x)
    }

    /// Uniform-ish in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Fisher-Yates shuffle.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }

    /// `n` pseudo-random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_page_aligned_and_zeroed() {
        let b = Buffer::new(10).expect("map");
        assert_eq!(b.len(), PAGE);
        assert_eq!(b.base() as usize % PAGE, 0);
        b.check_byte(0, PAGE, 0).expect("zeroed");
    }

    #[test]
    fn pattern_round_trips_at_any_offset_and_catches_a_flip() {
        let b = Buffer::new(3 * PAGE).expect("map");
        for (off, len) in [
            (0usize, 0usize),
            (0, 1),
            (3, 4095),
            (5, 8193),
            (PAGE, 2 * PAGE),
        ] {
            let s = seed(&[len as u64, 1, 2]);
            b.fill_pattern(off, len, s);
            b.verify_pattern(off, len, s).expect("same pattern");
        }
        let s = seed(&[100]);
        b.fill_pattern(1, 100, s);
        assert!(b.verify_pattern(1, 100, seed(&[101])).is_err());
        b.fill_byte(1 + 57, 1, !pattern_byte(s, 57));
        let e = b.verify_pattern(1, 100, s).expect_err("flipped");
        assert!(e.starts_with("byte 57 of 100"), "{e}");
    }

    #[test]
    fn f32_bulk_operations() {
        let a = Buffer::new(4 * 100).expect("map");
        let b = Buffer::new(4 * 100).expect("map");
        a.fill_f32(0, 100, |i| i as f32);
        b.fill_f32(10, 20, |i| 2.0 * i as f32);
        a.add_f32_from(50, &b, 10, 20);
        assert_eq!(a.f32_at(50), 50.0 + 20.0);
        assert_eq!(a.f32_at(69), 69.0 + 58.0);
        assert_eq!(a.find_f32_mismatch(0, 50, |i| i as f32), None);
        assert_eq!(
            a.find_f32_mismatch(40, 60, |i| i as f32),
            Some((50, 70.0, 50.0))
        );
    }

    #[test]
    fn shuffle_is_a_permutation() {
        let mut v: Vec<u32> = (0..50).collect();
        Rng::new(7).shuffle(&mut v);
        let mut sorted = v.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
        assert_ne!(v, sorted);
    }

    #[test]
    #[should_panic(expected = "outside a buffer")]
    fn out_of_range_is_refused() {
        let b = Buffer::new(PAGE).expect("map");
        let _ = b.ptr_at(PAGE - 1, 2);
    }
}
