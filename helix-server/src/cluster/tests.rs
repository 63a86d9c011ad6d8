//! Three whole brokers in one process, their peer links in memory: the
//! controller, placement, replication, leadership view, forwarding and
//! failover of real brokers (real WALs, real Raft), without sockets. The
//! same behaviour over the real transport and real processes is tested by
//! tests/test_cluster*.py.

use std::sync::Arc;

use helix_raft::NodeId;

use super::harness::{
    TestCluster, leader_of, log_bytes, produce, settled_preferred_leader, wait_until,
};
use crate::broker::Broker;
use crate::error::HelixError;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_created_anywhere_is_replicated_byte_for_byte_and_led_by_its_preferred_replicas() {
    let c = TestCluster::start(3).await;
    // Ask a node that does not lead the controller: the command is forwarded.
    let known = |b: &Broker| b.cluster.controller(b.controller.partition());
    wait_until("a controller leader", || known(c.broker(1)).is_some()).await;
    let controller = known(c.broker(1)).expect("leader").0;
    let asker = c
        .ids()
        .into_iter()
        .find(|n| *n != controller)
        .expect("another node");
    c.broker(asker)
        .admin
        .create_topic("t", 3, 3, None, Default::default(), false)
        .await
        .expect("created through a follower of the controller");
    for id in c.ids() {
        let b = c.broker(id);
        wait_until("the topic everywhere", || b.topic("t").is_some()).await;
        let t = b.topic("t").expect("topic");
        assert_eq!(t.partitions.len(), 3);
        assert!(
            t.partitions
                .iter()
                .all(|p| p.replicas.len() == 3 && p.local.is_some())
        );
    }
    let preferred: Vec<u64> = c
        .broker(1)
        .topic("t")
        .expect("topic")
        .partitions
        .iter()
        .map(|p| p.replicas[0].0)
        .collect();
    let mut sorted = preferred.clone();
    sorted.sort();
    assert_eq!(sorted, vec![1, 2, 3], "one preferred leader per node");
    for p in 0..3 {
        wait_until("every node to agree on the preferred leader", || {
            c.ids()
                .iter()
                .all(|id| leader_of(c.broker(*id), "t", p) == Some(preferred[p as usize]))
        })
        .await;
    }
    for p in 0..3 {
        let leader = c.broker(preferred[p as usize]);
        for k in 0..20u8 {
            produce(leader, "t", p, &[&[k; 100], b"second record"])
                .await
                .expect("acknowledged");
        }
        // A follower answers NOT_LEADER_OR_FOLLOWER.
        let follower = c
            .ids()
            .into_iter()
            .find(|n| *n != preferred[p as usize])
            .expect("follower");
        assert!(matches!(
            produce(c.broker(follower), "t", p, &[b"x"]).await,
            Err(HelixError::NotLeader)
        ));
        let want = log_bytes(leader, "t", p);
        let end = leader
            .topic("t")
            .expect("t")
            .local(p)
            .expect("local")
            .log_end_offset();
        assert_eq!(end.0, 40, "20 batches of 2 records");
        for id in c.ids() {
            wait_until("every replica to hold the same bytes", || {
                log_bytes(c.broker(id), "t", p) == want
            })
            .await;
        }
    }
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_leader_stops_acknowledging_the_majority_carries_on_and_it_rejoins() {
    let c = TestCluster::start(3).await;
    c.broker(1)
        .admin
        .create_topic("f", 1, 3, None, Default::default(), false)
        .await
        .expect("created");
    // The preferred replica: the end of the test waits for leadership to
    // come back to it.
    let old = settled_preferred_leader(&c, "f", 0).await;
    let mut acked = Vec::new();
    for k in 0..10u8 {
        let offset = produce(c.broker(old), "f", 0, &[&[k; 50]])
            .await
            .expect("acked");
        acked.push((offset, k));
    }
    c.isolate(old);
    // Alone it can never acknowledge: the write fails (it steps down once
    // it has not heard a majority for an election timeout).
    assert!(produce(c.broker(old), "f", 0, &[b"lost"]).await.is_err());
    let others: Vec<u64> = c.ids().into_iter().filter(|n| *n != old).collect();
    wait_until("a new leader among the majority", || {
        leader_of(c.broker(others[0]), "f", 0).is_some_and(|l| l != old)
    })
    .await;
    let new = leader_of(c.broker(others[0]), "f", 0).expect("new leader");
    for k in 10..20u8 {
        let offset = produce(c.broker(new), "f", 0, &[&[k; 50]])
            .await
            .expect("acked by the majority");
        acked.push((offset, k));
    }
    c.heal();
    // The old leader rejoins as a follower, catches up, and (being the
    // preferred replica) gets the leadership back.
    let want = log_bytes(c.broker(new), "f", 0);
    wait_until("the old leader to catch up", || {
        log_bytes(c.broker(old), "f", 0) == want
    })
    .await;
    wait_until("leadership back on the preferred replica", || {
        c.ids()
            .iter()
            .all(|id| leader_of(c.broker(*id), "f", 0) == Some(old))
    })
    .await;
    let part = c
        .broker(old)
        .topic("f")
        .expect("f")
        .local(0)
        .expect("local")
        .clone();
    for (offset, k) in acked {
        let bytes = part.read(crate::offset::Offset(offset), 1).expect("read");
        let h = crate::replica::batch::parse_header(&bytes).expect("batch");
        assert_eq!(h.base_offset, offset);
        assert!(
            bytes.windows(50).any(|w| w == [k; 50]),
            "record {k} at {offset}"
        );
    }
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_behind_the_leaders_memory_is_caught_up_from_the_wal() {
    // Balancing off: the follower left behind may be the preferred leader,
    // and handing leadership back to it once caught up is not an election
    // during catch-up, but would look like one here.
    let c = TestCluster::start_with(3, false).await;
    c.broker(1)
        .admin
        .create_topic("w", 1, 3, None, Default::default(), false)
        .await
        .expect("created");
    wait_until("a leader", || leader_of(c.broker(1), "w", 0).is_some()).await;
    let leader = leader_of(c.broker(1), "w", 0).expect("leader");
    let behind = c
        .ids()
        .into_iter()
        .find(|n| *n != leader)
        .expect("follower");
    c.isolate(behind);
    let big = vec![7u8; 256 << 10];
    // 96 MiB: more than the node's Raft memory budget (64 MiB per group),
    // so the leader releases what only the missing follower still needs.
    for _ in 0..384 {
        produce(c.broker(leader), "w", 0, &[&big])
            .await
            .expect("acked by two");
    }
    let streamed = crate::metrics::metrics()
        .counters
        .catch_up_entries
        .load(std::sync::atomic::Ordering::Relaxed);
    c.heal();
    let want = c
        .broker(leader)
        .topic("w")
        .expect("w")
        .local(0)
        .expect("local")
        .log_end_offset();
    let follower = c
        .broker(behind)
        .topic("w")
        .expect("w")
        .local(0)
        .expect("local")
        .clone();
    wait_until("the follower to catch up", || {
        follower.log_end_offset() == want
    })
    .await;
    let now = crate::metrics::metrics()
        .counters
        .catch_up_entries
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(now > streamed, "the entries came from the leader's WAL");
    assert_eq!(
        log_bytes(c.broker(behind), "w", 0),
        log_bytes(c.broker(leader), "w", 0)
    );
    assert_eq!(
        leader_of(c.broker(behind), "w", 0),
        Some(NodeId(leader).0),
        "no election on the way"
    );
    c.close().await;
}

/// The node's next producer id. Until its first block arrives from the
/// controller the answer is NotReady, which clients retry
/// (COORDINATOR_LOAD_IN_PROGRESS); so does this.
async fn next_producer_id(b: &Broker) -> i64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match b.producer_ids.next().await {
            Ok(id) => return id,
            Err(HelixError::NotReady(_)) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await
            }
            Err(e) => panic!("producer id: {e:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_ids_come_in_disjoint_blocks_from_the_controller() {
    let c = TestCluster::start(3).await;
    let mut all = Vec::new();
    for id in c.ids() {
        for _ in 0..3 {
            all.push(next_producer_id(c.broker(id)).await);
        }
    }
    let mut unique = all.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), all.len(), "ids reused across nodes: {all:?}");
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_from_the_controller_answers_producer_ids_retriably() {
    let c = TestCluster::start(3).await;
    let controller = crate::kafka::context::Routing::of(c.broker(1))
        .controller_id()
        .0;
    let cut = c
        .ids()
        .into_iter()
        .find(|id| *id != controller)
        .expect("a follower");
    // The node fetched a block when it started (and one more ahead when it
    // runs low): those are handed out while it is cut off, then it has none.
    wait_until("the first producer id block", || {
        futures_now(c.broker(cut).producer_ids.next()).is_ok()
    })
    .await;
    c.isolate(cut);
    let mut handed_out = 1;
    let err = loop {
        match c.broker(cut).producer_ids.next().await {
            Ok(_) => handed_out += 1,
            Err(e) => break e,
        }
        assert!(
            handed_out <= 2 * crate::controller::PRODUCER_ID_BLOCK,
            "more ids than two blocks without the controller"
        );
    };
    assert!(
        matches!(err, HelixError::NotReady(_)),
        "a retriable answer, not the controller's timeout: {err:?}"
    );
    assert_eq!(err.kafka_code(), 14, "COORDINATOR_LOAD_IN_PROGRESS");
    c.heal();
    let mut id = Err(err);
    for _ in 0..50 {
        id = c.broker(cut).producer_ids.next().await;
        if id.is_ok() {
            break;
        }
    }
    id.expect("a producer id once the node reaches the controller again");
    c.close().await;
}

/// FindCoordinator v3 for `group` on broker `on`: the node, or None.
async fn coordinator(on: &Arc<Broker>, group: &str) -> Option<i32> {
    use kafka_protocol::messages::{ApiKey, FindCoordinatorRequest, FindCoordinatorResponse};
    use kafka_protocol::protocol::{Decodable, StrBytes};
    let req = FindCoordinatorRequest::default().with_key(StrBytes::from_string(group.into()));
    let mut out = crate::kafka::tests::roundtrip(on, ApiKey::FindCoordinator, 3, &req.into()).await;
    let resp = FindCoordinatorResponse::decode(&mut out, 3).expect("decode");
    (resp.error_code == 0).then_some(resp.node_id.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_acknowledged_before_the_coordinator_is_cut_off_is_served_by_the_next() {
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::{Decodable, StrBytes};
    let c = TestCluster::start(3).await;
    c.broker(1)
        .admin
        .create_topic("t", 1, 3, None, Default::default(), false)
        .await
        .expect("created");
    let group = "g-failover";
    let mut first = None;
    wait_until("a coordinator every node agrees on", || {
        let answers: Vec<Option<i32>> = c
            .ids()
            .iter()
            .map(|id| futures_now(coordinator(c.broker(*id), group)))
            .collect();
        first = answers[0];
        first.is_some() && answers.iter().all(|a| *a == first)
    })
    .await;
    let old = first.expect("coordinator") as u64;
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str(group)))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            offset_commit_request::OffsetCommitRequestTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("t")))
                .with_partitions(vec![
                    offset_commit_request::OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(42),
                ]),
        ]);
    let mut out =
        crate::kafka::tests::roundtrip(c.broker(old), ApiKey::OffsetCommit, 8, &commit.into())
            .await;
    let resp = OffsetCommitResponse::decode(&mut out, 8).expect("decode");
    assert_eq!(
        resp.topics[0].partitions[0].error_code, 0,
        "commit acknowledged"
    );
    c.isolate(old);
    let others: Vec<u64> = c.ids().into_iter().filter(|n| *n != old).collect();
    let mut new = None;
    wait_until("another coordinator", || {
        new = futures_now(coordinator(c.broker(others[0]), group));
        new.is_some_and(|n| n as u64 != old)
    })
    .await;
    let new = new.expect("coordinator") as u64;
    let fetch = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str(group)))
        .with_topics(Some(vec![
            offset_fetch_request::OffsetFetchRequestTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("t")))
                .with_partition_indexes(vec![0]),
        ]));
    let mut committed = -1;
    wait_until("the new coordinator to serve the commit", || {
        let mut out = futures_now(crate::kafka::tests::roundtrip(
            c.broker(new),
            ApiKey::OffsetFetch,
            7,
            &fetch.clone().into(),
        ));
        let resp = OffsetFetchResponse::decode(&mut out, 7).expect("decode");
        committed = resp
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .map_or(-1, |p| p.committed_offset);
        resp.error_code == 0 && committed >= 0
    })
    .await;
    assert_eq!(committed, 42);
    c.heal();
    c.close().await;
}

