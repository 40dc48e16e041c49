//! NCCL and plugin facts on fake trees: library files are placeholders, their ELF facts come
//! from a table the test hands to the collector (the ELF reader itself is tested on real files).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::elf::{ElfFacts, host_machine, parse_elf, read_elf};
use super::*;
use crate::node::fake::Tree;
use std::collections::HashMap;

/// A fake file system with libraries and the ELF facts of each.
struct Libs {
    t: Tree,
    elf: HashMap<PathBuf, ElfFacts>,
}

fn glibc(newest_minor: u32) -> ElfFacts {
    ElfFacts {
        machine: host_machine().unwrap_or(0),
        soname: Some("libc.so.6".into()),
        version_defs: (0..=newest_minor).map(|m| format!("GLIBC_2.{m}")).collect(),
        ..ElfFacts::default()
    }
}

/// A plugin exporting `tables`, needing `GLIBC_2.<glibc_minor>`.
fn plugin(tables: &[u32], glibc_minor: u32) -> ElfFacts {
    ElfFacts {
        machine: host_machine().unwrap_or(0),
        needed: vec!["libc.so.6".into()],
        defined: tables
            .iter()
            .map(|n| format!("ncclNetPlugin_v{n}"))
            .collect(),
        version_needs: vec![("libc.so.6".into(), format!("GLIBC_2.{glibc_minor}"))],
        ..ElfFacts::default()
    }
}

impl Libs {
    fn new() -> Libs {
        let mut l = Libs {
            t: Tree::new(),
            elf: HashMap::new(),
        };
        l.file("usr/lib/libc.so.6", glibc(35));
        l
    }

    fn file(&mut self, rel: &str, facts: ElfFacts) {
        // Distinct bytes per file: only a deliberate copy has the same bytes as another.
        self.t.write(rel, &format!("placeholder for {rel}"));
        self.elf.insert(self.t.path(rel), facts);
    }

    /// `rel` -> `target` (relative to the link's directory).
    fn symlink(&self, rel: &str, target: &str) {
        let p = self.t.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, p).unwrap();
    }

    fn facts(&self, env: &[(&str, &str)]) -> NcclFacts {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let read = |p: &Path| {
            let real = std::fs::canonicalize(p).map_err(|e| e.to_string())?;
            self.elf
                .iter()
                .find(|(k, _)| std::fs::canonicalize(k).ok().as_ref() == Some(&real))
                .map(|(_, v)| v.clone())
                .ok_or_else(|| format!("{}: not an ELF file", p.display()))
        };
        collect_nccl(
            &self.t.roots(),
            &|k| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()),
            &read,
        )
    }
}

fn check<'a>(c: &'a [Check], id: &str) -> &'a Check {
    c.iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("no {id} in {c:#?}"))
}

#[test]
fn nccl_versions_come_from_the_real_file_name_and_choose_the_table_order() {
    let v = NcclVersion::from_file_name("libnccl.so.2.21.5").unwrap();
    assert_eq!(v.to_string(), "2.21.5");
    assert_eq!(NcclVersion::from_file_name("libnccl.so.2"), None);
    assert_eq!(NcclVersion::from_file_name("libnccl-net.so.2.1.1"), None);
    let order = |minor| {
        NcclVersion {
            major: 2,
            minor,
            patch: 0,
        }
        .table_order()
    };
    assert_eq!(order(19), vec![7, 6, 5]);
    assert_eq!(order(23), vec![8, 7, 6, 5]);
    assert_eq!(order(24), vec![9, 8, 7, 6, 5]);
    assert_eq!(order(27), vec![10, 9, 8, 7, 6]);
    assert_eq!(order(29), vec![11, 10, 9, 8, 7, 6]);
    assert_eq!(order(30), vec![12, 11, 10, 9, 8, 7, 6]);
    let ours: Vec<u32> = OUR_TABLES.collect();
    assert_eq!(picked_table(v, &ours), Some(8));
    assert_eq!(picked_table(v, &[9, 10]), None);
}

