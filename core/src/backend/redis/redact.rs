//! Redis URLs carry secrets (`redis://user:password@host`). Every URL the library shows — in an
//! error, a `Debug` form — passes through [`redact_url`] first, so a password never reaches a
//! log, a traceback or a terminal.

/// What stands in for a URL's user and password.
const HIDDEN: &str = "***";

/// `url` with its user and password replaced by `***`: `redis://alice:s3cret@host:6379/0` shows
/// as `redis://***@host:6379/0`; a URL without them is returned as is.
///
/// It works on text that is not a valid URL too (those are the ones errors show): everything
/// between the scheme's `://` (or the start of the text) and the last `@` is hidden. A raw
/// password may contain `/`, `:` or `@`, so the last `@` is the only safe end; hiding a path that
/// contains `@` as well is the safe side of the mistake. The user name is hidden with the
/// password, since `redis://TOKEN@host` puts a secret where the user name goes.
pub fn redact_url(url: &str) -> String {
    let Some(at) = url.rfind('@') else { return url.to_owned() };
    let start = url[..at].find("://").map_or(0, |scheme_end| scheme_end + 3);
    format!("{}{HIDDEN}{}", &url[..start], &url[at..])
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn user_and_password_are_hidden_whatever_they_contain() {
        assert_eq!(redact_url("redis://alice:s3cret@host:6379/0"), "redis://***@host:6379/0");
        assert_eq!(redact_url("rediss://:s3cret@host"), "rediss://***@host");
        assert_eq!(redact_url("redis://TOKEN@host"), "redis://***@host");
        assert_eq!(redact_url("redix://user:pa/ss@w:rd@host:1"), "redix://***@host:1");
        assert_eq!(redact_url("user:s3cret@host:6379"), "***@host:6379");
        assert_eq!(redact_url("redis://host:6379/0"), "redis://host:6379/0");
        assert_eq!(redact_url(""), "");
    }
}
