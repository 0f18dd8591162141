//! The listeners and the data path. Explicit proxy (`CONNECT` and
//! absolute-form `http://`), transparent listener (nftables-redirected
//! connections, `SO_ORIGINAL_DST`), and for each connection one of: refuse,
//! tunnel bytes, or terminate TLS and judge every request. Every verdict
//! comes from [`crate::decide`], which asks the policy crate's matcher.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::credentials::{
    Attachment, BodyError, BodyScan, Carried, CredentialIssue, CredentialSet, ResponseMask, Scanned,
};
use crate::decide::{
    Admitted, Binary, METHOD_OVERRIDES, Refusal, RefusalCode, Refused, Snapshot, canonical_host,
    judge_carrying, judge_connection, method_overrides, model_request, policy_of,
};
use crate::identity::{IdentityMode, binary_of};
use crate::idle::{Activity, Metered, PARK_AFTER, Readiness, Tracked};
use crate::io::{Prefixed, Sniffed, sniff, sniff_into};
use crate::mcp::{self, Judged};
use crate::resolve::Resolver;
use crate::session::{RefusalSeen, SessionGraph};
use crate::telemetry::{GaugeGuard, Metrics};
use crate::tls::{Interceptor, UpstreamTls};
use agentgate_policy::action::request_path;
use agentgate_policy::action::{McpKind, NetworkAction};
use agentgate_policy::held::{self, HoldRequest};
use agentgate_policy::matcher::{McpQuery, McpServer, is_mcp_server, mcp_query_carrying};
use agentgate_policy::mcp_messages::HeldCall;
use agentgate_policy::provenance::{Record, Source};
use agentgate_policy::request_values::{content_coded, request_values};

/// The body type of every request forwarded and every response: a body
/// can fail for the proxy's own reasons too (a request body that carries a
/// credential's placeholder, [`crate::credentials::Scanned`]).
pub type Body = BoxBody<Bytes, BodyError>;

/// A client's or an upstream's body, as the proxy passes it on.
fn boxed(body: Incoming) -> Body {
    body.map_err(|e| -> BodyError { Box::new(e) }).boxed()
}

/// Why a body could not be read whole.
#[derive(Debug, thiserror::Error)]
enum ReadWhole {
    /// It is longer than the limit.
    #[error("it is longer than {0} bytes")]
    TooLong(usize),
    /// It failed.
    #[error("{0}")]
    Failed(BodyError),
}

/// Reads `body` whole, up to `limit` bytes (trailers are dropped, as
/// `Limited` and `collect` did).
async fn read_whole(mut body: Body, limit: usize) -> Result<Bytes, ReadWhole> {
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

/// Bounds that keep a slow or hostile client from holding the proxy.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Request line plus headers (HTTP/1.1 buffer, HTTP/2 header list).
    pub max_header_bytes: usize,
    /// Time for a client to send its request headers or TLS ClientHello.
    pub client_timeout: Duration,
    /// Time to resolve, connect and shake hands with an upstream.
    pub connect_timeout: Duration,
    /// Time for an upstream to start its response.
    pub response_timeout: Duration,
    /// Time an HTTP/1.1 client connection may stay quiet (parked, see
    /// [`crate::idle`]) before the proxy closes it, as Envoy's and Istio's
    /// HTTP idle timeout does.
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_header_bytes: 64 * 1024,
            client_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            response_timeout: Duration::from_secs(300),
            idle_timeout: Duration::from_secs(3600),
        }
    }
}

/// Which listener a connection arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerKind {
    /// `--listen`: CONNECT and absolute-form `http://`.
    Explicit,
    /// `--transparent-listen`: connections redirected by `init-net`.
    Transparent,
}

/// The shared state of one proxy process.
pub struct Proxy {
    /// The policy in force; every decision borrows the latest.
    pub policy: watch::Receiver<Arc<Snapshot>>,
    /// Mints leaves for intercepted hosts.
    pub interceptor: Arc<Interceptor>,
    /// Verifies upstreams.
    pub upstream_tls: UpstreamTls,
    /// Resolves upstream names.
    pub resolver: Arc<Resolver>,
    /// How binaries are told apart.
    pub identity: IdentityMode,
    /// Where /proc is (tests may point elsewhere).
    pub proc_root: PathBuf,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Timeouts and sizes.
    pub limits: Limits,
    /// Upstream connections kept for reuse.
    pub upstreams: Upstreams,
    /// The open HTTP+SSE event streams of MCP servers, by messages endpoint.
    pub sse_sessions: mcp::SseSessions,
    /// The record of where content came from in the conversation the
    /// pod's agent holds with its model now: fed by the requests to its
    /// model provider, read by every tool call's `from`
    /// (docs/policy-semantics.md §8.3). Bounded in bytes.
    pub conversation: Mutex<crate::provider::ConversationRecord>,
    /// What the session did: flows, tools called, last refusals
    /// (`/lineage` on the metrics port).
    pub session: Arc<Mutex<SessionGraph>>,
    /// Where held calls (`mode: ask`) are put to a person; without it they
    /// are refused (docs/proxy.md, "Held calls").
    pub approvals: Option<crate::approval::Approvals>,
    /// The sandbox's credentials: placeholders, secrets, attach forms
    /// (docs/proxy.md, "Credentials"); every request borrows the latest.
    pub credentials: watch::Receiver<Arc<CredentialSet>>,
}

/// The longest request to a model provider whose conversation is recorded;
/// a longer one is refused (its content would go unrecorded).
pub const MAX_MODEL_REQUEST_BYTES: usize = 32 << 20;

fn refusal_response(refusal: &Refusal) -> Response<Body> {
    let mut response = Response::new(full(refusal.body()));
    *response.status_mut() = StatusCode::FORBIDDEN;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert("x-agentgate-decision", HeaderValue::from_static("deny"));
    response
}

fn error_response(status: StatusCode, code: &str, reason: &str) -> Response<Body> {
    let body = serde_json::json!({"error": code, "reason": reason}).to_string();
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Ok(value) = HeaderValue::from_str(code) {
        headers.insert("x-agentgate-error", value);
    }
    response
}

/// The canonical path of a request to an MCP server of the policy, or
/// `None` when (host, port, path) is judged as a plain request.
fn mcp_path(snapshot: &Snapshot, host: &str, port: u16, target: &str) -> Option<String> {
    let policy = snapshot.policy.as_ref().ok()?;
    let path = request_path(target).ok()?;
    let server = McpServer {
        host,
        port,
        path: &path,
    };
    is_mcp_server(&policy.compiled, &policy.index, server).then_some(path)
}

/// The largest JSON list answer filtered (an event stream is filtered
/// event by event instead).
const MAX_LIST_BYTES: usize = 16 << 20;

/// An MCP server's event stream as it passes: its list results filtered
/// and, on the HTTP+SSE transport (MCP 2024-11-05), linked to the messages
/// endpoint it announces so that the proxy's refusals of calls POSTed
/// there are put on the stream the client reads.
struct McpEvents {
    inner: Body,
    filter: mcp::SseFilter,
    visible: Box<Visible>,
    done: bool,
    /// Where a GET stream came from, to link it when it announces its
    /// endpoint (`None` for the answer to a POST, which announces none).
    origin: Option<StreamOrigin>,
    link: Option<SessionLink>,
    /// The proxy whose session records the answers' content, when the
    /// policy keeps a record (docs/policy-semantics.md §8.3).
    recorder: Option<Arc<Proxy>>,
}

/// Whether a `*/list` result shows an entry (see [`mcp_query_carrying`]).
type Visible = dyn Fn(McpQuery<'_>) -> bool + Send + Sync;

/// Who opened a GET event stream, and where.
struct StreamOrigin {
    proxy: Arc<Proxy>,
    binary: Binary,
    upstream: UpstreamKey,
    /// The GET's path, which a relative endpoint resolves against.
    path: String,
    /// The credential the GET carried: the stream's lists are filtered as
    /// for requests carrying it.
    credential: Option<String>,
}

/// A stream's entry in [`Proxy::sse_sessions`], removed when the stream
/// ends (the body is dropped).
struct SessionLink {
    proxy: Arc<Proxy>,
    key: mcp::SessionKey,
    session: Arc<mcp::SseSession>,
}

impl Drop for SessionLink {
    fn drop(&mut self) {
        self.proxy.sse_sessions.close(&self.key, &self.session);
    }
}

/// The key of the HTTP+SSE stream `binary` holds whose messages endpoint
/// on `upstream` is `target` (path and query).
fn session_key(upstream: &UpstreamKey, binary: &Binary, target: String) -> mcp::SessionKey {
    mcp::SessionKey {
        tls: upstream.tls,
        host: upstream.host.clone(),
        port: upstream.port,
        binary: binary.0.clone(),
        target,
    }
}

/// Whether the policy in force when an entry is listed shows it, for lists
/// answering requests to `path` on the upstream that carry `credential`
/// (only the rules that bind it may show an entry then, as only they may
/// allow its calls).
fn visible_at(
    proxy: Arc<Proxy>,
    caller: Binary,
    upstream: &UpstreamKey,
    path: String,
    credential: Option<String>,
) -> Box<Visible> {
    let host = upstream.host.clone();
    let port = upstream.port;
    Box::new(move |query: McpQuery<'_>| {
        let snapshot = proxy.snapshot();
        let Ok(policy) = &snapshot.policy else {
            return false;
        };
        let server = McpServer {
            host: &host,
            port,
            path: &path,
        };
        mcp_query_carrying(
            &policy.compiled,
            &policy.index,
            caller.caller(),
            credential.as_deref(),
            server,
            query,
        )
    })
}

impl McpEvents {
    /// Links the stream to the messages endpoint `data` announces, when
    /// that is an MCP server of the policy: POSTs there by the same binary
    /// get their refusals on this stream, and their list results filtered
    /// by the policy for that path.
    fn announce(&mut self, data: &str) {
        let Some(origin) = &self.origin else {
            return;
        };
        let upstream = &origin.upstream;
        let Some(target) = mcp::resolve_endpoint(
            upstream.tls,
            &upstream.host,
            upstream.port,
            &origin.path,
            data,
        ) else {
            tracing::info!(host = %upstream.host, port = upstream.port, endpoint = data, "an MCP event stream announced an endpoint the proxy does not link; refusals of its calls are answered on the POST");
            return;
        };
        let snapshot = origin.proxy.snapshot();
        let target_path = target.split('?').next().unwrap_or_default();
        let Some(path) = mcp_path(&snapshot, &upstream.host, upstream.port, target_path) else {
            tracing::info!(host = %upstream.host, port = upstream.port, endpoint = %target, "an MCP event stream announced a messages endpoint no mcp endpoint of the policy covers; its POSTs are judged as REST");
            return;
        };
        let key = session_key(upstream, &origin.binary, target);
        let Some(session) = origin.proxy.sse_sessions.open(key.clone()) else {
            tracing::warn!(host = %upstream.host, port = upstream.port, endpoint = %key.target, "an MCP event stream could not be linked (another holds its endpoint, or too many are open); refusals of its calls are answered on the POST");
            return;
        };
        tracing::debug!(host = %upstream.host, port = upstream.port, endpoint = %key.target, "MCP event stream linked to its messages endpoint");
        self.visible = visible_at(
            origin.proxy.clone(),
            origin.binary.clone(),
            upstream,
            path,
            origin.credential.clone(),
        );
        self.link = Some(SessionLink {
            proxy: origin.proxy.clone(),
            key,
            session,
        });
    }
}

