//! The objects the operator keeps for a sandbox, declared once. [`desired`]
//! says, without I/O, what each should be from the sandbox, its committed
//! policy and the data plane's files; [`apply`] is the one server-side
//! apply writer, with one field manager and echo suppression; the
//! watch-fed views ([`Viewed`]) say whether an object is still the version
//! last written or checked. The sandbox reconciler reads, decides (its
//! status and these objects) and writes.
//!
//! How each object is written is part of what it is: the policy ConfigMap
//! and the egress NetworkPolicy are the operator's outright and applied;
//! the agent's ServiceAccount and Pod are created when missing and never
//! adopted or changed (their names are the sandbox writer's choice, so an
//! object already there may be someone else's); the CA Secret is rotated
//! under optimistic concurrency (`sandbox_ca`).

use std::collections::{BTreeMap, BTreeSet};
use std::marker::PhantomData;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodSpec, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use crate::{Context, ControllerError, Raced, Views, content_hash};
use agentgate_api::crd::{AgentSandbox, SANDBOX_LABEL};
use agentgate_governance::pod_template::pod_service_account;
use agentgate_governance::sandbox_pod::{network_policy_name, policy_config_map_name};
use agentgate_k8s::FIELD_MANAGER;
use agentgate_policy::model::PolicyDocument;

/// An object the operator owns outright and server-side applies whole.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied<K> {
    /// Its name, in the sandbox's namespace.
    pub name: String,
    /// The apply patch: every field the operator owns.
    pub object: Value,
    kind: PhantomData<K>,
}

impl<K> Applied<K> {
    fn new(name: String, object: Value) -> Self {
        Applied {
            name,
            object,
            kind: PhantomData,
        }
    }
}

/// Everything the operator keeps for one sandbox but its CA Secret (whose
/// content is drawn, not derived).
#[derive(Debug, Clone)]
pub struct SandboxObjects {
    /// `<name>-policy`: what the enforcement proxy reads.
    pub config_map: Applied<ConfigMap>,
    /// `<name>-egress`: the Pod's TCP egress limited to the policy's ports
    /// and DNS (defence in depth behind the proxy).
    pub network_policy: Applied<NetworkPolicy>,
    /// The agent's ServiceAccount as created when it is missing.
    pub account: ServiceAccount,
    /// The agent Pod as created when it is missing: `None` without a
    /// template or when the template cannot run in the enforced shape.
    pub pod: Option<Pod>,
}

/// What the owned objects are derived from.
pub struct Inputs<'a> {
    /// The sandbox that owns them.
    pub sandbox: &'a AgentSandbox,
    /// Its committed effective policy.
    pub effective: &'a PolicyDocument,
    /// The policy ConfigMap's files (policy, findings, CAs, revision).
    pub policy_files: &'a BTreeMap<String, String>,
    /// The egress rule to the operator's server (approvals, policy
    /// stream), when the Pods use it.
    pub operator_egress: Option<Value>,
    /// The Pod spec in the enforced shape, when there is a Pod to run.
    pub pod_spec: Option<PodSpec>,
}

/// The sandbox's owned objects as they should be.
pub fn desired(inputs: Inputs<'_>) -> SandboxObjects {
    let sandbox = inputs.sandbox;
    let config_map_name = policy_config_map_name(&sandbox.name_any());
    let config_map = Applied::new(
        config_map_name.clone(),
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": owned_metadata(sandbox, &config_map_name),
            "data": inputs.policy_files,
        }),
    );
    let network_policy_name = network_policy_name(&sandbox.name_any());
    let network_policy = Applied::new(
        network_policy_name.clone(),
        json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": owned_metadata(sandbox, &network_policy_name),
            "spec": {
                "podSelector": {"matchLabels": {SANDBOX_LABEL: sandbox.name_any()}},
                "policyTypes": ["Egress"],
                "egress": egress_rules(inputs.effective, inputs.operator_egress),
            },
        }),
    );
    let account = ServiceAccount {
        metadata: owned_metadata(sandbox, &sandbox.spec.agent_service_account),
        ..ServiceAccount::default()
    };
    // Built in place, not through JSON: this runs at every reconcile, and
    // the Pod is only created when it is missing.
    let pod = inputs.pod_spec.map(|spec| agent_pod(sandbox, spec));
    SandboxObjects {
        config_map,
        network_policy,
        account,
        pod,
    }
}

