//! Reading agentgate's documents as `agentgate verify` and the CLI do: a
//! bare policy, or a MaximumPolicy or AgentSandbox manifest. The API owns
//! the kinds and their spec fields: a manifest's `spec` is checked against
//! the schema of its spec type, the one its CRD is generated from, so a
//! field the cluster accepts is never refused here and a misspelt one is
//! refused with its path and a hint. The language's parts (the policy,
//! invariants, budget, credentials) are then read by
//! [`agentgate_policy::load`].

use agentgate_policy::compile::Limits;
use agentgate_policy::error::Reason;
use agentgate_policy::fields::check_fields;
use agentgate_policy::load::{LoadError, LoadedDocument, parse_yaml};
use serde_json::Value;

use crate::crd::{AgentSandboxSpec, MaximumPolicySpec};

/// Reads a parsed document: a manifest's whole `spec` is checked against
/// its kind's schema first.
pub fn load_value(value: &Value) -> Result<LoadedDocument, Reason> {
    let empty = Value::Object(Default::default());
    let spec = value.get("spec").unwrap_or(&empty);
    match value.get("kind").and_then(Value::as_str) {
        Some("MaximumPolicy") => check_fields::<MaximumPolicySpec>(spec, "spec")?,
        Some("AgentSandbox") => check_fields::<AgentSandboxSpec>(spec, "spec")?,
        _ => {}
    }
    agentgate_policy::load::load_value(value)
}

/// Reads a document's text (one YAML document).
pub fn load_document(text: &str, limits: &Limits) -> Result<LoadedDocument, LoadError> {
    let value = parse_yaml(text, limits)?;
    load_value(&value).map_err(LoadError::Invalid)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use std::collections::BTreeSet;

    use agentgate_policy::fields::property_paths;
    use kube_core::CustomResourceExt;

    use super::*;
    use crate::crd::{AgentSandbox, MaximumPolicy};

    fn load(text: &str) -> Result<LoadedDocument, Reason> {
        load_document(text, &Limits::default()).map_err(|e| match e {
            LoadError::Invalid(reason) => reason,
            LoadError::Yaml(e) => panic!("not YAML: {e}"),
        })
    }

    const MAXIMUM: &str = "apiVersion: agentgate.dev/v1alpha1
kind: MaximumPolicy
metadata: {name: org}
spec:
  selector: {namespaceSelector: {matchLabels: {team: ml}}}
  allowedModes: [ask, auto]
  defaultMode: ask
  review: {fourEyes: true}
  budget: {maxCost: 2}
  policy:
    network:
      - name: api
        endpoints: [{host: api.example.test, ports: [443], protocol: rest, access: read-only}]
";

    const SANDBOX: &str = "apiVersion: agentgate.dev/v1alpha1
kind: AgentSandbox
metadata: {name: bot, namespace: agents}
spec:
  agentServiceAccount: bot
  runtimeTrifecta: enforce
  toolLabels: [{tool: fetch, integrity: untrusted}]
  template:
    spec:
      containers: [{name: agent, image: example.test/bot:1, resources: {limits: {memory: 1Gi}}}]
  policy:
    network:
      - name: api
        endpoints: [{host: api.example.test, ports: [443], protocol: rest, access: read-only}]
";

    /// Every field the cluster accepts is read: `spec.review` of a
    /// MaximumPolicy and `spec.toolLabels` of an AgentSandbox among them.
    #[test]
    fn every_spec_field_the_cluster_accepts_is_read() {
        let maximum = load(MAXIMUM).unwrap();
        assert_eq!(maximum.name.as_deref(), Some("org"));
        assert!(maximum.budget.is_some());
        let sandbox = load(SANDBOX).unwrap();
        assert_eq!(sandbox.policy.network.len(), 1);
    }

    /// A misspelt field anywhere in a manifest is refused with its path and
    /// the field meant, in the spec, the pod template and the policy.
    #[test]
    fn misspelt_fields_are_refused_where_they_are() {
        for (from, to, field, hint) in [
            ("  review:", "  reveiw:", "spec.reveiw", "review"),
            ("maxCost", "maxCosts", "spec.budget.maxCosts", "maxCost"),
            (
                "access: read-only",
                "acess: read-only",
                "spec.policy.network[0].endpoints[0].acess",
                "access",
            ),
        ] {
            let reason = load(&MAXIMUM.replace(from, to)).unwrap_err();
            assert_eq!(reason.field.as_deref(), Some(field), "{reason:?}");
            assert_eq!(
                reason.message,
                format!(
                    "unknown field {:?} (did you mean {hint:?}?)",
                    field.rsplit('.').next().unwrap()
                )
            );
        }
        for (from, to, field) in [
            ("toolLabels", "toolLabel", "spec.toolLabel"),
            (
                "image: example",
                "imag: example",
                "spec.template.spec.containers[0].imag",
            ),
        ] {
            let reason = load(&SANDBOX.replace(from, to)).unwrap_err();
            assert_eq!(reason.field.as_deref(), Some(field), "{reason:?}");
        }
        let reason = load(&SANDBOX.replace("access: read-only", "access: read-only, tls: skip"))
            .unwrap_err();
        assert_eq!(reason.message, "tls is not modelled by policy language v1");
    }

    /// Every property path of a CRD schema below `spec`, as
    /// [`property_paths`] spells them.
    fn crd_paths(crd: &serde_json::Value) -> BTreeSet<String> {
        fn walk(schema: &Value, field: &str, out: &mut BTreeSet<String>) {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (key, inner) in properties {
                    let at = format!("{field}.{key}");
                    out.insert(at.clone());
                    walk(inner, &at, out);
                }
            }
            if let Some(items) = schema.get("items") {
                walk(items, &format!("{field}[]"), out);
            }
            if let Some(additional @ Value::Object(_)) = schema.get("additionalProperties") {
                walk(additional, &format!("{field}.*"), out);
            }
        }
        let spec = crd
            .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec")
            .unwrap();
        let mut out = BTreeSet::new();
        walk(spec, "spec", &mut out);
        out
    }

    /// The two schemas cannot drift: every property of each CRD's spec is
    /// one the reader knows, and a document holding it is not refused as
    /// unknown.
    #[test]
    fn the_reader_knows_every_property_of_every_crd() {
        for (kind, crd, known) in [
            (
                "MaximumPolicy",
                serde_json::to_value(MaximumPolicy::crd()).unwrap(),
                property_paths::<MaximumPolicySpec>("spec"),
            ),
            (
                "AgentSandbox",
                serde_json::to_value(AgentSandbox::crd()).unwrap(),
                property_paths::<AgentSandboxSpec>("spec"),
            ),
        ] {
            let known: BTreeSet<String> = known.into_iter().collect();
            let paths = crd_paths(&crd);
            assert!(paths.len() > 50, "{kind}: {} paths", paths.len());
            let missing: Vec<&String> = paths.difference(&known).collect();
            assert!(
                missing.is_empty(),
                "{kind}: the CRD has fields the reader refuses: {missing:?}"
            );
            // Each top-level spec field, present, is never "unknown".
            for path in paths.iter().filter(|p| p.matches('.').count() == 1) {
                let key = path.trim_start_matches("spec.");
                let document = serde_json::json!({"kind": kind, "metadata": {"name": "x"}, "spec": {key: null}});
                if let Err(reason) = load_value(&document) {
                    assert!(
                        !reason.message.starts_with("unknown field"),
                        "{kind} {path}: {reason:?}"
                    );
                }
            }
        }
    }
}
