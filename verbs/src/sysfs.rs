//! RDMA device discovery from a sysfs tree (`/sys/class/infiniband`).
//!
//! Every function takes the sysfs root (normally `/sys`) as a parameter, so the whole module can be
//! exercised against a fake tree built in a temporary directory.
//!
//! Reading is forgiving: a host without RDMA (no `class/infiniband`) is an empty list, and a device
//! whose individual files cannot be read or parsed still yields an entry, with the problem recorded
//! in [`SysDevice::notes`]. Only a failure to list `class/infiniband` itself is an error.
//!
//! The module also holds a few pure helpers used with `ibv_query_port` results (link speed
//! decoding) and host facts for diagnostics (IOMMU mode from the kernel command line).

use std::fmt;
use std::fs;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::str::FromStr;

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// A sysfs read that could not be turned into a partial result.
#[derive(Debug)]
pub struct SysfsError {
    /// The path that failed.
    pub path: PathBuf,
    /// The underlying I/O error.
    pub source: io::Error,
}

impl SysfsError {
    fn new(path: &Path, source: io::Error) -> Self {
        Self {
            path: path.to_path_buf(),
            source,
        }
    }
}

impl fmt::Display for SysfsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot read {}: {}", self.path.display(), self.source)
    }
}

impl std::error::Error for SysfsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

// ---------------------------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------------------------

/// One RDMA device from `class/infiniband/<name>`.
#[derive(Debug, Clone, PartialEq)]
pub struct SysDevice {
    /// Device name, e.g. `mlx5_0` or `rxe0`.
    pub name: String,
    /// `node_guid`, parsed from `0011:2233:4455:6677` (big-endian as printed).
    pub node_guid: Option<u64>,
    /// `sys_image_guid`, same format as `node_guid`.
    pub sys_image_guid: Option<u64>,
    /// `node_type` as printed, e.g. `1: CA`.
    pub node_type: Option<String>,
    /// `fw_ver` as printed.
    pub fw_ver: Option<String>,
    /// Canonical path of the PCI function behind the device (`device` link), `None` for virtual
    /// devices such as rxe.
    pub pci_path: Option<PathBuf>,
    /// Ports, sorted by number.
    pub ports: Vec<SysPort>,
    /// Network interface the device is layered on (`parent` file, exposed by rxe).
    pub parent_netdev: Option<String>,
    /// Problems met while reading this device (unreadable or unparsable files), one line each,
    /// naming the field. Missing optional files are not problems and are not noted.
    pub notes: Vec<String>,
}

impl SysDevice {
    /// The PCI address (`0000:03:00.0`), i.e. the last component of [`Self::pci_path`].
    pub fn pci_address(&self) -> Option<&str> {
        self.pci_path
            .as_deref()
            .and_then(Path::file_name)
            .and_then(|n| n.to_str())
            .filter(|n| is_pci_bdf(n))
    }

    /// The port with number `num`, if present.
    pub fn port(&self, num: u8) -> Option<&SysPort> {
        self.ports.iter().find(|p| p.num == num)
    }
}

/// One port from `class/infiniband/<dev>/ports/<n>`.
#[derive(Debug, Clone, PartialEq)]
pub struct SysPort {
    /// Port number (1-based).
    pub num: u8,
    /// Logical port state (`state`).
    pub state: PortState,
    /// Physical state as printed (`phys_state`, e.g. `5: LinkUp`).
    pub phys_state: Option<String>,
    /// Link layer (`link_layer`).
    pub link_layer: LinkLayer,
    /// Link rate (`rate`).
    pub rate: Option<Rate>,
    /// LID (`lid`, printed as hex); 0 on RoCE.
    pub lid: Option<u16>,
    /// Raw GID table, sorted by index. Holds every slot whose `gids/<i>` file exists and parses,
    /// zero GIDs included: callers filter.
    pub gids: Vec<GidEntry>,
    /// Netdev of the first GID entry that has one, else the device's `parent` netdev.
    pub netdev: Option<String>,
}

/// Logical port state (`enum ibv_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortState {
    /// 1: DOWN
    Down,
    /// 2: INIT
    Init,
    /// 3: ARMED
    Armed,
    /// 4: ACTIVE
    Active,
    /// 5: ACTIVE_DEFER
    ActiveDefer,
    /// Any other code; `Other(0)` also stands for "could not be read".
    Other(u8),
}

impl PortState {
    /// From the numeric code used by sysfs and by `ibv_port_attr::state`.
    pub fn from_code(code: u8) -> Self {
        match code {
            1 => Self::Down,
            2 => Self::Init,
            3 => Self::Armed,
            4 => Self::Active,
            5 => Self::ActiveDefer,
            n => Self::Other(n),
        }
    }

    /// From sysfs text such as `4: ACTIVE` (the leading number decides).
    pub fn parse(text: &str) -> Option<Self> {
        leading_number(text).map(Self::from_code)
    }

    /// Whether the port can carry traffic.
    pub fn is_active(self) -> bool {
        matches!(self, Self::Active)
    }
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Down => f.write_str("DOWN"),
            Self::Init => f.write_str("INIT"),
            Self::Armed => f.write_str("ARMED"),
            Self::Active => f.write_str("ACTIVE"),
            Self::ActiveDefer => f.write_str("ACTIVE_DEFER"),
            Self::Other(n) => write!(f, "state {n}"),
        }
    }
}

/// Port link layer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LinkLayer {
    /// InfiniBand.
    InfiniBand,
    /// Ethernet (RoCE).
    Ethernet,
    /// Anything else, as printed (empty when the file could not be read).
    Unknown(String),
}

