//! Reading the tree: devices, ports, GID tables, forgiving per file (a problem becomes a note on
//! the device, not an error).

use super::parse::{parse_guid, parse_lid};
use super::*;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Reads a sysfs attribute, trimmed.
pub(super) fn read_trimmed(path: &Path) -> io::Result<String> {
    fs::read_to_string(path).map(|s| s.trim().to_string())
}

/// Reads an optional attribute: missing → `None` silently, other errors → `None` plus a note.
fn read_optional(path: &Path, field: &str, notes: &mut Vec<String>) -> Option<String> {
    match read_trimmed(path) {
        Ok(s) => Some(s),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => {
            notes.push(format!("{field}: {}", SysfsError::new(path, e)));
            None
        }
    }
}

/// Reads and parses an optional attribute, noting parse failures.
fn read_parsed<T>(
    path: &Path,
    field: &str,
    notes: &mut Vec<String>,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Option<T> {
    let text = read_optional(path, field, notes)?;
    let parsed = parse(&text);
    if parsed.is_none() {
        notes.push(format!(
            "{field}: cannot parse '{text}' in {}",
            path.display()
        ));
    }
    parsed
}

/// Names of the entries of a directory, or `None` if it does not exist.
fn dir_names(path: &Path) -> io::Result<Option<Vec<String>>> {
    let rd = match fs::read_dir(path) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut names = Vec::new();
    for entry in rd {
        names.push(entry?.file_name().to_string_lossy().into_owned());
    }
    Ok(Some(names))
}

/// Numeric entries of a directory, sorted; non-numeric names are ignored.
fn numeric_dir_entries<T: FromStr + Ord>(
    path: &Path,
    what: &str,
    notes: &mut Vec<String>,
) -> Vec<(T, String)> {
    let names = match dir_names(path) {
        Ok(Some(names)) => names,
        Ok(None) => return Vec::new(),
        Err(e) => {
            notes.push(format!("{what}: {}", SysfsError::new(path, e)));
            return Vec::new();
        }
    };
    let mut out: Vec<(T, String)> = names
        .into_iter()
        .filter_map(|n| n.parse::<T>().ok().map(|v| (v, n)))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Lists the RDMA devices under `<sys>/class/infiniband`, sorted by name.
///
/// A missing `class/infiniband` directory (host without RDMA) is `Ok(vec![])`. Per-file problems
/// are recorded in [`SysDevice::notes`] instead of failing the listing.
///
/// # Errors
/// Only when `class/infiniband` exists but cannot be listed.
pub fn list_devices(sys: &Path) -> Result<Vec<SysDevice>, SysfsError> {
    list_devices_with(sys, true)
}

/// [`list_devices`], reading the GID tables or not (`gids == false` leaves every port's table
/// empty: the caller takes it from `ibv_query_gid_table`, one call instead of three file reads
/// per slot).
///
/// # Errors
/// Only when `class/infiniband` exists but cannot be listed.
pub fn list_devices_with(sys: &Path, gids: bool) -> Result<Vec<SysDevice>, SysfsError> {
    let class = sys.join("class").join("infiniband");
    let mut names = match dir_names(&class) {
        Ok(Some(names)) => names,
        Ok(None) => return Ok(Vec::new()),
        Err(e) => return Err(SysfsError::new(&class, e)),
    };
    names.sort();
    Ok(names
        .iter()
        .map(|name| read_device_with(&class.join(name), name, gids))
        .collect())
}

/// Reads one device directory (`class/infiniband/<name>`).
pub fn read_device(dir: &Path, name: &str) -> SysDevice {
    read_device_with(dir, name, true)
}

/// [`read_device`], reading the ports' GID tables or not.
pub fn read_device_with(dir: &Path, name: &str, gids: bool) -> SysDevice {
    let mut notes = Vec::new();
    let node_guid = read_parsed(&dir.join("node_guid"), "node_guid", &mut notes, parse_guid);
    let sys_image_guid = read_parsed(
        &dir.join("sys_image_guid"),
        "sys_image_guid",
        &mut notes,
        parse_guid,
    );
    let node_type = read_optional(&dir.join("node_type"), "node_type", &mut notes);
    let fw_ver = read_optional(&dir.join("fw_ver"), "fw_ver", &mut notes);
    let parent_netdev =
        read_optional(&dir.join("parent"), "parent", &mut notes).filter(|s| !s.is_empty());
    let pci_path = resolve_pci_path(&dir.join("device"), &mut notes);

    let ports = numeric_dir_entries::<u8>(&dir.join("ports"), "ports", &mut notes)
        .into_iter()
        .map(|(num, entry)| {
            read_port(
                &dir.join("ports").join(entry),
                num,
                parent_netdev.as_deref(),
                gids,
                &mut notes,
            )
        })
        .collect();

    SysDevice {
        name: name.to_string(),
        node_guid,
        sys_image_guid,
        node_type,
        fw_ver,
        pci_path,
        ports,
        parent_netdev,
        notes,
    }
}

/// Canonical target of the `device` link when it resolves to a PCI function.
fn resolve_pci_path(link: &Path, notes: &mut Vec<String>) -> Option<PathBuf> {
    match fs::canonicalize(link) {
        Ok(p) => {
            let is_pci = p
                .components()
                .any(|c| c.as_os_str().to_str().is_some_and(PciAddr::is_pci_addr));
            is_pci.then_some(p)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => {
            notes.push(format!("device: {}", SysfsError::new(link, e)));
            None
        }
    }
}

/// Reads one port directory (`ports/<n>`); problems go to `notes` prefixed with the port.
fn read_port(
    dir: &Path,
    num: u8,
    parent_netdev: Option<&str>,
    read_gids: bool,
    notes: &mut Vec<String>,
) -> SysPort {
    let mut port_notes = Vec::new();
    let state = match read_trimmed(&dir.join("state")) {
        Ok(text) => PortState::parse(&text).unwrap_or_else(|| {
            port_notes.push(format!("state: cannot parse '{text}'"));
            PortState::Other(0)
        }),
        Err(e) => {
            port_notes.push(format!("state: {}", SysfsError::new(&dir.join("state"), e)));
            PortState::Other(0)
        }
    };
    let phys_state = read_optional(&dir.join("phys_state"), "phys_state", &mut port_notes);
    let link_layer = match read_trimmed(&dir.join("link_layer")) {
        Ok(text) => LinkLayer::parse(&text),
        Err(e) => {
            port_notes.push(format!(
                "link_layer: {}",
                SysfsError::new(&dir.join("link_layer"), e)
            ));
            LinkLayer::Unknown(String::new())
        }
    };
    let rate = read_parsed(&dir.join("rate"), "rate", &mut port_notes, Rate::parse);
    let lid = read_parsed(&dir.join("lid"), "lid", &mut port_notes, parse_lid);
    let gids = if read_gids {
        read_gid_table(dir, &link_layer, &mut port_notes)
    } else {
        Vec::new()
    };
    let netdev = gids
        .iter()
        .find_map(|g| g.netdev.clone())
        .or_else(|| parent_netdev.map(str::to_string));

    notes.extend(port_notes.into_iter().map(|n| format!("port {num}: {n}")));
    SysPort {
        num,
        state,
        phys_state,
        link_layer,
        rate,
        lid,
        gids,
        netdev,
    }
}

/// Reads `gids/<i>` with `gid_attrs/types/<i>` and `gid_attrs/ndevs/<i>`.
///
/// Type and netdev reads fail (EINVAL) for empty slots on real kernels; any failure there means
/// "unknown"/"none" and is never an error.
fn read_gid_table(
    port_dir: &Path,
    link_layer: &LinkLayer,
    notes: &mut Vec<String>,
) -> Vec<GidEntry> {
    let gids_dir = port_dir.join("gids");
    let types_dir = port_dir.join("gid_attrs").join("types");
    let ndevs_dir = port_dir.join("gid_attrs").join("ndevs");
    let mut out = Vec::new();
    for (index, entry) in numeric_dir_entries::<u32>(&gids_dir, "gids", notes) {
        let path = gids_dir.join(&entry);
        let text = match read_trimmed(&path) {
            Ok(t) => t,
            Err(e) => {
                notes.push(format!("gid {index}: {}", SysfsError::new(&path, e)));
                continue;
            }
        };
        let Some(gid) = parse_gid(&text) else {
            notes.push(format!("gid {index}: cannot parse '{text}'"));
            continue;
        };
        let gid_type = read_trimmed(&types_dir.join(&entry))
            .map(|t| GidType::parse(&t, link_layer))
            .unwrap_or(GidType::Unknown);
        let netdev = read_trimmed(&ndevs_dir.join(&entry))
            .ok()
            .filter(|s| !s.is_empty());
        out.push(GidEntry {
            index,
            gid,
            gid_type,
            netdev,
        });
    }
    out
}
