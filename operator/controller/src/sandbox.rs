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

use futures::TryStreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, PodSpec, Secret, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use agentgate_api::crd::ENFORCED_CONDITION as ENFORCED;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::utils::PredicateConfig;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::revoke::{revoke, revoked_message};
use crate::sandbox_ca::{self, sandbox_cas_pem};
use crate::{Context, ControllerError, Raced, Views, applied_key};
use crate::{agent_account, owned};
use agentgate_api::conditions::{self, Status, Summary};
use agentgate_api::crd::SANDBOX_LABEL;
use agentgate_api::crd::{
    AcceptedFinding, AgentSandbox, AgentSandboxStatus, AgentScan, AppliedProposal, FindingsSummary,
    MaximumPolicy, MaximumRef, PolicyProposal, Pruned,
};
use agentgate_api::openreports;
use agentgate_governance::findings::{
    SandboxRisk, assess_sandbox, findings_condition, next_expiry,
};
use agentgate_governance::governing::{Governance, governing_from};
use agentgate_governance::pod_template::{owning_sandbox, template_escapes, template_images};
use agentgate_governance::sandbox_pod::{
    CREDENTIALS_FILE_NAME, DataPlane, enforced_pod_spec, shape_problems,
};
use agentgate_governance::verdict::Revocation;
use agentgate_judgement::findings::FindingRegions;
use agentgate_k8s::FIELD_MANAGER;
use agentgate_k8s::k8s::cache::{is_ready, reflect_spec_changes, reflect_triggers, reflected};
use agentgate_policy::compile::{Limits, Role, compile};
use agentgate_policy::compose::apply_proposal;
use agentgate_policy::model::PolicyDocument;
use agentgate_trifecta::image::image_digest;

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

/// The governing maximums, compiled, from the watch-fed views; `None` when
/// the views have not listed yet.
fn governance_in_view(sandbox: &AgentSandbox, ctx: &Context) -> Option<Governance> {
    let views = ctx.views.get()?;
    if !(is_ready(&views.maximums) && is_ready(&views.namespaces)) {
        return None;
    }
    let ns_labels = match sandbox.namespace() {
        Some(ns) => views
            .namespaces
            .get(&ObjectRef::new(&ns))
            .map(|n| n.labels().clone())?,
        None => BTreeMap::new(),
    };
    let maximums = views.maximums.state();
    Some(governing_from(
        maximums.iter().map(Arc::as_ref),
        &ns_labels,
        sandbox.labels(),
        ctx.allow_unmanaged,
        &ctx.maximums,
    ))
}

/// Where a reconcile reads the governing maximums, the namespace and the
/// committed proposals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reads {
    /// The watch-fed views: enough for a verdict that grants nothing the
    /// committed policy does not already grant (a proposal the view does
    /// not show as recorded is still read, [`live_proposals`]).
    InView,
    /// The API server: for a verdict that would grant more.
    Fresh,
}

/// The declared policy with the committed proposals (in commit order) on
/// top, as [`stack_proposals`] builds it.
#[derive(Debug, Clone, PartialEq)]
struct StackedPolicy {
    /// What is to be proved: the declared policy, the grants of every
    /// commit that still holds, less the removals of every commit record.
    policy: PolicyDocument,
    /// The commit records as they now stand.
    records: Vec<AppliedProposal>,
    /// The grants this reconcile drops.
    pruned: Vec<PrunedGrant>,
}

/// A committed proposal whose grant is dropped now, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PrunedGrant {
    /// The proposal's name.
    proposal: String,
    /// Why its grant no longer holds.
    reason: String,
}

/// Reads the live proposals of the sandbox's commit records and stacks
/// them on the declared policy ([`stack_proposals`]).
async fn with_applied_proposals(
    sandbox: &AgentSandbox,
    reads: Reads,
    ctx: &Context,
) -> Result<StackedPolicy, ControllerError> {
    let live = live_proposals(sandbox, reads, ctx).await?;
    Ok(stack_proposals(sandbox, &live))
}

/// The PolicyProposals, by name, that the sandbox's commit records not yet
/// pruned name, as they are now (a deleted one is absent).
///
/// With [`Reads::InView`], a proposal the proposals' view shows exactly as
/// its record names it (uid and change hash) is taken from there: a stale
/// view can only keep a grant already committed until the watch event that
/// brings it up to date starts the next reconcile, which the proposal
/// watch does for every recorded proposal. Anything else (absent, another
/// object, another change) is read from the API server, so a grant is
/// never pruned on a stale view; with [`Reads::Fresh`] every one is.
async fn live_proposals(
    sandbox: &AgentSandbox,
    reads: Reads,
    ctx: &Context,
) -> Result<BTreeMap<String, PolicyProposal>, ControllerError> {
    let records: BTreeMap<&str, &AppliedProposal> = sandbox
        .status
        .iter()
        .flat_map(|s| s.applied_proposals.iter())
        .filter(|record| record.pruned.is_none())
        .map(|record| (record.name.as_str(), record))
        .collect();
    if records.is_empty() {
        return Ok(BTreeMap::new());
    }
    let namespace = sandbox.namespace().unwrap_or_default();
    let view = match reads {
        Reads::InView => ctx
            .views
            .get()
            .map(|views| &views.proposals)
            .filter(|store| is_ready(store)),
        Reads::Fresh => None,
    };
    let (mut live, unread) = split_by_view(records, |name| {
        view.and_then(|store| store.get(&ObjectRef::new(name).within(&namespace)))
    });
    let proposals: Api<PolicyProposal> = Api::namespaced(ctx.client.clone(), &namespace);
    for name in unread {
        if let Some(proposal) = proposals.get_opt(name).await? {
            live.insert(name.to_string(), proposal);
        }
    }
    Ok(live)
}

/// The recorded proposals `in_view` shows exactly as their record names
/// them (uid and change hash), by name, and the names of the rest, which
/// are to be read from the API server.
fn split_by_view<'a>(
    records: BTreeMap<&'a str, &AppliedProposal>,
    in_view: impl Fn(&str) -> Option<Arc<PolicyProposal>>,
) -> (BTreeMap<String, PolicyProposal>, Vec<&'a str>) {
    let mut found = BTreeMap::new();
    let mut unread = Vec::new();
    for (name, record) in records {
        match in_view(name).filter(|proposal| record.matches(proposal)) {
            Some(proposal) => {
                found.insert(name.to_string(), proposal.as_ref().clone());
            }
            None => unread.push(name),
        }
    }
    (found, unread)
}

/// The declared policy with the committed proposals (in commit order) on
/// top, the commit records as they now stand, and the records pruned now.
/// A record grants only while its live proposal (in `live`, by name) has
/// the recorded uid and change hash: a proposal deleted, or re-created
/// under the same name, loses its grant (nothing is ever taken from the
/// proposal's own status). A pruned record's removals keep applying, so
/// withdrawing a narrowing never widens, until the sandbox's declared spec
/// changes (a person declared the policy anew); then the record goes.
fn stack_proposals(
    sandbox: &AgentSandbox,
    live: &BTreeMap<String, PolicyProposal>,
) -> StackedPolicy {
    let mut stacked = StackedPolicy {
        policy: sandbox.spec.policy.clone(),
        records: Vec::new(),
        pruned: Vec::new(),
    };
    let applied = sandbox
        .status
        .as_ref()
        .map(|s| s.applied_proposals.clone())
        .unwrap_or_default();
    let generation = sandbox.meta().generation;
    for mut record in applied {
        if let Some(done) = &record.pruned {
            if done.sandbox_generation == generation {
                without_rules(&mut stacked.policy, &record.removed);
                stacked.records.push(record);
            }
            continue;
        }
        let outcome = live
            .get(&record.name)
            .filter(|p| record.matches(p))
            .map(|proposal| {
                apply_proposal(
                    &stacked.policy,
                    proposal.spec.add.as_ref(),
                    proposal.spec.removed_rules(),
                )
            });
        let reason = match outcome {
            Some(Ok(next)) => {
                stacked.policy = next;
                stacked.records.push(record);
                continue;
            }
            Some(Err(reason)) => format!("no longer applies: {reason}"),
            None => "deleted, re-created or changed since it was committed".to_string(),
        };
        stacked.pruned.push(PrunedGrant {
            proposal: record.name.clone(),
            reason: reason.clone(),
        });
        without_rules(&mut stacked.policy, &record.removed);
        record.pruned = Some(Pruned {
            reason,
            sandbox_generation: generation,
        });
        stacked.records.push(record);
    }
    stacked
}

/// Removes the network rules named in `removed` (those still there).
fn without_rules(policy: &mut PolicyDocument, removed: &[String]) {
    policy.network.retain(|rule| !removed.contains(&rule.name));
}

/// What proving the stacked policy within the governing maximums found.
#[derive(Debug, Clone, PartialEq)]
struct Verification {
    /// What may be committed: the stacked policy less whatever was revoked
    /// (nothing at all when the sandbox is refused).
    effective: PolicyDocument,
    /// The governing maximums, at the generation proved within.
    governed_by: Vec<MaximumRef>,
    /// What `WithinMaximum` says.
    within: Within,
}

/// How the effective policy stands against the governing maximums.
#[derive(Debug, Clone, PartialEq)]
enum Within {
    /// Refused before any proof (no governing maximum, an invalid one, a
    /// selector that cannot be evaluated): nothing is granted.
    Refused {
        /// The condition reason, e.g. `Unmanaged`.
        reason: &'static str,
        /// Why, in one line.
        message: String,
    },
    /// Every grant is proved within every governing maximum.
    Proved,
    /// These grants were taken out, each with its counterexample.
    Revoked(Vec<(String, String)>),
}

impl Verification {
    /// A sandbox refused before any proof: an empty effective policy.
    fn refused(reason: &'static str, message: String) -> Self {
        Self {
            effective: PolicyDocument::default(),
            governed_by: Vec::new(),
            within: Within::Refused { reason, message },
        }
    }

    /// What revocation left of the policy under `governed_by`.
    fn proved(governed_by: Vec<MaximumRef>, revocation: Revocation) -> Self {
        let Revocation { kept, revoked } = revocation;
        Self {
            effective: kept,
            governed_by,
            within: if revoked.is_empty() {
                Within::Proved
            } else {
                Within::Revoked(revoked)
            },
        }
    }

