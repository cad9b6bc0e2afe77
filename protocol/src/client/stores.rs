//! Trust and key material for TLS to the source, read the way Kafka's clients read their
//! `ssl.truststore.*` and `ssl.keystore.*` keys.
//!
//! A store is PEM or PKCS12 (`ssl.truststore.type`, `ssl.keystore.type`; JKS is refused with
//! the keytool command that converts it). Without a type, a file is PEM when it is PEM text and
//! PKCS12 otherwise. PEM material may also be given inline (`ssl.truststore.certificates`,
//! `ssl.keystore.certificate.chain` with `ssl.keystore.key`). A PEM private key may be PKCS#8
//! encrypted with `ssl.key.password`; a PKCS12 keystore opens with `ssl.keystore.password`.
//! Stores are read when a client is built, so a changed file or password takes effect with the
//! next client (a mirror's AlterConfigs rebuilds it). Errors name the key and the file, never a
//! password.

use super::error::ClientError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::fmt;
use std::path::PathBuf;

/// A store's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreType {
    /// PEM text.
    Pem,
    /// PKCS#12 (what Java's keytool writes by default).
    Pkcs12,
}

impl StoreType {
    /// Reads `ssl.truststore.type` / `ssl.keystore.type` (named `key` in errors).
    pub fn parse(key: &str, value: &str) -> Result<StoreType, ClientError> {
        match value.to_ascii_uppercase().as_str() {
            "PEM" => Ok(StoreType::Pem),
            "PKCS12" | "P12" | "PFX" => Ok(StoreType::Pkcs12),
            "JKS" => Err(ClientError::Config(format!(
                "{key}=JKS is not supported; convert the store to PKCS12 with `keytool \
                 -importkeystore -srckeystore STORE.jks -destkeystore STORE.p12 -deststoretype \
                 PKCS12` and set {key}=PKCS12"
            ))),
            other => Err(ClientError::Config(format!(
                "{key}={other} is not a store type kmirror reads (PEM or PKCS12)"
            ))),
        }
    }
}

/// A secret that never prints.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Password(pub String);

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[hidden]")
    }
}

/// Where a store's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSource {
    /// A file (`*.location`).
    File(PathBuf),
    /// PEM text given in the config itself.
    Inline(String),
}

/// The CA certificates the source's certificates must chain to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truststore {
    /// The certificates.
    pub source: StoreSource,
    /// `ssl.truststore.type`, if given.
    pub store_type: Option<StoreType>,
    /// `ssl.truststore.password` (PKCS12 only).
    pub password: Option<Password>,
}

/// The client certificate chain and private key for mutual TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keystore {
    /// A store file (`ssl.keystore.location`).
    File {
        /// The file.
        path: PathBuf,
        /// `ssl.keystore.type`, if given.
        store_type: Option<StoreType>,
        /// `ssl.keystore.password`.
        password: Option<Password>,
        /// `ssl.key.password` (an encrypted PEM key's password).
        key_password: Option<Password>,
    },
    /// `ssl.keystore.certificate.chain` and `ssl.keystore.key` (PEM text).
    Inline {
        /// The chain, leaf first.
        chain: String,
        /// The private key.
        key: Password,
        /// `ssl.key.password`.
        key_password: Option<Password>,
    },
}

/// The bytes of `source`, and how to name it in errors.
fn read(key: &str, source: &StoreSource) -> Result<(Vec<u8>, String), ClientError> {
    match source {
        StoreSource::File(path) => {
            let named = format!("{key} {}", path.display());
            let bytes =
                std::fs::read(path).map_err(|e| ClientError::Config(format!("{named}: {e}")))?;
            Ok((bytes, named))
        }
        StoreSource::Inline(text) => Ok((text.clone().into_bytes(), key.to_string())),
    }
}

fn looks_like_pem(bytes: &[u8]) -> bool {
    bytes.windows(11).any(|w| w == b"-----BEGIN ")
}

fn pkcs12(
    bytes: &[u8],
    named: &str,
    password: Option<&Password>,
    password_key: &str,
) -> Result<p12_keystore::KeyStore, ClientError> {
    let password = password.map_or("", |p| p.0.as_str());
    p12_keystore::KeyStore::from_pkcs12(bytes, password, p12_keystore::Pkcs12ImportPolicy::Relaxed)
        .map_err(|e| {
            let hint = match e {
                // The store's MAC is keyed by its password: a wrong password fails it (or, for
                // stores without a MAC, the decryption's padding).
                p12_keystore::error::Error::MacError(_)
                | p12_keystore::error::Error::UnpadError => {
                    format!("the password ({password_key}) is wrong")
                }
                other => format!("not a PKCS12 store kmirror can open ({other})"),
            };
            ClientError::Config(format!("{named}: {hint}"))
        })
}

