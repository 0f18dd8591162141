//! Certificate material, pure: self-signed CAs, leaves signed by them, and
//! their validity windows. The webhook's serving certificates and each
//! sandbox's interception CA are made here.

use std::fmt;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use time::OffsetDateTime;

/// Why certificate material could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// Generating or signing failed.
    #[error("generating a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// PEM or DER could not be read.
    #[error("reading {what}: {message}")]
    Parse {
        /// Which item.
        what: &'static str,
        /// What is wrong.
        message: String,
    },
}

fn parse_error(what: &'static str, e: impl fmt::Display) -> PkiError {
    PkiError::Parse {
        what,
        message: e.to_string(),
    }
}

/// A CA or leaf: certificate and key in PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyedCert {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// Its private key, PEM (PKCS#8).
    pub key_pem: String,
}

impl fmt::Debug for KeyedCert {
    // Never print a private key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedCert").finish_non_exhaustive()
    }
}

/// Allowance for clocks that are a little behind ours.
const BACKDATE: time::Duration = time::Duration::minutes(5);

fn offset(d: Duration) -> time::Duration {
    time::Duration::try_from(d).unwrap_or(time::Duration::MAX)
}

/// Generates a self-signed CA (ECDSA P-256) named `common_name`, valid
/// for `lifetime`, that signs leaves only (path length 0).
pub fn generate_ca(common_name: &str, lifetime: Duration) -> Result<KeyedCert, PkiError> {
    generate_ca_at(common_name, OffsetDateTime::now_utc(), lifetime)
}

/// [`generate_ca`] as of `now` (valid from a little before `now`).
pub fn generate_ca_at(
    common_name: &str,
    now: OffsetDateTime,
    lifetime: Duration,
) -> Result<KeyedCert, PkiError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn.push(DnType::OrganizationName, "agentgate");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = now - BACKDATE;
    params.not_after = now + offset(lifetime);
    let cert = params.self_signed(&key)?;
    Ok(KeyedCert {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// Issues a serving certificate for `names` (DNS names or IP addresses),
/// signed by `ca`, valid for `lifetime` (never beyond the CA).
pub fn issue_leaf(
    ca: &KeyedCert,
    names: &[String],
    lifetime: Duration,
) -> Result<KeyedCert, PkiError> {
    let ca_key = KeyPair::from_pem(&ca.key_pem)?;
    let ca_not_after = not_after(&ca.cert_pem)?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(names.to_vec())?;
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        names.first().map(String::as_str).unwrap_or("agentgate"),
    );
    params.distinguished_name = dn;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let now = OffsetDateTime::now_utc();
    params.not_before = now - BACKDATE;
    params.not_after = (now + offset(lifetime)).min(ca_not_after);
    let cert = params.signed_by(&key, &issuer)?;
    Ok(KeyedCert {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

fn first_der(cert_pem: &str) -> Result<CertificateDer<'static>, PkiError> {
    CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .next()
        .ok_or_else(|| parse_error("certificate", "no PEM certificate"))?
        .map_err(|e| parse_error("certificate", e))
}

/// When the first certificate of `cert_pem` stops being valid.
pub fn not_after(cert_pem: &str) -> Result<OffsetDateTime, PkiError> {
    window(cert_pem).map(|(_, end)| end)
}

/// The validity window of the first certificate of `cert_pem`.
pub fn window(cert_pem: &str) -> Result<(OffsetDateTime, OffsetDateTime), PkiError> {
    let der = first_der(cert_pem)?;
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref())
        .map_err(|e| parse_error("certificate", e))?;
    let validity = cert.validity();
    Ok((
        validity.not_before.to_datetime(),
        validity.not_after.to_datetime(),
    ))
}

/// The subject alternative names (DNS and IP, as text) of a certificate.
pub fn subject_alt_names(cert_pem: &str) -> Result<Vec<String>, PkiError> {
    use x509_parser::extensions::GeneralName;
    let der = first_der(cert_pem)?;
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref())
        .map_err(|e| parse_error("certificate", e))?;
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(d) => names.push((*d).to_string()),
                GeneralName::IPAddress(bytes) => match bytes.len() {
                    4 => {
                        let b: [u8; 4] = [bytes[0], bytes[1], bytes[2], bytes[3]];
                        names.push(std::net::Ipv4Addr::from(b).to_string());
                    }
                    16 => {
                        let mut b = [0u8; 16];
                        b.copy_from_slice(bytes);
                        names.push(std::net::Ipv6Addr::from(b).to_string());
                    }
                    _ => {}
                },
                _ => {}
            }
        }
    }
    Ok(names)
}

/// When a certificate valid over `[start, end]` should be replaced: after
/// two thirds of its lifetime.
pub fn renewal_time(start: OffsetDateTime, end: OffsetDateTime) -> OffsetDateTime {
    start + (end - start) * 2 / 3
}

/// Every certificate of a PEM text, each as its own PEM block.
pub fn split_certificates(pem: &str) -> Result<Vec<CertificateDer<'static>>, PkiError> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| parse_error("certificates", e))
}

/// Whether `key_pem` is the private key of the first certificate of
/// `cert_pem` (their public keys are the same).
pub fn key_matches(cert_pem: &str, key_pem: &str) -> bool {
    use rcgen::PublicKeyData;
    let Ok(key) = KeyPair::from_pem(key_pem) else {
        return false;
    };
    let Ok(der) = first_der(cert_pem) else {
        return false;
    };
    x509_parser::parse_x509_certificate(der.as_ref())
        .is_ok_and(|(_, cert)| cert.public_key().raw == key.subject_public_key_info().as_slice())
}
