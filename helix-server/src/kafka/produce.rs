//! Produce and InitProducerId.
//!
//! [`enqueue`] validates each partition's batches and queues them to the
//! partitions, in request order, from the connection's read loop; the
//! returned future waits for every partition's answer at once (never one
//! partition after another). A bad partition gets its own error while the
//! others proceed.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::produce_request::PartitionProduceData;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse,
    TopicProduceResponse,
};
use kafka_protocol::messages::{
    InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse, ProducerId,
};
use tokio::sync::oneshot;

use super::context::Producing;
use super::leader_hint::{self, NamedLeaders};
use super::legacy;
use super::metadata::broker_id;
use super::wire_str;
use crate::batcher::{PendingProduce, ProduceOutcome};
use crate::budget::Backpressure;
use crate::clock::now_ms;
use crate::controller::topic_config::EffectiveConfig;
use crate::error::HelixError;
use crate::metrics::{Metrics, metrics};
use crate::replica::batch;
use crate::replica::recompress::recompress;
use crate::topics::{Topic, replica};

/// Target of the per-request produce trace (`RUST_LOG=helix::produce=debug`):
/// each idempotent answer with its producer id, epoch and first sequence.
const TRACE: &str = "helix::produce";

/// The shortest time a produce request waits for room or an answer, so a
/// tiny client timeout does not turn a short queue into errors.
const MIN_PRODUCE_TIMEOUT: Duration = Duration::from_millis(1000);

/// Produce v3 and later carry exactly one record batch per partition; Kafka
/// refuses anything else with INVALID_RECORD, for that partition.
fn one_batch(
    batches: Vec<batch::ValidBatch>,
    version: i16,
) -> Result<Vec<batch::ValidBatch>, HelixError> {
    if version >= 3 && batches.len() != 1 {
        return Err(HelixError::InvalidRecord(format!(
            "Produce v{version} carries exactly one record batch per partition, not {}",
            batches.len()
        )));
    }
    Ok(batches)
}

/// The last Produce version whose requests may carry legacy (magic 0/1)
/// message sets; they are converted to a v2 batch (`legacy::produce`).
const LAST_LEGACY_PRODUCE: i16 = 2;

/// The first Produce version whose answers carry KIP-951's leader hints
/// (`current_leader`, `node_endpoints`).
const KIP_951_PRODUCE: i16 = 10;

/// `log_append_time_ms` of a topic whose records keep the producer's time.
const NO_APPEND_TIME: i64 = -1;

/// Checks one partition's records against the topic's rules (size, record
/// timestamps, one batch from v3 on, keys on a compacted topic), after converting a Produce v0-v2
/// legacy message set to a v2 batch, and, for a LogAppendTime topic, stamps
/// this broker's time into each batch and notes it in `append_time`.
fn accept(
    records: &bytes::Bytes,
    topic: &EffectiveConfig,
    version: i16,
    append_time: &mut i64,
    transactional: bool,
) -> Result<Vec<batch::ValidBatch>, HelixError> {
    let now = now_ms();
    let bounds = topic.timestamp_bounds(now);
    let max_bytes = usize::try_from(topic.max_message_bytes).unwrap_or(0);
    let converted;
    let records = if version <= LAST_LEGACY_PRODUCE && legacy::produce::is_legacy(records) {
        converted = legacy::produce::to_v2_batch(records, max_bytes)?;
        &converted
    } else {
        records
    };
    let valid = if transactional {
        let valid = batch::validate_transactional(records, topic.max_message_bytes, bounds)?;
        // Only the group coordinator's own batches go without a sequence
        // (`replica::producers::check` takes them on their epoch alone).
        for b in &valid {
            let h = batch::parse_header(&b.bytes)?;
            if h.is_transactional() && h.base_sequence == batch::NO_SEQUENCE {
                return Err(HelixError::InvalidRecord(
                    "a transactional batch must carry a sequence".into(),
                ));
            }
        }
        valid
    } else {
        batch::validate(records, topic.max_message_bytes, bounds)?
    };
    let mut batches = one_batch(valid, version)?;
    if topic.cleanup.compact {
        for b in &batches {
            batch::require_keys(&b.bytes)?;
        }
    }
    if topic.log_append_time {
        for b in &mut batches {
            b.bytes = batch::stamp_log_append_time(&b.bytes, now)?;
        }
        *append_time = now;
    }
    for b in &mut batches {
        b.bytes = recompress(&b.bytes, topic.compression, max_bytes)?;
    }
    Ok(batches)
}

