//! The metric families a scrape builds from the node's state (gauges,
//! counters and histograms with their labels), as `prometheus-client`
//! collects them: what `snapshot.rs` and `replicas.rs` fill and
//! `scrape.rs` registers.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use crate::metrics::Buckets;

/// A gauge's value for a yes/no fact: 1 or 0.
pub fn flag(on: bool) -> f64 {
    f64::from(u8::from(on))
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
