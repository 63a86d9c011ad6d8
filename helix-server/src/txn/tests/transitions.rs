//! Kafka's state table, and every request's answer in every state with
//! Kafka's error codes.

use kafka_protocol::ResponseError;

use super::harness::{FIRST_PRODUCER_ID, Harness, TIMEOUT_MS, partitions, pid_epoch};
use crate::txn::error::TxnError;
use crate::txn::metadata::{TxnMetadata, check_transition};
use crate::txn::request::{InitProducerId, TxnRequest};
use crate::txn::response::Answer;
use crate::txn::state::TxnState;
use crate::txn::types::TopicPartition;

use TxnState::*;

const UNKNOWN_SERVER_ERROR: i16 = -1;

fn code(error: ResponseError) -> i16 {
    error.code()
}

fn codes<T>(result: Result<T, TxnError>) -> Result<T, i16> {
    result.map_err(|e| e.code())
}

/// Kafka 3.9's legal (from, to) pairs, written out independently of
/// `valid_previous`.
const LEGAL: [(TxnState, TxnState); 16] = [
    (Empty, Empty),
    (CompleteCommit, Empty),
    (CompleteAbort, Empty),
    (Ongoing, Ongoing),
    (Empty, Ongoing),
    (CompleteCommit, Ongoing),
    (CompleteAbort, Ongoing),
    (Ongoing, PrepareCommit),
    (Ongoing, PrepareAbort),
    (PrepareEpochFence, PrepareAbort),
    (PrepareCommit, CompleteCommit),
    (PrepareAbort, CompleteAbort),
    (Empty, Dead),
    (CompleteCommit, Dead),
    (CompleteAbort, Dead),
    (Ongoing, PrepareEpochFence),
];

#[test]
fn every_transition_is_legal_exactly_when_kafka_allows_it() {
    for from in TxnState::ALL {
        for to in TxnState::ALL {
            let legal = LEGAL.contains(&(from, to));
            let checked = check_transition(from, to);
            assert_eq!(checked.is_ok(), legal, "{from:?} -> {to:?}");
            if !legal {
                assert_eq!(checked, Err(TxnError::IllegalTransition { from, to }));
                assert_eq!(
                    TxnError::IllegalTransition { from, to }.code(),
                    UNKNOWN_SERVER_ERROR
                );
            }
        }
    }
}

#[test]
fn state_ids_and_names_are_kafkas() {
    let names = [
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
        "Dead",
        "PrepareEpochFence",
    ];
    for (id, state) in TxnState::ALL.into_iter().enumerate() {
        assert_eq!(usize::from(state.id()), id);
        assert_eq!(TxnState::from_id(state.id()), Some(state));
        assert_eq!(state.name(), names[id]);
    }
    assert_eq!(TxnState::from_id(8), None);
}

/// A transactional id in `state`: producer 7 at epoch 3, one partition
/// when a transaction is open.
fn metadata_in(state: TxnState) -> TxnMetadata {
    let open = matches!(state, Ongoing | PrepareCommit | PrepareAbort);
    TxnMetadata {
        producer_id: 7,
        last_producer_id: 7,
        epoch: 3,
        last_epoch: -1,
        timeout_ms: TIMEOUT_MS,
        state,
        partitions: if open {
            partitions(&[("t", 0)])
        } else {
            Default::default()
        },
        start_ms: if open { 900_000 } else { -1 },
        last_update_ms: 900_000,
    }
}

#[test]
fn every_metadata_transition_refuses_illegal_sources_without_panicking() {
    let added = partitions(&[("t", 1)]);
    for state in TxnState::ALL {
        let m = metadata_in(state);
        let legal = |to| LEGAL.contains(&(state, to));
        assert_eq!(
            m.add_partitions(&added, 1).is_ok(),
            legal(Ongoing),
            "{state:?}"
        );
        assert_eq!(m.prepare_end(true, 1).is_ok(), legal(PrepareCommit));
        assert_eq!(m.prepare_end(false, 1).is_ok(), legal(PrepareAbort));
        assert_eq!(m.fence_and_abort(1).is_ok(), legal(PrepareEpochFence));
        assert_eq!(m.bump_epoch(1, None, 1).is_ok(), legal(Empty));
        assert_eq!(m.dead().is_ok(), legal(Dead));
        assert_eq!(m.complete(1).is_ok(), state.is_prepare());
        let rotation = m.rotate_producer_id(99, 1, false, 1);
        assert_eq!(rotation.is_ok(), legal(Empty));
    }
}

#[test]
fn end_txn_answers_kafkas_code_in_every_state() {
    let concurrent = code(ResponseError::ConcurrentTransactions);
    let invalid = code(ResponseError::InvalidTxnState);
    let mapping = code(ResponseError::InvalidProducerIdMapping);
    // (state, answer to commit, answer to abort)
    let table = [
        (Empty, Err(invalid), Err(invalid)),
        (Ongoing, Ok(()), Ok(())),
        (PrepareCommit, Err(concurrent), Err(invalid)),
        (PrepareAbort, Err(invalid), Err(concurrent)),
        (CompleteCommit, Ok(()), Err(invalid)),
        (CompleteAbort, Err(invalid), Ok(())),
        // A Dead record forgets the transactional id.
        (Dead, Err(mapping), Err(mapping)),
        (
            PrepareEpochFence,
            Err(UNKNOWN_SERVER_ERROR),
            Err(UNKNOWN_SERVER_ERROR),
        ),
    ];
    for (state, on_commit, on_abort) in table {
        for (commit, expected) in [(true, on_commit), (false, on_abort)] {
            let mut h = Harness::new();
            h.load_state("t-id", metadata_in(state));
            let answer = h.end("t-id", pid_epoch(7, 3), commit);
            assert_eq!(codes(answer), expected, "{state:?} commit={commit}");
        }
    }
}

