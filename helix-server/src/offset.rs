//! Offsets: a record's position in a partition's log, as Kafka numbers
//! them. Where one crosses a module boundary (the replica's reads, its
//! marks, a produce answer) it is an [`Offset`], so a count, a timestamp
//! or a Raft index cannot be passed in its place. Inside a module, and on
//! the wire, it is the `i64` Kafka uses; `.0` and `Offset(..)` convert at
//! the edge.

use std::fmt;

/// A position in a partition's log (Kafka's `int64` offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Offset(pub i64);

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_order_and_print_as_their_numbers() {
        assert!(Offset(3) < Offset(4));
        assert_eq!(Offset(7).to_string(), "7");
    }
}
