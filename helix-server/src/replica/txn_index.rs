//! The aborted index's chunk files (Kafka's `.txnindex`, ADR 0026 "A
//! bounded aborted index"): `<partition>/txnindex/<first marker:020>.txnindex`,
//! one per [`TAIL_ENTRIES`] aborted transactions, written once (temporary
//! file, fsync, rename, directory fsync) before any snapshot can name it.
//!
//! Layout: `HXTXNIX1`, then per entry `producer_id i64 | first_offset i64 |
//! last_offset i64` (big-endian), then the CRC-32C of all of it. A chunk
//! is trusted only as the snapshot (or the running replica) describes it:
//! same count, same CRC. A file no description names (sealed after the
//! snapshot a restart used, or left by a cut log) is removed; one that is
//! missing or damaged is rebuilt from the log's records (a fresh producer
//! table over the chunk's range), so the index stays a function of the log.

use std::path::{Path, PathBuf};

use helix_wal::LogReader;

use super::aborted_index::{AbortedIndex, SealedChunk};
use super::markers::AbortedTxn;
use super::producers::ProducerTable;
use crate::error::{HelixError, Result};

#[cfg(doc)]
use super::aborted_index::TAIL_ENTRIES;

const DIR: &str = "txnindex";
const EXT: &str = "txnindex";
const MAGIC: &[u8; 8] = b"HXTXNIX1";
const ENTRY_BYTES: usize = 24;

/// Bytes read per step when a chunk is rebuilt from the log.
const SCAN_CHUNK: usize = 1 << 20;

/// What readers of a replica see of its index (`Published::aborted`): the
/// chunk descriptions and tail, and where the chunk files are.
#[derive(Debug, Default)]
pub struct AbortedView {
    pub dir: PathBuf,
    pub index: AbortedIndex,
}

/// The chunk directory of the partition in `partition_dir`.
pub fn dir_of(partition_dir: &Path) -> PathBuf {
    partition_dir.join(DIR)
}

fn path_of(dir: &Path, first_marker: i64) -> PathBuf {
    dir.join(format!("{first_marker:020}.{EXT}"))
}

fn encode(entries: &[AbortedTxn]) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAGIC.len() + entries.len() * ENTRY_BYTES + 4);
    out.extend_from_slice(MAGIC);
    for a in entries {
        out.extend_from_slice(&a.producer_id.to_be_bytes());
        out.extend_from_slice(&a.first_offset.to_be_bytes());
        out.extend_from_slice(&a.last_offset.to_be_bytes());
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

fn damaged(path: &Path, why: &str) -> HelixError {
    HelixError::CorruptState(format!("{}: {why}", path.display()))
}

/// Writes `entries` (non-empty, marker order) as a chunk file, durably.
fn write_chunk(dir: &Path, entries: &[AbortedTxn]) -> Result<SealedChunk> {
    use std::io::Write;
    let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
        return Err(HelixError::CorruptState("an empty aborted chunk".into()));
    };
    std::fs::create_dir_all(dir)?;
    let bytes = encode(entries);
    let path = path_of(dir, first.last_offset);
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&bytes)?;
    f.sync_data()?;
    std::fs::rename(&tmp, &path)?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(SealedChunk {
        first_marker: first.last_offset,
        last_marker: last.last_offset,
        min_first: entries.iter().map(|a| a.first_offset).min().unwrap_or(0),
        count: u32::try_from(entries.len()).unwrap_or(u32::MAX),
        crc: u32::from_be_bytes(bytes[bytes.len() - 4..].try_into().unwrap_or_default()),
    })
}

/// Seals the tail into a chunk file once it is full. A failure (a full
/// disk) keeps the tail in memory, logged; the next abort tries again.
pub fn seal_if_full(dir: &Path, index: &mut AbortedIndex) -> bool {
    if !index.full() {
        return false;
    }
    let entries: Vec<AbortedTxn> = index.tail.iter().copied().collect();
    match write_chunk(dir, &entries) {
        Ok(chunk) => {
            index.sealed.push(chunk);
            index.tail.clear();
            true
        }
        Err(e) => {
            tracing::error!(dir = %dir.display(), error = %e, "sealing aborted-index entries failed; kept in memory");
            false
        }
    }
}

