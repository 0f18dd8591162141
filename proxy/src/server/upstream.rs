//! Upstream connections: the pool of HTTP/1.1 and HTTP/2 senders by
//! upstream, and forwarding a judged request on one.

use super::*;

/// One kept upstream connection.
pub(super) enum Sender {
    H1(hyper::client::conn::http1::SendRequest<Body>),
    H2(hyper::client::conn::http2::SendRequest<Body>),
}

impl Sender {
    pub(super) fn is_closed(&self) -> bool {
        match self {
            Sender::H1(s) => s.is_closed(),
            Sender::H2(s) => s.is_closed(),
        }
    }

    pub(super) fn is_ready(&self) -> bool {
        match self {
            Sender::H1(s) => s.is_ready(),
            Sender::H2(s) => s.is_ready(),
        }
    }
}

/// Where requests go: scheme, host and port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct UpstreamKey {
    pub(super) tls: bool,
    /// Offer `h2` (the client spoke HTTP/2).
    pub(super) h2: bool,
    pub(super) host: String,
    pub(super) port: u16,
}

impl UpstreamKey {
    /// The authority requests to it name: the host, with the port unless
    /// it is the scheme's default.
    pub(super) fn authority(&self) -> String {
        let default_port = if self.tls { 443 } else { 80 };
        if self.port == default_port {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Kept upstream connections, shared by every client connection of the
/// proxy: an HTTP/2 upstream carries the streams of all of them, and idle
/// HTTP/1.1 connections wait for the next request to the same place, so
/// idle agent connections do not each pin an upstream connection.
#[derive(Default)]
pub struct Upstreams {
    pub(super) idle: Mutex<HashMap<UpstreamKey, Vec<Sender>>>,
}

/// The most upstream places with kept connections.
pub(super) const MAX_UPSTREAM_KEYS: usize = 1024;

/// The most idle HTTP/1.1 connections kept per (scheme, host, port).
pub(super) const IDLE_PER_UPSTREAM: usize = 32;

/// Why an upstream could not be used.
pub(super) struct UpstreamFailure {
    pub(super) status: StatusCode,
    pub(super) kind: &'static str,
    pub(super) reason: String,
}

impl UpstreamFailure {
    pub(super) fn new(
        status: StatusCode,
        kind: &'static str,
        reason: impl Into<String>,
    ) -> UpstreamFailure {
        UpstreamFailure {
            status,
            kind,
            reason: reason.into(),
        }
    }
}

/// Whether a TLS server name names `host` (the CONNECT target).
pub(super) fn sni_names(sni: &str, host: &str) -> bool {
    canonical_host(sni).ok().as_deref() == Some(host)
}

/// The refusal of a TLS server name that is not the CONNECT target.
pub(super) fn sni_mismatch(sni: Option<&str>, host: &str) -> Refusal {
    let reason = match sni {
        Some(sni) => format!("TLS server name {sni:?} is not the CONNECT target {host:?}"),
        None => {
            format!("a TLS ClientHello without a server name is not the CONNECT target {host:?}")
        }
    };
    Refusal::new(RefusalCode::HostMismatch, reason)
}

/// An HTTP/1.1 client connection over `io`, driven in the background.
pub(super) async fn http1_sender<I>(io: I) -> Result<Sender, UpstreamFailure>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| UpstreamFailure::new(StatusCode::BAD_GATEWAY, "protocol", e.to_string()))?;
    // With upgrades: a WebSocket handshake's `101` hands the socket back.
    tokio::spawn(conn.with_upgrades());
    Ok(Sender::H1(sender))
}

impl Upstreams {
    pub(super) fn take(&self, key: &UpstreamKey) -> Option<Sender> {
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

    pub(super) fn put(&self, key: UpstreamKey, sender: Sender) {
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

impl Inspected {
    pub(super) async fn forward(&self, key: UpstreamKey, mut req: Request<Body>) -> Response<Body> {
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
        let authority = key.authority();
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
