//! Tests of the doctor's layers on hand-built reports and fake trees.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::node::fake::{Tree, facts};
use ferro_verbs::gid::{GidError, select_gid};
use ferro_verbs::loader::{Capabilities, LoadError};
use ferro_verbs::sysfs::parse_gid;
use ferro_verbs::sysfs::{GidEntry, GidType, IommuMode, LinkLayer, PortState};
use nccl_net_ferro::config::Config;
use nccl_net_ferro::discovery::PortVerdict as PortDecision;
use serde_json::{Value, json};
use std::ffi::OsString;
use std::path::PathBuf;

fn entry(index: u32, text: &str, t: GidType, ndev: Option<&str>) -> GidEntry {
    GidEntry::new(index, parse_gid(text).unwrap(), t, ndev.map(str::to_string))
}

pub(crate) fn rxe_port() -> Port {
    let gids = vec![
        entry(0, "::ffff:127.0.0.1", GidType::RoceV1, Some("lo")),
        entry(1, "::ffff:127.0.0.1", GidType::RoceV2, Some("lo")),
        GidEntry::new(2, [0; 16], GidType::Unknown, None),
        GidEntry::new(3, [0; 16], GidType::Unknown, None),
    ];
    let gid = select_gid(&LinkLayer::Ethernet, &gids, &Config::default().gid_policy()).unwrap();
    Port {
        num: 1,
        state: PortState::Active,
        link_layer: LinkLayer::Ethernet,
        speed_mbps: Some(2500),
        speed_text: "1X SDR".into(),
        active_mtu: Some(1024),
        lid: 0,
        netdev: Some("lo".into()),
        gids,
        gid: Ok(gid),
        usable: Ok(()),
    }
}

pub(crate) fn device(name: &str, ports: Vec<Port>) -> Device {
    Device {
        name: name.into(),
        listed_by_verbs: true,
        node_guid: Some(0x0200_00ff_fe00_0000),
        sys_image_guid: Some(0x0200_00ff_fe00_0000),
        fw_ver: Some("0.0.0".into()),
        max_qp: Some(262_144),
        pci_path: None,
        error: None,
        notes: Vec::new(),
        gdr: Some(format!(
            "{name}: GPUDirect RDMA off: provider rejects dma-buf (EOPNOTSUPP); NCCL will stage through host memory"
        )),
        ptr_support: Some(1),
        ports,
    }
}

pub(crate) fn host() -> HostFacts {
    HostFacts {
        limits: Limits {
            memlock: Ok(Memlock {
                soft: None,
                hard: None,
            }),
            cap_ipc_lock: Some(false),
            shm: Ok(Shm {
                size_bytes: 16 << 30,
                available_bytes: Some(16 << 30),
            }),
        },
        iommu: Some(IommuMode::Passthrough),
        dev_infiniband: Some(vec!["rdma_cm".into(), "uverbs0".into()]),
        gpu: GpuFacts::default(),
        env: NcclEnv {
            net_plugin: Some("ferro".into()),
            ..NcclEnv::default()
        },
    }
}

pub(crate) fn report(devices: Vec<Device>) -> Report {
    Report {
        plugin_name: "Ferro".into(),
        plugin_version: "0.1.0".into(),
        config: Config::default(),
        config_warnings: Vec::new(),
        nccl_variables: nccl_net_ferro::config::nccl::rows(&Config::default().summary(), &|n| {
            (n == "NCCL_IB_OOO_RQ").then(|| "1".to_string())
        }),
        library: Library {
            name: "libibverbs.so.1".into(),
            override_value: None,
            outcome: Ok(Capabilities {
                reg_mr_iova2: true,
                reg_dmabuf_mr: true,
                query_gid_ex: true,
                query_gid_table: true,
                query_port_speed: false,
            }),
        },
        sysfs_root: PathBuf::from("/sys"),
        devices,
        enumeration_errors: Vec::new(),
        host: host(),
        node: None,
        gdr_policy: GdrPolicy::Required,
    }
}

