//! The order in which one connection's requests take effect. Kafka handles
//! a connection's requests one at a time (its socket server mutes the
//! channel until the response is sent), so a client may pipeline requests
//! and rely on them taking effect in the order it sent them: two
//! OffsetCommits of the same partition leave the second one's offset,
//! CreateTopics followed by Metadata sees the topic.
//!
//! Helix pipelines, and runs each request's handler as a task of its own,
//! so two handlers could reach the group coordinator (or the controller)
//! in either order: measured, a pipelined stream of commits of one
//! partition ended with an earlier offset than its last, each answered
//! NONE. Produce keeps its own order (it is queued to its partitions in
//! request order before its handler runs) and Fetch changes nothing; every
//! other request starts only once the connection's previous such request
//! is answered, as on Kafka.

use kafka_protocol::messages::ApiKey;
use tokio::sync::oneshot;

/// The last request of a connection whose effects later ones must follow.
#[derive(Default)]
pub struct RequestOrder {
    previous: Option<oneshot::Receiver<()>>,
}

/// A request's place in its connection's order: wait for [`Turn::begin`]
/// before handling it, hold the returned [`Done`] until it is answered.
pub struct Turn {
    after: Option<oneshot::Receiver<()>>,
    done: Option<oneshot::Sender<()>>,
}

/// Held while a request is being handled; dropping it lets the next one
/// of the connection begin.
pub struct Done {
    _next: Option<oneshot::Sender<()>>,
}

impl RequestOrder {
    /// The turn of the next request read, of API `key` (None: a frame
    /// whose key is unknown, which is refused without effects).
    pub fn next(&mut self, key: Option<ApiKey>) -> Turn {
        let ordered = key.is_some_and(|k| !matches!(k, ApiKey::Produce | ApiKey::Fetch));
        if !ordered {
            return Turn {
                after: None,
                done: None,
            };
        }
        let (done, next) = oneshot::channel();
        Turn {
            after: self.previous.replace(next),
            done: Some(done),
        }
    }
}

impl Turn {
    /// Waits until the connection's previous ordered request is answered
    /// (or was dropped).
    pub async fn begin(self) -> Done {
        if let Some(previous) = self.after {
            let _ = previous.await;
        }
        Done { _next: self.done }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Ordered requests take effect in the order they were read, whatever
    /// order their tasks run in; Produce and Fetch do not wait.
    #[tokio::test]
    async fn ordered_requests_begin_in_order_and_produce_does_not_wait() {
        let mut order = RequestOrder::default();
        let log = Arc::new(Mutex::new(Vec::new()));
        let turns: Vec<Turn> = (0..5)
            .map(|_| order.next(Some(ApiKey::OffsetCommit)))
            .collect();
        let produce = order.next(Some(ApiKey::Produce));
        let mut tasks = Vec::new();
        // Started in reverse: each still begins after the one before it.
        for (i, turn) in turns.into_iter().enumerate().rev() {
            let log = log.clone();
            tasks.push(tokio::spawn(async move {
                let done = turn.begin().await;
                log.lock().expect("log").push(i);
                tokio::task::yield_now().await;
                drop(done);
            }));
        }
        drop(produce.begin().await);
        for t in tasks {
            t.await.expect("task");
        }
        assert_eq!(*log.lock().expect("log"), vec![0, 1, 2, 3, 4]);
    }
}
