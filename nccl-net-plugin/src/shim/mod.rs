//! The C boundary. Nothing here decides anything: arguments are checked for NULL and converted,
//! safe code is called, and its `Result` becomes an `ncclResult_t`. Every body runs inside
//! [`boundary`], the one panic boundary, which turns a panic into `ncclInternalError` with a WARN;
//! errors become result codes through the one error map ([`Error::code`]).
//!
//! - [`core`]: one version-independent function per table entry (sizes as `u64`, optional profiler
//!   handles and traffic class);
//! - [`tables`]: the exported tables v7 … v12 and their thin entry points, which only convert
//!   arguments (`int` or `size_t` sizes, config, context) and call the core;
//! - [`props`]: each version's properties layout, filled from the core's values;
//! - [`context`]: the per-communicator context of v11+.

mod context;
mod core;
mod props;
mod tables;

pub(crate) use tables::{
    TABLE_V7, TABLE_V8, TABLE_V9, TABLE_V10, TABLE_V11, TABLE_V12, ferro_net_stats,
};

use crate::error::{Error, Result};
use crate::warn;
use ferro_ffi::log_flags::{ALL, NET};
use ferro_ffi::*;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Runs `body` behind the panic boundary. Inlined into each entry point, so that the call that
/// succeeds pays only for the unwinding guard and one compare: the name, the error's text and
/// the panic's payload are looked at in [`failed`], out of line.
#[inline(always)]
fn boundary(func: &str, body: impl FnOnce() -> Result<()>) -> ncclResult_t {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => ncclResult_t::Success,
        other => failed(func, other),
    }
}

/// The error map of [`boundary`]: an error becomes its result code (with a WARN), a panic
/// `ncclInternalError`.
#[cold]
#[inline(never)]
fn failed(func: &str, outcome: std::thread::Result<Result<()>>) -> ncclResult_t {
    match outcome {
        Ok(Ok(())) => ncclResult_t::Success,
        Ok(Err(e)) => {
            warn!(NET, "{func}: {e}");
            e.code()
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            warn!(
                ALL,
                "{func}: internal error (caught panic: {what}); please report this"
            );
            ncclResult_t::InternalError
        }
    }
}

/// Writes `value` through an out-pointer NCCL gave us.
#[inline]
fn out<T>(name: &str, p: *mut T, value: T) -> Result<()> {
    if p.is_null() {
        return Err(null_out(name));
    }
    // SAFETY: non-NULL; NCCL passes a valid, aligned out-pointer for this argument.
    unsafe { p.write(value) };
    Ok(())
}

#[cold]
#[inline(never)]
fn null_out(name: &str) -> Error {
    Error::Usage(format!("{name} is NULL"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_and_errors_become_result_codes_not_unwinds() {
        assert_eq!(
            boundary("t", || panic!("boom")),
            ncclResult_t::InternalError
        );
        assert_eq!(
            boundary("t", || Err(Error::Remote("peer".into()))),
            ncclResult_t::RemoteError
        );
        assert_eq!(
            boundary("t", || Err(Error::Usage("x".into()))),
            ncclResult_t::InvalidUsage
        );
        assert_eq!(boundary("t", || Ok(())), ncclResult_t::Success);
    }

    #[test]
    fn out_pointers_are_checked() {
        assert!(out::<::core::ffi::c_int>("p", ::core::ptr::null_mut(), 1).is_err());
        let mut v = 0;
        assert!(out("p", &mut v, 5).is_ok());
        assert_eq!(v, 5);
    }
}
