//! Serving certificates of the webhook.
//!
//! Two sources, one resolver: rustls asks [`CertResolver`] for the
//! certificate on every TLS handshake, so a rotated certificate is served by
//! the next connection without a restart.
//! - Self-managed: a CA and a leaf live in one Secret (shared by every
//!   replica). A replica creates the Secret if it is missing, re-issues the
//!   leaf from the same CA when two thirds of its lifetime have passed (as
//!   cert-manager does), writes it back with the resourceVersion as
//!   precondition (so exactly one replica wins a rotation), and patches the
//!   `caBundle` of the ValidatingWebhookConfiguration with server-side apply.
//! - cert-manager: `tls.crt`/`tls.key` are read from a mounted directory and
//!   re-read when their content changes; cert-manager's cainjector owns
//!   `caBundle`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use rustls::crypto::ring::sign::any_supported_type;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use serde_json::json;
use time::OffsetDateTime;

use agentgate_k8s::FIELD_MANAGER;
use agentgate_k8s::metrics::Metrics;
use agentgate_k8s::pki::PkiError;
pub use agentgate_k8s::pki::{
    KeyedCert, generate_ca, issue_leaf, not_after, renewal_time, subject_alt_names, window,
};

/// Secret keys of the self-managed material (the `kubernetes.io/tls` layout
/// plus the CA's key, which only the operator reads).
pub const TLS_CRT: &str = "tls.crt";
/// The leaf's private key.
pub const TLS_KEY: &str = "tls.key";
/// The CA certificate (the `caBundle`).
pub const CA_CRT: &str = "ca.crt";
/// The CA's private key.
pub const CA_KEY: &str = "ca.key";

/// Why certificate material could not be made, read or published.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// PEM or DER could not be read.
    #[error("reading {what}: {message}")]
    Parse {
        /// Which item.
        what: &'static str,
        /// What is wrong.
        message: String,
    },
    /// Certificate material could not be made or read.
    #[error(transparent)]
    Pki(#[from] PkiError),
    /// rustls refused the key.
    #[error("loading the key into rustls: {0}")]
    Rustls(#[from] rustls::Error),
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A request to the API server failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The Secret exists but lacks a key.
    #[error("Secret {secret} has no {key:?}")]
    MissingKey {
        /// The Secret.
        secret: String,
        /// The key.
        key: &'static str,
    },
}

fn parse_error(what: &'static str, e: impl fmt::Display) -> CertError {
    CertError::Parse {
        what,
        message: e.to_string(),
    }
}

/// Lifetimes of the self-managed material.
#[derive(Debug, Clone, Copy)]
pub struct Lifetimes {
    /// How long the CA is valid.
    pub ca: Duration,
    /// How long each serving certificate is valid; it is re-issued when two
    /// thirds of this have passed.
    pub leaf: Duration,
}

impl Default for Lifetimes {
    fn default() -> Self {
        Lifetimes {
            ca: Duration::from_secs(10 * 365 * 24 * 3600),
            leaf: Duration::from_secs(90 * 24 * 3600),
        }
    }
}

/// Whether `leaf` must be re-issued now: unreadable, not signed for every
/// one of `names`, or past its renewal time.
pub fn needs_reissue(leaf: &KeyedCert, names: &[String], now: OffsetDateTime) -> bool {
    let Ok((start, end)) = window(&leaf.cert_pem) else {
        return true;
    };
    let Ok(sans) = subject_alt_names(&leaf.cert_pem) else {
        return true;
    };
    now >= renewal_time(start, end) || names.iter().any(|n| !sans.contains(n))
}

/// Builds what rustls serves from a certificate chain and key in PEM.
pub fn certified_key(cert_pem: &str, key_pem: &str) -> Result<CertifiedKey, CertError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| parse_error("certificate chain", e))?;
    if chain.is_empty() {
        return Err(parse_error("certificate chain", "no PEM certificate"));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| parse_error("private key", e))?;
    let signing_key = any_supported_type(&key)?;
    Ok(CertifiedKey::new(chain, signing_key))
}

/// The certificate rustls serves, swapped in place on rotation.
pub struct CertResolver {
    current: RwLock<Option<(Arc<CertifiedKey>, String)>>,
}

