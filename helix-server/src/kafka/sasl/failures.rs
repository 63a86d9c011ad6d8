//! Failed SASL authentications per client address, so an address that
//! keeps failing is refused at accept instead of costing a PBKDF2 or
//! SCRAM computation per attempt (ADR 0028, `max_failed_authentications_per_ip_per_minute`).
//!
//! Each address has a fixed window that starts at its first failure and
//! lasts [`WINDOW`]; an address with `limit` failures in its window is
//! refused until the window ends. The table holds at most
//! [`MAX_ADDRESSES`] addresses: when full, addresses whose window ended go
//! first, then the one whose window started earliest. Memory is bounded
//! whatever the clients do; a flood from more addresses than the table
//! holds can only make the limit forget some of them, never refuse an
//! address that did not fail.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How long an address's failures count.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Most addresses remembered at once (about 40 bytes each).
pub const MAX_ADDRESSES: usize = 4096;

/// One address's failures in its current window.
#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    failures: u32,
}

/// The failed-authentication count per address; see the module doc.
#[derive(Debug)]
pub struct FailedAuthentications {
    /// Failures in a window that refuse the address; 0: never refuse.
    limit: u32,
    max_addresses: usize,
    by_address: HashMap<IpAddr, Window>,
}

impl FailedAuthentications {
    pub fn new(limit: u32) -> Self {
        Self::with_capacity(limit, MAX_ADDRESSES)
    }

    fn with_capacity(limit: u32, max_addresses: usize) -> Self {
        assert!(max_addresses > 0, "the table holds at least one address");
        FailedAuthentications {
            limit,
            max_addresses,
            by_address: HashMap::new(),
        }
    }

    /// Counts a failed authentication from `ip` at `now`.
    pub fn record(&mut self, ip: IpAddr, now: Instant) {
        if self.limit == 0 {
            return;
        }
        if let Some(w) = self.by_address.get_mut(&ip) {
            if now.duration_since(w.started) >= WINDOW {
                *w = Window {
                    started: now,
                    failures: 0,
                };
            }
            w.failures = w.failures.saturating_add(1);
            return;
        }
        if self.by_address.len() >= self.max_addresses {
            self.make_room(now);
        }
        self.by_address.insert(
            ip,
            Window {
                started: now,
                failures: 1,
            },
        );
        debug_assert!(self.by_address.len() <= self.max_addresses);
    }

    /// Whether `ip` reached the limit within its current window.
    pub fn refuses(&self, ip: IpAddr, now: Instant) -> bool {
        self.limit > 0
            && self
                .by_address
                .get(&ip)
                .is_some_and(|w| now.duration_since(w.started) < WINDOW && w.failures >= self.limit)
    }

    /// Addresses remembered now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_address.len()
    }

    /// Frees at least one entry: the ended windows, else the oldest one.
    fn make_room(&mut self, now: Instant) {
        self.by_address
            .retain(|_, w| now.duration_since(w.started) < WINDOW);
        if self.by_address.len() < self.max_addresses {
            return;
        }
        let oldest = self
            .by_address
            .iter()
            .min_by_key(|(_, w)| w.started)
            .map(|(ip, _)| *ip);
        if let Some(ip) = oldest {
            self.by_address.remove(&ip);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn ip(n: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(0x7f00_0000 + n))
    }

    #[test]
    fn an_address_is_refused_at_the_limit_and_only_it() {
        let now = Instant::now();
        let mut t = FailedAuthentications::new(3);
        for _ in 0..2 {
            t.record(ip(2), now);
        }
        assert!(!t.refuses(ip(2), now), "two failures are under the limit");
        t.record(ip(2), now);
        assert!(t.refuses(ip(2), now));
        assert!(!t.refuses(ip(1), now), "other addresses are not refused");
    }

    #[test]
    fn the_refusal_ends_with_the_window_and_a_new_window_starts_from_zero() {
        let start = Instant::now();
        let mut t = FailedAuthentications::new(2);
        t.record(ip(2), start);
        t.record(ip(2), start);
        let later = start + WINDOW;
        assert!(t.refuses(ip(2), later - Duration::from_millis(1)));
        assert!(!t.refuses(ip(2), later), "the window ended");
        t.record(ip(2), later);
        assert!(!t.refuses(ip(2), later), "one failure in the new window");
    }

    #[test]
    fn the_table_never_holds_more_than_its_capacity() {
        let now = Instant::now();
        let mut t = FailedAuthentications::with_capacity(1, 8);
        for n in 0..1000 {
            t.record(ip(n), now + Duration::from_millis(u64::from(n)));
            assert!(t.len() <= 8);
        }
        assert!(t.refuses(ip(999), now + Duration::from_secs(1)));
        assert!(!t.refuses(ip(0), now + Duration::from_secs(1)), "evicted");
    }

    #[test]
    fn when_full_ended_windows_go_before_the_oldest_live_one() {
        let start = Instant::now();
        let mut t = FailedAuthentications::with_capacity(1, 3);
        t.record(ip(1), start);
        let mid = start + Duration::from_secs(30);
        t.record(ip(2), mid);
        t.record(ip(3), mid + Duration::from_secs(1));
        let late = start + WINDOW + Duration::from_secs(1);
        t.record(ip(4), late);
        assert_eq!(t.len(), 3, "ip(1)'s ended window made room");
        assert!(t.refuses(ip(2), late) && t.refuses(ip(3), late) && t.refuses(ip(4), late));
        t.record(ip(5), late);
        assert!(
            !t.refuses(ip(2), late),
            "the oldest live window was evicted"
        );
        assert!(t.refuses(ip(5), late));
    }

    #[test]
    fn a_zero_limit_refuses_nobody_and_remembers_nothing() {
        let now = Instant::now();
        let mut t = FailedAuthentications::new(0);
        for _ in 0..100 {
            t.record(ip(2), now);
        }
        assert!(!t.refuses(ip(2), now));
        assert_eq!(t.len(), 0);
    }
}
