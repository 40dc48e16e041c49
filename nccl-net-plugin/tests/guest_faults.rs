//! NCCL's real traffic and real faults, through the exported table on soft-RoCE (guest only):
//! grouped sends that overtake each other (as NCCL's per-tag proxy ops do), sends larger than
//! the posted receive, a receiver that never posts (stall warning), counters of a known run, a
//! peer killed while the survivor only sends, only receives, or both, a peer whose network drops
//! everything, a port taken down under pending transfers and brought back, fork after
//! registration, and a client without the listen secret.
//!
//! Settings the plugin reads once per process (QPs per connection, split mode, the stall
//! threshold) and anything that needs a second process or the plugin's stderr run in child
//! processes of this test binary, selected by `FERRO_FAULTS_CHILD`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use core::ffi::{c_int, c_void};
use ferro_ffi::ncclResult_t;
use nccl_net_ferro::ncclNetPlugin_v8 as NET;
use std::collections::VecDeque;
use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

mod common;
use common::*;

const CHILD: &str = CHILD_ROLE;

// ---------------------------------------------------------------------------------------------
// Child processes

/// Reads the child's stdout until a line containing `word`; returns what follows it.
fn read_until(child: &mut Child, lines: &mut impl Iterator<Item = String>, word: &str) -> String {
    for l in lines.by_ref() {
        if let Some(at) = l.find(word) {
            return l[at + word.len()..].trim().to_string();
        }
    }
    let _ = child.kill();
    panic!("the child ended before printing {word:?}");
}

fn in_guest() {
    assert!(
        std::path::Path::new("/sys/class/infiniband/rxe0").exists(),
        "needs the soft-RoCE guest (run the README's test command)"
    );
}

// ---------------------------------------------------------------------------------------------
// Overtaking grouped sends

const GROUPS: usize = 40;
/// Tags of each group's buffers (`maxRecvs` = 8 of them): tags repeat, as when two channels
/// share a sender rank.
const TAGS: [c_int; 8] = [1, 0, 2, 1, 3, 0, 2, 3];
const NTAGS: usize = 4;
const CAP: usize = 8192;

fn msg_size(g: usize, m: usize) -> usize {
    if (g + m) % 5 == 0 {
        0
    } else {
        (g * 977 + m * 131) % (CAP - 1) + 1
    }
}