/// DNS, the TCP ports the effective policy names, and the operator's
/// server when the Pods reach it.
fn egress_rules(effective: &PolicyDocument, operator_egress: Option<Value>) -> Vec<Value> {
    let ports: BTreeSet<u16> = effective
        .network
        .iter()
        .flat_map(|rule| rule.endpoints.iter())
        .flat_map(|e| e.port.into_iter().chain(e.ports.iter().copied()))
        .collect();
    let mut egress = vec![json!({"ports": [
        {"protocol": "UDP", "port": 53},
        {"protocol": "TCP", "port": 53},
    ]})];
    if !ports.is_empty() {
        let ports: Vec<_> = ports
            .iter()
            .map(|p| json!({"protocol": "TCP", "port": p}))
            .collect();
        egress.push(json!({"ports": ports}));
    }
    egress.extend(operator_egress);
    egress
}

/// The agent Pod: the template's labels (plus the sandbox's) and
/// annotations, the enforced spec, and the account it acts as.
fn agent_pod(sandbox: &AgentSandbox, mut spec: PodSpec) -> Pod {
    let name = sandbox.name_any();
    let template_metadata = sandbox
        .spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref());
    let mut labels = template_metadata
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(SANDBOX_LABEL.into(), name.clone());
    // The agent's pod acts as the agent unless the template names another
    // account (whose token it then may not mount).
    spec.service_account_name = Some(pod_service_account(&sandbox.spec));
    spec.service_account = None;
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            labels: Some(labels),
            annotations: template_metadata.and_then(|m| m.annotations.clone()),
            owner_references: Some(vec![owner_reference(sandbox)]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        ..Pod::default()
    }
}

/// The metadata of an object the operator keeps for a sandbox: its name,
/// the sandbox's label and the sandbox as controlling owner.
fn owned_metadata(sandbox: &AgentSandbox, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        labels: Some(BTreeMap::from([(
            SANDBOX_LABEL.to_string(),
            sandbox.name_any(),
        )])),
        owner_references: Some(vec![owner_reference(sandbox)]),
        ..ObjectMeta::default()
    }
}

