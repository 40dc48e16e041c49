//! The node and pod checks on fake trees: the seeds' four setups (RDMA disabled with GDS
//! enabled; DMA-BUF with open modules; nvidia-peermem with MOFED; an SR-IOV pod with `net1`),
//! then one broken tree per finding.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::fake::{Tree, X16_GEN4, acs_config, addr, checks, facts};
use super::pci::{acs_control, distance, read_pci_fn};
use super::*;
use ferro_verbs::sysfs::PciAddr;

// A GPU and a NIC under two downstream ports of one PCIe switch (PIX).
const ROOT0: &str = "pci0000:00";
const RP: &str = "0000:00:01.0";
const UP: &str = "0000:01:00.0";
const GPU0: [&str; 5] = [ROOT0, RP, UP, "0000:02:00.0", "0000:03:00.0"];
const NIC0: [&str; 5] = [ROOT0, RP, UP, "0000:02:01.0", "0000:04:00.0"];

fn checks_with(f: &NodeFacts, id: &str) -> Vec<Check> {
    checks(f).into_iter().filter(|c| c.id == id).collect()
}

fn one(f: &NodeFacts, id: &str) -> Check {
    let v = checks_with(f, id);
    assert_eq!(v.len(), 1, "{id}: {v:#?}");
    v.into_iter().next().unwrap()
}

/// A node with one GPU and one mlx5 NIC on the same switch, IOMMU passthrough.
fn gpu_node(open: bool, kernel: &str) -> Tree {
    let t = Tree::new();
    t.kernel(kernel);
    t.nvidia(open, if open { "550.90.07" } else { "535.161.08" });
    t.gpu(&GPU0, 0, X16_GEN4);
    t.rdma("mlx5_0", &NIC0, &["ens1f0np0"], "uverbs0", true);
    t.cmdline("BOOT_IMAGE=/vmlinuz intel_iommu=on iommu=pt");
    t
}

#[test]
fn seed_rdma_disabled_with_gds_enabled_has_no_gpudirect_rdma_path() {
    // ClusterPolicy: driver.rdma.enabled=false, gds.enabled=true, gdrcopy.enabled=true,
    // proprietary modules.
    let t = gpu_node(false, "5.15.0-105-generic");
    t.module("nvidia_fs", Some("2.17.5"));
    t.module("gdrdrv", Some("2.4.1"));
    let f = facts(&t, vec![], &[]);
    let gdr = one(&f, "gdr.path");
    assert_eq!(gdr.status, Status::Fail, "{gdr:#?}");
    assert!(
        gdr.summary
            .contains("nvidia-peermem is the only GPUDirect RDMA path here and it is not loaded"),
        "{}",
        gdr.summary
    );
    assert!(gdr.summary.contains("proprietary"), "{}", gdr.summary);
    let fix = gdr.fix.unwrap();
    assert!(
        fix.contains("driver.rdma.enabled=true")
            && fix.contains("driver.useOpenKernelModules=true"),
        "{fix}"
    );
    assert!(
        gdr.evidence.iter().any(|e| e.contains("taint: \"POE\"")),
        "{:?}",
        gdr.evidence
    );
    let gds = one(&f, "gds");
    // nvidia-fs 2.17.5 and later needs the open kernel modules; this node runs the proprietary ones.
    assert_eq!(gds.status, Status::Warning);
    assert!(
        gds.summary.contains("nvidia-fs 2.17.5 loaded")
            && gds.summary.contains("open kernel modules")
            && gds.summary.contains("passthrough"),
        "{}",
        gds.summary
    );
    let gdrcopy = one(&f, "gdrcopy");
    assert_eq!(gdrcopy.status, Status::Info);
    assert!(
        gdrcopy.summary.contains("NCCL_GDRCOPY_ENABLE=1"),
        "{}",
        gdrcopy.summary
    );
    assert_eq!(worst(&checks(&f)), Status::Fail);
}

