//! The binary refuses bad profiles and overrides by name, before it
//! touches a broker.

use std::process::Command;

fn workload(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_helix-workload"))
        .args(args)
        .output()
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs the binary on a profile file `name` holding `text`.
fn with_profile(name: &str, text: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    workload(&[
        "--bootstrap",
        "127.0.0.1:1",
        "--profile",
        path.to_str().unwrap(),
    ])
}

#[test]
fn a_profile_with_an_unknown_key_is_refused_naming_key_and_file() {
    let (code, err) = with_profile("typo.toml", "[producer]\nproducers = 2\nlinger = 5\n");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("typo.toml") && err.contains("unknown field `linger`"),
        "{err}"
    );
}

#[test]
fn a_bad_value_is_refused_naming_section_and_key() {
    let (code, err) = with_profile("bad.toml", "[consumer]\nisolation = \"dirty\"\n");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("bad.toml: [consumer] isolation: \"dirty\" is not"),
        "{err}"
    );
}

#[test]
fn a_bad_override_is_refused_naming_the_key() {
    let (code, err) = workload(&[
        "--bootstrap",
        "127.0.0.1:1",
        "--profile",
        "baseline",
        "--message-size",
        "10",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("[producer] message_size: 10 is not between 36"),
        "{err}"
    );
    let (code, err) = workload(&["--bootstrap", "127.0.0.1:1", "--profile", "no-such-profile"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("no profile named \"no-such-profile\""),
        "{err}"
    );
    let (code, err) = workload(&["--bootstrap", "127.0.0.1:1", "--duration", "ten"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a duration"), "{err}");
}