#[test]
fn nccl_net_plugin_values_resolve_as_each_release_resolves_them() {
    let v = |minor| {
        Some(NcclVersion {
            major: 2,
            minor,
            patch: 0,
        })
    };
    let files = |names: &[&[&str]]| {
        PluginRequest::Files(
            names
                .iter()
                .map(|n| n.iter().map(|s| s.to_string()).collect())
                .collect(),
        )
    };
    assert_eq!(
        NcclVersion::plugin_names(v(21), None),
        files(&[&["libnccl-net.so"]])
    );
    assert_eq!(
        NcclVersion::plugin_names(v(20), Some("ferro")),
        files(&[&["libnccl-net-ferro.so"]])
    );
    assert_eq!(
        NcclVersion::plugin_names(v(21), Some("ferro")),
        files(&[&["ferro", "libnccl-net-ferro.so"]])
    );
    assert_eq!(
        NcclVersion::plugin_names(v(26), Some("a,b")),
        files(&[&["a,b", "libnccl-net-a,b.so"]]),
        "no lists before 2.27"
    );
    assert_eq!(
        NcclVersion::plugin_names(v(27), Some("a,b")),
        files(&[&["a", "libnccl-net-a.so"], &["b", "libnccl-net-b.so"]])
    );
    assert_eq!(
        NcclVersion::plugin_names(v(21), Some("/opt/ferro/lib/libnccl-net-ferro.so")),
        files(&[&["/opt/ferro/lib/libnccl-net-ferro.so"]]),
        "a path names one file"
    );
    assert_eq!(
        NcclVersion::plugin_names(v(28), Some("none")),
        PluginRequest::NoPlugin
    );
    assert_eq!(
        NcclVersion::plugin_names(None, Some("STATIC_PLUGIN")),
        PluginRequest::Static
    );
}

#[test]
fn the_installed_nccl_is_named_with_its_version_and_the_table_it_picks() {
    let mut l = Libs::new();
    l.file("usr/lib/libnccl.so.2.24.3", ElfFacts::default());
    l.symlink("usr/lib/libnccl.so.2", "libnccl.so.2.24.3");
    l.file(
        "opt/ferro/lib/libnccl-net-ferro.so",
        plugin(&[7, 8, 9, 10, 11, 12], 28),
    );
    let f = l.facts(&[
        ("NCCL_NET_PLUGIN", "ferro"),
        ("LD_LIBRARY_PATH", "/opt/ferro/lib"),
    ]);
    let c = nccl_checks(&f);
    let lib = check(&c, "nccl.library");
    assert_eq!(lib.status, Status::Ok);
    assert_eq!(lib.summary, "NCCL 2.24.3 at /usr/lib/libnccl.so.2");
    let p = check(&c, "nccl.plugin");
    assert_eq!(p.status, Status::Ok, "{p:#?}");
    assert!(
        p.summary
            .contains("/opt/ferro/lib/libnccl-net-ferro.so loads")
            && p.summary
                .contains("NCCL 2.24.3 would use its ncclNetPlugin_v9 table"),
        "{}",
        p.summary
    );
    assert!(
        p.evidence.iter().any(|e| e.starts_with("ferro: not found")),
        "the verbatim name is tried first: {:?}",
        p.evidence
    );
}

#[test]
fn an_absolute_link_in_the_tree_is_followed_inside_the_tree() {
    let mut l = Libs::new();
    l.file("usr/lib/libnccl.so.2.28.9", ElfFacts::default());
    // As a package installs it on the host, seen through --root: the target is absolute.
    l.symlink("usr/lib/libnccl.so.2", "/usr/lib/libnccl.so.2.28.9");
    let f = l.facts(&[]);
    let lib = f.library.expect("found through the link");
    assert_eq!(
        lib.copies[0].real,
        PathBuf::from("/usr/lib/libnccl.so.2.28.9")
    );
    assert_eq!(
        lib.version.map(|v| v.to_string()).as_deref(),
        Some("2.28.9")
    );
}

#[test]
fn a_plugin_without_the_table_the_installed_nccl_looks_for_fails() {
    let mut l = Libs::new();
    l.file("usr/lib/libnccl.so.2.19.3", ElfFacts::default());
    l.symlink("usr/lib/libnccl.so.2", "libnccl.so.2.19.3");
    l.file("usr/lib/libnccl-net-ferro.so", plugin(&[9, 10], 17));
    let f = l.facts(&[("NCCL_NET_PLUGIN", "ferro")]);
    let p = nccl_checks(&f);
    let p = check(&p, "nccl.plugin");
    assert_eq!(p.status, Status::Fail, "{p:#?}");
    assert!(
        p.summary
            .contains("exports v9 v10, none of the tables NCCL 2.19.3 looks for (v7 v6 v5)"),
        "{}",
        p.summary
    );
}

