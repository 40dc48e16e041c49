//! The pod's view: the interface `NCCL_SOCKET_IFNAME` names (the seeds' Multus `net1`), the
//! `/dev/infiniband/uverbs*` devices the RDMA device plugin gave the container, `CAP_IPC_LOCK` or
//! an unlimited memlock, the size of `/dev/shm`, and whether this runs in a container at all.
//!
//! Everything is read from files under the roots (`<proc>/self/status`, `<proc>/self/limits`,
//! `<proc>/self/mounts`, `<proc>/1/cgroup`), so the same reader serves a real pod and a fake tree.

use super::*;
use crate::{SHM_WARN_BELOW, format_bytes};
use nccl_net_ferro::oob::ifname_matches;

/// What kind of place this runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Container {
    /// Kubernetes pod: the evidence.
    Pod(String),
    /// Another container runtime: the evidence.
    Container(String),
    Host,
}

/// The pod-side facts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodFacts {
    pub socket_ifname: Option<String>,
    pub net_gdr_level: Option<String>,
    pub gdrcopy_enable: Option<String>,
    /// Interfaces in this network namespace (`class/net`).
    pub netdevs: Vec<String>,
    /// Addresses (`getifaddrs`).
    pub ifaddrs: Vec<IfAddr>,
    /// Entries of `<dev>/infiniband`; `None` when absent.
    pub dev_infiniband: Option<Vec<String>>,
    /// `CapEff` has `CAP_IPC_LOCK` (`None`: unknown).
    pub cap_ipc_lock: Option<bool>,
    /// `Max locked memory` soft limit: `Some(None)` unlimited, `None` unknown.
    pub memlock: Option<Option<u64>>,
    /// `/dev/shm` from the mount table: `Some(size)`; `None` when not mounted.
    pub shm_bytes: Option<u64>,
    pub container: Option<Container>,
}

/// Reads the pod facts under `roots`; `ifaddrs` and `env` are passed in.
pub fn read_pod(
    roots: &Roots,
    ifaddrs: Vec<IfAddr>,
    env: &dyn Fn(&str) -> Option<String>,
) -> PodFacts {
    let proc = &roots.proc;
    let dev_ib = roots.dev.join("infiniband");
    let status = pci::read(&proc.join("self/status"));
    PodFacts {
        socket_ifname: env("NCCL_SOCKET_IFNAME").filter(|s| !s.is_empty()),
        net_gdr_level: env("NCCL_NET_GDR_LEVEL").filter(|s| !s.is_empty()),
        gdrcopy_enable: env("NCCL_GDRCOPY_ENABLE").filter(|s| !s.is_empty()),
        netdevs: pci::dir_names(&roots.sys.join("class/net")),
        ifaddrs,
        dev_infiniband: dev_ib.is_dir().then(|| pci::dir_names(&dev_ib)),
        cap_ipc_lock: status.as_deref().and_then(crate::cap_ipc_lock_from_status),
        memlock: pci::read(&proc.join("self/limits")).and_then(|t| memlock_from_limits(&t)),
        shm_bytes: pci::read(&proc.join("self/mounts")).and_then(|m| {
            let meminfo = pci::read(&proc.join("meminfo")).unwrap_or_default();
            shm_from_mounts(&m, &meminfo)
        }),
        container: Some(detect_container(proc, env)),
    }
}

/// The soft `Max locked memory` of `/proc/self/limits`: `Some(None)` when unlimited.
pub fn memlock_from_limits(text: &str) -> Option<Option<u64>> {
    let rest = text
        .lines()
        .find_map(|l| l.strip_prefix("Max locked memory"))?;
    let soft = rest.split_whitespace().next()?;
    if soft == "unlimited" {
        return Some(None);
    }
    soft.parse().ok().map(Some)
}

/// The size of the `/dev/shm` mount (the last one wins): its `size=` option (`k`, `m`, `g`
/// suffixes), else tmpfs's default of half of `MemTotal`.
pub fn shm_from_mounts(mounts: &str, meminfo: &str) -> Option<u64> {
    let opts = mounts.lines().rev().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 4 && f[1] == "/dev/shm").then(|| f[3].to_string())
    })?;
    if let Some(size) = opts.split(',').find_map(|o| o.strip_prefix("size=")) {
        let (num, mult) = match size.char_indices().last() {
            Some((i, 'k' | 'K')) => (&size[..i], 1u64 << 10),
            Some((i, 'm' | 'M')) => (&size[..i], 1 << 20),
            Some((i, 'g' | 'G')) => (&size[..i], 1 << 30),
            _ => (size, 1),
        };
        return num.parse::<u64>().ok().map(|n| n.saturating_mul(mult));
    }
    let total_kb: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(total_kb * 1024 / 2)
}

