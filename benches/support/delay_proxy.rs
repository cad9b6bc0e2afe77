//! A TCP proxy that holds every byte back for a fixed time in each direction: the source
//! "in another region" for the cross-region runs. (This machine's kernel has no `tc netem`.)
//!
//! Each chunk read from one side is written to the other once its delay has passed, so a round
//! trip through the proxy takes twice the one-way delay longer; the proxy buffers what is in
//! flight without limit, so it adds latency only, not a bandwidth or window limit.

use bytes::Bytes;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The running proxy; dropping it stops it.
pub(crate) struct DelayProxy {
    _runtime: tokio::runtime::Runtime,
}

impl DelayProxy {
    /// Listens on `listen` and forwards each connection to `upstream`, `one_way` late each way.
    pub(crate) fn start(listen: &str, upstream: &str, one_way: Duration) -> DelayProxy {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let listener = runtime
            .block_on(TcpListener::bind(listen))
            .expect("the proxy binds");
        let upstream = upstream.to_string();
        runtime.spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::spawn(pump(client_read, server_write, one_way));
                    tokio::spawn(pump(server_read, client_write, one_way));
                });
            }
        });
        DelayProxy { _runtime: runtime }
    }
}

/// Copies `from` to `to`, each chunk `delay` after it was read.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Duration) {
    let (chunks, mut due) = mpsc::unbounded_channel::<(Instant, Bytes)>();
    let writer = tokio::spawn(async move {
        while let Some((at, chunk)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    });
    let mut buf = vec![0u8; 256 * 1024];
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0
            || chunks
                .send((Instant::now() + delay, Bytes::copy_from_slice(&buf[..n])))
                .is_err()
        {
            break;
        }
    }
    drop(chunks);
    let _ = writer.await;
}