/// One partition's answer, or where it will come from.
enum Slot {
    Done(Result<(), HelixError>),
    Waiting(oneshot::Receiver<ProduceOutcome>),
}

/// One partition of a request as queued: where its answer comes from, the
/// LogAppendTime stamped into it (or [`NO_APPEND_TIME`]) and, while the
/// produce trace is on, its first batch's producer id, epoch and sequence.
struct Admitted {
    index: i32,
    slot: Slot,
    seen: Seen,
}

/// What admitting one partition learnt besides its slot: the append time
/// its topic stamps, and the trace of its first batch.
struct Seen {
    append_time: i64,
    traced: Option<(i64, i16, i32)>,
}

impl Seen {
    /// Before anything is learnt (or when the partition is refused early).
    const NOTHING: Seen = Seen {
        append_time: NO_APPEND_TIME,
        traced: None,
    };
}

/// What every partition of one request shares while it is admitted.
struct Admission<'a> {
    node: Producing<'a>,
    version: i16,
    acks: i16,
    throttling: bool,
    /// Throttle mode: the longest throttle seen while a partition of the
    /// request held its room.
    throttle_time_ms: i32,
}

impl Admission<'_> {
    /// Checks, converts and queues one partition's records.
    async fn admit(
        &mut self,
        topic: Option<&Arc<Topic>>,
        pd: PartitionProduceData,
        transactional_id: Option<&str>,
    ) -> Admitted {
        let index = pd.index;
        let mut seen = Seen::NOTHING;
        let slot = self
            .queue(topic, pd, transactional_id, &mut seen)
            .await
            .unwrap_or_else(|e| Slot::Done(Err(e)));
        Admitted { index, slot, seen }
    }

    async fn queue(
        &mut self,
        topic: Option<&Arc<Topic>>,
        pd: PartitionProduceData,
        transactional_id: Option<&str>,
        a: &mut Seen,
    ) -> Result<Slot, HelixError> {
        let version = self.version;
        let p = replica(topic, pd.index, version >= 13)?;
        let records = pd.records.unwrap_or_default();
        p.check_writable(&records)?;
        if version >= 3 && records.is_empty() {
            return Err(HelixError::InvalidRecord(format!(
                "Produce v{version} carries exactly one record batch per partition, not 0"
            )));
        }
        // A replica was found, so the topic was.
        let t = topic.ok_or(HelixError::UnknownTopicOrPartition)?;
        let (transactional, verified) = match transactional_id {
            Some(id) => {
                self.verify_transactional(p, id, &t.name, pd.index, &records)
                    .await?
            }
            None => (false, None),
        };
        let batches = accept(
            &records,
            &t.effective,
            version,
            &mut a.append_time,
            transactional,
        )?;
        if tracing::enabled!(target: TRACE, tracing::Level::DEBUG) {
            a.traced = batches
                .first()
                .and_then(|b| batch::parse_header(&b.bytes).ok())
                .map(|h| (h.producer_id, h.producer_epoch, h.base_sequence));
        }
        Metrics::count(&metrics().counters.produce_bytes, records.len() as u64);
        // The room is what will be held: the batches as stored (a topic's
        // codec may have made them larger than sent). However long it takes
        // (ADR 0011): the read loop reads nothing meanwhile.
        let size: usize = batches.iter().map(|b| b.bytes.len()).sum();
        let room = self.node.backpressure.acquire(size).await?;
        if self.throttling {
            // Measured while this request holds its room: the load it adds
            // counts against it.
            self.throttle_time_ms = self
                .throttle_time_ms
                .max(throttle_ms(self.node.backpressure));
        }
        let (reply, rx) = if self.acks == 0 {
            (None, None)
        } else {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        };
        p.produce(
            PendingProduce::new(
                batches.into_iter().map(|b| b.bytes).collect(),
                size,
                self.acks,
                reply,
                room,
            )
            .verified(verified),
        )
        .await?;
        Ok(rx.map_or(Slot::Done(Ok(())), Slot::Waiting))
    }
}

