//! Reading policy files: a bare policy document (keys `filesystem`,
//! `network`) or a MaximumPolicy/AgentSandbox manifest (its `spec.policy`).
//!
//! Unknown fields, and the reserved ones (`query`, `allowedIPs`, `tls`), make
//! the document Unsupported with the field's path; nothing is silently
//! ignored. The fields are those of the types ([`crate::fields`]). Of a
//! manifest this reads the language's parts (`spec.policy`,
//! `spec.invariants`, `spec.budget`, `spec.credentials`); the kinds' other
//! spec fields belong to the API crate, whose reader
//! (`agentgate_api::documents`) checks the whole spec first: the CLI reads
//! manifests through it.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::compile::{CompiledPolicy, CompiledRegion, Limits, Role, compile, compile_region};
use crate::error::{Reason, ReasonCode};
use crate::fields::check_fields;
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

fn shape(field: impl Into<String>, message: impl Into<String>) -> Reason {
    Reason::at(ReasonCode::UnsupportedPolicyShape, field, message)
}

/// Rejects unknown and reserved fields anywhere in a policy document, by
/// the schema of its type ([`crate::fields`]), and `items` nested deeper
/// than the language reads.
fn check_policy_fields(doc: &Value) -> Result<(), Reason> {
    check_fields::<PolicyDocument>(doc, "")?;
    for (r, rule) in each(doc, "network") {
        for (e, endpoint) in each(rule, "endpoints") {
            for list in ["tools", "denyTools", "prompts"] {
                for (i, entry) in each(endpoint, list) {
                    let arguments = entry.get("arguments").and_then(Value::as_object);
                    for (name, constraint) in arguments.into_iter().flatten() {
                        let at =
                            format!("network[{r}].endpoints[{e}].{list}[{i}].arguments.{name}");
                        check_items_depth(constraint, &at)?;
                    }
                }
            }
        }
    }
    Ok(())
}

fn each<'a>(value: &'a Value, key: &str) -> impl Iterator<Item = (usize, &'a Value)> {
    value
        .get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
}

/// Refuses a constraint whose `items` nest deeper than the typed pass reads
/// (docs/policy-semantics.md §8.2), before that pass recurses into them.
fn check_items_depth(constraint: &Value, at: &str) -> Result<(), Reason> {
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
    let empty = Value::Object(Default::default());
    let policy = value.pointer("/spec/policy").unwrap_or(&empty);
    check_policy_fields(policy).map_err(|r| r.within("spec.policy"))?;
    let policy: PolicyDocument = typed(policy, "spec.policy")?;
    let (invariants, budget) = if kind == DocumentKind::MaximumPolicy {
        let invariants = match value.pointer("/spec/invariants") {
            Some(v) => {
                check_fields::<Vec<Invariant>>(v, "spec.invariants")?;
                typed(v, "spec.invariants")?
            }
            None => Vec::new(),
        };
        let budget = match value.pointer("/spec/budget") {
            Some(v) => {
                check_fields::<Budget>(v, "spec.budget")?;
                Some(typed(v, "spec.budget")?)
            }
            None => None,
        };
        (invariants, budget)
    } else {
        (Vec::new(), None)
    };
    let credentials = match value.pointer("/spec/credentials") {
        Some(v) if kind == DocumentKind::AgentSandbox => {
            check_fields::<Vec<crate::credentials::Credential>>(v, "spec.credentials")?;
            typed(v, "spec.credentials")?
        }
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
        assert_eq!(crate::fields::edit_distance("polcy", "policy"), 1);
        assert_eq!(crate::fields::edit_distance("", "abc"), 3);
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
