//! PolicyProposal reconciler: the verdict of DESIGN.md §4 and the commit
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
use kube::api::{Api, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use crate::controller::metrics::VerdictLabel;
use crate::controller::sandbox::governance;
use crate::controller::{Context, ControllerError};
use crate::k8s::access::{access_review, approve_proposals};
use crate::k8s::conditions::{self, Summary};
use crate::k8s::crd::reviewer_in;
use crate::k8s::crd::{
    ActionRecord, AgentSandbox, AppliedProposal, MaximumPolicy, Phase, PolicyProposal,
    PolicyProposalStatus, ProofRecord,
};
use crate::k8s::governance::{Governance, Governing, fingerprint};
use crate::k8s::pod_template::agent_identities;
use crate::policy::compile::{Limits, Role, compile};
use crate::policy::compose::apply_proposal;
use crate::policy::model::PolicyDocument;
use crate::prover::budget::delta_cost;
use crate::verdict::{Decision, GoverningMaximum, Mode, Source, VerdictInput, decide};

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
) -> Result<(Source, String), ControllerError> {
    // An approval covers the generation it names, nothing else (the spec is
    // immutable behind the webhook; this holds even without it).
    if let Some(approved) = status.conditions.iter().find(|c| {
        c.type_ == "Approved"
            && c.status == "True"
            && c.observed_generation == proposal.metadata.generation
    }) {
        let reviewer =
            reviewer_in("Approved", &approved.message).unwrap_or_else(|| "unnamed".to_string());
        return Ok((Source::Approved, format!("reviewer:{reviewer}")));
    }
    // Only a human's own approve verb counts: a ServiceAccount (an agent,
    // or anything running in a pod) always waits for a reviewer.
    let Some(requester) = proposal
        .spec
        .requested_by
        .as_deref()
        .filter(|r| !r.starts_with("system:serviceaccount:"))
    else {
        return Ok((Source::Agent, "auto".into()));
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
        (Source::HumanWithApprove, format!("requester:{requester}"))
    } else {
        (Source::Agent, "auto".into())
    })
}

/// Everything a proposal's verdict depends on, read by the caller.
pub struct ProposalCase<'a> {
    /// The proposal.
    pub proposal: &'a PolicyProposal,
    /// Its sandbox (mode, agent identities).
    pub sandbox: &'a AgentSandbox,
    /// The sandbox's current effective policy.
    pub current: &'a PolicyDocument,
    /// The maximums that govern the sandbox.
    pub governing: &'a [Governing],
    /// Who stands behind the proposal.
    pub source: Source,
    /// Whether ungoverned sandboxes may proceed.
    pub allow_unmanaged: bool,
}

/// What [`judge`] found.
pub enum Judgement {
    /// Refused before any proof: the change cannot be applied to the
    /// policy, or is outside the modelled language. One line.
    Refused(String),
    /// The verdict of DESIGN.md §4.
    Decided {
        /// Apply, Ask or Reject, with its proofs.
        verdict: Box<crate::verdict::Verdict>,
        /// The sandbox's policy with the proposal applied.
        candidate: PolicyDocument,
        /// Up to the requested number of examples of new authority.
        new_authority: Vec<crate::policy::action::Action>,
    },
}

