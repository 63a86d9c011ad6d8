//! Per-partition batcher (node-wide produce backpressure: `budget.rs`).
//!
//! The batcher gathers produce requests for one partition for up to
//! `linger`, `max_bytes` or `max_requests` (whichever comes first) into one
//! Raft proposal. A request that would overflow a full batch is carried into
//! the next one rather than closing a small tail batch.

use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::budget::Room;
use crate::error::Result;
use crate::offset::Offset;

/// Limits of one batch (one Raft entry).
#[derive(Debug, Clone, Copy)]
pub struct BatchLimits {
    pub linger: Duration,
    pub max_bytes: usize,
    pub max_requests: usize,
}

/// The answer to one produce request for one partition. A batch already in
/// the log (an idempotent retry) is answered as Kafka does: no error and its
/// original base offset.
#[derive(Debug)]
pub struct ProduceAck {
    pub base_offset: Offset,
    pub log_start_offset: Offset,
}

pub type ProduceOutcome = Result<ProduceAck>;

/// One produce request's data for one partition, waiting to be proposed.
#[derive(Debug)]
pub struct PendingProduce {
    /// Validated v2 batches, as the producer sent them.
    pub batches: Vec<bytes::Bytes>,
    /// Bytes of `batches`.
    pub size: usize,
    /// 0, 1 or -1 (all).
    pub acks: i16,
    /// None for acks=0: nobody waits for the answer.
    pub reply: Option<oneshot::Sender<ProduceOutcome>>,
    pub enqueued: Instant,
    /// Room held in the node-wide limits until this request is answered.
    pub room: Room,
    /// Whose it is and where it starts, kept after the batches are handed
    /// to the log: a refusal is remembered by it (`replica/refused.rs`).
    pub sender: Sender,
    /// The verification guard its transactional batches were verified
    /// under (`replica::verification`); `None`: not verified.
    pub verified: Option<u64>,
}

/// The first batch's producer id (-1: not idempotent), epoch and base
/// sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sender {
    pub producer_id: i64,
    pub epoch: i16,
    pub base_sequence: i32,
}

impl Sender {
    /// A request that names no producer (or could not be read).
    pub const NONE: Sender = Sender {
        producer_id: -1,
        epoch: -1,
        base_sequence: -1,
    };

    /// The sender of `batch`, a v2 record batch (any other: none).
    pub fn of(batch: &[u8]) -> Sender {
        helix_wal::BatchHeader::parse(batch)
            .ok()
            .filter(|h| h.magic == 2)
            .map_or(Sender::NONE, |h| Sender {
                producer_id: h.producer_id,
                epoch: h.producer_epoch,
                base_sequence: h.base_sequence,
            })
    }
}

impl PendingProduce {
    /// A request of `batches` (validated v2 batches) queued now.
    pub fn new(
        batches: Vec<bytes::Bytes>,
        size: usize,
        acks: i16,
        reply: Option<oneshot::Sender<ProduceOutcome>>,
        room: Room,
    ) -> PendingProduce {
        let sender = batches.first().map_or(Sender::NONE, |b| Sender::of(b));
        PendingProduce {
            batches,
            size,
            acks,
            reply,
            enqueued: Instant::now(),
            room,
            sender,
            verified: None,
        }
    }

    /// Verified with the transaction coordinator under `guard`.
    pub fn verified(mut self, guard: Option<u64>) -> PendingProduce {
        self.verified = guard;
        self
    }
}

/// Work for a partition's worker, in arrival order.
#[derive(Debug)]
pub enum PartitionCommand {
    Produce(PendingProduce),
    DeleteRecords {
        before: i64,
        reply: oneshot::Sender<Result<i64>>,
    },
    /// A transaction marker (WriteTxnMarkers): replied with the marker's
    /// offset once acknowledged.
    Marker {
        marker: crate::replica::markers::Marker,
        reply: oneshot::Sender<Result<i64>>,
    },
    /// The producers the replica knows (DescribeProducers), read in order
    /// with the partition's other work.
    DescribeProducers {
        reply: oneshot::Sender<Vec<crate::replica::active_producer::ActiveProducer>>,
    },
    /// Where each producer's last batch is (a compaction pass keeps it).
    ProducerLastBatches {
        reply: oneshot::Sender<Vec<crate::replica::active_producer::ProducerLastBatch>>,
    },
    /// Swap in the segments a compaction pass wrote (ADR 0027 §4): every
    /// segment below `cleaned_below` is cleaned once they are in. Replied
    /// with the number of swaps done.
    SwapCleaned {
        cleaned_below: i64,
        intents: Vec<helix_wal::SwapIntent>,
        reply: oneshot::Sender<Result<usize>>,
    },
    /// Apply retention as of `now_ms`.
    Retention {
        now_ms: i64,
    },
    /// Reopen the log with new settings (changed topic configs).
    Reconfigure {
        log: helix_wal::LogConfig,
    },
    /// Stop: flush and close the log, then reply.
    Close {
        reply: oneshot::Sender<()>,
    },
}

/// What the worker does next.
#[derive(Debug)]
pub enum Work {
    Produce(Vec<PendingProduce>),
    Control(PartitionCommand),
}

/// Collects one partition's produce requests into batches.
#[derive(Debug)]
pub struct Batcher {
    rx: mpsc::Receiver<PartitionCommand>,
    limits: BatchLimits,
    /// A request that did not fit the previous batch, or a control command
    /// that must follow it.
    carry: Option<PartitionCommand>,
    /// When the previous batch was closed: a partition that saw one less
    /// than a linger ago is busy and lingers; an idle one proposes at once.
    last_batch: Option<tokio::time::Instant>,
}

