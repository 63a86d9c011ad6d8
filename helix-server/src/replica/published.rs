//! What the shard publishes for readers of a replica (the handle, the
//! host, the Kafka front end): watermark, leadership, ISR, lease and flags.

use std::collections::HashMap;
use std::sync::{Mutex, RwLock};

use helix_raft::NodeId;
use helix_wal::LogReader;
use tokio::sync::watch;

use super::Leadership;
use super::refused;
use super::scan::MaxTimestamp;
use crate::offset::Offset;

/// What the shard publishes for readers of a replica.
#[derive(Debug)]
pub struct Published {
    /// Replaced when the log is reopened with new settings.
    pub reader: RwLock<LogReader>,
    /// Acknowledged end: what consumers may read, exclusive.
    pub high_watermark: watch::Sender<Offset>,
    /// The first offset of the oldest transaction that holds the last
    /// stable offset back (`i64::MAX`: none): the LSO is the smaller of it
    /// and the high watermark (`state/txn.rs`). Stored before the high
    /// watermark it goes with is published.
    pub first_unstable: std::sync::atomic::AtomicI64,
    /// The aborted transactions from the log start on, in log order: the
    /// sealed chunks' descriptions and the recent tail (`txn_index.rs`).
    pub aborted: RwLock<super::txn_index::AbortedView>,
    /// The producers with a transaction open in the applied log, with
    /// their epochs: a later batch of such a transaction needs no
    /// verification with its coordinator (KIP-890 part 1, `state/txn.rs`).
    pub ongoing: RwLock<HashMap<i64, i16>>,
    pub max_timestamp: Mutex<MaxTimestamp>,
    pub leadership: watch::Sender<Leadership>,
    /// In-sync replicas while this replica leads (empty otherwise).
    pub isr: Mutex<Vec<NodeId>>,
    /// Caught up with its leader (or leading), as the shard last judged
    /// at a tick: what `/ready` asks of every replica.
    pub caught_up: std::sync::atomic::AtomicBool,
    /// Set when a read found stored bytes that fail their checks (ADR
    /// 0001): the replica takes no more writes.
    pub damaged: std::sync::OnceLock<String>,
    /// Until when this replica leads with a majority's answers within the
    /// lease (`RaftGroup::lease_ticks_left`, ADR 0019), on
    /// [`lease_clock`]: 0 when not leading, `u64::MAX` for a one-voter
    /// group. The shard sets it at every tick and message as a deadline
    /// on the host's clock, so a lease also runs out while the shard does
    /// not tick (a paused process, a stalled round). A leader without it
    /// may be cut off while the others elect: it names no leader and
    /// serves no reads or writes.
    pub lease_until: std::sync::atomic::AtomicU64,
    /// Transactional batches' verifications under way (KIP-890's guard):
    /// taken by the produce path, checked and ended by the worker.
    pub verifications: Mutex<super::verification::VerificationGuards>,
    /// Set once, the first time this replica has applied and acknowledged
    /// everything that was committed when it heard its leader (leading: an
    /// entry of its own term acknowledged). A restarted node holds a log
    /// whose commit it has not learned: until then what it applied may lack
    /// what the cluster acknowledged.
    pub synced_since_start: std::sync::atomic::AtomicBool,
    /// Producers refused here as not the leader since this replica last
    /// stored one of their requests (`refused.rs`).
    pub refused: Mutex<refused::Refused>,
    /// The controller group's replication as this replica saw it at its
    /// last tick (DescribeQuorum); None on other groups.
    pub quorum: Mutex<Option<QuorumProgress>>,
}

/// What a Raft leader knows of its group's replication, in Raft log
/// indexes (the controller's log is its Raft log, as KRaft's is).
#[derive(Clone, Debug)]
pub struct QuorumProgress {
    /// This replica's last index.
    pub last_index: u64,
    /// The commit index (the quorum's high watermark; on a follower, the
    /// leader's as last heard, 0 until heard).
    pub commit: u64,
    /// Empty unless this replica leads.
    pub followers: Vec<FollowerProgress>,
    /// Wall clock (Unix ms) when this was taken.
    pub at_ms: i64,
}

/// One follower as its leader last heard it.
#[derive(Clone, Debug)]
pub struct FollowerProgress {
    pub node: helix_raft::NodeId,
    /// The last index known to be in its log.
    pub matched: u64,
    /// Wall clock (Unix ms) of its last answer, to a tick's precision.
    pub heard_ms: i64,
}

impl Published {
    /// Publishes the lease as ending `ticks_left` ticks of `tick` from now
    /// (0: not held; `u32::MAX`: always); true when whether it is held
    /// changed.
    pub fn publish_lease(&self, ticks_left: u32, tick: std::time::Duration) -> bool {
        let now = lease_clock();
        let until = match ticks_left {
            0 => 0,
            u32::MAX => u64::MAX,
            n => {
                let tick = u64::try_from(tick.as_nanos()).unwrap_or(u64::MAX);
                now.saturating_add(tick.saturating_mul(u64::from(n)))
            }
        };
        let before = self
            .lease_until
            .swap(until, std::sync::atomic::Ordering::AcqRel);
        (before > now) != (until > now)
    }

    /// Whether the lease published last has not run out.
    pub fn holds_lease(&self) -> bool {
        lease_clock() < self.lease_until.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// The clock of leases: nanoseconds since this process first asked.
fn lease_clock() -> u64 {
    static BASE: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    u64::try_from(
        BASE.get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos(),
    )
    .unwrap_or(u64::MAX)
}
