//! The configuration's reading, defaults, warnings and summary.

use super::*;
use std::collections::HashMap;

fn parse(pairs: &[(&str, &str)]) -> (Config, Vec<Warning>) {
    let m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::from_lookup(&|k| m.get(k).cloned())
}

#[test]
fn defaults_without_environment() {
    let (c, w) = parse(&[]);
    assert_eq!(c, Config::default());
    assert!(w.is_empty());
    assert_eq!(c.gid_policy().explicit_index, None);
}

#[test]
fn valid_values_are_taken() {
    let (c, w) = parse(&[
        ("NCCL_IB_GID_INDEX", "3"),
        ("NCCL_IB_ADDR_FAMILY", "AF_INET6"),
        ("NCCL_IB_ROCE_VERSION_NUM", "1"),
        ("NCCL_IB_ADDR_RANGE", "192.0.2.0/24"),
    ]);
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(c.gid_index, 3);
    assert_eq!(c.addr_family, AddrFamily::V6);
    assert_eq!(c.roce_version, 1);
    assert_eq!(c.gid_policy().explicit_index, Some(3));
    assert!(c.summary().contains("NCCL_IB_ADDR_RANGE=192.0.2.0/24"));
}

#[test]
fn invalid_values_warn_with_name_value_and_default() {
    let (c, w) = parse(&[
        ("NCCL_IB_GID_INDEX", "abc"),
        ("NCCL_IB_ROCE_VERSION_NUM", "7"),
        ("NCCL_IB_ADDR_FAMILY", "AF_UNIX"),
        ("NCCL_IB_ADDR_RANGE", "10.0.0.0/99"),
    ]);
    assert_eq!(c, Config::default());
    assert_eq!(w.len(), 4, "{w:?}");
    assert!(
        w[0].contains("NCCL_IB_GID_INDEX=\"abc\"") && w[0].contains("default -1"),
        "{}",
        w[0]
    );
    assert!(
        w[1].contains("NCCL_IB_ROCE_VERSION_NUM=7") && w[1].contains("default 2"),
        "{}",
        w[1]
    );
    assert!(w.iter().any(|x| x.contains("AF_UNIX")));
    assert!(w.iter().any(|x| x.contains("NCCL_IB_ADDR_RANGE")));
}

#[test]
fn dmabuf_enable_follows_nccl_and_gdr_disable_takes_0_or_1() {
    let (c, w) = parse(&[("NCCL_DMABUF_ENABLE", " 0 "), ("FERRO_GDR_DISABLE", "1")]);
    assert!(!c.dmabuf_enable && c.gdr_disable && w.is_empty(), "{w:?}");
    // NCCL only tests for 0: any other integer leaves DMA-BUF on.
    let (c, w) = parse(&[("NCCL_DMABUF_ENABLE", "2"), ("FERRO_GDR_DISABLE", "")]);
    assert!(c.dmabuf_enable && !c.gdr_disable && w.is_empty(), "{w:?}");
    let (c, w) = parse(&[("NCCL_DMABUF_ENABLE", "yes"), ("FERRO_GDR_DISABLE", "2")]);
    assert!(c.dmabuf_enable && !c.gdr_disable);
    assert_eq!(
        w,
        vec![
            "NCCL_DMABUF_ENABLE=\"yes\" is not an integer; using the default 1".to_string(),
            "FERRO_GDR_DISABLE=2 is outside 0..=1; using the default 0".to_string(),
        ]
    );
}

#[test]
fn every_variable_is_in_the_summary_once_with_its_default() {
    let s = Config::default().summary();
    for v in VARIABLES {
        assert_eq!(s.matches(&format!("{v}=")).count(), 1, "{v} in {s}");
    }
    assert!(
        s.starts_with("NCCL_IB_DISABLE=0 NCCL_IB_QPS_PER_CONNECTION=1 "),
        "{s}"
    );
    assert!(
        s.contains(" NCCL_IB_HCA=unset FERRO_GID_INDEX=unset"),
        "{s}"
    );
}

