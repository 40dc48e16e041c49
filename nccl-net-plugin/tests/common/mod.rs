//! Helpers shared by the guest tests: drive the plugin through its exported table, as NCCL does.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use core::ffi::{c_int, c_void};
use ferro_ffi::{ncclNetProperties_v8_t, ncclResult_t};
use nccl_net_ferro::ncclNetPlugin_v8 as NET;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

pub fn ok(r: ncclResult_t, what: &str) {
    assert_eq!(r, ncclResult_t::Success, "{what}");
}

/// The device under test: `FERRO_TEST_DEV` (default rxe0).
pub fn test_dev() -> c_int {
    let want = std::env::var("FERRO_TEST_DEV").unwrap_or_else(|_| "rxe0".into());
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
            if std::ffi::CStr::from_ptr(p.name).to_bytes() == want.as_bytes() {
                return d;
            }
        }
    }
    panic!("{want} not among the plugin's devices");
}

pub struct Pair {
    pub send: *mut c_void,
    pub recv: *mut c_void,
    pub listen: *mut c_void,
}

pub fn pair(dev: c_int) -> Pair {
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

pub fn wait(req: *mut c_void, sizes: &mut [c_int]) {
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

pub fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(2654435761)
                .wrapping_add(seed)
                .to_le_bytes()[1]
        })
        .collect()
}
