//! Fake `/sys`, `/proc` and `/dev` trees for the node and pod tests, laid out as the kernel lays
//! them out: PCI functions as nested directories under `sys/devices/pciDDDD:BB`, reached through
//! symbolic links (`bus/pci/devices/<bdf>`, `class/infiniband/<dev>/device`, `physfn`, `driver`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use std::fs;

/// A fake tree in a temporary directory.
pub(crate) struct Tree {
    dir: tempfile::TempDir,
}

/// A PCIe link: (width, max width, speed GT/s, max speed GT/s).
pub(crate) type LinkSpec = (u32, u32, &'static str, &'static str);

/// Full width and speed of a x16 Gen4 slot.
pub(crate) const X16_GEN4: LinkSpec = (16, 16, "16.0", "16.0");

impl Tree {
    pub(crate) fn new() -> Tree {
        let t = Tree {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        for d in [
            "sys/devices",
            "sys/bus/pci/devices",
            "sys/class/net",
            "sys/module",
        ] {
            fs::create_dir_all(t.path(d)).unwrap();
        }
        t.write(
            "proc/self/status",
            "Name:\tdoctor\nCapEff:\t0000000000000000\n",
        );
        t.write(
            "proc/self/limits",
            "Limit                     Soft Limit           Hard Limit           Units\n\
             Max locked memory         unlimited            unlimited            bytes\n",
        );
        t.write(
            "proc/self/mounts",
            "tmpfs /dev/shm tmpfs rw,nosuid,nodev,size=33554432k 0 0\n",
        );
        t.write("proc/meminfo", "MemTotal:       263921876 kB\n");
        t.write("proc/1/cgroup", "0::/init.scope\n");
        t.write("proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro\n");
        t.kernel("6.8.0-45-generic");
        t
    }

    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub(crate) fn roots(&self) -> Roots {
        Roots::under(self.dir.path())
    }

    pub(crate) fn write(&self, rel: &str, text: &str) {
        let p = self.path(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    pub(crate) fn link(&self, rel: &str, target_rel: &str) {
        let p = self.path(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        let _ = fs::remove_file(&p);
        std::os::unix::fs::symlink(self.path(target_rel), p).unwrap();
    }

    pub(crate) fn kernel(&self, release: &str) {
        self.write("proc/sys/kernel/osrelease", &format!("{release}\n"));
    }

    pub(crate) fn cmdline(&self, text: &str) {
        self.write("proc/cmdline", &format!("{text}\n"));
    }

    pub(crate) fn module(&self, name: &str, version: Option<&str>) {
        fs::create_dir_all(self.path(&format!("sys/module/{name}"))).unwrap();
        if let Some(v) = version {
            self.write(&format!("sys/module/{name}/version"), &format!("{v}\n"));
        }
    }

    /// The NVIDIA driver as the GPU Operator's driver container loads it.
    pub(crate) fn nvidia(&self, open: bool, version: &str) {
        self.module("nvidia", Some(version));
        let (flavor, taint) = if open {
            ("Open Kernel Module for x86_64", "OE")
        } else {
            ("x86_64 Kernel Module", "POE")
        };
        self.write("sys/module/nvidia/taint", &format!("{taint}\n"));
        self.write(
            "proc/driver/nvidia/version",
            &format!(
                "NVRM version: NVIDIA UNIX {flavor}  {version}  Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue Jul 16 19:25:06 UTC 2024\n\
                 GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
            ),
        );
    }

    /// A PCI function at `path` (root complex first) with its `bus/pci/devices` link.
    pub(crate) fn pci(&self, path: &[&str], vendor: u16, class: u32, numa: i32, link: LinkSpec) {
        let rel = format!("sys/devices/{}", path.join("/"));
        let bdf = path.last().unwrap();
        self.write(&format!("{rel}/vendor"), &format!("0x{vendor:04x}\n"));
        self.write(&format!("{rel}/class"), &format!("0x{class:06x}\n"));
        self.write(&format!("{rel}/numa_node"), &format!("{numa}\n"));
        self.write(
            &format!("{rel}/current_link_width"),
            &format!("{}\n", link.0),
        );
        self.write(&format!("{rel}/max_link_width"), &format!("{}\n", link.1));
        self.write(
            &format!("{rel}/current_link_speed"),
            &format!("{} GT/s PCIe\n", link.2),
        );
        self.write(
            &format!("{rel}/max_link_speed"),
            &format!("{} GT/s PCIe\n", link.3),
        );
        self.link(&format!("sys/bus/pci/devices/{bdf}"), &rel);
    }

    /// An NVIDIA 3D controller (class 0x0302).
    pub(crate) fn gpu(&self, path: &[&str], numa: i32, link: LinkSpec) {
        self.pci(path, 0x10de, 0x030200, numa, link);
        self.bind(path, "nvidia");
    }

    pub(crate) fn bind(&self, path: &[&str], driver: &str) {
        let rel = format!("sys/devices/{}", path.join("/"));
        fs::create_dir_all(self.path(&format!("sys/bus/pci/drivers/{driver}"))).unwrap();
        self.link(
            &format!("{rel}/driver"),
            &format!("sys/bus/pci/drivers/{driver}"),
        );
    }

    /// An mlx5 RDMA device on the PCI function at `path`, with its netdevs and uverbs device
    /// (`given`: the uverbs node exists in `/dev/infiniband`).
    pub(crate) fn rdma(
        &self,
        name: &str,
        path: &[&str],
        netdevs: &[&str],
        uverbs: &str,
        given: bool,
    ) {
        self.pci(path, 0x15b3, 0x020700, numa_of(path), X16_GEN4);
        self.bind(path, "mlx5_core");
        let rel = format!("sys/devices/{}", path.join("/"));
        self.link(&format!("sys/class/infiniband/{name}/device"), &rel);
        fs::create_dir_all(self.path(&format!("{rel}/infiniband_verbs/{uverbs}"))).unwrap();
        for n in netdevs {
            fs::create_dir_all(self.path(&format!("{rel}/net/{n}"))).unwrap();
            fs::create_dir_all(self.path(&format!("sys/class/net/{n}"))).unwrap();
        }
        fs::create_dir_all(self.path("dev/infiniband")).unwrap();
        if given {
            self.write(&format!("dev/infiniband/{uverbs}"), "");
        }
    }

    /// Sets a device's link (after [`Tree::rdma`] or [`Tree::gpu`]).
    pub(crate) fn set_link(&self, path: &[&str], link: LinkSpec) {
        let rel = format!("sys/devices/{}", path.join("/"));
        self.write(
            &format!("{rel}/current_link_width"),
            &format!("{}\n", link.0),
        );
        self.write(
            &format!("{rel}/current_link_speed"),
            &format!("{} GT/s PCIe\n", link.2),
        );
    }

    /// A config-space dump with an AER capability at 0x100 and ACS (control `ctl`) at 0x148.
    pub(crate) fn acs(&self, path: &[&str], ctl: u16) {
        let rel = format!("sys/devices/{}/config", path.join("/"));
        let p = self.path(&rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, acs_config(ctl)).unwrap();
    }

    /// `iommu_group/type` of the function at `path`.
    pub(crate) fn iommu_group(&self, path: &[&str], group: u32, kind: &str) {
        self.write(
            &format!("sys/kernel/iommu_groups/{group}/type"),
            &format!("{kind}\n"),
        );
        self.link(
            &format!("sys/devices/{}/iommu_group", path.join("/")),
            &format!("sys/kernel/iommu_groups/{group}"),
        );
        fs::create_dir_all(self.path("sys/class/iommu/dmar0")).unwrap();
    }
}

/// A 4 KiB config space: AER (id 1) at 0x100 pointing to ACS (id 0xd) at 0x148.
pub(crate) fn acs_config(ctl: u16) -> Vec<u8> {
    let mut c = vec![0u8; 4096];
    let aer: u32 = 0x0001 | (1 << 16) | (0x148 << 20);
    c[0x100..0x104].copy_from_slice(&aer.to_le_bytes());
    let acs: u32 = 0x000d | (1 << 16);
    c[0x148..0x14c].copy_from_slice(&acs.to_le_bytes());
    c[0x14c..0x14e].copy_from_slice(&0x005fu16.to_le_bytes());
    c[0x14e..0x150].copy_from_slice(&ctl.to_le_bytes());
    c
}

/// NUMA node 1 for devices under root complexes 0x80 and above, else 0.
fn numa_of(path: &[&str]) -> i32 {
    match path.first() {
        Some(r) if r.ends_with(":80") || r.ends_with(":c0") => 1,
        _ => 0,
    }
}

/// An interface address.
pub(crate) fn addr(name: &str, ip: &str) -> IfAddr {
    IfAddr {
        name: name.to_string(),
        ip: ip.parse().unwrap(),
        up: true,
        loopback: name == "lo",
    }
}

/// The node facts of `t` with `addrs` and the variables `env`.
pub(crate) fn facts(t: &Tree, addrs: Vec<IfAddr>, env: &[(&str, &str)]) -> NodeFacts {
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    collect_node(&t.roots(), addrs, &|k| {
        env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    })
}

/// The checks of `f`, a fake tree's facts, with the locked-memory and `/dev/shm` facts read from
/// the same tree (the report keeps those with its host facts).
pub(crate) fn checks(f: &NodeFacts) -> Vec<Check> {
    node_checks(f, &read_limits(&f.roots))
}
