//! The code generated from `proto/peer.proto` (build.rs, protox).

#![allow(clippy::all, clippy::pedantic, missing_docs)]

tonic::include_proto!("helix.peer.v1");
