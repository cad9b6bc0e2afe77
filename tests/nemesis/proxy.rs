//! A TCP proxy between the destination's mirror and the source broker that can fail on demand:
//! `Pass` forwards bytes both ways, `Drop` closes every connection and refuses new ones (each is
//! accepted and closed at once, as a peer that went away), `Stall` keeps connections open but
//! forwards nothing (as a network partition that drops packets without resetting anything).
//!
//! It runs on a thread of its own so that the test blocking on a child process never stalls the
//! mirror's traffic.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};

/// What the proxy does with connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Pass,
    Drop,
    Stall,
}

/// The running proxy; dropping it closes its listener and every connection.
pub(crate) struct FaultProxy {
    mode: watch::Sender<Mode>,
    accepted: Arc<AtomicU64>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FaultProxy {
    /// Listens on `listen` (`host:port`) and forwards each connection to `upstream`.
    pub(crate) fn start(listen: &str, upstream: &str) -> FaultProxy {
        let listener = std::net::TcpListener::bind(listen)
            .unwrap_or_else(|e| panic!("the fault proxy binds {listen}: {e}"));
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let (mode, modes) = watch::channel(Mode::Pass);
        let (shutdown, stopped) = oneshot::channel::<()>();
        let upstream = upstream.to_string();
        let accepted = Arc::new(AtomicU64::new(0));
        let counter = accepted.clone();
        // A thread of its own: the test's runtime may not start or drop another one.
        let thread = std::thread::Builder::new()
            .name("fault-proxy".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the proxy's runtime");
                runtime.block_on(async move {
                    let listener = TcpListener::from_std(listener).expect("a tokio listener");
                    let accept = async {
                        while let Ok((client, _)) = listener.accept().await {
                            counter.fetch_add(1, Ordering::Relaxed);
                            tokio::spawn(serve(client, upstream.clone(), modes.clone()));
                        }
                    };
                    tokio::select! {
                        _ = stopped => {}
                        _ = accept => {}
                    }
                });
                // Dropping the runtime here drops every connection's task and socket.
            })
            .expect("the proxy's thread");
        FaultProxy {
            mode,
            accepted,
            shutdown: Some(shutdown),
            thread: Some(thread),
        }
    }

    /// How many connections the proxy accepted.
    pub(crate) fn connections(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Switches every connection, open or new, to `mode`.
    pub(crate) fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One client connection: waits out a stall before connecting upstream, then pumps both ways
/// until either side closes or the mode says drop.
async fn serve(mut client: TcpStream, upstream: String, mut modes: watch::Receiver<Mode>) {
    // A connection accepted while stalled is held open, unanswered, until the mode changes.
    loop {
        let mode = *modes.borrow_and_update();
        match mode {
            Mode::Drop => return,
            Mode::Pass => break,
            Mode::Stall => {
                if modes.changed().await.is_err() {
                    return;
                }
            }
        }
    }
    let Ok(Ok(mut server)) =
        tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(&upstream)).await
    else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_buf, mut server_buf) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let mode = *modes.borrow_and_update();
        match mode {
            Mode::Drop => return,
            // Nothing is read, so nothing is forwarded: both peers' writes back up in the
            // kernel buffers until the stall ends.
            Mode::Stall => {
                if modes.changed().await.is_err() {
                    return;
                }
                continue;
            }
            Mode::Pass => {}
        }
        tokio::select! {
            changed = modes.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            read = client.read(&mut client_buf) => match read {
                Ok(n) if n > 0 => {
                    if server.write_all(&client_buf[..n]).await.is_err() {
                        return;
                    }
                }
                _ => return,
            },
            read = server.read(&mut server_buf) => match read {
                Ok(n) if n > 0 => {
                    if client.write_all(&server_buf[..n]).await.is_err() {
                        return;
                    }
                }
                _ => return,
            },
        }
    }
}
