//! Where the dynamic loader looks for a library named without a path, read under a root: the
//! directories of `LD_LIBRARY_PATH`, then those of `/etc/ld.so.conf` (and the files it
//! includes), then the default directories. `ld.so.cache` is built from the same configuration,
//! so its directories are the configured ones; reading the configuration keeps the reader a plain
//! text parser that works on a fake tree.

use std::path::{Path, PathBuf};

/// The default directories after the configured ones (this machine's multiarch directories
/// first, as Debian and Ubuntu configure them; `lib64` for RHEL-like systems).
pub const DEFAULT_DIRS: [&str; 6] = [
    MULTIARCH_LIB,
    MULTIARCH_USR_LIB,
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
];
#[cfg(target_arch = "aarch64")]
const MULTIARCH_LIB: &str = "/lib/aarch64-linux-gnu";
#[cfg(target_arch = "aarch64")]
const MULTIARCH_USR_LIB: &str = "/usr/lib/aarch64-linux-gnu";
#[cfg(not(target_arch = "aarch64"))]
const MULTIARCH_LIB: &str = "/lib/x86_64-linux-gnu";
#[cfg(not(target_arch = "aarch64"))]
const MULTIARCH_USR_LIB: &str = "/usr/lib/x86_64-linux-gnu";

/// The library search path: directories as the process names them (`/usr/lib`), read under
/// `root`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchPath {
    pub root: PathBuf,
    /// In search order, each once.
    pub dirs: Vec<PathBuf>,
}

/// A file found on the search path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// As the process would name it (`/usr/lib/libnccl.so.2`).
    pub path: PathBuf,
    /// The file itself, symbolic links resolved inside the root, as the process would name it
    /// (`/usr/lib/libnccl.so.2.21.5`).
    pub real: PathBuf,
}

impl SearchPath {
    /// `LD_LIBRARY_PATH` (`ld_library_path`), `<root>/etc/ld.so.conf`, then [`DEFAULT_DIRS`].
    pub fn read(root: &Path, ld_library_path: Option<&str>) -> SearchPath {
        let mut dirs: Vec<PathBuf> = Vec::new();
        let mut add = |d: PathBuf| {
            if d.is_absolute() && !dirs.contains(&d) {
                dirs.push(d);
            }
        };
        for d in ld_library_path.unwrap_or("").split([':', ';']) {
            add(PathBuf::from(d));
        }
        let mut seen = Vec::new();
        for d in conf_dirs(root, Path::new("/etc/ld.so.conf"), &mut seen) {
            add(d);
        }
        for d in DEFAULT_DIRS {
            add(PathBuf::from(d));
        }
        SearchPath {
            root: root.to_path_buf(),
            dirs,
        }
    }

    /// `p` (as the process names it) under the root.
    pub fn under(&self, p: &Path) -> PathBuf {
        under(&self.root, p)
    }

    /// Every copy of `name` on the path, in search order (the first one is what loads).
    pub fn find_all(&self, name: &str) -> Vec<Found> {
        self.dirs
            .iter()
            .map(|d| d.join(name))
            .map(|path| Found {
                real: self.resolve(&path),
                path,
            })
            .filter(|f| self.under(&f.real).is_file())
            .collect()
    }

    /// The first copy of `name`.
    pub fn find(&self, name: &str) -> Option<Found> {
        self.find_all(name).into_iter().next()
    }

    /// Follows symbolic links of `p` inside the root (an absolute target is taken under the
    /// root, a relative one next to the link), at most 16 deep, so that a link in a mounted
    /// host tree never leads out of it. Links in the directories above the file are followed
    /// by the kernel as they are (relative ones, such as a merged `/lib -> usr/lib`, stay inside).
    pub fn resolve(&self, p: &Path) -> PathBuf {
        let mut cur = p.to_path_buf();
        for _ in 0..16 {
            match std::fs::read_link(self.under(&cur)) {
                Ok(target) if target.is_absolute() => cur = target,
                Ok(target) => {
                    cur = cur
                        .parent()
                        .map_or_else(|| target.clone(), |dir| dir.join(&target));
                }
                Err(_) => break,
            }
        }
        cur
    }
}

/// `p` under `root` (`p` absolute as the process names it).
pub fn under(root: &Path, p: &Path) -> PathBuf {
    root.join(p.strip_prefix("/").unwrap_or(p))
}

/// The directories of one `ld.so.conf` file, following `include` lines (glob patterns with a
/// `*` in the file name only, which is how distributions use them).
fn conf_dirs(root: &Path, file: &Path, seen: &mut Vec<PathBuf>) -> Vec<PathBuf> {
    if seen.contains(&file.to_path_buf()) || seen.len() > 64 {
        return Vec::new();
    }
    seen.push(file.to_path_buf());
    let Ok(text) = std::fs::read_to_string(under(root, file)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if let Some(pattern) = line.strip_prefix("include") {
            for pat in pattern.split_whitespace() {
                let pat = match Path::new(pat) {
                    p if p.is_absolute() => p.to_path_buf(),
                    p => file.parent().unwrap_or(Path::new("/")).join(p),
                };
                for f in glob_files(root, &pat) {
                    out.extend(conf_dirs(root, &f, seen));
                }
            }
        } else if !line.starts_with("hwcap") {
            out.push(PathBuf::from(line));
        }
    }
    out
}

/// Files matching `pattern` (a `*` allowed in the last component only), sorted.
fn glob_files(root: &Path, pattern: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (pattern.parent(), pattern.file_name()) else {
        return Vec::new();
    };
    let name = name.to_string_lossy();
    let Some((prefix, suffix)) = name.split_once('*') else {
        return vec![pattern.to_path_buf()];
    };
    let mut out: Vec<PathBuf> = std::fs::read_dir(under(root, dir))
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    n.len() >= prefix.len() + suffix.len()
                        && n.starts_with(prefix)
                        && n.ends_with(suffix)
                })
                .map(|n| dir.join(n))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}
