//! The command line, the GPUDirect RDMA policy and the node-feature-discovery output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

#[test]
fn argument_parsing() {
    let p = |v: &[&str]| parse_args(v.iter().map(OsString::from)).map_err(|e| first_line(&e));
    assert_eq!(
        p(&[]),
        Ok(Command::Run(Options {
            output: Output::Text,
            gdr_policy: GdrPolicy::Required,
            sysfs_root: "/sys".into(),
            root: None,
        }))
    );
    assert_eq!(
        p(&["--json", "--sysfs-root", "/tmp/fake"]),
        Ok(Command::Run(Options {
            output: Output::Json,
            gdr_policy: GdrPolicy::Required,
            sysfs_root: "/tmp/fake".into(),
            root: None,
        }))
    );
    assert_eq!(
        p(&["--sysfs-root=/x"]),
        Ok(Command::Run(Options {
            output: Output::Text,
            gdr_policy: GdrPolicy::Required,
            sysfs_root: "/x".into(),
            root: None,
        }))
    );
    assert_eq!(p(&["--json", "-h"]), Ok(Command::Help));
    assert_eq!(
        p(&["--root", "/host"]),
        Ok(Command::Run(Options {
            output: Output::Text,
            gdr_policy: GdrPolicy::Required,
            sysfs_root: "/host/sys".into(),
            root: Some("/host".into()),
        }))
    );
    assert!(p(&["--root"]).is_err());
    assert!(p(&["--sysfs-root"]).is_err());
    assert!(p(&["--sysfs-root="]).is_err());
    assert_eq!(
        p(&["--bogus"]),
        Err("error: unexpected argument '--bogus' found".to_string())
    );
    // A repeated option keeps its last value; of --json and --output, the later one decides;
    // of --root and --sysfs-root, the later one sets the sysfs tree.
    let run = |v: &[&str]| match p(v) {
        Ok(Command::Run(o)) => o,
        other => panic!("{v:?}: {other:?}"),
    };
    assert_eq!(
        run(&["--root", "/a", "--root", "/b"]).root,
        Some("/b".into())
    );
    assert_eq!(run(&["--json", "--output", "nfd"]).output, Output::Nfd);
    assert_eq!(run(&["--output", "nfd", "--json"]).output, Output::Json);
    assert_eq!(
        run(&["--sysfs-root", "/s", "--root", "/h"]).sysfs_root,
        PathBuf::from("/h/sys")
    );
    // A path is whatever follows, as before, even one that starts with a dash.
    assert_eq!(run(&["--root", "-h"]).root, Some("-h".into()));
    let o = run(&["--root", "/h", "--sysfs-root", "/s"]);
    assert_eq!((o.sysfs_root, o.root), ("/s".into(), Some("/h".into())));
}

/// The first line of a usage error as printed (clap's message; a usage line follows).
fn first_line(e: &clap::Error) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

