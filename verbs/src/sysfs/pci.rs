//! PCI addresses in the form sysfs names PCI functions: `0000:41:00.0`, domain, bus, device and
//! function in hexadecimal.
//!
//! The one parser of that form in the workspace: discovery uses it to tell which component of a
//! device's canonical path is a PCI function, the doctor to walk the PCI tree above GPUs and NICs.

use std::fmt;
use std::str::FromStr;

/// The address of one PCI function, `dddd:bb:dd.f`.
///
/// [`FromStr`] takes exactly four, two, two and one hexadecimal digits (either case) separated by
/// `:`, `:` and `.`, nothing around them. It checks the form, not the ranges the bus allows
/// (device below 32, function below 8): sysfs never shows more, and no caller needs the check.
/// [`Display`](fmt::Display) writes the same form in lower case, so a lower-case name round-trips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddr {
    /// PCI domain (segment).
    pub domain: u16,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

/// Text that is not a PCI address in sysfs form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciAddrError {
    /// The text that was given.
    pub text: String,
}

impl fmt::Display for PciAddrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a PCI address (dddd:bb:dd.f in hexadecimal)",
            self.text
        )
    }
}

impl std::error::Error for PciAddrError {}

impl PciAddr {
    /// Whether `text` is a PCI address in sysfs form (see [`PciAddr`]).
    pub fn is_pci_addr(text: &str) -> bool {
        text.parse::<PciAddr>().is_ok()
    }
}

/// `text` as a number when it is exactly `digits` hexadecimal digits and fits `T`.
fn hex_field<T: TryFrom<u32>>(text: &str, digits: usize) -> Option<T> {
    if text.len() != digits || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(text, 16)
        .ok()
        .and_then(|v| T::try_from(v).ok())
}

impl FromStr for PciAddr {
    type Err = PciAddrError;

    fn from_str(text: &str) -> Result<PciAddr, PciAddrError> {
        let parse = || {
            let (domain, rest) = text.split_once(':')?;
            let (bus, rest) = rest.split_once(':')?;
            let (device, function) = rest.split_once('.')?;
            Some(PciAddr {
                domain: hex_field(domain, 4)?,
                bus: hex_field(bus, 2)?,
                device: hex_field(device, 2)?,
                function: hex_field(function, 1)?,
            })
        };
        parse().ok_or_else(|| PciAddrError {
            text: text.to_string(),
        })
    }
}

impl fmt::Display for PciAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn addr(domain: u16, bus: u8, device: u8, function: u8) -> PciAddr {
        PciAddr {
            domain,
            bus,
            device,
            function,
        }
    }

    #[test]
    fn a_sysfs_function_name_parses_into_its_four_fields() {
        assert_eq!("0000:41:00.0".parse(), Ok(addr(0, 0x41, 0, 0)));
        assert_eq!("0000:04:00.2".parse(), Ok(addr(0, 4, 0, 2)));
        assert_eq!("0000:00:1f.7".parse(), Ok(addr(0, 0, 0x1f, 7)));
        assert_eq!("c0f1:ab:0d.3".parse(), Ok(addr(0xc0f1, 0xab, 0x0d, 3)));
        assert_eq!("ffff:ff:ff.f".parse(), Ok(addr(0xffff, 0xff, 0xff, 0xf)));
    }

    #[test]
    fn upper_case_hex_digits_are_accepted_and_written_back_in_lower_case() {
        let a: PciAddr = "C0F1:AB:0D.3".parse().unwrap();
        assert_eq!(a, addr(0xc0f1, 0xab, 0x0d, 3));
        assert_eq!(a.to_string(), "c0f1:ab:0d.3");
    }

    #[test]
    fn display_writes_the_sysfs_form_and_lower_case_names_round_trip() {
        assert_eq!(addr(0, 3, 0, 0).to_string(), "0000:03:00.0");
        assert_eq!(addr(0x10, 0x81, 0x1f, 7).to_string(), "0010:81:1f.7");
        for name in ["0000:00:02.0", "0000:81:00.1", "abcd:ef:12.f"] {
            assert_eq!(name.parse::<PciAddr>().unwrap().to_string(), name);
        }
    }

    #[test]
    fn anything_but_four_two_two_and_one_hex_digits_is_rejected() {
        for bad in [
            "",
            "pci0000:00",
            "0000:00:00",
            "000:00:00.0",
            "00000:00:00.0",
            "0000:0:00.0",
            "0000:000:00.0",
            "0000:00:0.0",
            "0000:00:000.0",
            "0000:00:00.",
            "0000:00:00.00",
            "0000:00:00:0",
            "0000.00:00.0",
            "0000:00:00.0:",
            "0000:00:00.0.1",
            " 0000:00:00.0",
            "0000:00:00.0\n",
            "000g:00:00.0",
            "0000:+1:00.0",
            "0000:00:-1.0",
            "0000:00:00.x",
            "0000:00:01.0/0000:01:00.0",
            "0000:00:00.\u{e9}",
        ] {
            assert!(bad.parse::<PciAddr>().is_err(), "{bad:?} parsed");
            assert!(!PciAddr::is_pci_addr(bad), "{bad:?} accepted");
        }
        assert!(PciAddr::is_pci_addr("0000:41:00.0"));
    }

    #[test]
    fn the_error_names_the_rejected_text() {
        let e = "pci0000:40".parse::<PciAddr>().unwrap_err();
        assert_eq!(e.text, "pci0000:40");
        assert!(e.to_string().contains("\"pci0000:40\""), "{e}");
    }

    #[test]
    fn addresses_order_as_their_sysfs_names_sort() {
        let names = [
            "0000:03:00.0",
            "0000:03:00.1",
            "0000:41:00.0",
            "0001:00:00.0",
        ];
        let mut parsed: Vec<PciAddr> = names.iter().rev().map(|n| n.parse().unwrap()).collect();
        parsed.sort();
        let back: Vec<String> = parsed.iter().map(PciAddr::to_string).collect();
        assert_eq!(back, names);
    }
}