impl fmt::Debug for CertResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertResolver")
            .field("loaded", &self.is_loaded())
            .finish()
    }
}

impl Default for CertResolver {
    fn default() -> Self {
        CertResolver::new()
    }
}

impl CertResolver {
    /// A resolver with nothing to serve yet (handshakes fail until [`Self::install`]).
    pub fn new() -> CertResolver {
        CertResolver {
            current: RwLock::new(None),
        }
    }

    /// Serves `leaf` from the next handshake on; returns whether it differs
    /// from what was served.
    pub fn install(&self, leaf: &KeyedCert) -> Result<bool, CertError> {
        let key = Arc::new(certified_key(&leaf.cert_pem, &leaf.key_pem)?);
        let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
        let changed = current
            .as_ref()
            .is_none_or(|(_, pem)| *pem != leaf.cert_pem);
        if changed {
            *current = Some((key, leaf.cert_pem.clone()));
        }
        Ok(changed)
    }

    /// Whether a certificate is loaded.
    pub fn is_loaded(&self) -> bool {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// The PEM being served, if any.
    pub fn served_pem(&self) -> Option<String> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|(_, pem)| pem.clone())
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|(key, _)| key.clone())
    }
}

/// Where the self-managed material lives and what it must cover.
#[derive(Debug, Clone)]
pub struct SelfManaged {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub secret: String,
    /// The ValidatingWebhookConfiguration whose `caBundle` is kept current
    /// (none: nothing is patched, e.g. when the caller registers the webhook).
    pub webhook_config: Option<String>,
    /// Subject alternative names of the serving certificate.
    pub names: Vec<String>,
    /// Lifetimes of CA and leaf.
    pub lifetimes: Lifetimes,
}

fn secret_value(secret: &Secret, key: &'static str) -> Result<String, CertError> {
    let name = secret.name_any();
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .ok_or(CertError::MissingKey {
            secret: name.clone(),
            key,
        })?;
    String::from_utf8(bytes.0.clone()).map_err(|e| parse_error(key, e))
}

