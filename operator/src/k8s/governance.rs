//! Which MaximumPolicies govern a sandbox (DESIGN.md §3), compiled. Pure:
//! the webhook calls it on its caches, the reconcilers on fresh reads.

use std::collections::BTreeMap;

use kube::{Resource, ResourceExt};

use crate::k8s::crd::MaximumPolicy;
use crate::k8s::selector::governs;
use crate::policy::compile::{Limits, Role};
use crate::policy::load::{CompiledDocument, DocumentKind, LoadedDocument};
use crate::verdict::Mode;

/// A MaximumPolicy that governs a sandbox, compiled.
pub struct Governing {
    /// Its name.
    pub name: String,
    /// The compiled ceiling, invariants and budget.
    pub compiled: CompiledDocument,
    /// Modes it allows.
    pub allowed_modes: Vec<Mode>,
    /// Its `metadata.generation` as read.
    pub generation: i64,
    /// Its `metadata.uid` (a maximum deleted and created again under the
    /// same name is another maximum).
    pub uid: String,
    /// `spec.review.fourEyes`.
    pub four_eyes: bool,
}

impl Governing {
    /// The view of this maximum the verdict takes.
    pub fn as_verdict_input(&self) -> crate::verdict::GoverningMaximum<'_> {
        crate::verdict::GoverningMaximum {
            name: &self.name,
            policy: &self.compiled.policy,
            invariants: &self.compiled.invariants,
            budget: self.compiled.budget,
            four_eyes: self.four_eyes,
        }
    }
}

/// Which maximums a decision was taken under: each governing maximum's
/// name, uid and generation, sorted by name. Two reads with the same
/// fingerprint saw the same ceilings.
pub fn fingerprint(governing: &[Governing]) -> Vec<(String, String, i64)> {
    let mut seen: Vec<(String, String, i64)> = governing
        .iter()
        .map(|g| (g.name.clone(), g.uid.clone(), g.generation))
        .collect();
    seen.sort();
    seen
}

/// Which maximums govern a sandbox, or why nothing may be granted.
pub enum Governance {
    /// These maximums govern the sandbox (sorted by name).
    Governed(Vec<Governing>),
    /// Fail closed: grant nothing, with a condition reason and a message.
    Refused(&'static str, String),
}

/// The maximums among `maximums` that govern a sandbox with these labels in
/// a namespace with these labels, compiled.
pub fn governing_from<'a>(
    maximums: impl IntoIterator<Item = &'a MaximumPolicy>,
    ns_labels: &BTreeMap<String, String>,
    sandbox_labels: &BTreeMap<String, String>,
    allow_unmanaged: bool,
) -> Governance {
    let mut governing = Vec::new();
    for maximum in maximums {
        let name = maximum.name_any();
        match governs(&maximum.spec, ns_labels, sandbox_labels) {
            Ok(false) => continue,
            Ok(true) => {}
            Err(e) => {
                return Governance::Refused(
                    "GovernanceUnknown",
                    format!(
                        "MaximumPolicy {name:?} has a selector that cannot be evaluated ({e}); nothing is granted until it is fixed"
                    ),
                );
            }
        }
        let loaded = LoadedDocument {
            kind: DocumentKind::MaximumPolicy,
            name: Some(name.clone()),
            policy: maximum.spec.policy.clone(),
            invariants: maximum.spec.invariants.clone(),
            budget: maximum.spec.budget,
            policy_field: "spec.policy",
        };
        match loaded.compile(Role::Maximum, &Limits::default()) {
            Ok(compiled) => governing.push(Governing {
                name,
                compiled,
                allowed_modes: maximum.spec.allowed_modes.clone(),
                generation: maximum.meta().generation.unwrap_or_default(),
                uid: maximum.uid().unwrap_or_default(),
                four_eyes: maximum.spec.review.is_some_and(|r| r.four_eyes),
            }),
            Err(reason) => {
                return Governance::Refused(
                    "InvalidMaximum",
                    format!(
                        "governing MaximumPolicy {name:?} is invalid ({reason}); nothing is granted until it is fixed"
                    ),
                );
            }
        }
    }
    if governing.is_empty() && !allow_unmanaged {
        return Governance::Refused(
            "Unmanaged",
            "no MaximumPolicy governs this sandbox; nothing is granted until one selects it".into(),
        );
    }
    governing.sort_by(|a, b| a.name.cmp(&b.name));
    Governance::Governed(governing)
}

/// The labels a governance decision reads: the namespace's and the
/// sandbox's.
pub type Labels<'a> = (&'a BTreeMap<String, String>, &'a BTreeMap<String, String>);

/// The names of the maximums that govern a sandbox under `before` (its
/// namespace's labels, its own labels) but no longer under `after`: a
/// label change that would step out of a ceiling. A selector that cannot
/// be evaluated counts as governing (fail closed).
pub fn dropped_governance<'a>(
    maximums: impl IntoIterator<Item = &'a MaximumPolicy>,
    before: Labels<'_>,
    after: Labels<'_>,
) -> Vec<String> {
    let governs_with =
        |m: &MaximumPolicy, (ns, labels): Labels<'_>| governs(&m.spec, ns, labels).unwrap_or(true);
    maximums
        .into_iter()
        .filter(|m| governs_with(m, before) && !governs_with(m, after))
        .map(|m| m.name_any())
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn removing_the_selected_label_drops_the_maximum() {
        let maximum: MaximumPolicy = serde_json::from_value(serde_json::json!({
            "apiVersion": "agentgate.dev/v1alpha1", "kind": "MaximumPolicy",
            "metadata": {"name": "ceiling"},
            "spec": {"selector": {"sandboxSelector": {"matchLabels": {"tier": "agent"}}}}
        }))
        .unwrap();
        let labelled = BTreeMap::from([("tier".to_string(), "agent".to_string())]);
        let none = BTreeMap::new();
        assert_eq!(
            dropped_governance([&maximum], (&none, &labelled), (&none, &none)),
            ["ceiling"]
        );
        assert!(dropped_governance([&maximum], (&none, &none), (&none, &labelled)).is_empty());
        assert!(dropped_governance([&maximum], (&none, &labelled), (&none, &labelled)).is_empty());
        // The same for a namespace label a namespaceSelector matches.
        let by_namespace: MaximumPolicy = serde_json::from_value(serde_json::json!({
            "apiVersion": "agentgate.dev/v1alpha1", "kind": "MaximumPolicy",
            "metadata": {"name": "team"},
            "spec": {"selector": {"namespaceSelector": {"matchLabels": {"tier": "agent"}}}}
        }))
        .unwrap();
        assert_eq!(
            dropped_governance([&by_namespace], (&labelled, &none), (&none, &none)),
            ["team"]
        );
    }
}
