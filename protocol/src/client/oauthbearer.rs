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
