//! Contract and least-privilege checks on a connected pair (guest only):
//! - every QP grants exactly the access the protocol needs, read back from the kernel with
//!   `ibv_query_qp` on both sides (data QPs: remote write; the flush QP: remote read);
//! - `isend`, `irecv` and `iflush` with a NULL `request` are refused before anything is matched
//!   or posted (the comm's counters through `ferroNetStats_v1` do not move), and the comm works
//!   on afterwards with the right bytes;
//! - `iflush` refuses a memory handle registered on another device, posting nothing;
//! - through the v7 table (NCCL 2.19) a send larger than the posted receive fails on both sides
//!   with the sizes named, where v8+ truncate it (`guest_fault_traffic.rs`).
//!
//! The binary flushes host buffers (`FERRO_FLUSH_HOST=1`, so receive comms get their flush QP on
//! rxe) and records the plugin's log lines through the stand-in's logger.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use core::ffi::{c_int, c_void};
use ferro_ffi::log_level::WARN;
use ferro_ffi::{ferroNetStats_v1_t, ncclResult_t};
use ferro_nccl_standin::logger::{has_log, nccl_logger};
use ferro_nccl_standin::raw;
use ferro_nccl_standin::table::Table;
use ferro_verbs::sys::{IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE};
use nccl_net_ferro::transport::comm_ref;
use nccl_net_ferro::{ferroNetStats_v1, ncclNetPlugin_v7, ncclNetPlugin_v8 as NET};
use std::ptr::null_mut;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod common;
use common::*;

/// Initialises the plugin once for the binary (flushing host buffers, logging to the stand-in's
/// recorder) and returns rxe0's index.
fn setup() -> c_int {
    static DEV: OnceLock<c_int> = OnceLock::new();
    *DEV.get_or_init(|| {
        in_guest();
        // SAFETY: set by the first test to get here, before the plugin reads its environment
        // (init, once per process); the others wait on the OnceLock.
        unsafe { std::env::set_var("FERRO_FLUSH_HOST", "1") };
        net().init_with(nccl_logger()).expect("init");
        net().device_by_name("rxe0").expect("rxe0")
    })
}

/// A comm's counters as `ferroNetStats_v1` gives them.
fn stats(comm: *mut c_void) -> ferroNetStats_v1_t {
    let mut out = ferroNetStats_v1_t::default();
    // SAFETY: a live comm of this plugin and a valid out-pointer.
    let r = unsafe { ferroNetStats_v1(comm, &mut out) };
    assert_eq!(r, ncclResult_t::Success);
    out
}

/// What a refused call must not have moved: requests, messages, posts, clear-to-send writes.
fn posted(s: &ferroNetStats_v1_t) -> [u64; 5] {
    [
        s.requests,
        s.messages,
        s.send_posts,
        s.recv_posts,
        s.cts_writes,
    ]
}

/// `iflush` of one buffer through the v8 table, with `request` as the out-pointer.
fn iflush_raw(
    comm: *mut c_void,
    buf: *mut u8,
    size: c_int,
    mh: *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    let mut data = [buf.cast::<c_void>()];
    let mut sizes = [size];
    let mut mhs = [mh];
    // SAFETY: arrays of one element; `request` is NULL or a valid out-pointer.
    unsafe {
        NET.iflush.unwrap()(
            comm,
            1,
            data.as_mut_ptr(),
            sizes.as_mut_ptr(),
            mhs.as_mut_ptr(),
            request,
        )
    }
}

#[test]
fn each_qp_grants_exactly_the_access_the_protocol_needs() {
    let dev = setup();
    let p = pair(dev);
    // SAFETY: live comms of this plugin (checked by their magic).
    let (s, r) = unsafe { (comm_ref(p.send).unwrap(), comm_ref(p.recv).unwrap()) };
    let send_qps = s.qp_access_flags().expect("query the sender's QPs");
    let recv_qps = r.qp_access_flags().expect("query the receiver's QPs");
    assert!(!send_qps.is_empty() && send_qps.len() == recv_qps.len());
    assert!(
        send_qps.iter().all(|&a| a == IBV_ACCESS_REMOTE_WRITE),
        "the sender's data QPs: {send_qps:#x?}"
    );
    assert!(
        recv_qps.iter().all(|&a| a == IBV_ACCESS_REMOTE_WRITE),
        "the receiver's data QPs: {recv_qps:#x?}"
    );
    assert_eq!(
        r.flush_qp_access_flags().expect("query the flush QP"),
        vec![IBV_ACCESS_REMOTE_READ],
        "the flush QP serves its own RDMA READ and nothing else"
    );
    assert_eq!(s.flush_qp_access_flags().unwrap(), Vec::<u32>::new());

    // The reduced access still carries a message and its flush.
    let len = 64 << 10;
    let sbuf = pattern(11, len);
    let mut rbuf = vec![0u8; len];
    let smh = reg(p.send, sbuf.as_ptr(), len);
    let rmh = reg_buf(p.recv, &mut rbuf);
    let (sent, got) = transfer(
        &p,
        (sbuf.as_ptr(), smh, len),
        (rbuf.as_mut_ptr(), rmh, len),
        1,
    );
    assert_eq!((sent, got), (len as c_int, len as c_int));
    assert!(rbuf == sbuf, "data differs");
    let mut req = null_mut();
    let r = iflush_raw(p.recv, rbuf.as_mut_ptr(), len as c_int, rmh, &mut req);
    assert_eq!(r, ncclResult_t::Success);
    assert!(!req.is_null(), "host buffers are flushed in this binary");
    wait(req, &mut [0; 8]);
    release(&p, smh, rmh);
}

