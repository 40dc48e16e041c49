//! Host facts read from sysfs and procfs: is nvidia-peermem loaded, which kernel is running.
//!
//! Every function takes the root of the tree (`/sys`, `/proc` in production) so tests point them
//! at a fake tree.

use std::fmt;
use std::path::{Path, PathBuf};

/// Files whose existence means a GPU peer-memory client is registered with the RDMA core, relative
/// to the sysfs root, in the order NCCL checks them (`net_ib.cc`, "GDR detection"):
/// the legacy `nv_peer_mem` module (and its non-cached variant), then the in-tree
/// `nvidia_peermem` module of the NVIDIA driver (470+).
pub const PEERMEM_MARKERS: [&str; 3] = [
    "kernel/mm/memory_peers/nv_mem/version",
    "kernel/mm/memory_peers/nv_mem_nc/version",
    "module/nvidia_peermem/version",
];

/// Whether a GPU peer-memory module is loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peermem {
    /// A marker file exists.
    Loaded {
        /// The marker found (full path under the given root).
        marker: PathBuf,
        /// Its content, trimmed, when readable and non-empty (the module's version).
        version: Option<String>,
    },
    /// None of [`PEERMEM_MARKERS`] exists.
    NotLoaded,
}

impl Peermem {
    pub fn is_loaded(&self) -> bool {
        matches!(self, Peermem::Loaded { .. })
    }

    /// The module behind the marker: `nvidia_peermem` or the legacy `nv_peer_mem`.
    pub fn module_name(&self) -> Option<&'static str> {
        match self {
            Peermem::Loaded { marker, .. } if marker.ends_with(PEERMEM_MARKERS[2]) => {
                Some("nvidia_peermem")
            }
            Peermem::Loaded { .. } => Some("nv_peer_mem"),
            Peermem::NotLoaded => None,
        }
    }
}

/// Looks for the peer-memory markers under `sys_root` (normally `/sys`); the first one found wins.
pub fn detect_peermem(sys_root: &Path) -> Peermem {
    for rel in PEERMEM_MARKERS {
        let marker = sys_root.join(rel);
        if marker.exists() {
            let version = std::fs::read_to_string(&marker)
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty());
            return Peermem::Loaded { marker, version };
        }
    }
    Peermem::NotLoaded
}

/// A kernel version, compared numerically (`5.9 < 5.12`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KernelVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl KernelVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        KernelVersion {
            major,
            minor,
            patch,
        }
    }

    pub fn as_tuple(self) -> (u32, u32, u32) {
        (self.major, self.minor, self.patch)
    }
}

/// `major.minor` (the patch level does not matter for any decision here).
impl fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The first kernel whose RDMA core accepts DMA-BUF registrations (`ib_umem_dmabuf`, 5.12).
pub const DMABUF_MIN_KERNEL: KernelVersion = KernelVersion::new(5, 12, 0);

/// The running kernel, or why it is not known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kernel {
    Known {
        /// The release string as read, trimmed (`"6.1.0-56-amd64"`).
        release: String,
        version: KernelVersion,
    },
    /// The release could not be read or parsed: the reason.
    Unknown(String),
}

impl Kernel {
    pub fn version(&self) -> Option<KernelVersion> {
        match self {
            Kernel::Known { version, .. } => Some(*version),
            Kernel::Unknown(_) => None,
        }
    }
}

/// Parses a kernel release: the leading `major.minor[.patch]` before any suffix.
/// `"6.1.0-56-amd64"` → 6.1.0, `"6.12"` → 6.12.0, `"4.18.0-513.el8.x86_64"` → 4.18.0.
pub fn parse_kernel_release(release: &str) -> Option<KernelVersion> {
    let release = release.trim();
    let end = release
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(release.len());
    let mut parts = release[..end].split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    // A missing or empty patch level ("6.12", "6.12.") counts as 0.
    let patch = match parts.next() {
        None | Some("") => 0,
        Some(p) => p.parse().ok()?,
    };
    Some(KernelVersion::new(major, minor, patch))
}

