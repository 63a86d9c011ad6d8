//! Seeded random schedules: four clients (two static) join, sync,
//! heartbeat, commit, leave and crash at random while time jumps and
//! acknowledgements are delayed. After every step: no request is answered
//! twice (the harness checks), generations never go back, a Stable group's
//! members are the ones its stored record names. At the end: every request
//! was answered, committed offsets are the last acknowledged ones, and a
//! replay of the log rebuilds the same view.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::harness::*;
use crate::group::classic::GroupState;
use crate::group::{Coordinator, CoordinatorPartition, GroupResponse, RequestToken};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Default)]
struct Client {
    instance: Option<String>,
    member_id: String,
    generation: i32,
    join: Option<RequestToken>,
    sync: Option<RequestToken>,
    leader: bool,
    peers: Vec<String>,
}

const GROUP: &str = "sim";

fn protocols() -> Vec<(&'static str, Bytes)> {
    vec![("range", subscription(&["orders"]))]
}

/// Takes a finished JoinGroup/SyncGroup answer into the client's state.
fn observe(h: &mut Harness, client: &mut Client) {
    if let Some(token) = client.join
        && let Some((_, GroupResponse::JoinGroup(r))) = h.replies.get(&token).cloned()
    {
        client.join = None;
        match r.error_code {
            0 => {
                client.member_id = r.member_id.to_string();
                client.generation = r.generation_id;
                client.leader = r.leader == r.member_id;
                client.peers = r.members.iter().map(|m| m.member_id.to_string()).collect();
            }
            79 => client.member_id = r.member_id.to_string(),
            _ => client.member_id.clear(),
        }
    }
    if let Some(token) = client.sync
        && let Some((_, GroupResponse::SyncGroup(r))) = h.replies.get(&token).cloned()
    {
        client.sync = None;
        if r.error_code != 0 {
            client.generation = -1;
        }
    }
}

