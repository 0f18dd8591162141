//! The sandbox CA (docs/design.md §10): an ECDSA key and certificate per
//! sandbox, minted by the operator into the Secret `<sandbox>-ca` (owned by
//! the sandbox, mounted only by the proxy), which signs the leaves the proxy
//! presents when it terminates the agent's TLS.
//!
//! Rotation without restarting the agent: with a third of the CA's
//! lifetime left, the next CA is minted and published in `sandbox-ca.pem`
//! (which the proxy turns into the agent's `ca-bundle.pem` with the
//! Mozilla roots, docs/sandbox.md) beside the current one; with a sixth left, the proxy switches to it
//! (it re-reads the Secret) and the old CA stays in the bundle until it
//! expires. An agent that re-reads its CA bundle never notices; one that
//! read it once at start has trusted the next CA for at least a sixth of
//! the lifetime before the switch.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Resource, ResourceExt};
use time::OffsetDateTime;

use crate::ControllerError;
use agentgate_api::crd::AgentSandbox;
use agentgate_api::crd::SANDBOX_LABEL;
use agentgate_governance::sandbox_pod::ca_secret_name;
use agentgate_k8s::pki::{
    KeyedCert, PkiError, generate_ca_at, key_matches, split_certificates, window,
};

/// With this little left the next CA signs however briefly it was
/// published: an expired CA would break every connection.
const LAST_RESORT: time::Duration = time::Duration::days(2);

/// How long a sandbox CA is valid (`--sandbox-ca-validity-seconds`).
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// The signing CA (`kubernetes.io/tls` layout, what the proxy mounts).
pub const TLS_CRT: &str = "tls.crt";
/// Its key.
pub const TLS_KEY: &str = "tls.key";
/// The CA that takes over at the switch, already trusted by the bundle.
pub const NEXT_CRT: &str = "next.crt";
/// Its key.
pub const NEXT_KEY: &str = "next.key";
/// The CA replaced at the last switch, trusted until it expires.
pub const PREVIOUS_CRT: &str = "previous.crt";

/// The CA material of one sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxCa {
    /// Signs the proxy's leaves now.
    pub current: KeyedCert,
    /// Minted ahead of the switch.
    pub next: Option<KeyedCert>,
    /// The certificate of the CA replaced last, while it is valid.
    pub previous: Option<String>,
}

impl SandboxCa {
    /// Reads the Secret's data; `None` when the current CA is missing or
    /// unreadable (then a new one is minted: the proxy cannot sign without it).
    pub fn from_data(data: &BTreeMap<String, ByteString>) -> Option<SandboxCa> {
        let text = |key: &str| {
            data.get(key)
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
        };
        let keyed = |cert: &str, key: &str| {
            let cert_pem = text(cert)?;
            let key_pem = text(key)?;
            window(&cert_pem).ok()?;
            // A key that does not sign for this certificate would make
            // every leaf the proxy mints untrusted.
            key_matches(&cert_pem, &key_pem).then_some(KeyedCert { cert_pem, key_pem })
        };
        Some(SandboxCa {
            current: keyed(TLS_CRT, TLS_KEY)?,
            next: keyed(NEXT_CRT, NEXT_KEY),
            previous: text(PREVIOUS_CRT).filter(|p| window(p).is_ok()),
        })
    }

    /// The Secret's data.
    pub fn to_data(&self) -> BTreeMap<String, ByteString> {
        let mut data = BTreeMap::new();
        let mut put = |key: &str, value: &str| {
            data.insert(key.to_string(), ByteString(value.as_bytes().to_vec()));
        };
        put(TLS_CRT, &self.current.cert_pem);
        put(TLS_KEY, &self.current.key_pem);
        if let Some(next) = &self.next {
            put(NEXT_CRT, &next.cert_pem);
            put(NEXT_KEY, &next.key_pem);
        }
        if let Some(previous) = &self.previous {
            put(PREVIOUS_CRT, previous);
        }
        data
    }

    /// The sandbox CAs an agent must trust: current, next and previous,
    /// those not expired at `now`.
    pub fn trusted(&self, now: OffsetDateTime) -> Vec<String> {
        [
            Some(self.current.cert_pem.clone()),
            self.next.as_ref().map(|n| n.cert_pem.clone()),
            self.previous.clone(),
        ]
        .into_iter()
        .flatten()
        .filter(|pem| window(pem).is_ok_and(|(_, end)| end > now))
        .collect()
    }
}

fn remaining(cert_pem: &str, now: OffsetDateTime) -> time::Duration {
    window(cert_pem).map_or(time::Duration::ZERO, |(_, end)| end - now)
}