#[test]
fn add_partitions_answers_kafkas_code_in_every_state() {
    let concurrent = code(ResponseError::ConcurrentTransactions);
    let table = [
        (Empty, Ok(())),
        (Ongoing, Ok(())),
        (PrepareCommit, Err(concurrent)),
        (PrepareAbort, Err(concurrent)),
        (CompleteCommit, Ok(())),
        (CompleteAbort, Ok(())),
        (Dead, Err(code(ResponseError::InvalidProducerIdMapping))),
        (PrepareEpochFence, Err(UNKNOWN_SERVER_ERROR)),
    ];
    for (state, expected) in table {
        let mut h = Harness::new();
        h.load_state("t-id", metadata_in(state));
        let answer = h.add("t-id", pid_epoch(7, 3), &[("t", 1)]);
        assert_eq!(codes(answer), expected, "{state:?}");
        if expected.is_ok() {
            let m = h.metadata("t-id");
            assert_eq!(m.state, Ongoing);
            assert!(m.partitions.contains(&TopicPartition::new("t", 1)));
        }
    }
}

#[test]
fn init_producer_id_answers_kafkas_code_in_every_state() {
    let concurrent = code(ResponseError::ConcurrentTransactions);
    let table = [
        (Empty, Ok(pid_epoch(7, 4))),
        // The open transaction is aborted first; the client retries.
        (Ongoing, Err(concurrent)),
        (PrepareCommit, Err(concurrent)),
        (PrepareAbort, Err(concurrent)),
        (CompleteCommit, Ok(pid_epoch(7, 4))),
        (CompleteAbort, Ok(pid_epoch(7, 4))),
        // A Dead record forgets the transactional id: a new producer id.
        (Dead, Ok(pid_epoch(FIRST_PRODUCER_ID, 0))),
        (PrepareEpochFence, Err(UNKNOWN_SERVER_ERROR)),
    ];
    for (state, expected) in table {
        let mut h = Harness::new();
        h.load_state("t-id", metadata_in(state));
        assert_eq!(codes(h.init("t-id", None)), expected, "{state:?}");
    }
}

#[test]
fn a_producer_that_is_not_the_transactions_is_refused_by_every_request() {
    let mapping = Err(code(ResponseError::InvalidProducerIdMapping));
    let fenced = Err(code(ResponseError::ProducerFenced));
    let mut h = Harness::new();
    h.load_state("t-id", metadata_in(Ongoing));
    for (producer, expected) in [(pid_epoch(8, 3), mapping), (pid_epoch(7, 2), fenced)] {
        assert_eq!(codes(h.add("t-id", producer, &[("t", 1)])), expected);
        assert_eq!(codes(h.add_offsets("t-id", producer, "g")), expected);
        assert_eq!(codes(h.end("t-id", producer, true)), expected);
        let verified = h.verify("t-id", producer, &[("t", 0)]).map(|_| ());
        assert_eq!(codes(verified), expected);
    }
    // An unknown transactional id has no producer id mapped to it.
    assert_eq!(
        codes(h.add("nobody", pid_epoch(7, 3), &[("t", 1)])),
        mapping
    );
    assert_eq!(codes(h.end("nobody", pid_epoch(7, 3), false)), mapping);
    assert_eq!(h.metadata("t-id"), metadata_in(Ongoing));
}

#[test]
fn timeouts_outside_the_configured_bound_are_invalid_transaction_timeout() {
    let mut h = Harness::new();
    let max = h.config.max_timeout_ms;
    for (timeout_ms, valid) in [
        (0, false),
        (-5, false),
        (max + 1, false),
        (max, true),
        (1, true),
    ] {
        let request = TxnRequest::InitProducerId(InitProducerId {
            transactional_id: format!("t-{timeout_ms}"),
            timeout_ms,
            expected: None,
            new_producer_id: Some(5_000 + i64::from(timeout_ms.rem_euclid(100))),
        });
        let token = h.send(request);
        let Answer::InitProducerId(result) = h.answer(token) else {
            panic!("not an InitProducerId answer");
        };
        let expected = code(ResponseError::InvalidTransactionTimeout);
        assert_eq!(result.is_ok(), valid, "{timeout_ms}");
        if !valid {
            assert_eq!(codes(result), Err(expected));
        }
    }
}

#[test]
fn an_empty_transactional_id_is_invalid_request() {
    let mut h = Harness::new();
    let invalid = Err(code(ResponseError::InvalidRequest));
    assert_eq!(codes(h.init("", None).map(|_| ())), invalid);
    assert_eq!(codes(h.add("", pid_epoch(1, 0), &[("t", 0)])), invalid);
    assert_eq!(codes(h.end("", pid_epoch(1, 0), true)), invalid);
}

#[test]
fn an_absent_partition_is_not_coordinator_and_a_loading_one_load_in_progress() {
    let mut h = Harness::new();
    let partition = h.coordinator.partition_for("t-id");
    h.coordinator.unload(partition);
    let not_coordinator = Err(code(ResponseError::NotCoordinator));
    assert_eq!(codes(h.init("t-id", None).map(|_| ())), not_coordinator);
    assert_eq!(codes(h.end("t-id", pid_epoch(1, 0), true)), not_coordinator);

    h.coordinator.begin_load(partition);
    let loading = Err(code(ResponseError::CoordinatorLoadInProgress));
    assert_eq!(codes(h.init("t-id", None).map(|_| ())), loading);
    assert_eq!(codes(h.add("t-id", pid_epoch(1, 0), &[("t", 0)])), loading);
    h.coordinator.finish_load(partition, 4);
    assert!(h.init("t-id", None).is_ok());
}
