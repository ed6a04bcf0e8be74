//! One name, two specs: what the registry records of the spec each live process uses (see
//! `register.lua`: `pspec:<process>` = `"<fingerprint> <user>"`, `fp:<fingerprint>` = the spec),
//! read back as the conflict `limiters()` shows, and read before building a limiter under
//! [`crate::OnConflict::Raise`].

use std::collections::{BTreeMap, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};

use super::RedisBackend;
use crate::engine::LimiterSpec;
use crate::error::{Error, Result};
use crate::live::{client, conflict_warning};

/// How long a process counts as live after its last registration (they renew every minute).
const LIVE_MS: u64 = 180_000;

/// The specs live processes use, from a registry hash: spec → (users, processes), by spec.
fn specs_in_use(hash: &HashMap<String, String>, now_ms: u64) -> BTreeMap<String, (Vec<String>, Vec<String>)> {
    let live = |process: &str| {
        hash.get(&format!("proc:{process}"))
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|at| at + LIVE_MS >= now_ms)
    };
    let mut specs: BTreeMap<String, (Vec<String>, Vec<String>)> = BTreeMap::new();
    for (field, value) in hash {
        let Some(process) = field.strip_prefix("pspec:") else { continue };
        let Some((fp, user)) = value.split_once(' ') else { continue };
        let Some(spec) = hash.get(&format!("fp:{fp}")) else { continue };
        if !live(process) {
            continue;
        }
        let (users, processes) = specs.entry(spec.clone()).or_default();
        if !users.iter().any(|u| u == user) {
            users.push(user.to_owned());
        }
        processes.push(process.to_owned());
    }
    for (users, processes) in specs.values_mut() {
        users.sort();
        processes.sort();
    }
    specs
}

/// The conflict a registry hash shows when live processes use two or more specs: each spec with
/// who uses it and their processes. `None` with one spec (or none recorded).
pub(crate) fn spec_conflict(hash: &HashMap<String, String>, now_ms: u64) -> Option<String> {
    let specs = specs_in_use(hash, now_ms);
    if specs.len() < 2 {
        return None;
    }
    let each: Vec<String> = specs
        .iter()
        .map(|(spec, (users, processes))| format!("{spec} used by {} ({})", users.join(", "), processes.join(", ")))
        .collect();
    Some(format!("{} specs in use: {}", specs.len(), each.join("; ")))
}

impl RedisBackend {
    /// Under [`crate::OnConflict::Raise`]: fails, naming `spec`, when a live process uses
    /// `name` with another spec of the same kind (one read of the registry).
    pub(crate) async fn refuse_spec_conflict(&self, name: &str, spec: &LimiterSpec) -> Result<()> {
        let mine = spec.to_json();
        let hash = self.registry_entry(name).await?;
        if hash.get("kind").is_some_and(|k| k != spec.kind().as_str()) {
            return Ok(()); // another kind: the registry's one-name-one-kind rule reports it
        }
        let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let others = specs_in_use(&hash, now_ms).into_iter().find(|(spec, _)| *spec != mine);
        match others {
            None => Ok(()),
            Some((other, (users, processes))) => {
                let who = format!("{} ({})", users.join(", "), processes.join(", "));
                Err(Error::invalid(
                    "spec",
                    format!("{} (on_conflict is \"raise\")", conflict_warning(name, &mine, &client(), &other, &who)),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(fields: &[(&str, &str)]) -> HashMap<String, String> {
        fields.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn two_live_specs_are_a_conflict_naming_each_with_its_processes() {
        let now = 1_000_000;
        let hash = entry(&[
            ("proc:a:1", "999000"),
            ("proc:a:2", "999500"),
            ("proc:b:7", "998000"),
            ("proc:c:9", "1"), // gone
            ("pspec:a:1", "f20 python 3.11 on a"),
            ("pspec:a:2", "f20 python 3.11 on a"),
            ("pspec:b:7", "f10 node 20 on b"),
            ("pspec:c:9", "f30 rust on c"),
            ("fp:f20", r#"{"kind":"window","limit":20,"interval":60}"#),
            ("fp:f10", r#"{"kind":"window","limit":10,"interval":60}"#),
            ("fp:f30", r#"{"kind":"window","limit":30,"interval":60}"#),
        ]);
        let text = spec_conflict(&hash, now).expect("a conflict");
        assert!(text.starts_with("2 specs in use: "), "{text}");
        assert!(
            text.contains(r#"{"kind":"window","limit":20,"interval":60} used by python 3.11 on a (a:1, a:2)"#),
            "{text}"
        );
        assert!(text.contains(r#"{"kind":"window","limit":10,"interval":60} used by node 20 on b (b:7)"#), "{text}");
        assert!(!text.contains("limit\":30"), "a process gone is not in it: {text}");
        let one = entry(&[("proc:a:1", "999000"), ("pspec:a:1", "f20 python"), ("fp:f20", "{}")]);
        assert_eq!(spec_conflict(&one, now), None);
    }
}
