//! Reporting the groups this node leads, with its lease, to every other node (see
//! [`super::leaders`]): the whole set twice a second, which also tells the
//! peers this node is alive, and at once (at the next tick) after a
//! leadership or ISR change.

use std::sync::Arc;
use std::time::Duration;

use helix_raft::Role;

use super::ClusterState;
use super::leaders::{self, Report};
use crate::host::{Lane, Outbox, ReplicaHost};

/// How often the full report goes out even when nothing changed.
const FULL_EVERY: Duration = Duration::from_millis(500);

/// Runs until the host is gone.
pub async fn run(
    cluster: Arc<ClusterState>,
    host: std::sync::Weak<ReplicaHost>,
    outbox: Arc<dyn Outbox>,
    tick: Duration,
) {
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seen = u64::MAX;
    let mut last_full = tokio::time::Instant::now() - FULL_EVERY;
    loop {
        interval.tick().await;
        let Some(host) = host.upgrade() else { return };
        let changes = host.leadership_changes();
        if changes == seen && last_full.elapsed() < FULL_EVERY {
            continue;
        }
        seen = changes;
        last_full = tokio::time::Instant::now();
        let reports: Vec<Report> = host
            .replicas()
            .iter()
            .filter_map(|p| {
                let l = p.leadership();
                // A report claims the lease: a leader cut off from its
                // majority (one-way, the others may still hear it) must
                // not tell them it leads.
                (l.role == Role::Leader && p.holds_lease()).then(|| Report {
                    group: p.group,
                    term: l.term,
                    isr: p.isr(),
                })
            })
            .collect();
        let payload = leaders::encode(&reports);
        for m in &cluster.members {
            if m.id != cluster.me {
                outbox.send(m.id, Lane::Control, payload.clone());
            }
        }
    }
}
