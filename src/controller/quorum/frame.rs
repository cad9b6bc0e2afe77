//! The framing of the controller listener's connections (docs/cluster.md): `u32 length
//! (big-endian) | one JSON value`. A frame longer than [`MAX_FRAME`] is refused, so a stray
//! client cannot make a controller allocate at will. A leaf, read and written by both the
//! handshake ([`super::auth`]) and the quorum's requests ([`super::network`], [`super::server`]).

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The largest frame read (snapshots are sent in chunks well below it).
pub(super) const MAX_FRAME: usize = 32 * 1024 * 1024;

/// Writes one frame.
pub(super) async fn write_frame<T: Serialize>(
    stream: &mut TcpStream,
    value: &T,
) -> std::io::Result<()> {
    let body = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    let length = u32::try_from(body.len())
        .ok()
        .filter(|l| (*l as usize) <= MAX_FRAME)
        .ok_or_else(|| std::io::Error::other(format!("a frame of {} bytes", body.len())))?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&length.to_be_bytes());
    frame.extend_from_slice(&body);
    stream.write_all(&frame).await
}

/// Reads one frame (`None` at a clean end of the connection).
pub(super) async fn read_frame<T: DeserializeOwned>(
    stream: &mut TcpStream,
) -> std::io::Result<Option<T>> {
    read_frame_within(stream, MAX_FRAME).await
}

/// Reads one frame of at most `max` bytes (`None` at a clean end of the connection).
pub(super) async fn read_frame_within<T: DeserializeOwned>(
    stream: &mut TcpStream,
    max: usize,
) -> std::io::Result<Option<T>> {
    let mut length = [0u8; 4];
    match stream.read_exact(&mut length).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let length = u32::from_be_bytes(length) as usize;
    if length > max {
        return Err(std::io::Error::other(format!(
            "a frame of {length} bytes is larger than {max}"
        )));
    }
    // Grown as bytes arrive: a length with no body behind it costs nothing.
    let mut body = Vec::new();
    (&mut *stream)
        .take(length as u64)
        .read_to_end(&mut body)
        .await?;
    if body.len() != length {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("a frame of {length} bytes ended after {}", body.len()),
        ));
    }
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(std::io::Error::other)
}
