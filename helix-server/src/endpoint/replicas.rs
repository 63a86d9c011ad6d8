//! The replicas this node holds and the groups it coordinates, as metric
//! families: aggregates always, per-partition series while the node holds
//! at most `metrics_partition_series_max` replicas (bounded cardinality).

use std::collections::{BTreeMap, HashMap};

use helix_raft::{GroupId, Role, Status};
use prometheus_client::metrics::MetricType::Gauge;
use prometheus_client::registry::Unit;

use super::families::{Families, Labels, flag};
use crate::broker::Broker;
use crate::replica::Partition;

/// Topic name and partition index of every replica group this node knows;
/// the controller's group 0 is `__cluster_metadata-0`, as in KRaft.
pub fn replica_names(broker: &Broker) -> HashMap<GroupId, (String, i32)> {
    let mut names = HashMap::new();
    names.insert(GroupId(0), ("__cluster_metadata".to_string(), 0));
    for t in broker.topics.all() {
        for p in &t.partitions {
            names.insert(p.group, (t.name.clone(), p.index));
        }
    }
    names
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Leader => "leader",
        Role::Follower => "follower",
        _ => "candidate",
    }
}

/// In-sync replicas of a partition led here (0 elsewhere).
fn isr_size(p: &Partition, s: &Status) -> usize {
    if s.role == Role::Leader {
        p.isr().len().max(1)
    } else {
        0
    }
}

fn apply_lag(_: &Partition, s: &Status) -> f64 {
    s.commit.0.saturating_sub(s.applied.0) as f64
}

/// A follower's distance to its leader's commit (0 for a leader).
fn replication_lag(_: &Partition, s: &Status) -> f64 {
    if s.role == Role::Leader {
        0.0
    } else {
        s.leader_commit.0.saturating_sub(s.durable.0) as f64
    }
}

/// The replicas' aggregates, and their per-partition series while the
/// node holds at most `metrics_partition_series_max` replicas (returned).
/// Replicas whose shard did not hand over its status are left out.
pub fn replicas(f: &mut Families, b: &Broker, statuses: Vec<(GroupId, Status)>) -> bool {
    let names = replica_names(b);
    let statuses: HashMap<GroupId, Status> = statuses.into_iter().collect();
    let held = b.host.replicas();
    let per_partition = held.len() <= b.config.metrics_partition_series_max;
    let mut rows: Vec<(Labels, &Partition, &Status)> = held
        .iter()
        .filter_map(|p| {
            let status = statuses.get(&p.group)?;
            let (topic, index) = names
                .get(&p.group)
                .cloned()
                .unwrap_or_else(|| (format!("group-{}", p.group.0), p.index));
            let labels = vec![("topic", topic), ("partition", index.to_string())];
            Some((labels, p.as_ref(), status))
        })
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    // (labels, entries behind, appends in flight) per follower of a group led here.
    let followers: Vec<(Labels, u64, usize)> = rows
        .iter()
        .flat_map(|(labels, _, s)| {
            s.followers.iter().map(move |fs| {
                let mut l = labels.clone();
                l.push(("follower", fs.node.0.to_string()));
                (l, s.last_index.0.saturating_sub(fs.matched.0), fs.inflight)
            })
        })
        .collect();
    let mut roles: BTreeMap<&'static str, usize> = BTreeMap::new();
    for (_, _, s) in &rows {
        *roles.entry(role_name(s.role)).or_default() += 1;
    }
    f.scalar(
        "replicas",
        "Replicas this node holds, by Raft role",
        None,
        Gauge,
        roles
            .into_iter()
            .map(|(role, n)| (vec![("role", role.to_string())], n as f64))
            .collect(),
    );
    let count = |pred: &dyn Fn(&Partition, &Status) -> bool| {
        rows.iter().filter(|(_, p, s)| pred(p, s)).count() as f64
    };
    let max = |read: fn(&Partition, &Status) -> f64| {
        rows.iter().map(|(_, p, s)| read(p, s)).fold(0.0, f64::max)
    };
    f.gauge(
        "replicas_behind",
        "Replicas not caught up with their leader (/ready is false while above 0)",
        count(&|p, _| !p.caught_up()),
    );
    f.gauge(
        "partitions_under_replicated",
        "Partitions led here whose ISR is smaller than their replica set",
        count(&|p, s| s.role == Role::Leader && isr_size(p, s) < p.voters().len()),
    );
    f.gauge(
        "apply_lag_entries_max",
        "Largest committed-but-not-applied entry count of any replica",
        max(apply_lag),
    );
    f.gauge(
        "replication_lag_entries_max",
        "Largest count of entries a follower here is behind its leader's commit",
        max(replication_lag),
    );
    f.gauge(
        "follower_lag_entries_max",
        "Largest count of entries a follower of a group led here is behind",
        followers.iter().map(|fl| fl.1).max().unwrap_or(0) as f64,
    );
    f.counter(
        "raft_elections_started",
        "Elections started by this node's replicas (since they were opened)",
        rows.iter()
            .map(|(_, _, s)| s.elections_started)
            .sum::<u64>() as f64,
    );
    f.counter(
        "raft_elections_won",
        "Elections won by this node's replicas (since they were opened)",
        rows.iter().map(|(_, _, s)| s.elections_won).sum::<u64>() as f64,
    );
    f.gauge(
        "partition_series_enabled",
        "1 when per-partition series are exported (replicas held <= metrics_partition_series_max)",
        flag(per_partition),
    );
    if !per_partition {
        return false;
    }
    type Read = fn(&Partition, &Status) -> f64;
    let per_replica: [(&'static str, &'static str, Option<Unit>, Read); 9] = [
        (
            "partition_log_end_offset",
            "Offset the next record appended gets",
            None,
            |p, _| p.log_end_offset().0 as f64,
        ),
        (
            "partition_high_watermark",
            "Acknowledged end: what consumers may read",
            None,
            |p, _| p.high_watermark().0 as f64,
        ),
        (
            "partition_log_start_offset",
            "First offset still stored",
            None,
            |p, _| p.log_start_offset().0 as f64,
        ),
        (
            "partition_size",
            "Bytes of the partition's segment files",
            Some(Unit::Bytes),
            |p, _| p.size_bytes() as f64,
        ),
        (
            "partition_leader",
            "1 when this node leads the partition",
            None,
            |_, s| flag(s.role == Role::Leader),
        ),
        (
            "partition_raft_term",
            "Raft term (Kafka's leader epoch)",
            None,
            |_, s| s.term.0 as f64,
        ),
        (
            "partition_apply_lag_entries",
            "Entries committed but not yet applied to the WAL",
            None,
            apply_lag,
        ),
        (
            "partition_replication_lag_entries",
            "Follower: entries its leader committed that are not yet durable here",
            None,
            replication_lag,
        ),
        (
            "partition_caught_up",
            "1 when the replica leads or has caught up with its leader",
            None,
            |p, _| flag(p.caught_up()),
        ),
    ];
    for (name, help, unit, read) in per_replica {
        let values = rows
            .iter()
            .map(|(l, p, s)| (l.clone(), read(p, s)))
            .collect();
        f.scalar(name, help, unit, Gauge, values);
    }
    f.scalar(
        "partition_in_sync_replicas",
        "ISR size of a partition led here",
        None,
        Gauge,
        rows.iter()
            .filter(|(_, _, s)| s.role == Role::Leader)
            .map(|(l, p, s)| (l.clone(), isr_size(p, s) as f64))
            .collect(),
    );
    f.scalar(
        "partition_follower_lag_entries",
        "Leader: entries a follower has not matched yet",
        None,
        Gauge,
        followers
            .iter()
            .map(|fl| (fl.0.clone(), fl.1 as f64))
            .collect(),
    );
    f.scalar(
        "partition_follower_inflight_appends",
        "Leader: AppendEntries in flight to a follower",
        None,
        Gauge,
        followers
            .into_iter()
            .map(|fl| (fl.0, fl.2 as f64))
            .collect(),
    );
    true
}