#[test]
fn seed_dmabuf_with_open_modules_is_ready() {
    let t = gpu_node(true, "6.8.0-45-generic");
    t.iommu_group(&GPU0, 17, "identity");
    t.iommu_group(&NIC0, 18, "identity");
    let f = facts(&t, vec![addr("ens1f0np0", "10.0.0.5")], &[]);
    assert_eq!(f.nvidia.flavor, Flavor::Open);
    assert_eq!(f.nvidia.version.as_deref(), Some("550.90.07"));
    let gdr = one(&f, "gdr.path");
    assert_eq!(
        (gdr.status, gdr.summary.as_str()),
        (Status::Ok, "mlx5_0: GPUDirect RDMA via DMA-BUF")
    );
    assert_eq!(f.iommu.state, IommuState::Passthrough);
    let dist = one(&f, "pcie.distance");
    assert_eq!(dist.status, Status::Ok);
    assert!(
        dist.summary
            .contains("nearest NIC mlx5_0 is PIX (same PCIe switch)")
            && dist.summary.contains("NCCL's default PXB"),
        "{}",
        dist.summary
    );
    assert_eq!(one(&f, "pcie.link").status, Status::Ok);
    let all = checks(&f);
    assert!(worst(&all) <= Status::Info, "{all:#?}");
}

#[test]
fn seed_nvidia_peermem_with_mofed_uses_peermem() {
    // MOFED from the Network Operator, proprietary modules, driver.rdma.enabled=true; the NIC
    // sits behind a second switch (PXB).
    let t = Tree::new();
    t.kernel("5.4.0-150-generic");
    t.nvidia(false, "525.147.05");
    t.module("nvidia_peermem", Some("525.147.05"));
    t.module("mlx_compat", Some("23.10-1.1.9"));
    t.gpu(&GPU0, 0, X16_GEN4);
    let nic = [
        ROOT0,
        RP,
        UP,
        "0000:02:01.0",
        "0000:05:00.0",
        "0000:06:00.0",
        "0000:07:00.0",
    ];
    t.rdma("mlx5_0", &nic, &["ens2f0"], "uverbs0", true);
    t.cmdline("iommu=pt");
    let f = facts(&t, vec![], &[]);
    let gdr = one(&f, "gdr.path");
    assert_eq!(gdr.status, Status::Ok, "{gdr:#?}");
    assert!(gdr.summary.starts_with("mlx5_0: GPUDirect RDMA via nvidia-peermem (DMA-BUF not possible: kernel 5.4 < 5.12; proprietary"), "{}", gdr.summary);
    assert!(
        gdr.evidence
            .iter()
            .any(|e| e.contains("MOFED (mlx_compat 23.10-1.1.9)")),
        "{:?}",
        gdr.evidence
    );
    assert!(
        gdr.evidence
            .iter()
            .any(|e| e.starts_with("nvidia_peermem loaded")),
        "{:?}",
        gdr.evidence
    );
    let dist = one(&f, "pcie.distance");
    assert!(
        dist.summary
            .contains("is PXB (through several PCIe switches)"),
        "{}",
        dist.summary
    );
    assert_eq!(dist.status, Status::Ok);
    // With NCCL_NET_GDR_LEVEL=PIX the same path is refused.
    let f = facts(&t, vec![], &[("NCCL_NET_GDR_LEVEL", "PIX")]);
    let dist = one(&f, "pcie.distance");
    assert_eq!(dist.status, Status::Warning);
    assert!(
        dist.summary.contains("beyond NCCL_NET_GDR_LEVEL=PIX"),
        "{}",
        dist.summary
    );
}