#[test]
fn a_null_request_pointer_is_refused_before_anything_is_posted() {
    let dev = setup();
    let p = pair(dev);
    let len = 8192;
    let sbuf = pattern(12, len);
    let mut rbuf = vec![0u8; len];
    let smh = reg(p.send, sbuf.as_ptr(), len);
    let rmh = reg_buf(p.recv, &mut rbuf);

    // irecv with a NULL request: refused, nothing posted or announced.
    let before = stats(p.recv);
    let mut data = [rbuf.as_mut_ptr().cast::<c_void>()];
    let mut sizes = [len as c_int];
    let mut tags = [7 as c_int];
    let mut mhs = [rmh];
    // SAFETY: arrays of one element, the buffer registered; request NULL on purpose.
    let r = unsafe {
        NET.irecv.unwrap()(
            p.recv,
            1,
            data.as_mut_ptr(),
            sizes.as_mut_ptr(),
            tags.as_mut_ptr(),
            mhs.as_mut_ptr(),
            null_mut(),
        )
    };
    assert_eq!(r, ncclResult_t::InvalidUsage);
    assert_eq!(posted(&stats(p.recv)), posted(&before), "irecv posted work");

    // A real receive, so that a send could match; then isend with a NULL request, for long
    // enough that the clear-to-send has arrived: still refused, nothing matched or written.
    let rreq = post_irecv(p.recv, &[(rbuf.as_mut_ptr(), len, 7, rmh)]);
    let before = stats(p.send);
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        // SAFETY: the buffer is registered under smh; request NULL on purpose.
        let r = unsafe {
            NET.isend.unwrap()(
                p.send,
                sbuf.as_ptr().cast_mut().cast(),
                len as c_int,
                7,
                smh,
                null_mut(),
            )
        };
        assert_eq!(r, ncclResult_t::InvalidUsage);
    }
    assert_eq!(posted(&stats(p.send)), posted(&before), "isend posted work");

    // The comm works on: the send goes into the receive posted above, with the right bytes.
    let sreq = post_isend(p.send, sbuf.as_ptr(), len, 7, smh);
    let mut out = [0 as c_int; 8];
    wait(sreq, &mut out);
    assert_eq!(out[0] as usize, len);
    wait(rreq, &mut out);
    assert_eq!(out[0] as usize, len);
    assert!(rbuf == sbuf, "data differs");
    let s = stats(p.send);
    assert_eq!(
        (s.requests - before.requests, s.messages - before.messages),
        (1, 1),
        "exactly the one real send was taken"
    );

    // iflush with a NULL request: refused, no read posted; a real one then completes.
    let before = stats(p.recv);
    let r = iflush_raw(p.recv, rbuf.as_mut_ptr(), len as c_int, rmh, null_mut());
    assert_eq!(r, ncclResult_t::InvalidUsage);
    assert_eq!(
        posted(&stats(p.recv)),
        posted(&before),
        "iflush posted work"
    );
    let mut req = null_mut();
    let r = iflush_raw(p.recv, rbuf.as_mut_ptr(), len as c_int, rmh, &mut req);
    assert_eq!(r, ncclResult_t::Success);
    assert!(!req.is_null());
    wait(req, &mut [0; 8]);
    release(&p, smh, rmh);
}

