//! Test side, the stand-in for NCCL: the one caller of the plugin's function tables (any ABI
//! version, v7 to v12), shared by the dlopen harness (`ferro-tests`), the benchmark
//! (`ferro-bench`) and the in-process tests of the plugin crate.
//!
//! - [`loader`]: `dlopen(path, RTLD_NOW|RTLD_LOCAL)` and `dlsym("ncclNetPlugin_v<N>")`, as NCCL
//!   loads a plugin, with `dlerror` text in the errors;
//! - [`table`]: a table of any version, and the order in which each NCCL release looks them up;
//! - [`net`]: [`net::Net`], a typed wrapper per table entry (over a loaded table, or over a table
//!   linked into the process);
//! - [`blocking`]: blocking helpers with deadlines over those calls, and the polling they share.
//! - [`raw`]: the table calls over raw pointers, allocation-free, converting arguments per version;
//! - [`props`]: every version's properties layout and one wide form of them, converted from one
//!   field list;
//! - [`handle`]: the 128-byte listen handle, its documented fixed prefix and its hex form (how
//!   processes pass it to each other).
//! - [`buffer`]: page-aligned, never-freed memory for registrations, with pattern fill/verify;
//!   [`mapped`]: page-aligned, pre-faulted mappings unmapped on drop (the benchmark's).
//! - [`logger`]: NCCL's variadic logger, written in C (`csrc/logger.c`), recording every line.
//! - [`error`]: a failed call, a deadline that passed, or a failed check.

pub mod blocking;
pub mod buffer;
pub mod error;
pub mod handle;
pub mod loader;
pub mod logger;
pub mod mapped;
pub mod net;
pub mod props;
pub mod raw;
pub mod table;

pub use error::{HResult, HarnessError, NcclExt};
pub use handle::{Handle, handle_socket_addr};
pub use net::{Net, Properties};
