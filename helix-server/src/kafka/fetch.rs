//! Fetch: read committed batches (up to the high watermark) as stored, with
//! long-poll: when less than `min_bytes` is available the request waits up
//! to `max_wait_ms`, woken as soon as any requested partition's high
//! watermark moves. Fetch sessions are not kept: every answer carries
//! session id 0, which tells clients to send full requests.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::{
    FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint, PartitionData,
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
use crate::topics::{Topic, replica};

/// The first Fetch version whose answers carry KIP-951's leader hints
/// (`node_endpoints`; `current_leader` exists from v12, for KRaft's own
/// fetches, and Kafka fills it for clients from v16 on, as here).
const KIP_951_FETCH: i16 = 16;

/// Longest long-poll honoured, whatever the client asks.
const MAX_WAIT: Duration = Duration::from_secs(30);

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
            pd.high_watermark = hw.0;
            pd.last_stable_offset = hw.0;
            pd.log_start_offset = p.log_start_offset().0;
            // KIP-74: the first partition with data always gets at least one
            // whole batch, even over the limits, so a consumer never stalls.
            let limit = usize::try_from(fp.partition_max_bytes)
                .unwrap_or(0)
                .min(budget);
            let limit = if total == 0 { limit.max(1) } else { limit };
            let data = if Offset(fp.fetch_offset) == hw || limit == 0 {
                Ok(Bytes::new())
            } else {
                p.read(Offset(fp.fetch_offset), limit)
            };
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
