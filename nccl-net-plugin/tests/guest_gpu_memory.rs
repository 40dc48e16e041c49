//! GPU memory paths and the registration cache, in the soft-RoCE guest (rxe cannot register GPU
//! memory, so every device must advertise host memory only and refuse GPU registrations with a
//! clear error), plus the regIsGlobal cache on host memory with data checked byte for byte.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use core::ffi::{c_int, c_void};
use ferro_ffi::{NCCL_PTR_HOST, ncclNetProperties_v8_t, ncclResult_t};
use nccl_net_ferro::ncclNetPlugin_v8 as NET;
use std::ptr::null_mut;

mod common;
use common::*;

/// Sends `data` from `src` (registered with `smr`) into `dst` (registered with `rmr`), checks it.
fn send_and_check(
    p: &Pair,
    src: *mut u8,
    smr: *mut c_void,
    dst: *mut u8,
    rmr: *mut c_void,
    data: &[u8],
) {
    // SAFETY: src has room for data (caller's buffers).
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), src, data.len()) };
    let sizes = transfer(p, (src, smr, data.len()), (dst, rmr, data.len()), 1);
    assert_eq!(sizes.1 as usize, data.len());
    // SAFETY: dst holds data.len() bytes the receive just completed into.
    let landed = unsafe { std::slice::from_raw_parts(dst, data.len()) };
    assert!(landed == data, "data mismatch");
}

#[test]
fn devices_advertise_host_memory_only_and_refuse_gpu_registrations() {
    let dev = test_dev();
    // SAFETY: table calls with valid pointers.
    unsafe {
        let mut n = 0;
        ok(NET.devices.unwrap()(&mut n), "devices");
        for d in 0..n {
            let mut props: ncclNetProperties_v8_t = std::mem::zeroed();
            ok(NET.getProperties.unwrap()(d, &mut props), "props");
            assert_eq!(
                props.ptrSupport, NCCL_PTR_HOST,
                "rxe must advertise host memory only"
            );
            assert_eq!(props.regIsGlobal, 1);
        }
    }
    let p = pair(dev);
    let buf = vec![0u8; 1 << 16];
    let mut m = null_mut();
    // SAFETY: table calls; the buffer is host memory pretending to be CUDA, which must be refused
    // before any registration happens.
    unsafe {
        let r = NET.regMr.unwrap()(
            p.recv,
            buf.as_ptr() as *mut c_void,
            buf.len(),
            ferro_ffi::NCCL_PTR_CUDA,
            &mut m,
        );
        assert_eq!(r, ncclResult_t::InvalidUsage, "regMr(CUDA) must be refused");
        assert!(m.is_null());
        let fd = libc::memfd_create(c"not-a-dmabuf".as_ptr(), 0);
        assert!(fd >= 0);
        let r = NET.regMrDmaBuf.unwrap()(
            p.recv,
            buf.as_ptr() as *mut c_void,
            buf.len(),
            ferro_ffi::NCCL_PTR_CUDA,
            0,
            fd,
            &mut m,
        );
        assert_eq!(r, ncclResult_t::InvalidUsage, "regMrDmaBuf must be refused");
        assert!(m.is_null());
        libc::close(fd);
        // Host buffers need no flush: iflush answers with a NULL request.
        let rm = reg(p.recv, buf.as_ptr(), buf.len());
        let mut data = [buf.as_ptr() as *mut c_void];
        let mut sizes = [100 as c_int];
        let mut mh = [rm];
        let mut req: *mut c_void = std::ptr::dangling_mut();
        ok(
            NET.iflush.unwrap()(
                p.recv,
                1,
                data.as_mut_ptr(),
                sizes.as_mut_ptr(),
                mh.as_mut_ptr(),
                &mut req,
            ),
            "iflush",
        );
        assert!(req.is_null(), "host memory needs no flush");
        dereg(p.recv, rm);
        close(&p);
    }
}

#[test]
fn registration_cache_reuses_subranges_and_shared_pages_with_correct_data() {
    let dev = test_dev();
    let p = pair(dev);
    let mrs = || ferro_verbs::live_counts().mrs;
    // Page-aligned backing stores.
    let mut big = vec![0u8; (2 << 20) + 4096];
    let off = big.as_ptr().align_offset(4096);
    let big = &mut big[off..off + (2 << 20)];
    let mut small = vec![0u8; 3 * 4096];
    let soff = small.as_ptr().align_offset(4096);
    let page = &mut small[soff..soff + 4096];
    let mut src = vec![0u8; 1 << 20];

    let before = mrs();
    // The live registrations now, compared with what the step should leave.
    let live = |added: i64, why: &str| assert_eq!(mrs(), before + added, "{why}");
    let smr = reg(p.send, src.as_ptr(), src.len());
    let big_mr = reg(p.recv, big.as_ptr(), big.len());
    live(2, "registrations after this step");
    // A sub-range of a registered range costs no registration ...
    let sub = big[8192..].as_mut_ptr();
    let sub_mr = reg(p.recv, sub, 65536);
    live(2, "sub-range must reuse the cached registration");
    // ... and data lands correctly through it.
    send_and_check(&p, src.as_mut_ptr(), smr, sub, sub_mr, &pattern(1, 65536));
    // Two small buffers in one page: one registration, both usable.
    let x = page.as_mut_ptr();
    // SAFETY: 2000 < 4096, inside the page.
    let y = unsafe { page.as_mut_ptr().add(2000) };
    let x_mr = reg(p.recv, x, 100);
    let y_mr = reg(p.recv, y, 100);
    live(3, "two buffers in one page share a registration");
    send_and_check(&p, src.as_mut_ptr(), smr, y, y_mr, &pattern(2, 100));
    send_and_check(&p, src.as_mut_ptr(), smr, x, x_mr, &pattern(3, 100));
    // SAFETY: y points at 100 bytes inside the page.
    let y_now = unsafe { std::slice::from_raw_parts(y, 100) };
    assert!(
        y_now == &pattern(2, 100)[..],
        "x's transfer must not touch y"
    );
    // Deregistration happens when the last reference goes.
    dereg(p.recv, x_mr);
    live(3, "registrations after this step");
    send_and_check(&p, src.as_mut_ptr(), smr, y, y_mr, &pattern(4, 100));
    dereg(p.recv, y_mr);
    live(2, "registrations after this step");
    dereg(p.recv, sub_mr);
    live(2, "the big range is still referenced");
    send_and_check(
        &p,
        src.as_mut_ptr(),
        smr,
        big.as_mut_ptr(),
        big_mr,
        &pattern(5, 1 << 20),
    );
    dereg(p.recv, big_mr);
    dereg(p.send, smr);
    live(0, "every registration released");
    close(&p);
}