fn down_port() -> Port {
    let mut p = rxe_port();
    p.state = PortState::Down;
    p.netdev = Some("ens1f1".into());
    p.usable = explain(
        &PortDecision::NotActive { state: p.state },
        &p.link_layer,
        p.netdev.as_deref(),
    );
    p
}

/// Whitespace-normalised text, so wrapping does not matter to `contains`.
pub(crate) fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn verdict_lines_ok_and_not_usable() {
    let r = report(vec![
        device("rxe0", vec![rxe_port()]),
        device("mlx5_1", vec![down_port()]),
    ]);
    let lines: Vec<String> = verdict_lines(&r).into_iter().map(|v| v.line).collect();
    assert_eq!(
        lines[0],
        "rxe0 port 1: OK — RoCE v2 GID 1 (::ffff:127.0.0.1) via lo, 2500 Mbps"
    );
    assert!(
        lines[1].starts_with("mlx5_1 port 1: NOT USABLE — port state DOWN"),
        "{}",
        lines[1]
    );
    assert!(lines[1].contains("ip link set ens1f1 up"), "{}", lines[1]);
    let o = overall(&r);
    assert!(o.ok);
    assert_eq!(o.usable_ports, 1);
    assert!(
        o.summary
            .starts_with("OK — the plugin would expose 1 NCCL network device(s): rxe0:1"),
        "{}",
        o.summary
    );
    assert_eq!(exit_code(&r), 0);
    let text = render_text(&r);
    assert!(
        text.contains("  rxe0 port 1: OK — RoCE v2 GID 1 (::ffff:127.0.0.1) via lo, 2500 Mbps\n"),
        "{text}"
    );
    assert!(text.contains("  => OK — the plugin would expose"), "{text}");
}

#[test]
fn infiniband_and_device_errors() {
    let mut ib = rxe_port();
    ib.link_layer = LinkLayer::InfiniBand;
    ib.lid = 26;
    ib.speed_mbps = Some(100_000);
    let mut broken = device("mlx5_2", vec![rxe_port()]);
    broken.error = Some("cannot open or query the device: ibv_open_device: EACCES".into());
    let mut portless = device("mlx5_3", Vec::new());
    portless.error = Some("cannot open or query the device: x".into());
    let r = report(vec![device("mlx5_0", vec![ib]), broken, portless]);
    let lines: Vec<String> = verdict_lines(&r).into_iter().map(|v| v.line).collect();
    assert_eq!(
        lines[0],
        "mlx5_0 port 1: OK — InfiniBand LID 26, 100000 Mbps"
    );
    assert_eq!(
        lines[1],
        "mlx5_2 port 1: NOT USABLE — cannot open or query the device: ibv_open_device: EACCES"
    );
    assert_eq!(
        lines[2],
        "mlx5_3: NOT USABLE — cannot open or query the device: x"
    );
    assert_eq!(overall(&r).usable_ports, 1);
}

#[test]
fn gid_table_marks_the_choice_and_skips_zero_entries() {
    let t = gid_table(&rxe_port());
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 4, "{t}");
    assert!(
        lines[0].contains("index") && lines[0].contains("GID") && lines[0].contains("netdev"),
        "{t}"
    );
    assert_eq!(
        lines[1],
        "            0  0000:0000:0000:0000:0000:ffff:7f00:0001  ::ffff:127.0.0.1  RoCE v1  v4  lo"
    );
    assert_eq!(
        lines[2],
        "      *     1  0000:0000:0000:0000:0000:ffff:7f00:0001  ::ffff:127.0.0.1  RoCE v2  v4  lo"
    );
    assert_eq!(lines[3].trim(), "(2 empty entries not shown)");
    let text = render_text(&report(vec![device("rxe0", vec![rxe_port()])]));
    assert!(
        text.contains("GID choice: auto: first RoCE v2 IPv4 GID"),
        "{text}"
    );
}

