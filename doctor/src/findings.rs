//! Findings about the host (pure functions of facts): `/dev/infiniband`, NCCL variables, why
//! libibverbs does not list a device, load hints. Locked memory and `/dev/shm` are judged by
//! their checks (`node::limits`), not here.

use crate::*;
use ferro_verbs::loader::{DEFAULT_LIB, LIB_ENV, LoadError};

/// `/dev/infiniband` missing while the kernel shows RDMA devices: the container lacks them.
pub fn dev_infiniband_finding(present: bool, kernel_has_devices: bool) -> Option<Finding> {
    (!present && kernel_has_devices).then(|| {
        Finding::warning(
            "/dev/infiniband is missing although the kernel has RDMA devices: mount it into the container \
             (`--device=/dev/infiniband`, or in Kubernetes an RDMA device plugin)",
        )
    })
}

/// Remarks on `NCCL_NET_PLUGIN` and `NCCL_NET`.
pub fn env_findings(env: &NcclEnv, plugin_name: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    match env.net_plugin.as_deref().map(str::trim) {
        None | Some("") => out.push(Finding::note(
            "NCCL_NET_PLUGIN is unset: NCCL loads libnccl-net.so from the library path; set \
             NCCL_NET_PLUGIN=ferro (for libnccl-net-ferro.so) or to the plugin's path unless it is installed under that name",
        )),
        Some(v) if v.eq_ignore_ascii_case("none") => out.push(Finding::warning(
            "NCCL_NET_PLUGIN=none: NCCL loads no network plugin, so this plugin is never used",
        )),
        Some(_) => {}
    }
    if let Some(net) = env.net.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        if !net.eq_ignore_ascii_case(plugin_name) {
            out.push(Finding::warning(format!(
                "NCCL_NET={net}: NCCL uses only the network named {net:?}, not {plugin_name}; unset it or set NCCL_NET={plugin_name}"
            )));
        }
    }
    out
}

/// Why libibverbs does not list a device that sysfs shows.
pub fn unlisted_reason(
    library_loaded: bool,
    dev_infiniband_present: bool,
    custom_sysfs_root: bool,
) -> String {
    if !library_loaded {
        "libibverbs is not loaded".to_string()
    } else if custom_sysfs_root {
        "not listed by libibverbs (it reads the real /sys; --sysfs-root only changes what the doctor reads)".to_string()
    } else if !dev_infiniband_present {
        "not listed by libibverbs: /dev/infiniband is missing (mount it into the container: --device=/dev/infiniband)"
            .to_string()
    } else {
        "not listed by libibverbs: no provider library for its driver (install rdma-core's ibverbs-providers) \
         or no access to /dev/infiniband/uverbs*"
            .to_string()
    }
}

/// What to do about a libibverbs load failure (beyond the loader's own message).
pub fn load_hint(err: &LoadError, override_value: Option<&str>) -> Option<String> {
    if let Some(v) = override_value {
        return Some(format!(
            "{LIB_ENV}={v} chose this library; unset it to use {DEFAULT_LIB}"
        ));
    }
    match err {
        // The loader's message already says what to install.
        LoadError::NotFound { .. } => None,
        LoadError::MissingSymbol { .. } => Some(
            "install rdma-core's libibverbs (Debian/Ubuntu: libibverbs1 ibverbs-providers, RHEL: rdma-core)".to_string(),
        ),
    }
}