impl hyper::body::Body for McpEvents {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, BodyError>>> {
        use std::task::Poll;
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            // The proxy's own answers go out between the server's events:
            // what the filter returns always ends at an event's end.
            if let Some(link) = &this.link {
                let queued = link.session.take_events(cx.waker());
                if !queued.is_empty() {
                    return Poll::Ready(Some(Ok(hyper::body::Frame::data(queued.into()))));
                }
            }
            match std::pin::Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        // Lists and calls POSTed before these bytes were
                        // sent are known by now.
                        if let Some(link) = &this.link {
                            this.filter.expect(link.session.take_lists());
                            this.filter.expect_results(link.session.take_results());
                        }
                        let out = match this.filter.push(&data, &*this.visible) {
                            Ok(out) => out,
                            Err(e) => {
                                tracing::warn!(error = %e, "ending an MCP event stream");
                                this.done = true;
                                return Poll::Ready(None);
                            }
                        };
                        // Recorded before the bytes that carry them pass.
                        let observed = this.filter.take_observed();
                        if let Some(proxy) = &this.recorder
                            && !observed.is_empty()
                        {
                            proxy.record_answers(observed);
                        }
                        let answered = this.filter.take_answered();
                        if let Some(link) = &this.link {
                            link.session.set_awaited(this.filter.awaited());
                            link.session
                                .set_awaited_results(this.filter.awaited_results());
                            link.session.answered(&answered);
                        }
                        if this.link.is_none()
                            && let Some(endpoint) = this.filter.take_endpoint()
                        {
                            this.announce(&endpoint);
                        }
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(hyper::body::Frame::data(out.into()))));
                        }
                    }
                    // Trailers pass unchanged.
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                Poll::Ready(None) => {
                    this.done = true;
                    let rest = this.filter.finish();
                    if !rest.is_empty() {
                        return Poll::Ready(Some(Ok(hyper::body::Frame::data(rest.into()))));
                    }
                }
            }
        }
    }
}

/// The longest host response body the session records; a longer one
/// passes unrecorded, and the record counts as evicted.
pub const MAX_RECORDED_BODY_BYTES: usize = 4 << 20;

/// Whether a media type is text the model can read as such: `text/*`
/// (an event stream aside, which never ends), JSON, XML, JavaScript, YAML
/// and forms.
fn textual_type(media_type: &str) -> bool {
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
struct Replay {
    frames: std::collections::VecDeque<Result<hyper::body::Frame<Bytes>, BodyError>>,
    rest: Option<Body>,
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
struct ReadAhead {
    /// The frames read, as they came.
    frames: std::collections::VecDeque<Result<hyper::body::Frame<Bytes>, BodyError>>,
    /// Their data.
    data: Vec<u8>,
    /// The body's unread rest, when it was longer than the limit.
    rest: Option<Body>,
    /// True when the body failed (the failure is among the frames).
    failed: bool,
    /// True when trailers came with it (HTTP/2, chunked HTTP/1.1).
    trailers: bool,
}

impl ReadAhead {
    /// The whole body again: the frames read, then the rest.
    fn replay(self) -> Body {
        Replay {
            frames: self.frames,
            rest: self.rest,
        }
        .boxed()
    }
}

/// Reads `body` until its end, a failure, or more than `limit` bytes.
async fn read_ahead(mut body: Body, limit: usize) -> ReadAhead {
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

/// Whether a response is a server-sent event stream.
/// Remembers the refusal texts of a JSON-RPC answer the proxy gives in a
/// server's place (one message or a batch), so that a tool result quoting
/// one is not recorded as that tool's content ([`crate::provider::ConversationRecord`]).
fn remember_refusals(conversation: &Mutex<crate::provider::ConversationRecord>, body: &str) {
    let Ok(answer) = serde_json::from_str::<serde_json::Value>(body) else {
        return;
    };
    let messages = match &answer {
        serde_json::Value::Array(batch) => batch.iter().collect(),
        single => vec![single],
    };
    let mut conversation = mcp::lock(conversation);
    // The reason: the model-facing message quotes it whole.
    for message in messages {
        if let Some(reason) = message
            .pointer("/error/data/reason")
            .and_then(|m| m.as_str())
        {
            conversation.remember_refusal(reason);
        }
    }
}

fn is_event_stream(response: &Response<Body>) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}

fn full(body: impl Into<Bytes>) -> Body {
    Full::new(body.into())
        .map_err(|never| match never {})
        .boxed()
}

/// Headers that describe one hop, never forwarded (RFC 9110 §7.6.1), plus
/// the proxy's own.
const HOP_BY_HOP: &[&str] = &[
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

fn strip_hop_by_hop(headers: &mut HeaderMap) {
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

fn is_upgrade(req: &Request<Incoming>) -> bool {
    req.headers().contains_key(header::UPGRADE) || req.method() == Method::CONNECT
}

/// Every `(host, port)` a request names: its absolute URI (or HTTP/2
/// `:authority`) and its Host header. The upstream routes by the header
/// while the proxy judges and resolves by the connection's name, so each
/// must name that host (and that port, where it gives one); several Host
/// headers, or userinfo in one, are refused outright (servers disagree on
/// which one counts).
fn request_authority<B>(req: &Request<B>) -> Result<Vec<(String, Option<u16>)>, Refusal> {
    let mut named = Vec::with_capacity(2);
    if let Some(authority) = req.uri().authority() {
        if authority.as_str().contains('@') {
            return Err(Refusal::new(
                RefusalCode::NotAHost,
                "userinfo in the request URI is not a host",
            ));
        }
        named.push((authority.host().to_ascii_lowercase(), authority.port_u16()));
    }
    let mut hosts = req.headers().get_all(header::HOST).iter();
    if let Some(value) = hosts.next() {
        if hosts.next().is_some() {
            return Err(Refusal::new(
                RefusalCode::HostMismatch,
                "more than one Host header",
            ));
        }
        let authority = value
            .to_str()
            .ok()
            .filter(|v| !v.contains('@'))
            .and_then(|v| v.parse::<http::uri::Authority>().ok())
            .ok_or_else(|| {
                Refusal::new(
                    RefusalCode::NotAHost,
                    "the Host header is not a host[:port]",
                )
            })?;
        named.push((authority.host().to_ascii_lowercase(), authority.port_u16()));
    }
    Ok(named)
}

/// Reads `SO_ORIGINAL_DST` (IPv4, then IPv6) of a redirected connection.
pub fn original_destination(stream: &TcpStream) -> Option<SocketAddr> {
    use nix::sys::socket::{getsockopt, sockopt};
    if let Ok(v4) = getsockopt(stream, sockopt::OriginalDst) {
        let ip = Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr));
        return Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be(v4.sin_port)));
    }
    let v6 = getsockopt(stream, sockopt::Ip6tOriginalDst).ok()?;
    let ip = Ipv6Addr::from(v6.sin6_addr.s6_addr);
    Some(SocketAddr::new(IpAddr::V6(ip), u16::from_be(v6.sin6_port)))
}

/// One kept upstream connection.
enum Sender {
    H1(hyper::client::conn::http1::SendRequest<Body>),
    H2(hyper::client::conn::http2::SendRequest<Body>),
}

impl Sender {
    fn is_closed(&self) -> bool {
        match self {
            Sender::H1(s) => s.is_closed(),
            Sender::H2(s) => s.is_closed(),
        }
    }

    fn is_ready(&self) -> bool {
        match self {
            Sender::H1(s) => s.is_ready(),
            Sender::H2(s) => s.is_ready(),
        }
    }
}

/// Where requests go: scheme, host and port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct UpstreamKey {
    tls: bool,
    /// Offer `h2` (the client spoke HTTP/2).
    h2: bool,
    host: String,
    port: u16,
}

/// Kept upstream connections, shared by every client connection of the
/// proxy: an HTTP/2 upstream carries the streams of all of them, and idle
/// HTTP/1.1 connections wait for the next request to the same place, so
/// idle agent connections do not each pin an upstream connection.
#[derive(Default)]
pub struct Upstreams {
    idle: Mutex<HashMap<UpstreamKey, Vec<Sender>>>,
}

/// The most upstream places with kept connections.
const MAX_UPSTREAM_KEYS: usize = 1024;

/// The most idle HTTP/1.1 connections kept per (scheme, host, port).
const IDLE_PER_UPSTREAM: usize = 32;

/// Why an upstream could not be used.
struct UpstreamFailure {
    status: StatusCode,
    kind: &'static str,
    reason: String,
}

impl UpstreamFailure {
    fn new(status: StatusCode, kind: &'static str, reason: impl Into<String>) -> UpstreamFailure {
        UpstreamFailure {
            status,
            kind,
            reason: reason.into(),
        }
    }
}

/// Whether a TLS server name names `host` (the CONNECT target).
fn sni_names(sni: &str, host: &str) -> bool {
    canonical_host(sni).ok().as_deref() == Some(host)
}

/// The refusal of a TLS server name that is not the CONNECT target.
fn sni_mismatch(sni: Option<&str>, host: &str) -> Refusal {
    let reason = match sni {
        Some(sni) => format!("TLS server name {sni:?} is not the CONNECT target {host:?}"),
        None => {
            format!("a TLS ClientHello without a server name is not the CONNECT target {host:?}")
        }
    };
    Refusal::new(RefusalCode::HostMismatch, reason)
}

/// An HTTP/1.1 client connection over `io`, driven in the background.
async fn http1_sender<I>(io: I) -> Result<Sender, UpstreamFailure>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| UpstreamFailure::new(StatusCode::BAD_GATEWAY, "protocol", e.to_string()))?;
    tokio::spawn(conn);
    Ok(Sender::H1(sender))
}

impl Upstreams {
    fn take(&self, key: &UpstreamKey) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let senders = idle.get_mut(key)?;
        senders.retain(|s| !s.is_closed());
        let position = senders.iter().position(Sender::is_ready)?;
        match &senders[position] {
            // HTTP/2 multiplexes: keep it for other streams too.
            Sender::H2(s) => Some(Sender::H2(s.clone())),
            Sender::H1(_) => Some(senders.swap_remove(position)),
        }
    }

    fn put(&self, key: UpstreamKey, sender: Sender) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        // Many names (a wildcard grant) must not grow the map forever.
        if idle.len() >= MAX_UPSTREAM_KEYS {
            idle.retain(|_, senders| {
                senders.retain(|s| !s.is_closed());
                !senders.is_empty()
            });
            if idle.len() >= MAX_UPSTREAM_KEYS {
                return;
            }
        }
        let senders = idle.entry(key).or_default();
        let h2_kept = senders.iter().any(|s| matches!(s, Sender::H2(_)));
        match sender {
            Sender::H2(_) if h2_kept => {}
            sender if senders.len() < IDLE_PER_UPSTREAM => senders.push(sender),
            _ => {}
        }
    }
}

