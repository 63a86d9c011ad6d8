//! SCRAM credentials as controller state (ADR 0028): every user's salt,
//! iterations, StoredKey and ServerKey per mechanism, replicated through
//! group 0 so every node's SASL authenticator reads the same table and it
//! survives restarts and controller failover. Never a password: the front
//! end turns AlterUserScramCredentials' salted password into the two keys
//! before the command is proposed.
//!
//! The request-level rules (duplicates, a deletion of a missing credential)
//! are checked by the front end against the view, as Kafka's
//! `ScramControlManager` does against its image; the command is checked
//! again here, deterministically, when it is applied.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{HelixError, Result};

/// Kafka's smallest accepted iteration count (`ScramMechanism.minIterations`).
pub const MIN_ITERATIONS: u32 = 4096;
/// Kafka's largest (`ScramControlManager.MAX_ITERATIONS`); also a bound on
/// the work one authentication may cost a node.
pub const MAX_ITERATIONS: u32 = 16384;
/// Most bytes of a salt (Kafka has no bound; a command stays small).
pub const MAX_SALT: usize = 1024;
/// Most bytes of a StoredKey or ServerKey (SHA-512's 64, with room).
const MAX_KEY: usize = 128;

/// A SCRAM mechanism as Kafka numbers them on the wire
/// (`ScramMechanism.type()`: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ScramMechanism {
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl ScramMechanism {
    /// The wire type; None for Kafka's UNKNOWN (0) and anything else.
    pub fn of_type(t: i8) -> Option<ScramMechanism> {
        match t {
            1 => Some(ScramMechanism::ScramSha256),
            2 => Some(ScramMechanism::ScramSha512),
            _ => None,
        }
    }

    pub fn wire_type(self) -> i8 {
        match self {
            ScramMechanism::ScramSha256 => 1,
            ScramMechanism::ScramSha512 => 2,
        }
    }
}

/// One stored credential: what RFC 5802 §3 lets a server keep.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredScram {
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

// Keys are secrets too: never printed by `{:?}`.
impl std::fmt::Debug for StoredScram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredScram")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// A credential set or replaced by a command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramUpsertion {
    pub user: String,
    pub mechanism: ScramMechanism,
    #[serde(flatten)]
    pub credential: StoredScram,
}

/// A credential removed by a command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramDeletion {
    pub user: String,
    pub mechanism: ScramMechanism,
}

/// One AlterUserScramCredentials request's accepted changes, applied
/// together (Kafka's records of one request are atomic too).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramAlteration {
    #[serde(default)]
    pub deletions: Vec<ScramDeletion>,
    #[serde(default)]
    pub upsertions: Vec<ScramUpsertion>,
}

/// Every user's credentials, by user then mechanism.
#[derive(Debug, Default, Clone)]
pub struct ScramTable {
    users: BTreeMap<String, BTreeMap<ScramMechanism, StoredScram>>,
}

impl ScramTable {
    pub fn get(&self, user: &str, mechanism: ScramMechanism) -> Option<&StoredScram> {
        self.users.get(user)?.get(&mechanism)
    }

    /// The user's mechanisms and iterations (empty: no credential).
    pub fn describe(&self, user: &str) -> Vec<(ScramMechanism, u32)> {
        self.users
            .get(user)
            .map(|m| m.iter().map(|(k, v)| (*k, v.iterations)).collect())
            .unwrap_or_default()
    }

    /// Every user with a credential, in name order.
    pub fn users(&self) -> impl Iterator<Item = &str> {
        self.users.keys().map(String::as_str)
    }

