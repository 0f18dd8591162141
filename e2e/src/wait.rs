//! Waiting on objects through the API server's watch, as kube's
//! `kube::runtime::wait` does, instead of polling kubectl: the wait ends on
//! the watch event that satisfies it (no 200 ms steps, no kubectl process
//! per look), and on timeout it reports the last value it saw.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::await_condition;
use serde_json::Value;

use crate::{HarnessError, failed};

/// A kind the harness waits on, as the API names it.
#[derive(Debug, Clone, Copy)]
pub struct Kind {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
}

impl Kind {
    /// agentgate's AgentSandbox.
    pub const SANDBOX: Kind = Kind::new(
        "agentgate.dev",
        "v1alpha1",
        "AgentSandbox",
        "agentsandboxes",
    );
    /// agentgate's PolicyProposal.
    pub const PROPOSAL: Kind = Kind::new(
        "agentgate.dev",
        "v1alpha1",
        "PolicyProposal",
        "policyproposals",
    );
    /// A Pod.
    pub const POD: Kind = Kind::new("", "v1", "Pod", "pods");
    /// A coordination Lease.
    pub const LEASE: Kind = Kind::new("coordination.k8s.io", "v1", "Lease", "leases");
    /// agentgate's MaximumPolicy (cluster-scoped).
    pub const MAXIMUM: Kind = Kind::new(
        "agentgate.dev",
        "v1alpha1",
        "MaximumPolicy",
        "maximumpolicies",
    );

    const fn new(
        group: &'static str,
        version: &'static str,
        kind: &'static str,
        plural: &'static str,
    ) -> Kind {
        Kind {
            group,
            version,
            kind,
            plural,
        }
    }

    fn resource(self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(self.group, self.version, self.kind),
            self.plural,
        )
    }
}

/// A client of one control plane, for waits.
pub struct Waiter {
    runtime: tokio::runtime::Runtime,
    client: kube::Client,
}

impl Waiter {
    /// A client from the admin kubeconfig at `kubeconfig`.
    pub fn new(kubeconfig: &std::path::Path) -> Result<Waiter, HarnessError> {
        // Any test thread may wait: a one-worker runtime serves them all.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| failed("a runtime for waits", e))?;
        let config = Kubeconfig::read_from(kubeconfig).map_err(|e| failed("the kubeconfig", e))?;
        let client = runtime.block_on(async {
            let config =
                kube::Config::from_custom_kubeconfig(config, &KubeConfigOptions::default())
                    .await
                    .map_err(|e| failed("the kubeconfig's cluster", e))?;
            kube::Client::try_from(config).map_err(|e| failed("a client", e))
        })?;
        Ok(Waiter { runtime, client })
    }