/// The seeds' SR-IOV pod: VF mlx5_2 of the PF at 0000:04:00.0 moved into the pod as net1.
fn sriov_pod() -> Tree {
    let t = Tree::new();
    t.kernel("6.5.0-1024-oracle");
    t.nvidia(true, "550.90.07");
    t.gpu(&GPU0, 0, X16_GEN4);
    t.rdma("mlx5_0", &NIC0, &[], "uverbs0", false);
    let vf = [ROOT0, RP, UP, "0000:02:01.0", "0000:04:00.2"];
    t.rdma("mlx5_2", &vf, &["net1"], "uverbs2", true);
    t.link(
        "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.2/physfn",
        "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0",
    );
    std::fs::create_dir_all(t.path("sys/class/net/eth0")).unwrap();
    t.write(
        "proc/self/status",
        "Name:\tdoctor\nCapEff:\t00000000a80c65fb\n",
    );
    t.write(
        "proc/self/limits",
        "Max locked memory         65536                65536                bytes\n",
    );
    t.write(
        "proc/self/mounts",
        "overlay / overlay rw 0 0\ntmpfs /dev/shm tmpfs rw,nosuid,nodev,size=67108864k 0 0\n",
    );
    t.write(
        "proc/1/cgroup",
        "0::/kubepods.slice/kubepods-pod1234.slice/cri-containerd-abcd.scope\n",
    );
    t.cmdline("amd_iommu=on iommu=pt");
    t
}

#[test]
fn seed_sriov_pod_with_net1_is_ready() {
    let t = sriov_pod();
    let addrs = vec![
        addr("lo", "127.0.0.1"),
        addr("eth0", "10.244.1.7"),
        addr("net1", "192.168.100.5"),
    ];
    let f = facts(&t, addrs, &[("NCCL_SOCKET_IFNAME", "net1")]);
    let sriov = one(&f, "sriov");
    assert_eq!(sriov.status, Status::Ok);
    assert_eq!(
        sriov.summary,
        "mlx5_2 is SR-IOV virtual function 0000:04:00.2 of 0000:04:00.0, netdev net1"
    );
    let ifname = one(&f, "pod.socket_ifname");
    assert_eq!(
        (ifname.status, ifname.summary.as_str()),
        (Status::Ok, "NCCL_SOCKET_IFNAME=net1: net1 192.168.100.5")
    );
    let uverbs = one(&f, "pod.uverbs");
    assert_eq!(uverbs.status, Status::Ok);
    assert!(
        uverbs.summary.contains(
            "usable here: mlx5_2 (uverbs2); not given to this container: mlx5_0 (uverbs0)"
        ),
        "{}",
        uverbs.summary
    );
    let memlock = one(&f, "pod.memlock");
    // CAP_IPC_LOCK lifts the 64 KiB limit for RDMA pinning: worth knowing, not a problem.
    assert_eq!(memlock.status, Status::Info);
    assert!(
        memlock.summary.contains("CAP_IPC_LOCK is effective"),
        "{}",
        memlock.summary
    );
    let shm = one(&f, "pod.shm");
    assert_eq!(
        (shm.status, shm.summary.as_str()),
        (Status::Ok, "/dev/shm is 64 GiB")
    );
    let container = one(&f, "pod.container");
    assert_eq!(container.summary, "running in a Kubernetes pod");
    assert!(container.evidence[0].contains("kubepods"));
    for c in checks_with(&f, "gdr.path") {
        assert_eq!(c.status, Status::Ok, "{c:#?}");
    }
    assert!(worst(&checks(&f)) <= Status::Info);
}

#[test]
fn open_modules_on_an_old_kernel_without_peermem_fail() {
    let t = gpu_node(true, "5.10.0-28-amd64");
    let gdr = one(&facts(&t, vec![], &[]), "gdr.path");
    assert_eq!(gdr.status, Status::Fail);
    assert!(
        gdr.summary.contains("kernel 5.10 < 5.12")
            && gdr.summary.contains("only GPUDirect RDMA path"),
        "{}",
        gdr.summary
    );
    assert!(gdr.fix.unwrap().contains("kernel >= 5.12"));
}

