//! TLS on both sides of an intercepted connection. Towards the agent: a leaf
//! for the judged host, signed by the sandbox CA (`--ca-cert/--ca-key`),
//! minted with rcgen on first use and cached until it nears expiry.
//! Towards the upstream: rustls with the Mozilla roots (webpki-roots) plus
//! `--upstream-ca`, always verified.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// How long a minted leaf is valid.
pub const LEAF_LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// A cached leaf is replaced after this long, well before it expires.
pub const LEAF_REFRESH: Duration = Duration::from_secs(12 * 3600);
/// The most leaves kept; the oldest go first.
pub const LEAF_CACHE_ENTRIES: usize = 4096;

/// A TLS set-up error.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or parsed.
    #[error("{path}: {reason}")]
    Pem {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The CA could not sign, or rustls refused the result.
    #[error("cannot mint a certificate for {host}: {reason}")]
    Mint {
        /// The host.
        host: String,
        /// Why.
        reason: String,
    },
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn pem_err(path: &Path, reason: impl ToString) -> TlsError {
    TlsError::Pem {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// Reads every certificate of a PEM file; none is an error.
pub fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_err(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_err(path, e))?;
    if certs.is_empty() {
        return Err(pem_err(path, "no CERTIFICATE block"));
    }
    Ok(certs)
}

/// One sandbox CA: what signs, and the PEM it was read from.
struct Signer {
    issuer: Issuer<'static, KeyPair>,
    ca: CertificateDer<'static>,
    pem: (String, String),
}

/// The sandbox CA and the leaves it has minted. The CA can be replaced
/// while the proxy runs (the operator rotates it in the mounted Secret):
/// leaves minted by the old one are dropped and minted again on next use.
pub struct Interceptor {
    signer: std::sync::RwLock<Arc<Signer>>,
    leaves: Mutex<HashMap<String, (Arc<ServerConfig>, Instant)>>,
}

impl Interceptor {
    /// Loads the CA certificate and key (PEM).
    pub fn from_files(cert: &Path, key: &Path) -> Result<Interceptor, TlsError> {
        let cert_pem = std::fs::read_to_string(cert).map_err(|e| pem_err(cert, e))?;
        let key_pem = std::fs::read_to_string(key).map_err(|e| pem_err(key, e))?;
        Interceptor::from_pem(&cert_pem, &key_pem).map_err(|e| match e {
            TlsError::Pem { reason, .. } => pem_err(cert, reason),
            other => other,
        })
    }

    /// Builds from PEM text.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Interceptor, TlsError> {
        Ok(Interceptor {
            signer: std::sync::RwLock::new(Arc::new(Signer::from_pem(cert_pem, key_pem)?)),
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// Re-reads the CA files; when they changed and are valid, signs with
    /// the new CA from now on and forgets the leaves of the old one.
    /// Returns whether it switched. Invalid new files keep the current CA
    /// (an error is returned to log): a CA is no grant, so keeping the
    /// last good one loses nothing, while refusing all TLS would.
    pub fn reload_from_files(&self, cert: &Path, key: &Path) -> Result<bool, TlsError> {
        let cert_pem = std::fs::read_to_string(cert).map_err(|e| pem_err(cert, e))?;
        let key_pem = std::fs::read_to_string(key).map_err(|e| pem_err(key, e))?;
        if self.current().pem == (cert_pem.clone(), key_pem.clone()) {
            return Ok(false);
        }
        // The Secret volume swaps both files at once, but two reads can
        // straddle the swap: only a pair read twice alike is used.
        if std::fs::read_to_string(cert).map_err(|e| pem_err(cert, e))? != cert_pem {
            return Ok(false);
        }
        let signer = Arc::new(Signer::from_pem(&cert_pem, &key_pem)?);
        *self.signer.write().unwrap_or_else(|e| e.into_inner()) = signer;
        self.lock().clear();
        Ok(true)
    }

    fn current(&self) -> Arc<Signer> {
        self.signer
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The CA certificate leaves are signed by now (DER).
    pub fn ca_certificate(&self) -> CertificateDer<'static> {
        self.current().ca.clone()
    }

    /// The cached server configuration for `host`, if it is fresh.
    pub fn cached(&self, host: &str) -> Option<Arc<ServerConfig>> {
        self.lock()
            .get(host)
            .filter(|(_, minted)| minted.elapsed() < LEAF_REFRESH)
            .map(|(config, _)| config.clone())
    }

    /// A server configuration presenting a leaf for `host` (ALPN h2 and
    /// http/1.1), from the cache when it is fresh.
    pub fn server_config(&self, host: &str) -> Result<Arc<ServerConfig>, TlsError> {
        let now = Instant::now();
        if let Some(config) = self.cached(host) {
            return Ok(config);
        }
        let config = Arc::new(self.mint(host)?);
        let mut leaves = self.lock();
        if leaves.len() >= LEAF_CACHE_ENTRIES
            && let Some(oldest) = leaves
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(h, _)| h.clone())
        {
            leaves.remove(&oldest);
        }
        leaves.insert(host.to_string(), (config.clone(), now));
        Ok(config)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Arc<ServerConfig>, Instant)>> {
        self.leaves.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn mint(&self, host: &str) -> Result<ServerConfig, TlsError> {
        let fail = |reason: String| TlsError::Mint {
            host: host.to_string(),
            reason,
        };
        let mut params =
            CertificateParams::new(vec![host.to_string()]).map_err(|e| fail(e.to_string()))?;
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, host);
        params.distinguished_name = name;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        // Clocks in a pod can lag the CA's by a little.
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::hours(1);
        params.not_after =
            now + time::Duration::try_from(LEAF_LIFETIME).map_err(|e| fail(e.to_string()))?;
        let key = KeyPair::generate().map_err(|e| fail(e.to_string()))?;
        let signer = self.current();
        let leaf = params
            .signed_by(&key, &signer.issuer)
            .map_err(|e| fail(e.to_string()))?;
        let key_der =
            PrivateKeyDer::try_from(key.serialize_der()).map_err(|e| fail(e.to_string()))?;
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| fail(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone(), signer.ca.clone()], key_der)
            .map_err(|e| fail(e.to_string()))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(config)
    }

    /// Number of cached leaves.
    pub fn leaves(&self) -> usize {
        self.lock().len()
    }
}

impl Signer {
    fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Signer, TlsError> {
        let key = KeyPair::from_pem(key_pem).map_err(|e| pem_err(Path::new("--ca-key"), e))?;
        let ca = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .map_err(|e| pem_err(Path::new("--ca-cert"), e))?;
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key)
            .map_err(|e| pem_err(Path::new("--ca-cert"), e))?;
        Ok(Signer {
            issuer,
            ca,
            pem: (cert_pem.to_string(), key_pem.to_string()),
        })
    }
}

/// Upstream TLS client configurations: Mozilla roots plus extra CAs. The
/// upstream protocol follows the client's: an HTTP/2 client's requests go
/// out offering `h2` (gRPC needs it end to end), an HTTP/1.1 client's offer
/// only `http/1.1` (cheaper per request, and one request per connection is
/// what the client itself chose).
#[derive(Clone)]
pub struct UpstreamTls {
    /// ALPN `h2`, `http/1.1`.
    pub h2: Arc<ClientConfig>,
    /// ALPN `http/1.1`.
    pub http1: Arc<ClientConfig>,
}

/// Builds both upstream configurations.
pub fn upstream_config(extra_roots: &[&Path]) -> Result<UpstreamTls, TlsError> {
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    for path in extra_roots {
        for cert in read_certificates(path)? {
            roots.add(cert).map_err(|e| pem_err(path, e))?;
        }
    }
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| pem_err(Path::new("rustls"), e))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let http1 = Arc::new(config.clone());
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(UpstreamTls {
        h2: Arc::new(config),
        http1,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use rcgen::{BasicConstraints, IsCa};

    pub(crate) fn test_ca() -> (String, String) {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "test sandbox CA");
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn leaves_are_cached_per_host() {
        let (cert, key) = test_ca();
        let i = Interceptor::from_pem(&cert, &key).unwrap();
        let a = i.server_config("a.example.com").unwrap();
        let b = i.server_config("a.example.com").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        i.server_config("b.example.com").unwrap();
        assert_eq!(i.leaves(), 2);
    }

    #[test]
    fn a_rotated_ca_signs_from_the_next_reload_and_junk_keeps_the_old() {
        let dir = std::env::temp_dir().join(format!("agentgate-ca-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert_path, key_path) = (dir.join("tls.crt"), dir.join("tls.key"));
        let (cert, key) = test_ca();
        std::fs::write(&cert_path, &cert).unwrap();
        std::fs::write(&key_path, &key).unwrap();
        let i = Interceptor::from_files(&cert_path, &key_path).unwrap();
        let first = i.ca_certificate();
        i.server_config("a.example.com").unwrap();
        assert!(!i.reload_from_files(&cert_path, &key_path).unwrap());
        assert_eq!(i.leaves(), 1);
        let (next_cert, next_key) = test_ca();
        std::fs::write(&cert_path, &next_cert).unwrap();
        std::fs::write(&key_path, &next_key).unwrap();
        assert!(i.reload_from_files(&cert_path, &key_path).unwrap());
        assert_ne!(i.ca_certificate(), first);
        assert_eq!(i.leaves(), 0);
        std::fs::write(&key_path, "junk").unwrap();
        assert!(i.reload_from_files(&cert_path, &key_path).is_err());
        assert_ne!(i.ca_certificate(), first);
        i.server_config("a.example.com").unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_pem_names_the_flag() {
        let err = Interceptor::from_pem("junk", "junk").err().unwrap();
        assert!(err.to_string().contains("--ca-key"), "{err}");
    }
}