fn secret_data(ca: &KeyedCert, leaf: &KeyedCert) -> BTreeMap<String, ByteString> {
    [
        (CA_CRT, &ca.cert_pem),
        (CA_KEY, &ca.key_pem),
        (TLS_CRT, &leaf.cert_pem),
        (TLS_KEY, &leaf.key_pem),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
    .collect()
}

impl SelfManaged {
    /// Makes sure the Secret holds a CA and a current leaf, creating or
    /// rotating as needed; returns the CA and the leaf to serve.
    pub async fn ensure(
        &self,
        client: &Client,
        metrics: &Metrics,
    ) -> Result<(KeyedCert, KeyedCert), CertError> {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &self.namespace);
        // Two rounds: a lost create or update race is resolved by re-reading.
        let mut last_conflict = None;
        for _ in 0..3 {
            let Some(secret) = secrets.get_opt(&self.secret).await? else {
                let ca = generate_ca("agentgate webhook CA", self.lifetimes.ca)?;
                let leaf = issue_leaf(&ca, &self.names, self.lifetimes.leaf)?;
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(self.secret.clone()),
                        labels: Some(BTreeMap::from([(
                            "app.kubernetes.io/managed-by".to_string(),
                            "agentgate".to_string(),
                        )])),
                        ..ObjectMeta::default()
                    },
                    type_: Some("kubernetes.io/tls".into()),
                    data: Some(secret_data(&ca, &leaf)),
                    ..Secret::default()
                };
                match secrets.create(&PostParams::default(), &secret).await {
                    Ok(_) => {
                        tracing::info!(secret = %self.secret, namespace = %self.namespace, "created webhook CA and serving certificate");
                        metrics.certificate_rotations.inc();
                        return Ok((ca, leaf));
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => {
                        last_conflict = Some(kube::Error::Api(e));
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
            };
            let ca = KeyedCert {
                cert_pem: secret_value(&secret, CA_CRT)?,
                key_pem: secret_value(&secret, CA_KEY)?,
            };
            let leaf = KeyedCert {
                cert_pem: secret_value(&secret, TLS_CRT)?,
                key_pem: secret_value(&secret, TLS_KEY)?,
            };
            if !needs_reissue(&leaf, &self.names, OffsetDateTime::now_utc()) {
                return Ok((ca, leaf));
            }
            let fresh = issue_leaf(&ca, &self.names, self.lifetimes.leaf)?;
            let mut next = secret.clone();
            next.data = Some(secret_data(&ca, &fresh));
            // resourceVersion is kept: only one replica's rotation lands.
            match secrets
                .replace(&self.secret, &PostParams::default(), &next)
                .await
            {
                Ok(_) => {
                    tracing::info!(secret = %self.secret, "rotated the webhook serving certificate");
                    metrics.certificate_rotations.inc();
                    return Ok((ca, fresh));
                }
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    last_conflict = Some(kube::Error::Api(e));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(last_conflict
            .map(CertError::Kube)
            .unwrap_or_else(|| parse_error("secret", "kept changing under us")))
    }

    /// Sets `caBundle` on every webhook of the configuration, with
    /// server-side apply under field manager `agentgate` (so Helm and the
    /// operator do not fight over it). Returns false when the configuration
    /// does not exist (yet).
    pub async fn publish_ca(&self, client: &Client, ca_pem: &str) -> Result<bool, CertError> {
        let Some(name) = &self.webhook_config else {
            return Ok(true);
        };
        let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        let Some(current) = api.get_opt(name).await? else {
            return Ok(false);
        };
        let bundle = ByteString(ca_pem.as_bytes().to_vec());
        let up_to_date = current.webhooks.iter().flatten().all(|w| {
            w.client_config
                .ca_bundle
                .as_ref()
                .is_some_and(|b| *b == bundle)
        });
        if up_to_date {
            return Ok(true);
        }
        let webhooks: Vec<_> = current
            .webhooks
            .iter()
            .flatten()
            .map(|w| json!({"name": w.name, "clientConfig": {"caBundle": bundle}}))
            .collect();
        let patch = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": webhooks,
        });
        api.patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
        tracing::info!(webhook_config = %name, "published the webhook CA bundle");
        Ok(true)
    }

    /// Keeps the material current forever: ensure, serve, publish, then
    /// sleep until the next renewal time (at most `check`).
    pub async fn run(
        self,
        client: Client,
        resolver: Arc<CertResolver>,
        metrics: Arc<Metrics>,
        check: Duration,
    ) {
        let mut published_for: Option<String> = None;
        loop {
            let mut wait = check;
            match self.ensure(&client, &metrics).await {
                Ok((ca, leaf)) => {
                    match resolver.install(&leaf) {
                        Ok(true) => tracing::info!("serving a new certificate"),
                        Ok(false) => {}
                        Err(e) => tracing::error!(error = %e, "cannot serve the certificate"),
                    }
                    if let Ok((start, end)) = window(&leaf.cert_pem) {
                        metrics.certificate_expiry.set(end.unix_timestamp());
                        let until = renewal_time(start, end) - OffsetDateTime::now_utc();
                        let until = Duration::try_from(until).unwrap_or(Duration::ZERO);
                        wait = wait.min(until.max(Duration::from_millis(100)));
                    }
                    if published_for.as_deref() != Some(ca.cert_pem.as_str()) {
                        match self.publish_ca(&client, &ca.cert_pem).await {
                            Ok(true) => published_for = Some(ca.cert_pem.clone()),
                            Ok(false) => tracing::warn!(
                                webhook_config = ?self.webhook_config,
                                "ValidatingWebhookConfiguration not found; will retry"
                            ),
                            Err(e) => {
                                tracing::warn!(error = %e, "cannot publish the CA bundle; will retry")
                            }
                        }
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot ensure the webhook certificate; will retry")
                }
            }
            tokio::time::sleep(wait).await;
        }
    }
}

/// cert-manager mode: serve `tls.crt`/`tls.key` from `dir`, re-reading
/// them every `check` (a mounted Secret is updated atomically by the kubelet).
pub async fn watch_directory(
    dir: PathBuf,
    resolver: Arc<CertResolver>,
    metrics: Arc<Metrics>,
    check: Duration,
) {
    loop {
        match read_directory(&dir) {
            Ok(leaf) => match resolver.install(&leaf) {
                Ok(changed) => {
                    if changed {
                        tracing::info!(dir = %dir.display(), "serving the mounted certificate");
                        metrics.certificate_rotations.inc();
                    }
                    if let Ok(end) = not_after(&leaf.cert_pem) {
                        metrics.certificate_expiry.set(end.unix_timestamp());
                    }
                }
                Err(e) => tracing::error!(error = %e, "cannot serve the mounted certificate"),
            },
            Err(e) => tracing::warn!(error = %e, "mounted certificate not readable yet"),
        }
        tokio::time::sleep(check).await;
    }
}

/// Reads `tls.crt` and `tls.key` from `dir`.
pub fn read_directory(dir: &std::path::Path) -> Result<KeyedCert, CertError> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read_to_string(&path).map_err(|source| CertError::Io { path, source })
    };
    Ok(KeyedCert {
        cert_pem: read(TLS_CRT)?,
        key_pem: read(TLS_KEY)?,
    })
}