#[test]
fn gpus_without_the_nvidia_module_fail_and_no_gpu_is_not_applicable() {
    let t = Tree::new();
    t.gpu(&GPU0, 0, X16_GEN4);
    t.rdma("mlx5_0", &NIC0, &["ens1f0"], "uverbs0", true);
    let gdr = one(&facts(&t, vec![], &[]), "gdr.path");
    assert_eq!(gdr.status, Status::Fail);
    assert!(
        gdr.summary.contains("nvidia kernel module is not loaded"),
        "{}",
        gdr.summary
    );

    let t = Tree::new();
    t.nvidia(true, "550.90.07");
    t.gpu(&GPU0, 0, X16_GEN4);
    let gdr = one(&facts(&t, vec![], &[]), "gdr.path");
    assert_eq!(gdr.status, Status::Info);
    assert!(gdr.summary.contains("no RDMA device"), "{}", gdr.summary);

    let t = Tree::new();
    t.rdma("mlx5_0", &NIC0, &["ens1f0"], "uverbs0", true);
    let f = facts(&t, vec![], &[]);
    let gdr = one(&f, "gdr.path");
    assert_eq!(gdr.status, Status::Info);
    assert!(checks_with(&f, "pcie.distance").is_empty());
}

#[test]
fn a_virtual_device_finds_its_uverbs_through_the_verbs_class() {
    // rxe has no `device` link: its uverbs node is only named by class/infiniband_verbs.
    let t = Tree::new();
    std::fs::create_dir_all(t.path("sys/class/infiniband/rxe0")).unwrap();
    t.write("sys/class/infiniband_verbs/uverbs0/ibdev", "rxe0\n");
    t.write("dev/infiniband/uverbs0", "");
    let f = facts(&t, vec![], &[]);
    assert_eq!(f.nics[0].uverbs.as_deref(), Some("uverbs0"));
    let c = one(&f, "pod.uverbs");
    assert_eq!(c.status, Status::Ok, "{c:#?}");
    assert!(
        worst(&checks(&f)) <= Status::Info,
        "a soft-RoCE host has nothing failing"
    );
}

#[test]
fn software_rdma_devices_have_no_dmabuf() {
    let t = gpu_node(true, "6.1.0-56-amd64");
    std::fs::create_dir_all(t.path("sys/class/infiniband/rxe0")).unwrap();
    let f = facts(&t, vec![], &[]);
    let rxe = checks_with(&f, "gdr.path")
        .into_iter()
        .find(|c| c.subject == "rxe0")
        .unwrap();
    assert_eq!(rxe.status, Status::Fail);
    assert!(
        rxe.summary
            .contains("rxe0's provider does not take DMA-BUF"),
        "{}",
        rxe.summary
    );
}

#[test]
fn gds_with_a_translating_iommu_warns_and_iommu_modes_are_read_from_sysfs() {
    let t = gpu_node(true, "6.8.0-45-generic");
    t.cmdline("intel_iommu=on");
    t.module("nvidia_fs", None);
    t.write("proc/driver/nvidia-fs/version", "version: 2.20.5\n");
    t.iommu_group(&GPU0, 3, "DMA");
    let f = facts(&t, vec![], &[]);
    assert_eq!(f.iommu.state, IommuState::TranslatedStrict);
    let gds = one(&f, "gds");
    assert_eq!(gds.status, Status::Warning);
    assert!(
        gds.summary.contains("nvidia-fs 2.20.5") && gds.summary.contains("translated-strict"),
        "{}",
        gds.summary
    );
    let iommu = one(&f, "iommu");
    assert_eq!(iommu.status, Status::Warning);
    assert!(iommu.fix.unwrap().contains("iommu=pt"));
    assert!(
        iommu
            .evidence
            .iter()
            .any(|e| e == "0000:03:00.0: iommu_group/type = DMA"),
        "{:?}",
        iommu.evidence
    );

    t.iommu_group(&GPU0, 3, "DMA-FQ");
    assert_eq!(
        facts(&t, vec![], &[]).iommu.state,
        IommuState::TranslatedLazy
    );
}

