//! AgentSandbox reconciler: finds the governing MaximumPolicies, proves the
//! effective policy inside each (revoking, rule by rule, whatever is not),
//! and materialises the result: `status.effectivePolicy`, `revision`,
//! `governedBy`, the `WithinMaximum`/`Ready` conditions, the `<name>-policy`
//! ConfigMap for the in-pod enforcement proxy, the agent's ServiceAccount
//! when it is missing, the agent Pod from
//! `spec.template`, the trifecta findings of its images (`status.findings`,
//! `FindingsClear`), and Events. It never writes `spec`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, PodSpec, Secret, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::controller::agent_account;
use crate::controller::revoke::{Revocation, revoke_until_within};
use crate::controller::sandbox_ca::{self, ca_bundle};
use crate::controller::{Context, ControllerError, FIELD_MANAGER};
use crate::k8s::conditions::{self, Status, Summary};
use crate::k8s::crd::{
    AgentSandbox, AgentSandboxStatus, AgentScan, AppliedProposal, FindingsSummary, MaximumPolicy,
    MaximumRef, PolicyProposal, Pruned,
};
use crate::k8s::governance::{Governance, governing_from};
use crate::k8s::openreports;
use crate::k8s::pod_template::{
    SANDBOX_LABEL, owning_sandbox, pod_service_account, template_escapes, template_images,
};
use crate::k8s::sandbox_pod::{
    DataPlane, enforced_pod_spec, network_policy_name, policy_config_map_name, shape_problems,
};
use crate::policy::compile::{Limits, Role, compile};
use crate::policy::compose::apply_proposal;
use crate::policy::findings::FindingRegions;
use crate::policy::load::CompiledDocument;
use crate::policy::model::PolicyDocument;
use crate::trifecta::assess::{assess_sandbox, findings_condition, image_digest, next_expiry};

/// Reads every MaximumPolicy and the sandbox's namespace from the API
/// server and returns the governing maximums, compiled.
pub async fn governance(
    sandbox: &AgentSandbox,
    ctx: &Context,
) -> Result<Governance, ControllerError> {
    let maximums: Api<MaximumPolicy> = Api::all(ctx.client.clone());
    let ns_labels: BTreeMap<String, String> = match sandbox.namespace() {
        Some(ns) => Api::<Namespace>::all(ctx.client.clone())
            .get(&ns)
            .await?
            .labels()
            .clone(),
        None => BTreeMap::new(),
    };
    let maximums = maximums.list(&ListParams::default()).await?;
    Ok(governing_from(
        maximums.iter(),
        &ns_labels,
        sandbox.labels(),
        ctx.allow_unmanaged,
        &ctx.maximums,
    ))
}

/// The declared policy with the committed proposals (in commit order) on
/// top, the commit records as they now stand, and one line per record
/// pruned now. A record grants only while its live proposal has the
/// recorded uid and change hash: a proposal deleted, or re-created under
/// the same name, loses its grant (nothing is ever taken from the
/// proposal's own status). A pruned record's removals keep applying, so
/// withdrawing a narrowing never widens, until the sandbox's declared spec
/// changes (a person declared the policy anew); then the record goes.
async fn with_applied_proposals(
    sandbox: &AgentSandbox,
    ctx: &Context,
) -> Result<(PolicyDocument, Vec<AppliedProposal>, Vec<String>), ControllerError> {
    let mut policy = sandbox.spec.policy.clone();
    let applied = sandbox
        .status
        .as_ref()
        .map(|s| s.applied_proposals.clone())
        .unwrap_or_default();
    let (mut kept, mut pruned) = (Vec::new(), Vec::new());
    if applied.is_empty() {
        return Ok((policy, kept, pruned));
    }
    let generation = sandbox.meta().generation;
    let proposals: Api<PolicyProposal> =
        Api::namespaced(ctx.client.clone(), &sandbox.namespace().unwrap_or_default());
    for mut record in applied {
        if let Some(done) = &record.pruned {
            if done.sandbox_generation == generation {
                without_rules(&mut policy, &record.removed);
                kept.push(record);
            }
            continue;
        }
        let live = proposals.get_opt(&record.name).await?;
        let outcome = live.filter(|p| record.matches(p)).map(|proposal| {
            apply_proposal(
                &policy,
                proposal.spec.add.as_ref(),
                proposal.spec.removed_rules(),
            )
        });
        let reason = match outcome {
            Some(Ok(next)) => {
                policy = next;
                kept.push(record);
                continue;
            }
            Some(Err(reason)) => format!("no longer applies: {reason}"),
            None => "deleted, re-created or changed since it was committed".to_string(),
        };
        tracing::warn!(sandbox = %sandbox.name_any(), proposal = %record.name, %reason, "committed proposal pruned; its grant is dropped");
        pruned.push(format!("{} ({reason})", record.name));
        without_rules(&mut policy, &record.removed);
        record.pruned = Some(Pruned {
            reason,
            sandbox_generation: generation,
        });
        kept.push(record);
    }
    Ok((policy, kept, pruned))
}

