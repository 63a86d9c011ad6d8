//! Fetch: read committed batches (up to the high watermark) as stored, with
//! long-poll: when less than `min_bytes` is available the request waits up
//! to `max_wait_ms`, woken as soon as any requested partition's high
//! watermark moves. Fetch sessions are not kept: every answer carries
//! session id 0, which tells clients to send full requests.
//!
//! isolation_level 1 (read_committed) reads only below the last stable
//! offset and is told the aborted transactions overlapping what it got
//! (ADR 0026); isolation 0 reads to the high watermark and is told none
//! (an empty list, as before transactions: clients that find aborted
//! transactions skip records, Redpanda #18852).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::ProducerId;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint, PartitionData,
};
use kafka_protocol::messages::{FetchRequest, FetchResponse};
use tokio::task::JoinSet;

use super::context::Partitions;
use super::leader_hint::{self, NamedLeaders};
use super::legacy;
use super::metadata::broker_id;
use super::wire_str;
use crate::metrics::{Metrics, metrics};
use crate::offset::Offset;
use crate::replica::Partition;
use crate::topics::{Topic, replica};

/// The first Fetch version whose answers carry KIP-951's leader hints
/// (`node_endpoints`; `current_leader` exists from v12, for KRaft's own
/// fetches, and Kafka fills it for clients from v16 on, as here).
const KIP_951_FETCH: i16 = 16;

/// Longest long-poll honoured, whatever the client asks.
const MAX_WAIT: Duration = Duration::from_secs(30);

/// Fetch's `isolation_level` for read_committed.
const READ_COMMITTED: i8 = 1;

pub async fn handle(node: Partitions<'_>, req: FetchRequest, version: i16) -> FetchResponse {
    Metrics::count(&metrics().counters.fetch_requests, 1);
    let wait = Duration::from_millis(u64::try_from(req.max_wait_ms).unwrap_or(0)).min(MAX_WAIT);
    let deadline = tokio::time::Instant::now() + wait;
    let min_bytes = usize::try_from(req.min_bytes).unwrap_or(0);
    loop {
        let (resp, bytes, any_error) = read_once(node, &req, version);
        if bytes >= min_bytes.max(1) || any_error || tokio::time::Instant::now() >= deadline {
            return resp;
        }
        if !wait_for_new_data(node, &req, &resp, version, deadline).await {
            return read_once(node, &req, version).0;
        }
    }
}

fn resolve(node: Partitions<'_>, name: &str, id: uuid::Uuid, version: i16) -> Option<Arc<Topic>> {
    if version >= 13 {
        node.topics.by_id(id)
    } else {
        node.topics.get(name)
    }
}

/// One pass over the requested partitions. Returns the response, the record
/// bytes in it, and whether any partition has an error.
fn read_once(
    node: Partitions<'_>,
    req: &FetchRequest,
    version: i16,
) -> (FetchResponse, usize, bool) {
    let mut resp = FetchResponse::default();
    let mut budget = usize::try_from(req.max_bytes).unwrap_or(0);
    let mut total = 0usize;
    let mut any_error = false;
    let mut named = NamedLeaders::default();
    for ft in &req.topics {
        let topic = resolve(node, &ft.topic, ft.topic_id, version);
        let mut out = FetchableTopicResponse::default();
        out.topic = ft.topic.clone();
        out.topic_id = ft.topic_id;
        for fp in &ft.partitions {
            let mut pd = PartitionData::default();
            pd.partition_index = fp.partition;
            pd.aborted_transactions = Some(Vec::new());
            let partition = replica(topic.as_ref(), fp.partition, version >= 13)
                .and_then(|p| p.check_leader(fp.current_leader_epoch).map(|()| p));
            let p = match partition {
                Ok(p) => p,
                Err(e) => {
                    pd.error_code = e.kafka_code();
                    pd.high_watermark = -1;
                    any_error = true;
                    if version >= KIP_951_FETCH && leader_hint::fetch_wants_hint(&e) {
                        let hint = leader_hint::current_leader(
                            node.cluster,
                            topic.as_deref(),
                            fp.partition,
                        );
                        if let Some((leader, epoch)) = hint {
                            named.add(leader);
                            pd.current_leader = LeaderIdAndEpoch::default()
                                .with_leader_id(broker_id(leader))
                                .with_leader_epoch(epoch);
                        }
                    }
                    out.partitions.push(pd);
                    continue;
                }
            };
            let hw = p.high_watermark();
            let committed = req.isolation_level == READ_COMMITTED;
            pd.high_watermark = hw.0;
            pd.last_stable_offset = p.last_stable_offset().0;
            pd.log_start_offset = p.log_start_offset().0;
            // KIP-74: the first partition with data always gets at least one
            // whole batch, even over the limits, so a consumer never stalls.
            let limit = usize::try_from(fp.partition_max_bytes)
                .unwrap_or(0)
                .min(budget);
            let limit = if total == 0 { limit.max(1) } else { limit };
            let mut data = if Offset(fp.fetch_offset) == hw || limit == 0 {
                Ok(Bytes::new())
            } else if committed {
                p.read_committed(Offset(fp.fetch_offset), limit)
            } else {
                p.read(Offset(fp.fetch_offset), limit)
            };
            if committed && let Ok(stored) = &data {
                // Without the full list a consumer would deliver aborted
                // records: the partition answers an error instead.
                match aborted_in(p, fp.fetch_offset, stored) {
                    Ok(aborted) => pd.aborted_transactions = Some(aborted),
                    Err(e) => data = Err(e),
                }
            }
            // Fetch v0-v3 readers get their message format; v4+ gets the
            // stored bytes untouched.
            let data = match (data, legacy::fetch::reader_magic(version)) {
                (Ok(stored), Some(magic)) if !stored.is_empty() => {
                    legacy::fetch::down_convert(&stored, magic, fp.fetch_offset)
                }
                (data, _) => data,
            };
            match data {
                Ok(records) => {
                    if total > 0 && records.len() > limit {
                        // Only the first partition may go over the budget.
                        pd.records = Some(Bytes::new());
                    } else {
                        total += records.len();
                        budget = budget.saturating_sub(records.len());
                        pd.records = Some(records);
                    }
                }
                Err(e) => {
                    pd.error_code = e.kafka_code();
                    any_error = true;
                }
            }
            out.partitions.push(pd);
        }
        resp.responses.push(out);
    }
    resp.node_endpoints = named
        .members(node.cluster)
        .into_iter()
        .map(|m| {
            NodeEndpoint::default()
                .with_node_id(broker_id(m.id))
                .with_host(wire_str(&m.host))
                .with_port(m.port)
        })
        .collect();
    (resp, total, any_error)
}

