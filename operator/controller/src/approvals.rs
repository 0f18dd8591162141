//! What a sandbox's data plane needs to put held calls to the operator
//! (docs/proxy.md, "Held calls"): the roots that verify the operator's
//! serving certificate, published in the sandbox's policy ConfigMap, and
//! an egress path from the sandbox Pod to the operator's Pods.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::Client;
use kube::api::Api;
use serde_json::{Value, json};

/// How long a read `caBundle` is reused: a rotated CA reaches the
/// ConfigMaps within this, long before the old one stops verifying.
const CA_TTL: Duration = Duration::from_secs(60);

/// Where the approval service lives, as the controller's flags say.
#[derive(Debug)]
pub struct ApprovalsWiring {
    /// The ValidatingWebhookConfiguration whose `caBundle` verifies the
    /// webhook server (self-managed or injected by cert-manager).
    pub webhook_config: String,
    /// The namespace of the operator's Pods.
    pub namespace: String,
    /// The port the Pods serve `/v1/hold` on.
    pub port: u16,
    /// The last `caBundle` read, and when.
    ca: Mutex<Option<(Instant, String)>>,
}

impl ApprovalsWiring {
    /// The wiring for an operator in `namespace` serving on `port`.
    pub fn new(webhook_config: String, namespace: String, port: u16) -> ApprovalsWiring {
        ApprovalsWiring {
            webhook_config,
            namespace,
            port,
            ca: Mutex::new(None),
        }
    }

    /// The serving CA bundle (PEM), if the webhook configuration carries
    /// one yet; read at most once per [`CA_TTL`].
    pub async fn ca_bundle(&self, client: &Client) -> Option<String> {
        if let Ok(cached) = self.ca.lock()
            && let Some((at, pem)) = cached.as_ref()
            && at.elapsed() < CA_TTL
        {
            return Some(pem.clone());
        }
        let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        let read = match api.get_opt(&self.webhook_config).await {
            Ok(read) => read,
            Err(e) => {
                tracing::warn!(webhook = %self.webhook_config, error = %e, "cannot read the approval service's CA bundle");
                return None;
            }
        };
        let pem = read
            .and_then(|config| config.webhooks)
            .into_iter()
            .flatten()
            .find_map(|hook| hook.client_config.ca_bundle)
            .and_then(|bundle| String::from_utf8(bundle.0).ok())
            .filter(|pem| pem.contains("-----BEGIN CERTIFICATE-----"))?;
        if let Ok(mut cached) = self.ca.lock() {
            *cached = Some((Instant::now(), pem.clone()));
        }
        Some(pem)
    }

    /// The egress rule of a sandbox's NetworkPolicy that lets its Pod reach
    /// the operator's Pods (only the proxy does: every other uid's TCP is
    /// redirected to the proxy first).
    pub fn egress(&self) -> Value {
        json!({
            "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.namespace}}}],
            "ports": [{"protocol": "TCP", "port": self.port}],
        })
    }
}
