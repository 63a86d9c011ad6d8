//! Who may hold a client connection: the node's limit (`max_connections`),
//! the per-IP limit (Kafka's `max.connections.per.ip` with its overrides),
//! and, when the node is full, the connection idle longest is closed to
//! admit the new one, so idle connections never lock working clients out.
//! Idle connections also close themselves after `connections_max_idle_ms`
//! (see [`super::connection::serve`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::Notify;

/// A connection's last activity and its eviction signal.
#[derive(Debug)]
pub struct Activity {
    /// Milliseconds since the admission table started.
    last_ms: AtomicU64,
    evicted: Notify,
}

impl Activity {
    /// Resolves once the connection was chosen to make room.
    pub async fn evicted(&self) {
        self.evicted.notified().await;
    }
}

#[derive(Debug)]
struct Entry {
    ip: IpAddr,
    activity: Arc<Activity>,
}

#[derive(Debug, Default)]
struct Table {
    next_id: u64,
    open: HashMap<u64, Entry>,
    per_ip: HashMap<IpAddr, usize>,
}

/// Why a connection is not admitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("{ip} already holds {limit} connections (max_connections_per_ip)")]
    PerIp { ip: IpAddr, limit: usize },
}

/// The node's open client connections.
#[derive(Debug)]
pub struct Admission {
    max: usize,
    per_ip: usize,
    overrides: HashMap<IpAddr, usize>,
    started: Instant,
    table: Mutex<Table>,
}

/// A connection's place in the table; leaving it (drop) frees the place.
#[derive(Debug)]
pub struct Ticket {
    id: u64,
    admission: Arc<Admission>,
    pub activity: Arc<Activity>,
}

impl Ticket {
    /// Records activity now (a request arrived).
    pub fn touch(&self) {
        self.activity
            .last_ms
            .store(self.admission.now_ms(), Ordering::Relaxed);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut t = self.admission.lock();
        if let Some(e) = t.open.remove(&self.id) {
            release(&mut t.per_ip, e.ip);
        }
    }
}

fn release(per_ip: &mut HashMap<IpAddr, usize>, ip: IpAddr) {
    if let Some(n) = per_ip.get_mut(&ip) {
        *n -= 1;
        if *n == 0 {
            per_ip.remove(&ip);
        }
    }
}

impl Admission {
    pub fn new(max: usize, per_ip: usize, overrides: HashMap<IpAddr, usize>) -> Arc<Admission> {
        Arc::new(Admission {
            max: max.max(1),
            per_ip,
            overrides,
            started: Instant::now(),
            table: Mutex::new(Table::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn limit_for(&self, ip: IpAddr) -> usize {
        self.overrides.get(&ip).copied().unwrap_or(self.per_ip)
    }

    /// Admits a connection from `ip`. At the node's limit the connection
    /// idle longest is told to close (and leaves the table at once).
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Ticket, Refused> {
        let mut t = self.lock();
        let limit = self.limit_for(ip);
        if t.per_ip.get(&ip).copied().unwrap_or(0) >= limit {
            return Err(Refused::PerIp { ip, limit });
        }
        if t.open.len() >= self.max
            && let Some(oldest) = t
                .open
                .iter()
                .min_by_key(|(id, e)| (e.activity.last_ms.load(Ordering::Relaxed), **id))
                .map(|(id, _)| *id)
            && let Some(e) = t.open.remove(&oldest)
        {
            tracing::info!(
                evicted_ip = %e.ip,
                idle_ms = self.now_ms().saturating_sub(e.activity.last_ms.load(Ordering::Relaxed)),
                "connection limit reached: closing the connection idle longest to admit a new one"
            );
            release(&mut t.per_ip, e.ip);
            e.activity.evicted.notify_one();
        }
        let id = t.next_id;
        t.next_id += 1;
        let activity = Arc::new(Activity {
            last_ms: AtomicU64::new(self.now_ms()),
            evicted: Notify::new(),
        });
        t.open.insert(
            id,
            Entry {
                ip,
                activity: activity.clone(),
            },
        );
        *t.per_ip.entry(ip).or_default() += 1;
        Ok(Ticket {
            id,
            admission: self.clone(),
            activity,
        })
    }

    /// Connections held now.
    #[cfg(test)]
    pub fn open(&self) -> usize {
        self.lock().open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[tokio::test]
    async fn the_connection_idle_longest_makes_room_and_per_ip_limits_hold() {
        let a = Admission::new(2, 2, HashMap::from([(ip(9), 3)]));
        let first = a.admit(ip(1)).expect("room");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let second = a.admit(ip(2)).expect("room");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        first.touch(); // the first one is working: the second is idle longest
        let third = a.admit(ip(3)).expect("the idle one makes room");
        assert_eq!(a.open(), 2);
        tokio::time::timeout(std::time::Duration::from_secs(1), second.activity.evicted())
            .await
            .expect("the idle connection is told to close");
        drop(second); // its task ends: nothing is freed twice
        assert_eq!(a.open(), 2);
        drop((first, third));
        assert_eq!(a.open(), 0);

        let a = Admission::new(100, 2, HashMap::from([(ip(9), 3)]));
        let _one = a.admit(ip(1)).expect("first");
        let _two = a.admit(ip(1)).expect("second");
        assert_eq!(
            a.admit(ip(1)).unwrap_err(),
            Refused::PerIp {
                ip: ip(1),
                limit: 2
            }
        );
        let held: Vec<_> = (0..3).map(|_| a.admit(ip(9)).expect("override")).collect();
        assert!(a.admit(ip(9)).is_err(), "the override is a limit too");
        drop(held);
        assert!(a.admit(ip(9)).is_ok(), "freed places are reused");
    }
}