/// A Kubernetes pod (`KUBERNETES_SERVICE_HOST`, a `kubepods` cgroup), another container (a
/// runtime's cgroup, an overlay root) or the host.
pub fn detect_container(proc: &Path, env: &dyn Fn(&str) -> Option<String>) -> Container {
    let cgroup = pci::read(&proc.join("1/cgroup")).unwrap_or_default();
    if let Some(line) = cgroup.lines().find(|l| l.contains("kubepods")) {
        return Container::Pod(format!("/proc/1/cgroup: {line}"));
    }
    if env("KUBERNETES_SERVICE_HOST").is_some() {
        return Container::Pod("KUBERNETES_SERVICE_HOST is set".to_string());
    }
    for rt in ["docker", "containerd", "crio", "libpod"] {
        if let Some(line) = cgroup.lines().find(|l| l.contains(rt)) {
            return Container::Container(format!("/proc/1/cgroup: {line}"));
        }
    }
    let mountinfo = pci::read(&proc.join("self/mountinfo")).unwrap_or_default();
    let overlay_root = mountinfo.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.get(4) == Some(&"/") && l.contains(" - overlay ")
    });
    if overlay_root {
        return Container::Container("the root filesystem is an overlay mount".to_string());
    }
    Container::Host
}

/// The pod checks.
pub fn pod_checks(f: &NodeFacts) -> Vec<Check> {
    let p = &f.pod;
    let mut out = vec![ifname_check(p)];
    out.extend(uverbs_check(f));
    out.push(memlock_check(p));
    out.push(shm_check(p));
    out.push(match &p.container {
        Some(Container::Pod(e)) => Check::new("pod.container", "node", Status::Info, "running in a Kubernetes pod").evidence(e.clone()),
        Some(Container::Container(e)) => Check::new("pod.container", "node", Status::Info, "running in a container").evidence(e.clone()),
        Some(Container::Host) | None => Check::new(
            "pod.container",
            "node",
            Status::Info,
            "running on the host, not in a container: the pod checks describe this host's shell, not a pod",
        ),
    });
    out
}

fn ifname_check(p: &PodFacts) -> Check {
    let Some(filter) = &p.socket_ifname else {
        return Check::new(
            "pod.socket_ifname",
            "NCCL_SOCKET_IFNAME",
            Status::Info,
            "NCCL_SOCKET_IFNAME unset: NCCL bootstraps over the first suitable interface (in a pod \
             that is eth0, the cluster network); set it to the SR-IOV interface (net1) to keep NCCL's \
             own sockets on the fast network",
        );
    };
    let mut names: Vec<String> = p.netdevs.clone();
    names.extend(p.ifaddrs.iter().map(|a| a.name.clone()));
    names.sort();
    names.dedup();
    let matched: Vec<&String> = names.iter().filter(|n| ifname_matches(filter, n)).collect();
    let addrs: Vec<String> = p
        .ifaddrs
        .iter()
        .filter(|a| ifname_matches(filter, &a.name) && a.up && !link_local(a))
        .map(|a| format!("{} {}", a.name, a.ip))
        .collect();
    let evidence = format!("interfaces here: {}", names.join(" "));
    let c = if matched.is_empty() {
        Check::new(
            "pod.socket_ifname",
            "NCCL_SOCKET_IFNAME",
            Status::Fail,
            format!(
                "NCCL_SOCKET_IFNAME={filter} matches no interface here: NCCL's bootstrap fails \
                 (\"no socket interface found\")"
            ),
        )
        .fix("attach the secondary network: the pod annotation k8s.v1.cni.cncf.io/networks must name the SR-IOV NetworkAttachmentDefinition (it appears as net1), or fix the variable")
    } else if addrs.is_empty() {
        Check::new(
            "pod.socket_ifname",
            "NCCL_SOCKET_IFNAME",
            Status::Fail,
            format!(
                "NCCL_SOCKET_IFNAME={filter} matches {} but none has a usable address (up, not link-local): NCCL cannot bootstrap over it",
                matched.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            ),
        )
        .fix("give the network attachment an IPAM configuration (whereabouts or host-local) in its NetworkAttachmentDefinition")
    } else {
        Check::new(
            "pod.socket_ifname",
            "NCCL_SOCKET_IFNAME",
            Status::Ok,
            format!("NCCL_SOCKET_IFNAME={filter}: {}", addrs.join(", ")),
        )
    };
    c.evidence(evidence)
}

