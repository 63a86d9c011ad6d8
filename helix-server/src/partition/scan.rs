//! State derived from a partition's log at start: idempotent-producer
//! sequences and the batch with the largest timestamp. Reads batch headers
//! only, a bounded chunk at a time.

use helix_wal::LogReader;

use super::batch::BatchHeader;
use super::producers::ProducerTable;
use crate::error::Result;

/// Bytes read per step of the scan.
const SCAN_CHUNK: usize = 1 << 20;

/// The batch holding the largest timestamp: (its base offset, timestamp).
pub type MaxTimestamp = Option<(i64, i64)>;

/// Scans the log from its start to `end` (exclusive).
pub fn rebuild(reader: &LogReader, end: i64) -> Result<(ProducerTable, MaxTimestamp)> {
    let mut headers = Vec::new();
    let mut max_ts: MaxTimestamp = None;
    let mut offset = reader.log_start_offset();
    while offset < end {
        let chunk = reader.read(offset, SCAN_CHUNK)?;
        if chunk.bytes.is_empty() {
            // An empty segment tail: continue from where the read says.
            if chunk.next_offset <= offset {
                break;
            }
            offset = chunk.next_offset;
            continue;
        }
        let mut pos = 0usize;
        while pos < chunk.bytes.len() {
            let h = BatchHeader::parse(&chunk.bytes[pos..])?;
            if max_ts.is_none_or(|(_, ts)| h.max_timestamp > ts) {
                max_ts = Some((h.base_offset, h.max_timestamp));
            }
            pos += h.size;
            headers.push(h);
        }
        offset = chunk.next_offset;
    }
    Ok((ProducerTable::rebuild(&headers), max_ts))
}
