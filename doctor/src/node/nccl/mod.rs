//! NCCL and the plugin it would load, as this process's environment sets them up: the installed
//! `libnccl.so.2` and its version, the file `NCCL_NET_PLUGIN` (or the default `libnccl-net.so`)
//! resolves to on the library path, whether the loader would load it (its machine, its
//! `DT_NEEDED` libraries and the glibc symbol versions it needs), which `ncclNetPlugin_vN` table
//! the installed NCCL would pick from it, copies that shadow others, and `NCCL_NET`.
//!
//! Facts are gathered under a root ([`collect_nccl`], the library path of [`search`], ELF files
//! read by [`elf`], never loaded) and judged by [`nccl_checks`]: `nccl.library`, `nccl.plugin`,
//! `nccl.shadow`, `nccl.net`.
//!
//! NCCL's version comes from the real path of `libnccl.so.2`: packages install it as a link to
//! `libnccl.so.2.<minor>.<patch>`, so the file name states the release without running any of its
//! code. Its `SONAME` is `libnccl.so.2` for every 2.x release and says nothing, and reading the
//! version through `ncclGetVersion` means calling into the library (a `dlopen`, its constructors
//! and CUDA's); a copy with no versioned name (a Python wheel's) is reported as of unknown
//! version and judged against every release.

mod checks;
pub mod elf;
pub mod search;
#[cfg(test)]
mod tests;

pub use checks::{nccl_checks, picked_table};

use super::{Check, Roots, Status};
use elf::{ElfFacts, host_machine, machine_name};
use search::{Found, SearchPath};
use std::fmt;
use std::path::{Path, PathBuf};

/// The plugin's installed file name (`NCCL_NET_PLUGIN=ferro` resolves to it).
pub const OUR_FILE: &str = "libnccl-net-ferro.so";
/// The default plugin file NCCL loads when `NCCL_NET_PLUGIN` is unset.
pub const DEFAULT_PLUGIN: &str = "libnccl-net.so";
/// NCCL's library.
pub const LIBNCCL: &str = "libnccl.so.2";
/// The table versions this plugin exports.
pub const OUR_TABLES: std::ops::RangeInclusive<u32> = 7..=12;
/// The first NCCL 2.x minor release of each table-order rule, oldest first.
const RELEASES: [u32; 6] = [19, 20, 24, 26, 28, 30];

/// An NCCL release, `2.21.5`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct NcclVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl NcclVersion {
    /// From a file name `libnccl.so.2.21.5` (`None` for `libnccl.so.2` or anything else).
    pub fn from_file_name(name: &str) -> Option<NcclVersion> {
        let rest = name.strip_prefix("libnccl.so.")?;
        let mut parts = rest.split('.').map(|p| p.parse::<u32>().ok());
        let (major, minor, patch) = (parts.next()??, parts.next()??, parts.next()??);
        Some(NcclVersion {
            major,
            minor,
            patch,
        })
    }

    /// The `ncclNetPlugin_vN` versions this release looks for, in the order it tries them (the
    /// first one the plugin exports wins).
    pub fn table_order(self) -> Vec<u32> {
        let newest = match (self.major, self.minor) {
            (m, _) if m > 2 => 12,
            (2, n) if n >= 30 => 12,
            (2, 28..=29) => 11,
            (2, 26..=27) => 10,
            (2, 24..=25) => 9,
            (2, 20..=23) => 8,
            (2, 19) => 7,
            _ => 6,
        };
        // 2.26 dropped v5.
        let oldest = if (self.major, self.minor) >= (2, 26) {
            6
        } else {
            5
        };
        (oldest..=newest).rev().collect()
    }

    /// How NCCL resolves `NCCL_NET_PLUGIN=value` into file names (`None`: no external plugin).
    pub fn plugin_names(version: Option<NcclVersion>, value: Option<&str>) -> PluginRequest {
        let v = version.map(|v| (v.major, v.minor));
        let Some(value) = value.map(str::trim).filter(|s| !s.is_empty()) else {
            return PluginRequest::Files(vec![vec![DEFAULT_PLUGIN.to_string()]]);
        };
        if value.eq_ignore_ascii_case("none") {
            return PluginRequest::NoPlugin;
        }
        if value == "STATIC_PLUGIN" && v.is_none_or(|v| v >= (2, 22)) {
            return PluginRequest::Static;
        }
        // 2.27 and later take a comma-separated list.
        let names: Vec<&str> = if v.is_none_or(|v| v >= (2, 27)) {
            value
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect()
        } else {
            vec![value]
        };
        PluginRequest::Files(
            names
                .into_iter()
                .map(|n| {
                    let prefixed = format!("libnccl-net-{n}.so");
                    // Up to 2.20 only the prefixed name; from 2.21 the value itself first.
                    if v.is_some_and(|v| v <= (2, 20)) {
                        vec![prefixed]
                    } else if n.contains('/') {
                        // A path: the prefixed form names no file either.
                        vec![n.to_string()]
                    } else {
                        vec![n.to_string(), prefixed]
                    }
                })
                .collect(),
        )
    }
}

