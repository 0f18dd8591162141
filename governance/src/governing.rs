//! Which MaximumPolicies govern a sandbox (docs/design.md §3), compiled. Pure:
//! the webhook calls it on its caches, the reconcilers on fresh reads.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use kube_core::{Resource, ResourceExt};

use std::str::FromStr;

use crate::convert::ToDomain;
use crate::selector::governs;
use crate::verdict::Mode;
use agentgate_api::crd::{AgentSandbox, MaximumPolicy};
use agentgate_policy::compile::{Limits, Role};
use agentgate_policy::load::{CompiledDocument, DocumentKind, LoadedDocument};

/// A MaximumPolicy that governs a sandbox, compiled.
pub struct Governing {
    /// Its name.
    pub name: String,
    /// The compiled ceiling, invariants and budget (shared with the
    /// [`CompiledMaximums`] cache).
    pub compiled: Arc<CompiledDocument>,
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

/// The outcome of compiling one maximum: the compiled document, or the
/// reason it does not compile.
type Compiled = Result<Arc<CompiledDocument>, String>;

/// How many maximums the cache holds before it starts over: far more than
/// any cluster has, so only a stream of deleted-and-recreated maximums
/// ever clears it.
const CACHED_MAXIMUMS: usize = 4096;

/// Compiled MaximumPolicies by uid, reused while `metadata.generation` is
/// unchanged. The API server bumps the generation on every spec change and
/// a re-created object gets a new uid, so a hit is always the compiled
/// form of exactly the spec read. Objects without a uid or generation
/// (never the case for objects read from the API server) are compiled
/// every time.
#[derive(Default)]
pub struct CompiledMaximums {
    by_uid: RwLock<HashMap<String, (i64, Compiled)>>,
}

impl CompiledMaximums {
    /// The compiled form of `maximum`, from the cache when its uid and
    /// generation were compiled before.
    pub fn compile(&self, maximum: &MaximumPolicy) -> Compiled {
        let meta = maximum.meta();
        let (Some(uid), Some(generation)) = (meta.uid.as_ref(), meta.generation) else {
            return compile_maximum(maximum);
        };
        if let Some((cached_generation, compiled)) = self
            .by_uid
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(uid)
            && *cached_generation == generation
        {
            return compiled.clone();
        }
        let compiled = compile_maximum(maximum);
        let mut cache = self.by_uid.write().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHED_MAXIMUMS {
            cache.clear();
        }
        cache.insert(uid.clone(), (generation, compiled.clone()));
        compiled
    }