/// Decides a proposal: applies its change to the current policy, compiles
/// it, and runs the verdict under the sandbox's mode (never auto where a
/// governing maximum forbids it, nor for another agent of the namespace).
/// Pure and blocking (it runs the prover): the reconciler and
/// `agentgate verify` share it, so a repository check gives the verdict the
/// operator would.
pub fn judge(
    case: &ProposalCase<'_>,
    prover: &crate::prover::Prover,
    new_authority_examples: usize,
) -> Judgement {
    let ProposalCase {
        proposal,
        sandbox,
        current,
        governing,
        source,
        allow_unmanaged,
    } = *case;
    let remove = proposal.spec.removed_rules();
    let candidate = match apply_proposal(current, proposal.spec.add.as_ref(), remove) {
        Ok(c) => c,
        Err(reason) => {
            return Judgement::Refused(format!(
                "{}: {}",
                reason.field.clone().unwrap_or_default(),
                reason.message
            ));
        }
    };
    let limits = Limits::default();
    let compiled_candidate = match compile(&candidate, Role::Sandbox, &limits) {
        Ok(c) => c,
        Err(reason) => {
            return Judgement::Refused(format!(
                "the proposal is not in the modelled language: {reason}"
            ));
        }
    };
    let compiled_current = compile(current, Role::Sandbox, &limits).unwrap_or_default();
    // Δ's own grants, judged on their own in review regions (a copy of an
    // approved grant is not "nothing new": it outlives the original).
    let compiled_added = match &proposal.spec.add {
        None => Default::default(),
        Some(add) => match compile(add, Role::Sandbox, &limits) {
            Ok(c) => c,
            Err(reason) => {
                return Judgement::Refused(format!(
                    "spec.add is not in the modelled language: {}",
                    reason.within("spec.add")
                ));
            }
        },
    };
    // Mode: the sandbox's, but never auto where a governing maximum forbids it.
    let all_allow_auto = governing
        .iter()
        .all(|g| g.allowed_modes.contains(&Mode::Auto));
    // A ServiceAccount that is not this sandbox's agent (another agent of
    // the namespace) never auto-applies here: its proposals wait.
    let foreign_agent = proposal.spec.requested_by.as_deref().is_some_and(|r| {
        r.starts_with("system:serviceaccount:") && !agent_identities(sandbox).contains(r)
    });
    let mode = match sandbox.spec.mode {
        Some(Mode::Auto) if all_allow_auto && !foreign_agent => Mode::Auto,
        _ => Mode::Ask,
    };
    let maximums: Vec<GoverningMaximum<'_>> =
        governing.iter().map(Governing::as_verdict_input).collect();
    let verdict = decide(
        &VerdictInput {
            maximums: &maximums,
            current: (current, &compiled_current),
            candidate: (&candidate, &compiled_candidate),
            added: &compiled_added,
            source,
            mode,
            allow_unmanaged,
        },
        prover,
    );
    let new_authority = if new_authority_examples == 0 {
        Vec::new()
    } else {
        prover
            .new_authority(
                &compiled_candidate,
                &compiled_current,
                new_authority_examples,
            )
            .examples
    };
    Judgement::Decided {
        verdict: Box::new(verdict),
        candidate,
        new_authority,
    }
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
    let generation = proposal.meta().generation;
    let mut status = proposal.status.clone().unwrap_or_default();
    status.observed_generation = generation;
    let time = super::now();
    let reject = |status: &mut PolicyProposalStatus, reason: String| {
        status.verdict = Some(Decision::Reject);
        status.phase = Some(Phase::Rejected);
        status.reason = Some(reason.clone());
        // Final: nothing changes without a person (a new proposal, or a
        // changed sandbox or maximum and the proposal filed again).
        conditions::summarize(
            &mut status.conditions,
            &Summary::stalled("Rejected", reason.clone()),
            generation,
            &time,
        );
        Some((EventType::Warning, "Rejected", reason))
    };
    if conditions::is_true(&status.conditions, "Denied") {
        let event = reject(&mut status, "denied by a reviewer".into());
        return Ok(Outcome {
            status,
            event,
            commit: None,
        });
    }
    let governing = match governance(sandbox, ctx).await? {
        Governance::Governed(m) => m,
        Governance::Refused(_, message) => {
            let event = reject(&mut status, message);
            return Ok(Outcome {
                status,
                event,
                commit: None,
            });
        }
    };
    let proved_under = fingerprint(&governing);
    let generations: Vec<(String, i64)> = governing
        .iter()
        .map(|g| (g.name.clone(), g.generation))
        .collect();
    let weights = governing
        .iter()
        .find_map(|g| g.compiled.budget.map(|b| b.weights))
        .unwrap_or_default();
    let (source, decided_by) = source_of(proposal, &status, ctx).await?;
    let current = sandbox
        .status
        .as_ref()
        .and_then(|s| s.effective_policy.clone())
        .unwrap_or_default();
    let prover = ctx.prover.clone();
    let allow_unmanaged = ctx.allow_unmanaged;
    let (for_judge, sandbox_for_judge, current_for_judge) =
        (proposal.clone(), sandbox.clone(), current.clone());
    let judgement = tokio::task::spawn_blocking(move || {
        judge(
            &ProposalCase {
                proposal: &for_judge,
                sandbox: &sandbox_for_judge,
                current: &current_for_judge,
                governing: &governing,
                source,
                allow_unmanaged,
            },
            &prover,
            3,
        )
    })
    .await
    .map_err(|e| ControllerError::Prover(e.to_string()))?;
    let (verdict, candidate, new_authority) = match judgement {
        Judgement::Refused(reason) => {
            let event = reject(&mut status, reason);
            return Ok(Outcome {
                status,
                event,
                commit: None,
            });
        }
        Judgement::Decided {
            verdict,
            candidate,
            new_authority,
        } => (verdict, candidate, new_authority),
    };
    let solver_millis: f64 = verdict.proofs.iter().map(|p| p.solver_millis).sum();
    ctx.metrics.solver_seconds.observe(solver_millis / 1000.0);
    ctx.metrics
        .verdicts
        .get_or_create(&VerdictLabel {
            verdict: format!("{:?}", verdict.decision).to_lowercase(),
        })
        .inc();

    let cost = verdict
        .cost
        .clone()
        .unwrap_or_else(|| delta_cost(&current, &candidate, &weights));
    status.verdict = Some(verdict.decision);
    status.reason = Some(verdict.reason.clone());
    status.counterexample = verdict.counterexample.as_ref().map(ActionRecord::from);
    status.new_authority = new_authority.iter().map(ActionRecord::from).collect();
    status.cost = Some(cost.total);
    status.cost_breakdown = cost.breakdown;
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
        maximums: generations
            .into_iter()
            .map(|(name, generation)| crate::k8s::crd::MaximumRef { name, generation })
            .collect(),
        sandbox_revision: sandbox
            .status
            .as_ref()
            .map(|s| s.revision)
            .unwrap_or_default(),
        candidate_hash: Some(candidate_hash(&candidate)),
        solver_millis: verdict.proofs.iter().map(|p| p.solver_millis).sum(),
    });
    let (event, commit) = match verdict.decision {
        Decision::Apply => (
            None,
            Some(Commit {
                candidate,
                decided_by,
                proved_under,
            }),
        ),
        Decision::Ask => {
            status.phase = Some(Phase::AwaitingApproval);
            conditions::summarize(
                &mut status.conditions,
                &Summary::reconciling("AwaitingApproval", verdict.reason.clone()),
                generation,
                &time,
            );
            (
                Some((
                    EventType::Normal,
                    "AwaitingApproval",
                    verdict.reason.clone(),
                )),
                None,
            )
        }
        Decision::Reject => {
            let reason = verdict.reason.clone();
            (reject(&mut status, reason), None)
        }
    };
    Ok(Outcome {
        status,
        event,
        commit,
    })
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