/// One process: 40 groups of 8 posted up to 32 ahead; tag 0 always tries to send before the
/// others, and the others try in reverse order; sends are only tested when no new one could be
/// posted, so up to 32 x 8 = 256 are in flight. Every byte is checked.
fn overtaking_child() {
    let dev = test_dev();
    let p = pair(dev);
    let mut rarena = vec![0u8; GROUPS * TAGS.len() * CAP];
    let mut sarena = vec![0u8; GROUPS * TAGS.len() * CAP];
    let at = |g: usize, m: usize| (g * TAGS.len() + m) * CAP;
    for g in 0..GROUPS {
        for m in 0..TAGS.len() {
            let d = pattern((g * 16 + m) as u32, msg_size(g, m));
            sarena[at(g, m)..at(g, m) + d.len()].copy_from_slice(&d);
        }
    }
    let rmh = reg_buf(p.recv, &mut rarena);
    let smh = reg_buf(p.send, &mut sarena);
    // Per tag, the (group, member) its sends fill, in order.
    let mut streams: Vec<Vec<(usize, usize)>> = vec![Vec::new(); NTAGS];
    for g in 0..GROUPS {
        for (m, &t) in TAGS.iter().enumerate() {
            streams[t as usize].push((g, m));
        }
    }
    let mut next = [0usize; NTAGS];
    let mut nulls = [0u64; NTAGS];
    let mut most_sends = 0usize;
    let mut posted = 0usize;
    let mut outstanding: VecDeque<(*mut c_void, usize)> = VecDeque::new();
    let mut most_outstanding = 0;
    let mut sends: Vec<*mut c_void> = Vec::new();
    let mut finished = 0usize;
    let deadline = Instant::now() + Duration::from_secs(180);
    let (rbase, sbase) = (rarena.as_mut_ptr(), sarena.as_mut_ptr());
    while finished < GROUPS {
        assert!(
            Instant::now() < deadline,
            "stuck: {finished} groups finished, {posted} posted, sends per tag {next:?}"
        );
        while posted < GROUPS {
            let bufs: Vec<RecvArg> = TAGS
                .iter()
                .enumerate()
                // SAFETY: inside the receive arena.
                .map(|(m, &t)| (unsafe { rbase.add(at(posted, m)) }, CAP, t, rmh))
                .collect();
            let (r, req) = try_irecv(p.recv, &bufs);
            ok(r, "irecv");
            if req.is_null() {
                break;
            }
            outstanding.push_back((req, posted));
            posted += 1;
        }
        most_outstanding = most_outstanding.max(outstanding.len());
        let mut sent_now = false;
        for t in [0usize, 3, 2, 1] {
            let Some(&(g, m)) = streams[t].get(next[t]) else {
                continue;
            };
            // SAFETY: inside the send arena.
            let src = unsafe { sbase.add(at(g, m)) };
            let (r, req) = try_isend(p.send, src, msg_size(g, m), t as c_int, smh);
            assert_eq!(
                r,
                ncclResult_t::Success,
                "isend of tag {t} (group {g}) must succeed or retry, never fail"
            );
            if req.is_null() {
                nulls[t] += 1;
            } else {
                sends.push(req);
                next[t] += 1;
                sent_now = true;
            }
        }
        most_sends = most_sends.max(sends.len());
        if !sent_now {
            // Twice: a poll made by a later request's test can finish an earlier group, whose
            // requests the second pass then frees (NCCL tests until done, never piling up 256).
            for _ in 0..2 {
                sends.retain(|&req| {
                    let (r, done) = try_test(req);
                    ok(r, "test send");
                    done.is_none()
                });
            }
        }
        if let Some(&(req, g)) = outstanding.front() {
            let (r, done) = try_test(req);
            ok(r, "test recv");
            if let Some(sizes) = done {
                for m in 0..TAGS.len() {
                    let n = msg_size(g, m);
                    assert_eq!(sizes[m] as usize, n, "group {g} member {m} size");
                    let want = pattern((g * 16 + m) as u32, n);
                    assert!(
                        rarena[at(g, m)..at(g, m) + n] == want[..],
                        "group {g} member {m}: bytes differ"
                    );
                }
                outstanding.pop_front();
                finished += 1;
            }
        }
    }
    while let Some(req) = sends.pop() {
        loop {
            let (r, done) = try_test(req);
            ok(r, "test send");
            if done.is_some() {
                break;
            }
        }
    }
    assert_eq!(
        most_outstanding, 32,
        "receives must have been posted 32 ahead"
    );
    assert!(
        nulls[0] > 0,
        "tag 0 must have been held back at least once (NULL answers per tag {nulls:?})"
    );
    release(&p, smh, rmh);
    println!("OVERTAKE-OK nulls per tag {nulls:?}, at most {most_sends} sends in flight");
}

