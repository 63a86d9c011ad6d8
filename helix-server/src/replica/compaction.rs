//! What the background cleaner (`compact/cleaner.rs`) asks of a replica:
//! the producers' last batches and the aborted transactions a pass must
//! respect, the swap of a prepared pass by the replica's writer, and the
//! damage rule when a pass meets damaged data (ADR 0001: as the
//! scrubber's reads do).

use tokio::sync::oneshot;

use super::Partition;
use super::active_producer::ProducerLastBatch;
use crate::batcher::PartitionCommand;
use crate::error::{HelixError, Result};

impl Partition {
    /// Where each producer's last batch is, in order with the replica's
    /// other work.
    pub async fn producer_last_batches(&self) -> Result<Vec<ProducerLastBatch>> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(PartitionCommand::ProducerLastBatches { reply })
            .await
            .map_err(|_| HelixError::ShuttingDown)?;
        rx.await.map_err(|_| HelixError::ShuttingDown)
    }

    /// Has the replica's writer swap in a prepared compaction pass.
    pub async fn swap_cleaned(
        &self,
        cleaned_below: i64,
        intents: Vec<helix_wal::SwapIntent>,
    ) -> Result<usize> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(PartitionCommand::SwapCleaned {
                cleaned_below,
                intents,
                reply,
            })
            .await
            .map_err(|_| HelixError::ShuttingDown)?;
        rx.await.map_err(|_| HelixError::ShuttingDown)?
    }

    /// A compaction pass failed with `e`: damaged data marks the replica
    /// damaged exactly as a read that meets it does.
    pub fn cleaning_failed(&self, e: HelixError) -> HelixError {
        match e {
            HelixError::Wal(w) => self.found(w),
            other => other,
        }
    }
}
