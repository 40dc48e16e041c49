//! The GID table from one `ibv_query_gid_table` call and the one read from sysfs agree, slot by
//! slot (index, GID, type, netdev), on both soft-RoCE devices (guest only). The plugin takes the
//! first where libibverbs has it and falls back to the second.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use ferro_verbs::gid::types::table_from_verbs;
use ferro_verbs::{Context, sysfs};
use std::ffi::CStr;
use std::path::Path;

fn ifname(index: u32) -> Option<String> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: buf has IF_NAMESIZE bytes; if_indextoname returns NULL or buf.
    let p = unsafe { libc::if_indextoname(index, buf.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: on success buf holds a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(buf.as_ptr()) };
    Some(name.to_string_lossy().into_owned())
}

#[test]
fn the_verbs_gid_table_and_the_sysfs_one_agree_slot_by_slot() {
    assert!(
        Path::new("/sys/class/infiniband/rxe0").exists(),
        "needs the soft-RoCE guest (run the README's test command)"
    );
    let v = ferro_verbs::verbs().expect("libibverbs");
    assert!(
        v.capabilities().query_gid_table,
        "the test bed's rdma-core has ibv_query_gid_table"
    );
    for dev in ["rxe0", "rxe1"] {
        let ctx = Context::open(dev).unwrap();
        let sys = sysfs::read_device(&Path::new("/sys/class/infiniband").join(dev), dev);
        let ports: Vec<_> = sys
            .ports
            .iter()
            .map(|p| (p.num, ctx.query_port(p.num).unwrap().gid_tbl_len as u32))
            .collect();
        let total = ports.iter().map(|(_, l)| *l as usize).sum();
        let entries = ctx.query_gid_table(total).expect("capability").unwrap();
        let mut valid = 0;
        for port in &sys.ports {
            let len = ports.iter().find(|(n, _)| *n == port.num).unwrap().1;
            let from_verbs = table_from_verbs(&entries, port.num, len, &port.link_layer, ifname);
            assert_eq!(
                from_verbs.len(),
                port.gids.len(),
                "{dev} port {}: table length",
                port.num
            );
            for (a, b) in from_verbs.iter().zip(&port.gids) {
                assert_eq!(a, b, "{dev} port {}: slot {}", port.num, b.index);
                valid += usize::from(!a.is_zero());
            }
        }
        println!(
            "{dev}: {valid} valid GIDs, {} slots, both paths agree",
            ports.iter().map(|p| p.1).sum::<u32>()
        );
        assert!(
            valid >= 2,
            "{dev}: the test bed gives each device at least two GIDs"
        );
    }
}
