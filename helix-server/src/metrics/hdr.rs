//! An HDR histogram that Prometheus can scrape: recorded once on the hot
//! path, read as exact quantiles for the log and as cumulative buckets for
//! `/metrics`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use hdrhistogram::Histogram;

/// Values recorded, their sum, and the histogram they fall in.
#[derive(Debug)]
pub struct Hdr {
    hist: Mutex<Histogram<u64>>,
    sum: AtomicU64,
    max: u64,
}

/// What a scrape reads: bucket counts (not cumulative) by upper bound, the
/// count and the sum, in recorded units.
#[derive(Debug, Clone, PartialEq)]
pub struct Buckets {
    pub count: u64,
    pub sum: u64,
    /// (upper bound, values above the previous bound up to this one); the
    /// last bound is `u64::MAX` (+Inf).
    pub buckets: Vec<(u64, u64)>,
}

impl Hdr {
    /// A histogram of values in `1..=max`, larger values clamped to `max`.
    pub fn new(max: u64) -> Hdr {
        let hist = Histogram::new_with_bounds(1, max.max(2), 3)
            .unwrap_or_else(|_| Histogram::new(3).expect("3 significant digits is valid"));
        Hdr {
            hist: Mutex::new(hist),
            sum: AtomicU64::new(0),
            max,
        }
    }

    pub fn record(&self, value: u64) {
        let v = value.clamp(1, self.max);
        self.sum.fetch_add(value, Ordering::Relaxed);
        if let Ok(mut h) = self.hist.lock() {
            let _ = h.record(v);
        }
    }

    /// Count, p50, p99, p99.9 and max; None when nothing was recorded.
    pub fn quantiles(&self) -> Option<[u64; 5]> {
        let h = self.hist.lock().ok()?;
        if h.is_empty() {
            return None;
        }
        Some([
            h.len(),
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.value_at_quantile(0.999),
            h.max(),
        ])
    }

    /// The recorded values binned by `bounds` (ascending, inclusive upper
    /// bounds) plus a last +Inf bucket. A value is placed by the highest
    /// value HDR holds as equal to it, so a bucket boundary is exact to the
    /// histogram's 3 significant digits.
    pub fn buckets(&self, bounds: &[u64]) -> Buckets {
        let mut buckets: Vec<(u64, u64)> = bounds.iter().map(|b| (*b, 0)).collect();
        buckets.push((u64::MAX, 0));
        let Ok(h) = self.hist.lock() else {
            return Buckets {
                count: 0,
                sum: 0,
                buckets,
            };
        };
        for v in h.iter_recorded() {
            let value = h.lowest_equivalent(v.value_iterated_to());
            let i = buckets
                .iter()
                .position(|(bound, _)| value <= *bound)
                .unwrap_or(buckets.len() - 1);
            buckets[i].1 += v.count_at_value();
        }
        Buckets {
            count: h.len(),
            sum: self.sum.load(Ordering::Relaxed),
            buckets,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_count_every_value_once_at_its_bound() {
        let h = Hdr::new(60_000_000);
        for v in [1, 100, 100, 101, 5_000, 90_000_000] {
            h.record(v);
        }
        let b = h.buckets(&[100, 1_000, 10_000]);
        assert_eq!(b.count, 6);
        assert_eq!(b.sum, 1 + 100 + 100 + 101 + 5_000 + 90_000_000);
        assert_eq!(
            b.buckets,
            vec![(100, 3), (1_000, 1), (10_000, 1), (u64::MAX, 1)]
        );
    }

    #[test]
    fn an_empty_histogram_has_empty_buckets_and_no_quantiles() {
        let h = Hdr::new(1000);
        assert!(h.quantiles().is_none());
        let b = h.buckets(&[10]);
        assert_eq!((b.count, b.sum), (0, 0));
        assert_eq!(b.buckets, vec![(10, 0), (u64::MAX, 0)]);
    }
}
