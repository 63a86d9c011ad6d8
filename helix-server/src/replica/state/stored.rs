//! The replica's side of stored entries (ADR 0027 §5): a follower caught
//! up from a compacted leader applies the leader's WAL entries with their
//! own base offsets, and raises its cleaner checkpoint over them once per
//! run of entries rather than once per entry.

use helix_raft::{Entry, EntryKind};
use helix_wal::RaftPosition;

use super::{PartitionState, live};
use crate::error::Result;
use crate::replica::{apply, entry};

impl PartitionState {
    /// Applies a stored entry (catch-up from a compacted leader): the
    /// transactions its markers end are recorded as an applied marker's.
    pub(super) fn apply_stored(
        &mut self,
        pos: RaftPosition,
        range: (i64, i64),
        batches: &bytes::Bytes,
    ) -> Result<()> {
        let mut max_ts = self
            .published
            .max_timestamp
            .lock()
            .map(|m| *m)
            .unwrap_or(None);
        let ended = apply::apply_stored(
            live(&mut self.log)?,
            &mut self.producers,
            pos,
            range,
            batches,
            &mut max_ts,
        )?;
        if let Ok(mut m) = self.published.max_timestamp.lock() {
            *m = max_ts;
        }
        for e in ended {
            self.txn_ended(&e.marker, e.first_offset, e.offset);
        }
        Ok(())
    }

    /// Before a run of entries is applied: the stored entries among them
    /// (catch-up from a compacted leader) may hold gaps, which the WAL
    /// accepts below its cleaner checkpoint; raised once for the run here
    /// rather than once per entry by `append_stored` (a durable write).
    /// The run is followed as apply will place it, entry by entry from the
    /// log's end, and stops at the first entry it cannot place, so the
    /// checkpoint never goes past what the run reaches (the cleaner reads
    /// a checkpoint past the log's end as none).
    pub(super) fn cover_stored_gaps(&mut self, entries: &[Entry]) -> Result<()> {
        // The common case, no stored entry, costs one byte read per entry.
        let Some(last) = entries
            .iter()
            .rposition(|e| entry::stored_range(&e.data).is_some())
        else {
            return Ok(());
        };
        let Some(log) = self.log.as_mut() else {
            return Ok(());
        };
        let mut at = log.next_offset();
        let mut covered = None;
        for e in &entries[..=last] {
            if let Some((first, next)) = entry::stored_range(&e.data) {
                if first != at || next < first {
                    break;
                }
                (at, covered) = (next, Some(next));
                continue;
            }
            match offsets_spanned(e) {
                Some(n) => at += n,
                None => break,
            }
        }
        match covered {
            Some(top) => Ok(log.cover_gaps_below(top)?),
            None => Ok(()),
        }
    }
}

/// How many offsets applying `e` takes (stored entries aside): what apply
/// assigns, from the entry alone. `None` when it does not decode.
fn offsets_spanned(e: &Entry) -> Option<i64> {
    if e.kind == EntryKind::Noop {
        return Some(0);
    }
    match entry::decode(e.data.clone()).ok()? {
        entry::PartitionEntry::Produce { data, .. } => {
            let (mut at, mut n) = (0usize, 0i64);
            while at < data.len() {
                let h = crate::replica::batch::parse_header(&data[at..]).ok()?;
                n += i64::from(h.record_count);
                at += h.total_len();
            }
            Some(n)
        }
        entry::PartitionEntry::DeleteRecords { .. } => Some(0),
        entry::PartitionEntry::Marker(_) => Some(1),
        entry::PartitionEntry::Stored { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use helix_raft::{LogIndex, Term};

    use super::*;
    use crate::replica::batch::tests::make_batch;
    use crate::replica::txn_tests::open_replica;

    fn normal(index: u64, data: Bytes) -> Entry {
        Entry {
            term: Term(1),
            index: LogIndex(index),
            kind: EntryKind::Normal,
            data,
        }
    }

    fn one_record() -> Bytes {
        entry::encode_produce(
            [vec![make_batch(&[b"v"], -1, -1, 10)]]
                .iter()
                .map(Vec::as_slice),
        )
    }

    #[test]
    fn a_run_of_stored_entries_raises_the_cleaner_checkpoint_once_to_its_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut r = open_replica(dir.path());
        let mut gapped = make_batch(&[b"g"], -1, -1, 10).to_vec();
        helix_wal::patch_batch_header(&mut gapped, 5, 1).expect("patch");
        // [0, 10) with a batch at 5; 10 by apply; [11, 15) emptied; 15.
        let run = vec![
            normal(1, entry::encode_stored(0, 10, &gapped)),
            normal(2, one_record()),
            normal(3, entry::encode_stored(11, 15, &[])),
            normal(4, one_record()),
        ];
        let wal = dir.path().join("wal");
        // A run that does not start at the log's end raises nothing.
        r.state.cover_stored_gaps(&run[1..]).expect("cover");
        assert_eq!(
            helix_wal::read_cleaner_checkpoint(&wal).expect("read"),
            None
        );
        r.state.cover_stored_gaps(&run).expect("cover");
        assert_eq!(
            helix_wal::read_cleaner_checkpoint(&wal).expect("read"),
            Some(15)
        );
        r.state.apply(run).expect("apply");
        assert_eq!(r.partition.reader().next_offset(), 16);
        assert_eq!(
            helix_wal::read_cleaner_checkpoint(&wal).expect("read"),
            Some(15),
            "each append found the checkpoint raised already"
        );
    }
}