impl Proxy {
    /// Who opened the connection from `client` to `server`.
    async fn identify(&self, client: SocketAddr, server: SocketAddr) -> Binary {
        match self.identity {
            IdentityMode::None => Binary(None),
            IdentityMode::Proc => {
                let root = self.proc_root.clone();
                Binary(
                    tokio::task::spawn_blocking(move || binary_of(&root, client, server))
                        .await
                        .ok()
                        .flatten(),
                )
            }
        }
    }

    fn snapshot(&self) -> Arc<Snapshot> {
        self.policy.borrow().clone()
    }

    fn credential_set(&self) -> Arc<CredentialSet> {
        self.credentials.borrow().clone()
    }

    /// Logs, keeps and counts a refusal for what a request carries
    /// (stage `credential`, which the operator turns into
    /// `CredentialMisuse` Events): misuse, an unavailable secret, or a
    /// policy refusal of a request carrying a placeholder (`unbound`).
    fn credential_refusal(
        &self,
        credential: &str,
        outcome: &'static str,
        binary: &Binary,
        host: &str,
        port: u16,
        refusal: &Refusal,
    ) {
        self.metrics.credential(credential, outcome);
        self.log_refusal("credential", binary, host, port, refusal);
    }

    /// Counts, keeps and logs a refusal, or an audited runtime trifecta
    /// flow (decision `audit`), which is forwarded.
    fn log_refusal(
        &self,
        stage: &'static str,
        binary: &Binary,
        host: &str,
        port: u16,
        refusal: &Refusal,
    ) {
        // A reason may quote a path or a name the agent wrote: a
        // placeholder or a secret there is never logged or kept.
        let mut redacted = refusal.clone();
        self.credential_set().redact_refusal(&mut redacted);
        let refusal = &redacted;
        // An audited runtime trifecta flow is forwarded: counted as
        // allowed, kept and logged as the refusal it would have been.
        let audit = refusal.decision == "audit";
        let counted = if audit {
            "runtime_trifecta_audit"
        } else {
            refusal.code.as_str()
        };
        self.metrics.decision(audit, stage, counted);
        self.keep_refusal(stage, binary, host, port, refusal);
        tracing::warn!(
            decision = refusal.decision,
            stage,
            code = refusal.code.as_str(),
            binary = binary.shown(),
            host,
            port,
            rule = refusal.rule.as_deref(),
            finding = refusal.finding.as_ref().map(|f| f.id.as_str()),
            reason = %refusal.reason,
            "{}",
            if audit {
                "runtime trifecta observed (audit: forwarded)"
            } else {
                "refused"
            }
        );
    }

    /// Keeps a refusal (or an audited flow) in the session's last ones.
    fn keep_refusal(
        &self,
        stage: &'static str,
        binary: &Binary,
        host: &str,
        port: u16,
        refusal: &Refusal,
    ) {
        mcp::lock(&self.session).refused(RefusalSeen {
            at: String::new(),
            stage,
            binary: binary.shown().to_string(),
            host: host.to_string(),
            port,
            refusal: refusal.clone(),
        });
    }

    /// Records what answers showed the agent (tool results, resources,
    /// prompts) in the conversation's record, before they are passed on.
    fn record_answers(&self, observed: Vec<mcp::Observed>) {
        let mut conversation = mcp::lock(&self.conversation);
        let mut session = mcp::lock(&self.session);
        for answer in observed {
            match answer {
                Some((source, pieces)) => {
                    for piece in &pieces {
                        conversation.observe_answer(source.clone(), piece, Instant::now());
                    }
                    session.content_read(&source);
                }
                None => conversation.lose(),
            }
        }
        let kept = conversation.kept_bytes();
        session.record_state(kept, conversation.record(Instant::now()).evicted());
        self.metrics.lineage(kept);
    }

    /// Accepts connections on `listener` forever. An accept error (out of
    /// file descriptors) is logged and retried after a pause, never spun on.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, kind: ListenerKind) {
        let local = listener.local_addr().ok();
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let proxy = self.clone();
            tokio::spawn(async move {
                match kind {
                    ListenerKind::Explicit => {
                        proxy
                            .explicit_connection(stream, peer, local.unwrap_or(peer))
                            .await;
                    }
                    ListenerKind::Transparent => {
                        proxy.transparent_connection(stream, peer, local).await;
                    }
                }
            });
        }
    }

    async fn explicit_connection(
        self: Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        local: SocketAddr,
    ) {
        // Shared with a CONNECT's tunnel or interception, which outlives
        // this HTTP/1.1 connection once upgraded.
        let open = Arc::new(self.metrics.accepted("explicit"));
        let _ = stream.set_nodelay(true);
        let binary = self.identify(peer, local).await;
        let connection = Arc::new(Inspected {
            proxy: self.clone(),
            binary,
            host: None,
            port: 80,
            tls: false,
            refusal: None,
            open: Some(open),
        });
        let service = service_fn(move |req| {
            let connection = connection.clone();
            async move { Ok::<_, Infallible>(connection.explicit_request(req).await) }
        });
        let result = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(self.limits.client_timeout)
            .max_buf_size(self.limits.max_header_bytes)
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades()
            .await;
        if let Err(e) = result {
            tracing::debug!(%peer, error = %e, "explicit connection ended with an error");
        }
    }

    async fn transparent_connection(
        self: Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        local: Option<SocketAddr>,
    ) {
        let _open = self.metrics.accepted("transparent");
        let _ = stream.set_nodelay(true);
        let Some(destination) = original_destination(&stream).filter(|d| Some(*d) != local) else {
            tracing::warn!(%peer, "refused: a connection to the transparent port that nftables did not redirect");
            self.metrics
                .decision(false, "connect", RefusalCode::NotAHost.as_str());
            return;
        };
        let binary = Box::pin(self.identify(peer, destination)).await;
        // Boxed, as every large step of a connection's life: a task is
        // allocated at the size of its largest state, and an idle
        // connection's task should hold only what idling needs.
        Box::pin(self.clone().admit(stream, binary, None, destination.port())).await;
    }

    /// The common path after CONNECT (host known) or redirection (host from
    /// SNI or Host): sniff, judge the connection, tunnel or inspect.
    async fn admit<S>(
        self: Arc<Self>,
        mut io: S,
        binary: Binary,
        connect_host: Option<String>,
        port: u16,
    ) where
        S: AsyncRead + AsyncWrite + Readiness + Unpin + Send + Sync + 'static,
    {
        let (sniffed, buffered) = match Box::pin(sniff(&mut io, self.limits.client_timeout)).await {
            Ok(s) => s,
            Err(e) => {
                let refusal = Refusal::new(
                    RefusalCode::UnsupportedProtocol,
                    format!("neither TLS nor HTTP: {e}"),
                );
                self.log_refusal(
                    "connect",
                    &binary,
                    connect_host.as_deref().unwrap_or(""),
                    port,
                    &refusal,
                );
                return;
            }
        };
        let sni = match &sniffed {
            Sniffed::Closed => return,
            Sniffed::Tls { sni } => sni.clone(),
            Sniffed::Plain => None,
        };
        let tls = matches!(sniffed, Sniffed::Tls { .. });
        // The name this connection is judged by, and a refusal that every
        // request on it gets.
        let (host, mut refusal) = match (&connect_host, &sni) {
            (Some(host), Some(sni)) if !sni_names(sni, host) => {
                (Some(host.clone()), Some(sni_mismatch(Some(sni), host)))
            }
            (Some(host), _) => (Some(host.clone()), None),
            (None, Some(sni)) => match canonical_host(sni) {
                Ok(host) => (Some(host), None),
                Err(refusal) => {
                    self.log_refusal("connect", &binary, sni, port, &refusal);
                    return;
                }
            },
            (None, None) if tls => {
                let refusal = Refusal::new(
                    RefusalCode::NotAHost,
                    "a TLS connection without a server name (SNI) cannot be judged",
                );
                self.log_refusal("connect", &binary, "", port, &refusal);
                return;
            }
            // Plain HTTP redirected: each request's Host names it.
            (None, None) => (None, None),
        };
        if let (Some(host), None, None) = (&host, &refusal, &connect_host) {
            // Redirected TLS: judge the connection now, as CONNECT would be.
            match judge_connection(&self.snapshot(), &binary, host, port) {
                Ok(Admitted::Tunnel(rule)) => {
                    self.metrics.decision(true, "connect", "tunnel");
                    return Box::pin(self.tunnel(io, buffered, binary, host.clone(), port, rule))
                        .await;
                }
                Ok(Admitted::Inspect) => self.metrics.decision(true, "connect", "inspect"),
                Err(r) => {
                    self.log_refusal("connect", &binary, host, port, &r);
                    // Terminate TLS anyway, so the agent reads why.
                    refusal = Some(r);
                }
            }
        }
        let connection = Arc::new(Inspected {
            proxy: self.clone(),
            binary,
            host: host.clone(),
            port,
            tls,
            refusal,
            open: None,
        });
        let io = Prefixed::new(buffered, io);
        if !tls {
            return Box::pin(connection.serve(Box::new(io), false)).await;
        }
        let leaf_host = host.unwrap_or_default();
        // Minting signs with ECDSA: off the async worker, once per host.
        let minted = match self.interceptor.cached(&leaf_host) {
            Some(config) => Ok(config),
            None => {
                let (interceptor, name) = (self.interceptor.clone(), leaf_host.clone());
                tokio::task::spawn_blocking(move || interceptor.server_config(&name))
                    .await
                    .unwrap_or_else(|e| {
                        Err(crate::tls::TlsError::Mint {
                            host: leaf_host.clone(),
                            reason: e.to_string(),
                        })
                    })
            }
        };
        let config = match minted {
            Ok(config) => config,
            Err(e) => {
                tracing::error!(host = %leaf_host, error = %e, "cannot intercept");
                return;
            }
        };
        let accepted = tokio::time::timeout(
            self.limits.client_timeout,
            Box::pin(TlsAcceptor::from(config).accept(io)),
        )
        .await;
        let stream = match accepted {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                // Typically a client that pins certificates: it needs an l4 grant.
                tracing::info!(host = %leaf_host, error = %e, "client refused the intercepted TLS handshake");
                return;
            }
            Err(_) => return,
        };
        let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
        // The transport boxed too: each async frame it passes through
        // would otherwise keep its own copy's room (a TLS stream is 1.3 KB).
        Box::pin(connection.serve(Box::new(stream), h2)).await;
    }

    /// Passes bytes both ways until either side closes, or until a new
    /// policy no longer allows the tunnel.
    async fn tunnel<S>(
        self: Arc<Self>,
        mut client: S,
        replay: Vec<u8>,
        binary: Binary,
        host: String,
        port: u16,
        rule: String,
    ) where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let mut upstream = match self.connect_tcp(&host, port).await {
            Ok(upstream) => upstream,
            Err(failure) => {
                self.metrics.upstream_error(failure.kind);
                tracing::warn!(host, port, error = %failure.reason, "tunnel upstream failed");
                return;
            }
        };
        // After CONNECT nothing has been read yet. A client that speaks
        // first with TLS must name the CONNECT target in its SNI: through a
        // CDN, another SNI on the granted address would reach another site
        // (domain fronting). A server that speaks first (SSH, SMTP) cannot
        // be sniffed and needs not be; whatever the client sent meanwhile
        // is kept and replayed.
        let mut replay = replay;
        if replay.is_empty() {
            let deadline = std::time::Instant::now() + self.limits.client_timeout;
            let mut banner = [0u8; 1];
            let sniffed = tokio::select! {
                sniffed = sniff_into(&mut client, &mut replay, deadline) => Some(sniffed),
                _ = upstream.peek(&mut banner) => None,
            };
            let refusal = match sniffed {
                Some(Ok(Sniffed::Tls { sni }))
                    if !sni.as_deref().is_some_and(|sni| sni_names(sni, &host)) =>
                {
                    Some(sni_mismatch(sni.as_deref(), &host))
                }
                Some(Err(e)) => Some(Refusal::new(
                    RefusalCode::UnsupportedProtocol,
                    format!("tunnel to {host}:{port}: {e}"),
                )),
                _ => None,
            };
            if let Some(refusal) = refusal {
                return self.log_refusal("connect", &binary, &host, port, &refusal);
            }
        }
        // Judged again now: a revocation may have landed while connecting
        // and sniffing, and later changes are awaited below.
        let mut policy = self.policy.clone();
        let current = policy.borrow_and_update().clone();
        if !matches!(
            judge_connection(&current, &binary, &host, port),
            Ok(Admitted::Tunnel(_))
        ) {
            let refusal = Refusal::new(
                RefusalCode::Revoked,
                format!(
                    "connect {host}:{port} by {}: the policy changed and no longer allows this tunnel",
                    binary.shown()
                ),
            );
            return self.log_refusal("connect", &binary, &host, port, &refusal);
        }
        // A tunnel into an in-process sink's regions carries bytes no one
        // reads, and stays open while content arrives: where the session is
        // recorded it may carry the secret (docs/trifecta.md, "At run time").
        if policy_of(&current).is_ok_and(|p| p.records_sessions) {
            let refusal = current
                .findings
                .tunnel_flow(binary.shown(), &host, port)
                .map(|pending| {
                    pending.unread(
                        &format_args!("connect {host}:{port}"),
                        "an l4 tunnel is never read",
                    )
                });
            if let Some(refusal) = refusal {
                self.log_refusal("connect", &binary, &host, port, &refusal);
                if refusal.decision == "deny" {
                    return;
                }
            }
        }
        if upstream.write_all(&replay).await.is_err() {
            return;
        }
        tracing::debug!(host, port, rule, binary = binary.shown(), "tunnel open");
        if policy_of(&current).is_ok_and(|p| p.records_sessions) {
            // What comes back through a tunnel is unread: the record can no
            // longer say a value was seen nowhere (docs/policy-semantics.md §8.3).
            mcp::lock(&self.conversation).lose();
            tracing::info!(
                host,
                port,
                "content through an l4 tunnel is not recorded; the session's record now counts as evicted"
            );
        }
        let mut copy =
            tokio::spawn(
                async move { tokio::io::copy_bidirectional(&mut client, &mut upstream).await },
            );
        loop {
            tokio::select! {
                _ = &mut copy => return,
                changed = policy.changed() => {
                    if changed.is_err() {
                        copy.abort();
                        return;
                    }
                    let snapshot = policy.borrow_and_update().clone();
                    if !matches!(judge_connection(&snapshot, &binary, &host, port), Ok(Admitted::Tunnel(_))) {
                        copy.abort();
                        self.metrics.tunnel_revoked();
                        let refusal = Refusal::new(RefusalCode::Revoked, format!("connect {host}:{port} by {}: the new policy no longer allows this tunnel", binary.shown()));
                        self.log_refusal("connect", &binary, &host, port, &refusal);
                        return;
                    }
                }
            }
        }
    }

    async fn connect_tcp(&self, host: &str, port: u16) -> Result<TcpStream, UpstreamFailure> {
        let fail = UpstreamFailure::new;
        let addrs = tokio::time::timeout(
            self.limits.connect_timeout,
            self.resolver.resolve(host, port),
        )
        .await
        .map_err(|_| {
            fail(
                StatusCode::GATEWAY_TIMEOUT,
                "timeout",
                format!("resolving {host} timed out"),
            )
        })?
        .map_err(|e| fail(StatusCode::BAD_GATEWAY, "resolve", e.to_string()))?;
        let mut last = String::from("no address");
        for addr in addrs {
            match tokio::time::timeout(self.limits.connect_timeout, TcpStream::connect(addr)).await
            {
                Ok(Ok(stream)) => {
                    let _ = stream.set_nodelay(true);
                    return Ok(stream);
                }
                Ok(Err(e)) => last = format!("{addr}: {e}"),
                Err(_) => last = format!("{addr}: timed out"),
            }
        }
        Err(fail(
            StatusCode::BAD_GATEWAY,
            "connect",
            format!("cannot connect to {host}:{port}: {last}"),
        ))
    }

    async fn connect_upstream(&self, key: &UpstreamKey) -> Result<Sender, UpstreamFailure> {
        let fail = UpstreamFailure::new;
        let tcp = self.connect_tcp(&key.host, key.port).await?;
        if !key.tls {
            return http1_sender(tcp).await;
        }
        let name = ServerName::try_from(key.host.clone())
            .map_err(|e| fail(StatusCode::BAD_GATEWAY, "tls", e.to_string()))?;
        let tls = tokio::time::timeout(
            self.limits.connect_timeout,
            TlsConnector::from(if key.h2 {
                self.upstream_tls.h2.clone()
            } else {
                self.upstream_tls.http1.clone()
            })
            .connect(name, tcp),
        )
        .await
        .map_err(|_| {
            fail(
                StatusCode::GATEWAY_TIMEOUT,
                "timeout",
                format!("TLS handshake with {} timed out", key.host),
            )
        })?
        .map_err(|e| {
            fail(
                StatusCode::BAD_GATEWAY,
                "tls",
                format!("TLS with {}:{} failed: {e}", key.host, key.port),
            )
        })?;
        if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
            return http1_sender(tls).await;
        }
        let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .handshake(TokioIo::new(tls))
            .await
            .map_err(|e| fail(StatusCode::BAD_GATEWAY, "protocol", e.to_string()))?;
        tokio::spawn(conn);
        Ok(Sender::H2(sender))
    }
}

