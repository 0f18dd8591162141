//! Idle HTTP/1.1 connections, parked: an agent keeps many keep-alive
//! connections open and quiet, and hyper keeps its read and write buffers
//! (8 KiB each) and its dispatcher for as long as a connection lives. After
//! [`PARK_AFTER`] with no request in flight and no byte moved, the proxy
//! takes the transport back from hyper (which frees those) and waits for the
//! socket to become readable before serving it again. What stays per parked
//! connection is the socket, the TLS session and this task. See
//! docs/proxy.md, "Idle connections".

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::sniffing::Prefixed;

/// How long an HTTP/1.1 connection stays quiet before it is parked.
pub const PARK_AFTER: Duration = Duration::from_secs(1);

/// The allocator options the sandbox Pod runs the proxy with, as
/// `MALLOC_CONF`: one jemalloc arena (the proxy runs one worker by
/// default) and freed pages handed back after 100 ms instead of the
/// build's 1 s. With the build's options, up to 4 MiB per arena stayed
/// resident after a burst, since jemalloc's background thread defers a
/// purge of fewer than 1,024 pages; the parked connections' freed buffers
/// were among them. Handing pages back at once (`dirty_decay_ms:0`) kept
/// the same memory off but made every new connection about 0.4 ms slower
/// (docs/benchmarks.md).
pub const MALLOC_CONF: &str = "narenas:1,dirty_decay_ms:100";

/// A transport that can say when it has something to read without reading
/// it, so that a parked connection holds no read buffer.
pub trait Readiness {
    /// Completes when a read would not block: bytes, end of stream or an
    /// error are waiting.
    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send;
}

impl Readiness for TcpStream {
    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send {
        TcpStream::readable(self)
    }
}

impl<S: Readiness + Sync + ?Sized> Readiness for Box<S> {
    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send {
        (**self).readable()
    }
}

impl<S: Readiness + Sync> Readiness for Prefixed<S> {
    async fn readable(&self) -> io::Result<()> {
        if self.has_replay() {
            return Ok(());
        }
        self.get_ref().readable().await
    }
}

impl<S: Readiness + Sync> Readiness for tokio_rustls::server::TlsStream<S> {
    async fn readable(&self) -> io::Result<()> {
        let (transport, session) = self.get_ref();
        // Plaintext rustls already holds is ready now; so is a session that
        // has something to say first (a close_notify, a key update).
        if !session.wants_read() || session.wants_write() {
            return Ok(());
        }
        transport.readable().await
    }
}

/// What a served connection is doing, shared by its service (requests in
/// flight) and its transport (bytes moved).
#[derive(Debug, Default)]
pub struct Activity {
    in_flight: AtomicUsize,
    moved: AtomicU64,
}

impl Activity {
    /// A request has started; it is in flight until the returned guard (put
    /// into its response body with [`Tracked`]) is dropped.
    pub fn start(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }

    /// A count that changes whenever a byte moves; compare two readings.
    pub fn moved(&self) -> u64 {
        self.moved.load(Ordering::Relaxed)
    }

    /// Whether no request is in flight.
    pub fn quiet(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) == 0
    }
}

/// One request in flight; see [`Activity::start`].
#[derive(Debug)]
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A response body that keeps its request in flight until hyper has
/// finished with it (an event stream may be quiet for minutes).
pub struct Tracked<B> {
    inner: B,
    _in_flight: InFlight,
}

impl<B> Tracked<B> {
    /// `inner`, keeping `in_flight` until it is dropped.
    pub fn new(inner: B, in_flight: InFlight) -> Tracked<B> {
        Tracked {
            inner,
            _in_flight: in_flight,
        }
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Tracked<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A transport that counts in [`Activity`] whenever bytes move through it.
pub struct Metered<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S> Metered<S> {
    /// `inner`, counted in `activity`.
    pub fn new(inner: S, activity: Arc<Activity>) -> Metered<S> {
        Metered { inner, activity }
    }

    /// The transport, given back.
    pub fn into_inner(self) -> S {
        self.inner
    }

    fn count(&self, n: usize) {
        if n > 0 {
            self.activity.moved.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        self.count(buf.filled().len() - before);
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            self.count(n);
        }
        polled
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
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = polled {
            self.count(n);
        }
        polled
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_replay_is_readable_at_once_and_silence_is_not() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let quiet = Prefixed::new(Vec::new(), server);
        // A new socket may report readiness once without data (tokio allows
        // false positives); a read that would block clears it, as hyper's
        // last read did before a connection is parked.
        let mut probe = [0u8; 1];
        let would_block = quiet.get_ref().try_read(&mut probe).unwrap_err();
        assert_eq!(would_block.kind(), io::ErrorKind::WouldBlock);
        let waited = tokio::time::timeout(Duration::from_millis(50), quiet.readable()).await;
        assert!(waited.is_err(), "nothing was sent");
        client.write_all(b"x").await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), quiet.readable())
            .await
            .unwrap()
            .unwrap();
        let mut replay = Prefixed::new(b"GET".to_vec(), quiet.into_inner());
        tokio::time::timeout(Duration::from_millis(50), replay.readable())
            .await
            .unwrap()
            .unwrap();
        let mut got = [0u8; 4];
        replay.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"GETx");
    }

    #[tokio::test]
    async fn activity_counts_bytes_and_requests() {
        let activity = Arc::new(Activity::default());
        let (a, mut b) = tokio::io::duplex(64);
        let mut metered = Metered::new(a, activity.clone());
        let before = activity.moved();
        metered.write_all(b"hello").await.unwrap();
        assert_ne!(activity.moved(), before);
        let before = activity.moved();
        b.write_all(b"hi").await.unwrap();
        let mut got = [0u8; 2];
        metered.read_exact(&mut got).await.unwrap();
        assert_ne!(activity.moved(), before);
        assert!(activity.quiet());
        let in_flight = activity.start();
        assert!(!activity.quiet());
        drop(in_flight);
        assert!(activity.quiet());
    }
}