impl Batcher {
    pub fn new(rx: mpsc::Receiver<PartitionCommand>, limits: BatchLimits) -> Batcher {
        Batcher {
            rx,
            limits,
            carry: None,
            last_batch: None,
        }
    }

    /// The next batch or control command; None once every sender is gone.
    pub async fn next(&mut self) -> Option<Work> {
        let first = match self.carry.take() {
            Some(c) => c,
            None => self.rx.recv().await?,
        };
        let first = match first {
            PartitionCommand::Produce(p) => p,
            other => return Some(Work::Control(other)),
        };
        let now = tokio::time::Instant::now();
        let deadline = now + self.limits.linger;
        // Lingering only pays when more requests are coming: on a partition
        // idle for a whole linger a lone request is proposed at once (the
        // linger is an upper bound, "up to 1 ms"), saving a timer tick of
        // latency; a busy partition waits for company.
        let busy = self
            .last_batch
            .is_some_and(|t| now.duration_since(t) < self.limits.linger);
        let mut bytes = first.size;
        let mut batch = vec![first];
        while batch.len() < self.limits.max_requests && bytes < self.limits.max_bytes {
            let next = match self.rx.try_recv() {
                Ok(c) => c,
                Err(mpsc::error::TryRecvError::Disconnected) => break,
                Err(mpsc::error::TryRecvError::Empty) if !busy => break,
                Err(mpsc::error::TryRecvError::Empty) => {
                    match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                        Ok(Some(c)) => c,
                        Ok(None) | Err(_) => break,
                    }
                }
            };
            match next {
                PartitionCommand::Produce(p) if bytes + p.size <= self.limits.max_bytes => {
                    bytes += p.size;
                    batch.push(p);
                }
                other => {
                    self.carry = Some(other);
                    break;
                }
            }
        }
        self.last_batch = Some(tokio::time::Instant::now());
        Some(Work::Produce(batch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Backpressure;
    use crate::replica::batch::{tests::make_batch, validate};

    fn pending(bp: &Backpressure, size_hint: &[u8]) -> PendingProduce {
        let b = make_batch(&[size_hint], -1, -1, 0);
        let batches = validate(&b, 1 << 20, None)
            .expect("valid")
            .into_iter()
            .map(|v| v.bytes)
            .collect();
        let room = bp.one_request_without_bytes().expect("room");
        PendingProduce::new(batches, b.len(), 1, None, room)
    }

    #[tokio::test]
    async fn requests_arriving_within_linger_share_a_batch_and_overflow_is_carried() {
        let bp = Backpressure::new(100, 1 << 20);
        let (tx, rx) = mpsc::channel(16);
        let one = pending(&bp, &[0u8; 10]).size;
        let limits = BatchLimits {
            linger: Duration::from_millis(50),
            max_bytes: one * 2,
            max_requests: 10,
        };
        let mut b = Batcher::new(rx, limits);
        for _ in 0..3 {
            tx.send(PartitionCommand::Produce(pending(&bp, &[0u8; 10])))
                .await
                .expect("send");
        }
        match b.next().await {
            Some(Work::Produce(v)) => assert_eq!(v.len(), 2, "byte limit closes the batch"),
            other => panic!("expected a batch, got {other:?}"),
        }
        drop(tx);
        match b.next().await {
            Some(Work::Produce(v)) => {
                assert_eq!(v.len(), 1, "the carried request leads the next batch")
            }
            other => panic!("expected the carried request, got {other:?}"),
        }
        assert!(b.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_partition_proposes_at_once_and_a_busy_one_lingers() {
        let bp = Backpressure::new(100, 1 << 20);
        let (tx, rx) = mpsc::channel(16);
        let linger = Duration::from_millis(5);
        let limits = BatchLimits {
            linger,
            max_bytes: 1 << 20,
            max_requests: 10,
        };
        let mut b = Batcher::new(rx, limits);
        let start = tokio::time::Instant::now();
        tx.send(PartitionCommand::Produce(pending(&bp, b"a")))
            .await
            .expect("send");
        assert!(matches!(b.next().await, Some(Work::Produce(v)) if v.len() == 1));
        assert_eq!(
            tokio::time::Instant::now(),
            start,
            "no linger on an idle partition"
        );
        // Right after a batch the partition is busy: the next lone request
        // waits the linger for company (virtual time, no real sleep).
        let sender = tx.clone();
        let later = pending(&bp, b"c");
        tx.send(PartitionCommand::Produce(pending(&bp, b"b")))
            .await
            .expect("send");
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(2)).await;
            sender
                .send(PartitionCommand::Produce(later))
                .await
                .expect("send");
        });
        assert!(
            matches!(b.next().await, Some(Work::Produce(v)) if v.len() == 2),
            "the late request joined"
        );
    }

    #[tokio::test]
    async fn request_limit_closes_a_batch() {
        let bp = Backpressure::new(100, 1 << 20);
        let (tx, rx) = mpsc::channel(16);
        let limits = BatchLimits {
            linger: Duration::from_secs(5),
            max_bytes: 1 << 20,
            max_requests: 2,
        };
        let mut b = Batcher::new(rx, limits);
        for _ in 0..2 {
            tx.send(PartitionCommand::Produce(pending(&bp, b"x")))
                .await
                .expect("send");
        }
        match b.next().await {
            Some(Work::Produce(v)) => assert_eq!(v.len(), 2),
            other => panic!("expected a batch, got {other:?}"),
        }
    }
}
