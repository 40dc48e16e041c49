//! The plugin's 128-byte listen handle.
//!
//! Layout of the fixed prefix (the rest is plugin-private):
//!
//! | bytes  | field                                                           |
//! |--------|-----------------------------------------------------------------|
//! | 0..8   | magic, little-endian u64 `0x5445_4e4f_5252_4546` ("FERRONET")  |
//! | 8..10  | wire version, little-endian u16                                 |
//! | 10..12 | address family, little-endian u16 (2 = IPv4, 10 = IPv6)         |
//! | 12..14 | TCP port, big-endian u16                                        |
//! | 14..30 | address: IPv4 in the first 4 bytes, or the 16 IPv6 bytes        |

use ferro_ffi::NCCL_NET_HANDLE_MAXSIZE;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

/// Size of a listen handle.
pub const HANDLE_SIZE: usize = NCCL_NET_HANDLE_MAXSIZE;
/// Magic in bytes 0..8 (little-endian); the bytes spell "FERRONET".
pub const HANDLE_MAGIC: u64 = 0x5445_4e4f_5252_4546;
/// `AF_INET` as stored in the handle.
pub const FAMILY_IPV4: u16 = 2;
/// `AF_INET6` as stored in the handle.
pub const FAMILY_IPV6: u16 = 10;

/// An opaque listen handle, as NCCL carries it between ranks.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Handle(pub [u8; HANDLE_SIZE]);

impl Default for Handle {
    fn default() -> Self {
        Handle([0; HANDLE_SIZE])
    }
}

impl Handle {
    /// An all-zero handle.
    pub fn zeroed() -> Self {
        Self::default()
    }

    /// The pointer to pass to `listen`/`connect`.
    pub fn as_mut_ptr(&mut self) -> *mut core::ffi::c_void {
        self.0.as_mut_ptr().cast()
    }

    fn u16_le(&self, at: usize) -> u16 {
        u16::from_le_bytes([self.0[at], self.0[at + 1]])
    }

    /// Bytes 0..8 as a little-endian u64.
    pub fn magic(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[0..8]);
        u64::from_le_bytes(b)
    }

    /// Whether the magic is the plugin's.
    pub fn has_magic(&self) -> bool {
        self.magic() == HANDLE_MAGIC
    }

    /// Wire version (bytes 8..10).
    pub fn wire_version(&self) -> u16 {
        self.u16_le(8)
    }

    /// Sets the wire version (to forge a handle from a "different" plugin version).
    pub fn set_wire_version(&mut self, v: u16) {
        self.0[8..10].copy_from_slice(&v.to_le_bytes());
    }

    /// Address family (bytes 10..12).
    pub fn family(&self) -> u16 {
        self.u16_le(10)
    }

    /// Sets the address family field.
    pub fn set_family(&mut self, f: u16) {
        self.0[10..12].copy_from_slice(&f.to_le_bytes());
    }

    /// TCP port (bytes 12..14, big-endian).
    pub fn port(&self) -> u16 {
        u16::from_be_bytes([self.0[12], self.0[13]])
    }

    /// The listen socket address, if the magic and family are valid.
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        handle_socket_addr(self)
    }

    /// Lower-case hex of all 128 bytes (the form the harness exchanges on stdin/stdout).
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(HANDLE_SIZE * 2);
        for b in self.0 {
            s.push_str(&format!("{b:02x}"));
        }
        s
    }

    /// Parses [`Handle::to_hex`] output.
    pub fn from_hex(text: &str) -> Result<Handle, String> {
        let text = text.trim();
        if text.len() != HANDLE_SIZE * 2 {
            return Err(format!(
                "a handle is {} hex digits, got {}",
                HANDLE_SIZE * 2,
                text.len()
            ));
        }
        let mut h = Handle::zeroed();
        for (i, slot) in h.0.iter_mut().enumerate() {
            let pair = text
                .get(2 * i..2 * i + 2)
                .ok_or_else(|| format!("non-ASCII handle text {text:?}"))?;
            *slot = u8::from_str_radix(pair, 16)
                .map_err(|e| format!("bad hex {pair:?} in handle: {e}"))?;
        }
        Ok(h)
    }
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Handle {{ magic: {:#018x}{}, version: {}, family: {}, port: {}, addr: {:?} }}",
            self.magic(),
            if self.has_magic() {
                " (FERRONET)"
            } else {
                " (foreign)"
            },
            self.wire_version(),
            self.family(),
            self.port(),
            self.socket_addr()
        )
    }
}

/// The TCP address the listen handle points at: `None` unless the magic matches and the family is
/// IPv4 or IPv6.
pub fn handle_socket_addr(h: &Handle) -> Option<SocketAddr> {
    if !h.has_magic() {
        return None;
    }
    let port = h.port();
    match h.family() {
        FAMILY_IPV4 => {
            let a = Ipv4Addr::new(h.0[14], h.0[15], h.0[16], h.0[17]);
            Some(SocketAddr::from((a, port)))
        }
        FAMILY_IPV6 => {
            let mut b = [0u8; 16];
            b.copy_from_slice(&h.0[14..30]);
            Some(SocketAddr::from((Ipv6Addr::from(b), port)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forged(family: u16, addr: &[u8], port: u16) -> Handle {
        let mut h = Handle::zeroed();
        h.0[0..8].copy_from_slice(&HANDLE_MAGIC.to_le_bytes());
        h.set_wire_version(3);
        h.set_family(family);
        h.0[12..14].copy_from_slice(&port.to_be_bytes());
        h.0[14..14 + addr.len()].copy_from_slice(addr);
        h.0[100] = 0xee; // plugin-private bytes are carried verbatim
        h
    }

    #[test]
    fn magic_spells_ferronet() {
        assert_eq!(&HANDLE_MAGIC.to_le_bytes(), b"FERRONET");
    }

    #[test]
    fn ipv4_and_ipv6_addresses_decode() {
        let h = forged(FAMILY_IPV4, &[127, 0, 0, 1], 40123);
        assert_eq!(
            h.socket_addr(),
            Some("127.0.0.1:40123".parse().expect("addr"))
        );
        assert_eq!(h.wire_version(), 3);
        let v6: Ipv6Addr = "2001:db8::2".parse().expect("v6");
        let h6 = forged(FAMILY_IPV6, &v6.octets(), 5);
        assert_eq!(h6.socket_addr(), Some(SocketAddr::from((v6, 5))));
    }

    #[test]
    fn foreign_or_unknown_family_gives_none() {
        let mut h = forged(FAMILY_IPV4, &[10, 0, 0, 1], 1);
        h.set_family(99);
        assert_eq!(h.socket_addr(), None);
        assert_eq!(Handle::zeroed().socket_addr(), None);
        let mut bad = forged(FAMILY_IPV4, &[10, 0, 0, 1], 1);
        bad.0[0] ^= 1;
        assert_eq!(handle_socket_addr(&bad), None);
    }

    #[test]
    fn hex_round_trips() {
        let h = forged(FAMILY_IPV4, &[192, 0, 2, 2], 65535);
        let text = h.to_hex();
        assert_eq!(text.len(), 256);
        assert_eq!(Handle::from_hex(&text), Ok(h));
        assert!(Handle::from_hex("abc").is_err());
        assert!(Handle::from_hex(&"zz".repeat(128)).is_err());
    }
}
