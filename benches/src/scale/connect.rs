//! Opening the scale mode's comms: each process connects `n` comms to the peer's listen handle
//! and accepts `n`, with several threads at once (NCCL connects many peers concurrently from its
//! proxy service threads), each with a listen comm of its own. Thread `t` drives its share of
//! the connects one at a time, and as many accepts, interleaving the two non-blocking calls. Every connect is timed from its first call to the call that returned the
//! comm; every accept from the moment its thread started waiting for it.

use crate::error::{Error, Result};
use ferro_nccl_standin::net::{ListenComm, RecvComm, SendComm};
use ferro_nccl_standin::{Handle, NcclExt as _, Net};
use std::time::{Duration, Instant};

/// A plugin object handed from the thread that made it to the one that drives the comms.
pub(crate) struct Moved<T>(pub(crate) T);
// SAFETY: the plugin's comms are opaque pointers that NCCL itself makes on its proxy service
// threads and uses on its progress thread; the ABI places no thread affinity on them. Each one
// is used by one thread at a time here (made by one thread, then handed over once).
unsafe impl<T> Send for Moved<T> {}

/// A listen comm lent to the thread that accepts on it.
struct SharedListen<'a>(&'a ListenComm);
// SAFETY: NCCL may call `accept` on a listen comm from any thread (one thread at a time, as
// here: each listen comm is used by one thread only). The reference does not outlive the scope
// the threads run in.
unsafe impl Sync for SharedListen<'_> {}

/// The comms of one connect phase and its times.
#[derive(Debug, Default)]
pub(crate) struct Opened {
    /// In the order of the connecting threads, then of their connects.
    pub(crate) sends: Vec<SendComm>,
    /// In the order they were accepted.
    pub(crate) recvs: Vec<RecvComm>,
    /// Per connect, first call to comm.
    pub(crate) connect_ns: Vec<u64>,
    /// Per accept, from when its thread started waiting for it.
    pub(crate) accept_ns: Vec<u64>,
    /// From the start until every connect and accept of this process returned its comm.
    pub(crate) wall_ns: u64,
    /// `connect` calls made, all threads together (the calls that returned a comm included).
    pub(crate) connect_calls: u64,
    /// `accept` calls made, all threads together.
    pub(crate) accept_calls: u64,
    /// CPU time the process used (all threads) while opening: user, system.
    pub(crate) cpu_ns: (u64, u64),
}

/// Thread `t`'s share of `n` items split over `threads`: the indices `t, t + threads, ...`.
pub(crate) fn share(n: usize, threads: usize, t: usize) -> impl Iterator<Item = usize> {
    (t..n).step_by(threads.max(1))
}

/// What one thread opened: its send comms and receive comms with their times, and its calls.
struct ThreadOut {
    sends: Vec<(Moved<SendComm>, u64)>,
    recvs: Vec<(Moved<RecvComm>, u64)>,
    connect_calls: u64,
    accept_calls: u64,
}

/// The CPU time this process has used so far (all its threads): user and system, in ns.
fn process_cpu_ns() -> (u64, u64) {
    // SAFETY: an all-zero rusage is a valid value for the call to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid rusage for the call to fill.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0, 0);
    }
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    (ns(ru.ru_utime), ns(ru.ru_stime))
}