/// Reads `<proc_root>/sys/kernel/osrelease` (normally `/proc`).
pub fn read_kernel(proc_root: &Path) -> Kernel {
    let path = proc_root.join("sys/kernel/osrelease");
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let release = text.trim().to_string();
            match parse_kernel_release(&release) {
                Some(version) => Kernel::Known { release, version },
                None => Kernel::Unknown(format!(
                    "cannot parse kernel release {release:?} from {}",
                    path.display()
                )),
            }
        }
        Err(e) => Kernel::Unknown(format!("cannot read {}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().expect("has parent")).expect("mkdir");
        fs::write(p, text).expect("write");
    }

    #[test]
    fn no_marker_means_not_loaded() {
        let t = tempfile::tempdir().expect("tempdir");
        // Unrelated module and an empty memory_peers directory do not count.
        write(t.path(), "module/nvidia/version", "550.54\n");
        fs::create_dir_all(t.path().join("kernel/mm/memory_peers")).expect("mkdir");
        assert_eq!(detect_peermem(t.path()), Peermem::NotLoaded);
        assert!(!detect_peermem(t.path()).is_loaded());
    }

    #[test]
    fn each_marker_alone_is_detected_and_reported() {
        for rel in PEERMEM_MARKERS {
            let t = tempfile::tempdir().expect("tempdir");
            write(t.path(), rel, "1.2\n");
            assert_eq!(
                detect_peermem(t.path()),
                Peermem::Loaded {
                    marker: t.path().join(rel),
                    version: Some("1.2".into())
                },
                "{rel}"
            );
            let want = if rel.starts_with("module/") {
                "nvidia_peermem"
            } else {
                "nv_peer_mem"
            };
            assert_eq!(detect_peermem(t.path()).module_name(), Some(want));
        }
    }

    #[test]
    fn first_marker_wins_and_empty_version_is_none() {
        let t = tempfile::tempdir().expect("tempdir");
        write(t.path(), PEERMEM_MARKERS[2], "");
        write(t.path(), PEERMEM_MARKERS[1], "\n");
        assert_eq!(
            detect_peermem(t.path()),
            Peermem::Loaded {
                marker: t.path().join(PEERMEM_MARKERS[1]),
                version: None
            }
        );
    }

    #[test]
    fn kernel_releases_parse() {
        let cases = [
            ("6.1.0-56-amd64", Some((6, 1, 0))),
            ("6.1.0-56-amd64\n", Some((6, 1, 0))),
            ("5.15.0-1051-azure", Some((5, 15, 0))),
            ("4.18.0-513.el8.x86_64", Some((4, 18, 0))),
            ("6.12", Some((6, 12, 0))),
            ("6.12.", Some((6, 12, 0))),
            ("6.8.12+", Some((6, 8, 12))),
            ("5.10.209", Some((5, 10, 209))),
            ("6", None),
            ("", None),
            ("linux", None),
            ("x6.1", None),
        ];
        for (text, want) in cases {
            assert_eq!(
                parse_kernel_release(text).map(KernelVersion::as_tuple),
                want,
                "{text:?}"
            );
        }
    }

    #[test]
    fn kernel_versions_compare_numerically() {
        let v = |s| parse_kernel_release(s).expect("parses");
        assert!(v("5.9.0") < DMABUF_MIN_KERNEL);
        assert!(v("5.10.0-28-amd64") < DMABUF_MIN_KERNEL);
        assert!(v("5.12") >= DMABUF_MIN_KERNEL);
        assert!(v("6.1.0-56-amd64") >= DMABUF_MIN_KERNEL);
        assert_eq!(v("6.8.0-45-generic").to_string(), "6.8");
    }

    #[test]
    fn read_kernel_from_fake_proc() {
        let t = tempfile::tempdir().expect("tempdir");
        assert!(
            matches!(read_kernel(t.path()), Kernel::Unknown(ref m) if m.contains("cannot read")),
        );
        write(t.path(), "sys/kernel/osrelease", "6.1.0-56-amd64\n");
        assert_eq!(
            read_kernel(t.path()),
            Kernel::Known {
                release: "6.1.0-56-amd64".into(),
                version: KernelVersion::new(6, 1, 0)
            }
        );
        write(t.path(), "sys/kernel/osrelease", "garbage\n");
        assert!(
            matches!(read_kernel(t.path()), Kernel::Unknown(ref m) if m.contains("\"garbage\"")),
        );
    }

    #[test]
    fn real_proc_gives_a_version() {
        assert!(read_kernel(Path::new("/proc")).version().is_some());
    }
}
