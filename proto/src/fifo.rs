//! The clear-to-send (CTS) FIFO.
//!
//! The sender owns a ring of [`SLOTS`] slots of [`MAX_RECVS`] 64-byte entries, registered for
//! remote write. For its `k`-th receive (group sequence `k`, counting from 0) the receiver
//! RDMA-writes one entry per posted buffer into slot `k % SLOTS`. The sender's `k`-th send group
//! reads the same slot and knows it is the fresh one when the entry's `seq` field equals `k + 1`
//! and its check word matches the other fields: an entry left from 32 receives ago has another
//! `seq`, and one the NIC is still writing (torn) fails the check, so it is simply "not yet".
//!
//! Entry layout (little-endian):
//! `0 seq u64 | 8 addr u64 | 16 rkey u32 | 20 size u32 | 24 tag i32 | 28 nreqs u16 | 30 idx u16 |
//! 32 check u64 | 40..64 zero`.

use crate::{MAX_RECVS, SLOTS};

pub const ENTRY_SIZE: usize = 64;
/// Bytes of the sender's FIFO.
pub const FIFO_BYTES: usize = SLOTS * MAX_RECVS * ENTRY_SIZE;
/// Bytes of the receiver's sizes FIFO (one `u32` per buffer of every slot).
pub const SIZES_BYTES: usize = SLOTS * MAX_RECVS * 4;

/// One posted receive buffer, as the sender sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CtsEntry {
    /// Group sequence + 1 (never 0).
    pub seq: u64,
    pub addr: u64,
    pub rkey: u32,
    /// Capacity of the posted buffer.
    pub size: u32,
    pub tag: i32,
    /// Buffers in the group.
    pub nreqs: u16,
    /// This buffer's index in the group.
    pub idx: u16,
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl CtsEntry {
    fn check(&self) -> u64 {
        let mut h = mix(self.seq ^ 0x4645_5252_4f43_5453);
        h = mix(h ^ self.addr);
        h = mix(h ^ (u64::from(self.rkey) << 32 | u64::from(self.size)));
        h = mix(h
            ^ (u64::from(self.tag as u32) << 32
                | u64::from(self.nreqs) << 16
                | u64::from(self.idx)));
        h | 1
    }

    pub fn encode(&self) -> [u8; ENTRY_SIZE] {
        let mut b = [0u8; ENTRY_SIZE];
        b[0..8].copy_from_slice(&self.seq.to_le_bytes());
        b[8..16].copy_from_slice(&self.addr.to_le_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_le_bytes());
        b[20..24].copy_from_slice(&self.size.to_le_bytes());
        b[24..28].copy_from_slice(&self.tag.to_le_bytes());
        b[28..30].copy_from_slice(&self.nreqs.to_le_bytes());
        b[30..32].copy_from_slice(&self.idx.to_le_bytes());
        b[32..40].copy_from_slice(&self.check().to_le_bytes());
        b
    }

    /// The entry for group `group_seq` (0-based), or `None` when the bytes are not (yet) a
    /// complete entry for that group.
    pub fn decode(b: &[u8; ENTRY_SIZE], group_seq: u64) -> Option<CtsEntry> {
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let e = CtsEntry {
            seq: u64_at(0),
            addr: u64_at(8),
            rkey: u32_at(16),
            size: u32_at(20),
            tag: u32_at(24) as i32,
            nreqs: u16::from_le_bytes([b[28], b[29]]),
            idx: u16::from_le_bytes([b[30], b[31]]),
        };
        let valid = e.seq == group_seq + 1
            && u64_at(32) == e.check()
            && e.nreqs >= 1
            && usize::from(e.nreqs) <= MAX_RECVS
            && e.idx < e.nreqs;
        valid.then_some(e)
    }
}

/// Byte offset of entry `i` of group `seq` in the sender's FIFO.
pub fn entry_offset(seq: u64, i: usize) -> usize {
    ((seq % SLOTS as u64) as usize * MAX_RECVS + i) * ENTRY_SIZE
}

