//! In-process loopback through the exported table on rxe0 (guest only): a sender and a receiver
//! comm in one process, a size sweep with byte-for-byte checks, grouped receives and zero-byte
//! messages. The cross-process NCCL-like suite lives in the `ferro-tests` package.

use core::ffi::{c_int, c_void};
use ferro_ffi::{ncclNetProperties_v8_t, ncclResult_t};
use nccl_net_ferro::ncclNetPlugin_v8 as NET;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

fn ok(r: ncclResult_t, what: &str) {
    assert_eq!(r, ncclResult_t::Success, "{what}");
}

fn rxe0() -> c_int {
    assert!(
        std::path::Path::new("/sys/class/infiniband/rxe0").exists(),
        "needs the soft-RoCE guest (run the README's test command)"
    );
    // SAFETY: calling the plugin's own table as NCCL would.
    unsafe {
        ok(NET.init.unwrap()(None), "init");
        let mut n = 0;
        ok(NET.devices.unwrap()(&mut n), "devices");
        for d in 0..n {
            let mut p: ncclNetProperties_v8_t = std::mem::zeroed();
            ok(NET.getProperties.unwrap()(d, &mut p), "props");
            if std::ffi::CStr::from_ptr(p.name).to_bytes() == b"rxe0" {
                return d;
            }
        }
    }
    panic!("rxe0 not among the plugin's devices");
}

struct Pair {
    send: *mut c_void,
    recv: *mut c_void,
    listen: *mut c_void,
}

fn pair(dev: c_int) -> Pair {
    let mut handle = [0u8; 128];
    let mut listen: *mut c_void = null_mut();
    let (mut s, mut r): (*mut c_void, *mut c_void) = (null_mut(), null_mut());
    let deadline = Instant::now() + Duration::from_secs(60);
    // SAFETY: table calls with valid out-pointers.
    unsafe {
        ok(
            NET.listen.unwrap()(dev, handle.as_mut_ptr().cast(), &mut listen),
            "listen",
        );
        while s.is_null() || r.is_null() {
            assert!(Instant::now() < deadline, "connect/accept did not finish");
            if s.is_null() {
                ok(
                    NET.connect.unwrap()(dev, handle.as_mut_ptr().cast(), &mut s, null_mut()),
                    "connect",
                );
            }
            if r.is_null() {
                ok(NET.accept.unwrap()(listen, &mut r, null_mut()), "accept");
            }
        }
    }
    Pair {
        send: s,
        recv: r,
        listen,
    }
}

fn wait(req: *mut c_void, sizes: &mut [c_int]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut done = 0;
    while done == 0 {
        assert!(Instant::now() < deadline, "request did not complete");
        // SAFETY: req came from isend/irecv.
        ok(
            unsafe { NET.test.unwrap()(req, &mut done, sizes.as_mut_ptr()) },
            "test",
        );
    }
}

fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(2654435761)
                .wrapping_add(seed)
                .to_le_bytes()[1]
        })
        .collect()
}

