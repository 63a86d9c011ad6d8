//! Client quotas enforced on this node, as Kafka's `ClientQuotaManager`
//! enforces them (KIP-13, KIP-219): the controller's replicated quota
//! table says each client's bound ([`QuotaTable::lookup`], Kafka's order
//! of precedence); this node measures each client's rate over Kafka's
//! window ([`rate`]) and, when a request takes it past the bound, answers
//! with the time the client must wait and stops reading its connection for
//! that long (the connection's read loop does the muting).
//!
//! Rates are per node, as in Kafka: a client spreading its requests over
//! three nodes may use three times its quota in total.

pub mod rate;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use self::rate::{Rate, SAMPLES, WINDOW_MS};
use crate::controller::quotas::QuotaKey;
use crate::controller::service::Controller;

/// Most rates kept at once (one per client and quota key); past it, rates
/// of clients idle for the whole window, which measure nothing, are
/// dropped, and if none are, the new client shares no history.
pub const MAX_RATES: usize = 100_000;

/// Whose rate a request counts against: the names that the quota's entity
/// names (a quota set for a default or a name counts each client's own
/// name; a part the entity leaves out is shared).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct RateKey {
    key: QuotaKey,
    user: Option<String>,
    client_id: Option<String>,
}

struct Tracked {
    rate: Rate,
    last_ms: u64,
}

/// The node's quota rates.
pub struct ClientQuotas {
    controller: Arc<Controller>,
    epoch: Instant,
    rates: Mutex<HashMap<RateKey, Tracked>>,
}

impl std::fmt::Debug for ClientQuotas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientQuotas").finish_non_exhaustive()
    }
}

/// The user a principal is counted as: its name (`User:alice` → `alice`),
/// Kafka's `ANONYMOUS` without one.
pub fn user_of(principal: Option<&str>) -> &str {
    principal
        .map(|p| p.strip_prefix("User:").unwrap_or(p))
        .unwrap_or("ANONYMOUS")
}

impl ClientQuotas {
    pub fn new(controller: Arc<Controller>) -> ClientQuotas {
        ClientQuotas {
            controller,
            epoch: Instant::now(),
            rates: Mutex::new(HashMap::new()),
        }
    }

    /// Counts `value` (bytes, or percent-seconds of request time) against
    /// the client's quota on `key`; returns how long the client must wait
    /// (zero when it has no quota or is within it).
    pub fn record(&self, key: QuotaKey, user: &str, client_id: &str, value: f64) -> Duration {
        let found = {
            let view = self.controller.view();
            if view.view.quotas.is_empty() {
                return Duration::ZERO;
            }
            view.view.quotas.lookup(user, client_id, key)
        };
        let Some((entity, bound)) = found else {
            return Duration::ZERO;
        };
        let rate_key = RateKey {
            key,
            user: entity.user.map(|_| user.to_string()),
            client_id: entity.client_id.map(|_| client_id.to_string()),
        };
        let now_ms = self.epoch.elapsed().as_millis() as u64;
        let mut rates = self.rates.lock().unwrap_or_else(|p| p.into_inner());
        if rates.len() >= MAX_RATES && !rates.contains_key(&rate_key) {
            let idle = WINDOW_MS * SAMPLES as u64;
            rates.retain(|_, t| now_ms.saturating_sub(t.last_ms) < idle);
            if rates.len() >= MAX_RATES {
                return Duration::ZERO;
            }
        }
        let tracked = rates.entry(rate_key).or_insert_with(|| Tracked {
            rate: Rate::new(now_ms),
            last_ms: now_ms,
        });
        tracked.last_ms = now_ms;
        Duration::from_millis(tracked.rate.record_and_throttle_ms(value, bound, now_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_count_as_their_user_name() {
        assert_eq!(user_of(Some("User:alice")), "alice");
        assert_eq!(user_of(None), "ANONYMOUS");
    }
}