/// The groups this node coordinates; committed offsets and lag per
/// partition only with `per_partition`.
pub fn groups(f: &mut Families, b: &Broker, per_partition: bool) {
    let mut groups = b.groups.observe();
    groups.sort_by(|a, b| a.id.cmp(&b.id));
    f.scalar(
        "group_members",
        "Members of a consumer group coordinated here",
        None,
        Gauge,
        groups
            .iter()
            .map(|g| (vec![("group", g.id.clone())], g.members as f64))
            .collect(),
    );
    f.scalar(
        "group_state",
        "1 for the state a consumer group coordinated here is in",
        None,
        Gauge,
        groups
            .iter()
            .map(|g| {
                let labels = vec![("group", g.id.clone()), ("state", g.state.to_string())];
                (labels, 1.0)
            })
            .collect(),
    );
    if !per_partition {
        return;
    }
    let mut high_watermarks: HashMap<(String, i32), i64> = HashMap::new();
    for t in b.topics.all() {
        for p in &t.partitions {
            if let Some(local) = &p.local {
                high_watermarks.insert((t.name.clone(), p.index), local.high_watermark().0);
            }
        }
    }
    let mut committed = Vec::new();
    let mut lag = Vec::new();
    for g in groups {
        for (topic, partition, offset) in g.offsets {
            let hw = high_watermarks.get(&(topic.clone(), partition)).copied();
            let labels: Labels = vec![
                ("group", g.id.clone()),
                ("topic", topic),
                ("partition", partition.to_string()),
            ];
            if let Some(hw) = hw {
                lag.push((labels.clone(), (hw - offset).max(0) as f64));
            }
            committed.push((labels, offset as f64));
        }
    }
    f.scalar(
        "group_committed_offset",
        "Offset a consumer group committed for a partition",
        None,
        Gauge,
        committed,
    );
    f.scalar(
        "group_lag",
        "High watermark minus committed offset (where this node holds the partition)",
        None,
        Gauge,
        lag,
    );
}
