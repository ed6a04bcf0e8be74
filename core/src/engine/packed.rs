//! Unsigned integers (and texts) packed into one script argument as MessagePack, one after the
//! other, which the script reads back with one `cmsgpack.unpack` (built into the Lua of Redis and
//! its forks): one argument decoded in C costs the server less than one argument per number,
//! each read with `tonumber` (a text format parsed in Lua costs more than either: see the docs'
//! benchmarks page, "Ideas measured"). Each number takes MessagePack's smallest form for it, and
//! numbers below 2^53 (every figure the engines send) come back exact in a Lua double; a text
//! comes back as a Lua string (sliding.lua's field prefixes, made once per limiter rather than
//! joined in Lua on every call).

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
        self.len += uint(v, &mut self.bytes[self.len..]);
    }

    /// The argument's bytes.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// Appends `v` to `out` (an argument of any length, built once rather than per call).
    pub(crate) fn push_uint(out: &mut Vec<u8>, v: u64) {
        let mut bytes = [0; 9];
        let len = uint(v, &mut bytes);
        out.extend_from_slice(&bytes[..len]);
    }

    /// Appends `text` to `out` as a MessagePack str (fixstr, str 8, 16 or 32, by its length).
    pub(crate) fn push_text(out: &mut Vec<u8>, text: &str) {
        let len = text.len();
        match len {
            0..=31 => out.push(0xa0 | len as u8),
            32..=0xff => out.extend_from_slice(&[0xd9, len as u8]),
            0x100..=0xffff => {
                out.push(0xda);
                out.extend_from_slice(&(len as u16).to_be_bytes());
            }
            _ => {
                out.push(0xdb);
                out.extend_from_slice(&u32::try_from(len).expect("a text below 4 GiB").to_be_bytes());
            }
        }
        out.extend_from_slice(text.as_bytes());
    }
}

/// Writes `v` in MessagePack's smallest unsigned form (positive fixint, uint 8, 16, 32 or 64) at
/// the start of `out` (at least 9 bytes long); returns how many bytes it took.
fn uint(v: u64, out: &mut [u8]) -> usize {
    let (marker, width) = match v {
        0..=0x7f => {
            out[0] = v as u8;
            return 1;
        }
        0x80..=0xff => (0xcc, 1),
        0x100..=0xffff => (0xcd, 2),
        0x1_0000..=0xffff_ffff => (0xce, 4),
        _ => (0xcf, 8),
    };
    out[0] = marker;
    out[1..1 + width].copy_from_slice(&v.to_be_bytes()[8 - width..]);
    1 + width
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

    #[test]
    fn a_text_takes_the_form_its_length_needs_and_mixes_with_numbers() {
        let mut out = Vec::new();
        Packed::push_uint(&mut out, 1);
        Packed::push_text(&mut out, "0:1:1:");
        Packed::push_uint(&mut out, 300);
        assert_eq!(out, [0x01, 0xa6, b'0', b':', b'1', b':', b'1', b':', 0xcd, 0x01, 0x2c]);
        let long = "9:31536000000000:31536000000000:";
        let mut out = Vec::new();
        Packed::push_text(&mut out, long);
        assert_eq!(out[..2], [0xd9, 32]);
        assert_eq!(&out[2..], long.as_bytes());
        let mut out = Vec::new();
        Packed::push_text(&mut out, &"x".repeat(256));
        assert_eq!(out[..3], [0xda, 0x01, 0x00]);
        assert_eq!(out.len(), 3 + 256);
    }
}