#[test]
fn overtaking_grouped_sends_are_retried_and_land_in_their_buffers() {
    if std::env::var(CHILD).as_deref() == Ok("overtake") {
        return overtaking_child();
    }
    in_guest();
    for (qps, split) in [
        ("1", "0"),
        ("2", "0"),
        ("4", "0"),
        ("2", "1"),
        ("4", "1"),
        ("128", "1"),
    ] {
        let t = child_passes(
            "overtaking_grouped_sends_are_retried_and_land_in_their_buffers",
            "overtake",
            &[
                ("NCCL_IB_QPS_PER_CONNECTION", qps),
                ("NCCL_IB_SPLIT_DATA_ON_QPS", split),
            ],
            "OVERTAKE-OK",
            &format!("QPs {qps} split {split}"),
        );
        if let Some(l) = t.lines().find(|l| l.contains("OVERTAKE-OK")) {
            println!(
                "QPs {qps} split {split}: {}",
                &l[l.find("OVERTAKE-OK").unwrap_or(0)..]
            );
        }
        assert!(
            !t.lines().any(|l| l.contains("Ferro WARN")),
            "a retried send must not log: {t}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Truncation

#[test]
fn a_send_larger_than_the_posted_receive_is_truncated_to_it_on_both_sides() {
    in_guest();
    let dev = test_dev();
    let p = pair(dev);
    let posted = 4096;
    let sent = 65536;
    let mut rbuf = vec![0u8; 2 * sent];
    let mut sbuf = pattern(5, sent);
    let rmh = reg_buf(p.recv, &mut rbuf);
    let smh = reg_buf(p.send, &mut sbuf);
    let (r, rreq) = try_irecv(p.recv, &[(rbuf.as_mut_ptr(), posted, 3, rmh)]);
    ok(r, "irecv");
    assert!(!rreq.is_null());
    let sreq = loop {
        let (r, req) = try_isend(p.send, sbuf.as_mut_ptr(), sent, 3, smh);
        ok(r, "isend");
        if !req.is_null() {
            break req;
        }
    };
    let mut sizes = [0 as c_int; 8];
    wait(sreq, &mut sizes);
    assert_eq!(
        sizes[0] as usize, posted,
        "the sender reports the bytes placed"
    );
    wait(rreq, &mut sizes);
    assert_eq!(
        sizes[0] as usize, posted,
        "the receiver reports the bytes placed"
    );
    assert!(rbuf[..posted] == sbuf[..posted]);
    assert!(
        rbuf[posted..].iter().all(|&b| b == 0),
        "nothing is written past the posted receive"
    );
    release(&p, smh, rmh);
}

// ---------------------------------------------------------------------------------------------
// Stall warning and counters

fn stall_child() {
    let p = pair(test_dev());
    let mut sbuf = vec![1u8; 64];
    let smh = reg_buf(p.send, &mut sbuf);
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(3500) {
        let (r, req) = try_isend(p.send, sbuf.as_mut_ptr(), 64, 0, smh);
        ok(r, "isend");
        assert!(req.is_null(), "nothing was posted, so no send can match");
    }
    // SAFETY: handle from regMr above.
    unsafe { ok(NET.deregMr.unwrap()(p.send, smh), "deregMr") };
    close(&p);
    println!("STALL-DONE");
}

#[test]
fn a_receiver_that_never_posts_gets_a_stall_warning_that_says_what_the_sender_waits_for() {
    if std::env::var(CHILD).as_deref() == Ok("stall") {
        return stall_child();
    }
    in_guest();
    let t = child_passes(
        "a_receiver_that_never_posts_gets_a_stall_warning_that_says_what_the_sender_waits_for",
        "stall",
        &[("FERRO_STALL_WARN_S", "1")],
        "STALL-DONE",
        "stall",
    );
    let warns: Vec<&str> = t
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("made no progress for"))
        .collect();
    // Threshold 1 s, then 2 s (doubling): in 3.5 s of waiting, two warnings.
    assert!(
        (1..=2).contains(&warns.len()),
        "expected one or two stall warnings (at 1 s and 2 s), got {}:\n{t}",
        warns.len()
    );
    assert!(
        warns[0].contains("send comm made no progress for 1 s")
            && warns[0].contains("waits for the receiver's clear-to-send for receive #0"),
        "{}",
        warns[0]
    );
    assert!(
        t.contains("send comm closed: sent 0 messages (0 bytes)"),
        "the close line carries the counters:\n{t}"
    );
}

fn counters_child() {
    let p = pair(test_dev());
    let mut sbuf = pattern(9, 1000);
    let mut rbuf = vec![0u8; 4096];
    let smh = reg_buf(p.send, &mut sbuf);
    let rmh = reg_buf(p.recv, &mut rbuf);
    for _ in 0..10 {
        let sizes = transfer(
            &p,
            (sbuf.as_mut_ptr(), smh, 1000),
            (rbuf.as_mut_ptr(), rmh, 4096),
            1,
        );
        assert_eq!(sizes, (1000, 1000));
    }
    release(&p, smh, rmh);
    println!("COUNTERS-DONE");
}

#[test]
fn the_close_lines_count_the_traffic_of_a_known_run() {
    if std::env::var(CHILD).as_deref() == Ok("counters") {
        return counters_child();
    }
    in_guest();
    let t = child_passes(
        "the_close_lines_count_the_traffic_of_a_known_run",
        "counters",
        &[],
        "COUNTERS-DONE",
        "counters",
    );
    assert!(
        t.contains("send comm closed: sent 10 messages (10000 bytes), 10 requests"),
        "{t}"
    );
    assert!(t.contains("0 truncated"), "{t}");
    assert!(
        t.contains("receive comm closed: received 10 messages (10000 bytes), 10 requests"),
        "{t}"
    );
    // One post per send (a single write with immediate); per receive on an idle comm, its
    // zero-length receive and its clear-to-send write, made at once.
    assert!(
        t.contains("10 completions, 0 errors, 10 send posts, 0 receive posts"),
        "{t}"
    );
    assert!(
        t.contains("0 errors, 10 send posts, 10 receive posts (10 clear-to-send writes)"),
        "{t}"
    );
}

/// 24 receives posted back to back, then 24 sends spun on one at a time (the caller never
/// calls the receive comm until every send is in): the data must arrive, byte for byte.
fn coalescing_child() {
    const N: usize = 24;
    const LEN: usize = 1024;
    let p = pair(test_dev());
    let mut sbuf: Vec<u8> = (0..N).flat_map(|k| pattern(k as u32 + 1, LEN)).collect();
    let mut rbuf = vec![0u8; N * LEN];
    let smh = reg_buf(p.send, &mut sbuf);
    let rmh = reg_buf(p.recv, &mut rbuf);
    let base = rbuf.as_mut_ptr();
    let rreqs: Vec<*mut c_void> = (0..N)
        // SAFETY: k * LEN + LEN <= rbuf.len().
        .map(|k| post_irecv(p.recv, &[(unsafe { base.add(k * LEN) }, LEN, 0, rmh)]))
        .collect();
    let sreqs: Vec<*mut c_void> = (0..N)
        .map(|k| post_isend(p.send, sbuf[k * LEN..].as_ptr(), LEN, 0, smh))
        .collect();
    let mut sizes = [0 as c_int; 8];
    for r in sreqs {
        wait(r, &mut sizes);
    }
    for r in rreqs {
        wait(r, &mut sizes);
        assert_eq!(sizes[0], LEN as c_int);
    }
    assert!(
        rbuf == sbuf,
        "every byte of the 24 messages lands in its own buffer"
    );
    release(&p, smh, rmh);
    println!("COALESCING-DONE");
}

#[test]
fn receives_posted_back_to_back_are_coalesced_and_staged_ones_go_out_from_another_comms_wait() {
    if std::env::var(CHILD).as_deref() == Ok("coalescing") {
        return coalescing_child();
    }
    in_guest();
    let t = child_passes(
        "receives_posted_back_to_back_are_coalesced_and_staged_ones_go_out_from_another_comms_wait",
        "coalescing",
        &[],
        "COALESCING-DONE",
        "coalescing",
    );
    // The irecvs wrote 1, 1, 2, 4 and 8 groups (each write due when as many groups were
    // staged as the sender held); the last 8 stayed staged while the sender held 16. The caller
    // then spun on the send comm only: its periodic look wrote those 8 (one more write), so all
    // 24 sends went through without a single call on the receive comm.
    assert!(
        t.contains("receive comm closed: received 24 messages (24576 bytes), 24 requests"),
        "{t}"
    );
    assert!(
        t.contains("6 send posts, 24 receive posts (6 clear-to-send writes)"),
        "{t}"
    );
    assert!(
        t.contains("sent 24 messages (24576 bytes)")
            && t.contains("24 send posts, 0 receive posts"),
        "{t}"
    );
}

// ---------------------------------------------------------------------------------------------
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
    if let Ok(role) = std::env::var(CHILD) {
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

// ---------------------------------------------------------------------------------------------
// A port taken down under pending transfers, then brought back

/// Brings dummy1 (rxe1's netdev) back up when dropped, whatever happened.
struct LinkUp;

impl Drop for LinkUp {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "set", "dummy1", "up"])
            .status();
    }
}

