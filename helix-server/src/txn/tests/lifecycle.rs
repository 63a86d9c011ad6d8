//! A transaction's life with one producer: begin, grow, end, markers,
//! completion; answers held until their record is acknowledged; retries.

use kafka_protocol::ResponseError;

use super::harness::{FIRST_PRODUCER_ID, Harness, partitions, pid_epoch};
use crate::txn::error::TxnError;
use crate::txn::response::{Answer, MarkerWrite};
use crate::txn::state::TxnState;
use crate::txn::types::TopicPartition;

fn codes<T>(result: Result<T, TxnError>) -> Result<T, i16> {
    result.map_err(|e| e.code())
}

#[test]
fn a_committed_transaction_goes_through_prepare_markers_and_complete() {
    let mut h = Harness::new();
    let producer = h.init("app", None).unwrap();
    assert_eq!(producer, pid_epoch(FIRST_PRODUCER_ID, 0));
    assert_eq!(h.metadata("app").state, TxnState::Empty);

    h.add("app", producer, &[("orders", 0), ("orders", 1)])
        .unwrap();
    let ongoing = h.metadata("app");
    assert_eq!(ongoing.state, TxnState::Ongoing);
    assert_eq!(ongoing.start_ms, h.now as i64);
    assert!(h.markers.is_empty());

    h.now += 5;
    h.end("app", producer, true).unwrap();
    assert_eq!(h.metadata("app").state, TxnState::PrepareCommit);
    let partition = h.coordinator.partition_for("app");
    assert_eq!(
        h.markers,
        vec![MarkerWrite {
            partition,
            transactional_id: "app".into(),
            producer_id: FIRST_PRODUCER_ID,
            epoch: 0,
            commit: true,
            coordinator_epoch: 1,
            partitions: vec![
                TopicPartition::new("orders", 0),
                TopicPartition::new("orders", 1)
            ],
        }]
    );

    h.write_markers();
    let complete = h.metadata("app");
    assert_eq!(complete.state, TxnState::CompleteCommit);
    assert!(complete.partitions.is_empty());
    assert_eq!(complete.start_ms, ongoing.start_ms);
    assert!(h.markers.is_empty());
}

#[test]
fn every_promise_waits_for_its_record_to_be_acknowledged() {
    let mut h = Harness::new();
    h.hold = true;
    let request = h.init_request("app", None);
    let init = h.send(request);
    assert!(!h.is_answered(init), "answered before durable");
    assert_eq!(h.coordinator.transaction("app"), None);
    // A second request while the first is in flight must wait its turn.
    let again = h.init("app", None);
    assert_eq!(
        codes(again),
        Err(ResponseError::ConcurrentTransactions.code())
    );
    h.release();
    let Answer::InitProducerId(Ok(producer)) = h.answer(init) else {
        panic!("InitProducerId failed");
    };

    h.hold = true;
    let add = h.send(crate::txn::request::TxnRequest::AddPartitions(
        Harness::add_request("app", producer, &[("t", 0)]),
    ));
    assert!(!h.is_answered(add));
    assert_eq!(h.metadata("app").state, TxnState::Empty);
    h.release();
    assert_eq!(h.answer(add), Answer::AddPartitions(Ok(())));

    h.hold = true;
    let end = h.send(Harness::end_request("app", producer, false));
    assert!(!h.is_answered(end));
    assert!(
        h.markers.is_empty(),
        "markers before the prepare is durable"
    );
    h.release();
    assert_eq!(h.answer(end), Answer::EndTxn(Ok(())));
    assert_eq!(h.markers.len(), 1);
    assert!(!h.markers[0].commit);
}

#[test]
fn a_failed_proposal_answers_not_coordinator_and_changes_nothing() {
    let mut h = Harness::new();
    let producer = h.init("app", None).unwrap();
    h.hold = true;
    let add = h.send(crate::txn::request::TxnRequest::AddPartitions(
        Harness::add_request("app", producer, &[("t", 0)]),
    ));
    h.fail_held();
    assert_eq!(
        h.answer(add),
        Answer::AddPartitions(Err(TxnError::NotCoordinator))
    );
    assert_eq!(h.metadata("app").state, TxnState::Empty);
    // Nothing is left pending: the retry goes through.
    h.add("app", producer, &[("t", 0)]).unwrap();
}

#[test]
fn adding_partitions_already_in_the_transaction_answers_at_once_without_a_record() {
    let mut h = Harness::new();
    let producer = h.init("app", None).unwrap();
    h.add("app", producer, &[("t", 0), ("t", 1)]).unwrap();
    let logged = h.log.len();
    h.add("app", producer, &[("t", 1)]).unwrap();
    assert_eq!(h.log.len(), logged);
    h.add("app", producer, &[("t", 1), ("u", 0)]).unwrap();
    assert_eq!(h.log.len(), logged + 1);
    assert_eq!(
        h.metadata("app").partitions,
        partitions(&[("t", 0), ("t", 1), ("u", 0)])
    );
}

#[test]
fn a_retried_end_txn_gets_kafkas_answers_before_and_after_completion() {
    let concurrent = Err(ResponseError::ConcurrentTransactions.code());
    let invalid = Err(ResponseError::InvalidTxnState.code());
    for commit in [true, false] {
        let mut h = Harness::new();
        let producer = h.init("app", None).unwrap();
        h.add("app", producer, &[("t", 0)]).unwrap();
        h.end("app", producer, commit).unwrap();
        // Markers not yet written: the same decision is told to wait.
        assert_eq!(codes(h.end("app", producer, commit)), concurrent);
        assert_eq!(codes(h.end("app", producer, !commit)), invalid);
        h.write_markers();
        // Completed: the same decision is a success, the opposite is not.
        assert_eq!(codes(h.end("app", producer, commit)), Ok(()));
        assert_eq!(codes(h.end("app", producer, !commit)), invalid);
        assert!(h.markers.is_empty());
    }
}

