//! The CA bundle the agent's TLS clients trust (docs/sandbox.md): the
//! sandbox's CAs, which sign the proxy's interception leaves and which the
//! operator publishes in the policy ConfigMap (`sandbox-ca.pem`), then the
//! Mozilla roots this binary carries, for the servers an `l4` grant tunnels
//! to. The proxy writes it into the pod's trust volume and rewrites it when
//! the CAs rotate, so the ConfigMap, and etcd, hold a few KB per sandbox
//! rather than the roots.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Why the bundle could not be written.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// The CAs file could not be read.
    #[error("reading the sandbox CAs {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It holds no PEM certificate, or PEM that does not parse.
    #[error("the sandbox CAs {path} hold no usable certificate: {why}")]
    NoCertificate {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// The bundle could not be written.
    #[error("writing the CA bundle {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The Mozilla roots (webpki-root-certs) as PEM, built once.
pub fn mozilla_roots_pem() -> &'static str {
    static ROOTS: OnceLock<String> = OnceLock::new();
    ROOTS.get_or_init(|| {
        webpki_root_certs::TLS_SERVER_ROOT_CERTS
            .iter()
            .map(|der| pem::encode(&pem::Pem::new("CERTIFICATE", der.as_ref().to_vec())))
            .collect()
    })
}

/// The bundle for the CAs' PEM text: each certificate once, re-encoded (so
/// nothing but certificates passes), then the Mozilla roots.
pub fn bundle(cas: &[u8], path: &Path) -> Result<String, TrustError> {
    let no_certificate = |why: String| TrustError::NoCertificate {
        path: path.to_path_buf(),
        why,
    };
    let blocks = pem::parse_many(cas).map_err(|e| no_certificate(e.to_string()))?;
    let mut text = String::new();
    for block in blocks.iter().filter(|b| b.tag() == "CERTIFICATE") {
        text.push_str(&pem::encode(block));
    }
    if text.is_empty() {
        return Err(no_certificate("no CERTIFICATE block".into()));
    }
    text.push_str(mozilla_roots_pem());
    Ok(text)
}

/// Writes the bundle for the CAs in `cas` to `out` when it differs from
/// what `out` holds, through a temporary file and a rename, so a client
/// never reads half a bundle. Returns whether it wrote.
pub fn write_bundle(cas: &Path, out: &Path) -> Result<bool, TrustError> {
    let text = std::fs::read(cas).map_err(|source| TrustError::Read {
        path: cas.to_path_buf(),
        source,
    })?;
    let bundle = bundle(&text, cas)?;
    if std::fs::read(out).is_ok_and(|current| current == bundle.as_bytes()) {
        return Ok(false);
    }
    let write = |source| TrustError::Write {
        path: out.to_path_buf(),
        source,
    };
    let temporary = out.with_extension("partial");
    std::fs::write(&temporary, &bundle).map_err(write)?;
    std::fs::rename(&temporary, out).map_err(write)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certificate(n: u8) -> String {
        pem::encode(&pem::Pem::new("CERTIFICATE", vec![n; 8]))
    }

    #[test]
    fn the_bundle_is_the_cas_then_the_roots_and_nothing_else() {
        let key = pem::encode(&pem::Pem::new("PRIVATE KEY", vec![9; 8]));
        let cas = format!("{}junk between\n{key}{}", certificate(1), certificate(2));
        let text = bundle(cas.as_bytes(), Path::new("cas.pem")).unwrap();
        assert!(text.starts_with(&format!("{}{}", certificate(1), certificate(2))));
        assert!(!text.contains("PRIVATE KEY"), "a key never passes");
        assert!(text.ends_with(mozilla_roots_pem()));
        assert!(mozilla_roots_pem().matches("BEGIN CERTIFICATE").count() > 100);
    }

    #[test]
    fn no_certificate_is_an_error_not_a_roots_only_bundle() {
        for cas in [
            "",
            "not pem",
            &pem::encode(&pem::Pem::new("PRIVATE KEY", vec![1])),
        ] {
            let err = bundle(cas.as_bytes(), Path::new("/p/cas.pem")).unwrap_err();
            assert!(err.to_string().contains("/p/cas.pem"), "{err}");
        }
    }

    #[test]
    fn the_bundle_is_rewritten_only_when_the_cas_change() {
        let dir = std::env::temp_dir().join(format!("agentgate-trust-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cas, out) = (dir.join("sandbox-ca.pem"), dir.join("ca-bundle.pem"));
        std::fs::write(&cas, certificate(1)).unwrap();
        assert!(write_bundle(&cas, &out).unwrap());
        assert!(!write_bundle(&cas, &out).unwrap(), "unchanged: not written");
        std::fs::write(&cas, format!("{}{}", certificate(1), certificate(3))).unwrap();
        assert!(write_bundle(&cas, &out).unwrap());
        assert!(
            std::fs::read_to_string(&out)
                .unwrap()
                .contains(&certificate(3))
        );
        // A broken CAs file keeps the last good bundle.
        std::fs::write(&cas, "broken").unwrap();
        assert!(write_bundle(&cas, &out).is_err());
        assert!(
            std::fs::read_to_string(&out)
                .unwrap()
                .contains(&certificate(3))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
