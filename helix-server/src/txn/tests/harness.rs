//! A host for the coordinator in tests: numbers requests, hands out
//! producer ids when asked, collects answers by token and markers owed,
//! acknowledges proposals (or holds them), and keeps the log of
//! acknowledged entries so a fresh coordinator can replay it. As the host
//! deletes the log before an acknowledged snapshot, every replay here
//! starts at a partition's last snapshot entry: what came before is never
//! read again.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::config::TxnConfig;
use crate::txn::coordinator::Coordinator;
use crate::txn::error::TxnError;
use crate::txn::metadata::TxnMetadata;
use crate::txn::record::{Record, decode_entry, encode_entry};
use crate::txn::request::{AddOffsets, AddPartitions, EndTxn, InitProducerId, TxnRequest};
use crate::txn::response::{Answer, MarkerWrite, PartitionVerdicts, Proposal};
use crate::txn::types::{ProducerIdAndEpoch, RequestToken, StatePartition, TopicPartition};

pub const TIMEOUT_MS: i32 = 60_000;
/// The first producer id of the test's block.
pub const FIRST_PRODUCER_ID: i64 = 1_000;

pub fn config() -> TxnConfig {
    TxnConfig {
        state_partitions: 5,
        ..TxnConfig::default()
    }
}

pub fn pid_epoch(producer_id: i64, epoch: i16) -> ProducerIdAndEpoch {
    ProducerIdAndEpoch { producer_id, epoch }
}

pub fn partitions(list: &[(&str, i32)]) -> std::collections::BTreeSet<TopicPartition> {
    list.iter()
        .map(|(t, p)| TopicPartition::new(t, *p))
        .collect()
}

pub struct Harness {
    pub coordinator: Coordinator,
    pub config: TxnConfig,
    pub now: u64,
    next_token: u64,
    next_producer_id: i64,
    pub replies: BTreeMap<RequestToken, Answer>,
    /// Markers asked for and not yet reported written.
    pub markers: Vec<MarkerWrite>,
    /// Acknowledged entries in log order.
    pub log: Vec<(StatePartition, Bytes)>,
    /// When set, proposals wait in `held` instead of being acknowledged.
    pub hold: bool,
    pub held: Vec<Proposal>,
    /// Every partition's live view after each acknowledgement: what replay
    /// of the log up to that entry must rebuild.
    pub history: Vec<Views>,
}

/// Every hosted partition's view.
pub type Views = BTreeMap<StatePartition, BTreeMap<String, TxnMetadata>>;

pub fn views(coordinator: &Coordinator, partitions: u32) -> Views {
    (0..partitions)
        .map(StatePartition)
        .filter_map(|p| Some((p, coordinator.view(p)?.clone())))
        .collect()
}

impl Harness {
    pub fn new() -> Self {
        Self::with_config(config())
    }

    pub fn with_config(config: TxnConfig) -> Self {
        let mut coordinator = Coordinator::new(config.clone());
        for p in 0..config.state_partitions {
            coordinator.begin_load(StatePartition(p));
            coordinator.finish_load(StatePartition(p), 1);
        }
        let mut harness = Self {
            coordinator,
            config,
            now: 1_000_000,
            next_token: 0,
            next_producer_id: FIRST_PRODUCER_ID,
            replies: BTreeMap::new(),
            markers: Vec::new(),
            log: Vec::new(),
            hold: false,
            held: Vec::new(),
            history: Vec::new(),
        };
        harness.pump();
        harness
    }

    /// Loads `transactional_id`'s partition afresh from one record holding
    /// `metadata`, as if the log said so: puts a transaction in any state.
    pub fn load_state(&mut self, transactional_id: &str, metadata: TxnMetadata) {
        let partition = self.coordinator.partition_for(transactional_id);
        let record = Record::Metadata {
            transactional_id: transactional_id.to_owned(),
            metadata,
        };
        let entry = encode_entry(&[record]);
        self.log.retain(|(at, _)| *at != partition);
        self.coordinator.begin_load(partition);
        self.coordinator.replay(partition, &entry).expect("replays");
        self.coordinator.finish_load(partition, 2);
        self.log.push((partition, entry));
        self.pump();
    }

    pub fn pump(&mut self) {
        loop {
            let ready = self.coordinator.take_ready();
            if ready.is_empty() {
                return;
            }
            for reply in ready.replies {
                let previous = self.replies.insert(reply.token, reply.answer);
                assert!(previous.is_none(), "token {:?} answered twice", reply.token);
            }
            self.markers.extend(ready.markers);
            for proposal in ready.proposals {
                if self.hold {
                    self.held.push(proposal);
                } else {
                    self.acknowledge(proposal);
                }
            }
        }
    }

