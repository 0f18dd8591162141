//! Reading policy files: a bare policy document (keys `filesystem`,
//! `network`) or a MaximumPolicy/AgentSandbox manifest (its `spec.policy`).
//!
//! Unknown fields, and the reserved ones (`query`, `allowedIPs`, `tls`), make
//! the document Unsupported with the field's path; nothing is silently
//! ignored.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::compile::{CompiledPolicy, CompiledRegion, Limits, Role, compile, compile_region};
use crate::error::{Reason, ReasonCode};
use crate::model::{Budget, Invariant, PolicyDocument};

/// What a file held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocumentKind {
    /// A bare policy document.
    Bare,
    /// A MaximumPolicy manifest.
    MaximumPolicy,
    /// An AgentSandbox manifest.
    AgentSandbox,
}

/// A policy read from a file, not yet compiled.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedDocument {
    /// What the file held.
    pub kind: DocumentKind,
    /// `metadata.name` of a manifest.
    pub name: Option<String>,
    /// The policy.
    pub policy: PolicyDocument,
    /// A MaximumPolicy's invariants.
    pub invariants: Vec<Invariant>,
    /// A MaximumPolicy's budget.
    pub budget: Option<Budget>,
    /// An AgentSandbox's credentials (docs/policy-semantics.md §9): read and
    /// checked, never their Secrets.
    pub credentials: Vec<crate::credentials::Credential>,
    /// Where the policy sits in the file (`""` or `spec.policy`), for error paths.
    pub policy_field: &'static str,
}

/// A named, compiled invariant region.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CompiledInvariant {
    /// The invariant's name.
    pub name: String,
    /// Why it exists.
    pub reason: Option<String>,
    /// The forbidden region.
    pub region: CompiledRegion,
}

/// A compiled document: policy plus MaximumPolicy extras.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledDocument {
    /// The policy.
    pub policy: CompiledPolicy,
    /// Invariants (MaximumPolicy only).
    pub invariants: Vec<CompiledInvariant>,
    /// Budget (MaximumPolicy only).
    pub budget: Option<Budget>,
}

/// Why a file could not be read as a policy.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LoadError {
    /// Not YAML at all (a usage/I-O error, exit 2).
    #[error("invalid YAML: {0}")]
    Yaml(String),
    /// YAML, but not a policy this model covers.
    #[error("{0}")]
    Invalid(Reason),
}

const DOCUMENT_FIELDS: &[&str] = &["filesystem", "network"];
const FILESYSTEM_FIELDS: &[&str] = &["readOnly", "readWrite"];
const RULE_FIELDS: &[&str] = &[
    "name",
    "binaries",
    "endpoints",
    "review",
    "credentials",
    "allowUninspectedCredentials",
];
const ENDPOINT_FIELDS: &[&str] = &[
    "host",
    "port",
    "ports",
    "protocol",
    "path",
    "access",
    "rules",
    "denyRules",
    "tools",
    "denyTools",
    "resources",
    "prompts",
    "review",
    "modelProvider",
    "unrecordedPaths",
];
const ENTRY_FIELDS: &[&str] = &["methods", "path"];
const TOOL_FIELDS: &[&str] = &["name", "arguments", "additionalArguments", "mode"];
const RESOURCE_FIELDS: &[&str] = &["uri"];
const CONSTRAINT_FIELDS: &[&str] = &[
    "oneOf",
    "glob",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "items",
    "maxItems",
    "optional",
    "from",
    "entities",
];
const ENTITIES_FIELDS: &[&str] = &["from"];
const REVIEW_FIELDS: &[&str] = &["required", "reason"];
const MAXIMUM_SPEC_FIELDS: &[&str] = &[
    "selector",
    "allowedModes",
    "defaultMode",
    "policy",
    "invariants",
    "budget",
];
const SANDBOX_SPEC_FIELDS: &[&str] = &[
    "mode",
    "agentServiceAccount",
    "template",
    "policy",
    "acceptedFindings",
    "runtimeTrifecta",
    "toolLabels",
    "credentials",
];
/// Fields that other policy languages have and this one deliberately does not
/// model yet; named so the message says so instead of "unknown".
const RESERVED_FIELDS: &[&str] = &["query", "allowedIPs", "allowed_ips", "tls"];

fn shape(field: impl Into<String>, message: impl Into<String>) -> Reason {
    Reason::at(ReasonCode::UnsupportedPolicyShape, field, message)
}

