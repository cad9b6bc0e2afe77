//! A proxy that makes a broker look older: it forwards every frame unchanged except
//! ApiVersions answers, where it lowers the newest version of the APIs it caps. Clients then
//! speak the old versions to the real broker behind it (which serves them), so the client's
//! paths for old brokers run against real Kafka.

use bytes::{Buf, BufMut, BytesMut};
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
use kafka_protocol::protocol::{Decodable, Encodable};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The proxy; it stops when dropped.
pub(crate) struct VersionCapProxy {
    task: tokio::task::JoinHandle<()>,
    seen: Arc<Mutex<HashMap<i16, i16>>>,
}

impl VersionCapProxy {
    /// Listens on `listen` and forwards to `upstream`, advertising at most `caps` (api key,
    /// newest version).
    pub(crate) async fn start(
        listen: &str,
        upstream: &str,
        caps: &[(ApiKey, i16)],
    ) -> VersionCapProxy {
        let listener = TcpListener::bind(listen)
            .await
            .unwrap_or_else(|e| panic!("the proxy cannot listen on {listen}: {e}"));
        let caps: Arc<Vec<(i16, i16)>> =
            Arc::new(caps.iter().map(|(k, v)| (*k as i16, *v)).collect());
        let seen = Arc::new(Mutex::new(HashMap::new()));
        let upstream = upstream.to_string();
        let task = {
            let seen = seen.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let Ok(server) = TcpStream::connect(&upstream).await else {
                        continue;
                    };
                    tokio::spawn(relay(client, server, caps.clone(), seen.clone()));
                }
            })
        };
        VersionCapProxy { task, seen }
    }

    /// The newest version of `api` a client sent through the proxy, if any.
    pub(crate) fn newest_sent(&self, api: ApiKey) -> Option<i16> {
        self.seen.lock().expect("seen").get(&(api as i16)).copied()
    }
}

impl Drop for VersionCapProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn read_frame(stream: &mut (impl AsyncReadExt + Unpin)) -> Option<BytesMut> {
    let size = stream.read_i32().await.ok()?;
    let mut body = BytesMut::zeroed(usize::try_from(size).ok()?);
    stream.read_exact(&mut body).await.ok()?;
    Some(body)
}

async fn relay(
    client: TcpStream,
    server: TcpStream,
    caps: Arc<Vec<(i16, i16)>>,
    seen: Arc<Mutex<HashMap<i16, i16>>>,
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    // ApiVersions requests in flight: correlation id -> version.
    let asked: Arc<Mutex<HashMap<i32, i16>>> = Arc::default();
    let requests = {
        let asked = asked.clone();
        async move {
            while let Some(frame) = read_frame(&mut client_read).await {
                let mut header = &frame[..];
                let (key, version, correlation) =
                    (header.get_i16(), header.get_i16(), header.get_i32());
                {
                    let mut seen = seen.lock().expect("seen");
                    let newest = seen.entry(key).or_insert(version);
                    *newest = (*newest).max(version);
                }
                if key == ApiKey::ApiVersions as i16 {
                    asked.lock().expect("asked").insert(correlation, version);
                }
                let mut out = BytesMut::with_capacity(frame.len() + 4);
                out.put_i32(frame.len() as i32);
                out.put_slice(&frame);
                if server_write.write_all(&out).await.is_err() {
                    break;
                }
            }
        }
    };
    let responses = async move {
        while let Some(mut frame) = read_frame(&mut server_read).await {
            let correlation = (&frame[..]).get_i32();
            let version = asked.lock().expect("asked").remove(&correlation);
            if let Some(version) = version {
                // ApiVersions answers always have header v0: the correlation id alone.
                let mut body = frame.split_off(4).freeze();
                let mut response =
                    ApiVersionsResponse::decode(&mut body, version).expect("an ApiVersions answer");
                for api in &mut response.api_keys {
                    if let Some((_, cap)) = caps.iter().find(|(k, _)| *k == api.api_key) {
                        api.max_version = api.max_version.min(*cap);
                    }
                }
                response
                    .encode(&mut frame, version)
                    .expect("ApiVersions encodes");
            }
            let mut out = BytesMut::with_capacity(frame.len() + 4);
            out.put_i32(frame.len() as i32);
            out.put_slice(&frame);
            if client_write.write_all(&out).await.is_err() {
                break;
            }
        }
    };
    tokio::select! {
        () = requests => {}
        () = responses => {}
    }
}
