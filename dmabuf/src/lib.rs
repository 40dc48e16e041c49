//! Layer 4 of 5, GPUDirect detection: what GPU-memory registration an RDMA device supports, as a
//! typed decision with reasons.
//!
//! NCCL registers GPU memory with a net plugin in one of two ways (the net plugin ABI's
//! registration calls): `regMrDmaBuf` with a DMA-BUF fd (the plugin advertises
//! `NCCL_PTR_DMABUF`), or `regMr` on a raw CUDA pointer, which only works when the
//! nvidia-peermem kernel module lets the RDMA stack pin GPU pages (`NCCL_PTR_CUDA`). Advertising
//! either when it does not work makes NCCL fail at registration time; advertising neither makes
//! NCCL stage GPU data through host memory, which is always correct.
//!
//! The crate separates *gathering* facts from *deciding*:
//!
//! - [`host`]: nvidia-peermem markers under `/sys` and the kernel release under `/proc`, each read
//!   from a root path so tests use fake trees;
//! - [`overrides`]: `NCCL_DMABUF_ENABLE` and `FERRO_GDR_DISABLE` as values (the plugin's configuration reads them);
//! - [`provider`]: the per-device `ibv_reg_dmabuf_mr(fd = -1)` probe NCCL itself uses;
//! - [`cuda`]: the CUDA driver (`libcuda.so.1`), loaded at run time if present, and its per-GPU
//!   DMA-BUF / GPUDirect RDMA attributes;
//! - [`decide`](mod@decide): the pure decision over an [`Inputs`] value, giving a
//!   [`GdrDecision`] (both paths' state, the `ptrSupport` bits, and one summary sentence for logs
//!   and the doctor).
//!
//! Typical use in the plugin, once per device at init:
//!
//! ```no_run
//! # fn demo(pd: &std::sync::Arc<ferro_verbs::Pd>) {
//! use ferro_dmabuf::{Inputs, Overrides, cuda, decide, provider};
//! let cuda = cuda::probe_cuda(); // process-wide: probe once, clone per device
//! let has_sym = ferro_verbs::verbs().map(|v| v.capabilities().reg_dmabuf_mr).unwrap_or(false);
//! let overrides = Overrides::default(); // from the plugin's configuration
//! let inputs = Inputs::from_system(has_sym, provider::probe_provider(pd), cuda, overrides);
//! let d = decide::decide(pd.context().name(), &inputs);
//! // log d.summary; advertise d.ptr_support_bits
//! # }
//! ```
pub mod cuda;
pub mod decide;
pub mod host;
pub mod overrides;
pub mod provider;

pub use cuda::{CudaState, GpuInfo};
pub use decide::{GdrDecision, Inputs, PathState, decide};
pub use host::{Kernel, KernelVersion, Peermem};
pub use overrides::Overrides;
pub use provider::ProviderProbe;