#[test]
fn iommu_state_from_the_command_line_alone() {
    use ferro_verbs::sysfs::iommu_mode;
    let none: &[(String, String)] = &[];
    let s = |c: &str, units: &[String]| iommu::decide_state(Some(&iommu_mode(c)), units, none);
    assert_eq!(s("intel_iommu=off", &[]), IommuState::Off);
    assert_eq!(s("", &[]), IommuState::Off);
    assert_eq!(s("", &["dmar0".to_string()]), IommuState::Unknown);
    assert_eq!(s("iommu=pt", &[]), IommuState::Passthrough);
    assert_eq!(
        s("intel_iommu=on iommu.strict=1", &[]),
        IommuState::TranslatedStrict
    );
    assert_eq!(
        s("intel_iommu=on iommu.strict=0", &[]),
        IommuState::TranslatedLazy
    );
    assert_eq!(s("amd_iommu=on", &[]), IommuState::Translated);
    assert_eq!(iommu::decide_state(None, &[], none), IommuState::Unknown);
}

#[test]
fn gdrcopy_requested_without_gdrdrv_warns() {
    let t = gpu_node(true, "6.8.0-45-generic");
    let c = one(
        &facts(&t, vec![], &[("NCCL_GDRCOPY_ENABLE", "1")]),
        "gdrcopy",
    );
    assert_eq!(c.status, Status::Warning);
    assert!(c.fix.unwrap().contains("gdrcopy.enabled=true"));
    t.module("gdrdrv", Some("2.4.1"));
    let c = one(
        &facts(&t, vec![], &[("NCCL_GDRCOPY_ENABLE", "1")]),
        "gdrcopy",
    );
    assert_eq!(c.status, Status::Ok);
}

#[test]
fn a_nic_across_sockets_is_sys_and_disables_gpudirect_at_the_default_level() {
    let t = Tree::new();
    t.nvidia(true, "550.90.07");
    t.gpu(&["pci0000:80", "0000:80:01.0", "0000:81:00.0"], 1, X16_GEN4);
    t.rdma(
        "mlx5_0",
        &[ROOT0, "0000:00:02.0", "0000:05:00.0"],
        &["ens1"],
        "uverbs0",
        true,
    );
    let f = facts(&t, vec![], &[]);
    let d = one(&f, "pcie.distance");
    assert_eq!(d.status, Status::Warning);
    assert!(
        d.summary.contains("is SYS (across CPU sockets)")
            && d.summary
                .contains("stages its network traffic through host memory"),
        "{}",
        d.summary
    );
    assert!(d.fix.unwrap().contains("NCCL_NET_GDR_LEVEL=SYS"));
    assert!(
        checks_with(&f, "pcie.acs").is_empty(),
        "ACS is not judged for paths through the CPU"
    );
    assert_eq!(
        one(
            &facts(&t, vec![], &[("NCCL_NET_GDR_LEVEL", "SYS")]),
            "pcie.distance"
        )
        .status,
        Status::Ok
    );
    assert_eq!(
        one(
            &facts(&t, vec![], &[("NCCL_NET_GDR_LEVEL", "4")]),
            "pcie.distance"
        )
        .status,
        Status::Ok
    );
    let bad = facts(&t, vec![], &[("NCCL_NET_GDR_LEVEL", "FAR")]);
    let v = checks_with(&bad, "pcie.distance");
    assert!(
        v.iter()
            .any(|c| c.subject == "NCCL_NET_GDR_LEVEL" && c.status == Status::Warning),
        "{v:#?}"
    );
}

