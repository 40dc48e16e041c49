//! The per-device DMA-BUF probe: does this device's provider (and the kernel under it) accept
//! `ibv_reg_dmabuf_mr` at all?
//!
//! Same probe as NCCL's `ncclIbDmaBufSupport`: a registration with `fd = -1` that is expected to
//! fail. A provider without DMA-BUF support (rxe, old kernels, old rdma-core) fails with
//! `EOPNOTSUPP` or `EPROTONOSUPPORT` before looking at the fd; one with support gets as far as the
//! kernel's `dma_buf_get(-1)`, which fails with `EBADF`. NCCL treats every errno other than the two
//! "unsupported" ones as support; here an unexpected errno is an [`ProviderProbe::Error`] instead,
//! so the plugin does not advertise a path it has not seen work.

use ferro_verbs::{Mr, Pd};
use std::fmt;
use std::sync::Arc;

/// The result of probing one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderProbe {
    /// The provider accepts DMA-BUF registrations.
    Supported,
    /// The provider refused: the errno (`EOPNOTSUPP` or `EPROTONOSUPPORT`).
    Unsupported(i32),
    /// The probe was not run: why.
    NotProbed(String),
    /// The probe failed in an unexpected way: the error text.
    Error(String),
}

impl ProviderProbe {
    pub fn is_supported(&self) -> bool {
        matches!(self, ProviderProbe::Supported)
    }
}

/// `EOPNOTSUPP` and friends by name, for messages.
pub fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::EBADF => "EBADF",
        libc::ENOSYS => "ENOSYS",
        libc::EINVAL => "EINVAL",
        libc::ENOMEM => "ENOMEM",
        libc::EPERM => "EPERM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::ENODEV => "ENODEV",
        libc::EIO => "EIO",
        _ => return format!("errno {errno}"),
    };
    name.to_string()
}

/// Maps the errno left by the `fd = -1` registration to a probe result.
pub fn classify_errno(errno: i32) -> ProviderProbe {
    match errno {
        libc::EOPNOTSUPP | libc::EPROTONOSUPPORT => ProviderProbe::Unsupported(errno),
        libc::EBADF => ProviderProbe::Supported,
        0 => ProviderProbe::Error("ibv_reg_dmabuf_mr(fd=-1) failed without setting errno".into()),
        other => ProviderProbe::Error(format!(
            "ibv_reg_dmabuf_mr(fd=-1) failed with {} ({})",
            errno_name(other),
            std::io::Error::from_raw_os_error(other)
        )),
    }
}

/// Probes the provider behind `pd` (NCCL uses a fresh PD for this; any PD of the device works).
/// Without `ibv_reg_dmabuf_mr` in libibverbs the probe is not run.
pub fn probe_provider(pd: &Arc<Pd>) -> ProviderProbe {
    if pd.context().verbs().reg_dmabuf_mr.is_none() {
        return ProviderProbe::NotProbed("libibverbs has no ibv_reg_dmabuf_mr".into());
    }
    // SAFETY: fd -1 is never a DMA-BUF, so no memory is mapped or pinned: the call is expected to
    // fail (EBADF with support, EOPNOTSUPP/EPROTONOSUPPORT without). Length 0, no access flags.
    let result = unsafe { Mr::reg_dmabuf(pd, 0, 0, 0, -1, 0) };
    match result {
        // Unexpected, but it means the provider handled the request: drop (deregister) it now.
        Ok(mr) => {
            drop(mr);
            ProviderProbe::Supported
        }
        Err(e) => classify_errno(e.errno),
    }
}

impl fmt::Display for ProviderProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProviderProbe::Supported => write!(f, "provider accepts dma-buf"),
            ProviderProbe::Unsupported(e) => {
                write!(f, "provider rejects dma-buf ({})", errno_name(*e))
            }
            ProviderProbe::NotProbed(why) => write!(f, "dma-buf not probed ({why})"),
            ProviderProbe::Error(why) => write!(f, "dma-buf probe failed ({why})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errnos_classify_like_nccl() {
        assert_eq!(classify_errno(95), ProviderProbe::Unsupported(95));
        assert_eq!(classify_errno(93), ProviderProbe::Unsupported(93));
        assert_eq!(classify_errno(9), ProviderProbe::Supported);
        assert!(matches!(classify_errno(22), ProviderProbe::Error(ref m) if m.contains("EINVAL")));
        assert!(matches!(classify_errno(0), ProviderProbe::Error(ref m) if m.contains("without")));
        assert!(
            matches!(classify_errno(1234), ProviderProbe::Error(ref m) if m.contains("errno 1234"))
        );
    }

    #[test]
    fn display_is_short() {
        assert_eq!(
            ProviderProbe::Unsupported(libc::EOPNOTSUPP).to_string(),
            "provider rejects dma-buf (EOPNOTSUPP)"
        );
        assert_eq!(
            ProviderProbe::Unsupported(libc::EPROTONOSUPPORT).to_string(),
            "provider rejects dma-buf (EPROTONOSUPPORT)"
        );
    }
}