/// Removes the network rules named in `removed` (those still there).
fn without_rules(policy: &mut PolicyDocument, removed: &[String]) {
    policy.network.retain(|rule| !removed.contains(&rule.name));
}

async fn reconcile(
    sandbox: Arc<AgentSandbox>,
    ctx: Arc<Context>,
) -> Result<Action, ControllerError> {
    let name = sandbox.name_any();
    let namespace = sandbox.namespace().unwrap_or_default();
    if ctx.ignores(&namespace) {
        tracing::debug!(sandbox = %name, namespace = %namespace, "namespace excluded from agentgate; not reconciled");
        return Ok(Action::await_change());
    }
    let generation = sandbox.meta().generation;
    let (base, records, pruned) = with_applied_proposals(&sandbox, &ctx).await?;

    let (effective, governed_by, refusal, revoked) = match governance(&sandbox, &ctx).await? {
        Governance::Refused(reason, message) => (
            PolicyDocument::default(),
            Vec::new(),
            Some((reason, message)),
            Vec::new(),
        ),
        Governance::Governed(governing) => {
            let names: Vec<MaximumRef> = governing
                .iter()
                .map(|g| MaximumRef {
                    name: g.name.clone(),
                    generation: g.generation,
                })
                .collect();
            let maximums: Vec<(String, Arc<CompiledDocument>)> = governing
                .into_iter()
                .map(|g| (g.name, g.compiled))
                .collect();
            let prover = ctx.prover.clone();
            let started = std::time::Instant::now();
            let Revocation { kept, revoked } =
                tokio::task::spawn_blocking(move || revoke_until_within(&base, &maximums, &prover))
                    .await
                    .map_err(|e| ControllerError::Prover(e.to_string()))?;
            ctx.metrics
                .solver_seconds
                .observe(started.elapsed().as_secs_f64());
            (kept, names, None, revoked)
        }
    };

    // A template the operator cannot put into the enforced shape runs no
    // pod; Ready says why (the policy itself may still be committed).
    let pod_plan = pod_plan(&sandbox, &ctx.data_plane);
    let pod_refusal = pod_plan.as_ref().err();

    let mut status: AgentSandboxStatus = sandbox.status.clone().unwrap_or_default();
    let before = status.clone();
    let time = super::now();
    if status.effective_policy.as_ref() != Some(&effective) {
        status.revision += 1;
        status.effective_policy = Some(effective.clone());
    }
    status.applied_proposals = records;
    status.governed_by = governed_by.iter().map(|m| m.name.clone()).collect();
    status.verified_against = governed_by;
    let mut events = Vec::new();
    if !pruned.is_empty() {
        events.push((
            EventType::Warning,
            "Pruned",
            format!("dropped the grants of {}", pruned.join("; ")),
        ));
    }
    match (&refusal, revoked.is_empty()) {
        (Some((reason, message)), _) => {
            conditions::set(
                &mut status.conditions,
                "WithinMaximum",
                Status::False,
                reason,
                message,
                generation,
                &time,
            );
            events.push((EventType::Warning, *reason, message.clone()));
        }
        (None, true) => {
            let message = format!(
                "proved within {} governing maximum(s)",
                status.governed_by.len()
            );
            conditions::set(
                &mut status.conditions,
                "WithinMaximum",
                Status::True,
                "Proved",
                &message,
                generation,
                &time,
            );
        }
        (None, false) => {
            let message = format!(
                "revoked {}",
                revoked
                    .iter()
                    .map(|(grant, why)| format!("{grant} ({why})"))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            conditions::set(
                &mut status.conditions,
                "WithinMaximum",
                Status::False,
                "Revoked",
                &message,
                generation,
                &time,
            );
            events.push((EventType::Warning, "Revoked", message));
        }
    }
    status.observed_generation = generation;
    let mut runtime = Vec::new();
    let requeue = assess_findings(
        &sandbox,
        &effective,
        &mut status,
        &mut runtime,
        &mut events,
        &time,
        &ctx,
    )
    .await;
    // Ready, Reconciling and Stalled, from what was just decided.
    let summary = summary(&status, pod_refusal);
    if conditions::summarize(&mut status.conditions, &summary, generation, &time)
        && let Some((reason, _)) = pod_refusal.filter(|(reason, _)| *reason == summary.reason)
    {
        // A template that cannot run: an Event when that becomes the news.
        events.push((EventType::Warning, reason, summary.message.clone()));
    }

    let status_changed = status != before;
    if status_changed {
        // The status grants authority: only the leader writes it (the
        // ConfigMap, which the proxy enforces, is fenced in `apply`).
        ctx.fence(&format!("status of sandbox {namespace}/{name}"))
            .await?;
        // The sandbox's resourceVersion is the precondition: a proposal
        // committed meanwhile makes this write fail, and we start over.
        let api: Api<AgentSandbox> = Api::namespaced(ctx.client.clone(), &namespace);
        let mut next = (*sandbox).clone();
        next.status = Some(status.clone());
        match api
            .replace_status(&name, &PostParams::default(), &next)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {
                ctx.metrics.commit_conflicts.inc();
                return Ok(Action::requeue(Duration::from_millis(50)));
            }
            Err(e) => return Err(e.into()),
        }
        super::publish(&ctx, sandbox.as_ref(), "Verify", events).await;
    }
    if let Some(findings) = &status.findings {
        // Every reconcile: a Report deleted by hand or a CRD installed later
        // is (re)published without waiting for the findings to change.
        publish_report(&sandbox, findings, &ctx).await;
    }
    // Only what is committed reaches the enforcement proxy.
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let ca = sandbox_ca::ensure(&sandbox, owner(&sandbox), ctx.ca_lifetime, &secrets).await?;
    let requeue = sandbox_ca::next_step(&ca, ctx.ca_lifetime, time::OffsetDateTime::now_utc())
        .map_or(requeue, |step| requeue.min(step));
    let bundle = ca_bundle(&ca, time::OffsetDateTime::now_utc());
    apply_config_map(
        &sandbox,
        &effective,
        &runtime,
        &bundle,
        status.revision,
        &ctx,
    )
    .await?;
    apply_network_policy(&sandbox, &effective, &ctx).await?;
    // With or without a Pod: the account is also the agent's identity for
    // proposals (`kubectl create token`).
    let account = owned_metadata(&sandbox, &sandbox.spec.agent_service_account);
    agent_account::ensure(&sandbox, account, &ctx, status_changed).await?;
    let Ok(Some(pod_spec)) = pod_plan else {
        return Ok(Action::requeue(requeue));
    };
    if let Some(refusal) = ensure_pod(&sandbox, pod_spec, &ctx).await? {
        // Refused by admission (unfixed findings, usually): say so and look
        // again in 10 s; a policy or scan change brings us back at once.
        tracing::info!(sandbox = %name, namespace = %namespace, %refusal, "pod refused by admission");
        let notes = vec![(EventType::Warning, "PodRefused", refusal)];
        super::publish(&ctx, sandbox.as_ref(), "CreatePod", notes).await;
        return Ok(Action::requeue(Duration::from_secs(10)));
    }
    tracing::info!(sandbox = %name, namespace = %namespace, revision = status.revision, revoked = revoked.len(), "reconciled");
    Ok(Action::requeue(requeue))
}

