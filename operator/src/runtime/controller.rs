//! `agentgate controller`: runs the reconcilers against the cluster in
//! `KUBECONFIG` (or the in-cluster service account). With leader election
//! (the default) only the replica holding the Lease runs them; a replica
//! that loses the Lease exits, and its restart waits for the Lease again.
//! Each write that grants authority first checks, on the API server, that
//! the Lease is still this replica's (`controller::leader_fence`).

use std::time::Duration;

use clap::Args;
use kube_lease_manager::LeaseManagerBuilder;

use crate::cli::{EXIT_USAGE, EXIT_WITHIN};
use crate::controller::leader_fence::{LeaseFence, grace_seconds};
use crate::controller::{Context, maximum, proposal, runtime_events, sandbox, scan};
use crate::webhook::{WebhookArgs, server};
use agentgate_k8s::metrics::{Metrics, serve};
use agentgate_prover::{Prover, ProverOptions};

/// Exit code when leadership is lost (crash-only: the Deployment restarts us).
pub const EXIT_LOST_LEADERSHIP: u8 = 4;

/// Arguments of `controller`.
#[derive(Debug, Args)]
pub struct ControllerArgs {
    /// Per-check solver timeout in milliseconds.
    #[arg(long = "timeout-ms", default_value_t = 5000)]
    pub timeout_ms: u64,
    /// Let sandboxes that no MaximumPolicy governs keep their grants.
    #[arg(long)]
    pub allow_unmanaged: bool,
    /// Run the reconcilers only while holding the Lease (one active replica).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Namespace of the Lease (default: $POD_NAMESPACE, else `default`).
    #[arg(long)]
    pub lease_namespace: Option<String>,
    /// Name of the Lease.
    #[arg(long, default_value = "agentgate-leader")]
    pub lease_name: String,
    /// Seconds a leader's Lease is valid without renewal.
    #[arg(long, default_value_t = 15)]
    pub lease_duration_seconds: u64,
    /// This replica's identity in the Lease (default: $POD_NAME, else host and pid).
    #[arg(long)]
    pub identity: Option<String>,
    /// A namespace whose sandboxes and proposals are never reconciled
    /// (repeatable). kube-system and the release namespace ($POD_NAMESPACE,
    /// else the Lease namespace) are always excluded: the webhook does not
    /// see them, so nothing there could have been admitted.
    #[arg(long = "ignore-namespace")]
    pub ignore_namespaces: Vec<String>,
    /// How many objects of one kind are reconciled at once. Proofs still
    /// run one per core; more reconciles wait on the API server together.
    #[arg(long, default_value_t = crate::controller::CONCURRENCY,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrent_reconciles: u16,
    /// Where to serve /metrics and /healthz (plain HTTP; port 0 picks one).
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_bind_address: std::net::SocketAddr,
    /// The admission webhook, served by every replica (leader or not) when
    /// `--webhook-bind-address` is given.
    #[command(flatten)]
    pub webhook: WebhookArgs,
}

fn identity(args: &ControllerArgs) -> String {
    args.identity
        .clone()
        .or_else(|| std::env::var("POD_NAME").ok())
        .unwrap_or_else(|| {
            let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
            format!("{}-{}", host.trim(), std::process::id())
        })
}

/// kube-system, the release namespace and every `--ignore-namespace`.
fn ignored_namespaces(args: &ControllerArgs) -> std::collections::BTreeSet<String> {
    let release = std::env::var("POD_NAMESPACE")
        .ok()
        .or_else(|| args.lease_namespace.clone());
    ["kube-system".to_string()]
        .into_iter()
        .chain(release)
        .chain(args.ignore_namespaces.iter().cloned())
        .collect()
}

async fn run_controllers(ctx: std::sync::Arc<Context>) {
    tokio::join!(
        maximum::run(ctx.clone()),
        sandbox::run(ctx.clone()),
        scan::run(ctx.clone()),
        runtime_events::run(ctx.clone()),
        proposal::run(ctx)
    );
}

