//! PolicyProposal reconciler: the verdict of docs/design.md §4 and the commit
//! protocol of §5. The sandbox and the maximums are read from the API
//! server and the verdict computed on them; right before the commit the
//! leader fence is checked and the governing maximums are read once more
//! (any change since the verdict: start over); the sandbox status
//! (effectivePolicy, revision + 1, appliedProposals + name) is written with
//! the sandbox's resourceVersion as precondition, and only then is the
//! proposal marked Applied. The commit
//! record holds the proposal's uid, generation, change hash and who decided;
//! a crash between the two writes is repaired on the next reconcile from that
//! record, never from the name alone. A decision is never taken from a
//! status field the operator did not write: approval comes only from the
//! `Approved` condition, which the webhook lets only a reviewer with the
//! `approve` verb set, once.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use crate::sandbox::governance;
use crate::{Context, ControllerError};
use agentgate_api::conditions::{self, Summary};
use agentgate_api::crd::reviewer_in;
use agentgate_api::crd::{
    ActionRecord, AgentSandbox, AgentSandboxStatus, AppliedProposal, MaximumPolicy, MaximumRef,
    Phase, PolicyProposal, PolicyProposalStatus, ProofRecord,
};
use agentgate_governance::access::{access_review, approve_proposals};
use agentgate_governance::budget::delta_cost;
use agentgate_governance::convert::ToApi;
use agentgate_governance::governing::{Governance, Governing, fingerprint};
use agentgate_governance::proposal::{Judgement, ProposalCase, judge};
use agentgate_governance::verdict::{Decision, Requester};
use agentgate_k8s::metrics::VerdictLabel;
use agentgate_policy::model::{CostWeights, PolicyDocument};

/// What the proposal's status should become.
struct Outcome {
    status: PolicyProposalStatus,
    event: Option<super::Note>,
    /// When the verdict is Apply: what to commit.
    commit: Option<Commit>,
}

/// A commit the verdict allows.
struct Commit {
    /// The sandbox's new effective policy.
    candidate: PolicyDocument,
    /// The decision record's `decidedBy`.
    decided_by: String,
    /// The maximums it was proved under ([`fingerprint`]).
    proved_under: Vec<(String, String, i64)>,
}

/// Who stands behind a proposal, as [`source_of`] finds it.
struct Backing {
    /// What the verdict weighs.
    requester: Requester,
    /// The decision record's `decidedBy` should the verdict apply it.
    decided_by: String,
}

impl Backing {
    /// The agent alone: the verdict decides (`auto`).
    fn agent() -> Self {
        Self {
            requester: Requester::Agent,
            decided_by: "auto".into(),
        }
    }
}

/// Who stands behind a proposal: a reviewer's `Approved` condition (the
/// webhook admits it only from a holder of `approve` who is not the
/// requester, only once, for the generation it names, with the message
/// `approved by "USER"`); else a human requester (not a ServiceAccount) who
/// holds `approve` themselves (a SubjectAccessReview on the user name alone, so group-granted rights do not count: such
/// proposals wait for a reviewer); else the agent. Also the decision
/// record's `decidedBy` should the verdict apply it.
async fn source_of(
    proposal: &PolicyProposal,
    status: &PolicyProposalStatus,
    ctx: &Context,
) -> Result<Backing, ControllerError> {
    // An approval covers the generation it names, nothing else (the spec is
    // immutable behind the webhook; this holds even without it).
    if let Some(approved) = status.conditions.iter().find(|c| {
        c.type_ == "Approved"
            && c.status == "True"
            && c.observed_generation == proposal.metadata.generation
    }) {
        let reviewer =
            reviewer_in("Approved", &approved.message).unwrap_or_else(|| "unnamed".to_string());
        return Ok(Backing {
            requester: Requester::Approved,
            decided_by: format!("reviewer:{reviewer}"),
        });
    }
    // Only a human's own approve verb counts: a ServiceAccount (an agent,
    // or anything running in a pod) always waits for a reviewer.
    let Some(requester) = proposal
        .spec
        .requested_by
        .as_deref()
        .filter(|r| !r.starts_with("system:serviceaccount:"))
    else {
        return Ok(Backing::agent());
    };
    let user = UserInfo {
        username: Some(requester.to_string()),
        ..UserInfo::default()
    };
    let attributes = approve_proposals(
        &proposal.namespace().unwrap_or_default(),
        Some(&proposal.name_any()),
    );
    let review = access_review(&user, attributes);
    let allowed = Api::<SubjectAccessReview>::all(ctx.client.clone())
        .create(&PostParams::default(), &review)
        .await?
        .status
        .is_some_and(|s| s.allowed);
    Ok(if allowed {
        Backing {
            requester: Requester::HumanWithApprove,
            decided_by: format!("requester:{requester}"),
        }
    } else {
        Backing::agent()
    })
}

fn terminal(phase: Option<Phase>) -> bool {
    matches!(
        phase,
        Some(Phase::Applied | Phase::Rejected | Phase::Superseded)
    )
}

/// Decides a proposal against the sandbox and maximums as read now.
async fn evaluate(
    proposal: &PolicyProposal,
    sandbox: &AgentSandbox,
    ctx: &Context,
) -> Result<Outcome, ControllerError> {
    let assessment = assess(proposal, sandbox, ctx).await?;
    Ok(outcome(proposal, assessment, &super::now()))
}