#[test]
fn distances_follow_nccls_switch_folding() {
    let t = Tree::new();
    let paths: [&[&str]; 6] = [
        &GPU0,
        &NIC0,
        &[
            ROOT0,
            RP,
            UP,
            "0000:02:01.0",
            "0000:05:00.0",
            "0000:06:00.0",
            "0000:07:00.0",
        ],
        &[ROOT0, "0000:00:02.0", "0000:08:00.0"],
        &["pci0000:40", "0000:40:01.0", "0000:41:00.0"],
        &["pci0000:80", "0000:80:01.0", "0000:81:00.0"],
    ];
    for (i, p) in paths.iter().enumerate() {
        t.pci(p, 0x15b3, 0x020700, if i == 5 { 1 } else { 0 }, X16_GEN4);
    }
    let f: Vec<PciFn> = paths
        .iter()
        .map(|p| {
            read_pci_fn(
                &t.path("sys"),
                &t.path(&format!("sys/bus/pci/devices/{}", p.last().unwrap())),
            )
            .unwrap()
        })
        .collect();
    assert_eq!(distance(&f[0], &f[0]), Distance::Loc);
    assert_eq!(distance(&f[0], &f[1]), Distance::Pix);
    assert_eq!(distance(&f[0], &f[2]), Distance::Pxb);
    assert_eq!(
        distance(&f[0], &f[3]),
        Distance::Phb,
        "another root port of the same root complex"
    );
    assert_eq!(
        distance(&f[0], &f[4]),
        Distance::Phb,
        "another root complex on the same NUMA node"
    );
    assert_eq!(distance(&f[0], &f[5]), Distance::Sys);
    assert_eq!(f[2].bridges.len(), 5);
    assert_eq!(f[0].path[0], "pci0000:00");
}

#[test]
fn pci_functions_and_bridges_carry_parsed_addresses_and_other_devices_are_not_functions() {
    let t = Tree::new();
    t.pci(&GPU0, 0x10de, 0x030200, 0, X16_GEN4);
    let f = read_pci_fn(&t.path("sys"), &t.path("sys/bus/pci/devices/0000:03:00.0")).unwrap();
    let addr = |s: &str| s.parse::<PciAddr>().unwrap();
    assert_eq!(f.bdf, addr("0000:03:00.0"));
    let bridges: Vec<PciAddr> = f.bridges.iter().map(|b| b.bdf).collect();
    assert_eq!(
        bridges,
        [GPU0[3], GPU0[2], GPU0[1]].map(addr),
        "every PCI address above the device, nearest first, up to the root complex"
    );
    t.write("sys/devices/platform/serial8250/uevent", "");
    assert_eq!(
        read_pci_fn(&t.path("sys"), &t.path("sys/devices/platform/serial8250")),
        None
    );
}

#[test]
fn acs_redirect_on_a_switch_port_between_gpu_and_nic_warns() {
    let t = gpu_node(true, "6.8.0-45-generic");
    let info = one(&facts(&t, vec![], &[]), "pcie.acs");
    assert_eq!(
        info.status,
        Status::Info,
        "no readable config space: {info:#?}"
    );
    t.acs(&NIC0[..4], 0x0001);
    t.acs(&GPU0[..4], 0x0001);
    assert_eq!(one(&facts(&t, vec![], &[]), "pcie.acs").status, Status::Ok);
    t.acs(&NIC0[..4], 0x001d);
    let c = one(&facts(&t, vec![], &[]), "pcie.acs");
    assert_eq!(c.status, Status::Warning);
    assert!(
        c.summary.contains("0000:02:01.0 (ACS control 0x001d)"),
        "{}",
        c.summary
    );
    // The root port above the common switch does not carry this traffic.
    t.acs(&NIC0[..4], 0x0001);
    t.acs(&[ROOT0, RP], 0x001d);
    assert_eq!(one(&facts(&t, vec![], &[]), "pcie.acs").status, Status::Ok);
}

#[test]
fn acs_control_is_found_through_the_capability_chain() {
    assert_eq!(acs_control(&acs_config(0x1d)), Some(0x1d));
    assert_eq!(
        acs_control(&acs_config(0x1d)[..256]),
        None,
        "only the standard header readable"
    );
    assert_eq!(acs_control(&[0u8; 4096]), None);
    let mut looped = vec![0u8; 4096];
    looped[0x100..0x104].copy_from_slice(&(0x0001u32 | (0x100 << 20)).to_le_bytes());
    assert_eq!(
        acs_control(&looped),
        None,
        "a capability pointing at itself ends the walk"
    );
}

