//! Latency and throughput accounting shared by a client thread (which
//! records) and the reporter (which takes a window once a second).
//! Latencies are microseconds in HDR histograms (1 µs to 10 min, 3
//! significant digits).

use std::sync::Mutex;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

/// What one client recorded since the reporter last looked.
pub struct Window {
    pub latency: Histogram<u64>,
    pub records: u64,
    pub bytes: u64,
    pub errors: u64,
}

impl Default for Window {
    fn default() -> Self {
        Window {
            latency: histogram(),
            records: 0,
            bytes: 0,
            errors: 0,
        }
    }
}

/// One client's figures: the current window, and the measured totals
/// (records due after the warm-up).
pub struct Tally {
    pub window: Window,
    pub measured: Histogram<u64>,
    pub measured_records: u64,
    pub measured_bytes: u64,
    /// Microseconds from the run's start to the last measured record.
    pub last_measured_us: u64,
    pub records: u64,
    pub errors: u64,
    pub first_error: Option<String>,
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            window: Window::default(),
            measured: histogram(),
            measured_records: 0,
            measured_bytes: 0,
            last_measured_us: 0,
            records: 0,
            errors: 0,
            first_error: None,
        }
    }
}

impl Tally {
    /// A record done at `now_us` whose latency is `latency_us`; `measured`
    /// when it was due after the warm-up.
    pub fn record(&mut self, latency_us: u64, bytes: usize, now_us: u64, measured: bool) {
        let latency_us = latency_us.max(1);
        self.window.latency.saturating_record(latency_us);
        self.window.records += 1;
        self.window.bytes += bytes as u64;
        self.records += 1;
        if measured {
            self.measured.saturating_record(latency_us);
            self.measured_records += 1;
            self.measured_bytes += bytes as u64;
            self.last_measured_us = self.last_measured_us.max(now_us);
        }
    }

    pub fn error(&mut self, message: impl FnOnce() -> String) {
        self.window.errors += 1;
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(message());
        }
    }
}

/// Takes every tally's window and merges them.
pub fn take_windows<'a>(tallies: impl IntoIterator<Item = &'a Mutex<Tally>>) -> Window {
    let mut all = Window::default();
    for tally in tallies {
        let window = std::mem::take(&mut tally.lock().expect("tally lock").window);
        all.latency.add(&window.latency).expect("same bounds");
        all.records += window.records;
        all.bytes += window.bytes;
        all.errors += window.errors;
    }
    all
}

/// Several clients' tallies added up.
pub struct Totals {
    pub measured: Histogram<u64>,
    pub records: u64,
    pub measured_records: u64,
    pub measured_bytes: u64,
    pub last_measured_us: u64,
    pub errors: u64,
    pub first_error: Option<String>,
}

impl Totals {
    /// Adds up `tallies` (the first error is the first client's that had one).
    pub fn of<'a>(tallies: impl IntoIterator<Item = &'a Mutex<Tally>>) -> Totals {
        let mut all = Totals {
            measured: histogram(),
            records: 0,
            measured_records: 0,
            measured_bytes: 0,
            last_measured_us: 0,
            errors: 0,
            first_error: None,
        };
        for tally in tallies {
            let t = tally.lock().expect("tally lock");
            all.measured.add(&t.measured).expect("same bounds");
            all.records += t.records;
            all.measured_records += t.measured_records;
            all.measured_bytes += t.measured_bytes;
            all.last_measured_us = all.last_measured_us.max(t.last_measured_us);
            all.errors += t.errors;
            all.first_error = all.first_error.take().or_else(|| t.first_error.clone());
        }
        all
    }

    /// Seconds from `start_us` to the last measured record (0 if none).
    pub fn measured_secs(&self, start_us: u64) -> f64 {
        self.last_measured_us.saturating_sub(start_us) as f64 / 1e6
    }
}

pub fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Percentiles {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    /// The percentile curve: (percentile, ms) from p0 to p99.999.
    pub curve: Vec<(f64, f64)>,
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        if h.is_empty() {
            return Percentiles::default();
        }
        let at = |q: f64| ms(h.value_at_quantile(q));
        // Points spaced evenly on a 1/(1-q) log axis: 0, 50, 75, ..., 99.999.
        let curve = (0..=34)
            .map(|i| {
                let q = 1.0 - 0.5f64.powf(i as f64 / 2.0);
                (q * 100.0, at(q))
            })
            .chain([(100.0, ms(h.max()))])
            .collect();
        Percentiles {
            p50: at(0.50),
            p95: at(0.95),
            p99: at(0.99),
            p999: at(0.999),
            max: ms(h.max()),
            curve,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_merge_and_reset() {
        let tallies = [Mutex::new(Tally::default()), Mutex::new(Tally::default())];
        tallies[0].lock().unwrap().record(1_000, 100, 5, true);
        tallies[1].lock().unwrap().record(3_000, 100, 6, false);
        tallies[1].lock().unwrap().error(|| "boom".into());
        let w = take_windows(&tallies);
        assert_eq!(
            (w.records, w.bytes, w.errors, w.latency.len()),
            (2, 200, 1, 2)
        );
        assert_eq!(take_windows(&tallies).records, 0, "a window is taken once");
        let t = tallies[0].lock().unwrap();
        assert_eq!(
            (t.records, t.measured_records, t.last_measured_us),
            (1, 1, 5)
        );
        assert_eq!(
            tallies[1].lock().unwrap().first_error.as_deref(),
            Some("boom")
        );
    }

    #[test]
    fn percentiles_read_the_histogram() {
        let mut h = histogram();
        for us in 1..=1000 {
            h.record(us * 1000).unwrap(); // 1..1000 ms
        }
        let p = Percentiles::of(&h);
        assert!(
            (p.p50 - 500.0).abs() < 1.0 && (p.p99 - 990.0).abs() < 1.0,
            "{p:?}"
        );
        assert!((p.max - 1000.0).abs() < 1.0);
        assert!(
            p.curve
                .windows(2)
                .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
            "monotonic curve"
        );
        assert_eq!(Percentiles::of(&histogram()), Percentiles::default());
    }
}
