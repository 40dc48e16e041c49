//! The clear-to-send (CTS) FIFO.
//!
//! The sender owns a ring of [`SLOTS`] slots of [`MAX_RECVS`] 64-byte entries, registered for
//! remote write. For its `k`-th receive (group sequence `k`, counting from 0) the receiver
//! RDMA-writes one entry per posted buffer into slot `k % SLOTS`. The sender's `k`-th send group
//! reads the same slot and knows it is the fresh one when the entry's `seq` field equals `k + 1`
//! (modulo 2^32) and its check word matches the other fields: an entry left from 32 receives ago
//! has another `seq`, and one the NIC is still writing (torn) fails the check, so it is simply
//! "not yet". The check folds the entry's other seven words pairwise through 128-bit products
//! and folds the results again (five multiplications, no byte handling: entries are built and
//! read as whole words); any mix of an old entry's words with a new one's changes it.
//!
//! Entry layout (little-endian):
//! `0 seq u32 | 4 size u32 | 8 addr u64 | 16 tag i32 | 20 nreqs u16 | 22 idx u16 |
//! 24 rkeys [u32; 8] | 56 check u64`.
//!
//! `rkeys` holds the buffer's remote key on each member device of the receiver's (virtual)
//! device, by member index; a physical device uses `rkeys[0]` only. The sender writes the part
//! of the buffer that a QP carries with the key of the receiver's device at the other end of
//! that QP.

use crate::{Keys, MAX_DEVS, MAX_RECVS, SLOTS};

pub const ENTRY_SIZE: usize = 64;
/// An entry as little-endian `u64` words ([`CtsEntry::decode_words`]).
pub const ENTRY_WORDS: usize = ENTRY_SIZE / 8;
/// Bytes of the sender's FIFO.
pub const FIFO_BYTES: usize = SLOTS * MAX_RECVS * ENTRY_SIZE;
/// Bytes of the receiver's sizes FIFO (one `u32` per buffer of every slot).
pub const SIZES_BYTES: usize = SLOTS * MAX_RECVS * 4;
const RKEYS_AT: usize = 24;
const CHECK_AT: usize = RKEYS_AT + 4 * MAX_DEVS;
const _: () =
    assert!(CHECK_AT + 8 == ENTRY_SIZE && RKEYS_AT == 24 && MAX_DEVS == 8 && ENTRY_WORDS == 8);

/// One posted receive buffer, as the sender sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CtsEntry {
    /// Group sequence + 1 (never 0); 32 bits of it travel.
    pub seq: u64,
    pub addr: u64,
    /// The buffer's remote key on each member device of the receiver (index 0 alone for a
    /// physical device).
    pub rkeys: Keys,
    /// Capacity of the posted buffer.
    pub size: u32,
    pub tag: i32,
    /// Buffers in the group.
    pub nreqs: u16,
    /// This buffer's index in the group.
    pub idx: u16,
}

/// One step of the check: the 128-bit product of the two words, folded to 64 bits. A change
/// of either word changes the result (for all but a vanishing fraction of values), and unlike a
/// sum no structured difference of two words cancels out.
#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a).wrapping_mul(u128::from(b));
    (p as u64) ^ ((p >> 64) as u64)
}

/// Keys of the check (odd, dense in ones), one per word, so that no word's value can zero
/// its product by chance of a common pattern (0, all ones, a small number).
const K: [u64; 10] = [
    0xa076_1d64_78bd_642f,
    0xe703_7ed1_a0b4_28db,
    0x8ebc_6af0_9c88_c6e3,
    0x5899_65cc_7537_4cc3,
    0x1d8e_4e27_c47d_124f,
    0x9e37_79b9_7f4a_7c15,
    0xbf58_476d_1ce4_e5b9,
    0x94d0_49bb_1331_11eb,
    0xd6e8_feb8_6659_fd93,
    0xff51_afd7_ed55_8ccd,
];

/// The check word of an entry's first [`CHECK_AT`] / 8 words (the first with the sequence
/// number in its low half): pairs of words are folded ([`fold`]) and the folds folded again,
/// which costs five multiplications. Never 0, so a zeroed FIFO never holds a valid entry.
#[inline(always)]
fn check_of(w: &[u64; ENTRY_WORDS]) -> u64 {
    let a = fold(w[0] ^ K[0], w[1] ^ K[1]);
    let b = fold(w[2] ^ K[2], w[3] ^ K[3]);
    let c = fold(w[4] ^ K[4], w[5] ^ K[5]);
    let d = fold(w[6] ^ K[6], w[0] ^ K[7]);
    fold(a ^ c ^ K[8], b ^ d ^ K[9]) | 1
}

