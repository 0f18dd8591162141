//! Byte-level helpers for the first bytes of a connection: telling TLS from
//! plain HTTP and reading the SNI without consuming anything the rest of the
//! connection needs.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// The most bytes read while looking for the end of a ClientHello.
pub const MAX_HELLO_BYTES: usize = 64 * 1024;

/// What a connection's first bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sniffed {
    /// A TLS ClientHello, with its SNI if it has one.
    Tls {
        /// The server name the client asked for.
        sni: Option<String>,
    },
    /// Anything else (HTTP/1.x, or garbage the HTTP parser will refuse).
    Plain,
    /// The client closed before sending anything.
    Closed,
}

/// Reads until the first bytes tell TLS from plain text, or a whole
/// ClientHello has arrived, within `timeout` in total (a client trickling
/// one byte at a time gets no more). Returns the bytes read, to be replayed.
pub async fn sniff<S: AsyncRead + Unpin>(
    io: &mut S,
    timeout: Duration,
) -> io::Result<(Sniffed, Vec<u8>)> {
    let mut buffered = Vec::with_capacity(2048);
    let sniffed = sniff_into(io, &mut buffered, Instant::now() + timeout).await?;
    Ok((sniffed, buffered))
}

/// [`sniff`] into a buffer the caller owns, so that nothing read is lost
/// when the caller stops waiting (a server that speaks first).
pub async fn sniff_into<S: AsyncRead + Unpin>(
    io: &mut S,
    buffered: &mut Vec<u8>,
    deadline: Instant,
) -> io::Result<Sniffed> {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut chunk = vec![0u8; 8192];
    loop {
        let n = tokio::time::timeout_at(deadline.into(), io.read(&mut chunk))
            .await
            .map_err(|_| {
                io::Error::new(io::ErrorKind::TimedOut, "the client sent nothing in time")
            })??;
        if n == 0 {
            return Ok(if buffered.is_empty() {
                Sniffed::Closed
            } else {
                Sniffed::Plain
            });
        }
        buffered.extend_from_slice(&chunk[..n]);
        // 0x16 is a TLS handshake record; nothing else starts one.
        if buffered[0] != 0x16 {
            return Ok(Sniffed::Plain);
        }
        let mut unread = &chunk[..n];
        while !unread.is_empty() {
            acceptor
                .read_tls(&mut unread)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("not TLS: {e}")))?;
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                let sni = accepted.client_hello().server_name().map(str::to_string);
                return Ok(Sniffed::Tls { sni });
            }
            Ok(None) => {}
            Err((e, _)) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("not a TLS ClientHello: {e}"),
                ));
            }
        }
        if buffered.len() > MAX_HELLO_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "ClientHello larger than 64 KiB",
            ));
        }
    }
}

/// A stream that first yields bytes already read from it.
pub struct Prefixed<S> {
    prefix: Vec<u8>,
    position: usize,
    inner: S,
}

impl<S> Prefixed<S> {
    /// Replays `prefix`, then reads from `inner`.
    pub fn new(prefix: Vec<u8>, inner: S) -> Prefixed<S> {
        Prefixed {
            prefix,
            position: 0,
            inner,
        }
    }

    /// Whether bytes are still to be replayed.
    pub fn has_replay(&self) -> bool {
        self.position < self.prefix.len()
    }

    /// Puts `bytes` back in front of everything not yet read.
    pub fn unread(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let mut prefix = Vec::with_capacity(bytes.len() + self.prefix.len() - self.position);
        prefix.extend_from_slice(bytes);
        prefix.extend_from_slice(&self.prefix[self.position..]);
        self.prefix = prefix;
        self.position = 0;
    }

    /// The stream read after the replay.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The stream read after the replay; bytes not yet replayed are lost.
    #[cfg(test)]
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.position < this.prefix.len() {
            let rest = &this.prefix[this.position..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            this.position += n;
            if this.position == this.prefix.len() {
                this.prefix = Vec::new();
                this.position = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn plain_http_is_plain_and_replayed() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        a.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let (sniffed, buffered) = sniff(&mut b, Duration::from_secs(1)).await.unwrap();
        assert_eq!(sniffed, Sniffed::Plain);
        let mut replay = Prefixed::new(buffered, b);
        let mut first = [0u8; 3];
        replay.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, b"GET");
    }

    #[tokio::test]
    async fn unread_bytes_come_before_the_rest_of_the_replay() {
        let (_a, b) = tokio::io::duplex(64);
        let mut replay = Prefixed::new(b"abcdef".to_vec(), b);
        let mut first = [0u8; 2];
        replay.read_exact(&mut first).await.unwrap();
        replay.unread(b"xy");
        assert!(replay.has_replay());
        let mut all = [0u8; 6];
        replay.read_exact(&mut all).await.unwrap();
        assert_eq!(&all, b"xycdef");
        assert!(!replay.has_replay());
    }

    #[tokio::test]
    async fn garbage_after_a_handshake_byte_is_not_tls() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        a.write_all(&[0x16, 0x00, 0x00, 0x00, 0x05, 1, 2, 3, 4, 5])
            .await
            .unwrap();
        assert!(sniff(&mut b, Duration::from_secs(1)).await.is_err());
    }

    #[tokio::test]
    async fn a_trickling_client_gets_one_deadline_in_total() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let trickle = tokio::spawn(async move {
            for byte in [0x16u8, 0x03, 0x01, 0x00, 0x40] {
                tokio::time::sleep(Duration::from_millis(40)).await;
                let _ = a.write_all(&[byte]).await;
            }
            a
        });
        let started = std::time::Instant::now();
        let err = sniff(&mut b, Duration::from_millis(100)).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() < Duration::from_millis(180));
        drop(trickle);
    }

    #[tokio::test]
    async fn silence_times_out() {
        let (_a, mut b) = tokio::io::duplex(1024);
        let err = sniff(&mut b, Duration::from_millis(50)).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }
}
