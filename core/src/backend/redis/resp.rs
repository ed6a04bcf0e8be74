//! RESP framing for connections the library reads itself (sync clients and driven connections):
//! where a reply ends, and a fast path for the replies scripts give (arrays of integers),
//! which skips the general parser.

use redis::{RedisResult, Value};

/// The largest length a reply header may announce: Redis' own ceiling for a bulk string
/// (`proto-max-bulk-len` is at most 512 MB) and far above any aggregate a script returns. A
/// larger one is a corrupt or hostile reply, refused rather than waited for.
const MAX_LENGTH: u64 = 1 << 32;

/// The length of the first whole RESP2/RESP3 value in `buf`: `Ok(None)` while incomplete.
pub(crate) fn frame_len(buf: &[u8]) -> Result<Option<usize>, String> {
    let mut pos = 0usize;
    // Values still to read: nested aggregates add their elements.
    let mut pending = 1u64;
    while pending > 0 {
        let Some(kind) = buf.get(pos).copied() else { return Ok(None) };
        if !b"+-:_,#($=!*~>%|".contains(&kind) {
            return Err(format!("unexpected type byte {kind:#04x}"));
        }
        // The header line starts after the type byte: a `\r\n` right at `pos` is a type byte
        // of `\r`, refused above, not an empty line.
        let Some(line) = buf[pos + 1..].windows(2).position(|w| w == b"\r\n") else { return Ok(None) };
        let header = &buf[pos + 1..pos + 1 + line];
        pos += 1 + line + 2;
        pending -= 1;
        // The announced length: `None` for a null (-1).
        let length = || -> Result<Option<u64>, String> {
            let bad = || format!("bad length {:?}", String::from_utf8_lossy(header));
            match std::str::from_utf8(header).ok().and_then(|h| h.parse::<i64>().ok()).ok_or_else(bad)? {
                -1 => Ok(None),
                n @ 0.. if n as u64 <= MAX_LENGTH => Ok(Some(n as u64)),
                _ => Err(bad()),
            }
        };
        match kind {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => {}
            b'$' | b'=' | b'!' => {
                if let Some(n) = length()? {
                    // No overflow: n is at most MAX_LENGTH and pos at most buf.len().
                    pos += n as usize + 2;
                    if pos > buf.len() {
                        return Ok(None);
                    }
                }
            }
            b'*' | b'~' | b'>' => pending += length()?.unwrap_or(0),
            b'%' => pending += 2 * length()?.unwrap_or(0),
            // An attribute map comes before the value it describes.
            b'|' => pending += 2 * length()?.unwrap_or(0) + 1,
            other => return Err(format!("unexpected type byte {other:#04x}")),
        }
        // Keeps the count far from overflowing: no real reply nests this many values.
        if pending > MAX_LENGTH * 4 {
            return Err(format!("{pending} nested values announced"));
        }
    }
    Ok(Some(pos))
}

/// The value of one whole frame (see [`frame_len`]). Integers and arrays of them, nested (what
/// every script answers, and a batched script invocation's array of its calls' answers), are
/// read here; anything else goes to redis-rs' parser.
pub(crate) fn parse_frame(frame: &[u8]) -> RedisResult<Value> {
    fast_ints(frame).map_or_else(|| redis::parse_redis_value(frame), Ok)
}

/// How deep [`fast_ints`] reads nested arrays (a batched reply is two deep).
const FAST_DEPTH: u32 = 3;

/// `:<i>\r\n`, or `*<n>\r\n` followed by `n` of those (nested up to [`FAST_DEPTH`]), the
/// whole frame; `None` for anything else.
fn fast_ints(frame: &[u8]) -> Option<Value> {
    let mut at = 0;
    let value = int_tree(frame, &mut at, 0)?;
    (at == frame.len()).then_some(value)
}

