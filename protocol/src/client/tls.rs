//! TLS for source connections: rustls with the ring provider, trusting only the CA certificates
//! of the truststore (`ssl.truststore.*`), presenting the keystore's certificate when one is
//! configured (mutual TLS, `ssl.keystore.*`). Host name verification is on unless
//! `ssl.endpoint.identification.algorithm` is empty, in which case the chain is still verified.

use super::error::ClientError;
use super::stores::{Keystore, Truststore};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::sync::Arc;

/// Builds the rustls client configuration.
pub fn client_config(
    truststore: &Truststore,
    keystore: Option<&Keystore>,
    verify_hostname: bool,
) -> Result<Arc<rustls::ClientConfig>, ClientError> {
    let mut roots = RootCertStore::empty();
    for cert in truststore.certificates()? {
        roots.add(cert).map_err(|e| {
            ClientError::Config(format!("a truststore certificate is not usable: {e}"))
        })?;
    }
    let identity = keystore.map(Keystore::identity).transpose()?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Config(e.to_string()))?;
    let roots = Arc::new(roots);
    let builder = if verify_hostname {
        builder.with_root_certificates(roots)
    } else {
        let inner = WebPkiServerVerifier::builder_with_provider(roots, provider)
            .build()
            .map_err(|e| ClientError::Config(e.to_string()))?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnly(inner)))
    };
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((chain, key)) => builder.with_client_auth_cert(chain, key).map_err(|e| {
            ClientError::Config(format!(
                "the keystore's certificate and private key do not make a client identity: {e}"
            ))
        })?,
    };
    Ok(Arc::new(config))
}

/// A TLS failure's message with what an operator can do about it: the source's alerts about
/// the client certificate name the keys that configure one (`has_keystore`: one was given).
pub fn explain(message: &str, has_keystore: bool) -> String {
    let about_client_certificate = [
        "CertificateRequired",
        "BadCertificate",
        "UnknownCA",
        "CertificateUnknown",
        "AccessDenied",
    ]
    .iter()
    .any(|alert| message.contains(alert));
    match (about_client_certificate, has_keystore) {
        (true, false) => format!(
            "{message}: the source requires a client certificate; set ssl.keystore.location \
             (or ssl.keystore.certificate.chain and ssl.keystore.key)"
        ),
        (true, true) => format!(
            "{message}: the source did not accept the keystore's client certificate (is it \
             signed by a CA the source trusts, and still valid?)"
        ),
        (false, _) => message.to_string(),
    }
}

/// The server name to verify for `host`.
pub fn server_name(host: &str) -> Result<ServerName<'static>, ClientError> {
    ServerName::try_from(host.to_string()).map_err(|e| ClientError::Config(format!("{host}: {e}")))
}

/// Verifies the certificate chain and signatures, not the name.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