    /// Checks what applying `a` relies on; deterministic, so every node
    /// refuses the same commands.
    pub fn validate(&self, a: &ScramAlteration) -> Result<()> {
        let names = a
            .deletions
            .iter()
            .map(|d| &d.user)
            .chain(a.upsertions.iter().map(|u| &u.user));
        for (i, name) in names.clone().enumerate() {
            if name.is_empty() {
                return Err(HelixError::InvalidRequest("an empty user name".into()));
            }
            if names.clone().take(i).any(|n| n == name) {
                return Err(HelixError::InvalidRequest(format!(
                    "user {name} altered twice in one command"
                )));
            }
        }
        for u in &a.upsertions {
            let c = &u.credential;
            if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&c.iterations)
                || c.salt.is_empty()
                || c.salt.len() > MAX_SALT
                || c.stored_key.is_empty()
                || c.stored_key.len() > MAX_KEY
                || c.server_key.is_empty()
                || c.server_key.len() > MAX_KEY
            {
                return Err(HelixError::InvalidRequest(format!(
                    "user {}: not an acceptable credential",
                    u.user
                )));
            }
        }
        Ok(())
    }

    /// Applies a validated alteration. Deleting a credential that is gone
    /// already (a concurrent request removed it first) changes nothing.
    pub fn apply(&mut self, a: ScramAlteration) {
        for d in a.deletions {
            if let Some(m) = self.users.get_mut(&d.user) {
                m.remove(&d.mechanism);
                if m.is_empty() {
                    self.users.remove(&d.user);
                }
            }
        }
        for u in a.upsertions {
            self.users
                .entry(u.user)
                .or_default()
                .insert(u.mechanism, u.credential);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upsert(user: &str, iterations: u32) -> ScramUpsertion {
        ScramUpsertion {
            user: user.into(),
            mechanism: ScramMechanism::ScramSha256,
            credential: StoredScram {
                iterations,
                salt: vec![1; 16],
                stored_key: vec![2; 32],
                server_key: vec![3; 32],
            },
        }
    }

    #[test]
    fn credentials_are_set_replaced_and_deleted_and_never_printed() {
        let mut t = ScramTable::default();
        let a = ScramAlteration {
            deletions: vec![],
            upsertions: vec![upsert("alice", 8192)],
        };
        t.validate(&a).expect("valid");
        t.apply(a);
        assert_eq!(
            t.describe("alice"),
            vec![(ScramMechanism::ScramSha256, 8192)]
        );
        t.apply(ScramAlteration {
            deletions: vec![],
            upsertions: vec![upsert("alice", 4096)],
        });
        assert_eq!(
            t.get("alice", ScramMechanism::ScramSha256)
                .map(|c| c.iterations),
            Some(4096)
        );
        assert!(!format!("{t:?}").contains("stored_key"));
        let gone = ScramAlteration {
            deletions: vec![ScramDeletion {
                user: "alice".into(),
                mechanism: ScramMechanism::ScramSha256,
            }],
            upsertions: vec![],
        };
        t.apply(gone.clone());
        assert!(t.describe("alice").is_empty() && t.users().next().is_none());
        t.apply(gone); // already gone: nothing happens
    }

    #[test]
    fn unacceptable_commands_are_refused_at_apply() {
        let t = ScramTable::default();
        for bad in [
            vec![upsert("a", 100)],
            vec![upsert("a", 20000)],
            vec![upsert("", 4096)],
            vec![upsert("a", 4096), upsert("a", 4096)],
        ] {
            let a = ScramAlteration {
                deletions: vec![],
                upsertions: bad,
            };
            assert!(t.validate(&a).is_err(), "{a:?}");
        }
    }

    #[test]
    fn the_command_reads_as_json_with_mechanism_names() {
        let a = ScramAlteration {
            deletions: vec![],
            upsertions: vec![upsert("alice", 4096)],
        };
        let command = crate::controller::Command::AlterScramCredentials(a);
        let text = serde_json::to_string(&command).expect("json");
        assert!(
            text.contains("\"op\":\"alter_scram_credentials\""),
            "{text}"
        );
        assert!(text.contains("\"SCRAM-SHA-256\""), "{text}");
        assert_eq!(
            serde_json::from_str::<crate::controller::Command>(&text).expect("back"),
            command
        );
    }
}