/// The integer or array of integers at `at`, which moves past it.
fn int_tree(frame: &[u8], at: &mut usize, depth: u32) -> Option<Value> {
    let kind = *frame.get(*at)?;
    let line = frame.get(*at + 1..)?;
    let end = line.iter().position(|&b| b == b'\r')?;
    if line.get(end + 1) != Some(&b'\n') {
        return None;
    }
    let number: i64 = std::str::from_utf8(&line[..end]).ok()?.parse().ok()?;
    *at += 1 + end + 2;
    match kind {
        b':' => Some(Value::Int(number)),
        b'*' if depth < FAST_DEPTH => {
            let count = usize::try_from(number).ok()?;
            // Each element takes at least 4 bytes (`:0\r\n`): a larger count is not this frame's.
            if count > (frame.len() - *at) / 4 {
                return None;
            }
            let mut values = Vec::with_capacity(count);
            for _ in 0..count {
                values.push(int_tree(frame, at, depth + 1)?);
            }
            Some(Value::Array(values))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{frame_len, parse_frame};
    use redis::Value;

    #[test]
    fn frames_whole_values_only() {
        let reply = b"*2\r\n*3\r\n:1\r\n$3\r\nabc\r\n$-1\r\n-ERR x\r\n+OK\r\n";
        let first = reply.len() - 5;
        assert_eq!(frame_len(reply), Ok(Some(first)));
        for cut in 0..first {
            assert_eq!(frame_len(&reply[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(frame_len(b"%1\r\n+a\r\n:1\r\n"), Ok(Some(12)));
        assert_eq!(frame_len(b"*-1\r\n"), Ok(Some(5)));
        assert!(frame_len(b"?x\r\n").is_err());
        assert!(frame_len(b"$x\r\n").is_err());
        // Found by the fuzz tests below: these lengths overflowed the count (a panic in debug
        // builds, a misframed reply in release ones).
        assert!(frame_len(b"*9223372036854775807\r\n").is_err());
        assert!(frame_len(b"|9223372036854775807\r\n").is_err());
        assert!(frame_len(b"$-2\r\n").is_err());
        assert_eq!(frame_len(b"$-1\r\n"), Ok(Some(5)));
        // Found by the fuzz tests below: a line end right where a type byte belongs sliced the
        // buffer backwards (a panic in every build).
        assert!(frame_len(b"\r\n").is_err());
        assert!(frame_len(b"*1\r\n\r\n").is_err());
        assert_eq!(frame_len(b"+\r\n"), Ok(Some(3)));
    }

    #[test]
    fn integer_replies_take_the_fast_path_and_match_the_general_parser() {
        for frame in [&b"*3\r\n:1\r\n:-5\r\n:1700000000000000\r\n"[..], b":42\r\n", b"*0\r\n"] {
            assert_eq!(parse_frame(frame).unwrap(), redis::parse_redis_value(frame).unwrap());
        }
        assert_eq!(parse_frame(b"*2\r\n:1\r\n:2\r\n").unwrap(), Value::Array(vec![Value::Int(1), Value::Int(2)]));
        // Not integers: the general parser answers.
        let error = parse_frame(b"-NOSCRIPT No matching script\r\n").unwrap();
        assert!(matches!(error, Value::ServerError(_)), "{error:?}");
        let nested = parse_frame(b"*2\r\n*1\r\n:1\r\n-ERR x\r\n").unwrap();
        assert!(matches!(&nested, Value::Array(v) if v.len() == 2), "{nested:?}");
        assert!(matches!(parse_frame(b"+OK\r\n").unwrap(), Value::Okay | Value::SimpleString(_)));
    }

    #[test]
    fn batched_integer_replies_take_the_fast_path() {
        let batched = b"*3\r\n*2\r\n:1\r\n:-2\r\n*0\r\n*1\r\n:3\r\n";
        assert_eq!(super::fast_ints(batched), Some(redis::parse_redis_value(batched).unwrap()));
        // Deeper than FAST_DEPTH, an error among the answers, a null array, a short frame or
        // bytes after it: the general parser's (or nothing).
        for other in [
            &b"*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n"[..],
            b"*2\r\n*1\r\n:1\r\n-ERR x\r\n",
            b"*-1\r\n",
            b"*2\r\n:1\r\n",
            b":1\r\n:2\r\n",
            b":1\r",
            b":1\rx",
        ] {
            assert_eq!(super::fast_ints(other), None, "{:?}", String::from_utf8_lossy(other));
        }
    }
}

/// Hostile and random input for the reply reader: it reads bytes from the network, so no input
/// may panic it, and every valid reply must frame exactly.
#[cfg(test)]
mod fuzz {
    use super::{frame_len, parse_frame};
    use proptest::prelude::*;

    /// A RESP2/RESP3 value, serialized.
    fn value() -> impl Strategy<Value = Vec<u8>> {
        let leaf = prop_oneof![
            any::<i64>().prop_map(|i| format!(":{i}\r\n").into_bytes()),
            "[a-zA-Z0-9 ]{0,12}".prop_map(|s| format!("+{s}\r\n").into_bytes()),
            "[A-Z]{1,8} [a-z ]{0,12}".prop_map(|s| format!("-{s}\r\n").into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..24).prop_map(|b| {
                let mut out = format!("${}\r\n", b.len()).into_bytes();
                out.extend_from_slice(&b);
                out.extend_from_slice(b"\r\n");
                out
            }),
            Just(b"$-1\r\n".to_vec()),
            Just(b"_\r\n".to_vec()),
            Just(b"#t\r\n".to_vec()),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| format!(",{f}\r\n").into_bytes()),
        ];
        leaf.prop_recursive(3, 32, 6, |inner| {
            (prop_oneof![Just('*'), Just('~'), Just('>'), Just('%')], proptest::collection::vec(inner, 0..6)).prop_map(
                |(kind, items)| {
                    let (header, items) = if kind == '%' {
                        let pairs = items.len() / 2;
                        (pairs, items[..pairs * 2].to_vec())
                    } else {
                        (items.len(), items)
                    };
                    let mut out = format!("{kind}{header}\r\n").into_bytes();
                    items.iter().for_each(|item| out.extend_from_slice(item));
                    out
                },
            )
        })
    }

    /// Integers and arrays of them, nested up to the fast path's depth: a script's answers.
    fn int_tree() -> impl Strategy<Value = Vec<u8>> {
        let leaf = any::<i64>().prop_map(|i| format!(":{i}\r\n").into_bytes());
        leaf.prop_recursive(super::FAST_DEPTH, 64, 8, |inner| {
            proptest::collection::vec(inner, 0..8).prop_map(|items| {
                let mut out = format!("*{}\r\n", items.len()).into_bytes();
                items.iter().for_each(|item| out.extend_from_slice(item));
                out
            })
        })
    }

    /// Bytes that look like RESP headers with extreme lengths, mixed with random bytes.
    fn hostile() -> impl Strategy<Value = Vec<u8>> {
        let header = (
            prop_oneof![
                Just(b'*'),
                Just(b'$'),
                Just(b'%'),
                Just(b'|'),
                Just(b'~'),
                Just(b'='),
                Just(b'!'),
                any::<u8>()
            ],
            prop_oneof![
                Just(i64::MAX),
                Just(i64::MIN),
                Just(i64::MAX / 2),
                Just(u32::MAX as i64),
                Just(-1),
                Just(-2),
                any::<i64>()
            ],
        )
            .prop_map(|(kind, n)| {
                let mut out = vec![kind];
                out.extend_from_slice(format!("{n}\r\n").as_bytes());
                out
            });
        proptest::collection::vec(prop_oneof![header, proptest::collection::vec(any::<u8>(), 0..8)], 1..8)
            .prop_map(|parts| parts.concat())
    }

    proptest! {
        // PROPTEST_CASES=1000000 for a long run (see the README).
        #![proptest_config(ProptestConfig { cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000), ..ProptestConfig::default() })]

        #[test]
        fn valid_replies_frame_exactly_and_prefixes_wait(reply in value(), trailing in proptest::collection::vec(any::<u8>(), 0..8)) {
            let mut buf = reply.clone();
            buf.extend_from_slice(&trailing);
            prop_assert_eq!(frame_len(&buf), Ok(Some(reply.len())));
            for cut in 0..reply.len() {
                prop_assert_eq!(frame_len(&reply[..cut]), Ok(None));
            }
            let _ = parse_frame(&reply);
        }

        #[test]
        fn integer_trees_read_as_the_general_parser_reads_them(reply in int_tree()) {
            prop_assert_eq!(super::fast_ints(&reply), Some(redis::parse_redis_value(&reply).unwrap()));
            prop_assert_eq!(parse_frame(&reply).unwrap(), redis::parse_redis_value(&reply).unwrap());
        }

        #[test]
        fn hostile_bytes_never_panic(buf in hostile()) {
            if let Ok(Some(len)) = frame_len(&buf) {
                prop_assert!(len <= buf.len());
                let _ = parse_frame(&buf[..len]);
            }
        }

        #[test]
        fn random_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(Some(len)) = frame_len(&buf) {
                prop_assert!(len <= buf.len());
                let _ = parse_frame(&buf[..len]);
            }
        }
    }
}