    /// How many grants were revoked.
    fn revoked_count(&self) -> usize {
        match &self.within {
            Within::Revoked(revoked) => revoked.len(),
            Within::Refused { .. } | Within::Proved => 0,
        }
    }
}

/// Reads the governing maximums and proves `policy` within them, revoking,
/// rule by rule, whatever is not.
async fn verify(
    sandbox: &AgentSandbox,
    policy: PolicyDocument,
    reads: Reads,
    ctx: &Context,
) -> Result<Verification, ControllerError> {
    let in_view = match reads {
        Reads::InView => governance_in_view(sandbox, ctx),
        Reads::Fresh => None,
    };
    let governance = match in_view {
        Some(governance) => governance,
        None => governance(sandbox, ctx).await?,
    };
    let governing = match governance {
        Governance::Refused(reason, message) => return Ok(Verification::refused(reason, message)),
        Governance::Governed(governing) => governing,
    };
    let governed_by: Vec<MaximumRef> = governing
        .iter()
        .map(|g| MaximumRef {
            name: g.name.clone(),
            generation: g.generation,
        })
        .collect();
    let revocation = revoke(ctx, policy, governing).await?;
    Ok(Verification::proved(governed_by, revocation))
}

/// The revision `effective` is committed as: the committed one when it is
/// unchanged, the next one otherwise.
fn next_revision(committed: Option<&AgentSandboxStatus>, effective: &PolicyDocument) -> u64 {
    let revision = committed.map_or(0, |s| s.revision);
    if committed.and_then(|s| s.effective_policy.as_ref()) == Some(effective) {
        revision
    } else {
        revision + 1
    }
}

/// What assessing the trifecta findings of the template's images found.
enum FindingsAssessment {
    /// No template: no images, nothing to assess.
    NoTemplate,
    /// The template escapes the sandbox (these ways): nothing is severed.
    TemplateEscapes(Vec<String>),
    /// Assessed at `at` against the effective policy.
    Assessed {
        /// The findings of every image.
        summary: FindingsSummary,
        /// The regions their tools reach, for the proxy's refusals.
        regions: Vec<FindingRegions>,
        /// When (acceptances are judged at this time).
        at: Timestamp,
    },
    /// The assessment could not be made: why.
    Failed(String),
}

impl FindingsAssessment {
    /// The findings' regions the proxy cites (none unless assessed).
    fn regions(&self) -> &[FindingRegions] {
        match self {
            FindingsAssessment::Assessed { regions, .. } => regions,
            _ => &[],
        }
    }
}

/// Assesses the trifecta findings of the template's images against the
/// effective policy about to be committed as `revision`. Never fails: the
/// policy commit (which may be a revocation) must not wait on the
/// findings, so a failed assessment is [`FindingsAssessment::Failed`].
async fn assess_findings(
    sandbox: &AgentSandbox,
    effective: &PolicyDocument,
    revision: u64,
    ctx: &Context,
) -> FindingsAssessment {
    let Some(images) = template_images(&sandbox.spec) else {
        return FindingsAssessment::NoTemplate;
    };
    let escapes = template_escapes(&sandbox.spec);
    if !escapes.is_empty() {
        return FindingsAssessment::TemplateEscapes(escapes);
    }
    let now = Timestamp::now();
    // The scans come from the watch-fed view: a stale one is only as wrong
    // as doing nothing, since the change it lacks starts the next reconcile
    // (docs/design.md §5). Listing every scan on every reconcile made a
    // tightened ceiling cost the API server a LIST of all AgentScans per
    // governed sandbox. Before the views exist, they are listed.
    let scans: Vec<Arc<AgentScan>> = match ctx.views.get() {
        Some(views) => views.scans.state(),
        None => match Api::<AgentScan>::all(ctx.client.clone())
            .list(&ListParams::default())
            .await
        {
            Ok(scans) => scans.items.into_iter().map(Arc::new).collect(),
            Err(e) => return FindingsAssessment::Failed(format!("cannot list AgentScans: {e}")),
        },
    };
    // A policy that does not compile severs nothing (fail closed).
    let policy = compile(effective, Role::Sandbox, &Limits::default()).ok();
    let accepted = sandbox.spec.accepted_findings.clone();
    let labels = sandbox.spec.tool_labels.clone();
    let credentials = sandbox.spec.credentials.clone();
    let prover = ctx.prover.clone();
    let result = ctx
        .solve(move || {
            let started = std::time::Instant::now();
            let refs: Vec<&AgentScan> = scans.iter().map(AsRef::as_ref).collect();
            let risk = SandboxRisk {
                accepted: &accepted,
                labels: &labels,
                credentials: &credentials,
            };
            let assessed = assess_sandbox(
                &images,
                &refs,
                policy.as_ref(),
                &prover,
                risk,
                now,
                revision,
            );
            (assessed, started.elapsed())
        })
        .await
        .map(|(assessed, took)| {
            ctx.metrics.solver_seconds.observe(took.as_secs_f64());
            assessed
        });
    match result {
        Ok((summary, regions)) => FindingsAssessment::Assessed {
            summary,
            regions,
            at: now,
        },
        Err(e) => FindingsAssessment::Failed(format!("the assessment task failed: {e}")),
    }
}

/// What a reconcile observed of one sandbox: everything [`desired_status`]
/// decides on.
struct Observed<'a> {
    /// The sandbox as read.
    sandbox: &'a AgentSandbox,
    /// Its commit records as they now stand ([`stack_proposals`]).
    records: &'a [AppliedProposal],
    /// The grants pruned now.
    pruned: &'a [PrunedGrant],
    /// The effective policy and how it stands against the maximums.
    verification: &'a Verification,
    /// The trifecta findings of the template's images.
    findings: &'a FindingsAssessment,
    /// Why the template cannot run in the enforced shape, if it cannot.
    pod_refusal: Option<&'a PodRefusal>,
    /// Each declared credential's reach and availability.
    credentials: &'a [agentgate_api::crd::CredentialReach],
    /// The time conditions that change now carry.
    time: &'a Time,
}

/// The status a reconcile decides on, and what it says about it.
#[derive(Debug)]
struct DesiredStatus {
    /// The whole status to write.
    status: AgentSandboxStatus,
    /// Whether it differs from the status read (no write otherwise).
    changed: bool,
    /// The Events to publish once it is written.
    events: Vec<super::Note>,
    /// When the findings want another look (an acceptance expiring, a
    /// failed assessment).
    requeue: Duration,
}

/// The sandbox status that follows from what was observed: the effective
/// policy at its revision, the commit records, the governing maximums,
/// `WithinMaximum`, the findings and `FindingsClear`, and `Ready`,
/// `Reconciling` and `Stalled`; with the Events that say what changed.
fn desired_status(observed: &Observed<'_>) -> DesiredStatus {
    let Observed {
        sandbox,
        records,
        pruned,
        verification,
        findings,
        pod_refusal,
        credentials,
        time,
    } = *observed;
    let generation = sandbox.meta().generation;
    let before = sandbox.status.clone().unwrap_or_default();
    let mut status = before.clone();
    status.revision = next_revision(sandbox.status.as_ref(), &verification.effective);
    status.effective_policy = Some(verification.effective.clone());
    status.applied_proposals = records.to_vec();
    status.governed_by = verification
        .governed_by
        .iter()
        .map(|m| m.name.clone())
        .collect();
    status.verified_against = verification.governed_by.clone();
    let mut events = Vec::new();
    if !pruned.is_empty() {
        let grants: Vec<String> = pruned
            .iter()
            .map(|p| format!("{} ({})", p.proposal, p.reason))
            .collect();
        events.push((
            EventType::Warning,
            "Pruned",
            format!("dropped the grants of {}", grants.join("; ")),
        ));
    }
    set_within_maximum(
        &mut status,
        &verification.within,
        generation,
        time,
        &mut events,
    );
    status.observed_generation = generation;
    let requeue = set_findings(
        &mut status,
        findings,
        &sandbox.spec.accepted_findings,
        generation,
        time,
        &mut events,
    );
    let requeue = set_credentials(&mut status, credentials, generation, time, &mut events)
        .map_or(requeue, |wait| wait.min(requeue));
    // Ready, Reconciling and Stalled, from what was just decided.
    let summary = summary(&status, pod_refusal);
    if conditions::summarize(&mut status.conditions, &summary, generation, time)
        && let Some(refusal) = pod_refusal.filter(|refusal| refusal.reason == summary.reason)
    {
        // A template that cannot run: an Event when that becomes the news.
        events.push((EventType::Warning, refusal.reason, summary.message.clone()));
    }
    DesiredStatus {
        changed: status != before,
        status,
        events,
        requeue,
    }
}

