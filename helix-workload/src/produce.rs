//! Producers: one librdkafka producer per thread, sending stamped records
//! with a bound on records in flight, and at a fixed rate when the profile
//! sets one. Latency runs from a record's scheduled send time to its
//! acknowledgement, so a stall is charged to every record it held back
//! (coordinated omission corrected); unthrottled, the schedule is "now".
//!
//! Acknowledgements are served by rust-rdkafka's polling thread
//! (`ThreadedProducer`); a sender waiting for room parks until one arrives.
//! It used to wait in `BaseProducer::poll(1 ms)`, which in rdkafka 0.39
//! spins on the clock for the last millisecond of every deadline (the
//! remaining time rounds to a 0 ms, non-blocking librdkafka poll): 45 % of
//! the tool's CPU went to `clock_gettime`, on the cores the brokers under
//! test need.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{
    BaseRecord, DeliveryResult, Producer as _, ProducerContext, ThreadedProducer,
};
use rdkafka::statistics::Statistics;

use crate::admin;
use crate::payload::{self, Stamp};
use crate::profile::Producer as Settings;
use crate::stats::Tally;
use crate::verify::Acked;

/// How long a producer waits for its last acknowledgements after sending stops.
const FLUSH_LIMIT: Duration = Duration::from_secs(60);
/// Longest park of a waiting sender (each acknowledgement wakes it).
const WAIT_STEP: Duration = Duration::from_millis(10);

/// One producer's shared state: its figures, what it got acknowledged
/// (when verifying), librdkafka's retry count.
#[derive(Default)]
pub struct Shared {
    pub tally: Mutex<Tally>,
    pub acked: Mutex<HashMap<i32, Vec<Acked>>>,
    pub retries: AtomicU64,
    pub sent: AtomicU64,
    done: AtomicU64,
    /// The sending thread, woken by each acknowledgement when it waits
    /// for room.
    sender: OnceLock<Thread>,
    /// Records due before this (µs from the epoch) are warm-up; set before
    /// the producer's thread starts.
    pub warmup_us: AtomicU64,
}

/// What every producer thread needs to know about the run.
#[derive(Clone)]
pub struct Plan {
    pub bootstrap: String,
    pub topic: String,
    pub settings: Settings,
    pub run: u64,
    /// The clock every stamp is read from; `start_us` after it the run
    /// starts (all producers connected), `stop_us` it stops sending.
    pub epoch: Instant,
    pub start_us: u64,
    pub stop_us: u64,
    pub verify: bool,
}

/// The producer's callbacks: acknowledgements into the tally, retries.
pub struct Context {
    shared: Arc<Shared>,
    epoch: Instant,
    verify: bool,
}

impl ClientContext for Context {
    fn stats(&self, statistics: Statistics) {
        let retries = statistics.brokers.values().map(|b| b.txretries).sum();
        self.shared.retries.store(retries, Ordering::Relaxed);
    }
}

impl ProducerContext for Context {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let now_us = self.epoch.elapsed().as_micros() as u64;
        self.shared.done.fetch_add(1, Ordering::Release);
        if let Some(sender) = self.shared.sender.get() {
            sender.unpark();
        }
        let mut tally = self.shared.tally.lock().expect("tally lock");
        match result {
            Ok(message) => {
                let value = message.payload().unwrap_or_default();
                let Some(stamp) = payload::decode(value) else {
                    tally.error(|| "an acknowledged record's value does not decode".into());
                    return;
                };
                let measured = stamp.due_us >= self.shared.warmup_us.load(Ordering::Relaxed);
                tally.record(
                    now_us.saturating_sub(stamp.due_us),
                    value.len(),
                    now_us,
                    measured,
                );
                drop(tally);
                if self.verify {
                    let acked = Acked {
                        producer: stamp.producer,
                        seq: stamp.seq,
                        offset: message.offset(),
                    };
                    self.shared
                        .acked
                        .lock()
                        .expect("acked lock")
                        .entry(message.partition())
                        .or_default()
                        .push(acked);
                }
            }
            Err((error, _)) => tally.error(|| error.to_string()),
        }
    }
}

pub type Client = ThreadedProducer<Context>;

/// Creates a producer and connects it (metadata fetched), so that the
/// clock starts on a warm client.
pub fn connect(plan: &Plan, shared: Arc<Shared>) -> Result<Client, String> {
    let s = &plan.settings;
    let inflight = s.inflight.to_string();
    let context = Context {
        shared,
        epoch: plan.epoch,
        verify: plan.verify,
    };
    let producer: Client = admin::config(&plan.bootstrap)
        .set("acks", &s.acks)
        .set("enable.idempotence", s.idempotence.to_string())
        .set("linger.ms", s.linger_ms.to_string())
        .set("compression.type", &s.compression)
        .set("queue.buffering.max.messages", inflight.as_str())
        .set("statistics.interval.ms", "1000")
        .create_with_context(context)
        .map_err(|e| format!("producer: {e}"))?;
    producer
        .client()
        .fetch_metadata(Some(&plan.topic), Duration::from_secs(30))
        .map_err(|e| format!("producer metadata: {e}"))?;
    Ok(producer)
}

/// Sends until the plan's stop time, then waits for the acknowledgements.
pub fn run(index: u32, plan: &Plan, producer: &Client, shared: &Shared) {
    let s = &plan.settings;
    let mut value = payload::template(s.message_size, index);
    let per_second = s.rate as f64 / f64::from(s.producers.max(1));
    let inflight = u64::from(s.inflight);
    let mut key = String::new();
    let mut sent = 0u64;
    let now_us = || plan.epoch.elapsed().as_micros() as u64;
    let _ = shared.sender.set(thread::current());
    loop {
        let mut due_us = now_us();
        if per_second > 0.0 {
            due_us = plan.start_us + (sent as f64 * 1_000_000.0 / per_second) as u64;
            let now = now_us();
            if due_us > now {
                thread::sleep(Duration::from_micros(due_us - now));
            }
        }
        if due_us >= plan.stop_us {
            break;
        }
        while sent - shared.done.load(Ordering::Acquire) >= inflight {
            thread::park_timeout(WAIT_STEP);
        }
        if per_second == 0.0 {
            due_us = now_us();
        }
        payload::encode(
            &mut value,
            Stamp {
                run: plan.run,
                producer: index,
                seq: sent,
                due_us,
            },
        );
        let mut record = BaseRecord::to(&plan.topic).payload(&value[..]);
        if s.keys {
            key.clear();
            let _ = write!(key, "{index}-{sent}");
            record = record.key(key.as_str());
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    thread::park_timeout(WAIT_STEP);
                }
                Err((error, _)) => {
                    shared
                        .tally
                        .lock()
                        .expect("tally lock")
                        .error(|| format!("send: {error}"));
                    shared.done.fetch_add(1, Ordering::Release);
                    break;
                }
            }
        }
        sent += 1;
        shared.sent.store(sent, Ordering::Relaxed);
    }
    let flush_until = Instant::now() + FLUSH_LIMIT;
    while shared.done.load(Ordering::Acquire) < sent && Instant::now() < flush_until {
        thread::park_timeout(WAIT_STEP);
    }
    let unacknowledged = sent - shared.done.load(Ordering::Acquire).min(sent);
    if unacknowledged > 0 {
        shared
            .tally
            .lock()
            .expect("tally lock")
            .error(|| format!("{unacknowledged} records unacknowledged after {FLUSH_LIMIT:?}"));
    }
}
