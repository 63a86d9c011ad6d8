//! The simulated network: delay (0..=3 ticks), reordering (any deliverable
//! message may go next), drop, duplicate, partitions (symmetric, one-way,
//! split brain) and heal.

use std::collections::HashSet;

use helix_raft::rng::SplitMix64;
use helix_raft::{Message, MessageBatch, NodeId, decode_batch, encode_batch};

const MAX_DELAY_TICKS: u64 = 3;
const DROP_PER_MILLE: u64 = 50;
const DUPLICATE_PER_MILLE: u64 = 30;
/// Messages beyond this many in flight are dropped (bounded memory).
const MAX_IN_FLIGHT: usize = 20_000;

struct Flight {
    deliver_at: u64,
    msg: Message,
}

pub struct Network {
    flights: Vec<Flight>,
    /// (from, to) pairs that cannot talk.
    blocked: HashSet<(NodeId, NodeId)>,
    faults: bool,
}

impl Network {
    pub fn new(faults: bool) -> Self {
        Network {
            flights: Vec::new(),
            blocked: HashSet::new(),
            faults,
        }
    }

    pub fn set_faults(&mut self, on: bool) {
        self.faults = on;
    }

    /// Every message crosses the wire codec, so the whole simulation also
    /// checks that encoding round-trips.
    pub fn send(&mut self, msg: Message, now: u64, rng: &mut SplitMix64) {
        let batch = MessageBatch {
            from: msg.from,
            to: msg.to,
            messages: vec![msg.clone()],
        };
        let decoded = decode_batch(encode_batch(&batch)).expect("own encoding decodes");
        assert_eq!(decoded, batch, "codec round trip");
        if self.blocked.contains(&(msg.from, msg.to)) || self.flights.len() >= MAX_IN_FLIGHT {
            return;
        }
        if self.faults && rng.in_range(0, 1000) < DROP_PER_MILLE {
            return;
        }
        if self.faults && rng.in_range(0, 1000) < DUPLICATE_PER_MILLE {
            let deliver_at = now + rng.in_range(0, MAX_DELAY_TICKS + 1);
            self.flights.push(Flight {
                deliver_at,
                msg: msg.clone(),
            });
        }
        let deliver_at = now + rng.in_range(0, MAX_DELAY_TICKS + 1);
        self.flights.push(Flight { deliver_at, msg });
    }

    /// Any message due by `now`, chosen at random (reordering).
    pub fn pop_random(&mut self, now: u64, rng: &mut SplitMix64) -> Option<Message> {
        self.pop_due(now, rng)
    }

    /// A message overdue by more than the maximum delay, if any.
    pub fn pop_overdue(&mut self, now: u64, rng: &mut SplitMix64) -> Option<Message> {
        self.pop_due(now.checked_sub(MAX_DELAY_TICKS)?, rng)
    }

    fn pop_due(&mut self, by: u64, rng: &mut SplitMix64) -> Option<Message> {
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
            if !self.blocked.contains(&(f.msg.from, f.msg.to)) {
                return Some(f.msg);
            }
        }
    }

    /// Isolates one node, cuts one direction of one link, or splits the
    /// cluster in two.
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

    pub fn heal(&mut self) {
        self.blocked.clear();
    }
}
