//! A connecting side the listener dropped before it presented the secret connects again, on
//! soft-RoCE (guest only): its process stalls between its TCP connection and its `Connect`
//! (held back by the `test-faults` feature, `nccl_net_ferro::transport::faults::hold_connects`)
//! past the listener's secret deadline, the listener drops it as a stranger, and the next
//! `connect` calls dial again instead of failing the comm; it then carries data, byte for byte.
//! `connect` and `accept` keep answering "not yet" without blocking meanwhile. A listener that
//! drops every connection gets five before the connect fails naming it; one that dropped the
//! first and is gone fails the next at once, saying the peer may have exited.
//!
//! The case runs in a child process of this test binary (`common::CHILD_ROLE`), whose plugin
//! log goes to stderr for the parent to read.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use ferro_nccl_standin::Handle;
use ferro_nccl_standin::net::Comm as _;
use nccl_net_ferro::transport::faults;
use std::time::{Duration, Instant};

mod common;
use common::*;

/// Longer than the listener's deadline for the secret (5 s).
const HOLD: Duration = Duration::from_secs(7);

const TEST: &str =
    "a_connect_the_listener_dropped_while_its_process_stalled_dials_again_and_carries_data";

#[test]
fn a_connect_the_listener_dropped_while_its_process_stalled_dials_again_and_carries_data() {
    if std::env::var(CHILD_ROLE).as_deref() == Ok("stalled") {
        let dev = test_dev();
        let (mut handle, listen) = net().listen(dev).expect("listen");
        faults::hold_connects(HOLD);
        let start = Instant::now();
        let (mut send, mut recv) = (None, None);
        let mut longest = Duration::ZERO;
        // NCCL's loop: connect and accept in turn, every 5 ms.
        while (send.is_none() || recv.is_none()) && start.elapsed() < Duration::from_secs(60) {
            let t = Instant::now();
            if send.is_none() {
                send = net().connect(dev, &mut handle).expect("connect");
            }
            if recv.is_none() {
                recv = net().accept(&listen).expect("accept");
            }
            longest = longest.max(t.elapsed());
            std::thread::sleep(Duration::from_millis(5));
        }
        let took = start.elapsed();
        faults::hold_connects(Duration::ZERO);
        let (s, r) = (send.expect("connected"), recv.expect("accepted"));
        assert!(
            took >= HOLD,
            "connected after {took:?}: the hold did not hold"
        );
        assert!(
            took < HOLD + Duration::from_secs(20),
            "connected only after {took:?}"
        );
        assert!(
            longest < Duration::from_secs(2),
            "a connect/accept round took {longest:?}: a call blocked"
        );
        let p = Pair {
            send: s.as_ptr(),
            recv: r.as_ptr(),
            listen: listen.as_ptr(),
        };
        let (smh, rmh) = one_message(&p, 11);
        release(&p, smh, rmh);
        println!("DIALLED-AGAIN-AND-CONNECTED after {took:?}");
        return;
    }
    in_guest();
    let out = child_passes(
        TEST,
        "stalled",
        &[],
        "DIALLED-AGAIN-AND-CONNECTED",
        "a connect held back 7 s after its TCP connection",
    );
    let dropped = out
        .lines()
        .find(|l| l.contains("WARN") && l.contains("did not present the listen secret"))
        .unwrap_or_else(|| {
            panic!("the listener never said it dropped the stalled connect:\n{out}")
        });
    assert!(dropped.contains("within 5 s"), "{dropped}");
    let again = out
        .lines()
        .find(|l| l.contains("WARN") && l.contains("connecting again"))
        .unwrap_or_else(|| panic!("the connecting side never said it dialled again:\n{out}"));
    assert!(again.contains("connection 2 of 5"), "{again}");
    assert!(again.contains("before answering"), "{again}");
    assert_eq!(
        out.matches("connecting again").count(),
        1,
        "one new connection was enough:\n{out}"
    );
}

/// A stand-in listener at a handle's address that takes `drops` connections, reading each one's
/// first bytes (its `Connect`) and closing it without an answer, as a listener drops a
/// stranger; then it stops listening. Returns the handle and the thread (its result: the
/// connections it took).
fn dropping_listener(drops: usize) -> (Handle, std::thread::JoinHandle<usize>) {
    use std::io::Read as _;
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let mut h = ferro_proto::handle::encode(l.local_addr().unwrap(), [7; 16]);
    ferro_proto::handle::set_devs(&mut h, 1);
    let t = std::thread::spawn(move || {
        let mut taken = 0;
        for s in l.incoming().take(drops) {
            let mut s = s.expect("accept");
            let mut b = [0u8; 64];
            let _ = s.read(&mut b);
            taken += 1;
        }
        taken
    });
    (Handle(h), t)
}

/// Calls `connect` on `h` until it returns a comm or an error (60 s at most).
fn connect_until_done(h: &mut Handle) -> Result<(), ferro_ffi::ncclResult_t> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if net().connect(test_dev(), h)?.is_some() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("connect neither connected nor failed within 60 s");
}

const DROPS_TEST: &str = "a_listener_that_drops_every_connection_before_answering_fails_the_connect_after_five_and_one_gone_at_once";

#[test]
fn a_listener_that_drops_every_connection_before_answering_fails_the_connect_after_five_and_one_gone_at_once()
 {
    match std::env::var(CHILD_ROLE).as_deref() {
        Ok("drops-all") => {
            let (mut h, t) = dropping_listener(5);
            let r = connect_until_done(&mut h);
            assert!(r.is_err(), "connected to a listener that answers nothing");
            println!("DROPS-ALL {r:?} after {} connections", t.join().unwrap());
            return;
        }
        Ok("gone") => {
            let (mut h, t) = dropping_listener(1);
            let r = connect_until_done(&mut h);
            assert!(r.is_err(), "connected to a listener that is gone");
            println!("GONE {r:?} after {} connection", t.join().unwrap());
            return;
        }
        _ => {}
    }
    in_guest();
    // A listener that drops every connection (a stale handle whose port another program
    // reuses, say): five connections in all, then the connect fails naming the closing.
    let out = child_passes(
        DROPS_TEST,
        "drops-all",
        &[],
        "DROPS-ALL",
        "a listener that drops every connection",
    );
    assert!(out.contains("after 5 connections"), "{out}");
    for n in 2..=5 {
        assert!(
            out.contains(&format!("connecting again (connection {n} of 5)")),
            "connection {n} was not announced:\n{out}"
        );
    }
    assert!(
        out.lines().any(|l| l.contains("WARN")
            && l.contains("connect:")
            && (l.contains("closed the connection during the handshake")
                || l.contains("Connection reset by peer"))),
        "the failure does not say the listener closed the connection:\n{out}"
    );
    // A listener that dropped the first connection and is gone: the new one is refused, and
    // the connect fails at once, saying so.
    let out = child_passes(
        DROPS_TEST,
        "gone",
        &[],
        "GONE",
        "a listener that dropped the connection and went away",
    );
    assert!(out.contains("GONE Err(ncclRemoteError)"), "{out}");
    assert!(
        out.lines().any(|l| l.contains("WARN")
            && l.contains("again after it dropped the connection before answering (connection 2)")
            && l.contains("did the peer process exit?")),
        "the failure does not say the listener went away:\n{out}"
    );
}