impl CtsEntry {
    /// The entry as the [`ENTRY_WORDS`] little-endian `u64` words of its layout, check word
    /// included: what the receiver stages (whole stores, no byte shuffling) and the sender
    /// reads ([`CtsEntry::decode_words`]).
    #[inline(always)]
    pub fn encode_words(&self) -> [u64; ENTRY_WORDS] {
        // Each word built whole (no zeroing then or-ing in): the key pairs by member index.
        let k = |i: usize| u64::from(self.rkeys[i]) | u64::from(self.rkeys[i + 1]) << 32;
        let mut w = [
            u64::from(self.seq as u32) | u64::from(self.size) << 32,
            self.addr,
            u64::from(self.tag as u32) | u64::from(self.nreqs) << 32 | u64::from(self.idx) << 48,
            k(0),
            k(2),
            k(4),
            k(6),
            0,
        ];
        w[CHECK_AT / 8] = check_of(&w);
        w
    }

    /// The entry's bytes ([`CtsEntry::encode_words`], little-endian).
    pub fn encode(&self) -> [u8; ENTRY_SIZE] {
        let mut b = [0u8; ENTRY_SIZE];
        for (chunk, w) in b.chunks_exact_mut(8).zip(self.encode_words()) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// The entry for group `group_seq` (0-based), or `None` when the bytes are not (yet) a
    /// complete entry for that group.
    pub fn decode(b: &[u8; ENTRY_SIZE], group_seq: u64) -> Option<CtsEntry> {
        let words: [u64; ENTRY_WORDS] = core::array::from_fn(|i| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[8 * i..8 * i + 8]);
            u64::from_le_bytes(a)
        });
        CtsEntry::decode_words(&words, group_seq)
    }

    /// [`CtsEntry::decode`] of the entry's bytes read as [`ENTRY_WORDS`] little-endian `u64`
    /// words (as whole loads from the FIFO: no byte shuffling on the data path).
    #[inline]
    pub fn decode_words(w: &[u64; ENTRY_WORDS], group_seq: u64) -> Option<CtsEntry> {
        if w[0] as u32 != expected_seq_word(group_seq) {
            return None;
        }
        let e = CtsEntry {
            seq: group_seq + 1,
            size: (w[0] >> 32) as u32,
            addr: w[1],
            tag: w[2] as u32 as i32,
            nreqs: (w[2] >> 32) as u16,
            idx: (w[2] >> 48) as u16,
            rkeys: core::array::from_fn(|i| (w[RKEYS_AT / 8 + i / 2] >> (32 * (i % 2))) as u32),
        };
        let valid = w[CHECK_AT / 8] == check_of(w)
            && e.nreqs >= 1
            && usize::from(e.nreqs) <= MAX_RECVS
            && e.idx < e.nreqs;
        valid.then_some(e)
    }
}

/// The first 4 bytes (little-endian) of an entry for group `group_seq` once written: a reader
/// that finds another value there has no entry yet (or a stale one), whatever the rest holds,
/// so it may look at this word alone before reading the whole entry ([`CtsEntry::decode`]
/// checks it again).
#[inline]
pub fn expected_seq_word(group_seq: u64) -> u32 {
    (group_seq + 1) as u32
}

/// Byte offset of entry `i` of group `seq` in the sender's FIFO.
#[inline]
pub fn entry_offset(seq: u64, i: usize) -> usize {
    ((seq % SLOTS as u64) as usize * MAX_RECVS + i) * ENTRY_SIZE
}

/// Byte offset of group `seq`'s sizes in the receiver's sizes FIFO.
#[inline]
pub fn sizes_offset(seq: u64) -> usize {
    (seq % SLOTS as u64) as usize * MAX_RECVS * 4
}