/// What [`assess`] found of a proposal: everything [`outcome`] decides on.
enum Assessment {
    /// A reviewer set `Denied`.
    Denied,
    /// Nothing may be granted to the sandbox (no governing maximum, an
    /// invalid one): why.
    Ungoverned(String),
    /// Refused before any proof ([`Judgement::Refused`]): why.
    Refused(String),
    /// The verdict, and what it was reached on.
    Decided(Box<Decided>),
}

/// A verdict on a proposal and the facts it was reached on.
struct Decided {
    /// Apply, Ask or Reject, with its proofs.
    verdict: agentgate_governance::verdict::Verdict,
    /// The sandbox's policy with the proposal applied.
    candidate: PolicyDocument,
    /// Examples of the authority the proposal adds.
    new_authority: Vec<agentgate_policy::action::Action>,
    /// The sandbox's effective policy the verdict was about.
    current: PolicyDocument,
    /// The sandbox revision it was committed as.
    sandbox_revision: u64,
    /// The governing maximums the verdict was reached under.
    under: ProvedUnder,
    /// The decision record's `decidedBy` should the verdict apply it.
    decided_by: String,
}

/// The governing maximums a verdict was reached under.
struct ProvedUnder {
    /// Their [`fingerprint`], compared again right before the commit.
    fingerprint: Vec<(String, String, i64)>,
    /// Name and generation of each, for the proof record.
    maximums: Vec<MaximumRef>,
    /// The cost weights of the first with a budget.
    weights: CostWeights,
}

impl ProvedUnder {
    fn of(governing: &[Governing]) -> Self {
        Self {
            fingerprint: fingerprint(governing),
            maximums: governing
                .iter()
                .map(|g| MaximumRef {
                    name: g.name.clone(),
                    generation: g.generation,
                })
                .collect(),
            weights: governing
                .iter()
                .find_map(|g| g.compiled.budget.map(|b| b.weights))
                .unwrap_or_default(),
        }
    }
}

/// Reads what the verdict on a proposal depends on (a reviewer's denial,
/// the governing maximums, who stands behind it, the sandbox's effective
/// policy) and reaches it ([`judge`]).
async fn assess(
    proposal: &PolicyProposal,
    sandbox: &AgentSandbox,
    ctx: &Context,
) -> Result<Assessment, ControllerError> {
    let status = proposal.status.clone().unwrap_or_default();
    if conditions::is_true(&status.conditions, "Denied") {
        return Ok(Assessment::Denied);
    }
    let governing = match governance(sandbox, ctx).await? {
        Governance::Governed(governing) => governing,
        Governance::Refused(_, message) => return Ok(Assessment::Ungoverned(message)),
    };
    let under = ProvedUnder::of(&governing);
    let Backing {
        requester,
        decided_by,
    } = source_of(proposal, &status, ctx).await?;
    let current = sandbox
        .status
        .as_ref()
        .and_then(|s| s.effective_policy.clone())
        .unwrap_or_default();
    let prover = ctx.prover.clone();
    let allow_unmanaged = ctx.allow_unmanaged;
    let (for_judge, sandbox_for_judge, current_for_judge) =
        (proposal.clone(), sandbox.clone(), current.clone());
    let judgement = ctx
        .solve(move || {
            judge(
                &ProposalCase {
                    proposal: &for_judge,
                    sandbox: &sandbox_for_judge,
                    current: &current_for_judge,
                    governing: &governing,
                    requester,
                    allow_unmanaged,
                },
                &prover,
                3,
            )
        })
        .await?;
    let (verdict, candidate, new_authority) = match judgement {
        Judgement::Refused(reason) => return Ok(Assessment::Refused(reason)),
        Judgement::Decided {
            verdict,
            candidate,
            new_authority,
        } => (*verdict, candidate, new_authority),
    };
    let solver_millis: f64 = verdict.proofs.iter().map(|p| p.solver_millis).sum();
    ctx.metrics.solver_seconds.observe(solver_millis / 1000.0);
    ctx.metrics
        .verdicts
        .get_or_create(&VerdictLabel {
            verdict: format!("{:?}", verdict.decision).to_lowercase(),
        })
        .inc();
    Ok(Assessment::Decided(Box::new(Decided {
        verdict,
        candidate,
        new_authority,
        current,
        sandbox_revision: sandbox
            .status
            .as_ref()
            .map(|s| s.revision)
            .unwrap_or_default(),
        under,
        decided_by,
    })))
}

