//! Reading one size-prefixed Kafka frame's body from a stream.
//!
//! The body is read into fresh, uninitialised capacity: zeroing a buffer that the socket then
//! overwrites cost the mirror path about 5% of its CPU (a 10 MiB Fetch answer zeroed before each
//! read), as `scripts/profile.sh` showed.

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Reads exactly `len` bytes; an end of stream before them is `UnexpectedEof`.
pub async fn read_body(
    stream: &mut (impl AsyncRead + Unpin),
    len: usize,
) -> std::io::Result<Bytes> {
    let mut buf = BytesMut::with_capacity(len);
    while buf.len() < len {
        let want = len - buf.len();
        // The limit keeps a read from taking the next frame's bytes.
        if stream.read_buf(&mut (&mut buf).limit(want)).await? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("stream ended {want} bytes before the end of a {len}-byte frame"),
            ));
        }
    }
    Ok(buf.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_one_frame_and_leaves_the_next() {
        let (mut client, mut server) = tokio::io::duplex(7);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            client
                .write_all(b"first-framesecond")
                .await
                .expect("writes");
        });
        let first = read_body(&mut server, 11).await.expect("reads");
        assert_eq!(&first[..], b"first-frame");
        let second = read_body(&mut server, 6).await.expect("reads");
        assert_eq!(&second[..], b"second");
        writer.await.expect("writer");
        let short = read_body(&mut server, 4).await.expect_err("ended");
        assert_eq!(short.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