/// The buffer a send with `tag` fills: the first entry not yet taken whose tag matches (tags
/// may repeat inside a group), or `None` when every buffer with that tag is taken.
#[inline]
pub fn find_buffer(tags: &[i32], taken: &[bool], tag: i32) -> Option<usize> {
    tags.iter().zip(taken).position(|(&e, &t)| !t && e == tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout written out field by field, as the encoding was before it built whole
    /// words: the wire bytes must not change.
    fn encode_by_fields(x: &CtsEntry) -> [u8; ENTRY_SIZE] {
        let mut b = [0u8; ENTRY_SIZE];
        b[0..4].copy_from_slice(&(x.seq as u32).to_le_bytes());
        b[4..8].copy_from_slice(&x.size.to_le_bytes());
        b[8..16].copy_from_slice(&x.addr.to_le_bytes());
        b[16..20].copy_from_slice(&x.tag.to_le_bytes());
        b[20..22].copy_from_slice(&x.nreqs.to_le_bytes());
        b[22..24].copy_from_slice(&x.idx.to_le_bytes());
        for (i, k) in x.rkeys.iter().enumerate() {
            b[RKEYS_AT + 4 * i..RKEYS_AT + 4 * i + 4].copy_from_slice(&k.to_le_bytes());
        }
        let mut w = [0u64; ENTRY_WORDS];
        for (i, c) in b.chunks_exact(8).enumerate().take(CHECK_AT / 8) {
            w[i] = u64::from_le_bytes(c.try_into().unwrap());
        }
        b[CHECK_AT..].copy_from_slice(&check_of(&w).to_le_bytes());
        b
    }

    #[test]
    fn encoding_whole_words_gives_the_same_bytes_as_the_field_layout() {
        let mut x = e(0xfff_ffff_fffe, 5, 8, -3, u32::MAX);
        x.rkeys = [1, u32::MAX, 3, 0x8000_0000, 5, 6, 7, 0xdead_beef];
        for y in [x, e(0, 0, 1, 0, 0), e(40, 1, 3, 7, 4096)] {
            assert_eq!(y.encode(), encode_by_fields(&y));
        }
    }

    fn e(seq: u64, idx: u16, nreqs: u16, tag: i32, size: u32) -> CtsEntry {
        CtsEntry {
            seq: seq + 1,
            addr: 0x7000_0000 + u64::from(idx) * 4096,
            rkeys: [9, 10, 0, 0, 0, 0, 0, 12],
            size,
            tag,
            nreqs,
            idx,
        }
    }

    #[test]
    fn the_sequence_word_alone_tells_a_written_entry_from_an_absent_one() {
        for seq in [
            0u64,
            31,
            32,
            u64::from(u32::MAX) - 1,
            u64::from(u32::MAX),
            1 << 40,
        ] {
            let b = e(seq, 0, 1, 3, 8).encode();
            let word = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            assert_eq!(word, expected_seq_word(seq), "group {seq}");
            assert!(CtsEntry::decode(&b, seq).is_some());
            // The same slot 32 groups later, before its entry arrives.
            assert_ne!(word, expected_seq_word(seq + SLOTS as u64));
            assert!(CtsEntry::decode(&b, seq + SLOTS as u64).is_none());
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
            rkeys: [77, 78, 79, 80, 81, 82, 83, 84],
            ..e(40, 0, 1, 5, 4096)
        }
        .encode();
        for w in 0..8 {
            assert_ne!(
                old[w * 8..w * 8 + 8],
                new[w * 8..w * 8 + 8],
                "word {w} must differ for the test to mean anything"
            );
        }
        // Any mix of old and new 8-byte words that is not all-new must be refused.
        for mask in 0u32..(1 << 8) {
            let mut b = [0u8; ENTRY_SIZE];
            for w in 0..8 {
                let src = if mask & (1 << w) != 0 { &new } else { &old };
                b[w * 8..w * 8 + 8].copy_from_slice(&src[w * 8..w * 8 + 8]);
            }
            let got = CtsEntry::decode(&b, 40);
            if mask == 0xff {
                assert!(got.is_some());
            } else {
                assert_eq!(got, None, "mask {mask:08b}");
            }
        }
    }

    #[test]
    fn the_sequence_travels_as_32_bits_and_still_tells_neighbouring_groups_apart() {
        let g = u64::from(u32::MAX);
        let x = e(g, 0, 1, 3, 64);
        let b = x.encode();
        assert_eq!(&b[0..4], &[0; 4], "seq 2^32 travels as 0");
        assert_eq!(CtsEntry::decode(&b, g), Some(x));
        assert_eq!(CtsEntry::decode(&b, g - 32), None);
        assert_eq!(CtsEntry::decode(&b, g + 32), None);
    }

    #[test]
    fn a_change_of_any_one_bit_of_an_entry_fails_its_check() {
        let w = e(40, 1, 3, 7, 4096).encode_words();
        for word in 0..ENTRY_WORDS {
            for bit in 0..64 {
                let mut x = w;
                x[word] ^= 1 << bit;
                // A flipped bit of the sequence number makes it another group's entry: not
                // this one's either way.
                assert_eq!(
                    CtsEntry::decode_words(&x, 40),
                    None,
                    "word {word} bit {bit}"
                );
            }
        }
        assert!(CtsEntry::decode_words(&w, 40).is_some());
    }

    #[test]
    fn words_and_bytes_encode_the_same_entry() {
        let x = e(7, 2, 4, -3, 1 << 30);
        let b = x.encode();
        for (i, w) in x.encode_words().iter().enumerate() {
            assert_eq!(b[8 * i..8 * i + 8], w.to_le_bytes());
        }
        assert_eq!(CtsEntry::decode(&b, 7), Some(x));
    }

    #[test]
    fn every_member_key_round_trips() {
        let mut x = e(3, 0, 1, 3, 64);
        x.rkeys = core::array::from_fn(|i| 0x1000 + i as u32);
        assert_eq!(CtsEntry::decode(&x.encode(), 3), Some(x));
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
        let g = [e(0, 0, 3, 4, 100), e(0, 1, 3, 4, 100), e(0, 2, 3, 9, 100)].map(|e| e.tag);
        assert_eq!(find_buffer(&g, &[false; 3], 4), Some(0));
        assert_eq!(find_buffer(&g, &[true, false, false], 4), Some(1));
        assert_eq!(find_buffer(&g, &[false; 3], 9), Some(2));
        assert_eq!(find_buffer(&g, &[true, true, false], 4), None);
        assert_eq!(find_buffer(&g, &[false; 3], 5), None);
    }
}
