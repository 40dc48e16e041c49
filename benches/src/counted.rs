//! The data-path calls of `bw` and `rate` into the plugin, each in a function of its own that
//! is never inlined: the sender's `isend` and `test` of the data, the receiver's `irecv` and
//! `test` of the data (not the control messages, not the counters). An instruction counter
//! collects inside exactly these three functions (`benches/count.sh`: callgrind's
//! `--toggle-collect=ferro_bench::counted::*`), so what it counts per message is the plugin's
//! own work (and the verbs library's) on the data path, whichever plugin is loaded.

use crate::error::Result;
use crate::session::{self, RegBuf};
use core::ffi::c_int;
use ferro_nccl_standin::Net;
use ferro_nccl_standin::net::{RecvComm, Request as Req, SendComm};

/// [`RegBuf::isend`] of a data message.
///
/// # Safety
/// As [`RegBuf::isend`].
#[inline(never)]
pub(crate) unsafe fn data_isend(
    buf: &RegBuf,
    net: &Net,
    comm: &SendComm,
    off: usize,
    len: usize,
    tag: c_int,
) -> Result<Option<Req>> {
    // SAFETY: forwarded contract.
    unsafe { buf.isend(net, comm, off, len, tag) }
}

/// [`RegBuf::irecv`] of a data message.
///
/// # Safety
/// As [`RegBuf::irecv`].
#[inline(never)]
pub(crate) unsafe fn data_irecv(
    buf: &RegBuf,
    net: &Net,
    comm: &RecvComm,
    off: usize,
    len: usize,
    tag: c_int,
) -> Result<Option<Req>> {
    // SAFETY: forwarded contract.
    unsafe { buf.irecv(net, comm, off, len, tag) }
}

/// [`session::test`] of a data request.
#[inline(never)]
pub(crate) fn data_test(net: &Net, req: Req) -> Result<Option<usize>> {
    session::test(net, req)
}

/// `sweeps` sweeps of `test` over every idle receive in `reqs` (the scale mode's counted
/// sweep, `--count-sweeps`): what NCCL's proxy does on every pass over idle connections. Fails
/// if a receive completes (the peer sends nothing until told).
#[inline(never)]
pub(crate) fn idle_sweeps(net: &Net, reqs: &[Req], sweeps: u32) -> Result<()> {
    for _ in 0..sweeps {
        for &r in reqs {
            if session::test(net, r)?.is_some() {
                return Err(crate::error::Error::new(
                    "an idle receive completed before the peer sent",
                ));
            }
        }
    }
    Ok(())
}

/// Callgrind's client requests, which the benchmark issues around the counted sweep: outside
/// valgrind each is a few instructions that change nothing (the special instruction sequence
/// rotates a register by a multiple of 64 bits and exchanges a register with itself).
pub(crate) mod callgrind {
    /// Callgrind's request numbers: the tool base `('C' << 24) | ('T' << 16)` plus the index.
    const BASE: u64 = (b'C' as u64) << 24 | (b'T' as u64) << 16;
    const DUMP_STATS_AT: u64 = BASE + 3;
    const START_INSTRUMENTATION: u64 = BASE + 4;
    const STOP_INSTRUMENTATION: u64 = BASE + 5;

    #[cfg(target_arch = "x86_64")]
    fn request(req: u64, arg: u64) {
        let args: [u64; 6] = [req, arg, 0, 0, 0, 0];
        let mut result: u64 = 0;
        // SAFETY: the sequence reads `args` (6 words, alive across the asm) through rax and
        // writes rdx (declared); rdi is rotated by 128 bits in all, so it is unchanged (still
        // declared clobbered), and `xchg rbx, rbx` changes nothing. No stack use.
        unsafe {
            core::arch::asm!(
                "rol rdi, 3",
                "rol rdi, 13",
                "rol rdi, 61",
                "rol rdi, 51",
                "xchg rbx, rbx",
                in("rax") args.as_ptr(),
                inout("rdx") result,
                inout("rdi") 0u64 => _,
                options(nostack),
            );
        }
        let _ = result;
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn request(_req: u64, _arg: u64) {}

    /// Starts instrumenting (a run with `--instr-atstart=no` runs at full speed until then).
    pub(crate) fn start_instrumentation() {
        request(START_INSTRUMENTATION, 0);
    }

    /// Stops instrumenting.
    pub(crate) fn stop_instrumentation() {
        request(STOP_INSTRUMENTATION, 0);
    }

    /// Writes the counts so far to a file of their own (named after the output file plus a
    /// sequence number, `desc:` line naming `what`) and zeroes them.
    pub(crate) fn dump_stats_at(what: &str) {
        let mut s = what.as_bytes().to_vec();
        s.push(0);
        request(DUMP_STATS_AT, s.as_ptr() as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::callgrind;

    #[test]
    fn callgrind_requests_change_nothing_outside_valgrind() {
        let mut x = 0u64;
        for i in 0..10u64 {
            callgrind::start_instrumentation();
            x = x.wrapping_mul(31).wrapping_add(i);
            callgrind::stop_instrumentation();
            callgrind::dump_stats_at("a test n=1 sweeps=1");
        }
        assert_eq!(
            x,
            (0..10u64).fold(0u64, |a, i| a.wrapping_mul(31).wrapping_add(i))
        );
    }
}
