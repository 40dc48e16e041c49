//! Guest tests (soft-RoCE test bed: rxe0 on lo, rxe1 on dummy1): devices and properties as the
//! plugin reports them, compared with `ibv_devinfo`; bad input with live devices; the listen
//! handle's documented prefix. Fails (does not skip) outside the guest.

use ferro_ffi::{NCCL_NET_DEVICE_HOST, NCCL_PTR_HOST, log_level};
use ferro_tests::guest::{self, DEV, DEV2};
use ferro_tests::handle::{FAMILY_IPV4, FAMILY_IPV6, HANDLE_MAGIC};
use ferro_tests::net::Net;
use ferro_tests::{checks, logger};
use std::net::TcpStream;
use std::time::Duration;

fn inited() -> &'static Net {
    let n = Net::global().unwrap_or_else(|e| panic!("{e}"));
    if let Err(code) = n.init() {
        panic!(
            "init returned {code:?}\n{}",
            logger::format_logs(&logger::logs())
        );
    }
    n
}

#[test]
fn two_devices_with_properties_matching_ibv_devinfo() {
    let _g = guest::serial();
    let n = inited();
    let ndev = n.devices().expect("devices");
    assert_eq!(ndev, 2, "expected rxe0 and rxe1");
    let mut names = Vec::new();
    for dev in 0..ndev {
        let p = n.get_properties(dev).expect("getProperties");
        assert!(
            p.unset_fields().is_empty(),
            "device {dev}: fields left unfilled: {:?} in {p:?}",
            p.unset_fields()
        );
        let name = p.name.clone().expect("name");
        assert!(name == DEV || name == DEV2, "unexpected device {name}");
        let info = guest::ibv_devinfo(&name).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            p.guid, info.sys_image_guid,
            "{name}: guid {:#x} vs ibv_devinfo sys_image_guid {:#x}",
            p.guid, info.sys_image_guid
        );
        assert_eq!(p.port, 1, "{name}: port");
        assert!(
            info.ports.contains(&1),
            "{name}: ibv_devinfo lists ports {:?}",
            info.ports
        );
        assert!(p.speed > 0, "{name}: speed {} Mbps", p.speed);
        assert_eq!(p.pci_path, None, "{name}: a virtual device has no PCI path");
        assert_ne!(
            p.ptr_support & NCCL_PTR_HOST,
            0,
            "{name}: ptrSupport {:#x} lacks NCCL_PTR_HOST",
            p.ptr_support
        );
        assert!(p.max_recvs >= 1, "{name}: maxRecvs {}", p.max_recvs);
        assert!(p.max_comms >= 1, "{name}: maxComms {}", p.max_comms);
        assert_eq!(
            p.net_device_type, NCCL_NET_DEVICE_HOST,
            "{name}: netDeviceType"
        );
        assert_eq!(p.net_device_version, 0, "{name}: netDeviceVersion");
        assert!(
            p.latency.is_finite() && p.latency >= 0.0,
            "{name}: latency {}",
            p.latency
        );
        assert!(
            p.reg_is_global == 0 || p.reg_is_global == 1,
            "{name}: regIsGlobal {}",
            p.reg_is_global
        );
        names.push(name);
    }
    names.sort();
    assert_eq!(names, [DEV, DEV2]);
    let all = logger::logs();
    assert!(
        all.iter()
            .any(|l| l.level == log_level::INFO && l.text.contains(DEV) && l.text.contains(DEV2)),
        "no INFO line lists both devices:\n{}",
        logger::format_logs(&all)
    );
}

#[test]
fn properties_agree_across_threads() {
    let _g = guest::serial();
    let n = inited();
    let reference: Vec<_> = (0..2)
        .map(|d| n.get_properties(d).expect("getProperties"))
        .collect();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..200 {
                    for (d, want) in reference.iter().enumerate() {
                        let got = n.get_properties(d as i32).expect("getProperties");
                        assert_eq!(&got, want);
                    }
                }
            });
        }
    });
}

#[test]
fn bad_input_is_refused_with_live_devices() {
    let _g = guest::serial();
    let n = inited();
    let dev = n.device_by_name(DEV).unwrap_or_else(|e| panic!("{e}"));
    let ndev = n.devices().expect("devices");
    let problems = checks::bad_input_problems(n, dev, ndev);
    assert!(
        problems.is_empty(),
        "bad input handled wrongly:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn listen_handles_have_the_documented_prefix_and_a_reachable_port() {
    let _g = guest::serial();
    let n = inited();
    for name in [DEV, DEV2] {
        let dev = n.device_by_name(name).unwrap_or_else(|e| panic!("{e}"));
        let (h, listen) = n.listen(dev).expect("listen");
        assert_eq!(h.magic(), HANDLE_MAGIC, "{name}: {h:?}");
        assert!(
            h.family() == FAMILY_IPV4 || h.family() == FAMILY_IPV6,
            "{name}: {h:?}"
        );
        assert_ne!(h.port(), 0, "{name}: {h:?}");
        let addr = h.socket_addr().expect("socket address");
        // A stray TCP connection must be harmless (the hostile-peers scenario goes further).
        let probe = TcpStream::connect_timeout(&addr, Duration::from_secs(5));
        assert!(
            probe.is_ok(),
            "{name}: cannot reach the listen port {addr}: {probe:?}"
        );
        drop(probe);
        let (h2, listen2) = n.listen(dev).expect("second listen");
        assert_ne!(h2, h, "{name}: two listen comms have identical handles");
        n.close_listen(listen2).expect("closeListen");
        n.close_listen(listen).expect("closeListen");
    }
}