/// What a request carries (docs/policy-semantics.md §9.4): the credential
/// its placeholder names, if any, and the scan of its body.
struct Carrying {
    set: Arc<CredentialSet>,
    carried: Option<Carried>,
    /// Set when the sandbox declares any credential: every body is read
    /// as it streams.
    scan: Option<Arc<BodyScan>>,
    /// The request as reasons name it (`POST https://host:443/x by BINARY`).
    shown: String,
}

impl Carrying {
    /// The credential's name.
    fn name(&self) -> Option<&str> {
        self.carried.as_ref().map(Carried::name)
    }

    /// `body`, scanned as it streams where a credential is declared.
    fn scanned(&self, body: Body) -> Body {
        match &self.scan {
            Some(scan) => Scanned::refusing(body, scan.clone()).boxed(),
            None => body,
        }
    }

    /// The secret to attach, if the request carries a credential.
    fn attachment(&self) -> Result<Option<Attachment>, CredentialIssue> {
        match &self.carried {
            Some(carried) => self.set.attachment(carried).map(Some),
            None => Ok(None),
        }
    }

    /// The misuse the body's scan found, if it found one.
    fn body_misuse(&self) -> Option<Refusal> {
        self.scan.as_ref()?.hit()
    }

    /// The answer to a request whose body carried a placeholder or a
    /// secret (already logged when it was found).
    fn body_refusal_response(&self) -> Response<Body> {
        let refusal = self.body_misuse().unwrap_or_else(|| {
            Refusal::new(
                RefusalCode::CredentialMisuse,
                format!(
                    "{}: its body carries a credential's placeholder or secret",
                    self.shown
                ),
            )
        });
        refusal_response(&refusal)
    }
}

/// What the answer to forwarded MCP messages is read for: the lists to
/// filter, the results and other content to record, and the credential
/// the request carried (lists show what calls carrying it could do).
struct AnswerRead {
    lists: Vec<mcp::ListRequest>,
    results: Vec<mcp::ResultRequest>,
    others: Option<Source>,
    credential: Option<String>,
}

/// A client connection whose requests are judged one by one.
struct Inspected {
    proxy: Arc<Proxy>,
    binary: Binary,
    /// The judged host; `None` on plain redirected HTTP, where each
    /// request's Host header names it.
    host: Option<String>,
    port: u16,
    /// Whether upstream requests use TLS.
    tls: bool,
    /// A refusal every request gets (a refused redirected connection, a
    /// mismatched SNI).
    refusal: Option<Refusal>,
    /// Counts the client connection as open while anything uses it.
    open: Option<Arc<GaugeGuard>>,
}