/// Assesses the trifecta findings of the template's images against the
/// effective policy about to be committed: `status.findings` and the
/// `FindingsClear` condition. Returns when to look again (the next
/// acceptance expiry, at most five minutes). Never fails: the policy commit
/// (which may be a revocation) must not wait on the findings, so a failed
/// assessment is `FindingsClear=Unknown` with the reason, and the sandbox's
/// pods count as unfixed at admission meanwhile.
async fn assess_findings(
    sandbox: &AgentSandbox,
    effective: &PolicyDocument,
    status: &mut AgentSandboxStatus,
    runtime: &mut Vec<FindingRegions>,
    events: &mut Vec<super::Note>,
    time: &Time,
    ctx: &Context,
) -> Duration {
    let default = super::RESYNC;
    let Some(images) = template_images(&sandbox.spec) else {
        status.findings = None;
        status.conditions.retain(|c| c.type_ != "FindingsClear");
        return default;
    };
    let escapes = template_escapes(&sandbox.spec);
    if !escapes.is_empty() {
        // A pod that can step around the proxy and Landlock severs nothing,
        // whatever its policy says; it is not created either.
        let message = format!(
            "the pod template escapes the sandbox, so no finding counts as severed and no pod is created: {}",
            escapes.join("; ")
        );
        status.findings = None;
        if conditions::set(
            &mut status.conditions,
            "FindingsClear",
            Status::False,
            "TemplateEscapes",
            &message,
            sandbox.meta().generation,
            time,
        ) {
            events.push((EventType::Warning, "TemplateEscapes", message));
        }
        return default;
    }
    let now = Timestamp::now();
    let assessed = match Api::<AgentScan>::all(ctx.client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(scans) => {
            // A policy that does not compile severs nothing (fail closed).
            let policy = compile(effective, Role::Sandbox, &Limits::default()).ok();
            let accepted = sandbox.spec.accepted_findings.clone();
            let prover = ctx.prover.clone();
            let revision = status.revision;
            let started = std::time::Instant::now();
            let result = tokio::task::spawn_blocking(move || {
                let refs: Vec<&AgentScan> = scans.items.iter().collect();
                assess_sandbox(
                    &images,
                    &refs,
                    policy.as_ref(),
                    &prover,
                    &accepted,
                    now,
                    revision,
                )
            })
            .await
            .map_err(|e| format!("the assessment task failed: {e}"));
            ctx.metrics
                .solver_seconds
                .observe(started.elapsed().as_secs_f64());
            result
        }
        Err(e) => Err(format!("cannot list AgentScans: {e}")),
    };
    let (clear, reason, message) = match assessed {
        Ok((mut summary, regions)) => {
            *runtime = regions;
            cap_records(&mut summary);
            let (clear, reason, message) = findings_condition(&summary);
            status.findings = Some(summary);
            (Some(clear), reason, message)
        }
        Err(message) => {
            status.findings = None;
            (None, "AssessmentFailed", message)
        }
    };
    let changed = conditions::set(
        &mut status.conditions,
        "FindingsClear",
        match clear {
            Some(true) => Status::True,
            Some(false) => Status::False,
            None => Status::Unknown,
        },
        reason,
        &message,
        sandbox.meta().generation,
        time,
    );
    if changed {
        let type_ = if clear == Some(true) {
            EventType::Normal
        } else {
            EventType::Warning
        };
        events.push((type_, reason, message));
    }
    if clear.is_none() {
        return Duration::from_secs(10);
    }
    next_expiry(&sandbox.spec.accepted_findings, now)
        .map(|expiry| {
            let millis = expiry.as_millisecond().saturating_sub(now.as_millisecond());
            Duration::from_millis(u64::try_from(millis).unwrap_or(0).saturating_add(500))
        })
        .map_or(default, |wait| wait.min(default))
}

