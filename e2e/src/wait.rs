//! Waiting on objects through the API server's watch, as kube's
//! `kube::runtime::wait` does, instead of polling kubectl: the wait ends on
//! the watch event that satisfies it (no 200 ms steps, no kubectl process
//! per look), and on timeout it reports the last value it saw.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{FutureExt as _, StreamExt as _};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::wait::await_condition;
use kube::runtime::watcher::{self, Event, watcher};
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
    /// agentgate's AgentScan (cluster-scoped).
    pub const SCAN: Kind = Kind::new("agentgate.dev", "v1alpha1", "AgentScan", "agentscans");
    /// An OpenReports Report (what the operator publishes findings as).
    pub const REPORT: Kind = Kind::new("openreports.io", "v1alpha1", "Report", "reports");
    /// A ConfigMap.
    pub const CONFIG_MAP: Kind = Kind::new("", "v1", "ConfigMap", "configmaps");
    /// A Secret.
    pub const SECRET: Kind = Kind::new("", "v1", "Secret", "secrets");
    /// A ServiceAccount.
    pub const SERVICE_ACCOUNT: Kind = Kind::new("", "v1", "ServiceAccount", "serviceaccounts");
    /// A NetworkPolicy.
    pub const NETWORK_POLICY: Kind = Kind::new(
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
    );
    /// A core Event (what `kubectl get events` lists).
    pub const EVENT: Kind = Kind::new("", "v1", "Event", "events");
    /// A Node (cluster-scoped).
    pub const NODE: Kind = Kind::new("", "v1", "Node", "nodes");
    /// A CustomResourceDefinition (cluster-scoped).
    pub const CRD: Kind = Kind::new(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
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

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind)
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
        let api = self.api(kind, namespace);
        let last = Arc::new(Mutex::new(String::new()));
        let seen = last.clone();
        let (field, done) = (Arc::new(field), Arc::new(done));
        let condition = move |object: Option<&DynamicObject>| {
            let Some(object) = object else {
                return false;
            };
            let text = field(&as_json(object));
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

    /// Waits until the objects of `kind` in `namespace` (every namespace, or
    /// a cluster-scoped kind: empty), those `fields` selects (a field
    /// selector such as `reason=Revoked`; empty: all), satisfy `done` read
    /// through `read` as one list, in kubectl's order (namespace, then
    /// name); returns what `read` made of it. The list is complete before it
    /// is first read, and read again after each burst of changes the watch
    /// brings (every event ready at once is applied first: a fleet's
    /// commits arrive together, and one reading serves them all). On
    /// timeout, the last reading (empty before the list was complete).
    pub fn until_listed(
        &self,
        kind: Kind,
        namespace: &str,
        fields: &str,
        limit: Duration,
        read: impl Fn(&[&Value]) -> String,
        done: impl Fn(&str) -> bool,
    ) -> Result<String, String> {
        let mut config = watcher::Config::default();
        if !fields.is_empty() {
            config = config.fields(fields);
        }
        // A broken watch (an API server restarted under a fault test) is
        // listed again after a backoff, as kube's reflectors do.
        let events = watcher(self.api(kind, namespace), config).default_backoff();
        let deadline = tokio::time::Instant::now() + limit;
        self.runtime.block_on(async move {
            let mut events = std::pin::pin!(events);
            let mut listed: BTreeMap<(String, String), Value> = BTreeMap::new();
            let mut listing: BTreeMap<(String, String), Value> = BTreeMap::new();
            let mut complete = false;
            let mut last = String::new();
            loop {
                let mut next = match tokio::time::timeout_at(deadline, events.next()).await {
                    Err(_) | Ok(None) => return Err(last),
                    Ok(Some(next)) => Some(next),
                };
                while let Some(ready) = next {
                    match ready {
                        Ok(Event::Init) => listing.clear(),
                        Ok(Event::InitApply(object)) => {
                            listing.insert(key(&object), as_json(&object));
                        }
                        Ok(Event::InitDone) => {
                            listed = std::mem::take(&mut listing);
                            complete = true;
                        }
                        Ok(Event::Apply(object)) => {
                            listed.insert(key(&object), as_json(&object));
                        }
                        Ok(Event::Delete(object)) => {
                            listed.remove(&key(&object));
                        }
                        // The watcher lists again after its backoff.
                        Err(_) => {}
                    }
                    next = events.next().now_or_never().flatten();
                }
                if complete {
                    let objects: Vec<&Value> = listed.values().collect();
                    last = read(&objects);
                    if done(&last) {
                        return Ok(last);
                    }
                }
            }
        })
    }

    /// Passes every state of the object `namespace/name` of `kind` that
    /// the watch shows (the listed one first) to `seen` with its session:
    /// 1 for the first watch, one more after each break or re-list, since
    /// across one a change may have gone unseen. `broke` hears each break.
    /// Until the returned [`Recording`] is dropped.
    pub fn record(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        mut seen: impl FnMut(u32, &Value) + Send + 'static,
        mut broke: impl FnMut(u32, &str) + Send + 'static,
    ) -> Recording {
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        // A broken watch (an API server killed under a fault test) is
        // resumed, or listed again, after a backoff.
        let events = watcher(self.api(kind, namespace), config).default_backoff();
        let task = self.runtime.spawn(async move {
            let mut events = std::pin::pin!(events);
            let mut session = 0;
            let mut intact = false;
            while let Some(event) = events.next().await {
                match event {
                    Ok(Event::Init) => intact = false,
                    Ok(Event::InitApply(object) | Event::Apply(object)) => {
                        if !intact {
                            session += 1;
                            intact = true;
                        }
                        seen(session, &as_json(&object));
                    }
                    Ok(Event::InitDone | Event::Delete(_)) => {}
                    Err(e) => {
                        intact = false;
                        broke(session, &e.to_string());
                    }
                }
            }
        });
        Recording(task.abort_handle())
    }

    /// The API of `kind` in `namespace` (all namespaces, or cluster-scoped:
    /// empty).
    fn api(&self, kind: Kind, namespace: &str) -> Api<DynamicObject> {
        if namespace.is_empty() {
            Api::all_with(self.client.clone(), &kind.resource())
        } else {
            Api::namespaced_with(self.client.clone(), namespace, &kind.resource())
        }
    }
}

