//! Page-aligned, pre-faulted host buffers (anonymous mmap), as a benchmark wants them: no page
//! faults during the timed part, alignment like NCCL's own host buffers, and unmapped when
//! dropped (the harness's [`crate::buffer::Buffer`] is never freed, for requests that may
//! outlive a scope; a benchmark maps and unmaps per run).

use core::ptr::NonNull;

type Result<T> = std::result::Result<T, String>;

/// An anonymous private read-write mapping of `len` bytes (a page multiple), pre-faulted when
/// `populate`: the memory behind both kinds of client buffer.
pub(crate) fn map_anonymous(len: usize, populate: bool) -> Result<NonNull<u8>> {
    let flags =
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | if populate { libc::MAP_POPULATE } else { 0 };
    // SAFETY: an anonymous private mapping at an address of the kernel's choosing; no existing
    // memory is affected. The result is checked against MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(format!(
            "mmap of {len} bytes failed: {}",
            std::io::Error::last_os_error()
        ));
    }
    NonNull::new(p.cast::<u8>()).ok_or_else(|| "mmap returned NULL".to_string())
}

/// An anonymous private mapping, unmapped on drop.
#[derive(Debug)]
pub struct HostBuf {
    ptr: NonNull<u8>,
    len: usize,
}

impl HostBuf {
    /// Maps `len` bytes (at least one page), touched and filled with `fill`.
    pub fn new(len: usize, fill: u8) -> Result<HostBuf> {
        let len = len.max(1).next_multiple_of(4096);
        let ptr = map_anonymous(len, true)?;
        // SAFETY: the mapping is len bytes, readable and writable, and owned by us.
        unsafe { core::ptr::write_bytes(ptr.as_ptr(), fill, len) };
        Ok(HostBuf { ptr, len })
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Pointer to byte `off` (checked against the length).
    pub fn at(&self, off: usize) -> Result<*mut u8> {
        if off > self.len {
            return Err(format!("offset {off} outside a {}-byte buffer", self.len));
        }
        // SAFETY: off <= len, so the result is inside the mapping or one past its end.
        Ok(unsafe { self.ptr.as_ptr().add(off) })
    }

    /// Copies `bytes` to offset 0.
    pub fn write_at0(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.len() > self.len {
            return Err("write past the end of a buffer".into());
        }
        // SAFETY: the destination has room (checked) and cannot overlap a borrowed slice.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.as_ptr(), bytes.len()) };
        Ok(())
    }

    /// A copy of the first `n` bytes.
    pub fn read_at0(&self, n: usize) -> Result<Vec<u8>> {
        if n > self.len {
            return Err("read past the end of a buffer".into());
        }
        // SAFETY: n bytes from the start of the mapping are readable (checked).
        Ok(unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), n) }.to_vec())
    }
}

impl Drop for HostBuf {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly the mapping created in new, unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_round_trip_and_bounds() {
        let mut b = HostBuf::new(10, 0xab).unwrap();
        assert_eq!(b.len(), 4096);
        assert_eq!(b.read_at0(3).unwrap(), vec![0xab; 3]);
        b.write_at0(&[1, 2, 3]).unwrap();
        assert_eq!(b.read_at0(4).unwrap(), vec![1, 2, 3, 0xab]);
        assert!(b.at(4096).is_ok());
        assert!(b.at(4097).is_err());
        assert!(b.read_at0(5000).is_err());
    }
}
