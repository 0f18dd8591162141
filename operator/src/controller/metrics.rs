//! Prometheus metrics of the reconcilers (prometheus-client), served on a
//! plain HTTP port separate from anything TLS: `GET /metrics`, `/healthz`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
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
    /// Proposals committed.
    pub commits: Counter,
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
            commits: Counter::default(),
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
            "commits",
            "Proposals committed into a sandbox",
            m.commits.clone(),
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
        let text = m.render();
        for needle in [
            "agentgate_reconciles_total{kind=\"policyproposal\"} 1",
            "agentgate_verdicts_total{verdict=\"apply\"} 1",
            "agentgate_solver_seconds_count 1",
            "agentgate_commit_conflicts_total 1",
            "agentgate_commits_total 0",
        ] {
            assert!(text.contains(needle), "{needle} missing from:\n{text}");
        }
    }
}
