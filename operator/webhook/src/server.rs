//! The webhook server: the routes (one handler module each, under
//! `validate`, `decide_endpoint` and `health`) and `run`, which starts the
//! caches and the certificate source and serves the routes over TLS.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use kube::Client;
use tokio::net::TcpListener;

use crate::access_reviews::whoami;
use crate::certs::CertResolver;
use crate::decide_endpoint::decide_endpoint;
use crate::health::{healthz, readyz};
use crate::validate::{held_calls, maximums, namespaces, pods, proposals, sandboxes, scans};
use crate::{WebhookArgs, WebhookError};
use crate::{policy_stream, tls};
use agentgate_k8s::metrics::Metrics;
use agentgate_prover::Prover;

pub use crate::state::{Caches, WebhookState};
pub use crate::validate::envelope::MAX_REVIEW_BYTES;

/// The routes of the webhook server.
pub fn router(state: Arc<WebhookState>) -> Router {
    Router::new()
        .route(
            "/validate/agentsandboxes",
            post(sandboxes::validate_sandbox),
        )
        .route(
            "/validate/policyproposals",
            post(proposals::validate_proposal),
        )
        .route(
            "/validate/maximumpolicies",
            post(maximums::validate_maximum),
        )
        .route("/validate/agentscans", post(scans::validate_scan))
        .route("/validate/heldcalls", post(held_calls::validate_held_call))
        .route("/validate/pods", post(pods::validate_pod))
        .route("/validate/namespaces", post(namespaces::validate_namespace))
        .route("/v1/decide", post(decide_endpoint))
        .route("/v1/policy/stream", get(policy_stream::policy_stream))
        .route("/v1/policy/applied", post(policy_stream::policy_applied))
        .route("/v1/hold", post(crate::hold_endpoint::hold_endpoint))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .layer(DefaultBodyLimit::max(MAX_REVIEW_BYTES))
        .with_state(state)
}

/// Serves the webhook on `args.webhook_bind_address` until the process
/// ends: starts the caches and the certificate source, binds, and accepts
/// TLS connections (the certificate is chosen per handshake).
pub async fn run(
    args: WebhookArgs,
    address: std::net::SocketAddr,
    client: Client,
    prover: Prover,
    metrics: Arc<Metrics>,
    allow_unmanaged: bool,
) -> Result<(), WebhookError> {
    let resolver = Arc::new(CertResolver::new());
    tls::spawn_certificate_source(&args, &client, &resolver, &metrics);
    let caches = Caches::watch(&client);
    let state = Arc::new(WebhookState::new(
        &args,
        client,
        prover,
        metrics,
        allow_unmanaged,
        caches,
        resolver.clone(),
    ));

    match args.operator_user.clone() {
        Some(_) => {}
        None => {
            // Learnt from the API server, retried until known; the webhook
            // is not ready (and nobody writes status) until then.
            let (state, client) = (state.clone(), state.client.clone());
            tokio::spawn(async move {
                loop {
                    if let Some(user) = whoami(&client).await {
                        let _ = state.operator_user.set(user);
                        return;
                    }
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
            });
        }
    }

    let acceptor = tls::acceptor(resolver)?;
    let listener = TcpListener::bind(address)
        .await
        .map_err(|source| WebhookError::Bind { address, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| WebhookError::Bind { address, source })?;
    tracing::info!(address = %bound, "webhook listening (HTTPS)");
    state.listening.store(true, Ordering::Release);
    tls::serve(listener, acceptor, router(state)).await;
    Ok(())
}
