//! Producers replaced and recovered: a second InitProducerId fences the
//! first and aborts its transaction, KIP-360 continues a producer that names
//! its epoch, exhausted epochs rotate the producer id, a transaction past
//! its timeout is aborted with its producer fenced, and idle ids expire.

use kafka_protocol::ResponseError;

use super::harness::{FIRST_PRODUCER_ID, Harness, TIMEOUT_MS, pid_epoch};
use crate::config::TxnConfig;
use crate::txn::error::TxnError;
use crate::txn::metadata::TxnMetadata;
use crate::txn::state::TxnState;

fn codes<T>(result: Result<T, TxnError>) -> Result<T, i16> {
    result.map_err(|e| e.code())
}

fn fenced() -> Result<(), i16> {
    Err(ResponseError::ProducerFenced.code())
}

#[test]
fn a_second_init_producer_id_fences_the_first_and_aborts_its_transaction() {
    let mut h = Harness::new();
    let first = h.init("app", None).unwrap();
    h.add("app", first, &[("t", 0)]).unwrap();

    let second = h.init("app", None);
    assert_eq!(
        codes(second),
        Err(ResponseError::ConcurrentTransactions.code())
    );
    let aborting = h.metadata("app");
    assert_eq!(aborting.state, TxnState::PrepareAbort);
    assert_eq!(aborting.epoch, 1, "the abort runs under a bumped epoch");
    assert_eq!(aborting.last_epoch, -1, "the fenced epoch is forgotten");
    assert_eq!(h.markers.len(), 1);
    assert!(!h.markers[0].commit);
    assert_eq!(h.markers[0].epoch, 1);

    // The old producer is fenced from everything.
    assert_eq!(codes(h.add("app", first, &[("t", 1)])), fenced());
    assert_eq!(codes(h.end("app", first, true)), fenced());
    // The new one retries while the markers are written, then succeeds.
    assert_eq!(
        codes(h.init("app", None)),
        Err(ResponseError::ConcurrentTransactions.code())
    );
    h.write_markers();
    assert_eq!(h.metadata("app").state, TxnState::CompleteAbort);
    let second = h.init("app", None).unwrap();
    assert_eq!(second, pid_epoch(FIRST_PRODUCER_ID, 2));
    assert_eq!(codes(h.end("app", first, false)), fenced());
    // KIP-360 cannot bring the fenced producer back either.
    assert_eq!(codes(h.init("app", Some(first)).map(|_| ())), fenced());
}

#[test]
fn kip_360_a_producer_naming_its_current_epoch_continues_with_the_next() {
    let mut h = Harness::new();
    let first = h.init("app", None).unwrap();
    h.add("app", first, &[("t", 0)]).unwrap();
    h.end("app", first, false).unwrap();
    h.write_markers();

    let next = h.init("app", Some(first)).unwrap();
    assert_eq!(next, pid_epoch(first.producer_id, 1));
    let m = h.metadata("app");
    assert_eq!((m.epoch, m.last_epoch), (1, 0));
    // The same request again (its answer was lost): the same epoch.
    assert_eq!(h.init("app", Some(first)).unwrap(), next);
    assert_eq!(h.metadata("app").epoch, 1);
    // From there the producer goes on with the new epoch.
    assert_eq!(
        h.init("app", Some(next)).unwrap(),
        pid_epoch(first.producer_id, 2)
    );
    // An epoch that is neither current nor last, or another producer id.
    assert_eq!(
        codes(
            h.init("app", Some(pid_epoch(first.producer_id, 9)))
                .map(|_| ())
        ),
        fenced()
    );
    assert_eq!(
        codes(h.init("app", Some(pid_epoch(4, 2))).map(|_| ())),
        fenced()
    );
}

#[test]
fn kip_360_on_an_unknown_transactional_id_starts_a_new_producer() {
    let mut h = Harness::new();
    let given = h.init("app", Some(pid_epoch(77, 4))).unwrap();
    assert_eq!(given, pid_epoch(FIRST_PRODUCER_ID, 0));
}

fn idle_at_epoch(producer_id: i64, epoch: i16) -> TxnMetadata {
    TxnMetadata {
        producer_id,
        last_producer_id: producer_id,
        epoch,
        last_epoch: -1,
        timeout_ms: TIMEOUT_MS,
        state: TxnState::CompleteCommit,
        partitions: Default::default(),
        start_ms: 10,
        last_update_ms: 20,
    }
}

#[test]
fn exhausted_epochs_rotate_to_a_new_producer_id() {
    let last = i16::MAX - 1;
    let mut h = Harness::new();
    h.load_state("app", idle_at_epoch(7, last));
    assert!(h.coordinator.needs_producer_id("app", None));
    assert!(
        h.coordinator
            .needs_producer_id("app", Some(pid_epoch(7, last)))
    );
    assert!(
        !h.coordinator
            .needs_producer_id("app", Some(pid_epoch(7, 3)))
    );

    let rotated = h.init("app", Some(pid_epoch(7, last))).unwrap();
    assert_eq!(rotated, pid_epoch(FIRST_PRODUCER_ID, 0));
    let m = h.metadata("app");
    assert_eq!((m.last_producer_id, m.last_epoch), (7, last));
    // A retry naming the old producer id (its answer was lost) gets the
    // rotated producer again, not a fence.
    assert!(
        !h.coordinator
            .needs_producer_id("app", Some(pid_epoch(7, last)))
    );
    assert_eq!(h.init("app", Some(pid_epoch(7, last))).unwrap(), rotated);
}

