//! A profile run end to end against a local Helix cluster started from this
//! workspace's helix-server, with verification:
//!
//! ```text
//! HELIX_PROFILE=throughput cargo test -p helix-workload --release --test steady_state_throughput
//! ```
//! `HELIX_PROFILE` names a shipped profile or a TOML file; without it the
//! test runs `baseline`, sized for CI. It fails on a verification
//! violation or a client error, never on a timing.

use std::path::PathBuf;
use std::process::Command;

use helix_workload::cluster::LocalCluster;
use helix_workload::profile::Profile;

/// Builds helix-server in this test's own profile (debug or release), so
/// the cluster runs the code of this checkout (unless `$HELIX_SERVER_BIN`
/// names one), and finds it as the tool does.
fn server_binary() -> PathBuf {
    if std::env::var_os("HELIX_SERVER_BIN").is_none() {
        // target/<profile>/deps/steady_state_throughput-<hash>
        let exe = std::env::current_exe().unwrap();
        let release = exe
            .parent()
            .and_then(|deps| deps.parent())
            .and_then(|profile| profile.file_name())
            .is_some_and(|name| name == "release");
        let mut build = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        build.args(["build", "-p", "helix-server"]);
        if release {
            build.arg("--release");
        }
        let status = build.status().expect("cargo runs");
        assert!(status.success(), "building helix-server failed");
    }
    helix_workload::cluster::server_binary().unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn steady_state_throughput() {
    let name = std::env::var("HELIX_PROFILE").unwrap_or_else(|_| "baseline".into());
    let profile = Profile::load(&name).unwrap_or_else(|e| panic!("{e}"));
    let binary = server_binary();
    let cluster =
        LocalCluster::start(profile.cluster.nodes, &binary, &[]).unwrap_or_else(|e| panic!("{e}"));
    let report = helix_workload::run::run(&cluster.bootstrap, &profile, "helix", &mut |line| {
        println!("{line}")
    })
    .unwrap_or_else(|e| panic!("the run failed: {e}"));
    println!("{}", report.summary());
    assert_eq!(report.failure(), None, "{}", report.summary());
    let verdict = report.verify.as_ref().expect("the shipped profiles verify");
    assert_eq!(
        verdict.acknowledged, report.produce.acknowledged,
        "every acknowledgement was checked"
    );
    assert!(verdict.read >= verdict.acknowledged);
}
