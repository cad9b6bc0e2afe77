//! The Kafka listener: length-prefixed frames, request headers v1/v2, one task per connection.
//!
//! A connection's requests are handled one after another, so responses leave in request order
//! (Kafka's guarantee; clients pipeline on it). A frame larger than `socket.request.max.bytes` or
//! bytes that do not decode close the connection. An API or version this broker does not serve
//! is answered UNSUPPORTED_VERSION (the error code after a v0 header) and the connection stays.
//! ApiVersions at an unknown version is answered in the v0 format with UNSUPPORTED_VERSION and
//! the supported ranges, as Kafka does, so newer clients can downgrade.
//!
//! Lifecycle of a connection (the limits and their keys are [`super::network`]'s): accepted
//! while fewer than `max.connections` are open, closed at once beyond `max.connections.per.ip`;
//! each frame reserves its declared size from the `queued.max.request.bytes` pool before its
//! body is read, its buffer growing with the bytes that arrive, and gives it back once answered;
//! a connection that completes no request within `connections.max.idle.ms`, or leaves a
//! response untaken that long, is closed. While a Fetch waits, the connection reads on (at most
//! one frame ahead), so a client that disconnects ends its Fetch and frees its descriptor at
//! once. Other requests are never abandoned midway: their handlers are not written to be
//! cancelled. Accept errors pause the accept loop instead of spinning on it.
//!
//! A response goes out piece by piece: record batches a Fetch answers are segment file ranges,
//! sent with `sendfile` from the page cache right after the fields before them, so the first
//! bytes leave before the last partition's records are touched and no record is copied through
//! the broker's memory (a Java consumer alternates fetching and processing per broker, so the
//! time to a response's first byte is its throughput; docs/wire.md, Records). Segment files
//! never change under a range (a cut makes a new file); one shorter than its range all the
//! same closes the connection: its length prefix has already gone out.

use super::Broker;
use super::handlers::{self, Response};
use super::network::{Connections, NetworkConfig};
use crate::accept_errors::AcceptErrors;
use crate::metrics::{ACCEPT_ERRORS, CONNECTIONS, CONNECTIONS_CLOSED};
use crate::storage::{FileRange, Records};
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};
use kmirror_actors::engine::Engine;
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::frame::FrameBody;
use kmirror_protocol::messages::MirrorApiKey;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;

/// The `reason` labels of [`CONNECTIONS_CLOSED`].
const CLOSED_PER_IP: &str = "max_connections_per_ip";
const CLOSED_IDLE: &str = "idle";
const CLOSED_CLIENT_GONE: &str = "client_gone_during_fetch";

/// What the accept loop shares with its connections.
struct Shared {
    connections: Mutex<Connections>,
    /// Notified when a connection closes (the accept loop waits on it at `max.connections`).
    closed: Notify,
    /// `queued.max.request.bytes` as permits of one byte; None: unbounded.
    pool: Option<Arc<Semaphore>>,
}

fn lock(connections: &Mutex<Connections>) -> MutexGuard<'_, Connections> {
    connections.lock().unwrap_or_else(|e| e.into_inner())
}

/// A connection counted against the limits; uncounted when dropped, however its task ends.
struct Slot {
    shared: Arc<Shared>,
    ip: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        lock(&self.shared.connections).close(self.ip);
        metrics::gauge!(CONNECTIONS).decrement(1.0);
        self.shared.closed.notify_one();
    }
}

/// Accepts connections until `shutdown` turns true.
pub async fn serve(
    broker: Arc<Broker>,
    engine: Option<Engine>,
    listener: TcpListener,
    mut shutdown: watch::Receiver<bool>,
) {
    let config: &NetworkConfig = &broker.config().network;
    let shared = Arc::new(Shared {
        connections: Mutex::new(Connections::new(config)),
        closed: Notify::new(),
        pool: config
            .queued_max_request_bytes
            .map(|bytes| Arc::new(Semaphore::new(bytes.min(Semaphore::MAX_PERMITS)))),
    });
    // Exported from the start, so scrapes show them (and rates start from 0) before any event.
    metrics::gauge!(CONNECTIONS).increment(0.0);
    metrics::counter!(ACCEPT_ERRORS).increment(0);
    for reason in [CLOSED_PER_IP, CLOSED_IDLE, CLOSED_CLIENT_GONE] {
        metrics::counter!(CONNECTIONS_CLOSED, "reason" => reason).increment(0);
    }
    let mut errors = AcceptErrors::default();
    loop {
        // At max.connections nothing is accepted: new clients wait in the backlog.
        while lock(&shared.connections).is_full() {
            tokio::select! {
                _ = shared.closed.notified() => {}
                _ = shutdown.changed() => return,
            }
        }
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.changed() => return,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => {
                errors.accepted();
                accepted
            }
            Err(e) => {
                metrics::counter!(ACCEPT_ERRORS).increment(1);
                let next = errors.failed(std::time::Instant::now());
                if let Some(count) = next.report {
                    tracing::warn!(
                        error = %e,
                        errors = count,
                        pause_ms = next.pause.as_millis() as u64,
                        "accept failed; the listener pauses (logged at most every 10 s)"
                    );
                }
                tokio::select! {
                    _ = tokio::time::sleep(next.pause) => continue,
                    _ = shutdown.changed() => return,
                }
            }
        };
        if !lock(&shared.connections).admit(peer.ip()) {
            metrics::counter!(CONNECTIONS_CLOSED, "reason" => CLOSED_PER_IP).increment(1);
            tracing::debug!(%peer, "connection closed: max.connections.per.ip reached");
            continue;
        }
        metrics::gauge!(CONNECTIONS).increment(1.0);
        let slot = Slot {
            shared: shared.clone(),
            ip: peer.ip(),
        };
        let broker = broker.clone();
        let engine = engine.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let pool = slot.shared.pool.clone();
            if let Err(e) = connection(broker, engine, stream, peer, shutdown, pool).await {
                tracing::debug!(%peer, error = %e, "connection closed");
            }
            drop(slot);
        });
    }
}