fn ip_link(state: &str) {
    // Keep the IPv6 address (and so rxe1's IPv6 GID) while the link is down.
    let _ = std::fs::write("/proc/sys/net/ipv6/conf/dummy1/keep_addr_on_down", "1");
    let s = Command::new("ip")
        .args(["link", "set", "dummy1", state])
        .status()
        .unwrap();
    assert!(s.success(), "ip link set dummy1 {state}");
}

fn port_state() -> String {
    std::fs::read_to_string("/sys/class/infiniband/rxe1/ports/1/state").unwrap_or_default()
}

/// A pair on the test device with 1 MiB buffers registered on both sides and a receive for
/// tag 1 posted (it waits for data: nothing is sent with that tag yet).
struct PendingReceive {
    p: Pair,
    sbuf: Vec<u8>,
    rbuf: Vec<u8>,
    smh: *mut c_void,
    rmh: *mut c_void,
    rreq: *mut c_void,
}

fn pending_receive(seed: u32) -> PendingReceive {
    let p = pair(test_dev());
    let mut sbuf = pattern(seed, 1 << 20);
    let mut rbuf = vec![0u8; 1 << 20];
    let smh = reg_buf(p.send, &mut sbuf);
    let rmh = reg_buf(p.recv, &mut rbuf);
    let (r, rreq) = try_irecv(p.recv, &[(rbuf.as_mut_ptr(), 1 << 20, 1, rmh)]);
    ok(r, "irecv");
    PendingReceive {
        p,
        sbuf,
        rbuf,
        smh,
        rmh,
        rreq,
    }
}

