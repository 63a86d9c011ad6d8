//! What the runs exercised: counts of every fault kind, summed over seeds
//! so a test can show each one happened.

use super::network::NetCounts;

/// What a run exercised (summed over seeds to show the faults happened).
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub acknowledged: u64,
    pub answered: u64,
    pub consumer_reads: u64,
    pub crashes: u64,
    pub process_crashes: u64,
    pub power_losses: u64,
    pub majority_crashes: u64,
    pub all_crashed: u64,
    pub aimed_crashes: u64,
    pub mid_ready_crashes: u64,
    pub pauses: u64,
    pub skewed_runs: u64,
    pub elections_won: u64,
    pub wal_truncations: u64,
    pub fsync_races: u64,
    pub catch_up_entries: u64,
    pub backpressure: u64,
    pub transfers: u64,
    pub campaigns: u64,
    pub multi_host_runs: u64,
    pub pre_vote_off_runs: u64,
    pub check_quorum_off_runs: u64,
    /// Group logs lost at a restart (the replica rejoined as a learner).
    pub disk_losses: u64,
    /// Learners voting again by the end of their run.
    pub learners_restored: u64,
    /// Connections reported broken to a host (after a crash or spuriously).
    pub links_lost: u64,
    pub spurious_links_lost: u64,
    /// Checks (one group, one step) at which some leader held its lease
    /// (`has_quorum_lease`), and those at which a lease holder coexisted
    /// with a leader of a newer term: a figure, not an invariant (clocks
    /// run at different rates in some seeds, answers arrive late, lost
    /// connections are reported to one side only).
    pub lease_held: u64,
    pub lease_overlaps: u64,
    /// Of those, in runs whose nodes' clocks run at one rate.
    pub lease_overlaps_same_clock: u64,
    pub net: NetCounts,
}

impl Stats {
    pub fn add(&mut self, s: &Stats) {
        macro_rules! sum {
            ($($f:ident),*) => { $(self.$f += s.$f;)* };
        }
        sum!(
            acknowledged,
            answered,
            consumer_reads,
            crashes,
            process_crashes,
            power_losses,
            majority_crashes,
            all_crashed,
            aimed_crashes,
            mid_ready_crashes,
            pauses,
            skewed_runs,
            elections_won,
            wal_truncations,
            fsync_races,
            catch_up_entries,
            backpressure,
            transfers,
            campaigns,
            multi_host_runs,
            pre_vote_off_runs,
            check_quorum_off_runs,
            disk_losses,
            learners_restored,
            links_lost,
            spurious_links_lost,
            lease_held,
            lease_overlaps,
            lease_overlaps_same_clock
        );
        let (a, b) = (&mut self.net, &s.net);
        a.dropped += b.dropped;
        a.duplicated += b.duplicated;
        a.long_delays += b.long_delays;
        a.replays += b.replays;
        a.held += b.held;
        a.released += b.released;
        a.isolations += b.isolations;
    }
}
