//! The decision: which GPU-memory registration path a device offers NCCL, and why (not).
//!
//! Pure: everything comes in as an [`Inputs`] value, so every combination is unit-tested.
//!
//! - **DMA-BUF** is usable iff: not switched off (`FERRO_GDR_DISABLE=1`, `NCCL_DMABUF_ENABLE=0`),
//!   kernel ≥ 5.12 (an unknown kernel is no reason: the provider probe is authoritative), libibverbs
//!   has `ibv_reg_dmabuf_mr`, the provider probe says supported, and the CUDA driver is present,
//!   at least 11.7, with at least one GPU reporting `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`.
//! - **nvidia-peermem** is usable iff: not switched off (`FERRO_GDR_DISABLE=1`), a peer-memory
//!   module is loaded, and the CUDA driver is present with at least one GPU whose
//!   `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED` is not known to be 0.
//!
//! Without a CUDA driver both paths are unavailable, even when the NIC side could register a
//! DMA-BUF: NCCL only hands a plugin GPU memory when CUDA exists, so advertising GPU pointer
//! support there would promise something nothing can use. With several GPUs a path is usable when
//! any GPU supports it: NCCL checks the GPU side again per communicator
//! (`ncclDmaBufSupport(cudaDev)`), so advertising it never forces it on a GPU that lacks it.

use crate::cuda::{CudaState, DMABUF_MIN_DRIVER, GpuInfo};
use crate::host::{DMABUF_MIN_KERNEL, Kernel, Peermem, detect_peermem, read_kernel};
use crate::overrides::Overrides;
use crate::provider::ProviderProbe;
use ferro_ffi::{NCCL_PTR_CUDA, NCCL_PTR_DMABUF, NCCL_PTR_HOST};
use std::path::Path;

/// Everything the decision depends on, gathered by the thin probes of the sibling modules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inputs {
    /// [`detect_peermem`].
    pub peermem: Peermem,
    /// [`read_kernel`].
    pub kernel: Kernel,
    /// libibverbs exports `ibv_reg_dmabuf_mr` (`ferro_verbs::verbs()?.capabilities()`).
    pub verbs_has_reg_dmabuf_mr: bool,
    /// [`crate::provider::probe_provider`] for this device.
    pub provider: ProviderProbe,
    /// [`crate::cuda::probe_cuda`] (process-wide; probe once, clone per device).
    pub cuda: CudaState,
    /// The settings that turn the paths off (read by the plugin's configuration).
    pub overrides: Overrides,
}

impl Inputs {
    /// Gathers the host facts from `sys_root` / `proc_root`; the library, provider and CUDA
    /// facts and the overrides are passed in.
    pub fn gather(
        sys_root: &Path,
        proc_root: &Path,
        verbs_has_reg_dmabuf_mr: bool,
        provider: ProviderProbe,
        cuda: CudaState,
        overrides: Overrides,
    ) -> Inputs {
        Inputs {
            peermem: detect_peermem(sys_root),
            kernel: read_kernel(proc_root),
            verbs_has_reg_dmabuf_mr,
            provider,
            cuda,
            overrides,
        }
    }

    /// [`Inputs::gather`] on `/sys` and `/proc`.
    pub fn from_system(
        verbs_has_reg_dmabuf_mr: bool,
        provider: ProviderProbe,
        cuda: CudaState,
        overrides: Overrides,
    ) -> Inputs {
        Self::gather(
            Path::new("/sys"),
            Path::new("/proc"),
            verbs_has_reg_dmabuf_mr,
            provider,
            cuda,
            overrides,
        )
    }
}

/// The state of one registration path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathState {
    /// Usable: a short detail for logs (`"kernel 6.8, driver 12040"`).
    Usable(String),
    /// Not usable: every reason that applies, short and specific.
    Unavailable(Vec<String>),
}

impl PathState {
    pub fn is_usable(&self) -> bool {
        matches!(self, PathState::Usable(_))
    }

    /// The reasons (empty when usable).
    pub fn reasons(&self) -> &[String] {
        match self {
            PathState::Usable(_) => &[],
            PathState::Unavailable(r) => r,
        }
    }
}

