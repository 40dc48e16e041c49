//! A peer that goes away, through the exported table on soft-RoCE (guest only): a peer killed
//! while the survivor only sends, only receives, or both, and a peer whose network silently
//! drops everything.
//!
//! Settings the plugin reads once per process and anything that needs a second process or the
//! plugin's stderr run in child processes of this test binary, selected by `FERRO_TEST_CHILD`
//! (`common::CHILD_ROLE`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use core::ffi::c_void;
use ferro_ffi::ncclResult_t;
use nccl_net_ferro::ncclNetPlugin_v8 as NET;
use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

mod common;
use common::*;

// A dead peer, on every path

/// The peer of the dead-peer tests: connects and/or listens as asked, then idles until killed.
fn idle_peer_child(role: &str) {
    // SAFETY: calling the plugin's own table as NCCL would.
    unsafe { ok(NET.init.unwrap()(None), "init") };
    let dev = test_dev();
    let mut listen: *mut c_void = null_mut();
    let mut handle = [0u8; 128];
    if role == "idle-listen" || role == "idle-both" {
        // SAFETY: valid out-pointers.
        ok(
            unsafe { NET.listen.unwrap()(dev, handle.as_mut_ptr().cast(), &mut listen) },
            "listen",
        );
        println!("HANDLE {}", Handle(handle).to_hex());
    }
    let mut peer = std::env::var("FERRO_PEER_HANDLE")
        .ok()
        .map(|h| Handle::from_hex(&h).unwrap().0);
    let (mut send, mut recv): (*mut c_void, *mut c_void) = (null_mut(), null_mut());
    let want_send = peer.is_some();
    let want_recv = !listen.is_null();
    let deadline = Instant::now() + Duration::from_secs(60);
    while (want_send && send.is_null()) || (want_recv && recv.is_null()) {
        assert!(Instant::now() < deadline, "peer setup timed out");
        if let (Some(h), true) = (peer.as_mut(), send.is_null()) {
            // SAFETY: a valid handle buffer and out-pointer.
            ok(
                unsafe { NET.connect.unwrap()(dev, h.as_mut_ptr().cast(), &mut send, null_mut()) },
                "connect",
            );
        }
        if want_recv && recv.is_null() {
            // SAFETY: a listen comm of ours, a valid out-pointer.
            ok(
                unsafe { NET.accept.unwrap()(listen, &mut recv, null_mut()) },
                "accept",
            );
        }
    }
    println!("READY");
    std::thread::sleep(Duration::from_secs(300));
}