fn run(seed: u64) -> (i32, usize, usize) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut h = Harness::new(config());
    let mut clients: Vec<Client> = (0..4)
        .map(|i| Client {
            instance: (i < 2).then(|| format!("static-{i}")),
            ..Client::default()
        })
        .collect();
    let mut sent = 0usize;
    let mut commits: Vec<(RequestToken, i32, i64)> = Vec::new();
    let mut last_generation = 0;
    for step in 0..400 {
        let i = rng.below(4) as usize;
        let mut client = std::mem::take(&mut clients[i]);
        observe(&mut h, &mut client);
        let busy = client.join.is_some() || client.sync.is_some();
        match rng.below(10) {
            0..=2 if !busy => {
                let token = h.join(
                    7,
                    GROUP,
                    &client.member_id.clone(),
                    client.instance.as_deref(),
                    &protocols(),
                );
                client.join = Some(token);
                sent += 1;
            }
            3 if !busy && client.generation > 0 => {
                let assignments: Vec<(String, Vec<u8>)> = if client.leader {
                    client
                        .peers
                        .iter()
                        .map(|p| (p.clone(), p.as_bytes().to_vec()))
                        .collect()
                } else {
                    Vec::new()
                };
                let refs: Vec<(&str, &[u8])> = assignments
                    .iter()
                    .map(|(m, a)| (m.as_str(), a.as_slice()))
                    .collect();
                client.sync = Some(h.sync(
                    5,
                    GROUP,
                    &client.member_id.clone(),
                    client.generation,
                    &refs,
                ));
                sent += 1;
            }
            4 | 5 if !busy && !client.member_id.is_empty() => {
                let code = h.heartbeat(GROUP, &client.member_id.clone(), client.generation);
                sent += 1;
                if code == 25 {
                    client.member_id.clear();
                }
            }
            6 if !busy && !client.member_id.is_empty() => {
                let partition = rng.below(3) as i32;
                let offset = step as i64;
                let token = h.commit(
                    GROUP,
                    &client.member_id.clone(),
                    client.generation,
                    "orders",
                    partition,
                    offset,
                );
                commits.push((token, partition, offset));
                sent += 1;
            }
            7 if !busy && !client.member_id.is_empty() && rng.below(4) == 0 => {
                h.leave(GROUP, &client.member_id.clone());
                sent += 1;
                client = Client {
                    instance: client.instance,
                    ..Client::default()
                };
            }
            8 if rng.below(6) == 0 => {
                // Crash: forget everything but the instance id; parked
                // requests still get their answers (checked at the end).
                client = Client {
                    instance: client.instance,
                    ..Client::default()
                };
            }
            _ => {}
        }
        clients[i] = client;
        if rng.below(5) == 0 {
            h.hold = !h.hold;
            if !h.hold {
                h.release();
            }
        }
        h.advance(rng.below(3_000));
        check_step(&h, &mut last_generation);
    }
    // Everyone goes quiet: every parked request must be answered.
    h.release();
    for _ in 0..20 {
        h.advance(10_000);
    }
    assert_eq!(
        h.replies.len(),
        sent,
        "seed {seed}: every request is answered"
    );
    let mut expected: BTreeMap<i32, i64> = BTreeMap::new();
    for (token, partition, offset) in &commits {
        if h.commit_codes(*token) == vec![0] {
            expected.insert(*partition, *offset);
        }
    }
    let fetched = h.fetch(GROUP, "orders", &[0, 1, 2]).1;
    for (partition, (offset, ..)) in fetched.iter().enumerate() {
        let want = expected.get(&(partition as i32)).copied().unwrap_or(-1);
        assert_eq!(*offset, want, "seed {seed}: partition {partition}");
    }
    let mut fresh = Coordinator::new(config());
    for p in 0..config().coordinator_partitions {
        fresh.begin_load(CoordinatorPartition(p));
    }
    for (partition, entry) in &h.log {
        fresh.replay(*partition, entry, h.now).expect("replay");
    }
    let group = |c: &Coordinator| {
        c.shards
            .values()
            .find_map(|s| s.groups.get(GROUP))
            .map(|g| (g.stored.clone(), g.offsets.clone()))
    };
    assert_eq!(
        group(&fresh),
        group(&h.coordinator),
        "seed {seed}: replay rebuilds the view"
    );
    (last_generation, expected.len(), sent)
}

fn check_step(h: &Harness, last_generation: &mut i32) {
    let Some(group) = h
        .coordinator
        .shards
        .values()
        .find_map(|s| s.groups.get(GROUP))
    else {
        return;
    };
    assert!(
        group.generation >= *last_generation,
        "generations never go back"
    );
    *last_generation = group.generation;
    if group.state == GroupState::Stable && h.held.is_empty() {
        let stored = group.stored.as_ref().expect("a Stable group is stored");
        assert_eq!(stored.generation, group.generation);
        let stored_ids: Vec<&str> = stored
            .members
            .iter()
            .map(|m| m.member_id.as_str())
            .collect();
        let live_ids: Vec<&str> = group.members.keys().map(String::as_str).collect();
        assert_eq!(
            stored_ids, live_ids,
            "a Stable group's members are the stored ones"
        );
        assert!(
            group
                .members
                .values()
                .all(|m| m.awaiting_join.is_none() && m.awaiting_sync.is_none())
        );
    }
}

#[test]
fn random_schedules_keep_the_coordinator_invariants() {
    let mut generations = 0;
    let mut committed_partitions = 0;
    for seed in 1..=60 {
        let (generation, committed, _) = run(seed);
        generations += generation;
        committed_partitions += committed;
    }
    // The schedules do reach rebalances and acknowledged commits.
    assert!(
        generations > 60 * 5,
        "{generations} generations over 60 seeds"
    );
    assert!(
        committed_partitions > 60,
        "{committed_partitions} committed partitions over 60 seeds"
    );
}
