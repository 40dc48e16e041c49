//! The scale mode's data path over `n` comms each way, all driven round-robin by one thread,
//! as NCCL's proxy thread drives its connections: the registrations, the identity exchange
//! (each receive comm learns which of the peer's send comms it is connected to), the cost of
//! `test` on idle comms, and streaming with every byte verified.
//!
//! Every message's content follows from (sending side, send comm index, message number, size),
//! so the receiver checks each message against what that comm's sender must have written:
//! a message on the wrong comm, out of order, torn or stale is caught.

use crate::error::{Error, Result};
use crate::session::{IdleWatch, PeerCheck, WaitCfg, test};
use ferro_nccl_standin::buffer::{Buffer, seed};
use ferro_nccl_standin::net::{Mr, RecvComm, Request as Req, SendComm};
use ferro_nccl_standin::{NcclExt as _, Net};
use std::collections::VecDeque;
use std::time::Instant;

/// Tag of the scale mode's data.
const TAG: i32 = 7;
/// Size of an identity message (the sender's comm index and side).
const ID_BYTES: usize = 8;

/// A process's comms with their registrations of the two pools.
#[derive(Debug, Default)]
pub(crate) struct Wired {
    pub(crate) sends: Vec<(SendComm, Mr)>,
    pub(crate) recvs: Vec<(RecvComm, Mr)>,
    /// Receive comm `j` is connected to the peer's send comm `src[j]` (after [`exchange_ids`]).
    pub(crate) src: Vec<u32>,
}

/// The two registered buffers every comm shares: messages are sent from slots of `send` and
/// received into slots of `recv`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pools {
    pub(crate) send: Buffer,
    pub(crate) recv: Buffer,
}

impl Pools {
    pub(crate) fn new(bytes: usize) -> Result<Pools> {
        Ok(Pools {
            send: Buffer::new(bytes)?,
            recv: Buffer::new(bytes)?,
        })
    }
}

/// Registers the pools on every comm (`regMr` per comm, as NCCL registers its buffers on
/// each connection).
pub(crate) fn wire(
    net: &Net,
    pools: &Pools,
    sends: Vec<SendComm>,
    recvs: Vec<RecvComm>,
) -> Result<Wired> {
    let mut w = Wired::default();
    for c in sends {
        let mr = net.reg_host(&c, &pools.send).call("regMr");
        match mr {
            Ok(mr) => w.sends.push((c, mr)),
            Err(e) => {
                let _ = net.close_send(c);
                unwire(net, w);
                return Err(e.into());
            }
        }
    }
    for c in recvs {
        match net.reg_host(&c, &pools.recv).call("regMr") {
            Ok(mr) => w.recvs.push((c, mr)),
            Err(e) => {
                let _ = net.close_recv(c);
                unwire(net, w);
                return Err(e.into());
            }
        }
    }
    Ok(w)
}

/// Deregisters and closes everything; the first error.
pub(crate) fn unwire(net: &Net, w: Wired) -> Option<Error> {
    let mut first = None;
    let mut keep = |r: std::result::Result<(), ferro_nccl_standin::HarnessError>| {
        if let Err(e) = r {
            first.get_or_insert(Error::from(e));
        }
    };
    for (c, mr) in w.sends {
        keep(net.dereg_mr(&c, mr).call("deregMr"));
        keep(net.close_send(c).call("closeSend"));
    }
    for (c, mr) in w.recvs {
        keep(net.dereg_mr(&c, mr).call("deregMr"));
        keep(net.close_recv(c).call("closeRecv"));
    }
    first
}

/// The identity message of send comm `i` of side `side` (0 server, 1 client).
fn id_word(side: u64, i: usize) -> u64 {
    (0xfe55_u64 << 48) | (side << 32) | i as u64
}

/// Posts the identity receive on every receive comm (into slot `j` of the receive pool).
pub(crate) fn post_ids(net: &Net, pools: &Pools, w: &Wired) -> Result<Vec<Req>> {
    let mut reqs = Vec::with_capacity(w.recvs.len());
    for (j, (c, mr)) in w.recvs.iter().enumerate() {
        let r = net
            .irecv_one(c, &pools.recv, j * ID_BYTES, ID_BYTES, TAG, mr)
            .call("irecv")?
            .ok_or_else(|| Error::new(format!("irecv on idle comm {j} was refused")))?;
        reqs.push(r);
    }
    Ok(reqs)
}

