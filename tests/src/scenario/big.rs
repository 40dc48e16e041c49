//! One message above 2 GiB through a v9+ table (`size_t` sizes): [`BIG`] bytes, more than
//! 2^31, so the sender's plan cuts it into several RDMA writes (the port's write limit is 1 to
//! 2 GiB) and only the last one carries the immediate.
//!
//! Rank 0 receives into a buffer one page larger than the message (the tail keeps a canary),
//! rank 1 sends. The sender fills the message with a cheap position-dependent pattern (every
//! 8-byte word differs from every other: a piece written at the wrong offset, twice, or not at
//! all is caught), the receiver compares every word. Checks:
//! - both sides' `test` report `INT_MAX`: `sizes` is `int*` in every ABI version, so a size
//!   above `INT_MAX` is saturated, never wrapped negative;
//! - the whole message landed, byte for byte, at both ends, across every 1 GiB and 2 GiB
//!   boundary, and nothing past its end was written.
//!
//! The summary gives the time of each step (filling, registration, transfer, verification).
//! v7 and v8 cannot express such a size (`int`): the scenario refuses to run on them.

use super::Ctx;
use super::common::*;
use crate::blocking::Backoff;
use crate::buffer::{Buffer, PAGE, round_up, seed};
use crate::error::{HResult, NcclExt};
use crate::net::Comm;
use crate::{ensure, raw};
use core::ffi::{c_int, c_void};
use std::time::{Duration, Instant};

/// The message: 2.1 GiB, above 2^31 and below 2^32 (a request's 32-bit size).
const BIG: usize = 2_254_857_830;

/// Time for the whole message to cross (the guest's rxe moves some tens of MB/s).
const BIG_TIMEOUT: Duration = Duration::from_secs(900);