/// A [`Waiter::record`] watch; it stops when this is dropped.
pub struct Recording(tokio::task::AbortHandle);

impl Drop for Recording {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Where an object sorts in a list as kubectl prints it.
fn key(object: &DynamicObject) -> (String, String) {
    (
        object.metadata.namespace.clone().unwrap_or_default(),
        object.metadata.name.clone().unwrap_or_default(),
    )
}

fn as_json(object: &DynamicObject) -> Value {
    serde_json::to_value(object).unwrap_or(Value::Null)
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

/// The objects' names, space-separated, as kubectl's
/// `{.items[*].metadata.name}` prints them.
pub fn names(objects: &[&Value]) -> String {
    objects
        .iter()
        .map(|o| at(o, &["metadata", "name"]))
        .collect::<Vec<_>>()
        .join(" ")
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

/// A kubectl jsonpath template read from `value` as kubectl prints it:
/// literal text and `{…}` expressions, each a path of keys (`\.` for a
/// dot inside one: `{.data.ca\.pem}`), array indices (`[0]`), every item
/// (`[*]`) and equality filters (`[?(@.type=="Ready")]`); what several
/// items yield is joined with spaces, absent paths print nothing. `None`
/// for anything else (ranges, functions, other filters): those are not
/// read here rather than read differently from kubectl.
pub fn template(value: &Value, template: &str) -> Option<String> {
    let mut printed_text = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let literal = &rest[..open];
        if literal.contains('}') {
            return None;
        }
        printed_text.push_str(literal);
        let after = &rest[open + 1..];
        let close = after.find('}')?;
        printed_text.push_str(&read_path(value, &after[..close])?);
        rest = &after[close + 1..];
    }
    if rest.contains('}') {
        return None;
    }
    printed_text.push_str(rest);
    Some(printed_text)
}

/// One step of a jsonpath expression.
#[derive(Debug, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
    Every,
    Where(String, String),
}

/// The values `expression` (`.a.b[*].c`) reaches in `value`, printed and
/// joined with spaces.
fn read_path(value: &Value, expression: &str) -> Option<String> {
    let mut found: Vec<&Value> = vec![value];
    for step in steps(expression)? {
        found = found
            .into_iter()
            .flat_map(|v| match (&step, v) {
                (Step::Key(key), Value::Object(map)) => map.get(key).into_iter().collect(),
                (Step::Index(i), Value::Array(items)) => items.get(*i).into_iter().collect(),
                (Step::Every, Value::Array(items)) => items.iter().collect(),
                (Step::Where(key, want), Value::Array(items)) => items
                    .iter()
                    .filter(|item| item.get(key).and_then(Value::as_str) == Some(want.as_str()))
                    .collect(),
                _ => Vec::new(),
            })
            .collect();
    }
    Some(found.into_iter().map(printed).collect::<Vec<_>>().join(" "))
}

/// The steps of `.a.b\.c[0][*][?(@.k=="v")]`; `None` for anything else.
fn steps(expression: &str) -> Option<Vec<Step>> {
    let mut steps = Vec::new();
    let mut chars = expression.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '.' => {
                let mut key = String::new();
                while let Some(&next) = chars.peek() {
                    match next {
                        '.' | '[' => break,
                        '\\' => {
                            chars.next();
                            // Only an escaped dot is kubectl's escape here.
                            if chars.next()? != '.' {
                                return None;
                            }
                            key.push('.');
                        }
                        '"' | '\'' | ']' | '(' | ')' | '@' | '?' | '*' | ' ' => return None,
                        other => {
                            chars.next();
                            key.push(other);
                        }
                    }
                }
                if key.is_empty() {
                    return None;
                }
                steps.push(Step::Key(key));
            }
            '[' => {
                let mut inside = String::new();
                loop {
                    match chars.next()? {
                        ']' => break,
                        other => inside.push(other),
                    }
                }
                steps.push(bracket(&inside)?);
            }
            _ => return None,
        }
    }
    (!steps.is_empty()).then_some(steps)
}

