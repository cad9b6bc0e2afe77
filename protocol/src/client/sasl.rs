//! SASL client mechanisms: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, RFC 7677), as pure
//! functions over the exchanged messages; the connection carries them in SaslHandshake and
//! SaslAuthenticate. Secrets never appear in errors.

use super::config::SaslMechanism;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

/// The single PLAIN message: `\0user\0password`.
pub fn plain(username: &str, password: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(username.len() + password.len() + 2);
    out.push(0);
    out.extend_from_slice(username.as_bytes());
    out.push(0);
    out.extend_from_slice(password.as_bytes());
    out
}

/// One SCRAM exchange, client side.
#[derive(Debug)]
pub struct Scram {
    mechanism: SaslMechanism,
    client_first_bare: String,
    nonce: String,
    password: String,
    expected_server_signature: Option<Vec<u8>>,
}

fn escape(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

/// The client proof and the expected server signature of one exchange, for one hash.
macro_rules! scram_proofs {
    ($name:ident, $hash:ty) => {
        fn $name(
            password: &str,
            salt: &[u8],
            iterations: u32,
            auth_message: &[u8],
        ) -> (Vec<u8>, Vec<u8>) {
            let hmac = |key: &[u8], data: &[u8]| -> Vec<u8> {
                let mut mac =
                    Hmac::<$hash>::new_from_slice(key).expect("HMAC takes keys of any length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            };
            let mut salted = vec![0u8; <$hash as Digest>::output_size()];
            pbkdf2::pbkdf2_hmac::<$hash>(password.as_bytes(), salt, iterations, &mut salted);
            let client_key = hmac(&salted, b"Client Key");
            let stored_key = <$hash>::digest(&client_key).to_vec();
            let client_signature = hmac(&stored_key, auth_message);
            let proof = client_key
                .iter()
                .zip(&client_signature)
                .map(|(a, b)| a ^ b)
                .collect();
            let server_key = hmac(&salted, b"Server Key");
            (proof, hmac(&server_key, auth_message))
        }
    };
}

scram_proofs!(proofs_sha256, Sha256);
scram_proofs!(proofs_sha512, Sha512);

impl Scram {
    /// Starts an exchange with a fresh random nonce.
    pub fn new(mechanism: SaslMechanism, username: &str, password: &str) -> Scram {
        let nonce: String = (0..24)
            .map(|_| {
                const CHARS: &[u8] =
                    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
                char::from(CHARS[rand::random::<usize>() % CHARS.len()])
            })
            .collect();
        Scram::with_nonce(mechanism, username, password, &nonce)
    }

    /// Starts an exchange with a given nonce (tests use the RFC's).
    pub fn with_nonce(
        mechanism: SaslMechanism,
        username: &str,
        password: &str,
        nonce: &str,
    ) -> Scram {
        Scram {
            mechanism,
            client_first_bare: format!("n={},r={nonce}", escape(username)),
            nonce: nonce.to_string(),
            password: password.to_string(),
            expected_server_signature: None,
        }
    }

    /// The client-first message.
    pub fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    /// Answers the server-first message with the client-final message.
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<Vec<u8>, String> {
        let server_first = std::str::from_utf8(server_first)
            .map_err(|_| "server-first is not UTF-8".to_string())?;
        let mut nonce = None;
        let mut salt = None;
        let mut iterations = None;
        for attribute in server_first.split(',') {
            match attribute.split_once('=') {
                Some(("r", v)) => nonce = Some(v),
                Some(("s", v)) => {
                    salt = Some(STANDARD.decode(v).map_err(|_| "bad salt".to_string())?)
                }
                Some(("i", v)) => {
                    iterations = Some(
                        v.parse::<u32>()
                            .map_err(|_| "bad iteration count".to_string())?,
                    )
                }
                Some(("e", v)) => return Err(format!("server error: {v}")),
                _ => {}
            }
        }
        let (nonce, salt, iterations) = match (nonce, salt, iterations) {
            (Some(n), Some(s), Some(i)) => (n, s, i),
            _ => return Err("server-first lacks r, s or i".into()),
        };
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err("server nonce does not extend the client nonce".into());
        }
        if iterations == 0 {
            return Err("iteration count is zero".into());
        }
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let (proof, server_signature) = match self.mechanism {
            SaslMechanism::ScramSha256 => {
                proofs_sha256(&self.password, &salt, iterations, auth_message.as_bytes())
            }
            SaslMechanism::ScramSha512 => {
                proofs_sha512(&self.password, &salt, iterations, auth_message.as_bytes())
            }
            SaslMechanism::Plain | SaslMechanism::OAuthBearer => {
                return Err(format!(
                    "{} is not a SCRAM mechanism",
                    self.mechanism.name()
                ));
            }
        };
        self.expected_server_signature = Some(server_signature);
        Ok(format!("{without_proof},p={}", STANDARD.encode(proof)).into_bytes())
    }

    /// Checks the server-final message: the server proved it knows the password too.
    pub fn verify_server_final(&self, server_final: &[u8]) -> Result<(), String> {
        let text = std::str::from_utf8(server_final)
            .map_err(|_| "server-final is not UTF-8".to_string())?;
        if let Some(error) = text.strip_prefix("e=") {
            return Err(format!("server error: {error}"));
        }
        let signature = text
            .strip_prefix("v=")
            .and_then(|v| {
                STANDARD
                    .decode(v.split(',').next().unwrap_or_default())
                    .ok()
            })
            .ok_or_else(|| "server-final lacks a signature".to_string())?;
        match &self.expected_server_signature {
            Some(expected) if *expected == signature => Ok(()),
            _ => Err("the server's signature does not match: it does not know the password".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677, section 3.
    #[test]
    fn scram_sha_256_rfc_7677_example() {
        let mut scram = Scram::with_nonce(
            SaslMechanism::ScramSha256,
            "user",
            "pencil",
            "rOprNGfwEbeRWgbNEkqO",
        );
        assert_eq!(scram.client_first(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let client_final = scram
            .client_final(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
            .expect("valid server-first");
        assert_eq!(
            String::from_utf8(client_final).expect("ascii"),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        assert_eq!(
            scram.verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
            Ok(())
        );
        assert!(scram.verify_server_final(b"v=AAAA").is_err());
        assert!(scram.verify_server_final(b"e=invalid-proof").is_err());
    }

    #[test]
    fn scram_rejects_a_server_that_does_not_extend_the_nonce() {
        let mut scram = Scram::with_nonce(SaslMechanism::ScramSha512, "a,b=c", "pw", "abc");
        assert_eq!(scram.client_first(), b"n,,n=a=2Cb=3Dc,r=abc");
        assert!(scram.client_final(b"r=xyz123,s=AAAA,i=4096").is_err());
        assert!(scram.client_final(b"r=abc,s=AAAA,i=4096").is_err());
        assert!(scram.client_final(b"e=unknown-user").is_err());
        assert!(scram.client_final(b"r=abcdef,s=AAAA,i=4096").is_ok());
    }

    #[test]
    fn plain_message() {
        assert_eq!(plain("alice", "pw"), b"\0alice\0pw");
    }
}