/// Word `k` of the pattern of `seed`: one multiply by an odd constant (a bijection of the
/// index), so no two words of one message are equal.
fn word(seed: u64, k: u64) -> u64 {
    seed ^ k.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Fills `len` bytes at the start of `buf` with the pattern of `seed` (the last partial word
/// with that word's first bytes, little-endian).
fn fill(buf: &Buffer, len: usize, seed: u64) {
    let base = buf.ptr_at(0, len).cast::<u8>();
    let words = len / 8;
    for k in 0..words {
        // SAFETY: 8k + 8 <= len, inside the range ptr_at checked; the buffer is page-aligned,
        // so the u64 is aligned.
        unsafe {
            base.add(8 * k)
                .cast::<u64>()
                .write(word(seed, k as u64).to_le())
        };
    }
    let last = word(seed, words as u64).to_le_bytes();
    for (j, b) in last.iter().enumerate().take(len - 8 * words) {
        // SAFETY: 8 * words + j < len, inside the checked range.
        unsafe { base.add(8 * words + j).write(*b) };
    }
}

/// Compares `len` bytes at the start of `buf` with the pattern of `seed`; names the first byte
/// that differs.
fn verify(buf: &Buffer, len: usize, seed: u64) -> Result<(), String> {
    let base = buf.ptr_at(0, len).cast::<u8>();
    let words = len / 8;
    let bad = |at: usize, got: u8, want: u8| {
        format!("byte {at} of {len} is {got:#04x}, expected {want:#04x}")
    };
    for k in 0..words {
        // SAFETY: 8k + 8 <= len, inside the checked range; aligned (page-aligned buffer). The
        // NIC's writes finished before `test` reported the receive done.
        let got = u64::from_le(unsafe { base.add(8 * k).cast::<u64>().read() });
        let want = word(seed, k as u64);
        if got != want {
            let (g, w) = (got.to_le_bytes(), want.to_le_bytes());
            let j = (0..8).find(|&j| g[j] != w[j]).unwrap_or(0);
            return Err(bad(8 * k + j, g[j], w[j]));
        }
    }
    let last = word(seed, words as u64).to_le_bytes();
    for (j, want) in last.iter().enumerate().take(len - 8 * words) {
        // SAFETY: 8 * words + j < len, inside the checked range.
        let got = unsafe { base.add(8 * words + j).read() };
        if got != *want {
            return Err(bad(8 * words + j, got, *want));
        }
    }
    Ok(())
}

/// Tests `req` until done; returns its first size as `test` reported it.
fn wait_big(ctx: &Ctx, req: *mut c_void, what: &str) -> HResult<c_int> {
    let mut b = Backoff::new(what, BIG_TIMEOUT);
    loop {
        let mut sizes = [-1 as c_int; 8];
        // SAFETY: a live request not yet reported done; room for its sizes.
        if unsafe { raw::test(ctx.net.table(), req, sizes.as_mut_ptr()) }.call("test")? == 1 {
            return Ok(sizes[0]);
        }
        b.pause()?;
    }
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

pub(super) fn run(ctx: &mut Ctx) -> HResult<String> {
    let net = ctx.net;
    let v = net.version();
    ensure!(
        v.has_size_t_sizes(),
        "big-message needs a table with size_t sizes (v9+); v{} passes int sizes, which cannot say {BIG}",
        v.number()
    );
    let s = seed(&[ctx.opts.scenario.id(), BIG as u64]);
    let t = net.table();
    let mut steps = Vec::new();
    if ctx.is_receiver() {
        let rc = net.accept_blocking(ctx.listen()?, CONNECT_TIMEOUT)?;
        let cap = round_up(BIG + PAGE, PAGE);
        let buf = Buffer::new(cap)?;
        let t0 = Instant::now();
        buf.fill_byte(BIG, cap - BIG, CANARY);
        let mr = net
            .reg_host(&rc, &buf)
            .call("regMr of the receive buffer")?;
        steps.push(format!("register {cap} bytes {}", secs(t0.elapsed())));
        let t1 = Instant::now();
        let mut b = Backoff::new("irecv to be posted", OP_TIMEOUT);
        let req = loop {
            // SAFETY: a live receive comm; the buffer is registered and stays mapped.
            let r = unsafe {
                raw::irecv_bytes(
                    t,
                    rc.as_ptr(),
                    &mut [buf.base()],
                    &[cap],
                    &mut [TAG],
                    &mut [mr.as_ptr()],
                    None,
                    core::ptr::null_mut(),
                )
            }
            .call("irecv")?;
            if !r.is_null() {
                break r;
            }
            b.pause()?;
        };
        let got = wait_big(ctx, req, "the 2.1 GiB receive to complete")?;
        steps.push(format!("transfer {}", secs(t1.elapsed())));
        ensure!(
            got == c_int::MAX,
            "v{}: test reported {got} for a receive of {BIG} bytes (want INT_MAX, saturated)",
            v.number()
        );
        let t2 = Instant::now();
        verify(&buf, BIG, s).map_err(|e| {
            crate::error::HarnessError::Failed(format!("v{} data mismatch: {e}", v.number()))
        })?;
        buf.check_byte(BIG, cap - BIG, CANARY).map_err(|e| {
            crate::error::HarnessError::Failed(format!("written past the message end: {e}"))
        })?;
        steps.push(format!("verify {}", secs(t2.elapsed())));
        net.dereg_mr(&rc, mr).call("deregMr")?;
        net.close_recv(rc).call("closeRecv")?;
        Ok(format!(
            "v{}: {BIG} bytes received into a {cap}-byte buffer, every byte checked, test reported INT_MAX ({}); {}",
            v.number(),
            c_int::MAX,
            steps.join(", ")
        ))
    } else {
        let mut h = ctx.peer_handle();
        let sc = net.connect_blocking(ctx.dev, &mut h, CONNECT_TIMEOUT)?;
        let buf = Buffer::new(BIG)?;
        let t0 = Instant::now();
        fill(&buf, BIG, s);
        steps.push(format!("fill {}", secs(t0.elapsed())));
        let t1 = Instant::now();
        let mr = net
            .reg_mr(&sc, &buf, 0, BIG, ferro_ffi::NCCL_PTR_TYPE_HOST)
            .call("regMr of the send buffer")?;
        steps.push(format!("register {BIG} bytes {}", secs(t1.elapsed())));
        let t2 = Instant::now();
        let mut b = Backoff::new("isend to be posted", OP_TIMEOUT);
        let req = loop {
            // SAFETY: a live send comm; the buffer is registered and stays mapped.
            let r = unsafe {
                raw::isend_bytes(
                    t,
                    sc.as_ptr(),
                    buf.base(),
                    BIG,
                    TAG,
                    mr.as_ptr(),
                    core::ptr::null_mut(),
                )
            }
            .call("isend")?;
            if !r.is_null() {
                break r;
            }
            b.pause()?;
        };
        let sent = wait_big(ctx, req, "the 2.1 GiB send to complete")?;
        steps.push(format!("transfer {}", secs(t2.elapsed())));
        ensure!(
            sent == c_int::MAX,
            "v{}: test reported {sent} for a send of {BIG} bytes (want INT_MAX, saturated)",
            v.number()
        );
        net.dereg_mr(&sc, mr).call("deregMr")?;
        net.close_send(sc).call("closeSend")?;
        Ok(format!(
            "v{}: {BIG} bytes sent, test reported INT_MAX; {}",
            v.number(),
            steps.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_round_trips_and_a_misplaced_word_is_named() {
        let len = 3 * PAGE + 5;
        let buf = Buffer::new(len).unwrap();
        fill(&buf, len, 42);
        assert_eq!(verify(&buf, len, 42), Ok(()));
        assert!(verify(&buf, len, 43).is_err(), "another seed");
        // A word from elsewhere (as a piece at the wrong offset would leave) is caught.
        buf.copy_from(8 * 100, &buf, 8 * 7, 8);
        let e = verify(&buf, len, 42).unwrap_err();
        assert!(e.starts_with("byte 800 "), "{e}");
        // So is a wrong byte in the partial last word.
        fill(&buf, len, 42);
        buf.fill_byte(len - 1, 1, !word(42, (len / 8) as u64).to_le_bytes()[4]);
        let e = verify(&buf, len, 42).unwrap_err();
        assert!(e.starts_with(&format!("byte {}", len - 1)), "{e}");
    }

    #[test]
    fn the_message_is_above_2_gib_and_within_a_32_bit_size() {
        const { assert!(BIG > 1 << 31 && BIG < 1 << 32 && BIG % 8 != 0) };
    }
}
