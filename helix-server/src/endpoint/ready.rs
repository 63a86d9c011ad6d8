//! `/ready`: the node serves Kafka and every replica it holds is caught up
//! (leading, or a follower that reached its leader's commit index within
//! `replica_lag_time_max_ms`, the ISR rule seen from the follower) and none
//! was refused. A load balancer or a rolling restart waits for it before
//! taking the next node down.

use std::sync::Arc;

use crate::broker::Broker;

/// The verdict and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    pub ready: bool,
    /// What keeps the node from being ready, one line each.
    pub reasons: Vec<String>,
    /// Replicas held.
    pub replicas: usize,
}

impl Readiness {
    pub fn explain(&self) -> String {
        if self.ready {
            return format!("ready: {} replicas caught up\n", self.replicas);
        }
        let mut out = String::from("not ready\n");
        for r in &self.reasons {
            out.push_str(r);
            out.push('\n');
        }
        out
    }
}

/// Listed by name at most; the rest are counted.
const MAX_LISTED: usize = 20;

pub fn check(broker: Option<&Arc<Broker>>) -> Readiness {
    let Some(broker) = broker else {
        return Readiness {
            ready: false,
            reasons: vec!["recovering: the data directory is being opened".into()],
            replicas: 0,
        };
    };
    let names = super::replicas::replica_names(broker);
    let replicas = broker.host.replicas();
    let mut behind: Vec<String> = replicas
        .iter()
        .filter(|p| !p.caught_up())
        .map(|p| {
            names
                .get(&p.group)
                .map_or(format!("group {}", p.group.0), |(t, i)| format!("{t}-{i}"))
        })
        .collect();
    behind.sort();
    let mut reasons = Vec::new();
    if !behind.is_empty() {
        let listed = behind
            .iter()
            .take(MAX_LISTED)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        let more = behind.len().saturating_sub(MAX_LISTED);
        reasons.push(format!(
            "{} of {} replicas behind their leader: {listed}{}",
            behind.len(),
            replicas.len(),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ));
    }
    let served: std::collections::HashSet<_> = replicas.iter().map(|p| p.group).collect();
    for t in broker.topics.all() {
        for p in &t.partitions {
            if let Some(why) = &p.refused {
                reasons.push(format!("{}-{} refused: {why}", t.name, p.index));
            } else if p.local.is_some() && !served.contains(&p.group) {
                reasons.push(format!(
                    "{}-{} stopped: its log or vote could not be written (full or failing disk?); \
                     see the log, then restart the node",
                    t.name, p.index
                ));
            }
        }
    }
    Readiness {
        ready: reasons.is_empty(),
        reasons,
        replicas: replicas.len(),
    }
}