    fn acknowledge(&mut self, proposal: Proposal) {
        assert_eq!(
            proposal.compacts,
            is_snapshot(&proposal.entry),
            "a proposal compacts exactly when it is a snapshot"
        );
        self.log.push((proposal.partition, proposal.entry.clone()));
        self.coordinator.on_acknowledged(proposal.id);
        let live = views(&self.coordinator, self.config.state_partitions);
        self.history.push(live);
    }

    /// Acknowledges the oldest held proposal only; later ones stay held.
    pub fn acknowledge_oldest(&mut self) {
        let proposal = self.held.remove(0);
        self.acknowledge(proposal);
        self.pump();
    }

    /// Acknowledges every held proposal, in order.
    pub fn release(&mut self) {
        self.hold = false;
        for proposal in std::mem::take(&mut self.held) {
            self.acknowledge(proposal);
        }
        self.pump();
    }

    /// A failover of `partition`'s leadership: the coordinator unloads it
    /// (its waiting requests answered NOT_COORDINATOR), each held proposal
    /// of it is either committed by the new term (`keep` says which) or
    /// lost, and the partition is loaded again from its log.
    pub fn fail_over(&mut self, partition: StatePartition, keep: &mut impl FnMut() -> bool) {
        self.coordinator.unload(partition);
        let held = std::mem::take(&mut self.held);
        for proposal in held {
            if proposal.partition != partition {
                self.held.push(proposal);
            } else if keep() {
                self.log.push((partition, proposal.entry));
            }
        }
        self.coordinator.begin_load(partition);
        for entry in live_log(&self.log, partition) {
            self.coordinator
                .replay(partition, entry)
                .expect("log replays");
        }
        self.coordinator.finish_load(partition, 9);
        // A new leader asks again for every marker its Prepare states owe.
        self.markers.retain(|m| m.partition != partition);
        self.pump();
    }

    /// Fails every held proposal.
    pub fn fail_held(&mut self) {
        self.hold = false;
        for proposal in std::mem::take(&mut self.held) {
            self.coordinator.on_proposal_failed(proposal.id);
        }
        self.pump();
    }

    pub fn send(&mut self, request: TxnRequest) -> RequestToken {
        self.next_token += 1;
        let token = RequestToken(self.next_token);
        self.coordinator.handle(token, request, self.now);
        self.pump();
        token
    }

    /// The answer to `token`, which must have been given.
    pub fn answer(&mut self, token: RequestToken) -> Answer {
        self.replies
            .remove(&token)
            .unwrap_or_else(|| panic!("no answer for {token:?}"))
    }

    pub fn is_answered(&self, token: RequestToken) -> bool {
        self.replies.contains_key(&token)
    }

    /// InitProducerId as the host sends it: with a producer id from the
    /// block when the coordinator says it needs one.
    pub fn init_request(
        &mut self,
        transactional_id: &str,
        expected: Option<ProducerIdAndEpoch>,
    ) -> TxnRequest {
        let new_producer_id = self
            .coordinator
            .needs_producer_id(transactional_id, expected)
            .then(|| {
                self.next_producer_id += 1;
                self.next_producer_id - 1
            });
        TxnRequest::InitProducerId(InitProducerId {
            transactional_id: transactional_id.to_owned(),
            timeout_ms: TIMEOUT_MS,
            expected,
            new_producer_id,
        })
    }

    pub fn init(
        &mut self,
        transactional_id: &str,
        expected: Option<ProducerIdAndEpoch>,
    ) -> Result<ProducerIdAndEpoch, TxnError> {
        let request = self.init_request(transactional_id, expected);
        let token = self.send(request);
        match self.answer(token) {
            Answer::InitProducerId(result) => result,
            other => panic!("unexpected answer {other:?}"),
        }
    }

    pub fn add_request(
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        list: &[(&str, i32)],
    ) -> AddPartitions {
        AddPartitions {
            transactional_id: transactional_id.to_owned(),
            producer_id: producer.producer_id,
            epoch: producer.epoch,
            partitions: partitions(list),
        }
    }

