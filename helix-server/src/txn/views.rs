//! Read-only views of the coordinator for operators (DescribeTransactions,
//! ListTransactions; what `kafka-transactions.sh describe` and `list`
//! show). They read the acknowledged view only and produce no effects: a
//! transaction with a proposal in flight shows its last durable state, as
//! Kafka shows `TransactionMetadata.state` rather than its pending state.

use std::collections::BTreeSet;

use super::coordinator::{Coordinator, millis};
use super::error::TxnError;
use super::record::MAX_STRING_BYTES;
use super::state::TxnState;
use super::types::TopicPartition;

/// One transactional id as DescribeTransactions answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnDescription {
    pub producer_id: i64,
    pub epoch: i16,
    pub state: TxnState,
    pub timeout_ms: i32,
    /// When the open transaction's first partition was added (-1: none).
    pub start_ms: i64,
    /// The partitions of the open transaction, or those still owed a
    /// marker in a Prepare state.
    pub partitions: BTreeSet<TopicPartition>,
}

/// One transactional id as ListTransactions answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnListing {
    pub transactional_id: String,
    pub producer_id: i64,
    pub state: TxnState,
}

/// ListTransactions' filters; the default filters nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListFilter {
    /// None: any state. Some: only these (empty when every state named was
    /// unknown: then nothing matches, as in Kafka).
    pub states: Option<BTreeSet<TxnState>>,
    /// Empty: any producer id.
    pub producer_ids: BTreeSet<i64>,
    /// Only transactions running longer than this (ms); negative: any (v1).
    pub min_duration_ms: i64,
}

impl Default for ListFilter {
    fn default() -> Self {
        Self {
            states: None,
            producer_ids: BTreeSet::new(),
            min_duration_ms: -1,
        }
    }
}

impl ListFilter {
    /// Kafka's `shouldInclude`: Dead is never listed (it is being removed).
    fn includes(&self, producer_id: i64, state: TxnState, start_ms: i64, now: i64) -> bool {
        state != TxnState::Dead
            && (self.producer_ids.is_empty() || self.producer_ids.contains(&producer_id))
            && self
                .states
                .as_ref()
                .is_none_or(|states| states.contains(&state))
            && (self.min_duration_ms < 0 || now.saturating_sub(start_ms) > self.min_duration_ms)
    }
}

impl Coordinator {
    /// DescribeTransactions for one id: NOT_COORDINATOR when its
    /// `__transaction_state` partition is not led here,
    /// COORDINATOR_LOAD_IN_PROGRESS while it loads, TRANSACTIONAL_ID_NOT_FOUND
    /// when the view does not hold it.
    pub fn describe(&self, transactional_id: &str) -> Result<TxnDescription, TxnError> {
        if transactional_id.is_empty() || transactional_id.len() > MAX_STRING_BYTES {
            return Err(TxnError::InvalidRequest);
        }
        let shard = self
            .partitions
            .get(&self.partition_for(transactional_id))
            .ok_or(TxnError::NotCoordinator)?;
        if shard.loading {
            return Err(TxnError::LoadInProgress);
        }
        let metadata = shard
            .transactions
            .get(transactional_id)
            .filter(|m| m.state != TxnState::Dead)
            .ok_or(TxnError::TransactionalIdNotFound)?;
        Ok(TxnDescription {
            producer_id: metadata.producer_id,
            epoch: metadata.epoch,
            state: metadata.state,
            timeout_ms: metadata.timeout_ms,
            start_ms: metadata.start_ms,
            partitions: metadata.partitions.clone(),
        })
    }

