//! The in-process cluster the cluster tests drive: whole brokers (real
//! WALs, real Raft) whose peer links are in memory and can be cut.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use helix_raft::NodeId;

use super::peers::{BoxFuture, PeerLink};
use crate::broker::Broker;
use crate::config::{Config, Members, NodeSpec};
use crate::error::{HelixError, Result};
use crate::host::Lane;

/// The in-memory network: every broker by node id; links can be cut.
#[derive(Default)]
struct Net {
    brokers: Mutex<HashMap<u64, Weak<Broker>>>,
    cut: Mutex<Vec<(u64, u64)>>,
}

impl Net {
    pub(super) fn linked(&self, a: u64, b: u64) -> bool {
        let cut = self.cut.lock().expect("lock");
        !cut.contains(&(a, b)) && !cut.contains(&(b, a))
    }

    pub(super) fn broker(&self, id: u64) -> Option<Arc<Broker>> {
        self.brokers.lock().expect("lock").get(&id)?.upgrade()
    }
}

struct MemLink {
    me: u64,
    net: Arc<Net>,
    /// Peers heard at least once (a real transport remembers when it last
    /// heard each peer).
    heard: Mutex<std::collections::HashSet<u64>>,
}

impl PeerLink for MemLink {
    fn send(&self, to: NodeId, _lane: Lane, payload: Bytes) -> bool {
        if !self.net.linked(self.me, to.0) {
            return false;
        }
        match self.net.broker(to.0) {
            Some(b) => {
                b.peers.deliver(NodeId(self.me), vec![payload]);
                true
            }
            None => false,
        }
    }

    fn call(&self, to: NodeId, request: Bytes, _timeout: Duration) -> BoxFuture<Result<Bytes>> {
        let target = self
            .net
            .linked(self.me, to.0)
            .then(|| self.net.broker(to.0))
            .flatten();
        let me = NodeId(self.me);
        Box::pin(async move {
            let b = target.ok_or(HelixError::NotController)?;
            b.peers
                .call(me, request)
                .await
                .map_err(|e| HelixError::Remote(-1, e))
        })
    }

    fn heard_within(&self, node: NodeId, within: Duration) -> bool {
        let now = self.net.linked(self.me, node.0) && self.net.broker(node.0).is_some();
        let mut heard = self.heard.lock().expect("lock");
        if now {
            heard.insert(node.0);
        }
        now || (within == Duration::MAX && heard.contains(&node.0))
    }

    fn broke_off(&self, node: NodeId) -> bool {
        !self.net.linked(self.me, node.0) || self.net.broker(node.0).is_none()
    }
}

pub(super) struct TestCluster {
    net: Arc<Net>,
    /// Leader balancing on (Kafka's default); off where a test must tell
    /// an election from a hand-over.
    balancing: bool,
    brokers: Vec<Option<Arc<Broker>>>,
    dirs: Vec<tempfile::TempDir>,
    nodes: Vec<NodeSpec>,
}

impl TestCluster {
    pub(super) async fn start(n: usize) -> TestCluster {
        TestCluster::start_with(n, true).await
    }

    pub(super) async fn start_with(n: usize, balancing: bool) -> TestCluster {
        let nodes = node_specs(n as i32);
        let mut c = TestCluster {
            net: Arc::new(Net::default()),
            balancing,
            brokers: vec![None; n],
            dirs: (0..n)
                .map(|_| tempfile::tempdir().expect("tempdir"))
                .collect(),
            nodes,
        };
        // All at once, as a cluster starts.
        let opening: Vec<_> = (0..n).map(|i| tokio::spawn(c.open(i))).collect();
        for (i, handle) in opening.into_iter().enumerate() {
            c.brokers[i] = Some(handle.await.expect("open task"));
        }
        c
    }

    pub(super) fn open(&self, i: usize) -> impl std::future::Future<Output = Arc<Broker>> + use<> {
        let config = Config {
            node_id: i as i32 + 1,
            data_dir: self.dirs[i].path().to_path_buf(),
            cluster: Some(Members::new(self.nodes.clone(), i as i32 + 1).expect("cluster")),
            advertised: self.nodes[i].kafka.clone(),
            replica_lag_time_max: Duration::from_millis(1500),
            leader_imbalance_check_interval: Duration::from_millis(500),
            auto_leader_rebalance_enable: self.balancing,
            groups: crate::group::GroupConfig {
                coordinator_partitions: 4,
                ..Default::default()
            },
            transactions: crate::config::TxnConfig {
                state_partitions: 4,
                ..Default::default()
            },
            ..Config::default()
        };
        let net = self.net.clone();
        async move {
            let link = Arc::new(MemLink {
                me: i as u64 + 1,
                net: net.clone(),
                heard: Mutex::default(),
            });
            let b = Broker::open_with(config, Some(link))
                .await
                .expect("open broker");
            net.brokers
                .lock()
                .expect("lock")
                .insert(i as u64 + 1, Arc::downgrade(&b));
            b
        }
    }

    pub(super) fn broker(&self, id: u64) -> &Arc<Broker> {
        self.brokers[id as usize - 1]
            .as_ref()
            .expect("broker is up")
    }
}

