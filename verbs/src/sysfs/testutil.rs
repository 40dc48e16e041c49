//! Builder for fake sysfs trees in a temporary directory (tests only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

/// A fake `/sys`. Methods act on the device/port most recently added.
#[derive(Debug)]
pub(crate) struct FakeSysfs {
    dir: tempfile::TempDir,
    dev: Option<PathBuf>,
    port: Option<PathBuf>,
}

impl FakeSysfs {
    /// An empty root (no `class/infiniband`).
    pub(crate) fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            dev: None,
            port: None,
        }
    }

    /// The sysfs root to pass to the functions under test.
    pub(crate) fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `content` plus a newline at `rel` (relative to the root), creating folders.
    pub(crate) fn write(self, rel: &str, content: &str) -> Self {
        let path = self.root().join(rel);
        write_file(&path, content);
        self
    }

    /// Creates `class/infiniband` (empty).
    pub(crate) fn class_dir(self) -> Self {
        fs::create_dir_all(self.root().join("class/infiniband")).unwrap();
        self
    }

    /// Adds a device as a real directory under `class/infiniband`.
    pub(crate) fn device(mut self, name: &str) -> Self {
        let d = self.root().join("class/infiniband").join(name);
        fs::create_dir_all(&d).unwrap();
        self.dev = Some(d);
        self.port = None;
        self
    }

    /// Adds a device the way the kernel lays it out: a real directory at `devices/<under>/
    /// infiniband/<name>` and a symlink to it in `class/infiniband`.
    pub(crate) fn device_at(mut self, name: &str, under: &str) -> Self {
        let real = self
            .root()
            .join("devices")
            .join(under)
            .join("infiniband")
            .join(name);
        fs::create_dir_all(&real).unwrap();
        let class = self.root().join("class/infiniband");
        fs::create_dir_all(&class).unwrap();
        std::os::unix::fs::symlink(&real, class.join(name)).unwrap();
        self.dev = Some(real);
        self.port = None;
        self
    }

    /// Writes a file in the current device directory.
    pub(crate) fn dev_file(self, rel: &str, content: &str) -> Self {
        let d = self.dev.clone().expect("no device yet");
        write_file(&d.join(rel), content);
        self
    }

    /// Creates a `device` symlink in the current device pointing at `target` (relative to the
    /// root); the target folder is created.
    pub(crate) fn device_link(self, target: &str) -> Self {
        let d = self.dev.clone().expect("no device yet");
        let t = self.root().join(target);
        fs::create_dir_all(&t).unwrap();
        std::os::unix::fs::symlink(&t, d.join("device")).unwrap();
        self
    }

    /// Adds `ports/<n>` with `state` and `link_layer`, plus typical `phys_state`/`lid`.
    pub(crate) fn port(mut self, num: u8, state: &str, link_layer: &str) -> Self {
        let d = self.dev.clone().expect("no device yet");
        let p = d.join("ports").join(num.to_string());
        fs::create_dir_all(p.join("gids")).unwrap();
        fs::create_dir_all(p.join("gid_attrs/types")).unwrap();
        fs::create_dir_all(p.join("gid_attrs/ndevs")).unwrap();
        write_file(&p.join("state"), state);
        write_file(&p.join("link_layer"), link_layer);
        self.port = Some(p);
        self
    }

    /// Writes a file in the current port directory.
    pub(crate) fn port_file(self, rel: &str, content: &str) -> Self {
        let p = self.port.clone().expect("no port yet");
        write_file(&p.join(rel), content);
        self
    }

    /// Adds GID slot `i`. `gid_type`/`ndev` of `None` leave the attribute file out (which
    /// reads like the EINVAL of an empty slot on a real kernel).
    pub(crate) fn gid(self, i: u32, gid: &str, gid_type: Option<&str>, ndev: Option<&str>) -> Self {
        let p = self.port.clone().expect("no port yet");
        write_file(&p.join("gids").join(i.to_string()), gid);
        if let Some(t) = gid_type {
            write_file(&p.join("gid_attrs/types").join(i.to_string()), t);
        }
        if let Some(n) = ndev {
            write_file(&p.join("gid_attrs/ndevs").join(i.to_string()), n);
        }
        self
    }

    /// Adds empty slots `range` (zero GID, no type/ndev files).
    pub(crate) fn empty_gids(mut self, range: std::ops::Range<u32>) -> Self {
        for i in range {
            self = self.gid(i, "0000:0000:0000:0000:0000:0000:0000:0000", None, None);
        }
        self
    }
}