    /// ListTransactions: every transactional id of the partitions led
    /// here that passes `filter`, by transactional id within each
    /// partition. While any partition loads the whole answer is
    /// COORDINATOR_LOAD_IN_PROGRESS (Kafka's `listTransactionStates`: a
    /// partial list would read as complete).
    pub fn list(&self, filter: &ListFilter, now_ms: u64) -> Result<Vec<TxnListing>, TxnError> {
        if self.partitions.values().any(|shard| shard.loading) {
            return Err(TxnError::LoadInProgress);
        }
        let now = millis(now_ms);
        Ok(self
            .partitions
            .values()
            .flat_map(|shard| &shard.transactions)
            .filter(|(_, m)| filter.includes(m.producer_id, m.state, m.start_ms, now))
            .map(|(id, m)| TxnListing {
                transactional_id: id.clone(),
                producer_id: m.producer_id,
                state: m.state,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::tests::harness::{FIRST_PRODUCER_ID, Harness, partitions};
    use crate::txn::types::StatePartition;

    fn ids(listing: &[TxnListing]) -> Vec<&str> {
        listing
            .iter()
            .map(|l| l.transactional_id.as_str())
            .collect()
    }

    #[test]
    fn describe_shows_an_open_transactions_partitions_and_start() {
        let mut h = Harness::new();
        let producer = h.init("app", None).unwrap();
        h.add("app", producer, &[("orders", 1), ("orders", 0)])
            .unwrap();
        let d = h.coordinator.describe("app").unwrap();
        assert_eq!(d.state, TxnState::Ongoing);
        assert_eq!(d.state.name(), "Ongoing");
        assert_eq!((d.producer_id, d.epoch), (FIRST_PRODUCER_ID, 0));
        assert_eq!(d.start_ms, h.now as i64);
        assert_eq!(d.partitions, partitions(&[("orders", 0), ("orders", 1)]));

        h.end("app", producer, false).unwrap();
        assert_eq!(
            h.coordinator.describe("app").unwrap().state,
            TxnState::PrepareAbort
        );
        h.write_markers();
        let done = h.coordinator.describe("app").unwrap();
        assert_eq!(done.state.name(), "CompleteAbort");
        assert!(done.partitions.is_empty());
    }

    #[test]
    fn describe_answers_why_it_cannot_describe() {
        let mut h = Harness::new();
        assert_eq!(
            h.coordinator.describe("nobody"),
            Err(TxnError::TransactionalIdNotFound)
        );
        assert_eq!(h.coordinator.describe(""), Err(TxnError::InvalidRequest));
        let partition = h.coordinator.partition_for("nobody");
        h.coordinator.begin_load(partition);
        assert_eq!(
            h.coordinator.describe("nobody"),
            Err(TxnError::LoadInProgress)
        );
        h.coordinator.unload(partition);
        assert_eq!(
            h.coordinator.describe("nobody"),
            Err(TxnError::NotCoordinator)
        );
    }

    #[test]
    fn describe_and_list_show_the_acknowledged_state_not_the_pending_one() {
        let mut h = Harness::new();
        let producer = h.init("app", None).unwrap();
        h.hold = true;
        let _waiting = h.send(crate::txn::request::TxnRequest::AddPartitions(
            crate::txn::request::AddPartitions {
                transactional_id: "app".into(),
                producer_id: producer.producer_id,
                epoch: producer.epoch,
                partitions: partitions(&[("orders", 0)]),
            },
        ));
        assert_eq!(
            h.coordinator.describe("app").unwrap().state,
            TxnState::Empty
        );
        let listed = h.coordinator.list(&ListFilter::default(), h.now).unwrap();
        assert_eq!(listed[0].state, TxnState::Empty);
        h.release();
        assert_eq!(
            h.coordinator.describe("app").unwrap().state,
            TxnState::Ongoing
        );
    }

    #[test]
    fn list_filters_by_state_producer_id_and_duration() {
        let mut h = Harness::new();
        let a = h.init("a", None).unwrap();
        let b = h.init("b", None).unwrap();
        let _c = h.init("c", None).unwrap();
        h.add("a", a, &[("t", 0)]).unwrap();
        h.now += 10_000;
        h.add("b", b, &[("t", 1)]).unwrap();
        h.now += 1_000;

        let all = h.coordinator.list(&ListFilter::default(), h.now).unwrap();
        let mut names = ids(&all);
        names.sort_unstable();
        assert_eq!(names, ["a", "b", "c"]);

        let ongoing = ListFilter {
            states: Some(BTreeSet::from([TxnState::Ongoing])),
            ..ListFilter::default()
        };
        let listed = h.coordinator.list(&ongoing, h.now).unwrap();
        let mut names = ids(&listed);
        names.sort_unstable();
        assert_eq!(names, ["a", "b"]);

        let of_b = ListFilter {
            producer_ids: BTreeSet::from([b.producer_id]),
            ..ListFilter::default()
        };
        assert_eq!(ids(&h.coordinator.list(&of_b, h.now).unwrap()), ["b"]);

        // Running longer than 5 s: only "a" (11 s); "b" runs 1 s. An Empty
        // id has no start (-1), so it counts as running since the epoch,
        // as in Kafka.
        let long = ListFilter {
            states: Some(BTreeSet::from([TxnState::Ongoing])),
            min_duration_ms: 5_000,
            ..ListFilter::default()
        };
        assert_eq!(ids(&h.coordinator.list(&long, h.now).unwrap()), ["a"]);

        // State filters that named only unknown states match nothing.
        let unknown = ListFilter {
            states: Some(BTreeSet::new()),
            ..ListFilter::default()
        };
        assert!(h.coordinator.list(&unknown, h.now).unwrap().is_empty());
    }

    #[test]
    fn list_is_load_in_progress_while_any_partition_loads() {
        let mut h = Harness::new();
        h.init("a", None).unwrap();
        h.coordinator.begin_load(StatePartition(0));
        assert_eq!(
            h.coordinator.list(&ListFilter::default(), h.now),
            Err(TxnError::LoadInProgress)
        );
        h.coordinator.finish_load(StatePartition(0), 3);
        assert!(h.coordinator.list(&ListFilter::default(), h.now).is_ok());
    }

    #[test]
    fn a_node_coordinating_nothing_lists_nothing() {
        let h = Harness::new();
        let mut empty = Coordinator::new(h.config.clone());
        assert_eq!(empty.list(&ListFilter::default(), 0), Ok(vec![]));
        empty.begin_load(StatePartition(1));
        empty.unload(StatePartition(1));
        assert_eq!(empty.list(&ListFilter::default(), 0), Ok(vec![]));
    }
}
