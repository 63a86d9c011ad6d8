//! The simulated network, as unkind as a real one: delay (usually 0..=3
//! ticks, sometimes hundreds), reordering (any deliverable batch may go
//! next), drop, duplicate, replays of any earlier batch at any later time,
//! partitions (symmetric, one-way, split brain) that drop or hold what
//! crosses them and release it on healing, and long isolation of one node.
//!
//! What travels is a `MessageBatch` (one message in the per-group host
//! path, every group's messages to one node in the MultiRaft path); every
//! batch crosses the wire codec.

use std::collections::HashSet;

use helix_raft::rng::SplitMix64;
use helix_raft::{MessageBatch, NodeId, decode_batch, encode_batch};

/// Usual delay bound; batches overdue by more are delivered at each tick.
const MAX_DELAY_TICKS: u64 = 3;
/// Range of a long delay (the election timeout is 10..20 ticks).
const LONG_DELAY_TICKS: (u64, u64) = (20, 400);
const DROP_PER_MILLE: u64 = 50;
const DUPLICATE_PER_MILLE: u64 = 30;
const LONG_DELAY_PER_MILLE: u64 = 15;
/// Batches beyond this many in flight (or held) are dropped (bounded memory).
const MAX_IN_FLIGHT: usize = 20_000;
/// Sent batches kept for replays; when full a random one is replaced, so
/// some stay for the whole run.
const ARCHIVE: usize = 2048;

struct Flight {
    deliver_at: u64,
    batch: MessageBatch,
}

/// How often each network fault happened (summed into the run's stats).
#[derive(Clone, Copy, Debug, Default)]
pub struct NetCounts {
    pub dropped: u64,
    pub duplicated: u64,
    pub long_delays: u64,
    pub replays: u64,
    pub held: u64,
    pub released: u64,
    pub isolations: u64,
}

pub struct Network {
    flights: Vec<Flight>,
    /// Batches a partition holds back; released when it heals.
    held: Vec<MessageBatch>,
    archive: Vec<MessageBatch>,
    /// (from, to) pairs that cannot talk until the next heal.
    blocked: HashSet<(NodeId, NodeId)>,
    /// A node cut off from everyone until the given tick (heal ignores it).
    isolated: Option<(NodeId, u64)>,
    faults: bool,
    pub counts: NetCounts,
}

impl Network {
    pub fn new(faults: bool) -> Self {
        Network {
            flights: Vec::new(),
            held: Vec::new(),
            archive: Vec::new(),
            blocked: HashSet::new(),
            isolated: None,
            faults,
            counts: NetCounts::default(),
        }
    }

    pub fn set_faults(&mut self, on: bool) {
        self.faults = on;
    }

    fn is_blocked(&self, from: NodeId, to: NodeId) -> bool {
        self.blocked.contains(&(from, to))
            || self
                .isolated
                .is_some_and(|(n, _)| (n == from || n == to) && from != to)
    }

    /// Every batch crosses the wire codec, so the whole simulation also
    /// checks that encoding round-trips.
    pub fn send(&mut self, batch: MessageBatch, now: u64, rng: &mut SplitMix64) {
        let decoded = decode_batch(encode_batch(&batch)).expect("own encoding decodes");
        assert_eq!(decoded, batch, "codec round trip");
        if self.faults {
            if self.archive.len() < ARCHIVE {
                self.archive.push(batch.clone());
            } else {
                let i = rng.in_range(0, ARCHIVE as u64) as usize;
                self.archive[i] = batch.clone();
            }
        }
        if self.flights.len() + self.held.len() >= MAX_IN_FLIGHT {
            self.counts.dropped += 1;
            return;
        }
        if self.is_blocked(batch.from, batch.to) {
            self.block(batch, rng);
            return;
        }
        if self.faults && rng.in_range(0, 1000) < DROP_PER_MILLE {
            self.counts.dropped += 1;
            return;
        }
        if self.faults && rng.in_range(0, 1000) < DUPLICATE_PER_MILLE {
            self.counts.duplicated += 1;
            let deliver_at = self.delay(now, rng);
            self.flights.push(Flight {
                deliver_at,
                batch: batch.clone(),
            });
        }
        let deliver_at = self.delay(now, rng);
        self.flights.push(Flight { deliver_at, batch });
    }

    fn delay(&mut self, now: u64, rng: &mut SplitMix64) -> u64 {
        if self.faults && rng.in_range(0, 1000) < LONG_DELAY_PER_MILLE {
            self.counts.long_delays += 1;
            now + rng.in_range(LONG_DELAY_TICKS.0, LONG_DELAY_TICKS.1)
        } else {
            now + rng.in_range(0, MAX_DELAY_TICKS + 1)
        }
    }