/// At most this many finding records per image in the status (the counts
/// stay exact): a scan with thousands of sinks must not push the sandbox
/// past the API server's object size limit and block its commits.
const MAX_RECORDS_PER_IMAGE: usize = 50;

fn cap_records(summary: &mut FindingsSummary) {
    for image in &mut summary.images {
        if image.findings.len() > MAX_RECORDS_PER_IMAGE {
            // Unfixed first, so what admission refuses is what is shown.
            image
                .findings
                .sort_by_key(|r| r.state != crate::k8s::crd::FindingState::Unfixed);
            image.findings.truncate(MAX_RECORDS_PER_IMAGE);
        }
    }
}

/// Publishes the findings as an OpenReports `Report` when that CRD is
/// installed; without it (404) there is nothing to do. Never fails the
/// reconcile: the report is a view, the sandbox status is the record.
async fn publish_report(sandbox: &AgentSandbox, findings: &FindingsSummary, ctx: &Context) {
    let name = sandbox.name_any();
    let namespace = sandbox.namespace().unwrap_or_default();
    let report = openreports::report(
        &name,
        &namespace,
        &sandbox.uid().unwrap_or_default(),
        &owner(sandbox),
        findings,
        Timestamp::now(),
    );
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("openreports.io", "v1alpha1", "Report"),
        "reports",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &resource);
    match api
        .patch(
            &openreports::report_name(&name),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&report),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {
            tracing::debug!(sandbox = %name, "OpenReports is not installed; no Report published");
        }
        Err(e) => {
            tracing::warn!(sandbox = %name, error = %e, "could not publish the OpenReports Report")
        }
    }
}