#[test]
fn rotation_without_a_supplied_producer_id_is_retriable() {
    let mut h = Harness::new();
    h.load_state("app", idle_at_epoch(7, i16::MAX - 1));
    let request = crate::txn::request::InitProducerId {
        transactional_id: "app".into(),
        timeout_ms: TIMEOUT_MS,
        expected: None,
        new_producer_id: None,
    };
    let token = h.send(crate::txn::request::TxnRequest::InitProducerId(request));
    assert_eq!(
        h.answer(token),
        crate::txn::response::Answer::InitProducerId(Err(TxnError::ConcurrentTransactions))
    );
    assert_eq!(h.metadata("app"), idle_at_epoch(7, i16::MAX - 1));
}

#[test]
fn fencing_at_the_last_epoch_aborts_then_rotates_on_the_retry() {
    let mut h = Harness::new();
    let mut ongoing = idle_at_epoch(7, i16::MAX - 1);
    ongoing.state = TxnState::Ongoing;
    ongoing.partitions = super::harness::partitions(&[("t", 0)]);
    h.load_state("app", ongoing);
    assert_eq!(
        codes(h.init("app", None)),
        Err(ResponseError::ConcurrentTransactions.code())
    );
    assert_eq!(h.metadata("app").epoch, i16::MAX);
    h.write_markers();
    let rotated = h.init("app", None).unwrap();
    assert_eq!(rotated, pid_epoch(FIRST_PRODUCER_ID, 0));
}

#[test]
fn a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced() {
    let mut h = Harness::new();
    let producer = h.init("app", None).unwrap();
    h.add("app", producer, &[("t", 0)]).unwrap();
    let started = h.metadata("app").start_ms;

    // At the timeout itself nothing happens (Kafka: start + timeout < now).
    h.tick(TIMEOUT_MS as u64);
    assert_eq!(h.metadata("app").state, TxnState::Ongoing);
    h.tick(h.config.abort_check_interval_ms);
    let aborting = h.metadata("app");
    assert_eq!(aborting.state, TxnState::PrepareAbort);
    assert_eq!(aborting.epoch, producer.epoch + 1);
    assert_eq!(aborting.start_ms, started);
    assert_eq!(
        aborting.last_update_ms, h.now as i64,
        "time enters the record"
    );
    assert_eq!(h.markers.len(), 1);
    assert!(!h.markers[0].commit);

    // The late producer finds itself fenced.
    assert_eq!(codes(h.end("app", producer, true)), fenced());
    assert_eq!(codes(h.add("app", producer, &[("t", 1)])), fenced());
    h.write_markers();
    assert_eq!(h.metadata("app").state, TxnState::CompleteAbort);
    assert_eq!(codes(h.init("app", Some(producer)).map(|_| ())), fenced());
    assert_eq!(
        h.init("app", None).unwrap(),
        pid_epoch(producer.producer_id, 2)
    );
}

#[test]
fn a_timed_out_abort_in_flight_is_proposed_once() {
    let mut h = Harness::new();
    let producer = h.init("app", None).unwrap();
    h.add("app", producer, &[("t", 0)]).unwrap();
    h.hold = true;
    h.tick(TIMEOUT_MS as u64 + 1);
    h.hold = true;
    h.tick(h.config.abort_check_interval_ms);
    assert_eq!(h.held.len(), 1, "one abort for one transaction");
    h.release();
    assert_eq!(h.metadata("app").state, TxnState::PrepareAbort);
    assert_eq!(h.metadata("app").epoch, producer.epoch + 1);
}

#[test]
fn an_idle_transactional_id_expires_and_a_busy_one_does_not() {
    let config = TxnConfig {
        transactional_id_expiration_ms: 100_000,
        max_timeout_ms: 10_000_000,
        ..super::harness::config()
    };
    let mut h = Harness::with_config(config);
    h.tick(0);
    let idle = h.init("idle", None).unwrap();
    let busy = h.init("busy", None).unwrap();
    h.add("busy", busy, &[("t", 0)]).unwrap();
    assert_eq!(h.metadata("idle").epoch, idle.epoch);

    h.tick(h.config.expiry_check_interval_ms);
    assert_eq!(h.coordinator.transaction("idle"), None);
    assert!(h.coordinator.transaction("busy").is_some());
    // Forgotten: the id starts over with a new producer id.
    let again = h.init("idle", None).unwrap();
    assert_ne!(again.producer_id, idle.producer_id);
}