/// Runs a short future to completion from a synchronous check (the checks
/// of `wait_until` are closures); the runtime is multi-threaded.
fn futures_now<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
}

/// The brokers a Metadata answer lists on a connection in state `told`
/// (`kafka::dispatch::check_reachable`); None when the connection is
/// closed instead.
async fn metadata_brokers(b: &Arc<Broker>, told: &mut bool) -> Option<Vec<i32>> {
    use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse, RequestKind};
    use kafka_protocol::protocol::Decodable;
    let request = RequestKind::Metadata(MetadataRequest::default());
    let mut out = crate::kafka::tests::answer_on(b, ApiKey::Metadata, 9, &request, told).await?;
    let resp = MetadataResponse::decode(&mut out, 9).expect("decode");
    let mut ids: Vec<i32> = resp.brokers.iter().map(|b| b.node_id.0).collect();
    ids.sort_unstable();
    Some(ids)
}

/// ADR 0023: a node cut off from the majority answers a connection it
/// never told it is a member (naming the others, not itself), and closes
/// one it did, so that client connects elsewhere at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_answers_new_connections_and_closes_those_told_it_is_a_member() {
    use crate::kafka::tests::frame;
    use kafka_protocol::messages::{ApiKey, RequestKind};
    let c = TestCluster::start(3).await;
    let brokers = |b: &Arc<Broker>, told: &mut bool| futures_now(metadata_brokers(b, told));
    let mut member = false;
    assert_eq!(brokers(c.broker(3), &mut member), Some(vec![1, 2, 3]));
    assert!(
        member,
        "answered while it hears a majority: told it is a member"
    );
    c.isolate(3);
    assert_eq!(
        brokers(c.broker(3), &mut member),
        None,
        "a connection told it was a member is closed"
    );
    let mut fresh = false;
    assert_eq!(
        brokers(c.broker(3), &mut fresh),
        Some(vec![1, 2]),
        "a new connection is told of the others, not of the cut-off node"
    );
    assert!(!fresh);
    let api_versions = frame(
        ApiKey::ApiVersions,
        3,
        &RequestKind::ApiVersions(Default::default()),
    );
    let mut told = crate::kafka::tests::test_session(true);
    assert!(
        crate::kafka::dispatch::start_from(c.broker(3), api_versions, &mut told)
            .await
            .is_ok(),
        "ApiVersions is still answered"
    );
    assert_eq!(
        brokers(c.broker(1), &mut false),
        Some(vec![1, 2]),
        "the majority answers"
    );
    c.heal();
    let mut again = true;
    let mut healed = None;
    for _ in 0..100 {
        healed = brokers(c.broker(3), &mut again);
        if healed == Some(vec![1, 2, 3]) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        healed,
        Some(vec![1, 2, 3]),
        "healed, it answers as a member again"
    );
    c.close().await;
}

