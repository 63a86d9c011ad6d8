//! Requests per Kafka API and version: how many, how long from the frame
//! being read to the response written, and the error codes answered (as
//! Kafka's `RequestMetrics` ErrorsPerSec counts them: one per error code
//! in the response, per partition where the API answers per partition).

use std::sync::OnceLock;
use std::time::Duration;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::{ApiKey, ResponseKind};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabels {
    pub api: &'static str,
    pub version: i16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub api: &'static str,
    pub error: &'static str,
}

type LatencyFamily = Family<ApiLabels, Histogram, fn() -> Histogram>;

/// The per-API families; cloning shares them (how a scrape registers them).
#[derive(Debug, Clone)]
pub struct Requests {
    pub total: Family<ApiLabels, Counter>,
    pub errors: Family<ErrorLabels, Counter>,
    pub latency: LatencyFamily,
}

/// 100 µs to about 26 s, doubling.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 19))
}

impl Default for Requests {
    fn default() -> Self {
        Requests {
            total: Family::default(),
            errors: Family::default(),
            latency: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
        }
    }
}

impl Requests {
    /// A request of `key` v`version` was read.
    pub fn started(&self, key: ApiKey, version: i16) {
        self.total
            .get_or_create(&ApiLabels {
                api: api_name(key),
                version,
            })
            .inc();
    }

    /// Its response was written `took` after the request was read.
    pub fn finished(&self, key: ApiKey, version: i16, took: Duration) {
        self.latency
            .get_or_create(&ApiLabels {
                api: api_name(key),
                version,
            })
            .observe(took.as_secs_f64());
    }

    /// The connection was closed instead of answering (malformed or
    /// unsupported request, a handler failure).
    pub fn closed(&self, key: Option<ApiKey>) {
        self.error(key.map_or("Unknown", api_name), "CONNECTION_CLOSED");
    }

    /// Counts every error code of `body`.
    pub fn answered(&self, key: ApiKey, body: &ResponseKind) {
        let api = api_name(key);
        for_each_error(body, |code| self.error(api, error_name(code)));
    }

    /// Counts the error codes of a Fetch response (encoded apart from the
    /// others, around its record slices).
    pub fn fetch_answered(&self, codes: impl Iterator<Item = i16>) {
        let api = api_name(ApiKey::Fetch);
        for code in codes.filter(|c| *c != 0) {
            self.error(api, error_name(code));
        }
    }

    fn error(&self, api: &'static str, error: &'static str) {
        self.errors.get_or_create(&ErrorLabels { api, error }).inc();
    }
}

/// The error codes a response carries, where Kafka puts them for the APIs
/// clients call most; other APIs' top-level codes are not counted.
fn for_each_error(body: &ResponseKind, mut f: impl FnMut(i16)) {
    let mut code = |c: i16| {
        if c != 0 {
            f(c)
        }
    };
    match body {
        ResponseKind::Produce(r) => r
            .responses
            .iter()
            .flat_map(|t| &t.partition_responses)
            .for_each(|p| code(p.error_code)),
        ResponseKind::ListOffsets(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| code(p.error_code)),
        ResponseKind::Metadata(r) => r.topics.iter().for_each(|t| code(t.error_code)),
        ResponseKind::CreateTopics(r) => r.topics.iter().for_each(|t| code(t.error_code)),
        ResponseKind::DeleteTopics(r) => r.responses.iter().for_each(|t| code(t.error_code)),
        ResponseKind::InitProducerId(r) => code(r.error_code),
        ResponseKind::EndTxn(r) => code(r.error_code),
        ResponseKind::AddPartitionsToTxn(r) => {
            code(r.error_code);
            r.results_by_topic_v3_and_below
                .iter()
                .chain(
                    r.results_by_transaction
                        .iter()
                        .flat_map(|t| &t.topic_results),
                )
                .flat_map(|t| &t.results_by_partition)
                .for_each(|p| code(p.partition_error_code));
        }
        ResponseKind::FindCoordinator(r) => {
            code(r.error_code);
            r.coordinators.iter().for_each(|c| code(c.error_code));
        }
        ResponseKind::JoinGroup(r) => code(r.error_code),
        ResponseKind::SyncGroup(r) => code(r.error_code),
        ResponseKind::Heartbeat(r) => code(r.error_code),
        ResponseKind::LeaveGroup(r) => code(r.error_code),
        ResponseKind::OffsetCommit(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| code(p.error_code)),
        ResponseKind::OffsetFetch(r) => {
            code(r.error_code);
            r.groups.iter().for_each(|g| code(g.error_code));
        }
        _ => {}
    }
}