/// Byte offset of group `seq`'s sizes in the receiver's sizes FIFO.
pub fn sizes_offset(seq: u64) -> usize {
    (seq % SLOTS as u64) as usize * MAX_RECVS * 4
}

/// The buffer a send with `tag` fills: the first entry not yet taken whose tag matches (tags
/// may repeat inside a group), or `None` when every buffer with that tag is taken.
pub fn find_buffer(entries: &[CtsEntry], taken: &[bool], tag: i32) -> Option<usize> {
    entries
        .iter()
        .zip(taken)
        .position(|(e, t)| !t && e.tag == tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(seq: u64, idx: u16, nreqs: u16, tag: i32, size: u32) -> CtsEntry {
        CtsEntry {
            seq: seq + 1,
            addr: 0x7000_0000 + u64::from(idx) * 4096,
            rkey: 9,
            size,
            tag,
            nreqs,
            idx,
        }
    }

    #[test]
    fn entry_round_trips_only_for_its_own_group() {
        let x = e(40, 1, 3, 7, 1 << 20);
        let b = x.encode();
        assert_eq!(CtsEntry::decode(&b, 40), Some(x));
        assert_eq!(
            CtsEntry::decode(&b, 8),
            None,
            "stale entry from 32 groups ago"
        );
        assert_eq!(CtsEntry::decode(&b, 72), None);
        assert_eq!(CtsEntry::decode(&[0; ENTRY_SIZE], 0), None, "zeroed FIFO");
    }

    #[test]
    fn a_torn_entry_is_not_taken() {
        let old = e(8, 0, 1, 1, 100).encode();
        let new = CtsEntry {
            addr: 0x5555_0000,
            rkey: 77,
            ..e(40, 0, 1, 5, 4096)
        }
        .encode();
        for w in 0..5 {
            assert_ne!(
                old[w * 8..w * 8 + 8],
                new[w * 8..w * 8 + 8],
                "word {w} must differ for the test to mean anything"
            );
        }
        // Any mix of old and new 8-byte words that is not all-new must be refused.
        for mask in 0u32..(1 << 5) {
            let mut b = [0u8; ENTRY_SIZE];
            for w in 0..5 {
                let src = if mask & (1 << w) != 0 { &new } else { &old };
                b[w * 8..w * 8 + 8].copy_from_slice(&src[w * 8..w * 8 + 8]);
            }
            let got = CtsEntry::decode(&b, 40);
            if mask == 0b11111 {
                assert!(got.is_some());
            } else {
                assert_eq!(got, None, "mask {mask:05b}");
            }
        }
    }

    #[test]
    fn offsets_wrap_every_32_groups() {
        assert_eq!(entry_offset(0, 0), 0);
        assert_eq!(entry_offset(1, 2), (MAX_RECVS + 2) * ENTRY_SIZE);
        assert_eq!(entry_offset(33, 2), entry_offset(1, 2));
        assert_eq!(entry_offset(31, 7) + ENTRY_SIZE, FIFO_BYTES);
        assert_eq!(sizes_offset(31) + MAX_RECVS * 4, SIZES_BYTES);
    }

    #[test]
    fn matching_takes_the_first_open_buffer_with_the_tag() {
        let g = [e(0, 0, 3, 4, 100), e(0, 1, 3, 4, 100), e(0, 2, 3, 9, 100)];
        assert_eq!(find_buffer(&g, &[false; 3], 4), Some(0));
        assert_eq!(find_buffer(&g, &[true, false, false], 4), Some(1));
        assert_eq!(find_buffer(&g, &[false; 3], 9), Some(2));
        assert_eq!(find_buffer(&g, &[true, true, false], 4), None);
        assert_eq!(find_buffer(&g, &[false; 3], 5), None);
    }
}