#[test]
fn gid_error_is_shown_and_explains_the_verdict() {
    let mut p = rxe_port();
    p.gids = vec![
        entry(0, "fe80::1", GidType::RoceV2, Some("eth0")),
        GidEntry::new(1, [0; 16], GidType::Unknown, None),
    ];
    let error = select_gid(&p.link_layer, &p.gids, &Config::default().gid_policy()).unwrap_err();
    let err = error.to_string();
    p.gid = Err(err.clone());
    p.netdev = Some("eth0".into());
    p.usable = explain(
        &PortDecision::NoUsableGid { error },
        &p.link_layer,
        Some("eth0"),
    );
    let r = report(vec![device("mlx5_0", vec![p.clone()])]);
    let text = render_text(&r);
    let t = gid_table(&p);
    assert!(!t.contains('*'), "nothing chosen: {t}");
    assert!(squash(&text).contains(&format!("GID: {err}")), "{text}");
    let line = &verdict_lines(&r)[0].line;
    assert!(
        line.starts_with("mlx5_0 port 1: NOT USABLE — no usable GID: only link-local"),
        "{line}"
    );
    assert!(line.contains("give eth0 an IP address"), "{line}");
    assert_eq!(exit_code(&r), 1);
    assert!(
        overall(&r)
            .summary
            .starts_with("NOT USABLE — none of the 1 RDMA port(s)")
    );
}

#[test]
fn no_device_explanation_on_a_host_without_rdma() {
    let mut r = report(Vec::new());
    r.host.dev_infiniband = None;
    let e = no_devices_explanation(&r).unwrap();
    assert_eq!(
        e,
        "No RDMA devices: libibverbs (libibverbs.so.1) loaded but lists no devices. The kernel has no RDMA \
         driver loaded (nothing in /sys/class/infiniband), or /dev/infiniband is not mounted into this \
         container. NCCL would fall back to its socket transport."
    );
    let text = render_text(&r);
    assert!(squash(&text).contains(&e), "{text}");
    assert!(!text.contains("error"), "no stack of errors: {text}");
    assert_eq!(verdict_lines(&r), Vec::new());
    assert_eq!(
        overall(&r).summary,
        "NOT USABLE — no RDMA devices. NCCL would fall back to its socket transport."
    );
    assert_eq!(exit_code(&r), 1);
}

#[test]
fn devices_only_in_sysfs_are_explained() {
    let mut d = device("mlx5_0", vec![rxe_port()]);
    d.listed_by_verbs = false;
    let why = unlisted_reason(true, false, false);
    d.error = Some(why.clone());
    let mut r = report(vec![d]);
    r.host.dev_infiniband = None;
    let e = no_devices_explanation(&r).unwrap();
    assert!(
        e.contains("lists none of the 1 RDMA device(s) in /sys/class/infiniband (mlx5_0)"),
        "{e}"
    );
    assert!(e.contains("/dev/infiniband is not mounted"), "{e}");
    assert!(
        warnings(&r)
            .iter()
            .any(|w| w.starts_with("/dev/infiniband is missing")),
        "{:?}",
        warnings(&r)
    );
    assert_eq!(
        verdict_lines(&r)[0].line,
        format!("mlx5_0 port 1: NOT USABLE — {why}")
    );
    assert_eq!(exit_code(&r), 1);
    // A port problem of its own is reported after the device's.
    r.devices[0].ports[0] = down_port();
    let line = &verdict_lines(&r)[0].line;
    assert!(
        line.starts_with(&format!(
            "mlx5_0 port 1: NOT USABLE — {why}; also port state DOWN"
        )),
        "{line}"
    );
    assert!(unlisted_reason(true, true, false).contains("ibverbs-providers"));
    assert!(unlisted_reason(true, true, true).contains("--sysfs-root"));
}