impl LinkLayer {
    /// From sysfs text (`InfiniBand` / `Ethernet`).
    pub fn parse(text: &str) -> Self {
        match text.trim() {
            "InfiniBand" => Self::InfiniBand,
            "Ethernet" => Self::Ethernet,
            other => Self::Unknown(other.to_string()),
        }
    }

    /// From `ibv_port_attr::link_layer` (`IBV_LINK_LAYER_*`): 0 (unspecified, old drivers) and 1
    /// are InfiniBand, 2 is Ethernet.
    pub fn from_verbs(code: u8) -> Self {
        match code {
            0 | 1 => Self::InfiniBand,
            2 => Self::Ethernet,
            n => Self::Unknown(format!("link layer {n}")),
        }
    }

    /// Whether GIDs on this port are RoCE GIDs (Ethernet link layer).
    pub fn is_ethernet(&self) -> bool {
        matches!(self, Self::Ethernet)
    }
}

impl fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InfiniBand => f.write_str("InfiniBand"),
            Self::Ethernet => f.write_str("Ethernet"),
            Self::Unknown(s) if s.is_empty() => f.write_str("unknown"),
            Self::Unknown(s) => f.write_str(s),
        }
    }
}

/// Link rate as printed by sysfs (`100 Gb/sec (4X EDR)`).
#[derive(Debug, Clone, PartialEq)]
pub struct Rate {
    /// Gigabits per second (first number of the text).
    pub gbps: f64,
    /// The text as printed (trimmed).
    pub text: String,
}

impl Rate {
    /// Parses `100 Gb/sec (4X EDR)`, `2.5 Gb/sec (1X SDR)`, ...
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let gbps: f64 = text.split_whitespace().next()?.parse().ok()?;
        if !gbps.is_finite() || gbps < 0.0 {
            return None;
        }
        Some(Self {
            gbps,
            text: text.to_string(),
        })
    }

    /// Megabits per second (rounded), the unit NCCL's `speed` property uses.
    pub fn mbps(&self) -> u32 {
        // `as` saturates for out-of-range floats; a link rate never gets near u32::MAX Mbps.
        (self.gbps * 1000.0).round() as u32
    }
}

/// Address family of a GID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AddrFamily {
    /// IPv4 (IPv4-mapped GID, `::ffff:a.b.c.d`), `AF_INET`.
    #[default]
    V4,
    /// IPv6, `AF_INET6`.
    V6,
}

impl AddrFamily {
    /// `IPv4` / `IPv6`.
    pub fn ip_name(self) -> &'static str {
        match self {
            Self::V4 => "IPv4",
            Self::V6 => "IPv6",
        }
    }
}

impl fmt::Display for AddrFamily {
    /// `AF_INET` / `AF_INET6` (the spelling of `NCCL_IB_ADDR_FAMILY`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::V4 => "AF_INET",
            Self::V6 => "AF_INET6",
        })
    }
}

impl FromStr for AddrFamily {
    type Err = String;

    /// Accepts `AF_INET` / `AF_INET6` (as `NCCL_IB_ADDR_FAMILY`), also `ipv4`/`ipv6`/`4`/`6`,
    /// case-insensitively.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "af_inet" | "inet" | "ipv4" | "v4" | "4" => Ok(Self::V4),
            "af_inet6" | "inet6" | "ipv6" | "v6" | "6" => Ok(Self::V6),
            other => Err(format!(
                "unknown address family '{other}' (expected AF_INET or AF_INET6)"
            )),
        }
    }
}

/// GID type from `gid_attrs/types/<i>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GidType {
    /// InfiniBand GID (`IB/RoCE v1` on an InfiniBand port).
    Ib,
    /// RoCE v1 (`IB/RoCE v1` on an Ethernet port).
    RoceV1,
    /// RoCE v2 (`RoCE v2`).
    RoceV2,
    /// Unreadable (empty slot) or unrecognised.
    Unknown,
}

impl GidType {
    /// Interprets sysfs text; `IB/RoCE v1` depends on the port's link layer.
    pub fn parse(text: &str, link_layer: &LinkLayer) -> Self {
        match text.trim() {
            "RoCE v2" => Self::RoceV2,
            "IB/RoCE v1" => {
                if link_layer.is_ethernet() {
                    Self::RoceV1
                } else {
                    Self::Ib
                }
            }
            "IB" => Self::Ib,
            "RoCE v1" | "RoCE" => Self::RoceV1,
            _ => Self::Unknown,
        }
    }

    /// RoCE version number (1 or 2), `None` for IB/unknown.
    pub fn roce_version(self) -> Option<u8> {
        match self {
            Self::RoceV1 => Some(1),
            Self::RoceV2 => Some(2),
            Self::Ib | Self::Unknown => None,
        }
    }
}

impl fmt::Display for GidType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Ib => "IB",
            Self::RoceV1 => "RoCE v1",
            Self::RoceV2 => "RoCE v2",
            Self::Unknown => "unknown type",
        })
    }
}

/// One slot of a port's GID table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GidEntry {
    /// Table index (the `sgid_index` used in address vectors).
    pub index: u32,
    /// The GID bytes, network order.
    pub gid: [u8; 16],
    /// Type from `gid_attrs/types/<i>`.
    pub gid_type: GidType,
    /// Netdev from `gid_attrs/ndevs/<i>`.
    pub netdev: Option<String>,
}

impl GidEntry {
    /// Builds an entry.
    pub fn new(index: u32, gid: [u8; 16], gid_type: GidType, netdev: Option<String>) -> Self {
        Self {
            index,
            gid,
            gid_type,
            netdev,
        }
    }

