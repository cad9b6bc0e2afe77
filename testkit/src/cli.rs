//! `kmirror mirrors` as operators run it, against a broker or any node of a cluster, and what
//! its `--describe --json` shows.

use crate::built_kmirror;
use std::time::{Duration, Instant};

/// `kmirror mirrors --bootstrap-server address ARGS`: exit code and output.
pub fn mirrors_cli(address: &str, args: &[&str]) -> (Option<i32>, String) {
    let out = std::process::Command::new(built_kmirror())
        .args(["mirrors", "--bootstrap-server", address])
        .args(args)
        .output()
        .expect("kmirror mirrors runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

/// `kmirror mirrors --describe --mirror dr --json` (every broker's partitions, merged): (state,
/// destination offset) per partition of `topic`, in partition order.
pub fn described(address: &str, topic: &str) -> Vec<(String, i64)> {
    let (code, text) = mirrors_cli(address, &["--describe", "--mirror", "dr", "--json"]);
    if code != Some(0) {
        return Vec::new();
    }
    let Ok(json) = serde_json::from_str::<serde_json::Value>(text.trim()) else {
        return Vec::new();
    };
    json.as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["topic"] == topic)
        .map(|p| {
            let state = p["state"].as_str().unwrap_or_default().to_string();
            let state = match p["errorMessage"].as_str() {
                Some(error) => format!("{state}: {error}"),
                None => state,
            };
            (state, p["destinationOffset"].as_i64().unwrap_or(-1))
        })
        .collect()
}

/// Waits (at most 120 s) until [`described`] shows every partition of `topic` in `state` at the
/// offsets `ends`.
pub async fn wait_described(address: &str, topic: &str, state: &str, ends: &[i64]) {
    let wanted: Vec<(String, i64)> = ends.iter().map(|e| (state.to_string(), *e)).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (address, topic) = (address.to_string(), topic.to_string());
        let now = tokio::task::spawn_blocking(move || described(&address, &topic))
            .await
            .expect("ran");
        if now == wanted {
            return;
        }
        assert!(Instant::now() < deadline, "{now:?}, waiting for {wanted:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
