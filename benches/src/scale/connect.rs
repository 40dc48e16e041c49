//! Opening the scale mode's comms: each process connects `n` comms to the peer's listen handle
//! and accepts `n` on its own listen comm, with `threads` threads at once (NCCL connects many
//! peers concurrently from its proxy service threads). Thread `t` drives connects `t`, `t +
//! threads`, ... one at a time, and its share of the accepts, interleaving the two
//! non-blocking calls. Every connect is timed from its first call to the call that returned the
//! comm; every accept from the moment its thread started waiting for it.

use crate::error::{Error, Result};
use ferro_nccl_standin::net::{ListenComm, RecvComm, SendComm};
use ferro_nccl_standin::{Handle, NcclExt as _, Net};
use std::time::{Duration, Instant};

/// A plugin object handed from the thread that made it to the one that drives the comms.
struct Moved<T>(T);
// SAFETY: the plugin's comms are opaque pointers that NCCL itself makes on its proxy service
// threads and uses on its progress thread; the ABI places no thread affinity on them. Each one
// is used by one thread at a time here (made by one thread, then handed over once).
unsafe impl<T> Send for Moved<T> {}

/// The listen comm shared by the accepting threads.
struct SharedListen<'a>(&'a ListenComm);
// SAFETY: NCCL may call `accept` on a listen comm from any thread; the plugin serialises what
// it keeps per listener itself. The reference does not outlive the scope the threads run in.
unsafe impl Sync for SharedListen<'_> {}

/// The comms of one connect phase and its times.
#[derive(Debug, Default)]
pub(crate) struct Opened {
    /// Send comm `i` is the `i`-th connect.
    pub(crate) sends: Vec<SendComm>,
    /// In the order they were accepted.
    pub(crate) recvs: Vec<RecvComm>,
    /// Per connect, first call to comm.
    pub(crate) connect_ns: Vec<u64>,
    /// Per accept, from when its thread started waiting for it.
    pub(crate) accept_ns: Vec<u64>,
    /// From the start until every connect and accept of this process returned its comm.
    pub(crate) wall_ns: u64,
}

/// Thread `t`'s share of `n` items split over `threads`: the indices `t, t + threads, ...`.
pub(crate) fn share(n: usize, threads: usize, t: usize) -> impl Iterator<Item = usize> {
    (t..n).step_by(threads.max(1))
}

type ThreadOut = (
    Vec<(usize, Moved<SendComm>, u64)>,
    Vec<(Moved<RecvComm>, u64)>,
);

/// Connects `n` comms to `peer` and accepts `n` on `listen`, with `threads` threads. Gives up
/// when one thread sees no progress for `timeout`.
pub(crate) fn open(
    net: &Net,
    dev: i32,
    peer: &Handle,
    listen: &ListenComm,
    n: usize,
    threads: usize,
    timeout: Duration,
) -> Result<Opened> {
    let threads = threads.clamp(1, n.max(1));
    let shared = SharedListen(listen);
    let start = Instant::now();
    let outs: Vec<Result<ThreadOut>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let shared = &shared;
                s.spawn(move || {
                    let connects: Vec<usize> = share(n, threads, t).collect();
                    let accepts = connects.len();
                    drive(net, dev, peer, shared.0, &connects, accepts, timeout)
                        .map_err(|e| e.context(format!("connect thread {t}")))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::new("a connect thread panicked")))
            })
            .collect()
    });
    let wall_ns = start.elapsed().as_nanos() as u64;
    let mut o = Opened {
        wall_ns,
        ..Default::default()
    };
    let mut sends: Vec<Option<SendComm>> = (0..n).map(|_| None).collect();
    let mut first_err = None;
    for r in outs {
        match r {
            Ok((ss, rs)) => {
                for (i, c, ns) in ss {
                    sends[i] = Some(c.0);
                    o.connect_ns.push(ns);
                }
                for (c, ns) in rs {
                    o.recvs.push(c.0);
                    o.accept_ns.push(ns);
                }
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    o.sends = sends.into_iter().flatten().collect();
    if let Some(e) = first_err {
        close(net, o);
        return Err(e);
    }
    Ok(o)
}

/// Closes what an `Opened` holds (after a failure, or at the end of a phase); the first error.
pub(crate) fn close(net: &Net, o: Opened) -> Option<Error> {
    let mut first = None;
    for c in o.sends {
        if let Err(e) = net.close_send(c).call("closeSend") {
            first.get_or_insert(Error::from(e));
        }
    }
    for c in o.recvs {
        if let Err(e) = net.close_recv(c).call("closeRecv") {
            first.get_or_insert(Error::from(e));
        }
    }
    first
}

/// One thread: the connects `connects` (one in progress at a time) and `accepts` accepts.
fn drive(
    net: &Net,
    dev: i32,
    peer: &Handle,
    listen: &ListenComm,
    connects: &[usize],
    accepts: usize,
    timeout: Duration,
) -> Result<ThreadOut> {
    let mut sends = Vec::with_capacity(connects.len());
    let mut recvs = Vec::with_capacity(accepts);
    let mut next = connects.iter().copied();
    // The connect in progress: its index, its own copy of the handle (the plugin keeps its
    // progress in it), and when it started.
    let mut cur: Option<(usize, Handle, Instant)> = None;
    let mut accept_since = Instant::now();
    let mut last_progress = Instant::now();
    let mut idle: u32 = 0;
    loop {
        let mut progressed = false;
        if cur.is_none() {
            cur = next.next().map(|i| (i, *peer, Instant::now()));
        }
        if let Some((i, h, t0)) = cur.as_mut() {
            if let Some(c) = net.connect(dev, h).call("connect")? {
                sends.push((*i, Moved(c), t0.elapsed().as_nanos() as u64));
                cur = None;
                progressed = true;
            }
        }
        if recvs.len() < accepts {
            if let Some(c) = net.accept(listen).call("accept")? {
                recvs.push((Moved(c), accept_since.elapsed().as_nanos() as u64));
                accept_since = Instant::now();
                progressed = true;
            }
        }
        if cur.is_none() && sends.len() == connects.len() && recvs.len() == accepts {
            return Ok((sends, recvs));
        }
        if progressed {
            idle = 0;
            last_progress = Instant::now();
        } else {
            idle = idle.wrapping_add(1);
            if idle % 256 == 0 && last_progress.elapsed() > timeout {
                return Err(Error::new(format!(
                    "no progress for {:.0} s ({} of {} connects, {} of {accepts} accepts done)",
                    timeout.as_secs_f64(),
                    sends.len(),
                    connects.len(),
                    recvs.len()
                )));
            }
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shares_of_the_threads_cover_every_index_once() {
        for (n, threads) in [(16, 4), (10, 4), (3, 4), (1, 1), (0, 3)] {
            let mut all: Vec<usize> = (0..threads).flat_map(|t| share(n, threads, t)).collect();
            all.sort_unstable();
            assert_eq!(all, (0..n).collect::<Vec<_>>(), "n {n} threads {threads}");
        }
    }
}