/// A peer transport as a table: who was heard lately, whose connections
/// broke since.
struct Links {
    heard: Vec<NodeId>,
    broken: std::sync::Mutex<Vec<NodeId>>,
}

impl super::Liveness for Links {
    fn heard_within(&self, node: NodeId, _within: std::time::Duration) -> bool {
        self.heard.contains(&node)
    }

    fn broke_off(&self, node: NodeId) -> bool {
        self.broken.lock().expect("lock").contains(&node)
    }
}

#[test]
fn a_node_whose_connections_to_a_majority_broke_is_cut_off_before_they_fall_silent() {
    use crate::config::{Config, Members};
    let config = Config {
        node_id: 1,
        cluster: Some(Members::new(super::harness::node_specs(3), 1).expect("members")),
        advertised: "127.0.0.1:19001".into(),
        ..Config::default()
    };
    let cluster = super::ClusterState::new(&config).expect("cluster state");
    // Both peers were heard within DOWN_AFTER: the test table never lets
    // them fall silent, only their connections break.
    let links = Arc::new(Links {
        heard: vec![NodeId(2), NodeId(3)],
        broken: std::sync::Mutex::new(Vec::new()),
    });
    cluster.set_liveness(links.clone());
    let offered = |c: &super::ClusterState| {
        c.members_to_offer()
            .iter()
            .map(|m| m.id.0)
            .collect::<Vec<_>>()
    };
    assert!(cluster.hears_majority());
    assert_eq!(offered(&cluster), vec![1, 2, 3]);
    links.broken.lock().expect("lock").push(NodeId(2));
    assert!(
        cluster.hears_majority() && !cluster.cut_off(),
        "1 and 3 are a majority"
    );
    links.broken.lock().expect("lock").push(NodeId(3));
    assert!(
        !cluster.hears_majority() && cluster.cut_off(),
        "both connections broke: cut off at once, not after DOWN_AFTER of silence"
    );
    assert_eq!(
        offered(&cluster),
        vec![2, 3],
        "a new client is told of the others"
    );
    links.broken.lock().expect("lock").clear();
    assert!(cluster.hears_majority(), "heard again: a member again");
    assert_eq!(offered(&cluster), vec![1, 2, 3]);
}
