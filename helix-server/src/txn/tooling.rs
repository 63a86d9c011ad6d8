//! DescribeTransactions (API 65) and ListTransactions (API 66) on the wire:
//! what `kafka-transactions.sh describe` and `list` (and `find-hanging`)
//! ask the transaction coordinator. Both read the coordinator's
//! acknowledged view (`views.rs`) and change nothing.
//!
//! The admin client sends DescribeTransactions to the coordinator it found
//! with FindCoordinator, and ListTransactions to every broker: each node
//! lists the transactional ids of the `__transaction_state` partitions it
//! leads, so the union over the cluster is every id once.

use std::collections::BTreeSet;

use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::list_transactions_response::TransactionState as Listed;
use kafka_protocol::messages::{
    ApiKey, DescribeTransactionsRequest, DescribeTransactionsResponse, ListTransactionsRequest,
    ListTransactionsResponse, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;

use super::service::TxnService;
use super::state::TxnState;
use super::views::{ListFilter, TxnDescription};

/// DescribeTransactions versions served (Kafka 3.9 has only v0).
pub const DESCRIBE_VERSIONS: (i16, i16) = (0, 0);
/// ListTransactions versions served: v1 adds the duration filter (v2's
/// transactional id pattern is Kafka 4's).
pub const LIST_VERSIONS: (i16, i16) = (0, 1);

/// The (api, min, max) this module serves, for ApiVersions.
pub fn advertised() -> [(ApiKey, i16, i16); 2] {
    [
        (
            ApiKey::DescribeTransactions,
            DESCRIBE_VERSIONS.0,
            DESCRIBE_VERSIONS.1,
        ),
        (ApiKey::ListTransactions, LIST_VERSIONS.0, LIST_VERSIONS.1),
    ]
}

/// DescribeTransactions: one answer per transactional id, each with its
/// own error code (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
/// TRANSACTIONAL_ID_NOT_FOUND, INVALID_REQUEST for an empty id).
pub fn describe_transactions(
    service: &TxnService,
    req: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let mut resp = DescribeTransactionsResponse::default();
    resp.transaction_states = req
        .transactional_ids
        .into_iter()
        .map(|id| {
            let answer = service.describe(&id.0);
            described(id, answer)
        })
        .collect();
    resp
}

/// One DescribeTransactions answer; on an error only the id and the code
/// are set, as Kafka answers.
fn described(
    id: TransactionalId,
    answer: Result<TxnDescription, super::error::TxnError>,
) -> TransactionState {
    let mut out = TransactionState::default().with_transactional_id(id);
    let d = match answer {
        Ok(d) => d,
        Err(e) => return out.with_error_code(e.code()),
    };
    // Partitions grouped by topic, in topic order (the set is sorted).
    let mut topics: Vec<TopicData> = Vec::new();
    for tp in &d.partitions {
        match topics.last_mut() {
            Some(t) if *t.topic.0 == *tp.topic => t.partitions.push(tp.partition),
            _ => topics.push(
                TopicData::default()
                    .with_topic(TopicName(StrBytes::from_string(tp.topic.clone())))
                    .with_partitions(vec![tp.partition]),
            ),
        }
    }
    out.transaction_state = StrBytes::from_static_str(d.state.name());
    out.transaction_timeout_ms = d.timeout_ms;
    out.transaction_start_time_ms = d.start_ms;
    out.producer_id = ProducerId(d.producer_id);
    out.producer_epoch = d.epoch;
    out.topics = topics;
    out
}

/// ListTransactions: the transactional ids this node coordinates that pass
/// the filters. State names Kafka does not know are echoed back in
/// `unknown_state_filters` (and match nothing).
pub fn list_transactions(
    service: &TxnService,
    req: ListTransactionsRequest,
) -> ListTransactionsResponse {
    let mut resp = ListTransactionsResponse::default();
    let (filter, unknown) = filter_of(&req);
    resp.unknown_state_filters = unknown;
    match service.list(&filter) {
        Ok(listed) => {
            resp.transaction_states = listed
                .into_iter()
                .map(|l| {
                    Listed::default()
                        .with_transactional_id(TransactionalId(StrBytes::from_string(
                            l.transactional_id,
                        )))
                        .with_producer_id(ProducerId(l.producer_id))
                        .with_transaction_state(StrBytes::from_static_str(l.state.name()))
                })
                .collect();
        }
        Err(e) => resp.error_code = e.code(),
    }
    resp
}

/// The request's filters, and the state names it gave that are unknown.
fn filter_of(req: &ListTransactionsRequest) -> (ListFilter, Vec<StrBytes>) {
    let mut unknown = Vec::new();
    let states = (!req.state_filters.is_empty()).then(|| {
        let mut states = BTreeSet::new();
        for name in &req.state_filters {
            match TxnState::from_name(name) {
                Some(state) => {
                    states.insert(state);
                }
                None => unknown.push(name.clone()),
            }
        }
        states
    });
    let filter = ListFilter {
        states,
        producer_ids: req.producer_id_filters.iter().map(|p| p.0).collect(),
        min_duration_ms: req.duration_filter,
    };
    (filter, unknown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::error::TxnError;
    use crate::txn::types::TopicPartition;

    #[test]
    fn a_description_groups_partitions_by_topic() {
        let d = TxnDescription {
            producer_id: 7,
            epoch: 2,
            state: TxnState::Ongoing,
            timeout_ms: 60_000,
            start_ms: 1_234,
            partitions: [("a", 1), ("a", 0), ("b", 3)]
                .into_iter()
                .map(|(t, p)| TopicPartition::new(t, p))
                .collect(),
        };
        let id = TransactionalId(StrBytes::from_static_str("app"));
        let out = described(id.clone(), Ok(d));
        assert_eq!(out.error_code, 0);
        assert_eq!(&*out.transaction_state, "Ongoing");
        assert_eq!((out.producer_id.0, out.producer_epoch), (7, 2));
        assert_eq!(
            (out.transaction_timeout_ms, out.transaction_start_time_ms),
            (60_000, 1_234)
        );
        let topics: Vec<(&str, Vec<i32>)> = out
            .topics
            .iter()
            .map(|t| (&*t.topic.0, t.partitions.clone()))
            .collect();
        assert_eq!(topics, [("a", vec![0, 1]), ("b", vec![3])]);

        let missing = described(id, Err(TxnError::TransactionalIdNotFound));
        assert_eq!(missing.error_code, 105);
        assert!(missing.topics.is_empty());
    }

    #[test]
    fn unknown_state_names_are_echoed_and_known_ones_filter() {
        let req = ListTransactionsRequest::default()
            .with_state_filters(vec![
                StrBytes::from_static_str("Ongoing"),
                StrBytes::from_static_str("Sleeping"),
                StrBytes::from_static_str("PrepareEpochFence"),
            ])
            .with_producer_id_filters(vec![ProducerId(5)])
            .with_duration_filter(1_000);
        let (filter, unknown) = filter_of(&req);
        assert_eq!(unknown, vec![StrBytes::from_static_str("Sleeping")]);
        assert_eq!(
            filter.states,
            Some(BTreeSet::from([
                TxnState::Ongoing,
                TxnState::PrepareEpochFence
            ]))
        );
        assert_eq!(filter.producer_ids, BTreeSet::from([5]));
        assert_eq!(filter.min_duration_ms, 1_000);

        let (none, unknown) = filter_of(&ListTransactionsRequest::default());
        assert_eq!((none, unknown), (ListFilter::default(), vec![]));
    }
}
