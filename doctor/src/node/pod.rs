//! The pod's view: the interface `NCCL_SOCKET_IFNAME` names (the seeds' Multus `net1`), the
//! `/dev/infiniband/uverbs*` devices the RDMA device plugin gave the container, and whether this
//! runs in a container at all; with the locked-memory and `/dev/shm` checks of [`super::limits`].
//!
//! Everything is read from files under the roots (`<sys>/class/net`, `<dev>/infiniband`,
//! `<proc>/1/cgroup`, `<proc>/self/mountinfo`), so the same reader serves a real pod and a fake
//! tree.

use super::limits::{Limits, memlock_check, shm_check};
use super::*;
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
    PodFacts {
        socket_ifname: env("NCCL_SOCKET_IFNAME").filter(|s| !s.is_empty()),
        net_gdr_level: env("NCCL_NET_GDR_LEVEL").filter(|s| !s.is_empty()),
        gdrcopy_enable: env("NCCL_GDRCOPY_ENABLE").filter(|s| !s.is_empty()),
        netdevs: pci::dir_names(&roots.sys.join("class/net")),
        ifaddrs,
        dev_infiniband: dev_ib.is_dir().then(|| pci::dir_names(&dev_ib)),
        container: Some(detect_container(proc, env)),
    }
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

/// The pod checks; `limits` are judged here too (`pod.memlock`, `pod.shm`).
pub fn pod_checks(f: &NodeFacts, limits: &Limits) -> Vec<Check> {
    let p = &f.pod;
    let mut out = vec![ifname_check(p)];
    out.extend(uverbs_check(f));
    out.push(memlock_check(limits));
    out.push(shm_check(limits));
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
