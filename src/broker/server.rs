//! The Kafka listener: length-prefixed frames, request headers v1/v2, one task per connection.
//!
//! A connection's requests are handled one after another, so responses leave in request order
//! (Kafka's guarantee; clients pipeline on it). A frame larger than `socket.request.max.bytes` or
//! bytes that do not decode close the connection. An API or version this broker does not serve
//! is answered UNSUPPORTED_VERSION (the error code after a v0 header) and the connection stays.
//! ApiVersions at an unknown version is answered in the v0 format with UNSUPPORTED_VERSION and
//! the supported ranges, as Kafka does, so newer clients can downgrade.

use super::Broker;
use super::handlers::{self, Response};
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};
use kmirror_protocol::messages::MirrorApiKey;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

const UNSUPPORTED_VERSION: i16 = 35;

/// Accepts connections until `shutdown` turns true.
pub async fn serve(
    broker: Arc<Broker>,
    listener: TcpListener,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                match accepted {
                    Ok((stream, peer)) => {
                        let broker = broker.clone();
                        let shutdown = shutdown.clone();
                        tokio::spawn(async move {
                            if let Err(e) = connection(broker, stream, peer, shutdown).await {
                                tracing::debug!(%peer, error = %e, "connection closed");
                            }
                        });
                    }
                    Err(e) => tracing::warn!(error = %e, "accept failed"),
                }
            }
            _ = shutdown.changed() => return,
        }
    }
}

async fn connection(
    broker: Arc<Broker>,
    mut stream: TcpStream,
    peer: SocketAddr,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    // As Kafka reports a member's host in DescribeGroups.
    let client_host = format!("/{}", peer.ip());
    let max = broker.config().max_request_bytes;
    loop {
        let size = tokio::select! {
            size = stream.read_i32() => size?,
            _ = shutdown.changed() => return Ok(()),
        };
        let size = usize::try_from(size)
            .ok()
            .filter(|s| *s >= 8 && *s <= max)
            .ok_or_else(|| {
                std::io::Error::other(format!("request size {size} outside 8..={max}"))
            })?;
        let frame = kmirror_protocol::frame::read_body(&mut stream, size).await?;
        let Some(reply) = handle(&broker, &client_host, frame).await? else {
            continue;
        };
        // The body's pieces (record batches among them) go out as they are, not copied into
        // one buffer behind the head.
        stream.write_all(&reply.head).await?;
        for piece in &reply.body {
            stream.write_all(piece).await?;
        }
    }
}

/// The APIs served, with their version ranges (what ApiVersions advertises).
pub fn served_versions() -> Vec<(ApiKey, i16, i16)> {
    handlers::served()
}

/// A response frame: the size prefix and response header, then the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseFrame {
    /// `i32` size and the response header.
    pub head: Vec<u8>,
    /// The encoded response, in pieces.
    pub body: Vec<Bytes>,
}

/// Decodes one request frame (the bytes after the length prefix), runs its handler, encodes the
/// response frame (`None`: no response, as for `acks=0` produce). An error means the connection
/// must close. Every request a connection reads goes through here; so does the fuzz target.
/// Each is counted and timed per API ([`crate::metrics::REQUESTS`]).
pub async fn handle(
    broker: &Arc<Broker>,
    client_host: &str,
    frame: Bytes,
) -> std::io::Result<Option<ResponseFrame>> {
    let started = std::time::Instant::now();
    let key = frame
        .get(..2)
        .map_or(-1, |k| i16::from_be_bytes([k[0], k[1]]));
    let answer = answer(broker, client_host, frame).await;
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
            vec![Bytes::from(handlers::api_versions_unsupported())],
        )?));
    }
    if let Some(mirror_api) = MirrorApiKey::from_i16(key).filter(|m| {
        handlers::supported_mirror(*m).is_some_and(|(min, max)| (min..=max).contains(&version))
    }) {
        // KIP-1279's APIs: flexible versions only (request header v2, response header v1).
        let header = RequestHeader::decode(&mut frame, 2)
            .map_err(|e| bad(format!("bad {mirror_api:?} header: {e}")))?;
        let body = handlers::dispatch_mirror(broker, mirror_api, version, client_host, &mut frame)
            .await
            .map_err(|e| bad(format!("bad {mirror_api:?} v{version} request: {e}")))?;
        return Ok(Some(frame_response(1, header.correlation_id, vec![body])?));
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
            vec![body],
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
        body: vec![Bytes::copy_from_slice(&UNSUPPORTED_VERSION.to_be_bytes())],
    }
}

fn frame_response(
    header_version: i16,
    correlation_id: i32,
    body: Vec<Bytes>,
) -> std::io::Result<ResponseFrame> {
    let mut header = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut header, header_version)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let body_len: usize = body.iter().map(Bytes::len).sum();
    let size = i32::try_from(header.len() + body_len)
        .map_err(|_| std::io::Error::other("a response over 2 GiB"))?;
    let mut head = Vec::with_capacity(4 + header.len());
    head.extend_from_slice(&size.to_be_bytes());
    head.extend_from_slice(&header);
    Ok(ResponseFrame { head, body })
}