    /// The GID as an IPv6 address.
    pub fn ipv6(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.gid)
    }

    /// All bytes zero (empty slot).
    pub fn is_zero(&self) -> bool {
        self.gid.iter().all(|&b| b == 0)
    }

    /// In `fe80::/10`.
    pub fn is_link_local(&self) -> bool {
        self.gid[0] == 0xfe && (self.gid[1] & 0xc0) == 0x80
    }

    /// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`).
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        self.ipv6().to_ipv4_mapped()
    }

    /// `V4` for IPv4-mapped GIDs, `V6` otherwise, `None` for the zero GID.
    pub fn family(&self) -> Option<AddrFamily> {
        if self.is_zero() {
            None
        } else if self.ipv4().is_some() {
            Some(AddrFamily::V4)
        } else {
            Some(AddrFamily::V6)
        }
    }

    /// The address: `IpAddr::V4` for IPv4-mapped GIDs, `IpAddr::V6` otherwise.
    pub fn ip(&self) -> IpAddr {
        match self.ipv4() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(self.ipv6()),
        }
    }

    /// The 8-group form printed by sysfs and `show_gids`:
    /// `0000:0000:0000:0000:0000:ffff:7f00:0001`.
    pub fn raw_text(&self) -> String {
        format_gid_raw(&self.gid)
    }
}

impl fmt::Display for GidEntry {
    /// Compact IPv6 text (`::ffff:127.0.0.1`, `fe80::1`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.ipv6(), f)
    }
}

// ---------------------------------------------------------------------------------------------
// Small parsers
// ---------------------------------------------------------------------------------------------

/// Parses a GID as sysfs prints it (8 groups of 4 hex digits); compact IPv6 text is accepted too.
pub fn parse_gid(text: &str) -> Option<[u8; 16]> {
    text.trim().parse::<Ipv6Addr>().ok().map(|a| a.octets())
}

/// Formats GID bytes as 8 colon-separated groups of 4 lowercase hex digits.
pub fn format_gid_raw(gid: &[u8; 16]) -> String {
    let groups: Vec<String> = gid
        .chunks_exact(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect();
    groups.join(":")
}

/// Parses a GUID as sysfs prints it (`0011:2233:4455:6677`, 4 groups of up to 4 hex digits),
/// big-endian as printed.
pub fn parse_guid(text: &str) -> Option<u64> {
    let text = text.trim();
    let mut value: u64 = 0;
    let mut groups = 0;
    for group in text.split(':') {
        if group.is_empty() || group.len() > 4 || !group.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let g = u64::from_str_radix(group, 16).ok()?;
        value = (value << 16) | g;
        groups += 1;
    }
    (groups == 4).then_some(value)
}

/// Formats a GUID the way sysfs prints it (`0011:2233:4455:6677`).
pub fn format_guid(guid: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        (guid >> 48) & 0xffff,
        (guid >> 32) & 0xffff,
        (guid >> 16) & 0xffff,
        guid & 0xffff
    )
}

/// Parses `0x1a` (sysfs `lid`) or a plain decimal number.
fn parse_lid(text: &str) -> Option<u16> {
    let t = text.trim();
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u16::from_str_radix(hex, 16).ok(),
        None => t.parse().ok(),
    }
}

/// The number before the first `:` (or the whole trimmed text), e.g. `4` in `4: ACTIVE`.
fn leading_number(text: &str) -> Option<u8> {
    let t = text.trim();
    let head = t.split(':').next().unwrap_or(t).trim();
    head.parse().ok()
}

/// `dddd:bb:dd.f` (PCI domain:bus:device.function).
fn is_pci_bdf(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && b.iter()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

// ---------------------------------------------------------------------------------------------
// Link speed (ibv_query_port encoding)
// ---------------------------------------------------------------------------------------------

/// Per-lane speed in Mbps for an `ibv_port_attr::active_speed` code.
pub fn lane_speed_mbps(active_speed: u8) -> Option<u32> {
    match active_speed {
        1 => Some(2_500),     // SDR
        2 => Some(5_000),     // DDR
        4 => Some(10_000),    // QDR
        8 => Some(10_000),    // FDR10
        16 => Some(14_000),   // FDR
        32 => Some(25_000),   // EDR
        64 => Some(50_000),   // HDR
        128 => Some(100_000), // NDR
        _ => None,
    }
}

/// Name of an `active_speed` code (`SDR`, ..., `NDR`), `unknown` otherwise.
pub fn speed_name(active_speed: u8) -> &'static str {
    match active_speed {
        1 => "SDR",
        2 => "DDR",
        4 => "QDR",
        8 => "FDR10",
        16 => "FDR",
        32 => "EDR",
        64 => "HDR",
        128 => "NDR",
        _ => "unknown",
    }
}

/// Lane count of an `ibv_port_attr::active_width` code (1→1x, 2→4x, 4→8x, 8→12x, 16→2x).
pub fn width_lanes(active_width: u8) -> Option<u32> {
    match active_width {
        1 => Some(1),
        2 => Some(4),
        4 => Some(8),
        8 => Some(12),
        16 => Some(2),
        _ => None,
    }
}

/// Port speed in Mbps from `active_speed` × `active_width`; `None` if either code is unknown.
pub fn ib_speed_mbps(active_speed: u8, active_width: u8) -> Option<u32> {
    lane_speed_mbps(active_speed)?.checked_mul(width_lanes(active_width)?)
}