/// A whole request frame, holding its share of `queued.max.request.bytes` until dropped.
struct Request {
    frame: Bytes,
    reserved: Option<OwnedSemaphorePermit>,
}

/// The next frame of a connection, assembled as its bytes arrive. [`Incoming::next`] is
/// cancel-safe: what was read stays here for the next call.
#[derive(Default)]
struct Incoming {
    size: [u8; 4],
    filled: usize,
    body: Option<(FrameBody, Option<OwnedSemaphorePermit>)>,
}

impl Incoming {
    /// Reads until a frame is whole; None when the client closed between frames.
    async fn next(
        &mut self,
        stream: &mut OwnedReadHalf,
        max: usize,
        pool: Option<&Arc<Semaphore>>,
    ) -> std::io::Result<Option<Request>> {
        loop {
            if let Some((body, _)) = &mut self.body {
                if !body.read_some(stream).await? {
                    continue;
                }
                let Some((body, reserved)) = self.body.take() else {
                    continue;
                };
                return Ok(Some(Request {
                    frame: body.finish(),
                    reserved,
                }));
            }
            if self.filled < self.size.len() {
                let n = stream.read(&mut self.size[self.filled..]).await?;
                if n == 0 {
                    if self.filled == 0 {
                        return Ok(None);
                    }
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "stream ended inside a frame's size",
                    ));
                }
                self.filled += n;
                continue;
            }
            let size = i32::from_be_bytes(self.size);
            let len = usize::try_from(size)
                .ok()
                .filter(|s| *s >= 8 && *s <= max)
                .ok_or_else(|| {
                    std::io::Error::other(format!("request size {size} outside 8..={max}"))
                })?;
            // The whole declared size is reserved at once, so connections holding parts of the
            // pool cannot starve each other; the pool is at least socket.request.max.bytes.
            let reserved = match pool {
                Some(pool) => Some(
                    pool.clone()
                        .acquire_many_owned(u32::try_from(len).unwrap_or(u32::MAX))
                        .await
                        .map_err(|_| std::io::Error::other("the request pool is closed"))?,
                ),
                None => None,
            };
            self.filled = 0;
            self.body = Some((FrameBody::new(len), reserved));
        }
    }
}

/// Sleeps until `deadline`; forever without one.
async fn expiry(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

fn idle_error(what: &str, idle: Duration) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "{what} within connections.max.idle.ms ({} ms)",
            idle.as_millis()
        ),
    )
}

