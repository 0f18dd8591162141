//! Re-verification of committed policies (docs/design.md §5) with
//! content-addressed results: a tightened ceiling re-proves each distinct
//! effective policy once, however many sandboxes share it.
//!
//! The prover already caches each containment check by content, but a
//! revocation also compiles the policy once per round and asks several
//! checks; and a storm interleaves sandboxes, so a fleet with more
//! distinct checks than the prover's cache holds would miss on every one.
//! One entry here stands for a whole revocation.

use crate::verdict::{GoverningMaximum, Revocation, revoke_until_within};
use agentgate_policy::model::PolicyDocument;
use agentgate_prover::Prover;
use agentgate_prover::cache::{Cache, ContentHasher};

use crate::governing::{Governing, fingerprint};

/// Revocations kept by default: one per distinct (effective policy,
/// governing maximums) pair. A revocation holds the kept policy, a few KB
/// for a 20-rule policy, so the default bounds the cache near 10 MB.
pub const DEFAULT_REVOCATIONS: usize = 2048;

/// Revocations by content: the effective policy's JSON text and the name,
/// uid and generation of every governing maximum (a maximum's uid and
/// generation name exactly one spec, as [`crate::governing::CompiledMaximums`]
/// relies on too).
pub struct Revocations {
    cache: Cache<Revocation>,
}

impl Default for Revocations {
    fn default() -> Self {
        Revocations::new(DEFAULT_REVOCATIONS)
    }
}

/// Whether [`Revocations::revoke`] proved anew or reused a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proved {
    /// Proved now (and kept for the next sandbox with the same content).
    Now,
    /// The result proved for another sandbox with the same content.
    Shared,
}

impl Revocations {
    /// A cache of at most `capacity` revocations (0 keeps none).
    pub fn new(capacity: usize) -> Self {
        Revocations {
            cache: Cache::new(capacity),
        }
    }

    /// [`revoke_until_within`] of `policy` under `governing`, reusing the
    /// result for the same content. A revocation that took out the whole
    /// policy is never kept: it may stand for a proof cut short by the
    /// deadline, which the next try may complete.
    pub fn revoke(
        &self,
        policy: &PolicyDocument,
        governing: &[Governing],
        prover: &Prover,
    ) -> (Revocation, Proved) {
        let key = self.cache.enabled().then(|| key(policy, governing));
        if let Some(found) = key.as_ref().and_then(|key| self.cache.get(key)) {
            return (found, Proved::Shared);
        }
        let maximums: Vec<GoverningMaximum<'_>> =
            governing.iter().map(Governing::as_verdict_input).collect();
        let revocation = revoke_until_within(policy, &maximums, prover);
        let whole = revocation
            .revoked
            .iter()
            .any(|(grant, _)| grant == WHOLE_POLICY);
        if let Some(key) = key
            && !whole
        {
            self.cache.put(key, revocation.clone());
        }
        (revocation, Proved::Now)
    }

    /// Revocations kept.
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// True when none is kept.
    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }
}

/// How [`revoke_until_within`] names the grant when it revokes everything.
const WHOLE_POLICY: &str = "the whole policy";

fn key(policy: &PolicyDocument, governing: &[Governing]) -> agentgate_prover::cache::Key {
    // serde_json writes struct fields in declaration order, so equal
    // documents give equal text.
    let text = serde_json::to_string(policy).unwrap_or_default();
    ContentHasher::new("revocation")
        .with(&text)
        .with(&fingerprint(governing))
        .key()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::governing::{CompiledMaximums, Governance, governing_from};
    use agentgate_api::crd::MaximumPolicy;
    use std::collections::BTreeMap;

    fn maximum(ports: &str, generation: i64) -> MaximumPolicy {
        let yaml = format!(
            "apiVersion: agentgate.dev/v1alpha1
kind: MaximumPolicy
metadata: {{name: org, uid: u-org, generation: {generation}}}
spec:
  selector: {{namespaceSelector: {{matchLabels: {{tier: agents}}}}}}
  policy:
    network:
      - name: web
        endpoints: [{{host: \"**.example.com\", ports: {ports}}}]
"
        );
        match serde_saphyr::from_str(&yaml) {
            Ok(m) => m,
            Err(e) => panic!("test maximum: {e}"),
        }
    }

    fn policy(port: u16) -> PolicyDocument {
        match serde_json::from_value(serde_json::json!({"network": [
            {"name": "api", "endpoints": [{"host": "api.example.com", "port": 443}]},
            {"name": "hooks", "endpoints": [{"host": "hooks.example.com", "port": port}]},
        ]})) {
            Ok(p) => p,
            Err(e) => panic!("test policy: {e}"),
        }
    }

    fn governing(maximum: &MaximumPolicy, cache: &CompiledMaximums) -> Vec<Governing> {
        let ns = BTreeMap::from([("tier".to_string(), "agents".to_string())]);
        match governing_from([maximum], &ns, &BTreeMap::new(), false, cache) {
            Governance::Governed(g) => g,
            Governance::Refused(reason, message) => panic!("{reason}: {message}"),
        }
    }

    #[test]
    fn one_proof_serves_every_sandbox_with_the_same_policy_and_maximums() {
        let compiled = CompiledMaximums::default();
        let prover = Prover::default();
        let revocations = Revocations::default();
        let tight = governing(&maximum("[443]", 2), &compiled);
        let (first, proved) = revocations.revoke(&policy(8443), &tight, &prover);
        assert_eq!(proved, Proved::Now);
        assert_eq!(first.revoked.len(), 1, "{:?}", first.revoked);
        assert!(first.revoked[0].0.contains("hooks"), "{:?}", first.revoked);
        let (again, proved) = revocations.revoke(&policy(8443), &tight, &prover);
        assert_eq!(proved, Proved::Shared);
        assert_eq!(again, first);
        // Another policy, or the maximum at another generation: proved anew.
        assert_eq!(
            revocations.revoke(&policy(443), &tight, &prover).1,
            Proved::Now
        );
        let wide = governing(&maximum("[443, 8443]", 3), &compiled);
        let (kept_all, proved) = revocations.revoke(&policy(8443), &wide, &prover);
        assert_eq!(proved, Proved::Now);
        assert!(kept_all.revoked.is_empty(), "{:?}", kept_all.revoked);
        assert_eq!(revocations.len(), 3);
    }
}
