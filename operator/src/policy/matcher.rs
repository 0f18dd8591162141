//! The runtime matcher: evaluates concrete actions against a compiled policy
//! exactly as POLICY-SEMANTICS.md §4 says. No solver; this is what the
//! enforcement side runs, and what every prover counterexample is replayed
//! through.

use crate::policy::action::{Access, Action, FilesystemAction, Layer, NetworkAction};
use crate::policy::compile::{
    CompiledEndpoint, CompiledEntry, CompiledPolicy, CompiledRegion, CompiledRule, EndpointKind,
};

/// The outcome of matching one action, with the rule that decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Whether the policy allows the action.
    pub allow: bool,
    /// The allowing rule, or the denying rule, if any.
    pub rule: Option<String>,
    /// One line: why.
    pub reason: String,
}

fn binary_ok(rule: &CompiledRule, a: &NetworkAction) -> bool {
    rule.binaries.is_empty() || rule.binaries.iter().any(|g| g.matches(&a.binary))
}

fn connection_ok(rule: &CompiledRule, e: &CompiledEndpoint, a: &NetworkAction) -> bool {
    binary_ok(rule, a) && e.host.matches(&a.host) && e.ports.contains(&a.port)
}

fn entry_matches(entry: &CompiledEntry, a: &NetworkAction) -> bool {
    entry.methods.contains(&a.method) && entry.path.as_ref().is_none_or(|g| g.matches(&a.path))
}

/// `allows_E(a)` of §4.
pub fn endpoint_allows(rule: &CompiledRule, e: &CompiledEndpoint, a: &NetworkAction) -> bool {
    if !connection_ok(rule, e, a) {
        return false;
    }
    match &e.kind {
        EndpointKind::L4 => true,
        EndpointKind::Rest { scope, allow, .. } => {
            a.layer == Layer::Rest
                && scope.as_ref().is_none_or(|g| g.matches(&a.path))
                && allow.iter().any(|entry| entry_matches(entry, a))
        }
    }
}

/// `denies_E(a)` of §4.
pub fn endpoint_denies(rule: &CompiledRule, e: &CompiledEndpoint, a: &NetworkAction) -> bool {
    match &e.kind {
        EndpointKind::L4 => false,
        EndpointKind::Rest { deny, .. } => {
            a.layer == Layer::Rest
                && connection_ok(rule, e, a)
                && deny.iter().any(|entry| entry_matches(entry, a))
        }
    }
}

/// Decides a network action: allowed iff some endpoint allows it and no
/// endpoint of the policy denies it (deny wins, across rules).
pub fn decide_network(policy: &CompiledPolicy, a: &NetworkAction) -> Decision {
    let mut allowing = None;
    for rule in &policy.rules {
        for e in &rule.endpoints {
            if endpoint_denies(rule, e, a) {
                return Decision {
                    allow: false,
                    rule: Some(rule.name.clone()),
                    reason: format!("denied by a denyRules entry of rule {:?}", rule.name),
                };
            }
            if allowing.is_none() && endpoint_allows(rule, e, a) {
                allowing = Some(rule.name.clone());
            }
        }
    }
    match allowing {
        Some(rule) => Decision {
            allow: true,
            reason: format!("allowed by rule {rule:?}"),
            rule: Some(rule),
        },
        None => Decision {
            allow: false,
            rule: None,
            reason: "no rule allows it".to_string(),
        },
    }
}

/// `allows_P(a)` for a network action.
pub fn allows_network(policy: &CompiledPolicy, a: &NetworkAction) -> bool {
    decide_network(policy, a).allow
}

/// True when `path` equals `base` or lies below it at a `/` boundary.
pub fn path_is_under(path: &str, base: &str) -> bool {
    if base == "/" {
        return path.starts_with('/');
    }
    path == base || (path.starts_with(base) && path.as_bytes().get(base.len()) == Some(&b'/'))
}

/// Filesystem rule of §4: read under readOnly ∪ readWrite, write under readWrite.
pub fn allows_filesystem(policy: &CompiledPolicy, a: &FilesystemAction) -> bool {
    let entries = match a.access {
        Access::Read => &policy.filesystem.read,
        Access::Write => &policy.filesystem.write,
    };
    entries.iter().any(|base| path_is_under(&a.path, base))
}

/// `allows_P(a)` for either kind of action.
pub fn allows(policy: &CompiledPolicy, action: &Action) -> bool {
    match action {
        Action::Network(a) => allows_network(policy, a),
        Action::Filesystem(a) => allows_filesystem(policy, a),
    }
}

/// True when a network action lies in a region. Method and path constraints
/// hold only for REST actions (an l4 action has neither).
pub fn region_contains(region: &CompiledRegion, a: &NetworkAction) -> bool {
    let rest = a.layer == Layer::Rest;
    region
        .binaries
        .as_ref()
        .is_none_or(|g| g.iter().any(|g| g.matches(&a.binary)))
        && region
            .hosts
            .as_ref()
            .is_none_or(|g| g.iter().any(|g| g.matches(&a.host)))
        && region.ports.as_ref().is_none_or(|p| p.contains(&a.port))
        && region.layers.as_ref().is_none_or(|l| l.contains(&a.layer))
        && region
            .methods
            .as_ref()
            .is_none_or(|m| rest && m.contains(&a.method))
        && region
            .paths
            .as_ref()
            .is_none_or(|g| rest && g.iter().any(|g| g.matches(&a.path)))
}