    /// A batch meets a partition: dropped, or held until it heals.
    fn block(&mut self, batch: MessageBatch, rng: &mut SplitMix64) {
        if rng.in_range(0, 2) == 0 {
            self.counts.held += 1;
            self.held.push(batch);
        } else {
            self.counts.dropped += 1;
        }
    }

    /// Re-sends a batch sent at any earlier time (after restarts, term
    /// changes and truncations it is a message from the past).
    /// Prefers (among a few drawn at random) a batch `aimed` likes: one
    /// that reaches a node whose term has moved on since it was sent.
    pub fn replay(
        &mut self,
        now: u64,
        rng: &mut SplitMix64,
        aimed: impl Fn(&MessageBatch) -> bool,
    ) {
        if self.archive.is_empty() || self.flights.len() >= MAX_IN_FLIGHT {
            return;
        }
        let mut i = rng.in_range(0, self.archive.len() as u64) as usize;
        for _ in 0..16 {
            let j = rng.in_range(0, self.archive.len() as u64) as usize;
            if aimed(&self.archive[j]) {
                i = j;
                break;
            }
        }
        let batch = self.archive[i].clone();
        self.counts.replays += 1;
        self.flights.push(Flight {
            deliver_at: now + rng.in_range(0, MAX_DELAY_TICKS + 1),
            batch,
        });
    }

    /// Any batch due by `now`, chosen at random (reordering).
    pub fn pop_random(&mut self, now: u64, rng: &mut SplitMix64) -> Option<MessageBatch> {
        self.pop_due(now, rng)
    }

    /// A batch overdue by more than the usual delay, if any.
    pub fn pop_overdue(&mut self, now: u64, rng: &mut SplitMix64) -> Option<MessageBatch> {
        self.pop_due(now.checked_sub(MAX_DELAY_TICKS)?, rng)
    }

    fn pop_due(&mut self, by: u64, rng: &mut SplitMix64) -> Option<MessageBatch> {
        loop {
            let due: Vec<usize> = self
                .flights
                .iter()
                .enumerate()
                .filter(|(_, f)| f.deliver_at <= by)
                .map(|(i, _)| i)
                .take(64)
                .collect();
            if due.is_empty() {
                return None;
            }
            let i = due[rng.in_range(0, due.len() as u64) as usize];
            let f = self.flights.swap_remove(i);
            if self.is_blocked(f.batch.from, f.batch.to) {
                self.block(f.batch, rng);
                continue;
            }
            return Some(f.batch);
        }
    }

    /// Isolates one node, cuts one direction of one link, or splits the
    /// cluster in two, until the next heal.
    pub fn partition_random(&mut self, rng: &mut SplitMix64, nodes: usize) {
        let node = |rng: &mut SplitMix64| NodeId(rng.in_range(1, nodes as u64 + 1));
        match rng.in_range(0, 3) {
            0 => {
                let a = node(rng);
                for b in 1..=nodes as u64 {
                    if NodeId(b) != a {
                        self.blocked.insert((a, NodeId(b)));
                        self.blocked.insert((NodeId(b), a));
                    }
                }
            }
            1 => {
                let (a, b) = (node(rng), node(rng));
                if a != b {
                    self.blocked.insert((a, b));
                }
            }
            _ => {
                let side: Vec<bool> = (0..nodes).map(|_| rng.in_range(0, 2) == 0).collect();
                for a in 0..nodes {
                    for b in 0..nodes {
                        if side[a] != side[b] {
                            self.blocked
                                .insert((NodeId(a as u64 + 1), NodeId(b as u64 + 1)));
                        }
                    }
                }
            }
        }
    }

    /// Cuts `node` off from everyone until tick `until`; heals do not end it.
    pub fn isolate(&mut self, node: NodeId, until: u64) {
        self.counts.isolations += 1;
        self.isolated = Some((node, until));
    }

    /// Ends a long isolation whose time is up (called every tick).
    pub fn expire(&mut self, now: u64, rng: &mut SplitMix64) {
        if self.isolated.is_some_and(|(_, until)| until <= now) {
            self.isolated = None;
            self.release(now, rng);
        }
    }

    /// Heals the short partitions and releases what they held.
    pub fn heal(&mut self, now: u64, rng: &mut SplitMix64) {
        self.blocked.clear();
        self.release(now, rng);
    }

    /// Heals everything, the long isolation too.
    pub fn heal_all(&mut self, now: u64, rng: &mut SplitMix64) {
        self.isolated = None;
        self.heal(now, rng);
    }

    fn release(&mut self, now: u64, rng: &mut SplitMix64) {
        let held = std::mem::take(&mut self.held);
        for batch in held {
            if self.is_blocked(batch.from, batch.to) {
                self.held.push(batch);
                continue;
            }
            self.counts.released += 1;
            self.flights.push(Flight {
                deliver_at: now + rng.in_range(0, MAX_DELAY_TICKS + 1),
                batch,
            });
        }
    }
}