/// The cost of `test` on receives that cannot complete yet (the peer sends nothing until told):
/// ns per call on one comm, and ns per comm of a sweep over all of them.
pub(crate) fn idle_costs(net: &Net, reqs: &[Req]) -> Result<(f64, f64)> {
    let Some(&first) = reqs.first() else {
        return Ok((0.0, 0.0));
    };
    let calls = 2000;
    let t = Instant::now();
    for _ in 0..calls {
        if test(net, first)?.is_some() {
            return Err(Error::new("an idle receive completed before the peer sent"));
        }
    }
    let one = t.elapsed().as_nanos() as f64 / calls as f64;
    let sweeps = (8192 / reqs.len()).max(2);
    let t = Instant::now();
    for _ in 0..sweeps {
        for &r in reqs {
            if test(net, r)?.is_some() {
                return Err(Error::new("an idle receive completed before the peer sent"));
            }
        }
    }
    let sweep = t.elapsed().as_nanos() as f64 / (sweeps * reqs.len()) as f64;
    Ok((one, sweep))
}

/// Sends this side's identity on every send comm and completes the identity receives; fills
/// `w.src` and checks that the peer's send comms map one to one onto this side's receive comms.
pub(crate) fn exchange_ids(
    net: &Net,
    pools: &Pools,
    w: &mut Wired,
    reqs: Vec<Req>,
    side: u64,
    wait: &WaitCfg,
    peer: &mut Option<PeerCheck>,
) -> Result<()> {
    let n = w.sends.len();
    let peer_side = 1 - side;
    // The send pool's first n slots hold this side's identities.
    for i in 0..n {
        let p = pools.send.ptr_at(i * ID_BYTES, ID_BYTES).cast::<u64>();
        // SAFETY: 8 bytes inside the pool (checked by ptr_at); nothing is in flight on the send
        // pool before the identities are sent.
        unsafe { p.write_unaligned(id_word(side, i).to_le()) };
    }
    let mut pending: VecDeque<(usize, Option<Req>)> = (0..n).map(|i| (i, None)).collect();
    let mut recv: Vec<Option<Req>> = reqs.into_iter().map(Some).collect();
    let mut left = recv.len();
    let mut idle = IdleWatch::default();
    let what = || "exchanging the comms' identities".to_string();
    while !pending.is_empty() || left > 0 {
        let mut progressed = false;
        for _ in 0..pending.len() {
            let Some((i, r)) = pending.pop_front() else {
                break;
            };
            let (c, mr) = &w.sends[i];
            match r {
                None => match net
                    .isend(c, &pools.send, i * ID_BYTES, ID_BYTES, TAG, mr)
                    .call("isend")?
                {
                    Some(req) => {
                        progressed = true;
                        pending.push_back((i, Some(req)));
                    }
                    None => pending.push_back((i, None)),
                },
                Some(req) => {
                    if test(net, req)?.is_some() {
                        progressed = true;
                    } else {
                        pending.push_back((i, Some(req)));
                    }
                }
            }
        }
        for r in recv.iter_mut() {
            if let Some(req) = *r {
                if let Some(got) = test(net, req)? {
                    if got != ID_BYTES {
                        return Err(Error::new(format!("identity message of {got} bytes")));
                    }
                    *r = None;
                    left -= 1;
                    progressed = true;
                }
            }
        }
        if progressed {
            idle.progress();
        } else {
            idle.idle(wait, peer, &what)?;
        }
    }
    let mut seen = vec![false; w.recvs.len()];
    w.src.clear();
    for j in 0..w.recvs.len() {
        let p = pools.recv.ptr_at(j * ID_BYTES, ID_BYTES).cast::<u64>();
        // SAFETY: 8 bytes inside the pool (checked by ptr_at), written by the completed receive.
        let v = u64::from_le(unsafe { p.read_unaligned() });
        let i = (v & 0xffff_ffff) as usize;
        if v >> 32 != (0xfe55 << 16) | peer_side || i >= seen.len() || seen[i] {
            return Err(Error::new(format!(
                "receive comm {j} got identity {v:#x}: not one of the peer's {} send comms, or a duplicate",
                seen.len()
            )));
        }
        seen[i] = true;
        w.src.push(i as u32);
    }
    Ok(())
}

/// What one streaming phase did on this side.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Streamed {
    /// Messages sent (= received, each way).
    pub(crate) messages: u64,
    /// From the first post to the last completion on this side.
    pub(crate) elapsed_ns: u64,
}

/// The seed of message `k` of send comm `i` of `side` at `size`.
fn msg_seed(side: u64, i: u64, k: u64, size: usize) -> u64 {
    seed(&[0x5ca1e, side, i, k, size as u64])
}

