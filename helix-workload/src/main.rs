//! `helix-workload --bootstrap HOST:PORT --profile NAME|FILE [overrides]`,
//! and `helix-workload chart --out FILE RUN.json...` to draw runs side by side.

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use helix_workload::cluster::{self, LocalCluster};
use helix_workload::profile::Profile;
use helix_workload::report::{self, Report};

#[derive(Parser)]
#[command(
    name = "helix-workload",
    about = "Verified load against any Kafka broker",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Draw the runs saved with --json on one chart (.svg, or .html with the summaries).
    Chart {
        #[arg(long)]
        out: String,
        #[arg(required = true)]
        runs: Vec<String>,
    },
}

#[derive(Args)]
struct RunArgs {
    /// Brokers to run against; without it the tool starts a local Helix
    /// cluster of the profile's [cluster] nodes ($HELIX_SERVER_BIN or the
    /// helix-server beside this binary).
    #[arg(long)]
    bootstrap: Option<String>,
    /// A shipped profile (baseline, throughput, latency, stress, sustained, consume) or a TOML file.
    #[arg(long, default_value = "baseline")]
    profile: String,
    #[arg(long)]
    producers: Option<u32>,
    #[arg(long)]
    inflight: Option<u32>,
    #[arg(long)]
    message_size: Option<usize>,
    #[arg(long)]
    linger_ms: Option<u32>,
    /// Measured time: 30s, 2m or seconds.
    #[arg(long, value_parser = parse_secs)]
    duration: Option<u64>,
    #[arg(long, value_parser = parse_secs)]
    warmup: Option<u64>,
    /// Records per second offered by all producers together (0: unthrottled).
    #[arg(long)]
    rate: Option<u64>,
    #[arg(long)]
    acks: Option<String>,
    #[arg(long)]
    idempotence: Option<bool>,
    #[arg(long)]
    compression: Option<String>,
    #[arg(long)]
    keys: Option<bool>,
    #[arg(long)]
    topic: Option<String>,
    #[arg(long)]
    partitions: Option<i32>,
    #[arg(long)]
    replication_factor: Option<i32>,
    #[arg(long)]
    consumers: Option<u32>,
    #[arg(long)]
    verify: Option<bool>,
    /// Nodes of the local cluster (when no --bootstrap).
    #[arg(long)]
    nodes: Option<u32>,
    /// A flag for every node of the local cluster (repeat it).
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    server_args: Vec<String>,
    /// Name of the broker measured, on charts and in the JSON.
    #[arg(long)]
    label: Option<String>,
    /// Write the report as JSON.
    #[arg(long)]
    json: Option<String>,
    /// Draw throughput over time and the latency curve (.svg or .html).
    #[arg(long)]
    report: Option<String>,
}

fn parse_secs(text: &str) -> Result<u64, String> {
    let (number, scale) = match text {
        t if t.ends_with('m') => (&t[..t.len() - 1], 60),
        t if t.ends_with('s') => (&t[..t.len() - 1], 1),
        t => (t, 1),
    };
    number
        .parse::<u64>()
        .map(|n| n * scale)
        .map_err(|_| format!("{text:?} is not a duration like 30s, 2m or 30"))
}

impl RunArgs {
    fn profile(&self) -> Result<Profile, String> {
        let mut p = Profile::load(&self.profile).map_err(|e| e.to_string())?;
        macro_rules! set {
            ($($field:ident => $target:expr),* $(,)?) => {$(
                if let Some(value) = self.$field.clone() { $target = value; }
            )*};
        }
        set!(
            producers => p.producer.producers,
            inflight => p.producer.inflight,
            message_size => p.producer.message_size,
            linger_ms => p.producer.linger_ms,
            duration => p.execution.duration_secs,
            warmup => p.execution.warmup_secs,
            rate => p.producer.rate,
            acks => p.producer.acks,
            idempotence => p.producer.idempotence,
            compression => p.producer.compression,
            keys => p.producer.keys,
            topic => p.topic.name,
            partitions => p.topic.partitions,
            replication_factor => p.topic.replication_factor,
            consumers => p.consumer.consumers,
            verify => p.verify.enabled,
            nodes => p.cluster.nodes,
        );
        p.check()
            .map_err(|e| format!("{e} (after command-line overrides)"))?;
        Ok(p)
    }

    fn run(&self) -> Result<Report, String> {
        let profile = self.profile()?;
        let local = match &self.bootstrap {
            Some(_) => None,
            None => {
                let binary = cluster::server_binary()?;
                eprintln!(
                    "starting a local Helix cluster of {} nodes ({})",
                    profile.cluster.nodes,
                    binary.display()
                );
                Some(LocalCluster::start(
                    profile.cluster.nodes,
                    &binary,
                    &self.server_args,
                )?)
            }
        };
        let bootstrap = self
            .bootstrap
            .clone()
            .or_else(|| local.as_ref().map(|c| c.bootstrap.clone()))
            .expect("one of the two");
        let label = self.label.clone().unwrap_or_else(|| {
            if local.is_some() {
                "helix".into()
            } else {
                bootstrap.clone()
            }
        });
        let report =
            helix_workload::run::run(&bootstrap, &profile, &label, &mut |line| println!("{line}"))?;
        println!("{}", report.summary());
        if let Some(path) = &self.json {
            let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
            std::fs::write(path, json).map_err(|e| format!("{path}: {e}"))?;
        }
        if let Some(path) = &self.report {
            report::write_chart(path, std::slice::from_ref(&report))?;
        }
        Ok(report)
    }
}

fn chart(out: &str, runs: &[String]) -> Result<(), String> {
    let reports = runs
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
            serde_json::from_str::<Report>(&text).map_err(|e| format!("{path}: {e}"))
        })
        .collect::<Result<Vec<_>, String>>()?;
    report::write_chart(out, &reports)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match &cli.command {
        Some(Command::Chart { out, runs }) => chart(out, runs).map(|()| None),
        None => cli.run.run().map(|report| report.failure()),
    };
    match outcome {
        Ok(None) => ExitCode::SUCCESS,
        Ok(Some(failure)) => {
            eprintln!("helix-workload: FAILED: {failure}");
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("helix-workload: {error}");
            ExitCode::from(2)
        }
    }
}
