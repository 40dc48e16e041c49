//! The `static inline` verbs of `<infiniband/verbs.h>`, ported: they dispatch through the
//! provider's `ibv_context_ops` table. A provider that leaves an entry NULL gets `EOPNOTSUPP`
//! back, never a jump through a null pointer.

use crate::error::{Error, Result};
use crate::sys::*;
use core::ffi::c_int;

/// # Safety
/// `qp` must point to a live QP whose context is live.
unsafe fn ops_of_qp(qp: *mut ibv_qp) -> ibv_context_ops {
    // SAFETY: per the contract, qp and qp->context are live provider objects.
    unsafe { (*(*qp).context).ops }
}

/// # Safety
/// `cq` must point to a live CQ whose context is live.
unsafe fn ops_of_cq(cq: *mut ibv_cq) -> ibv_context_ops {
    // SAFETY: per the contract, cq and cq->context are live provider objects.
    unsafe { (*(*cq).context).ops }
}

/// `ibv_post_send` (inlined into its callers: a call of its own costs as much as its body).
///
/// # Safety
/// `qp` is a live QP; `wr` is a valid chain of work requests whose scatter lists point to
/// registered memory that stays valid until the work completes.
#[inline]
pub unsafe fn post_send(qp: *mut ibv_qp, wr: *mut ibv_send_wr) -> Result<()> {
    // SAFETY: forwarded contract.
    let op = unsafe { ops_of_qp(qp) }
        .post_send
        .ok_or(Error::new("ibv_post_send", libc::EOPNOTSUPP))?;
    let mut bad: *mut ibv_send_wr = core::ptr::null_mut();
    // SAFETY: op is the provider's post_send for this QP; arguments per the contract.
    let rc = unsafe { op(qp, wr, &mut bad) };
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::new("ibv_post_send", rc))
    }
}

/// `ibv_post_recv`.
///
/// # Safety
/// As [`post_send`], for receive work requests.
pub unsafe fn post_recv(qp: *mut ibv_qp, wr: *mut ibv_recv_wr) -> Result<()> {
    // SAFETY: forwarded contract.
    let op = unsafe { ops_of_qp(qp) }
        .post_recv
        .ok_or(Error::new("ibv_post_recv", libc::EOPNOTSUPP))?;
    let mut bad: *mut ibv_recv_wr = core::ptr::null_mut();
    // SAFETY: op is the provider's post_recv for this QP; arguments per the contract.
    let rc = unsafe { op(qp, wr, &mut bad) };
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::new("ibv_post_recv", rc))
    }
}

/// `ibv_poll_cq` into room that need not be initialised: the provider fills the front; the
/// filled entries are returned.
///
/// # Safety
/// `cq` is a live CQ.
#[inline]
pub unsafe fn poll_cq_uninit(
    cq: *mut ibv_cq,
    wc: &mut [core::mem::MaybeUninit<ibv_wc>],
) -> Result<&[ibv_wc]> {
    // SAFETY: forwarded contract.
    let op = unsafe { ops_of_cq(cq) }
        .poll_cq
        .ok_or(Error::new("ibv_poll_cq", libc::EOPNOTSUPP))?;
    let room = c_int::try_from(wc.len()).unwrap_or(c_int::MAX);
    // SAFETY: wc has room for `room` entries (MaybeUninit<ibv_wc> has ibv_wc's layout); the
    // provider only writes them; cq is live.
    let rc = unsafe { op(cq, room, wc.as_mut_ptr().cast::<ibv_wc>()) };
    let n = usize::try_from(rc).map_err(|_| Error::new("ibv_poll_cq", -rc))?;
    let n = n.min(wc.len());
    // SAFETY: the provider filled the first `n` entries (its return value), and ibv_wc is
    // plain data.
    Ok(unsafe { core::slice::from_raw_parts(wc.as_ptr().cast::<ibv_wc>(), n) })
}

/// `ibv_poll_cq`: fills `wc` from the front, returns how many were filled.
///
/// # Safety
/// `cq` is a live CQ.
pub unsafe fn poll_cq(cq: *mut ibv_cq, wc: &mut [ibv_wc]) -> Result<usize> {
    // SAFETY: forwarded contract.
    let op = unsafe { ops_of_cq(cq) }
        .poll_cq
        .ok_or(Error::new("ibv_poll_cq", libc::EOPNOTSUPP))?;
    let n = c_int::try_from(wc.len()).unwrap_or(c_int::MAX);
    // SAFETY: wc has room for n entries; cq is live.
    let rc = unsafe { op(cq, n, wc.as_mut_ptr()) };
    usize::try_from(rc).map_err(|_| Error::new("ibv_poll_cq", -rc))
}

/// `ibv_req_notify_cq`.
///
/// # Safety
/// `cq` is a live CQ created with a completion channel.
pub unsafe fn req_notify_cq(cq: *mut ibv_cq, solicited_only: bool) -> Result<()> {
    // SAFETY: forwarded contract.
    let op = unsafe { ops_of_cq(cq) }
        .req_notify_cq
        .ok_or(Error::new("ibv_req_notify_cq", libc::EOPNOTSUPP))?;
    // SAFETY: cq is live.
    let rc = unsafe { op(cq, c_int::from(solicited_only)) };
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::new("ibv_req_notify_cq", rc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A provider whose ops table is all NULL: every ported inline verb must return EOPNOTSUPP,
    /// never jump through a null pointer.
    #[test]
    fn missing_provider_ops_are_errors_not_crashes() {
        // SAFETY: these C structs are plain data; all-zero is a valid (empty) value for them.
        let mut ctx: ibv_context = unsafe { core::mem::zeroed() };
        // SAFETY: as above.
        let mut qp: ibv_qp = unsafe { core::mem::zeroed() };
        // SAFETY: as above.
        let mut cq: ibv_cq = unsafe { core::mem::zeroed() };
        qp.context = &mut ctx;
        cq.context = &mut ctx;
        let mut swr = ibv_send_wr::default();
        let mut rwr = ibv_recv_wr::default();
        let mut wc = [ibv_wc::default(); 2];
        // SAFETY: qp/cq point at live (stack) structs whose context has a NULL ops table.
        unsafe {
            assert_eq!(
                post_send(&mut qp, &mut swr).unwrap_err().errno,
                libc::EOPNOTSUPP
            );
            assert_eq!(
                post_recv(&mut qp, &mut rwr).unwrap_err().errno,
                libc::EOPNOTSUPP
            );
            assert_eq!(
                poll_cq(&mut cq, &mut wc).unwrap_err().errno,
                libc::EOPNOTSUPP
            );
            assert_eq!(
                req_notify_cq(&mut cq, false).unwrap_err().errno,
                libc::EOPNOTSUPP
            );
        }
        assert!(Error::new("ibv_post_send", libc::EOPNOTSUPP).is_unsupported());
    }
}
