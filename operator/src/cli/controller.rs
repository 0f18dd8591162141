//! `agentgate controller`: runs the reconcilers against the cluster in
//! `KUBECONFIG` (or the in-cluster service account).

use std::time::Duration;

use clap::Args;

use crate::cli::{EXIT_USAGE, EXIT_WITHIN};
use crate::controller::{Context, maximum, proposal, sandbox};
use crate::prover::{Prover, ProverOptions};

/// Arguments of `controller`.
#[derive(Debug, Args)]
pub struct ControllerArgs {
    /// Per-check solver timeout in milliseconds.
    #[arg(long = "timeout-ms", default_value_t = 5000)]
    pub timeout_ms: u64,
    /// Let sandboxes that no MaximumPolicy governs keep their grants.
    #[arg(long)]
    pub allow_unmanaged: bool,
}

/// Runs the controllers until SIGINT/SIGTERM; returns the exit code.
pub fn run(args: &ControllerArgs) -> u8 {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("agentgate controller: cannot start the async runtime: {e}");
            return EXIT_USAGE;
        }
    };
    runtime.block_on(async {
        let client = match kube::Client::try_default().await {
            Ok(client) => client,
            Err(e) => {
                eprintln!("agentgate controller: cannot reach the cluster (KUBECONFIG or in-cluster config): {e}");
                return EXIT_USAGE;
            }
        };
        let prover = Prover::new(ProverOptions {
            timeout: Duration::from_millis(args.timeout_ms.max(1)),
            ..ProverOptions::default()
        });
        tracing::info!("agentgate controller started");
        let ctx = Context::new(client, prover, args.allow_unmanaged);
        tokio::join!(maximum::run(ctx.clone()), sandbox::run(ctx.clone()), proposal::run(ctx));
        tracing::info!("agentgate controller stopped");
        EXIT_WITHIN
    })
}
