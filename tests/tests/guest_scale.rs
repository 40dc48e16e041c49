//! Guest test of many comms at once (the scale benchmark's checks that do not depend on speed):
//! N connections (16, then 256) between a listen comm and this process, opened by 4 threads at
//! once (as NCCL's proxy service threads connect many peers concurrently), then every comm
//! carries a message checked byte for byte, and teardown gives back everything. Each
//! connection's two ends live in this process, so what the process grew by, divided by N, is
//! one connection's cost on both sides: file descriptors and verbs objects (`rdma resource
//! show`) per connection are exact counts. Fails (does not skip) outside the guest.
//!
//! About 30 s in the TCG guest (debug build).

use ferro_tests::buffer::{Buffer, pattern_word, seed};
use ferro_tests::guest::{self, DEV, VerbsCounts, open_fds, verbs_counts};
use ferro_tests::net::{ListenComm, Mr, RecvComm, Request, SendComm};
use ferro_tests::{Handle, NcclExt as _, logger, net::Net};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Verbs objects and descriptors one connection (both ends) holds with the default settings
/// (one QP per connection, host memory): a data QP and a CQ at each end (no flush QP: nothing
/// to flush without GPUDirect); the sender's clear-to-send FIFO and sizes staging MRs, the
/// receiver's sizes FIFO and clear-to-send staging MRs; one TCP socket at each end.
const PER_CONNECTION: (usize, VerbsCounts) = (
    2,
    VerbsCounts {
        qp: 2,
        cq: 2,
        mr: 4,
        pd: 0,
    },
);
const THREADS: usize = 4;
const LEN: usize = 4096;
const TAG: i32 = 3;
const TIMEOUT: Duration = Duration::from_secs(120);

/// A comm handed from the thread that made it to the test's thread.
struct Moved<T>(T);
// SAFETY: the plugin's comms have no thread affinity (NCCL makes them on its service threads and
// uses them on its progress thread); each is used by one thread at a time here.
unsafe impl<T> Send for Moved<T> {}

/// The listen comm the accepting threads share.
struct Shared<'a>(&'a ListenComm);
// SAFETY: `accept` may be called on a listen comm from any thread (NCCL does); the plugin
// serialises its per-listener state. The reference does not outlive the threads' scope.
unsafe impl Sync for Shared<'_> {}

/// A failed call fails the test with what it was.
trait Must<T> {
    fn must(self, what: &str) -> T;
}

impl<T, E: std::fmt::Display> Must<T> for Result<T, E> {
    fn must(self, what: &str) -> T {
        self.unwrap_or_else(|e| panic!("{what}: {e}"))
    }
}

fn inited() -> &'static Net {
    let n = Net::global().unwrap_or_else(|e| panic!("{e}"));
    if let Err(code) = n.init() {
        panic!(
            "init returned {code:?}\n{}",
            logger::format_logs(&logger::logs())
        );
    }
    n
}

type Opened = (Vec<Moved<SendComm>>, Vec<Moved<RecvComm>>);

/// One thread: connects `connects` comms (one in progress at a time, each from a fresh copy of
/// the handle) and accepts as many, interleaving the non-blocking calls.
fn open_some(net: &Net, dev: i32, h: &Handle, l: &ListenComm, connects: usize) -> Opened {
    let (mut sends, mut recvs) = (Vec::new(), Vec::new());
    let mut cur: Option<Handle> = None;
    let deadline = Instant::now() + TIMEOUT;
    while sends.len() < connects || recvs.len() < connects {
        assert!(
            Instant::now() < deadline,
            "{} of {connects} connects, {} accepts after {TIMEOUT:?}",
            sends.len(),
            recvs.len()
        );
        if sends.len() < connects {
            let hh = cur.get_or_insert(*h);
            if let Some(c) = net.connect(dev, hh).call("connect").must("connect") {
                sends.push(Moved(c));
                cur = None;
            }
        }
        if recvs.len() < connects {
            if let Some(c) = net.accept(l).call("accept").must("accept") {
                recvs.push(Moved(c));
            }
        }
        std::thread::yield_now();
    }
    (sends, recvs)
}

