//! Unsigned integers packed into one script argument as MessagePack, one after the other, which
//! the script reads back with one `cmsgpack.unpack` (built into the Lua of Redis and its forks):
//! one argument decoded in C costs the server less than one argument per number, each read with
//! `tonumber` (a text format parsed in Lua costs more than either: see the docs' benchmarks
//! page, "Ideas measured"). Each number takes MessagePack's smallest form for it, and numbers
//! below 2^53 (every figure the engines send) come back exact in a Lua double.

/// Up to [`Packed::CAPACITY`] unsigned integers as MessagePack, built on the stack (a check's
/// hot path allocates nothing for it).
pub(crate) struct Packed {
    bytes: [u8; Self::CAPACITY * 9],
    len: usize,
}

impl Packed {
    /// The most numbers one argument holds (each takes at most 9 bytes).
    pub(crate) const CAPACITY: usize = 5;

    /// `values`, each in MessagePack's smallest unsigned form (positive fixint, uint 8, 16, 32
    /// or 64).
    pub(crate) fn of(values: &[u64]) -> Packed {
        assert!(values.len() <= Self::CAPACITY, "Packed holds at most {} numbers", Self::CAPACITY);
        let mut packed = Packed { bytes: [0; Self::CAPACITY * 9], len: 0 };
        for &v in values {
            packed.push(v);
        }
        packed
    }

    fn push(&mut self, v: u64) {
        let (marker, width) = match v {
            0..=0x7f => {
                self.bytes[self.len] = v as u8;
                self.len += 1;
                return;
            }
            0x80..=0xff => (0xcc, 1),
            0x100..=0xffff => (0xcd, 2),
            0x1_0000..=0xffff_ffff => (0xce, 4),
            _ => (0xcf, 8),
        };
        self.bytes[self.len] = marker;
        self.bytes[self.len + 1..self.len + 1 + width].copy_from_slice(&v.to_be_bytes()[8 - width..]);
        self.len += 1 + width;
    }

    /// The argument's bytes.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::Packed;

    #[test]
    fn each_number_takes_its_smallest_form() {
        let packed = Packed::of(&[0, 127, 128, 255, 256]);
        assert_eq!(packed.as_bytes(), [0x00, 0x7f, 0xcc, 0x80, 0xcc, 0xff, 0xcd, 0x01, 0x00]);
        let packed = Packed::of(&[65_535, 65_536, u32::MAX as u64, 1 << 32, (1 << 53) - 1]);
        assert_eq!(
            packed.as_bytes(),
            [
                0xcd, 0xff, 0xff, 0xce, 0x00, 0x01, 0x00, 0x00, 0xce, 0xff, 0xff, 0xff, 0xff, 0xcf, 0, 0, 0, 1, 0, 0,
                0, 0, 0xcf, 0, 0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff
            ]
        );
    }
}
