//! The read side of a partition's handle: batches up to the high
//! watermark (read_uncommitted) or the last stable offset (read_committed,
//! ADR 0026), the aborted transactions a read_committed fetch is told
//! about, and the scrubber's re-verifying read. Reads go straight to the
//! WAL reader, bounded by what the shard publishes.

use bytes::Bytes;
use helix_wal::LogReader;

use super::{Partition, batch, markers};
use crate::error::{HelixError, Result};
use crate::offset::Offset;

impl Partition {
    /// Whole batches from `from`, at most `max_bytes` (at least one batch),
    /// never past the high watermark. The bytes are the WAL's own slices.
    /// Between the high watermark and the log end the answer is empty, not
    /// out of range: a new leader may not have learned yet what its
    /// predecessor acknowledged (Kafka answers the same way).
    pub fn read(&self, from: Offset, max_bytes: usize) -> Result<Bytes> {
        self.read_with(from.0, max_bytes, self.high_watermark().0, LogReader::read)
    }

    /// [`Partition::read`] for read_committed consumers: never at or past
    /// the last stable offset (`offset < lso`: the batch holding the first
    /// offset of an open transaction is not returned).
    pub fn read_committed(&self, from: Offset, max_bytes: usize) -> Result<Bytes> {
        let lso = self.last_stable_offset().0;
        self.read_with(from.0, max_bytes, lso, LogReader::read)
    }

    /// What read_committed consumers may read, exclusive: the high
    /// watermark held back by open transactions (ADR 0026). Equal to the
    /// high watermark when the partition has none. A transaction whose
    /// first records were removed holds it at the log start (Kafka's
    /// clamp in `maybeIncrementFirstUnstableOffset`).
    pub fn last_stable_offset(&self) -> Offset {
        let hw = self.high_watermark();
        let unstable = self
            .published
            .first_unstable
            .load(std::sync::atomic::Ordering::Acquire);
        if unstable == i64::MAX {
            return hw;
        }
        hw.min(Offset(unstable.max(self.log_start_offset().0)))
    }

    /// The aborted transactions a read_committed fetch of `[from, upper)`
    /// must be told about (Kafka's `collectAbortedTransactions`); an error
    /// when a chunk file of them cannot be read (`txn_index::overlapping`).
    pub fn try_aborted_transactions(
        &self,
        from: Offset,
        upper: Offset,
    ) -> Result<Vec<markers::AbortedTxn>> {
        super::txn_index::overlapping(&self.published.aborted, from.0, upper.0)
    }

    /// [`Partition::try_aborted_transactions`], for tests.
    #[cfg(test)]
    pub fn aborted_transactions(&self, from: Offset, upper: Offset) -> Vec<markers::AbortedTxn> {
        self.try_aborted_transactions(from, upper)
            .expect("aborted index")
    }

    /// [`Partition::read`] through `wal_read` (the WAL's read, or the
    /// scrubber's re-verifying one).
    fn read_with(
        &self,
        from: i64,
        max_bytes: usize,
        bound: i64,
        wal_read: fn(&LogReader, i64, usize) -> helix_wal::Result<helix_wal::ReadResult>,
    ) -> Result<Bytes> {
        let hw = self.high_watermark().0;
        let reader = self.reader();
        if from < reader.log_start_offset() || from > hw.max(reader.next_offset()) {
            return Err(HelixError::OffsetOutOfRange);
        }
        let bound = bound.min(hw);
        if from >= bound {
            return Ok(Bytes::new());
        }
        let read = wal_read(&reader, from, max_bytes).map_err(|e| self.found(e))?;
        if read.next_offset <= bound {
            return Ok(read.bytes);
        }
        // The read reached applied but unacknowledged batches, or an open
        // transaction: cut them off at a batch boundary (a slice, no copy;
        // both bounds are batch boundaries).
        let mut end = 0usize;
        while end < read.bytes.len() {
            let h = batch::parse_header(&read.bytes[end..])?;
            if h.base_offset >= bound {
                break;
            }
            end += h.total_len();
        }
        Ok(read.bytes.slice(..end))
    }

    /// A read failed: if its bytes are damaged, the replica stops taking
    /// writes (acknowledging past damage would hand out offsets no one can
    /// read), says so once, and counts it.
    pub(crate) fn found(&self, e: helix_wal::WalError) -> HelixError {
        if let helix_wal::WalError::Corrupt {
            file,
            position,
            reason,
        } = &e
            && self.published.damaged.set(e.to_string()).is_ok()
        {
            crate::metrics::Metrics::count(&crate::metrics::metrics().counters.damaged_replicas, 1);
            tracing::error!(
                group = self.group.0,
                partition = self.index,
                file = %file.display(),
                position,
                %reason,
                "damaged data found on read: this replica takes no more writes; reads before the damage are still served"
            );
        }
        e.into()
    }

    /// Whether a read found damaged data (the replica takes no writes).
    pub fn damaged(&self) -> Option<&str> {
        self.published.damaged.get().map(String::as_str)
    }

    /// The scrubber's read: [`Partition::read`] with every batch's CRC
    /// checked again on the stored bytes, even where this process verified
    /// them before. Damage is recorded as on any read (the replica takes no
    /// more writes; in a cluster it stands down).
    pub fn scrub(&self, from: Offset, max_bytes: usize) -> Result<Bytes> {
        self.read_with(
            from.0,
            max_bytes,
            self.high_watermark().0,
            LogReader::reverify,
        )
    }
}
