//! SCRAM credentials as stored: salt, iterations, StoredKey and ServerKey
//! (RFC 5802 §3), never a password. Two sources (ADR 0028): the
//! controller's replicated table (AlterUserScramCredentials, kept by
//! every node's applier) and the node's users file (`sasl_users_file`,
//! written by `helix-server scram-credential`). For a user and mechanism
//! the replicated credential wins; the file's is used when the table has
//! none, so the file seeds the first users (an administrator who then
//! creates the others) and stays a way in while the table is empty.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

use crate::controller::scram::{ScramMechanism, StoredScram};
use crate::controller::service::Controller;

/// The hash a SCRAM mechanism is built on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScramHash {
    Sha256,
    Sha512,
}

pub use crate::controller::scram::{MAX_ITERATIONS, MIN_ITERATIONS};

impl ScramHash {
    pub fn of_mechanism(name: &str) -> Option<ScramHash> {
        match name {
            "SCRAM-SHA-256" => Some(ScramHash::Sha256),
            "SCRAM-SHA-512" => Some(ScramHash::Sha512),
            _ => None,
        }
    }

    pub fn of_stored(m: ScramMechanism) -> ScramHash {
        match m {
            ScramMechanism::ScramSha256 => ScramHash::Sha256,
            ScramMechanism::ScramSha512 => ScramHash::Sha512,
        }
    }

    pub fn stored(self) -> ScramMechanism {
        match self {
            ScramHash::Sha256 => ScramMechanism::ScramSha256,
            ScramHash::Sha512 => ScramMechanism::ScramSha512,
        }
    }

    pub fn mechanism(self) -> &'static str {
        match self {
            ScramHash::Sha256 => "SCRAM-SHA-256",
            ScramHash::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => Sha256::digest(data).to_vec(),
            ScramHash::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    pub fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        // HMAC takes keys of any length: `new_from_slice` cannot fail.
        match self {
            ScramHash::Sha256 => Hmac::<Sha256>::new_from_slice(key)
                .map(|m| m.chain_update(data).finalize().into_bytes().to_vec())
                .unwrap_or_default(),
            ScramHash::Sha512 => Hmac::<Sha512>::new_from_slice(key)
                .map(|m| m.chain_update(data).finalize().into_bytes().to_vec())
                .unwrap_or_default(),
        }
    }

    /// RFC 5802's Hi(): PBKDF2 with this hash's HMAC.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => {
                pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password, salt, iterations).to_vec()
            }
            ScramHash::Sha512 => {
                pbkdf2::pbkdf2_hmac_array::<Sha512, 64>(password, salt, iterations).to_vec()
            }
        }
    }
}

/// One user's credential for one SCRAM mechanism.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub hash: ScramHash,
    pub salt: Vec<u8>,
    pub iterations: u32,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

// Keys are secrets too: a credential is never printed by `{:?}`.
impl std::fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramCredential")
            .field("hash", &self.hash)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl ScramCredential {
    /// The credential of `password` with `salt`.
    pub fn derive(hash: ScramHash, password: &str, salt: Vec<u8>, iterations: u32) -> Self {
        let salted = hash.salted_password(password.as_bytes(), &salt, iterations);
        ScramCredential::of_salted_password(hash, &salted, salt, iterations)
    }

    /// The credential of a salted password (RFC 5802's SaltedPassword, what
    /// Kafka's AlterUserScramCredentials carries): the keys, not it.
    pub fn of_salted_password(
        hash: ScramHash,
        salted: &[u8],
        salt: Vec<u8>,
        iterations: u32,
    ) -> Self {
        let client_key = hash.hmac(salted, b"Client Key");
        ScramCredential {
            hash,
            stored_key: hash.hash(&client_key),
            server_key: hash.hmac(salted, b"Server Key"),
            salt,
            iterations,
        }
    }

    /// The form the controller stores.
    pub fn into_stored(self) -> StoredScram {
        StoredScram {
            iterations: self.iterations,
            salt: self.salt,
            stored_key: self.stored_key,
            server_key: self.server_key,
        }
    }

    fn of_stored(hash: ScramHash, s: &StoredScram) -> Self {
        ScramCredential {
            hash,
            salt: s.salt.clone(),
            iterations: s.iterations,
            stored_key: s.stored_key.clone(),
            server_key: s.server_key.clone(),
        }
    }

    /// Whether `password` is the one this credential was derived from
    /// (SASL/PLAIN), compared in constant time.
    pub fn matches_password(&self, password: &str) -> bool {
        let again =
            ScramCredential::derive(self.hash, password, self.salt.clone(), self.iterations);
        bool::from(again.stored_key.ct_eq(&self.stored_key))
    }

    /// A users-file entry for this credential.
    pub fn to_toml(&self, user: &str) -> String {
        format!(
            "[[scram]]\nuser = {user:?}\nmechanism = {:?}\niterations = {}\nsalt = {:?}\nstored_key = {:?}\nserver_key = {:?}\n",
            self.hash.mechanism(),
            self.iterations,
            B64.encode(&self.salt),
            B64.encode(&self.stored_key),
            B64.encode(&self.server_key),
        )
    }
}