// ---------------------------------------------------------------------------------------------
// Reading the tree
// ---------------------------------------------------------------------------------------------

/// Reads a sysfs attribute, trimmed.
fn read_trimmed(path: &Path) -> io::Result<String> {
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
    let class = sys.join("class").join("infiniband");
    let mut names = match dir_names(&class) {
        Ok(Some(names)) => names,
        Ok(None) => return Ok(Vec::new()),
        Err(e) => return Err(SysfsError::new(&class, e)),
    };
    names.sort();
    Ok(names
        .iter()
        .map(|name| read_device(&class.join(name), name))
        .collect())
}

/// Reads one device directory (`class/infiniband/<name>`).
pub fn read_device(dir: &Path, name: &str) -> SysDevice {
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
                .any(|c| c.as_os_str().to_str().is_some_and(is_pci_bdf));
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
fn read_port(dir: &Path, num: u8, parent_netdev: Option<&str>, notes: &mut Vec<String>) -> SysPort {
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
    let gids = read_gid_table(dir, &link_layer, &mut port_notes);
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

// ---------------------------------------------------------------------------------------------
// Host facts
// ---------------------------------------------------------------------------------------------

/// IOMMU mode as requested on the kernel command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IommuMode {
    /// No IOMMU option on the command line: kernel/firmware defaults apply.
    NotSet,
    /// IOMMU disabled (`intel_iommu=off`, `amd_iommu=off`, `iommu=off`).
    Off,
    /// Passthrough / identity mapping (`iommu=pt`, `iommu.passthrough=1`).
    Passthrough,
    /// Translated DMA; the detail lists the options that asked for it.
    On(String),
}

impl IommuMode {
    /// Whether this mode is known to be fine for GPUDirect RDMA (`None`: depends on defaults).
    pub fn gdr_friendly(&self) -> Option<bool> {
        match self {
            Self::Off | Self::Passthrough => Some(true),
            Self::On(_) => Some(false),
            Self::NotSet => None,
        }
    }

    /// One line: the mode and what it means for GPUDirect RDMA.
    pub fn describe(&self) -> String {
        match self {
            Self::NotSet => "IOMMU: no option on the kernel command line (kernel/firmware default \
                             applies); if the IOMMU ends up translating DMA, GPUDirect RDMA \
                             peer-to-peer can be slow or fail: iommu=pt is the usual setting"
                .to_string(),
            Self::Off => "IOMMU: off; fine for GPUDirect RDMA (NIC and GPU use physical \
                          addresses, peer-to-peer works)"
                .to_string(),
            Self::Passthrough => "IOMMU: passthrough; good for GPUDirect RDMA (no DMA \
                                  translation, peer-to-peer works)"
                .to_string(),
            Self::On(detail) => format!(
                "IOMMU: translated DMA mode ({detail}); can slow down or break GPUDirect RDMA \
                 peer-to-peer between NIC and GPU: consider iommu=pt"
            ),
        }
    }
}

impl fmt::Display for IommuMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// Kernel boolean (`kstrtobool`): 1/y/on true, 0/n/off false.
fn parse_kbool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "y" | "yes" | "on" | "true" => Some(true),
        "0" | "n" | "no" | "off" | "false" => Some(false),
        _ => None,
    }
}

/// IOMMU mode from a kernel command line (`/proc/cmdline`).
///
/// Understands `intel_iommu=on|off[,...]`, `amd_iommu=on|off[,...]`, `iommu=pt|nopt|off|on|force`,
/// `iommu.passthrough=0|1` and `iommu.strict=0|1`. Later options override earlier ones. "Off" wins
/// over passthrough; passthrough wins over "on". `iommu.strict` alone does not say the IOMMU is on
/// and is only reported as detail of the translated mode.
pub fn iommu_mode(cmdline: &str) -> IommuMode {
    let mut enabled: Option<bool> = None;
    let mut passthrough: Option<bool> = None;
    let mut strict: Option<bool> = None;
    let mut relevant: Vec<&str> = Vec::new();

    for tok in cmdline.split_whitespace() {
        let Some((key, value)) = tok.split_once('=') else {
            continue;
        };
        let value = value.trim_matches('"');
        match key {
            "intel_iommu" | "amd_iommu" => {
                for opt in value.split(',') {
                    match opt {
                        "on" | "force_enable" => enabled = Some(true),
                        "off" => enabled = Some(false),
                        "strict" | "fullflush" => strict = Some(true),
                        _ => {}
                    }
                }
            }
            "iommu" => {
                for opt in value.split(',') {
                    match opt {
                        "pt" => passthrough = Some(true),
                        "nopt" => passthrough = Some(false),
                        "off" => enabled = Some(false),
                        "on" | "force" => enabled = Some(true),
                        _ => {}
                    }
                }
            }
            "iommu.passthrough" => passthrough = parse_kbool(value).or(passthrough),
            "iommu.strict" => strict = parse_kbool(value).or(strict),
            _ => continue,
        }
        relevant.push(tok);
    }

    if enabled == Some(false) {
        return IommuMode::Off;
    }
    if passthrough == Some(true) {
        return IommuMode::Passthrough;
    }
    if enabled == Some(true) || passthrough == Some(false) {
        let mut detail = relevant.join(" ");
        match strict {
            Some(true) => detail.push_str(", strict invalidation"),
            Some(false) => detail.push_str(", lazy invalidation"),
            None => {}
        }
        return IommuMode::On(detail);
    }
    IommuMode::NotSet
}

