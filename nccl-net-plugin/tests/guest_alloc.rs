//! The data path allocates nothing per message (guest only): a counting global allocator
//! watches `isend`, `irecv` and `test` over a thousand steady-state messages, for single and
//! grouped receives, with 1 and 4 QPs, split on and off, and with NCCL's profiler callback
//! given (v10 table, a profiler handle per buffer, 2 QPs split: every buffer has two network
//! events, all counted and all stopped). Each setting runs in a child process (the plugin reads
//! them once per process).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use core::ffi::{c_int, c_void};
use ferro_ffi::{ncclResult_t, profiler_event};
use ferro_nccl_standin::raw;
use ferro_nccl_standin::table::Table;
use nccl_net_ferro::ncclNetPlugin_v8 as NET;
use nccl_net_ferro::ncclNetPlugin_v10 as NET10;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};

mod common;
use common::*;

/// Allocations of this process: the plugin's global allocator counts every one (the test's
/// own code included), and the counter is read through the plugin's statistics symbol.
fn allocations() -> u64 {
    let mut s = ferro_ffi::ferroNetStats_v1_t::default();
    // SAFETY: NULL comm (allocations only) and a valid out-pointer.
    let r = unsafe { nccl_net_ferro::ferroNetStats_v1(null_mut(), &mut s) };
    assert_eq!(r, ferro_ffi::ncclResult_t::Success);
    s.allocations
}

/// Set in the child that gives the plugin a profiler callback.
const WITH_PROFILER: &str = "FERRO_TEST_ALLOC_PROFILER";

static STARTS: AtomicUsize = AtomicUsize::new(0);
static STOPS: AtomicUsize = AtomicUsize::new(0);

/// A profiler that only counts (so it allocates nothing itself): Start hands out 1, 2, 3 …
unsafe extern "C" fn counting_profiler(
    e_handle: *mut *mut c_void,
    type_: c_int,
    _phandle: *mut c_void,
    _plugin_id: i64,
    _ext: *mut c_void,
) -> ncclResult_t {
    match type_ {
        profiler_event::START => {
            let h = STARTS.fetch_add(1, Ordering::Relaxed) + 1;
            // SAFETY: the plugin passes its pre-set event-handle slot.
            unsafe { e_handle.write(h as *mut c_void) };
        }
        profiler_event::STOP => {
            STOPS.fetch_add(1, Ordering::Relaxed);
        }
        _ => {}
    }
    ncclResult_t::Success
}

const WARMUP: usize = 300;
const MEASURED: usize = 1000;
const MAX_N: usize = 4;
const LEN: usize = 4096;

/// One message exchange of a group of `n` buffers; no allocation in the test's own code.
/// `profiled`: through the v10 table, with a profiler handle per buffer.
fn exchange(
    p: &Pair,
    n: usize,
    bufs: &mut [[u8; LEN]; 2 * MAX_N],
    mhs: &[*mut c_void; 2],
    profiled: bool,
) {
    let mut data: [*mut c_void; MAX_N] = [null_mut(); MAX_N];
    let mut sizes: [c_int; MAX_N] = [LEN as c_int; MAX_N];
    let mut tags: [c_int; MAX_N] = [0, 1, 2, 3];
    let mut rmh: [*mut c_void; MAX_N] = [mhs[1]; MAX_N];
    for (i, d) in data.iter_mut().enumerate() {
        *d = bufs[MAX_N + i].as_mut_ptr().cast();
    }
    let mut rreq: *mut c_void = null_mut();
    let mut sreqs: [*mut c_void; MAX_N] = [null_mut(); MAX_N];
    // SAFETY: arrays of n elements, registered buffers; requests tested until done.
    unsafe {
        while rreq.is_null() {
            rreq = if profiled {
                let wide = [LEN; MAX_N];
                let mut ph: [*mut c_void; MAX_N] = core::array::from_fn(|i| (0x100 + i) as _);
                raw::irecv_bytes(
                    Table::V10(&NET10),
                    p.recv,
                    &mut data[..n],
                    &wide[..n],
                    &mut tags[..n],
                    &mut rmh[..n],
                    Some(&mut ph[..n]),
                    null_mut(),
                )
            } else {
                raw::irecv(
                    &NET,
                    p.recv,
                    &mut data[..n],
                    &mut sizes[..n],
                    &mut tags[..n],
                    &mut rmh[..n],
                )
            }
            .expect("irecv");
        }
        for (t, s) in sreqs.iter_mut().enumerate().take(n) {
            while s.is_null() {
                let len = 64 * (t + 1);
                let data: *mut c_void = bufs[t].as_mut_ptr().cast();
                *s = if profiled {
                    let ph = (0x200 + t) as *mut c_void;
                    raw::isend_bytes(
                        Table::V10(&NET10),
                        p.send,
                        data,
                        len,
                        t as c_int,
                        mhs[0],
                        ph,
                    )
                } else {
                    raw::isend(&NET, p.send, data, len as c_int, t as c_int, mhs[0])
                }
                .expect("isend");
            }
        }
        let mut got = [0 as c_int; 8];
        for &s in sreqs[..n].iter().chain([&rreq]) {
            while raw::test(&NET, s, got.as_mut_ptr()).expect("test") == 0 {}
        }
        assert_eq!(got[n - 1], (64 * n) as c_int);
    }
}

