//! A WAN model on loopback: a TCP proxy that puts a link between two endpoints, for the
//! cross-region benchmarks and tests (this machine's kernel has no `tc netem`).
//!
//! The link has, in each direction:
//! - a one-way delay: every chunk arrives `one_way` after it left, so a round trip takes
//!   `2 * one_way` longer;
//! - optionally, loss as a lossy link shows it to TCP's users: a connection is cut (the client
//!   sees it end in the middle of an answer) once it carried `cut_after` bytes from upstream;
//! - an optional bandwidth cap shared by every connection through the proxy (a token bucket:
//!   chunks leave one after another at the cap's pace, as on one physical link);
//! - an optional in-flight limit per connection, modelling the sending socket's buffer (Kafka's
//!   `socket.send.buffer.bytes`, 100 KiB by default): at most `window` bytes may have left and
//!   not yet been acknowledged, an acknowledgement coming back one delay after a chunk arrived.
//!   One connection then carries at most `window / round trip` bytes per second, as TCP does
//!   when the sender's buffer is the limit.
//!
//! The proxy reads from a side only when the in-flight limit leaves room, so back-pressure
//! reaches the sender through TCP as it would on a real link. It counts how long the bytes from
//! upstream waited for the shared link ([`WanProxy::queue_waits`]): a queue there is what makes
//! every connection's round trip longer than the link's.

use bytes::Bytes;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;

/// The link's shape.
#[derive(Debug, Clone, Copy)]
pub struct WanLink {
    /// Delay each way.
    pub one_way: Duration,
    /// Bytes per second each way, over all connections (`None`: unlimited).
    pub bandwidth: Option<u64>,
    /// Bytes in flight per connection and direction (`None`: unlimited).
    pub window: Option<usize>,
    /// Bytes from upstream after which a connection is cut (`None`: never).
    pub cut_after: Option<u64>,
}

impl WanLink {
    /// A link that only delays.
    pub fn delay(one_way: Duration) -> WanLink {
        WanLink {
            one_way,
            bandwidth: None,
            window: None,
            cut_after: None,
        }
    }

    /// What one connection can carry per second at most: the window over the round trip, or
    /// the cap (bytes per second; `None`: unlimited).
    pub fn per_connection_ceiling(&self) -> Option<f64> {
        let round_trip = (2 * self.one_way).as_secs_f64();
        let by_window = self
            .window
            .filter(|_| round_trip > 0.0)
            .map(|w| w as f64 / round_trip);
        match (by_window, self.bandwidth.map(|b| b as f64)) {
            (Some(w), Some(b)) => Some(w.min(b)),
            (w, b) => w.or(b),
        }
    }
}

/// Upper bounds (ms) of the waits counted for the shared link.
const WAIT_BOUNDS_MS: [u64; 12] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, u64::MAX];

/// When the shared link is next free to send, per direction, and the bytes that waited for it
/// by how long.
#[derive(Debug, Default)]
struct Pacer {
    next_free: Mutex<Option<Instant>>,
    waited: [AtomicU64; WAIT_BOUNDS_MS.len()],
    /// Bytes delivered later than the model says (the proxy short of CPU), by how late.
    late: [AtomicU64; WAIT_BOUNDS_MS.len()],
}

/// Counts `bytes` in the bucket of `ms`.
fn count(buckets: &[AtomicU64; WAIT_BOUNDS_MS.len()], ms: u64, bytes: u64) {
    let bucket = WAIT_BOUNDS_MS
        .iter()
        .position(|b| ms < *b)
        .unwrap_or(WAIT_BOUNDS_MS.len() - 1);
    buckets[bucket].fetch_add(bytes, Ordering::Relaxed);
}

/// The bounds (ms) under which half and 99% of the counted bytes fall, and starts afresh.
fn percentiles(buckets: &[AtomicU64; WAIT_BOUNDS_MS.len()]) -> Option<(u64, u64)> {
    let counts: Vec<u64> = buckets
        .iter()
        .map(|c| c.swap(0, Ordering::Relaxed))
        .collect();
    let total: u64 = counts.iter().sum();
    let under = |q: f64| {
        let want = (total as f64 * q).ceil() as u64;
        let mut seen = 0;
        for (count, bound) in counts.iter().zip(WAIT_BOUNDS_MS) {
            seen += count;
            if seen >= want {
                return bound;
            }
        }
        u64::MAX
    };
    (total > 0).then(|| (under(0.5), under(0.99)))
}

impl Pacer {
    /// When `bytes` leave, sent after everything scheduled before them at `bandwidth`.
    fn departure(&self, bytes: usize, bandwidth: Option<u64>) -> Instant {
        let now = Instant::now();
        let Some(rate) = bandwidth.filter(|r| *r > 0) else {
            return now;
        };
        let mut next = self.next_free.lock().unwrap_or_else(|e| e.into_inner());
        let start = next.map_or(now, |n| n.max(now));
        let end = start + Duration::from_secs_f64(bytes as f64 / rate as f64);
        *next = Some(end);
        count(&self.waited, (start - now).as_millis() as u64, bytes as u64);
        end
    }
}