/// Sets a domain condition and, when it changes, announces it as an Event:
/// Normal when it turns True, Warning otherwise.
fn announce_condition(
    status: &mut AgentSandboxStatus,
    (type_, value, reason, message): (&str, Status, &'static str, String),
    generation: Option<i64>,
    time: &Time,
    events: &mut Vec<super::Note>,
) {
    if conditions::set(
        &mut status.conditions,
        type_,
        value,
        reason,
        &message,
        generation,
        time,
    ) {
        let event = if value == Status::True {
            EventType::Normal
        } else {
            EventType::Warning
        };
        events.push((event, reason, message));
    }
}

/// How long a Pod has to confirm a committed policy over the policy stream
/// before the sandbox says it does not, with an Event naming the Pod.
pub const ENFORCE_BOUND: Duration = Duration::from_secs(10);

/// Sets `Enforced` while the Pod has not confirmed the committed policy
/// (docs/status.md): False, `Pending`, naming the Pod and the revision; once
/// [`ENFORCE_BOUND`] has passed since the commit, `NotConfirmed` with a
/// Warning Event. The Pod's report sets it True (`Applied`,
/// `/v1/policy/applied`). Returns when to look again.
fn set_enforced(
    status: &mut AgentSandboxStatus,
    pod: &str,
    generation: Option<i64>,
    time: &Time,
    now: Timestamp,
    events: &mut Vec<super::Note>,
) -> Option<Duration> {
    let digest = status.policy_digest.clone()?;
    let confirmed = status
        .pods
        .iter()
        .any(|p| p.name == pod && p.digest == digest);
    if confirmed {
        return None;
    }
    let enforced = status.pods.iter().find(|p| p.name == pod).map_or_else(
        || "it has confirmed none".to_string(),
        |p| format!("it enforces revision {}", p.revision),
    );
    let waited = status
        .policy_committed_at
        .as_deref()
        .and_then(|t| t.parse::<Timestamp>().ok())
        .map_or(Duration::ZERO, |at| {
            Duration::try_from(now.duration_since(at)).unwrap_or(Duration::ZERO)
        });
    let revision = status.revision;
    if waited < ENFORCE_BOUND {
        conditions::set(
            &mut status.conditions,
            ENFORCED,
            Status::False,
            "Pending",
            &format!("Pod {pod} has not yet confirmed revision {revision}; {enforced}"),
            generation,
            time,
        );
        return Some(ENFORCE_BOUND - waited + Duration::from_millis(100));
    }
    announce_condition(
        status,
        (
            ENFORCED,
            Status::False,
            "NotConfirmed",
            format!(
                "Pod {pod} has not confirmed revision {revision} within {} s of its commit; {enforced}",
                ENFORCE_BOUND.as_secs()
            ),
        ),
        generation,
        time,
        events,
    );
    Some(ENFORCE_BOUND)
}

/// How soon a sandbox with an unavailable credential looks at its Secrets
/// again (they are read, not watched).
const CREDENTIAL_RECHECK: Duration = Duration::from_secs(30);

/// Sets `status.credentials` and `CredentialsAvailable` (docs/status.md):
/// False, naming each credential the proxy cannot attach and why, when a
/// Secret or key is missing or its value cannot travel in its attach
/// form; absent when the sandbox declares none. Returns when to look again.
fn set_credentials(
    status: &mut AgentSandboxStatus,
    credentials: &[agentgate_api::crd::CredentialReach],
    generation: Option<i64>,
    time: &Time,
    events: &mut Vec<super::Note>,
) -> Option<Duration> {
    status.credentials = credentials.to_vec();
    if credentials.is_empty() {
        status
            .conditions
            .retain(|c| c.type_ != "CredentialsAvailable");
        return None;
    }
    let missing: Vec<String> = credentials
        .iter()
        .filter_map(|c| c.reason.as_ref().map(|why| format!("{}: {why}", c.name)))
        .collect();
    let (value, reason, message) = if missing.is_empty() {
        (
            Status::True,
            "Available",
            format!(
                "the proxy can attach every credential ({})",
                credentials.len()
            ),
        )
    } else {
        (
            Status::False,
            "CredentialUnavailable",
            format!(
                "requests carrying these credentials are refused until they can be attached: {}",
                missing.join("; ")
            ),
        )
    };
    announce_condition(
        status,
        ("CredentialsAvailable", value, reason, message),
        generation,
        time,
        events,
    );
    (value != Status::True).then_some(CREDENTIAL_RECHECK)
}

/// Sets `WithinMaximum` from `within`, with an Event for a refusal or a
/// revocation.
fn set_within_maximum(
    status: &mut AgentSandboxStatus,
    within: &Within,
    generation: Option<i64>,
    time: &Time,
    events: &mut Vec<super::Note>,
) {
    let (value, reason, message) = match within {
        Within::Refused { reason, message } => {
            events.push((EventType::Warning, *reason, message.clone()));
            (Status::False, *reason, message.clone())
        }
        Within::Proved => (
            Status::True,
            "Proved",
            format!(
                "proved within {} governing maximum(s)",
                status.governed_by.len()
            ),
        ),
        Within::Revoked(revoked) => {
            let message = revoked_message(revoked);
            events.push((EventType::Warning, "Revoked", message.clone()));
            (Status::False, "Revoked", message)
        }
    };
    conditions::set(
        &mut status.conditions,
        "WithinMaximum",
        value,
        reason,
        &message,
        generation,
        time,
    );
}

/// Sets `status.findings` and the `FindingsClear` condition from the
/// assessment, with an Event when the condition changes. Returns when to
/// look again: the next acceptance expiry (at most [`super::RESYNC`]), or
/// 10 s after a failed assessment (`FindingsClear=Unknown`, with the
/// reason; the sandbox's pods count as unfixed at admission meanwhile).
fn set_findings(
    status: &mut AgentSandboxStatus,
    assessment: &FindingsAssessment,
    accepted: &[AcceptedFinding],
    generation: Option<i64>,
    time: &Time,
    events: &mut Vec<super::Note>,
) -> Duration {
    let default = super::RESYNC;
    let (value, reason, message) = match assessment {
        FindingsAssessment::NoTemplate => {
            status.findings = None;
            status.conditions.retain(|c| c.type_ != "FindingsClear");
            return default;
        }
        FindingsAssessment::TemplateEscapes(escapes) => {
            // A pod that can step around the proxy and Landlock severs
            // nothing, whatever its policy says; it is not created either.
            status.findings = None;
            (
                Status::False,
                "TemplateEscapes",
                format!(
                    "the pod template escapes the sandbox, so no finding counts as severed and no pod is created: {}",
                    escapes.join("; ")
                ),
            )
        }
        FindingsAssessment::Assessed { summary, .. } => {
            let mut summary = summary.clone();
            cap_records(&mut summary);
            let (clear, reason, message) = findings_condition(&summary);
            status.findings = Some(summary);
            let value = if clear { Status::True } else { Status::False };
            (value, reason, message)
        }
        FindingsAssessment::Failed(message) => {
            status.findings = None;
            (Status::Unknown, "AssessmentFailed", message.clone())
        }
    };
    announce_condition(
        status,
        ("FindingsClear", value, reason, message),
        generation,
        time,
        events,
    );
    match assessment {
        FindingsAssessment::Failed(_) => Duration::from_secs(10),
        FindingsAssessment::Assessed { at, .. } => next_expiry(accepted, *at)
            .map(|expiry| {
                let millis = expiry.as_millisecond().saturating_sub(at.as_millisecond());
                Duration::from_millis(u64::try_from(millis).unwrap_or(0).saturating_add(500))
            })
            .map_or(default, |wait| wait.min(default)),
        FindingsAssessment::NoTemplate | FindingsAssessment::TemplateEscapes(_) => default,
    }
}

/// Observes the sandbox (its commits still granted, the proofs within the
/// governing maximums, the findings), decides its status
/// ([`desired_status`]), writes it, and then materialises what is
/// committed: the data plane, the agent's account and Pod.
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

    // Observe.
    let StackedPolicy {
        policy,
        records,
        pruned,
    } = with_applied_proposals(&sandbox, Reads::InView, &ctx).await?;
    // The views serve a verdict that keeps or narrows what is committed (a
    // stale view can then only be as wrong as doing nothing, and the watch
    // event that brings it up to date starts the next reconcile); one that
    // would grant more is proved again on fresh reads, of the proposals too.
    let mut verification = verify(&sandbox, policy, Reads::InView, &ctx).await?;
    let committed = sandbox
        .status
        .as_ref()
        .and_then(|s| s.effective_policy.as_ref());
    let (records, pruned) =
        if committed.is_some_and(|committed| verification.effective.grants_only_from(committed)) {
            (records, pruned)
        } else {
            ctx.metrics.fresh_reverifications.inc();
            let fresh = with_applied_proposals(&sandbox, Reads::Fresh, &ctx).await?;
            verification = verify(&sandbox, fresh.policy, Reads::Fresh, &ctx).await?;
            (fresh.records, fresh.pruned)
        };
    for grant in &pruned {
        tracing::warn!(sandbox = %name, proposal = %grant.proposal, reason = %grant.reason, "committed proposal pruned; its grant is dropped");
    }
    // A template the operator cannot put into the enforced shape runs no
    // pod; Ready says why (the policy itself may still be committed).
    let pod_plan = pod_plan(&sandbox, &ctx.data_plane);
    let revision = next_revision(sandbox.status.as_ref(), &verification.effective);
    let findings = assess_findings(&sandbox, &verification.effective, revision, &ctx).await;
    let credentials = credential_reach(&sandbox, &verification.effective, &ctx).await?;

    let (plane, ca_step) = data_plane_content(
        &sandbox,
        &verification.effective,
        findings.regions(),
        revision,
        &ctx,
    )
    .await?;

    // Decide.
    let mut desired = desired_status(&Observed {
        sandbox: &sandbox,
        records: &records,
        pruned: &pruned,
        verification: &verification,
        findings: &findings,
        pod_refusal: pod_plan.as_ref().err(),
        credentials: &credentials,
        time: &super::now(),
    });

    // The digest of what the proxy will read is committed with the policy.
    if desired.status.policy_digest.as_deref() != Some(plane.digest.as_str()) {
        desired.status.policy_digest = Some(plane.digest.clone());
        desired.status.policy_committed_at = Some(Timestamp::now().to_string());
        desired.changed = true;
    }
    if ctx.data_plane.policy_stream.is_some() && matches!(pod_plan, Ok(Some(_))) {
        let before = desired.status.clone();
        let mut events = Vec::new();
        let again = set_enforced(
            &mut desired.status,
            &name,
            sandbox.meta().generation,
            &super::now(),
            Timestamp::now(),
            &mut events,
        );
        if desired.status != before {
            desired.changed = true;
            desired.events.extend(events);
        }
        if let Some(again) = again {
            desired.requeue = desired.requeue.min(again);
        }
    }

    let objects = owned::desired(owned::Inputs {
        sandbox: &sandbox,
        effective: &verification.effective,
        policy_files: &plane.data,
        operator_egress: ctx.approvals.as_ref().map(|a| a.egress()),
        pod_spec: pod_plan.ok().flatten(),
    });

    // Act: the status first; only what is committed reaches the data plane,
    // and it does so next, before the Events and the Report: the policy
    // stream pushes a commit once its ConfigMap is written, and a
    // revocation waits for nothing a person reads later.
    let mut raced = Raced::No;
    if desired.changed {
        match write_status(&sandbox, &desired.status, &ctx).await? {
            StatusWrite::Conflict => return Ok(Action::requeue(Duration::from_millis(50))),
            StatusWrite::Written(status_raced) => raced = status_raced,
        }
    }
    let applied = apply_data_plane(&sandbox, &objects, &ctx).await;
    // The commit's Events are told even when the data plane write fails:
    // the retry finds the status written and has none to tell.
    if desired.changed {
        super::publish(&ctx, sandbox.as_ref(), "Verify", desired.events).await;
    }
    raced = raced.or(applied?);
    if let Some(findings) = &desired.status.findings {
        // Checked every reconcile, so that a Report deleted by hand or a CRD
        // installed later is (re)published without waiting for the findings
        // to change; applied only then, or when the findings change.
        publish_report(&sandbox, findings, &ctx).await;
    }
    let requeue = after_writes(
        ca_step.map_or(desired.requeue, |step| desired.requeue.min(step)),
        raced,
    );
    // With or without a Pod: the account is also the agent's identity for
    // proposals (`kubectl create token`).
    agent_account::ensure(&sandbox, &objects.account, &ctx, desired.changed).await?;
    let Some(pod) = &objects.pod else {
        return Ok(Action::requeue(requeue));
    };
    if let Some(refusal) = ensure_pod(&sandbox, pod, &ctx).await? {
        // Refused by admission (unfixed findings, usually): say so and look
        // again in 10 s; a policy or scan change brings us back at once.
        tracing::info!(sandbox = %name, namespace = %namespace, %refusal, "pod refused by admission");
        let notes = vec![(EventType::Warning, "PodRefused", refusal)];
        super::publish(&ctx, sandbox.as_ref(), "CreatePod", notes).await;
        return Ok(Action::requeue(after_writes(
            Duration::from_secs(10),
            raced,
        )));
    }
    tracing::info!(sandbox = %name, namespace = %namespace, revision = desired.status.revision, revoked = verification.revoked_count(), "reconciled");
    Ok(Action::requeue(requeue))
}