fn check_keys(value: &Value, field: &str, allowed: &[&str]) -> Result<(), Reason> {
    let Some(map) = value.as_object() else {
        return Ok(()); // type errors are reported by the typed pass
    };
    for key in map.keys() {
        if allowed.contains(&key.as_str()) {
            continue;
        }
        let at = if field.is_empty() {
            key.clone()
        } else {
            format!("{field}.{key}")
        };
        if RESERVED_FIELDS.contains(&key.as_str()) {
            return Err(shape(
                at,
                format!("{key} is not modelled by policy language v1"),
            ));
        }
        let hint = allowed
            .iter()
            .filter(|candidate| edit_distance(key, candidate) <= 2)
            .min_by_key(|candidate| edit_distance(key, candidate))
            .map(|candidate| format!(" (did you mean {candidate:?}?)"))
            .unwrap_or_default();
        return Err(shape(at, format!("unknown field {key:?}{hint}")));
    }
    Ok(())
}

/// Levenshtein distance, for "did you mean" hints on short field names.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

fn each<'a>(value: &'a Value, key: &str) -> impl Iterator<Item = (usize, &'a Value)> {
    value
        .get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
}

/// Rejects unknown and reserved fields anywhere in a policy document.
fn check_policy_fields(doc: &Value) -> Result<(), Reason> {
    check_keys(doc, "", DOCUMENT_FIELDS)?;
    if let Some(fs) = doc.get("filesystem") {
        check_keys(fs, "filesystem", FILESYSTEM_FIELDS)?;
    }
    for (r, rule) in each(doc, "network") {
        let at = format!("network[{r}]");
        check_keys(rule, &at, RULE_FIELDS)?;
        if let Some(review) = rule.get("review") {
            check_keys(review, &format!("{at}.review"), REVIEW_FIELDS)?;
        }
        for (e, endpoint) in each(rule, "endpoints") {
            let at = format!("{at}.endpoints[{e}]");
            check_keys(endpoint, &at, ENDPOINT_FIELDS)?;
            if let Some(review) = endpoint.get("review") {
                check_keys(review, &format!("{at}.review"), REVIEW_FIELDS)?;
            }
            for list in ["rules", "denyRules"] {
                for (i, entry) in each(endpoint, list) {
                    check_keys(entry, &format!("{at}.{list}[{i}]"), ENTRY_FIELDS)?;
                }
            }
            for list in ["tools", "denyTools", "prompts"] {
                for (i, entry) in each(endpoint, list) {
                    let at = format!("{at}.{list}[{i}]");
                    check_keys(entry, &at, TOOL_FIELDS)?;
                    let arguments = entry.get("arguments").and_then(Value::as_object);
                    for (name, constraint) in arguments.into_iter().flatten() {
                        check_constraint_fields(constraint, &format!("{at}.arguments.{name}"))?;
                    }
                }
            }
            for (i, entry) in each(endpoint, "resources") {
                check_keys(entry, &format!("{at}.resources[{i}]"), RESOURCE_FIELDS)?;
            }
        }
    }
    Ok(())
}

/// Rejects unknown fields in an argument constraint and its `items`.
fn check_constraint_fields(constraint: &Value, at: &str) -> Result<(), Reason> {
    check_keys(constraint, at, CONSTRAINT_FIELDS)?;
    if let Some(entities) = constraint.get("entities") {
        check_keys(entities, &format!("{at}.entities"), ENTITIES_FIELDS)?;
    }
    // The typed pass bounds the depth (docs/policy-semantics.md §8.2); this
    // walk stops at the same depth so a deep document cannot recurse far.
    let mut items = constraint.get("items");
    let mut at = at.to_string();
    let mut depth = 0;
    while let Some(inner) = items {
        at.push_str(".items");
        depth += 1;
        if depth > crate::mcp::MAX_ITEMS_DEPTH {
            return Err(Reason::at(
                ReasonCode::ResourceLimit,
                at,
                format!(
                    "items nested more than {} deep",
                    crate::mcp::MAX_ITEMS_DEPTH
                ),
            ));
        }
        check_keys(inner, &at, CONSTRAINT_FIELDS)?;
        if let Some(entities) = inner.get("entities") {
            check_keys(entities, &format!("{at}.entities"), ENTITIES_FIELDS)?;
        }
        items = inner.get("items");
    }
    Ok(())
}

/// Deserialises a typed value, reporting the failing field's path.
pub fn typed<T: DeserializeOwned>(value: &Value, field: &str) -> Result<T, Reason> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let at = match (field.is_empty(), path == ".") {
            (true, _) => path,
            (false, true) => field.to_string(),
            (false, false) if path.starts_with('[') => format!("{field}{path}"),
            (false, false) => format!("{field}.{path}"),
        };
        shape(at, e.into_inner().to_string())
    })
}

/// Parses one YAML document into a JSON value (one document per file).
pub fn parse_yaml(text: &str, limits: &Limits) -> Result<Value, LoadError> {
    if text.len() > limits.input_bytes {
        return Err(LoadError::Invalid(Reason::general(
            ReasonCode::ResourceLimit,
            format!("input is larger than {} bytes", limits.input_bytes),
        )));
    }
    serde_saphyr::from_str::<Value>(text).map_err(|e| LoadError::Yaml(e.to_string()))
}