/// Kafka's name of an API, as its Java client spells it ("Produce").
pub fn api_name(key: ApiKey) -> &'static str {
    static NAMES: OnceLock<Vec<(i16, &'static str)>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        (0..=i16::from(u8::MAX))
            .filter_map(|k| ApiKey::try_from(k).ok().map(|key| (k, key)))
            .map(|(k, key)| (k, &*Box::leak(format!("{key:?}").into_boxed_str())))
            .collect()
    });
    let k = key as i16;
    names
        .iter()
        .find(|(c, _)| *c == k)
        .map_or("Unknown", |(_, n)| n)
}

/// Kafka's name of an error code ("NOT_LEADER_OR_FOLLOWER").
pub fn error_name(code: i16) -> &'static str {
    static NAMES: OnceLock<Vec<(i16, &'static str)>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        (-1..=i16::from(u8::MAX))
            .filter_map(|c| ResponseError::try_from_code(c).map(|e| (c, e)))
            .map(|(c, e)| {
                (
                    c,
                    &*Box::leak(screaming_snake(&format!("{e:?}")).into_boxed_str()),
                )
            })
            .collect()
    });
    names
        .iter()
        .find(|(c, _)| *c == code)
        .map_or("UNKNOWN_ERROR_CODE", |(_, n)| n)
}

/// `NotLeaderOrFollower` → `NOT_LEADER_OR_FOLLOWER`.
fn screaming_snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 8);
    for (i, ch) in camel.chars().enumerate() {
        if ch.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(ch.to_ascii_uppercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kafkas() {
        assert_eq!(api_name(ApiKey::Produce), "Produce");
        assert_eq!(
            api_name(ApiKey::OffsetForLeaderEpoch),
            "OffsetForLeaderEpoch"
        );
        assert_eq!(error_name(6), "NOT_LEADER_OR_FOLLOWER");
        assert_eq!(error_name(-1), "UNKNOWN_SERVER_ERROR");
        assert_eq!(error_name(9999), "UNKNOWN_ERROR_CODE");
    }

    #[test]
    fn every_partition_error_of_a_produce_response_counts() {
        use kafka_protocol::messages::produce_response::{
            PartitionProduceResponse, ProduceResponse, TopicProduceResponse,
        };
        let requests = Requests::default();
        let mut topic = TopicProduceResponse::default();
        for code in [0, 6, 6, 3] {
            let mut p = PartitionProduceResponse::default();
            p.error_code = code;
            topic.partition_responses.push(p);
        }
        let mut resp = ProduceResponse::default();
        resp.responses.push(topic);
        requests.answered(ApiKey::Produce, &ResponseKind::Produce(resp));
        let count = |error| {
            requests
                .errors
                .get(&ErrorLabels {
                    api: "Produce",
                    error,
                })
                .map(|c| c.get())
        };
        assert_eq!(count("NOT_LEADER_OR_FOLLOWER"), Some(2));
        assert_eq!(count("UNKNOWN_TOPIC_OR_PARTITION"), Some(1));
        assert_eq!(count("NONE"), None);
    }

    #[test]
    fn a_brokers_add_partitions_to_txn_counts_its_top_level_and_partition_errors() {
        use kafka_protocol::messages::AddPartitionsToTxnResponse;
        use kafka_protocol::messages::add_partitions_to_txn_response::{
            AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult,
            AddPartitionsToTxnTopicResult,
        };
        let requests = Requests::default();
        let partitions = [0, 120, 120]
            .into_iter()
            .map(|code| {
                AddPartitionsToTxnPartitionResult::default().with_partition_error_code(code)
            })
            .collect();
        let txn = AddPartitionsToTxnResult::default().with_topic_results(vec![
            AddPartitionsToTxnTopicResult::default().with_results_by_partition(partitions),
        ]);
        let resp = AddPartitionsToTxnResponse::default().with_results_by_transaction(vec![txn]);
        requests.answered(
            ApiKey::AddPartitionsToTxn,
            &ResponseKind::AddPartitionsToTxn(resp),
        );
        let denied = AddPartitionsToTxnResponse::default().with_error_code(31);
        requests.answered(
            ApiKey::AddPartitionsToTxn,
            &ResponseKind::AddPartitionsToTxn(denied),
        );
        let count = |error| {
            requests
                .errors
                .get(&ErrorLabels {
                    api: "AddPartitionsToTxn",
                    error,
                })
                .map(|c| c.get())
        };
        assert_eq!(count("TRANSACTION_ABORTABLE"), Some(2));
        assert_eq!(count("CLUSTER_AUTHORIZATION_FAILED"), Some(1));
    }
}