/// How long the bytes from upstream waited for the shared link since the last look, and how
/// much later than the model the proxy delivered them (not 0 when it is short of CPU, so the
/// link it models is slower than asked): the bounds (ms) under which half and 99% fall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueWaits {
    pub p50_under_ms: u64,
    pub p99_under_ms: u64,
    pub late_p50_under_ms: u64,
    pub late_p99_under_ms: u64,
}

/// The running proxy, on a runtime of its own (so a test's runtime does not carry its timers);
/// dropping it stops it, from any context.
#[derive(Debug)]
pub struct WanProxy {
    runtime: Option<tokio::runtime::Runtime>,
    from_upstream: Arc<Pacer>,
    cuts: Arc<AtomicU64>,
    /// Whether `cut_after` still applies (see [`WanProxy::heal`]).
    cutting: Arc<AtomicBool>,
}

impl Drop for WanProxy {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl WanProxy {
    /// Listens on `listen` and forwards each connection to `upstream` over `link`.
    pub fn start(listen: &str, upstream: &str, link: WanLink) -> WanProxy {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        // Bound here, without entering the runtime: the caller may be async itself.
        let listener = std::net::TcpListener::bind(listen).expect("the proxy binds");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let upstream = upstream.to_string();
        let (to_upstream, from_upstream) = (Arc::new(Pacer::default()), Arc::new(Pacer::default()));
        let downstream = from_upstream.clone();
        let cuts = Arc::new(AtomicU64::new(0));
        let counted = cuts.clone();
        let cutting = Arc::new(AtomicBool::new(true));
        let cutter = cutting.clone();
        runtime.spawn(async move {
            let listener = TcpListener::from_std(listener).expect("the proxy listens");
            while let Ok((client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let (up, down, cuts) = (to_upstream.clone(), downstream.clone(), counted.clone());
                let cutting = cutter.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    let requests = WanLink {
                        cut_after: None,
                        ..link
                    };
                    let never = Arc::new(AtomicBool::new(false));
                    tokio::spawn(pump(client_read, server_write, requests, up, never));
                    if pump(server_read, client_write, link, down, cutting).await {
                        cuts.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        WanProxy {
            runtime: Some(runtime),
            from_upstream,
            cuts,
            cutting,
        }
    }

    /// How many connections the link cut (`WanLink::cut_after`).
    pub fn cuts(&self) -> u64 {
        self.cuts.load(Ordering::Relaxed)
    }

    /// The link stops cutting connections (delay, cap and window stay).
    pub fn heal(&self) {
        self.cutting.store(false, Ordering::Relaxed);
    }

    /// The waits of the bytes from upstream since the last call (and starts counting afresh);
    /// `None` when none was counted (no cap, or nothing sent).
    pub fn queue_waits(&self) -> Option<QueueWaits> {
        let (p50_under_ms, p99_under_ms) = percentiles(&self.from_upstream.waited)?;
        let (late_p50_under_ms, late_p99_under_ms) =
            percentiles(&self.from_upstream.late).unwrap_or((0, 0));
        Some(QueueWaits {
            p50_under_ms,
            p99_under_ms,
            late_p50_under_ms,
            late_p99_under_ms,
        })
    }
}

/// Copies `from` to `to` over `link`: each chunk leaves when the shared `pacer` lets it, arrives
/// one delay later, and frees its room in the window one more delay later; past `cut_after`
/// bytes, while `cutting`, the copy stops at once, what is still on the way included. Whether
/// it cut.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    link: WanLink,
    pacer: Arc<Pacer>,
    cutting: Arc<AtomicBool>,
) -> bool {
    let window = link.window.unwrap_or(usize::MAX >> 4);
    let room = Arc::new(Semaphore::new(window));
    let (chunks, mut due) = mpsc::unbounded_channel::<(Instant, Bytes)>();
    let (freed_room, one_way, meter) = (room.clone(), link.one_way, pacer.clone());
    let writer = tokio::spawn(async move {
        while let Some((at, chunk)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
            let late = Instant::now().saturating_duration_since(at).as_millis() as u64;
            count(&meter.late, late, chunk.len() as u64);
            // The acknowledgement travels back: the room is free one delay later.
            let (room, bytes) = (freed_room.clone(), chunk.len());
            tokio::spawn(async move {
                tokio::time::sleep(one_way).await;
                room.add_permits(bytes);
            });
        }
        let _ = to.shutdown().await;
    });
    let mut buf = vec![0u8; (256 * 1024).min(window)];
    let mut carried = 0u64;
    loop {
        // Read no more than the window has room for.
        let Ok(permit) = room.clone().acquire_many_owned(1).await else {
            break;
        };
        drop(permit);
        let free = room.available_permits().clamp(1, buf.len());
        let n = match from.read(&mut buf[..free]).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let Ok(taken) = room.acquire_many(n as u32).await else {
            break;
        };
        taken.forget();
        carried += n as u64;
        if link.cut_after.is_some_and(|cut| carried >= cut) && cutting.load(Ordering::Relaxed) {
            writer.abort();
            return true;
        }
        let arrival = pacer.departure(n, link.bandwidth) + link.one_way;
        if chunks
            .send((arrival, Bytes::copy_from_slice(&buf[..n])))
            .is_err()
        {
            break;
        }
    }
    drop(chunks);
    let _ = writer.await;
    false
}
