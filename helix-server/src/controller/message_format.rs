//! The values Kafka 3.9 accepts for the deprecated topic config
//! `message.format.version` (its `MetadataVersionValidator`): a release
//! ("0.10.0", "2.8", "3.9") or an internal version ("0.10.0-IV1",
//! "3.0-IV1"), with any further version segments ignored ("0.10.0.0" is
//! "0.10.0", "3.0.1" is "3.0"). Since inter-broker protocol 3.0 Kafka
//! ignores the setting (all data is message format v2); so does Helix,
//! which stores and describes what was set (issue 30 item 5).

/// Releases up to Kafka 3.9's latest production version, each with its
/// internal versions ("" where a release had none). 4.0's internal versions
/// exist in 3.9 but are not production: only their "-IV" form is accepted.
const RELEASES: &[(&str, &[&str])] = &[
    ("0.8.0", &[""]),
    ("0.8.1", &[""]),
    ("0.8.2", &[""]),
    ("0.9.0", &[""]),
    ("0.10.0", &["IV0", "IV1"]),
    ("0.10.1", &["IV0", "IV1", "IV2"]),
    ("0.10.2", &["IV0"]),
    ("0.11.0", &["IV0", "IV1", "IV2"]),
    ("1.0", &["IV0"]),
    ("1.1", &["IV0"]),
    ("2.0", &["IV0", "IV1"]),
    ("2.1", &["IV0", "IV1", "IV2"]),
    ("2.2", &["IV0", "IV1"]),
    ("2.3", &["IV0", "IV1"]),
    ("2.4", &["IV0", "IV1"]),
    ("2.5", &["IV0"]),
    ("2.6", &["IV0"]),
    ("2.7", &["IV0", "IV1", "IV2"]),
    ("2.8", &["IV0", "IV1"]),
    ("3.0", &["IV0", "IV1"]),
    ("3.1", &["IV0"]),
    ("3.2", &["IV0"]),
    ("3.3", &["IV0", "IV1", "IV2", "IV3"]),
    ("3.4", &["IV0"]),
    ("3.5", &["IV0", "IV1", "IV2"]),
    ("3.6", &["IV0", "IV1", "IV2"]),
    ("3.7", &["IV0", "IV1", "IV2", "IV3", "IV4"]),
    ("3.8", &["IV0"]),
    ("3.9", &["IV0"]),
];

/// Internal versions newer than the latest production release.
const UNRELEASED: &[&str] = &["4.0-IV0", "4.0-IV1"];

/// Whether Kafka 3.9 accepts `value` as a `message.format.version`.
pub fn is_valid(value: &str) -> bool {
    let segments: Vec<&str> = value.split('.').collect();
    let keep = if value.starts_with("0.") { 3 } else { 2 };
    let key = if segments.len() > keep {
        segments[..keep].join(".")
    } else {
        value.to_string()
    };
    UNRELEASED.contains(&key.as_str())
        || RELEASES.iter().any(|(release, internal)| {
            key == *release
                || internal
                    .iter()
                    .any(|iv| !iv.is_empty() && key == format!("{release}-{iv}"))
        })
}

#[cfg(test)]
mod tests {
    use super::is_valid;

    #[test]
    fn kafka_39_versions_are_accepted_and_others_refused() {
        for v in [
            "0.10.0",
            "0.10.0.0",
            "0.10.0-IV1",
            "0.8.2",
            "2.8",
            "3.0-IV1",
            "3.0.1",
            "3.9",
            "3.9-IV0",
            "4.0-IV1",
        ] {
            assert!(is_valid(v), "{v}");
        }
        for v in [
            "", "0.7.0", "0.10", "3.10", "4.0", "5.0", "IV0", "abc", "3.0-IV9",
        ] {
            assert!(!is_valid(v), "{v}");
        }
    }
}