/// Reads `<proc>/cmdline` (normally `/proc/cmdline`), trimmed; `None` if unreadable.
pub fn read_cmdline(proc: &Path) -> Option<String> {
    read_trimmed(&proc.join("cmdline")).ok()
}

// ---------------------------------------------------------------------------------------------
// Test support: fake sysfs trees
// ---------------------------------------------------------------------------------------------

/// Builder for fake sysfs trees in a temporary directory (tests only).
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(crate) mod testutil {
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
        pub(crate) fn gid(
            self,
            i: u32,
            gid: &str,
            gid_type: Option<&str>,
            ndev: Option<&str>,
        ) -> Self {
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
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::testutil::{FakeSysfs, rxe_on_dummy, rxe_on_lo};
    use super::*;

    fn gid_entry(text: &str) -> GidEntry {
        GidEntry::new(0, parse_gid(text).unwrap(), GidType::RoceV2, None)
    }

    #[test]
    fn missing_class_dir_is_empty_list() {
        let fs = FakeSysfs::new();
        assert_eq!(list_devices(fs.root()).unwrap(), vec![]);
    }

    #[test]
    fn empty_class_dir_is_empty_list() {
        let fs = FakeSysfs::new().class_dir();
        assert_eq!(list_devices(fs.root()).unwrap(), vec![]);
    }

    #[test]
    fn class_path_not_a_directory_is_error() {
        let fs = FakeSysfs::new().write("class/infiniband", "oops");
        let err = list_devices(fs.root()).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("class/infiniband"), "{text}");
        assert!(std::error::Error::source(&err).is_some());
    }

    #[test]
    fn rxe_on_loopback() {
        let fs = rxe_on_lo(FakeSysfs::new());
        let devs = list_devices(fs.root()).unwrap();
        assert_eq!(devs.len(), 1);
        let d = &devs[0];
        assert_eq!(d.name, "rxe0");
        assert_eq!(d.node_guid, Some(0x0200_00ff_fe00_0000));
        assert_eq!(d.sys_image_guid, Some(0x0200_00ff_fe00_0000));
        assert_eq!(d.node_type.as_deref(), Some("1: CA"));
        assert_eq!(d.fw_ver.as_deref(), Some("0.0.0"));
        assert_eq!(d.pci_path, None, "rxe is virtual");
        assert_eq!(d.pci_address(), None);
        assert_eq!(d.parent_netdev.as_deref(), Some("lo"));
        assert!(d.notes.is_empty(), "{:?}", d.notes);

        assert_eq!(d.ports.len(), 1);
        let p = d.port(1).unwrap();
        assert_eq!(p.state, PortState::Active);
        assert!(p.state.is_active());
        assert_eq!(p.phys_state.as_deref(), Some("5: LinkUp"));
        assert_eq!(p.link_layer, LinkLayer::Ethernet);
        assert_eq!(p.rate.as_ref().unwrap().mbps(), 2500);
        assert_eq!(p.lid, Some(0));
        assert_eq!(p.netdev.as_deref(), Some("lo"));

        assert_eq!(p.gids.len(), 8, "zero slots are kept in the raw table");
        let g0 = &p.gids[0];
        let g1 = &p.gids[1];
        assert_eq!(g0.index, 0);
        assert_eq!(g0.gid_type, GidType::RoceV1);
        assert_eq!(g1.gid_type, GidType::RoceV2);
        assert_eq!(g1.ipv4(), Some(Ipv4Addr::LOCALHOST));
        assert_eq!(g1.family(), Some(AddrFamily::V4));
        assert_eq!(g1.to_string(), "::ffff:127.0.0.1");
        assert_eq!(g1.raw_text(), "0000:0000:0000:0000:0000:ffff:7f00:0001");
        assert_eq!(g1.netdev.as_deref(), Some("lo"));
        for g in &p.gids[2..] {
            assert!(g.is_zero());
            assert_eq!(g.gid_type, GidType::Unknown, "missing type file is unknown");
            assert_eq!(g.netdev, None);
            assert_eq!(g.family(), None);
        }
    }

    #[test]
    fn rxe_with_link_local_and_ipv6() {
        let fs = rxe_on_dummy(rxe_on_lo(FakeSysfs::new()));
        let devs = list_devices(fs.root()).unwrap();
        let names: Vec<&str> = devs.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["rxe0", "rxe1"], "sorted by name");
        let p = devs[1].port(1).unwrap();
        assert_eq!(p.rate.as_ref().unwrap().mbps(), 10_000);
        assert_eq!(p.netdev.as_deref(), Some("dummy1"));
        let g = &p.gids;
        assert!(g[0].is_link_local() && g[1].is_link_local());
        assert_eq!(g[0].gid_type, GidType::RoceV1);
        assert_eq!(g[1].gid_type, GidType::RoceV2);
        assert_eq!(g[0].family(), Some(AddrFamily::V6));
        assert_eq!(g[0].to_string(), "fe80::42f1:c2ff:fe3a:10aa");
        assert_eq!(g[3].ip(), IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2)));
        assert_eq!(g[5].ip(), "2001:db8::2".parse::<IpAddr>().unwrap());
        assert_eq!(g[5].family(), Some(AddrFamily::V6));
        assert!(!g[5].is_link_local());
    }

    #[test]
    fn pci_device_with_infiniband_port() {
        let fs = FakeSysfs::new()
            .device("mlx5_0")
            .dev_file("node_guid", "0002:c903:0031:7c00")
            .dev_file("sys_image_guid", "0002:c903:0031:7c03")
            .dev_file("node_type", "1: CA")
            .dev_file("fw_ver", "20.31.1014")
            .device_link("devices/pci0000:00/0000:00:02.0/0000:03:00.0")
            .port(1, "4: ACTIVE", "InfiniBand")
            .port_file("phys_state", "5: LinkUp")
            .port_file("rate", "100 Gb/sec (4X EDR)")
            .port_file("lid", "0x1a")
            .gid(
                0,
                "fe80:0000:0000:0000:0002:c903:0031:7c01",
                Some("IB/RoCE v1"),
                None,
            )
            .empty_gids(1..4);
        let devs = list_devices(fs.root()).unwrap();
        let d = &devs[0];
        let pci = d.pci_path.as_ref().unwrap();
        assert!(
            pci.ends_with("devices/pci0000:00/0000:00:02.0/0000:03:00.0"),
            "{pci:?}"
        );
        assert!(pci.is_absolute());
        assert_eq!(d.pci_address(), Some("0000:03:00.0"));
        assert_eq!(d.fw_ver.as_deref(), Some("20.31.1014"));
        assert_eq!(d.parent_netdev, None);
        let p = d.port(1).unwrap();
        assert_eq!(p.link_layer, LinkLayer::InfiniBand);
        assert_eq!(p.lid, Some(0x1a));
        assert_eq!(p.rate.as_ref().unwrap().gbps, 100.0);
        assert_eq!(p.rate.as_ref().unwrap().text, "100 Gb/sec (4X EDR)");
        assert_eq!(p.rate.as_ref().unwrap().mbps(), 100_000);
        assert_eq!(
            p.gids[0].gid_type,
            GidType::Ib,
            "IB/RoCE v1 on an IB port is IB"
        );
        assert_eq!(p.netdev, None);
        assert!(d.notes.is_empty(), "{:?}", d.notes);
    }

    #[test]
    fn relative_device_link_and_non_pci_target() {
        let fs = FakeSysfs::new()
            .device("mlx5_1")
            .write("devices/pci0000:80/0000:80:01.0/0000:81:00.1/.keep", "");
        let link = fs.root().join("class/infiniband/mlx5_1/device");
        std::os::unix::fs::symlink(
            "../../../devices/pci0000:80/0000:80:01.0/0000:81:00.1",
            &link,
        )
        .unwrap();
        let fs = fs.device("virt0").device_link("devices/virtual/net/foo");
        let devs = list_devices(fs.root()).unwrap();
        assert_eq!(devs[0].pci_address(), Some("0000:81:00.1"));
        assert_eq!(devs[1].name, "virt0");
        assert_eq!(devs[1].pci_path, None);
    }

    #[test]
    fn unreadable_files_become_notes() {
        // A directory where a file is expected reads with EISDIR, like an unreadable attribute.
        let fs = FakeSysfs::new()
            .device("bad0")
            .dev_file("fw_ver/x", "")
            .dev_file("node_guid", "not-a-guid")
            .dev_file("node_type", "1: CA")
            .port(1, "garbage", "Ethernet")
            .port_file("rate", "fast")
            .gid(
                0,
                "fe80:0000:0000:0000:0000:0000:0000:0001",
                Some("RoCE v2"),
                Some("eth0"),
            )
            .gid(1, "zzzz", Some("RoCE v2"), None)
            .port_file("gid_attrs/types/2/x", "")
            .gid(2, "0000:0000:0000:0000:0000:ffff:0a00:0001", None, None)
            .device("good0")
            .dev_file("node_type", "1: CA");
        let devs = list_devices(fs.root()).unwrap();
        assert_eq!(devs.len(), 2);
        let bad = &devs[0];
        assert_eq!(bad.fw_ver, None);
        assert_eq!(bad.node_guid, None);
        assert_eq!(bad.node_type.as_deref(), Some("1: CA"));
        let notes = bad.notes.join("\n");
        assert!(notes.contains("fw_ver:"), "{notes}");
        assert!(notes.contains("node_guid: cannot parse"), "{notes}");
        assert!(notes.contains("port 1: state: cannot parse"), "{notes}");
        assert!(notes.contains("port 1: rate: cannot parse"), "{notes}");
        assert!(notes.contains("port 1: gid 1: cannot parse"), "{notes}");
        assert!(
            !notes.contains("sys_image_guid"),
            "missing files are not noted: {notes}"
        );
        let p = bad.port(1).unwrap();
        assert_eq!(p.state, PortState::Other(0));
        assert_eq!(p.rate, None);
        let idx: Vec<u32> = p.gids.iter().map(|g| g.index).collect();
        assert_eq!(idx, [0, 2], "unparsable gid skipped");
        assert_eq!(
            p.gids[1].gid_type,
            GidType::Unknown,
            "unreadable type is unknown"
        );
        assert_eq!(p.netdev.as_deref(), Some("eth0"));
        assert!(devs[1].notes.is_empty());
    }

    #[test]
    fn sparse_gid_table_sorted_numerically() {
        let fs = FakeSysfs::new()
            .device("mlx5_2")
            .port(1, "4: ACTIVE", "Ethernet")
            .gid(
                10,
                "0000:0000:0000:0000:0000:ffff:0a00:0003",
                Some("RoCE v2"),
                Some("net1"),
            )
            .gid(
                4,
                "fe80:0000:0000:0000:0000:0000:0000:0001",
                Some("IB/RoCE v1"),
                None,
            )
            .gid(
                5,
                "fe80:0000:0000:0000:0000:0000:0000:0001",
                Some("RoCE v2"),
                None,
            )
            .port(2, "1: DOWN", "Ethernet");
        let d = &list_devices(fs.root()).unwrap()[0];
        let idx: Vec<u32> = d.ports[0].gids.iter().map(|g| g.index).collect();
        assert_eq!(idx, [4, 5, 10]);
        assert_eq!(d.ports[0].netdev.as_deref(), Some("net1"));
        assert_eq!(d.ports[1].num, 2);
        assert_eq!(d.ports[1].state, PortState::Down);
        assert_eq!(d.ports[1].gids, vec![]);
    }

    #[test]
    fn guid_parsing() {
        assert_eq!(
            parse_guid("0011:2233:4455:6677"),
            Some(0x0011_2233_4455_6677)
        );
        assert_eq!(parse_guid("ffff:ffff:ffff:ffff\n"), Some(u64::MAX));
        assert_eq!(parse_guid("0011:2233:4455"), None);
        assert_eq!(parse_guid("0011:2233:4455:6677:8899"), None);
        assert_eq!(parse_guid("0011:2233:4455:66g7"), None);
        assert_eq!(parse_guid("0011:2233:4455:66778"), None);
        assert_eq!(parse_guid(""), None);
        assert_eq!(format_guid(0x0011_2233_4455_6677), "0011:2233:4455:6677");
    }

    #[test]
    fn port_state_parsing() {
        assert_eq!(PortState::parse("1: DOWN"), Some(PortState::Down));
        assert_eq!(PortState::parse("2: INIT"), Some(PortState::Init));
        assert_eq!(PortState::parse("3: ARMED"), Some(PortState::Armed));
        assert_eq!(PortState::parse("4: ACTIVE\n"), Some(PortState::Active));
        assert_eq!(
            PortState::parse("5: ACTIVE_DEFER"),
            Some(PortState::ActiveDefer)
        );
        assert_eq!(PortState::parse("7: WHATEVER"), Some(PortState::Other(7)));
        assert_eq!(PortState::parse("ACTIVE"), None);
        assert_eq!(PortState::from_code(4), PortState::Active);
        assert_eq!(PortState::Active.to_string(), "ACTIVE");
    }

    #[test]
    fn link_layer_parsing() {
        assert_eq!(LinkLayer::parse("InfiniBand\n"), LinkLayer::InfiniBand);
        assert_eq!(LinkLayer::parse("Ethernet"), LinkLayer::Ethernet);
        assert_eq!(LinkLayer::parse("OPA"), LinkLayer::Unknown("OPA".into()));
        assert_eq!(LinkLayer::from_verbs(2), LinkLayer::Ethernet);
        assert_eq!(LinkLayer::from_verbs(0), LinkLayer::InfiniBand);
    }

    #[test]
    fn rate_parsing() {
        let r = Rate::parse("100 Gb/sec (4X EDR)").unwrap();
        assert_eq!((r.gbps, r.mbps()), (100.0, 100_000));
        assert_eq!(Rate::parse("2.5 Gb/sec (1X SDR)").unwrap().mbps(), 2500);
        assert_eq!(Rate::parse("10 Gb/sec (1X QDR)").unwrap().mbps(), 10_000);
        assert_eq!(Rate::parse("56 Gb/sec (4X FDR)").unwrap().mbps(), 56_000);
        assert_eq!(
            Rate::parse("400 Gb/sec (4X NDR)\n").unwrap().text,
            "400 Gb/sec (4X NDR)"
        );
        assert_eq!(Rate::parse(""), None);
        assert_eq!(Rate::parse("fast"), None);
        assert_eq!(Rate::parse("-1 Gb/sec"), None);
    }

    #[test]
    fn lid_parsing() {
        assert_eq!(parse_lid("0x0"), Some(0));
        assert_eq!(parse_lid("0xffff"), Some(0xffff));
        assert_eq!(parse_lid("12"), Some(12));
        assert_eq!(parse_lid("0x10000"), None);
    }

    #[test]
    fn gid_type_depends_on_link_layer() {
        let eth = LinkLayer::Ethernet;
        let ib = LinkLayer::InfiniBand;
        assert_eq!(GidType::parse("IB/RoCE v1", &eth), GidType::RoceV1);
        assert_eq!(GidType::parse("IB/RoCE v1", &ib), GidType::Ib);
        assert_eq!(GidType::parse("RoCE v2\n", &eth), GidType::RoceV2);
        assert_eq!(GidType::parse("", &eth), GidType::Unknown);
        assert_eq!(GidType::RoceV2.roce_version(), Some(2));
        assert_eq!(GidType::Ib.roce_version(), None);
    }

    #[test]
    fn ipv4_mapped_detection() {
        let g = gid_entry("0000:0000:0000:0000:0000:ffff:0a01:0203");
        assert_eq!(g.ipv4(), Some(Ipv4Addr::new(10, 1, 2, 3)));
        assert_eq!(g.family(), Some(AddrFamily::V4));
        assert_eq!(g.to_string(), "::ffff:10.1.2.3");
        // IPv4-compatible (deprecated ::a.b.c.d) is not IPv4-mapped.
        let compat = gid_entry("::a01:203");
        assert_eq!(compat.ipv4(), None);
        assert_eq!(compat.family(), Some(AddrFamily::V6));
        let v6 = gid_entry("2001:db8::1");
        assert_eq!(v6.ipv4(), None);
        assert_eq!(v6.ip(), "2001:db8::1".parse::<IpAddr>().unwrap());
        assert_eq!(v6.raw_text(), "2001:0db8:0000:0000:0000:0000:0000:0001");
    }

    #[test]
    fn link_local_and_zero_detection() {
        assert!(gid_entry("fe80::1").is_link_local());
        assert!(gid_entry("febf:ffff::1").is_link_local());
        assert!(
            !gid_entry("fec0::1").is_link_local(),
            "site-local is not fe80::/10"
        );
        assert!(!gid_entry("fe7f::1").is_link_local());
        assert!(!gid_entry("::ffff:127.0.0.1").is_link_local());
        let zero = gid_entry("0000:0000:0000:0000:0000:0000:0000:0000");
        assert!(zero.is_zero());
        assert_eq!(zero.family(), None);
        assert!(!gid_entry("::1").is_zero());
        assert_eq!(parse_gid("not a gid"), None);
        assert_eq!(parse_gid("0000:0000:0000"), None);
    }

    #[test]
    fn speed_table() {
        assert_eq!(ib_speed_mbps(1, 1), Some(2_500)); // 1x SDR
        assert_eq!(ib_speed_mbps(4, 2), Some(40_000)); // 4x QDR
        assert_eq!(ib_speed_mbps(8, 2), Some(40_000)); // 4x FDR10
        assert_eq!(ib_speed_mbps(16, 2), Some(56_000)); // 4x FDR
        assert_eq!(ib_speed_mbps(32, 2), Some(100_000)); // 4x EDR
        assert_eq!(ib_speed_mbps(64, 2), Some(200_000)); // 4x HDR
        assert_eq!(ib_speed_mbps(128, 2), Some(400_000)); // 4x NDR
        assert_eq!(ib_speed_mbps(64, 16), Some(100_000)); // 2x HDR
        assert_eq!(ib_speed_mbps(2, 8), Some(60_000)); // 12x DDR
        assert_eq!(ib_speed_mbps(32, 4), Some(200_000)); // 8x EDR
        assert_eq!(ib_speed_mbps(3, 2), None);
        assert_eq!(ib_speed_mbps(32, 3), None);
        assert_eq!(speed_name(32), "EDR");
        assert_eq!(speed_name(8), "FDR10");
        assert_eq!(speed_name(0), "unknown");
        assert_eq!(width_lanes(16), Some(2));
        assert_eq!(width_lanes(0), None);
    }

    #[test]
    fn iommu_parsing() {
        assert_eq!(iommu_mode(""), IommuMode::NotSet);
        assert_eq!(
            iommu_mode("BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet"),
            IommuMode::NotSet
        );
        assert_eq!(
            iommu_mode("intel_iommu=on iommu=pt"),
            IommuMode::Passthrough
        );
        assert_eq!(iommu_mode("amd_iommu=on iommu=pt"), IommuMode::Passthrough);
        assert_eq!(iommu_mode("iommu.passthrough=1"), IommuMode::Passthrough);
        assert_eq!(iommu_mode("intel_iommu=off"), IommuMode::Off);
        assert_eq!(iommu_mode("amd_iommu=off iommu=pt"), IommuMode::Off);
        assert_eq!(iommu_mode("iommu=off"), IommuMode::Off);
        assert_eq!(
            iommu_mode("ro intel_iommu=on quiet"),
            IommuMode::On("intel_iommu=on".into())
        );
        assert_eq!(
            iommu_mode("intel_iommu=on,sm_on iommu.strict=1"),
            IommuMode::On("intel_iommu=on,sm_on iommu.strict=1, strict invalidation".into())
        );
        assert_eq!(
            iommu_mode("iommu.passthrough=0 iommu.strict=0"),
            IommuMode::On("iommu.passthrough=0 iommu.strict=0, lazy invalidation".into())
        );
        assert_eq!(
            iommu_mode("iommu=pt iommu=nopt intel_iommu=on").gdr_friendly(),
            Some(false)
        );
        assert_eq!(iommu_mode("iommu.strict=1"), IommuMode::NotSet);
        assert_eq!(
            iommu_mode("intel_iommu=on iommu=on"),
            IommuMode::On("intel_iommu=on iommu=on".into())
        );

        assert!(
            IommuMode::Passthrough
                .describe()
                .contains("good for GPUDirect RDMA")
        );
        assert!(IommuMode::Off.describe().contains("GPUDirect RDMA"));
        let on = IommuMode::On("intel_iommu=on".into()).describe();
        assert!(
            on.contains("intel_iommu=on") && on.contains("iommu=pt"),
            "{on}"
        );
        assert!(IommuMode::NotSet.describe().contains("default"));
    }

    #[test]
    fn cmdline_reading() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_cmdline(dir.path()), None);
        std::fs::write(dir.path().join("cmdline"), "ro quiet iommu=pt\n").unwrap();
        assert_eq!(
            read_cmdline(dir.path()).as_deref(),
            Some("ro quiet iommu=pt")
        );
    }

    #[test]
    fn addr_family_text() {
        assert_eq!("AF_INET".parse::<AddrFamily>(), Ok(AddrFamily::V4));
        assert_eq!("af_inet6".parse::<AddrFamily>(), Ok(AddrFamily::V6));
        assert!("AF_UNIX".parse::<AddrFamily>().is_err());
        assert_eq!(AddrFamily::default(), AddrFamily::V4);
        assert_eq!(AddrFamily::V6.to_string(), "AF_INET6");
        assert_eq!(AddrFamily::V4.ip_name(), "IPv4");
    }

    #[test]
    fn error_display_names_path() {
        let e = SysfsError::new(
            Path::new("/sys/class/infiniband"),
            io::Error::from(io::ErrorKind::PermissionDenied),
        );
        let s = e.to_string();
        assert!(s.contains("/sys/class/infiniband"), "{s}");
        assert!(s.contains("permission denied"), "{s}");
    }
}