/// What the proposal's status becomes after `assessment`, the Event that
/// says so, and, when the verdict is Apply, the commit to make: a denial,
/// an ungoverned sandbox, a refusal before any proof and a Reject verdict
/// reject it for good; Ask awaits a reviewer; Apply is marked Applied only
/// once the commit is written.
fn outcome(proposal: &PolicyProposal, assessment: Assessment, time: &Time) -> Outcome {
    let generation = proposal.meta().generation;
    let mut status = proposal.status.clone().unwrap_or_default();
    status.observed_generation = generation;
    let decided = match assessment {
        Assessment::Denied => {
            return rejected(status, "denied by a reviewer".into(), generation, time);
        }
        Assessment::Ungoverned(reason) | Assessment::Refused(reason) => {
            return rejected(status, reason, generation, time);
        }
        Assessment::Decided(decided) => *decided,
    };
    record_verdict(&mut status, &decided);
    let Decided {
        verdict,
        candidate,
        under,
        decided_by,
        ..
    } = decided;
    match verdict.decision {
        Decision::Apply => Outcome {
            status,
            event: None,
            commit: Some(Commit {
                candidate,
                decided_by,
                proved_under: under.fingerprint,
            }),
        },
        Decision::Ask => {
            status.phase = Some(Phase::AwaitingApproval);
            conditions::summarize(
                &mut status.conditions,
                &Summary::reconciling("AwaitingApproval", verdict.reason.clone()),
                generation,
                time,
            );
            Outcome {
                status,
                event: Some((EventType::Normal, "AwaitingApproval", verdict.reason)),
                commit: None,
            }
        }
        Decision::Reject => rejected(status, verdict.reason, generation, time),
    }
}

/// `status` rejected for `reason`. Final: nothing changes without a
/// person (a new proposal, or a changed sandbox or maximum and the
/// proposal filed again).
fn rejected(
    mut status: PolicyProposalStatus,
    reason: String,
    generation: Option<i64>,
    time: &Time,
) -> Outcome {
    status.verdict = Some(Decision::Reject.to_api());
    status.phase = Some(Phase::Rejected);
    status.reason = Some(reason.clone());
    conditions::summarize(
        &mut status.conditions,
        &Summary::stalled("Rejected", reason.clone()),
        generation,
        time,
    );
    Outcome {
        status,
        event: Some((EventType::Warning, "Rejected", reason)),
        commit: None,
    }
}

/// Records the verdict in the status: the decision and its reason, the
/// counterexample, examples of new authority, the cost and the proof.
fn record_verdict(status: &mut PolicyProposalStatus, decided: &Decided) {
    let Decided {
        verdict,
        candidate,
        new_authority,
        current,
        sandbox_revision,
        under,
        ..
    } = decided;
    let cost = verdict
        .cost
        .clone()
        .unwrap_or_else(|| delta_cost(current, candidate, &under.weights));
    status.verdict = Some(verdict.decision.to_api());
    status.reason = Some(verdict.reason.clone());
    status.counterexample = verdict.counterexample.as_ref().map(ActionRecord::from);
    status.new_authority = new_authority.iter().map(ActionRecord::from).collect();
    status.cost = Some(cost.total);
    status.cost_breakdown = cost.breakdown.to_api();
    status.proof = Some(ProofRecord {
        // The prover's answer behind the verdict: the first proof that was
        // not `within` (the one that decided a refusal), else `within`.
        result: verdict
            .proofs
            .iter()
            .filter(|p| p.question != "newAuthority")
            .map(|p| p.result.clone())
            .find(|r| r != "within")
            .unwrap_or_else(|| "within".into()),
        model: "boundary-v1".into(),
        maximums: under.maximums.clone(),
        sandbox_revision: *sandbox_revision,
        candidate_hash: Some(candidate_hash(candidate)),
        solver_millis: verdict.proofs.iter().map(|p| p.solver_millis).sum(),
    });
}

/// SHA-256 of the candidate policy's JSON, so a proof can be matched to
/// exactly the policy it was about.
fn candidate_hash(candidate: &PolicyDocument) -> String {
    use sha2::{Digest, Sha256};
    let json = serde_json::to_vec(candidate).unwrap_or_default();
    format!("sha256:{}", hex::encode(Sha256::digest(&json)))
}

/// Whether `new` differs from `old` only in solver timings, which change
/// on every run: writing those would wake the watch, reconcile again and
/// write again, forever (timings go to the metrics instead).
fn same_but_timing(new: &PolicyProposalStatus, old: Option<&PolicyProposalStatus>) -> bool {
    let Some(old) = old else {
        return false;
    };
    let untimed = |s: &PolicyProposalStatus| {
        let mut s = s.clone();
        if let Some(proof) = &mut s.proof {
            proof.solver_millis = 0.0;
        }
        s
    };
    untimed(new) == untimed(old)
}

/// Marks the proposal Applied, as committed at sandbox `revision`.
fn mark_applied(
    status: &mut PolicyProposalStatus,
    generation: Option<i64>,
    revision: u64,
    time: &Time,
) {
    status.phase = Some(Phase::Applied);
    status.verdict.get_or_insert(Decision::Apply.to_api());
    conditions::summarize(
        &mut status.conditions,
        &Summary::ready(
            "Applied",
            format!("committed as sandbox revision {revision}"),
        ),
        generation,
        time,
    );
}

/// A decided proposal's status as it should read now: a Rejected one
/// written by a release whose Ready did not follow kstatus (Ready=True,
/// no Stalled) is stalled; `None` when nothing is to be rewritten.
fn restalled(
    status: &PolicyProposalStatus,
    generation: Option<i64>,
    time: &Time,
) -> Option<PolicyProposalStatus> {
    if status.phase != Some(Phase::Rejected)
        || conditions::is_true(&status.conditions, conditions::STALLED)
    {
        return None;
    }
    let mut status = status.clone();
    let reason = status.reason.clone().unwrap_or_default();
    conditions::summarize(
        &mut status.conditions,
        &Summary::stalled("Rejected", reason),
        generation,
        time,
    );
    Some(status)
}