impl Admission<'_> {
    /// A request with a transactional id: whether its batch is
    /// transactional, and if it must be verified, the verification guard
    /// it was verified under, after the coordinator confirmed that the
    /// partition is in the producer's ongoing transaction at the batch's
    /// epoch (KIP-890 part 1; a batch for a partition never added to the
    /// transaction would be left open for ever). Only a transaction's first
    /// batch on the partition is verified, as Kafka does: once the
    /// partition's applied producer state holds the transaction ongoing at
    /// that epoch, later batches go straight to the leader, which still
    /// refuses one that would open a transaction unverified. The guard is
    /// taken before the coordinator is asked: a marker decided meanwhile
    /// ends it, and the batch is then refused (`replica::verification`).
    async fn verify_transactional(
        &self,
        replica: &crate::replica::Partition,
        transactional_id: &str,
        topic: &str,
        partition: i32,
        records: &bytes::Bytes,
    ) -> Result<(bool, Option<u64>), HelixError> {
        let header = batch::parse_header(records)?;
        if !header.is_transactional() {
            return Ok((false, None));
        }
        if replica.in_ongoing_txn(header.producer_id, header.producer_epoch) {
            return Ok((true, None));
        }
        let guard = replica.begin_verification(header.producer_id);
        crate::txn::wire::verify_produce(
            self.node.txn,
            transactional_id,
            header.producer_id,
            header.producer_epoch,
            topic,
            partition,
        )
        .await
        .map_err(|code| {
            HelixError::Remote(
                code,
                format!(
                    "producer {} epoch {} is not in a transaction holding {topic}-{partition}",
                    header.producer_id, header.producer_epoch
                ),
            )
        })?;
        Ok((true, Some(guard)))
    }
}

