//! The background scrubber: reads every local replica's acknowledged log,
//! start to end, at a bounded rate (`scrub_bytes_per_second`, 0 = off), and
//! checks every batch's CRC on the bytes as stored (`Partition::scrub`),
//! also those this process verified before: stored bytes can rot after
//! they were checked. So damage is found before a consumer reaches it. A
//! read that meets damage marks the replica damaged (it takes no more
//! writes; in a cluster it stands down, ADR 0016). Passes repeat every
//! [`PASS_EVERY`].

use std::sync::Weak;
use std::time::Duration;

use crate::broker::Broker;
use crate::error::HelixError;
use crate::offset::Offset;
use crate::replica::batch;

/// Bytes read per step.
const CHUNK: usize = 1 << 20;
/// Time between the starts of two passes.
const PASS_EVERY: Duration = Duration::from_secs(600);

pub async fn run(broker: Weak<Broker>, bytes_per_second: u64) {
    if bytes_per_second == 0 {
        return;
    }
    loop {
        let started = tokio::time::Instant::now();
        let Some(replicas) = broker.upgrade().map(|b| b.topics.local_replicas()) else {
            return;
        };
        let mut scanned = 0u64;
        for p in replicas {
            let mut from = p.reader().log_start_offset();
            while p.damaged().is_none() {
                let bytes = match p.scrub(Offset(from), CHUNK) {
                    Ok(b) if b.is_empty() => break,
                    Ok(b) => b,
                    // Retention moved the start: go on from there.
                    Err(HelixError::OffsetOutOfRange) => {
                        from = p.reader().log_start_offset();
                        continue;
                    }
                    // Damage was recorded by the read; anything else ends
                    // this replica's pass.
                    Err(_) => break,
                };
                match next_offset(&bytes) {
                    Some(next) if next > from => from = next,
                    _ => break,
                }
                scanned += bytes.len() as u64;
                tokio::time::sleep(Duration::from_secs_f64(
                    bytes.len() as f64 / bytes_per_second as f64,
                ))
                .await;
            }
        }
        tracing::debug!(scanned, "scrub pass done");
        tokio::time::sleep_until(started + PASS_EVERY).await;
    }
}

/// The offset after the last whole batch in `bytes`.
fn next_offset(bytes: &[u8]) -> Option<i64> {
    let mut at = 0usize;
    let mut next = None;
    while at < bytes.len() {
        let h = batch::parse_header(&bytes[at..]).ok()?;
        next = Some(h.next_offset());
        at += h.total_len();
    }
    next
}
