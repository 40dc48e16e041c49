//! The listen handle: 128 opaque bytes to NCCL, copied to the connecting rank.
//!
//! | bytes  | content |
//! |--------|---------|
//! | 0..8   | magic `"FERRONET"` |
//! | 8..10  | wire version (LE) |
//! | 10..12 | address family: 2 = IPv4, 10 = IPv6 (LE) |
//! | 12..14 | TCP port (big-endian) |
//! | 14..30 | address (IPv4 in the first 4 bytes) |
//! | 30     | member devices of the listener's (virtual) device, 1 to 8 (the connecting side creates its QPs for them) |
//! | 32..48 | the listener's secret: random bytes the connecting side presents in its first message, so only holders of the handle (which NCCL distributes through its bootstrap) can connect |
//! | 64..72 | connect progress token (written by `connect` on the connecting side; 0 = not started) |
//! | 72..104 | with `NCCL_IB_SUBNET_AWARE_ROUTING`: the GIDs of the listener's first two RoCE members, for the connecting side to pick a device on their subnet ([`crate::route`]); zero = none (a handle of a listener without the setting, or an InfiniBand device) |
//! | rest   | zero |

use crate::{MAGIC, MAX_DEVS, WIRE_VERSION};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

pub const HANDLE_SIZE: usize = 128;
const TOKEN_AT: usize = 64;
const SECRET_AT: usize = 32;
const DEVS_AT: usize = 30;
const GIDS_AT: usize = 72;
/// GIDs a handle carries for subnet-aware routing.
pub const HANDLE_GIDS: usize = 2;
/// Bytes of a listener's secret.
pub const SECRET_SIZE: usize = 16;

/// Why a handle was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandleError {
    BadMagic(u64),
    Version { got: u16, want: u16 },
    BadFamily(u16),
    BadDevs(u8),
}

impl fmt::Display for HandleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandleError::BadMagic(m) => write!(
                f,
                "listen handle has magic {m:#018x}, not this plugin's: it is corrupt or was made by another network plugin (all ranks must load the same plugin)"
            ),
            HandleError::Version { got, want } => write!(
                f,
                "listen handle has wire version {got}, this plugin speaks {want}: all ranks must run the same plugin version"
            ),
            HandleError::BadFamily(fam) => {
                write!(f, "listen handle has unknown address family {fam}")
            }
            HandleError::BadDevs(n) => write!(
                f,
                "listen handle names {n} member devices (must be 1 to {MAX_DEVS}): it is corrupt"
            ),
        }
    }
}

impl std::error::Error for HandleError {}

/// Writes a handle for a listener at `addr` that admits connections presenting `secret`.
pub fn encode(addr: SocketAddr, secret: [u8; SECRET_SIZE]) -> [u8; HANDLE_SIZE] {
    let mut h = [0u8; HANDLE_SIZE];
    h[SECRET_AT..SECRET_AT + SECRET_SIZE].copy_from_slice(&secret);
    h[DEVS_AT] = 1;
    h[0..8].copy_from_slice(&MAGIC.to_le_bytes());
    h[8..10].copy_from_slice(&WIRE_VERSION.to_le_bytes());
    h[12..14].copy_from_slice(&addr.port().to_be_bytes());
    match addr.ip() {
        IpAddr::V4(ip) => {
            h[10..12].copy_from_slice(&2u16.to_le_bytes());
            h[14..18].copy_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            h[10..12].copy_from_slice(&10u16.to_le_bytes());
            h[14..30].copy_from_slice(&ip.octets());
        }
    }
    h
}

fn u16_at(h: &[u8; HANDLE_SIZE], at: usize) -> u16 {
    u16::from_le_bytes([h[at], h[at + 1]])
}

/// Reads the listener address from a handle.
pub fn decode(h: &[u8; HANDLE_SIZE]) -> Result<SocketAddr, HandleError> {
    let mut m = [0u8; 8];
    m.copy_from_slice(&h[0..8]);
    let magic = u64::from_le_bytes(m);
    if magic != MAGIC {
        return Err(HandleError::BadMagic(magic));
    }
    let version = u16_at(h, 8);
    if version != WIRE_VERSION {
        return Err(HandleError::Version {
            got: version,
            want: WIRE_VERSION,
        });
    }
    let port = u16::from_be_bytes([h[12], h[13]]);
    let ip = match u16_at(h, 10) {
        2 => IpAddr::V4(Ipv4Addr::new(h[14], h[15], h[16], h[17])),
        10 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&h[14..30]);
            IpAddr::V6(Ipv6Addr::from(o))
        }
        other => return Err(HandleError::BadFamily(other)),
    };
    Ok(SocketAddr::new(ip, port))
}

/// The listener's secret carried in the handle.
pub fn secret(h: &[u8; HANDLE_SIZE]) -> [u8; SECRET_SIZE] {
    let mut out = [0u8; SECRET_SIZE];
    out.copy_from_slice(&h[SECRET_AT..SECRET_AT + SECRET_SIZE]);
    out
}

/// Records how many member devices the listener's (virtual) device has.
pub fn set_devs(h: &mut [u8; HANDLE_SIZE], devs: usize) {
    h[DEVS_AT] = devs.clamp(1, MAX_DEVS) as u8;
}

/// How many member devices the listener's (virtual) device has.
pub fn devs(h: &[u8; HANDLE_SIZE]) -> Result<usize, HandleError> {
    let n = h[DEVS_AT];
    if (1..=MAX_DEVS).contains(&usize::from(n)) {
        Ok(usize::from(n))
    } else {
        Err(HandleError::BadDevs(n))
    }
}

