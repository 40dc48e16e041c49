//! Tests of discovery on fake trees.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::parse::parse_lid;
use super::testutil::{FakeSysfs, rxe_on_dummy, rxe_on_lo};
use super::*;
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

fn gid_entry(text: &str) -> GidEntry {
    GidEntry::new(0, parse_gid(text).unwrap(), GidType::RoceV2, None)
}

#[test]
fn missing_class_dir_is_empty_list() {
    let fs = FakeSysfs::new();
    assert_eq!(list_devices(fs.root()).unwrap(), vec![]);
}

#[test]
fn empty_class_dir_is_empty_list() {
    let fs = FakeSysfs::new().class_dir();
    assert_eq!(list_devices(fs.root()).unwrap(), vec![]);
}

#[test]
fn class_path_not_a_directory_is_error() {
    let fs = FakeSysfs::new().write("class/infiniband", "oops");
    let err = list_devices(fs.root()).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("class/infiniband"), "{text}");
    assert!(std::error::Error::source(&err).is_some());
}

#[test]
fn rxe_on_loopback() {
    let fs = rxe_on_lo(FakeSysfs::new());
    let devs = list_devices(fs.root()).unwrap();
    assert_eq!(devs.len(), 1);
    let d = &devs[0];
    assert_eq!(d.name, "rxe0");
    assert_eq!(d.node_guid, Some(0x0200_00ff_fe00_0000));
    assert_eq!(d.sys_image_guid, Some(0x0200_00ff_fe00_0000));
    assert_eq!(d.node_type.as_deref(), Some("1: CA"));
    assert_eq!(d.fw_ver.as_deref(), Some("0.0.0"));
    assert_eq!(d.pci_path, None, "rxe is virtual");
    assert_eq!(d.pci_address(), None);
    assert_eq!(d.parent_netdev.as_deref(), Some("lo"));
    assert!(d.notes.is_empty(), "{:?}", d.notes);

    assert_eq!(d.ports.len(), 1);
    let p = d.port(1).unwrap();
    assert_eq!(p.state, PortState::Active);
    assert!(p.state.is_active());
    assert_eq!(p.phys_state.as_deref(), Some("5: LinkUp"));
    assert_eq!(p.link_layer, LinkLayer::Ethernet);
    assert_eq!(p.rate.as_ref().unwrap().mbps(), 2500);
    assert_eq!(p.lid, Some(0));
    assert_eq!(p.netdev.as_deref(), Some("lo"));

    assert_eq!(p.gids.len(), 8, "zero slots are kept in the raw table");
    let g0 = &p.gids[0];
    let g1 = &p.gids[1];
    assert_eq!(g0.index, 0);
    assert_eq!(g0.gid_type, GidType::RoceV1);
    assert_eq!(g1.gid_type, GidType::RoceV2);
    assert_eq!(g1.ipv4(), Some(Ipv4Addr::LOCALHOST));
    assert_eq!(g1.family(), Some(AddrFamily::V4));
    assert_eq!(g1.to_string(), "::ffff:127.0.0.1");
    assert_eq!(g1.raw_text(), "0000:0000:0000:0000:0000:ffff:7f00:0001");
    assert_eq!(g1.netdev.as_deref(), Some("lo"));
    for g in &p.gids[2..] {
        assert!(g.is_zero());
        assert_eq!(g.gid_type, GidType::Unknown, "missing type file is unknown");
        assert_eq!(g.netdev, None);
        assert_eq!(g.family(), None);
    }
}

#[test]
fn rxe_with_link_local_and_ipv6() {
    let fs = rxe_on_dummy(rxe_on_lo(FakeSysfs::new()));
    let devs = list_devices(fs.root()).unwrap();
    let names: Vec<&str> = devs.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["rxe0", "rxe1"], "sorted by name");
    let p = devs[1].port(1).unwrap();
    assert_eq!(p.rate.as_ref().unwrap().mbps(), 10_000);
    assert_eq!(p.netdev.as_deref(), Some("dummy1"));
    let g = &p.gids;
    assert!(g[0].is_link_local() && g[1].is_link_local());
    assert_eq!(g[0].gid_type, GidType::RoceV1);
    assert_eq!(g[1].gid_type, GidType::RoceV2);
    assert_eq!(g[0].family(), Some(AddrFamily::V6));
    assert_eq!(g[0].to_string(), "fe80::42f1:c2ff:fe3a:10aa");
    assert_eq!(g[3].ip(), IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2)));
    assert_eq!(g[5].ip(), "2001:db8::2".parse::<IpAddr>().unwrap());
    assert_eq!(g[5].family(), Some(AddrFamily::V6));
    assert!(!g[5].is_link_local());
}