fn port_down_child() {
    let _up = LinkUp;
    let dev = test_dev();
    // Pending on both sides: a receive for tag 1 waits for data, a send with tag 2 waits for a
    // buffer with its tag.
    let PendingReceive {
        p,
        mut sbuf,
        mut rbuf,
        smh,
        rreq,
        ..
    } = pending_receive(1);
    let (r, sreq) = try_isend(p.send, sbuf.as_mut_ptr(), 1 << 20, 2, smh);
    ok(r, "isend");
    assert!(sreq.is_null());
    ip_link("down");
    let down = Instant::now();
    let (mut send_err, mut recv_err) = (None, None);
    while send_err.is_none() || recv_err.is_none() {
        assert!(
            down.elapsed() < Duration::from_secs(10),
            "both sides must fail within 10 s of the port going down (send {send_err:?}, receive {recv_err:?})"
        );
        if send_err.is_none() {
            let (r, req) = try_isend(p.send, sbuf.as_mut_ptr(), 1 << 20, 2, smh);
            assert!(req.is_null());
            if r != ncclResult_t::Success {
                send_err = Some(down.elapsed());
            }
        }
        if recv_err.is_none() && try_test(rreq).0 != ncclResult_t::Success {
            recv_err = Some(down.elapsed());
        }
    }
    println!("PORT-DOWN send failed after {send_err:?}, receive after {recv_err:?}");
    close(&p);
    ip_link("up");
    let up = Instant::now();
    while !port_state().contains("ACTIVE") {
        assert!(
            up.elapsed() < Duration::from_secs(30),
            "rxe1 port 1 did not come back"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A new comm pair moves 1 MiB, verified.
    let q = pair(dev);
    let smh = reg_buf(q.send, &mut sbuf);
    let rmh = reg_buf(q.recv, &mut rbuf);
    rbuf.fill(0);
    let sizes = transfer(
        &q,
        (sbuf.as_mut_ptr(), smh, 1 << 20),
        (rbuf.as_mut_ptr(), rmh, 1 << 20),
        7,
    );
    assert_eq!(sizes, (1 << 20, 1 << 20));
    assert!(rbuf == sbuf, "1 MiB after the port came back: bytes differ");
    close(&q);
    println!("PORT-UP-OK");
}

#[test]
fn a_port_that_goes_down_fails_both_sides_naming_it_and_new_comms_work_once_it_is_back() {
    if std::env::var(CHILD).as_deref() == Ok("port-down") {
        return port_down_child();
    }
    in_guest();
    assert!(
        std::path::Path::new("/sys/class/infiniband/rxe1").exists(),
        "needs rxe1 on dummy1"
    );
    let _up = LinkUp;
    let t = child_passes(
        "a_port_that_goes_down_fails_both_sides_naming_it_and_new_comms_work_once_it_is_back",
        "port-down",
        &[("FERRO_TEST_DEV", "rxe1")],
        "PORT-UP-OK",
        "port-down",
    );
    println!("{t}");
    assert!(
        t.lines().any(|l| l.contains("WARN")
            && l.contains("rxe1 port 1")
            && l.contains("IBV_EVENT_PORT_ERR")),
        "a WARN must name the device, the port and the event:\n{t}"
    );
    assert!(
        t.contains("IBV_EVENT_PORT_ACTIVE"),
        "the port's return is logged:\n{t}"
    );
}

/// `NCCL_IB_RETURN_ASYNC_EVENTS=0`: the port's events are logged but fail nothing, so the comms
/// pending across a short port flap go on once the port is back.
fn port_flap_child() {
    let _up = LinkUp;
    let PendingReceive {
        p,
        mut sbuf,
        rbuf,
        smh,
        rmh,
        rreq,
    } = pending_receive(3);
    ip_link("down");
    let down = Instant::now();
    while !port_state().contains("DOWN") {
        assert!(
            down.elapsed() < Duration::from_secs(10),
            "rxe1 port 1 did not go down"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Two seconds of waiting calls on both sides (thousands of periodic looks): nothing fails.
    while down.elapsed() < Duration::from_secs(2) {
        let (r, done) = try_test(rreq);
        assert_eq!(
            r,
            ncclResult_t::Success,
            "the receive failed while the port was down"
        );
        assert!(done.is_none(), "the receive completed with no send");
        let (r, req) = try_isend(p.send, sbuf.as_mut_ptr(), 1 << 20, 2, smh);
        assert_eq!(
            r,
            ncclResult_t::Success,
            "the send comm failed while the port was down"
        );
        assert!(req.is_null(), "a send with tag 2 has no buffer");
    }
    ip_link("up");
    let up = Instant::now();
    while !port_state().contains("ACTIVE") {
        assert!(
            up.elapsed() < Duration::from_secs(30),
            "rxe1 port 1 did not come back"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The same comms finish the pending receive.
    let sreq = post_isend(p.send, sbuf.as_mut_ptr(), 1 << 20, 1, smh);
    let mut sizes = [0 as c_int; 8];
    wait(sreq, &mut sizes);
    wait(rreq, &mut sizes);
    assert_eq!(sizes[0], 1 << 20);
    assert!(rbuf == sbuf, "1 MiB across the flap: bytes differ");
    release(&p, smh, rmh);
    println!("FLAP-OK");
}

#[test]
fn with_async_events_not_returned_a_port_flap_is_logged_and_the_same_comms_go_on() {
    if std::env::var(CHILD).as_deref() == Ok("port-flap") {
        return port_flap_child();
    }
    in_guest();
    assert!(
        std::path::Path::new("/sys/class/infiniband/rxe1").exists(),
        "needs rxe1 on dummy1"
    );
    let _up = LinkUp;
    let t = child_passes(
        "with_async_events_not_returned_a_port_flap_is_logged_and_the_same_comms_go_on",
        "port-flap",
        &[
            ("FERRO_TEST_DEV", "rxe1"),
            ("NCCL_IB_RETURN_ASYNC_EVENTS", "0"),
        ],
        "FLAP-OK",
        "port-flap",
    );
    println!("{t}");
    assert!(
        t.lines().any(|l| l.contains("WARN")
            && l.contains("rxe1 port 1")
            && l.contains("IBV_EVENT_PORT_ERR")),
        "the event is still logged, naming the device and the port:\n{t}"
    );
}

// ---------------------------------------------------------------------------------------------
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

// ---------------------------------------------------------------------------------------------
// Only holders of the listen handle can connect

#[test]
fn a_client_with_the_wrong_listen_secret_is_refused_while_the_real_peer_connects() {
    use ferro_proto::handle;
    use ferro_proto::wire::{self, DevMeta, Msg, QpMeta};
    use std::io::{Read as _, Write as _};
    in_guest();
    let dev = test_dev();
    let mut h = [0u8; 128];
    let mut listen: *mut c_void = null_mut();
    // SAFETY: valid out-pointers.
    ok(
        unsafe { NET.listen.unwrap()(dev, h.as_mut_ptr().cast(), &mut listen) },
        "listen",
    );
    let addr = handle::decode(&h).unwrap();
    // A client that speaks the wire format perfectly, but does not hold the handle.
    let mut secret = handle::secret(&h);
    secret[0] ^= 0xff;
    let forged = Msg::Connect(QpMeta {
        qps_per_conn: 1,
        split: false,
        devs: vec![DevMeta {
            link_layer: 2,
            port: 1,
            lid: 0,
            mtu: 1024,
            gid: [0; 16],
            gid_index: 1,
            mr_rkey: 1,
        }],
        mr_addr: 0x1000,
        qpns: vec![17],
        secret,
    });
    let mut stray = std::net::TcpStream::connect(addr).unwrap();
    stray.write_all(&wire::encode(&forged)).unwrap();
    stray
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    // The real peer connects while the listener also handles the stray.
    let (mut send, mut recv): (*mut c_void, *mut c_void) = (null_mut(), null_mut());
    let mut stray_closed = false;
    let deadline = Instant::now() + Duration::from_secs(60);
    while send.is_null() || recv.is_null() || !stray_closed {
        assert!(
            Instant::now() < deadline,
            "connected: {}, stray refused: {stray_closed}",
            !send.is_null() && !recv.is_null()
        );
        // SAFETY: valid handle buffer, comms and out-pointers.
        unsafe {
            if send.is_null() {
                ok(
                    NET.connect.unwrap()(dev, h.as_mut_ptr().cast(), &mut send, null_mut()),
                    "connect",
                );
            }
            let mut c = null_mut();
            ok(NET.accept.unwrap()(listen, &mut c, null_mut()), "accept");
            if !c.is_null() {
                assert!(
                    recv.is_null(),
                    "accept returned a second comm: the stray got in"
                );
                recv = c;
            }
        }
        if !stray_closed {
            // The listener drops the stray: its end sees EOF (or a reset).
            let mut b = [0u8; 64];
            stray_closed = match stray.read(&mut b) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) => !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
            };
        }
    }
    // The real pair works.
    let p = Pair { send, recv, listen };
    let mut sbuf = pattern(3, 4096);
    let mut rbuf = vec![0u8; 4096];
    let smh = reg_buf(p.send, &mut sbuf);
    let rmh = reg_buf(p.recv, &mut rbuf);
    transfer(
        &p,
        (sbuf.as_mut_ptr(), smh, 4096),
        (rbuf.as_mut_ptr(), rmh, 4096),
        1,
    );
    assert!(rbuf == sbuf);
    release(&p, smh, rmh);
}

// ---------------------------------------------------------------------------------------------
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
