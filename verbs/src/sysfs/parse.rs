//! Small parsers for sysfs text: GUIDs, LIDs, leading numbers (PCI addresses: [`super::pci`]).

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
pub(super) fn parse_lid(text: &str) -> Option<u16> {
    let t = text.trim();
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u16::from_str_radix(hex, 16).ok(),
        None => t.parse().ok(),
    }
}

/// The number before the first `:` (or the whole trimmed text), e.g. `4` in `4: ACTIVE`.
pub(super) fn leading_number(text: &str) -> Option<u8> {
    let t = text.trim();
    let head = t.split(':').next().unwrap_or(t).trim();
    head.parse().ok()
}