/// The status of a proposal whose sandbox does not exist: Pending, and
/// Reconciling until the sandbox appears (it is decided then).
fn awaiting_sandbox(proposal: &PolicyProposal, time: &Time) -> PolicyProposalStatus {
    let generation = proposal.meta().generation;
    let mut status = proposal.status.clone().unwrap_or_default();
    let reason = format!("sandbox {:?} not found", proposal.spec.sandbox_ref.name);
    status.phase = Some(Phase::Pending);
    status.reason = Some(reason.clone());
    status.observed_generation = generation;
    conditions::summarize(
        &mut status.conditions,
        &Summary::reconciling("SandboxNotFound", reason),
        generation,
        time,
    );
    status
}

/// What the sandbox's live (unpruned) commit records hold of a proposal's
/// name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CommitRecord {
    /// This very proposal (uid and change hash) is committed.
    ThisProposal,
    /// An earlier proposal of this name is, until the sandbox reconciler
    /// prunes it.
    Earlier,
    /// None.
    Absent,
}

/// [`CommitRecord`] of `proposal` in the sandbox status `committed`.
fn commit_record(committed: &AgentSandboxStatus, proposal: &PolicyProposal) -> CommitRecord {
    let name = proposal.name_any();
    match committed
        .applied_proposals
        .iter()
        .find(|r| r.name == name && r.pruned.is_none())
    {
        Some(record) if record.matches(proposal) => CommitRecord::ThisProposal,
        Some(_) => CommitRecord::Earlier,
        None => CommitRecord::Absent,
    }
}

/// The sandbox status `committed` with `proposal` committed at `at`
/// (RFC 3339): `candidate` is the effective policy at the next revision,
/// and the commit record names the proposal's uid, generation, change,
/// removals and who decided.
fn committed_status(
    committed: &AgentSandboxStatus,
    proposal: &PolicyProposal,
    candidate: PolicyDocument,
    decided_by: String,
    at: String,
) -> AgentSandboxStatus {
    let mut next = committed.clone();
    next.effective_policy = Some(candidate);
    next.revision += 1;
    next.applied_proposals.push(AppliedProposal {
        name: proposal.name_any(),
        uid: proposal.uid().unwrap_or_default(),
        generation: proposal.meta().generation,
        change_hash: proposal.spec.change_hash(),
        decided_by,
        at: Some(at),
        removed: proposal.spec.removed_rules().to_vec(),
        pruned: None,
    });
    next
}

/// Writes the proposal's status (server-side apply; see `apply_status`).
async fn write_proposal_status(
    proposal: &PolicyProposal,
    status: &PolicyProposalStatus,
    ctx: &Context,
) -> Result<(), ControllerError> {
    let namespace = proposal.namespace().unwrap_or_default();
    let api: Api<PolicyProposal> = Api::namespaced(ctx.client.clone(), &namespace);
    super::apply_status(&api, proposal, status).await
}