fn measure() {
    let dev = test_dev();
    let profiled = std::env::var(WITH_PROFILER).as_deref() == Ok("1");
    if profiled {
        // SAFETY: the linked v10 table's init with no logger and a counting callback.
        ok(
            unsafe { NET10.init.unwrap()(None, Some(counting_profiler)) },
            "init with a profiler",
        );
    }
    let p = pair(dev);
    let mut bufs = Box::new([[7u8; LEN]; 2 * MAX_N]);
    let mut smh: *mut c_void = null_mut();
    let mut rmh: *mut c_void = null_mut();
    // SAFETY: the buffers outlive the registrations (deregistered below).
    unsafe {
        let base: *mut c_void = bufs.as_mut_ptr().cast();
        let len = core::mem::size_of_val(&*bufs);
        ok(NET.regMr.unwrap()(p.send, base, len, 1, &mut smh), "regMr");
        ok(NET.regMr.unwrap()(p.recv, base, len, 1, &mut rmh), "regMr");
    }
    let mhs = [smh, rmh];
    // The counter sees this process's allocations (else a zero below would prove nothing).
    let before = allocations();
    let probe = std::hint::black_box(vec![7u8; 100]);
    assert!(allocations() > before, "the allocation counter is live");
    drop(probe);
    for n in [1usize, MAX_N] {
        for _ in 0..WARMUP {
            exchange(&p, n, &mut bufs, &mhs, profiled);
        }
        let before = allocations();
        let starts = STARTS.load(Ordering::Relaxed);
        for _ in 0..MEASURED {
            exchange(&p, n, &mut bufs, &mhs, profiled);
        }
        let allocs = allocations() - before;
        let events = STARTS.load(Ordering::Relaxed) - starts;
        println!("ALLOCS n={n} messages={MEASURED} allocations={allocs} profiler events={events}");
        if profiled {
            // Both sides, each buffer on both QPs (2 QPs, split).
            assert_eq!(events, MEASURED * n * 2 * 2, "profiler events");
            assert_eq!(
                STOPS.load(Ordering::Relaxed),
                STARTS.load(Ordering::Relaxed)
            );
        }
        assert_eq!(
            allocs, 0,
            "{allocs} allocations over {MEASURED} exchanges of {n} buffers"
        );
    }
    // SAFETY: handles from regMr above.
    unsafe {
        ok(NET.deregMr.unwrap()(p.send, smh), "deregMr");
        ok(NET.deregMr.unwrap()(p.recv, rmh), "deregMr");
        ok(NET.closeSend.unwrap()(p.send), "closeSend");
        ok(NET.closeRecv.unwrap()(p.recv), "closeRecv");
        ok(NET.closeListen.unwrap()(p.listen), "closeListen");
    }
    println!("ALLOC-OK");
}

#[test]
fn steady_state_messages_allocate_nothing_for_single_and_grouped_receives() {
    if std::env::var(CHILD_ROLE).as_deref() == Ok("alloc") {
        return measure();
    }
    assert!(
        std::path::Path::new("/sys/class/infiniband/rxe0").exists(),
        "needs the soft-RoCE guest (run the README's test command)"
    );
    for (qps, split, profiler) in [
        ("1", "0", "0"),
        ("4", "0", "0"),
        ("4", "1", "0"),
        ("2", "1", "1"),
    ] {
        let what = format!("QPs {qps} split {split} profiler {profiler}");
        let text = child_passes(
            "steady_state_messages_allocate_nothing_for_single_and_grouped_receives",
            "alloc",
            &[
                ("NCCL_IB_QPS_PER_CONNECTION", qps),
                ("NCCL_IB_SPLIT_DATA_ON_QPS", split),
                (WITH_PROFILER, profiler),
            ],
            "ALLOC-OK",
            &what,
        );
        for l in text.lines().filter(|l| l.contains("ALLOCS")) {
            println!("{what}: {}", &l[l.find("ALLOCS").unwrap_or(0)..]);
        }
    }
}