#[test]
fn a_plugin_needing_a_newer_glibc_does_not_load() {
    let mut l = Libs::new();
    l.file("usr/lib/libnccl-net-ferro.so", plugin(&[12], 38));
    let f = l.facts(&[("NCCL_NET_PLUGIN", "libnccl-net-ferro.so")]);
    let c = nccl_checks(&f);
    let p = check(&c, "nccl.plugin");
    assert_eq!(p.status, Status::Fail, "{p:#?}");
    assert!(
        p.summary
            .contains("needs GLIBC_2.38 from libc.so.6; the installed glibc (/usr/lib/libc.so.6) provides up to GLIBC_2.35"),
        "{}",
        p.summary
    );
    // A missing library is named too.
    let mut l = Libs::new();
    let mut needs_more = plugin(&[12], 17);
    needs_more.needed.push("libgcc_s.so.1".into());
    l.file("usr/lib/libnccl-net-ferro.so", needs_more);
    let f = l.facts(&[("NCCL_NET_PLUGIN", "ferro")]);
    let p = nccl_checks(&f);
    assert!(
        check(&p, "nccl.plugin")
            .summary
            .contains("needs libgcc_s.so.1, which is not on the library path"),
        "{p:#?}"
    );
}

#[test]
fn a_plugin_for_another_machine_does_not_load() {
    let mut l = Libs::new();
    let mut foreign = plugin(&[12], 17);
    foreign.machine = if host_machine() == Some(object::elf::EM_AARCH64) {
        object::elf::EM_X86_64
    } else {
        object::elf::EM_AARCH64
    };
    l.file("usr/lib/libnccl-net-ferro.so", foreign);
    let f = l.facts(&[("NCCL_NET_PLUGIN", "ferro")]);
    let c = nccl_checks(&f);
    let p = check(&c, "nccl.plugin");
    assert_eq!(p.status, Status::Fail);
    assert!(p.summary.contains("built for"), "{}", p.summary);
}

#[test]
fn with_nccl_net_plugin_unset_another_libnccl_net_so_shadows_ferro() {
    let mut l = Libs::new();
    l.file("usr/lib/libnccl-net.so", plugin(&[8], 17));
    l.file("opt/ferro/lib/libnccl-net-ferro.so", plugin(&[7, 8, 9], 17));
    l.symlink("opt/ferro/lib/libnccl-net.so", "libnccl-net-ferro.so");
    l.t.write("etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n");
    l.t.write("etc/ld.so.conf.d/zz-ferro.conf", "/opt/ferro/lib\n");
    // The configured directory comes before the defaults: Ferro's alias is found first.
    let f = l.facts(&[]);
    assert_eq!(f.search.dirs[0], PathBuf::from("/opt/ferro/lib"));
    let c = nccl_checks(&f);
    assert_eq!(check(&c, "nccl.plugin").status, Status::Ok);
    assert_eq!(check(&c, "nccl.shadow").status, Status::Info);
    // LD_LIBRARY_PATH puts the other plugin first: it shadows Ferro.
    let f = l.facts(&[("LD_LIBRARY_PATH", "/usr/lib")]);
    let c = nccl_checks(&f);
    let p = check(&c, "nccl.plugin");
    assert_eq!(p.status, Status::Fail, "{p:#?}");
    assert!(
        p.summary.contains("another plugin, not Ferro"),
        "{}",
        p.summary
    );
    let s = check(&c, "nccl.shadow");
    assert_eq!(s.status, Status::Fail, "{s:#?}");
    assert!(
        s.evidence[0].contains("/opt/ferro/lib/libnccl-net.so")
            && s.evidence[0].contains("is shadowed by /usr/lib/libnccl-net.so"),
        "{:?}",
        s.evidence
    );
}

#[test]
fn a_copy_of_ferro_under_the_default_name_is_recognised_as_ferro() {
    let mut l = Libs::new();
    let all: Vec<u32> = OUR_TABLES.collect();
    l.file("usr/lib/libnccl-net-ferro.so", plugin(&all, 17));
    l.file("usr/lib/libnccl-net.so", plugin(&all, 17));
    let c = nccl_checks(&l.facts(&[]));
    assert_eq!(check(&c, "nccl.plugin").status, Status::Fail, "{c:#?}");
    // The same bytes: a copy of Ferro.
    let ours = std::fs::read_to_string(l.t.path("usr/lib/libnccl-net-ferro.so")).unwrap();
    l.t.write("usr/lib/libnccl-net.so", &ours);
    let c = nccl_checks(&l.facts(&[]));
    assert_eq!(check(&c, "nccl.plugin").status, Status::Ok, "{c:#?}");
}

