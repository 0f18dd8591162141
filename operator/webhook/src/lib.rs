#![warn(missing_docs)]
//! The admission webhook and runtime decision endpoint (docs/design.md §6, §8):
//! one HTTPS server (axum on hyper, rustls with the ring provider) that
//! answers from reflector caches. The pure decisions are in
//! `agentgate_governance` (`admission`, `authority`, `pod_admission`), and
//! here `decide` (the runtime decision point) and `caller` (who may ask
//! `/v1/decide`); `certs` holds the serving certificates. The I/O shell around them:
//! `server` (the routes and `run`), `state` (what the handlers share),
//! `access_reviews` (what the API server says a user may do), one handler
//! module per admission kind under `validate`, `decide_endpoint`,
//! `hold_endpoint`, `policy_stream` (policy delivery to the sandbox
//! proxies) and `wakeups` (which of its streams a change wakes), `health`,
//! and `tls` (the certificate source and the accept loop).

mod access_reviews;
pub mod caller;
pub mod certs;
pub mod decide;
mod decide_endpoint;
mod health;
mod hold_endpoint;
pub mod policy_stream;
pub mod server;
mod state;
#[cfg(test)]
mod testkit;
mod tls;
mod validate;
pub mod wakeups;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use agentgate_k8s::data_plane::DataPlaneArgs;
use clap::{Args, ValueEnum};

/// Where the serving certificate comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CertMode {
    /// The operator keeps a CA and a leaf in a Secret, rotates the leaf and
    /// patches `caBundle` itself.
    SelfManaged,
    /// cert-manager issues `tls.crt`/`tls.key` into `--cert-dir` and injects
    /// `caBundle`.
    CertManager,
}

/// Flags of the webhook server (shared by `agentgate webhook` and
/// `agentgate controller`).
#[derive(Debug, Clone, Args)]
pub struct WebhookArgs {
    /// Serve the webhook and `/v1/decide` on this address (HTTPS). With
    /// `controller`, the webhook is served only when this is given.
    #[arg(long)]
    pub webhook_bind_address: Option<SocketAddr>,
    /// Where the serving certificate comes from.
    #[arg(long, value_enum, default_value_t = CertMode::SelfManaged)]
    pub cert_mode: CertMode,
    /// cert-manager mode: directory holding `tls.crt` and `tls.key`.
    #[arg(long, default_value = "/etc/agentgate/tls")]
    pub cert_dir: PathBuf,
    /// Self-managed mode: the Secret holding CA and serving certificate.
    #[arg(long, default_value = "agentgate-webhook-tls")]
    pub tls_secret_name: String,
    /// Namespace of that Secret (default: $POD_NAMESPACE, else `default`).
    #[arg(long)]
    pub tls_secret_namespace: Option<String>,
    /// Self-managed mode: the ValidatingWebhookConfiguration whose
    /// `caBundle` is kept current (empty: patch nothing).
    #[arg(long, default_value = "agentgate")]
    pub webhook_config_name: String,
    /// The Service in front of the webhook (its DNS names go into the certificate).
    #[arg(long, default_value = "agentgate-webhook")]
    pub service_name: String,
    /// Further DNS names or IP addresses for the serving certificate (repeatable).
    #[arg(long = "cert-extra-name")]
    pub cert_extra_names: Vec<String>,
    /// Lifetime of each self-managed serving certificate, in seconds; it is
    /// re-issued after two thirds of it.
    #[arg(long, default_value_t = 90 * 24 * 3600)]
    pub cert_validity_seconds: u64,
    /// Lifetime of the self-managed CA, in seconds.
    #[arg(long, default_value_t = 10 * 365 * 24 * 3600)]
    pub ca_validity_seconds: u64,
    /// How often certificates are re-checked (and re-read in cert-manager mode).
    #[arg(long, default_value_t = 60_000)]
    pub cert_check_interval_ms: u64,
    /// Deadline for the solver work of one admission request, in
    /// milliseconds; keep it well under the webhook's timeoutSeconds. A
    /// request that runs out is denied, saying so.
    #[arg(long, default_value_t = 3000)]
    pub admission_deadline_ms: u64,
    /// A ServiceAccount (as `system:serviceaccount:NS:NAME`) that may write
    /// AgentSandboxes in its own namespace, e.g. a GitOps controller
    /// deployed there (repeatable). Other ServiceAccounts of a sandbox's
    /// namespace, and a sandbox's own agent always, are refused.
    #[arg(long = "trusted-deployer")]
    pub trusted_deployers: Vec<String>,
    /// An identity that may write AgentScans: a user name, or `group:NAME`
    /// (repeatable). Everyone else is refused, so nobody but CI decides
    /// what an image's findings are.
    #[arg(long = "scan-writer")]
    pub scan_writers: Vec<String>,
    /// The user name the reconcilers write status as (default: this
    /// process's own, from a SelfSubjectReview). Set it when the webhook
    /// runs apart from the controller, under another identity.
    #[arg(long)]
    pub operator_user: Option<String>,
    /// The sandbox Pods' data plane.
    #[command(flatten)]
    pub data_plane: DataPlaneArgs,
}

impl WebhookArgs {
    /// Namespace of the TLS Secret.
    pub fn secret_namespace(&self) -> String {
        self.tls_secret_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| "default".into())
    }

    /// The serving certificate's subject alternative names.
    pub fn cert_names(&self) -> Vec<String> {
        let mut names = certs::service_names(&self.service_name, &self.secret_namespace());
        for extra in &self.cert_extra_names {
            if !names.contains(extra) {
                names.push(extra.clone());
            }
        }
        names
    }

    /// Deadline of one admission request's solver work.
    pub fn deadline(&self) -> Duration {
        Duration::from_millis(self.admission_deadline_ms.max(1))
    }
}

/// Why the webhook server could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The listener could not be bound.
    #[error("binding {address}: {source}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// TLS configuration failed.
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
}