#[test]
fn every_option_takes_its_value_after_an_equals_sign_and_errors_name_the_option_typed() {
    let p = |v: &[&str]| parse_args(v.iter().map(OsString::from)).map_err(|e| first_line(&e));
    assert_eq!(
        p(&["--root=/host", "--output=nfd", "--gdr-policy=optional"]),
        Ok(Command::Run(Options {
            output: Output::Nfd,
            gdr_policy: GdrPolicy::Optional,
            sysfs_root: "/host/sys".into(),
            root: Some("/host".into()),
        }))
    );
    assert_eq!(
        p(&["--output", "json", "--gdr-policy", "required"]),
        p(&["--json"])
    );
    assert_eq!(
        p(&["--output", "text"]),
        Ok(Command::Run(Options::default()))
    );
    assert_eq!(p(&["--version"]), Ok(Command::Version));
    assert_eq!(p(&["-V"]), Ok(Command::Version));
    for (args, message) in [
        (
            &["--root="][..],
            "error: a value is required for '--root <PATH>' but none was supplied",
        ),
        (
            &["--output"][..],
            "error: a value is required for '--output <FORMAT>' but none was supplied",
        ),
        (
            &["--output=xml"][..],
            "error: invalid value 'xml' for '--output <FORMAT>'",
        ),
        (
            &["--gdr-policy", "maybe"][..],
            "error: invalid value 'maybe' for '--gdr-policy <POLICY>'",
        ),
        (
            &["--json=yes"][..],
            "error: unexpected value 'yes' for '--json' found; no more were expected",
        ),
        (
            &["--roots=/x"][..],
            "error: unexpected argument '--roots' found",
        ),
    ] {
        assert_eq!(p(args), Err(message.to_string()), "{args:?}");
    }
    // The accepted values are listed with the error.
    let e = parse_args([OsString::from("--output=xml")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("[possible values: text, json, nfd]"), "{e}");
    // A path that is not UTF-8 after `=` is kept byte for byte.
    use std::os::unix::ffi::OsStringExt;
    let raw = OsString::from_vec(b"--root=/h\xffst".to_vec());
    match parse_args([raw]) {
        Ok(Command::Run(o)) => {
            use std::os::unix::ffi::OsStrExt;
            assert_eq!(o.root.unwrap().as_os_str().as_bytes(), b"/h\xffst");
        }
        other => panic!("{other:?}"),
    }
}

/// A report whose only NIC has no GPUDirect RDMA path (proprietary modules, no nvidia-peermem).
fn report_without_gdr() -> Report {
    use crate::node::fake::X16_GEN4;
    let t = Tree::new();
    t.kernel("6.8.0-45-generic");
    t.nvidia(false, "535.161.08");
    t.gpu(&["pci0000:00", "0000:00:01.0", "0000:01:00.0"], 0, X16_GEN4);
    t.rdma(
        "mlx5_0",
        &["pci0000:00", "0000:00:02.0", "0000:02:00.0"],
        &["ens1"],
        "uverbs0",
        true,
    );
    let mut r = report(vec![device("rxe0", vec![rxe_port()])]);
    r.node = Some(facts(&t, vec![], &[]));
    r
}

#[test]
fn an_optional_gdr_policy_reports_host_staging_by_design_instead_of_failing() {
    let mut r = report_without_gdr();
    let gdr = |r: &Report| {
        report_checks(r)
            .into_iter()
            .find(|c| c.id == "gdr.path" && c.subject == "mlx5_0")
            .unwrap()
    };
    assert_eq!(gdr(&r).status, Status::Fail);
    assert_eq!(exit_code(&r), 3);
    r.gdr_policy = GdrPolicy::Optional;
    let relaxed = gdr(&r);
    assert_eq!(relaxed.status, Status::Ok);
    assert!(
        relaxed.summary.starts_with(
            "host staging by design (--gdr-policy optional): mlx5_0: no GPUDirect RDMA"
        ),
        "{}",
        relaxed.summary
    );
    assert!(!relaxed.evidence.is_empty() && relaxed.fix.is_none());
    assert_eq!(exit_code(&r), 0);
    assert!(render_text(&r).contains("[ok] host staging by design"));
    let v: Value = serde_json::from_str(&render_json(&r)).unwrap();
    assert_eq!(v["verdict"]["gdr_policy"], "optional");
    // A GPU without its driver is no CUDA at all, not a choice of path: it still fails.
    let t = Tree::new();
    t.gpu(
        &["pci0000:00", "0000:00:01.0", "0000:01:00.0"],
        0,
        node::fake::X16_GEN4,
    );
    r.node = Some(facts(&t, vec![], &[]));
    assert_eq!(exit_code(&r), 3);
}

#[test]
fn the_nfd_feature_file_has_one_line_per_feature_under_the_project_domain() {
    let mut r = report_without_gdr();
    let text = render_nfd(&r);
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        lines,
        [
            "ferro.nccl-net/verdict=fail",
            "ferro.nccl-net/gdr=off",
            "ferro.nccl-net/gdr-policy=required",
            "ferro.nccl-net/devices=1",
            "ferro.nccl-net/exit-code=3",
            "ferro.nccl-net/plugin-version=0.1.0",
        ]
    );
    r.gdr_policy = GdrPolicy::Optional;
    let f = nfd_features(&r);
    let get = |k: &str| {
        f.iter()
            .find(|(n, _)| n == &format!("ferro.nccl-net/{k}"))
            .map(|(_, v)| v.clone())
    };
    assert_eq!(get("verdict").as_deref(), Some("ok"), "{f:?}");
    assert_eq!(get("exit-code").as_deref(), Some("0"));
    assert_eq!(get("gdr-policy").as_deref(), Some("optional"));
    assert_eq!(
        get("gdr").as_deref(),
        Some("off"),
        "the policy does not turn GDR on"
    );
    assert_eq!(get("nccl-version"), None);
    // A warning makes the verdict `warn` with exit status 0.
    r.config_warnings
        .push("NCCL_IB_GID_INDEX=x ignored".to_string());
    assert_eq!(nfd_features(&r)[0].1, "warn");
    // Without node facts: no GPUDirect RDMA path is known.
    let mut ok = report(vec![device("rxe0", vec![rxe_port()])]);
    assert_eq!(
        nfd_features(&ok)[..2],
        [
            ("ferro.nccl-net/verdict".to_string(), "ok".to_string()),
            ("ferro.nccl-net/gdr".to_string(), "off".to_string())
        ]
    );
    ok.config.disable = true;
    assert_eq!(
        nfd_features(&ok)[3].1,
        "0",
        "NCCL_IB_DISABLE exposes no device"
    );
    for (k, v) in nfd_features(&ok) {
        assert!(k.starts_with("ferro.nccl-net/") && !k.contains('='), "{k}");
        assert!(v.len() <= 63 && v == label_value(&v), "{k}={v}");
    }
    // Open modules on a 6.8 kernel with an mlx5 NIC: DMA-BUF, GPUDirect RDMA on.
    use crate::node::fake::X16_GEN4;
    let t = Tree::new();
    t.nvidia(true, "550.90.07");
    t.gpu(&["pci0000:00", "0000:00:01.0", "0000:01:00.0"], 0, X16_GEN4);
    t.rdma(
        "mlx5_0",
        &["pci0000:00", "0000:00:02.0", "0000:02:00.0"],
        &["ens1"],
        "uverbs0",
        true,
    );
    ok.node = Some(facts(&t, vec![], &[]));
    assert_eq!(nfd_features(&ok)[1].1, "on");
    assert_eq!(label_value("1.2.3+cuda 12"), "1.2.3_cuda_12");
    assert_eq!(label_value("-x-"), "x");
}
