//! A windowed rate as Kafka measures one for quotas (its `Rate` over a
//! `SampledStat`): `SAMPLES` windows of `WINDOW` each, the oldest dropped
//! as time moves on; the rate is the sum of the kept samples over the time
//! they cover, counted as at least `SAMPLES - 1` whole windows, so a burst
//! right after a quiet spell is measured against the whole window and not
//! against a few milliseconds.
//!
//! Pure: time comes in as milliseconds from the caller.

/// Kafka's `quota.window.num` default.
pub const SAMPLES: usize = 11;
/// Kafka's `quota.window.size.seconds` default, in milliseconds.
pub const WINDOW_MS: u64 = 1000;

#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    /// When the sample's window began.
    start_ms: u64,
    value: f64,
}

/// The recent history of one client's use of one quota.
#[derive(Debug, Clone)]
pub struct Rate {
    samples: [Sample; SAMPLES],
    /// The sample being added to.
    current: usize,
}

impl Rate {
    pub fn new(now_ms: u64) -> Rate {
        let mut samples = [Sample::default(); SAMPLES];
        for s in &mut samples {
            s.start_ms = now_ms;
        }
        Rate {
            samples,
            current: 0,
        }
    }

    /// Adds `value` at `now_ms`.
    pub fn record(&mut self, value: f64, now_ms: u64) {
        let s = &self.samples[self.current];
        if now_ms.saturating_sub(s.start_ms) >= WINDOW_MS {
            self.current = (self.current + 1) % SAMPLES;
            self.samples[self.current] = Sample {
                start_ms: now_ms,
                value: 0.0,
            };
        }
        self.samples[self.current].value += value;
    }

    /// Forgets samples older than the whole window.
    fn purge(&mut self, now_ms: u64) {
        let expire = WINDOW_MS * SAMPLES as u64;
        for s in &mut self.samples {
            if now_ms.saturating_sub(s.start_ms) >= expire {
                *s = Sample {
                    start_ms: now_ms,
                    value: 0.0,
                };
            }
        }
    }

    /// The time the rate is measured over, in milliseconds (Kafka's
    /// `Rate.windowSize`).
    pub fn window_ms(&mut self, now_ms: u64) -> u64 {
        self.purge(now_ms);
        let oldest = self
            .samples
            .iter()
            .map(|s| s.start_ms)
            .min()
            .unwrap_or(now_ms);
        let mut elapsed = now_ms.saturating_sub(oldest);
        let full = elapsed / WINDOW_MS;
        let least = SAMPLES as u64 - 1;
        if full < least {
            elapsed += (least - full) * WINDOW_MS;
        }
        elapsed
    }

    /// Units per second at `now_ms`.
    pub fn measure(&mut self, now_ms: u64) -> f64 {
        let window = self.window_ms(now_ms);
        let total: f64 = self.samples.iter().map(|s| s.value).sum();
        total / (window as f64 / 1000.0)
    }

    /// Records `value` and returns how long the client must wait for its
    /// rate to come back to `bound` (0: within it), as Kafka's
    /// `QuotaUtils.throttleTime`: (rate - bound) / bound × window.
    pub fn record_and_throttle_ms(&mut self, value: f64, bound: f64, now_ms: u64) -> u64 {
        self.record(value, now_ms);
        let rate = self.measure(now_ms);
        if rate <= bound || bound <= 0.0 {
            return 0;
        }
        let window = self.window_ms(now_ms) as f64;
        ((rate - bound) / bound * window).round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_burst_is_measured_over_the_whole_window() {
        let mut r = Rate::new(0);
        // 10 windows' worth at once: 10 units over the 10 s minimum window.
        r.record(10.0, 0);
        assert!((r.measure(0) - 1.0).abs() < 1e-9);
        assert_eq!(r.window_ms(500), 10_500);
    }

    #[test]
    fn the_throttle_brings_the_rate_back_to_the_bound() {
        let mut r = Rate::new(0);
        // 200 units against a bound of 10/s over a 10 s window: 20/s, so
        // the wait is (20 - 10) / 10 × 10 s = 10 s, Kafka's formula.
        let t = r.record_and_throttle_ms(200.0, 10.0, 0);
        assert_eq!(t, 10_000);
        assert!(r.measure(2 * t) <= 10.0 + 1e-9);
        assert_eq!(r.record_and_throttle_ms(1.0, 1000.0, t), 0);
    }

    #[test]
    fn old_samples_are_forgotten() {
        let mut r = Rate::new(0);
        r.record(1000.0, 0);
        assert!(r.measure(WINDOW_MS * SAMPLES as u64) < 1e-9);
    }

    #[test]
    fn a_steady_client_at_the_bound_is_not_throttled() {
        let mut r = Rate::new(0);
        let mut throttled = 0;
        for ms in (0..60_000u64).step_by(100) {
            throttled += r.record_and_throttle_ms(9.0, 100.0, ms);
        }
        assert_eq!(throttled, 0);
    }
}
