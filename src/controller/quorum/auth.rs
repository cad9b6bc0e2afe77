//! Authentication on the controller listener (docs/cluster.md). With
//! `controller.quorum.secret.file` set on every node, each connection starts with a mutual
//! challenge-response over the nodes' shared secret, before any quorum frame:
//!
//! 1. the connecting node sends a fresh random nonce ([`Handshake::Hello`]);
//! 2. the listening node answers with HMAC-SHA256(secret, "server" | that nonce | a fresh nonce
//!    of its own) and its nonce ([`Handshake::Challenge`]);
//! 3. the connecting node checks that proof and answers HMAC-SHA256(secret, "client" | the
//!    listener's nonce | its own nonce) ([`Handshake::Proof`]).
//!
//! Contract: a wrong or missing proof closes the connection before any request is read or
//! answered, so a process without the secret can neither write metadata, vote, join as a
//! learner, send heartbeats nor read the log; and a node never takes a log from a listener
//! without it. Fresh nonces on both sides make a recorded handshake useless. It authenticates
//! and does not encrypt: frames after the handshake travel in the clear, so the controller
//! listener belongs on a private network. A node configured without a secret skips the
//! handshake (and warns at start); it cannot talk to nodes that have one.

use super::frame::{read_frame_within, write_frame};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::path::Path;
use std::sync::Arc;
use tokio::net::TcpStream;

/// The fewest bytes a secret may have.
pub const MIN_SECRET_BYTES: usize = 16;

/// The nodes' shared secret (its bytes never printed).
#[derive(Clone, PartialEq, Eq)]
pub struct QuorumSecret(Arc<Vec<u8>>);

impl std::fmt::Debug for QuorumSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QuorumSecret(..)")
    }
}

impl QuorumSecret {
    /// The secret in `path`: its content without surrounding whitespace, at least
    /// [`MIN_SECRET_BYTES`] bytes; else why not.
    pub fn read(path: &Path) -> Result<QuorumSecret, String> {
        let raw =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let secret = raw.trim_ascii();
        if secret.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "{} holds {} bytes; a secret needs at least {MIN_SECRET_BYTES}",
                path.display(),
                secret.len()
            ));
        }
        Ok(QuorumSecret(Arc::new(secret.to_vec())))
    }

    #[cfg(test)]
    fn of(bytes: &[u8]) -> QuorumSecret {
        QuorumSecret(Arc::new(bytes.to_vec()))
    }

    fn mac(&self, role: &[u8], first: &[u8], second: &[u8]) -> Hmac<Sha256> {
        // HMAC takes a key of any length.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
        mac.update(role);
        mac.update(first);
        mac.update(second);
        mac
    }

    fn proof(&self, role: &[u8], first: &[u8], second: &[u8]) -> Vec<u8> {
        self.mac(role, first, second)
            .finalize()
            .into_bytes()
            .to_vec()
    }

    /// Whether `given` is the proof (compared in constant time).
    fn verify(&self, role: &[u8], first: &[u8], second: &[u8], given: &[u8]) -> bool {
        self.mac(role, first, second).verify_slice(given).is_ok()
    }
}

/// The handshake's frames.
#[derive(Debug, Serialize, Deserialize)]
enum Handshake {
    /// The connecting node's nonce.
    Hello { nonce: Vec<u8> },
    /// The listener's proof and nonce.
    Challenge { proof: Vec<u8>, nonce: Vec<u8> },
    /// The connecting node's proof.
    Proof { proof: Vec<u8> },
}

const SERVER: &[u8] = b"server";
const CLIENT: &[u8] = b"client";

fn refused(why: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::PermissionDenied, why.to_string())
}

/// The largest handshake frame (each holds two 32-byte values at most, as JSON arrays).
const MAX_HANDSHAKE_FRAME: usize = 1024;

async fn next(stream: &mut TcpStream) -> std::io::Result<Handshake> {
    match read_frame_within::<Handshake>(stream, MAX_HANDSHAKE_FRAME).await {
        Ok(Some(frame)) => Ok(frame),
        Ok(None) => Err(refused(
            "the other side closed the controller handshake (a node with another \
             controller.quorum.secret.file, or none?)",
        )),
        // Not a handshake frame: a node without a secret, or a stranger.
        Err(e) => Err(refused(&format!(
            "not a controller handshake ({e}): a node without controller.quorum.secret.file, \
             or not a node"
        ))),
    }
}

