//! Reading one size-prefixed Kafka frame's body from a stream, two ways.
//!
//! [`read_body`] reserves the declared size at once and reads into fresh, uninitialised
//! capacity: for answers from a broker the client chose, whose size its request bounded. Zeroing
//! a buffer that the socket then overwrites cost the mirror path about 5% of its CPU (a 10 MiB
//! Fetch answer zeroed before each read), as `scripts/profile.sh` showed.
//!
//! [`FrameBody`] grows with the bytes that arrive: for requests from clients a broker does not
//! trust, where a declared size is only a claim. Its capacity stays within twice the bytes
//! received plus [`FrameBody::FIRST_CHUNK`], so a connection that declares 100 MB and sends 10
//! bytes holds a few KiB. Reading is cancel-safe: what arrived stays in the body.

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
            return Err(ended(want, len));
        }
    }
    Ok(buf.freeze())
}

fn ended(want: usize, len: usize) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        format!("stream ended {want} bytes before the end of a {len}-byte frame"),
    )
}

/// A frame body of a declared length, filled as its bytes arrive.
#[derive(Debug)]
pub struct FrameBody {
    len: usize,
    buf: BytesMut,
}

impl FrameBody {
    /// The capacity taken before the first read (or the whole body if smaller).
    pub const FIRST_CHUNK: usize = 4096;

    /// An empty body of `len` declared bytes; nothing is allocated yet.
    pub fn new(len: usize) -> FrameBody {
        FrameBody {
            len,
            buf: BytesMut::new(),
        }
    }

    /// Bytes received so far.
    pub fn received(&self) -> usize {
        self.buf.len()
    }

    /// The buffer's capacity now.
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Whether every declared byte arrived.
    pub fn is_complete(&self) -> bool {
        self.buf.len() == self.len
    }

    /// Reads what the stream has (at least one byte, never past the body); returns whether the
    /// body is now complete. An end of stream before it is `UnexpectedEof`.
    pub async fn read_some(
        &mut self,
        stream: &mut (impl AsyncRead + Unpin),
    ) -> std::io::Result<bool> {
        let want = self.len - self.buf.len();
        if want == 0 {
            return Ok(true);
        }
        if self.buf.capacity() == self.buf.len() {
            // Doubling what arrived keeps the copies amortised while the capacity follows the
            // bytes received, not the size declared.
            let grow = self.buf.len().max(Self::FIRST_CHUNK).min(want);
            self.buf.reserve(grow);
        }
        if stream.read_buf(&mut (&mut self.buf).limit(want)).await? == 0 {
            return Err(ended(want, self.len));
        }
        Ok(self.is_complete())
    }

    /// The body's bytes (all of them once [`FrameBody::is_complete`]).
    pub fn finish(self) -> Bytes {
        self.buf.freeze()
    }
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

    /// A body declared at 100 MB of which 10 bytes arrived holds one small chunk; as bytes
    /// arrive the capacity stays within twice them; the next frame's bytes are left alone.
    #[tokio::test]
    async fn a_body_grows_with_the_bytes_received_not_the_size_declared() {
        use tokio::io::AsyncWriteExt;
        let (mut client, mut server) = tokio::io::duplex(1 << 20);
        client.write_all(&[7u8; 10]).await.expect("writes");
        let mut claimed = FrameBody::new(100_000_000);
        assert!(!claimed.read_some(&mut server).await.expect("reads"));
        assert_eq!(claimed.received(), 10);
        assert!(
            claimed.capacity() <= 2 * FrameBody::FIRST_CHUNK,
            "{}",
            claimed.capacity()
        );

        let len = 300_000;
        let writer = tokio::spawn(async move {
            client.write_all(&vec![1u8; len]).await.expect("writes");
            client.write_all(b"next").await.expect("writes");
            client
        });
        let mut body = FrameBody::new(len);
        while !body.read_some(&mut server).await.expect("reads") {
            assert!(
                body.capacity() <= 2 * body.received() + 2 * FrameBody::FIRST_CHUNK,
                "{} bytes in a capacity of {}",
                body.received(),
                body.capacity()
            );
        }
        let bytes = body.finish();
        assert_eq!(bytes.len(), len);
        assert!(bytes.iter().all(|b| *b == 1));
        let _client = writer.await.expect("writer");
        let mut next = [0u8; 4];
        server.read_exact(&mut next).await.expect("reads");
        assert_eq!(&next, b"next");
    }

    #[tokio::test]
    async fn a_body_cut_short_is_unexpected_eof() {
        use tokio::io::AsyncWriteExt;
        let (mut client, mut server) = tokio::io::duplex(64);
        client.write_all(b"abc").await.expect("writes");
        drop(client);
        let mut body = FrameBody::new(8);
        assert!(!body.read_some(&mut server).await.expect("reads"));
        let err = body.read_some(&mut server).await.expect_err("ended");
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