/// The entries of `chunk`, checked against its description.
pub fn read_chunk(dir: &Path, chunk: &SealedChunk) -> Result<Vec<AbortedTxn>> {
    let path = path_of(dir, chunk.first_marker);
    let bytes = std::fs::read(&path)?;
    let count = usize::try_from(chunk.count).unwrap_or(usize::MAX);
    if bytes.len() != MAGIC.len() + count.saturating_mul(ENTRY_BYTES) + 4
        || &bytes[..MAGIC.len()] != MAGIC
    {
        return Err(damaged(&path, "length or magic"));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    let stored = u32::from_be_bytes(crc.try_into().unwrap_or_default());
    if stored != chunk.crc || crc32c::crc32c(body) != stored {
        return Err(damaged(&path, "checksum"));
    }
    let word = |b: &[u8]| i64::from_be_bytes(b.try_into().unwrap_or_default());
    Ok(body[MAGIC.len()..]
        .chunks_exact(ENTRY_BYTES)
        .map(|e| AbortedTxn {
            producer_id: word(&e[..8]),
            first_offset: word(&e[8..16]),
            last_offset: word(&e[16..24]),
        })
        .collect())
}

/// Removes every chunk file `index` does not name.
pub fn remove_unlisted(dir: &Path, index: &AbortedIndex) {
    let Ok(files) = std::fs::read_dir(dir) else {
        return;
    };
    let named: std::collections::HashSet<PathBuf> = index
        .sealed
        .iter()
        .map(|c| path_of(dir, c.first_marker))
        .collect();
    for f in files.flatten() {
        let path = f.path();
        if !named.contains(&path)
            && let Err(e) = std::fs::remove_file(&path)
        {
            tracing::warn!(file = %path.display(), error = %e, "cannot remove an aborted-index chunk");
        }
    }
}

/// Checks every chunk `index` names; one missing or damaged is rebuilt
/// from the log's records and written again.
pub fn repair(dir: &Path, reader: &LogReader, index: &mut AbortedIndex) -> Result<()> {
    for chunk in &mut index.sealed {
        if let Err(e) = read_chunk(dir, chunk) {
            let entries = rebuild_chunk(reader, chunk)?;
            tracing::warn!(dir = %dir.display(), first_marker = chunk.first_marker, error = %e, expected = chunk.count, rebuilt = entries.len(), "aborted-index chunk missing or damaged: rebuilt from the log");
            if entries.is_empty() {
                // Nothing of it is left in the log: an empty chunk.
                chunk.count = 0;
                chunk.crc = crc32c::crc32c(MAGIC);
                std::fs::create_dir_all(dir)?;
                std::fs::write(path_of(dir, chunk.first_marker), encode(&[]))?;
                continue;
            }
            *chunk = write_chunk(dir, &entries)?;
        }
    }
    Ok(())
}

/// The entries of `chunk` derived again from the log: a fresh table from
/// the chunk's first transaction's first offset (or the log start) to its
/// last marker; the aborts whose markers are in the chunk's range.
fn rebuild_chunk(reader: &LogReader, chunk: &SealedChunk) -> Result<Vec<AbortedTxn>> {
    let mut table = ProducerTable::default();
    let mut offset = chunk.min_first.max(reader.log_start_offset());
    let end = (chunk.last_marker + 1).min(reader.next_offset());
    while offset < end {
        let read = reader.read(offset, SCAN_CHUNK)?;
        let mut pos = 0usize;
        while pos < read.bytes.len() {
            let h = super::batch::parse_header(&read.bytes[pos..])?;
            let batch = read.bytes.get(pos..pos + h.total_len()).unwrap_or(&[]);
            super::producers::derive_from_stored(&mut table, &h, batch);
            pos += h.total_len();
        }
        if read.next_offset <= offset {
            break;
        }
        offset = read.next_offset;
    }
    Ok(table
        .aborted_index()
        .tail
        .iter()
        .filter(|a| (chunk.first_marker..=chunk.last_marker).contains(&a.last_offset))
        .copied()
        .collect())
}

/// Every entry of `index`, oldest first (chunks read from `dir`).
pub fn load_all(dir: &Path, index: &AbortedIndex) -> Result<Vec<AbortedTxn>> {
    let mut all = Vec::new();
    for chunk in &index.sealed {
        all.extend(read_chunk(dir, chunk)?);
    }
    all.extend(index.tail.iter().copied());
    Ok(all)
}

/// The entries of `index` a fetch of `[from, upper)` overlaps, oldest
/// first, reading only the chunks that may hold one.
pub fn collect(dir: &Path, index: &AbortedIndex, from: i64, upper: i64) -> Result<Vec<AbortedTxn>> {
    let mut found = Vec::new();
    for chunk in index.sealed.iter().filter(|c| c.may_overlap(from, upper)) {
        found.extend(
            read_chunk(dir, chunk)?
                .into_iter()
                .filter(|a| a.last_offset >= from && a.first_offset < upper),
        );
    }
    found.extend(super::markers::overlapping(&index.tail, from, upper));
    Ok(found)
}

/// The aborted transactions a fetch of `[from, upper)` must be told about
/// (Kafka's `collectAbortedTransactions`): the tail from memory, chunks
/// that may overlap read from their files. Takes the view's lock only to
/// copy what to read (the tail's overlap and the chunks' descriptions).
/// A chunk that cannot be read (removed by retention under the read, or
/// damaged since open) fails the read rather than answer a list short of
/// an aborted transaction, which a consumer would then deliver.
pub fn overlapping(
    view: &std::sync::RwLock<AbortedView>,
    from: i64,
    upper: i64,
) -> Result<Vec<AbortedTxn>> {
    let (dir, index) = {
        let v = view
            .read()
            .map_err(|_| HelixError::CorruptState("aborted index lock poisoned".into()))?;
        let sealed: Vec<SealedChunk> = v
            .index
            .sealed
            .iter()
            .filter(|c| c.may_overlap(from, upper))
            .copied()
            .collect();
        if sealed.is_empty() {
            return Ok(super::markers::overlapping(&v.index.tail, from, upper));
        }
        let tail = v
            .index
            .tail
            .iter()
            .filter(|a| a.last_offset >= from)
            .copied()
            .collect();
        (v.dir.clone(), AbortedIndex { sealed, tail })
    };
    collect(&dir, &index, from, upper).inspect_err(|e| {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot read an aborted-index chunk");
    })
}

/// Rewrites the index in `dir` as `entries` (marker order): every chunk
/// file goes, and the entries are sealed again as they fill chunks.
pub fn rewrite(dir: &Path, entries: Vec<AbortedTxn>) -> AbortedIndex {
    let mut index = AbortedIndex::default();
    remove_unlisted(dir, &index);
    for a in entries {
        index.push(a);
        seal_if_full(dir, &mut index);
    }
    index
}