/// The CA material after `now`'s rotation step, and whether it changed.
pub fn rotate(
    sandbox: &str,
    existing: Option<SandboxCa>,
    lifetime: Duration,
    now: OffsetDateTime,
) -> Result<(SandboxCa, bool), PkiError> {
    let name = format!("agentgate sandbox CA {sandbox}");
    let Some(mut ca) = existing else {
        let current = generate_ca_at(&name, now, lifetime)?;
        return Ok((
            SandboxCa {
                current,
                next: None,
                previous: None,
            },
            true,
        ));
    };
    let before = ca.clone();
    let whole = time::Duration::try_from(lifetime).unwrap_or(time::Duration::MAX);
    let left = remaining(&ca.current.cert_pem, now);
    if left < whole / 3 && ca.next.is_none() {
        ca.next = Some(generate_ca_at(&name, now, lifetime)?);
    }
    // The next CA signs only once agents have trusted it for a sixth of the
    // lifetime (it was published a third before expiry), unless the
    // current one is about to run out (the operator was down meanwhile).
    let published_for = ca
        .next
        .as_ref()
        .and_then(|n| window(&n.cert_pem).ok())
        .map(|(start, _)| now - start);
    let due = published_for
        .is_some_and(|age| (left < whole / 6 && age >= whole / 6) || left < LAST_RESORT);
    if due && let Some(next) = ca.next.take() {
        ca.previous = Some(std::mem::replace(&mut ca.current, next).cert_pem);
    }
    if ca
        .previous
        .as_ref()
        .is_some_and(|p| remaining(p, now) <= time::Duration::ZERO)
    {
        ca.previous = None;
    }
    let changed = ca != before;
    Ok((ca, changed))
}

/// How long from `now` until [`rotate`] would change `ca` (publish the next
/// CA, start signing with it, drop an expired previous one) or a CA in its
/// bundle expires: when the sandbox must be reconciled again even if
/// nothing it watches changes. `None` when no step is ahead.
pub fn next_step(ca: &SandboxCa, lifetime: Duration, now: OffsetDateTime) -> Option<Duration> {
    let whole = time::Duration::try_from(lifetime).unwrap_or(time::Duration::MAX);
    let left = remaining(&ca.current.cert_pem, now);
    let mut steps: Vec<time::Duration> = vec![left];
    match ca.next.as_ref().and_then(|n| window(&n.cert_pem).ok()) {
        None => steps.push(left - whole / 3),
        Some((start, end)) => {
            let age = now - start;
            let switch: time::Duration = left - whole / 6;
            steps.push(switch.max(whole / 6 - age));
            steps.push(left - LAST_RESORT);
            steps.push(end - now);
        }
    }
    if let Some(previous) = &ca.previous {
        steps.push(remaining(previous, now));
    }
    steps
        .into_iter()
        .filter(|step| step.is_positive())
        .min()
        .and_then(|step| Duration::try_from(step).ok())
        // A second late, so the step is due when the reconcile runs.
        .map(|step| step + Duration::from_secs(1))
}

/// `sandbox-ca.pem`: the certificates of the sandbox's CAs the agent must
/// trust now, nothing else. The proxy adds the Mozilla roots its image
/// carries, so the ConfigMap (and etcd) holds a few KB per sandbox.
pub fn sandbox_cas_pem(ca: &SandboxCa, now: OffsetDateTime) -> String {
    let mut bundle = String::new();
    for pem in ca.trusted(now) {
        // One block per certificate, whatever the stored text looked like.
        if let Ok(certs) = split_certificates(&pem) {
            for der in certs {
                bundle.push_str(&pem::encode(&pem::Pem::new(
                    "CERTIFICATE",
                    der.as_ref().to_vec(),
                )));
            }
        }
    }
    bundle
}

