//! helix-workload: load generation and verification against any Kafka
//! broker. Built in a later stage (after the single-node broker is verified).