/// The metadata of an object the operator keeps for a sandbox: its name,
/// the sandbox's label and the sandbox as controlling owner.
fn owned_metadata(sandbox: &AgentSandbox, name: &str) -> serde_json::Value {
    json!({
        "name": name,
        "labels": {SANDBOX_LABEL: sandbox.name_any()},
        "ownerReferences": [owner(sandbox)],
    })
}

fn owner(sandbox: &AgentSandbox) -> serde_json::Value {
    json!({
        "apiVersion": "agentgate.dev/v1alpha1",
        "kind": "AgentSandbox",
        "name": sandbox.name_any(),
        "uid": sandbox.uid().unwrap_or_default(),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// The data plane's view: the committed effective policy, `findings.json`
/// (the sandbox's trifecta findings with the regions their tools reach,
/// which the proxy cites in refusals, docs/proxy.md) and `ca-bundle.pem`
/// (the sandbox CAs and the Mozilla roots, which the agent trusts).
async fn apply_config_map(
    sandbox: &AgentSandbox,
    effective: &PolicyDocument,
    findings: &[FindingRegions],
    ca_bundle: &str,
    revision: u64,
    ctx: &Context,
) -> Result<(), ControllerError> {
    let name = policy_config_map_name(&sandbox.name_any());
    let namespace = sandbox.namespace().unwrap_or_default();
    let yaml = serde_saphyr::to_string(effective)
        .map_err(|e| ControllerError::Prover(format!("rendering the policy: {e}")))?;
    let patch = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": owned_metadata(sandbox, &name),
        "data": {
            "policy.yaml": yaml,
            "findings.json": serde_json::to_string(findings)
                .map_err(|e| ControllerError::Prover(format!("rendering findings.json: {e}")))?,
            "ca-bundle.pem": ca_bundle,
            "revision": revision.to_string(),
        },
    });
    apply(
        Api::<ConfigMap>::namespaced(ctx.client.clone(), &namespace),
        &name,
        &patch,
        ctx,
    )
    .await
}

/// Server-side applies an object the operator owns outright, unless this
/// process applied the very same content before and the object has not
/// changed since (its resourceVersion, read as metadata only, is the one
/// that apply returned). A no-op apply of a policy ConfigMap (the CA
/// bundle makes it a few hundred KB) costs the API server far more than
/// that read, and a re-verification storm would otherwise rewrite every
/// one of them; anyone else's edit changes the resourceVersion, so drift
/// is still put right.
async fn apply<K>(
    api: Api<K>,
    name: &str,
    patch: &serde_json::Value,
    ctx: &Context,
) -> Result<(), ControllerError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let key = format!("{}/{}", api.resource_url(), name);
    let content = super::content_hash(patch);
    if let Some(resource_version) = ctx.applied.unchanged(&key, &content)
        && let Some(live) = api.get_metadata_opt(name).await?
        && live.metadata.resource_version.as_deref() == Some(resource_version.as_str())
    {
        return Ok(());
    }
    // What the proxy enforces: only the leader writes it, and only a write
    // is fenced (an unchanged object costs no Lease read).
    ctx.fence(&key).await?;
    let applied = api
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(patch),
        )
        .await?;
    if let Some(resource_version) = applied.meta().resource_version.clone() {
        ctx.applied.remember(key, content, resource_version);
    }
    Ok(())
}