#[test]
fn verify_only_answers_per_partition_from_acknowledged_state_and_changes_nothing() {
    let mut h = Harness::new();
    let producer = h.init("app", None).unwrap();
    h.add("app", producer, &[("t", 0)]).unwrap();
    let logged = h.log.len();
    let verified = h.verify("app", producer, &[("t", 0), ("t", 1)]).unwrap();
    assert_eq!(
        verified,
        vec![
            (TopicPartition::new("t", 0), Ok(())),
            (
                TopicPartition::new("t", 1),
                Err(TxnError::TransactionAbortable)
            ),
        ]
    );
    assert_eq!(h.log.len(), logged);

    // An add still in flight is not in the transaction yet.
    h.hold = true;
    h.send(crate::txn::request::TxnRequest::AddPartitions(
        Harness::add_request("app", producer, &[("t", 1)]),
    ));
    let verified = h.verify("app", producer, &[("t", 1)]).unwrap();
    assert_eq!(verified[0].1, Err(TxnError::TransactionAbortable));
    h.release();
    let verified = h.verify("app", producer, &[("t", 1)]).unwrap();
    assert_eq!(verified[0].1, Ok(()));

    h.end("app", producer, true).unwrap();
    let preparing = h.verify("app", producer, &[("t", 0)]);
    assert_eq!(preparing, Err(TxnError::ConcurrentTransactions));
    let unknown = h.verify("other", producer, &[("t", 0)]);
    assert_eq!(unknown, Err(TxnError::InvalidProducerIdMapping));
}

#[test]
fn add_offsets_adds_the_groups_consumer_offsets_partition() {
    let mut h = Harness::new();
    let producer = h.init("app", None).unwrap();
    h.add_offsets("app", producer, "group").unwrap();
    // "group".hashCode() == 98629247; 98629247 % 50 == 47.
    assert_eq!(
        h.metadata("app").partitions,
        partitions(&[("__consumer_offsets", 47)])
    );
    h.end("app", producer, true).unwrap();
    assert_eq!(
        h.markers[0].partitions,
        vec![TopicPartition::new("__consumer_offsets", 47)]
    );
}

#[test]
fn marker_reports_that_do_not_match_the_prepare_are_ignored() {
    let mut h = Harness::new();
    let producer = h.init("app", None).unwrap();
    h.add("app", producer, &[("t", 0)]).unwrap();
    h.end("app", producer, true).unwrap();
    let partition = h.coordinator.partition_for("app");
    let logged = h.log.len();
    h.coordinator
        .on_markers_written(partition, "app", producer.producer_id, 7, h.now);
    h.coordinator
        .on_markers_written(partition, "app", producer.producer_id + 1, 0, h.now);
    h.coordinator
        .on_markers_written(partition, "nobody", producer.producer_id, 0, h.now);
    h.pump();
    assert_eq!(h.log.len(), logged);
    assert_eq!(h.metadata("app").state, TxnState::PrepareCommit);
    h.write_markers();
    assert_eq!(h.metadata("app").state, TxnState::CompleteCommit);
    // A late duplicate report changes nothing either.
    h.coordinator
        .on_markers_written(partition, "app", producer.producer_id, 0, h.now);
    h.pump();
    assert_eq!(h.log.len(), logged + 1);
}

#[test]
fn a_failed_completion_asks_for_the_markers_again() {
    let mut h = Harness::new();
    let producer = h.init("app", None).unwrap();
    h.add("app", producer, &[("t", 0)]).unwrap();
    h.end("app", producer, false).unwrap();
    h.hold = true;
    let first = h.write_markers();
    h.fail_held();
    assert_eq!(h.metadata("app").state, TxnState::PrepareAbort);
    assert_eq!(h.markers, first);
    h.write_markers();
    assert_eq!(h.metadata("app").state, TxnState::CompleteAbort);
}

#[test]
fn the_next_transaction_starts_afresh_after_completion() {
    let mut h = Harness::new();
    let producer = h.init("app", None).unwrap();
    h.add("app", producer, &[("t", 0)]).unwrap();
    h.end("app", producer, true).unwrap();
    h.write_markers();
    h.now += 1_000;
    h.add("app", producer, &[("u", 3)]).unwrap();
    let next = h.metadata("app");
    assert_eq!(next.state, TxnState::Ongoing);
    assert_eq!(next.partitions, partitions(&[("u", 3)]));
    assert_eq!(next.start_ms, h.now as i64);
    assert_eq!(next.epoch, producer.epoch);
}

#[test]
fn a_transaction_without_partitions_completes_without_markers() {
    let mut h = Harness::new();
    let producer = h.init("app", None).unwrap();
    h.add("app", producer, &[]).unwrap();
    assert_eq!(h.metadata("app").state, TxnState::Ongoing);
    h.end("app", producer, true).unwrap();
    assert!(h.markers.is_empty());
    assert_eq!(h.metadata("app").state, TxnState::CompleteCommit);
}

#[test]
fn a_negative_producer_id_from_the_host_is_refused() {
    let mut h = Harness::new();
    let request =
        crate::txn::request::TxnRequest::InitProducerId(crate::txn::request::InitProducerId {
            transactional_id: "app".into(),
            timeout_ms: 1_000,
            expected: None,
            new_producer_id: Some(-3),
        });
    let token = h.send(request);
    assert_eq!(
        h.answer(token),
        Answer::InitProducerId(Err(TxnError::InvalidRequest))
    );
    assert_eq!(h.coordinator.transaction("app"), None);
}