/// Reads, rotates and writes the Secret `<sandbox>-ca`; returns the CA
/// material as stored. A Secret of that name the sandbox does not own is
/// never read or overwritten (its key could be someone else's).
pub async fn ensure(
    sandbox: &AgentSandbox,
    owner: serde_json::Value,
    lifetime: Duration,
    secrets: &Api<Secret>,
) -> Result<SandboxCa, ControllerError> {
    let name = ca_secret_name(&sandbox.name_any());
    let existing = secrets.get_opt(&name).await?;
    if let Some(secret) = &existing {
        let owned = secret
            .owner_references()
            .iter()
            .any(|o| Some(&o.uid) == sandbox.meta().uid.as_ref() && o.controller == Some(true));
        if !owned {
            return Err(ControllerError::Conflict(format!(
                "Secret {name:?} exists but is not owned by this sandbox; delete it so the sandbox CA can be created"
            )));
        }
    }
    let stored = existing
        .as_ref()
        .and_then(|s| s.data.as_ref())
        .and_then(SandboxCa::from_data);
    let (ca, changed) = rotate(
        &sandbox.name_any(),
        stored,
        lifetime,
        OffsetDateTime::now_utc(),
    )?;
    if !changed {
        return Ok(ca);
    }
    let owner = serde_json::from_value(owner)?;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(BTreeMap::from([(
                SANDBOX_LABEL.to_string(),
                sandbox.name_any(),
            )])),
            owner_references: Some(vec![owner]),
            resource_version: existing.as_ref().and_then(|s| s.resource_version()),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(ca.to_data()),
        ..Secret::default()
    };
    // The resourceVersion is the precondition: two writers never both mint.
    let params = PostParams {
        field_manager: Some(agentgate_k8s::FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    match existing {
        Some(_) => secrets.replace(&name, &params, &secret).await?,
        None => secrets.create(&params, &secret).await?,
    };
    tracing::info!(sandbox = %sandbox.name_any(), secret = %name, "sandbox CA written");
    Ok(ca)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    #[test]
    fn the_next_ca_is_trusted_long_before_it_signs() {
        let lifetime = DAY * 90;
        let start = OffsetDateTime::now_utc();
        let (ca, changed) = rotate("bot", None, lifetime, start).unwrap();
        assert!(changed && ca.next.is_none());
        // Round trip through the Secret's data.
        assert_eq!(SandboxCa::from_data(&ca.to_data()), Some(ca.clone()));
        // Two thirds in: nothing yet.
        let (same, changed) = rotate(
            "bot",
            Some(ca.clone()),
            lifetime,
            start + time::Duration::days(59),
        )
        .unwrap();
        assert!(!changed && same == ca);
        // A third left: the next CA is minted and trusted, the current still signs.
        let at = start + time::Duration::days(61);
        let (staged, changed) = rotate("bot", Some(ca.clone()), lifetime, at).unwrap();
        assert!(changed && staged.current == ca.current && staged.next.is_some());
        assert_eq!(staged.trusted(at).len(), 2);
        let published = sandbox_cas_pem(&staged, at);
        assert!(published.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(published.matches("BEGIN CERTIFICATE").count(), 2);
        assert!(
            published.len() < 2_000,
            "no roots: {} bytes",
            published.len()
        );
        // A sixth left: the next CA signs, the old one stays trusted.
        let at = start + time::Duration::days(76);
        let (switched, changed) = rotate("bot", Some(staged.clone()), lifetime, at).unwrap();
        assert!(changed);
        assert_eq!(Some(&switched.current), staged.next.as_ref());
        assert_eq!(switched.previous.as_ref(), Some(&ca.current.cert_pem));
        assert_eq!(switched.trusted(at).len(), 2);
        // Once the old CA expired it leaves the bundle.
        let at = start + time::Duration::days(91);
        assert_eq!(switched.trusted(at).len(), 1);
        let (pruned, _) = rotate("bot", Some(switched.clone()), lifetime, at).unwrap();
        assert_eq!(pruned.previous, None);
    }

    #[test]
    fn the_next_step_is_exactly_when_rotation_changes_something() {
        let lifetime = DAY * 90;
        let mut at = OffsetDateTime::now_utc();
        let (mut ca, _) = rotate("bot", None, lifetime, at).unwrap();
        let mut steps = 0;
        while let Some(step) = next_step(&ca, lifetime, at) {
            let step = time::Duration::try_from(step).unwrap();
            let early = at + step - time::Duration::seconds(3);
            let (unchanged, changed) = rotate("bot", Some(ca.clone()), lifetime, early).unwrap();
            assert!(!changed && unchanged == ca, "step {steps}: changed early");
            at += step;
            let (next, changed) = rotate("bot", Some(ca.clone()), lifetime, at).unwrap();
            assert!(
                changed || next.trusted(at) != ca.trusted(early),
                "step {steps}: nothing due at the step"
            );
            ca = next;
            steps += 1;
            if steps == 4 {
                break;
            }
        }
        // Publish, switch, drop the expired previous CA, publish again.
        assert_eq!(steps, 4);
    }

    #[test]
    fn a_late_operator_publishes_first_and_switches_later() {
        let lifetime = DAY * 90;
        let start = OffsetDateTime::now_utc();
        let (ca, _) = rotate("bot", None, lifetime, start).unwrap();
        // Ten days left and no next CA yet: minted and published, not used.
        let at = start + time::Duration::days(80);
        let (staged, _) = rotate("bot", Some(ca.clone()), lifetime, at).unwrap();
        assert_eq!(staged.current, ca.current);
        assert!(staged.next.is_some());
        let (same, changed) = rotate(
            "bot",
            Some(staged.clone()),
            lifetime,
            at + time::Duration::days(5),
        )
        .unwrap();
        assert!(!changed && same == staged);
        // Two days before expiry it switches regardless.
        let (switched, _) = rotate(
            "bot",
            Some(staged.clone()),
            lifetime,
            start + time::Duration::days(88) + time::Duration::hours(1),
        )
        .unwrap();
        assert_eq!(Some(&switched.current), staged.next.as_ref());
    }

    #[test]
    fn unreadable_material_is_replaced() {
        let mut data = BTreeMap::new();
        data.insert(TLS_CRT.to_string(), ByteString(b"junk".to_vec()));
        data.insert(TLS_KEY.to_string(), ByteString(b"junk".to_vec()));
        assert_eq!(SandboxCa::from_data(&data), None);
        // A valid certificate with another CA's key is no CA either.
        let (a, _) = rotate("bot", None, DAY * 30, OffsetDateTime::now_utc()).unwrap();
        let (b, _) = rotate("bot", None, DAY * 30, OffsetDateTime::now_utc()).unwrap();
        let mut mixed = a.to_data();
        mixed.insert(
            TLS_KEY.to_string(),
            ByteString(b.current.key_pem.into_bytes()),
        );
        assert_eq!(SandboxCa::from_data(&mixed), None);
        assert!(SandboxCa::from_data(&a.to_data()).is_some());
    }
}