/// The Pod spec to run: `None` without a template; the condition reason
/// and message when the template cannot be run in the enforced shape
/// (an escape, a container without a command, a reserved name).
fn pod_plan(
    sandbox: &AgentSandbox,
    data_plane: &DataPlane,
) -> Result<Option<PodSpec>, (&'static str, String)> {
    let Some(template) = sandbox.spec.template.as_ref().and_then(|t| t.spec.as_ref()) else {
        return Ok(None);
    };
    let escapes = template_escapes(&sandbox.spec);
    if !escapes.is_empty() {
        // The operator's pod rights are never lent to a pod that could
        // leave the sandbox.
        return Err((
            "TemplateEscapes",
            format!(
                "no pod is created: the template would step around the proxy or Landlock: {}",
                escapes.join("; ")
            ),
        ));
    }
    enforced_pod_spec(&sandbox.name_any(), template, data_plane)
        .map(Some)
        .map_err(|refusals| {
            let reason = refusals.first().map_or("TemplateRefused", |r| r.reason);
            let lines: Vec<String> = refusals.into_iter().map(|r| r.message).collect();
            (reason, format!("no pod is created: {}", lines.join("; ")))
        })
}

/// `Ready`, `Reconciling` and `Stalled` of a sandbox (docs/status.md), from
/// its domain conditions as just set and the template's refusal. In this
/// order, the first that applies decides: `WithinMaximum=False` (revoked
/// grants, a refused or unmanaged sandbox) stalls it with that condition's
/// reason and message, as does a template that cannot run in the enforced
/// shape (the first fix to make: no scan helps a pod that cannot be
/// built) and then `FindingsClear=False` (unfixed findings, an unscanned
/// image: its pods are refused); `FindingsClear=Unknown` (the assessment
/// failed; retried) is still reconciling; otherwise it is Ready
/// (`Committed`, at its revision).
fn summary(status: &AgentSandboxStatus, pod_refusal: Option<&(&'static str, String)>) -> Summary {
    let revision = format!("revision {}", status.revision);
    let with = |type_: &str, value: &str| {
        conditions::get(&status.conditions, type_).filter(|c| c.status == value)
    };
    if let Some(within) = with("WithinMaximum", "False") {
        return Summary::stalled_by(within);
    }
    if let Some((reason, refusal)) = pod_refusal {
        return Summary::stalled(reason, format!("{revision}; {refusal}"));
    }
    if let Some(findings) = with("FindingsClear", "False") {
        return Summary::stalled_by(findings);
    }
    if let Some(findings) = with("FindingsClear", "Unknown") {
        return Summary::reconciling(&findings.reason, findings.message.clone());
    }
    Summary::ready("Committed", revision)
}

/// The NetworkPolicy `<sandbox>-egress` (defence in depth behind the
/// proxy): the pod may open TCP connections only to the ports the
/// effective policy names, plus DNS.
async fn apply_network_policy(
    sandbox: &AgentSandbox,
    effective: &PolicyDocument,
    ctx: &Context,
) -> Result<(), ControllerError> {
    let name = network_policy_name(&sandbox.name_any());
    let ports: std::collections::BTreeSet<u16> = effective
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
    let patch = json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": owned_metadata(sandbox, &name),
        "spec": {
            "podSelector": {"matchLabels": {SANDBOX_LABEL: sandbox.name_any()}},
            "policyTypes": ["Egress"],
            "egress": egress,
        },
    });
    let namespace = sandbox.namespace().unwrap_or_default();
    apply(
        Api::<NetworkPolicy>::namespaced(ctx.client.clone(), &namespace),
        &name,
        &patch,
        ctx,
    )
    .await
}

