//! Who leads the groups this node does not hold: every node reports the
//! groups it leads (term and ISR) to every other node over the control
//! lane, twice a second and at once when something changes; this table
//! keeps the latest report per group. Metadata, FindCoordinator and the
//! controller's address come from it for groups without a local replica.
//!
//! A report names its sender as leader; a higher term wins, the same term
//! replaces (ISR changes). Entries not refreshed within [`STALE_AFTER`] are
//! forgotten: a leader that died or stepped down stops reporting, and a
//! group nobody reports has no known leader.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use helix_raft::{GroupId, NodeId, Term};

use crate::error::{HelixError, Result};

/// Kind byte of a leadership report on the peer transport.
pub const PAYLOAD_LEADERS: u8 = 2;
/// A report older than this is not trusted any more.
pub const STALE_AFTER: Duration = Duration::from_secs(3);
/// Most groups in one report (a node leads at most this many at once).
pub const MAX_REPORTED: usize = 1 << 20;
/// Most ISR members per group (a replica set is at most the cluster).
const MAX_ISR: usize = crate::config::members::MAX_NODES;

/// One group's leadership as its leader reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub group: GroupId,
    pub term: Term,
    pub isr: Vec<NodeId>,
}

/// What is known of a group's leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Known {
    pub leader: NodeId,
    pub term: Term,
    pub isr: Vec<NodeId>,
}

/// Encodes reports: `kind u8 | count u32 | (group u64, term u64, isr_len u8,
/// isr u32 * isr_len) * count`, big-endian.
pub fn encode(reports: &[Report]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + reports.len() * 24);
    b.put_u8(PAYLOAD_LEADERS);
    b.put_u32(reports.len() as u32);
    for r in reports {
        b.put_u64(r.group.0);
        b.put_u64(r.term.0);
        b.put_u8(r.isr.len().min(MAX_ISR) as u8);
        for n in r.isr.iter().take(MAX_ISR) {
            b.put_u32(n.0 as u32);
        }
    }
    b.freeze()
}

/// Decodes a report (after its kind byte); every count is checked against
/// the bytes left before anything is allocated.
pub fn decode(mut b: Bytes) -> Result<Vec<Report>> {
    let bad = |what: &str| HelixError::MalformedRequest(format!("leadership report: {what}"));
    if b.remaining() < 4 {
        return Err(bad("truncated count"));
    }
    let count = b.get_u32() as usize;
    // Each report takes at least 17 bytes.
    if count > MAX_REPORTED || count > b.remaining() / 17 {
        return Err(bad("count larger than the payload"));
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        if b.remaining() < 17 {
            return Err(bad("truncated report"));
        }
        let group = GroupId(b.get_u64());
        let term = Term(b.get_u64());
        let n = b.get_u8() as usize;
        if n > MAX_ISR || b.remaining() < 4 * n {
            return Err(bad("truncated isr"));
        }
        let isr = (0..n).map(|_| NodeId(u64::from(b.get_u32()))).collect();
        out.push(Report { group, term, isr });
    }
    if b.has_remaining() {
        return Err(bad("trailing bytes"));
    }
    Ok(out)
}

#[derive(Debug, Clone)]
struct Entry {
    known: Known,
    heard: Instant,
}

/// The latest report of every group, from whichever node leads it.
#[derive(Debug, Default)]
pub struct LeaderTable {
    entries: RwLock<HashMap<GroupId, Entry>>,
}

impl LeaderTable {
    /// Takes `from`'s reports.
    pub fn update(&self, from: NodeId, reports: Vec<Report>) {
        let now = Instant::now();
        let Ok(mut entries) = self.entries.write() else {
            return;
        };
        for r in reports {
            let fresh = Entry {
                known: Known {
                    leader: from,
                    term: r.term,
                    isr: r.isr,
                },
                heard: now,
            };
            match entries.get(&r.group) {
                Some(e) if e.known.term > r.term && now.duration_since(e.heard) < STALE_AFTER => {}
                _ => {
                    entries.insert(r.group, fresh);
                }
            }
        }
    }

    /// The group's leader as last reported, unless the report is stale.
    pub fn get(&self, group: GroupId) -> Option<Known> {
        let entries = self.entries.read().ok()?;
        let e = entries.get(&group)?;
        (e.heard.elapsed() < STALE_AFTER).then(|| e.known.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(group: u64, term: u64, isr: &[u64]) -> Report {
        Report {
            group: GroupId(group),
            term: Term(term),
            isr: isr.iter().map(|n| NodeId(*n)).collect(),
        }
    }

    #[test]
    fn reports_round_trip_and_garbage_is_refused() {
        let reports = vec![report(7, 3, &[1, 2, 3]), report(u64::MAX, 1, &[])];
        let wire = encode(&reports);
        assert_eq!(wire[0], PAYLOAD_LEADERS);
        assert_eq!(decode(wire.slice(1..)).expect("decodes"), reports);
        for cut in 1..wire.len() - 1 {
            assert!(decode(wire.slice(1..cut)).is_err(), "cut at {cut}");
        }
        let mut huge = BytesMut::new();
        huge.put_u32(u32::MAX);
        assert!(decode(huge.freeze()).is_err());
    }

    #[test]
    fn a_higher_term_wins_and_the_same_term_replaces() {
        let t = LeaderTable::default();
        t.update(NodeId(1), vec![report(5, 2, &[1, 2, 3])]);
        t.update(NodeId(2), vec![report(5, 1, &[2])]);
        assert_eq!(t.get(GroupId(5)).expect("known").leader, NodeId(1));
        t.update(NodeId(1), vec![report(5, 2, &[1, 2])]);
        assert_eq!(t.get(GroupId(5)).expect("known").isr.len(), 2);
        t.update(NodeId(3), vec![report(5, 4, &[3, 1])]);
        let k = t.get(GroupId(5)).expect("known");
        assert_eq!((k.leader, k.term), (NodeId(3), Term(4)));
    }
}
