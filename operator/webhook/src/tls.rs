//! The HTTPS side of the webhook: where the serving certificate comes from
//! (self-managed in a Secret, or cert-manager's files; see `certs`), the
//! rustls configuration that picks it per handshake, and the accept loop
//! that serves the router over each TLS connection.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use kube::Client;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::certs::{CertResolver, Lifetimes, SelfManaged, watch_directory};
use crate::{CertMode, WebhookArgs};
use agentgate_k8s::metrics::Metrics;

/// Starts the task that keeps `resolver` holding a current serving
/// certificate, as `args.cert_mode` says.
pub(super) fn spawn_certificate_source(
    args: &WebhookArgs,
    client: &Client,
    resolver: &Arc<CertResolver>,
    metrics: &Arc<Metrics>,
) {
    let check = Duration::from_millis(args.cert_check_interval_ms.max(50));
    match args.cert_mode {
        CertMode::SelfManaged => {
            let manager = SelfManaged {
                namespace: args.secret_namespace(),
                secret: args.tls_secret_name.clone(),
                webhook_config: (!args.webhook_config_name.is_empty())
                    .then(|| args.webhook_config_name.clone()),
                names: args.cert_names(),
                lifetimes: Lifetimes {
                    ca: Duration::from_secs(args.ca_validity_seconds.max(60)),
                    leaf: Duration::from_secs(args.cert_validity_seconds.max(3)),
                },
            };
            tokio::spawn(manager.run(client.clone(), resolver.clone(), metrics.clone(), check));
        }
        CertMode::CertManager => {
            tokio::spawn(watch_directory(
                args.cert_dir.clone(),
                resolver.clone(),
                metrics.clone(),
                check,
            ));
        }
    }
}

/// TLS with the ring provider, safe default protocol versions, no client
/// certificates, HTTP/1.1 only, and the certificate `resolver` holds at
/// each handshake (so a rotation needs no restart).
pub(super) fn acceptor(resolver: Arc<CertResolver>) -> Result<TlsAcceptor, rustls::Error> {
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Accepts connections on `listener` forever, each served by `app` over
/// TLS on its own task; a failed accept, handshake or connection is logged
/// and the loop goes on.
pub(super) async fn serve(listener: TcpListener, acceptor: TlsAcceptor, app: Router) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let tls = match acceptor.accept(stream).await {
                Ok(tls) => tls,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
            };
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}