/// When to reconcile again: at once when someone else's write raced one
/// of ours (its trigger was held back), else as decided.
fn after_writes(requeue: Duration, raced: Raced) -> Duration {
    match raced {
        Raced::Yes => Duration::ZERO,
        Raced::No => requeue,
    }
}

/// Whether a status write landed.
enum StatusWrite {
    /// Written; whether someone else's write raced it.
    Written(Raced),
    /// The sandbox changed since it was read (a proposal committed
    /// meanwhile): start over.
    Conflict,
}

/// Writes the sandbox's status, with the resourceVersion it was read at
/// as the precondition.
async fn write_status(
    sandbox: &AgentSandbox,
    status: &AgentSandboxStatus,
    ctx: &Context,
) -> Result<StatusWrite, ControllerError> {
    let name = sandbox.name_any();
    let namespace = sandbox.namespace().unwrap_or_default();
    // The status grants authority: only the leader writes it (the
    // ConfigMap, which the proxy enforces, is fenced in `apply`).
    ctx.fence(&format!("status of sandbox {namespace}/{name}"))
        .await?;
    // The sandbox's resourceVersion is the precondition: a proposal
    // committed meanwhile makes this write fail, and we start over.
    let api: Api<AgentSandbox> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut next = sandbox.clone();
    next.status = Some(status.clone());
    let key = format!("{namespace}/{name}");
    ctx.status_writes.begin(&key);
    match api
        .replace_status(&name, &PostParams::default(), &next)
        .await
    {
        // Its watch event needs no reconcile: this one goes on to
        // materialise what it wrote.
        Ok(written) => Ok(StatusWrite::Written(match written.resource_version() {
            Some(rv) => ctx.status_writes.finish(key, rv),
            None => ctx.status_writes.abandon(&key),
        })),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let _ = ctx.status_writes.abandon(&key);
            ctx.metrics.commit_conflicts.inc();
            Ok(StatusWrite::Conflict)
        }
        Err(e) => {
            let _ = ctx.status_writes.abandon(&key);
            Err(e.into())
        }
    }
}

/// What the enforcement proxy reads, before it is committed: the sandbox
/// CA (issued or rotated) and the `<name>-policy` ConfigMap's data with its
/// digest, which the status records so that the policy stream pushes only
/// what the operator wrote. Returns when the CA next needs a step, if it
/// does.
async fn data_plane_content(
    sandbox: &AgentSandbox,
    effective: &PolicyDocument,
    regions: &[FindingRegions],
    revision: u64,
    ctx: &Context,
) -> Result<(PolicyMapData, Option<Duration>), ControllerError> {
    let secrets: Api<Secret> =
        Api::namespaced(ctx.client.clone(), &sandbox.namespace().unwrap_or_default());
    let ca = sandbox_ca::ensure(sandbox, owned::owner(sandbox), ctx.ca_lifetime, &secrets).await?;
    let ca_step = sandbox_ca::next_step(&ca, ctx.ca_lifetime, time::OffsetDateTime::now_utc());
    let cas = sandbox_cas_pem(&ca, time::OffsetDateTime::now_utc());
    let data = config_map_data(sandbox, effective, regions, &cas, revision, ctx).await?;
    Ok((data, ca_step))
}

/// Puts the committed content where the enforcement proxy reads it: the
/// ConfigMap and the egress NetworkPolicy.
async fn apply_data_plane(
    sandbox: &AgentSandbox,
    objects: &owned::SandboxObjects,
    ctx: &Context,
) -> Result<Raced, ControllerError> {
    let namespace = sandbox.namespace().unwrap_or_default();
    let config_map = owned::apply(ctx, &namespace, &objects.config_map).await?;
    let network_policy = owned::apply(ctx, &namespace, &objects.network_policy).await?;
    Ok(config_map.or(network_policy))
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
                .sort_by_key(|r| r.state != agentgate_api::crd::FindingState::Unfixed);
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
        &owned::owner(sandbox),
        findings,
        Timestamp::now(),
    );
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("openreports.io", "v1alpha1", "Report"),
        "reports",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &resource);
    // The content is the findings and the owner, not the report's time: a
    // reconcile that finds the same findings applies nothing (a metadata
    // read sees that the Report is still there, as this process left it).
    let content = super::content_hash(&json!({
        "findings": findings,
        "owner": owned::owner(sandbox),
    }));
    match owned::apply_patch(
        api,
        &openreports::report_name(&name),
        &report,
        content,
        None,
        ctx,
    )
    .await
    {
        // Reports are watched by no one here: no trigger is held back.
        Ok(_) => {}
        Err(ControllerError::Kube(kube::Error::Api(e))) if e.code == 404 => {
            tracing::debug!(sandbox = %name, "OpenReports is not installed; no Report published");
        }
        Err(e) => {
            tracing::warn!(sandbox = %name, error = %e, "could not publish the OpenReports Report")
        }
    }
}

/// Each declared credential's reach in the effective policy and whether
/// the proxy can attach it: the operator reads each named Secret (a get
/// per Secret, never a list) to tell, and keeps nothing of its data.
async fn credential_reach(
    sandbox: &AgentSandbox,
    effective: &PolicyDocument,
    ctx: &Context,
) -> Result<Vec<agentgate_api::crd::CredentialReach>, ControllerError> {
    let declared = &sandbox.spec.credentials;
    if declared.is_empty() {
        return Ok(Vec::new());
    }
    let api: Api<Secret> =
        Api::namespaced(ctx.client.clone(), &sandbox.namespace().unwrap_or_default());
    let mut secrets = std::collections::BTreeMap::new();
    for name in declared.iter().map(|c| c.secret_ref.name.clone()) {
        if secrets.contains_key(&name) {
            continue;
        }
        let data = api.get_opt(&name).await?.map(|secret| {
            secret
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(key, value)| (key, value.0))
                .collect::<std::collections::BTreeMap<String, Vec<u8>>>()
        });
        secrets.insert(name, data);
    }
    Ok(agentgate_governance::credentials::reach(
        declared, effective, &secrets,
    ))
}

/// The policy ConfigMap's files and their digest
/// ([`agentgate_judgement::delivery::digest`]).
struct PolicyMapData {
    data: std::collections::BTreeMap<String, String>,
    digest: String,
}

/// The data plane's view: the committed effective policy, `findings.json`
/// (the sandbox's trifecta findings with the regions their tools reach,
/// which the proxy cites in refusals, docs/proxy.md), `sandbox-ca.pem`
/// (the sandbox CAs, to which the proxy adds the Mozilla roots in the
/// bundle the agent trusts) and, with an approval service or the policy
/// stream, `approvals-ca.pem` (the roots that verify the operator's
/// server).
async fn config_map_data(
    sandbox: &AgentSandbox,
    effective: &PolicyDocument,
    findings: &[FindingRegions],
    sandbox_cas: &str,
    revision: u64,
    ctx: &Context,
) -> Result<PolicyMapData, ControllerError> {
    let yaml = serde_saphyr::to_string(effective)
        .map_err(|e| ControllerError::Prover(format!("rendering the policy: {e}")))?;
    // The sandbox's choice for every flow its findings predict.
    let mode = sandbox.spec.runtime_trifecta.unwrap_or_default();
    let findings: Vec<FindingRegions> = findings
        .iter()
        .cloned()
        .map(|mut f| {
            if let Some(flow) = &mut f.runtime {
                flow.mode = mode;
            }
            f
        })
        .collect();
    let mut data = std::collections::BTreeMap::new();
    data.insert("policy.yaml".to_string(), yaml);
    data.insert(
        "findings.json".to_string(),
        serde_json::to_string(&findings)
            .map_err(|e| ControllerError::Prover(format!("rendering findings.json: {e}")))?,
    );
    data.insert("sandbox-ca.pem".to_string(), sandbox_cas.to_string());
    data.insert(
        agentgate_judgement::delivery::REVISION_KEY.to_string(),
        revision.to_string(),
    );
    // Where each credential comes from and how it travels (no secret):
    // the proxy attaches, agentgate-exec sets the placeholders.
    if !sandbox.spec.credentials.is_empty() {
        data.insert(
            CREDENTIALS_FILE_NAME.to_string(),
            serde_json::to_string(&sandbox.spec.credentials).map_err(|e| {
                ControllerError::Prover(format!("rendering {CREDENTIALS_FILE_NAME}: {e}"))
            })?,
        );
    }
    // The roots the proxy verifies the operator's server with (approval
    // service, policy stream); until the webhook configuration carries
    // them, held calls are refused and the stream is not used.
    if let Some(approvals) = &ctx.approvals
        && let Some(ca) = approvals.ca_bundle(&ctx.client).await
    {
        data.insert("approvals-ca.pem".to_string(), ca);
    }
    let digest = agentgate_judgement::delivery::digest(&data);
    Ok(PolicyMapData { data, digest })
}

