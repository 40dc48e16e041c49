//! Ferro's own exported statistics (not part of NCCL's ABI), beside NCCL's tables.

use crate::common::ncclResult_t;
use core::ffi::c_void;

/// Ferro's own statistics record (not part of NCCL's ABI): what `ferroNetStats_v1` fills. All
/// counts since the process (allocations) or the comm (the rest) started.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ferroNetStats_v1_t {
    /// Heap allocations made by the plugin's code in this process.
    pub allocations: u64,
    pub messages: u64,
    pub bytes: u64,
    pub requests: u64,
    pub retries: u64,
    pub send_posts: u64,
    pub recv_posts: u64,
    pub cts_writes: u64,
    pub polls: u64,
    pub empty_polls: u64,
    pub completions: u64,
}

/// `ferroNetStats_v1(comm, out)`: `comm` NULL fills only `allocations`.
pub type FerroNetStatsFn =
    unsafe extern "C" fn(comm: *mut c_void, out: *mut ferroNetStats_v1_t) -> ncclResult_t;

/// Symbol of Ferro's statistics function.
pub const FERRO_NET_STATS_SYMBOL: &str = "ferroNetStats_v1";

#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(core::mem::size_of::<ferroNetStats_v1_t>() == 88);
};