#[test]
fn traffic_classes_and_the_service_level_are_unset_by_default_and_at_minus_one() {
    let (c, w) = parse(&[]);
    assert_eq!(
        (c.traffic_class, c.service_level, c.fifo_tc),
        (None, None, None)
    );
    assert!(w.is_empty());
    assert!(
        c.summary()
            .contains(" NCCL_IB_TC=-1 NCCL_IB_SL=-1 NCCL_IB_FIFO_TC=-1 "),
        "{}",
        c.summary()
    );
    let (c, w) = parse(&[
        ("NCCL_IB_TC", "-1"),
        ("NCCL_IB_SL", "-1"),
        ("NCCL_IB_FIFO_TC", "-1"),
    ]);
    assert_eq!(
        (c.traffic_class, c.service_level, c.fifo_tc),
        (None, None, None)
    );
    assert!(w.is_empty(), "{w:?}");
    let (c, w) = parse(&[
        ("NCCL_IB_TC", "0"),
        ("NCCL_IB_SL", "15"),
        ("NCCL_IB_FIFO_TC", "255"),
    ]);
    assert_eq!(
        (c.traffic_class, c.service_level, c.fifo_tc),
        (Some(0), Some(15), Some(255)),
        "0 is a value, not unset"
    );
    assert!(w.is_empty(), "{w:?}");
    assert!(
        c.summary()
            .contains(" NCCL_IB_TC=0 NCCL_IB_SL=15 NCCL_IB_FIFO_TC=255 ")
    );
}

#[test]
fn a_traffic_class_or_service_level_out_of_range_warns_and_stays_unset() {
    let (c, w) = parse(&[
        ("NCCL_IB_TC", "256"),
        ("NCCL_IB_SL", "16"),
        ("NCCL_IB_FIFO_TC", "-2"),
    ]);
    assert_eq!(
        (c.traffic_class, c.service_level, c.fifo_tc),
        (None, None, None)
    );
    assert_eq!(
        w,
        vec![
            "NCCL_IB_TC=256 is neither -1 (not set) nor in 0..=255; using the default -1"
                .to_string(),
            "NCCL_IB_SL=16 is neither -1 (not set) nor in 0..=15; using the default -1".to_string(),
            "NCCL_IB_FIFO_TC=-2 is neither -1 (not set) nor in 0..=255; using the default -1"
                .to_string(),
        ]
    );
}

#[test]
fn the_socket_interface_is_taken_as_given_and_empty_means_unset() {
    assert_eq!(parse(&[]).0.socket_ifname, None);
    assert_eq!(parse(&[("NCCL_SOCKET_IFNAME", "")]).0.socket_ifname, None);
    let (c, w) = parse(&[("NCCL_SOCKET_IFNAME", "^docker,lo")]);
    assert_eq!(c.socket_ifname.as_deref(), Some("^docker,lo"));
    assert!(w.is_empty(), "{w:?}");
    assert!(c.summary().contains(" NCCL_SOCKET_IFNAME=^docker,lo "));
}

#[test]
fn recovery_is_on_for_30_s_unless_the_budget_or_ncclss_port_recovery_says_otherwise() {
    let secs = |pairs: &[(&str, &str)]| parse(pairs).0.recovery_budget().as_secs();
    assert_eq!(secs(&[]), 30);
    assert_eq!(secs(&[("NCCL_IB_RESILIENCY_PORT_RECOVERY", "1")]), 30);
    assert_eq!(secs(&[("NCCL_IB_RESILIENCY_PORT_RECOVERY", "0")]), 0);
    assert_eq!(
        secs(&[
            ("NCCL_IB_RESILIENCY_PORT_RECOVERY", "0"),
            ("FERRO_RECOVERY_BUDGET_S", "5")
        ]),
        5
    );
    assert_eq!(secs(&[("FERRO_RECOVERY_BUDGET_S", "0")]), 0);
    let (_, w) = parse(&[("FERRO_RECOVERY_BUDGET_S", "-1")]);
    assert_eq!(
        w,
        [
            "FERRO_RECOVERY_BUDGET_S=-1 is outside 0..=3600; using 30 s (0 with NCCL_IB_RESILIENCY_PORT_RECOVERY=0)"
        ]
    );
}