/// Open fds and the verbs objects of all this process's threads (the kernel lists an object
/// under the thread that made it, and no longer under any once that thread has exited).
fn sample() -> (usize, VerbsCounts) {
    let mut v = VerbsCounts::default();
    let tasks = std::fs::read_dir("/proc/self/task").must("/proc/self/task");
    for t in tasks {
        let tid: u32 = t
            .must("/proc/self/task")
            .file_name()
            .to_string_lossy()
            .parse()
            .must("a thread id");
        let c = verbs_counts(tid).must("rdma resource show");
        v.qp += c.qp;
        v.cq += c.cq;
        v.mr += c.mr;
        v.pd += c.pd;
    }
    (open_fds().must("open fds"), v)
}

fn wait(net: &Net, r: Request, what: &str) -> i32 {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let (done, sizes) = net.test(&r).call("test").must("test");
        if done {
            return sizes[0];
        }
        assert!(Instant::now() < deadline, "{what} did not complete");
        std::thread::yield_now();
    }
}

/// Opens `n` connections with [`THREADS`] threads, checks the per-connection counts, moves one
/// verified message over each, closes them all and checks that nothing is left.
fn n_connections(n: usize) {
    let net = inited();
    let dev = net.device_by_name(DEV).unwrap_or_else(|e| panic!("{e}"));
    let (h, listen) = net.listen(dev).call("listen").must("listen");
    // One connection first, closed again: what the plugin makes once per device on the first
    // connection is not a connection's cost.
    let (s, r) = open_some(net, dev, &h, &listen, 1);
    for c in s {
        net.close_send(c.0).call("closeSend").must("closeSend");
    }
    for c in r {
        net.close_recv(c.0).call("closeRecv").must("closeRecv");
    }
    let base = sample();
    let shared = Shared(&listen);
    let t0 = Instant::now();
    // The threads stay alive (parked on `gate`) until the counts are taken.
    let gate = std::sync::RwLock::new(());
    let (parts, open): (Vec<Opened>, _) = std::thread::scope(|s| {
        let closed = gate.write().unwrap_or_else(|p| p.into_inner());
        let (tx, rx) = std::sync::mpsc::channel();
        for t in 0..THREADS {
            let (shared, gate, tx) = (&shared, &gate, tx.clone());
            let share = (t..n).step_by(THREADS).count();
            s.spawn(move || {
                let _ = tx.send(open_some(net, dev, &h, shared.0, share));
                drop(tx);
                drop(gate.read());
            });
        }
        drop(tx);
        let parts: Vec<Opened> = rx.iter().take(THREADS).collect();
        let open = sample();
        drop(closed);
        (parts, open)
    });
    assert_eq!(parts.len(), THREADS, "a connect thread failed");
    eprintln!(
        "{n} connections opened by {THREADS} threads in {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    let (mut sends, mut recvs) = (Vec::new(), Vec::new());
    for (s, r) in parts {
        sends.extend(s.into_iter().map(|m| m.0));
        recvs.extend(r.into_iter().map(|m| m.0));
    }
    assert_eq!((sends.len(), recvs.len()), (n, n));
    let grown = (
        open.0 - base.0,
        VerbsCounts {
            qp: open.1.qp - base.1.qp,
            cq: open.1.cq - base.1.cq,
            mr: open.1.mr - base.1.mr,
            pd: open.1.pd - base.1.pd,
        },
    );
    let (fds, v) = PER_CONNECTION;
    let want = (
        fds * n,
        VerbsCounts {
            qp: v.qp * n,
            cq: v.cq * n,
            mr: v.mr * n,
            pd: 0,
        },
    );
    assert_eq!(
        grown, want,
        "{n} connections grew this process by (fds, verbs) {grown:?}, expected {PER_CONNECTION:?} per connection"
    );

    // One message per connection; a receive learns its sender from the pattern's first word.
    let sbuf = Buffer::new(n * LEN).must("buffer");
    let rbuf = Buffer::new(n * LEN).must("buffer");
    let seeds: Vec<u64> = (0..n as u64)
        .map(|i| seed(&[0x5ca1e, n as u64, i]))
        .collect();
    let by_first: HashMap<u64, usize> = seeds
        .iter()
        .enumerate()
        .map(|(i, &s)| (pattern_word(s, 0), i))
        .collect();
    let smr: Vec<Mr> = sends
        .iter()
        .map(|c| net.reg_host(c, &sbuf).call("regMr").must("regMr"))
        .collect();
    let rmr: Vec<Mr> = recvs
        .iter()
        .map(|c| net.reg_host(c, &rbuf).call("regMr").must("regMr"))
        .collect();
    let mut rreqs: Vec<Request> = Vec::new();
    for (j, (c, mr)) in recvs.iter().zip(&rmr).enumerate() {
        let r = net
            .irecv_one(c, &rbuf, j * LEN, LEN, TAG, mr)
            .call("irecv")
            .must("irecv")
            .unwrap_or_else(|| panic!("receive {j} was not taken at once"));
        rreqs.push(r);
    }
    let mut sreqs = Vec::new();
    for (i, (c, mr)) in sends.iter().zip(&smr).enumerate() {
        sbuf.fill_pattern(i * LEN, LEN, seeds[i]);
        let deadline = Instant::now() + TIMEOUT;
        let r = loop {
            if let Some(r) = net
                .isend(c, &sbuf, i * LEN, LEN, TAG, mr)
                .call("isend")
                .must("isend")
            {
                break r;
            }
            assert!(Instant::now() < deadline, "send {i} never posted");
            std::thread::yield_now();
        };
        sreqs.push(r);
    }
    for (i, r) in sreqs.into_iter().enumerate() {
        wait(net, r, &format!("send {i}"));
    }
    let mut seen = vec![false; n];
    for (j, r) in rreqs.into_iter().enumerate() {
        let got = wait(net, r, &format!("receive {j}"));
        assert_eq!(got as usize, LEN, "receive {j}");
        let first = {
            let p = rbuf.ptr_at(j * LEN, 8).cast::<u64>();
            // SAFETY: 8 bytes inside the buffer (checked by ptr_at), written by the completed
            // receive.
            u64::from_le(unsafe { p.read_unaligned() })
        };
        let i = *by_first
            .get(&first)
            .unwrap_or_else(|| panic!("receive {j} holds no sender's pattern"));
        assert!(!seen[i], "sender {i}'s message arrived on two comms");
        seen[i] = true;
        rbuf.verify_pattern(j * LEN, LEN, seeds[i])
            .unwrap_or_else(|e| panic!("receive {j} (sender {i}): {e}"));
    }

    for (c, mr) in sends.into_iter().zip(smr) {
        net.dereg_mr(&c, mr).call("deregMr").must("deregMr");
        net.close_send(c).call("closeSend").must("closeSend");
    }
    for (c, mr) in recvs.into_iter().zip(rmr) {
        net.dereg_mr(&c, mr).call("deregMr").must("deregMr");
        net.close_recv(c).call("closeRecv").must("closeRecv");
    }
    net.close_listen(listen)
        .call("closeListen")
        .must("closeListen");
    let after = sample();
    assert_eq!(
        after.0,
        base.0 - 1,
        "file descriptors after closing {n} connections and the listener (before: {base:?})"
    );
    assert_eq!(
        after.1, base.1,
        "verbs objects after closing {n} connections"
    );
}

#[test]
fn sixteen_then_256_connections_opened_by_four_threads_each_cost_the_same_and_leave_nothing() {
    let _g = guest::serial();
    for n in [16, 256] {
        n_connections(n);
    }
}