fn link_local(a: &IfAddr) -> bool {
    match a.ip {
        std::net::IpAddr::V4(v4) => v4.is_link_local(),
        std::net::IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    }
}

fn uverbs_check(f: &NodeFacts) -> Option<Check> {
    if f.nics.is_empty() {
        return None;
    }
    let (given, missing): (Vec<&RdmaNic>, Vec<&RdmaNic>) =
        f.nics.iter().partition(|n| n.uverbs_present);
    let list = |v: &[&RdmaNic]| {
        v.iter()
            .map(|n| {
                format!(
                    "{} ({})",
                    n.name,
                    n.uverbs.as_deref().unwrap_or("no uverbs")
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let c = if given.is_empty() {
        Check::new(
            "pod.uverbs",
            "node",
            Status::Fail,
            format!(
                "no RDMA device is usable here: /dev/infiniband lacks the uverbs device of every one of {} (libibverbs lists none)",
                list(&missing)
            ),
        )
        .fix("request the RDMA resource in the pod (e.g. rdma/rdma_shared_device_a: 1, or the SR-IOV resource nvidia.com/<pool>), or run with --device=/dev/infiniband")
    } else if missing.is_empty() {
        Check::new(
            "pod.uverbs",
            "node",
            Status::Ok,
            format!(
                "/dev/infiniband has the uverbs device of every RDMA device: {}",
                list(&given)
            ),
        )
    } else {
        Check::new(
            "pod.uverbs",
            "node",
            Status::Ok,
            format!(
                "usable here: {}; not given to this container: {} (normal in a pod that requested only some devices)",
                list(&given),
                list(&missing)
            ),
        )
    };
    Some(c.evidence(match &f.pod.dev_infiniband {
        Some(e) => format!("/dev/infiniband: {}", e.join(" ")),
        None => "/dev/infiniband is absent".to_string(),
    }))
}

fn memlock_check(p: &PodFacts) -> Check {
    let cap = p.cap_ipc_lock == Some(true);
    let limit = match p.memlock {
        Some(None) => "unlimited".to_string(),
        Some(Some(n)) => format_bytes(n),
        None => "unknown".to_string(),
    };
    let evidence = format!(
        "CapEff CAP_IPC_LOCK: {}; Max locked memory: {limit}",
        match p.cap_ipc_lock {
            Some(true) => "yes",
            Some(false) => "no",
            None => "unknown",
        }
    );
    let c = if cap || p.memlock == Some(None) {
        Check::new(
            "pod.memlock",
            "node",
            Status::Ok,
            format!(
                "RDMA registrations can pin memory: {}",
                if cap {
                    "CAP_IPC_LOCK is effective"
                } else {
                    "memlock is unlimited"
                }
            ),
        )
    } else if p.memlock.is_none() && p.cap_ipc_lock.is_none() {
        Check::new(
            "pod.memlock",
            "node",
            Status::Info,
            "locked-memory limit and capabilities unknown",
        )
    } else {
        Check::new(
            "pod.memlock",
            "node",
            Status::Warning,
            format!(
                "locked memory is limited to {limit} and CAP_IPC_LOCK is not effective: registering NCCL's \
                 buffers fails once they exceed it (ibv_reg_mr: ENOMEM)"
            ),
        )
        .fix("add IPC_LOCK to the container's securityContext.capabilities.add (or run with --ulimit memlock=-1)")
    };
    c.evidence(evidence)
}

fn shm_check(p: &PodFacts) -> Check {
    match p.shm_bytes {
        None => Check::new(
            "pod.shm",
            "node",
            Status::Warning,
            "/dev/shm is not mounted: NCCL's shared-memory transport between local ranks fails",
        )
        .fix("mount an emptyDir with medium: Memory at /dev/shm")
        .evidence("/proc/self/mounts has no /dev/shm"),
        Some(n) if n < SHM_WARN_BELOW => Check::new(
            "pod.shm",
            "node",
            Status::Warning,
            format!(
                "/dev/shm is {} (below {}): NCCL allocates its intra-node buffers there and fails with \
                 \"unable to allocate shared memory\" (the container default is 64 MiB)",
                format_bytes(n),
                format_bytes(SHM_WARN_BELOW)
            ),
        )
        .fix("mount an emptyDir with medium: Memory (and a sizeLimit of several GiB) at /dev/shm")
        .evidence(format!("/proc/self/mounts: /dev/shm size {}", format_bytes(n))),
        Some(n) => Check::new(
            "pod.shm",
            "node",
            Status::Ok,
            format!("/dev/shm is {}", format_bytes(n)),
        )
        .evidence(format!("/proc/self/mounts: /dev/shm size {}", format_bytes(n))),
    }
}
