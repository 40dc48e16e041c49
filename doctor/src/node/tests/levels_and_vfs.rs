//! `NCCL_NET_GDR_LEVEL` as NCCL reads it, and SR-IOV virtual functions bound to `vfio-pci`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

#[test]
fn gdr_levels_are_read_as_nccl_reads_them() {
    for (text, level) in [
        ("LOC", Some(Distance::Loc)),
        ("NVL", Some(Distance::Nvl)),
        ("NVB", Some(Distance::Nvb)),
        ("C2C", Some(Distance::C2c)),
        ("PIX", Some(Distance::Pix)),
        ("P2C", Some(Distance::P2c)),
        ("PXN", Some(Distance::Pxn)),
        ("PHB", Some(Distance::Phb)),
        ("SYS", Some(Distance::Sys)),
        ("sys", None),
        ("Sys", None),
        (" SYS", None),
        ("SYS ", None),
        ("NET", None),
        ("", None),
        ("-1", None),
        ("0", Some(Distance::Loc)),
        ("1", Some(Distance::Pix)),
        ("2", Some(Distance::Pxb)),
        ("4", Some(Distance::Sys)),
        ("2abc", Some(Distance::Pxb)),
        ("0x3", Some(Distance::Phb)),
        ("010", Some(Distance::Sys)),
        ("99999999999999999999999", Some(Distance::Sys)),
    ] {
        assert_eq!(Distance::parse_level(text), level, "{text:?}");
    }
    // NCCL's order: a level between PXB and PHB lets PXB through and stops PHB.
    assert!(Distance::Pxb <= Distance::P2c && Distance::Phb > Distance::Pxn);
    assert!(Distance::Pix > Distance::Nvl, "NVL stops every PCIe path");
}

#[test]
fn a_lower_case_gdr_level_is_reported_as_unknown_to_nccl() {
    let t = gpu_node(true, "6.8.0-45-generic");
    let f = facts(&t, vec![], &[("NCCL_NET_GDR_LEVEL", "sys")]);
    let c = checks(&f);
    let bad = c
        .iter()
        .find(|c| c.id == "pcie.distance" && c.subject == "NCCL_NET_GDR_LEVEL")
        .expect("a check on the variable");
    assert_eq!(bad.status, Status::Warning);
    assert!(
        bad.summary.contains("not a level NCCL knows"),
        "{}",
        bad.summary
    );
    let f = facts(&t, vec![], &[("NCCL_NET_GDR_LEVEL", "PXN")]);
    assert!(
        !checks(&f).iter().any(|c| c.subject == "NCCL_NET_GDR_LEVEL"),
        "PXN is a level NCCL knows"
    );
}

#[test]
fn a_virtual_function_bound_to_vfio_pci_is_diagnosed() {
    let t = gpu_node(true, "6.8.0-45-generic");
    let vf = [ROOT0, RP, UP, "0000:02:01.0", "0000:04:00.2"];
    t.pci(&vf, 0x15b3, 0x020000, 0, X16_GEN4);
    t.bind(&vf, "vfio-pci");
    let pf = format!("sys/devices/{}", NIC0.join("/"));
    t.link(
        &format!("{pf}/virtfn0"),
        &format!("sys/devices/{}", vf.join("/")),
    );
    let f = facts(&t, vec![], &[]);
    assert_eq!(
        f.vfio_vfs,
        vec![VfioVf {
            bdf: "0000:04:00.2".to_string(),
            parent: "mlx5_0".to_string()
        }]
    );
    let c = one(&f, "sriov.vfio");
    assert_eq!(c.status, Status::Warning);
    assert!(
        c.summary.contains("0000:04:00.2") && c.summary.contains("vfio-pci"),
        "{}",
        c.summary
    );
    assert!(c.fix.unwrap().contains("isRdma: true"));
    // Bound to mlx5_core instead, it is not reported.
    t.bind(&vf, "mlx5_core");
    let f = facts(&t, vec![], &[]);
    assert!(f.vfio_vfs.is_empty());
    assert!(!checks(&f).iter().any(|c| c.id == "sriov.vfio"));
}