#[test]
fn pci_device_with_infiniband_port() {
    let fs = FakeSysfs::new()
        .device("mlx5_0")
        .dev_file("node_guid", "0002:c903:0031:7c00")
        .dev_file("sys_image_guid", "0002:c903:0031:7c03")
        .dev_file("node_type", "1: CA")
        .dev_file("fw_ver", "20.31.1014")
        .device_link("devices/pci0000:00/0000:00:02.0/0000:03:00.0")
        .port(1, "4: ACTIVE", "InfiniBand")
        .port_file("phys_state", "5: LinkUp")
        .port_file("rate", "100 Gb/sec (4X EDR)")
        .port_file("lid", "0x1a")
        .gid(
            0,
            "fe80:0000:0000:0000:0002:c903:0031:7c01",
            Some("IB/RoCE v1"),
            None,
        )
        .empty_gids(1..4);
    let devs = list_devices(fs.root()).unwrap();
    let d = &devs[0];
    let pci = d.pci_path.as_ref().unwrap();
    assert!(
        pci.ends_with("devices/pci0000:00/0000:00:02.0/0000:03:00.0"),
        "{pci:?}"
    );
    assert!(pci.is_absolute());
    assert_eq!(d.pci_address(), Some("0000:03:00.0"));
    assert_eq!(d.fw_ver.as_deref(), Some("20.31.1014"));
    assert_eq!(d.parent_netdev, None);
    let p = d.port(1).unwrap();
    assert_eq!(p.link_layer, LinkLayer::InfiniBand);
    assert_eq!(p.lid, Some(0x1a));
    assert_eq!(p.rate.as_ref().unwrap().gbps, 100.0);
    assert_eq!(p.rate.as_ref().unwrap().text, "100 Gb/sec (4X EDR)");
    assert_eq!(p.rate.as_ref().unwrap().mbps(), 100_000);
    assert_eq!(
        p.gids[0].gid_type,
        GidType::Ib,
        "IB/RoCE v1 on an IB port is IB"
    );
    assert_eq!(p.netdev, None);
    assert!(d.notes.is_empty(), "{:?}", d.notes);
}

#[test]
fn relative_device_link_and_non_pci_target() {
    let fs = FakeSysfs::new()
        .device("mlx5_1")
        .write("devices/pci0000:80/0000:80:01.0/0000:81:00.1/.keep", "");
    let link = fs.root().join("class/infiniband/mlx5_1/device");
    std::os::unix::fs::symlink(
        "../../../devices/pci0000:80/0000:80:01.0/0000:81:00.1",
        &link,
    )
    .unwrap();
    let fs = fs.device("virt0").device_link("devices/virtual/net/foo");
    let devs = list_devices(fs.root()).unwrap();
    assert_eq!(devs[0].pci_address(), Some("0000:81:00.1"));
    assert_eq!(devs[1].name, "virt0");
    assert_eq!(devs[1].pci_path, None);
}

