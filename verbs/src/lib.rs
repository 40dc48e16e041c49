//! Layer 2 of 5, the verbs layer: libibverbs, loaded at run time, and what the plugin needs from
//! it.
//!
//! - [`sys`]: hand-written `repr(C)` verbs types (layout checked against the system headers by a test).
//! - [`loader`]: `dlopen` of libibverbs with pinned symbol versions; optional symbols become capabilities.
//! - [`ops`]: the `static inline` verbs (post_send, post_recv, poll_cq, ...) ported to Rust.
//! - [`objects`]: safe owners of verbs objects (context, PD, CQ, QP, MR); children keep their parent alive.
//! - [`sysfs`]: device discovery from `/sys/class/infiniband` (GID table, netdev, PCI path), testable on a fake tree.
//! - [`gid`]: GID index selection (explicit or automatic RoCE v2 / address-family choice).
pub mod error;
pub mod gid;
pub mod loader;
pub mod objects;
pub mod ops;
pub mod sys;
pub mod sysfs;

pub use error::{Error, Result};
pub use loader::{LoadError, Verbs, verbs};
pub use objects::{
    AsyncEvent, Context, Cq, EventTarget, HostBuf, LiveCounts, Mr, Pd, Qp, QpCaps, device_names,
    live_counts,
};
