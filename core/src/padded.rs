//! Short byte strings read into zero-padded words in registers, without a call to `memcpy`.
//!
//! The hot path holds a short key as words (a [`KeyBytes`], made once per check: the memory
//! backend's lookup and hash, and the settle ticket's key): a slice copy of a length known only
//! at run time compiles to a call into the C library's `memcpy`, which costs more than the copy
//! itself for a few bytes. Two fixed-size loads that overlap in the middle cover every length
//! between their size and twice it.
//!
//! The bytes are combined in registers rather than by two overlapping stores into a buffer:
//! reading such a buffer back in wider pieces straddles both stores, which the CPU cannot
//! forward from its store buffer, and each such read waited for the stores to reach the cache
//! (the largest single cost of a one-key check in a profile).

/// `bytes` (at most 32) as two little-endian words: bytes 0..16 and 16..32, zero past the end.
#[inline(always)]
pub(crate) fn padded_words(bytes: &[u8]) -> (u128, u128) {
    let len = bytes.len();
    debug_assert!(len <= 32);
    if len >= 16 {
        let head = u128::from_le_bytes(word(bytes, 0));
        // The last 16 bytes; its top `len - 16` bytes are bytes 16..len.
        let tail = u128::from_le_bytes(word(bytes, len - 16));
        (head, tail.checked_shr(8 * (32 - len) as u32).unwrap_or(0))
    } else if len >= 8 {
        let head = u64::from_le_bytes(word(bytes, 0));
        let tail = u64::from_le_bytes(word(bytes, len - 8)).checked_shr(8 * (16 - len) as u32).unwrap_or(0);
        (u128::from(head) | u128::from(tail) << 64, 0)
    } else if len >= 4 {
        let head = u32::from_le_bytes(word(bytes, 0));
        let tail = u32::from_le_bytes(word(bytes, len - 4)).checked_shr(8 * (8 - len) as u32).unwrap_or(0);
        (u128::from(head) | u128::from(tail) << 32, 0)
    } else if len > 0 {
        // Bytes 0, len / 2 and len - 1 cover every length from 1 to 3.
        let at = |i: usize| u128::from(bytes[i]) << (8 * i);
        (at(0) | at(len / 2) | at(len - 1), 0)
    } else {
        (0, 0)
    }
}

/// The `W` bytes of `bytes` from `at` (which the caller keeps in bounds).
#[inline(always)]
fn word<const W: usize>(bytes: &[u8], at: usize) -> [u8; W] {
    bytes.get(at..at + W).and_then(|w| w.try_into().ok()).unwrap_or([0; W])
}

/// A byte string of at most [`InlineBytes::MAX`] bytes held in three words: the bytes, zero
/// padded, then the length, then a marker bit that keeps the last word non-zero (so that an
/// enum of this and a pointer-sized-pair variant, as the memory backend's keys and the settle
/// ticket's key are, stays three words wide).
///
/// Built from [`padded_words`] and stored as whole words: a copy of it (into a decision, into
/// a table slot) reads each word back from one store, which the CPU forwards.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct InlineBytes {
    /// Bytes 0..16, little-endian in memory.
    head: [u64; 2],
    /// Bytes 16..22, then the length, then the marker bit, little-endian in memory.
    tail: NonZeroU64,
}

use std::num::NonZeroU64;

/// Where the length sits in the last word, and the marker bit above it.
const LEN_SHIFT: u32 = 48;
const MARKER: u64 = 1 << 63;

impl InlineBytes {
    /// The most bytes held.
    pub(crate) const MAX: usize = 22;

    /// `bytes`, which the caller keeps to at most [`InlineBytes::MAX`].
    #[inline(always)]
    pub(crate) fn new(bytes: &[u8]) -> InlineBytes {
        debug_assert!(bytes.len() <= Self::MAX);
        let (head, tail) = padded_words(bytes);
        let tail = (tail as u64 & ((1 << LEN_SHIFT) - 1)) | (bytes.len() as u64) << LEN_SHIFT | MARKER;
        InlineBytes {
            head: [(head as u64).to_le(), ((head >> 64) as u64).to_le()],
            tail: NonZeroU64::new(tail.to_le()).unwrap_or(NonZeroU64::MAX),
        }
    }

    /// The three words as stored: what a hash of the bytes reads (the length included, so two
    /// byte strings of different lengths never share their words).
    #[inline(always)]
    pub(crate) fn words(&self) -> [u64; 3] {
        [self.head[0], self.head[1], self.tail.get()]
    }

    /// How many bytes are held.
    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        ((u64::from_le(self.tail.get()) >> LEN_SHIFT) & 0xff) as usize
    }

    /// The bytes held.
    #[inline]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        let len = self.len().min(Self::MAX);
        // SAFETY: `InlineBytes` is `repr(C)`, three `u64`-sized fields and no padding, so
        // its 24 bytes are initialised; each word is stored little-endian, so bytes 0..22 are
        // the padded bytes in order, and `len` is at most 22.
        unsafe { std::slice::from_raw_parts((self as *const InlineBytes).cast::<u8>(), len) }
    }
}

const _: () = assert!(size_of::<InlineBytes>() == 24);

/// A key as a call holds it: in three words when it fits in an [`InlineBytes`], else the bytes
/// themselves. Made once per call, then compared with stored keys, hashed and copied into the
/// settle ticket, so that a short key's bytes are read and padded once.
#[derive(Clone, Copy)]
pub(crate) enum KeyBytes<'a> {
    /// At most [`InlineBytes::MAX`] bytes.
    Short(InlineBytes),
    /// Longer.
    Long(&'a [u8]),
}

impl<'a> KeyBytes<'a> {
    /// `key` as words when it is short enough, else as it is.
    #[inline(always)]
    pub(crate) fn new(key: &'a [u8]) -> KeyBytes<'a> {
        if key.len() <= InlineBytes::MAX {
            KeyBytes::Short(InlineBytes::new(key))
        } else {
            KeyBytes::Long(key)
        }
    }
}

/// The high and low halves of the full 128-bit product of `x` and `y`, folded by xor: the
/// mixing step of foldhash and wyhash.
#[inline(always)]
pub(crate) fn folded_multiply(x: u64, y: u64) -> u64 {
    let full = u128::from(x) * u128::from(y);
    (full as u64) ^ ((full >> 64) as u64)
}

#[cfg(test)]
mod tests {
    use super::{padded_words, InlineBytes};

    /// Every length from 0 to the words' size comes out as a plain copy followed by zeros, and
    /// every length an `InlineBytes` holds reads back whole and compares by its bytes alone.
    #[test]
    fn every_length_copies_exactly() {
        let source: Vec<u8> = (1..=32).collect();
        for len in 0..=InlineBytes::MAX {
            let held = InlineBytes::new(&source[..len]);
            assert_eq!(held.as_bytes(), &source[..len], "length {len}");
            assert!(held == InlineBytes::new(&source[..len]));
            assert!(len == 0 || held != InlineBytes::new(&source[1..=len]), "length {len}");
            assert!(held != InlineBytes::new(&[0; InlineBytes::MAX][..(len + 1) % (InlineBytes::MAX + 1)]));
        }
        for len in 0..=32 {
            let (head, tail) = padded_words(&source[..len]);
            let mut want = [0u8; 32];
            want[..len].copy_from_slice(&source[..len]);
            let mut got = [0u8; 32];
            got[..16].copy_from_slice(&head.to_le_bytes());
            got[16..].copy_from_slice(&tail.to_le_bytes());
            assert_eq!(got, want, "length {len}");
        }
    }
}