impl Inspected {
    /// Serves HTTP/1.1, or HTTP/2 when the client chose `h2` by ALPN, with
    /// every request judged by [`Inspected::request`].
    async fn serve<S>(self: Arc<Self>, io: S, h2: bool)
    where
        S: AsyncRead + AsyncWrite + Readiness + Unpin + Send + Sync + 'static,
    {
        if !h2 {
            return self.serve_http1(io).await;
        }
        let limits = self.proxy.limits.clone();
        let this = self.clone();
        let service = service_fn(move |req| {
            let this = this.clone();
            async move { Ok::<_, Infallible>(this.request(req).await) }
        });
        let max_header = u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX);
        let _ = Box::pin(
            hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .max_header_list_size(max_header)
                .keep_alive_interval(Some(Duration::from_secs(60)))
                .serve_connection(TokioIo::new(io), service),
        )
        .await;
    }

    /// HTTP/1.1, parked while idle (see [`crate::idle`]): after
    /// [`PARK_AFTER`] with no request in flight and no byte moved, hyper
    /// closes its idle state and gives the transport back with any bytes it
    /// had read; the connection then waits for the socket before hyper
    /// serves it again. A request cannot be cut: parking is asked only
    /// with none in flight, and a head hyper had begun to read comes back in
    /// its read buffer and is replayed.
    async fn serve_http1<S>(self: Arc<Self>, io: S)
    where
        S: AsyncRead + AsyncWrite + Readiness + Unpin + Send + Sync + 'static,
    {
        let limits = self.proxy.limits.clone();
        let mut transport = Prefixed::new(Vec::new(), io);
        // Since when a parked connection has held an unfinished request
        // head: hyper's header timeout restarts with each new hyper
        // connection, so a head trickled across parkings is bounded here.
        let mut head_since: Option<Instant> = None;
        loop {
            let activity = Arc::new(Activity::default());
            let this = self.clone();
            let requests = activity.clone();
            let service = service_fn(move |req| {
                let this = this.clone();
                let in_flight = requests.start();
                Box::pin(async move {
                    let response = this.request(req).await;
                    Ok::<_, Infallible>(response.map(|body| Tracked::new(body, in_flight).boxed()))
                })
                    as Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>
            });
            // Boxed, so that a parked connection's task does not keep
            // hyper's state's room.
            let mut connection = Box::new(
                hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(limits.client_timeout)
                    .max_buf_size(limits.max_header_bytes)
                    .serve_connection(
                        TokioIo::new(Metered::new(transport, activity.clone())),
                        service,
                    ),
            );
            let mut parking = false;
            let ended = loop {
                let moved = activity.moved();
                tokio::select! {
                    ended = std::future::poll_fn(|cx| connection.poll_without_shutdown(cx)) => break ended,
                    () = tokio::time::sleep(PARK_AFTER), if !parking => {
                        if activity.quiet() && activity.moved() == moved {
                            parking = true;
                            Pin::new(&mut *connection).graceful_shutdown();
                        }
                    }
                }
            };
            let parts = connection.into_parts();
            transport = parts.io.into_inner().into_inner();
            if ended.is_err() {
                return;
            }
            if !parking {
                // Ended by the client or by `Connection: close`: what
                // hyper would have done without `poll_without_shutdown`.
                let _ = transport.shutdown().await;
                return;
            }
            if parts.read_buf.is_empty() {
                head_since = None;
            } else if head_since.get_or_insert_with(Instant::now).elapsed() > limits.client_timeout
            {
                tracing::info!(host = ?self.host, "closed: a request head still unfinished after the client timeout");
                return;
            }
            transport.unread(&parts.read_buf);
            drop(parts.read_buf);
            let _parked = self.proxy.metrics.parked();
            match tokio::time::timeout(limits.idle_timeout, transport.readable()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return,
                Err(_) => {
                    // Quiet too long: closed as hyper would close it
                    // (close_notify, then FIN).
                    let _ = transport.shutdown().await;
                    return;
                }
            }
        }
    }

    /// A request on the explicit listener: CONNECT or absolute-form http://.
    async fn explicit_request(self: Arc<Self>, req: Request<Incoming>) -> Response<Body> {
        let proxy = &self.proxy;
        if req.method() == Method::CONNECT {
            let Some(authority) = req.uri().authority().cloned() else {
                return error_response(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    "CONNECT needs host:port",
                );
            };
            let Some(port) = authority.port_u16().filter(|p| *p != 0) else {
                return error_response(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    "CONNECT needs host:port with a port",
                );
            };
            let host = match canonical_host(authority.host()) {
                Ok(host) => host,
                Err(refusal) => {
                    proxy.log_refusal("connect", &self.binary, authority.host(), port, &refusal);
                    return refusal_response(&refusal);
                }
            };
            let admitted = match judge_connection(&proxy.snapshot(), &self.binary, &host, port) {
                Ok(admitted) => admitted,
                Err(refusal) => {
                    proxy.log_refusal("connect", &self.binary, &host, port, &refusal);
                    return refusal_response(&refusal);
                }
            };
            let (proxy, binary, open) = (proxy.clone(), self.binary.clone(), self.open.clone());
            tokio::spawn(async move {
                let _open = open;
                let upgraded = match hyper::upgrade::on(req).await {
                    Ok(upgraded) => upgraded,
                    Err(e) => return tracing::debug!(error = %e, "CONNECT upgrade failed"),
                };
                // The socket itself, with what the client sent after its
                // CONNECT: so that an idle interception can wait on it.
                let upgraded = match upgraded.downcast::<TokioIo<TcpStream>>() {
                    Ok(parts) => Prefixed::new(parts.read_buf.to_vec(), parts.io.into_inner()),
                    Err(_) => {
                        return tracing::error!(
                            "a CONNECT upgrade did not give back its TCP stream"
                        );
                    }
                };
                match admitted {
                    Admitted::Tunnel(rule) => {
                        proxy.metrics.decision(true, "connect", "tunnel");
                        Box::pin(proxy.tunnel(upgraded, Vec::new(), binary, host, port, rule))
                            .await;
                    }
                    Admitted::Inspect => {
                        proxy.metrics.decision(true, "connect", "inspect");
                        Box::pin(proxy.admit(upgraded, binary, Some(host), port)).await;
                    }
                }
            });
            return Response::new(full(Bytes::new()));
        }
        if req.uri().scheme_str() == Some("http") && req.uri().authority().is_some() {
            return self.request(req).await;
        }
        error_response(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "this is a proxy: send CONNECT host:port, or an absolute http:// URI",
        )
    }

    /// Judges one request and forwards it when allowed.
    async fn request(self: Arc<Self>, req: Request<Incoming>) -> Response<Body> {
        let proxy = &self.proxy;
        let credentials = proxy.credential_set();
        let shown_host = self.host.clone().unwrap_or_default();
        let refuse = |mut refusal: Refusal, host: &str, port: u16| {
            // The refusal goes back to the agent too: no placeholder or
            // secret it quotes is echoed.
            credentials.redact_refusal(&mut refusal);
            proxy.log_refusal("request", &self.binary, host, port, &refusal);
            refusal_response(&refusal)
        };
        if let Some(refusal) = &self.refusal {
            return refuse(refusal.clone(), &shown_host, self.port);
        }
        let named = match request_authority(&req) {
            Ok(named) => named,
            Err(refusal) => return refuse(refusal, &shown_host, self.port),
        };
        // Absolute-form http:// on the explicit listener names its own host
        // and port; otherwise the connection (or, for redirected plain HTTP,
        // the first name the request gives) does.
        let explicit_plain = self.host.is_none() && req.uri().scheme_str() == Some("http");
        let port = if explicit_plain {
            named.first().and_then(|(_, p)| *p).unwrap_or(80)
        } else {
            self.port
        };
        let host = match (&self.host, named.first()) {
            (Some(host), _) => host.clone(),
            (None, Some((name, _))) => match canonical_host(name) {
                Ok(host) => host,
                Err(refusal) => return refuse(refusal, name, port),
            },
            (None, None) => {
                let refusal = Refusal::new(
                    RefusalCode::NotAHost,
                    "a request without a Host header cannot be judged",
                );
                return refuse(refusal, "", port);
            }
        };
        for (name, named_port) in &named {
            let same_host = canonical_host(name).ok().as_deref() == Some(host.as_str());
            if !same_host || named_port.is_some_and(|p| p != port) {
                let shown = match named_port {
                    Some(p) => format!("{name}:{p}"),
                    None => name.clone(),
                };
                let refusal = Refusal::new(
                    RefusalCode::HostMismatch,
                    format!("the request names {shown:?}, but it is judged for {host}:{port}"),
                );
                return refuse(refusal, &host, port);
            }
        }
        if is_upgrade(&req) {
            let refusal = Refusal::new(
                RefusalCode::UnsupportedProtocol,
                format!(
                    "{} https://{host}:{port}{}: protocol upgrades (WebSocket) are not modelled yet",
                    req.method(),
                    req.uri().path()
                ),
            );
            return refuse(refusal, &host, port);
        }
        // Which credential the request carries, before anything is judged
        // or read (docs/policy-semantics.md §9.4).
        let carrying = match self.carrying(&credentials, &req, &host, port) {
            Ok(carrying) => carrying,
            Err(response) => return response,
        };
        let mut req = req.map(|body| carrying.scanned(boxed(body)));
        if let Some(scan) = &carrying.scan {
            // For `forward`: a body that fails on a placeholder is answered
            // as the misuse, not as an upstream failure.
            req.extensions_mut().insert(scan.clone());
        }
        let snapshot = proxy.snapshot();
        if let Some(path) = mcp_path(&snapshot, &host, port, req.uri().path()) {
            let key = UpstreamKey {
                tls: self.tls,
                h2: self.tls && req.version() == Version::HTTP_2,
                host: host.clone(),
                port,
            };
            return self
                .mcp_request(req, &snapshot, key, &path, &carrying)
                .await;
        }
        let credential = carrying.name();
        // A request carrying a placeholder that no rule binding it allows
        // is the policy's refusal, logged as a credential's (the signal an
        // operator wants: the agent sent its placeholder where it is not
        // bound).
        let refuse_judged = |mut refusal: Refusal| {
            credentials.redact_refusal(&mut refusal);
            match credential {
                Some(name)
                    if matches!(
                        refusal.code,
                        RefusalCode::NoRule | RefusalCode::DeniedByRule
                    ) =>
                {
                    proxy.credential_refusal(name, "unbound", &self.binary, &host, port, &refusal);
                    refusal_response(&refusal)
                }
                _ => refuse(refusal, &host, port),
            }
        };
        let judged = judge_carrying(
            &snapshot,
            &credentials,
            carrying.carried.as_ref(),
            &self.binary,
            &host,
            port,
            req.method().as_str(),
            req.uri().path(),
            req.headers(),
        );
        let (rule, action, attachment) = match judged {
            Ok(judged) => (judged.rule, judged.action, judged.attachment),
            Err(Refused::Policy(refusal)) => return refuse_judged(refusal),
            // Allowed with the credential, but its secret is not at hand:
            // not sent at all (never with its placeholder, never without).
            Err(Refused::Credential(issue)) => {
                return self.refuse_carrying(&issue, &carrying, &host, port);
            }
        };
        let key = UpstreamKey {
            tls: self.tls,
            h2: self.tls && req.version() == Version::HTTP_2,
            host: host.clone(),
            port,
        };
        strip_hop_by_hop(req.headers_mut());
        // A body the request announces (a length, chunks, an HTTP/2 stream
        // left open), whatever its method: it may carry a conversation.
        let has_body = !hyper::body::Body::is_end_stream(req.body());
        let api = match model_request(&snapshot, &self.binary, &action, has_body) {
            None => None,
            Some(Ok(api)) => Some(api),
            Some(Err(refusal)) => return refuse(refusal, &host, port),
        };
        // A host's response body is content the agent reads: recorded as
        // host:NAME where the policy keeps a record, except the answer to
        // the model request itself (the model's own output is no source).
        let records_body = policy_of(&snapshot).is_ok_and(|p| p.records_sessions) && api.is_none();
        if records_body {
            // Compressed content could not be read to record.
            req.headers_mut().insert(
                header::ACCEPT_ENCODING,
                HeaderValue::from_static("identity"),
            );
        }
        let (req, recorded) = match api {
            None => (req, 0),
            Some(api) => match self.record_model_request(req, api).await {
                Ok(recorded) => recorded,
                // A body that failed on a placeholder is that misuse,
                // already logged when it was found.
                Err(_) if carrying.body_misuse().is_some() => {
                    return carrying.body_refusal_response();
                }
                Err(refusal) => return refuse(refusal, &host, port),
            },
        };
        // Only a recorded conversation is exempt (it carries the tool
        // results by design); a model path whose body held none is judged
        // like any other request.
        let req = if recorded > 0 {
            req
        } else {
            match self.judge_sink_request(req, &snapshot, &action).await {
                Ok(req) => req,
                Err(_) if carrying.body_misuse().is_some() => {
                    return carrying.body_refusal_response();
                }
                Err(refusal) => return refuse(refusal, &host, port),
            }
        };
        let req = match self.attach(req, attachment.as_ref(), &host, port) {
            Ok(req) => req,
            Err(response) => return response,
        };
        proxy.metrics.decision(true, "request", "allowed");
        tracing::debug!(decision = "allow", rule, credential, method = %req.method(), host, port, path = req.uri().path(), "allowed");
        let response = self.forward(key, req).await;
        if !records_body {
            return response;
        }
        self.record_host_response(response, &host).await
    }

    /// What a request's head carries ([`CredentialSet::detect`]), with its
    /// body wrapped to be scanned as it streams when the sandbox declares
    /// any credential; or the refusal of a misused or unavailable one.
    #[allow(clippy::result_large_err)]
    fn carrying<B>(
        self: &Arc<Self>,
        credentials: &Arc<CredentialSet>,
        req: &Request<B>,
        host: &str,
        port: u16,
    ) -> Result<Carrying, Response<Body>> {
        let mut carrying = Carrying {
            set: credentials.clone(),
            carried: None,
            scan: None,
            shown: String::new(),
        };
        if credentials.is_empty() {
            return Ok(carrying);
        }
        let scheme = if self.tls { "https" } else { "http" };
        // As reasons name the request; a placeholder in the path is
        // replaced, never echoed.
        carrying.shown = format!(
            "{} {scheme}://{host}:{port}{} by {}",
            req.method(),
            credentials.redact(req.uri().path()),
            self.binary.shown()
        );
        match credentials.detect(req.uri(), req.headers()) {
            Ok(carried) => carrying.carried = carried,
            Err(issue) => return Err(self.refuse_carrying(&issue, &carrying, host, port)),
        }
        let (proxy, binary, host) = (self.proxy.clone(), self.binary.clone(), host.to_string());
        carrying.scan = Some(BodyScan::new(
            credentials.clone(),
            carrying.shown.clone(),
            Box::new(move |issue: &CredentialIssue, refusal: &Refusal| {
                proxy.credential_refusal(
                    &issue.credential,
                    issue.outcome(),
                    &binary,
                    &host,
                    port,
                    refusal,
                );
            }),
        ));
        Ok(carrying)
    }

    /// Refuses a request for what it carries: logged and counted as a
    /// credential's refusal, answered 403.
    fn refuse_carrying(
        &self,
        issue: &CredentialIssue,
        carrying: &Carrying,
        host: &str,
        port: u16,
    ) -> Response<Body> {
        let refusal = issue.refusal(&carrying.shown);
        self.proxy.credential_refusal(
            &issue.credential,
            issue.outcome(),
            &self.binary,
            host,
            port,
            &refusal,
        );
        refusal_response(&refusal)
    }

    /// An allowed MCP request as it leaves: hop-by-hop headers gone and the
    /// carried credential's secret attached; without the secret it is
    /// refused, never sent with the placeholder or without it.
    #[allow(clippy::result_large_err)]
    fn attach_carried(
        &self,
        carrying: &Carrying,
        mut parts: http::request::Parts,
        body: Body,
        key: &UpstreamKey,
    ) -> Result<Request<Body>, Response<Body>> {
        let attachment = carrying
            .attachment()
            .map_err(|issue| self.refuse_carrying(&issue, carrying, &key.host, key.port))?;
        strip_hop_by_hop(&mut parts.headers);
        self.attach(
            Request::from_parts(parts, body),
            attachment.as_ref(),
            &key.host,
            key.port,
        )
    }

    /// Puts the secret in the placeholder's place, as the last step before
    /// the request leaves, and has its answer masked where it echoes the
    /// secret.
    #[allow(clippy::result_large_err)]
    fn attach(
        &self,
        req: Request<Body>,
        attachment: Option<&Attachment>,
        host: &str,
        port: u16,
    ) -> Result<Request<Body>, Response<Body>> {
        let Some(attachment) = attachment else {
            return Ok(req);
        };
        let (mut parts, body) = req.into_parts();
        if let Err(why) = attachment.apply(&mut parts.headers, &mut parts.uri) {
            let refusal = Refusal::new(
                RefusalCode::CredentialUnavailable,
                format!(
                    "{} {host}:{port} by {}: credential {} could not be attached: {why}",
                    parts.method,
                    self.binary.shown(),
                    attachment.credential()
                ),
            );
            self.proxy.credential_refusal(
                attachment.credential(),
                "unavailable",
                &self.binary,
                host,
                port,
                &refusal,
            );
            return Err(refusal_response(&refusal));
        }
        parts.extensions.insert(attachment.response_mask());
        self.proxy
            .metrics
            .credential(attachment.credential(), "attached");
        Ok(Request::from_parts(parts, body))
    }

    /// Records an intercepted host's response body as `host:NAME` before
    /// it is passed on (docs/policy-semantics.md §8.3). A body that cannot
    /// be read as text (compressed, an event stream, a binary type, longer
    /// than [`MAX_RECORDED_BODY_BYTES`]) passes unrecorded and the record
    /// counts as evicted from then on: doubt never allows.
    async fn record_host_response(&self, response: Response<Body>, host: &str) -> Response<Body> {
        let headers = response.headers();
        let header_text = |name: header::HeaderName| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.trim().to_ascii_lowercase())
        };
        // Every value: a second header's coding applies as surely as the first.
        let encoded = headers
            .get_all(header::CONTENT_ENCODING)
            .iter()
            .any(|v| v.to_str().map(content_coded).unwrap_or(true));
        let textual = header_text(header::CONTENT_TYPE).is_none_or(|t| textual_type(&t));
        let too_long = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok())
            .is_some_and(|n| n > MAX_RECORDED_BODY_BYTES);
        let lose = |why: &str| {
            mcp::lock(&self.proxy.conversation).lose();
            tracing::info!(
                host,
                why,
                "a response body is not recorded; the session's record now counts as evicted"
            );
        };
        if encoded || !textual || too_long {
            lose(if encoded {
                "compressed"
            } else if too_long {
                "too long"
            } else {
                "not text"
            });
            return response;
        }
        let (parts, body) = response.into_parts();
        let mut read = read_ahead(body.boxed(), MAX_RECORDED_BODY_BYTES).await;
        if read.failed {
            // Passed on as it came: the client sees the failure.
            lose("the body failed");
        } else if read.rest.is_some() {
            lose("too long");
        } else if !read.data.is_empty() {
            // Not UTF-8 (a binary body without a type, say): unread.
            match String::from_utf8(std::mem::take(&mut read.data)) {
                Ok(content) => {
                    let source = Source::Host(host.to_string());
                    self.proxy
                        .record_answers(vec![Some((source, vec![content]))]);
                }
                Err(_) => lose("not UTF-8 text"),
            }
        }
        Response::from_parts(parts, read.replay())
    }

    /// A request the policy allows may still be a call of an in-process
    /// trifecta sink (docs/trifecta.md, "At run time"). Where the session
    /// is recorded and the request (or a method it overrides to) lies in a
    /// sink's regions, it is read whole (up to [`MAX_RECORDED_BODY_BYTES`])
    /// before it passes; then, if the flow's untrusted input has reached
    /// the model, it is refused (or, in audit, logged) when one of its
    /// values was seen in the secret's content, or when its values cannot
    /// be read: it may carry the secret. Every other request streams
    /// through unread.
    async fn judge_sink_request(
        &self,
        req: Request<Body>,
        snapshot: &Snapshot,
        action: &NetworkAction,
    ) -> Result<Request<Body>, Refusal> {
        if !policy_of(snapshot).is_ok_and(|p| p.records_sessions) {
            return Ok(req);
        }
        // Servers that honour a method override run that method: a sink's
        // call by either method is the sink's call.
        let mut actions = vec![action.clone()];
        actions.extend(
            method_overrides(req.headers()).map(|(_, method)| NetworkAction {
                method: method.to_string(),
                ..action.clone()
            }),
        );
        let findings = &snapshot.findings;
        if !actions.iter().any(|a| findings.is_sink_request(a)) {
            return Ok(req);
        }
        let (parts, body) = req.into_parts();
        let read = read_ahead(body, MAX_RECORDED_BODY_BYTES).await;
        let pending = {
            let conversation = mcp::lock(&self.proxy.conversation);
            let record = conversation.record(Instant::now());
            actions
                .iter()
                .find_map(|a| findings.pending_request_flow(a, &record))
        };
        let Some(pending) = pending else {
            return Ok(Request::from_parts(parts, read.replay()));
        };
        let scheme = if self.tls { "https" } else { "http" };
        let call = format!(
            "{} {scheme}://{}:{}{}",
            parts.method,
            action.host,
            action.port,
            parts.uri.path()
        );
        let values = if read.failed {
            Err("its body failed".to_string())
        } else if read.rest.is_some() {
            Err(format!(
                "its body is longer than {MAX_RECORDED_BODY_BYTES} bytes"
            ))
        } else if read.trailers {
            Err("it has trailers, which are not read".to_string())
        } else {
            let target = parts
                .uri
                .path_and_query()
                .map_or_else(|| parts.uri.path(), |p| p.as_str());
            let headers = parts
                .headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_bytes()));
            request_values(target, headers, &read.data).map_err(|e| e.to_string())
        };
        // The values are read outside the lock: a body of megabytes must
        // not hold up the pod's other calls.
        let refusal = match values {
            Err(why) => Some(pending.unread(&call, &why)),
            Ok(values) => {
                let conversation = mcp::lock(&self.proxy.conversation);
                let record = conversation.record(Instant::now());
                actions.iter().find_map(|a| {
                    findings
                        .observed_request_flow(a, &values, &record)
                        .map(|observed| observed.refusal(&call))
                })
            }
        };
        if let Some(refusal) = refusal {
            if refusal.decision == "deny" {
                return Err(refusal);
            }
            self.proxy
                .log_refusal("request", &self.binary, &action.host, action.port, &refusal);
        }
        Ok(Request::from_parts(parts, read.replay()))
    }

    /// Reads a request to the agent's model provider whole and records its
    /// conversation in the session's lineage (docs/policy-semantics.md
    /// §8.3) before it is forwarded. A body that cannot be read as the
    /// format its path names is refused: its content would go unrecorded.
    /// Returns the request and the number of pieces of content recorded.
    async fn record_model_request(
        &self,
        req: Request<Body>,
        api: crate::provider::ProviderApi,
    ) -> Result<(Request<Body>, usize), Refusal> {
        let (parts, body) = req.into_parts();
        let malformed = |why: String| {
            Refusal::new(
                RefusalCode::MalformedModelRequest,
                format!(
                    "{} {}: the model request's conversation could not be recorded, so it is not sent: {why}",
                    parts.method,
                    parts.uri.path()
                ),
            )
        };
        // A coded body would reach the provider decoded: read, it is not.
        let codings: Vec<&str> = parts
            .headers
            .get_all(header::CONTENT_ENCODING)
            .iter()
            .map(|v| v.to_str().unwrap_or("(not text)"))
            .filter(|v| !v.trim().eq_ignore_ascii_case("identity"))
            .collect();
        if !codings.is_empty() {
            return Err(malformed(format!(
                "its body has the content coding {:?}, which the proxy does not decode",
                codings.join(", ")
            )));
        }
        let bytes = match read_whole(body, MAX_MODEL_REQUEST_BYTES).await {
            Ok(bytes) => bytes,
            Err(e) => {
                return Err(malformed(format!(
                    "the body could not be read whole within {MAX_MODEL_REQUEST_BYTES} bytes: {e}"
                )));
            }
        };
        let pieces = crate::provider::conversation_pieces(api, &bytes)
            .map_err(|e| malformed(e.to_string()))?;
        let (fresh, kept) = {
            let mut conversation = mcp::lock(&self.proxy.conversation);
            let fresh = conversation.observe_request(&pieces, Instant::now());
            let kept = conversation.kept_bytes();
            let mut session = mcp::lock(&self.proxy.session);
            for (source, _) in &pieces {
                session.content_read(source);
            }
            session.record_state(kept, conversation.record(Instant::now()).evicted());
            (fresh, kept)
        };
        self.proxy.metrics.model_request(kept);
        tracing::debug!(
            ?api,
            pieces = pieces.len(),
            kept_bytes = kept,
            new_conversation = fresh,
            "model request recorded"
        );
        let recorded = pieces.len();
        Ok((Request::from_parts(parts, full(bytes)), recorded))
    }

    /// A request to an MCP server (docs/proxy.md, "MCP"): a POST's
    /// JSON-RPC messages are judged one by one before anything is
    /// forwarded, a refused one answered here; GET (the server's event
    /// stream) and DELETE (the end of a session) carry no call and pass
    /// when a session with the server is allowed.
    /// Puts a held call to a person through the approval service and
    /// waits: `Ok` once approved, else the refusal the agent reads.
    async fn hold(&self, held: &HeldCall) -> Result<(), Refusal> {
        let proxy = &self.proxy;
        let Some(approvals) = &proxy.approvals else {
            return Err(held::unavailable(
                held,
                "this proxy has no approval service (--approvals)",
            ));
        };
        let request = HoldRequest::of(held, approvals.timeout.as_secs());
        tracing::info!(
            binary = %self.binary.shown(),
            tool = %held.call.action.name,
            rule = %held.held.rule,
            "tools/call held for a person's approval"
        );
        proxy.metrics.held_call("held");
        let verdict = match approvals.ask(&proxy.resolver, &request).await {
            Ok(answer) => answer.verdict(held),
            Err(e) => Err(held::unavailable(held, &e.to_string())),
        };
        proxy.metrics.held_call(match &verdict {
            Ok(()) => "approved",
            Err(refusal) => refusal.code.as_str(),
        });
        if verdict.is_ok() {
            tracing::info!(
                binary = %self.binary.shown(),
                tool = %held.call.action.name,
                rule = %held.held.rule,
                "held tools/call approved: forwarded"
            );
        }
        verdict
    }

    async fn mcp_request(
        &self,
        req: Request<Body>,
        snapshot: &Snapshot,
        key: UpstreamKey,
        path: &str,
        carrying: &Carrying,
    ) -> Response<Body> {
        let proxy = &self.proxy;
        let server = McpServer {
            host: &key.host,
            port: key.port,
            path,
        };
        let credential = carrying.name();
        let refuse = |refusal: &Refusal| {
            proxy.log_refusal("mcp", &self.binary, &key.host, key.port, refusal);
        };
        // A policy refusal of messages carrying a placeholder is logged as
        // a credential's too (docs/policy-semantics.md §9.4).
        let refuse_judged = |refusal: &Refusal| match credential {
            Some(name)
                if matches!(
                    refusal.code,
                    RefusalCode::NoRule | RefusalCode::DeniedByRule
                ) =>
            {
                proxy.credential_refusal(
                    name,
                    "unbound",
                    &self.binary,
                    &key.host,
                    key.port,
                    refusal,
                );
            }
            _ => refuse(refusal),
        };
        if req.method() != Method::POST {
            if let Err(refusal) = mcp::judge_session(snapshot, &self.binary, server, credential) {
                refuse_judged(&refusal);
                return refusal_response(&refusal);
            }
            let get = req.method() == Method::GET;
            let (parts, body) = req.into_parts();
            let req = match self.attach_carried(carrying, parts, body, &key) {
                Ok(req) => req,
                Err(response) => return response,
            };
            proxy.metrics.decision(true, "mcp", "session");
            let response = self.forward(key.clone(), req).await;
            if !get || response.status() != StatusCode::OK || !is_event_stream(&response) {
                return response;
            }
            let origin = StreamOrigin {
                proxy: proxy.clone(),
                binary: self.binary.clone(),
                upstream: key.clone(),
                path: path.to_string(),
                credential: credential.map(str::to_string),
            };
            let visible = visible_at(
                proxy.clone(),
                self.binary.clone(),
                &key,
                path.to_string(),
                credential.map(str::to_string),
            );
            let (parts, body) = response.into_parts();
            let records = policy_of(snapshot).is_ok_and(|p| p.records_sessions);
            let mut filter = mcp::SseFilter::new(Vec::new());
            if records {
                filter.record_others_as(Source::Host(key.host.clone()));
            }
            let events = McpEvents {
                inner: body,
                filter,
                visible,
                done: false,
                origin: Some(origin),
                link: None,
                recorder: records.then(|| proxy.clone()),
            };
            return Response::from_parts(parts, events.boxed());
        }
        if let Some(name) = METHOD_OVERRIDES
            .iter()
            .find(|name| req.headers().contains_key(**name))
        {
            let refusal = Refusal::new(
                RefusalCode::MalformedMcp,
                format!(
                    "{name} on a POST to an MCP server: its messages could not be judged as sent"
                ),
            );
            refuse(&refusal);
            return refusal_response(&refusal);
        }
        let (parts, body) = req.into_parts();
        let bytes = match read_whole(body, mcp::MAX_BODY_BYTES).await {
            Ok(bytes) => bytes,
            Err(_) if carrying.body_misuse().is_some() => {
                return carrying.body_refusal_response();
            }
            Err(e) => {
                let refusal = Refusal::new(
                    RefusalCode::MalformedMcp,
                    format!(
                        "the body of a POST to an MCP server could not be read whole within {} bytes: {e}",
                        mcp::MAX_BODY_BYTES
                    ),
                );
                refuse(&refusal);
                return refusal_response(&refusal);
            }
        };
        // The HTTP+SSE stream this POST's answers go to, if it is one's
        // messages endpoint and this binary holds the stream. Looked up only
        // when there is something to put on it: not for an allowed call.
        let stream = || {
            let target = parts
                .uri
                .path_and_query()
                .map_or_else(|| parts.uri.path().to_string(), |p| p.as_str().to_string());
            proxy
                .sse_sessions
                .get(&session_key(&key, &self.binary, target))
        };
        // `from` is judged by the session's record where the policy keeps
        // one (a `modelProvider` endpoint), else with no record (§8.3).
        let records = policy_of(snapshot).is_ok_and(|p| p.records_sessions);
        let judge = |snapshot: &Snapshot| {
            let conversation = records.then(|| mcp::lock(&proxy.conversation));
            let record = conversation.as_deref().map(|c| c.record(Instant::now()));
            let record = record.as_ref().map(|r| r as &dyn Record);
            mcp::judge_post(snapshot, &self.binary, server, record, credential, &bytes)
        };
        let judged = match judge(snapshot) {
            Judged::Hold(held) => match self.hold(&held).await {
                // Judged again under the policy in force now: a revocation
                // while the person decided wins over their approval.
                Ok(()) => match judge(&proxy.policy.borrow().clone()) {
                    Judged::Hold(_) => held.approved(),
                    judged => judged,
                },
                Err(refusal) => held.refused(refusal),
            },
            judged => judged,
        };
        let (lists, results, linked) = match judged {
            // Resolved above; a second hold is never waited for.
            Judged::Hold(held) => {
                let refusal = held::unavailable(&held, "it was held again after its approval");
                refuse(&refusal);
                return refusal_response(&refusal);
            }
            Judged::Answer {
                status,
                body,
                refusal,
            } => {
                refuse_judged(&refusal);
                if records {
                    remember_refusals(&proxy.conversation, &body);
                }
                // JSON-RPC errors for the stream's client go on the stream,
                // which is where it reads answers; the POST is accepted.
                if status == 200
                    && let Some(stream) = stream()
                    && stream.deliver(body.as_bytes())
                {
                    let mut response = Response::new(full("Accepted"));
                    *response.status_mut() = StatusCode::ACCEPTED;
                    response
                        .headers_mut()
                        .insert("x-agentgate-decision", HeaderValue::from_static("deny"));
                    return response;
                }
                let mut response = Response::new(full(body));
                *response.status_mut() =
                    StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN);
                let headers = response.headers_mut();
                headers.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                headers.insert("x-agentgate-decision", HeaderValue::from_static("deny"));
                // The session continues: keep the client's session id.
                if let Some(session) = parts.headers.get("mcp-session-id") {
                    headers.insert("mcp-session-id", session.clone());
                }
                return response;
            }
            Judged::Forward {
                lists,
                calls,
                audits,
            } => {
                for audit in &audits {
                    proxy.log_refusal("mcp", &self.binary, &key.host, key.port, audit);
                }
                // The answers' content is recorded where the policy keeps
                // a record: a call's result as its tool's, a resource or
                // prompt as the server host's.
                let results: Vec<mcp::ResultRequest> = if records {
                    calls
                        .iter()
                        .filter_map(|call| {
                            let id = call.id.clone()?;
                            let source = match call.action.kind {
                                McpKind::Tool => Source::Tool(call.action.name.clone()),
                                McpKind::Resource | McpKind::Prompt => {
                                    Source::Host(key.host.clone())
                                }
                            };
                            Some(mcp::ResultRequest { id, source })
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                // Two awaited calls with one id: whose answer is whose could
                // not be told, and content could be recorded as another
                // tool's.
                let reused = |id: &serde_json::Value| {
                    Refusal::new(
                        RefusalCode::MalformedMcp,
                        format!(
                            "two calls of this MCP session await answers with the id {id}: their results could not be told apart"
                        ),
                    )
                };
                if let Some(id) = mcp::duplicate_id(&results) {
                    let refusal = reused(id);
                    refuse(&refusal);
                    return refusal_response(&refusal);
                }
                let linked = stream();
                if let Some(stream) = &linked {
                    let too_many = || {
                        Refusal::new(
                            RefusalCode::MalformedMcp,
                            format!(
                                "more than {} requests of this MCP session await answers; their results could not be filtered and recorded",
                                mcp::MAX_PENDING_LISTS
                            ),
                        )
                    };
                    let refusal = if !stream.expect_lists(&lists) {
                        Some(too_many())
                    } else {
                        match stream.expect_results(&results) {
                            Ok(()) => None,
                            Err(mcp::PendingError::TooMany) => Some(too_many()),
                            Err(mcp::PendingError::Reused(id)) => Some(reused(&id)),
                        }
                    };
                    if let Some(refusal) = refusal {
                        refuse(&refusal);
                        return refusal_response(&refusal);
                    }
                }
                {
                    let conversation = records.then(|| mcp::lock(&proxy.conversation));
                    let record = conversation.as_deref().map(|c| c.record(Instant::now()));
                    let record = record.as_ref().map(|r| r as &dyn Record);
                    let mut session = mcp::lock(&proxy.session);
                    for call in &calls {
                        session.called(&call.action, record);
                    }
                }
                proxy.metrics.decision(true, "mcp", "allowed");
                tracing::debug!(decision = "allow", host = %key.host, port = key.port, path, calls = ?calls.iter().map(ToString::to_string).collect::<Vec<_>>(), "mcp messages allowed");
                (lists, results, linked.is_some())
            }
        };
        let req = match self.attach_carried(carrying, parts, full(bytes), &key) {
            Ok(req) => req,
            Err(response) => return response,
        };
        let response = self.forward(key.clone(), req).await;
        // Answers to calls POSTed to a linked stream's endpoint arrive on
        // that stream, which records them.
        let results = if linked { Vec::new() } else { results };
        if lists.is_empty() && !records {
            return response;
        }
        let others = records.then(|| Source::Host(key.host.clone()));
        let listing = AnswerRead {
            lists,
            results,
            others,
            credential: credential.map(str::to_string),
        };
        self.answer(response, listing, key, path.to_string()).await
    }

    /// Filters the `*/list` results in an MCP server's answer, as JSON or
    /// as an event stream, by the policy in force when they arrive, and
    /// records the content of the answers to `results` before they pass,
    /// and of everything else the server sent as `others` (its host) where
    /// the session keeps a record.
    async fn answer(
        &self,
        response: Response<Body>,
        listing: AnswerRead,
        key: UpstreamKey,
        path: String,
    ) -> Response<Body> {
        let AnswerRead {
            lists,
            mut results,
            others,
            credential,
        } = listing;
        let visible = visible_at(
            self.proxy.clone(),
            self.binary.clone(),
            &key,
            path,
            credential,
        );
        let event_stream = is_event_stream(&response);
        let (mut parts, body) = response.into_parts();
        parts.headers.remove(header::CONTENT_LENGTH);
        if event_stream {
            let recorder = (!results.is_empty() || others.is_some()).then(|| self.proxy.clone());
            let mut filter = mcp::SseFilter::new(lists);
            filter.expect_results(results);
            if let Some(others) = others {
                filter.record_others_as(others);
            }
            let filtered = McpEvents {
                inner: body,
                filter,
                visible,
                done: false,
                origin: None,
                link: None,
                recorder,
            };
            return Response::from_parts(parts, filtered.boxed());
        }
        let bytes = match read_whole(body, MAX_LIST_BYTES).await {
            Ok(bytes) => bytes,
            Err(e) => {
                return error_response(
                    StatusCode::BAD_GATEWAY,
                    "upstream_protocol",
                    &format!("the MCP server's answer could not be read whole: {e}"),
                );
            }
        };
        let mut observed = Vec::new();
        let filtered = match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(mut message) => {
                // JSON the client may read otherwise (a key twice, a number
                // it rounds differently): what the model saw is in doubt.
                if (!results.is_empty() || others.is_some())
                    && agentgate_policy::strict_json::parse(&bytes).is_err()
                {
                    observed.push(None);
                }
                mcp::observe_answers(&message, &mut results, others.as_ref(), &mut observed);
                if mcp::filter_lists(&mut message, &lists, &*visible) > 0 {
                    Bytes::from(message.to_string())
                } else {
                    bytes
                }
            }
            Err(_) if bytes.is_empty() => bytes,
            // Not JSON (an error page, a 202's "Accepted"): its text is the
            // host's content; what is not text is unread.
            Err(_) => {
                match (&others, std::str::from_utf8(&bytes)) {
                    (Some(host), Ok(text)) => {
                        observed.push(Some((host.clone(), vec![text.to_string()])))
                    }
                    (None, _) if results.is_empty() => {}
                    _ => observed.push(None),
                }
                bytes
            }
        };
        if !observed.is_empty() {
            self.proxy.record_answers(observed);
        }
        Response::from_parts(parts, full(filtered))
    }

    async fn forward(&self, key: UpstreamKey, mut req: Request<Body>) -> Response<Body> {
        let proxy = &self.proxy;
        let scan = req.extensions().get::<Arc<BodyScan>>().cloned();
        let mask = req.extensions().get::<ResponseMask>().cloned();
        let sender = match proxy.upstreams.take(&key) {
            Some(sender) => sender,
            None => match proxy.connect_upstream(&key).await {
                Ok(sender) => sender,
                Err(failure) => {
                    proxy.metrics.upstream_error(failure.kind);
                    tracing::warn!(host = %key.host, port = key.port, kind = failure.kind, error = %failure.reason, "upstream failed");
                    return error_response(
                        failure.status,
                        &format!("upstream_{}", failure.kind),
                        &failure.reason,
                    );
                }
            },
        };
        let path_and_query = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".into());
        let scheme = if key.tls { "https" } else { "http" };
        let default_port = if key.tls { 443 } else { 80 };
        let authority = if key.port == default_port {
            key.host.clone()
        } else {
            format!("{}:{}", key.host, key.port)
        };
        let sent = match sender {
            Sender::H2(mut sender) => {
                let uri = Uri::builder()
                    .scheme(scheme)
                    .authority(authority.as_str())
                    .path_and_query(path_and_query)
                    .build();
                match uri {
                    Ok(uri) => *req.uri_mut() = uri,
                    Err(e) => {
                        return error_response(
                            StatusCode::BAD_REQUEST,
                            "bad_request",
                            &e.to_string(),
                        );
                    }
                }
                *req.version_mut() = Version::HTTP_2;
                req.headers_mut().remove(header::HOST);
                let response =
                    tokio::time::timeout(proxy.limits.response_timeout, sender.send_request(req))
                        .await;
                proxy.upstreams.put(key.clone(), Sender::H2(sender));
                response
            }
            Sender::H1(mut sender) => {
                match path_and_query.parse::<Uri>() {
                    Ok(uri) => *req.uri_mut() = uri,
                    Err(e) => {
                        return error_response(
                            StatusCode::BAD_REQUEST,
                            "bad_request",
                            &e.to_string(),
                        );
                    }
                }
                *req.version_mut() = Version::HTTP_11;
                if !req.headers().contains_key(header::HOST)
                    && let Ok(value) = HeaderValue::from_str(&authority)
                {
                    req.headers_mut().insert(header::HOST, value);
                }
                let response =
                    tokio::time::timeout(proxy.limits.response_timeout, sender.send_request(req))
                        .await;
                proxy.upstreams.put(key.clone(), Sender::H1(sender));
                response
            }
        };
        // The body failed on a placeholder or a secret: the upstream
        // request was aborted, and the agent reads the misuse, whatever the
        // upstream answered meanwhile.
        if let Some(refusal) = scan.and_then(|scan| scan.hit()) {
            return refusal_response(&refusal);
        }
        match sent {
            Ok(Ok(mut response)) => {
                strip_hop_by_hop(response.headers_mut());
                *response.version_mut() = Version::default();
                match mask {
                    Some(mask) => {
                        mask.headers(response.headers_mut());
                        response.map(|body| mask.body(boxed(body)).boxed())
                    }
                    None => response.map(boxed),
                }
            }
            Ok(Err(e)) => {
                proxy.metrics.upstream_error("protocol");
                error_response(
                    StatusCode::BAD_GATEWAY,
                    "upstream_protocol",
                    &format!("{}:{}: {e}", key.host, key.port),
                )
            }
            Err(_) => {
                proxy.metrics.upstream_error("timeout");
                error_response(
                    StatusCode::GATEWAY_TIMEOUT,
                    "upstream_timeout",
                    &format!("{}:{} did not answer in time", key.host, key.port),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn named(uri: &str, hosts: &[&str]) -> Result<Vec<(String, Option<u16>)>, RefusalCode> {
        let mut builder = Request::get(uri);
        for host in hosts {
            builder = builder.header(header::HOST, *host);
        }
        request_authority(&builder.body(()).unwrap()).map_err(|r| r.code)
    }

    #[test]
    fn only_text_bodies_are_recorded() {
        for text in [
            "text/html; charset=utf-8",
            "application/json",
            "application/problem+json",
            "application/atom+xml",
            "application/x-www-form-urlencoded",
        ] {
            assert!(textual_type(text), "{text}");
        }
        for binary in [
            "text/event-stream",
            "image/png",
            "application/pdf",
            "application/octet-stream",
        ] {
            assert!(!textual_type(binary), "{binary}");
        }
    }

    #[test]
    fn every_name_a_request_gives_is_collected() {
        let name = |h: &str, p: Option<u16>| (h.to_string(), p);
        assert_eq!(
            named("/x", &["API.example.com"]),
            Ok(vec![name("api.example.com", None)])
        );
        assert_eq!(
            named("/x", &["api.example.com:8443"]),
            Ok(vec![name("api.example.com", Some(8443))])
        );
        assert_eq!(named("https://a.io/x", &[]), Ok(vec![name("a.io", None)]));
        assert_eq!(
            named("https://a.io:443/x", &["b.io"]),
            Ok(vec![name("a.io", Some(443)), name("b.io", None)])
        );
        assert_eq!(named("/x", &[]), Ok(vec![]));
        assert_eq!(
            named("/x", &["a.io", "b.io"]),
            Err(RefusalCode::HostMismatch)
        );
        assert_eq!(named("/x", &["evil@a.io"]), Err(RefusalCode::NotAHost));
        assert_eq!(
            named("https://evil@a.io/x", &[]),
            Err(RefusalCode::NotAHost)
        );
        assert_eq!(named("/x", &["a b"]), Err(RefusalCode::NotAHost));
    }

    #[test]
    fn hop_by_hop_headers_are_dropped_and_named_ones_too() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-secret-hop"),
        );
        h.insert("x-secret-hop", HeaderValue::from_static("1"));
        h.insert("proxy-authorization", HeaderValue::from_static("Basic x"));
        h.insert(header::TE, HeaderValue::from_static("trailers"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer t"));
        strip_hop_by_hop(&mut h);
        assert!(h.get("x-secret-hop").is_none());
        assert!(h.get("proxy-authorization").is_none());
        assert!(h.get(header::CONNECTION).is_none());
        assert_eq!(h.get(header::TE).unwrap(), "trailers");
        assert_eq!(h.get(header::AUTHORIZATION).unwrap(), "Bearer t");
    }
}