    pub fn add(
        &mut self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        list: &[(&str, i32)],
    ) -> Result<(), TxnError> {
        let request = Self::add_request(transactional_id, producer, list);
        let token = self.send(TxnRequest::AddPartitions(request));
        match self.answer(token) {
            Answer::AddPartitions(result) => result,
            other => panic!("unexpected answer {other:?}"),
        }
    }

    pub fn add_offsets(
        &mut self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        group_id: &str,
    ) -> Result<(), TxnError> {
        let request = TxnRequest::AddOffsets(AddOffsets {
            transactional_id: transactional_id.to_owned(),
            producer_id: producer.producer_id,
            epoch: producer.epoch,
            group_id: group_id.to_owned(),
            offsets_partitions: 50,
        });
        let token = self.send(request);
        match self.answer(token) {
            Answer::AddOffsets(result) => result,
            other => panic!("unexpected answer {other:?}"),
        }
    }

    pub fn verify(
        &mut self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        list: &[(&str, i32)],
    ) -> Result<PartitionVerdicts, TxnError> {
        let request = Self::add_request(transactional_id, producer, list);
        let token = self.send(TxnRequest::VerifyPartitions(request));
        match self.answer(token) {
            Answer::VerifyPartitions(result) => result,
            other => panic!("unexpected answer {other:?}"),
        }
    }

    pub fn end_request(
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        commit: bool,
    ) -> TxnRequest {
        TxnRequest::EndTxn(EndTxn {
            transactional_id: transactional_id.to_owned(),
            producer_id: producer.producer_id,
            epoch: producer.epoch,
            commit,
        })
    }

    pub fn end(
        &mut self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        commit: bool,
    ) -> Result<(), TxnError> {
        let token = self.send(Self::end_request(transactional_id, producer, commit));
        match self.answer(token) {
            Answer::EndTxn(result) => result,
            other => panic!("unexpected answer {other:?}"),
        }
    }

    /// Reports every owed marker written, as the host would once each
    /// partition's control batch is acknowledged.
    pub fn write_markers(&mut self) -> Vec<MarkerWrite> {
        let written = std::mem::take(&mut self.markers);
        for marker in &written {
            self.coordinator.on_markers_written(
                marker.partition,
                &marker.transactional_id,
                marker.producer_id,
                marker.epoch,
                self.now,
            );
        }
        self.pump();
        written
    }

    pub fn tick(&mut self, advance_ms: u64) {
        self.now += advance_ms;
        self.coordinator.tick(self.now);
        self.pump();
    }

    pub fn metadata(&self, transactional_id: &str) -> TxnMetadata {
        self.coordinator
            .transaction(transactional_id)
            .cloned()
            .unwrap_or_else(|| panic!("{transactional_id} is not known"))
    }

    /// A fresh coordinator that replays the acknowledged log of every
    /// partition, as a new leader does; returns it with what it asked for.
    pub fn replayed(&self) -> (Coordinator, Vec<MarkerWrite>) {
        self.replayed_prefix(self.log.len())
    }

    /// As [`Self::replayed`], from the first `length` entries of the log
    /// (what a truncation leaves).
    pub fn replayed_prefix(&self, length: usize) -> (Coordinator, Vec<MarkerWrite>) {
        let mut fresh = Coordinator::new(self.config.clone());
        for p in 0..self.config.state_partitions {
            let partition = StatePartition(p);
            fresh.begin_load(partition);
            for entry in live_log(&self.log[..length], partition) {
                fresh.replay(partition, entry).expect("log replays");
            }
            fresh.finish_load(partition, 3);
        }
        let ready = fresh.take_ready();
        assert!(ready.replies.is_empty() && ready.proposals.is_empty());
        (fresh, ready.markers)
    }
}

/// Whether `entry` is a snapshot of a partition's whole view.
pub fn is_snapshot(entry: &[u8]) -> bool {
    decode_entry(entry).is_ok_and(|records| {
        records
            .iter()
            .any(|record| matches!(record, Record::Snapshot { .. }))
    })
}

/// `partition`'s entries of `log` from its last snapshot on: what is left
/// of its log once the host has deleted what a snapshot holds.
pub fn live_log(log: &[(StatePartition, Bytes)], partition: StatePartition) -> Vec<&Bytes> {
    let entries: Vec<&Bytes> = log
        .iter()
        .filter(|(at, _)| *at == partition)
        .map(|(_, entry)| entry)
        .collect();
    let start = entries
        .iter()
        .rposition(|entry| is_snapshot(entry))
        .unwrap_or(0);
    entries[start..].to_vec()
}
