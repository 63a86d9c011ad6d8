//! A due snapshot drains its partition (ADR 0020 item 6), for both
//! coordinators hosted on internal partitions (`group`, `txn`).
//!
//! A coordinator snapshots a partition's view only while none of the
//! partition's proposals is in flight: everything before the snapshot in
//! the log must be in the view, since the log before it is deleted once it
//! is acknowledged. Under a steady stream of proposals that moment never
//! comes, and the log grows for ever. So once a snapshot is due while
//! proposals are in flight, new proposals wait here, in order, until the
//! last of those settles; the snapshot is proposed then, and what waited
//! follows it. Pure bookkeeping: what is due and what is in flight are the
//! coordinator's to say.

/// The proposals of one partition held behind its due snapshot.
#[derive(Debug)]
pub struct SnapshotDrain<P> {
    draining: bool,
    held: Vec<P>,
}

impl<P> Default for SnapshotDrain<P> {
    fn default() -> Self {
        Self {
            draining: false,
            held: Vec::new(),
        }
    }
}

impl<P> SnapshotDrain<P> {
    /// Whether a snapshot is waiting for the proposals in flight.
    pub fn is_draining(&self) -> bool {
        self.draining
    }

    /// A new proposal: back to be proposed now, or `None` when it waits
    /// behind the snapshot.
    pub fn pass(&mut self, proposal: P) -> Option<P> {
        if self.draining {
            self.held.push(proposal);
            None
        } else {
            Some(proposal)
        }
    }

    /// Decides the snapshot, `due` saying whether the view wants one and
    /// `busy` whether proposals of the partition are in flight. Returns
    /// whether to propose it now, and what waited behind it, to be proposed
    /// right after it in this order. Due while busy, it starts draining.
    pub fn decide(&mut self, due: bool, busy: bool) -> (bool, Vec<P>) {
        if due && busy {
            self.draining = true;
            return (false, Vec::new());
        }
        let released = if self.draining {
            self.draining = false;
            std::mem::take(&mut self.held)
        } else {
            Vec::new()
        };
        (due, released)
    }

    /// Everything waiting, the partition no longer served here (its
    /// waiters are to be answered).
    pub fn take_held(&mut self) -> Vec<P> {
        self.draining = false;
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposals_wait_while_a_due_snapshot_drains_and_follow_it_in_order() {
        let mut d = SnapshotDrain::default();
        assert_eq!(d.pass(1), Some(1));
        assert_eq!(d.decide(false, true), (false, vec![]), "not due");
        assert_eq!(d.decide(true, true), (false, vec![]), "due, busy");
        assert!(d.is_draining());
        assert_eq!(d.pass(2), None);
        assert_eq!(d.pass(3), None);
        assert_eq!(d.decide(true, true), (false, vec![]), "still busy");
        assert_eq!(d.decide(true, false), (true, vec![2, 3]));
        assert_eq!(d.pass(4), Some(4), "drained");
        // Due no more (the view was snapshotted another way): released all
        // the same.
        d.decide(true, true);
        d.pass(5);
        assert_eq!(d.decide(false, false), (false, vec![5]));
        d.decide(true, true);
        d.pass(6);
        assert_eq!(d.take_held(), vec![6]);
        assert!(!d.is_draining());
    }
}
