//! The data plane flags the operator and its webhook share: the image and
//! pull policy of the sandbox Pod's proxy and init containers (which pod
//! admission trusts, and no other image), and the sandbox CA's lifetime.

use std::time::Duration;

use agentgate_governance::sandbox_pod::DataPlane;
use clap::Args;

/// The data plane the operator puts into every sandbox Pod, and that pod
/// admission trusts (and no other image) with the proxy's uid and the
/// init container's NET_ADMIN.
#[derive(Debug, Clone, Args)]
pub struct DataPlaneArgs {
    /// Image of `agentgate-init` and the `agentgate-proxy` sidecar (holds
    /// `agentgate-proxy` and `agentgate-exec`); default: this release's image.
    #[arg(long)]
    pub proxy_image: Option<String>,
    /// `imagePullPolicy` of those containers (default: the cluster's).
    #[arg(long)]
    pub proxy_image_pull_policy: Option<String>,
    /// Lifetime of each sandbox CA, in seconds; the next CA is published a
    /// third of it before expiry and signs from a sixth before.
    #[arg(long, default_value_t = 365 * 24 * 3600)]
    pub sandbox_ca_validity_seconds: u64,
    /// The approval service the sandbox proxies put held calls to: this
    /// operator's `https://SERVICE.NAMESPACE.svc.CLUSTER-DOMAIN/v1/hold`
    /// (docs/proxy.md, "Held calls"). Without it held calls are refused.
    #[arg(long)]
    pub approvals_url: Option<String>,
    /// The policy stream the sandbox proxies subscribe to: this operator's
    /// `https://SERVICE.NAMESPACE.svc.CLUSTER-DOMAIN/v1/policy/stream`
    /// (docs/design.md §10, "Delivery"). Without it a commit reaches a Pod
    /// when the kubelet refreshes its ConfigMap volume.
    #[arg(long)]
    pub policy_stream_url: Option<String>,
    /// Seconds a held call waits for a person before it is refused.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=agentgate_judgement::held::MAX_HOLD_SECONDS))]
    pub hold_timeout_seconds: u64,
}

impl DataPlaneArgs {
    /// The data plane these flags name.
    pub fn data_plane(&self) -> DataPlane {
        DataPlane {
            image: self
                .proxy_image
                .clone()
                .filter(|i| !i.is_empty())
                .unwrap_or_else(DataPlane::default_image),
            pull_policy: self.proxy_image_pull_policy.clone(),
            approvals: self.approvals_url.clone().filter(|u| !u.is_empty()),
            policy_stream: self.policy_stream_url.clone().filter(|u| !u.is_empty()),
            hold_timeout_seconds: self.hold_timeout_seconds,
        }
    }

    /// The sandbox CA lifetime (at least a week, so a switch is never closer to expiry than a leaf lives).
    pub fn ca_lifetime(&self) -> Duration {
        Duration::from_secs(self.sandbox_ca_validity_seconds.max(7 * 24 * 3600))
    }
}
