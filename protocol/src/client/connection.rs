//! One connection to one broker: TCP (optionally TLS), ApiVersions negotiation and SASL at
//! connect time, then pipelined requests.
//!
//! Lifecycle: [`Connection::connect`] runs the handshake on the bare stream, then splits it
//! between a writer task (frames requests, registers each correlation id before writing) and a
//! reader task (matches each response to the oldest registered request: Kafka answers a
//! connection's requests in order). A broken socket fails every request in flight and marks the
//! connection dead; the client reconnects on the next call. A request that times out is abandoned
//! (its late answer is dropped) and the connection stays usable.

use super::config::{ClientConfig, SaslMechanism};
use super::error::ClientError;
use super::{sasl, tls};
use crate::errors::ErrorCode;
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Message, Request, StrBytes};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpSocket;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// Largest response accepted (a fetch of many partitions is large, a garbage length is larger).
const MAX_RESPONSE_BYTES: usize = 512 << 20;
const API_VERSIONS_KEY: i16 = 18;

trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

type Reply = oneshot::Sender<Result<Bytes, ClientError>>;

struct Outgoing {
    correlation_id: i32,
    frame: Vec<u8>,
    reply: Reply,
}

/// A connection to one broker.
pub struct Connection {
    broker: String,
    sender: mpsc::Sender<Outgoing>,
    alive: Arc<AtomicBool>,
    versions: HashMap<i16, (i16, i16)>,
    next_correlation: AtomicI32,
    client_id: StrBytes,
    request_timeout: Duration,
    /// The quickest round trip (µs) of the requests answered: the handshake's ApiVersions,
    /// then every request since.
    quickest_round_trip_us: AtomicU64,
    reader: JoinHandle<()>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("broker", &self.broker)
            .field("alive", &self.is_alive())
            .finish()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

fn frame<R: Encodable + HeaderVersion>(
    api_key: i16,
    version: i16,
    correlation_id: i32,
    client_id: &StrBytes,
    request: &R,
) -> Result<Vec<u8>, ClientError> {
    let header = RequestHeader::default()
        .with_request_api_key(api_key)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(client_id.clone()));
    let mut body = BytesMut::new();
    let bad = |e: anyhow::Error| {
        ClientError::Config(format!("cannot encode request {api_key} v{version}: {e}"))
    };
    header
        .encode(&mut body, R::header_version(version))
        .map_err(bad)?;
    request.encode(&mut body, version).map_err(bad)?;
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&(body.len() as i32).to_be_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

fn decode<R: Decodable + HeaderVersion>(
    broker: &str,
    api: &'static str,
    version: i16,
    correlation_id: i32,
    mut payload: Bytes,
) -> Result<R, ClientError> {
    let protocol = |message: String| ClientError::Protocol {
        broker: broker.to_string(),
        api,
        message,
    };
    let header = ResponseHeader::decode(&mut payload, R::header_version(version))
        .map_err(|e| protocol(e.to_string()))?;
    if header.correlation_id != correlation_id {
        return Err(protocol(format!(
            "correlation id {} answers request {correlation_id}",
            header.correlation_id
        )));
    }
    R::decode(&mut payload, version).map_err(|e| protocol(e.to_string()))
}

async fn read_frame(stream: &mut (impl AsyncRead + Unpin)) -> std::io::Result<Bytes> {
    let len = stream.read_i32().await?;
    let len = usize::try_from(len)
        .ok()
        .filter(|l| *l <= MAX_RESPONSE_BYTES)
        .ok_or_else(|| std::io::Error::other(format!("response size {len} out of range")))?;
    crate::frame::read_body(stream, len).await
}

/// One request and its answer on a stream that has no tasks yet (the handshake).
async fn roundtrip<R>(
    stream: &mut Box<dyn Io>,
    broker: &str,
    api: &'static str,
    version: i16,
    client_id: &StrBytes,
    request: &R,
) -> Result<R::Response, ClientError>
where
    R: Request,
{
    let correlation_id = 0;
    let bytes = frame(R::KEY, version, correlation_id, client_id, request)?;
    let io = |e: std::io::Error| ClientError::Connection {
        broker: broker.to_string(),
        message: e.to_string(),
    };
    stream.write_all(&bytes).await.map_err(io)?;
    let payload = read_frame(stream).await.map_err(io)?;
    decode::<R::Response>(broker, api, version, correlation_id, payload)
}

impl Connection {
    /// Connects to `broker` (`host:port`), negotiates API versions and authenticates.
    pub async fn connect(
        broker: &str,
        config: &ClientConfig,
        tls_config: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Connection, ClientError> {
        let broker_name = broker.to_string();
        match tokio::time::timeout(
            config.connect_timeout,
            Connection::handshake(broker, config, tls_config),
        )
        .await
        {
            Ok(result) => result,
            Err(_) => Err(ClientError::Timeout {
                broker: broker_name,
                api: "connect",
                timeout_ms: config.connect_timeout.as_millis() as u64,
            }),
        }
    }

    async fn handshake(
        broker: &str,
        config: &ClientConfig,
        tls_config: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Connection, ClientError> {
        let connection_error = |message: String| ClientError::Connection {
            broker: broker.to_string(),
            message,
        };
        let address = tokio::net::lookup_host(broker)
            .await
            .map_err(|e| connection_error(e.to_string()))?
            .next()
            .ok_or_else(|| connection_error("no address".into()))?;
        let socket = if address.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        }
        .map_err(|e| connection_error(e.to_string()))?;
        if let Some(bytes) = config.socket_receive_buffer_bytes {
            socket
                .set_recv_buffer_size(bytes)
                .map_err(|e| connection_error(e.to_string()))?;
        }
        let tcp = socket
            .connect(address)
            .await
            .map_err(|e| connection_error(e.to_string()))?;
        tcp.set_nodelay(true)
            .map_err(|e| connection_error(e.to_string()))?;
        let tls_config_used = tls_config.is_some();
        // An https:// OAUTHBEARER token endpoint is trusted as the source is.
        let tls_for_token = tls_config.clone();
        let mut stream: Box<dyn Io> = match tls_config {
            None => Box::new(tcp),
            Some(tls_config) => {
                let host = broker.rsplit_once(':').map_or(broker, |(h, _)| h);
                let name = tls::server_name(host)?;
                let connector = tokio_rustls::TlsConnector::from(tls_config);
                let stream = connector
                    .connect(name, tcp)
                    .await
                    .map_err(|e| ClientError::Tls {
                        broker: broker.to_string(),
                        message: tls::explain(&e.to_string(), config.keystore.is_some()),
                    })?;
                Box::new(stream)
            }
        };
        let client_id = StrBytes::from_string(config.client_id.clone());
        // With TLS 1.3 the source judges the client certificate after the handshake: its
        // refusal arrives as an alert on the first read.
        let asked = std::time::Instant::now();
        let versions = Connection::api_versions(&mut stream, broker, &client_id)
            .await
            .map_err(|e| match e {
                ClientError::Connection { broker, message }
                    if tls_config_used && message.contains("alert") =>
                {
                    ClientError::Tls {
                        message: tls::explain(&message, config.keystore.is_some()),
                        broker,
                    }
                }
                other => other,
            })?;
        let handshake_round_trip = asked.elapsed();
        if let Some(sasl) = &config.sasl {
            Connection::authenticate(
                &mut stream,
                broker,
                &client_id,
                &versions,
                sasl,
                tls_for_token,
            )
            .await?;
        }

        let alive = Arc::new(AtomicBool::new(true));
        let pending: Arc<Mutex<VecDeque<(i32, Reply)>>> = Arc::new(Mutex::new(VecDeque::new()));
        let (mut read_half, mut write_half) = tokio::io::split(stream);
        let (sender, mut receiver) = mpsc::channel::<Outgoing>(64);
        let fail_all = {
            let pending = pending.clone();
            let alive = alive.clone();
            let broker = broker.to_string();
            move |message: String| {
                alive.store(false, Ordering::SeqCst);
                let drained: Vec<(i32, Reply)> = pending
                    .lock()
                    .map(|mut p| p.drain(..).collect())
                    .unwrap_or_default();
                for (_, reply) in drained {
                    let _ = reply.send(Err(ClientError::Connection {
                        broker: broker.clone(),
                        message: message.clone(),
                    }));
                }
            }
        };
        {
            let pending = pending.clone();
            let fail_all = fail_all.clone();
            let alive = alive.clone();
            tokio::spawn(async move {
                while let Some(out) = receiver.recv().await {
                    if let Ok(mut p) = pending.lock() {
                        p.push_back((out.correlation_id, out.reply));
                    }
                    // The reader is gone (the broker closed the connection): nothing would
                    // answer this request, which would wait its whole timeout. Checked after
                    // the push, so a reader ending meanwhile fails it too.
                    if !alive.load(Ordering::SeqCst) {
                        fail_all("connection closed by the broker".into());
                        continue;
                    }
                    if let Err(e) = write_half.write_all(&out.frame).await {
                        fail_all(e.to_string());
                        return;
                    }
                }
                let _ = write_half.shutdown().await;
            });
        }
        let reader = tokio::spawn(async move {
            loop {
                match read_frame(&mut read_half).await {
                    Ok(payload) => {
                        let next = pending.lock().ok().and_then(|mut p| p.pop_front());
                        if let Some((_, reply)) = next {
                            let _ = reply.send(Ok(payload));
                        }
                    }
                    Err(e) => {
                        fail_all(e.to_string());
                        return;
                    }
                }
            }
        });
        Ok(Connection {
            broker: broker.to_string(),
            sender,
            alive,
            versions,
            next_correlation: AtomicI32::new(1),
            client_id,
            request_timeout: config.request_timeout,
            quickest_round_trip_us: AtomicU64::new(micros(handshake_round_trip)),
            reader,
        })
    }

    /// ApiVersions: the newest version we send is 3; an older broker answers UNSUPPORTED_VERSION
    /// in the v0 format with its own ranges, which is all we need.
    async fn api_versions(
        stream: &mut Box<dyn Io>,
        broker: &str,
        client_id: &StrBytes,
    ) -> Result<HashMap<i16, (i16, i16)>, ClientError> {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("kmirror"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let correlation_id = 0;
        let bytes = frame(API_VERSIONS_KEY, 3, correlation_id, client_id, &request)?;
        let io = |e: std::io::Error| ClientError::Connection {
            broker: broker.to_string(),
            message: e.to_string(),
        };
        stream.write_all(&bytes).await.map_err(io)?;
        let payload = read_frame(stream).await.map_err(io)?;
        // The ApiVersions response header is v0 at every version; try v3, then the v0 fallback.
        let response = decode::<ApiVersionsResponse>(
            broker,
            "ApiVersions",
            3,
            correlation_id,
            payload.clone(),
        )
        .or_else(|_| {
            decode::<ApiVersionsResponse>(broker, "ApiVersions", 0, correlation_id, payload)
        })?;
        if response.error_code != 0 && response.api_keys.is_empty() {
            return Err(ClientError::Broker {
                api: "ApiVersions",
                code: ErrorCode(response.error_code),
            });
        }
        Ok(response
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect())
    }

    async fn authenticate(
        stream: &mut Box<dyn Io>,
        broker: &str,
        client_id: &StrBytes,
        versions: &HashMap<i16, (i16, i16)>,
        sasl: &super::config::SaslConfig,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<(), ClientError> {
        let auth_error = |message: String| ClientError::Authentication {
            broker: broker.to_string(),
            message,
        };
        // A listener that serves no SaslHandshake or SaslAuthenticate has no SASL: the
        // credentials cannot be checked there, which is this connection's authentication
        // failing, not a feature the broker lacks.
        let pick = |key: i16, ours: (i16, i16), api: &str| -> Result<i16, ClientError> {
            pick_version(versions, key, ours).ok_or_else(|| {
                auth_error(format!(
                    "this listener has no SASL (the broker serves no {api}): connect to its SASL \
                     listener, or use a security.protocol without SASL"
                ))
            })
        };
        let handshake_version = pick(17, (1, 1), "SaslHandshake v1")?;
        let response: SaslHandshakeResponse = roundtrip(
            stream,
            broker,
            "SaslHandshake",
            handshake_version,
            client_id,
            &SaslHandshakeRequest::default()
                .with_mechanism(StrBytes::from_static_str(sasl.mechanism.name())),
        )
        .await?;
        if response.error_code != 0 {
            let enabled: Vec<&str> = response.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(auth_error(format!(
                "mechanism {} is not enabled (the broker offers {enabled:?})",
                sasl.mechanism.name()
            )));
        }
        let version = pick(36, (1, 2), "SaslAuthenticate v1 or v2")?;
        match sasl.mechanism {
            SaslMechanism::Plain => {
                let token = sasl::plain(&sasl.username, &sasl.password);
                sasl_round(stream, broker, client_id, version, token).await?;
            }
            SaslMechanism::OAuthBearer => {
                let source = sasl
                    .oauthbearer
                    .as_ref()
                    .ok_or_else(|| auth_error("OAUTHBEARER without a token source".into()))?;
                let now_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as i64);
                let token = source.token(now_ms, tls).await?;
                let initial = super::oauthbearer::initial_response(&token);
                let challenge = sasl_round(stream, broker, client_id, version, initial).await?;
                if !challenge.is_empty() {
                    // RFC 7628: the server's error JSON, which the client acknowledges with a
                    // lone 0x01 before the server fails the authentication.
                    let reason = String::from_utf8_lossy(&challenge).into_owned();
                    let _ = sasl_round(stream, broker, client_id, version, vec![1]).await;
                    return Err(auth_error(format!(
                        "the source refused the token: {reason}"
                    )));
                }
            }
            SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => {
                let mut scram = sasl::Scram::new(sasl.mechanism, &sasl.username, &sasl.password);
                let server_first =
                    sasl_round(stream, broker, client_id, version, scram.client_first()).await?;
                let client_final = scram.client_final(&server_first).map_err(auth_error)?;
                let server_final =
                    sasl_round(stream, broker, client_id, version, client_final).await?;
                scram
                    .verify_server_final(&server_final)
                    .map_err(auth_error)?;
            }
        }
        Ok(())
    }

    /// The broker's address.
    pub fn broker(&self) -> &str {
        &self.broker
    }

    /// The quickest round trip of the requests answered on this connection (its handshake's
    /// ApiVersions, then every request since): the distance to the broker. No answer comes
    /// quicker; one can come late (a Fetch the broker held, a busy broker), which overstates
    /// it only while it is the one sample.
    pub fn quickest_round_trip(&self) -> Duration {
        Duration::from_micros(self.quickest_round_trip_us.load(Ordering::Relaxed))
    }

    /// Whether the socket still works.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst) && !self.sender.is_closed()
    }

    /// The newest version both sides speak of `R`, if any.
    pub fn version_of<R: Request>(&self) -> Option<i16> {
        pick_version(&self.versions, R::KEY, (R::VERSIONS.min, R::VERSIONS.max))
    }

    /// Sends `request` at the newest common version (capped at `max_version`) and waits for
    /// the answer.
    pub async fn send<R: Request>(
        &self,
        api: &'static str,
        request: &R,
        max_version: i16,
    ) -> Result<(i16, R::Response), ClientError> {
        let ours = (
            <R as Message>::VERSIONS.min,
            max_version.min(<R as Message>::VERSIONS.max),
        );
        let version = pick_version(&self.versions, R::KEY, ours).ok_or_else(|| {
            ClientError::UnsupportedVersion {
                broker: self.broker.clone(),
                api,
            }
        })?;
        let correlation_id = self.next_correlation.fetch_add(1, Ordering::SeqCst);
        let bytes = frame(R::KEY, version, correlation_id, &self.client_id, request)?;
        let (reply, answer) = oneshot::channel();
        let closed = || ClientError::Connection {
            broker: self.broker.clone(),
            message: "connection closed".into(),
        };
        if !self.is_alive() {
            return Err(closed());
        }
        let asked = std::time::Instant::now();
        self.sender
            .send(Outgoing {
                correlation_id,
                frame: bytes,
                reply,
            })
            .await
            .map_err(|_| closed())?;
        let payload = match tokio::time::timeout(self.request_timeout, answer).await {
            Ok(Ok(result)) => result?,
            Ok(Err(_)) => return Err(closed()),
            Err(_) => {
                return Err(ClientError::Timeout {
                    broker: self.broker.clone(),
                    api,
                    timeout_ms: self.request_timeout.as_millis() as u64,
                });
            }
        };
        // No answer comes quicker than the distance: a late one (a Fetch held at the broker, a
        // busy broker) only leaves the quickest as it was.
        self.quickest_round_trip_us
            .fetch_min(micros(asked.elapsed()), Ordering::Relaxed);
        let response = decode::<R::Response>(&self.broker, api, version, correlation_id, payload)?;
        Ok((version, response))
    }
}

fn micros(took: Duration) -> u64 {
    u64::try_from(took.as_micros()).unwrap_or(u64::MAX)
}

/// One SaslAuthenticate round trip.
async fn sasl_round(
    stream: &mut Box<dyn Io>,
    broker: &str,
    client_id: &StrBytes,
    version: i16,
    token: Vec<u8>,
) -> Result<Bytes, ClientError> {
    let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
    let response: SaslAuthenticateResponse = roundtrip(
        stream,
        broker,
        "SaslAuthenticate",
        version,
        client_id,
        &request,
    )
    .await?;
    if response.error_code != 0 {
        let message = response
            .error_message
            .map(|m| m.to_string())
            .unwrap_or_default();
        return Err(ClientError::Authentication {
            broker: broker.to_string(),
            message: format!("{} {message}", ErrorCode(response.error_code).name()),
        });
    }
    Ok(response.auth_bytes)
}

fn pick_version(versions: &HashMap<i16, (i16, i16)>, key: i16, ours: (i16, i16)) -> Option<i16> {
    let (min, max) = *versions.get(&key)?;
    let version = max.min(ours.1);
    (version >= min.max(ours.0)).then_some(version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Buf, BufMut};

    #[test]
    fn versions_are_the_newest_common_one() {
        let versions: HashMap<i16, (i16, i16)> = [(1, (4, 17)), (3, (0, 12))].into_iter().collect();
        assert_eq!(pick_version(&versions, 1, (4, 16)), Some(16));
        assert_eq!(pick_version(&versions, 1, (0, 3)), None);
        assert_eq!(pick_version(&versions, 3, (10, 13)), Some(12));
        assert_eq!(pick_version(&versions, 97, (0, 0)), None);
    }

    /// A late first answer (a broker busy as the connection opened) does not stay the
    /// connection's distance: the next answer, at once, is.
    #[tokio::test]
    async fn the_quickest_round_trip_is_kept() {
        use kafka_protocol::messages::api_versions_response::ApiVersion;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bound");
        let address = listener.local_addr().expect("address").to_string();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.expect("accepted");
            let mut late = Duration::from_millis(150);
            while let Ok(mut request) = read_frame(&mut stream).await {
                request.advance(4);
                let correlation_id = request.get_i32();
                tokio::time::sleep(std::mem::take(&mut late)).await;
                let answer = ApiVersionsResponse::default().with_api_keys(vec![
                    ApiVersion::default()
                        .with_api_key(API_VERSIONS_KEY)
                        .with_max_version(3),
                ]);
                let mut body = BytesMut::new();
                body.put_i32(correlation_id);
                answer.encode(&mut body, 3).expect("encodes");
                let mut framed = BytesMut::new();
                framed.put_i32(i32::try_from(body.len()).expect("small"));
                framed.extend_from_slice(&body);
                stream.write_all(&framed).await.expect("written");
            }
        });
        let connection = Connection::connect(&address, &ClientConfig::plaintext(&address), None)
            .await
            .expect("connected");
        assert!(
            connection.quickest_round_trip() >= Duration::from_millis(150),
            "one sample, late: {:?}",
            connection.quickest_round_trip()
        );
        connection
            .send("ApiVersions", &ApiVersionsRequest::default(), 3)
            .await
            .expect("answered");
        assert!(
            connection.quickest_round_trip() < Duration::from_millis(100),
            "the quicker answer: {:?}",
            connection.quickest_round_trip()
        );
    }

    #[test]
    fn frames_carry_their_length() {
        let request = ApiVersionsRequest::default();
        let bytes = frame(18, 3, 7, &StrBytes::from_static_str("c"), &request).expect("encodes");
        assert_eq!(
            Bytes::from(bytes.clone()).get_i32() as usize,
            bytes.len() - 4
        );
    }
}