/// `*`, an index, or `?(@.key=="value")`.
fn bracket(inside: &str) -> Option<Step> {
    if inside == "*" {
        return Some(Step::Every);
    }
    if let Ok(index) = inside.parse::<usize>() {
        return Some(Step::Index(index));
    }
    let (key, want) = inside
        .strip_prefix("?(@.")?
        .strip_suffix(')')?
        .split_once("==")?;
    let want = want.strip_prefix('"')?.strip_suffix('"')?;
    let plain = |s: &str| !s.is_empty() && !s.contains(['"', '\\', '.', '[', '@', ' ']);
    (plain(key) && !want.contains(['"', '\\'])).then(|| Step::Where(key.into(), want.into()))
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
        let read = |value: &Value, t: &str| template(value, t);
        assert_eq!(
            read(&proposals, "{.status.applied[*].name}").as_deref(),
            Some("a b")
        );
        assert_eq!(read(&proposals, "{.status.cost}").as_deref(), Some("3"));
        assert_eq!(read(&proposals, "{.status.missing}").as_deref(), Some(""));
        assert_eq!(
            read(&proposals, "{.status.applied[1].name}").as_deref(),
            Some("b")
        );
        assert_eq!(
            read(&object, "{.status.conditions[?(@.type==\"Ready\")].status}").as_deref(),
            Some("True")
        );
        assert_eq!(
            read(&object, "{.status.revision} {.status.phase}").as_deref(),
            Some("4 Applied")
        );
        assert_eq!(
            read(&object, "rev={.status.revision}").as_deref(),
            Some("rev=4")
        );
        let labelled = json!({"metadata": {"labels": {"agentgate.dev/sandbox": "bot"}},
            "data": {"ca.pem": "PEM"}});
        assert_eq!(
            read(
                &labelled,
                "{.metadata.labels.agentgate\\.dev/sandbox} {.data.ca\\.pem}"
            )
            .as_deref(),
            Some("bot PEM")
        );
        // What kubectl would read differently, or this subset cannot, is
        // refused rather than guessed.
        for refused in [
            "{range .items[*]}{.metadata.name}{end}",
            "{.status.conditions[?(@.type!=\"Ready\")].status}",
            "{.a\\b}",
            "{.a..b}",
            "{.}",
            "{.status",
            "}{.status}",
            "{.a[?(@.b.c==\"x\")]}",
        ] {
            assert_eq!(read(&object, refused), None, "{refused}");
        }
    }
}
