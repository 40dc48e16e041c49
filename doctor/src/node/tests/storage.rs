//! GPUDirect Storage against the NVIDIA kernel module flavour.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

#[test]
fn gds_before_2_17_5_works_with_the_proprietary_modules_and_later_needs_the_open_ones() {
    for (open, version, status) in [
        (false, "2.17.4", Status::Ok),
        (false, "2.17.5", Status::Warning),
        (false, "2.20", Status::Warning),
        (true, "2.20.5", Status::Ok),
    ] {
        let t = gpu_node(open, "6.8.0-45-generic");
        t.module("nvidia_fs", Some(version));
        let f = facts(&t, vec![], &[]);
        let gds = one(&f, "gds");
        assert_eq!(gds.status, status, "{version} open={open}: {}", gds.summary);
    }
}