/// Sends `per_comm` messages of `size` bytes on every send comm and receives as many on every
/// receive comm, round-robin, at most `window` in flight per comm and `slots` in all per
/// direction (each in-flight message owns a pool slot); verifies every received byte.
#[allow(clippy::too_many_arguments)]
pub(crate) fn stream(
    net: &Net,
    pools: &Pools,
    w: &Wired,
    side: u64,
    size: usize,
    per_comm: u64,
    window: usize,
    wait: &WaitCfg,
    peer: &mut Option<PeerCheck>,
) -> Result<Streamed> {
    let n = w.sends.len();
    let slots = (pools.send.len() / size.max(1)).min(n * window).max(1);
    let mut free_s: Vec<usize> = (0..slots).rev().collect();
    let mut free_r: Vec<usize> = (0..slots).rev().collect();
    let mut ring_s: Vec<VecDeque<(Req, usize)>> = vec![VecDeque::new(); n];
    let mut ring_r: Vec<VecDeque<(Req, usize)>> = vec![VecDeque::new(); w.recvs.len()];
    let mut sent = vec![0u64; n];
    let mut ready: Vec<Option<usize>> = vec![None; n];
    let mut posted = vec![0u64; w.recvs.len()];
    let mut got = vec![0u64; w.recvs.len()];
    let total = per_comm * (n as u64 + w.recvs.len() as u64);
    let mut done = 0u64;
    let mut idle = IdleWatch::default();
    let what = || format!("streaming {size}-byte messages over {n} comms");
    let t0 = Instant::now();
    while done < total {
        let mut progressed = false;
        for i in 0..n.max(w.recvs.len()) {
            if let Some((c, mr)) = w.sends.get(i) {
                while ring_s[i].len() < window && sent[i] < per_comm {
                    // A slot already filled with this comm's next message (its isend answered
                    // "not yet") is offered again as it is: filling it again per retry made the
                    // benchmark, not the plugin, the cost at thousands of comms.
                    let slot = match ready[i].take() {
                        Some(slot) => slot,
                        None => {
                            let Some(slot) = free_s.pop() else { break };
                            pools.send.fill_pattern(
                                slot * size,
                                size,
                                msg_seed(side, i as u64, sent[i], size),
                            );
                            slot
                        }
                    };
                    let off = slot * size;
                    match net
                        .isend(c, &pools.send, off, size, TAG, mr)
                        .call("isend")?
                    {
                        Some(r) => {
                            ring_s[i].push_back((r, slot));
                            sent[i] += 1;
                            progressed = true;
                        }
                        None => {
                            ready[i] = Some(slot);
                            break;
                        }
                    }
                }
                if let Some(&(r, slot)) = ring_s[i].front() {
                    if test(net, r)?.is_some() {
                        ring_s[i].pop_front();
                        free_s.push(slot);
                        done += 1;
                        progressed = true;
                    }
                }
            }
            if let Some((c, mr)) = w.recvs.get(i) {
                while ring_r[i].len() < window && posted[i] < per_comm {
                    let Some(slot) = free_r.pop() else { break };
                    match net
                        .irecv_one(c, &pools.recv, slot * size, size, TAG, mr)
                        .call("irecv")?
                    {
                        Some(r) => {
                            ring_r[i].push_back((r, slot));
                            posted[i] += 1;
                            progressed = true;
                        }
                        None => {
                            free_r.push(slot);
                            break;
                        }
                    }
                }
                if let Some(&(r, slot)) = ring_r[i].front() {
                    if let Some(len) = test(net, r)? {
                        ring_r[i].pop_front();
                        if len != size {
                            return Err(Error::new(format!(
                                "receive comm {i}: message {} has {len} bytes, expected {size}",
                                got[i]
                            )));
                        }
                        let src = u64::from(w.src[i]);
                        pools
                            .recv
                            .verify_pattern(slot * size, size, msg_seed(1 - side, src, got[i], size))
                            .map_err(|e| {
                                Error::new(format!(
                                    "receive comm {i} (peer's send comm {src}): message {} of {size} bytes: {e}",
                                    got[i]
                                ))
                            })?;
                        got[i] += 1;
                        free_r.push(slot);
                        done += 1;
                        progressed = true;
                    }
                }
            }
        }
        if progressed {
            idle.progress();
        } else {
            idle.idle(wait, peer, &what)?;
        }
    }
    Ok(Streamed {
        messages: per_comm * n as u64,
        elapsed_ns: t0.elapsed().as_nanos() as u64,
    })
}