#[test]
fn library_not_loaded() {
    let mut r = report(Vec::new());
    let err = LoadError::NotFound {
        lib: "libibverbs.so.1".into(),
        reason: "not found".into(),
    };
    r.library.outcome = Err(LibraryError {
        message: err.to_string(),
        hint: load_hint(&err, None),
    });
    assert_eq!(no_devices_explanation(&r), None);
    let text = render_text(&r);
    assert!(
        squash(&text)
            .contains("NOT LOADED: cannot load libibverbs.so.1 (not found); install rdma-core"),
        "{text}"
    );
    assert!(
        text.contains("=> NOT USABLE — libibverbs could not be loaded."),
        "{text}"
    );
    assert_eq!(exit_code(&r), 1);
    let v = to_json(&r);
    assert_eq!(v["libibverbs"]["loaded"], false);
    assert!(v["libibverbs"]["capabilities"].is_null());
    let missing = LoadError::MissingSymbol {
        lib: "x".into(),
        symbol: "ibv_get_device_list",
        version: "IBVERBS_1.1",
    };
    assert!(load_hint(&missing, None).unwrap().contains("rdma-core"));
    assert!(
        load_hint(&err, Some("/opt/lib.so"))
            .unwrap()
            .starts_with("FERRO_IBVERBS_LIB=/opt/lib.so")
    );
}

#[test]
fn ib_disable_makes_the_verdict_negative() {
    let mut r = report(vec![device("rxe0", vec![rxe_port()])]);
    r.config.disable = true;
    let o = overall(&r);
    assert!(!o.ok);
    assert_eq!(o.usable_ports, 1);
    assert!(o.summary.contains("NCCL_IB_DISABLE=1"), "{}", o.summary);
    assert_eq!(exit_code(&r), 1);
}

