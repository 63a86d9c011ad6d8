//! The text form of `helix-server status`: aligned tables, internal
//! topics summarised in a line each.

use std::fmt::Write;

use super::ClusterStatus;

/// Renders rows as columns two spaces apart.
fn table(out: &mut String, rows: &[Vec<String>]) {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.len())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
}

fn ids(v: &[i32]) -> String {
    v.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

fn offset(v: Option<i64>) -> String {
    v.map_or("?".into(), |o| o.to_string())
}

pub fn text(s: &ClusterStatus) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "cluster {}  controller: node {}  nodes: {}  (asked {})",
        s.cluster_id,
        s.controller,
        s.nodes.len(),
        s.asked
    );
    out.push('\n');
    let mut rows = vec![vec![
        "NODE".into(),
        "ADDRESS".into(),
        "REACHABLE".into(),
        "LEADS".into(),
        "REPLICAS".into(),
    ]];
    for n in &s.nodes {
        rows.push(vec![
            n.id.to_string(),
            n.address.clone(),
            if n.reachable { "yes" } else { "no" }.into(),
            n.leaders.to_string(),
            n.replicas.to_string(),
        ]);
    }
    table(&mut out, &rows);
    out.push('\n');
    let mut rows = vec![vec![
        "TOPIC".into(),
        "PARTITION".into(),
        "LEADER".into(),
        "EPOCH".into(),
        "REPLICAS".into(),
        "ISR".into(),
        "END".into(),
        "STATE".into(),
    ]];
    for t in s.topics.iter().filter(|t| !t.internal) {
        for p in &t.partitions {
            rows.push(vec![
                t.name.clone(),
                p.partition.to_string(),
                p.leader.to_string(),
                p.leader_epoch.to_string(),
                ids(&p.replicas),
                ids(&p.isr),
                offset(p.end_offset),
                p.state.clone(),
            ]);
        }
    }
    if rows.len() == 1 {
        out.push_str("no topics\n");
    } else {
        table(&mut out, &rows);
    }
    for t in s.topics.iter().filter(|t| t.internal) {
        let not_ok: Vec<String> = t
            .partitions
            .iter()
            .filter(|p| p.state != "ok")
            .map(|p| format!("{} {}", p.partition, p.state))
            .collect();
        let _ = writeln!(
            out,
            "{} (internal): {} partitions, {}",
            t.name,
            t.partitions.len(),
            if not_ok.is_empty() {
                "all ok".to_string()
            } else {
                not_ok.join(", ")
            }
        );
    }
    out.push('\n');
    if s.groups.is_empty() {
        out.push_str("no consumer groups\n");
    } else {
        let mut rows = vec![vec![
            "GROUP".into(),
            "COORDINATOR".into(),
            "STATE".into(),
            "MEMBERS".into(),
            "TOPIC".into(),
            "PARTITION".into(),
            "COMMITTED".into(),
            "END".into(),
            "LAG".into(),
        ]];
        for g in &s.groups {
            let head = vec![
                g.id.clone(),
                g.coordinator.to_string(),
                g.state.clone(),
                g.members.to_string(),
            ];
            if g.offsets.is_empty() {
                rows.push(head.clone());
            }
            for o in &g.offsets {
                let mut r = head.clone();
                r.extend([
                    o.topic.clone(),
                    o.partition.to_string(),
                    o.committed.to_string(),
                    offset(o.end_offset),
                    offset(o.lag),
                ]);
                rows.push(r);
            }
        }
        table(&mut out, &rows);
    }
    if !s.problems.is_empty() {
        out.push_str("\nproblems:\n");
        for p in &s.problems {
            let _ = writeln!(out, "  {p}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{GroupOffset, GroupRow, NodeRow, PartitionRow, TopicRow};
    use super::*;

    #[test]
    fn the_text_form_lists_nodes_partitions_and_group_lag() {
        let s = ClusterStatus {
            cluster_id: "helix-1".into(),
            controller: 2,
            asked: "127.0.0.1:9092".into(),
            nodes: vec![NodeRow {
                id: 1,
                address: "127.0.0.1:9092".into(),
                reachable: true,
                leaders: 1,
                replicas: 1,
            }],
            topics: vec![TopicRow {
                name: "orders".into(),
                internal: false,
                partitions: vec![PartitionRow {
                    partition: 0,
                    leader: 1,
                    leader_epoch: 4,
                    replicas: vec![1, 2, 3],
                    isr: vec![1, 2],
                    end_offset: Some(120),
                    state: "under-replicated".into(),
                }],
            }],
            groups: vec![GroupRow {
                id: "billing".into(),
                coordinator: 1,
                state: "Stable".into(),
                members: 2,
                offsets: vec![GroupOffset {
                    topic: "orders".into(),
                    partition: 0,
                    committed: 100,
                    end_offset: Some(120),
                    lag: Some(20),
                }],
            }],
            problems: vec!["node 3: refused".into()],
        };
        let t = text(&s);
        assert!(t.contains("controller: node 2"), "{t}");
        assert!(
            t.contains("orders  0          1       4      1,2,3     1,2  120  under-replicated"),
            "{t}"
        );
        assert!(
            t.contains(
                "billing  1            Stable  2        orders  0          100        120  20"
            ),
            "{t}"
        );
        assert!(t.contains("node 3: refused"), "{t}");
    }
}