#[test]
fn nccl_net_naming_another_network_is_an_error_when_the_plugin_is_installed() {
    let mut l = Libs::new();
    let env = [("NCCL_NET", "IB"), ("NCCL_NET_PLUGIN", "ferro")];
    // Not installed: NCCL would not use it anyway; a warning.
    let c = nccl_checks(&l.facts(&env));
    assert_eq!(check(&c, "nccl.net").status, Status::Warning);
    l.file("usr/lib/libnccl-net-ferro.so", plugin(&[12], 17));
    let c = nccl_checks(&l.facts(&env));
    let n = check(&c, "nccl.net");
    assert_eq!(n.status, Status::Fail, "{n:#?}");
    assert!(n.summary.starts_with("NCCL_NET=IB"), "{}", n.summary);
    assert_eq!(
        n.fix.as_deref(),
        Some("unset NCCL_NET or set NCCL_NET=Ferro")
    );
    let c = nccl_checks(&l.facts(&[("NCCL_NET", "ferro"), ("NCCL_NET_PLUGIN", "ferro")]));
    assert_eq!(check(&c, "nccl.net").status, Status::Ok);
    assert!(
        !nccl_checks(&l.facts(&[("NCCL_NET_PLUGIN", "ferro")]))
            .iter()
            .any(|c| c.id == "nccl.net")
    );
}

#[test]
fn no_plugin_and_no_nccl_on_the_path_are_reported_without_failing() {
    let l = Libs::new();
    let c = nccl_checks(&l.facts(&[]));
    assert_eq!(check(&c, "nccl.library").status, Status::Info);
    let p = check(&c, "nccl.plugin");
    assert_eq!(p.status, Status::Info);
    assert!(p.summary.contains("NCCL_NET_PLUGIN unset"), "{}", p.summary);
    let c = nccl_checks(&l.facts(&[("NCCL_NET_PLUGIN", "none")]));
    assert_eq!(check(&c, "nccl.plugin").status, Status::Warning);
}

#[test]
fn a_full_path_in_nccl_net_plugin_is_read_under_the_root() {
    let mut l = Libs::new();
    l.file(
        "opt/x/libnccl-net-ferro.so",
        plugin(&[7, 8, 9, 10, 11, 12], 17),
    );
    let f = l.facts(&[("NCCL_NET_PLUGIN", "/opt/x/libnccl-net-ferro.so")]);
    let c = nccl_checks(&f);
    let p = check(&c, "nccl.plugin");
    assert_eq!(p.status, Status::Ok, "{p:#?}");
    // NCCL's version unknown: judged for every release.
    assert!(
        p.summary.contains("2.19+: v7") && p.summary.contains("2.30+: v12"),
        "{}",
        p.summary
    );
}

#[test]
fn the_elf_reader_reads_needs_versions_and_symbols_of_real_files() {
    // This test program: a dynamically linked executable of this machine that needs libc.
    let me = read_elf(&std::env::current_exe().unwrap()).unwrap();
    assert_eq!(Some(me.machine), host_machine());
    assert!(me.needed.iter().any(|n| n.starts_with("libc.so")), "{me:?}");
    assert!(
        me.version_needs
            .iter()
            .any(|(l, v)| l.starts_with("libc.so") && v.starts_with("GLIBC_2.")),
        "{me:?}"
    );
    // It loads on this machine, so the loader checks find nothing to refuse in it.
    let system = SearchPath::read(Path::new("/"), None);
    assert_eq!(load_problems(&system, &me, &read_elf), Vec::<String>::new());
    let libc = system.find("libc.so.6").expect("libc on the default path");
    let libc = read_elf(&libc.path).unwrap();
    assert!(
        libc.version_defs.iter().any(|v| v.starts_with("GLIBC_2.")),
        "{:?}",
        libc.version_defs
    );
    assert!(
        parse_elf(b"#!/bin/sh\n")
            .unwrap_err()
            .contains("not an ELF")
    );
    let mut elf32 = b"\x7fELF".to_vec();
    elf32.extend([1u8; 60]);
    assert!(parse_elf(&elf32).unwrap_err().contains("64-bit"));
    let truncated = std::fs::read(std::env::current_exe().unwrap()).unwrap()[..64].to_vec();
    assert!(parse_elf(&truncated).is_err());
}