/// The aborted transactions overlapping `stored`, read from `from`: those
/// ending at or after `from` and starting before the offset after the last
/// batch returned (Kafka's `collectAbortedTransactions` for the fetch's
/// upper bound). Nothing returned, nothing to tell. librdkafka reads
/// read_committed by default: the batches are walked only when some
/// aborted transaction ends at or after `from`.
fn aborted_in(
    p: &Partition,
    from: i64,
    stored: &[u8],
) -> crate::error::Result<Vec<AbortedTransaction>> {
    let candidates = p.try_aborted_transactions(Offset(from), Offset(i64::MAX))?;
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let mut upper = None;
    let mut pos = 0usize;
    while let Some(h) = stored
        .get(pos..)
        .and_then(|b| crate::replica::batch::parse_header(b).ok())
    {
        upper = Some(h.next_offset());
        pos += h.total_len();
    }
    let Some(upper) = upper else {
        return Ok(Vec::new());
    };
    Ok(candidates
        .into_iter()
        .filter(|a| a.first_offset < upper)
        .map(|a| {
            AbortedTransaction::default()
                .with_producer_id(ProducerId(a.producer_id))
                .with_first_offset(a.first_offset)
        })
        .collect())
}

/// Waits until a requested partition's high watermark moves past what
/// `seen` (the last answer built) reported, or the deadline passes.
/// Returns false at the deadline.
async fn wait_for_new_data(
    node: Partitions<'_>,
    req: &FetchRequest,
    seen: &FetchResponse,
    version: i16,
    deadline: tokio::time::Instant,
) -> bool {
    let mut watchers = JoinSet::new();
    for (ft, seen_topic) in req.topics.iter().zip(&seen.responses) {
        let Some(topic) = resolve(node, &ft.topic, ft.topic_id, version) else {
            continue;
        };
        for (fp, seen_partition) in ft.partitions.iter().zip(&seen_topic.partitions) {
            if let Ok(p) = topic.local(fp.partition) {
                let mut rx = p.watch_high_watermark();
                let seen_hw = seen_partition.high_watermark.max(fp.fetch_offset);
                watchers.spawn(async move {
                    let _ = rx.wait_for(|hw| hw.0 > seen_hw).await;
                });
            }
        }
    }
    if watchers.is_empty() {
        tokio::time::sleep_until(deadline).await;
        return false;
    }
    tokio::time::timeout_at(deadline, watchers.join_next())
        .await
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::txn_tests::{B, replica_with_scenario};

    /// B's transaction (4..=7, aborted) overlaps a read_committed read
    /// from 0, which stops below A's open transaction at 8; a read from 8
    /// overlaps nothing aborted.
    #[test]
    fn a_read_committed_fetch_is_told_the_aborted_transactions_it_overlaps() {
        let dir = tempfile::tempdir().expect("tempdir");
        let r = replica_with_scenario(dir.path());
        let p = &r.partition;
        assert_eq!(p.last_stable_offset(), Offset(8));
        assert_eq!(p.high_watermark(), Offset(10));
        let stored = p.read_committed(Offset(0), 1 << 20).expect("read");
        let aborted = aborted_in(p, 0, &stored).expect("index");
        assert_eq!(aborted.len(), 1);
        assert_eq!(
            (aborted[0].producer_id, aborted[0].first_offset),
            (ProducerId(B), 4)
        );
        // Only the first batch (offsets 0-1): it ends before B's.
        let first = p.read_committed(Offset(0), 1).expect("read");
        assert!(aborted_in(p, 0, &first).expect("index").is_empty());
        let rest = p.read(Offset(8), 1 << 20).expect("read");
        assert!(aborted_in(p, 8, &rest).expect("index").is_empty());
        assert!(aborted_in(p, 8, &Bytes::new()).expect("index").is_empty());
    }
}