#[test]
fn iflush_refuses_a_memory_handle_of_another_device_and_posts_nothing() {
    let dev = setup();
    let other = net().device_by_name("rxe1").expect("rxe1");
    let p = pair(dev);
    let q = pair(other);
    let len = 4096;
    let mut rbuf = vec![0u8; len];
    let foreign = reg_buf(q.recv, &mut rbuf);
    let before = stats(p.recv);
    // Garbage in `*request`: the call must overwrite it.
    let mut req: *mut c_void = std::ptr::dangling_mut::<c_void>();
    let r = iflush_raw(p.recv, rbuf.as_mut_ptr(), len as c_int, foreign, &mut req);
    assert_eq!(r, ncclResult_t::InvalidUsage);
    assert!(req.is_null(), "*request is written NULL on the error");
    assert_eq!(
        posted(&stats(p.recv)),
        posted(&before),
        "iflush posted work"
    );
    assert!(has_log(
        WARN,
        "memory handle registered on another device than the comm's"
    ));
    dereg(q.recv, foreign);
    close(&q);
    close(&p);
}

/// A connected pair through `t`.
fn pair_through(t: Table<'static>, dev: c_int) -> Pair {
    let mut h = [0u8; 128];
    let listen = raw::listen(t, dev, &mut h).expect("listen");
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut send, mut recv): (*mut c_void, *mut c_void) = (null_mut(), null_mut());
    while send.is_null() || recv.is_null() {
        assert!(Instant::now() < deadline, "connect/accept did not finish");
        if send.is_null() {
            send = raw::connect(t, dev, &mut h).expect("connect").0;
        }
        if recv.is_null() {
            // SAFETY: a live listen comm.
            recv = unsafe { raw::accept(t, listen) }.expect("accept").0;
        }
    }
    Pair { send, recv, listen }
}

#[test]
fn through_the_v7_table_a_send_larger_than_the_posted_receive_fails_on_both_sides() {
    let dev = setup();
    let v7 = Table::V7(&ncclNetPlugin_v7);
    raw::init(v7, nccl_logger()).expect("v7 init");
    let p = pair_through(v7, dev);
    let (posted_len, sent_len) = (4096usize, 8192usize);
    let mut rbuf = vec![0u8; posted_len];
    let sbuf = pattern(13, sent_len);
    // SAFETY: buffers alive until deregistered below.
    let rmh = unsafe { raw::reg_mr(v7, p.recv, rbuf.as_mut_ptr().cast(), posted_len, 1) }.unwrap();
    // SAFETY: as above.
    let smh =
        unsafe { raw::reg_mr(v7, p.send, sbuf.as_ptr().cast_mut().cast(), sent_len, 1) }.unwrap();
    let rreq = loop {
        // SAFETY: one registered buffer.
        let r = unsafe {
            raw::irecv(
                v7,
                p.recv,
                &mut [rbuf.as_mut_ptr().cast()],
                &mut [posted_len as c_int],
                &mut [5],
                &mut [rmh],
            )
        }
        .expect("irecv");
        if !r.is_null() {
            break r;
        }
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let refused = loop {
        assert!(
            Instant::now() < deadline,
            "the send was neither refused nor taken"
        );
        // SAFETY: the buffer is registered under smh.
        match unsafe {
            raw::isend(
                v7,
                p.send,
                sbuf.as_ptr().cast_mut().cast(),
                sent_len as c_int,
                5,
                smh,
            )
        } {
            Ok(r) if r.is_null() => continue,
            Ok(_) => panic!("the v7 comm took a send larger than the posted receive"),
            Err(code) => break code,
        }
    };
    assert_eq!(refused, ncclResult_t::InvalidUsage);
    assert!(
        has_log(WARN, "send of 8192 bytes")
            && has_log(WARN, "larger than the receive buffer of 4096 bytes"),
        "the sender's error names both sizes"
    );
    // The receiver learns it from its peer and fails its receive, naming the sizes too.
    let deadline = Instant::now() + Duration::from_secs(30);
    let failed = loop {
        assert!(
            Instant::now() < deadline,
            "the receive neither failed nor finished"
        );
        let mut sizes = [0 as c_int; 8];
        // SAFETY: a request of this comm, not yet reported done.
        match unsafe { raw::test(v7, rreq, sizes.as_mut_ptr()) } {
            Ok(0) => continue,
            Ok(_) => panic!("the receive finished: {sizes:?}"),
            Err(code) => break code,
        }
    };
    assert_eq!(failed, ncclResult_t::RemoteError);
    assert!(
        has_log(WARN, "the peer failed the comm: send of 8192 bytes"),
        "the receiver's error names the sizes"
    );
    assert!(rbuf.iter().all(|&b| b == 0), "nothing was written");
    // SAFETY: handles of these comms, deregistered once; comms closed once.
    unsafe {
        raw::dereg_mr(v7, p.send, smh).unwrap();
        raw::dereg_mr(v7, p.recv, rmh).unwrap();
        raw::close(v7, raw::CommKind::Send, p.send).unwrap();
        raw::close(v7, raw::CommKind::Recv, p.recv).unwrap();
        raw::close(v7, raw::CommKind::Listen, p.listen).unwrap();
    }
}
