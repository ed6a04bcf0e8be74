//! Short byte strings copied into fixed-size, zero-padded arrays without a call to `memcpy`.
//!
//! The hot path copies the key twice (the memory backend's lookup probe and the settle ticket's
//! key): a slice copy of a length known only at run time compiles to a call into the C
//! library's `memcpy`, which costs more than the copy itself for a few bytes. Two fixed-size
//! copies that overlap in the middle cover every length between their size and twice it, and
//! compile to a pair of loads and stores.

/// `bytes` (at most `N` bytes, `N` from 16 to 32) at the start of an array of `N` zeros.
#[inline(always)]
pub(crate) fn padded<const N: usize>(bytes: &[u8]) -> [u8; N] {
    // Two overlapping 16-byte copies reach at most 32 bytes.
    const { assert!(N >= 16 && N <= 32) };
    let mut out = [0u8; N];
    let len = bytes.len();
    debug_assert!(len <= N);
    if len >= 16 {
        copy_overlapping::<16>(&mut out[..len], bytes);
    } else if len >= 8 {
        copy_overlapping::<8>(&mut out[..len], bytes);
    } else if len >= 4 {
        copy_overlapping::<4>(&mut out[..len], bytes);
    } else {
        for (o, b) in out.iter_mut().zip(bytes) {
            *o = *b;
        }
    }
    out
}

/// Copies `src` into `dst` (of one length, between `W` and `2 * W`) as its first `W` bytes and
/// its last `W` bytes.
#[inline(always)]
fn copy_overlapping<const W: usize>(dst: &mut [u8], src: &[u8]) {
    let len = src.len();
    let head: [u8; W] = src[..W].try_into().unwrap_or([0; W]);
    let tail: [u8; W] = src[len - W..].try_into().unwrap_or([0; W]);
    dst[..W].copy_from_slice(&head);
    dst[len - W..].copy_from_slice(&tail);
}

#[cfg(test)]
mod tests {
    use super::padded;

    /// Every length from 0 to the array's size comes out as a plain copy followed by zeros.
    #[test]
    fn every_length_copies_exactly() {
        let source: Vec<u8> = (1..=22).collect();
        for len in 0..=22 {
            let got: [u8; 22] = padded(&source[..len]);
            let mut want = [0u8; 22];
            want[..len].copy_from_slice(&source[..len]);
            assert_eq!(got, want, "length {len}");
        }
    }
}
