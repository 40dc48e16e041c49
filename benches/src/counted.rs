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
