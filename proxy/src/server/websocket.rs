//! WebSocket upgrades (docs/policy-semantics.md §10.2, docs/proxy.md
//! "WebSocket"): the opening handshake judged as one `websocket` action per
//! subprotocol offered, forwarded on a connection of its own, and after the
//! server's `101` the frames relayed both ways unread, until either side
//! closes or a new policy no longer allows the upgrade.

use super::*;
use agentgate_policy::matcher::decide_network_indexed;

/// An upgrade the server accepted, waiting for the client connection's
/// HTTP/1.1 dispatcher to hand back the socket.
pub(super) struct Relay {
    /// The server's side, upgraded.
    upstream: hyper::upgrade::Upgraded,
    /// The actions the handshake was judged as, judged again on every
    /// policy change.
    actions: Vec<NetworkAction>,
    host: String,
    port: u16,
}

impl Inspected {
    /// Judges a WebSocket opening handshake and, when allowed, forwards it;
    /// a `101` answer leaves a [`Relay`] for [`Inspected::serve_http1`].
    pub(super) async fn websocket(
        self: &Arc<Self>,
        req: Request<Body>,
        snapshot: &Snapshot,
        carrying: &Carrying,
        handshake: &WebsocketHead,
        host: &str,
        port: u16,
    ) -> Response<Body> {
        let proxy = &self.proxy;
        let target = req
            .uri()
            .path_and_query()
            .map_or_else(|| req.uri().path(), |p| p.as_str())
            .to_string();
        let credential = carrying.name();
        let judged = judge_upgrade(
            snapshot,
            &self.binary,
            host,
            port,
            &target,
            handshake,
            credential,
        );
        let (rule, actions) = match judged {
            Ok(judged) => judged,
            Err(mut refusal) => {
                carrying.set.redact_refusal(&mut refusal);
                proxy.log_judged_refusal("upgrade", credential, &self.binary, host, port, &refusal);
                return refusal_response(&refusal);
            }
        };
        let attachment = match carrying.attachment() {
            Ok(attachment) => attachment,
            Err(issue) => return self.refuse_carrying(&issue, carrying, host, port),
        };
        let req = match self.attach(req, attachment.as_ref(), host, port) {
            Ok(req) => req,
            Err(response) => return response,
        };
        proxy.metrics.decision(true, "upgrade", "allowed");
        tracing::debug!(decision = "allow", rule, host, port, path = %target, "websocket upgrade allowed");
        let key = UpstreamKey {
            tls: self.tls,
            h2: false,
            host: host.to_string(),
            port,
        };
        // A connection of its own: once upgraded it is no longer HTTP.
        let sender = match proxy.connect_upstream(&key).await {
            Ok(Sender::H1(sender)) => sender,
            Ok(Sender::H2(_)) => {
                return error_response(
                    StatusCode::BAD_GATEWAY,
                    "upstream_protocol",
                    "the upstream chose HTTP/2, where this upgrade cannot be sent",
                );
            }
            Err(failure) => {
                proxy.metrics.upstream_error(failure.kind);
                return error_response(
                    failure.status,
                    &format!("upstream_{}", failure.kind),
                    &failure.reason,
                );
            }
        };
        let mut response = match send_upgrade(sender, req, &target, &key, proxy).await {
            Ok(response) => response,
            Err(response) => return response,
        };
        if response.status() != StatusCode::SWITCHING_PROTOCOLS {
            // Refused by the server: its answer, as any other.
            strip_hop_by_hop(response.headers_mut());
            return response.map(|body| body.map_err(|e| e.into()).boxed());
        }
        let upstream = match hyper::upgrade::on(&mut response).await {
            Ok(upstream) => upstream,
            Err(e) => {
                return error_response(
                    StatusCode::BAD_GATEWAY,
                    "upstream_protocol",
                    &format!("the upstream's upgrade failed: {e}"),
                );
            }
        };
        *lock(&self.relay) = Some(Relay {
            upstream,
            actions,
            host: host.to_string(),
            port,
        });
        // The 101 keeps its Upgrade and Connection headers: they are the
        // handshake, not hop-by-hop noise.
        response.map(|_| full(Bytes::new()))
    }

    /// The upgrade a handshake left, if any.
    pub(super) fn take_relay(&self) -> Option<Relay> {
        lock(&self.relay).take()
    }

    /// Relays frames between the client's socket and the server until
    /// either closes, or a policy change no longer allows every action the
    /// handshake was judged as (then both are closed, as a revoked tunnel).
    pub(super) async fn relay<S>(&self, client: S, relay: Relay)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let proxy = &self.proxy;
        let Relay {
            upstream,
            actions,
            host,
            port,
        } = relay;
        let revoked = |snapshot: &Snapshot| {
            actions
                .iter()
                .find(|a| !still_allowed(snapshot, &self.binary, a))
                .map(|action| {
                    Refusal::new(
                        RefusalCode::Revoked,
                        format!("{action}: the new policy no longer allows this WebSocket"),
                    )
                })
        };
        let open = Opened {
            stage: "upgrade",
            binary: &self.binary,
            host: &host,
            port,
        };
        proxy
            .relay_until_revoked(
                client,
                TokioIo::new(upstream),
                proxy.policy.clone(),
                &open,
                revoked,
            )
            .await;
    }
}

/// Whether `snapshot` still allows an upgrade's action.
fn still_allowed(snapshot: &Snapshot, binary: &Binary, action: &NetworkAction) -> bool {
    policy_of(snapshot)
        .is_ok_and(|p| decide_network_indexed(&p.compiled, &p.index, binary.caller(), action).allow)
}

/// Sends the handshake on its own HTTP/1.1 connection, its `Upgrade` and
/// `Connection` headers kept, every other hop-by-hop header dropped.
async fn send_upgrade(
    mut sender: hyper::client::conn::http1::SendRequest<Body>,
    req: Request<Body>,
    target: &str,
    key: &UpstreamKey,
    proxy: &Proxy,
) -> Result<Response<Incoming>, Response<Body>> {
    let (mut parts, body) = req.into_parts();
    // The handshake was read as a WebSocket upgrade and nothing else
    // (`websocket_head`): it is sent as exactly that.
    strip_hop_by_hop(&mut parts.headers);
    parts
        .headers
        .insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    parts
        .headers
        .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    parts.uri = target.parse().map_err(|e: http::uri::InvalidUri| {
        error_response(StatusCode::BAD_REQUEST, "bad_request", &e.to_string())
    })?;
    parts.version = Version::HTTP_11;
    if !parts.headers.contains_key(header::HOST)
        && let Ok(value) = HeaderValue::from_str(&key.authority())
    {
        parts.headers.insert(header::HOST, value);
    }
    let sent = tokio::time::timeout(
        proxy.limits.response_timeout,
        sender.send_request(Request::from_parts(parts, body)),
    )
    .await;
    match sent {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(e)) => Err(error_response(
            StatusCode::BAD_GATEWAY,
            "upstream_protocol",
            &e.to_string(),
        )),
        Err(_) => Err(error_response(
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_timeout",
            "the upstream did not answer the upgrade in time",
        )),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
