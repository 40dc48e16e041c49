//! `fork()` after registration, through the exported table on soft-RoCE (guest only): a child
//! that writes its copies of the registered pages does not disturb the parent's transfers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use core::ffi::c_void;

mod common;
use common::*;

// fork() after registration

/// In a forked child: writes every page of `[p, p + len)` that the child has mapped. With
/// `ibv_fork_init` the registered pages are not inherited at all (they are marked
/// MADV_DONTFORK); on kernels with copy-on-fork for pinned pages the child has private copies.
/// Only async-signal-safe calls.
///
/// # Safety
/// Only in a child process between `fork` and `_exit`.
unsafe fn scribble_on_mapped_pages(p: *mut u8, len: usize) {
    let page = 4096usize;
    let start = (p as usize) & !(page - 1);
    let end = (p as usize + len).next_multiple_of(page);
    let mut vec = 0u8;
    for at in (start..end).step_by(page) {
        // SAFETY: mincore only reports whether the page is mapped; then the child writes its
        // own copy of a mapped page.
        unsafe {
            if libc::mincore(at as *mut c_void, page, &mut vec) == 0 {
                core::ptr::write_bytes(at as *mut u8, 0xee, page);
            }
        }
    }
}

#[test]
fn a_child_forked_after_registration_does_not_disturb_the_parents_transfers() {
    in_guest();
    let p = pair(test_dev());
    let len = 1 << 20;
    let mut sbuf = pattern(11, len);
    let mut rbuf = vec![0u8; len];
    let smh = reg_buf(p.send, &mut sbuf);
    let rmh = reg_buf(p.recv, &mut rbuf);
    let (sp, rp) = (sbuf.as_mut_ptr(), rbuf.as_mut_ptr());
    // SAFETY: the child only scribbles on what it has of the two buffers, sleeps and exits,
    // all async-signal-safe; the parent waits for it below.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: in the child, between fork and _exit.
        unsafe {
            scribble_on_mapped_pages(sp, len);
            scribble_on_mapped_pages(rp, len);
            libc::usleep(300_000);
            libc::_exit(0);
        }
    }
    // While the child lives, the parent writes its registered pages (without fork protection
    // this gives the parent new copies while the NIC keeps the old pages) and transfers.
    for round in 0..4u32 {
        let want = pattern(20 + round, len);
        sbuf.copy_from_slice(&want);
        rbuf.fill(0);
        transfer(
            &p,
            (sbuf.as_mut_ptr(), smh, len),
            (rbuf.as_mut_ptr(), rmh, len),
            5,
        );
        assert!(rbuf == want, "round {round}: the received data differs");
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert_eq!(status, 0, "the child exited cleanly");
    release(&p, smh, rmh);
}