/// What a device offers NCCL for GPU memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GdrDecision {
    /// `regMrDmaBuf` path.
    pub dmabuf: PathState,
    /// `regMr` on CUDA pointers through nvidia-peermem.
    pub peermem: PathState,
    /// `ncclNetProperties_v8_t::ptrSupport`: `NCCL_PTR_HOST` always, `| NCCL_PTR_CUDA` when
    /// peermem is usable, `| NCCL_PTR_DMABUF` when DMA-BUF is usable.
    pub ptr_support_bits: i32,
    /// One sentence for the plugin's INFO log and the doctor.
    pub summary: String,
}

impl GdrDecision {
    /// Either path is usable.
    pub fn is_on(&self) -> bool {
        self.dmabuf.is_usable() || self.peermem.is_usable()
    }
}

fn cuda_shared_reason(cuda: &CudaState) -> Option<String> {
    match cuda {
        CudaState::NotInstalled(why) => Some(
            if why.contains("No such file") || why.contains("cannot open shared object") {
                "no CUDA driver (libcuda.so.1 not found)".to_string()
            } else {
                format!("no CUDA driver ({why})")
            },
        ),
        CudaState::NoDevice => Some("CUDA driver sees no GPU".to_string()),
        CudaState::Error(why) => Some(format!("CUDA driver unusable ({why})")),
        CudaState::Present { .. } => None,
    }
}

fn kernel_text(kernel: &Kernel) -> String {
    match kernel.version() {
        Some(v) => format!("kernel {v}"),
        None => "kernel unknown".to_string(),
    }
}

