//! The settings that turn GPU-memory registration off, as plain values. The plugin's
//! configuration reads them (with every other variable, once) and passes them in:
//!
//! - `NCCL_DMABUF_ENABLE` (NCCL's own variable, default 1): 0 turns DMA-BUF off, any other integer
//!   leaves it on (NCCL's `ncclParamDmaBufEnable() == 0` test);
//! - `FERRO_GDR_DISABLE` (this plugin's, default 0): 1 turns GPUDirect RDMA off entirely, both
//!   the DMA-BUF and the nvidia-peermem path, so NCCL stages through host memory.

/// `NCCL_DMABUF_ENABLE`.
pub const ENV_DMABUF_ENABLE: &str = "NCCL_DMABUF_ENABLE";
/// `FERRO_GDR_DISABLE`.
pub const ENV_GDR_DISABLE: &str = "FERRO_GDR_DISABLE";

/// The effective overrides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overrides {
    /// `NCCL_DMABUF_ENABLE != 0`.
    pub dmabuf_enable: bool,
    /// `FERRO_GDR_DISABLE == 1`.
    pub gdr_disable: bool,
}

impl Default for Overrides {
    fn default() -> Self {
        Overrides {
            dmabuf_enable: true,
            gdr_disable: false,
        }
    }
}
