//! Apache Kafka's command-line tools (producer and consumer performance, console consumer,
//! kafka-topics, kafka-consumer-groups) run from the distribution `scripts/test.sh` and
//! `scripts/bench.sh` download, for interop tests and benchmarks (feature `test-util`).
//! They read `KMIRROR_KAFKA_*` variables, which those scripts export.

use std::process::{Command, Output};

/// A `KMIRROR_KAFKA_*` variable; panics with how to get it when it is not set.
pub fn kafka_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run these through scripts/test.sh or scripts/bench.sh")
    })
}

/// Runs one tool class with the distribution's jars and quiet logging; returns its output.
pub fn kafka_tool_output(class: &str, args: &[&str]) -> Output {
    let dist = kafka_env("KMIRROR_KAFKA_DIST");
    Command::new("java")
        .arg("-cp")
        .arg(format!("{dist}/libs/*"))
        .arg(format!(
            "-Dlog4j2.configurationFile=file:{dist}/log4j2.properties"
        ))
        .arg(class)
        .args(args)
        .output()
        .expect("java runs")
}

/// Runs one tool class, asserts it succeeded, and returns its stdout and stderr together.
pub fn kafka_tool(class: &str, args: &[&str]) -> String {
    let out = kafka_tool_output(class, args);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{class} {args:?} failed:\n{text}");
    text
}
