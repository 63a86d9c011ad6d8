//! Model-based property tests (see below).