/// Creates the agent Pod (`spec`, in the enforced shape) if it does not
/// exist. Returns the admission's message when the API server refuses it.
async fn ensure_pod(
    sandbox: &AgentSandbox,
    spec: PodSpec,
    ctx: &Context,
) -> Result<Option<String>, ControllerError> {
    let Some(template) = &sandbox.spec.template else {
        return Ok(None);
    };
    let name = sandbox.name_any();
    let pods: Api<Pod> =
        Api::namespaced(ctx.client.clone(), &sandbox.namespace().unwrap_or_default());
    if let Some(existing) = pods.get_opt(&name).await? {
        // A pod someone else created under the sandbox's name is not the
        // sandbox's pod, whatever it claims (an owner reference can be
        // copied): it must also carry the label and the enforced shape.
        // Say so, never adopt it.
        let owned = owning_sandbox(&existing)
            .is_some_and(|(_, uid)| Some(uid.as_str()) == sandbox.uid().as_deref());
        let labelled = existing
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SANDBOX_LABEL))
            == Some(&name);
        let problems = existing
            .spec
            .as_ref()
            .map(|s| shape_problems(s, &name, &ctx.data_plane))
            .unwrap_or_else(|| vec!["no spec".to_string()]);
        return Ok(if !owned || !labelled {
            Some(format!(
                "pod {name:?} exists but is not controlled by this sandbox (uid {}); delete it so the sandbox's own pod can be created",
                sandbox.uid().unwrap_or_default()
            ))
        } else if !problems.is_empty() {
            Some(format!(
                "pod {name:?} is not in the enforced shape (created by an older agentgate, or changed): {}; delete it and the operator creates it anew",
                problems.join("; ")
            ))
        } else {
            None
        });
    }
    let mut labels = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(SANDBOX_LABEL.into(), name.clone());
    let mut spec = spec;
    // The agent's pod acts as the agent unless the template names another
    // account (whose token it then may not mount).
    spec.service_account_name = Some(pod_service_account(&sandbox.spec));
    spec.service_account = None;
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": template.metadata.as_ref().and_then(|m| m.annotations.clone()),
            "ownerReferences": [owner(sandbox)],
        },
        "spec": spec,
    }))?;
    match pods
        .create(
            &PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PostParams::default()
            },
            &pod,
        )
        .await
    {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains("admission webhook") => {
            Ok(Some(e.message))
        }
        Err(e) => Err(e.into()),
    }
}

fn error_policy(sandbox: Arc<AgentSandbox>, error: &ControllerError, ctx: Arc<Context>) -> Action {
    super::retry_with_backoff("agentsandbox", sandbox.as_ref(), error, &ctx)
}

async fn counted(sandbox: Arc<AgentSandbox>, ctx: Arc<Context>) -> Result<Action, ControllerError> {
    super::counted("agentsandbox", sandbox, ctx, reconcile).await
}