#[test]
fn unreadable_files_become_notes() {
    // A directory where a file is expected reads with EISDIR, like an unreadable attribute.
    let fs = FakeSysfs::new()
        .device("bad0")
        .dev_file("fw_ver/x", "")
        .dev_file("node_guid", "not-a-guid")
        .dev_file("node_type", "1: CA")
        .port(1, "garbage", "Ethernet")
        .port_file("rate", "fast")
        .gid(
            0,
            "fe80:0000:0000:0000:0000:0000:0000:0001",
            Some("RoCE v2"),
            Some("eth0"),
        )
        .gid(1, "zzzz", Some("RoCE v2"), None)
        .port_file("gid_attrs/types/2/x", "")
        .gid(2, "0000:0000:0000:0000:0000:ffff:0a00:0001", None, None)
        .device("good0")
        .dev_file("node_type", "1: CA");
    let devs = list_devices(fs.root()).unwrap();
    assert_eq!(devs.len(), 2);
    let bad = &devs[0];
    assert_eq!(bad.fw_ver, None);
    assert_eq!(bad.node_guid, None);
    assert_eq!(bad.node_type.as_deref(), Some("1: CA"));
    let notes = bad.notes.join("\n");
    assert!(notes.contains("fw_ver:"), "{notes}");
    assert!(notes.contains("node_guid: cannot parse"), "{notes}");
    assert!(notes.contains("port 1: state: cannot parse"), "{notes}");
    assert!(notes.contains("port 1: rate: cannot parse"), "{notes}");
    assert!(notes.contains("port 1: gid 1: cannot parse"), "{notes}");
    assert!(
        !notes.contains("sys_image_guid"),
        "missing files are not noted: {notes}"
    );
    let p = bad.port(1).unwrap();
    assert_eq!(p.state, PortState::Other(0));
    assert_eq!(p.rate, None);
    let idx: Vec<u32> = p.gids.iter().map(|g| g.index).collect();
    assert_eq!(idx, [0, 2], "unparsable gid skipped");
    assert_eq!(
        p.gids[1].gid_type,
        GidType::Unknown,
        "unreadable type is unknown"
    );
    assert_eq!(p.netdev.as_deref(), Some("eth0"));
    assert!(devs[1].notes.is_empty());
}

#[test]
fn sparse_gid_table_sorted_numerically() {
    let fs = FakeSysfs::new()
        .device("mlx5_2")
        .port(1, "4: ACTIVE", "Ethernet")
        .gid(
            10,
            "0000:0000:0000:0000:0000:ffff:0a00:0003",
            Some("RoCE v2"),
            Some("net1"),
        )
        .gid(
            4,
            "fe80:0000:0000:0000:0000:0000:0000:0001",
            Some("IB/RoCE v1"),
            None,
        )
        .gid(
            5,
            "fe80:0000:0000:0000:0000:0000:0000:0001",
            Some("RoCE v2"),
            None,
        )
        .port(2, "1: DOWN", "Ethernet");
    let d = &list_devices(fs.root()).unwrap()[0];
    let idx: Vec<u32> = d.ports[0].gids.iter().map(|g| g.index).collect();
    assert_eq!(idx, [4, 5, 10]);
    assert_eq!(d.ports[0].netdev.as_deref(), Some("net1"));
    assert_eq!(d.ports[1].num, 2);
    assert_eq!(d.ports[1].state, PortState::Down);
    assert_eq!(d.ports[1].gids, vec![]);
}

#[test]
fn guid_parsing() {
    assert_eq!(
        parse_guid("0011:2233:4455:6677"),
        Some(0x0011_2233_4455_6677)
    );
    assert_eq!(parse_guid("ffff:ffff:ffff:ffff\n"), Some(u64::MAX));
    assert_eq!(parse_guid("0011:2233:4455"), None);
    assert_eq!(parse_guid("0011:2233:4455:6677:8899"), None);
    assert_eq!(parse_guid("0011:2233:4455:66g7"), None);
    assert_eq!(parse_guid("0011:2233:4455:66778"), None);
    assert_eq!(parse_guid(""), None);
    assert_eq!(format_guid(0x0011_2233_4455_6677), "0011:2233:4455:6677");
}

#[test]
fn port_state_parsing() {
    assert_eq!(PortState::parse("1: DOWN"), Some(PortState::Down));
    assert_eq!(PortState::parse("2: INIT"), Some(PortState::Init));
    assert_eq!(PortState::parse("3: ARMED"), Some(PortState::Armed));
    assert_eq!(PortState::parse("4: ACTIVE\n"), Some(PortState::Active));
    assert_eq!(
        PortState::parse("5: ACTIVE_DEFER"),
        Some(PortState::ActiveDefer)
    );
    assert_eq!(PortState::parse("7: WHATEVER"), Some(PortState::Other(7)));
    assert_eq!(PortState::parse("ACTIVE"), None);
    assert_eq!(PortState::from_code(4), PortState::Active);
    assert_eq!(PortState::Active.to_string(), "ACTIVE");
}

#[test]
fn link_layer_parsing() {
    assert_eq!(LinkLayer::parse("InfiniBand\n"), LinkLayer::InfiniBand);
    assert_eq!(LinkLayer::parse("Ethernet"), LinkLayer::Ethernet);
    assert_eq!(LinkLayer::parse("OPA"), LinkLayer::Unknown("OPA".into()));
    assert_eq!(LinkLayer::from_verbs(2), LinkLayer::Ethernet);
    assert_eq!(LinkLayer::from_verbs(0), LinkLayer::InfiniBand);
}

