//! One run of a profile against a broker: set up the topic, connect the
//! clients, offer the load while printing a line a second, read everything
//! back and verify it, and hand back the report.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::admin;
use crate::consume::{self, Group};
use crate::produce::{self, Plan, Shared};
use crate::profile::Profile;
use crate::report::{Consumed, Machine, Produced, Report, Second};
use crate::stats::{self, Percentiles, Tally, Totals};
use crate::verify::Verdict;

/// How long consumers may take to catch up with the producers at the end.
const CONSUME_LIMIT: Duration = Duration::from_secs(30);

/// Runs `profile` against `bootstrap`; `print` gets each per-second line.
pub fn run(
    bootstrap: &str,
    profile: &Profile,
    label: &str,
    print: &mut dyn FnMut(&str),
) -> Result<Report, String> {
    let topic = profile.topic.name.clone();
    let partitions = admin::ensure_topic(bootstrap, &profile.topic)?;
    let reader = admin::reader(bootstrap)?;
    let from = admin::high_watermarks(&reader, &topic, partitions)?;
    let run_id: u64 = rand::random();
    let started_unix_secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let epoch = Instant::now();
    let group = match profile.consumer.consumers {
        0 => None,
        _ => Some(Group::start(
            bootstrap,
            &topic,
            partitions,
            &profile.consumer,
            run_id,
            epoch,
        )?),
    };

    let mut plan = Plan {
        bootstrap: bootstrap.to_string(),
        topic: topic.clone(),
        settings: profile.producer.clone(),
        run: run_id,
        epoch,
        start_us: 0,
        stop_us: 0,
        verify: profile.verify.enabled,
    };
    let mut clients = Vec::new();
    for _ in 0..profile.producer.producers {
        let shared = Arc::new(Shared::default());
        clients.push((produce::connect(&plan, shared.clone())?, shared));
    }
    plan.start_us = epoch.elapsed().as_micros() as u64;
    let warmup_us = plan.start_us + profile.execution.warmup_secs * 1_000_000;
    plan.stop_us = warmup_us + profile.execution.duration_secs * 1_000_000;
    if let Some(group) = &group {
        group.warmup_us.store(warmup_us, Ordering::Relaxed);
    }
    let shared: Vec<Arc<Shared>> = clients.iter().map(|(_, s)| s.clone()).collect();
    let mut threads = Vec::new();
    for (index, (client, shared)) in clients.into_iter().enumerate() {
        shared.warmup_us.store(warmup_us, Ordering::Relaxed);
        let plan = plan.clone();
        let thread = std::thread::Builder::new()
            .name(format!("producer-{index}"))
            .spawn(move || produce::run(index as u32, &plan, &client, &shared))
            .map_err(|e| e.to_string())?;
        threads.push(thread);
    }

    // One line a second until the producers are done and the consumers
    // have read what was acknowledged (or gave up).
    let tallies: Vec<&Mutex<Tally>> = shared.iter().map(|s| &s.tally).collect();
    let consumer_tallies: Vec<&Mutex<Tally>> = group
        .iter()
        .flat_map(|g| g.tallies.iter().map(|t| &**t))
        .collect();
    let mut timeline = Vec::new();
    let mut producers_done_at = None;
    for sec in 1.. {
        let due = Duration::from_micros(plan.start_us) + Duration::from_secs(sec);
        std::thread::sleep(due.saturating_sub(epoch.elapsed()));
        let produced = stats::take_windows(tallies.iter().copied());
        let consumed = stats::take_windows(consumer_tallies.iter().copied());
        let second = Second {
            sec,
            warmup: due < Duration::from_micros(warmup_us),
            msgs: produced.records,
            mib: stats::mib(produced.bytes),
            p50_ms: stats::ms(produced.latency.value_at_quantile(0.5)),
            p99_ms: stats::ms(produced.latency.value_at_quantile(0.99)),
            errors: produced.errors + consumed.errors,
            consumed: consumed.records,
        };
        print(&second.line());
        timeline.push(second);
        if producers_done_at.is_none() && threads.iter().all(|t| t.is_finished()) {
            producers_done_at = Some(Instant::now());
        }
        let Some(done_at) = producers_done_at else {
            continue;
        };
        let acknowledged: u64 = tallies
            .iter()
            .map(|t| t.lock().expect("tally lock").records)
            .sum();
        match &group {
            Some(g) if g.records() < acknowledged && done_at.elapsed() < CONSUME_LIMIT => {}
            _ => break,
        }
    }
    for thread in threads {
        thread
            .join()
            .map_err(|_| "a producer thread panicked".to_string())?;
    }

    let totals = Totals::of(tallies.iter().copied());
    let measured_secs = totals.measured_secs(warmup_us);
    let secs = measured_secs.max(1e-6);
    let produce = Produced {
        sent: shared.iter().map(|s| s.sent.load(Ordering::Relaxed)).sum(),
        acknowledged: totals.records,
        measured: totals.measured_records,
        measured_secs,
        msgs_per_sec: totals.measured_records as f64 / secs,
        mib_per_sec: stats::mib(totals.measured_bytes) / secs,
        latency_ms: Percentiles::of(&totals.measured),
        errors: totals.errors,
        retries: shared
            .iter()
            .map(|s| s.retries.load(Ordering::Relaxed))
            .sum(),
        first_error: totals.first_error,
    };

    let consume = group.map(|g| {
        let totals = Totals::of(g.tallies.iter().map(|t| &**t));
        let secs = totals.measured_secs(warmup_us).max(1e-6);
        g.stop();
        Consumed {
            records: totals.records,
            msgs_per_sec: totals.measured_records as f64 / secs,
            mib_per_sec: stats::mib(totals.measured_bytes) / secs,
            end_to_end_ms: Percentiles::of(&totals.measured),
            errors: totals.errors,
            first_error: totals.first_error,
        }
    });

    let verify = match profile.verify.enabled {
        false => None,
        true => {
            let to = admin::high_watermarks(&reader, &topic, partitions)?;
            let found = consume::read_back(bootstrap, &topic, &from, &to, run_id)?;
            let mut verdict = Verdict {
                idempotent: profile.producer.idempotence,
                ..Verdict::default()
            };
            for (partition, log) in found.iter().enumerate() {
                let acked: Vec<_> = shared
                    .iter()
                    .flat_map(|s| {
                        s.acked
                            .lock()
                            .expect("acked lock")
                            .remove(&(partition as i32))
                            .unwrap_or_default()
                    })
                    .collect();
                verdict.check_partition(&acked, log);
            }
            Some(verdict)
        }
    };

    Ok(Report {
        label: label.to_string(),
        bootstrap: bootstrap.to_string(),
        profile: profile.clone(),
        machine: Machine::this(),
        started_unix_secs,
        produce,
        consume,
        timeline,
        verify,
    })
}
