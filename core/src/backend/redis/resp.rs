//! RESP framing for connections the library reads itself (direct and driven connections):
//! where a reply ends, and a fast path for the replies scripts give (arrays of integers),
//! which skips the general parser.

use redis::{RedisResult, Value};

/// The length of the first whole RESP2/RESP3 value in `buf`: `Ok(None)` while incomplete.
pub(crate) fn frame_len(buf: &[u8]) -> std::result::Result<Option<usize>, String> {
    let mut pos = 0usize;
    // Values still to read: nested aggregates add their elements.
    let mut pending = 1u64;
    while pending > 0 {
        let Some(kind) = buf.get(pos).copied() else { return Ok(None) };
        let Some(line) = buf[pos..].windows(2).position(|w| w == b"\r\n") else { return Ok(None) };
        let header = &buf[pos + 1..pos + line];
        pos += line + 2;
        pending -= 1;
        let length = || -> std::result::Result<i64, String> {
            std::str::from_utf8(header)
                .ok()
                .and_then(|h| h.parse().ok())
                .ok_or_else(|| format!("bad length {:?}", String::from_utf8_lossy(header)))
        };
        match kind {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => {}
            b'$' | b'=' | b'!' => {
                let n = length()?;
                if n >= 0 {
                    pos += n as usize + 2;
                    if pos > buf.len() {
                        return Ok(None);
                    }
                }
            }
            b'*' | b'~' | b'>' => pending += length()?.max(0) as u64,
            b'%' => pending += 2 * length()?.max(0) as u64,
            // An attribute map comes before the value it describes.
            b'|' => pending += 2 * length()?.max(0) as u64 + 1,
            other => return Err(format!("unexpected type byte {other:#04x}")),
        }
    }
    Ok(Some(pos))
}

/// The value of one whole frame (see [`frame_len`]). Arrays of integers and integers, what
/// every script answers, are read here; anything else goes to redis-rs' parser.
pub(crate) fn parse_frame(frame: &[u8]) -> RedisResult<Value> {
    fast_ints(frame).map_or_else(|| redis::parse_redis_value(frame), Ok)
}

/// `:<i>\r\n` or `*<n>\r\n` followed by `n` of those; `None` for anything else.
fn fast_ints(frame: &[u8]) -> Option<Value> {
    let mut lines = frame.split(|&b| b == b'\n').filter(|l| !l.is_empty());
    let int = |line: &[u8], kind: u8| -> Option<i64> {
        let digits = line.strip_prefix(&[kind])?.strip_suffix(b"\r")?;
        std::str::from_utf8(digits).ok()?.parse().ok()
    };
    let first = lines.next()?;
    if first.first() == Some(&b':') {
        return int(first, b':').map(Value::Int);
    }
    let count = usize::try_from(int(first, b'*')?).ok()?;
    let mut values = Vec::with_capacity(count);
    for _ in 0..count {
        values.push(Value::Int(int(lines.next()?, b':')?));
    }
    lines.next().is_none().then_some(Value::Array(values))
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
}