#[test]
fn adaptive_routing_defaults_to_on_for_infiniband_and_off_for_roce() {
    let (c, w) = parse(&[]);
    assert!(w.is_empty(), "{w:?}");
    assert_eq!((c.adaptive_routing, c.ar_threshold), (None, 8192));
    assert_eq!(c.adaptive_routing(false), AdaptiveRouting::above(8192));
    assert_eq!(c.adaptive_routing(true), AdaptiveRouting::OFF);
    assert!(
        c.summary()
            .contains(" NCCL_IB_ADAPTIVE_ROUTING=auto NCCL_IB_AR_THRESHOLD=8192 "),
        "{}",
        c.summary()
    );
}

#[test]
fn adaptive_routing_set_either_way_overrides_the_link_layer() {
    let (c, w) = parse(&[
        ("NCCL_IB_ADAPTIVE_ROUTING", "1"),
        ("NCCL_IB_AR_THRESHOLD", "65536"),
    ]);
    assert!(w.is_empty(), "{w:?}");
    for ethernet in [false, true] {
        assert_eq!(c.adaptive_routing(ethernet), AdaptiveRouting::above(65536));
    }
    assert!(c.summary().contains(" NCCL_IB_ADAPTIVE_ROUTING=1 "));
    let (c, _) = parse(&[("NCCL_IB_ADAPTIVE_ROUTING", "0")]);
    for ethernet in [false, true] {
        assert_eq!(c.adaptive_routing(ethernet), AdaptiveRouting::OFF);
    }
    // A threshold no request can pass: on, but it never applies.
    let (c, w) = parse(&[
        ("NCCL_IB_ADAPTIVE_ROUTING", "1"),
        ("NCCL_IB_AR_THRESHOLD", "8589934592"),
    ]);
    assert!(w.is_empty(), "{w:?}");
    assert!(!c.adaptive_routing(true).applies_to(u32::MAX));
}

#[test]
fn invalid_adaptive_routing_settings_warn_and_keep_the_defaults() {
    let (c, w) = parse(&[
        ("NCCL_IB_ADAPTIVE_ROUTING", "2"),
        ("NCCL_IB_AR_THRESHOLD", "-1"),
    ]);
    assert_eq!((c.adaptive_routing, c.ar_threshold), (None, 8192));
    assert_eq!(
        w,
        vec![
            "NCCL_IB_ADAPTIVE_ROUTING=2 is outside 0..=1; using the link layer's default (1 on InfiniBand, 0 on RoCE)".to_string(),
            "NCCL_IB_AR_THRESHOLD=-1 is outside 0..=9223372036854775807; using the default 8192".to_string(),
        ]
    );
}

#[test]
fn nccls_own_resiliency_tunables_are_said_not_to_apply_when_set() {
    let get = |name: &str| {
        (name == "NCCL_IB_RESILIENCY_PORT_RECOVERY_ACK_TIMEOUT").then(|| "1000".to_string())
    };
    let lines = Config::not_applicable(&get);
    assert_eq!(lines.len(), 1);
    assert!(
        lines[0].starts_with("NCCL_IB_RESILIENCY_PORT_RECOVERY_ACK_TIMEOUT=1000 does not apply: "),
        "{lines:?}"
    );
    assert!(Config::not_applicable(&|_| None).is_empty());
}