impl fmt::Display for NcclVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// What `NCCL_NET_PLUGIN` asks NCCL to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginRequest {
    /// `none`: no external plugin.
    NoPlugin,
    /// `STATIC_PLUGIN`: the tables are looked up in the process itself.
    Static,
    /// Per plugin asked for, the file names tried in order.
    Files(Vec<Vec<String>>),
}

/// `libnccl.so.2` on the library path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NcclLib {
    /// Every copy, the loaded one first.
    pub copies: Vec<Found>,
    /// From the first copy's real file name.
    pub version: Option<NcclVersion>,
}

/// One file name NCCL would hand to the loader, and what the loader would find.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The name as NCCL passes it (`libnccl-net.so`, `ferro`, `/opt/ferro/lib/...`).
    pub name: String,
    /// The copies found (a path: that file alone), the loaded one first.
    pub copies: Vec<Found>,
    /// The first copy's ELF facts, or why it cannot be read (`None`: nothing found).
    pub elf: Option<Result<ElfFacts, String>>,
    /// Why the loader would refuse the first copy (empty: it loads).
    pub load_problems: Vec<String>,
    /// The first copy is this plugin: its real file is `libnccl-net-ferro*` or
    /// `libnccl_net_ferro*`, or has the same bytes as a `libnccl-net-ferro.so` on the path.
    pub ours: bool,
}

impl Candidate {
    pub fn loads(&self) -> bool {
        !self.copies.is_empty() && self.load_problems.is_empty()
    }

