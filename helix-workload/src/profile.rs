//! Profiles: TOML files in `profiles/` that say what load to offer and how
//! to check it. The shipped ones are built into the binary, so `--profile
//! throughput` works from any directory; a path names any other file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::payload::HEADER_LEN;

/// The profiles in `profiles/`, by name, as they were when the tool was built.
pub const SHIPPED: &[(&str, &str)] = &[
    ("baseline", include_str!("../../profiles/baseline.toml")),
    ("throughput", include_str!("../../profiles/throughput.toml")),
    ("latency", include_str!("../../profiles/latency.toml")),
    ("stress", include_str!("../../profiles/stress.toml")),
    ("sustained", include_str!("../../profiles/sustained.toml")),
    ("consume", include_str!("../../profiles/consume.toml")),
    (
        "custom.example",
        include_str!("../../profiles/custom.example.toml"),
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("no profile named {0:?} (shipped: {1}); a file path works too")]
    Unknown(String, String),
    #[error("{file}: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    #[error("{file}: [{section}] {key}: {message}")]
    Invalid {
        file: String,
        section: &'static str,
        key: &'static str,
        message: String,
    },
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Profile {
    /// Where the profile came from (the file's name); set by `parse`, kept
    /// in a run's JSON report.
    pub source: String,
    pub cluster: Cluster,
    pub topic: Topic,
    pub producer: Producer,
    pub consumer: Consumer,
    pub execution: Execution,
    pub verify: Verify,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Cluster {
    pub nodes: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Topic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Producer {
    pub producers: u32,
    pub inflight: u32,
    pub message_size: usize,
    pub linger_ms: u32,
    pub acks: String,
    pub idempotence: bool,
    pub compression: String,
    pub keys: bool,
    /// Records per second offered by all producers together; 0 = unthrottled.
    pub rate: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Consumer {
    pub consumers: u32,
    pub group: String,
    pub isolation: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Execution {
    pub warmup_secs: u64,
    pub duration_secs: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Verify {
    pub enabled: bool,
}

impl Default for Cluster {
    fn default() -> Self {
        Cluster { nodes: 3 }
    }
}

impl Default for Topic {
    fn default() -> Self {
        Topic {
            name: "helix-workload".into(),
            partitions: 6,
            replication_factor: 3,
        }
    }
}

impl Default for Producer {
    fn default() -> Self {
        Producer {
            producers: 1,
            inflight: 100,
            message_size: 1024,
            linger_ms: 5,
            acks: "all".into(),
            idempotence: true,
            compression: "none".into(),
            keys: false,
            rate: 0,
        }
    }
}

impl Default for Consumer {
    fn default() -> Self {
        Consumer {
            consumers: 0,
            group: "helix-workload".into(),
            isolation: "read_committed".into(),
        }
    }
}

impl Default for Execution {
    fn default() -> Self {
        Execution {
            warmup_secs: 2,
            duration_secs: 10,
        }
    }
}

impl Default for Verify {
    fn default() -> Self {
        Verify { enabled: true }
    }
}

impl Profile {
    /// A shipped profile by name, or a TOML file by path.
    pub fn load(name_or_path: &str) -> Result<Profile, ProfileError> {
        let path = Path::new(name_or_path);
        if name_or_path.ends_with(".toml") || path.components().count() > 1 {
            let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Read {
                file: name_or_path.into(),
                source,
            })?;
            return Profile::parse(&text, name_or_path);
        }
        match SHIPPED.iter().find(|(name, _)| *name == name_or_path) {
            Some((name, text)) => Profile::parse(text, &format!("profiles/{name}.toml")),
            None => {
                let names: Vec<&str> = SHIPPED.iter().map(|(name, _)| *name).collect();
                Err(ProfileError::Unknown(name_or_path.into(), names.join(", ")))
            }
        }
    }

    /// Parses and checks a profile; `file` names it in every error.
    pub fn parse(text: &str, file: &str) -> Result<Profile, ProfileError> {
        let mut profile: Profile = toml::from_str(text).map_err(|e| ProfileError::Parse {
            file: file.into(),
            message: e.to_string(),
        })?;
        profile.source = file.into();
        profile.check()?;
        Ok(profile)
    }

    /// Every value in range; run again after command-line overrides.
    pub fn check(&self) -> Result<(), ProfileError> {
        let bad = |section, key, message| Err(self.invalid(section, key, message));
        let (p, c, t) = (&self.producer, &self.consumer, &self.topic);
        self.within("cluster", "nodes", self.cluster.nodes, 1, 9)?;
        if t.name.is_empty() || t.name.len() > 249 {
            return bad("topic", "name", "must be 1 to 249 characters".into());
        }
        self.within("topic", "partitions", t.partitions, 1, 10_000)?;
        self.within("topic", "replication_factor", t.replication_factor, 1, 9)?;
        self.within("producer", "producers", p.producers, 1, 256)?;
        self.within("producer", "inflight", p.inflight, 1, 1_000_000)?;
        self.within(
            "producer",
            "message_size",
            p.message_size,
            HEADER_LEN,
            1 << 20,
        )?;
        if p.linger_ms > 60_000 {
            return bad(
                "producer",
                "linger_ms",
                format!("{} is above 60000", p.linger_ms),
            );
        }
        if !["all", "1", "0"].contains(&p.acks.as_str()) {
            return bad(
                "producer",
                "acks",
                format!("{:?} is not \"all\", \"1\" or \"0\"", p.acks),
            );
        }
        if p.idempotence && p.acks != "all" {
            return bad("producer", "idempotence", "needs acks = \"all\"".into());
        }
        if !["none", "gzip", "snappy", "lz4", "zstd"].contains(&p.compression.as_str()) {
            let codec = &p.compression;
            return bad(
                "producer",
                "compression",
                format!("{codec:?} is not none, gzip, snappy, lz4 or zstd"),
            );
        }
        if c.consumers > 256 {
            return bad(
                "consumer",
                "consumers",
                format!("{} is above 256", c.consumers),
            );
        }
        if c.group.is_empty() {
            return bad("consumer", "group", "must not be empty".into());
        }
        if !["read_committed", "read_uncommitted"].contains(&c.isolation.as_str()) {
            let isolation = &c.isolation;
            return bad(
                "consumer",
                "isolation",
                format!("{isolation:?} is not read_committed or read_uncommitted"),
            );
        }
        self.within(
            "execution",
            "duration_secs",
            self.execution.duration_secs,
            1,
            86_400,
        )?;
        if self.execution.warmup_secs > 3_600 {
            let secs = self.execution.warmup_secs;
            return bad("execution", "warmup_secs", format!("{secs} is above 3600"));
        }
        Ok(())
    }

    /// `value` within `low..=high`, else an error naming the key.
    fn within<T: PartialOrd + std::fmt::Display>(
        &self,
        section: &'static str,
        key: &'static str,
        value: T,
        low: T,
        high: T,
    ) -> Result<(), ProfileError> {
        if low <= value && value <= high {
            return Ok(());
        }
        Err(self.invalid(
            section,
            key,
            format!("{value} is not between {low} and {high}"),
        ))
    }

    fn invalid(&self, section: &'static str, key: &'static str, message: String) -> ProfileError {
        ProfileError::Invalid {
            file: self.source.clone(),
            section,
            key,
            message,
        }
    }
}

/// The `profiles/` folder of the source tree (for tests and scripts).
pub fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_profile_parses_and_is_built_in() {
        let mut on_disk = 0;
        for entry in std::fs::read_dir(source_dir()).unwrap() {
            let path = entry.unwrap().path();
            let name = path
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .trim_end_matches(".toml")
                .to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            let profile = Profile::parse(&text, &path.display().to_string()).unwrap();
            assert_eq!(
                Profile::load(&name).unwrap().producer,
                profile.producer,
                "{name}"
            );
            on_disk += 1;
        }
        assert_eq!(
            on_disk,
            SHIPPED.len(),
            "every file in profiles/ is in SHIPPED and back"
        );
    }

    #[test]
    fn the_issue_names_these_shapes() {
        let shape = |name| {
            let p = Profile::load(name).unwrap();
            (
                p.producer.producers,
                p.producer.inflight,
                p.execution.duration_secs,
                p.producer.rate,
            )
        };
        assert_eq!(shape("baseline"), (1, 100, 5, 0));
        assert_eq!(shape("throughput"), (6, 2000, 10, 0));
        assert_eq!(shape("latency"), (4, 100, 10, 20_000));
        assert_eq!(shape("stress"), (12, 4000, 30, 0));
        assert_eq!(shape("sustained"), (6, 1000, 60, 0));
        assert!(Profile::load("consume").unwrap().consumer.consumers > 0);
    }

    fn error(text: &str) -> String {
        Profile::parse(text, "bad.toml").unwrap_err().to_string()
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let e = error("[producer]\nproducer = 3\n");
        assert!(
            e.starts_with("bad.toml:") && e.contains("unknown field `producer`"),
            "{e}"
        );
        let e = error("[topics]\npartitions = 3\n");
        assert!(e.contains("unknown field `topics`"), "{e}");
    }

    #[test]
    fn bad_values_are_refused_by_name() {
        assert_eq!(
            error("[producer]\nacks = \"2\"\n"),
            "bad.toml: [producer] acks: \"2\" is not \"all\", \"1\" or \"0\""
        );
        assert_eq!(
            error("[producer]\nmessage_size = 8\n"),
            "bad.toml: [producer] message_size: 8 is not between 36 and 1048576"
        );
        assert_eq!(
            error("[execution]\nduration_secs = 0\n"),
            "bad.toml: [execution] duration_secs: 0 is not between 1 and 86400"
        );
        assert_eq!(
            error("[topic]\npartitions = 0\n"),
            "bad.toml: [topic] partitions: 0 is not between 1 and 10000"
        );
        assert_eq!(
            error("[producer]\nacks = \"1\"\n"),
            "bad.toml: [producer] idempotence: needs acks = \"all\""
        );
        assert_eq!(
            error("[producer]\ncompression = \"brotli\"\n"),
            "bad.toml: [producer] compression: \"brotli\" is not none, gzip, snappy, lz4 or zstd"
        );
        let e = error("[producer]\nproducers = \"six\"\n");
        assert!(e.contains("producers") && e.contains("invalid type"), "{e}");
        assert!(
            Profile::load("nonesuch")
                .unwrap_err()
                .to_string()
                .contains("no profile named \"nonesuch\"")
        );
        let e = Profile::load("/nonexistent/x.toml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("/nonexistent/x.toml:"), "{e}");
    }
}
