//! The cleaner's key map (Kafka's dedupe buffer, `SkimpyOffsetMap`): the
//! latest offset of every key seen in the dirty range, bounded in bytes
//! (`log.cleaner.dedupe.buffer.size` × `log.cleaner.io.buffer.load.factor`).
//!
//! A key is stored as a 128-bit digest (two SipHash digests of the key with
//! different prefixes, from std's `DefaultHasher`, whose keys are fixed),
//! never as its bytes, so every key costs the same [`KeyMap::BYTES_PER_KEY`]
//! whatever its length. Two keys with the same digest would make the older
//! of two live records look superseded; at 128 bits that is negligible
//! (Kafka's map uses a 16-byte MD5 for the same reason). The map is local
//! to one cleaning pass and never leaves the replica, so the digest need
//! only be stable within one process.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hasher};

/// A key's 128-bit digest.
type Digest = (u64, u64);

/// The latest offset per key of a range, with a bound on how many keys.
#[derive(Debug)]
pub struct KeyMap {
    latest: HashMap<Digest, i64>,
    /// Most distinct keys held; a new key past it is refused ([`Full`]).
    max_keys: usize,
}

/// The map holds as many keys as its byte bound allows; the key offered
/// was not added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

impl KeyMap {
    /// What one key costs against the bound: a 16-byte digest and an
    /// 8-byte offset (Kafka's `SkimpyOffsetMap` counts 16 + 8 the same way).
    pub const BYTES_PER_KEY: usize = 24;

    /// A map for at most `bytes × load_factor / BYTES_PER_KEY` keys
    /// (at least one). `load_factor` is clamped to (0, 1].
    pub fn with_capacity_bytes(bytes: usize, load_factor: f64) -> KeyMap {
        let load = if load_factor > 0.0 {
            load_factor.min(1.0)
        } else {
            1.0
        };
        let max_keys = ((bytes as f64 * load) as usize / Self::BYTES_PER_KEY).max(1);
        KeyMap {
            latest: HashMap::new(),
            max_keys,
        }
    }

    /// Records `offset` as the latest of `key`. A key already held is
    /// always updated; a new one only while there is room.
    pub fn insert(&mut self, key: &[u8], offset: i64) -> Result<(), Full> {
        let digest = digest(key);
        if let Some(latest) = self.latest.get_mut(&digest) {
            *latest = (*latest).max(offset);
            return Ok(());
        }
        if self.latest.len() >= self.max_keys {
            return Err(Full);
        }
        self.latest.insert(digest, offset);
        Ok(())
    }

    /// The latest offset recorded for `key`.
    pub fn get(&self, key: &[u8]) -> Option<i64> {
        self.latest.get(&digest(key)).copied()
    }

    /// Distinct keys held.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn len(&self) -> usize {
        self.latest.len()
    }

    #[cfg_attr(not(test), allow(dead_code))]
    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }

    /// Most distinct keys this map may hold.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }
}

fn digest(key: &[u8]) -> Digest {
    let half = |prefix: u8| {
        let mut h = DefaultHasher::new();
        h.write_u8(prefix);
        h.write(key);
        h.finish()
    };
    (half(0), half(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_offset_of_a_key_wins() {
        let mut m = KeyMap::with_capacity_bytes(1 << 10, 1.0);
        assert!(m.is_empty());
        m.insert(b"k", 3).unwrap();
        m.insert(b"k", 9).unwrap();
        m.insert(b"k", 5).unwrap();
        assert_eq!(m.get(b"k"), Some(9));
        assert_eq!(m.get(b"other"), None);
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn the_byte_bound_limits_new_keys_not_updates() {
        let mut m = KeyMap::with_capacity_bytes(3 * KeyMap::BYTES_PER_KEY, 1.0);
        assert_eq!(m.max_keys(), 3);
        for (i, k) in [b"a", b"b", b"c"].iter().enumerate() {
            m.insert(*k, i as i64).unwrap();
        }
        assert_eq!(m.insert(b"d", 10), Err(Full));
        assert_eq!(m.get(b"d"), None);
        m.insert(b"a", 11).unwrap();
        assert_eq!(m.get(b"a"), Some(11));
    }

    #[test]
    fn the_load_factor_shrinks_the_map() {
        let m = KeyMap::with_capacity_bytes(100 * KeyMap::BYTES_PER_KEY, 0.9);
        assert_eq!(m.max_keys(), 90);
        assert_eq!(KeyMap::with_capacity_bytes(0, 0.9).max_keys(), 1);
    }
}
