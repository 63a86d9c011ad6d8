//! Codec round trips and hostile input: any byte string decodes to a typed
//! error or a batch, never a panic, and nothing is allocated beyond what the
//! input can hold.

use bytes::Bytes;
use helix_raft::{
    Entry, EntryKind, GroupId, LogIndex, Message, MessageBatch, MessageBody, NodeId, Term,
    decode_batch, encode_batch,
};
use proptest::prelude::*;

fn body() -> impl Strategy<Value = MessageBody> {
    let idx = any::<u64>().prop_map(LogIndex);
    let term = any::<u64>().prop_map(Term);
    prop_oneof![
        (idx.clone(), term.clone()).prop_map(|(last_index, last_term)| MessageBody::PreVote {
            last_index,
            last_term
        }),
        any::<bool>().prop_map(|reject| MessageBody::PreVoteResponse { reject }),
        (idx.clone(), term.clone(), any::<bool>()).prop_map(|(last_index, last_term, transfer)| {
            MessageBody::Vote {
                last_index,
                last_term,
                transfer,
            }
        }),
        any::<bool>().prop_map(|reject| MessageBody::VoteResponse { reject }),
        (
            0u64..1 << 40,
            term.clone(),
            prop::collection::vec(
                (
                    term.clone(),
                    any::<bool>(),
                    prop::collection::vec(any::<u8>(), 0..40)
                ),
                0..5
            ),
            idx.clone(),
            idx.clone()
        )
            .prop_map(
                |(prev, prev_term, es, commit, acknowledged)| MessageBody::Append {
                    prev_index: LogIndex(prev),
                    prev_term,
                    entries: es
                        .into_iter()
                        .enumerate()
                        .map(|(k, (t, noop, d))| Entry {
                            term: t,
                            index: LogIndex(prev + 1 + k as u64),
                            kind: if noop {
                                EntryKind::Noop
                            } else {
                                EntryKind::Normal
                            },
                            data: Bytes::from(d),
                        })
                        .collect(),
                    commit,
                    acknowledged,
                }
            ),
        (
            any::<bool>(),
            idx.clone(),
            idx.clone(),
            term.clone(),
            idx.clone(),
            idx.clone()
        )
            .prop_map(
                |(reject, index, hint_index, hint_term, last_index, durable)| {
                    MessageBody::AppendResponse {
                        reject,
                        index,
                        hint_index,
                        hint_term,
                        last_index,
                        durable,
                    }
                }
            ),
        (idx.clone(), idx.clone()).prop_map(|(commit, acknowledged)| MessageBody::Heartbeat {
            commit,
            acknowledged
        }),
        (idx.clone(), idx.clone())
            .prop_map(|(matched, durable)| MessageBody::HeartbeatResponse { matched, durable }),
        (idx.clone(), idx).prop_map(|(commit, acknowledged)| MessageBody::Commit {
            commit,
            acknowledged
        }),
        Just(MessageBody::TimeoutNow),
    ]
}

proptest! {
    #[test]
    fn batches_round_trip(from in any::<u64>(), to in any::<u64>(),
                          msgs in prop::collection::vec((any::<u64>(), any::<u64>(), body()), 0..8)) {
        let batch = MessageBatch {
            from: NodeId(from),
            to: NodeId(to),
            messages: msgs.into_iter().map(|(g, t, body)| Message {
                group: GroupId(g), from: NodeId(from), to: NodeId(to), term: Term(t), body,
            }).collect(),
        };
        let bytes = encode_batch(&batch);
        prop_assert_eq!(decode_batch(bytes).expect("own encoding decodes"), batch);
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_batch(Bytes::from(data));
    }

    #[test]
    fn truncated_or_flipped_batches_are_errors_or_batches(cut in 0usize..200, flip in 0usize..200, bit in 0u8..8) {
        let batch = MessageBatch {
            from: NodeId(1),
            to: NodeId(2),
            messages: vec![Message {
                group: GroupId(3), from: NodeId(1), to: NodeId(2), term: Term(4),
                body: MessageBody::Append {
                    prev_index: LogIndex(9), prev_term: Term(4),
                    entries: vec![Entry { term: Term(4), index: LogIndex(10), kind: EntryKind::Normal, data: Bytes::from_static(b"payload") }],
                    commit: LogIndex(9), acknowledged: LogIndex(8),
                },
            }],
        };
        let mut bytes = encode_batch(&batch).to_vec();
        if flip < bytes.len() { bytes[flip] ^= 1 << bit; }
        bytes.truncate(cut.min(bytes.len()));
        let _ = decode_batch(Bytes::from(bytes));
    }
}

#[test]
fn huge_declared_counts_are_rejected_before_allocating() {
    // version, from, to, count = u64::MAX
    let mut b = vec![1u8, 1, 2];
    b.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
    assert!(decode_batch(Bytes::from(b)).is_err());
}

#[test]
fn a_caught_up_groups_heartbeat_costs_a_few_bytes() {
    let hb = |g: u64| Message {
        group: GroupId(g),
        from: NodeId(1),
        to: NodeId(2),
        term: Term(3),
        body: MessageBody::Heartbeat {
            commit: LogIndex(100_000),
            acknowledged: LogIndex(100_000),
        },
    };
    let one = encode_batch(&MessageBatch {
        from: NodeId(1),
        to: NodeId(2),
        messages: vec![hb(1000)],
    })
    .len();
    let many = encode_batch(&MessageBatch {
        from: NodeId(1),
        to: NodeId(2),
        messages: (1000..2000).map(hb).collect(),
    })
    .len();
    let per_group = (many - one) as f64 / 999.0;
    assert!(per_group < 7.5, "{per_group} bytes per heartbeat");
}