#[test]
fn degraded_links_warn_for_nics_and_note_idle_gpus() {
    let t = gpu_node(true, "6.8.0-45-generic");
    t.set_link(&NIC0, (8, 16, "16.0", "16.0"));
    t.set_link(&GPU0, (16, 16, "2.5", "16.0"));
    let v = checks_with(&facts(&t, vec![], &[]), "pcie.link");
    assert_eq!(v.len(), 2, "{v:#?}");
    let nic = v.iter().find(|c| c.subject.starts_with("mlx5_0")).unwrap();
    assert_eq!(nic.status, Status::Warning);
    assert!(nic.summary.contains("x8 of x16"), "{}", nic.summary);
    let gpu = v.iter().find(|c| c.subject.starts_with("GPU")).unwrap();
    assert_eq!(gpu.status, Status::Info);
    assert!(
        gpu.summary.contains("2.5 of 16 GT/s") && gpu.summary.contains("idle"),
        "{}",
        gpu.summary
    );
}

#[test]
fn a_vf_without_its_netdev_in_the_pod_warns() {
    let t = sriov_pod();
    std::fs::remove_dir_all(
        t.path("sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.2/net"),
    )
    .unwrap();
    let c = one(&facts(&t, vec![], &[]), "sriov");
    assert_eq!(c.status, Status::Warning);
    assert!(
        c.summary
            .contains("netdev is not in this network namespace"),
        "{}",
        c.summary
    );
}

#[test]
fn socket_ifname_naming_a_missing_or_addressless_interface_fails() {
    let t = sriov_pod();
    std::fs::remove_dir_all(t.path("sys/class/net/net1")).unwrap();
    let missing = one(
        &facts(
            &t,
            vec![addr("eth0", "10.244.1.7")],
            &[("NCCL_SOCKET_IFNAME", "net1")],
        ),
        "pod.socket_ifname",
    );
    assert_eq!(missing.status, Status::Fail);
    assert!(missing.fix.unwrap().contains("k8s.v1.cni.cncf.io/networks"));
    let t = sriov_pod();
    let no_addr = one(
        &facts(
            &t,
            vec![addr("net1", "fe80::1")],
            &[("NCCL_SOCKET_IFNAME", "=net1")],
        ),
        "pod.socket_ifname",
    );
    assert_eq!(no_addr.status, Status::Fail);
    assert!(
        no_addr
            .summary
            .contains("matches net1 but none has a usable address"),
        "{}",
        no_addr.summary
    );
    let excluded = one(
        &facts(
            &t,
            vec![addr("net1", "192.168.100.5")],
            &[("NCCL_SOCKET_IFNAME", "^net")],
        ),
        "pod.socket_ifname",
    );
    assert_eq!(
        excluded.status,
        Status::Fail,
        "^net excludes net1 and nothing else has an address"
    );
    let unset = one(&facts(&t, vec![], &[]), "pod.socket_ifname");
    assert_eq!(unset.status, Status::Info);
}

#[test]
fn a_pod_without_uverbs_devices_fails() {
    let t = sriov_pod();
    std::fs::remove_file(t.path("dev/infiniband/uverbs2")).unwrap();
    let c = one(&facts(&t, vec![], &[]), "pod.uverbs");
    assert_eq!(c.status, Status::Fail);
    assert!(c.fix.unwrap().contains("rdma/rdma_shared_device_a"));
}

#[test]
fn limited_memlock_without_ipc_lock_and_small_or_missing_shm_warn() {
    let t = sriov_pod();
    t.write("proc/self/status", "CapEff:\t00000000a80425fb\n");
    t.write(
        "proc/self/mounts",
        "tmpfs /dev/shm tmpfs rw,nosuid,nodev,size=65536k 0 0\n",
    );
    let f = facts(&t, vec![], &[]);
    let m = one(&f, "pod.memlock");
    assert_eq!(m.status, Status::Warning);
    assert!(
        m.summary.contains("limited to 64 KiB") && m.fix.unwrap().contains("IPC_LOCK"),
        "{}",
        m.summary
    );
    let s = one(&f, "pod.shm");
    assert_eq!(s.status, Status::Warning);
    assert!(s.summary.starts_with("/dev/shm is 64 MiB"), "{}", s.summary);
    t.write("proc/self/mounts", "overlay / overlay rw 0 0\n");
    assert_eq!(
        one(&facts(&t, vec![], &[]), "pod.shm").summary,
        "/dev/shm is not mounted: NCCL's shared-memory transport between local ranks fails"
    );
}