/// Leaves a decided proposal alone, waits for a missing or uncommitted
/// sandbox, repairs a commit interrupted between its two writes, and
/// otherwise decides the proposal ([`evaluate`]), commits it when the
/// verdict applies it, and writes its status.
async fn reconcile(
    proposal: Arc<PolicyProposal>,
    ctx: Arc<Context>,
) -> Result<Action, ControllerError> {
    let name = proposal.name_any();
    let namespace = proposal.namespace().unwrap_or_default();
    if ctx.ignores(&namespace) {
        tracing::debug!(proposal = %name, namespace = %namespace, "namespace excluded from agentgate; not reconciled");
        return Ok(Action::await_change());
    }
    let generation = proposal.meta().generation;
    let current_status = proposal.status.clone().unwrap_or_default();
    if terminal(current_status.phase) && current_status.observed_generation == generation {
        // Rewritten once, then left alone.
        if let Some(status) = restalled(&current_status, generation, &super::now()) {
            write_proposal_status(&proposal, &status, &ctx).await?;
        }
        return Ok(Action::await_change());
    }
    let sandboxes: Api<AgentSandbox> = Api::namespaced(ctx.client.clone(), &namespace);
    // Read from the API server, not a cache: this is the state we commit on.
    let Some(sandbox) = sandboxes.get_opt(&proposal.spec.sandbox_ref.name).await? else {
        let status = awaiting_sandbox(&proposal, &super::now());
        if !same_but_timing(&status, proposal.status.as_ref()) {
            write_proposal_status(&proposal, &status, &ctx).await?;
        }
        // The sandbox watch brings it back when the sandbox appears.
        return Ok(Action::requeue(Duration::from_secs(60)));
    };
    let committed = sandbox.status.clone().unwrap_or_default();
    match commit_record(&committed, &proposal) {
        // Crash repair: the sandbox holds this very commit (uid and hash).
        CommitRecord::ThisProposal => {
            return repair_applied(&proposal, committed.revision, &ctx).await;
        }
        // A record of an earlier proposal of this name: the sandbox
        // reconciler prunes it (and its grant) first.
        CommitRecord::Earlier => {
            tracing::info!(proposal = %name, "a stale commit record of this name awaits pruning");
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        CommitRecord::Absent => {}
    }
    if committed.effective_policy.is_none() {
        return Ok(Action::requeue(Duration::from_secs(1))); // the sandbox is not committed yet
    }
    let Outcome {
        mut status,
        event,
        commit,
    } = evaluate(&proposal, &sandbox, &ctx).await?;
    if let Some(commit) = commit {
        let CommitWrite::Committed { revision } =
            commit_to_sandbox(&proposal, &sandbox, &committed, commit, &ctx).await?
        else {
            return Ok(Action::requeue(Duration::from_millis(50)));
        };
        mark_applied(&mut status, generation, revision, &super::now());
        let note = format!("{name}: {}", status.reason.clone().unwrap_or_default());
        let notes = vec![(EventType::Normal, "Applied", note)];
        super::publish(&ctx, &sandbox, "Commit", notes).await;
    }
    if !same_but_timing(&status, proposal.status.as_ref()) {
        write_proposal_status(&proposal, &status, &ctx).await?;
        let notes = event.into_iter().collect();
        super::publish(&ctx, proposal.as_ref(), "Verify", notes).await;
    }
    tracing::info!(proposal = %name, namespace = %namespace, phase = ?status.phase, "reconciled");
    // Undecided proposals are looked at again when their sandbox or a
    // maximum changes (the watches below), not on a timer: a pending
    // proposal costs nothing while nothing changes.
    Ok(Action::await_change())
}

/// Marks a proposal Applied whose commit the sandbox already holds at
/// `revision` (the operator stopped between the two writes of a commit).
async fn repair_applied(
    proposal: &PolicyProposal,
    revision: u64,
    ctx: &Context,
) -> Result<Action, ControllerError> {
    // Read it fresh: the cache may predate the status the commit wrote,
    // and applying a stale status would drop its verdict.
    let api: Api<PolicyProposal> = Api::namespaced(
        ctx.client.clone(),
        &proposal.namespace().unwrap_or_default(),
    );
    let Some(fresh) = api.get_opt(&proposal.name_any()).await? else {
        return Ok(Action::await_change());
    };
    let mut status = fresh.status.clone().unwrap_or_default();
    if status.phase != Some(Phase::Applied) {
        mark_applied(
            &mut status,
            proposal.meta().generation,
            revision,
            &super::now(),
        );
        write_proposal_status(&fresh, &status, ctx).await?;
    }
    Ok(Action::await_change())
}

/// Whether a commit landed.
enum CommitWrite {
    /// The sandbox status now holds it, at this revision.
    Committed {
        /// The sandbox's new revision.
        revision: u64,
    },
    /// The sandbox or its governing maximums changed since the verdict:
    /// decide again.
    StartOver,
}

/// Commits a proposal the verdict allows: the sandbox status with the
/// candidate at the next revision and the commit record, written by the
/// leader only, with the sandbox's resourceVersion as precondition, and
/// only while the governing maximums are those the verdict was proved
/// under.
async fn commit_to_sandbox(
    proposal: &PolicyProposal,
    sandbox: &AgentSandbox,
    committed: &AgentSandboxStatus,
    commit: Commit,
    ctx: &Context,
) -> Result<CommitWrite, ControllerError> {
    let name = proposal.name_any();
    let namespace = proposal.namespace().unwrap_or_default();
    let Commit {
        candidate,
        decided_by,
        proved_under,
    } = commit;
    let next_status = committed_status(
        committed,
        proposal,
        candidate,
        decided_by,
        k8s_openapi::jiff::Timestamp::now().to_string(),
    );
    let revision = next_status.revision;
    let mut next = sandbox.clone();
    next.status = Some(next_status);
    // Only the leader commits: a replica that lost the Lease while this
    // reconcile was under way (paused, partitioned) stops here.
    ctx.fence(&format!("commit of proposal {namespace}/{name}"))
        .await?;
    // The maximums, read again right before the write, must be those the
    // verdict was proved under: one deleted, changed or newly governing
    // meanwhile (the sandbox's precondition does not see them) means
    // deciding again.
    let now_under = match governance(sandbox, ctx).await? {
        Governance::Governed(governing) => Some(fingerprint(&governing)),
        Governance::Refused(..) => None,
    };
    if now_under.as_ref() != Some(&proved_under) {
        ctx.metrics.commit_conflicts.inc();
        tracing::info!(proposal = %name, "the governing maximums changed under the commit; starting over");
        return Ok(CommitWrite::StartOver);
    }
    let sandboxes: Api<AgentSandbox> = Api::namespaced(ctx.client.clone(), &namespace);
    match sandboxes
        .replace_status(&sandbox.name_any(), &PostParams::default(), &next)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {
            ctx.metrics.commit_conflicts.inc();
            tracing::info!(proposal = %name, "sandbox changed under the commit; starting over");
            return Ok(CommitWrite::StartOver);
        }
        Err(e) => return Err(e.into()),
    }
    ctx.metrics.commits.inc();
    tracing::info!(proposal = %name, namespace = %namespace, revision, "committed");
    Ok(CommitWrite::Committed { revision })
}

fn error_policy(
    proposal: Arc<PolicyProposal>,
    error: &ControllerError,
    ctx: Arc<Context>,
) -> Action {
    super::retry_with_backoff("policyproposal", proposal.as_ref(), error, &ctx)
}

