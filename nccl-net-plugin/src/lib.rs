//! `libnccl-net-ferro.so`: an NCCL network plugin (ncclNet v8) over ibverbs.
//!
//! The exported table [`ncclNetPlugin_v8`] points at thin `extern "C"` shims ([`shim`]). Each shim
//! converts its arguments, calls safe code, writes out-parameters and maps the `Result` to an
//! `ncclResult_t`, inside a panic boundary: no unwind ever crosses into NCCL.
#![allow(non_upper_case_globals)]

pub mod config;
pub mod discovery;
pub mod error;
pub mod events;
pub mod log;
pub mod mrcache;
pub mod oob;
pub mod plugin;
mod shim;
pub mod stats;
pub mod transport;

pub use ferro_ffi as ffi;

/// The plugin's name as NCCL logs it and matches it against `NCCL_NET` (case-insensitively).
pub const PLUGIN_NAME: &core::ffi::CStr = c"Ferro";
/// Crate version, reported by the doctor and in the init line.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The v8 function table NCCL finds with `dlsym("ncclNetPlugin_v8")`.
#[unsafe(no_mangle)]
pub static ncclNetPlugin_v8: ffi::ncclNet_v8_t = shim::TABLE;

/// Counts heap allocations (see [`stats`]); otherwise the system allocator.
#[global_allocator]
static ALLOCATOR: stats::CountingAlloc = stats::CountingAlloc;

/// Ferro's statistics (not an NCCL symbol): the process's allocations and a comm's counters.
#[unsafe(no_mangle)]
pub static ferroNetStats_v1: ffi::FerroNetStatsFn = shim::ferro_net_stats;