/// Runs the AgentSandbox controller until shutdown. A MaximumPolicy change
/// re-verifies every sandbox; a namespace change those in it.
pub async fn run(ctx: Arc<Context>) {
    let sandboxes: Api<AgentSandbox> = Api::all(ctx.client.clone());
    let controller = Controller::new(sandboxes, watcher::Config::default());
    let store = controller.store();
    let by_namespace = store.clone();
    let by_scan = store.clone();
    super::drive(
        controller
            .owns(
                Api::<ConfigMap>::all(ctx.client.clone()),
                watcher::Config::default().labels(SANDBOX_LABEL),
            )
            // A deleted agent Pod is created again (and judged again by pod
            // admission) at once, not at the next periodic reconcile.
            .owns(
                Api::<Pod>::all(ctx.client.clone()),
                watcher::Config::default().labels(SANDBOX_LABEL),
            )
            // A deleted agent ServiceAccount is created again at once.
            .owns(
                Api::<ServiceAccount>::all(ctx.client.clone()),
                watcher::Config::default().labels(SANDBOX_LABEL),
            )
            .watches(
                Api::<MaximumPolicy>::all(ctx.client.clone()),
                watcher::Config::default(),
                move |_| {
                    store
                        .state()
                        .iter()
                        .map(|s| ObjectRef::from_obj(s.as_ref()))
                        .collect::<Vec<_>>()
                },
            )
            .watches(
                Api::<AgentScan>::all(ctx.client.clone()),
                watcher::Config::default(),
                move |scan| {
                    // Only the sandboxes whose template runs the scanned digest.
                    let digest = image_digest(&scan.spec.image);
                    by_scan
                        .state()
                        .iter()
                        .filter(|s| {
                            template_images(&s.spec).is_some_and(|images| {
                                images.iter().any(|i| image_digest(i) == digest)
                            })
                        })
                        .map(|s| ObjectRef::from_obj(s.as_ref()))
                        .collect::<Vec<_>>()
                },
            )
            // A committed proposal deleted or re-created loses its grant at once.
            .watches(
                Api::<PolicyProposal>::all(ctx.client.clone()),
                watcher::Config::default(),
                |proposal| {
                    proposal.namespace().map(|ns| {
                        ObjectRef::<AgentSandbox>::new(&proposal.spec.sandbox_ref.name).within(&ns)
                    })
                },
            )
            .watches(
                Api::<Namespace>::all(ctx.client.clone()),
                watcher::Config::default(),
                move |ns| {
                    let ns = ns.name_any();
                    by_namespace
                        .state()
                        .iter()
                        .filter(|s| s.namespace().as_deref() == Some(ns.as_str()))
                        .map(|s| ObjectRef::from_obj(s.as_ref()))
                        .collect::<Vec<_>>()
                },
            ),
        counted,
        error_policy,
        ctx,
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::conditions::State;

    fn status(conditions: &[(&str, Status, &str, &str)]) -> AgentSandboxStatus {
        let mut status = AgentSandboxStatus {
            revision: 7,
            ..AgentSandboxStatus::default()
        };
        let time = Time(Timestamp::from_second(0).unwrap_or_default());
        for (type_, value, reason, message) in conditions {
            conditions::set(
                &mut status.conditions,
                type_,
                *value,
                reason,
                message,
                Some(1),
                &time,
            );
        }
        status
    }

    #[test]
    fn the_first_thing_in_the_way_decides_ready() {
        let within = ("WithinMaximum", Status::True, "Proved", "proved");
        let clear = ("FindingsClear", Status::True, "NoUnfixedFindings", "none");
        let refusal = (
            "CommandRequired",
            "no pod is created: add command".to_string(),
        );

        let good = summary(&status(&[within, clear]), None);
        assert_eq!(good, Summary::ready("Committed", "revision 7"));
        // No template: no FindingsClear at all.
        assert_eq!(summary(&status(&[within]), None), good);

        let revoked = ("WithinMaximum", Status::False, "Revoked", "revoked x");
        let unfixed = (
            "FindingsClear",
            Status::False,
            "UnfixedFindings",
            "finding y",
        );
        let failed = (
            "FindingsClear",
            Status::Unknown,
            "AssessmentFailed",
            "cannot list",
        );
        assert_eq!(
            summary(&status(&[revoked, unfixed]), Some(&refusal)),
            Summary::stalled("Revoked", "revoked x")
        );
        assert_eq!(
            summary(&status(&[within, unfixed]), Some(&refusal)),
            Summary::stalled(
                "CommandRequired",
                "revision 7; no pod is created: add command"
            ),
            "the template first: no scan makes it runnable"
        );
        assert_eq!(
            summary(&status(&[within, unfixed]), None),
            Summary::stalled("UnfixedFindings", "finding y")
        );
        assert_eq!(
            summary(&status(&[within, failed]), Some(&refusal)),
            Summary::stalled(
                "CommandRequired",
                "revision 7; no pod is created: add command"
            )
        );
        let waiting = summary(&status(&[within, failed]), None);
        assert_eq!(waiting.state, State::Reconciling);
        assert_eq!(waiting.reason, "AssessmentFailed");
    }
}
