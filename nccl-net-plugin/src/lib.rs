//! Layer 5 of 5, the plugin `libnccl-net-ferro.so`: an NCCL network plugin (ncclNet v7 to v12)
//! over ibverbs.
//!
//! The exported tables [`ncclNetPlugin_v7`] … [`ncclNetPlugin_v12`] point at thin `extern "C"`
//! shims ([`shim`]) over one version-independent core. Each shim converts its arguments, calls
//! safe code, writes out-parameters and maps the `Result` to an `ncclResult_t`, inside a panic
//! boundary: no unwind ever crosses into NCCL.
#![allow(non_upper_case_globals)]

pub mod config;
pub mod discovery;
pub mod error;
pub mod events;
pub mod log;
pub mod mrcache;
pub mod oob;
pub mod plugin;
pub mod profiler;
pub mod rails;
mod shim;
pub mod stats;
mod sync;
pub mod transport;
pub mod vnic;

pub use ferro_ffi as ffi;

/// The plugin's name as NCCL logs it and matches it against `NCCL_NET` (case-insensitively).
pub const PLUGIN_NAME: &core::ffi::CStr = c"Ferro";
/// Crate version, reported by the doctor and in the init line.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The v7 table (NCCL 2.19 loads only this one): `int` sizes, properties without `regIsGlobal`.
#[unsafe(no_mangle)]
pub static ncclNetPlugin_v7: ffi::ncclNet_v7_t = shim::TABLE_V7;

/// The v8 table (NCCL 2.20 to 2.23 pick it; later versions prefer a newer one).
#[unsafe(no_mangle)]
pub static ncclNetPlugin_v8: ffi::ncclNet_v8_t = shim::TABLE_V8;

/// The v9 table (NCCL 2.24, 2.25): `size_t` sizes, `maxP2pBytes`, `forceFlush`.
#[unsafe(no_mangle)]
pub static ncclNetPlugin_v9: ffi::ncclNet_v9_t = shim::TABLE_V9;

/// The v10 table (NCCL 2.26, 2.27): profiler events, the communicator's traffic class.
#[unsafe(no_mangle)]
pub static ncclNetPlugin_v10: ffi::ncclNet_v10_t = shim::TABLE_V10;

/// The v11 table (NCCL 2.28, 2.29): a context per communicator, `finalize`, `setNetAttr`.
#[unsafe(no_mangle)]
pub static ncclNetPlugin_v11: ffi::ncclNet_v11_t = shim::TABLE_V11;

/// The v12 table (NCCL 2.30): v11 with rail and plane ids in the properties.
#[unsafe(no_mangle)]
pub static ncclNetPlugin_v12: ffi::ncclNet_v12_t = shim::TABLE_V12;

/// Counts heap allocations (see [`stats`]); otherwise the system allocator.
#[global_allocator]
static ALLOCATOR: stats::CountingAlloc = stats::CountingAlloc;

/// Ferro's statistics (not an NCCL symbol): the process's allocations and a comm's counters.
#[unsafe(no_mangle)]
pub static ferroNetStats_v1: ffi::FerroNetStatsFn = shim::ferro_net_stats;
