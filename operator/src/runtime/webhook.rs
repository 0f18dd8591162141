//! `agentgate webhook`: serves only the admission webhook and `/v1/decide`
//! (no reconcilers, no leader election: every replica answers).

use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use crate::cli::{EXIT_USAGE, EXIT_WITHIN};
use crate::webhook::{WebhookArgs, server};
use agentgate_k8s::metrics::{Metrics, serve};
use agentgate_prover::{Prover, ProverOptions};

/// The default HTTPS address of the webhook.
pub const DEFAULT_WEBHOOK_ADDRESS: &str = "0.0.0.0:9443";

/// Arguments of `webhook`.
#[derive(Debug, Args)]
pub struct WebhookCommandArgs {
    /// Per-check solver timeout in milliseconds (the admission deadline
    /// caps it further).
    #[arg(long = "timeout-ms", default_value_t = 5000)]
    pub timeout_ms: u64,
    /// Admit sandboxes that no MaximumPolicy governs.
    #[arg(long)]
    pub allow_unmanaged: bool,
    /// Where to serve /metrics and /healthz (plain HTTP; port 0 picks one).
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_bind_address: std::net::SocketAddr,
    /// The webhook server (`--webhook-bind-address` defaults to 0.0.0.0:9443 here).
    #[command(flatten)]
    pub webhook: WebhookArgs,
}

/// Serves until SIGINT/SIGTERM; returns the exit code.
pub fn run(args: &WebhookCommandArgs) -> u8 {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("agentgate webhook: cannot start the async runtime: {e}");
            return EXIT_USAGE;
        }
    };
    runtime.block_on(async {
        let client = match kube::Client::try_default().await {
            Ok(client) => client,
            Err(e) => {
                eprintln!("agentgate webhook: cannot reach the cluster (KUBECONFIG or in-cluster config): {e}");
                return EXIT_USAGE;
            }
        };
        let address = match args.webhook.webhook_bind_address {
            Some(a) => a,
            None => match DEFAULT_WEBHOOK_ADDRESS.parse() {
                Ok(a) => a,
                Err(e) => {
                    eprintln!("agentgate webhook: {e}");
                    return EXIT_USAGE;
                }
            },
        };
        let prover = Prover::new(ProverOptions {
            timeout: Duration::from_millis(args.timeout_ms.max(1)),
            ..ProverOptions::default()
        });
        let metrics = Arc::new(Metrics::new());
        let metrics_address = args.metrics_bind_address;
        let served = metrics.clone();
        tokio::spawn(async move {
            if let Err(e) = serve(metrics_address, served).await {
                tracing::error!(address = %metrics_address, error = %e, "metrics server failed");
            }
        });
        tokio::select! {
            result = server::run(args.webhook.clone(), address, client, prover, metrics, args.allow_unmanaged) => match result {
                Ok(()) => EXIT_WITHIN,
                Err(e) => {
                    eprintln!("agentgate webhook: {e}");
                    EXIT_USAGE
                }
            },
            _ = tokio::signal::ctrl_c() => EXIT_WITHIN,
        }
    })
}