fn mark_applied(status: &mut PolicyProposalStatus, generation: Option<i64>, revision: u64) {
    status.phase = Some(Phase::Applied);
    status.verdict.get_or_insert(Decision::Apply);
    conditions::summarize(
        &mut status.conditions,
        &Summary::ready(
            "Applied",
            format!("committed as sandbox revision {revision}"),
        ),
        generation,
        &super::now(),
    );
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
        // Rejected by a release whose Ready did not follow kstatus
        // (Ready=True, no Stalled): rewritten once, then left alone.
        if current_status.phase == Some(Phase::Rejected)
            && !conditions::is_true(&current_status.conditions, conditions::STALLED)
        {
            let mut status = current_status;
            let reason = status.reason.clone().unwrap_or_default();
            conditions::summarize(
                &mut status.conditions,
                &Summary::stalled("Rejected", reason),
                generation,
                &super::now(),
            );
            write_proposal_status(&proposal, &status, &ctx).await?;
        }
        return Ok(Action::await_change());
    }
    let sandboxes: Api<AgentSandbox> = Api::namespaced(ctx.client.clone(), &namespace);
    // Read from the API server, not a cache: this is the state we commit on.
    let Some(sandbox) = sandboxes.get_opt(&proposal.spec.sandbox_ref.name).await? else {
        let mut status = current_status;
        let reason = format!("sandbox {:?} not found", proposal.spec.sandbox_ref.name);
        status.phase = Some(Phase::Pending);
        status.reason = Some(reason.clone());
        status.observed_generation = generation;
        // It is decided once the sandbox appears (the watch below).
        conditions::summarize(
            &mut status.conditions,
            &Summary::reconciling("SandboxNotFound", reason),
            generation,
            &super::now(),
        );
        if !same_but_timing(&status, proposal.status.as_ref()) {
            write_proposal_status(&proposal, &status, &ctx).await?;
        }
        // The sandbox watch brings it back when the sandbox appears.
        return Ok(Action::requeue(Duration::from_secs(60)));
    };
    let committed = sandbox.status.clone().unwrap_or_default();
    let uid = proposal.uid().unwrap_or_default();
    let live_record = committed
        .applied_proposals
        .iter()
        .find(|r| r.name == name && r.pruned.is_none());
    match live_record {
        // Crash repair: the sandbox holds this very commit (uid and hash).
        Some(record) if record.matches(&proposal) => {
            // Read it fresh: the cache may predate the status the commit
            // wrote, and applying a stale status would drop its verdict.
            let api: Api<PolicyProposal> = Api::namespaced(ctx.client.clone(), &namespace);
            let Some(fresh) = api.get_opt(&name).await? else {
                return Ok(Action::await_change());
            };
            let mut status = fresh.status.clone().unwrap_or_default();
            if status.phase != Some(Phase::Applied) {
                mark_applied(&mut status, generation, committed.revision);
                write_proposal_status(&fresh, &status, &ctx).await?;
            }
            return Ok(Action::await_change());
        }
        // A record of an earlier proposal of this name: the sandbox
        // reconciler prunes it (and its grant) first.
        Some(_) => {
            tracing::info!(proposal = %name, "a stale commit record of this name awaits pruning");
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        None => {}
    }
    if committed.effective_policy.is_none() {
        return Ok(Action::requeue(Duration::from_secs(1))); // the sandbox is not committed yet
    }
    let outcome = evaluate(&proposal, &sandbox, &ctx).await?;
    let mut status = outcome.status;
    if let Some(Commit {
        candidate,
        decided_by,
        proved_under,
    }) = outcome.commit
    {
        // Commit: sandbox status with its resourceVersion as precondition.
        let mut next = sandbox.clone();
        let mut next_status = committed.clone();
        next_status.effective_policy = Some(candidate);
        next_status.revision += 1;
        next_status.applied_proposals.push(AppliedProposal {
            name: name.clone(),
            uid,
            generation,
            change_hash: proposal.spec.change_hash(),
            decided_by,
            at: Some(k8s_openapi::jiff::Timestamp::now().to_string()),
            removed: proposal.spec.removed_rules().to_vec(),
            pruned: None,
        });
        let revision = next_status.revision;
        next.status = Some(next_status);
        // Only the leader commits: a replica that lost the Lease while this
        // reconcile was under way (paused, partitioned) stops here.
        ctx.fence(&format!("commit of proposal {namespace}/{name}"))
            .await?;
        // The maximums, read again right before the write, must be those
        // the verdict was proved under: one deleted, changed or newly
        // governing meanwhile (the sandbox's precondition does not see
        // them) means deciding again.
        let now_under = match governance(&sandbox, &ctx).await? {
            Governance::Governed(governing) => Some(fingerprint(&governing)),
            Governance::Refused(..) => None,
        };
        if now_under.as_ref() != Some(&proved_under) {
            ctx.metrics.commit_conflicts.inc();
            tracing::info!(proposal = %name, "the governing maximums changed under the commit; starting over");
            return Ok(Action::requeue(Duration::from_millis(50)));
        }
        match sandboxes
            .replace_status(&sandbox.name_any(), &PostParams::default(), &next)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {
                ctx.metrics.commit_conflicts.inc();
                tracing::info!(proposal = %name, "sandbox changed under the commit; starting over");
                return Ok(Action::requeue(Duration::from_millis(50)));
            }
            Err(e) => return Err(e.into()),
        }
        ctx.metrics.commits.inc();
        tracing::info!(proposal = %name, namespace = %namespace, revision, "committed");
        mark_applied(&mut status, generation, revision);
        let note = format!("{name}: {}", status.reason.clone().unwrap_or_default());
        let notes = vec![(EventType::Normal, "Applied", note)];
        super::publish(&ctx, &sandbox, "Commit", notes).await;
    }
    if !same_but_timing(&status, proposal.status.as_ref()) {
        write_proposal_status(&proposal, &status, &ctx).await?;
        let notes = outcome.event.into_iter().collect();
        super::publish(&ctx, proposal.as_ref(), "Verify", notes).await;
    }
    tracing::info!(proposal = %name, namespace = %namespace, phase = ?status.phase, "reconciled");
    // Undecided proposals are looked at again when their sandbox or a
    // maximum changes (the watches below), not on a timer: a pending
    // proposal costs nothing while nothing changes.
    Ok(Action::await_change())
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
