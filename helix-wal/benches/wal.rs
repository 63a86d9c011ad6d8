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
use helix_wal::{
    AppendCheck, Durability, LogConfig, PartitionLog, RaftPosition, SyncGroup, SyncMethod,
    patch_batch_header,
};

const KIB: usize = 1024;

/// One v2 batch of `size` bytes in total.
fn batch_of(size: usize) -> Vec<u8> {
    let payload = vec![0x5au8; size - helix_wal::batch::HEADER_LEN];
    build_test_batch(0, 1, 1, 1, &payload)
}

/// Appends `n` entries of one `batch` each to a fresh log, interleaved in
/// chunks with the same number of plain `write()`s of the same bytes to a
/// fresh file, so both see the same machine load. Returns (wal, plain) time.
fn append_paired(
    config: &LogConfig,
    check: AppendCheck,
    batch: &mut [u8],
    n: u64,
) -> (Duration, Duration) {
    const CHUNK: u64 = 64;
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut log, _) = PartitionLog::open(&dir.path().join("wal"), config.clone()).expect("open");
    let mut plain = File::create(dir.path().join("plain")).expect("create");
    let (mut wal_time, mut plain_time) = (Duration::ZERO, Duration::ZERO);
    let mut i = 0;
    while i < n {
        let end = (i + CHUNK).min(n);
        let start = Instant::now();
        for k in i..end {
            patch_batch_header(batch, k as i64, 1).expect("header");
            log.append_checked(
                RaftPosition {
                    term: 1,
                    index: k + 1,
                },
                batch,
                check,
            )
            .expect("append");
        }
        wal_time += start.elapsed();
        let start = Instant::now();
        for _ in i..end {
            plain.write_all(batch).expect("write");
        }
        plain_time += start.elapsed();
        i = end;
    }
    (wal_time, plain_time)
}

fn append(c: &mut Criterion) {
    let mut g = c.benchmark_group("append_replication_only");
    for size in [KIB, 16 * KIB, 256 * KIB] {
        g.throughput(Throughput::Bytes(size as u64));
        let mut batch = batch_of(size);
        let config = LogConfig::default();
        // "wal": the mode the server uses (`CrcVerifiedByCaller`: its Produce
        // path verified each CRC before proposing; structure is still
        // checked). "wal_full_crc": `append`, re-verifying every CRC.
        let mut ran = false;
        for (name, check) in [
            ("wal", AppendCheck::CrcVerifiedByCaller),
            ("wal_full_crc", AppendCheck::Full),
        ] {
            let mut totals = (Duration::ZERO, Duration::ZERO);
            g.bench_with_input(BenchmarkId::new(name, size / KIB), &size, |b, _| {
                b.iter_custom(|n| {
                    let (wal, plain) = append_paired(&config, check, &mut batch, n);
                    totals.0 += wal;
                    totals.1 += plain;
                    wal
                })
            });
            if totals.0.is_zero() {
                continue; // filtered out
            }
            ran = true;
            eprintln!(
                "append_replication_only/{name}/{}KiB paired: wal/plain throughput = {:.1}%",
                size / KIB,
                100.0 * totals.1.as_secs_f64() / totals.0.as_secs_f64()
            );
        }
        if !ran {
            continue;
        }
        // The plain loop alone, measured by criterion like the WAL.
        let buf = batch_of(size);
        g.bench_with_input(
            BenchmarkId::new("plain_write", size / KIB),
            &size,
            |b, _| {
                b.iter_custom(|n| {
                    let dir = tempfile::tempdir().expect("tempdir");
                    let mut f = File::create(dir.path().join("plain")).expect("create");
                    let start = Instant::now();
                    for _ in 0..n {
                        f.write_all(&buf).expect("write");
                    }
                    start.elapsed()
                })
            },
        );
    }
    g.finish();
}

/// `appenders` threads, each with its own log sharing one group committer,
/// each appending 16 KiB and waiting until it is durable, `per_thread` times.
fn fsync_round(
    method: SyncMethod,
    appenders: usize,
    per_thread: u64,
) -> (Duration, helix_wal::SyncStats) {
    let dir = tempfile::tempdir().expect("tempdir");
    let group = SyncGroup::with_method(method);
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
            logs_synced: after.logs_synced - before.logs_synced,
        },
    )
}

fn fsync(c: &mut Criterion) {
    let mut g = c.benchmark_group("fsync_16k");
    g.sample_size(10);
    for (name, method) in [
        ("syncfs", SyncMethod::Syncfs),
        ("per_file", SyncMethod::PerFile),
    ] {
        for appenders in [1usize, 8, 64] {
            g.throughput(Throughput::Elements(appenders as u64));
            let mut total = (0u64, 0u64, 0u64, Duration::ZERO);
            g.bench_with_input(BenchmarkId::new(name, appenders), &appenders, |b, &n| {
                b.iter_custom(|iters| {
                    let (t, s) = fsync_round(method, n, iters);
                    total.0 += iters * n as u64;
                    total.1 += s.rounds;
                    total.2 += s.fsyncs;
                    total.3 += t;
                    t
                });
            });
            let secs = total.3.as_secs_f64();
            if total.0 == 0 {
                continue; // filtered out
            }
            eprintln!(
                "fsync_16k/{name}/{appenders}: {:.0} appends/s, {:.0} rounds/s, {:.0} flush calls/s, {:.1} appends per flush call",
                total.0 as f64 / secs,
                total.1 as f64 / secs,
                total.2 as f64 / secs,
                total.0 as f64 / total.2.max(1) as f64
            );
        }
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
    // `handout`: bytes returned by read() per second (zero-copy for the
    // mapped segment: nothing is touched). `copy_out`: the same plus copying
    // every byte once, as a socket write would.
    let mut g = c.benchmark_group("read_1MiB_calls");
    for (name, (from, to)) in [("sealed_mmap", (0, sealed_end)), ("active_mmap", active)] {
        let bytes = (to - from) as u64 * batch.len() as u64;
        g.throughput(Throughput::Bytes(bytes));
        g.bench_function(format!("{name}/handout"), |b| {
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
        let mut sink = vec![0u8; 2 << 20];
        g.bench_function(format!("{name}/copy_out"), |b| {
            b.iter(|| {
                let mut at = from;
                while at < to {
                    let r = reader.read(at, 1 << 20).expect("read");
                    sink[..r.bytes.len()].copy_from_slice(&r.bytes);
                    at = r.next_offset;
                }
                std::hint::black_box(&sink);
            })
        });
    }
    g.finish();
}

/// The CRC-32C check `append` makes on every batch (hardware CRC when present).
fn crc(c: &mut Criterion) {
    let mut g = c.benchmark_group("crc32c_verify");
    for size in [KIB, 16 * KIB, 256 * KIB] {
        let batch = batch_of(size);
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::from_parameter(size / KIB), &size, |b, _| {
            b.iter(|| helix_wal::batch::verify_crc(std::hint::black_box(&batch)))
        });
    }
    g.finish();
}

criterion_group!(benches, crc, append, fsync, read);
criterion_main!(benches);