impl Truststore {
    /// The trusted certificates.
    pub fn certificates(&self) -> Result<Vec<CertificateDer<'static>>, ClientError> {
        let key = match self.source {
            StoreSource::File(_) => "ssl.truststore.location",
            StoreSource::Inline(_) => "ssl.truststore.certificates",
        };
        let (bytes, named) = read(key, &self.source)?;
        let store_type = self.store_type.unwrap_or(if looks_like_pem(&bytes) {
            StoreType::Pem
        } else {
            StoreType::Pkcs12
        });
        let certs = match store_type {
            StoreType::Pem => CertificateDer::pem_slice_iter(&bytes)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ClientError::Config(format!("{named}: {e}")))?,
            StoreType::Pkcs12 => {
                let store = pkcs12(
                    &bytes,
                    &named,
                    self.password.as_ref(),
                    "ssl.truststore.password",
                )?;
                store
                    .entries()
                    .filter_map(|(_, entry)| match entry {
                        p12_keystore::KeyStoreEntry::Certificate(c) => {
                            Some(CertificateDer::from(c.as_der().to_vec()))
                        }
                        _ => None,
                    })
                    .collect()
            }
        };
        if certs.is_empty() {
            return Err(ClientError::Config(format!(
                "{named}: no certificate in the store"
            )));
        }
        Ok(certs)
    }
}

/// A PEM private key: PKCS#8, PKCS#1 (RSA) or SEC1 (EC), or PKCS#8 encrypted with
/// `key_password`.
fn pem_key(
    text: &[u8],
    named: &str,
    key_password: Option<&Password>,
) -> Result<PrivateKeyDer<'static>, ClientError> {
    let bad = |what: String| ClientError::Config(format!("{named}: {what}"));
    if let Some(encrypted) = pem_block(text, "ENCRYPTED PRIVATE KEY") {
        let password = key_password.ok_or_else(|| {
            bad("the private key is encrypted; ssl.key.password is required".into())
        })?;
        let info = pkcs8::EncryptedPrivateKeyInfoRef::try_from(encrypted.as_slice())
            .map_err(|e| bad(format!("the encrypted private key does not parse ({e})")))?;
        let document = info.decrypt(password.0.as_bytes()).map_err(|_| {
            bad("the private key does not decrypt: ssl.key.password is wrong".into())
        })?;
        return Ok(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
            document.as_bytes().to_vec(),
        )));
    }
    PrivateKeyDer::from_pem_slice(text).map_err(|e| bad(format!("no private key ({e})")))
}

/// The DER contents of the first PEM block labelled `label`.
fn pem_block(text: &[u8], label: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    let text = std::str::from_utf8(text).ok()?;
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = text.find(&begin)? + begin.len();
    let stop = start + text[start..].find(&end)?;
    let body: String = text[start..stop]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    base64::engine::general_purpose::STANDARD.decode(body).ok()
}

impl Keystore {
    /// The client certificate chain (leaf first) and its private key.
    pub fn identity(
        &self,
    ) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), ClientError> {
        let (chain_bytes, key_bytes, named, store_type, password, key_password) = match self {
            Keystore::File {
                path,
                store_type,
                password,
                key_password,
            } => {
                let source = StoreSource::File(path.clone());
                let (bytes, named) = read("ssl.keystore.location", &source)?;
                let store_type = store_type.unwrap_or(if looks_like_pem(&bytes) {
                    StoreType::Pem
                } else {
                    StoreType::Pkcs12
                });
                (
                    bytes.clone(),
                    bytes,
                    named,
                    store_type,
                    password.as_ref(),
                    key_password.as_ref(),
                )
            }
            Keystore::Inline {
                chain,
                key,
                key_password,
            } => (
                chain.clone().into_bytes(),
                key.0.clone().into_bytes(),
                "ssl.keystore.certificate.chain / ssl.keystore.key".to_string(),
                StoreType::Pem,
                None,
                key_password.as_ref(),
            ),
        };
        match store_type {
            StoreType::Pem => {
                let chain = CertificateDer::pem_slice_iter(&chain_bytes)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| ClientError::Config(format!("{named}: {e}")))?;
                if chain.is_empty() {
                    return Err(ClientError::Config(format!(
                        "{named}: no client certificate"
                    )));
                }
                Ok((chain, pem_key(&key_bytes, &named, key_password)?))
            }
            StoreType::Pkcs12 => {
                // Kafka opens a PKCS12 keystore's key with ssl.key.password when given, else
                // with the store's password; the store format uses one password for both.
                let store = pkcs12(
                    &chain_bytes,
                    &named,
                    key_password.or(password),
                    "ssl.keystore.password",
                )?;
                let (_, keychain) = store.private_key_chain().ok_or_else(|| {
                    ClientError::Config(format!("{named}: no private key entry in the store"))
                })?;
                let chain = keychain
                    .certs()
                    .iter()
                    .map(|c| CertificateDer::from(c.as_der().to_vec()))
                    .collect();
                let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
                    keychain.key().as_der().to_vec(),
                ));
                Ok((chain, key))
            }
        }
    }
}