fn gpu_list(indices: &[i32]) -> String {
    indices
        .iter()
        .map(i32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Appends `r` unless already present.
fn push_unique(list: &mut Vec<String>, r: &str) {
    if !list.iter().any(|x| x == r) {
        list.push(r.to_string());
    }
}

/// One path's own findings: why it cannot be used (empty: it can) and, when it can, what to
/// say about it.
#[derive(Debug, Default)]
struct PathFacts {
    reasons: Vec<String>,
    detail: String,
}

/// The GPUs with a capability, and the reason to give when none has it.
fn gpus_with(
    devices: &[GpuInfo],
    has: impl Fn(&GpuInfo) -> bool,
    what: &str,
) -> (Vec<i32>, Option<String>) {
    let with: Vec<i32> = devices.iter().filter(|g| has(g)).map(|g| g.index).collect();
    let none = with.is_empty().then(|| {
        if devices.len() == 1 {
            format!("GPU 0 does not support {what}")
        } else {
            format!("no GPU supports {what}")
        }
    });
    (with, none)
}

/// ", GPU a, b only" when only some GPUs have the capability.
fn only_some(with: &[i32], devices: &[GpuInfo]) -> String {
    if !with.is_empty() && with.len() < devices.len() {
        format!(", GPU {} only", gpu_list(with))
    } else {
        String::new()
    }
}

/// The DMA-BUF path: kernel, libibverbs, the provider's answer, the CUDA driver and GPUs.
fn dmabuf_path(i: &Inputs) -> PathFacts {
    let mut f = PathFacts::default();
    if let Some(v) = i.kernel.version().filter(|v| *v < DMABUF_MIN_KERNEL) {
        f.reasons.push(format!("kernel {v} < {DMABUF_MIN_KERNEL}"));
    }
    if !i.verbs_has_reg_dmabuf_mr {
        f.reasons
            .push("libibverbs lacks ibv_reg_dmabuf_mr (rdma-core < 34)".to_string());
    }
    match &i.provider {
        ProviderProbe::Supported => {}
        // Without the symbol the probe cannot run; the line above already says so.
        ProviderProbe::NotProbed(_) if !i.verbs_has_reg_dmabuf_mr => {}
        other => f.reasons.push(other.to_string()),
    }
    if let CudaState::Present {
        driver_version,
        devices,
    } = &i.cuda
    {
        let (with, none) = gpus_with(devices, |g| g.dma_buf, "dma-buf");
        if *driver_version < DMABUF_MIN_DRIVER {
            f.reasons.push(format!(
                "CUDA driver {driver_version} < {DMABUF_MIN_DRIVER} (no dma-buf export)"
            ));
        } else if let Some(r) = none {
            f.reasons.push(r);
        }
        f.detail = format!(
            "{}, driver {driver_version}{}",
            kernel_text(&i.kernel),
            only_some(&with, devices)
        );
    }
    f
}

/// The nvidia-peermem path: the module, the CUDA driver and GPUs.
fn peermem_path(i: &Inputs) -> PathFacts {
    let mut f = PathFacts::default();
    if !i.peermem.is_loaded() {
        f.reasons.push("nvidia-peermem not loaded".to_string());
    }
    if let CudaState::Present {
        driver_version,
        devices,
    } = &i.cuda
    {
        let (with, none) = gpus_with(devices, |g| g.gdr != Some(false), "GPUDirect RDMA");
        f.reasons.extend(none);
        if let Peermem::Loaded { version, .. } = &i.peermem {
            let module = i.peermem.module_name().unwrap_or("nvidia-peermem");
            let version = version
                .as_ref()
                .map(|v| format!(" {v}"))
                .unwrap_or_default();
            f.detail = format!(
                "{module}{version}, driver {driver_version}{}",
                only_some(&with, devices)
            );
        }
    }
    f
}

/// A path's state: usable with its detail, or every reason it is not (overrides first).
fn path_state(reasons: Vec<String>, detail: String) -> PathState {
    if reasons.is_empty() {
        PathState::Usable(detail)
    } else {
        PathState::Unavailable(reasons)
    }
}

/// Decides for the device called `device` (used only in the summary).
pub fn decide(device: &str, i: &Inputs) -> GdrDecision {
    let gdr_override: Vec<String> = i
        .overrides
        .gdr_disable
        .then(|| "disabled by FERRO_GDR_DISABLE=1".to_string())
        .into_iter()
        .collect();
    let dmabuf_override: Vec<String> = (!i.overrides.dmabuf_enable)
        .then(|| "disabled by NCCL_DMABUF_ENABLE=0".to_string())
        .into_iter()
        .collect();
    let shared: Vec<String> = cuda_shared_reason(&i.cuda).into_iter().collect();
    let dmabuf_facts = dmabuf_path(i);
    let peermem_facts = peermem_path(i);

    let dmabuf = path_state(
        [
            &gdr_override,
            &dmabuf_override,
            &dmabuf_facts.reasons,
            &shared,
        ]
        .into_iter()
        .flatten()
        .cloned()
        .collect(),
        dmabuf_facts.detail,
    );
    let peermem = path_state(
        [&gdr_override, &peermem_facts.reasons, &shared]
            .into_iter()
            .flatten()
            .cloned()
            .collect(),
        peermem_facts.detail,
    );

    // --- ptrSupport and the sentence.
    let mut bits = NCCL_PTR_HOST;
    if peermem.is_usable() {
        bits |= NCCL_PTR_CUDA;
    }
    if dmabuf.is_usable() {
        bits |= NCCL_PTR_DMABUF;
    }
    let summary = match (&dmabuf, &peermem) {
        (PathState::Usable(d), p) => {
            let also = if p.is_usable() {
                ", nvidia-peermem also usable"
            } else {
                ""
            };
            format!("{device}: GPUDirect RDMA on via DMA-BUF ({d}){also}")
        }
        (PathState::Unavailable(why), PathState::Usable(p)) => format!(
            "{device}: GPUDirect RDMA on via nvidia-peermem ({p}); DMA-BUF off: {}",
            why.join(", ")
        ),
        (PathState::Unavailable(_), PathState::Unavailable(_)) => {
            let mut all = Vec::new();
            for r in [
                &gdr_override,
                &dmabuf_override,
                &dmabuf_facts.reasons,
                &peermem_facts.reasons,
                &shared,
            ]
            .into_iter()
            .flatten()
            {
                push_unique(&mut all, r);
            }
            format!(
                "{device}: GPUDirect RDMA off: {}; NCCL will stage through host memory",
                all.join(", ")
            )
        }
    };
    GdrDecision {
        dmabuf,
        peermem,
        ptr_support_bits: bits,
        summary,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::host::{KernelVersion, PEERMEM_MARKERS};
    use std::path::PathBuf;

    const NO_CUDA: &str = "libcuda.so.1: cannot open shared object file: No such file or directory";

    fn gpu(index: i32, dma_buf: bool, gdr: Option<bool>) -> GpuInfo {
        GpuInfo {
            index,
            dma_buf,
            gdr,
        }
    }

    fn kernel(major: u32, minor: u32) -> Kernel {
        Kernel::Known {
            release: format!("{major}.{minor}.0-1-amd64"),
            version: KernelVersion::new(major, minor, 0),
        }
    }

    /// A host where everything works: both paths usable.
    fn good() -> Inputs {
        Inputs {
            peermem: Peermem::Loaded {
                marker: PathBuf::from("/sys/module/nvidia_peermem/version"),
                version: Some("550.54.15".into()),
            },
            kernel: kernel(6, 8),
            verbs_has_reg_dmabuf_mr: true,
            provider: ProviderProbe::Supported,
            cuda: CudaState::Present {
                driver_version: 12040,
                devices: vec![gpu(0, true, Some(true))],
            },
            overrides: Overrides::default(),
        }
    }

    /// The soft-RoCE test bed: rxe refuses dma-buf, no peermem, no CUDA.
    fn rxe() -> Inputs {
        Inputs {
            peermem: Peermem::NotLoaded,
            kernel: kernel(6, 1),
            verbs_has_reg_dmabuf_mr: true,
            provider: ProviderProbe::Unsupported(libc::EOPNOTSUPP),
            cuda: CudaState::NotInstalled(NO_CUDA.into()),
            overrides: Overrides::default(),
        }
    }

    fn reasons(p: &PathState) -> Vec<&str> {
        p.reasons().iter().map(String::as_str).collect()
    }

    #[test]
    fn everything_works() {
        let d = decide("mlx5_0", &good());
        assert_eq!(
            d.dmabuf,
            PathState::Usable("kernel 6.8, driver 12040".into())
        );
        assert_eq!(
            d.peermem,
            PathState::Usable("nvidia_peermem 550.54.15, driver 12040".into())
        );
        assert_eq!(d.ptr_support_bits, 7);
        assert!(d.is_on());
        assert_eq!(
            d.summary,
            "mlx5_0: GPUDirect RDMA on via DMA-BUF (kernel 6.8, driver 12040), nvidia-peermem also usable"
        );
    }

    #[test]
    fn softroce_test_bed_is_off_with_every_reason() {
        let d = decide("rxe0", &rxe());
        assert_eq!(d.ptr_support_bits, 1);
        assert!(!d.is_on());
        assert_eq!(
            d.summary,
            "rxe0: GPUDirect RDMA off: provider rejects dma-buf (EOPNOTSUPP), nvidia-peermem not loaded, no CUDA driver (libcuda.so.1 not found); NCCL will stage through host memory"
        );
        assert_eq!(
            reasons(&d.dmabuf),
            [
                "provider rejects dma-buf (EOPNOTSUPP)",
                "no CUDA driver (libcuda.so.1 not found)"
            ]
        );
        assert_eq!(
            reasons(&d.peermem),
            [
                "nvidia-peermem not loaded",
                "no CUDA driver (libcuda.so.1 not found)"
            ]
        );
    }

    #[test]
    fn dmabuf_only() {
        let mut i = good();
        i.peermem = Peermem::NotLoaded;
        let d = decide("mlx5_0", &i);
        assert_eq!(d.ptr_support_bits, 1 | 4);
        assert_eq!(
            d.summary,
            "mlx5_0: GPUDirect RDMA on via DMA-BUF (kernel 6.8, driver 12040)"
        );
        assert_eq!(reasons(&d.peermem), ["nvidia-peermem not loaded"]);
    }

    #[test]
    fn peermem_only() {
        let mut i = good();
        i.kernel = kernel(5, 10);
        let d = decide("mlx5_1", &i);
        assert_eq!(d.ptr_support_bits, 1 | 2);
        assert_eq!(reasons(&d.dmabuf), ["kernel 5.10 < 5.12"]);
        assert_eq!(
            d.summary,
            "mlx5_1: GPUDirect RDMA on via nvidia-peermem (nvidia_peermem 550.54.15, driver 12040); DMA-BUF off: kernel 5.10 < 5.12"
        );
    }

    #[test]
    fn ptr_bits_for_every_combination() {
        for dmabuf_ok in [false, true] {
            for peermem_ok in [false, true] {
                let mut i = good();
                if !dmabuf_ok {
                    i.provider = ProviderProbe::Unsupported(libc::EPROTONOSUPPORT);
                }
                if !peermem_ok {
                    i.peermem = Peermem::NotLoaded;
                }
                let d = decide("d", &i);
                let want = 1 | if peermem_ok { 2 } else { 0 } | if dmabuf_ok { 4 } else { 0 };
                assert_eq!(
                    d.ptr_support_bits, want,
                    "dmabuf {dmabuf_ok} peermem {peermem_ok}"
                );
                assert_eq!(d.dmabuf.is_usable(), dmabuf_ok);
                assert_eq!(d.peermem.is_usable(), peermem_ok);
                assert_eq!(d.is_on(), dmabuf_ok || peermem_ok);
            }
        }
    }

    #[test]
    fn each_provider_result() {
        let cases: [(ProviderProbe, Option<&str>); 5] = [
            (ProviderProbe::Supported, None),
            (
                ProviderProbe::Unsupported(95),
                Some("provider rejects dma-buf (EOPNOTSUPP)"),
            ),
            (
                ProviderProbe::Unsupported(93),
                Some("provider rejects dma-buf (EPROTONOSUPPORT)"),
            ),
            (
                ProviderProbe::NotProbed("no PD".into()),
                Some("dma-buf not probed (no PD)"),
            ),
            (
                ProviderProbe::Error("ibv_reg_dmabuf_mr(fd=-1) failed with EINVAL".into()),
                Some("dma-buf probe failed (ibv_reg_dmabuf_mr(fd=-1) failed with EINVAL)"),
            ),
        ];
        for (probe, want) in cases {
            let mut i = good();
            i.provider = probe.clone();
            let d = decide("d", &i);
            match want {
                None => assert!(d.dmabuf.is_usable(), "{probe:?}"),
                Some(r) => assert_eq!(reasons(&d.dmabuf), [r], "{probe:?}"),
            }
            // The provider never affects the peermem path.
            assert!(d.peermem.is_usable());
        }
    }

    #[test]
    fn missing_symbol_is_one_reason_not_two() {
        let mut i = good();
        i.verbs_has_reg_dmabuf_mr = false;
        i.provider = ProviderProbe::NotProbed("libibverbs has no ibv_reg_dmabuf_mr".into());
        let d = decide("d", &i);
        assert_eq!(
            reasons(&d.dmabuf),
            ["libibverbs lacks ibv_reg_dmabuf_mr (rdma-core < 34)"]
        );
        assert_eq!(d.ptr_support_bits, 1 | 2);
    }

    #[test]
    fn old_kernel_and_unknown_kernel() {
        let mut i = good();
        i.kernel = kernel(5, 10);
        assert_eq!(reasons(&decide("d", &i).dmabuf), ["kernel 5.10 < 5.12"]);
        i.kernel = kernel(5, 12);
        assert!(decide("d", &i).dmabuf.is_usable());
        // Unknown: no reason (the provider probe decides), but the detail says so.
        i.kernel = Kernel::Unknown("cannot read /proc/sys/kernel/osrelease".into());
        assert_eq!(
            decide("d", &i).dmabuf,
            PathState::Usable("kernel unknown, driver 12040".into())
        );
    }

    #[test]
    fn missing_libcuda_blocks_both_paths_even_when_the_nic_could() {
        let mut i = good();
        i.cuda = CudaState::NotInstalled(NO_CUDA.into());
        let d = decide("mlx5_0", &i);
        assert_eq!(d.ptr_support_bits, 1);
        assert_eq!(
            reasons(&d.dmabuf),
            ["no CUDA driver (libcuda.so.1 not found)"]
        );
        assert_eq!(
            reasons(&d.peermem),
            ["no CUDA driver (libcuda.so.1 not found)"]
        );
        assert_eq!(
            d.summary,
            "mlx5_0: GPUDirect RDMA off: no CUDA driver (libcuda.so.1 not found); NCCL will stage through host memory"
        );
        // Another dlopen failure keeps its text.
        i.cuda = CudaState::NotInstalled("libcuda.so.1: wrong ELF class: ELFCLASS32".into());
        assert_eq!(
            reasons(&decide("d", &i).dmabuf),
            ["no CUDA driver (libcuda.so.1: wrong ELF class: ELFCLASS32)"]
        );
    }

    #[test]
    fn cuda_without_gpu_or_failing() {
        let mut i = good();
        i.cuda = CudaState::NoDevice;
        let d = decide("d", &i);
        assert_eq!(d.ptr_support_bits, 1);
        assert_eq!(reasons(&d.dmabuf), ["CUDA driver sees no GPU"]);
        i.cuda = CudaState::Error("cuInit: CUDA_ERROR_UNKNOWN (999)".into());
        let d = decide("d", &i);
        assert_eq!(
            reasons(&d.peermem),
            ["CUDA driver unusable (cuInit: CUDA_ERROR_UNKNOWN (999))"]
        );
    }

    #[test]
    fn gpu_attributes() {
        // DMA-BUF attribute false: DMA-BUF off, peermem unaffected.
        let mut i = good();
        i.cuda = CudaState::Present {
            driver_version: 12040,
            devices: vec![gpu(0, false, Some(true))],
        };
        let d = decide("mlx5_0", &i);
        assert_eq!(reasons(&d.dmabuf), ["GPU 0 does not support dma-buf"]);
        assert_eq!(d.ptr_support_bits, 1 | 2);
        assert_eq!(
            d.summary,
            "mlx5_0: GPUDirect RDMA on via nvidia-peermem (nvidia_peermem 550.54.15, driver 12040); DMA-BUF off: GPU 0 does not support dma-buf"
        );

        // GDR attribute false on every GPU: peermem off.
        i.cuda = CudaState::Present {
            driver_version: 12040,
            devices: vec![gpu(0, true, Some(false)), gpu(1, true, Some(false))],
        };
        let d = decide("d", &i);
        assert_eq!(reasons(&d.peermem), ["no GPU supports GPUDirect RDMA"]);
        assert_eq!(d.ptr_support_bits, 1 | 4);

        // GDR attribute unknown (old driver): does not block peermem; old driver blocks DMA-BUF.
        i.cuda = CudaState::Present {
            driver_version: 11020,
            devices: vec![gpu(0, false, None)],
        };
        let d = decide("d", &i);
        assert_eq!(
            reasons(&d.dmabuf),
            ["CUDA driver 11020 < 11070 (no dma-buf export)"]
        );
        assert!(d.peermem.is_usable());

        // Mixed GPUs: usable, and the detail names the GPUs that can.
        i.cuda = CudaState::Present {
            driver_version: 12040,
            devices: vec![gpu(0, false, Some(false)), gpu(1, true, Some(true))],
        };
        let d = decide("d", &i);
        assert_eq!(
            d.dmabuf,
            PathState::Usable("kernel 6.8, driver 12040, GPU 1 only".into())
        );
        assert_eq!(
            d.peermem,
            PathState::Usable("nvidia_peermem 550.54.15, driver 12040, GPU 1 only".into())
        );
    }

    #[test]
    fn overrides() {
        let mut i = good();
        i.overrides.dmabuf_enable = false;
        let d = decide("mlx5_0", &i);
        assert_eq!(reasons(&d.dmabuf), ["disabled by NCCL_DMABUF_ENABLE=0"]);
        assert_eq!(d.ptr_support_bits, 1 | 2);
        assert_eq!(
            d.summary,
            "mlx5_0: GPUDirect RDMA on via nvidia-peermem (nvidia_peermem 550.54.15, driver 12040); DMA-BUF off: disabled by NCCL_DMABUF_ENABLE=0"
        );

        let mut i = good();
        i.overrides.gdr_disable = true;
        let d = decide("mlx5_0", &i);
        assert_eq!(d.ptr_support_bits, 1);
        assert_eq!(reasons(&d.dmabuf), ["disabled by FERRO_GDR_DISABLE=1"]);
        assert_eq!(reasons(&d.peermem), ["disabled by FERRO_GDR_DISABLE=1"]);
        assert_eq!(
            d.summary,
            "mlx5_0: GPUDirect RDMA off: disabled by FERRO_GDR_DISABLE=1; NCCL will stage through host memory"
        );

        // Overrides come first, and every other reason that applies is still listed.
        let mut i = rxe();
        i.overrides.gdr_disable = true;
        i.overrides.dmabuf_enable = false;
        i.kernel = kernel(5, 10);
        let d = decide("rxe0", &i);
        assert_eq!(
            d.summary,
            "rxe0: GPUDirect RDMA off: disabled by FERRO_GDR_DISABLE=1, disabled by NCCL_DMABUF_ENABLE=0, kernel 5.10 < 5.12, provider rejects dma-buf (EOPNOTSUPP), nvidia-peermem not loaded, no CUDA driver (libcuda.so.1 not found); NCCL will stage through host memory"
        );
    }

    #[test]
    fn gather_from_fake_trees_and_environment() {
        let sys = tempfile::tempdir().expect("tempdir");
        let proc_ = tempfile::tempdir().expect("tempdir");
        let osrelease = proc_.path().join("sys/kernel/osrelease");
        std::fs::create_dir_all(osrelease.parent().expect("parent")).expect("mkdir");
        std::fs::write(&osrelease, "6.1.0-56-amd64\n").expect("write");
        let marker = sys.path().join(PEERMEM_MARKERS[0]);
        std::fs::create_dir_all(marker.parent().expect("parent")).expect("mkdir");
        std::fs::write(&marker, "1.3\n").expect("write");
        let cuda = CudaState::Present {
            driver_version: 12020,
            devices: vec![gpu(0, true, Some(true))],
        };
        let i = Inputs::gather(
            sys.path(),
            proc_.path(),
            true,
            ProviderProbe::Supported,
            cuda,
            Overrides {
                dmabuf_enable: false,
                gdr_disable: false,
            },
        );
        assert_eq!(i.kernel.version(), Some(KernelVersion::new(6, 1, 0)));
        assert_eq!(
            i.peermem,
            Peermem::Loaded {
                marker,
                version: Some("1.3".into())
            }
        );
        assert!(!i.overrides.dmabuf_enable);
        assert!(!i.overrides.gdr_disable);
        let d = decide("mlx5_0", &i);
        assert_eq!(d.ptr_support_bits, 1 | 2);
        assert_eq!(
            d.summary,
            "mlx5_0: GPUDirect RDMA on via nvidia-peermem (nv_peer_mem 1.3, driver 12020); DMA-BUF off: disabled by NCCL_DMABUF_ENABLE=0"
        );
    }

    #[test]
    fn this_host_decides_off_without_panicking() {
        // No NVIDIA driver here: whatever else is true, GPUDirect RDMA is off.
        if Path::new("/proc/driver/nvidia/version").exists() {
            return;
        }
        let i = Inputs::from_system(
            true,
            ProviderProbe::NotProbed("host test".into()),
            crate::cuda::probe_cuda(),
            Overrides::default(),
        );
        let d = decide("host0", &i);
        assert_eq!(d.ptr_support_bits, 1);
        assert!(
            d.summary.starts_with("host0: GPUDirect RDMA off: "),
            "{}",
            d.summary
        );
        assert!(
            d.summary
                .contains("no CUDA driver (libcuda.so.1 not found)")
        );
    }
}