/// The DNS names of a Service: `svc`, `svc.ns`, `svc.ns.svc`,
/// `svc.ns.svc.cluster.local`.
pub fn service_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_string(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        let mut n = service_names("agentgate-webhook", "agentgate-system");
        n.push("127.0.0.1".into());
        n
    }

    #[test]
    fn leaf_is_signed_for_the_service_and_loadable() {
        let ca = generate_ca("test CA", Duration::from_secs(3600)).unwrap();
        let leaf = issue_leaf(&ca, &names(), Duration::from_secs(600)).unwrap();
        let sans = subject_alt_names(&leaf.cert_pem).unwrap();
        assert_eq!(sans, names());
        assert!(certified_key(&leaf.cert_pem, &leaf.key_pem).is_ok());
        assert!(!needs_reissue(&leaf, &names(), OffsetDateTime::now_utc()));
        // A new name forces a re-issue.
        let mut more = names();
        more.push("other.example".into());
        assert!(needs_reissue(&leaf, &more, OffsetDateTime::now_utc()));
    }

    #[test]
    fn leaf_never_outlives_its_ca() {
        let ca = generate_ca("test CA", Duration::from_secs(60)).unwrap();
        let leaf = issue_leaf(&ca, &names(), Duration::from_secs(3600)).unwrap();
        assert!(not_after(&leaf.cert_pem).unwrap() <= not_after(&ca.cert_pem).unwrap());
    }

    #[test]
    fn renewal_is_due_after_two_thirds_of_the_lifetime() {
        let ca = generate_ca("test CA", Duration::from_secs(3600)).unwrap();
        let leaf = issue_leaf(&ca, &names(), Duration::from_secs(900)).unwrap();
        let (start, end) = window(&leaf.cert_pem).unwrap();
        let due = renewal_time(start, end);
        assert!(!needs_reissue(
            &leaf,
            &names(),
            due - time::Duration::seconds(1)
        ));
        assert!(needs_reissue(&leaf, &names(), due));
    }

    #[test]
    fn resolver_swaps_certificates_in_place() {
        let ca = generate_ca("test CA", Duration::from_secs(3600)).unwrap();
        let a = issue_leaf(&ca, &names(), Duration::from_secs(600)).unwrap();
        let b = issue_leaf(&ca, &names(), Duration::from_secs(600)).unwrap();
        let resolver = CertResolver::new();
        assert!(!resolver.is_loaded());
        assert!(resolver.install(&a).unwrap());
        assert!(!resolver.install(&a).unwrap());
        assert!(resolver.install(&b).unwrap());
        assert_eq!(resolver.served_pem().as_deref(), Some(b.cert_pem.as_str()));
    }

    #[test]
    fn garbage_is_a_clear_error() {
        let err = certified_key("not pem", "not pem").unwrap_err();
        assert!(err.to_string().contains("certificate chain"), "{err}");
        assert!(
            format!(
                "{:?}",
                generate_ca("test CA", Duration::from_secs(60)).unwrap()
            )
            .contains("..")
        );
    }
}