#[test]
fn merging_and_returning_async_events_are_on_unless_set_to_zero() {
    let (c, w) = parse(&[]);
    assert!(c.merge_nics && c.return_async_events && w.is_empty());
    let (c, w) = parse(&[
        ("NCCL_IB_MERGE_NICS", "0"),
        ("NCCL_IB_RETURN_ASYNC_EVENTS", "0"),
    ]);
    assert!(!c.merge_nics && !c.return_async_events && w.is_empty());
    assert!(
        c.summary()
            .contains("NCCL_IB_MERGE_NICS=0 NCCL_IB_RETURN_ASYNC_EVENTS=0")
    );
    let (c, w) = parse(&[("NCCL_IB_RETURN_ASYNC_EVENTS", "2")]);
    assert!(c.return_async_events);
    assert!(
        w.len() == 1
            && w[0].contains("NCCL_IB_RETURN_ASYNC_EVENTS=2")
            && w[0].contains("default 1"),
        "{w:?}"
    );
}

#[test]
fn the_2_30_switches_are_on_by_default_and_off_at_zero() {
    let (c, w) = parse(&[]);
    assert!(w.is_empty(), "{w:?}");
    assert!(c.ece_enable && c.merge_vfs && c.device_pci_order && c.query_port_speed);
    let (c, w) = parse(&[
        ("NCCL_IB_ECE_ENABLE", "0"),
        ("NCCL_IB_MERGE_VFS", "0"),
        ("NCCL_IB_DEVICE_PCI_ORDER", "0"),
        ("NCCL_IB_QUERY_PORT_SPEED", "0"),
    ]);
    assert!(w.is_empty(), "{w:?}");
    assert!(!c.ece_enable && !c.merge_vfs && !c.device_pci_order && !c.query_port_speed);
    assert!(
        c.summary().contains(
            " NCCL_IB_ECE_ENABLE=0 NCCL_IB_MERGE_VFS=0 NCCL_IB_DEVICE_PCI_ORDER=0 NCCL_IB_QUERY_PORT_SPEED=0 "
        ),
        "{}",
        c.summary()
    );
    let (c, w) = parse(&[("NCCL_IB_ECE_ENABLE", "2")]);
    assert!(c.ece_enable);
    assert_eq!(
        w,
        ["NCCL_IB_ECE_ENABLE=2 is outside 0..=1; using the default 1"]
    );
}

#[test]
fn a_rail_and_plane_in_nccl_ib_hca_are_taken_and_shown_as_given() {
    let (c, w) = parse(&[("NCCL_IB_HCA", "=rxe0:1:4:2")]);
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(c.hca.as_ref().unwrap().rail_plane("rxe0", 1), (4, 2));
    assert!(c.summary().contains(" NCCL_IB_HCA==rxe0:1:4:2 "));
}

#[test]
fn the_mqp_retry_settings_make_the_retry_policy_with_nccls_defaults() {
    let (c, w) = parse(&[]);
    assert!(w.is_empty());
    assert_eq!(c.mqp_retry(), ferro_proto::qp_retry::RetryPolicy::default());
    let (c, w) = parse(&[
        ("NCCL_IB_MQP_RETRY_CNT", "5"),
        ("NCCL_IB_MQP_RETRY_SLEEP_MSEC", "20"),
        ("NCCL_IB_MQP_RETRY_ALL", "2"),
    ]);
    assert!(w.is_empty(), "{w:?}");
    let p = c.mqp_retry();
    assert_eq!(p.retries, 5);
    assert_eq!(p.sleep, std::time::Duration::from_millis(20));
    assert!(p.all, "any nonzero value retries every failure, as in NCCL");
    let (c, w) = parse(&[("NCCL_IB_MQP_RETRY_CNT", "-1")]);
    assert_eq!(c.mqp_retry_cnt, 34);
    assert!(w[0].contains("NCCL_IB_MQP_RETRY_CNT"), "{w:?}");
}

#[test]
fn the_core_retries_the_errno_linux_reports_for_a_timed_out_change() {
    assert_eq!(ferro_proto::qp_retry::ETIMEDOUT, libc::ETIMEDOUT);
}
