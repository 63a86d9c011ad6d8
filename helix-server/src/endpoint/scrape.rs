//! `/metrics`: the registry of `crate::metrics` and the families a scrape
//! reads from the node (`snapshot.rs`, built as `families.rs` holds them),
//! encoded by `prometheus-client`.
//! Every name starts `helix_`; docs/operations.md lists them with their
//! meaning and alert thresholds.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::text;
use prometheus_client::registry::{Registry, Unit};

use super::snapshot::{self, BusySample};
use crate::broker::Broker;
use crate::metrics::metrics;

/// How long a scrape waits for the shards' Raft status.
const OBSERVE_WITHIN: Duration = Duration::from_secs(1);

/// The Prometheus text of the node now.
pub async fn render(
    broker: Option<&Arc<Broker>>,
    busy: &mut BusySample,
) -> Result<String, fmt::Error> {
    let statuses = match broker {
        Some(b) => b.host.observe(OBSERVE_WITHIN).await,
        None => Vec::new(),
    };
    let families = snapshot::gather(broker, statuses, busy);
    let m = metrics();
    let mut registry = Registry::with_prefix("helix");
    registry.register(
        "requests",
        "Kafka requests read, by API and version",
        m.requests.total.clone(),
    );
    registry.register(
        "request_errors",
        "Error codes answered (per partition where the API answers per partition) and connections closed instead of an answer (CONNECTION_CLOSED), by API",
        m.requests.errors.clone(),
    );
    registry.register_with_unit(
        "request_duration",
        "From a request's frame read to its response written, by API and version",
        Unit::Seconds,
        m.requests.latency.clone(),
    );
    registry.register_collector(Box::new(families));
    let mut out = String::with_capacity(64 << 10);
    text::encode(&mut out, &registry)?;
    Ok(out)
}