/// The users file: `[[scram]]` entries.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UsersFile {
    #[serde(default)]
    scram: Vec<ScramEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScramEntry {
    user: String,
    mechanism: String,
    iterations: u32,
    salt: String,
    stored_key: String,
    server_key: String,
}

/// Every user's SCRAM credentials, by user and mechanism: the
/// controller's table first, then the users file.
#[derive(Debug, Default)]
pub struct Credentials {
    /// From the users file.
    scram: HashMap<(String, ScramHash), ScramCredential>,
    /// The controller, once the node has opened it.
    replicated: OnceLock<Arc<Controller>>,
}

impl Credentials {
    pub fn load(path: &Path) -> Result<Credentials, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Credentials::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Credentials, String> {
        let file: UsersFile = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut out = Credentials::default();
        for e in file.scram {
            let hash = ScramHash::of_mechanism(&e.mechanism)
                .ok_or_else(|| format!("user {}: unknown mechanism {}", e.user, e.mechanism))?;
            if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&e.iterations) {
                return Err(format!(
                    "user {}: iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}",
                    e.user
                ));
            }
            let b64 = |what: &str, s: &str| {
                B64.decode(s)
                    .map_err(|_| format!("user {}: {what} is not base64", e.user))
            };
            let credential = ScramCredential {
                hash,
                salt: b64("salt", &e.salt)?,
                iterations: e.iterations,
                stored_key: b64("stored_key", &e.stored_key)?,
                server_key: b64("server_key", &e.server_key)?,
            };
            if out
                .scram
                .insert((e.user.clone(), hash), credential)
                .is_some()
            {
                return Err(format!("user {}: {} given twice", e.user, e.mechanism));
            }
        }
        Ok(out)
    }

    #[cfg(test)]
    pub fn insert(&mut self, user: &str, credential: ScramCredential) {
        self.scram
            .insert((user.to_string(), credential.hash), credential);
    }

    /// From here on the controller's replicated table is read first.
    pub fn attach(&self, controller: Arc<Controller>) {
        let _ = self.replicated.set(controller);
    }

    /// The user's credential for `hash`: the replicated one, else the file's.
    pub fn scram(&self, user: &str, hash: ScramHash) -> Option<ScramCredential> {
        let replicated = self.replicated.get().and_then(|c| {
            c.view()
                .view
                .scram
                .get(user, hash.stored())
                .map(|s| ScramCredential::of_stored(hash, s))
        });
        replicated.or_else(|| self.scram.get(&(user.to_string(), hash)).cloned())
    }

    /// SASL/PLAIN: whether `password` is `user`'s, checked against the
    /// user's SCRAM-SHA-512 credential, else its SCRAM-SHA-256 one.
    pub fn check_password(&self, user: &str, password: &str) -> bool {
        [ScramHash::Sha512, ScramHash::Sha256]
            .iter()
            .find_map(|h| self.scram(user, *h))
            .is_some_and(|c| c.matches_password(password))
    }
}

/// A fresh random salt, 32 bytes.
pub fn random_salt() -> Vec<u8> {
    rand::random::<[u8; 32]>().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_round_trips_through_the_users_file_and_checks_passwords() {
        let c = ScramCredential::derive(ScramHash::Sha512, "s3cret", random_salt(), 4096);
        let creds = Credentials::parse(&c.to_toml("alice")).expect("parses");
        assert_eq!(creds.scram("alice", ScramHash::Sha512), Some(c.clone()));
        assert!(creds.check_password("alice", "s3cret"));
        assert!(!creds.check_password("alice", "wrong"));
        assert!(!creds.check_password("bob", "s3cret"));
        assert!(!format!("{c:?}").contains("stored"));
    }

    #[test]
    fn rfc_7677_test_vector_derives_the_same_keys() {
        // RFC 7677 §3: user "user", password "pencil", salt, 4096 iterations.
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").expect("b64");
        let c = ScramCredential::derive(ScramHash::Sha256, "pencil", salt, 4096);
        let auth = "n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let server_signature = ScramHash::Sha256.hmac(&c.server_key, auth.as_bytes());
        assert_eq!(
            B64.encode(server_signature),
            "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
    }
}