#[test]
fn mount_limits_and_container_parsing() {
    assert_eq!(
        limits::shm_from_mounts("tmpfs /dev/shm tmpfs rw,size=8g 0 0", ""),
        Ok(8 << 30)
    );
    assert_eq!(
        limits::shm_from_mounts("shm /dev/shm tmpfs rw 0 0", "MemTotal: 1024 kB\n"),
        Ok(512 << 10)
    );
    assert_eq!(
        limits::shm_from_mounts("tmpfs /run tmpfs rw,size=1k 0 0", "MemTotal: 1 kB"),
        Err(ShmProblem::NotMounted)
    );
    assert_eq!(
        limits::memlock_from_limits("Max locked memory  8388608  8388608  bytes"),
        Some(Memlock {
            soft: Some(8 << 20),
            hard: Some(8 << 20)
        })
    );
    assert_eq!(
        limits::memlock_from_limits("Max open files 1024 1024 files"),
        None
    );
    let t = Tree::new();
    assert_eq!(
        pod::detect_container(&t.path("proc"), &|_| None),
        pod::Container::Host
    );
    assert!(matches!(
        pod::detect_container(&t.path("proc"), &|k| (k == "KUBERNETES_SERVICE_HOST")
            .then(|| "10.96.0.1".into())),
        pod::Container::Pod(_)
    ));
    t.write("proc/1/cgroup", "12:devices:/docker/0123abcd\n");
    assert!(matches!(
        pod::detect_container(&t.path("proc"), &|_| None),
        pod::Container::Container(_)
    ));
}

#[test]
fn nvidia_flavour_from_taint_alone_and_nccl_levels() {
    let t = Tree::new();
    t.module("nvidia", Some("560.35.03"));
    t.write("sys/module/nvidia/taint", "PO\n");
    assert_eq!(gpu::read_nvidia(&t.roots()).flavor, Flavor::Proprietary);
    t.write("sys/module/nvidia/taint", "O\n");
    assert_eq!(gpu::read_nvidia(&t.roots()).flavor, Flavor::Open);
    // NCCL compares the names exactly: lower case is not a level.
    assert_eq!(Distance::parse_level("PXB"), Some(Distance::Pxb));
    assert_eq!(Distance::parse_level("pxb"), None);
    assert_eq!(Distance::parse_level("3"), Some(Distance::Phb));
    assert_eq!(Distance::parse_level("9"), Some(Distance::Sys));
    assert_eq!(Distance::parse_level("near"), None);
}

#[test]
fn checks_render_with_evidence_and_fix_in_text_and_json() {
    let t = gpu_node(false, "5.15.0-105-generic");
    let f = facts(&t, vec![], &[]);
    let checks = checks(&f);
    let mut text = String::new();
    render_node_text(&mut text, &checks);
    assert!(
        text.contains("  [fail] mlx5_0: no GPUDirect RDMA"),
        "{text}"
    );
    assert!(
        text.contains("evidence: kernel 5.15.0-105-generic"),
        "{text}"
    );
    assert!(
        text.contains("fix: GPU Operator: set driver.rdma.enabled=true"),
        "{text}"
    );
    let j = node_json(&f, &checks);
    assert_eq!(j["status"], "fail");
    assert_eq!(j["nvidia"]["kernel_modules"], "proprietary");
    assert_eq!(j["gpus"][0]["bdf"], "0000:03:00.0");
    assert_eq!(j["rdma_devices"][0]["pci"]["driver"], "mlx5_core");
    let first = &j["checks"][0];
    for k in ["id", "subject", "status", "summary", "evidence", "fix"] {
        assert!(first.get(k).is_some(), "{k} missing in {first}");
    }
    assert_eq!(j["counts"]["fail"], 1);
}

mod levels_and_vfs;
mod storage;
