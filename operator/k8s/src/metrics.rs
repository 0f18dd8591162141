//! Prometheus metrics of the reconcilers and the webhook (prometheus-client),
//! served on a plain HTTP port separate from anything TLS: `GET /metrics`,
//! `/healthz`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Which reconciler.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// `maximumpolicy`, `agentsandbox` or `policyproposal`.
    pub kind: String,
}

/// A verdict.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabel {
    /// `apply`, `ask` or `reject`.
    pub verdict: String,
}

/// An admission answer.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabel {
    /// `agentsandboxes`, `policyproposals`, `maximumpolicies` or `agentscans`.
    pub kind: String,
    /// `true` or `false`.
    pub allowed: String,
}

/// A runtime decision.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabel {
    /// `allow` or `deny`.
    pub decision: String,
}

/// Builds the latency histograms of a family: 0.1 ms .. ~3 s.
#[derive(Clone, Copy, Debug, Default)]
pub struct LatencyBuckets;

impl MetricConstructor<Histogram> for LatencyBuckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(exponential_buckets(0.0001, 2.0, 16))
    }
}

/// The operator's metrics.
pub struct Metrics {
    /// Reconciles started, by kind.
    pub reconciles: Family<KindLabel, Counter>,
    /// Reconciles that failed (and were retried), by kind.
    pub reconcile_errors: Family<KindLabel, Counter>,
    /// Proposal verdicts, by verdict.
    pub verdicts: Family<VerdictLabel, Counter>,
    /// Wall-clock seconds of solver work per reconcile.
    pub solver_seconds: Histogram,
    /// Sandbox status writes refused by the resourceVersion precondition.
    pub commit_conflicts: Counter,
    /// Sandbox verdicts proved again on fresh reads because the one from
    /// the watch-fed views would grant more than the committed policy.
    pub fresh_reverifications: Counter,
    /// Sandbox revocations served by the result proved for another sandbox
    /// with the same effective policy and maximums.
    pub shared_revocations: Counter,
    /// Proposals committed.
    pub commits: Counter,
    /// Admission answers, by kind and outcome.
    pub admissions: Family<AdmissionLabel, Counter>,
    /// Seconds to answer an admission request, by kind.
    pub admission_seconds: Family<KindLabel, Histogram, LatencyBuckets>,
    /// Runtime decisions (`/v1/decide`), by outcome.
    pub decisions: Family<DecisionLabel, Counter>,
    /// Serving certificates created or rotated (or newly read from disk).
    pub certificate_rotations: Counter,
    /// Expiry of the serving certificate, Unix seconds.
    pub certificate_expiry: Gauge,
    /// Proxies subscribed to the policy stream of this replica.
    pub policy_subscribers: Gauge,
    /// Policy updates pushed to a subscribed proxy.
    pub policy_pushes: Counter,
    /// Seconds from a commit (`status.policyCommittedAt`) to a Pod's report
    /// that it enforces it.
    pub policy_enforced_seconds: Histogram,
    registry: Registry,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Registers every metric under the `agentgate` prefix.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("agentgate");
        let m = Metrics {
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            verdicts: Family::default(),
            // 0.5 ms .. ~16 s
            solver_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            commit_conflicts: Counter::default(),
            fresh_reverifications: Counter::default(),
            shared_revocations: Counter::default(),
            commits: Counter::default(),
            admissions: Family::default(),
            admission_seconds: Family::new_with_constructor(LatencyBuckets),
            decisions: Family::default(),
            certificate_rotations: Counter::default(),
            certificate_expiry: Gauge::default(),
            policy_subscribers: Gauge::default(),
            policy_pushes: Counter::default(),
            // 1 ms .. ~65 s
            policy_enforced_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            registry: Registry::default(),
        };
        registry.register("reconciles", "Reconciles started", m.reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconciles that failed and were retried",
            m.reconcile_errors.clone(),
        );
        registry.register("verdicts", "PolicyProposal verdicts", m.verdicts.clone());
        registry.register(
            "solver_seconds",
            "Solver wall-clock seconds per reconcile",
            m.solver_seconds.clone(),
        );
        registry.register(
            "commit_conflicts",
            "Sandbox commits refused by the resourceVersion precondition",
            m.commit_conflicts.clone(),
        );
        registry.register(
            "fresh_reverifications",
            "Sandbox verdicts proved again on fresh API reads because the cached view's verdict would grant more",
            m.fresh_reverifications.clone(),
        );
        registry.register(
            "shared_revocations",
            "Sandbox re-verifications served by the result proved for another sandbox with the same effective policy and maximums",
            m.shared_revocations.clone(),
        );
        registry.register(
            "commits",
            "Proposals committed into a sandbox",
            m.commits.clone(),
        );
        registry.register(
            "admissions",
            "Admission requests answered, by kind and outcome",
            m.admissions.clone(),
        );
        registry.register(
            "admission_seconds",
            "Seconds to answer an admission request",
            m.admission_seconds.clone(),
        );
        registry.register(
            "decisions",
            "Runtime decisions answered by /v1/decide",
            m.decisions.clone(),
        );
        registry.register(
            "certificate_rotations",
            "Webhook serving certificates created, rotated or reloaded",
            m.certificate_rotations.clone(),
        );
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "When the served webhook certificate expires",
            m.certificate_expiry.clone(),
        );
        registry.register(
            "policy_subscribers",
            "Sandbox proxies subscribed to this replica's policy stream",
            m.policy_subscribers.clone(),
        );
        registry.register(
            "policy_pushes",
            "Committed policies pushed to a subscribed sandbox proxy",
            m.policy_pushes.clone(),
        );
        registry.register(
            "policy_enforced_seconds",
            "Seconds from a sandbox's commit to a Pod's report that it enforces it",
            m.policy_enforced_seconds.clone(),
        );
        Metrics { registry, ..m }
    }

    /// Counts a reconcile of `kind`.
    pub fn reconcile(&self, kind: &str) {
        self.reconciles
            .get_or_create(&KindLabel { kind: kind.into() })
            .inc();
    }

    /// Counts a failed reconcile of `kind`.
    pub fn error(&self, kind: &str) {
        self.reconcile_errors
            .get_or_create(&KindLabel { kind: kind.into() })
            .inc();
    }

    /// Counts an admission answer for `kind` that took `seconds`.
    pub fn admission(&self, kind: &str, allowed: bool, seconds: f64) {
        self.admissions
            .get_or_create(&AdmissionLabel {
                kind: kind.into(),
                allowed: allowed.to_string(),
            })
            .inc();
        self.admission_seconds
            .get_or_create(&KindLabel { kind: kind.into() })
            .observe(seconds);
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// Serves `/metrics` and `/healthz` on `addr` until the process ends; logs
/// the bound address (port 0 picks a free one).
pub async fn serve(addr: SocketAddr, metrics: Arc<Metrics>) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(address = %listener.local_addr()?, "metrics listening");
    let app = Router::new()
        .route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                async move {
                    (
                        [(
                            "content-type",
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        metrics.render(),
                    )
                }
            }),
        )
        .route("/healthz", get(|| async { "ok" }));
    axum::serve(listener, app).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_metric() {
        let m = Metrics::new();
        m.reconcile("policyproposal");
        m.verdicts
            .get_or_create(&VerdictLabel {
                verdict: "apply".into(),
            })
            .inc();
        m.solver_seconds.observe(0.003);
        m.commit_conflicts.inc();
        m.admission("agentsandboxes", false, 0.002);
        let text = m.render();
        for needle in [
            "agentgate_reconciles_total{kind=\"policyproposal\"} 1",
            "agentgate_verdicts_total{verdict=\"apply\"} 1",
            "agentgate_solver_seconds_count 1",
            "agentgate_commit_conflicts_total 1",
            "agentgate_commits_total 0",
            "agentgate_admissions_total{kind=\"agentsandboxes\",allowed=\"false\"} 1",
            "agentgate_admission_seconds_count{kind=\"agentsandboxes\"} 1",
            "agentgate_certificate_rotations_total 0",
        ] {
            assert!(text.contains(needle), "{needle} missing from:\n{text}");
        }
    }
}
