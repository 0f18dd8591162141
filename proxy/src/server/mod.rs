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
    Admitted, Binary, METHOD_OVERRIDES, Refusal, RefusalCode, Refused, Snapshot, WebsocketHead,
    canonical_host, judge_carrying, judge_connection, judge_upgrade, method_overrides,
    model_request, policy_of, websocket_head,
};
use crate::identity::{IdentityMode, binary_of};
use crate::idle::{Activity, Metered, PARK_AFTER, Readiness, Tracked};
use crate::mcp::{self, Judged};
use crate::resolve::Resolver;
use crate::session::{RefusalSeen, SessionGraph};
use crate::sniffing::{Prefixed, Sniffed, sniff, sniff_into};
use crate::telemetry::{GaugeGuard, Metrics};
use crate::tls::{Interceptor, UpstreamTls};
use agentgate_judgement::held::{self, HoldRequest};
use agentgate_judgement::mcp_messages::{ForwardedCall, HeldCall};
use agentgate_judgement::request_values::{content_coded, request_values};
use agentgate_policy::action::request_path;
use agentgate_policy::action::{McpKind, NetworkAction};
use agentgate_policy::matcher::{
    McpQuery, McpServer, is_mcp_server, mcp_query_carrying, reads_query_at,
};
use agentgate_policy::provenance::{Record, Source};

mod bodies;
mod mcp_http;
mod upstream;
mod websocket;

use bodies::*;
use mcp_http::*;
pub use upstream::Upstreams;
use upstream::*;
use websocket::*;

/// The body type of every request forwarded and every response: a body
/// can fail for the proxy's own reasons too (a request body that carries a
/// credential's placeholder, [`crate::credentials::Scanned`]).
pub type Body = BoxBody<Bytes, BodyError>;

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
    pub conversation: Mutex<crate::model_provider::ConversationRecord>,
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

/// The header every refusal carries (value `deny`), which clients and the
/// connection's own handling read.
const DECISION_HEADER: &str = "x-agentgate-decision";

fn refusal_response(refusal: &Refusal) -> Response<Body> {
    let mut response = Response::new(full(refusal.body()));
    *response.status_mut() = StatusCode::FORBIDDEN;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(DECISION_HEADER, HeaderValue::from_static("deny"));
    response
}

/// Whether a request declares a body: a length above zero, chunks, or an
/// HTTP/2 stream left open.
fn declares_body<B: hyper::body::Body>(req: &Request<B>) -> bool {
    !req.body().is_end_stream()
}

