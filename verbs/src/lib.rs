//! Layer 2 of 5, the verbs layer: libibverbs, loaded at run time, and what the plugin needs from
//! it.
//!
//! - [`sys`]: hand-written `repr(C)` verbs types (layout checked against the system headers by a test).
//! - [`dl`]: the dynamic loader (open once with `RTLD_NOW|RTLD_LOCAL`, never close; `dlsym`,
//!   `dlvsym`), shared with the GPUDirect detection's CUDA driver.
//! - [`loader`]: `dlopen` of libibverbs with pinned symbol versions; optional symbols become capabilities.
//! - [`ops`]: the `static inline` verbs (post_send, post_recv, poll_cq, ...) ported to Rust.
//! - Safe owners of verbs objects, one file each ([`context`], [`pd`], [`cq`], [`qp`], [`mr`]):
//!   one owner per object, created the moment the verb succeeds, destroyed exactly once in
//!   `Drop`. Each child keeps its parent alive through an `Arc` (`Mr → Pd → Context`,
//!   `Qp → Pd + Cq`, `Cq → Context`), so destruction order is always child first, whatever order
//!   the plugin's comms are closed in. `Drop` never panics: a failed destroy is reported through
//!   the hook of [`live`] and the object is leaked.
//! - [`wr`]: typed work-request chains (RDMA write, RDMA read, empty receive), posted by
//!   [`Qp::post`] and [`Qp::post_recv_empty`]: the workspace's only raw work requests.
//! - [`hostbuf`] and [`volatile`]: plugin-owned host memory, and bounds-checked volatile
//!   access to it (the NIC writes it behind the program's back).
//! - [`sysfs`]: device discovery from `/sys/class/infiniband` (GID table, netdev, PCI path), testable on a fake tree.
//! - [`gid`]: GID index selection (explicit or automatic RoCE v2 / address-family choice).
pub mod context;
pub mod cq;
pub mod dl;
pub mod error;
pub mod gid;
pub mod hostbuf;
pub mod live;
pub mod loader;
pub mod mr;
pub mod ops;
pub mod pd;
pub mod qp;
pub mod sys;
pub mod sysfs;
pub mod volatile;
pub mod wr;

pub use context::{AsyncEvent, Context, EventTarget, device_names};
pub use cq::Cq;
pub use error::{Error, Result};
pub use hostbuf::HostBuf;
pub use live::{LiveCounts, live_counts, set_drop_error_hook};
pub use loader::{LoadError, Verbs, verbs};
pub use mr::Mr;
pub use pd::Pd;
pub use qp::{Qp, QpCaps};
pub use volatile::VolatileRegion;
pub use wr::{Fixed, RemoteAddr, SendChain, SendFlags, Sge};