/// Spawns the idle peer with `role`, optionally giving it our listen handle.
fn spawn_peer(role: &str, our_handle: Option<&[u8; 128]>) -> (Child, impl Iterator<Item = String>) {
    let hex = our_handle.map(|h| Handle(*h).to_hex());
    let mut env = vec![];
    if let Some(h) = hex.as_deref() {
        env.push(("FERRO_PEER_HANDLE", h));
    }
    let mut c = child(
        "a_dead_peer_is_noticed_by_a_survivor_that_only_sends_only_receives_or_both",
        role,
        &env,
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let lines = BufReader::new(c.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok);
    (c, lines)
}

/// Calls `step` until it reports an error; returns how long that took after the kill.
fn until_error(what: &str, mut step: impl FnMut() -> ncclResult_t) -> Duration {
    let killed = Instant::now();
    loop {
        let r = step();
        if r != ncclResult_t::Success {
            let t = killed.elapsed();
            println!(
                "{what}: error {} {:.2} s after the peer was killed",
                r.0,
                t.as_secs_f64()
            );
            return t;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(60),
            "{what}: no error 60 s after the peer was killed"
        );
    }
}

#[test]
fn a_dead_peer_is_noticed_by_a_survivor_that_only_sends_only_receives_or_both() {
    if let Ok(role) = std::env::var(CHILD_ROLE) {
        return idle_peer_child(&role);
    }
    in_guest();
    let dev = test_dev();
    let mut sbuf = vec![3u8; 4096];
    let mut rbuf = vec![0u8; 4096];

    // (a) The survivor only calls isend, and never got a request (no receive was posted).
    {
        let (mut c, mut lines) = spawn_peer("idle-listen", None);
        let mut h = Handle::from_hex(&read_until(&mut c, &mut lines, "HANDLE "))
            .unwrap()
            .0;
        let mut send: *mut c_void = null_mut();
        let deadline = Instant::now() + Duration::from_secs(60);
        while send.is_null() {
            assert!(Instant::now() < deadline, "connect timed out");
            // SAFETY: a valid handle buffer and out-pointer.
            ok(
                unsafe { NET.connect.unwrap()(dev, h.as_mut_ptr().cast(), &mut send, null_mut()) },
                "connect",
            );
        }
        read_until(&mut c, &mut lines, "READY");
        let smh = reg_buf(send, &mut sbuf);
        c.kill().unwrap();
        c.wait().unwrap();
        let t = until_error("(a) isend only", || {
            let (r, req) = try_isend(send, sbuf.as_mut_ptr(), 4096, 0, smh);
            assert!(
                r != ncclResult_t::Success || req.is_null(),
                "no receive was posted"
            );
            r
        });
        assert!(t < Duration::from_secs(60));
        // SAFETY: our comm and handle, released once.
        unsafe {
            let _ = NET.deregMr.unwrap()(send, smh);
            let _ = NET.closeSend.unwrap()(send);
        }
    }

    // (b) The survivor only has a receive pending.
    {
        let mut handle = [0u8; 128];
        let mut listen: *mut c_void = null_mut();
        // SAFETY: valid out-pointers.
        ok(
            unsafe { NET.listen.unwrap()(dev, handle.as_mut_ptr().cast(), &mut listen) },
            "listen",
        );
        let (mut c, mut lines) = spawn_peer("idle-connect", Some(&handle));
        let mut recv: *mut c_void = null_mut();
        let deadline = Instant::now() + Duration::from_secs(60);
        while recv.is_null() {
            assert!(Instant::now() < deadline, "accept timed out");
            // SAFETY: a listen comm of ours, a valid out-pointer.
            ok(
                unsafe { NET.accept.unwrap()(listen, &mut recv, null_mut()) },
                "accept",
            );
        }
        read_until(&mut c, &mut lines, "READY");
        let rmh = reg_buf(recv, &mut rbuf);
        let (r, rreq) = try_irecv(recv, &[(rbuf.as_mut_ptr(), 4096, 0, rmh)]);
        ok(r, "irecv");
        c.kill().unwrap();
        c.wait().unwrap();
        let t = until_error("(b) receive pending", || try_test(rreq).0);
        assert!(t < Duration::from_secs(60));
        // SAFETY: our comms and handle, released once.
        unsafe {
            let _ = NET.deregMr.unwrap()(recv, rmh);
            let _ = NET.closeRecv.unwrap()(recv);
            let _ = NET.closeListen.unwrap()(listen);
        }
    }

    // (c) Both: a receive pending on one comm, sends retried on the other.
    {
        let mut handle = [0u8; 128];
        let mut listen: *mut c_void = null_mut();
        // SAFETY: valid out-pointers.
        ok(
            unsafe { NET.listen.unwrap()(dev, handle.as_mut_ptr().cast(), &mut listen) },
            "listen",
        );
        let (mut c, mut lines) = spawn_peer("idle-both", Some(&handle));
        let mut peer = Handle::from_hex(&read_until(&mut c, &mut lines, "HANDLE "))
            .unwrap()
            .0;
        let (mut send, mut recv): (*mut c_void, *mut c_void) = (null_mut(), null_mut());
        let deadline = Instant::now() + Duration::from_secs(60);
        while send.is_null() || recv.is_null() {
            assert!(Instant::now() < deadline, "setup timed out");
            if send.is_null() {
                // SAFETY: a valid handle buffer and out-pointer.
                ok(
                    unsafe {
                        NET.connect.unwrap()(dev, peer.as_mut_ptr().cast(), &mut send, null_mut())
                    },
                    "connect",
                );
            }
            if recv.is_null() {
                // SAFETY: a listen comm of ours, a valid out-pointer.
                ok(
                    unsafe { NET.accept.unwrap()(listen, &mut recv, null_mut()) },
                    "accept",
                );
            }
        }
        read_until(&mut c, &mut lines, "READY");
        let smh = reg_buf(send, &mut sbuf);
        let rmh = reg_buf(recv, &mut rbuf);
        let (r, rreq) = try_irecv(recv, &[(rbuf.as_mut_ptr(), 4096, 0, rmh)]);
        ok(r, "irecv");
        c.kill().unwrap();
        c.wait().unwrap();
        let (mut send_failed, mut recv_failed) = (false, false);
        let t = until_error("(c) both", || {
            if !send_failed {
                send_failed =
                    try_isend(send, sbuf.as_mut_ptr(), 4096, 0, smh).0 != ncclResult_t::Success;
            }
            if !recv_failed {
                recv_failed = try_test(rreq).0 != ncclResult_t::Success;
            }
            if send_failed && recv_failed {
                ncclResult_t::RemoteError
            } else {
                ncclResult_t::Success
            }
        });
        assert!(t < Duration::from_secs(60));
        // SAFETY: our comms and handles, released once.
        unsafe {
            let _ = NET.deregMr.unwrap()(send, smh);
            let _ = NET.deregMr.unwrap()(recv, rmh);
            let _ = NET.closeSend.unwrap()(send);
            let _ = NET.closeRecv.unwrap()(recv);
            let _ = NET.closeListen.unwrap()(listen);
        }
    }
}

// A peer whose network silently drops everything

/// Removes the loss on `lo` when dropped, whatever happened.
struct NoLoss;

impl Drop for NoLoss {
    fn drop(&mut self) {
        let _ = Command::new("tc")
            .args(["qdisc", "del", "dev", "lo", "root"])
            .status();
    }
}

#[test]
fn a_peer_whose_network_silently_drops_everything_is_noticed_within_60_s() {
    in_guest();
    let p = pair(test_dev());
    let mut sbuf = vec![1u8; 4096];
    let mut rbuf = vec![0u8; 4096];
    let smh = reg_buf(p.send, &mut sbuf);
    let rmh = reg_buf(p.recv, &mut rbuf);
    // A receive waits for tag 1; the sender offers tag 2, which has no buffer.
    let (r, rreq) = try_irecv(p.recv, &[(rbuf.as_mut_ptr(), 4096, 1, rmh)]);
    ok(r, "irecv");
    // Every packet on the loopback (the out-of-band connection and rxe0's RoCE traffic) is
    // dropped from now on: no FIN, no RST, no completion.
    let _restore = NoLoss;
    let s = Command::new("tc")
        .args(["qdisc", "add", "dev", "lo", "root", "netem", "loss", "100%"])
        .status()
        .unwrap();
    assert!(s.success(), "tc netem on lo");
    let start = Instant::now();
    let (mut send_err, mut recv_err) = (None, None);
    while send_err.is_none() || recv_err.is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "a silent peer must be noticed within 60 s (send {send_err:?}, receive {recv_err:?})"
        );
        if send_err.is_none() {
            let (r, req) = try_isend(p.send, sbuf.as_mut_ptr(), 4096, 2, smh);
            assert!(req.is_null());
            if r != ncclResult_t::Success {
                send_err = Some(start.elapsed());
            }
        }
        if recv_err.is_none() && try_test(rreq).0 != ncclResult_t::Success {
            recv_err = Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    println!("silent network: send failed after {send_err:?}, receive after {recv_err:?}");
    drop(_restore);
    close(&p);
}