/// Why a template cannot be run in the enforced shape.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PodRefusal {
    /// The condition reason, e.g. `CommandRequired`.
    reason: &'static str,
    /// `no pod is created: ...`, naming every problem.
    message: String,
}

/// The Pod spec to run: `None` without a template; why not when the
/// template cannot be run in the enforced shape (an escape, a container
/// without a command, a reserved name).
fn pod_plan(sandbox: &AgentSandbox, data_plane: &DataPlane) -> Result<Option<PodSpec>, PodRefusal> {
    let Some(template) = sandbox.spec.template.as_ref().and_then(|t| t.spec.as_ref()) else {
        return Ok(None);
    };
    let escapes = template_escapes(&sandbox.spec);
    if !escapes.is_empty() {
        // The operator's pod rights are never lent to a pod that could
        // leave the sandbox.
        return Err(PodRefusal {
            reason: "TemplateEscapes",
            message: format!(
                "no pod is created: the template would step around the proxy or Landlock: {}",
                escapes.join("; ")
            ),
        });
    }
    enforced_pod_spec(
        &sandbox.name_any(),
        template,
        data_plane,
        &sandbox.spec.credentials,
    )
    .map(Some)
    .map_err(|refusals| {
        let reason = refusals.first().map_or("TemplateRefused", |r| r.reason);
        let lines: Vec<String> = refusals.into_iter().map(|r| r.message).collect();
        PodRefusal {
            reason,
            message: format!("no pod is created: {}", lines.join("; ")),
        }
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
fn summary(status: &AgentSandboxStatus, pod_refusal: Option<&PodRefusal>) -> Summary {
    let revision = format!("revision {}", status.revision);
    let with = |type_: &str, value: &str| {
        conditions::get(&status.conditions, type_).filter(|c| c.status == value)
    };
    if let Some(within) = with("WithinMaximum", "False") {
        return Summary::stalled_by(within);
    }
    if let Some(refusal) = pod_refusal {
        return Summary::stalled(refusal.reason, format!("{revision}; {}", refusal.message));
    }
    if let Some(credentials) = with("CredentialsAvailable", "False") {
        return Summary::stalled_by(credentials);
    }
    if let Some(findings) = with("FindingsClear", "False") {
        return Summary::stalled_by(findings);
    }
    if let Some(findings) = with("FindingsClear", "Unknown") {
        return Summary::reconciling(&findings.reason, findings.message.clone());
    }
    Summary::ready("Committed", revision)
}

/// Creates the agent Pod (as declared, in the enforced shape) if it does
/// not exist; one that exists is checked, never adopted or changed. Returns the admission's message when the API server refuses it.
async fn ensure_pod(
    sandbox: &AgentSandbox,
    pod: &Pod,
    ctx: &Context,
) -> Result<Option<String>, ControllerError> {
    let name = sandbox.name_any();
    let namespace = sandbox.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    // A Pod found in the enforced shape and controlled by this sandbox is
    // not read again while the Pod watch shows it at the same version: a
    // revocation over a fleet then costs no Pod read per sandbox. Any
    // change to the Pod (a new one under the name included) moves its
    // version, and it is read and checked again.
    let key = super::applied_key::<Pod>(Some(&namespace), &name);
    let checked = super::content_hash(&json!({ "controller": sandbox.uid() }));
    if let Some(version) = ctx.applied.unchanged(&key, &checked)
        && owned::seen_version::<Pod>(ctx, &namespace, &name).is_some_and(|seen| seen == version)
    {
        return Ok(None);
    }
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
        if owned
            && labelled
            && problems.is_empty()
            && let Some(version) = existing.resource_version()
        {
            ctx.applied.remember(key, checked, version);
        }
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
    match pods
        .create(
            &PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PostParams::default()
            },
            pod,
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

/// A filter passing on the owned objects' watch events except the echoes
/// of this process's own applies.
fn not_own_apply<K>(
    ctx: &Arc<Context>,
) -> impl FnMut(&PartialObjectMeta<K>) -> std::future::Ready<bool> + Send + 'static
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let ctx = ctx.clone();
    move |object| {
        let key = applied_key::<K>(object.namespace().as_deref(), &object.name_any());
        let own = object
            .resource_version()
            .is_some_and(|rv| ctx.applied.is_own(&key, &rv));
        std::future::ready(!own)
    }
}

/// A hash of everything in a sandbox but its resourceVersion, its managed
/// fields and what the Pods' reports write (`status.pods`, the `Enforced`
/// condition): equal for two versions that differ only by reports.
fn apart_from_reports(sandbox: &AgentSandbox) -> Option<u64> {
    let mut value = serde_json::to_value(sandbox).ok()?;
    if let Some(metadata) = value.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        metadata.remove("resourceVersion");
        metadata.remove("managedFields");
    }
    if let Some(status) = value.get_mut("status").and_then(|s| s.as_object_mut()) {
        status.remove("pods");
        if let Some(conditions) = status.get_mut("conditions").and_then(|c| c.as_array_mut()) {
            conditions.retain(|c| c.get("type").and_then(|t| t.as_str()) != Some(ENFORCED));
        }
    }
    // Printed from the typed object, field by field in declaration order:
    // the same content prints the same.
    let digest = super::content_hash(&value);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    Some(u64::from_le_bytes(first))
}

/// Runs the AgentSandbox controller until shutdown. A MaximumPolicy's spec
/// change re-verifies every sandbox; a namespace's label change those in
/// it. The echo of the controller's own status write, or of its own apply
/// of a policy ConfigMap or egress NetworkPolicy, starts nothing: the
/// reconcile that wrote it goes on to materialise it.
pub async fn run(ctx: Arc<Context>) {
    let client = ctx.client.clone();
    let echoes = ctx.clone();
    let (store, sandboxes) = reflected(watcher(
        Api::<AgentSandbox>::all(client.clone()),
        watcher::Config::default(),
    ));
    // A proxy's report (`status.pods` and `Enforced`, written by the
    // policy stream's endpoint) changes nothing this reconciler reads: it
    // starts none. With a fleet, one commit otherwise costs a second
    // reconcile per Pod, just as the revocation is being pushed. Before the
    // echo filter, so that the hash remembered is that of our own write.
    let sandboxes = sandboxes
        .applied_objects()
        .predicate_filter(apart_from_reports, PredicateConfig::default())
        .try_filter(move |sandbox| {
            let key = format!(
                "{}/{}",
                sandbox.namespace().unwrap_or_default(),
                sandbox.name_any()
            );
            let echo = sandbox
                .resource_version()
                .is_some_and(|rv| echoes.status_writes.echo(&key, &rv));
            std::future::ready(!echo)
        });
    let (config_maps, config_map_changes) = reflect_triggers(watcher(
        Api::<PartialObjectMeta<ConfigMap>>::all(client.clone()),
        watcher::Config::default().labels(SANDBOX_LABEL),
    ));
    let config_map_changes = config_map_changes.try_filter(not_own_apply::<ConfigMap>(&ctx));
    let (network_policies, network_policy_changes) = reflect_triggers(watcher(
        Api::<PartialObjectMeta<NetworkPolicy>>::all(client.clone()),
        watcher::Config::default().labels(SANDBOX_LABEL),
    ));
    let network_policy_changes =
        network_policy_changes.try_filter(not_own_apply::<NetworkPolicy>(&ctx));
    let (maximums, maximum_changes) = reflect_spec_changes(watcher(
        Api::<MaximumPolicy>::all(client.clone()),
        watcher::Config::default(),
    ));
    let (namespaces, namespace_changes) = reflect_spec_changes(watcher(
        Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
        watcher::Config::default(),
    ));
    let (accounts, account_changes) = reflect_triggers(watcher(
        Api::<PartialObjectMeta<ServiceAccount>>::all(client.clone()),
        watcher::Config::default().labels(SANDBOX_LABEL),
    ));
    let (proposals, proposal_changes) = reflect_triggers(watcher(
        Api::<PolicyProposal>::all(client.clone()),
        watcher::Config::default(),
    ));
    let (scans, scan_changes) = reflect_triggers(watcher(
        Api::<AgentScan>::all(client.clone()),
        watcher::Config::default(),
    ));
    let (pods, pod_changes) = reflect_triggers(watcher(
        Api::<PartialObjectMeta<Pod>>::all(client.clone()),
        watcher::Config::default().labels(SANDBOX_LABEL),
    ));
    if ctx
        .views
        .set(Views {
            maximums,
            namespaces,
            accounts,
            config_maps,
            network_policies,
            proposals,
            scans,
            pods,
        })
        .is_err()
    {
        tracing::warn!("the sandbox controller's views were set before; the first are kept");
    }
    let by_maximum = store.clone();
    let by_namespace = store.clone();
    let by_scan = store.clone();
    let by_proposal = store.clone();
    let controller = Controller::for_stream(sandboxes, store);
    super::drive(
        controller
            // A policy ConfigMap or egress NetworkPolicy changed or deleted
            // by anyone else is put right at once.
            .owns_stream(config_map_changes)
            .owns_stream(network_policy_changes)
            // A deleted agent Pod is created again (and judged again by pod
            // admission) at once, not at the next periodic reconcile.
            .owns_stream(pod_changes)
            // A deleted agent ServiceAccount is created again at once.
            .owns_stream(account_changes)
            .watches_stream(maximum_changes, move |_| {
                by_maximum
                    .state()
                    .iter()
                    .map(|s| ObjectRef::from_obj(s.as_ref()))
                    .collect::<Vec<_>>()
            })
            .watches_stream(scan_changes, move |scan| {
                // Only the sandboxes whose template runs the scanned digest.
                let digest = image_digest(&scan.spec.image);
                by_scan
                    .state()
                    .iter()
                    .filter(|s| {
                        template_images(&s.spec)
                            .is_some_and(|images| images.iter().any(|i| image_digest(i) == digest))
                    })
                    .map(|s| ObjectRef::from_obj(s.as_ref()))
                    .collect::<Vec<_>>()
            })
            // A committed proposal deleted or re-created loses its grant at
            // once. Only the proposals a commit record names can change the
            // sandbox (the reconcile reads no other): creating one, or its
            // review, triggers nothing here, which spares a reconcile per
            // commit. A record the store does not show yet comes with a
            // change of the sandbox itself, whose reconcile reads the live
            // proposals then. The same watch fills the proposals' view,
            // before its event reaches here.
            .watches_stream(proposal_changes, move |proposal| {
                let ns = proposal.namespace()?;
                let sandbox =
                    ObjectRef::<AgentSandbox>::new(&proposal.spec.sandbox_ref.name).within(&ns);
                let name = proposal.name_any();
                let recorded = by_proposal.get(&sandbox).is_some_and(|s| {
                    s.status.as_ref().is_some_and(|status| {
                        status
                            .applied_proposals
                            .iter()
                            .any(|r| r.pruned.is_none() && r.name == name)
                    })
                });
                recorded.then_some(sandbox)
            })
            .watches_stream(namespace_changes, move |ns| {
                let ns = ns.name_any();
                by_namespace
                    .state()
                    .iter()
                    .filter(|s| s.namespace().as_deref() == Some(ns.as_str()))
                    .map(|s| ObjectRef::from_obj(s.as_ref()))
                    .collect::<Vec<_>>()
            }),
        counted,
        error_policy,
        ctx,
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentgate_api::conditions::State;

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
        let refusal = PodRefusal {
            reason: "CommandRequired",
            message: "no pod is created: add command".to_string(),
        };

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

    /// A rule `name` letting `/usr/bin/gh` reach api.github.com:443.
    fn rule(name: &str) -> serde_json::Value {
        json!({
            "name": name,
            "binaries": ["/usr/bin/gh"],
            "endpoints": [{"host": "api.github.com", "ports": [443]}],
        })
    }

    fn policy_of(rules: &[&str]) -> PolicyDocument {
        let network: Vec<serde_json::Value> = rules.iter().map(|name| rule(name)).collect();
        serde_json::from_value(json!({
            "network": network,
            "filesystem": {"readOnly": ["/app"]},
        }))
        .unwrap()
    }

    /// A Pod's report (its entry in `status.pods`, `Enforced`, a new
    /// resourceVersion) starts no reconcile; anything else the sandbox
    /// carries does, the status included (a status edited by anyone else
    /// is put right).
    #[test]
    fn only_reports_leave_the_reconcile_hash_alone() {
        let committed = {
            let mut s = status(&[("WithinMaximum", Status::True, "Proved", "within")]);
            s.revision = 4;
            s.policy_digest = Some("sha256:a".into());
            s
        };
        let mut before = sandbox_with(&["GET /a"], Some(committed));
        before.metadata.resource_version = Some("10".into());
        let hash = apart_from_reports(&before).unwrap();

        let mut reported = before.clone();
        reported.metadata.resource_version = Some("11".into());
        let status = reported.status.as_mut().unwrap();
        status.pods.push(agentgate_api::crd::PodEnforcement {
            name: "bot".into(),
            revision: 4,
            digest: "sha256:a".into(),
            applied_at: "2026-12-07T04:00:00Z".into(),
        });
        status.conditions = agentgate_governance::enforcement::applied_conditions(
            &status.conditions,
            Some(2),
            &Timestamp::from_second(1_800_000_000).unwrap(),
        );
        assert_eq!(apart_from_reports(&reported), Some(hash));

        let mut tampered = reported.clone();
        tampered.status.as_mut().unwrap().policy_digest = Some("sha256:b".into());
        assert_ne!(apart_from_reports(&tampered), Some(hash));
        let mut edited = reported.clone();
        edited.spec.policy = policy_of(&["GET /a", "POST /b"]);
        assert_ne!(apart_from_reports(&edited), Some(hash));
        let mut labelled = reported;
        labelled
            .metadata
            .labels
            .get_or_insert_default()
            .insert("team".into(), "a".into());
        assert_ne!(apart_from_reports(&labelled), Some(hash));
    }

    /// Sandbox `bot` at generation 2 declaring `rules`, with `status`.
    fn sandbox_with(rules: &[&str], status: Option<AgentSandboxStatus>) -> AgentSandbox {
        let mut sandbox: AgentSandbox = serde_json::from_value(json!({
            "apiVersion": "agentgate.dev/v1alpha1",
            "kind": "AgentSandbox",
            "metadata": {"name": "bot", "namespace": "agents", "uid": "sandbox-uid", "generation": 2},
            "spec": {"agentServiceAccount": "bot", "policy": policy_of(rules)},
        }))
        .unwrap();
        sandbox.status = status;
        sandbox
    }

    fn ceiling() -> Vec<MaximumRef> {
        vec![MaximumRef {
            name: "org-ceiling".into(),
            generation: 3,
        }]
    }

    fn proved(rules: &[&str]) -> Verification {
        Verification {
            effective: policy_of(rules),
            governed_by: ceiling(),
            within: Within::Proved,
        }
    }

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(second).unwrap())
    }

    /// `desired_status` with nothing pruned and the records kept as read.
    fn decide(
        sandbox: &AgentSandbox,
        verification: &Verification,
        findings: &FindingsAssessment,
        pod_refusal: Option<&PodRefusal>,
        time: &Time,
    ) -> DesiredStatus {
        let records = sandbox
            .status
            .as_ref()
            .map(|s| s.applied_proposals.clone())
            .unwrap_or_default();
        desired_status(&Observed {
            sandbox,
            records: &records,
            pruned: &[],
            verification,
            findings,
            pod_refusal,
            credentials: &[],
            time,
        })
    }

    /// The status, reason and message of the condition `type_`.
    fn condition(status: &AgentSandboxStatus, type_: &str) -> Option<(String, String, String)> {
        conditions::get(&status.conditions, type_)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    }

    fn is(value: &str, reason: &str, message: &str) -> Option<(String, String, String)> {
        Some((value.into(), reason.into(), message.into()))
    }

    fn clean_assessment(at: Timestamp) -> FindingsAssessment {
        FindingsAssessment::Assessed {
            summary: FindingsSummary {
                revision: Some(1),
                ..FindingsSummary::default()
            },
            regions: Vec::new(),
            at,
        }
    }

    fn record(
        id: &str,
        state: agentgate_api::crd::FindingState,
    ) -> agentgate_api::crd::FindingRecord {
        agentgate_api::crd::FindingRecord {
            id: id.into(),
            sink: "post_comment".into(),
            severity: agentgate_api::scan::Severity::High,
            state,
            message: format!("{id}: issue text reaches post_comment"),
            fix: "restrict tool post_comment".into(),
            severed_by: Vec::new(),
            accepted_until: None,
        }
    }

    #[test]
    fn a_policy_proved_within_its_maximums_is_committed_and_ready() {
        let sandbox = sandbox_with(&["read"], None);
        let desired = decide(
            &sandbox,
            &proved(&["read"]),
            &FindingsAssessment::NoTemplate,
            None,
            &at(10),
        );
        let status = &desired.status;
        assert!(desired.changed);
        assert_eq!(status.revision, 1);
        assert_eq!(status.effective_policy, Some(policy_of(&["read"])));
        assert_eq!(status.governed_by, vec!["org-ceiling".to_string()]);
        assert_eq!(status.verified_against, ceiling());
        assert_eq!(status.observed_generation, Some(2));
        assert_eq!(
            condition(status, "WithinMaximum"),
            is("True", "Proved", "proved within 1 governing maximum(s)")
        );
        assert_eq!(
            condition(status, "Ready"),
            is("True", "Committed", "revision 1")
        );
        for absent in ["Reconciling", "Stalled", "FindingsClear"] {
            assert_eq!(condition(status, absent), None, "{absent}");
        }
        assert_eq!(status.findings, None);
        assert!(desired.events.is_empty(), "{:?}", desired.events);
        assert_eq!(desired.requeue, super::super::RESYNC);

        // Reconciled again with nothing new: the same status, no write.
        let again = sandbox_with(&["read"], Some(desired.status.clone()));
        let unchanged = decide(
            &again,
            &proved(&["read"]),
            &FindingsAssessment::NoTemplate,
            None,
            &at(20),
        );
        assert!(!unchanged.changed);
        assert_eq!(unchanged.status, desired.status);
    }

    #[test]
    fn revoked_grants_are_named_with_their_counterexample_and_stall_the_sandbox() {
        let committed = decide(
            &sandbox_with(&["read", "write"], None),
            &proved(&["read", "write"]),
            &FindingsAssessment::NoTemplate,
            None,
            &at(10),
        )
        .status;
        let why = "exceeds MaximumPolicy \"org-ceiling\": POST https://api.github.com:443/repos/acme by /usr/bin/gh (layer rest) is not allowed";
        let verification = Verification {
            effective: policy_of(&["read"]),
            governed_by: ceiling(),
            within: Within::Revoked(vec![("network rule \"write\"".into(), why.into())]),
        };
        let sandbox = sandbox_with(&["read", "write"], Some(committed));
        let desired = decide(
            &sandbox,
            &verification,
            &FindingsAssessment::NoTemplate,
            None,
            &at(20),
        );
        let message = format!("revoked network rule \"write\" ({why})");
        let status = &desired.status;
        assert_eq!(status.revision, 2, "a revocation is a new revision");
        assert_eq!(status.effective_policy, Some(policy_of(&["read"])));
        assert_eq!(
            condition(status, "WithinMaximum"),
            is("False", "Revoked", &message)
        );
        assert_eq!(condition(status, "Ready"), is("False", "Revoked", &message));
        assert_eq!(
            condition(status, "Stalled"),
            is("True", "Revoked", &message)
        );
        assert_eq!(condition(status, "Reconciling"), None);
        assert_eq!(
            desired.events,
            vec![(EventType::Warning, "Revoked", message.clone())]
        );
        assert_eq!(verification.revoked_count(), 1);
    }

    #[test]
    fn an_unavailable_credential_stalls_ready_and_says_which() {
        let sandbox = sandbox_with(&["a"], None);
        let verification = proved(&["a"]);
        let unavailable = [agentgate_api::crd::CredentialReach {
            name: "github-token".into(),
            secret: "github/token".into(),
            available: false,
            reason: Some("Secret \"github\" does not exist in the sandbox's namespace".into()),
            bound_by: vec!["a".into()],
            reach: Vec::new(),
        }];
        let desired = desired_status(&Observed {
            sandbox: &sandbox,
            records: &[],
            pruned: &[],
            verification: &verification,
            findings: &FindingsAssessment::NoTemplate,
            pod_refusal: None,
            credentials: &unavailable,
            time: &at(1),
        });
        let (value, reason, message) = condition(&desired.status, "Ready").unwrap();
        assert_eq!(
            (value.as_str(), reason.as_str()),
            ("False", "CredentialUnavailable")
        );
        assert!(
            message.contains("github-token: Secret \"github\" does not exist"),
            "{message}"
        );
        assert_eq!(desired.requeue, CREDENTIAL_RECHECK);
        assert_eq!(desired.status.credentials, unavailable.to_vec());
        // Once the Secret is there, the condition turns and Ready follows.
        let mut sandbox = sandbox;
        sandbox.status = Some(desired.status);
        let available = [agentgate_api::crd::CredentialReach {
            available: true,
            reason: None,
            ..unavailable[0].clone()
        }];
        let desired = desired_status(&Observed {
            sandbox: &sandbox,
            records: &[],
            pruned: &[],
            verification: &verification,
            findings: &FindingsAssessment::NoTemplate,
            pod_refusal: None,
            credentials: &available,
            time: &at(2),
        });
        let (value, _, _) = condition(&desired.status, "Ready").unwrap();
        assert_eq!(value, "True");
        let (value, reason, _) = condition(&desired.status, "CredentialsAvailable").unwrap();
        assert_eq!((value.as_str(), reason.as_str()), ("True", "Available"));
    }

    #[test]
    fn a_sandbox_no_maximum_governs_is_granted_nothing() {
        let committed = decide(
            &sandbox_with(&["read"], None),
            &proved(&["read"]),
            &FindingsAssessment::NoTemplate,
            None,
            &at(10),
        )
        .status;
        let message =
            "no MaximumPolicy governs this sandbox; nothing is granted until one selects it";
        let sandbox = sandbox_with(&["read"], Some(committed));
        let desired = decide(
            &sandbox,
            &Verification::refused("Unmanaged", message.into()),
            &FindingsAssessment::NoTemplate,
            None,
            &at(20),
        );
        let status = &desired.status;
        assert_eq!(status.revision, 2);
        assert_eq!(status.effective_policy, Some(PolicyDocument::default()));
        assert!(status.governed_by.is_empty() && status.verified_against.is_empty());
        assert_eq!(
            condition(status, "WithinMaximum"),
            is("False", "Unmanaged", message)
        );
        assert_eq!(
            condition(status, "Ready"),
            is("False", "Unmanaged", message)
        );
        assert_eq!(
            condition(status, "Stalled"),
            is("True", "Unmanaged", message)
        );
        assert_eq!(
            desired.events,
            vec![(EventType::Warning, "Unmanaged", message.to_string())]
        );
    }

    #[test]
    fn a_pruned_grant_is_announced_before_the_verdict() {
        let sandbox = sandbox_with(&["read"], None);
        let pruned = [PrunedGrant {
            proposal: "comment".into(),
            reason: "deleted, re-created or changed since it was committed".into(),
        }];
        let verification = Verification::refused("InvalidMaximum", "invalid".into());
        let desired = desired_status(&Observed {
            sandbox: &sandbox,
            records: &[],
            pruned: &pruned,
            verification: &verification,
            findings: &FindingsAssessment::NoTemplate,
            pod_refusal: None,
            credentials: &[],
            time: &at(10),
        });
        assert_eq!(
            desired.events,
            vec![
                (
                    EventType::Warning,
                    "Pruned",
                    "dropped the grants of comment (deleted, re-created or changed since it was committed)".to_string()
                ),
                (EventType::Warning, "InvalidMaximum", "invalid".to_string()),
            ]
        );
    }

    #[test]
    fn a_template_that_cannot_run_stalls_ready_and_says_so_once() {
        let refusal = PodRefusal {
            reason: "CommandRequired",
            message: "no pod is created: add command: container \"agent\"".into(),
        };
        let ready = "revision 1; no pod is created: add command: container \"agent\"";
        let first = decide(
            &sandbox_with(&["read"], None),
            &proved(&["read"]),
            &clean_assessment(Timestamp::from_second(10).unwrap()),
            Some(&refusal),
            &at(10),
        );
        let status = &first.status;
        assert_eq!(
            condition(status, "WithinMaximum"),
            is("True", "Proved", "proved within 1 governing maximum(s)")
        );
        assert_eq!(
            condition(status, "FindingsClear"),
            is("True", "NoUnfixedFindings", "no trifecta findings")
        );
        assert_eq!(
            condition(status, "Ready"),
            is("False", "CommandRequired", ready)
        );
        assert_eq!(
            condition(status, "Stalled"),
            is("True", "CommandRequired", ready)
        );
        assert_eq!(
            first.events,
            vec![
                (
                    EventType::Normal,
                    "NoUnfixedFindings",
                    "no trifecta findings".to_string()
                ),
                (EventType::Warning, "CommandRequired", ready.to_string()),
            ]
        );

        let second = decide(
            &sandbox_with(&["read"], Some(first.status.clone())),
            &proved(&["read"]),
            &clean_assessment(Timestamp::from_second(20).unwrap()),
            Some(&refusal),
            &at(20),
        );
        assert!(!second.changed);
        assert!(second.events.is_empty(), "{:?}", second.events);
    }

    #[test]
    fn a_template_that_escapes_severs_nothing_and_runs_no_pod() {
        let refusal = PodRefusal {
            reason: "TemplateEscapes",
            message: "no pod is created: the template would step around the proxy or Landlock: spec.hostNetwork".into(),
        };
        let desired = decide(
            &sandbox_with(&["read"], None),
            &proved(&["read"]),
            &FindingsAssessment::TemplateEscapes(vec!["spec.hostNetwork".into()]),
            Some(&refusal),
            &at(10),
        );
        let findings = "the pod template escapes the sandbox, so no finding counts as severed and no pod is created: spec.hostNetwork";
        let ready = "revision 1; no pod is created: the template would step around the proxy or Landlock: spec.hostNetwork";
        assert_eq!(desired.status.findings, None);
        assert_eq!(
            condition(&desired.status, "FindingsClear"),
            is("False", "TemplateEscapes", findings)
        );
        assert_eq!(
            condition(&desired.status, "Stalled"),
            is("True", "TemplateEscapes", ready)
        );
        assert_eq!(
            desired.events,
            vec![
                (EventType::Warning, "TemplateEscapes", findings.to_string()),
                (EventType::Warning, "TemplateEscapes", ready.to_string()),
            ]
        );
        assert_eq!(desired.requeue, super::super::RESYNC);
    }

    #[test]
    fn unfixed_findings_stall_the_sandbox() {
        let summary = FindingsSummary {
            revision: Some(1),
            total: 1,
            unfixed: 1,
            images: vec![agentgate_api::crd::ImageFindings {
                image: "ghcr.io/acme/agent:1".into(),
                findings: vec![record(
                    "AG-TRIFECTA",
                    agentgate_api::crd::FindingState::Unfixed,
                )],
                ..Default::default()
            }],
        };
        let desired = decide(
            &sandbox_with(&["read"], None),
            &proved(&["read"]),
            &FindingsAssessment::Assessed {
                summary: summary.clone(),
                regions: Vec::new(),
                at: Timestamp::from_second(10).unwrap(),
            },
            None,
            &at(10),
        );
        let message = "ghcr.io/acme/agent:1: AG-TRIFECTA: issue text reaches post_comment. Minimal fix: restrict tool post_comment.";
        assert_eq!(desired.status.findings, Some(summary));
        assert_eq!(
            condition(&desired.status, "FindingsClear"),
            is("False", "UnfixedFindings", message)
        );
        assert_eq!(
            condition(&desired.status, "Stalled"),
            is("True", "UnfixedFindings", message)
        );
        assert_eq!(
            desired.events,
            vec![(EventType::Warning, "UnfixedFindings", message.to_string())]
        );
    }

    #[test]
    fn a_failed_assessment_is_reconciling_and_retried_in_ten_seconds() {
        let mut committed = decide(
            &sandbox_with(&["read"], None),
            &proved(&["read"]),
            &clean_assessment(Timestamp::from_second(10).unwrap()),
            None,
            &at(10),
        )
        .status;
        committed.findings = Some(FindingsSummary::default());
        let message = "cannot list AgentScans: connection refused";
        let desired = decide(
            &sandbox_with(&["read"], Some(committed)),
            &proved(&["read"]),
            &FindingsAssessment::Failed(message.into()),
            None,
            &at(20),
        );
        assert_eq!(desired.status.findings, None, "stale findings are not kept");
        assert_eq!(
            condition(&desired.status, "FindingsClear"),
            is("Unknown", "AssessmentFailed", message)
        );
        assert_eq!(
            condition(&desired.status, "Ready"),
            is("False", "AssessmentFailed", message)
        );
        assert_eq!(
            condition(&desired.status, "Reconciling"),
            is("True", "AssessmentFailed", message)
        );
        assert_eq!(condition(&desired.status, "Stalled"), None);
        assert_eq!(
            desired.events,
            vec![(EventType::Warning, "AssessmentFailed", message.to_string())]
        );
        assert_eq!(desired.requeue, Duration::from_secs(10));
    }

    #[test]
    fn an_expiring_acceptance_brings_the_sandbox_back_just_after() {
        let mut sandbox = sandbox_with(&["read"], None);
        sandbox.spec.accepted_findings = vec![AcceptedFinding {
            id: "AG-TRIFECTA".into(),
            sink: None,
            reason: "triaged".into(),
            expires: "1970-01-01T00:01:10Z".into(),
        }];
        let assessed = |second| {
            decide(
                &sandbox,
                &proved(&["read"]),
                &clean_assessment(Timestamp::from_second(second).unwrap()),
                None,
                &at(second),
            )
            .requeue
        };
        assert_eq!(assessed(10), Duration::from_millis(60_500));
        assert_eq!(
            assessed(70),
            super::super::RESYNC,
            "expired: nothing to wait for"
        );
    }

    #[test]
    fn without_a_template_there_are_no_findings() {
        let committed = decide(
            &sandbox_with(&["read"], None),
            &proved(&["read"]),
            &clean_assessment(Timestamp::from_second(10).unwrap()),
            None,
            &at(10),
        )
        .status;
        assert!(committed.findings.is_some());
        let desired = decide(
            &sandbox_with(&["read"], Some(committed)),
            &proved(&["read"]),
            &FindingsAssessment::NoTemplate,
            None,
            &at(20),
        );
        assert_eq!(desired.status.findings, None);
        assert_eq!(condition(&desired.status, "FindingsClear"), None);
        assert!(desired.changed);
        assert!(desired.events.is_empty());
    }

    #[test]
    fn the_status_keeps_fifty_records_per_image_unfixed_first() {
        use agentgate_api::crd::FindingState;
        let mut findings: Vec<_> = (0..60)
            .map(|i| record(&format!("S{i}"), FindingState::Severed))
            .collect();
        findings.push(record("U", FindingState::Unfixed));
        let mut summary = FindingsSummary {
            total: 61,
            unfixed: 1,
            images: vec![agentgate_api::crd::ImageFindings {
                image: "agent".into(),
                findings,
                ..Default::default()
            }],
            ..FindingsSummary::default()
        };
        cap_records(&mut summary);
        let kept = &summary.images[0].findings;
        assert_eq!(kept.len(), MAX_RECORDS_PER_IMAGE);
        assert_eq!(kept[0].id, "U");
        assert_eq!(
            (summary.total, summary.unfixed),
            (61, 1),
            "counts stay exact"
        );
    }

    #[test]
    fn a_commit_is_pending_until_the_pod_confirms_it_and_overdue_after_the_bound() {
        let now = Timestamp::now();
        let at = |seconds_ago: i64| {
            (now - k8s_openapi::jiff::SignedDuration::from_secs(seconds_ago)).to_string()
        };
        let mut status = AgentSandboxStatus {
            revision: 4,
            policy_digest: Some("sha256:new".into()),
            policy_committed_at: Some(at(1)),
            pods: vec![agentgate_api::crd::PodEnforcement {
                name: "bot".into(),
                revision: 3,
                digest: "sha256:old".into(),
                applied_at: at(60),
            }],
            ..AgentSandboxStatus::default()
        };
        let time = super::super::now();
        let mut events = Vec::new();
        let again = set_enforced(&mut status, "bot", Some(1), &time, now, &mut events).unwrap();
        assert!(
            again <= ENFORCE_BOUND && again > Duration::from_secs(8),
            "{again:?}"
        );
        let enforced = status
            .conditions
            .iter()
            .find(|c| c.type_ == ENFORCED)
            .unwrap();
        assert_eq!(
            (enforced.status.as_str(), enforced.reason.as_str()),
            ("False", "Pending")
        );
        assert!(
            enforced.message.contains("it enforces revision 3"),
            "{}",
            enforced.message
        );
        assert!(events.is_empty());
        // Past the bound: the sandbox says so, once, with an Event naming the Pod.
        status.policy_committed_at = Some(at(11));
        set_enforced(&mut status, "bot", Some(1), &time, now, &mut events);
        set_enforced(&mut status, "bot", Some(1), &time, now, &mut events);
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].1, "NotConfirmed");
        assert!(events[0].2.contains("Pod bot"), "{}", events[0].2);
        // Confirmed: nothing to wait for.
        status.pods[0].digest = "sha256:new".into();
        assert_eq!(
            set_enforced(&mut status, "bot", Some(1), &time, now, &mut events),
            None
        );
    }

    #[test]
    fn the_revision_moves_only_with_the_effective_policy() {
        let committed = AgentSandboxStatus {
            revision: 4,
            effective_policy: Some(policy_of(&["read"])),
            ..AgentSandboxStatus::default()
        };
        assert_eq!(next_revision(None, &policy_of(&[])), 1);
        assert_eq!(next_revision(Some(&committed), &policy_of(&["read"])), 4);
        assert_eq!(next_revision(Some(&committed), &policy_of(&[])), 5);
    }

    fn proposal(uid: &str, add: &[&str], remove: &[&str]) -> PolicyProposal {
        let add: Vec<serde_json::Value> = add.iter().map(|name| rule(name)).collect();
        serde_json::from_value(json!({
            "apiVersion": "agentgate.dev/v1alpha1",
            "kind": "PolicyProposal",
            "metadata": {"name": "comment", "namespace": "agents", "uid": uid, "generation": 1},
            "spec": {
                "sandboxRef": {"name": "bot"},
                "add": {"network": add},
                "remove": {"network": remove},
            },
        }))
        .unwrap()
    }

    fn commit_of(proposal: &PolicyProposal, pruned: Option<Pruned>) -> AppliedProposal {
        AppliedProposal {
            name: proposal.name_any(),
            uid: proposal.uid().unwrap_or_default(),
            generation: Some(1),
            change_hash: proposal.spec.change_hash(),
            decided_by: "auto".into(),
            at: None,
            removed: proposal.spec.removed_rules().to_vec(),
            pruned,
        }
    }

    fn committed(records: Vec<AppliedProposal>) -> Option<AgentSandboxStatus> {
        Some(AgentSandboxStatus {
            applied_proposals: records,
            ..AgentSandboxStatus::default()
        })
    }

    fn rule_names(policy: &PolicyDocument) -> Vec<&str> {
        policy.network.iter().map(|r| r.name.as_str()).collect()
    }

    #[test]
    fn only_a_proposal_the_view_shows_as_recorded_is_taken_from_it() {
        let committed = proposal("p-1", &["comment"], &[]);
        let record = commit_of(&committed, None);
        let recreated = proposal("p-2", &["comment"], &[]);
        let changed = proposal("p-1", &["comment", "more"], &[]);
        let records = || BTreeMap::from([("comment", &record)]);
        let (found, unread) = split_by_view(records(), |_| Some(Arc::new(committed.clone())));
        let uids: Vec<_> = found.iter().map(|(n, p)| (n.as_str(), p.uid())).collect();
        assert_eq!(uids, [("comment", Some("p-1".to_string()))]);
        assert!(unread.is_empty());
        // Absent, another object, another change: read from the API server,
        // so that a grant is never pruned on what the view shows.
        for in_view in [None, Some(recreated), Some(changed)] {
            let (found, unread) = split_by_view(records(), |_| in_view.clone().map(Arc::new));
            assert!(found.is_empty());
            assert_eq!(unread, ["comment"]);
        }
    }

    #[test]
    fn a_commit_whose_proposal_still_matches_keeps_its_grant() {
        let live = proposal("p-1", &["comment"], &["old"]);
        let sandbox = sandbox_with(&["read", "old"], committed(vec![commit_of(&live, None)]));
        let stacked = stack_proposals(
            &sandbox,
            &BTreeMap::from([("comment".into(), live.clone())]),
        );
        assert_eq!(rule_names(&stacked.policy), ["read", "comment"]);
        assert_eq!(stacked.records, vec![commit_of(&live, None)]);
        assert!(stacked.pruned.is_empty());
    }

    #[test]
    fn a_commit_whose_proposal_is_gone_or_recreated_loses_its_grant_not_its_removals() {
        let original = proposal("p-1", &["comment"], &["old"]);
        let recreated = proposal("p-2", &["comment"], &["old"]);
        let reason = "deleted, re-created or changed since it was committed";
        for live in [
            BTreeMap::new(),
            BTreeMap::from([("comment".into(), recreated)]),
        ] {
            let sandbox = sandbox_with(
                &["read", "old"],
                committed(vec![commit_of(&original, None)]),
            );
            let stacked = stack_proposals(&sandbox, &live);
            assert_eq!(rule_names(&stacked.policy), ["read"]);
            assert_eq!(
                stacked.pruned,
                vec![PrunedGrant {
                    proposal: "comment".into(),
                    reason: reason.into()
                }]
            );
            let pruned = Pruned {
                reason: reason.into(),
                sandbox_generation: Some(2),
            };
            assert_eq!(stacked.records, vec![commit_of(&original, Some(pruned))]);
        }
    }

    #[test]
    fn a_commit_that_no_longer_applies_is_pruned_with_the_reason() {
        // The declared policy lost the rule the proposal removed.
        let live = proposal("p-1", &["comment"], &["old"]);
        let sandbox = sandbox_with(&["read"], committed(vec![commit_of(&live, None)]));
        let stacked = stack_proposals(&sandbox, &BTreeMap::from([("comment".into(), live)]));
        assert_eq!(rule_names(&stacked.policy), ["read"]);
        let [grant] = stacked.pruned.as_slice() else {
            panic!("one pruned grant: {:?}", stacked.pruned);
        };
        assert!(
            grant.reason.starts_with("no longer applies: ")
                && grant
                    .reason
                    .contains("the sandbox has no rule named \"old\""),
            "{}",
            grant.reason
        );
    }

    #[test]
    fn a_pruned_record_keeps_its_removals_until_the_spec_changes() {
        let original = proposal("p-1", &["comment"], &["old"]);
        let pruned_at = |generation| {
            Some(Pruned {
                reason: "deleted".into(),
                sandbox_generation: Some(generation),
            })
        };
        let same = commit_of(&original, pruned_at(2));
        let sandbox = sandbox_with(&["read", "old"], committed(vec![same.clone()]));
        let stacked = stack_proposals(&sandbox, &BTreeMap::new());
        assert_eq!(rule_names(&stacked.policy), ["read"]);
        assert_eq!(stacked.records, vec![same]);
        assert!(stacked.pruned.is_empty(), "pruned before, not now");

        let earlier = commit_of(&original, pruned_at(1));
        let sandbox = sandbox_with(&["read", "old"], committed(vec![earlier]));
        let stacked = stack_proposals(&sandbox, &BTreeMap::new());
        assert_eq!(rule_names(&stacked.policy), ["read", "old"]);
        assert!(stacked.records.is_empty(), "the spec was declared anew");
    }
}