/// Runs the controllers until SIGINT/SIGTERM (or lost leadership); returns
/// the exit code.
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
        let metrics = std::sync::Arc::new(Metrics::new());
        let address = args.metrics_bind_address;
        let served = metrics.clone();
        tokio::spawn(async move {
            if let Err(e) = serve(address, served).await {
                tracing::error!(%address, error = %e, "metrics server failed");
            }
        });
        if let Some(address) = args.webhook.webhook_bind_address {
            let (webhook, client, prover, metrics) =
                (args.webhook.clone(), client.clone(), prover.clone(), metrics.clone());
            let allow_unmanaged = args.allow_unmanaged;
            tokio::spawn(async move {
                if let Err(e) =
                    server::run(webhook, address, client, prover, metrics, allow_unmanaged).await
                {
                    // Without its webhook the process is not what was asked for: exit.
                    eprintln!("agentgate controller: webhook: {e}");
                    std::process::exit(i32::from(EXIT_USAGE));
                }
            });
        }
        let ctx = Context::new(
            client.clone(),
            prover,
            args.allow_unmanaged,
            metrics,
            ignored_namespaces(args),
            args.webhook.data_plane.data_plane(),
            args.webhook.data_plane.ca_lifetime(),
        )
        .with_concurrency(args.concurrent_reconciles)
        // The operator's serving CA reaches the Pods for the approval
        // service and the policy stream alike.
        .with_approvals(
            (args.webhook.data_plane.approvals_url.is_some()
                || args.webhook.data_plane.policy_stream_url.is_some())
            .then(|| {
                crate::controller::approvals::ApprovalsWiring::new(
                    args.webhook.webhook_config_name.clone(),
                    args.webhook.secret_namespace(),
                    args.webhook
                        .webhook_bind_address
                        .map_or(9443, |address| address.port()),
                )
            }),
        );
        if !args.leader_elect {
            tracing::info!("agentgate controller started (no leader election)");
            run_controllers(std::sync::Arc::new(ctx)).await;
            return EXIT_WITHIN;
        }

        let me = identity(args);
        let namespace = args
            .lease_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| "default".into());
        let duration = args.lease_duration_seconds.max(2);
        // Checked before every write that grants authority (fence.rs).
        let ctx = std::sync::Arc::new(ctx.with_fence(LeaseFence::new(
            client.clone(),
            &namespace,
            &args.lease_name,
            &me,
            duration,
        )));
        let manager = match LeaseManagerBuilder::new(client, &args.lease_name)
            .with_namespace(&namespace)
            .with_identity(&me)
            .with_duration(duration)
            .with_grace(grace_seconds(duration))
            .build()
            .await
        {
            Ok(m) => m,
            Err(e) => {
                eprintln!("agentgate controller: cannot use Lease {namespace}/{}: {e}", args.lease_name);
                return EXIT_USAGE;
            }
        };
        let (mut leading, lease_task) = manager.watch().await;
        tracing::info!(identity = %me, lease = %args.lease_name, "waiting for leadership");
        while !*leading.borrow_and_update() {
            tokio::select! {
                changed = leading.changed() => {
                    if changed.is_err() {
                        eprintln!("agentgate controller: the lease manager stopped");
                        return EXIT_USAGE;
                    }
                }
                _ = tokio::signal::ctrl_c() => return EXIT_WITHIN,
            }
        }
        tracing::info!(identity = %me, "leading: starting the reconcilers");
        let lost = async {
            loop {
                if leading.changed().await.is_err() || !*leading.borrow_and_update() {
                    return;
                }
            }
        };
        // A fence check that finds the Lease held by another replica
        // (before the lease manager notices, e.g. right after a pause).
        let mut fenced = match ctx.lease_fence() {
            Some(fence) => fence.lost(),
            None => tokio::sync::watch::channel(false).1,
        };
        let code = tokio::select! {
            _ = run_controllers(ctx) => EXIT_WITHIN,
            _ = lost => {
                tracing::error!(identity = %me, "lost leadership; exiting so that a restart waits for the Lease");
                EXIT_LOST_LEADERSHIP
            }
            Ok(_) = fenced.wait_for(|lost| *lost) => {
                tracing::error!(identity = %me, "fenced: a write found the Lease held by another replica; exiting so that a restart waits for the Lease");
                EXIT_LOST_LEADERSHIP
            }
        };
        if code == EXIT_WITHIN {
            // Clean shutdown: release the Lease for the next leader.
            drop(leading);
            let _ = lease_task.await;
        }
        tracing::info!(identity = %me, "agentgate controller stopped");
        code
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use clap::Parser as _;

    use crate::runtime::{Cli, Command};

    fn concurrency(args: &[&str]) -> Result<u16, clap::Error> {
        let cli = Cli::try_parse_from(["agentgate", "controller"].iter().chain(args))?;
        match cli.command {
            Command::Controller(args) => Ok(args.concurrent_reconciles),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn concurrent_reconciles_defaults_to_16_and_refuses_0() {
        assert_eq!(concurrency(&[]).unwrap(), crate::controller::CONCURRENCY);
        assert_eq!(concurrency(&["--concurrent-reconciles", "48"]).unwrap(), 48);
        let refused = concurrency(&["--concurrent-reconciles", "0"]).unwrap_err();
        assert!(
            refused.to_string().contains("0 is not in 1..="),
            "{refused}"
        );
    }
}