#[test]
fn json_has_the_documented_keys_and_is_valid() {
    let mut r = report(vec![
        device("rxe0", vec![rxe_port()]),
        device("mlx5_1", vec![down_port()]),
    ]);
    r.config_warnings
        .push("NCCL_IB_GID_INDEX=\"abc\" is not an integer; using the default -1".into());
    let text = render_json(&r);
    let v: Value = serde_json::from_str(&text).unwrap();
    for k in [
        "format_version",
        "plugin",
        "config",
        "libibverbs",
        "sysfs_root",
        "devices",
        "enumeration_errors",
        "no_devices_explanation",
        "host",
        "node",
        "warnings",
        "verdict",
    ] {
        assert!(v.get(k).is_some(), "missing {k}");
    }
    assert_eq!(v["format_version"], 2);
    assert_eq!(
        v["node"],
        Value::Null,
        "not collected for a hand-built report"
    );
    assert_eq!(v["plugin"]["name"], "Ferro");
    assert_eq!(v["config"]["gid_index"], -1);
    assert_eq!(v["libibverbs"]["override_variable"], "FERRO_IBVERBS_LIB");
    assert_eq!(v["libibverbs"]["capabilities"]["ibv_reg_dmabuf_mr"], true);
    let d = &v["devices"][0];
    for k in [
        "name",
        "listed_by_libibverbs",
        "node_guid",
        "sys_image_guid",
        "fw_ver",
        "max_qp",
        "pci_path",
        "error",
        "notes",
        "ports",
    ] {
        assert!(d.get(k).is_some(), "device missing {k}");
    }
    assert_eq!(d["node_guid"], "0200:00ff:fe00:0000");
    assert!(d["pci_path"].is_null());
    let p = &d["ports"][0];
    for k in [
        "port",
        "state",
        "link_layer",
        "speed_mbps",
        "speed_text",
        "active_mtu",
        "lid",
        "netdev",
        "gids",
        "gid_choice",
        "gid_error",
        "usable",
        "reason",
        "verdict",
    ] {
        assert!(p.get(k).is_some(), "port missing {k}");
    }
    assert_eq!(p["state"], "ACTIVE");
    assert_eq!(
        p["gids"].as_array().unwrap().len(),
        2,
        "zero entries skipped"
    );
    assert_eq!(p["gids"][1]["selected"], true);
    assert_eq!(p["gids"][1]["type"], "RoCE v2");
    assert_eq!(p["gids"][1]["family"], "v4");
    assert_eq!(
        p["gids"][0]["gid"],
        "0000:0000:0000:0000:0000:ffff:7f00:0001"
    );
    assert_eq!(p["gids"][0]["compact"], "::ffff:127.0.0.1");
    assert_eq!(p["gid_choice"]["index"], 1);
    assert_eq!(
        p["verdict"],
        "rxe0 port 1: OK — RoCE v2 GID 1 (::ffff:127.0.0.1) via lo, 2500 Mbps"
    );
    assert_eq!(v["devices"][1]["ports"][0]["usable"], false);
    assert!(
        v["devices"][1]["ports"][0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("port state DOWN")
    );
    let h = &v["host"];
    for k in [
        "memlock",
        "iommu",
        "dev_shm",
        "dev_infiniband",
        "gpu_direct",
        "env",
    ] {
        assert!(h.get(k).is_some(), "host missing {k}");
    }
    assert_eq!(h["memlock"]["unlimited"], true);
    assert_eq!(h["iommu"]["mode"], "passthrough");
    assert_eq!(h["env"]["nccl_net_plugin"], "ferro");
    assert!(h["env"]["nccl_net"].is_null());
    assert_eq!(
        v["warnings"][0],
        "NCCL_IB_GID_INDEX=\"abc\" is not an integer; using the default -1"
    );
    assert_eq!(v["verdict"]["ok"], true);
    assert_eq!(v["verdict"]["usable_ports"], 1);
    assert_eq!(v["verdict"]["exit_code"], 0);
    assert_eq!(v["verdict"]["lines"].as_array().unwrap().len(), 2);
}

#[test]
fn json_for_a_host_without_rdma() {
    let mut r = report(Vec::new());
    r.host.dev_infiniband = None;
    r.host.limits.memlock = Ok(Memlock {
        soft: Some(8 << 20),
        hard: Some(8 << 20),
    });
    let v: Value = serde_json::from_str(&render_json(&r)).unwrap();
    assert!(
        v["no_devices_explanation"]
            .as_str()
            .unwrap()
            .starts_with("No RDMA devices:")
    );
    assert_eq!(v["devices"], json!([]));
    assert_eq!(v["verdict"]["ok"], false);
    assert_eq!(v["verdict"]["exit_code"], 1);
    assert_eq!(v["host"]["memlock"]["soft_bytes"], 8 << 20);
    assert!(
        v["host"]["memlock"]["warning"]
            .as_str()
            .unwrap()
            .contains("8 MiB")
    );
    assert_eq!(v["host"]["dev_infiniband"]["present"], false);
    assert!(
        v["host"]["dev_infiniband"]["warning"].is_null(),
        "no RDMA at all: absence is expected"
    );
}

#[test]
fn environment_findings() {
    let plain = NcclEnv {
        net_plugin: Some("ferro".into()),
        ..NcclEnv::default()
    };
    assert!(env_findings(&plain, "Ferro").is_empty());
    let unset = env_findings(&NcclEnv::default(), "Ferro");
    assert_eq!(unset.len(), 1);
    assert_eq!(unset[0].level, Level::Note);
    let other = NcclEnv {
        net_plugin: Some("none".into()),
        net: Some("IB".into()),
        ..NcclEnv::default()
    };
    let f = env_findings(&other, "Ferro");
    assert_eq!(f.len(), 2);
    assert!(f.iter().all(|f| f.level == Level::Warning));
    assert!(f[1].text.starts_with("NCCL_NET=IB"), "{}", f[1].text);
    let ours = NcclEnv {
        net: Some("ferro".into()),
        net_plugin: Some("ferro".into()),
        ..NcclEnv::default()
    };
    assert!(
        env_findings(&ours, "Ferro").is_empty(),
        "NCCL_NET matches case-insensitively"
    );
}

#[test]
fn byte_formatting() {
    assert_eq!(format_bytes(0), "0 B");
    assert_eq!(format_bytes(512), "512 B");
    assert_eq!(format_bytes(64 << 10), "64 KiB");
    assert_eq!(format_bytes(64 << 20), "64 MiB");
    assert_eq!(format_bytes(3 << 29), "1.5 GiB");
}

#[test]
fn wrapping_is_greedy_collapses_whitespace_and_never_breaks_a_word() {
    let mut out = String::new();
    let text = ["abcdefgh—"; 30].join("  \n ");
    crate::format::wrap(&mut out, "* ", "  ", &text);
    let long = "x".repeat(120);
    crate::format::wrap(&mut out, "- ", "  ", &format!("a {long} b"));
    crate::format::wrap(&mut out, "[empty]", "", " ");
    let lines: Vec<&str> = out.lines().collect();
    // 2 + 9 words of 9 and 8 spaces = 91 columns (the dash is one column, as a terminal shows
    // it); a tenth word would make 101 > WIDTH (100).
    let nine = ["abcdefgh—"; 9].join(" ");
    assert_eq!(lines[0], format!("* {nine}"));
    assert_eq!(lines[1..3], [format!("  {nine}"), format!("  {nine}")]);
    assert_eq!(lines[3], format!("  {}", ["abcdefgh—"; 3].join(" ")));
    assert_eq!(
        lines[4..7],
        ["- a".to_string(), format!("  {long}"), "  b".to_string()]
    );
    assert_eq!(lines[7..], ["[empty]"]);
}

#[test]
fn port_state_explanations() {
    let ib = LinkLayer::InfiniBand;
    let not_active = |state| explain(&PortDecision::NotActive { state }, &ib, None).unwrap_err();
    assert!(not_active(PortState::Init).contains("subnet manager"));
    assert_eq!(
        not_active(PortState::Down),
        "port state DOWN: no physical link (check the cable and switch port)"
    );
    assert_eq!(
        not_active(PortState::ActiveDefer),
        "port state ACTIVE_DEFER, not ACTIVE"
    );
    let explicit = PortDecision::NoUsableGid {
        error: GidError::IndexNotFound {
            index: 3,
            origin: "explicit NCCL_IB_GID_INDEX=3".into(),
            valid: vec![0, 1],
        },
    };
    assert_eq!(
        explain(&explicit, &LinkLayer::Ethernet, Some("eth0")),
        Err("GID index 3 (explicit NCCL_IB_GID_INDEX=3) is not in the port's GID table; valid non-zero indexes: [0, 1]".to_string()),
        "an explicit index that does not work is said as it is, without the auto-choice hint"
    );
    assert_eq!(explain(&PortDecision::Usable, &ib, None), Ok(()));
    assert_eq!(
        explain(
            &PortDecision::ExcludedByHca {
                filter: "^mlx5_1".into()
            },
            &ib,
            None
        ),
        Err("excluded by NCCL_IB_HCA=^mlx5_1".to_string())
    );
}

#[test]
fn wrapping_keeps_words_and_indents() {
    let mut o = String::new();
    let text = "word ".repeat(60);
    wrap(&mut o, "  warning: ", "    ", &text);
    assert!(o.lines().all(|l| l.chars().count() <= WIDTH), "{o}");
    assert!(o.lines().skip(1).all(|l| l.starts_with("    word")), "{o}");
    assert_eq!(squash(&o), squash(&format!("warning: {text}")));
}

#[test]
fn a_failed_node_check_makes_the_exit_status_3_and_shows_in_every_renderer() {
    use crate::node::fake::X16_GEN4;
    let t = Tree::new();
    t.kernel("5.15.0-105-generic");
    t.nvidia(false, "535.161.08");
    t.gpu(&["pci0000:00", "0000:00:01.0", "0000:01:00.0"], 0, X16_GEN4);
    let mut r = report(vec![device("rxe0", vec![rxe_port()])]);
    r.node = Some(facts(&t, vec![], &[]));
    assert!(overall(&r).ok, "the plugin itself would work");
    // No RDMA device in the tree: only the NIC-independent checks; none fails yet.
    assert_eq!(exit_code(&r), 0);
    let t2 = Tree::new();
    t2.nvidia(false, "535.161.08");
    t2.gpu(&["pci0000:00", "0000:00:01.0", "0000:01:00.0"], 0, X16_GEN4);
    t2.rdma(
        "mlx5_0",
        &["pci0000:00", "0000:00:02.0", "0000:02:00.0"],
        &["ens1"],
        "uverbs0",
        true,
    );
    r.node = Some(facts(&t2, vec![], &[("NCCL_SOCKET_IFNAME", "net1")]));
    assert_eq!(exit_code(&r), 3);
    assert_eq!(node_status(&r), Some(Status::Fail));
    let text = render_text(&r);
    assert!(text.contains("\nGPUDirect RDMA, node and pod\n"), "{text}");
    assert!(
        squash(&text).contains("=> GPUDirect RDMA, node and pod: 2 failed check(s) and"),
        "{text}"
    );
    assert!(
        squash(&text).contains("warning(s) above (exit status 3)"),
        "{text}"
    );
    let v: Value = serde_json::from_str(&render_json(&r)).unwrap();
    assert_eq!(v["verdict"]["exit_code"], 3);
    assert_eq!(v["verdict"]["node_status"], "fail");
    let ids: Vec<&str> = v["node"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    for id in [
        "gdr.path",
        "iommu",
        "gds",
        "gdrcopy",
        "pcie.distance",
        "pcie.link",
        "sriov",
        "pod.socket_ifname",
        "pod.uverbs",
        "pod.memlock",
        "pod.shm",
        "pod.container",
    ] {
        assert!(ids.contains(&id), "{id} missing from {ids:?}");
    }
    assert!(
        v["warnings"].as_array().unwrap().iter().any(|w| w
            .as_str()
            .unwrap()
            .contains("NCCL_SOCKET_IFNAME=net1 matches no interface")),
        "{}",
        v["warnings"]
    );
}

mod options;

#[test]
fn the_configuration_section_lists_every_variable_nccl_2_30_reads() {
    let r = report(vec![device("rxe0", vec![rxe_port()])]);
    let text = render_text(&r);
    for v in nccl_net_ferro::config::NCCL_2_30 {
        assert!(text.contains(&format!("{}=", v.name)), "{} missing", v.name);
    }
    assert!(
        text.contains("NCCL_IB_TIMEOUT=20 (NCCL: 20; same)"),
        "{text}"
    );
    assert!(
        text.contains("NCCL_IB_OOO_RQ=1 (NCCL: 0; does not apply): needs mlx5 direct verbs"),
        "a set variable that does not apply says why: {text}"
    );
    assert!(
        text.contains("NCCL_IB_QPS_PER_CONNECTION=1 (NCCL: 1; differs): must be equal"),
        "one that differs always says how: {text}"
    );
    assert!(
        text.contains("NCCL_IB_DATA_DIRECT=unset (NCCL: 1; does not apply)\n"),
        "an unset one only says that it does not apply: {text}"
    );
    let v: Value = serde_json::from_str(&render_json(&r)).unwrap();
    let rows = v["config"]["nccl_variables"].as_array().unwrap();
    assert_eq!(rows.len(), nccl_net_ferro::config::NCCL_2_30.len());
    assert!(
        rows.iter()
            .any(|x| x["name"] == "NCCL_IB_QPS_PER_CONNECTION"
                && x["standing"] == "differs"
                && x["value"] == "1")
    );
}