async fn connection(
    broker: Arc<Broker>,
    engine: Option<Engine>,
    stream: TcpStream,
    peer: SocketAddr,
    mut shutdown: watch::Receiver<bool>,
    pool: Option<Arc<Semaphore>>,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    // As Kafka reports a member's host in DescribeGroups.
    let client_host = format!("/{}", peer.ip());
    let max = broker.config().max_request_bytes;
    let idle = broker.config().network.connections_max_idle;
    let (mut reader, mut writer) = stream.into_split();
    let mut incoming = Incoming::default();
    // A frame read while a Fetch waited.
    let mut ahead: Option<Request> = None;
    loop {
        let request = match ahead.take() {
            Some(request) => request,
            None => {
                let deadline = idle.map(|idle| Instant::now() + idle);
                tokio::select! {
                    read = incoming.next(&mut reader, max, pool.as_ref()) => match read? {
                        Some(request) => request,
                        None => return Ok(()),
                    },
                    () = expiry(deadline) => {
                        metrics::counter!(CONNECTIONS_CLOSED, "reason" => CLOSED_IDLE).increment(1);
                        return Err(idle_error(
                            "no request completed",
                            idle.unwrap_or_default(),
                        ));
                    }
                    _ = shutdown.changed() => return Ok(()),
                }
            }
        };
        let Request { frame, reserved } = request;
        let is_fetch = frame.get(..2) == Some(&(ApiKey::Fetch as i16).to_be_bytes()[..]);
        let served = handle(&broker, engine.as_ref(), &client_host, frame);
        tokio::pin!(served);
        let reply = if is_fetch {
            // A Fetch may wait long: reading on notices the client leaving.
            tokio::select! {
                reply = &mut served => reply?,
                next = incoming.next(&mut reader, max, pool.as_ref()) => match next? {
                    Some(request) => {
                        ahead = Some(request);
                        served.await?
                    }
                    None => {
                        metrics::counter!(CONNECTIONS_CLOSED, "reason" => CLOSED_CLIENT_GONE)
                            .increment(1);
                        return Ok(());
                    }
                },
            }
        } else {
            served.await?
        };
        drop(reserved);
        let Some(reply) = reply else {
            continue;
        };
        let sent = write_reply(&mut writer, &reply);
        match idle {
            Some(idle) => tokio::time::timeout(idle, sent)
                .await
                .map_err(|_| idle_error("the response was not taken", idle))??,
            None => sent.await?,
        }
    }
}

async fn write_reply(writer: &mut OwnedWriteHalf, reply: &ResponseFrame) -> std::io::Result<()> {
    // The body's pieces (record batches among them) go out as they are, not copied into one
    // buffer behind the head.
    writer.write_all(&reply.head).await?;
    for piece in &reply.body {
        match piece {
            Records::Bytes(bytes) => writer.write_all(bytes).await?,
            Records::File(range) => send_file(writer.as_ref(), range).await?,
        }
    }
    Ok(())
}

/// Sends `range` from its file to the socket without reading it into memory.
async fn send_file(stream: &TcpStream, range: &FileRange) -> std::io::Result<()> {
    let mut at = range.position();
    let end = at + range.len() as u64;
    while at < end {
        stream.writable().await?;
        let sent = stream.try_io(Interest::WRITABLE, || {
            let count = usize::try_from(end - at).unwrap_or(usize::MAX);
            rustix::fs::sendfile(stream, range.file(), Some(&mut at), count)
                .map_err(std::io::Error::from)
        });
        match sent {
            Ok(0) => return Err(crate::storage::records::cut_short(at, (end - at) as usize)),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The APIs served, with their version ranges (what ApiVersions advertises).
pub fn served_versions() -> Vec<(ApiKey, i16, i16)> {
    handlers::served()
}

/// A response frame: the size prefix and response header, then the body.
#[derive(Debug, Clone)]
pub struct ResponseFrame {
    /// `i32` size and the response header.
    pub head: Vec<u8>,
    /// The encoded response, in pieces (a Fetch's records as segment file ranges).
    pub body: Vec<Records>,
}

/// Decodes one request frame (the bytes after the length prefix), runs its handler, encodes the
/// response frame (`None`: no response, as for `acks=0` produce). An error means the connection
/// must close. Every request a connection reads goes through here; so does the fuzz target.
/// Each is counted and timed per API ([`crate::metrics::REQUESTS`]).
pub async fn handle(
    broker: &Arc<Broker>,
    engine: Option<&Engine>,
    client_host: &str,
    frame: Bytes,
) -> std::io::Result<Option<ResponseFrame>> {
    let started = std::time::Instant::now();
    let key = frame
        .get(..2)
        .map_or(-1, |k| i16::from_be_bytes([k[0], k[1]]));
    let answer = answer(broker, engine, client_host, frame).await;
    let api = api_name(key);
    metrics::counter!(crate::metrics::REQUESTS, "api" => api).increment(1);
    metrics::histogram!(crate::metrics::REQUEST_LATENCY, "api" => api)
        .record(started.elapsed().as_secs_f64());
    answer
}

/// The name of API `key` as Kafka (or KIP-1279) spells it, `Unknown` for others.
fn api_name(key: i16) -> &'static str {
    if let Some(mirror_api) = MirrorApiKey::from_i16(key) {
        return mirror_api.name();
    }
    static NAMES: std::sync::OnceLock<std::collections::HashMap<i16, &'static str>> =
        std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        // Built once: one leaked name per Kafka API, so labelling a request allocates nothing.
        ApiKey::iter()
            .map(|api| {
                let name: &'static str = Box::leak(format!("{api:?}").into_boxed_str());
                (api as i16, name)
            })
            .collect()
    });
    names.get(&key).copied().unwrap_or("Unknown")
}

