//! `helix-server`: the Helix broker binary. With no flags it serves Kafka on
//! 127.0.0.1:9092 as node 1 with data in `./helix-data`.

mod batcher;
mod broker;
mod cluster;
mod config;
mod controller;
mod error;
mod group;
mod kafka;
mod metrics;
mod partition;
mod replica;
mod scrubber;
mod server;
mod topics;
mod transport;

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() {
    let flags = config::Flags::parse();
    let config = match config::Config::load(flags) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("helix-server: {e}");
            std::process::exit(2);
        }
    };
    let filter = match &config.log_level {
        Some(level) => EnvFilter::try_new(level),
        None => EnvFilter::try_from_default_env().or_else(|_| EnvFilter::try_new("info")),
    };
    let filter = filter.unwrap_or_else(|e| {
        eprintln!("helix-server: bad log filter: {e}");
        std::process::exit(2);
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("helix-server: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = runtime.block_on(server::run(config)) {
        tracing::error!(error = %e, "helix-server stopped");
        eprintln!("helix-server: {e}");
        std::process::exit(1);
    }
}