/// A refusal of an HTTP/1 request that declared a body says
/// `Connection: close`: the refusal may leave the body unread, and hyper
/// then closes the connection after the response; told, the client opens a
/// new one for its next request instead of sending it into a closed one
/// (where a POST is not retried).
fn closing_if_refused(declared_body: bool, mut response: Response<Body>) -> Response<Body> {
    let refused = response
        .headers()
        .get(DECISION_HEADER)
        .is_some_and(|v| v == "deny");
    if declared_body && refused {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
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
    /// Logs a refusal by the policy at `stage`; of a request or messages
    /// carrying a placeholder, as that credential's (docs/policy-semantics.md
    /// §9.4: the agent sent its placeholder where no rule binds it, the
    /// signal an operator wants).
    fn log_judged_refusal(
        &self,
        stage: &'static str,
        credential: Option<&str>,
        binary: &Binary,
        host: &str,
        port: u16,
        refusal: &Refusal,
    ) {
        match credential {
            Some(name)
                if matches!(
                    refusal.code,
                    RefusalCode::NoRule | RefusalCode::DeniedByRule
                ) =>
            {
                self.credential_refusal(name, "unbound", binary, host, port, refusal);
            }
            _ => self.log_refusal(stage, binary, host, port, refusal),
        }
    }

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
            relay: Mutex::new(None),
        });
        let service = service_fn(move |req| {
            let connection = connection.clone();
            let declared_body = declares_body(&req);
            async move {
                let response = connection.explicit_request(req).await;
                Ok::<_, Infallible>(closing_if_refused(declared_body, response))
            }
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
            relay: Mutex::new(None),
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
        let revoked = |snapshot: &Snapshot| {
            (!matches!(
                judge_connection(snapshot, &binary, &host, port),
                Ok(Admitted::Tunnel(_))
            ))
            .then(|| {
                Refusal::new(
                    RefusalCode::Revoked,
                    format!(
                        "connect {host}:{port} by {}: the new policy no longer allows this tunnel",
                        binary.shown()
                    ),
                )
            })
        };
        let open = Opened {
            stage: "connect",
            binary: &binary,
            host: &host,
            port,
        };
        self.relay_until_revoked(client, upstream, policy, &open, revoked)
            .await;
    }

    /// Relays bytes both ways until either side closes, or a policy
    /// change makes `revoked` answer with a refusal: then both sides are
    /// closed, and the refusal counted and logged as `open` says. A tunnel
    /// and a WebSocket after its `101` end the same way.
    pub(super) async fn relay_until_revoked<C, U>(
        &self,
        mut client: C,
        mut upstream: U,
        mut policy: watch::Receiver<Arc<Snapshot>>,
        open: &Opened<'_>,
        revoked: impl Fn(&Snapshot) -> Option<Refusal>,
    ) where
        C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        U: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
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
                    if let Some(refusal) = revoked(&snapshot) {
                        copy.abort();
                        self.metrics.tunnel_revoked();
                        self.log_refusal(open.stage, open.binary, open.host, open.port, &refusal);
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

/// Who opened a relayed stream, and where, as its refusal is logged.
pub(super) struct Opened<'a> {
    /// `connect` for a tunnel, `upgrade` for a WebSocket.
    pub(super) stage: &'static str,
    pub(super) binary: &'a Binary,
    pub(super) host: &'a str,
    pub(super) port: u16,
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
    /// A WebSocket upgrade the server accepted, relayed once the HTTP/1.1
    /// dispatcher hands back the socket ([`Inspected::serve_http1`]).
    relay: Mutex<Option<Relay>>,
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
                let declared_body = declares_body(&req);
                Box::pin(async move {
                    let response = closing_if_refused(declared_body, this.request(req).await);
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
            if let Some(relay) = self.take_relay() {
                // Frames the client sent behind its handshake go first.
                transport.unread(&parts.read_buf);
                drop(parts.read_buf);
                return self.relay(transport, relay).await;
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
            if req.headers().contains_key(header::UPGRADE) {
                let refusal = Refusal::new(
                    RefusalCode::UnsupportedProtocol,
                    format!(
                        "{} {}: an upgrade through the explicit proxy opens with CONNECT {}:80 first (docs/proxy.md, WebSocket)",
                        req.method(),
                        req.uri(),
                        req.uri().host().unwrap_or_default()
                    ),
                );
                proxy.log_refusal(
                    "request",
                    &self.binary,
                    req.uri().host().unwrap_or_default(),
                    80,
                    &refusal,
                );
                return refusal_response(&refusal);
            }
            return self.request(req).await;
        }
        error_response(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "this is a proxy: send CONNECT host:port, or an absolute http:// URI",
        )
    }

    /// The host and port a request is judged for: the connection's, or
    /// for absolute-form and redirected plain HTTP the first name the
    /// request gives; every name it gives must agree, and a protocol
    /// upgrade is refused. The refusal names the host and port it is
    /// logged under.
    fn destination(
        &self,
        req: &Request<Incoming>,
    ) -> Result<(String, u16), (Refusal, String, u16)> {
        let shown_host = self.host.clone().unwrap_or_default();
        if let Some(refusal) = &self.refusal {
            return Err((refusal.clone(), shown_host, self.port));
        }
        let named = match request_authority(req) {
            Ok(named) => named,
            Err(refusal) => return Err((refusal, shown_host, self.port)),
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
                Err(refusal) => return Err((refusal, name.clone(), port)),
            },
            (None, None) => {
                let refusal = Refusal::new(
                    RefusalCode::NotAHost,
                    "a request without a Host header cannot be judged",
                );
                return Err((refusal, String::new(), port));
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
                return Err((refusal, host, port));
            }
        }
        if req.method() == Method::CONNECT {
            // HTTP/2's extended CONNECT (RFC 8441, WebSocket over HTTP/2)
            // or a CONNECT inside an inspected connection.
            let refusal = Refusal::new(
                RefusalCode::UnsupportedProtocol,
                format!(
                    "CONNECT https://{host}:{port}{}: a CONNECT inside an inspected connection (WebSocket over HTTP/2 among them) is not modelled; a WebSocket opens with an HTTP/1.1 upgrade (docs/policy-semantics.md §10.2)",
                    req.uri().path()
                ),
            );
            return Err((refusal, host, port));
        }
        Ok((host, port))
    }

    /// Judges one request and forwards it when allowed.
    async fn request(self: Arc<Self>, req: Request<Incoming>) -> Response<Body> {
        let proxy = &self.proxy;
        let credentials = proxy.credential_set();
        let refuse = |mut refusal: Refusal, host: &str, port: u16| {
            // The refusal goes back to the agent too: no placeholder or
            // secret it quotes is echoed.
            credentials.redact_refusal(&mut refusal);
            proxy.log_refusal("request", &self.binary, host, port, &refusal);
            refusal_response(&refusal)
        };
        let (host, port) = match self.destination(&req) {
            Ok(destination) => destination,
            Err((refusal, host, port)) => return refuse(refusal, &host, port),
        };
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
        match websocket_head(req.method(), req.version(), req.headers()) {
            Ok(None) => {}
            Ok(Some(handshake)) => {
                return self
                    .websocket(req, &snapshot, &carrying, &handshake, &host, port)
                    .await;
            }
            Err(refusal) => return refuse(refusal, &host, port),
        }
        if let Some(path) = mcp_path(&snapshot, &host, port, req.uri().path()) {
            if let Some(refusal) = mcp_query_refusal(&snapshot, &host, port, req.uri()) {
                return refuse(refusal, &host, port);
            }
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
        // is the policy's refusal, logged as a credential's.
        let refuse_judged = |mut refusal: Refusal| {
            credentials.redact_refusal(&mut refusal);
            proxy.log_judged_refusal("request", credential, &self.binary, &host, port, &refusal);
            refusal_response(&refusal)
        };
        let judged = judge_carrying(
            &snapshot,
            &credentials,
            carrying.carried.as_ref(),
            &self.binary,
            &host,
            port,
            req.method().as_str(),
            req.uri()
                .path_and_query()
                .map_or_else(|| req.uri().path(), |target| target.as_str()),
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
        // A body the request announces, whatever its method: it may carry
        // a conversation.
        let has_body = declares_body(&req);
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
        api: crate::model_provider::ProviderApi,
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
        let pieces = crate::model_provider::conversation_pieces(api, &bytes)
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
