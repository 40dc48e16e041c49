//! A connecting side the listener dropped before it presented the secret connects again, on
//! soft-RoCE (guest only): its process stalls between its TCP connection and its `Connect`
//! (held back by the `test-faults` feature, `nccl_net_ferro::transport::faults::hold_connects`)
//! past the listener's secret deadline, the listener drops it as a stranger, and the next
//! `connect` calls dial again instead of failing the comm; it then carries data, byte for byte.
//! `connect` and `accept` keep answering "not yet" without blocking meanwhile.
//!
//! The case runs in a child process of this test binary (`common::CHILD_ROLE`), whose plugin
//! log goes to stderr for the parent to read.

#![allow(clippy::unwrap_used, clippy::expect_used)]

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
