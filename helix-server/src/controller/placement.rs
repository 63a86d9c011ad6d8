//! Where partitions live: replica sets chosen when a topic is created or
//! grows, by the node that proposes the command (the sets are logged, so
//! every node agrees). Round robin over the sorted members: partition `p`'s
//! preferred leader is the node at `(start + p) mod n` and its followers the
//! next `rf - 1` nodes; `start` carries on from the partitions the cluster
//! already has, so preferred leaders (and with them the write load) spread
//! evenly across nodes and topics.

use helix_raft::NodeId;

use super::ControllerView;
use crate::error::{HelixError, Result};

/// Replica sets for `count` new partitions of `rf` replicas each.
pub fn assign(
    members: &[NodeId],
    rf: usize,
    count: usize,
    view: &ControllerView,
) -> Result<Vec<Vec<u64>>> {
    let n = members.len();
    if rf == 0 || rf > n {
        return Err(HelixError::InvalidReplicationFactor(format!(
            "replication factor {rf}: the cluster has {n} node(s)"
        )));
    }
    let mut sorted = members.to_vec();
    sorted.sort();
    let existing: usize = view.topics.values().map(|t| t.replicas.len()).sum();
    Ok((0..count)
        .map(|p| (0..rf).map(|k| sorted[(existing + p + k) % n].0).collect())
        .collect())
}

/// The replica sets of the fixed internal topics (the group coordinator's
/// partitions): derived from the member list alone, the same on every node
/// without a controller round trip.
pub fn internal(members: &[NodeId], rf: usize, count: usize) -> Vec<Vec<NodeId>> {
    let mut sorted = members.to_vec();
    sorted.sort();
    let n = sorted.len().max(1);
    let rf = rf.clamp(1, n);
    (0..count)
        .map(|p| (0..rf).map(|k| sorted[(p + k) % n]).collect())
        .collect()
}

/// Kafka's placement of a key on an internal topic of `partitions`
/// partitions: `Utils.abs(key.hashCode) % partitions`, with Java's
/// `String.hashCode` over UTF-16 code units. Both `__transaction_state`
/// (transactional ids) and `__consumer_offsets` (group ids, for
/// AddOffsetsToTxn) use it, so Kafka's tools find the same partition. It is
/// part of the durable layout: changing it moves ids between partitions.
pub fn kafka_partition_for(key: &str, partitions: u32) -> u32 {
    let mut hash: i32 = 0;
    for unit in key.encode_utf16() {
        hash = hash.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    // Utils.abs: i32::MIN maps to 0 rather than overflowing.
    let positive = if hash == i32::MIN {
        0
    } else {
        hash.unsigned_abs()
    };
    positive % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::{Command, ControllerView};

    fn nodes(n: u64) -> Vec<NodeId> {
        (1..=n).map(NodeId).collect()
    }

    #[test]
    fn preferred_leaders_and_replicas_spread_evenly() {
        let view = ControllerView::default();
        let sets = assign(&nodes(3), 3, 6, &view).expect("assign");
        let mut leaders = [0; 4];
        for s in &sets {
            assert_eq!(s.len(), 3);
            let mut sorted = s.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len(), 3, "no node twice: {s:?}");
            leaders[s[0] as usize] += 1;
        }
        assert_eq!(&leaders[1..], &[2, 2, 2]);
        // Five nodes, RF 3: every node leads 2 of 10 and holds 6 replicas.
        let sets = assign(&nodes(5), 3, 10, &view).expect("assign");
        let mut held = [0; 6];
        let mut led = [0; 6];
        for s in &sets {
            led[s[0] as usize] += 1;
            for n in s {
                held[*n as usize] += 1;
            }
        }
        assert_eq!(&led[1..], &[2; 5]);
        assert_eq!(&held[1..], &[6; 5]);
    }

    #[test]
    fn a_second_topic_starts_where_the_first_left_off() {
        let mut view = ControllerView::default();
        let first = assign(&nodes(3), 1, 1, &view).expect("assign");
        view.apply(
            &Command::CreateTopic {
                name: "a".into(),
                id: uuid::Uuid::from_u128(1).to_string(),
                partitions: 1,
                configs: Default::default(),
                replicas: first.clone(),
            },
            &nodes(3),
            NodeId(1),
        )
        .expect("create");
        let second = assign(&nodes(3), 1, 1, &view).expect("assign");
        assert_ne!(first[0][0], second[0][0], "the next leader is another node");
    }

    #[test]
    fn a_replication_factor_above_the_cluster_is_refused() {
        assert!(matches!(
            assign(&nodes(3), 4, 1, &ControllerView::default()),
            Err(HelixError::InvalidReplicationFactor(_))
        ));
        assert!(assign(&nodes(3), 0, 1, &ControllerView::default()).is_err());
    }

    #[test]
    fn internal_topics_are_placed_alike_on_every_node() {
        let a = internal(&[NodeId(3), NodeId(1), NodeId(2)], 3, 4);
        let b = internal(&nodes(3), 3, 4);
        assert_eq!(a, b);
        assert_eq!(a[0], vec![NodeId(1), NodeId(2), NodeId(3)]);
        assert_eq!(a[1][0], NodeId(2));
        assert_eq!(internal(&nodes(1), 3, 2), vec![vec![NodeId(1)]; 2]);
    }
}
