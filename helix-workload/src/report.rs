//! What a run produced: the figures (printed as a table, written as JSON)
//! and the charts (SVG, or HTML around it) of one run or of several side
//! by side.

use std::fmt::Write as _;

use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::profile::Profile;
use crate::stats::Percentiles;
use crate::verify::Verdict;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// A name for the broker measured (`--label`), used on charts.
    pub label: String,
    pub bootstrap: String,
    pub profile: Profile,
    pub machine: Machine,
    pub started_unix_secs: u64,
    pub produce: Produced,
    pub consume: Option<Consumed>,
    pub timeline: Vec<Second>,
    pub verify: Option<Verdict>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    pub cores: usize,
    pub memory_mib: u64,
    pub host: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Produced {
    pub sent: u64,
    pub acknowledged: u64,
    /// Acknowledged records due after the warm-up, and their rate over the
    /// measured time (end of warm-up to the last of their acknowledgements).
    pub measured: u64,
    pub measured_secs: f64,
    pub msgs_per_sec: f64,
    pub mib_per_sec: f64,
    pub latency_ms: Percentiles,
    pub errors: u64,
    pub retries: u64,
    pub first_error: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Consumed {
    pub records: u64,
    pub msgs_per_sec: f64,
    pub mib_per_sec: f64,
    pub end_to_end_ms: Percentiles,
    pub errors: u64,
    pub first_error: Option<String>,
}

/// One second of the run, as printed while it ran.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Second {
    pub sec: u64,
    pub warmup: bool,
    pub msgs: u64,
    pub mib: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub errors: u64,
    pub consumed: u64,
}

impl Second {
    pub fn line(&self) -> String {
        let mut line = format!(
            "sec={} | {} msg/s | {:.1} MiB/s | p50 {:.1} ms p99 {:.1} ms | errors {}",
            self.sec,
            thousands(self.msgs),
            self.mib,
            self.p50_ms,
            self.p99_ms,
            self.errors
        );
        if self.consumed > 0 {
            let _ = write!(line, " | consumed {} msg/s", thousands(self.consumed));
        }
        if self.warmup {
            line.push_str(" | warm-up");
        }
        line
    }
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl Machine {
    pub fn this() -> Machine {
        let memory_kib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find(|l| l.starts_with("MemTotal:"))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            })
            .unwrap_or(0);
        Machine {
            cores: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            memory_mib: memory_kib / 1024,
            host: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .unwrap_or_default()
                .trim()
                .to_string(),
        }
    }
}

impl Report {
    /// The end-of-run table.
    pub fn summary(&self) -> String {
        let p = &self.produce;
        let mut out = String::new();
        let profile = &self.profile;
        let _ = writeln!(
            out,
            "{} ({}) against {}: {} producers x {} in flight, {} B records, acks={}, {} partitions x RF {}, {} s (+{} s warm-up)",
            self.label,
            profile.source,
            self.bootstrap,
            profile.producer.producers,
            profile.producer.inflight,
            profile.producer.message_size,
            profile.producer.acks,
            profile.topic.partitions,
            profile.topic.replication_factor,
            profile.execution.duration_secs,
            profile.execution.warmup_secs,
        );
        let _ = writeln!(
            out,
            "{:<10} {:>12} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7}",
            "",
            "msg/s",
            "MiB/s",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "p99.9",
            "max ms",
            "errors",
            "retries"
        );
        let retries = p.retries.to_string();
        row(
            &mut out,
            "produce",
            p.msgs_per_sec,
            p.mib_per_sec,
            &p.latency_ms,
            p.errors,
            &retries,
        );
        if let Some(c) = &self.consume {
            row(
                &mut out,
                "end-to-end",
                c.msgs_per_sec,
                c.mib_per_sec,
                &c.end_to_end_ms,
                c.errors,
                "-",
            );
        }
        let _ = writeln!(
            out,
            "sent {}, acknowledged {}, measured {} over {:.2} s",
            p.sent, p.acknowledged, p.measured, p.measured_secs
        );
        if let Some(error) = &p.first_error {
            let _ = writeln!(out, "first producer error: {error}");
        }
        if let Some(v) = &self.verify {
            let _ = writeln!(
                out,
                "verify: {} acknowledged, {} read back: lost {}, misplaced {}, duplicated {}, reordered {}, corrupted {} -> {}",
                v.acknowledged,
                v.read,
                v.lost,
                v.misplaced,
                v.duplicated,
                v.reordered,
                v.corrupted,
                if v.violations() == 0 {
                    "OK"
                } else {
                    "VIOLATED"
                }
            );
        }
        out
    }