fn write_file(path: &Path, content: &str) {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).unwrap();
    }
    fs::write(path, format!("{content}\n")).unwrap();
}

/// A soft-RoCE device on `lo`, laid out like the kernel does (virtual device, `parent` file).
/// GID 0/1 hold `::ffff:127.0.0.1` as RoCE v1/v2 (as seen on the rxe test bed), then empty
/// slots.
pub(crate) fn rxe_on_lo(fs: FakeSysfs) -> FakeSysfs {
    fs.device_at("rxe0", "virtual")
        .dev_file("node_guid", "0200:00ff:fe00:0000")
        .dev_file("sys_image_guid", "0200:00ff:fe00:0000")
        .dev_file("node_type", "1: CA")
        .dev_file("fw_ver", "0.0.0")
        .dev_file("parent", "lo")
        .port(1, "4: ACTIVE", "Ethernet")
        .port_file("phys_state", "5: LinkUp")
        .port_file("rate", "2.5 Gb/sec (1X SDR)")
        .port_file("lid", "0x0")
        .gid(
            0,
            "0000:0000:0000:0000:0000:ffff:7f00:0001",
            Some("IB/RoCE v1"),
            Some("lo"),
        )
        .gid(
            1,
            "0000:0000:0000:0000:0000:ffff:7f00:0001",
            Some("RoCE v2"),
            Some("lo"),
        )
        .empty_gids(2..8)
}

/// A soft-RoCE device on an Ethernet-like netdev with a MAC and an IPv4 address: the
/// link-local default GID pair first, then the IPv4-mapped pair, then an IPv6 global pair.
pub(crate) fn rxe_on_dummy(fs: FakeSysfs) -> FakeSysfs {
    fs.device_at("rxe1", "virtual")
        .dev_file("node_guid", "40f1:c2ff:fe3a:10aa")
        .dev_file("sys_image_guid", "40f1:c2ff:fe3a:10aa")
        .dev_file("node_type", "1: CA")
        .dev_file("fw_ver", "0.0.0")
        .dev_file("parent", "dummy1")
        .port(1, "4: ACTIVE", "Ethernet")
        .port_file("phys_state", "5: LinkUp")
        .port_file("rate", "10 Gb/sec (1X QDR)")
        .port_file("lid", "0x0")
        .gid(
            0,
            "fe80:0000:0000:0000:42f1:c2ff:fe3a:10aa",
            Some("IB/RoCE v1"),
            Some("dummy1"),
        )
        .gid(
            1,
            "fe80:0000:0000:0000:42f1:c2ff:fe3a:10aa",
            Some("RoCE v2"),
            Some("dummy1"),
        )
        .gid(
            2,
            "0000:0000:0000:0000:0000:ffff:c000:0202",
            Some("IB/RoCE v1"),
            Some("dummy1"),
        )
        .gid(
            3,
            "0000:0000:0000:0000:0000:ffff:c000:0202",
            Some("RoCE v2"),
            Some("dummy1"),
        )
        .gid(
            4,
            "2001:0db8:0000:0000:0000:0000:0000:0002",
            Some("IB/RoCE v1"),
            Some("dummy1"),
        )
        .gid(
            5,
            "2001:0db8:0000:0000:0000:0000:0000:0002",
            Some("RoCE v2"),
            Some("dummy1"),
        )
        .empty_gids(6..10)
}