/// The sandbox as an object's controlling owner.
fn owner_reference(sandbox: &AgentSandbox) -> OwnerReference {
    OwnerReference {
        api_version: "agentgate.dev/v1alpha1".into(),
        kind: "AgentSandbox".into(),
        name: sandbox.name_any(),
        uid: sandbox.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// [`owner_reference`] as JSON, for the objects written as JSON (the CA
/// Secret's apply, the OpenReports Report).
pub fn owner(sandbox: &AgentSandbox) -> Value {
    json!(owner_reference(sandbox))
}

/// A kind of owned object the sandbox controller watches by metadata.
pub trait Viewed:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + 'static
{
    /// The view of the labelled objects of this kind.
    fn view(views: &Views) -> &Store<PartialObjectMeta<Self>>;
}

impl Viewed for ConfigMap {
    fn view(views: &Views) -> &Store<PartialObjectMeta<Self>> {
        &views.config_maps
    }
}

impl Viewed for NetworkPolicy {
    fn view(views: &Views) -> &Store<PartialObjectMeta<Self>> {
        &views.network_policies
    }
}

impl Viewed for Pod {
    fn view(views: &Views) -> &Store<PartialObjectMeta<Self>> {
        &views.pods
    }
}

impl Viewed for ServiceAccount {
    fn view(views: &Views) -> &Store<PartialObjectMeta<Self>> {
        &views.accounts
    }
}

/// The object's metadata as the view shows it, if it does.
pub fn in_view<K: Viewed>(
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Option<std::sync::Arc<PartialObjectMeta<K>>> {
    ctx.views
        .get()
        .and_then(|views| K::view(views).get(&ObjectRef::new(name).within(namespace)))
}

/// The resourceVersion at which the view shows the object.
pub fn seen_version<K: Viewed>(ctx: &Context, namespace: &str, name: &str) -> Option<String> {
    in_view::<K>(ctx, namespace, name).and_then(|meta| meta.metadata.resource_version.clone())
}

/// Server-side applies `desired` in `namespace` ([`apply_patch`]), with
/// the view of its kind to say it is unchanged.
pub async fn apply<K: Viewed>(
    ctx: &Context,
    namespace: &str,
    desired: &Applied<K>,
) -> Result<Raced, ControllerError> {
    apply_patch(
        Api::<K>::namespaced(ctx.client.clone(), namespace),
        &desired.name,
        &desired.object,
        content_hash(&desired.object),
        seen_version::<K>(ctx, namespace, &desired.name),
        ctx,
    )
    .await
}

/// Server-side applies `patch` (whose content is `content`: what must be
/// written again when it changes) as the operator's one field manager,
/// unless this process applied the very same content before and the object
/// has not changed since: its resourceVersion is the one that apply
/// returned, as `seen` in a watch-fed view, or else as read (metadata
/// only). A no-op apply costs the API server far more than that read, and
/// a re-verification storm would otherwise rewrite every object; anyone
/// else's edit changes the resourceVersion, so drift is still put right.
/// The view is trusted only to say "unchanged": an edit shows in it (and
/// triggers a reconcile of its own) with another version, which is then
/// read. Returns whether someone else's write raced this one
/// ([`crate::Raced`]): its trigger was held back, so the caller looks again.
pub async fn apply_patch<K>(
    api: Api<K>,
    name: &str,
    patch: &Value,
    content: [u8; 32],
    seen: Option<String>,
    ctx: &Context,
) -> Result<Raced, ControllerError>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let key = format!("{}/{}", api.resource_url(), name);
    if let Some(resource_version) = ctx.applied.unchanged(&key, &content) {
        if seen.as_deref() == Some(resource_version.as_str()) {
            return Ok(Raced::No);
        }
        if let Some(live) = api.get_metadata_opt(name).await?
            && live.metadata.resource_version.as_deref() == Some(resource_version.as_str())
        {
            return Ok(Raced::No);
        }
    }
    // What the proxy enforces: only the leader writes it, and only a write
    // is fenced (an unchanged object costs no Lease read).
    ctx.fence(&key).await?;
    ctx.applied.begin(&key);
    let applied = match api
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(patch),
        )
        .await
    {
        Ok(applied) => applied,
        Err(e) => {
            // The failed reconcile is retried and reads the object again.
            let _ = ctx.applied.abandon(&key);
            return Err(e.into());
        }
    };
    match applied.meta().resource_version.clone() {
        Some(resource_version) => Ok(ctx.applied.finish(key, content, resource_version)),
        // No version to tell an echo by: whatever was held back is looked
        // at again.
        None => Ok(ctx.applied.abandon(&key)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox(template: Value) -> AgentSandbox {
        let mut sandbox: AgentSandbox = serde_json::from_value(json!({
            "apiVersion": "agentgate.dev/v1alpha1",
            "kind": "AgentSandbox",
            "metadata": {"name": "coder", "namespace": "team", "uid": "u-1"},
            "spec": {"agentServiceAccount": "coder-agent", "template": template},
        }))
        .expect("a valid sandbox");
        sandbox.metadata.resource_version = Some("7".into());
        sandbox
    }

    fn policy(ports: &[u16]) -> PolicyDocument {
        let endpoints: Vec<Value> = ports
            .iter()
            .map(|p| json!({"host": "api.example.com", "port": p}))
            .collect();
        serde_json::from_value(json!({
            "network": [{"name": "api", "endpoints": endpoints}],
        }))
        .expect("a valid policy")
    }

    fn objects(sandbox: &AgentSandbox, ports: &[u16], pod_spec: Option<PodSpec>) -> SandboxObjects {
        let files = BTreeMap::from([("policy.yaml".to_string(), "network: []".to_string())]);
        desired(Inputs {
            sandbox,
            effective: &policy(ports),
            policy_files: &files,
            operator_egress: None,
            pod_spec,
        })
    }

    fn controlled_by_the_sandbox(metadata: &Value) -> bool {
        metadata["labels"][SANDBOX_LABEL] == "coder"
            && metadata["ownerReferences"][0]["uid"] == "u-1"
            && metadata["ownerReferences"][0]["controller"] == true
    }

    #[test]
    fn every_owned_object_carries_the_label_and_the_sandbox_as_controller() {
        let sandbox = sandbox(json!({"spec": {"containers": [{"name": "agent", "image": "a"}]}}));
        let spec: PodSpec =
            serde_json::from_value(json!({"containers": [{"name": "agent", "image": "a"}]}))
                .expect("a pod spec");
        let objects = objects(&sandbox, &[443], Some(spec));
        assert_eq!(objects.config_map.name, "coder-policy");
        assert!(controlled_by_the_sandbox(
            &objects.config_map.object["metadata"]
        ));
        assert_eq!(objects.network_policy.name, "coder-egress");
        assert!(controlled_by_the_sandbox(
            &objects.network_policy.object["metadata"]
        ));
        let account = serde_json::to_value(&objects.account).expect("serialisable");
        assert_eq!(account["metadata"]["name"], "coder-agent");
        assert!(controlled_by_the_sandbox(&account["metadata"]));
        let pod = serde_json::to_value(objects.pod.expect("a pod")).expect("serialisable");
        assert_eq!(pod["metadata"]["name"], "coder");
        assert!(controlled_by_the_sandbox(&pod["metadata"]));
    }

    #[test]
    fn egress_is_dns_and_exactly_the_policys_ports() {
        let sandbox = sandbox(Value::Null);
        let egress = |ports: &[u16]| {
            objects(&sandbox, ports, None).network_policy.object["spec"]["egress"].clone()
        };
        assert_eq!(
            egress(&[]),
            json!([{"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}])
        );
        assert_eq!(
            egress(&[8443, 443, 8443])[1],
            json!({"ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 8443}]})
        );
    }

    #[test]
    fn the_pod_keeps_the_templates_labels_and_runs_as_the_agent_account() {
        let sandbox = sandbox(json!({
            "metadata": {"labels": {"app": "coder", SANDBOX_LABEL: "forged"}, "annotations": {"note": "kept"}},
            "spec": {"containers": [{"name": "agent", "image": "a"}]},
        }));
        let spec: PodSpec = serde_json::from_value(json!({
            "serviceAccount": "legacy-field",
            "containers": [{"name": "agent", "image": "a"}],
        }))
        .expect("a pod spec");
        let pod = objects(&sandbox, &[], Some(spec)).pod.expect("a pod");
        let labels = pod.metadata.labels.expect("labels");
        assert_eq!(labels.get("app").map(String::as_str), Some("coder"));
        // The sandbox's label is the controller's to set, not the template's.
        assert_eq!(labels.get(SANDBOX_LABEL).map(String::as_str), Some("coder"));
        assert_eq!(
            pod.metadata
                .annotations
                .and_then(|a| a.get("note").cloned())
                .as_deref(),
            Some("kept")
        );
        let spec = pod.spec.expect("a spec");
        assert_eq!(spec.service_account_name.as_deref(), Some("coder-agent"));
        assert_eq!(spec.service_account, None);
    }

    #[test]
    fn the_same_sandbox_declares_the_same_content() {
        let first = sandbox(Value::Null);
        let mut later = first.clone();
        // A new resourceVersion (a report, a status write) is no new content.
        later.metadata.resource_version = Some("8".into());
        let (a, b) = (objects(&first, &[443], None), objects(&later, &[443], None));
        assert_eq!(
            content_hash(&a.config_map.object),
            content_hash(&b.config_map.object)
        );
        assert_eq!(a.network_policy, b.network_policy);
        assert_ne!(
            content_hash(&a.network_policy.object),
            content_hash(&objects(&first, &[80], None).network_policy.object)
        );
    }
}
