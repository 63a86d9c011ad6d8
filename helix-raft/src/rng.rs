//! A tiny seeded PRNG (SplitMix64) so election timeouts are random yet every
//! run replays exactly from the seed the host gives.

/// SplitMix64: 64 bits of state, good statistical quality, no dependencies.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    #[must_use]
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// A generator for one replica: the host's seed mixed with the group and
    /// node, so replicas given the same seed still draw different timeouts.
    #[must_use]
    pub fn for_replica(seed: u64, group: u64, node: u64) -> Self {
        let mut r = SplitMix64::new(seed);
        let a = r.next_u64() ^ group.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
        let mut r = SplitMix64::new(a);
        let b = r.next_u64() ^ node.wrapping_mul(0x1656_67B1_9E37_79F9);
        SplitMix64::new(b)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `[low, high)`; `low` when the range is empty.
    pub fn in_range(&mut self, low: u64, high: u64) -> u64 {
        if high <= low {
            return low;
        }
        low + self.next_u64() % (high - low)
    }
}
