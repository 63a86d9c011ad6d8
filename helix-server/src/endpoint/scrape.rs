//! `/metrics`: the registry of `crate::metrics` and the families a scrape
//! reads from the node (`snapshot.rs`), encoded by `prometheus-client`.
//! Every name starts `helix_`; docs/operations.md lists them with their
//! meaning and alert thresholds.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet, text};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::snapshot::{self, BusySample};
use crate::broker::Broker;
use crate::metrics::{Buckets, metrics};

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

/// Label names and values of one series.
pub type Labels = Vec<(&'static str, String)>;

#[derive(Debug)]
enum Family {
    /// Counters or gauges; a family without rows is left out.
    Scalar {
        name: &'static str,
        help: &'static str,
        unit: Option<Unit>,
        kind: MetricType,
        rows: Vec<(Labels, f64)>,
    },
    /// Histograms whose values were recorded in `scale` of `unit`.
    Histogram {
        name: &'static str,
        help: &'static str,
        unit: Option<Unit>,
        scale: f64,
        rows: Vec<(Labels, Buckets)>,
    },
}

/// Metric families read at scrape time, encoded in the order added.
#[derive(Debug, Default)]
pub struct Families(Vec<Family>);

impl Families {
    pub fn scalar(
        &mut self,
        name: &'static str,
        help: &'static str,
        unit: Option<Unit>,
        kind: MetricType,
        rows: Vec<(Labels, f64)>,
    ) {
        self.0.push(Family::Scalar {
            name,
            help,
            unit,
            kind,
            rows,
        });
    }

    /// One gauge without labels.
    pub fn gauge(&mut self, name: &'static str, help: &'static str, value: f64) {
        self.scalar(
            name,
            help,
            None,
            MetricType::Gauge,
            vec![(Vec::new(), value)],
        );
    }

    /// One counter without labels.
    pub fn counter(&mut self, name: &'static str, help: &'static str, value: f64) {
        self.scalar(
            name,
            help,
            None,
            MetricType::Counter,
            vec![(Vec::new(), value)],
        );
    }

    pub fn histogram(
        &mut self,
        name: &'static str,
        help: &'static str,
        unit: Option<Unit>,
        scale: f64,
        rows: Vec<(Labels, Buckets)>,
    ) {
        self.0.push(Family::Histogram {
            name,
            help,
            unit,
            scale,
            rows,
        });
    }
}

impl Collector for Families {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        for family in &self.0 {
            match family {
                Family::Scalar {
                    name,
                    help,
                    unit,
                    kind,
                    rows,
                } => {
                    if rows.is_empty() {
                        continue;
                    }
                    let mut me = enc.encode_descriptor(name, help, unit.as_ref(), *kind)?;
                    for (labels, value) in rows {
                        let write = |m: &mut MetricEncoder| match kind {
                            MetricType::Counter => {
                                m.encode_counter::<NoLabelSet, f64, f64>(value, None)
                            }
                            _ => m.encode_gauge(value),
                        };
                        // Without labels a series is written without braces.
                        if labels.is_empty() {
                            write(&mut me)?;
                        } else {
                            write(&mut me.encode_family(labels)?)?;
                        }
                    }
                }
                Family::Histogram {
                    name,
                    help,
                    unit,
                    scale,
                    rows,
                } => {
                    let mut me =
                        enc.encode_descriptor(name, help, unit.as_ref(), MetricType::Histogram)?;
                    for (labels, b) in rows {
                        let buckets: Vec<(f64, u64)> = b
                            .buckets
                            .iter()
                            .map(|(bound, n)| {
                                let upper = if *bound == u64::MAX {
                                    f64::INFINITY
                                } else {
                                    *bound as f64 * scale
                                };
                                (upper, *n)
                            })
                            .collect();
                        let (sum, count) = (b.sum as f64 * scale, b.count);
                        let write = |m: &mut MetricEncoder| {
                            m.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
                        };
                        if labels.is_empty() {
                            write(&mut me)?;
                        } else {
                            write(&mut me.encode_family(labels)?)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