    /// Why the run failed, if it did: a violation or a client error.
    pub fn failure(&self) -> Option<String> {
        if let Some(v) = &self.verify
            && v.violations() > 0
        {
            return Some(format!("verification found {} violations", v.violations()));
        }
        if self.produce.errors > 0 {
            let first = self.produce.first_error.as_deref().unwrap_or("?");
            return Some(format!(
                "{} producer errors (first: {first})",
                self.produce.errors
            ));
        }
        if let Some(c) = &self.consume
            && c.errors > 0
        {
            return Some(format!(
                "{} consumer errors (first: {})",
                c.errors,
                c.first_error.as_deref().unwrap_or("?")
            ));
        }
        if self.produce.acknowledged == 0 {
            return Some("no record was acknowledged".into());
        }
        None
    }
}

/// One row of the summary table.
fn row(
    out: &mut String,
    name: &str,
    msgs_per_sec: f64,
    mib_per_sec: f64,
    l: &Percentiles,
    errors: u64,
    retries: &str,
) {
    let _ = writeln!(
        out,
        "{:<10} {:>12} {:>9.1} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.1} {:>7} {:>7}",
        name,
        thousands(msgs_per_sec as u64),
        mib_per_sec,
        l.p50,
        l.p95,
        l.p99,
        l.p999,
        l.max,
        errors,
        retries
    );
}

/// Draws throughput over time and the latency percentile curve of each
/// report (one series per report) into an SVG document.
pub fn chart_svg(reports: &[Report]) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let (left, right) = root.split_horizontally(500);
        draw_throughput(&left, reports).map_err(|e| e.to_string())?;
        draw_latency(&right, reports).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// The chart as an SVG file, or an HTML page around it with the summaries.
pub fn write_chart(path: &str, reports: &[Report]) -> Result<(), String> {
    let svg = chart_svg(reports)?;
    let body = if path.ends_with(".html") {
        let mut html = String::from(
            "<!doctype html><meta charset=\"utf-8\"><title>helix-workload</title><body>\n",
        );
        html.push_str(&svg);
        for report in reports {
            let summary = report.summary().replace('&', "&amp;").replace('<', "&lt;");
            let _ = write!(html, "\n<pre>{summary}</pre>");
        }
        html.push_str("\n</body>\n");
        html
    } else {
        svg
    };
    std::fs::write(path, body).map_err(|e| format!("{path}: {e}"))
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type DrawResult = Result<(), Box<dyn std::error::Error>>;

fn color(i: usize) -> RGBColor {
    [
        RGBColor(31, 119, 180),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
        RGBColor(148, 103, 189),
    ][i % 4]
}

fn draw_throughput(area: &Area<'_>, reports: &[Report]) -> DrawResult {
    let secs = reports
        .iter()
        .flat_map(|r| r.timeline.iter().map(|s| s.sec))
        .max()
        .unwrap_or(1)
        .max(1);
    let top = reports
        .iter()
        .flat_map(|r| r.timeline.iter().map(|s| s.mib))
        .fold(1.0, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(
            "Produce throughput (MiB/s, acknowledged)",
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0u64..secs, 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc("second")
        .y_desc("MiB/s")
        .draw()?;
    for (i, report) in reports.iter().enumerate() {
        let style = color(i);
        chart
            .draw_series(LineSeries::new(
                report.timeline.iter().map(|s| (s.sec, s.mib)),
                style.stroke_width(2),
            ))?
            .label(report.label.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], style.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// The percentile curve on a 1/(1-q) axis: 0 is p0, 1 is p90, 2 is p99...
fn draw_latency(area: &Area<'_>, reports: &[Report]) -> DrawResult {
    let nines = |pct: f64| -(1.0 - (pct / 100.0).min(0.99999)).log10();
    let points: Vec<Vec<(f64, f64)>> = reports
        .iter()
        .map(|r| {
            r.produce
                .latency_ms
                .curve
                .iter()
                .map(|&(pct, ms)| (nines(pct), ms.max(0.001)))
                .collect()
        })
        .collect();
    let top = points.iter().flatten().map(|p| p.1).fold(1.0, f64::max) * 2.0;
    let mut chart = ChartBuilder::on(area)
        .caption("Produce latency by percentile (ms)", ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..5.0, (0.01..top).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .x_label_formatter(&|x: &f64| match x.round() as i32 {
            0 => "p0".into(),
            1 => "p90".into(),
            2 => "p99".into(),
            3 => "p99.9".into(),
            4 => "p99.99".into(),
            _ => "p99.999".into(),
        })
        .x_labels(6)
        .y_desc("ms")
        .draw()?;
    for (i, (report, series)) in reports.iter().zip(points).enumerate() {
        let style = color(i);
        chart
            .draw_series(LineSeries::new(series, style.stroke_width(2)))?
            .label(report.label.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], style.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(183_204), "183,204");
        assert_eq!(thousands(1_000_000), "1,000,000");
    }
}