impl TestCluster {
    /// Cuts every link of `id` (a network partition around it).
    pub(super) fn isolate(&self, id: u64) {
        let mut cut = self.net.cut.lock().expect("lock");
        for other in 1..=self.nodes.len() as u64 {
            if other != id {
                cut.push((id, other));
            }
        }
    }

    pub(super) fn heal(&self) {
        self.net.cut.lock().expect("lock").clear();
    }

    pub(super) fn ids(&self) -> Vec<u64> {
        (1..=self.nodes.len() as u64).collect()
    }

    /// Shuts broker `id` down as a clean shutdown does, runs `offline` on
    /// its data directory (a tool run on a stopped broker), and opens it
    /// again.
    pub(super) async fn restart_with(&mut self, id: u64, offline: impl FnOnce(&std::path::Path)) {
        let i = id as usize - 1;
        if let Some(b) = self.brokers[i].take() {
            b.close_all().await;
        }
        offline(self.dirs[i].path());
        self.brokers[i] = Some(self.open(i).await);
    }

    pub(super) async fn close(self) {
        for b in self.brokers.iter().flatten() {
            b.close_all().await;
        }
    }
}

/// The `[[nodes]]` list of an in-process cluster of `n` nodes.
pub(super) fn node_specs(n: i32) -> Vec<NodeSpec> {
    (1..=n)
        .map(|id| NodeSpec {
            id,
            kafka: format!("127.0.0.1:{}", 19000 + id),
            peer: format!("127.0.0.1:{}", 19100 + id),
            metrics: None,
            advertised_listeners: None,
        })
        .collect()
}

pub(super) async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The preferred replica of partition `p` of `topic`, once every node names
/// it leader (the first election may go to another replica on a loaded
/// machine, and leadership is then handed back).
pub(super) async fn settled_preferred_leader(c: &TestCluster, topic: &str, p: i32) -> u64 {
    let preferred = c.broker(1).topic(topic).expect("topic").partitions[p as usize].replicas[0].0;
    wait_until("every node to name the preferred leader", || {
        c.ids()
            .iter()
            .all(|id| leader_of(c.broker(*id), topic, p) == Some(preferred))
    })
    .await;
    preferred
}

/// The node that leads partition `p` of `topic`, as `on` sees it.
pub(super) fn leader_of(on: &Broker, topic: &str, p: i32) -> Option<u64> {
    let t = on.topic(topic)?;
    let tp = t.partitions.get(p as usize)?;
    on.cluster
        .leadership(tp.group, tp.local.as_deref())
        .map(|l| l.leader.0)
}

/// Produces `values` as one batch (acks=all) to partition `p` on `b`.
pub(super) async fn produce(b: &Broker, topic: &str, p: i32, values: &[&[u8]]) -> Result<i64> {
    let batch = crate::replica::batch::tests::make_batch(values, -1, -1, 1000);
    let t = b.topic(topic).ok_or(HelixError::UnknownTopicOrPartition)?;
    t.local(p)?.check_leader(-1)?;
    queue(b, topic, p, batch).await
}

/// Queues `batch` (acks=all) straight to the replica of partition `p` on
/// `b`, whatever its role: the replica itself decides or refuses.
pub(super) async fn queue(b: &Broker, topic: &str, p: i32, batch: Bytes) -> Result<i64> {
    queue_verified(b, topic, p, batch, None).await
}

/// [`queue`] with the verification guard a transactional batch that opens
/// a transaction needs (`replica::verification`), as if the coordinator
/// had confirmed it.
pub(super) async fn queue_verified(
    b: &Broker,
    topic: &str,
    p: i32,
    batch: Bytes,
    verified: Option<u64>,
) -> Result<i64> {
    let t = b.topic(topic).ok_or(HelixError::UnknownTopicOrPartition)?;
    let part = t.local(p)?.clone();
    let batches: Vec<Bytes> = if verified.is_some() {
        crate::replica::batch::validate_transactional(&batch, i32::MAX, None)?
    } else {
        crate::replica::batch::validate(&batch, i32::MAX, None)?
    }
    .into_iter()
    .map(|v| v.bytes)
    .collect();
    let room = b
        .backpressure
        .acquire_within(batch.len(), Duration::from_secs(5))
        .await?;
    let (reply, rx) = tokio::sync::oneshot::channel();
    part.produce(
        crate::batcher::PendingProduce::new(batches, batch.len(), -1, Some(reply), room)
            .verified(verified),
    )
    .await?;
    let ack = tokio::time::timeout(Duration::from_secs(10), rx)
        .await
        .map_err(|_| HelixError::Timeout("ack"))?
        .map_err(|_| HelixError::ShuttingDown)??;
    Ok(ack.base_offset.0)
}

/// The bytes of a replica's whole log.
pub(super) fn log_bytes(b: &Broker, topic: &str, p: i32) -> Vec<u8> {
    let part = b
        .topic(topic)
        .expect("topic")
        .local(p)
        .expect("local")
        .clone();
    let reader = part.reader();
    let mut out = Vec::new();
    let mut from = reader.log_start_offset();
    while from < reader.next_offset() {
        let r = reader.read(from, 1 << 20).expect("read");
        out.extend_from_slice(&r.bytes);
        from = r.next_offset;
    }
    out
}
