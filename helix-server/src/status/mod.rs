//! `helix-server status --bootstrap HOST:PORT [--json]`: the cluster as
//! any node shows it, over Kafka's own APIs (Metadata, DescribeCluster,
//! ListGroups, DescribeGroups, OffsetFetch, ListOffsets), so it works
//! against any reachable node and needs nothing on the broker's disk.

mod client;
mod report;

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::{
    ApiKey, BrokerId, DescribeClusterRequest, DescribeClusterResponse, DescribeGroupsRequest,
    DescribeGroupsResponse, GroupId, ListGroupsRequest, ListGroupsResponse, ListOffsetsRequest,
    ListOffsetsResponse, MetadataRequest, MetadataResponse, OffsetFetchRequest,
    OffsetFetchResponse, TopicName, list_offsets_request,
};
use kafka_protocol::protocol::StrBytes;
use serde::Serialize;

use client::Conn;

/// What `status` shows.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ClusterStatus {
    pub cluster_id: String,
    pub controller: i32,
    /// The node that answered Metadata.
    pub asked: String,
    pub nodes: Vec<NodeRow>,
    pub topics: Vec<TopicRow>,
    pub groups: Vec<GroupRow>,
    /// Calls that failed (an unreachable node, an error code).
    pub problems: Vec<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NodeRow {
    pub id: i32,
    pub address: String,
    pub reachable: bool,
    /// Partitions it leads.
    pub leaders: usize,
    /// Partitions it holds a replica of.
    pub replicas: usize,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TopicRow {
    pub name: String,
    pub internal: bool,
    pub partitions: Vec<PartitionRow>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PartitionRow {
    pub partition: i32,
    /// -1: none.
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// The high watermark, from the leader.
    pub end_offset: Option<i64>,
    /// ok, under-replicated, offline, or Kafka's error name.
    pub state: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GroupRow {
    pub id: String,
    pub coordinator: i32,
    pub state: String,
    pub members: usize,
    pub offsets: Vec<GroupOffset>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GroupOffset {
    pub topic: String,
    pub partition: i32,
    pub committed: i64,
    pub end_offset: Option<i64>,
    pub lag: Option<i64>,
}

/// Runs the command: prints the cluster (text or JSON). Exit code 0, or 1
/// when no node of `bootstrap` answered.
pub async fn run(bootstrap: &str, json: bool, timeout: Duration) -> i32 {
    match gather(bootstrap, timeout).await {
        Ok(status) => {
            if json {
                match serde_json::to_string_pretty(&status) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("helix-server status: {e}");
                        return 1;
                    }
                }
            } else {
                print!("{}", report::text(&status));
            }
            0
        }
        Err(e) => {
            eprintln!("helix-server status: {e}");
            1
        }
    }
}

fn error_name(code: i16) -> String {
    crate::metrics::error_name(code).to_string()
}

/// Asks the first node of `bootstrap` that answers, then every node.
pub async fn gather(bootstrap: &str, timeout: Duration) -> Result<ClusterStatus, String> {
    let mut tried = Vec::new();
    let mut first = None;
    for addr in bootstrap
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
    {
        match Conn::open(addr, timeout).await {
            Ok(c) => {
                first = Some((addr.to_string(), c));
                break;
            }
            Err(e) => tried.push(e),
        }
    }
    let Some((asked, mut conn)) = first else {
        return Err(format!(
            "no node of {bootstrap:?} answered: {}",
            tried.join("; ")
        ));
    };
    let mut req = MetadataRequest::default();
    req.topics = None;
    let md: MetadataResponse = conn.call(ApiKey::Metadata, 9, &req).await?;
    let mut problems = tried;
    let mut cluster_id = md
        .cluster_id
        .as_ref()
        .map(|s| s.to_string())
        .unwrap_or_default();
    let mut controller = md.controller_id.0;
    match conn
        .call::<_, DescribeClusterResponse>(
            ApiKey::DescribeCluster,
            0,
            &DescribeClusterRequest::default(),
        )
        .await
    {
        Ok(dc) if dc.error_code == 0 => {
            cluster_id = dc.cluster_id.to_string();
            controller = dc.controller_id.0;
        }
        Ok(dc) => problems.push(format!("DescribeCluster: {}", error_name(dc.error_code))),
        Err(e) => problems.push(e),
    }
    let mut topics: Vec<TopicRow> = md
        .topics
        .iter()
        .map(|t| {
            let mut partitions: Vec<PartitionRow> = t
                .partitions
                .iter()
                .map(|p| {
                    let replicas: Vec<i32> = p.replica_nodes.iter().map(|b| b.0).collect();
                    let isr: Vec<i32> = p.isr_nodes.iter().map(|b| b.0).collect();
                    let state = if p.error_code != 0 && p.leader_id.0 < 0 {
                        "offline".to_string()
                    } else if p.error_code != 0 {
                        error_name(p.error_code)
                    } else if isr.len() < replicas.len() {
                        "under-replicated".to_string()
                    } else {
                        "ok".to_string()
                    };
                    PartitionRow {
                        partition: p.partition_index,
                        leader: p.leader_id.0,
                        leader_epoch: p.leader_epoch,
                        replicas,
                        isr,
                        end_offset: None,
                        state,
                    }
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            TopicRow {
                name: t.name.as_ref().map(|n| n.to_string()).unwrap_or_default(),
                internal: t.is_internal,
                partitions,
            }
        })
        .collect();
    topics.sort_by(|a, b| (a.internal, &a.name).cmp(&(b.internal, &b.name)));
    let mut nodes: Vec<NodeRow> = md
        .brokers
        .iter()
        .map(|b| NodeRow {
            id: b.node_id.0,
            address: format!("{}:{}", b.host, b.port),
            reachable: false,
            leaders: 0,
            replicas: 0,
        })
        .collect();
    nodes.sort_by_key(|n| n.id);
    for t in &topics {
        for p in &t.partitions {
            for n in nodes.iter_mut() {
                n.leaders += usize::from(p.leader == n.id);
                n.replicas += usize::from(p.replicas.contains(&n.id));
            }
        }
    }
    let mut groups = Vec::new();
    let mut ends: BTreeMap<(String, i32), i64> = BTreeMap::new();
    for node in nodes.iter_mut() {
        let mut c = match Conn::open(&node.address, timeout).await {
            Ok(c) => c,
            Err(e) => {
                problems.push(format!("node {}: {e}", node.id));
                continue;
            }
        };
        node.reachable = true;
        if let Err(e) = end_offsets(&mut c, node.id, &topics, &mut ends).await {
            problems.push(format!("node {}: {e}", node.id));
        }
        match node_groups(&mut c, node.id).await {
            Ok(g) => groups.extend(g),
            Err(e) => problems.push(format!("node {}: {e}", node.id)),
        }
    }
    for t in topics.iter_mut() {
        for p in t.partitions.iter_mut() {
            p.end_offset = ends.get(&(t.name.clone(), p.partition)).copied();
        }
    }
    for g in groups.iter_mut() {
        for o in g.offsets.iter_mut() {
            o.end_offset = ends.get(&(o.topic.clone(), o.partition)).copied();
            o.lag = o.end_offset.map(|end| (end - o.committed).max(0));
        }
    }
    groups.sort_by(|a: &GroupRow, b| a.id.cmp(&b.id));
    Ok(ClusterStatus {
        cluster_id,
        controller,
        asked,
        nodes,
        topics,
        groups,
        problems,
    })
}

/// High watermarks of the partitions `node` leads (ListOffsets latest).
async fn end_offsets(
    c: &mut Conn,
    node: i32,
    topics: &[TopicRow],
    ends: &mut BTreeMap<(String, i32), i64>,
) -> Result<(), String> {
    let mut req = ListOffsetsRequest::default();
    req.replica_id = BrokerId(-1);
    for t in topics {
        let led: Vec<list_offsets_request::ListOffsetsPartition> = t
            .partitions
            .iter()
            .filter(|p| p.leader == node)
            .map(|p| {
                let mut lp = list_offsets_request::ListOffsetsPartition::default();
                lp.partition_index = p.partition;
                lp.current_leader_epoch = -1;
                lp.timestamp = -1;
                lp
            })
            .collect();
        if led.is_empty() {
            continue;
        }
        let mut lt = list_offsets_request::ListOffsetsTopic::default();
        lt.name = TopicName(StrBytes::from_string(t.name.clone()));
        lt.partitions = led;
        req.topics.push(lt);
    }
    if req.topics.is_empty() {
        return Ok(());
    }
    let resp: ListOffsetsResponse = c.call(ApiKey::ListOffsets, 5, &req).await?;
    for t in resp.topics {
        for p in t.partitions {
            if p.error_code == 0 {
                ends.insert((t.name.to_string(), p.partition_index), p.offset);
            }
        }
    }
    Ok(())
}

/// The groups `node` coordinates, described, with their committed offsets.
async fn node_groups(c: &mut Conn, node: i32) -> Result<Vec<GroupRow>, String> {
    let listed: ListGroupsResponse = c
        .call(ApiKey::ListGroups, 4, &ListGroupsRequest::default())
        .await?;
    if listed.error_code != 0 {
        return Err(format!("ListGroups: {}", error_name(listed.error_code)));
    }
    if listed.groups.is_empty() {
        return Ok(Vec::new());
    }
    let mut req = DescribeGroupsRequest::default();
    req.groups = listed.groups.iter().map(|g| g.group_id.clone()).collect();
    let described: DescribeGroupsResponse = c.call(ApiKey::DescribeGroups, 5, &req).await?;
    let mut out = Vec::new();
    for g in described.groups {
        if g.error_code != 0 {
            continue;
        }
        let mut fetch = OffsetFetchRequest::default();
        fetch.group_id = GroupId(g.group_id.0.clone());
        fetch.topics = None;
        let offsets: OffsetFetchResponse = c.call(ApiKey::OffsetFetch, 7, &fetch).await?;
        let mut rows: Vec<GroupOffset> = offsets
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .filter(|p| p.error_code == 0 && p.committed_offset >= 0)
                    .map(|p| GroupOffset {
                        topic: t.name.to_string(),
                        partition: p.partition_index,
                        committed: p.committed_offset,
                        end_offset: None,
                        lag: None,
                    })
            })
            .collect();
        rows.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        out.push(GroupRow {
            id: g.group_id.to_string(),
            coordinator: node,
            state: g.group_state.to_string(),
            members: g.members.len(),
            offsets: rows,
        });
    }
    Ok(out)
}
