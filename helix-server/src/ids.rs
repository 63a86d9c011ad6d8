//! Random identifiers: topic ids, a single node's cluster id, a node's
//! incarnation. They need uniqueness, not secrecy, so no random number
//! crate: the standard library's per-process hasher keys and the clock.

/// A random (v4-shaped) UUID from the standard library's per-process
/// random hasher keys and the clock; topic ids need uniqueness, not secrecy.
pub fn random_uuid() -> uuid::Uuid {
    use std::hash::{BuildHasher, Hasher};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut words = [0u64; 2];
    for (i, w) in words.iter_mut().enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(nanos);
        h.write_usize(i);
        *w = h.finish();
    }
    uuid::Builder::from_random_bytes(
        ((u128::from(words[0]) << 64) | u128::from(words[1])).to_be_bytes(),
    )
    .into_uuid()
}