#[test]
fn rate_parsing() {
    let r = Rate::parse("100 Gb/sec (4X EDR)").unwrap();
    assert_eq!((r.gbps, r.mbps()), (100.0, 100_000));
    assert_eq!(Rate::parse("2.5 Gb/sec (1X SDR)").unwrap().mbps(), 2500);
    assert_eq!(Rate::parse("10 Gb/sec (1X QDR)").unwrap().mbps(), 10_000);
    assert_eq!(Rate::parse("56 Gb/sec (4X FDR)").unwrap().mbps(), 56_000);
    assert_eq!(
        Rate::parse("400 Gb/sec (4X NDR)\n").unwrap().text,
        "400 Gb/sec (4X NDR)"
    );
    assert_eq!(Rate::parse(""), None);
    assert_eq!(Rate::parse("fast"), None);
    assert_eq!(Rate::parse("-1 Gb/sec"), None);
}

#[test]
fn lid_parsing() {
    assert_eq!(parse_lid("0x0"), Some(0));
    assert_eq!(parse_lid("0xffff"), Some(0xffff));
    assert_eq!(parse_lid("12"), Some(12));
    assert_eq!(parse_lid("0x10000"), None);
}

#[test]
fn gid_type_depends_on_link_layer() {
    let eth = LinkLayer::Ethernet;
    let ib = LinkLayer::InfiniBand;
    assert_eq!(GidType::parse("IB/RoCE v1", &eth), GidType::RoceV1);
    assert_eq!(GidType::parse("IB/RoCE v1", &ib), GidType::Ib);
    assert_eq!(GidType::parse("RoCE v2\n", &eth), GidType::RoceV2);
    assert_eq!(GidType::parse("", &eth), GidType::Unknown);
    assert_eq!(GidType::RoceV2.roce_version(), Some(2));
    assert_eq!(GidType::Ib.roce_version(), None);
}

#[test]
fn ipv4_mapped_detection() {
    let g = gid_entry("0000:0000:0000:0000:0000:ffff:0a01:0203");
    assert_eq!(g.ipv4(), Some(Ipv4Addr::new(10, 1, 2, 3)));
    assert_eq!(g.family(), Some(AddrFamily::V4));
    assert_eq!(g.to_string(), "::ffff:10.1.2.3");
    // IPv4-compatible (deprecated ::a.b.c.d) is not IPv4-mapped.
    let compat = gid_entry("::a01:203");
    assert_eq!(compat.ipv4(), None);
    assert_eq!(compat.family(), Some(AddrFamily::V6));
    let v6 = gid_entry("2001:db8::1");
    assert_eq!(v6.ipv4(), None);
    assert_eq!(v6.ip(), "2001:db8::1".parse::<IpAddr>().unwrap());
    assert_eq!(v6.raw_text(), "2001:0db8:0000:0000:0000:0000:0000:0001");
}

#[test]
fn link_local_and_zero_detection() {
    assert!(gid_entry("fe80::1").is_link_local());
    assert!(gid_entry("febf:ffff::1").is_link_local());
    assert!(
        !gid_entry("fec0::1").is_link_local(),
        "site-local is not fe80::/10"
    );
    assert!(!gid_entry("fe7f::1").is_link_local());
    assert!(!gid_entry("::ffff:127.0.0.1").is_link_local());
    let zero = gid_entry("0000:0000:0000:0000:0000:0000:0000:0000");
    assert!(zero.is_zero());
    assert_eq!(zero.family(), None);
    assert!(!gid_entry("::1").is_zero());
    assert_eq!(parse_gid("not a gid"), None);
    assert_eq!(parse_gid("0000:0000:0000"), None);
}

