//! helix-wal: the on-disk log of one Kafka partition.
//!
//! Segments hold Kafka v2 record batches exactly as they are served to
//! consumers, so Fetch never re-encodes. Every batch group is tagged with the
//! Raft position (term, index) of the entry that carried it. No networking and
//! no Raft live here; the server's apply step is the only writer.
