//! SASL/OAUTHBEARER tokens (RFC 7628), as Kafka's `OAuthBearerLoginModule` obtains them:
//! from an OAuth 2 token endpoint with the client-credentials grant
//! (`sasl.oauthbearer.token.endpoint.url` with `clientId`, `clientSecret` and `scope` in
//! `sasl.jaas.config`), or, without an endpoint, an unsecured JWT (`alg` none) naming
//! `unsecuredLoginStringClaim_sub`, which only a broker using Kafka's unsecured validator
//! accepts (development setups).
//!
//! A token is asked for each time a connection authenticates, so a rotated secret or an
//! expired token never outlives a connection attempt. Secrets never appear in `Debug` or
//! errors.

use super::error::ClientError;
use base64::Engine;
use std::fmt;

/// Where OAUTHBEARER tokens come from.
#[derive(Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// An unsecured JWT for `principal`, valid `lifetime_seconds`.
    Unsecured {
        /// The `sub` claim.
        principal: String,
        /// The token's lifetime.
        lifetime_seconds: i64,
        /// The `scope` claim, if any.
        scope: Option<String>,
    },
    /// The client-credentials grant at `endpoint` (`http://` or `https://`).
    ClientCredentials {
        /// The token endpoint URL.
        endpoint: String,
        /// The client id.
        client_id: String,
        /// The client secret (never printed).
        client_secret: String,
        /// The scope asked for, if any.
        scope: Option<String>,
    },
}

impl fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenSource::Unsecured { principal, .. } => f
                .debug_struct("Unsecured")
                .field("principal", principal)
                .finish(),
            TokenSource::ClientCredentials {
                endpoint,
                client_id,
                ..
            } => f
                .debug_struct("ClientCredentials")
                .field("endpoint", endpoint)
                .field("client_id", client_id)
                .field("client_secret", &"[hidden]")
                .finish(),
        }
    }
}

fn base64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// An unsecured JWT (header `{"alg":"none"}`, empty signature) for `principal`, issued at
/// `now_ms`.
pub fn unsecured_jwt(
    principal: &str,
    scope: Option<&str>,
    now_ms: i64,
    lifetime_seconds: i64,
) -> String {
    let issued = now_ms / 1000;
    let mut claims = serde_json::json!({
        "sub": principal,
        "iat": issued,
        "exp": issued + lifetime_seconds,
    });
    if let Some(scope) = scope {
        claims["scope"] = serde_json::Value::from(scope);
    }
    format!(
        "{}.{}.",
        base64url(br#"{"alg":"none"}"#),
        base64url(claims.to_string().as_bytes())
    )
}

/// The SASL/OAUTHBEARER initial client response carrying `token` (RFC 7628 section 3.1, no
/// authorization identity, no extensions).
pub fn initial_response(token: &str) -> Vec<u8> {
    format!("n,,\u{1}auth=Bearer {token}\u{1}\u{1}").into_bytes()
}

/// The `access_token` of a token endpoint's JSON answer `body`.
pub fn access_token(body: &[u8]) -> Result<String, ClientError> {
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
        ClientError::Config(format!(
            "sasl.oauthbearer.token.endpoint.url answered no JSON ({e})"
        ))
    })?;
    if let Some(token) = value.get("access_token").and_then(|t| t.as_str()) {
        return Ok(token.to_string());
    }
    let error = value
        .get("error_description")
        .or_else(|| value.get("error"))
        .and_then(|e| e.as_str())
        .unwrap_or("no access_token in its answer");
    Err(ClientError::Config(format!(
        "sasl.oauthbearer.token.endpoint.url refused the client credentials: {error}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unsecured_jwt_names_its_principal_and_lifetime() {
        let token = unsecured_jwt("alice", Some("kafka"), 1_700_000_000_123, 3600);
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[2], "", "no signature");
        let decode = |p: &str| {
            let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(p)
                .expect("base64url");
            serde_json::from_slice::<serde_json::Value>(&bytes).expect("JSON")
        };
        assert_eq!(decode(parts[0])["alg"], "none");
        let claims = decode(parts[1]);
        assert_eq!(claims["sub"], "alice");
        assert_eq!(claims["iat"], 1_700_000_000);
        assert_eq!(claims["exp"], 1_700_003_600);
        assert_eq!(claims["scope"], "kafka");
    }

    #[test]
    fn the_initial_response_follows_rfc_7628() {
        assert_eq!(
            initial_response("abc"),
            b"n,,\x01auth=Bearer abc\x01\x01".to_vec()
        );
    }

    #[test]
    fn token_endpoint_answers_are_read_or_explained() {
        assert_eq!(
            access_token(br#"{"access_token":"t0k","token_type":"Bearer","expires_in":300}"#)
                .expect("a token"),
            "t0k"
        );
        let refused = access_token(br#"{"error":"invalid_client"}"#)
            .expect_err("refused")
            .to_string();
        assert!(refused.contains("invalid_client"), "{refused}");
        assert!(access_token(b"<html>").is_err());
    }
}

/// The parts of an `http://` or `https://` URL a token request needs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Endpoint {
    tls: bool,
    host: String,
    port: u16,
    path: String,
}

fn endpoint(url: &str) -> Result<Endpoint, ClientError> {
    let bad = || {
        ClientError::Config(format!(
            "sasl.oauthbearer.token.endpoint.url {url} is not an http:// or https:// URL"
        ))
    };
    let (tls, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (true, rest)
    } else if let Some(rest) = url.strip_prefix("http://") {
        (false, rest)
    } else {
        return Err(bad());
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) => (host, port.parse().map_err(|_| bad())?),
        None => (authority, if tls { 443 } else { 80 }),
    };
    if host.is_empty() {
        return Err(bad());
    }
    Ok(Endpoint {
        tls,
        host: host.to_string(),
        port,
        path: if path.is_empty() {
            "/".into()
        } else {
            path.into()
        },
    })
}