/// Validates and queues; returns the future of the response (None for
/// acks=0, an error when an acks=0 request failed: the connection closes).
pub async fn enqueue(
    node: Producing<'_>,
    req: ProduceRequest,
    version: i16,
) -> impl Future<Output = Result<Option<ProduceResponse>, HelixError>> + Send + use<> {
    let acks = req.acks;
    let timeout =
        Duration::from_millis(u64::try_from(req.timeout_ms).unwrap_or(0)).max(MIN_PRODUCE_TIMEOUT);
    Metrics::count(&metrics().counters.produce_requests, 1);
    let mut admission = Admission {
        node,
        version,
        acks,
        throttling: node.throttling,
        throttle_time_ms: 0,
    };
    let mut topics = Vec::with_capacity(req.topic_data.len());
    for td in req.topic_data {
        let topic = if version >= 13 {
            node.topics.by_id(td.topic_id)
        } else {
            node.topics.get(&td.name)
        };
        let mut slots = Vec::with_capacity(td.partition_data.len());
        for pd in td.partition_data {
            let transactional_id = req.transactional_id.as_ref().map(|id| id.0.as_str());
            slots.push(admission.admit(topic.as_ref(), pd, transactional_id).await);
        }
        topics.push((td.name, td.topic_id, topic, slots));
    }
    let throttle_time_ms = admission.throttle_time_ms;
    let cluster = Arc::clone(node.cluster);
    async move {
        if acks == 0 {
            // Nobody reads an acks=0 answer: as Kafka does, a failed
            // partition closes the connection so the client notices.
            for (_, _, _, slots) in &topics {
                for Admitted { index, slot, .. } in slots {
                    if let Slot::Done(Err(e)) = slot {
                        return Err(HelixError::InvalidRequest(format!(
                            "acks=0 produce to partition {index} failed: {e}"
                        )));
                    }
                }
            }
            return Ok(None);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let mut resp = ProduceResponse::default();
        // Throttle mode: the read loop mutes this connection about as long.
        resp.throttle_time_ms = throttle_time_ms;
        let mut named = NamedLeaders::default();
        for (name, topic_id, topic, slots) in topics {
            let mut t = TopicProduceResponse::default();
            t.name = name;
            t.topic_id = topic_id;
            for Admitted {
                index,
                slot,
                seen:
                    Seen {
                        append_time,
                        traced,
                    },
            } in slots
            {
                let mut r = PartitionProduceResponse::default();
                r.index = index;
                r.base_offset = -1;
                r.log_append_time_ms = NO_APPEND_TIME;
                r.log_start_offset = -1;
                let outcome = match slot {
                    Slot::Done(Ok(())) => Ok(None),
                    Slot::Done(Err(e)) => Err(e),
                    // The receivers were all created before this loop, so
                    // every partition is being written concurrently; this
                    // only collects the answers.
                    Slot::Waiting(rx) => match tokio::time::timeout_at(deadline, rx).await {
                        Ok(Ok(outcome)) => outcome.map(Some),
                        Ok(Err(_)) => Err(HelixError::ShuttingDown),
                        Err(_) => Err(HelixError::Timeout("produce acknowledgement")),
                    },
                };
                match outcome {
                    Ok(Some(ack)) => {
                        r.base_offset = ack.base_offset.0;
                        r.log_start_offset = ack.log_start_offset.0;
                        r.log_append_time_ms = append_time;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        r.error_code = e.kafka_code();
                        r.error_message = Some(wire_str(&e.message()));
                        if let HelixError::InvalidRecords { message, indexes } = &e {
                            r.record_errors = record_errors(indexes, message);
                        }
                        if version >= KIP_951_PRODUCE && leader_hint::produce_wants_hint(&e) {
                            let hint =
                                leader_hint::current_leader(&cluster, topic.as_deref(), index);
                            if let Some((leader, epoch)) = hint {
                                named.add(leader);
                                r.current_leader = LeaderIdAndEpoch::default()
                                    .with_leader_id(broker_id(leader))
                                    .with_leader_epoch(epoch);
                            }
                        }
                    }
                }
                if let Some((producer_id, epoch, base_sequence)) = traced {
                    tracing::debug!(target: TRACE, topic = %t.name.as_str(), partition = index, producer_id,
                        epoch, base_sequence, error_code = r.error_code, base_offset = r.base_offset,
                        "produce answered");
                }
                t.partition_responses.push(r);
            }
            resp.responses.push(t);
        }
        resp.node_endpoints = named
            .members(&cluster)
            .into_iter()
            .map(|m| {
                NodeEndpoint::default()
                    .with_node_id(broker_id(m.id))
                    .with_host(wire_str(&m.host))
                    .with_port(m.port)
            })
            .collect();
        Ok(Some(resp))
    }
}

/// The node's current throttle (ADR 0011) in whole milliseconds.
pub fn throttle_ms(backpressure: &Backpressure) -> i32 {
    i32::try_from(backpressure.throttle().as_millis()).unwrap_or(i32::MAX)
}

/// InitProducerId. With a transactional id it is the transaction
/// coordinator's (`txn::wire`); without one, a fresh producer id for an
/// idempotent producer.
pub async fn init_producer_id(
    node: Producing<'_>,
    req: InitProducerIdRequest,
    version: i16,
) -> InitProducerIdResponse {
    if req.transactional_id.is_some() {
        return crate::txn::wire::init_producer_id(node.txn, req, version).await;
    }
    let mut resp = InitProducerIdResponse::default();
    resp.producer_id = ProducerId(-1);
    resp.producer_epoch = -1;
    // A client that already has an id (KIP-360 epoch bump after an error)
    // gets a fresh id: simpler than bumping, and equally safe because
    // sequence state is per producer id.
    match node.producer_ids.next().await {
        Ok(id) => {
            resp.producer_id = ProducerId(id);
            resp.producer_epoch = 0;
        }
        Err(e) => resp.error_code = e.kafka_code(),
    }
    resp
}

/// ProduceResponse v8+ `record_errors` (KIP-467): the records at fault by
/// their index in the batch, each with the reason (older versions drop the
/// field, and their clients fail the whole batch).
fn record_errors(indexes: &[i32], message: &str) -> Vec<BatchIndexAndErrorMessage> {
    let message = wire_str(message);
    indexes
        .iter()
        .map(|&i| {
            BatchIndexAndErrorMessage::default()
                .with_batch_index(i)
                .with_batch_index_error_message(Some(message.clone()))
        })
        .collect()
}
