//! Crate-level tests: behaviour through the public API, with the test-only
//! fault injection and crash simulation that black-box tests cannot reach.

mod basic;
mod compaction;
mod delete_records;
mod errors;
mod model;
mod replace;
mod restart;
mod stored;
mod support;