/// Opens `n` comms each way with one thread per listen comm: thread `t` connects its share
/// ([`share`]) to `peers[t]` and accepts as many on `listens[t]`, where the peer's thread `t`
/// connects the same share (NCCL never accepts on one listen comm from two threads: each of its
/// connections has a listen comm of its own). When every thread is done, and while they are
/// all still alive, `measure` runs: the kernel lists a verbs object under the thread that
/// made it, and a thread that has exited is no longer listed. Gives up when one thread sees no
/// progress for `timeout`.
pub(crate) fn open<M>(
    net: &Net,
    dev: i32,
    peers: &[Handle],
    listens: &[ListenComm],
    n: usize,
    timeout: Duration,
    measure: impl FnOnce() -> M,
) -> Result<(Opened, M)> {
    let threads = listens.len().min(peers.len()).max(1);
    if listens.len() != peers.len() || listens.is_empty() {
        return Err(Error::new(format!(
            "{} listen comms for {} peer handles",
            listens.len(),
            peers.len()
        )));
    }
    let shared: Vec<SharedListen<'_>> = listens.iter().map(SharedListen).collect();
    let gate = std::sync::RwLock::new(());
    let start = Instant::now();
    let cpu_start = process_cpu_ns();
    let (tx, rx) = std::sync::mpsc::channel::<(usize, Result<ThreadOut>)>();
    let (outs, wall_ns, measured) = std::thread::scope(|s| {
        let closed = gate.write().unwrap_or_else(|p| p.into_inner());
        for t in 0..threads {
            let (shared, gate, tx) = (&shared, &gate, tx.clone());
            s.spawn(move || {
                let connects = share(n, threads, t).count();
                let r = drive(net, dev, &peers[t], shared[t].0, connects, timeout)
                    .map_err(|e| e.context(format!("connect thread {t}")));
                let _ = tx.send((t, r));
                drop(tx);
                // Parked until the caller has measured.
                drop(gate.read());
            });
        }
        drop(tx);
        let mut outs: Vec<Option<Result<ThreadOut>>> = (0..threads).map(|_| None).collect();
        for (t, r) in rx.iter() {
            outs[t] = Some(r);
        }
        let wall_ns = start.elapsed().as_nanos() as u64;
        let cpu_end = process_cpu_ns();
        let cpu_ns = (
            cpu_end.0.saturating_sub(cpu_start.0),
            cpu_end.1.saturating_sub(cpu_start.1),
        );
        let measured = measure();
        drop(closed);
        (outs, (wall_ns, cpu_ns), measured)
    });
    let mut o = Opened {
        wall_ns: wall_ns.0,
        cpu_ns: wall_ns.1,
        ..Default::default()
    };
    let mut first_err = None;
    for (t, r) in outs.into_iter().enumerate() {
        match r.unwrap_or_else(|| Err(Error::new(format!("connect thread {t} panicked")))) {
            Ok(out) => {
                o.connect_calls += out.connect_calls;
                o.accept_calls += out.accept_calls;
                for (c, ns) in out.sends {
                    o.sends.push(c.0);
                    o.connect_ns.push(ns);
                }
                for (c, ns) in out.recvs {
                    o.recvs.push(c.0);
                    o.accept_ns.push(ns);
                }
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_err {
        close(net, o);
        return Err(e);
    }
    Ok((o, measured))
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

/// One thread: `connects` connects to `peer` (one in progress at a time, each from a fresh copy
/// of the handle: the plugin keeps its progress in it) and as many accepts on `listen`.
fn drive(
    net: &Net,
    dev: i32,
    peer: &Handle,
    listen: &ListenComm,
    connects: usize,
    timeout: Duration,
) -> Result<ThreadOut> {
    let mut sends = Vec::with_capacity(connects);
    let mut recvs = Vec::with_capacity(connects);
    let mut cur: Option<(Handle, Instant)> = None;
    let mut accept_since = Instant::now();
    let mut last_progress = Instant::now();
    let mut idle: u32 = 0;
    let (mut connect_calls, mut accept_calls) = (0u64, 0u64);
    loop {
        let mut progressed = false;
        if cur.is_none() && sends.len() < connects {
            cur = Some((*peer, Instant::now()));
        }
        if let Some((h, t0)) = cur.as_mut() {
            connect_calls += 1;
            if let Some(c) = net.connect(dev, h).call("connect")? {
                sends.push((Moved(c), t0.elapsed().as_nanos() as u64));
                cur = None;
                progressed = true;
            }
        }
        if recvs.len() < connects {
            accept_calls += 1;
            if let Some(c) = net.accept(listen).call("accept")? {
                recvs.push((Moved(c), accept_since.elapsed().as_nanos() as u64));
                accept_since = Instant::now();
                progressed = true;
            }
        }
        if cur.is_none() && sends.len() == connects && recvs.len() == connects {
            return Ok(ThreadOut {
                sends,
                recvs,
                connect_calls,
                accept_calls,
            });
        }
        if progressed {
            idle = 0;
            last_progress = Instant::now();
        } else {
            idle = idle.wrapping_add(1);
            if idle % 256 == 0 && last_progress.elapsed() > timeout {
                return Err(Error::new(format!(
                    "no progress for {:.0} s ({} of {connects} connects, {} accepts done)",
                    timeout.as_secs_f64(),
                    sends.len(),
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
