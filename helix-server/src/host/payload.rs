//! Outgoing Raft traffic cut to the transport's measure: one ready's
//! messages to a peer may carry many appends of large entries (five in
//! flight per follower and group, entries up to `batch_max_bytes`). Sent as
//! one payload they could exceed a frame, which the transport must refuse,
//! and every append in it would be lost and resent. Cut into payloads of
//! about [`MAX_PAYLOAD_BYTES`], in order, they leave one after the other on
//! the same lane.

use helix_raft::{Entry, Message, MessageBatch, MessageBody};

/// Target size of one payload (a single larger message goes alone).
pub const MAX_PAYLOAD_BYTES: usize = 8 << 20;
/// Rough cost of a message's header fields on the wire.
const MESSAGE_OVERHEAD_BYTES: usize = 64;

fn cost(m: &Message) -> usize {
    match &m.body {
        MessageBody::Append { entries, .. } => {
            MESSAGE_OVERHEAD_BYTES + entries.iter().map(Entry::cost).sum::<usize>()
        }
        _ => MESSAGE_OVERHEAD_BYTES,
    }
}

/// Splits `batch` into batches of at most `limit` bytes each (by message
/// cost), keeping the messages' order.
pub fn split_to_fit(batch: MessageBatch, limit: usize) -> Vec<MessageBatch> {
    if batch.messages.is_empty() {
        return Vec::new();
    }
    // The usual case: it fits, and leaves as it is.
    if batch.messages.iter().map(cost).sum::<usize>() <= limit {
        return vec![batch];
    }
    let (from, to) = (batch.from, batch.to);
    let part = |messages| MessageBatch { from, to, messages };
    let mut parts = Vec::new();
    let mut current = Vec::new();
    let mut bytes = 0;
    for m in batch.messages {
        let c = cost(&m);
        if !current.is_empty() && bytes + c > limit {
            parts.push(part(std::mem::take(&mut current)));
            bytes = 0;
        }
        bytes += c;
        current.push(m);
    }
    if !current.is_empty() {
        parts.push(part(current));
    }
    parts
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use helix_raft::{EntryKind, GroupId, LogIndex, NodeId, Term};

    use super::*;

    fn append(group: u64, index: u64, bytes: usize) -> Message {
        Message {
            group: GroupId(group),
            from: NodeId(1),
            to: NodeId(2),
            term: Term(1),
            body: MessageBody::Append {
                prev_index: LogIndex(index - 1),
                prev_term: Term(1),
                entries: vec![Entry {
                    term: Term(1),
                    index: LogIndex(index),
                    kind: EntryKind::Normal,
                    data: Bytes::from(vec![0u8; bytes]),
                }],
                commit: LogIndex(0),
                acknowledged: LogIndex(0),
            },
        }
    }

    fn batch(messages: Vec<Message>) -> MessageBatch {
        MessageBatch {
            from: NodeId(1),
            to: NodeId(2),
            messages,
        }
    }

    #[test]
    fn a_burst_of_large_appends_leaves_in_parts_under_the_limit_in_order() {
        let messages: Vec<Message> = (1..=10).map(|i| append(i % 3, i, 4 << 20)).collect();
        let parts = split_to_fit(batch(messages.clone()), MAX_PAYLOAD_BYTES);
        assert!(parts.len() >= 5, "{} parts", parts.len());
        for p in &parts {
            assert!(
                p.messages.len() == 1
                    || p.messages.iter().map(cost).sum::<usize>() <= MAX_PAYLOAD_BYTES
            );
            assert_eq!((p.from, p.to), (NodeId(1), NodeId(2)));
        }
        let rejoined: Vec<Message> = parts.into_iter().flat_map(|p| p.messages).collect();
        assert_eq!(rejoined, messages, "every message once, in order");
    }

    #[test]
    fn a_message_larger_than_the_limit_goes_alone_and_small_ones_share() {
        let messages = vec![
            append(1, 1, 10),
            append(1, 2, 100),
            append(1, 3, 1000),
            append(1, 4, 10),
        ];
        let parts = split_to_fit(batch(messages), 500);
        let sizes: Vec<usize> = parts.iter().map(|p| p.messages.len()).collect();
        assert_eq!(sizes, vec![2, 1, 1]);
        assert!(split_to_fit(batch(Vec::new()), 500).is_empty());
    }
}
