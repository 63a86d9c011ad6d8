//! Fixed sequences: a smoke run and the minimal failing inputs proptest found
//! (kept so each fixed bug stays fixed).

use super::*;

/// An append in the current term at timestamp 0.
fn append(batches: u8, records: u8, len: u16) -> Op {
    Op::Append {
        batches,
        records,
        len,
        new_term: false,
        ts: 0,
    }
}

#[test]
fn model_smoke_sequence() {
    use Op::*;
    let ops = vec![
        Append {
            batches: 2,
            records: 3,
            len: 500,
            new_term: false,
            ts: 10,
        },
        Append {
            batches: 0,
            records: 1,
            len: 0,
            new_term: true,
            ts: 0,
        },
        Append {
            batches: 3,
            records: 1,
            len: 600,
            new_term: false,
            ts: 20,
        },
        Crash(Damage::CutTail(40000)),
        Append {
            batches: 1,
            records: 2,
            len: 100,
            new_term: true,
            ts: 30,
        },
        TruncateCrash {
            keep: 100,
            step: 2,
            tear_intent: false,
        },
        Append {
            batches: 2,
            records: 2,
            len: 700,
            new_term: false,
            ts: 40,
        },
        DeleteBefore(30000),
        Reopen,
    ];
    run(&ops, false, Some((1, 3)));
}

#[test]
fn model_regression_truncate_to_empty_then_roll_and_crash() {
    use Op::*;
    let ops = vec![
        Append {
            batches: 0,
            records: 1,
            len: 0,
            new_term: false,
            ts: 0,
        },
        Append {
            batches: 0,
            records: 1,
            len: 0,
            new_term: false,
            ts: 0,
        },
        Append {
            batches: 1,
            records: 2,
            len: 0,
            new_term: false,
            ts: 0,
        },
        Append {
            batches: 1,
            records: 1,
            len: 5,
            new_term: false,
            ts: 0,
        },
        Append {
            batches: 0,
            records: 1,
            len: 0,
            new_term: false,
            ts: 0,
        },
        DeleteBefore(16384),
        Truncate(55),
        Append {
            batches: 2,
            records: 3,
            len: 260,
            new_term: false,
            ts: 96,
        },
        Roll,
        Crash(Damage::CutTail(22572)),
    ];
    run(&ops, true, None);
}

#[test]
fn model_regression_cut_tail_after_retention_then_append() {
    use Op::*;
    let ops = vec![
        Append {
            batches: 2,
            records: 1,
            len: 530,
            new_term: false,
            ts: 0,
        },
        Append {
            batches: 1,
            records: 1,
            len: 223,
            new_term: false,
            ts: 0,
        },
        Append {
            batches: 1,
            records: 1,
            len: 522,
            new_term: false,
            ts: 0,
        },
        DeleteBefore(39322),
        Crash(Damage::CutTail(0)),
        Append {
            batches: 0,
            records: 1,
            len: 0,
            new_term: false,
            ts: 0,
        },
    ];
    run(&ops, false, None);
}

#[test]
fn model_regression_flip_after_truncate_crashes() {
    use Op::*;
    let a = |batches, len, ts| Append {
        batches,
        records: 1,
        len,
        new_term: false,
        ts,
    };
    let ops = vec![
        a(2, 257, 0),
        a(0, 0, 0),
        TruncateCrash {
            keep: 32768,
            step: 1,
            tear_intent: false,
        },
        a(0, 0, 0),
        a(0, 0, 0),
        a(0, 0, 0),
        TruncateCrash {
            keep: 16384,
            step: 1,
            tear_intent: false,
        },
        a(1, 18, 250),
        a(1, 342, 0),
        a(1, 128, 0),
        a(2, 86, 0),
        a(2, 163, 0),
    ];
    run(&ops, false, Some((29899, 0)));
}

#[test]
fn model_regression_time_lookup_after_sealed_flip() {
    use Op::*;
    let a = |batches, len, ts| Append {
        batches,
        records: 1,
        len,
        new_term: false,
        ts,
    };
    let ops = vec![
        a(1, 493, 250),
        a(2, 364, 0),
        DeleteBefore(16384),
        Crash(Damage::FlipTail(25860, 0)),
        a(2, 45, 0),
        a(2, 239, 0),
        a(0, 0, 0),
        a(0, 0, 0),
        TruncateCrash {
            keep: 39322,
            step: 1,
            tear_intent: false,
        },
        a(2, 281, 0),
    ];
    run(&ops, false, Some((62674, 1)));
}

#[test]
fn model_regression_flip_in_header_of_sealed_batch() {
    use Op::*;
    let ops = vec![
        append(1, 3, 0),
        append(0, 1, 0),
        append(0, 1, 0),
        append(0, 1, 0),
        Truncate(13108),
        append(1, 1, 0),
        append(3, 1, 334),
        append(2, 1, 310),
        append(2, 1, 360),
        append(1, 1, 404),
        append(3, 1, 467),
        append(0, 1, 0),
        append(0, 1, 0),
        append(3, 1, 94),
    ];
    run(&ops, false, Some((37896, 0)));
}

/// A clean close after a truncation in `Fsync` mode must leave nothing to
/// re-verify at the next open (found by `log_matches_model`).
#[test]
fn model_regression_clean_close_after_truncate_leaves_nothing_to_reverify() {
    use Op::*;
    let ops = vec![
        append(1, 1, 0),
        Roll,
        append(0, 1, 0),
        TruncateCrash {
            keep: 32768,
            step: 2,
            tear_intent: false,
        },
        append(3, 1, 602),
        Crash(Damage::CutTail(0)),
        append(0, 1, 0),
        Truncate(21846),
        Reopen,
    ];
    run(&ops, true, None);
}