/// Reads a policy file's text.
pub fn load_document(text: &str, limits: &Limits) -> Result<LoadedDocument, LoadError> {
    let value = parse_yaml(text, limits)?;
    load_value(&value).map_err(LoadError::Invalid)
}

/// Reads a parsed policy file.
pub fn load_value(value: &Value) -> Result<LoadedDocument, Reason> {
    if !value.is_object() {
        return Err(Reason::general(
            ReasonCode::UnsupportedPolicyShape,
            "expected a policy document (filesystem/network) or a MaximumPolicy/AgentSandbox manifest",
        ));
    }
    let Some(kind) = value.get("kind") else {
        check_policy_fields(value)?;
        return Ok(LoadedDocument {
            kind: DocumentKind::Bare,
            name: None,
            policy: typed(value, "")?,
            invariants: Vec::new(),
            budget: None,
            credentials: Vec::new(),
            policy_field: "",
        });
    };
    let kind = match kind.as_str() {
        Some("MaximumPolicy") => DocumentKind::MaximumPolicy,
        Some("AgentSandbox") => DocumentKind::AgentSandbox,
        other => {
            return Err(shape(
                "kind",
                format!("expected MaximumPolicy or AgentSandbox, found {other:?}"),
            ));
        }
    };
    let name = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .map(str::to_string);
    let spec_fields: &[&str] = match kind {
        DocumentKind::MaximumPolicy => MAXIMUM_SPEC_FIELDS,
        _ => SANDBOX_SPEC_FIELDS,
    };
    if let Some(spec) = value.get("spec") {
        check_keys(spec, "spec", spec_fields)?;
    }
    let empty = Value::Object(Default::default());
    let policy = value.pointer("/spec/policy").unwrap_or(&empty);
    check_policy_fields(policy).map_err(|r| r.within("spec.policy"))?;
    let policy: PolicyDocument = typed(policy, "spec.policy")?;
    let (invariants, budget) = if kind == DocumentKind::MaximumPolicy {
        let invariants = match value.pointer("/spec/invariants") {
            Some(v) => typed(v, "spec.invariants")?,
            None => Vec::new(),
        };
        let budget = match value.pointer("/spec/budget") {
            Some(v) => Some(typed(v, "spec.budget")?),
            None => None,
        };
        (invariants, budget)
    } else {
        (Vec::new(), None)
    };
    let credentials = match value.pointer("/spec/credentials") {
        Some(v) if kind == DocumentKind::AgentSandbox => typed(v, "spec.credentials")?,
        _ => Vec::new(),
    };
    Ok(LoadedDocument {
        kind,
        name,
        policy,
        invariants,
        budget,
        credentials,
        policy_field: "spec.policy",
    })
}

impl LoadedDocument {
    /// Validates and compiles the policy and invariants.
    pub fn compile(&self, role: Role, limits: &Limits) -> Result<CompiledDocument, Reason> {
        let policy =
            compile(&self.policy, role, limits).map_err(|r| r.within(self.policy_field))?;
        if self.kind == DocumentKind::AgentSandbox {
            crate::credentials::check(
                "spec.credentials",
                &self.credentials,
                &policy,
                "spec.policy.",
            )?;
        }
        let invariants = self
            .invariants
            .iter()
            .enumerate()
            .map(|(i, inv)| {
                Ok(CompiledInvariant {
                    name: inv.name.clone(),
                    reason: inv.reason.clone(),
                    region: compile_region(&inv.region, &format!("spec.invariants[{i}].match"))?,
                })
            })
            .collect::<Result<_, Reason>>()?;
        Ok(CompiledDocument {
            policy,
            invariants,
            budget: self.budget,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_get_a_hint() {
        let doc = "network: [{name: a, endpoints: [{host: a.io, ports: [443], protocol: rest, acess: read-only}]}]";
        let LoadError::Invalid(reason) = load_document(doc, &Limits::default()).unwrap_err() else {
            panic!("expected an invalid document");
        };
        assert_eq!(
            reason.field.as_deref(),
            Some("network[0].endpoints[0].acess")
        );
        assert_eq!(
            reason.message,
            "unknown field \"acess\" (did you mean \"access\"?)"
        );
        assert_eq!(edit_distance("polcy", "policy"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn reserved_fields_say_so() {
        let doc = "network: [{name: a, endpoints: [{host: a.io, ports: [443], tls: skip}]}]";
        let LoadError::Invalid(reason) = load_document(doc, &Limits::default()).unwrap_err() else {
            panic!("expected an invalid document");
        };
        assert_eq!(reason.message, "tls is not modelled by policy language v1");
    }
}
