//! kmirror against the KIP authors' prototype of cluster mirroring (docs/wire.md): its message
//! classes and its admin CLI, unmodified, from the folder `KMIRROR_PROTOTYPE_DIR` names (by
//! default `../shared/kip1279-prototype` beside the repository). They need Java 17.
//!
//! - [`golden`]: every mirror RPC body and record, sampled with every field away from its
//!   default, encodes to the prototype's bytes, decodes from them to the same value, and the
//!   prototype decodes kmirror's bytes to its own sample (`Golden.java check`).
//! - [`cli`]: `kafka-cluster-mirrors.sh` drives a kmirror destination end to end.

mod cli;
mod golden;

use std::path::PathBuf;
use std::process::Command;

/// The prototype's folder; fails naming what is missing, so CI cannot skip these tests.
fn prototype_dir() -> PathBuf {
    let dir = std::env::var_os("KMIRROR_PROTOTYPE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/kip1279-prototype")
        });
    assert!(
        dir.join("kafka-cluster-mirrors.sh").is_file() && dir.join("lib").is_dir(),
        "the KIP-1279 prototype is not at {} (kafka-cluster-mirrors.sh and lib/ expected): set \
         KMIRROR_PROTOTYPE_DIR to its folder (docs/wire.md says where it comes from)",
        dir.display()
    );
    let java = Command::new("java").arg("-version").output();
    assert!(
        java.as_ref().is_ok_and(|o| o.status.success()),
        "these tests run the prototype's Java classes and need Java 17 on the PATH: {java:?}"
    );
    dir
}

/// The prototype's jars as a Java class path.
fn classpath(dir: &std::path::Path) -> String {
    let mut jars: Vec<String> = std::fs::read_dir(dir.join("lib"))
        .expect("the prototype's lib/ is readable")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "jar"))
        .map(|p| p.display().to_string())
        .collect();
    jars.sort();
    jars.join(":")
}
