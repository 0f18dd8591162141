//! Prometheus metrics (prometheus-client) and the health endpoints, served on
//! `--metrics-listen`, a plain port apart from the proxy's: `/healthz` (the
//! process runs), `/readyz` (a valid policy is loaded; the Pod's startup
//! probe, so agent containers start only then), `/metrics`, and
//! `/lineage` (the session's observed graph and last refusals, see
//! [`crate::session`]).

use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::credentials::CredentialSet;
use crate::decide::Snapshot;
use crate::session::SessionGraph;

/// A decision on a connection or request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// `allow` or `deny`.
    pub decision: &'static str,
    /// `connect` (CONNECT or a redirected connection) or `request`.
    pub stage: &'static str,
    /// `tunnel`, `inspect`, `allowed`, or a refusal code.
    pub reason: &'static str,
}

/// A connection accepted on a listener.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabels {
    /// `explicit` or `transparent`.
    pub listener: &'static str,
}

/// An upstream failure.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamLabels {
    /// `resolve`, `connect`, `tls`, `protocol` or `timeout`.
    pub kind: &'static str,
}

/// A held call's step.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HeldLabels {
    /// `held`, `approved`, or the refusal code it ended with.
    pub outcome: &'static str,
}

/// A request carrying a credential's placeholder (docs/proxy.md,
/// "Credentials"). Names only: never a value.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CredentialLabels {
    /// The credential's name (empty when the proxy cannot tell whose a
    /// placeholder is).
    pub credential: String,
    /// `attached`, `misuse`, `unbound` or `unavailable`.
    pub outcome: &'static str,
}

/// The proxy's metrics.
pub struct Metrics {
    registry: Registry,
    decisions: Family<DecisionLabels, Counter>,
    connections: Family<ListenerLabels, Counter>,
    open: Gauge,
    parked: Gauge,
    upstream_errors: Family<UpstreamLabels, Counter>,
    policy_valid: Gauge,
    policy_generation: Gauge,
    reloads: Family<DecisionLabels, Counter>,
    tunnels_closed: Counter,
    lineage_bytes: Gauge,
    model_requests: Counter,
    held_calls: Family<HeldLabels, Counter>,
    credentials: Family<CredentialLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let mut registry = Registry::with_prefix("agentgate_proxy");
        let m = Metrics {
            decisions: Family::default(),
            connections: Family::default(),
            open: Gauge::default(),
            parked: Gauge::default(),
            upstream_errors: Family::default(),
            policy_valid: Gauge::default(),
            policy_generation: Gauge::default(),
            reloads: Family::default(),
            tunnels_closed: Counter::default(),
            lineage_bytes: Gauge::default(),
            model_requests: Counter::default(),
            held_calls: Family::default(),
            credentials: Family::default(),
            registry: Registry::default(),
        };
        registry.register(
            "decisions",
            "Connections and requests judged, by decision, stage and reason",
            m.decisions.clone(),
        );
        registry.register(
            "connections",
            "Connections accepted, by listener",
            m.connections.clone(),
        );
        registry.register(
            "open_connections",
            "Client connections open now",
            m.open.clone(),
        );
        registry.register(
            "parked_connections",
            "Idle HTTP/1.1 client connections parked: open, holding no HTTP buffers (docs/proxy.md)",
            m.parked.clone(),
        );
        registry.register(
            "upstream_errors",
            "Upstream failures answered with 502 or 504",
            m.upstream_errors.clone(),
        );
        registry.register(
            "policy_valid",
            "1 when a valid policy is loaded, 0 while everything is refused",
            m.policy_valid.clone(),
        );
        registry.register(
            "policy_generation",
            "Content changes of the policy files seen so far",
            m.policy_generation.clone(),
        );
        registry.register(
            "policy_reloads",
            "Policy loads, by result (reason ok or invalid)",
            m.reloads.clone(),
        );
        registry.register(
            "tunnels_revoked",
            "Open l4 tunnels closed because a new policy no longer allows them",
            m.tunnels_closed.clone(),
        );
        registry.register(
            "lineage_bytes",
            "Bytes of conversation content the session's provenance record holds (docs/policy-semantics.md 8.3)",
            m.lineage_bytes.clone(),
        );
        registry.register(
            "model_requests",
            "Requests to the agent's model provider whose conversation was recorded",
            m.model_requests.clone(),
        );
        registry.register(
            "held_calls",
            "Tool calls held for a person's approval (outcome held), and how each ended (approved, or the refusal code)",
            m.held_calls.clone(),
        );
        registry.register(
            "credentials",
            "Requests carrying a credential's placeholder, by credential and outcome: attached (the secret replaced it), misuse (a placeholder or secret outside its attach form), unbound (no rule binding the credential allows the request), unavailable (the proxy holds no secret for it)",
            m.credentials.clone(),
        );
        Metrics { registry, ..m }
    }
}

