//! `helix-server`: the Helix broker binary. With no flags it serves Kafka on
//! 127.0.0.1:9092 as node 1 with data in `./helix-data`.

mod acl;
mod admin;
mod batcher;
mod broker;
mod budget;
mod clock;
mod cluster;
mod compact;
mod config;
mod controller;
mod endpoint;
mod error;
mod group;
mod heap;
mod host;
mod ids;
mod kafka;
mod log_levels;
mod metrics;
mod offset;
mod quota;
mod rejoin;
mod replica;
mod scrubber;
mod server;
mod status;
mod tls;
mod topics;
mod transport;
mod txn;

use clap::Parser;

fn main() {
    heap::configure();
    let flags = config::Flags::parse();
    if let Some(config::CliCommand::Status(args)) = &flags.command {
        std::process::exit(status_command(args));
    }
    if let Some(config::CliCommand::ScramCredential(args)) = &flags.command {
        std::process::exit(scram_credential_command(args));
    }
    let config = match config::Config::load(flags) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("helix-server: {e}");
            std::process::exit(2);
        }
    };
    let spec = config
        .log_level
        .clone()
        .or_else(|| std::env::var("RUST_LOG").ok())
        .unwrap_or_else(|| "info".to_string());
    let filter = log_levels::install(&spec).unwrap_or_else(|e| {
        eprintln!("helix-server: bad log filter: {e}");
        std::process::exit(2);
    });
    {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        let logs = tracing_subscriber::registry().with(filter);
        match config.log_format {
            config::LogFormat::Text => logs
                .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
                .init(),
            config::LogFormat::Json => logs
                .with(
                    tracing_subscriber::fmt::layer()
                        .json()
                        .with_current_span(false)
                        .with_writer(std::io::stderr),
                )
                .init(),
        }
    }
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

/// `helix-server status`: a client of the cluster, not a broker.
fn status_command(args: &config::StatusArgs) -> i32 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("helix-server status: cannot start the runtime: {e}");
            return 1;
        }
    };
    let timeout = std::time::Duration::from_millis(args.timeout_ms);
    runtime.block_on(status::run(&args.bootstrap, args.json, timeout))
}

/// `helix-server scram-credential`: prints a users-file entry (salted;
/// the password, read from stdin, is neither printed nor kept).
fn scram_credential_command(args: &config::ScramCredentialArgs) -> i32 {
    use kafka::sasl::credentials::{
        MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential, ScramHash, random_salt,
    };
    let Some(hash) = ScramHash::of_mechanism(&args.mechanism) else {
        eprintln!(
            "helix-server scram-credential: mechanism must be SCRAM-SHA-256 or SCRAM-SHA-512"
        );
        return 2;
    };
    if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&args.iterations) {
        eprintln!(
            "helix-server scram-credential: iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}"
        );
        return 2;
    }
    let mut password = String::new();
    if let Err(e) = std::io::stdin().read_line(&mut password) {
        eprintln!("helix-server scram-credential: cannot read the password: {e}");
        return 1;
    }
    let password = password.trim_end_matches(['\r', '\n']);
    if password.is_empty() {
        eprintln!("helix-server scram-credential: empty password");
        return 2;
    }
    let credential = ScramCredential::derive(hash, password, random_salt(), args.iterations);
    print!("{}", credential.to_toml(&args.user));
    0
}