    /// Waits until the object `namespace/name` of `kind` exists and
    /// `field` of it (the object as JSON) satisfies `done`; returns that
    /// field. On timeout, the last field seen (empty while there was no
    /// object), as kubectl's jsonpath would have printed it.
    pub fn until(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        limit: Duration,
        field: impl Fn(&Value) -> String + Send + Sync + 'static,
        done: impl Fn(&str) -> bool + Send + Sync + 'static,
    ) -> Result<String, String> {
        let api: Api<DynamicObject> = if namespace.is_empty() {
            Api::all_with(self.client.clone(), &kind.resource())
        } else {
            Api::namespaced_with(self.client.clone(), namespace, &kind.resource())
        };
        let last = Arc::new(Mutex::new(String::new()));
        let seen = last.clone();
        let (field, done) = (Arc::new(field), Arc::new(done));
        let condition = move |object: Option<&DynamicObject>| {
            let Some(object) = object else {
                return false;
            };
            let value = serde_json::to_value(object).unwrap_or(Value::Null);
            let text = field(&value);
            let met = done(&text);
            if let Ok(mut last) = seen.lock() {
                *last = text;
            }
            met
        };
        let deadline = tokio::time::Instant::now() + limit;
        let met = self.runtime.block_on(async {
            loop {
                match tokio::time::timeout_at(
                    deadline,
                    await_condition(api.clone(), name, condition.clone()),
                )
                .await
                {
                    Ok(Ok(_)) => return true,
                    Err(_) => return false,
                    // The watch broke (an API server restarted under a
                    // fault test): watch again until the deadline.
                    Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        });
        let last = last.lock().map(|l| l.clone()).unwrap_or_default();
        if met { Ok(last) } else { Err(last) }
    }
}

/// The string at `path` (object keys, then array indices) of `value`, as
/// kubectl's jsonpath prints it: a string bare, a number or bool as JSON,
/// nothing when absent.
pub fn at(value: &Value, path: &[&str]) -> String {
    let mut here = value;
    for step in path {
        let next = match here {
            Value::Object(map) => map.get(*step),
            Value::Array(items) => step.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        };
        match next {
            Some(next) => here = next,
            None => return String::new(),
        }
    }
    printed(here)
}

/// A value as kubectl's jsonpath prints it: a string bare, nothing for
/// null, anything else as JSON.
fn printed(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The `status` of the condition `type_` in `status.conditions`, or
/// nothing.
pub fn condition_status(value: &Value, type_: &str) -> String {
    condition_field(value, type_, "status")
}

/// `field` (`status`, `reason`, `message`) of the condition `type_` in
/// `status.conditions`, or nothing.
pub fn condition_field(value: &Value, type_: &str, field: &str) -> String {
    value["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .map(|c| at(c, &[field]))
        .unwrap_or_default()
}

/// A kubectl jsonpath template of one dotted path, such as
/// `{.status.phase}` or `{.status.appliedProposals[*].name}`, read from
/// `value` as kubectl prints it (`[*]` joins its items with spaces). `None`
/// for any other template (filters, ranges, several paths): those are not
/// read here rather than read differently.
pub fn dotted(value: &Value, template: &str) -> Option<String> {
    let path = template.strip_prefix("{.")?.strip_suffix('}')?;
    if path.contains(['{', '}', '?', '@', '\\', ' ']) {
        return None;
    }
    let mut found: Vec<&Value> = vec![value];
    for segment in path.split('.') {
        let (key, every) = match segment.strip_suffix("[*]") {
            Some(key) => (key, true),
            None => (segment, false),
        };
        if key.is_empty() || key.contains(['[', ']']) {
            return None;
        }
        found = found
            .into_iter()
            .filter_map(|v| v.get(key))
            .flat_map(|v| match (every, v) {
                (true, Value::Array(items)) => items.iter().collect::<Vec<_>>(),
                (true, _) => Vec::new(),
                (false, v) => vec![v],
            })
            .collect();
    }
    Some(found.into_iter().map(printed).collect::<Vec<_>>().join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_print_as_jsonpath_prints_them() {
        let object = json!({
            "metadata": {"name": "bot"},
            "status": {"revision": 4, "phase": "Applied", "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "FindingsClear", "status": "False"},
            ]},
        });
        assert_eq!(at(&object, &["status", "revision"]), "4");
        assert_eq!(at(&object, &["status", "phase"]), "Applied");
        assert_eq!(at(&object, &["status", "missing"]), "");
        assert_eq!(
            at(&object, &["status", "conditions", "1", "type"]),
            "FindingsClear"
        );
        assert_eq!(condition_status(&object, "FindingsClear"), "False");
        assert_eq!(condition_status(&object, "Stalled"), "");
        assert_eq!(condition_field(&object, "Ready", "status"), "True");
        let proposals = json!({"status": {"applied": [{"name": "a"}, {"name": "b"}], "cost": 3}});
        assert_eq!(
            dotted(&proposals, "{.status.applied[*].name}").as_deref(),
            Some("a b")
        );
        assert_eq!(dotted(&proposals, "{.status.cost}").as_deref(), Some("3"));
        assert_eq!(dotted(&proposals, "{.status.missing}").as_deref(), Some(""));
        assert_eq!(
            dotted(&object, "{.status.conditions[?(@.type==\"Ready\")].status}"),
            None
        );
        assert_eq!(dotted(&object, "{.status.revision} {.status.phase}"), None);
    }
}
