//! WAL benchmarks: append throughput beside a plain `write()` loop, Fsync
//! group commit with concurrent appenders beside a write+fdatasync loop, and
//! read throughput from a sealed (mapped) and the active segment.
//!
//! Run: `cargo bench -p helix-wal --bench wal -- --warm-up-time 1 --measurement-time 3`

use std::fs::File;
use std::io::Write;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use helix_wal::batch::build_test_batch;
use helix_wal::{Durability, LogConfig, PartitionLog, RaftPosition, SyncGroup, patch_batch_header};

const KIB: usize = 1024;

/// One v2 batch of `size` bytes in total.
fn batch_of(size: usize) -> Vec<u8> {
    let payload = vec![0x5au8; size - helix_wal::batch::HEADER_LEN];
    build_test_batch(0, 1, 1, 1, &payload)
}

/// Appends `n` entries of one `batch` each to a fresh log; returns the time.
fn append_n(config: &LogConfig, batch: &mut [u8], n: u64) -> Duration {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut log, _) = PartitionLog::open(dir.path(), config.clone()).expect("open");
    let start = Instant::now();
    for i in 0..n {
        patch_batch_header(batch, i as i64, 1).expect("header");
        log.append(
            RaftPosition {
                term: 1,
                index: i + 1,
            },
            batch,
        )
        .expect("append");
    }
    start.elapsed()
}

fn write_n(buf: &[u8], n: u64) -> Duration {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut f = File::create(dir.path().join("plain")).expect("create");
    let start = Instant::now();
    for _ in 0..n {
        f.write_all(buf).expect("write");
    }
    start.elapsed()
}

fn append(c: &mut Criterion) {
    let mut g = c.benchmark_group("append_replication_only");
    for size in [KIB, 16 * KIB, 256 * KIB] {
        g.throughput(Throughput::Bytes(size as u64));
        let mut batch = batch_of(size);
        let config = LogConfig::default();
        g.bench_with_input(BenchmarkId::new("wal", size / KIB), &size, |b, _| {
            b.iter_custom(|n| append_n(&config, &mut batch, n))
        });
        let buf = batch_of(size);
        g.bench_with_input(
            BenchmarkId::new("plain_write", size / KIB),
            &size,
            |b, _| b.iter_custom(|n| write_n(&buf, n)),
        );
    }
    g.finish();
}

/// `appenders` threads, each with its own log sharing one group committer,
/// each appending 16 KiB and waiting until it is durable, `per_thread` times.
fn fsync_round(appenders: usize, per_thread: u64) -> (Duration, helix_wal::SyncStats) {
    let dir = tempfile::tempdir().expect("tempdir");
    let group = SyncGroup::new();
    let config = LogConfig {
        durability: Durability::Fsync,
        sync_group: Some(group.clone()),
        ..LogConfig::default()
    };
    let barrier = Arc::new(Barrier::new(appenders + 1));
    let threads: Vec<_> = (0..appenders)
        .map(|t| {
            let (mut log, _) =
                PartitionLog::open(&dir.path().join(format!("p{t}")), config.clone())
                    .expect("open");
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut batch = batch_of(16 * KIB);
                barrier.wait();
                for i in 0..per_thread {
                    patch_batch_header(&mut batch, i as i64, 1).expect("header");
                    log.append(
                        RaftPosition {
                            term: 1,
                            index: i + 1,
                        },
                        &batch,
                    )
                    .expect("append");
                    log.sync().expect("sync");
                }
                barrier.wait();
            })
        })
        .collect();
    let before = group.stats();
    barrier.wait();
    let start = Instant::now();
    barrier.wait();
    let elapsed = start.elapsed();
    for t in threads {
        t.join().expect("appender");
    }
    let after = group.stats();
    (
        elapsed,
        helix_wal::SyncStats {
            rounds: after.rounds - before.rounds,
            fsyncs: after.fsyncs - before.fsyncs,
        },
    )
}

fn fsync(c: &mut Criterion) {
    let mut g = c.benchmark_group("fsync_16k");
    g.sample_size(10);
    for appenders in [1usize, 8, 64] {
        g.throughput(Throughput::Elements(appenders as u64));
        g.bench_with_input(BenchmarkId::new("group_commit", appenders), &appenders, |b, &n| {
            let mut total = (0u64, 0u64, 0u64, Duration::ZERO);
            b.iter_custom(|iters| {
                let (t, s) = fsync_round(n, iters);
                total.0 += iters * n as u64;
                total.1 += s.rounds;
                total.2 += s.fsyncs;
                total.3 += t;
                t
            });
            let secs = total.3.as_secs_f64();
            eprintln!(
                "fsync_16k/group_commit/{n}: {:.0} appends/s, {:.0} rounds/s, {:.0} fsync calls/s, {:.1} appends per round",
                total.0 as f64 / secs,
                total.1 as f64 / secs,
                total.2 as f64 / secs,
                total.0 as f64 / total.1.max(1) as f64
            );
        });
    }
    g.throughput(Throughput::Elements(1));
    g.bench_function("plain_write_fdatasync", |b| {
        let buf = batch_of(16 * KIB);
        b.iter_custom(|n| {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut f = File::create(dir.path().join("plain")).expect("create");
            let start = Instant::now();
            for _ in 0..n {
                f.write_all(&buf).expect("write");
                f.sync_data().expect("fdatasync");
            }
            start.elapsed()
        })
    });
    g.finish();
}

fn read(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let segment = 32u64 << 20;
    let config = LogConfig {
        segment_bytes: segment,
        ..LogConfig::default()
    };
    let (mut log, _) = PartitionLog::open(dir.path(), config).expect("open");
    let mut batch = batch_of(16 * KIB);
    // Two segments' worth: the first is sealed, the second (minus one batch) active.
    let per_segment = segment / batch.len() as u64;
    for i in 0..(2 * per_segment - 1) {
        patch_batch_header(&mut batch, i as i64, 1).expect("header");
        log.append(
            RaftPosition {
                term: 1,
                index: i + 1,
            },
            &batch,
        )
        .expect("append");
    }
    let reader = log.reader();
    let sealed_end = per_segment as i64;
    let active = (sealed_end, reader.next_offset());
    let mut g = c.benchmark_group("read_1MiB_calls");
    for (name, (from, to)) in [("sealed_mmap", (0, sealed_end)), ("active_pread", active)] {
        let bytes = (to - from) as u64 * batch.len() as u64;
        g.throughput(Throughput::Bytes(bytes));
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut at = from;
                let mut total = 0usize;
                while at < to {
                    let r = reader.read(at, 1 << 20).expect("read");
                    total += r.bytes.len();
                    at = r.next_offset;
                }
                total
            })
        });
    }
    g.finish();
}

criterion_group!(benches, append, fsync, read);
criterion_main!(benches);