/// `application/x-www-form-urlencoded` escaping.
fn form(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            b' ' => "+".into(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

impl TokenSource {
    /// A token now: made locally (unsecured), or asked of the token endpoint (HTTPS trusts
    /// `tls`, the mirror's truststore).
    pub async fn token(
        &self,
        now_ms: i64,
        tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    ) -> Result<String, ClientError> {
        match self {
            TokenSource::Unsecured {
                principal,
                lifetime_seconds,
                scope,
            } => Ok(unsecured_jwt(
                principal,
                scope.as_deref(),
                now_ms,
                *lifetime_seconds,
            )),
            TokenSource::ClientCredentials {
                endpoint: url,
                client_id,
                client_secret,
                scope,
            } => {
                let target = endpoint(url)?;
                let mut body = "grant_type=client_credentials".to_string();
                if let Some(scope) = scope {
                    body.push_str(&format!("&scope={}", form(scope)));
                }
                let basic = base64::engine::general_purpose::STANDARD.encode(format!(
                    "{}:{}",
                    form(client_id),
                    form(client_secret)
                ));
                let request = format!(
                    "POST {} HTTP/1.1\r\nHost: {}\r\nAuthorization: Basic {basic}\r\n\
                     Content-Type: application/x-www-form-urlencoded\r\nAccept: application/json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    target.path,
                    target.host,
                    body.len()
                );
                let answer = post(&target, request.as_bytes(), tls).await.map_err(|e| {
                    ClientError::Config(format!(
                        "sasl.oauthbearer.token.endpoint.url {url} could not be asked: {e}"
                    ))
                })?;
                let split = answer
                    .windows(4)
                    .position(|w| w == b"\r\n\r\n")
                    .ok_or_else(|| {
                        ClientError::Config(format!(
                            "sasl.oauthbearer.token.endpoint.url {url} answered no HTTP response"
                        ))
                    })?;
                access_token(&answer[split + 4..])
            }
        }
    }
}

/// Sends `request` to `target` and reads the whole answer (the request asks the server to
/// close the connection after it).
async fn post(
    target: &Endpoint,
    request: &[u8],
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
) -> std::io::Result<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let tcp = tokio::net::TcpStream::connect((target.host.as_str(), target.port)).await?;
    let mut answer = Vec::new();
    if target.tls {
        let config = tls.ok_or_else(|| {
            std::io::Error::other("an https:// token endpoint needs the mirror's truststore")
        })?;
        let name = super::tls::server_name(&target.host)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let mut stream = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await?;
        stream.write_all(request).await?;
        stream.read_to_end(&mut answer).await?;
    } else {
        let mut stream = tcp;
        stream.write_all(request).await?;
        stream.read_to_end(&mut answer).await?;
    }
    Ok(answer)
}

#[cfg(test)]
mod endpoint_tests {
    use super::*;

    #[test]
    fn endpoints_are_read_from_http_and_https_urls() {
        assert_eq!(
            endpoint("https://idp.example:8443/oauth2/token").expect("valid"),
            Endpoint {
                tls: true,
                host: "idp.example".into(),
                port: 8443,
                path: "/oauth2/token".into()
            }
        );
        assert_eq!(endpoint("http://127.0.0.1").expect("valid").port, 80);
        assert!(endpoint("ftp://x/y").is_err());
        assert_eq!(form("a b&c"), "a+b%26c");
    }

    /// A token endpoint on loopback answers the client-credentials grant.
    #[tokio::test]
    async fn the_client_credentials_grant_is_asked_of_the_endpoint() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binds");
        let port = listener.local_addr().expect("address").port();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accepts");
            let mut request = vec![0; 4096];
            let n = socket.read(&mut request).await.expect("reads");
            let body = r#"{"access_token":"granted","token_type":"Bearer"}"#;
            let answer = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            socket.write_all(answer.as_bytes()).await.expect("writes");
            String::from_utf8_lossy(&request[..n]).into_owned()
        });
        let source = TokenSource::ClientCredentials {
            endpoint: format!("http://127.0.0.1:{port}/token"),
            client_id: "mirror".into(),
            client_secret: "s3cret".into(),
            scope: Some("kafka".into()),
        };
        assert_eq!(source.token(0, None).await.expect("a token"), "granted");
        let request = server.await.expect("served");
        assert!(request.starts_with("POST /token HTTP/1.1"), "{request}");
        assert!(
            request.contains("grant_type=client_credentials&scope=kafka"),
            "{request}"
        );
        let basic = base64::engine::general_purpose::STANDARD.encode("mirror:s3cret");
        assert!(
            request.contains(&format!("Authorization: Basic {basic}")),
            "{request}"
        );
        assert!(!format!("{source:?}").contains("s3cret"));
    }
}
