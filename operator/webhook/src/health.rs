//! The probes: `/healthz` answers while the process serves at all,
//! `/readyz` only once it listens, holds a certificate, knows the
//! operator's identity and has synced every cache.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;

use crate::state::WebhookState;

/// `GET /healthz`: the process is up.
pub(super) async fn healthz() -> &'static str {
    "ok"
}

/// `GET /readyz`: 200 once [`WebhookState::ready`], else 503.
pub(super) async fn readyz(State(state): State<Arc<WebhookState>>) -> impl IntoResponse {
    let ready = tokio::time::timeout(Duration::from_millis(200), state.ready())
        .await
        .unwrap_or(false);
    if ready {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use axum::http::StatusCode;

    use crate::certs::{generate_ca, issue_leaf};
    use crate::testkit::{Cluster, Harness, OPERATOR};

    /// Marks the webhook listening with a certificate loaded.
    fn serving(harness: &Harness) {
        let ca = generate_ca("test CA", Duration::from_secs(3600)).unwrap();
        let leaf =
            issue_leaf(&ca, &["agentgate-webhook".into()], Duration::from_secs(600)).unwrap();
        harness.state.resolver.install(&leaf).unwrap();
        harness.state.listening.store(true, Ordering::Release);
    }

    #[tokio::test]
    async fn healthz_answers_ok_even_before_the_webhook_is_ready() {
        let harness = Cluster::example().serve();
        let reply = harness.get("/healthz").await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.text(), "ok");
    }

    #[tokio::test]
    async fn readyz_is_503_until_listening_with_a_certificate() {
        let harness = Cluster::example().serve();
        let reply = harness.get("/readyz").await;
        assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(reply.text(), "not ready");
    }

    #[tokio::test]
    async fn readyz_is_200_once_listening_loaded_identified_and_synced() {
        let harness = Cluster::example().serve();
        assert_eq!(
            harness.state.operator_user.get().map(String::as_str),
            Some(OPERATOR)
        );
        serving(&harness);
        let reply = harness.get("/readyz").await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.text(), "ok");
    }

    #[tokio::test]
    async fn readyz_is_503_while_the_caches_have_not_listed() {
        let mut cluster = Cluster::example();
        cluster.synced = false;
        let harness = cluster.serve();
        serving(&harness);
        let reply = harness.get("/readyz").await;
        assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(reply.text(), "not ready");
    }
}
