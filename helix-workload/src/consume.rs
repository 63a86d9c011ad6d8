//! Reading: group consumers that run beside the producers (consumer
//! throughput and end-to-end latency, scheduled send to receipt), and the
//! verifier's reader, which reads back everything the run wrote.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::admin;
use crate::payload;
use crate::profile::Consumer as Settings;
use crate::stats::Tally;
use crate::verify::Found;

/// How long the reader waits without progress before it gives up.
const STUCK_LIMIT: Duration = Duration::from_secs(30);

/// Group members reading beside the producers.
pub struct Group {
    pub tallies: Vec<Arc<Mutex<Tally>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    assigned: Arc<AtomicUsize>,
    /// Records due before this (µs from the epoch) are warm-up; u64::MAX
    /// until the producers are connected.
    pub warmup_us: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Group {
    /// Subscribes `settings.consumers` members, each on its own thread, and
    /// waits until the group has assigned every partition.
    pub fn start(
        bootstrap: &str,
        topic: &str,
        partitions: i32,
        settings: &Settings,
        run: u64,
        epoch: Instant,
    ) -> Result<Group, String> {
        let mut group = Group {
            tallies: Vec::new(),
            threads: Vec::new(),
            assigned: Arc::new(AtomicUsize::new(0)),
            warmup_us: Arc::new(AtomicU64::new(u64::MAX)),
            stop: Arc::new(AtomicBool::new(false)),
        };
        for index in 0..settings.consumers {
            let consumer: BaseConsumer = admin::config(bootstrap)
                .set("group.id", &settings.group)
                .set("isolation.level", &settings.isolation)
                .set("auto.offset.reset", "earliest")
                .create()
                .map_err(|e| format!("consumer: {e}"))?;
            consumer
                .subscribe(&[topic])
                .map_err(|e| format!("subscribe: {e}"))?;
            let tally = Arc::new(Mutex::new(Tally::default()));
            let member = Member {
                consumer,
                run,
                epoch,
                tally: tally.clone(),
                assigned: group.assigned.clone(),
                warmup_us: group.warmup_us.clone(),
                stop: group.stop.clone(),
            };
            let thread = std::thread::Builder::new()
                .name(format!("consumer-{index}"))
                .spawn(move || member.run())
                .map_err(|e| e.to_string())?;
            group.tallies.push(tally);
            group.threads.push(thread);
        }
        let deadline = Instant::now() + STUCK_LIMIT;
        while settings.consumers > 0 && group.assigned.load(Ordering::Relaxed) < partitions as usize
        {
            if Instant::now() > deadline {
                return Err(format!(
                    "the consumer group was not assigned all {partitions} partitions in {STUCK_LIMIT:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(group)
    }

    /// Records read so far.
    pub fn records(&self) -> u64 {
        self.tallies
            .iter()
            .map(|t| t.lock().expect("tally lock").records)
            .sum()
    }

    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads {
            let _ = thread.join();
        }
    }
}

struct Member {
    consumer: BaseConsumer,
    run: u64,
    epoch: Instant,
    tally: Arc<Mutex<Tally>>,
    assigned: Arc<AtomicUsize>,
    warmup_us: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Member {
    /// Polls until stopped, recording each of this run's records: end-to-end
    /// latency from its scheduled send to now.
    fn run(self) {
        let mut counted = 0;
        while !self.stop.load(Ordering::Relaxed) {
            let result = self.consumer.poll(Duration::from_millis(100));
            let now_us = self.epoch.elapsed().as_micros() as u64;
            if counted == 0 {
                counted = self.consumer.assignment().map(|a| a.count()).unwrap_or(0);
                self.assigned.fetch_add(counted, Ordering::Relaxed);
            }
            let Some(result) = result else { continue };
            let mut tally = self.tally.lock().expect("tally lock");
            match result {
                Ok(message) => {
                    let value = message.payload().unwrap_or_default();
                    match payload::decode(value) {
                        Some(stamp) if stamp.run == self.run => {
                            let measured = stamp.due_us >= self.warmup_us.load(Ordering::Relaxed);
                            tally.record(
                                now_us.saturating_sub(stamp.due_us),
                                value.len(),
                                now_us,
                                measured,
                            );
                        }
                        Some(_) => {} // an earlier run's record
                        None => tally.error(|| {
                            format!("a record at offset {} does not decode", message.offset())
                        }),
                    }
                }
                Err(error) => tally.error(|| error.to_string()),
            }
        }
    }
}

/// Reads every partition from `from[p]` up to `to[p]`.
pub fn read_back(
    bootstrap: &str,
    topic: &str,
    from: &[i64],
    to: &[i64],
    run: u64,
) -> Result<Vec<Vec<Found>>, String> {
    let consumer = admin::reader(bootstrap)?;
    let mut assignment = TopicPartitionList::new();
    for (p, &offset) in from.iter().enumerate() {
        if offset < to[p] {
            assignment
                .add_partition_offset(topic, p as i32, Offset::Offset(offset))
                .map_err(|e| format!("assign: {e}"))?;
        }
    }
    let mut found: Vec<Vec<Found>> = to
        .iter()
        .zip(from)
        .map(|(t, f)| Vec::with_capacity((t - f) as usize))
        .collect();
    let mut next: Vec<i64> = from.to_vec();
    if assignment.count() == 0 {
        return Ok(found);
    }
    consumer
        .assign(&assignment)
        .map_err(|e| format!("assign: {e}"))?;
    let mut progress = Instant::now();
    while next.iter().zip(to).any(|(n, t)| n < t) {
        if progress.elapsed() > STUCK_LIMIT {
            let behind: Vec<String> = next
                .iter()
                .zip(to)
                .enumerate()
                .filter(|(_, (n, t))| n < t)
                .map(|(p, (n, t))| format!("{p}: {n} of {t}"))
                .collect();
            return Err(format!(
                "reading back stopped making progress ({})",
                behind.join(", ")
            ));
        }
        let Some(result) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let message = result.map_err(|e| format!("reading back: {e}"))?;
        let p = message.partition() as usize;
        let offset = message.offset();
        if p >= to.len() || offset >= to[p] || offset < from[p] {
            continue;
        }
        let id = payload::decode(message.payload().unwrap_or_default())
            .filter(|stamp| stamp.run == run)
            .map(|stamp| (stamp.producer, stamp.seq));
        found[p].push(Found { offset, id });
        next[p] = offset + 1;
        progress = Instant::now();
    }
    Ok(found)
}
