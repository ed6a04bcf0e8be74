//! A spec in plain words, as the core words it ([`LimiterConfig::words`]: each kind words its
//! own fields, in its engine's file): "1,000 per hour", "5 per second, bursts of 10", "2 at
//! once, reclaimed after 30 s". `limits` prints these and the Limits page shows them (the
//! server sends them beside each spec: the page knows no kind); `limits --json` keeps the
//! spec's JSON.

use ratekeeper::LimiterConfig;

/// A spec (the registry's JSON) in words; the spec itself, compact, for a kind (or a shape) this
/// version does not know.
pub fn spec_words(spec: &str) -> String {
    match LimiterConfig::from_json(spec) {
        Ok(config) => config.words(),
        Err(_) => serde_json::from_str::<serde_json::Value>(spec).map_or_else(|_| spec.to_owned(), |v| v.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::spec_words;

    /// The core words every kind (see `engine/words.rs` there); a spec it cannot read stays JSON.
    #[test]
    fn specs_read_as_the_core_words_them_and_others_stay_json() {
        let cases = [
            (r#"{"kind":"window","limit":1000,"interval":3600}"#, "1,000 per hour"),
            (
                r#"{"kind":"token_bucket","rate":5,"capacity":10,"shadow":true}"#,
                "5 per second, bursts of 10, in shadow mode",
            ),
            (r#"{"kind":"someday","x":1}"#, r#"{"kind":"someday","x":1}"#),
            (r#"{ "kind": "someday" }"#, r#"{"kind":"someday"}"#),
            ("not json", "not json"),
        ];
        for (spec, words) in cases {
            assert_eq!(spec_words(spec), words, "{spec}");
        }
    }
}
