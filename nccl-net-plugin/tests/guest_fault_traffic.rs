//! NCCL's real traffic through the exported table on soft-RoCE (guest only), at its edges:
//! grouped sends that overtake each other (as NCCL's per-tag proxy ops do), sends larger than
//! the posted receive, a receiver that never posts (stall warning), the counters of a known run,
//! and receives posted back to back (coalesced).
//!
//! Settings the plugin reads once per process and anything that needs a second process or the
//! plugin's stderr run in child processes of this test binary, selected by `FERRO_TEST_CHILD`
//! (`common::CHILD_ROLE`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use core::ffi::{c_int, c_void};
use ferro_ffi::ncclResult_t;
use nccl_net_ferro::ncclNetPlugin_v8 as NET;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

mod common;
use common::*;

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
    if std::env::var(CHILD_ROLE).as_deref() == Ok("overtake") {
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
    if std::env::var(CHILD_ROLE).as_deref() == Ok("stall") {
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
    if std::env::var(CHILD_ROLE).as_deref() == Ok("counters") {
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
    if std::env::var(CHILD_ROLE).as_deref() == Ok("coalescing") {
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
