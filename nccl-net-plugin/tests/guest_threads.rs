//! Concurrency and failed completions, in the soft-RoCE guest:
//! - several comms, each driven by its own sender and receiver threads, while another thread
//!   registers and deregisters buffers on the same comms (NCCL's service thread does this while
//!   the progress thread sends);
//! - a work completion that fails (the receive buffer is deregistered before the data arrives):
//!   `test` reports `ncclRemoteError` with the cause, and later calls on the comm fail too.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use core::ffi::c_void;
use ferro_ffi::ncclResult_t;
use nccl_net_ferro::ncclNetPlugin_v8 as NET;
use std::ptr::null_mut;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod common;
use common::*;

/// A comm pointer moved to another thread (the plugin's comms are thread-safe objects).
#[derive(Clone, Copy)]
struct P(*mut c_void);
// SAFETY: the plugin documents its comms as usable from any thread; the tests never use one comm's
// request from two threads at once.
unsafe impl Send for P {}

#[test]
fn many_comms_many_threads_with_concurrent_registration() {
    let dev = test_dev();
    let pairs: Vec<Pair> = (0..3).map(|_| pair(dev)).collect();
    let stop = Arc::new(AtomicBool::new(false));
    const ITERS: usize = 40;
    const LEN: usize = 65536;
    let mut threads = Vec::new();
    for (k, p) in pairs.iter().enumerate() {
        let (s, r) = (P(p.send), P(p.recv));
        threads.push(std::thread::spawn(move || {
            let s = s;
            let mut buf = vec![0u8; LEN];
            let m = reg(s.0, buf.as_mut_ptr(), LEN);
            for i in 0..ITERS {
                buf.copy_from_slice(&pattern((k * 1000 + i) as u32, LEN));
                let req = post_isend(s.0, buf.as_ptr(), LEN, 3, m);
                wait(req, &mut [0]);
            }
            dereg(s.0, m);
        }));
        threads.push(std::thread::spawn(move || {
            let r = r;
            let mut buf = vec![0u8; LEN];
            let m = reg(r.0, buf.as_mut_ptr(), LEN);
            for i in 0..ITERS {
                let req = post_irecv(r.0, &[(buf.as_mut_ptr(), LEN, 3, m)]);
                let mut got = [0];
                wait(req, &mut got);
                assert_eq!(got[0] as usize, LEN);
                assert!(
                    buf == pattern((k * 1000 + i) as u32, LEN),
                    "comm {k} message {i} corrupted"
                );
            }
            dereg(r.0, m);
        }));
    }
    // Registration churn on the same comms while they move data.
    let comms: Vec<P> = pairs.iter().flat_map(|p| [P(p.send), P(p.recv)]).collect();
    let churn_stop = stop.clone();
    let churn = std::thread::spawn(move || {
        let comms = comms;
        let mut bufs: Vec<Vec<u8>> = (0..8).map(|i| vec![0u8; 4096 * (i + 1)]).collect();
        let mut rounds = 0u32;
        while !churn_stop.load(Ordering::Relaxed) {
            let c = comms[rounds as usize % comms.len()];
            let handles: Vec<*mut c_void> = bufs
                .iter_mut()
                .map(|b| reg(c.0, b.as_mut_ptr(), b.len()))
                .collect();
            for h in handles {
                // SAFETY: h from regMr on c.
                ok(unsafe { NET.deregMr.unwrap()(c.0, h) }, "deregMr churn");
            }
            rounds += 1;
        }
        rounds
    });
    for t in threads {
        t.join().expect("a data thread failed");
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = churn.join().expect("the registration thread failed");
    assert!(rounds > 0, "the registration thread never ran concurrently");
    println!(
        "{} comms x {ITERS} messages verified while {rounds} register/deregister rounds ran",
        pairs.len()
    );
    for p in pairs {
        close(&p);
    }
}

#[test]
fn failed_work_completion_is_reported_with_its_cause_and_sticks() {
    let dev = test_dev();
    let p = pair(dev);
    let len = 1 << 16;
    let mut src = vec![1u8; len];
    let mut dst = vec![0u8; len + 4096];
    let smr = reg(p.send, src.as_mut_ptr(), len);
    let rmr = reg(p.recv, dst.as_mut_ptr(), dst.len());
    let _posted = post_irecv(p.recv, &[(dst.as_mut_ptr(), len, 0, rmr)]);
    // The receiver withdraws the memory: the sender's RDMA write must fail remotely.
    dereg(p.recv, rmr);
    let sreq = post_isend(p.send, src.as_ptr(), len, 0, smr);
    let deadline = Instant::now() + Duration::from_secs(60);
    let code = loop {
        let mut done = 0;
        // SAFETY: sreq from isend.
        let r = unsafe { NET.test.unwrap()(sreq, &mut done, null_mut()) };
        if r != ncclResult_t::Success {
            break r;
        }
        assert_eq!(
            done, 0,
            "a write into a deregistered buffer must not succeed"
        );
        assert!(Instant::now() < deadline, "no error within 60 s");
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(code, ncclResult_t::RemoteError);
    // Sticky: a later post on the comm fails with the same error.
    let mut again: *mut c_void = null_mut();
    // SAFETY: as above.
    let r = unsafe { NET.isend.unwrap()(p.send, src.as_mut_ptr().cast(), 8, 0, smr, &mut again) };
    assert_eq!(
        r,
        ncclResult_t::RemoteError,
        "the error must stick to the comm"
    );
    assert!(again.is_null());
    // SAFETY: closing what we opened, with the receive still in flight.
    unsafe {
        ok(NET.deregMr.unwrap()(p.send, smr), "deregMr");
        close(&p);
    }
}