#[test]
fn loopback_sweep_groups_and_zero_bytes() {
    let dev = rxe0();
    let p = pair(dev);
    let cap = 16 << 20;
    let sbuf = vec![0u8; cap];
    let mut rbufs: Vec<Vec<u8>> = (0..8).map(|_| vec![0u8; cap + 4096]).collect();
    let (mut smr, mut rmrs): (*mut c_void, Vec<*mut c_void>) = (null_mut(), vec![null_mut(); 8]);
    // SAFETY: buffers outlive their registrations (deregistered below).
    unsafe {
        ok(
            NET.regMr.unwrap()(p.send, sbuf.as_ptr() as *mut c_void, cap, 1, &mut smr),
            "regMr send",
        );
        for (b, m) in rbufs.iter_mut().zip(rmrs.iter_mut()) {
            ok(
                NET.regMr.unwrap()(p.recv, b.as_mut_ptr().cast(), b.len(), 1, m),
                "regMr recv",
            );
        }
    }
    let mut sbuf = sbuf;
    for (k, &size) in [0usize, 1, 4095, 4096, 65537, 1 << 20, 16 << 20]
        .iter()
        .enumerate()
    {
        let data = pattern(k as u32, size);
        sbuf[..size].copy_from_slice(&data);
        let (mut rreq, mut sreq): (*mut c_void, *mut c_void) = (null_mut(), null_mut());
        let mut rdata = [rbufs[0].as_mut_ptr().cast::<c_void>()];
        let mut rsizes = [(cap + 4096) as c_int];
        let mut tags = [7];
        let mut rm = [rmrs[0]];
        // SAFETY: arrays of n=1; buffers registered.
        unsafe {
            while rreq.is_null() {
                ok(
                    NET.irecv.unwrap()(
                        p.recv,
                        1,
                        rdata.as_mut_ptr(),
                        rsizes.as_mut_ptr(),
                        tags.as_mut_ptr(),
                        rm.as_mut_ptr(),
                        &mut rreq,
                    ),
                    "irecv",
                );
            }
            while sreq.is_null() {
                ok(
                    NET.isend.unwrap()(
                        p.send,
                        sbuf.as_mut_ptr().cast(),
                        size as c_int,
                        7,
                        smr,
                        &mut sreq,
                    ),
                    "isend",
                );
            }
        }
        let mut ss = [-1];
        wait(sreq, &mut ss);
        let mut rs = [-1];
        wait(rreq, &mut rs);
        assert_eq!(ss[0] as usize, size, "sender size");
        assert_eq!(rs[0] as usize, size, "receiver size");
        assert!(rbufs[0][..size] == data[..], "data mismatch at size {size}");
    }
    // A grouped receive of 8 buffers, sends in reverse tag order, sizes differ (one empty).
    let n = 8;
    let mut rdata: Vec<*mut c_void> = rbufs.iter_mut().map(|b| b.as_mut_ptr().cast()).collect();
    let mut rsizes = vec![65536 as c_int; n];
    let mut tags: Vec<c_int> = (0..n as c_int).collect();
    let mut rreq: *mut c_void = null_mut();
    // SAFETY: arrays of n entries.
    unsafe {
        while rreq.is_null() {
            ok(
                NET.irecv.unwrap()(
                    p.recv,
                    n as c_int,
                    rdata.as_mut_ptr(),
                    rsizes.as_mut_ptr(),
                    tags.as_mut_ptr(),
                    rmrs.as_mut_ptr(),
                    &mut rreq,
                ),
                "irecv group",
            );
        }
    }
    let mut sreqs = Vec::new();
    let chunk = 65536;
    for t in (0..n).rev() {
        let size = if t == 3 { 0 } else { 1000 * (t + 1) };
        let data = pattern(100 + t as u32, size);
        sbuf[t * chunk..t * chunk + size].copy_from_slice(&data);
        let mut req: *mut c_void = null_mut();
        // SAFETY: the send buffer is registered.
        unsafe {
            while req.is_null() {
                ok(
                    NET.isend.unwrap()(
                        p.send,
                        sbuf.as_mut_ptr().add(t * chunk).cast(),
                        size as c_int,
                        t as c_int,
                        smr,
                        &mut req,
                    ),
                    "isend group",
                );
            }
        }
        sreqs.push(req);
    }
    for r in sreqs {
        wait(r, &mut [0]);
    }
    let mut got = vec![-1 as c_int; n];
    wait(rreq, &mut got);
    for t in 0..n {
        let size = if t == 3 { 0 } else { 1000 * (t + 1) };
        assert_eq!(got[t] as usize, size, "size of buffer {t}");
        assert!(
            rbufs[t][..size] == pattern(100 + t as u32, size)[..],
            "data of buffer {t}"
        );
    }
    // SAFETY: closing what we opened.
    unsafe {
        ok(NET.deregMr.unwrap()(p.send, smr), "dereg");
        for m in rmrs {
            ok(NET.deregMr.unwrap()(p.recv, m), "dereg");
        }
        ok(NET.closeSend.unwrap()(p.send), "closeSend");
        ok(NET.closeRecv.unwrap()(p.recv), "closeRecv");
        ok(NET.closeListen.unwrap()(p.listen), "closeListen");
    }
}
