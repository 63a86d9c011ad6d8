//! The controller's command log: Raft group 0 (helix-raft) over a helix-wal
//! log, one voter on a single node.
//!
//! A command is proposed as a Raft entry (its JSON); once committed it is
//! appended to the WAL as a one-record v2 batch (encoded with
//! `kafka-protocol`), fsynced, and only when the group acknowledges it does
//! `append` return. At start the WAL is read back batch by batch and every
//! command replayed. When the cluster has more nodes, group 0 gets its other
//! voters and this file its transport; the command type and the apply step
//! in `controller/mod.rs` stay as they are.

use std::path::Path;

use bytes::{Bytes, BytesMut};
use helix_raft::{EntryKind, LogIndex, RaftGroup};
use helix_wal::{Durability, LogConfig, PartitionLog, RaftPosition};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use super::Command;
use crate::error::{HelixError, Result};
use crate::partition::raft::{GroupSpec, HardStateFile, RaftSettings, restore_group};

/// Raft group id of the controller.
pub const CONTROLLER_GROUP: u64 = 0;

/// Bytes read per step when replaying the log at start.
const REPLAY_CHUNK: usize = 1 << 20;

/// The durable, replicated (for now one-voter) sequence of commands.
#[derive(Debug)]
pub struct CommandLog {
    wal: PartitionLog,
    group: RaftGroup,
    hard_state: HardStateFile,
}

impl CommandLog {
    /// Opens group 0 in `dir` (WAL in `dir/wal`) and returns it with every
    /// command it holds, in order.
    pub fn open(dir: &Path, node_id: i32) -> Result<(CommandLog, Vec<Command>)> {
        std::fs::create_dir_all(dir)?;
        // Controller changes are rare and must outlive a power loss: fsync.
        let config = LogConfig {
            durability: Durability::Fsync,
            segment_bytes: 64 << 20,
            ..LogConfig::default()
        };
        let (wal, recovery) = PartitionLog::open(&dir.join("wal"), config)?;
        let commands = replay(&wal, recovery.next_offset)?;
        let hard_state = HardStateFile::new(dir);
        let node = helix_raft::NodeId(
            u64::try_from(node_id)
                .map_err(|_| HelixError::Config("node id must be positive".into()))?,
        );
        let spec = GroupSpec {
            node,
            group: helix_raft::GroupId(CONTROLLER_GROUP),
            voters: vec![node],
            raft: RaftSettings::default(),
        };
        let _ = recovery;
        let group = restore_group(&spec, hard_state.load()?, &wal)?;
        let mut log = CommandLog {
            wal,
            group,
            hard_state,
        };
        log.drive(None)?;
        Ok((log, commands))
    }

    /// Makes `command` durable through group 0; returns once acknowledged.
    pub fn append(&mut self, command: &Command) -> Result<()> {
        let json = serde_json::to_vec(command)
            .map_err(|e| HelixError::CorruptState(format!("cannot encode command: {e}")))?;
        let index = self.group.propose(Bytes::from(json))?;
        self.drive(Some(index))
    }

    /// Does what the group asks until it has nothing more; with `wait`,
    /// fails unless that index ends acknowledged.
    fn drive(&mut self, wait: Option<LogIndex>) -> Result<()> {
        let mut acknowledged = LogIndex(0);
        loop {
            let ready = self.group.ready();
            if let Some(hs) = ready.hard_state {
                self.hard_state.store(hs)?;
            }
            if ready.truncate_wal_after.is_some() {
                return Err(HelixError::CorruptState(
                    "controller WAL truncation on a single node".into(),
                ));
            }
            let mut last = None;
            for e in ready.to_apply {
                let pos = RaftPosition {
                    term: e.term.0,
                    index: e.index.0,
                };
                match e.kind {
                    EntryKind::Noop => self.wal.append(pos, &[])?,
                    EntryKind::Normal => {
                        let batch = encode_batch(self.wal.next_offset(), e.term.0, &e.data)?;
                        self.wal.append(pos, &batch)?
                    }
                };
                last = Some(e.index);
            }
            if let Some(last) = last {
                let durable = self.wal.sync()?.map_or(LogIndex(0), |p| LogIndex(p.index));
                self.group.durable_to(durable.min(last))?;
            }
            if let Some(ack) = ready.acknowledged {
                acknowledged = ack;
            }
            if !self.group.has_ready() {
                break;
            }
        }
        match wait {
            Some(index) if acknowledged < index && self.group.acknowledged() < index => {
                Err(HelixError::CorruptState(format!(
                    "controller entry {} was not acknowledged",
                    index.0
                )))
            }
            _ => Ok(()),
        }
    }
}

/// One command as a one-record v2 batch at `offset`, leader epoch `term`.
fn encode_batch(offset: i64, term: u64, json: &Bytes) -> Result<Bytes> {
    let record = Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: i32::try_from(term).unwrap_or(i32::MAX),
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset,
        sequence: -1,
        timestamp: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0),
        key: None,
        value: Some(json.clone()),
        headers: Default::default(),
    };
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, [&record], &options).map_err(|e| {
        HelixError::CorruptState(format!("cannot encode a controller batch: {e:#}"))
    })?;
    Ok(buf.freeze())
}

/// Every command in the WAL from its start to `end`.
fn replay(wal: &PartitionLog, end: i64) -> Result<Vec<Command>> {
    let reader = wal.reader();
    let mut commands = Vec::new();
    let mut offset = reader.log_start_offset();
    while offset < end {
        let chunk = reader.read(offset, REPLAY_CHUNK)?;
        if chunk.next_offset <= offset {
            break;
        }
        let mut bytes = chunk.bytes.clone();
        let sets = RecordBatchDecoder::decode_all(&mut bytes).map_err(|e| {
            HelixError::CorruptState(format!("controller batch at {offset}: {e:#}"))
        })?;
        for set in sets {
            for record in set.records {
                let value = record.value.unwrap_or_default();
                let command = serde_json::from_slice::<Command>(&value).map_err(|e| {
                    HelixError::CorruptState(format!(
                        "controller command at offset {}: {e}",
                        record.offset
                    ))
                })?;
                commands.push(command);
            }
        }
        offset = chunk.next_offset;
    }
    Ok(commands)
}