    /// How many compiled maximums the cache holds.
    pub fn len(&self) -> usize {
        self.by_uid.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Compiles a maximum's policy, invariants and budget.
fn compile_maximum(maximum: &MaximumPolicy) -> Compiled {
    let loaded = LoadedDocument {
        kind: DocumentKind::MaximumPolicy,
        name: Some(maximum.name_any()),
        policy: maximum.spec.policy.clone(),
        invariants: maximum.spec.invariants.clone(),
        budget: maximum.spec.budget,
        credentials: Vec::new(),
        policy_field: "spec.policy",
    };
    loaded
        .compile(Role::Maximum, &Limits::default())
        .map(Arc::new)
        .map_err(|reason| reason.to_string())
}

/// The maximums among `maximums` that govern a sandbox with these labels in
/// a namespace with these labels, compiled (through `cache`).
pub fn governing_from<'a>(
    maximums: impl IntoIterator<Item = &'a MaximumPolicy>,
    ns_labels: &BTreeMap<String, String>,
    sandbox_labels: &BTreeMap<String, String>,
    allow_unmanaged: bool,
    cache: &CompiledMaximums,
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
        match cache.compile(maximum) {
            Ok(compiled) => governing.push(Governing {
                name,
                compiled,
                allowed_modes: maximum.spec.allowed_modes.to_domain(),
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

/// What in a sandbox's spec refuses it before any proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecProblem {
    /// The field at fault (`spec.agentServiceAccount`, `spec.mode`, ...).
    pub field: String,
    /// One line, starting with the field, without the sandbox's name.
    pub message: String,
}

/// Whether `name` can name a ServiceAccount (a DNS subdomain: lowercase
/// letters, digits, `-` and `.`, alphanumeric at both ends, at most 253).
pub fn is_service_account_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// What refuses a sandbox before any proof: an agent ServiceAccount that is
/// not a name, an acceptance that can never lapse, or a mode a governing
/// maximum does not allow. The webhook refuses such a sandbox;
/// `agentgate verify` reports it at the field.
pub fn sandbox_refusal(sandbox: &AgentSandbox, governing: &[Governing]) -> Option<SpecProblem> {
    let account = &sandbox.spec.agent_service_account;
    if !is_service_account_name(account) {
        // An empty or malformed name would make the pod run as `default`
        // and no identity count as the agent's.
        let field = "spec.agentServiceAccount".to_string();
        return Some(SpecProblem {
            message: format!(
                "{field} {account:?} is not a ServiceAccount name (lowercase letters, digits, '-' and '.')"
            ),
            field,
        });
    }
    for (i, accepted) in sandbox.spec.accepted_findings.iter().enumerate() {
        // An acceptance that could never lapse (or never apply) is refused
        // rather than silently ignored later.
        if k8s_openapi::jiff::Timestamp::from_str(&accepted.expires).is_err() {
            let field = format!("spec.acceptedFindings[{i}].expires");
            return Some(SpecProblem {
                message: format!(
                    "{field} {:?} is not an RFC 3339 time such as 2027-01-31T00:00:00Z",
                    accepted.expires
                ),
                field,
            });
        }
    }
    let mode = sandbox.spec.mode.to_domain().unwrap_or(Mode::Ask);
    for g in governing {
        if !g.allowed_modes.is_empty() && !g.allowed_modes.contains(&mode) {
            let allowed: Vec<String> = g
                .allowed_modes
                .iter()
                .map(|m| format!("{m:?}").to_lowercase())
                .collect();
            return Some(SpecProblem {
                field: "spec.mode".into(),
                message: format!(
                    "mode {:?} is not allowed by MaximumPolicy {:?} (allowedModes: {})",
                    format!("{mode:?}").to_lowercase(),
                    g.name,
                    allowed.join(", ")
                ),
            });
        }
    }
    None
}

/// Steps 1-3 of the verdict (containment in every governing maximum, then
/// their invariants) for a sandbox's declared policy, `compiled`: the
/// declared policy is both current and candidate, adding nothing, so
/// `reach_verdict` stops before the approval steps. Blocking (runs the prover);
/// admission and `agentgate verify` share it.
pub fn prove_declared(
    sandbox: &AgentSandbox,
    compiled: &agentgate_policy::compile::CompiledPolicy,
    governing: &[Governing],
    allow_unmanaged: bool,
    prover: &agentgate_prover::Prover,
) -> crate::verdict::Verdict {
    let maximums: Vec<crate::verdict::GoverningMaximum<'_>> =
        governing.iter().map(Governing::as_verdict_input).collect();
    crate::verdict::reach_verdict(
        &crate::verdict::VerdictInput {
            maximums: &maximums,
            current: (&sandbox.spec.policy, compiled),
            candidate: (&sandbox.spec.policy, compiled),
            added: &agentgate_policy::compile::CompiledPolicy::default(),
            requester: crate::verdict::Requester::Agent,
            mode: sandbox.spec.mode.to_domain().unwrap_or(Mode::Ask),
            allow_unmanaged,
        },
        prover,
    )
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

    #[test]
    fn compiled_maximums_are_reused_per_uid_and_generation() {
        let at = |uid: Option<&str>, generation: i64, port: u16| -> MaximumPolicy {
            let mut m: MaximumPolicy = serde_json::from_value(serde_json::json!({
                "apiVersion": "agentgate.dev/v1alpha1", "kind": "MaximumPolicy",
                "metadata": {"name": "ceiling", "generation": generation},
                "spec": {"policy": {"network": [{"name": "web", "endpoints": [{"host": "**", "ports": [port]}]}]}}
            }))
            .unwrap();
            m.metadata.uid = uid.map(str::to_string);
            m
        };
        let cache = CompiledMaximums::default();
        let first = cache.compile(&at(Some("u1"), 1, 443)).unwrap();
        let again = cache.compile(&at(Some("u1"), 1, 443)).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        // A new generation (a spec change) is compiled afresh, as is a
        // re-created object (a new uid).
        let tightened = cache.compile(&at(Some("u1"), 2, 80)).unwrap();
        assert!(!Arc::ptr_eq(&first, &tightened));
        assert_ne!(first.policy, tightened.policy);
        let recreated = cache.compile(&at(Some("u2"), 2, 80)).unwrap();
        assert!(!Arc::ptr_eq(&tightened, &recreated));
        assert_eq!(cache.len(), 2);
        // Without a uid nothing is cached.
        cache.compile(&at(None, 1, 443)).unwrap();
        assert_eq!(cache.len(), 2);
        // A maximum that does not compile keeps its reason.
        let mut broken = at(Some("u3"), 1, 443);
        broken.spec.policy.filesystem.read_only = vec!["relative".into()];
        assert!(cache.compile(&broken).is_err());
        assert!(cache.compile(&broken).is_err());
    }
}
