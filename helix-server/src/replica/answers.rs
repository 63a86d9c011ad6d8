//! Who waits for a partition's entries, and how they are answered: the
//! proposals not yet applied ([`Waiter`]) and the applied entries whose
//! acks=all answers wait for the acknowledged index ([`Unacked`]).

use std::sync::Mutex;
use std::time::Instant;

use helix_raft::LogIndex;
use tokio::sync::oneshot;

use super::producers::Decision;
use super::refused::Refused;
use crate::batcher::{PendingProduce, ProduceOutcome};
use crate::budget::Room;
use crate::error::{HelixError, Result};

/// Who waits for a proposed entry.
#[derive(Debug)]
pub enum Waiter {
    /// Each request with what the leader decided for it (appended in the
    /// entry, in this order, or a duplicate of what the log holds).
    Produce(Vec<(PendingProduce, Decision)>),
    DeleteRecords(oneshot::Sender<Result<i64>>),
    /// A transaction marker: answered with its offset.
    Marker(oneshot::Sender<Result<i64>>),
}

/// An applied entry: the high watermark it reaches once acknowledged, and
/// the answers that wait for that.
#[derive(Debug)]
pub struct Unacked {
    pub index: LogIndex,
    /// Log end offset right after this entry.
    pub end_offset: i64,
    /// Each answer keeps its request's backpressure room until it is sent.
    pub answers: Vec<(oneshot::Sender<ProduceOutcome>, ProduceOutcome, Room)>,
    /// DeleteRecords' (the new log start) or a marker's (its offset).
    pub offset_reply: Option<(oneshot::Sender<Result<i64>>, Result<i64>)>,
    pub proposed_at: Option<Instant>,
}

impl Unacked {
    pub fn new(index: LogIndex, end_offset: i64, proposed_at: Option<Instant>) -> Unacked {
        Unacked {
            index,
            end_offset,
            answers: Vec::new(),
            offset_reply: None,
            proposed_at,
        }
    }

    /// Sends every answer as applied (the entry is acknowledged).
    pub fn answer(self) {
        for (reply, answer, room) in self.answers {
            let _ = reply.send(answer);
            drop(room);
        }
        if let Some((reply, result)) = self.offset_reply {
            let _ = reply.send(result);
        }
    }

    /// Answers everyone with `err` instead; the entry itself stays (its
    /// position still moves the high watermark if it is acknowledged).
    pub fn fail(&mut self, err: &HelixError) {
        for (reply, _, _) in self.answers.drain(..) {
            let _ = reply.send(Err(copy_error(err)));
        }
        if let Some((reply, _)) = self.offset_reply.take() {
            let _ = reply.send(Err(copy_error(err)));
        }
    }
}

pub fn fail_waiter(waiter: Waiter, err: &HelixError, refused: &Mutex<Refused>) {
    match waiter {
        Waiter::Produce(requests) => {
            fail_requests(requests.into_iter().map(|(p, _)| p), err, refused)
        }
        Waiter::DeleteRecords(reply) | Waiter::Marker(reply) => {
            let _ = reply.send(Err(copy_error(err)));
        }
    }
}

/// Answers each request with `err`. A request refused as not the leader
/// (and so not stored by this answer's doing) is remembered by its
/// producer (`refused.rs`).
pub fn fail_requests(
    requests: impl IntoIterator<Item = PendingProduce>,
    err: &HelixError,
    refused: &Mutex<Refused>,
) {
    let not_leader = matches!(err, HelixError::NotLeader);
    let mut refused = refused.lock().ok().filter(|_| not_leader);
    for p in requests {
        if let Some(r) = refused.as_mut() {
            r.note(p.sender);
        }
        if let Some(reply) = p.reply {
            let _ = reply.send(Err(copy_error(err)));
        }
    }
}

/// The same failure for another waiter (errors are not Clone: they may
/// hold an io::Error). Storage failures stay storage failures.
pub fn copy_error(err: &HelixError) -> HelixError {
    match err {
        HelixError::NotLeader => HelixError::NotLeader,
        HelixError::RaftBackpressure => HelixError::RaftBackpressure,
        HelixError::ShuttingDown => HelixError::ShuttingDown,
        other => HelixError::Io(std::io::Error::other(other.to_string())),
    }
}