    /// The table versions it defines.
    pub fn tables(&self) -> Vec<u32> {
        match &self.elf {
            Some(Ok(e)) => (1..=32)
                .filter(|n| e.defines(&format!("ncclNetPlugin_v{n}")))
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// Everything the NCCL checks look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NcclFacts {
    pub search: SearchPath,
    pub net_plugin: Option<String>,
    pub net: Option<String>,
    pub library: Option<NcclLib>,
    pub request: PluginRequest,
    /// The candidates in the order NCCL tries them (empty for `none` and `STATIC_PLUGIN`).
    pub candidates: Vec<Candidate>,
    /// Every `libnccl-net.so` on the path (for the shadowing report).
    pub default_copies: Vec<Found>,
}

/// Whether the real file `p` is this plugin.
fn is_ours(p: &Path) -> bool {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .is_some_and(|n| n.starts_with("libnccl-net-ferro") || n.starts_with("libnccl_net_ferro"))
}

/// Whether the file found is this plugin: by its real name, or by its bytes.
pub(crate) fn is_ours_file(search: &SearchPath, f: &Found) -> bool {
    is_ours(&f.real) || same_file_as_ours(search, &f.path)
}

/// Whether `p` (as the process names it) has the same bytes as a `libnccl-net-ferro.so` on the
/// path: a copy of the plugin under another name (`libnccl-net.so` copied rather than linked).
fn same_file_as_ours(search: &SearchPath, p: &Path) -> bool {
    let Ok(bytes) = std::fs::read(search.under(&search.resolve(p))) else {
        return false;
    };
    search
        .find_all(OUR_FILE)
        .iter()
        .any(|f| std::fs::read(search.under(&f.real)).is_ok_and(|o| o == bytes))
}

/// Gathers the NCCL facts under `roots.fs`; `env` is the environment, `read` the ELF reader
/// ([`elf::read_elf`] on a real host; tests pass their own).
pub fn collect_nccl(
    roots: &Roots,
    env: &dyn Fn(&str) -> Option<String>,
    read: &dyn Fn(&Path) -> Result<ElfFacts, String>,
) -> NcclFacts {
    let search = SearchPath::read(&roots.fs, env("LD_LIBRARY_PATH").as_deref());
    let net_plugin = env("NCCL_NET_PLUGIN");
    let copies = search.find_all(LIBNCCL);
    let library = (!copies.is_empty()).then(|| NcclLib {
        version: copies[0]
            .real
            .file_name()
            .and_then(|n| NcclVersion::from_file_name(&n.to_string_lossy())),
        copies,
    });
    let version = library.as_ref().and_then(|l| l.version);
    let request = NcclVersion::plugin_names(version, net_plugin.as_deref());
    let mut candidates = Vec::new();
    if let PluginRequest::Files(plugins) = &request {
        for names in plugins {
            for name in names {
                candidates.push(candidate(&search, name, read));
            }
        }
    }
    NcclFacts {
        default_copies: search.find_all(DEFAULT_PLUGIN),
        net: env("NCCL_NET").filter(|s| !s.trim().is_empty()),
        net_plugin,
        library,
        request,
        candidates,
        search,
    }
}

fn candidate(
    search: &SearchPath,
    name: &str,
    read: &dyn Fn(&Path) -> Result<ElfFacts, String>,
) -> Candidate {
    let copies = if name.contains('/') {
        let p = PathBuf::from(name);
        let real = search.resolve(&p);
        if search.under(&real).is_file() {
            vec![Found { real, path: p }]
        } else {
            Vec::new()
        }
    } else {
        search.find_all(name)
    };
    let Some(first) = copies.first() else {
        return Candidate {
            name: name.to_string(),
            copies,
            elf: None,
            load_problems: Vec::new(),
            ours: false,
        };
    };
    let elf = read(&search.under(&first.real));
    let mut problems = Vec::new();
    match &elf {
        Err(e) => problems.push(e.clone()),
        Ok(e) => problems.extend(load_problems(search, e, read)),
    }
    Candidate {
        name: name.to_string(),
        ours: is_ours_file(search, first),
        copies,
        elf: Some(elf),
        load_problems: problems,
    }
}

/// What the loader would refuse in a library with facts `e`: another machine, a `DT_NEEDED`
/// library it cannot find, a glibc symbol version the installed glibc lacks.
pub fn load_problems(
    search: &SearchPath,
    e: &ElfFacts,
    read: &dyn Fn(&Path) -> Result<ElfFacts, String>,
) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(host) = host_machine() {
        if e.machine != host {
            out.push(format!(
                "built for {}, this host is {}",
                machine_name(e.machine),
                machine_name(host)
            ));
            return out;
        }
    }
    for lib in &e.needed {
        let Some(found) = search.find(lib) else {
            out.push(format!("needs {lib}, which is not on the library path"));
            continue;
        };
        let wanted: Vec<&str> = e
            .version_needs
            .iter()
            .filter(|(l, v)| l == lib && v.starts_with("GLIBC_"))
            .map(|(_, v)| v.as_str())
            .collect();
        if wanted.is_empty() {
            continue;
        }
        match read(&search.under(&found.real)) {
            Ok(dep) => {
                let missing: Vec<&str> = wanted
                    .into_iter()
                    .filter(|v| !dep.version_defs.iter().any(|d| d == v))
                    .collect();
                if !missing.is_empty() {
                    let newest = dep
                        .version_defs
                        .iter()
                        .filter(|d| d.starts_with("GLIBC_2."))
                        .max_by_key(|d| glibc_key(d))
                        .map_or("?".to_string(), String::clone);
                    out.push(format!(
                        "needs {} from {lib}; the installed glibc ({}) provides up to {newest}",
                        missing.join(", "),
                        found.path.display()
                    ));
                }
            }
            Err(err) => out.push(format!("cannot check the glibc versions it needs: {err}")),
        }
    }
    out
}

/// `GLIBC_2.34` -> (2, 34) for ordering.
fn glibc_key(v: &str) -> (u32, u32, u32) {
    let mut parts = v
        .trim_start_matches("GLIBC_")
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or(0));
    (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}
