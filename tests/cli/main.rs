//! The `kmirror` binary as an operator runs it.

use std::process::Command;

fn kmirror(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kmirror"))
        .args(args)
        .output()
        .expect("the kmirror binary runs")
}

#[test]
fn version_and_help() {
    let out = kmirror(&["--version"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("kmirror {}", env!("CARGO_PKG_VERSION"))
    );
    let out = kmirror(&["--help"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("protocol"));
}

#[test]
fn protocol_lists_every_api_and_mirror_error() {
    let out = kmirror(&["protocol"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [
        "   94  CreateMirror",
        "  105  BumpLeaderEpochs",
        "  134  READ_ONLY_TOPIC",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}

#[test]
fn unknown_command_is_a_usage_error() {
    let out = kmirror(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unrecognized subcommand"));
}
