//! Bodies as the proxy passes them on: read whole or ahead within a
//! limit, replayed, and the hop-by-hop headers a forwarded message drops.

use super::*;

/// A client's or an upstream's body, as the proxy passes it on.
pub(super) fn boxed(body: Incoming) -> Body {
    body.map_err(|e| -> BodyError { Box::new(e) }).boxed()
}

/// Why a body could not be read whole.
#[derive(Debug, thiserror::Error)]
pub(super) enum ReadWhole {
    /// It is longer than the limit.
    #[error("it is longer than {0} bytes")]
    TooLong(usize),
    /// It failed.
    #[error("{0}")]
    Failed(BodyError),
}

/// Reads `body` whole, up to `limit` bytes (trailers are dropped, as
/// `Limited` and `collect` did).
pub(super) async fn read_whole(mut body: Body, limit: usize) -> Result<Bytes, ReadWhole> {
    let mut data = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(ReadWhole::Failed)?;
        if let Some(chunk) = frame.data_ref() {
            if data.len() + chunk.len() > limit {
                return Err(ReadWhole::TooLong(limit));
            }
            data.extend_from_slice(chunk);
        }
    }
    Ok(data.freeze())
}

/// The longest host response body the session records; a longer one
/// passes unrecorded, and the record counts as evicted.
pub const MAX_RECORDED_BODY_BYTES: usize = 4 << 20;

/// Whether a media type is text the model can read as such: `text/*`
/// (an event stream aside, which never ends), JSON, XML, JavaScript, YAML
/// and forms.
pub(super) fn textual_type(media_type: &str) -> bool {
    let essence = media_type.split(';').next().unwrap_or_default().trim();
    if essence == "text/event-stream" {
        return false;
    }
    essence.starts_with("text/")
        || essence.ends_with("+json")
        || essence.ends_with("+xml")
        || matches!(
            essence,
            "application/json"
                | "application/xml"
                | "application/javascript"
                | "application/x-www-form-urlencoded"
                | "application/yaml"
                | "application/x-yaml"
                | "application/graphql-response+json"
        )
}

/// A body read ahead (to record it) and passed on: its frames as they
/// came, then whatever of it is still unread.
pub(super) struct Replay {
    pub(super) frames: std::collections::VecDeque<Result<hyper::body::Frame<Bytes>, BodyError>>,
    pub(super) rest: Option<Body>,
}

impl hyper::body::Body for Replay {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, BodyError>>> {
        if let Some(frame) = self.frames.pop_front() {
            return std::task::Poll::Ready(Some(frame));
        }
        match self.rest.as_mut() {
            Some(rest) => std::pin::Pin::new(rest).poll_frame(cx),
            None => std::task::Poll::Ready(None),
        }
    }
}

/// A body read ahead, up to a limit, before it is passed on.
pub(super) struct ReadAhead {
    /// The frames read, as they came.
    pub(super) frames: std::collections::VecDeque<Result<hyper::body::Frame<Bytes>, BodyError>>,
    /// Their data.
    pub(super) data: Vec<u8>,
    /// The body's unread rest, when it was longer than the limit.
    pub(super) rest: Option<Body>,
    /// True when the body failed (the failure is among the frames).
    pub(super) failed: bool,
    /// True when trailers came with it (HTTP/2, chunked HTTP/1.1).
    pub(super) trailers: bool,
}

impl ReadAhead {
    /// The whole body again: the frames read, then the rest.
    pub(super) fn replay(self) -> Body {
        Replay {
            frames: self.frames,
            rest: self.rest,
        }
        .boxed()
    }
}

/// Reads `body` until its end, a failure, or more than `limit` bytes.
pub(super) async fn read_ahead(mut body: Body, limit: usize) -> ReadAhead {
    let mut read = ReadAhead {
        frames: std::collections::VecDeque::new(),
        data: Vec::new(),
        rest: None,
        failed: false,
        trailers: false,
    };
    while let Some(frame) = body.frame().await {
        match frame {
            Err(e) => {
                read.failed = true;
                read.frames.push_back(Err(e));
                return read;
            }
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    read.data.extend_from_slice(data);
                }
                read.trailers |= frame.is_trailers();
                read.frames.push_back(Ok(frame));
                if read.data.len() > limit {
                    read.rest = Some(body);
                    return read;
                }
            }
        }
    }
    read
}

pub(super) fn full(body: impl Into<Bytes>) -> Body {
    Full::new(body.into())
        .map_err(|never| match never {})
        .boxed()
}

/// Headers that describe one hop, never forwarded (RFC 9110 §7.6.1), plus
/// the proxy's own.
pub(super) const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

pub(super) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    let trailers_only = headers
        .get(header::TE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("trailers"));
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(*name);
    }
    // gRPC and other HTTP/2 clients need `te: trailers` end to end.
    if trailers_only {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
}