/// The connecting side: proves it knows the secret and checks that the listener does.
pub(super) async fn client_handshake(
    stream: &mut TcpStream,
    secret: &QuorumSecret,
) -> std::io::Result<()> {
    let mine: [u8; 32] = rand::random();
    write_frame(
        stream,
        &Handshake::Hello {
            nonce: mine.to_vec(),
        },
    )
    .await?;
    let Handshake::Challenge { proof, nonce } = next(stream).await? else {
        return Err(refused("the controller answered the handshake out of turn"));
    };
    if !secret.verify(SERVER, &mine, &nonce, &proof) {
        return Err(refused(
            "the controller proved another secret than this node's controller.quorum.secret.file",
        ));
    }
    let proof = secret.proof(CLIENT, &nonce, &mine);
    write_frame(stream, &Handshake::Proof { proof }).await
}

/// The listening side: checks that the connecting node knows the secret, proving it does too.
pub(super) async fn server_handshake(
    stream: &mut TcpStream,
    secret: &QuorumSecret,
) -> std::io::Result<()> {
    let Handshake::Hello { nonce: theirs } = next(stream).await? else {
        return Err(refused(
            "a controller connection did not start with the handshake",
        ));
    };
    let mine: [u8; 32] = rand::random();
    let proof = secret.proof(SERVER, &theirs, &mine);
    write_frame(
        stream,
        &Handshake::Challenge {
            proof,
            nonce: mine.to_vec(),
        },
    )
    .await?;
    let Handshake::Proof { proof } = next(stream).await? else {
        return Err(refused("the handshake's proof did not come"));
    };
    if secret.verify(CLIENT, &mine, &theirs, &proof) {
        Ok(())
    } else {
        Err(refused(
            "a controller connection does not know the secret (controller.quorum.secret.file)",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// Runs both sides over loopback: the client's and the server's outcomes.
    async fn shake(
        client: Option<QuorumSecret>,
        server: QuorumSecret,
    ) -> (std::io::Result<()>, std::io::Result<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let address = listener.local_addr().expect("address");
        let serving = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.expect("accepts");
            server_handshake(&mut stream, &server).await
        });
        let mut stream = TcpStream::connect(address).await.expect("connects");
        let client = match client {
            Some(secret) => client_handshake(&mut stream, &secret).await,
            // A stranger sends a quorum request straight away.
            None => {
                write_frame(
                    &mut stream,
                    &serde_json::json!({"Heartbeat": {"node_id": 1}}),
                )
                .await
            }
        };
        drop(stream);
        (client, serving.await.expect("served"))
    }

    #[tokio::test]
    async fn only_nodes_that_share_the_secret_talk() {
        let secret = QuorumSecret::of(b"0123456789abcdef-cluster");
        let (client, server) = shake(Some(secret.clone()), secret.clone()).await;
        assert!(client.is_ok() && server.is_ok(), "{client:?} {server:?}");

        let other = QuorumSecret::of(b"0123456789abcdef-intruder");
        let (client, server) = shake(Some(other), secret.clone()).await;
        let client = client.expect_err("the intruder finds the listener does not share its secret");
        assert_eq!(client.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(server.is_err(), "the listener never accepts it");

        let (_, server) = shake(None, secret).await;
        assert!(
            server.is_err(),
            "a request without the handshake is refused"
        );
    }

    #[test]
    fn a_short_or_missing_secret_file_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("secret");
        assert!(
            QuorumSecret::read(&path)
                .expect_err("missing")
                .contains("cannot read")
        );
        std::fs::write(&path, "short\n").expect("written");
        assert!(
            QuorumSecret::read(&path)
                .expect_err("short")
                .contains("at least 16")
        );
        std::fs::write(&path, "  a-secret-of-enough-bytes\n").expect("written");
        assert_eq!(
            QuorumSecret::read(&path).expect("read"),
            QuorumSecret::of(b"a-secret-of-enough-bytes")
        );
    }
}
