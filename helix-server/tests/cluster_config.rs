//! The real binary refuses a bad cluster file at start, naming the key.

use std::process::Command;
use std::time::Duration;

mod common;

/// Runs `helix-server --config FILE --node-id N --data-dir DIR`; (success, stderr).
fn start_with(toml: &str, node_id: &str) -> (bool, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("cluster.toml");
    std::fs::write(&config, toml).expect("write config");
    let out = common::output_within(
        Command::new(env!("CARGO_BIN_EXE_helix-server"))
            .arg("--config")
            .arg(&config)
            .args(["--node-id", node_id, "--data-dir"])
            .arg(dir.path().join("data")),
        Duration::from_secs(60),
    );
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn node(id: u32, kafka: u16, peer: u16) -> String {
    format!("[[nodes]]\nid = {id}\nkafka = \"127.0.0.1:{kafka}\"\npeer = \"127.0.0.1:{peer}\"\n\n")
}

#[test]
fn bad_cluster_files_are_refused_naming_the_key() {
    let (a, b, c) = (
        common::free_port(),
        common::free_port(),
        common::free_port(),
    );
    let cases = [
        (node(1, a, b) + &node(1, c, c + 1), "1", "nodes[1].id"),
        (node(1, a, b) + &node(2, b, c), "1", "nodes[1].kafka"),
        (node(1, a, b) + &node(2, c, c + 1), "7", "node_id: 7"),
        (
            node(1, a, b)
                + "[[nodes]]\nid = 2\nkafka = \"127.0.0.1:1\"\npeer = \"127.0.0.1:2\"\ncolour = \"red\"\n",
            "1",
            "colour",
        ),
        (node(1, a, b) + "replication = 3\n", "1", "replication"),
    ];
    for (toml, me, key) in cases {
        let (ok, stderr) = start_with(&toml, me);
        assert!(!ok, "started with a bad file:\n{toml}");
        assert!(stderr.contains(key), "the refusal names {key:?}: {stderr}");
    }
}