#[test]
fn speed_table() {
    assert_eq!(ib_speed_mbps(1, 1), Some(2_500)); // 1x SDR
    assert_eq!(ib_speed_mbps(4, 2), Some(40_000)); // 4x QDR
    assert_eq!(ib_speed_mbps(8, 2), Some(40_000)); // 4x FDR10
    assert_eq!(ib_speed_mbps(16, 2), Some(56_000)); // 4x FDR
    assert_eq!(ib_speed_mbps(32, 2), Some(100_000)); // 4x EDR
    assert_eq!(ib_speed_mbps(64, 2), Some(200_000)); // 4x HDR
    assert_eq!(ib_speed_mbps(128, 2), Some(400_000)); // 4x NDR
    assert_eq!(ib_speed_mbps(64, 16), Some(100_000)); // 2x HDR
    assert_eq!(ib_speed_mbps(2, 8), Some(60_000)); // 12x DDR
    assert_eq!(ib_speed_mbps(32, 4), Some(200_000)); // 8x EDR
    assert_eq!(ib_speed_mbps(3, 2), None);
    assert_eq!(ib_speed_mbps(32, 3), None);
    assert_eq!(speed_name(32), "EDR");
    assert_eq!(speed_name(8), "FDR10");
    assert_eq!(speed_name(0), "unknown");
    assert_eq!(width_lanes(16), Some(2));
    assert_eq!(width_lanes(0), None);
}

#[test]
fn iommu_parsing() {
    assert_eq!(iommu_mode(""), IommuMode::NotSet);
    assert_eq!(
        iommu_mode("BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet"),
        IommuMode::NotSet
    );
    assert_eq!(
        iommu_mode("intel_iommu=on iommu=pt"),
        IommuMode::Passthrough
    );
    assert_eq!(iommu_mode("amd_iommu=on iommu=pt"), IommuMode::Passthrough);
    assert_eq!(iommu_mode("iommu.passthrough=1"), IommuMode::Passthrough);
    assert_eq!(iommu_mode("intel_iommu=off"), IommuMode::Off);
    assert_eq!(iommu_mode("amd_iommu=off iommu=pt"), IommuMode::Off);
    assert_eq!(iommu_mode("iommu=off"), IommuMode::Off);
    assert_eq!(
        iommu_mode("ro intel_iommu=on quiet"),
        IommuMode::On("intel_iommu=on".into())
    );
    assert_eq!(
        iommu_mode("intel_iommu=on,sm_on iommu.strict=1"),
        IommuMode::On("intel_iommu=on,sm_on iommu.strict=1, strict invalidation".into())
    );
    assert_eq!(
        iommu_mode("iommu.passthrough=0 iommu.strict=0"),
        IommuMode::On("iommu.passthrough=0 iommu.strict=0, lazy invalidation".into())
    );
    assert_eq!(
        iommu_mode("iommu=pt iommu=nopt intel_iommu=on").gdr_friendly(),
        Some(false)
    );
    assert_eq!(iommu_mode("iommu.strict=1"), IommuMode::NotSet);
    assert_eq!(
        iommu_mode("intel_iommu=on iommu=on"),
        IommuMode::On("intel_iommu=on iommu=on".into())
    );

    assert!(
        IommuMode::Passthrough
            .describe()
            .contains("good for GPUDirect RDMA")
    );
    assert!(IommuMode::Off.describe().contains("GPUDirect RDMA"));
    let on = IommuMode::On("intel_iommu=on".into()).describe();
    assert!(
        on.contains("intel_iommu=on") && on.contains("iommu=pt"),
        "{on}"
    );
    assert!(IommuMode::NotSet.describe().contains("default"));
}

#[test]
fn cmdline_reading() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(read_cmdline(dir.path()), None);
    std::fs::write(dir.path().join("cmdline"), "ro quiet iommu=pt\n").unwrap();
    assert_eq!(
        read_cmdline(dir.path()).as_deref(),
        Some("ro quiet iommu=pt")
    );
}

#[test]
fn addr_family_text() {
    assert_eq!("AF_INET".parse::<AddrFamily>(), Ok(AddrFamily::V4));
    assert_eq!("af_inet6".parse::<AddrFamily>(), Ok(AddrFamily::V6));
    assert!("AF_UNIX".parse::<AddrFamily>().is_err());
    assert_eq!(AddrFamily::default(), AddrFamily::V4);
    assert_eq!(AddrFamily::V6.to_string(), "AF_INET6");
    assert_eq!(AddrFamily::V4.ip_name(), "IPv4");
}

#[test]
fn error_display_names_path() {
    let e = SysfsError::new(
        Path::new("/sys/class/infiniband"),
        io::Error::from(io::ErrorKind::PermissionDenied),
    );
    let s = e.to_string();
    assert!(s.contains("/sys/class/infiniband"), "{s}");
    assert!(s.contains("permission denied"), "{s}");
}