/// Compares two secrets in time that does not depend on where they differ.
pub fn secrets_match(a: &[u8; SECRET_SIZE], b: &[u8; SECRET_SIZE]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Records the listener's GIDs for subnet-aware routing (at most [`HANDLE_GIDS`]; the rest stay
/// zero).
pub fn set_gids(h: &mut [u8; HANDLE_SIZE], gids: &[[u8; 16]]) {
    for (i, g) in gids.iter().take(HANDLE_GIDS).enumerate() {
        h[GIDS_AT + 16 * i..GIDS_AT + 16 * (i + 1)].copy_from_slice(g);
    }
}

/// The listener's GIDs for subnet-aware routing (zero slots: none).
pub fn gids(h: &[u8; HANDLE_SIZE]) -> [[u8; 16]; HANDLE_GIDS] {
    core::array::from_fn(|i| {
        let mut g = [0u8; 16];
        g.copy_from_slice(&h[GIDS_AT + 16 * i..GIDS_AT + 16 * (i + 1)]);
        g
    })
}

/// The connect progress token stored in the handle (0 = none).
pub fn token(h: &[u8; HANDLE_SIZE]) -> u64 {
    let mut t = [0u8; 8];
    t.copy_from_slice(&h[TOKEN_AT..TOKEN_AT + 8]);
    u64::from_le_bytes(t)
}

/// Stores the connect progress token.
pub fn set_token(h: &mut [u8; HANDLE_SIZE], token: u64) {
    h[TOKEN_AT..TOKEN_AT + 8].copy_from_slice(&token.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_v4_and_v6() {
        for a in ["127.0.0.1:40000", "[2001:db8::2]:1"] {
            let addr: SocketAddr = a.parse().unwrap();
            let h = encode(addr, [7; SECRET_SIZE]);
            assert_eq!(decode(&h), Ok(addr));
            assert_eq!(token(&h), 0);
        }
    }

    #[test]
    fn documented_byte_positions() {
        let h = encode("10.1.2.3:4660".parse().unwrap(), [0xab; SECRET_SIZE]);
        assert_eq!(&h[0..8], b"FERRONET");
        assert_eq!(&h[10..12], &[2, 0]);
        assert_eq!(&h[12..14], &[0x12, 0x34]);
        assert_eq!(&h[14..18], &[10, 1, 2, 3]);
        assert_eq!(&h[32..48], &[0xab; SECRET_SIZE]);
        assert_eq!(secret(&h), [0xab; SECRET_SIZE]);
    }

    #[test]
    fn the_member_count_travels_beside_the_address() {
        let addr: SocketAddr = "[2001:db8::2]:7".parse().unwrap();
        let mut h = encode(addr, [1; SECRET_SIZE]);
        assert_eq!(devs(&h), Ok(1));
        set_devs(&mut h, 4);
        assert_eq!((devs(&h), decode(&h)), (Ok(4), Ok(addr)));
        h[30] = 0;
        assert_eq!(devs(&h), Err(HandleError::BadDevs(0)));
        h[30] = 9;
        assert_eq!(devs(&h), Err(HandleError::BadDevs(9)));
    }

    #[test]
    fn secrets_match_only_when_every_byte_does() {
        let a = [5u8; SECRET_SIZE];
        assert!(secrets_match(&a, &a));
        for i in 0..SECRET_SIZE {
            let mut b = a;
            b[i] ^= 1;
            assert!(!secrets_match(&a, &b), "byte {i}");
        }
    }

    #[test]
    fn rejects_garbage_foreign_and_other_versions() {
        assert!(matches!(
            decode(&[0u8; HANDLE_SIZE]),
            Err(HandleError::BadMagic(0))
        ));
        let mut h = encode("127.0.0.1:1".parse().unwrap(), [0; SECRET_SIZE]);
        h[8] = 9;
        assert_eq!(
            decode(&h),
            Err(HandleError::Version {
                got: 9,
                want: WIRE_VERSION
            })
        );
        let mut h = encode("127.0.0.1:1".parse().unwrap(), [0; SECRET_SIZE]);
        h[10] = 7;
        assert_eq!(decode(&h), Err(HandleError::BadFamily(7)));
        assert!(HandleError::BadMagic(1).to_string().contains("same plugin"));
    }

    #[test]
    fn gids_travel_in_their_own_bytes_and_a_handle_without_them_has_zero_slots() {
        let addr: SocketAddr = "10.1.2.3:4444".parse().unwrap();
        let mut h = encode(addr, [9; SECRET_SIZE]);
        assert_eq!(gids(&h), [[0; 16]; HANDLE_GIDS]);
        let g = [7u8; 16];
        set_gids(&mut h, &[g, [8; 16], [9; 16]]);
        assert_eq!(gids(&h), [g, [8; 16]]);
        assert!(h[72..104].iter().all(|&b| b == 7 || b == 8));
        set_token(&mut h, 0x1122);
        assert_eq!(gids(&h)[1], [8; 16]);
        assert_eq!(decode(&h).unwrap(), addr);
        assert_eq!(secret(&h), [9; SECRET_SIZE]);
    }

    #[test]
    fn token_round_trips_without_touching_the_address() {
        let addr: SocketAddr = "127.0.0.1:5".parse().unwrap();
        let mut h = encode(addr, [7; SECRET_SIZE]);
        set_token(&mut h, 0xdead_beef);
        assert_eq!(token(&h), 0xdead_beef);
        assert_eq!(decode(&h), Ok(addr));
        assert_eq!(secret(&h), [7; SECRET_SIZE]);
    }
}
