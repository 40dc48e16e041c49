//! Transfer and verification helpers shared by the scenarios.

use crate::blocking::Backoff;
use crate::buffer::Buffer;
use crate::error::{HResult, HarnessError, NcclExt};
use crate::net::{Mr, Net, RecvComm, RecvSlot, Request, SendComm};
use crate::{bail, ensure};
use core::ffi::c_int;
use std::time::Duration;

/// Time to wait for a peer's handle.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(60);
/// Time for one connect/accept.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// Time for one message (the guest moves about 40 MB/s).
pub const OP_TIMEOUT: Duration = Duration::from_secs(60);
/// Time to wait at a barrier.
pub const BARRIER_TIMEOUT: Duration = Duration::from_secs(120);
/// Tag used where the scenario does not care (NCCL uses the sender's rank).
pub const TAG: c_int = 7;
/// Fill of receive buffers before a receive: bytes past the message must keep it.
pub const CANARY: u8 = 0xa5;

/// One send: `len` bytes at `off` of `buf`.
#[derive(Debug, Clone, Copy)]
pub struct SendOp<'a> {
    pub comm: &'a SendComm,
    pub buf: &'a Buffer,
    pub off: usize,
    pub len: usize,
    pub tag: c_int,
    pub mr: &'a Mr,
}

/// One single-buffer receive of at most `cap` bytes at `off` of `buf`.
#[derive(Debug, Clone, Copy)]
pub struct RecvOp<'a> {
    pub comm: &'a RecvComm,
    pub buf: &'a Buffer,
    pub off: usize,
    pub cap: usize,
    pub tag: c_int,
    pub mr: &'a Mr,
}

impl RecvOp<'_> {
    fn slot(&self) -> RecvSlot<'_> {
        RecvSlot {
            buf: self.buf,
            offset: self.off,
            len: self.cap,
            tag: self.tag,
            mr: self.mr,
        }
    }
}

/// Posts a send (retrying NULL), waits for it, and checks that `test` reported `len` bytes.
pub fn send_wait(net: &Net, op: SendOp<'_>) -> HResult<()> {
    let req = net.isend_blocking(op.comm, op.buf, op.off, op.len, op.tag, op.mr, OP_TIMEOUT)?;
    let sizes = net.wait(req, OP_TIMEOUT)?;
    ensure!(
        sizes.first() == Some(&size_c(op.len)),
        "send of {} bytes: test reported sizes {sizes:?}",
        op.len
    );
    Ok(())
}

/// Posts a receive (retrying NULL), waits for it, and returns the size `test` reported.
pub fn recv_wait(net: &Net, op: RecvOp<'_>) -> HResult<c_int> {
    let req = net.irecv_blocking(op.comm, &[op.slot()], OP_TIMEOUT)?;
    let sizes = net.wait(req, OP_TIMEOUT)?;
    match sizes.as_slice() {
        [s] => Ok(*s),
        other => bail!("single-buffer receive: test reported sizes {other:?}"),
    }
}

/// `len` as the ABI's int.
pub fn size_c(len: usize) -> c_int {
    c_int::try_from(len).unwrap_or(c_int::MAX)
}

/// Checks a received message: reported size, pattern, and untouched canary up to `cap`.
pub fn check_received(
    buf: &Buffer,
    off: usize,
    cap: usize,
    reported: c_int,
    len: usize,
    seed: u64,
    what: &str,
) -> HResult<()> {
    ensure!(
        reported == size_c(len),
        "{what}: test reported {reported} bytes, {len} were sent"
    );
    buf.verify_pattern(off, len, seed)
        .map_err(|e| HarnessError::Failed(format!("{what}: data mismatch: {e}")))?;
    buf.check_byte(off + len, cap - len, CANARY)
        .map_err(|e| HarnessError::Failed(format!("{what}: written past the message end: {e}")))?;
    Ok(())
}

/// Receives one message of `len` bytes (pattern `seed`) into `buf[0..cap]` with [`TAG`], after
/// filling the buffer with the canary, and checks it (see [`check_received`]).
#[allow(clippy::too_many_arguments)] // the receive's own fields plus what to expect
pub fn recv_checked(
    net: &Net,
    comm: &RecvComm,
    buf: &Buffer,
    cap: usize,
    mr: &Mr,
    len: usize,
    seed: u64,
    what: &str,
) -> HResult<()> {
    buf.fill_byte(0, cap, CANARY);
    let got = recv_wait(
        net,
        RecvOp {
            comm,
            buf,
            off: 0,
            cap,
            tag: TAG,
            mr,
        },
    )?;
    check_received(buf, 0, cap, got, len, seed, what)
}

/// Posts a receive and a send and drives both to completion together (neither side of a ring
/// may wait for one before posting the other). Returns (sent, received) sizes.
pub fn exchange(
    net: &Net,
    s: SendOp<'_>,
    r: RecvOp<'_>,
    timeout: Duration,
) -> HResult<(c_int, c_int)> {
    let mut b = Backoff::new(
        format!("exchange (send {} bytes, receive up to {})", s.len, r.cap),
        timeout,
    );
    let mut rreq: Option<Request> = None;
    let mut sreq: Option<Request> = None;
    let mut rdone: Option<c_int> = None;
    let mut sdone: Option<c_int> = None;
    loop {
        let mut progress = false;
        if rdone.is_none() && rreq.is_none() {
            rreq = net.irecv(r.comm, &[r.slot()]).call("irecv")?;
            progress |= rreq.is_some();
        }
        if sdone.is_none() && sreq.is_none() {
            sreq = net
                .isend(s.comm, s.buf, s.off, s.len, s.tag, s.mr)
                .call("isend")?;
            progress |= sreq.is_some();
        }
        if let Some(req) = &rreq {
            let (done, sizes) = net.test(req).call("test (receive)")?;
            if done {
                rdone = Some(sizes.first().copied().unwrap_or(-1));
                rreq = None;
                progress = true;
            }
        }
        if let Some(req) = &sreq {
            let (done, sizes) = net.test(req).call("test (send)")?;
            if done {
                sdone = Some(sizes.first().copied().unwrap_or(-1));
                sreq = None;
                progress = true;
            }
        }
        if let (Some(sent), Some(got)) = (sdone, rdone) {
            return Ok((sent, got));
        }
        if !progress {
            b.pause()?;
        }
    }
}

/// Posts sends in the given order, but round-robin over the ones still refused (NULL), so a
/// plugin may accept them in any order; returns the requests in the given order.
pub fn post_sends_any_order(
    net: &Net,
    ops: &[SendOp<'_>],
    timeout: Duration,
) -> HResult<Vec<Request>> {
    let mut b = Backoff::new(format!("{} isends to be posted", ops.len()), timeout);
    let mut reqs: Vec<Option<Request>> = ops.iter().map(|_| None).collect();
    loop {
        let mut all = true;
        let mut progress = false;
        for (op, slot) in ops.iter().zip(reqs.iter_mut()) {
            if slot.is_none() {
                *slot = net
                    .isend(op.comm, op.buf, op.off, op.len, op.tag, op.mr)
                    .call("isend")?;
                progress |= slot.is_some();
                all &= slot.is_some();
            }
        }
        if all {
            return Ok(reqs.into_iter().flatten().collect());
        }
        if !progress {
            b.pause()?;
        }
    }
}