async fn answer(
    broker: &Arc<Broker>,
    engine: Option<&Engine>,
    client_host: &str,
    mut frame: Bytes,
) -> std::io::Result<Option<ResponseFrame>> {
    let bad = |what: String| std::io::Error::other(what);
    if frame.len() < 8 {
        return Err(bad(format!("a {}-byte request frame", frame.len())));
    }
    let key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    // The correlation id sits at the same place in every header version.
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let api = ApiKey::try_from(key).ok();
    let supported = api.and_then(handlers::supported);
    if api == Some(ApiKey::ApiVersions) && supported.is_some_and(|(_, max)| version > max) {
        // Kafka's fallback: answer in v0 with the ranges, so the client can retry lower.
        return Ok(Some(frame_response(
            ApiKey::ApiVersions.response_header_version(0),
            correlation_id,
            vec![Records::Bytes(Bytes::from(
                handlers::api_versions_unsupported(),
            ))],
        )?));
    }
    if let Some(mirror_api) = MirrorApiKey::from_i16(key).filter(|m| {
        handlers::supported_mirror(*m).is_some_and(|(min, max)| (min..=max).contains(&version))
    }) {
        // KIP-1279's APIs: flexible versions only (request header v2, response header v1).
        let header = RequestHeader::decode(&mut frame, 2)
            .map_err(|e| bad(format!("bad {mirror_api:?} header: {e}")))?;
        let body =
            handlers::dispatch_mirror(broker, engine, mirror_api, version, client_host, &mut frame)
                .await
                .map_err(|e| bad(format!("bad {mirror_api:?} v{version} request: {e}")))?;
        return Ok(Some(frame_response(
            1,
            header.correlation_id,
            vec![Records::Bytes(body)],
        )?));
    }
    let api = match (api, supported) {
        (Some(api), Some((min, max))) if (min..=max).contains(&version) => api,
        _ => {
            // Clients that negotiate with ApiVersions never get here. The answer is the error
            // code alone after a v0 header (ApiVersions v0's own error shape); the connection
            // stays open.
            tracing::debug!(key, version, "answering UNSUPPORTED_VERSION");
            return Ok(Some(unsupported_version(correlation_id)));
        }
    };
    let header = RequestHeader::decode(&mut frame, api.request_header_version(version))
        .map_err(|e| bad(format!("bad {api:?} header: {e}")))?;
    let response = handlers::dispatch(broker, api, version, &header, client_host, &mut frame)
        .await
        .map_err(|e| bad(format!("bad {api:?} v{version} request: {e}")))?;
    match response {
        Response::None => Ok(None),
        Response::Body(body) => Ok(Some(frame_response(
            api.response_header_version(version),
            header.correlation_id,
            vec![Records::Bytes(body)],
        )?)),
        Response::Chunks(body) => Ok(Some(frame_response(
            api.response_header_version(version),
            header.correlation_id,
            body,
        )?)),
    }
}

/// A response frame of header v0 and the UNSUPPORTED_VERSION error code.
fn unsupported_version(correlation_id: i32) -> ResponseFrame {
    let mut head = Vec::with_capacity(8);
    head.extend_from_slice(&6i32.to_be_bytes());
    head.extend_from_slice(&correlation_id.to_be_bytes());
    ResponseFrame {
        head,
        body: vec![Records::Bytes(Bytes::copy_from_slice(
            &ErrorCode::UNSUPPORTED_VERSION.0.to_be_bytes(),
        ))],
    }
}

fn frame_response(
    header_version: i16,
    correlation_id: i32,
    body: Vec<Records>,
) -> std::io::Result<ResponseFrame> {
    let mut header = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut header, header_version)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let body_len: usize = body.iter().map(Records::len).sum();
    let size = i32::try_from(header.len() + body_len)
        .map_err(|_| std::io::Error::other("a response over 2 GiB"))?;
    let mut head = Vec::with_capacity(4 + header.len());
    head.extend_from_slice(&size.to_be_bytes());
    head.extend_from_slice(&header);
    Ok(ResponseFrame { head, body })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A file range goes to the socket byte for byte; one whose file was cut before it is sent
    /// is an error, so the connection closes instead of sending short of its length prefix.
    #[tokio::test]
    async fn file_ranges_are_sent_whole_or_fail() {
        let mut file = tempfile::tempfile().expect("temp file");
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        file.write_all(&data).expect("written");
        let file = Arc::new(file);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let address = listener.local_addr().expect("address");
        let want = data.len() - 10;
        let reader = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.expect("accepts");
            let mut got = vec![0u8; want];
            stream.read_exact(&mut got).await.expect("reads");
            got
        });
        let stream = TcpStream::connect(address).await.expect("connects");
        let range = FileRange::new(file.clone(), 7, want);
        send_file(&stream, &range).await.expect("sent");
        let got = reader.await.expect("reader");
        assert!(got == data[7..data.len() - 3], "the range's bytes");
        file.set_len(1_000).expect("cut");
        let err = send_file(&stream, &range).await.expect_err("cut short");
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
