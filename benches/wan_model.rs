//! The WAN model itself (`kmirror_testkit::wan_proxy`), measured: bytes pushed through the proxy to a
//! sink on loopback over one or several connections, for links with a delay, a bandwidth cap
//! and a per-connection window (the sending socket's buffer), each beside the rate the model
//! should allow (`scripts/bench.sh wan_model`; no Kafka). A model that lets more through than
//! its ceiling, or far less, would make every cross-region figure built on it wrong.

mod support;

use kmirror_testkit::wan_proxy::{WanLink, WanProxy};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends `bytes` over each of `connections` connections through `link`; the rate achieved, in
/// bytes per second, measured until the sink has read everything.
fn measure(link: WanLink, connections: usize, bytes: usize) -> f64 {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let sink = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("sink");
    let sink_address = sink.local_addr().expect("address").to_string();
    let listen = format!("127.0.0.1:{}", support::free_port());
    let _proxy = WanProxy::start(&listen, &sink_address, link);
    runtime.block_on(async move {
        let readers = tokio::spawn(async move {
            let mut done = Vec::new();
            for _ in 0..connections {
                let (mut socket, _) = sink.accept().await.expect("accepted");
                done.push(tokio::spawn(async move {
                    let mut buf = vec![0u8; 1 << 16];
                    let mut read = 0;
                    while read < bytes {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => read += n,
                        }
                    }
                    read
                }));
            }
            let mut total = 0;
            for d in done {
                total += d.await.expect("read");
            }
            total
        });
        let started = Instant::now();
        let mut writers = Vec::new();
        for _ in 0..connections {
            let listen = listen.clone();
            writers.push(tokio::spawn(async move {
                let mut socket = tokio::net::TcpStream::connect(&listen)
                    .await
                    .expect("connects");
                let chunk = vec![7u8; 1 << 16];
                let mut sent = 0;
                while sent < bytes {
                    let n = chunk.len().min(bytes - sent);
                    socket.write_all(&chunk[..n]).await.expect("written");
                    sent += n;
                }
                socket
            }));
        }
        let mut open = Vec::new();
        for w in writers {
            open.push(w.await.expect("wrote"));
        }
        let total = readers.await.expect("read all");
        drop(open);
        total as f64 / started.elapsed().as_secs_f64()
    })
}

fn main() {
    let ms = Duration::from_millis;
    let kib = 1024;
    let cases = [
        (
            "delay 25 ms each way only",
            WanLink::delay(ms(25)),
            1,
            64 << 20,
        ),
        (
            "cap 50 MB/s, delay 25 ms",
            WanLink {
                bandwidth: Some(50_000_000),
                ..WanLink::delay(ms(25))
            },
            1,
            50 << 20,
        ),
        (
            "window 100 KiB, 50 ms round trip",
            WanLink {
                window: Some(100 * kib),
                ..WanLink::delay(ms(25))
            },
            1,
            6 << 20,
        ),
        (
            "window 100 KiB, 50 ms round trip, 8 connections",
            WanLink {
                window: Some(100 * kib),
                ..WanLink::delay(ms(25))
            },
            8,
            6 << 20,
        ),
        (
            "window 100 KiB, 150 ms round trip",
            WanLink {
                window: Some(100 * kib),
                ..WanLink::delay(ms(75))
            },
            1,
            2 << 20,
        ),
        (
            "cap 20 MB/s, window 100 KiB, 50 ms, 16 connections",
            WanLink {
                bandwidth: Some(20_000_000),
                window: Some(100 * kib),
                ..WanLink::delay(ms(25))
            },
            16,
            4 << 20,
        ),
    ];
    println!("wan_model: bytes through the WAN model to a loopback sink");
    println!(
        "{:<52} {:>12} {:>14} {:>7}",
        "link", "achieved", "model ceiling", "ratio"
    );
    for (name, link, connections, bytes) in cases {
        let achieved = measure(link, connections, bytes);
        let ceiling = link.per_connection_ceiling().map(|per| {
            let all = per * connections as f64;
            link.bandwidth.map_or(all, |b| all.min(b as f64))
        });
        let (shown, ratio) = match ceiling {
            Some(c) => (
                format!("{:.2} MB/s", c / 1e6),
                format!("{:.2}", achieved / c),
            ),
            None => ("none".to_string(), "-".to_string()),
        };
        println!(
            "{name:<52} {:>9.2} MB/s {shown:>14} {ratio:>7}",
            achieved / 1e6
        );
    }
}