impl Metrics {
    /// Counts a recorded model request and the record's size after it.
    pub fn model_request(&self, kept_bytes: usize) {
        self.model_requests.inc();
        self.lineage_bytes
            .set(i64::try_from(kept_bytes).unwrap_or(i64::MAX));
    }

    /// The record's size after content was recorded from an answer.
    pub fn lineage(&self, kept_bytes: usize) {
        self.lineage_bytes
            .set(i64::try_from(kept_bytes).unwrap_or(i64::MAX));
    }

    /// Counts a held call's step.
    pub fn held_call(&self, outcome: &'static str) {
        self.held_calls.get_or_create(&HeldLabels { outcome }).inc();
    }

    /// Counts a request carrying `credential` by its outcome.
    pub fn credential(&self, credential: &str, outcome: &'static str) {
        self.credentials
            .get_or_create(&CredentialLabels {
                credential: credential.to_string(),
                outcome,
            })
            .inc();
    }

    /// Counts a decision.
    pub fn decision(&self, allow: bool, stage: &'static str, reason: &'static str) {
        let decision = if allow { "allow" } else { "deny" };
        self.decisions
            .get_or_create(&DecisionLabels {
                decision,
                stage,
                reason,
            })
            .inc();
    }

    /// Counts an accepted connection and returns a guard for the open gauge.
    pub fn accepted(&self, listener: &'static str) -> GaugeGuard {
        self.connections
            .get_or_create(&ListenerLabels { listener })
            .inc();
        GaugeGuard::hold(&self.open)
    }

    /// Counts a parked connection until the returned guard is dropped.
    pub fn parked(&self) -> GaugeGuard {
        GaugeGuard::hold(&self.parked)
    }

    /// Counts an upstream failure.
    pub fn upstream_error(&self, kind: &'static str) {
        self.upstream_errors
            .get_or_create(&UpstreamLabels { kind })
            .inc();
    }

    /// Records a policy load.
    pub fn policy_loaded(&self, valid: bool, generation: u64) {
        self.policy_valid.set(i64::from(valid));
        self.policy_generation
            .set(i64::try_from(generation).unwrap_or(i64::MAX));
        let reason = if valid { "ok" } else { "invalid" };
        self.reloads
            .get_or_create(&DecisionLabels {
                decision: "load",
                stage: "policy",
                reason,
            })
            .inc();
    }

    /// Counts a revoked tunnel.
    pub fn tunnel_revoked(&self) {
        self.tunnels_closed.inc();
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// One unit of a gauge (an open or a parked connection), given back when
/// dropped.
pub struct GaugeGuard(Gauge);

impl GaugeGuard {
    fn hold(gauge: &Gauge) -> GaugeGuard {
        gauge.inc();
        GaugeGuard(gauge.clone())
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}

/// Answers one health, metrics or lineage request. Ready means a valid
/// policy is loaded and every declared credential's placeholder is written
/// (the agent's containers mount it by subPath when they start).
pub fn health_response(
    path: &str,
    snapshot: &Snapshot,
    credentials: &CredentialSet,
    metrics: &Metrics,
    session: &Mutex<SessionGraph>,
) -> Response<Full<Bytes>> {
    match path {
        "/lineage" => {
            let report = session
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .report(&snapshot.findings);
            let mut r = text(StatusCode::OK, report.to_string());
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            r
        }
        "/healthz" => text(StatusCode::OK, "ok\n".into()),
        "/readyz" => match &snapshot.policy {
            Ok(_) if credentials.not_ready.is_some() => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "not ready: {}\n",
                    credentials.not_ready.as_deref().unwrap_or_default()
                ),
            ),
            Ok(_) => text(
                StatusCode::OK,
                format!("ready: policy generation {}\n", snapshot.generation),
            ),
            Err(why) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready, refusing everything: {why}\n"),
            ),
        },
        "/metrics" => {
            let mut r = text(StatusCode::OK, metrics.encode());
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            r
        }
        _ => text(
            StatusCode::NOT_FOUND,
            "try /healthz, /readyz, /metrics or /lineage\n".into(),
        ),
    }
}

/// Serves health, metrics and the session's lineage until the process
/// ends.
pub async fn serve(
    listener: TcpListener,
    policy: watch::Receiver<Arc<Snapshot>>,
    credentials: watch::Receiver<Arc<CredentialSet>>,
    metrics: Arc<Metrics>,
    session: Arc<Mutex<SessionGraph>>,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of file descriptors: wait rather than spin.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        let (policy, credentials, metrics, session) = (
            policy.clone(),
            credentials.clone(),
            metrics.clone(),
            session.clone(),
        );
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let snapshot = policy.borrow().clone();
                let held = credentials.borrow().clone();
                let response =
                    health_response(req.uri().path(), &snapshot, &held, &metrics, &session);
                async move { Ok::<_, Infallible>(response) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