async fn counted(
    proposal: Arc<PolicyProposal>,
    ctx: Arc<Context>,
) -> Result<Action, ControllerError> {
    super::counted("policyproposal", proposal, ctx, reconcile).await
}

/// Runs the PolicyProposal controller until shutdown.
pub async fn run(ctx: Arc<Context>) {
    let proposals: Api<PolicyProposal> = Api::all(ctx.client.clone());
    let controller = Controller::new(proposals, watcher::Config::default());
    let store = controller.store();
    let by_maximum = store.clone();
    // The undecided proposals among `store` that `keep` selects.
    let undecided = |store: &kube::runtime::reflector::Store<PolicyProposal>,
                     keep: &dyn Fn(&PolicyProposal) -> bool| {
        store
            .state()
            .iter()
            .filter(|p| !terminal(p.status.as_ref().and_then(|s| s.phase)))
            .filter(|p| keep(p))
            .map(|p| ObjectRef::from_obj(p.as_ref()))
            .collect::<Vec<_>>()
    };
    super::drive(
        controller
            .watches(
                // Only names are read: a metadata-only watch is enough.
                Api::<PartialObjectMeta<AgentSandbox>>::all(ctx.client.clone()),
                watcher::Config::default(),
                move |sandbox| {
                    let (name, namespace) = (sandbox.name_any(), sandbox.namespace());
                    undecided(&store, &|p| {
                        p.spec.sandbox_ref.name == name && p.namespace() == namespace
                    })
                },
            )
            .watches(
                Api::<MaximumPolicy>::all(ctx.client.clone()),
                watcher::Config::default(),
                move |_| undecided(&by_maximum, &|_| true),
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
    use agentgate_governance::verdict::{ProofRecord as Proof, Step, Verdict};
    use agentgate_policy::action::{Action as Request, Layer, NetworkAction};
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(second).unwrap())
    }

    fn rule(name: &str) -> serde_json::Value {
        json!({
            "name": name,
            "binaries": ["/usr/bin/gh"],
            "endpoints": [{"host": "api.github.com", "ports": [443]}],
        })
    }

    fn policy_of(rules: &[&str]) -> PolicyDocument {
        let network: Vec<serde_json::Value> = rules.iter().map(|name| rule(name)).collect();
        serde_json::from_value(json!({"network": network})).unwrap()
    }

    /// Proposal `comment` (uid `p-1`, generation 2) adding the rule
    /// `comment` to sandbox `bot`, with `status`.
    fn proposal_with(status: Option<PolicyProposalStatus>) -> PolicyProposal {
        let mut proposal: PolicyProposal = serde_json::from_value(json!({
            "apiVersion": "agentgate.dev/v1alpha1",
            "kind": "PolicyProposal",
            "metadata": {"name": "comment", "namespace": "agents", "uid": "p-1", "generation": 2},
            "spec": {
                "sandboxRef": {"name": "bot"},
                "add": {"network": [rule("comment")]},
                "remove": {"network": ["old"]},
                "requestedBy": "system:serviceaccount:agents:bot",
            },
        }))
        .unwrap();
        proposal.status = status;
        proposal
    }

    fn under() -> ProvedUnder {
        ProvedUnder {
            fingerprint: vec![("org-ceiling".into(), "m-1".into(), 3)],
            maximums: vec![MaximumRef {
                name: "org-ceiling".into(),
                generation: 3,
            }],
            weights: CostWeights::default(),
        }
    }

    fn proof(question: &str, result: &str, solver_millis: f64) -> Proof {
        Proof {
            question: question.into(),
            maximum: Some("org-ceiling".into()),
            result: result.into(),
            solver_millis,
        }
    }

    fn verdict(decision: Decision, step: Step, reason: &str, proofs: Vec<Proof>) -> Verdict {
        Verdict {
            decision,
            step,
            reason: reason.into(),
            code: None,
            maximum: Some("org-ceiling".into()),
            invariant: None,
            counterexample: None,
            cost: None,
            proofs,
        }
    }

    fn decided(verdict: Verdict) -> Assessment {
        Assessment::Decided(Box::new(Decided {
            verdict,
            candidate: policy_of(&["read", "comment"]),
            new_authority: Vec::new(),
            current: policy_of(&["read"]),
            sandbox_revision: 4,
            under: under(),
            decided_by: "auto".into(),
        }))
    }

    /// The status, reason and message of the condition `type_`.
    fn condition(status: &PolicyProposalStatus, type_: &str) -> Option<(String, String, String)> {
        conditions::get(&status.conditions, type_)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    }

    fn is(value: &str, reason: &str, message: &str) -> Option<(String, String, String)> {
        Some((value.into(), reason.into(), message.into()))
    }

    /// Asserts `outcome` rejects the proposal for good, for `reason`.
    fn assert_rejected(outcome: &Outcome, reason: &str) {
        let status = &outcome.status;
        assert_eq!(status.verdict, Some(Decision::Reject.to_api()));
        assert_eq!(status.phase, Some(Phase::Rejected));
        assert_eq!(status.reason.as_deref(), Some(reason));
        assert_eq!(status.observed_generation, Some(2));
        assert_eq!(condition(status, "Ready"), is("False", "Rejected", reason));
        assert_eq!(condition(status, "Stalled"), is("True", "Rejected", reason));
        assert_eq!(condition(status, "Reconciling"), None);
        assert_eq!(
            outcome.event,
            Some((EventType::Warning, "Rejected", reason.to_string()))
        );
        assert!(outcome.commit.is_none());
    }

    #[test]
    fn a_denied_proposal_is_rejected_for_good() {
        let outcome = outcome(&proposal_with(None), Assessment::Denied, &at(10));
        assert_rejected(&outcome, "denied by a reviewer");
    }

    #[test]
    fn an_ungoverned_sandbox_or_an_unprovable_change_rejects_with_the_reason() {
        let ungoverned =
            "no MaximumPolicy governs this sandbox; nothing is granted until one selects it";
        let proposal = proposal_with(None);
        let outcome_of = |assessment| outcome(&proposal, assessment, &at(10));
        assert_rejected(
            &outcome_of(Assessment::Ungoverned(ungoverned.into())),
            ungoverned,
        );
        let refused = "add.network[0].name: the sandbox already has a rule named \"comment\"";
        assert_rejected(&outcome_of(Assessment::Refused(refused.into())), refused);
    }

    #[test]
    fn an_apply_verdict_records_the_proof_and_asks_for_the_commit() {
        let reason = "proved within every maximum; auto mode, within budget";
        let proofs = vec![
            proof("containment", "within", 1.5),
            proof("newAuthority", "exceeds", 2.0),
        ];
        let proposal = proposal_with(None);
        let outcome = outcome(
            &proposal,
            decided(verdict(
                Decision::Apply,
                Step::AutoEligibility,
                reason,
                proofs,
            )),
            &at(10),
        );
        let status = &outcome.status;
        assert_eq!(status.verdict, Some(Decision::Apply.to_api()));
        assert_eq!(status.reason.as_deref(), Some(reason));
        assert_eq!(status.phase, None, "Applied only once committed");
        assert!(status.conditions.is_empty(), "{:?}", status.conditions);
        let cost = delta_cost(
            &policy_of(&["read"]),
            &policy_of(&["read", "comment"]),
            &CostWeights::default(),
        );
        assert_eq!(status.cost, Some(cost.total));
        assert_eq!(status.cost_breakdown, cost.breakdown.to_api());
        assert_eq!(
            status.proof,
            Some(ProofRecord {
                result: "within".into(),
                model: "boundary-v1".into(),
                maximums: under().maximums,
                sandbox_revision: 4,
                candidate_hash: Some(candidate_hash(&policy_of(&["read", "comment"]))),
                solver_millis: 3.5,
            })
        );
        assert_eq!(outcome.event, None);
        let commit = outcome.commit.expect("a commit");
        assert_eq!(commit.candidate, policy_of(&["read", "comment"]));
        assert_eq!(commit.decided_by, "auto");
        assert_eq!(commit.proved_under, under().fingerprint);

        // Once committed: Applied, Ready.
        let mut applied = outcome.status.clone();
        mark_applied(&mut applied, Some(2), 5, &at(11));
        assert_eq!(applied.phase, Some(Phase::Applied));
        assert_eq!(applied.verdict, Some(Decision::Apply.to_api()));
        assert_eq!(
            condition(&applied, "Ready"),
            is("True", "Applied", "committed as sandbox revision 5")
        );
        assert_eq!(condition(&applied, "Reconciling"), None);
        assert_eq!(condition(&applied, "Stalled"), None);
    }

    #[test]
    fn an_ask_verdict_awaits_a_reviewer() {
        let reason = "mode is ask: a reviewer decides";
        let mut verdict = verdict(
            Decision::Ask,
            Step::AskMode,
            reason,
            vec![proof("containment", "within", 1.0)],
        );
        verdict.cost = Some(agentgate_governance::budget::Cost {
            total: 7,
            breakdown: Vec::new(),
        });
        let outcome = outcome(&proposal_with(None), decided(verdict), &at(10));
        let status = &outcome.status;
        assert_eq!(status.verdict, Some(Decision::Ask.to_api()));
        assert_eq!(status.phase, Some(Phase::AwaitingApproval));
        assert_eq!(status.cost, Some(7), "the verdict's own cost");
        assert_eq!(
            condition(status, "Ready"),
            is("False", "AwaitingApproval", reason)
        );
        assert_eq!(
            condition(status, "Reconciling"),
            is("True", "AwaitingApproval", reason)
        );
        assert_eq!(condition(status, "Stalled"), None);
        assert_eq!(
            outcome.event,
            Some((EventType::Normal, "AwaitingApproval", reason.to_string()))
        );
        assert!(outcome.commit.is_none());
    }

    #[test]
    fn a_reject_verdict_records_its_counterexample_and_the_proof_that_refused() {
        let reason = "exceeds MaximumPolicy \"org-ceiling\": POST https://api.github.com:443/repos/acme by /usr/bin/gh (layer rest) is not allowed";
        let counterexample = Request::Network(NetworkAction {
            binary: "/usr/bin/gh".into(),
            host: "api.github.com".into(),
            port: 443,
            layer: Layer::Rest,
            method: "POST".into(),
            path: "/repos/acme".into(),
            credential: None,
            query: Default::default(),
            upgrade: None,
        });
        let mut verdict = verdict(
            Decision::Reject,
            Step::Containment,
            reason,
            vec![
                proof("newAuthority", "exceeds", 1.0),
                proof("invariant no-metadata", "within", 1.0),
                proof("containment", "exceeds", 1.0),
            ],
        );
        verdict.counterexample = Some(counterexample.clone());
        // It was awaiting approval: Reconciling gives way to Stalled.
        let mut awaiting = PolicyProposalStatus::default();
        conditions::summarize(
            &mut awaiting.conditions,
            &Summary::reconciling("AwaitingApproval", "ask"),
            Some(1),
            &at(5),
        );
        let outcome = outcome(&proposal_with(Some(awaiting)), decided(verdict), &at(10));
        assert_rejected(&outcome, reason);
        let status = &outcome.status;
        assert_eq!(
            status.counterexample,
            Some(ActionRecord::from(&counterexample))
        );
        assert_eq!(
            status.proof.as_ref().map(|p| p.result.as_str()),
            Some("exceeds")
        );
    }

    #[test]
    fn a_rejection_of_an_older_release_is_stalled_once() {
        let mut old = PolicyProposalStatus {
            phase: Some(Phase::Rejected),
            reason: Some("denied by a reviewer".into()),
            ..PolicyProposalStatus::default()
        };
        conditions::set(
            &mut old.conditions,
            conditions::READY,
            conditions::Status::True,
            "Decided",
            "rejected",
            Some(2),
            &at(5),
        );
        let status = restalled(&old, Some(2), &at(10)).expect("rewritten");
        assert_eq!(
            condition(&status, "Ready"),
            is("False", "Rejected", "denied by a reviewer")
        );
        assert_eq!(
            condition(&status, "Stalled"),
            is("True", "Rejected", "denied by a reviewer")
        );
        assert_eq!(restalled(&status, Some(2), &at(20)), None, "once");
        let applied = PolicyProposalStatus {
            phase: Some(Phase::Applied),
            ..PolicyProposalStatus::default()
        };
        assert_eq!(restalled(&applied, Some(2), &at(20)), None);
    }

    #[test]
    fn a_proposal_for_a_missing_sandbox_waits_for_it() {
        let status = awaiting_sandbox(&proposal_with(None), &at(10));
        let reason = "sandbox \"bot\" not found";
        assert_eq!(status.phase, Some(Phase::Pending));
        assert_eq!(status.reason.as_deref(), Some(reason));
        assert_eq!(status.observed_generation, Some(2));
        assert_eq!(
            condition(&status, "Ready"),
            is("False", "SandboxNotFound", reason)
        );
        assert_eq!(
            condition(&status, "Reconciling"),
            is("True", "SandboxNotFound", reason)
        );
        assert_eq!(condition(&status, "Stalled"), None);
    }

    #[test]
    fn a_commit_names_the_proposal_and_moves_the_revision() {
        let proposal = proposal_with(None);
        let committed = AgentSandboxStatus {
            revision: 4,
            effective_policy: Some(policy_of(&["read", "old"])),
            ..AgentSandboxStatus::default()
        };
        let next = committed_status(
            &committed,
            &proposal,
            policy_of(&["read", "comment"]),
            "reviewer:alice".into(),
            "2026-01-01T00:00:00Z".into(),
        );
        assert_eq!(next.revision, 5);
        assert_eq!(next.effective_policy, Some(policy_of(&["read", "comment"])));
        assert_eq!(
            next.applied_proposals,
            vec![AppliedProposal {
                name: "comment".into(),
                uid: "p-1".into(),
                generation: Some(2),
                change_hash: proposal.spec.change_hash(),
                decided_by: "reviewer:alice".into(),
                at: Some("2026-01-01T00:00:00Z".into()),
                removed: vec!["old".into()],
                pruned: None,
            }]
        );
        assert_eq!(commit_record(&next, &proposal), CommitRecord::ThisProposal);
    }

    #[test]
    fn only_the_very_proposal_committed_counts_as_committed() {
        let proposal = proposal_with(None);
        let record = AppliedProposal {
            name: "comment".into(),
            uid: "p-1".into(),
            change_hash: proposal.spec.change_hash(),
            ..AppliedProposal::default()
        };
        let with = |records: Vec<AppliedProposal>| AgentSandboxStatus {
            applied_proposals: records,
            ..AgentSandboxStatus::default()
        };
        assert_eq!(
            commit_record(&with(vec![record.clone()]), &proposal),
            CommitRecord::ThisProposal
        );
        let recreated = AppliedProposal {
            uid: "p-0".into(),
            ..record.clone()
        };
        assert_eq!(
            commit_record(&with(vec![recreated]), &proposal),
            CommitRecord::Earlier
        );
        let pruned = AppliedProposal {
            pruned: Some(agentgate_api::crd::Pruned {
                reason: "deleted".into(),
                sandbox_generation: Some(1),
            }),
            ..record.clone()
        };
        assert_eq!(
            commit_record(&with(vec![pruned]), &proposal),
            CommitRecord::Absent
        );
        let other = AppliedProposal {
            name: "other".into(),
            ..record
        };
        assert_eq!(
            commit_record(&with(vec![other]), &proposal),
            CommitRecord::Absent
        );
    }
}
