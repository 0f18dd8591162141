//! The verdict of docs/design.md §4: Apply, Ask or Reject for a proposed policy,
//! from prover answers, and the revocation of docs/design.md §5 that takes out
//! of a committed policy whatever escapes its maximums. Pure: the proofs come
//! through [`ProofEngine`], so the controller, the webhook and `agentgate
//! verify` share these functions, and admission and revocation share one
//! escape search ([`first_escape`]).

use std::ops::ControlFlow;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::budget::{Cost, delta_cost};
use agentgate_policy::action::Action;
use agentgate_policy::compile::CompiledRegion;
use agentgate_policy::compile::{CompiledEndpoint, CompiledPolicy};
use agentgate_policy::compile::{CompiledFilesystem, Limits, Role, compile};
use agentgate_policy::error::{Reason, ReasonCode};
use agentgate_policy::glob::Glob;
use agentgate_policy::load::CompiledInvariant;
use agentgate_policy::matcher::{allows, path_is_under};
use agentgate_policy::model::{Budget, CostWeights, PolicyDocument};
use agentgate_prover::{Outcome, Proof, Prover};

/// The proofs a verdict needs. [`Prover`] is the real one.
pub trait ProofEngine {
    /// `candidate ⊆ maximum`.
    fn containment(&self, candidate: &CompiledPolicy, maximum: &CompiledPolicy) -> Proof;
    /// `candidate ∩ region = ∅` (Within) or an action inside it (Exceeds).
    fn intersection(&self, candidate: &CompiledPolicy, region: &CompiledRegion) -> Proof;
    /// `candidate ∖ current ⊆ ceiling`.
    fn new_authority_within(
        &self,
        candidate: &CompiledPolicy,
        current: &CompiledPolicy,
        ceiling: &CompiledPolicy,
    ) -> Proof;
}

impl ProofEngine for Prover {
    fn containment(&self, candidate: &CompiledPolicy, maximum: &CompiledPolicy) -> Proof {
        Prover::containment(self, candidate, maximum)
    }
    fn intersection(&self, candidate: &CompiledPolicy, region: &CompiledRegion) -> Proof {
        Prover::intersection(self, candidate, region)
    }
    fn new_authority_within(
        &self,
        candidate: &CompiledPolicy,
        current: &CompiledPolicy,
        ceiling: &CompiledPolicy,
    ) -> Proof {
        Prover::new_authority_within(self, candidate, current, ceiling)
    }
}

/// A MaximumPolicy that governs the sandbox.
#[derive(Debug, Clone)]
pub struct GoverningMaximum<'a> {
    /// Its name.
    pub name: &'a str,
    /// The ceiling.
    pub policy: &'a CompiledPolicy,
    /// Its hard invariants.
    pub invariants: &'a [CompiledInvariant],
    /// Its least-privilege budget; `None` means no cost limit.
    pub budget: Option<Budget>,
    /// `review.fourEyes`: new authority in a review-required region needs a
    /// second person even when the requester holds `approve`.
    pub four_eyes: bool,
}

/// Who asks for the change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Requester {
    /// The agent's own identity.
    Agent,
    /// A human who holds the `approve` verb.
    HumanWithApprove,
    /// A reviewer has approved it.
    Approved,
}

/// The sandbox mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Every new grant needs approval.
    Ask,
    /// Grants inside the auto-eligible region and budget apply themselves.
    Auto,
}

/// Everything a verdict depends on.
#[derive(Debug, Clone)]
pub struct VerdictInput<'a> {
    /// Every governing maximum.
    pub maximums: &'a [GoverningMaximum<'a>],
    /// The current effective policy P, as written and compiled.
    pub current: (&'a PolicyDocument, &'a CompiledPolicy),
    /// The candidate C = P with the proposal applied.
    pub candidate: (&'a PolicyDocument, &'a CompiledPolicy),
    /// Δ's own grants (the proposal's `add`, compiled; empty for a pure
    /// removal). Review regions, four eyes and the auto-eligible view judge
    /// these, not only C ∖ P: a copy of a grant someone approved is new
    /// authority the moment the original is withdrawn, so it is reviewed as
    /// if it were new.
    pub added: &'a CompiledPolicy,
    /// Who asks.
    pub requester: Requester,
    /// The sandbox mode.
    pub mode: Mode,
    /// Whether sandboxes no maximum governs may proceed.
    pub allow_unmanaged: bool,
}

/// Apply, Ask or Reject (ActGov: ALLOW, REQUIRE_APPROVAL, DENY).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Decision {
    /// Commit it.
    Apply,
    /// Wait for a reviewer.
    Ask,
    /// Refuse it.
    Reject,
}

/// Which step of §4 decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Step {
    /// 1: no governing maximum.
    Unmanaged,
    /// 2: containment in a maximum.
    Containment,
    /// 3: an invariant region.
    Invariant,
    /// 4: no new authority.
    Removal,
    /// 5: approved, or asked by a human with `approve`.
    Approved,
    /// 6: mode ask.
    AskMode,
    /// 7: auto mode: review regions and budget.
    AutoEligibility,
}

/// One proof that went into a verdict (the proposal's `status.proof` record).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProofRecord {
    /// What was asked (`containment`, `invariant <name>`, `autoEligible`, `newAuthority`).
    pub question: String,
    /// The maximum it concerned.
    pub maximum: Option<String>,
    /// `within`, `exceeds`, `unsupported` or `inconclusive`.
    pub result: String,
    /// Milliseconds.
    pub solver_millis: f64,
}

/// A decision with everything a person needs to act on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// Apply, Ask or Reject.
    pub decision: Decision,
    /// The step that decided.
    pub step: Step,
    /// One line a person can act on.
    pub reason: String,
    /// The reason code, when a proof was Unsupported or Inconclusive.
    pub code: Option<ReasonCode>,
    /// The maximum concerned.
    pub maximum: Option<String>,
    /// The invariant concerned.
    pub invariant: Option<String>,
    /// The concrete action behind the decision.
    pub counterexample: Option<Action>,
    /// The delta's cost (step 7).
    pub cost: Option<Cost>,
    /// Proofs run.
    pub proofs: Vec<ProofRecord>,
}

/// What a question that did not hold leaves behind.
#[derive(Debug, Clone, PartialEq)]
pub enum Evidence {
    /// The action that breaks it. The [`Prover`] answers Exceeds only with
    /// a counterexample the runtime matcher has replayed.
    Counterexample(Box<Action>),
    /// No proof either way (Unsupported or Inconclusive), with its code.
    Unproved(ReasonCode),
}

/// A question of the verdict that did not hold: the line a person reads
/// and its evidence.
struct Failure {
    reason: String,
    evidence: Evidence,
}

/// The one reading of a prover answer that every step shares: Within holds
/// (`None`); Exceeds fails with its counterexample, worded by `exceeds`;
/// Unsupported and Inconclusive fail with their reason code, worded by
/// `unproved`.
fn failure(
    outcome: &Outcome,
    exceeds: impl FnOnce(&Action) -> String,
    unproved: impl FnOnce(&Reason) -> String,
) -> Option<Failure> {
    match outcome {
        Outcome::Within => None,
        Outcome::Exceeds { counterexample } => Some(Failure {
            reason: exceeds(counterexample),
            evidence: Evidence::Counterexample(Box::new(counterexample.clone())),
        }),
        Outcome::Unsupported { reason } | Outcome::Inconclusive { reason } => Some(Failure {
            reason: unproved(reason),
            evidence: Evidence::Unproved(reason.code),
        }),
    }
}

impl Verdict {
    /// A verdict that names nothing but its reason (proofs are attached
    /// by [`reach_verdict`]).
    fn plain(decision: Decision, step: Step, reason: String) -> Verdict {
        Verdict {
            decision,
            step,
            reason,
            code: None,
            maximum: None,
            invariant: None,
            counterexample: None,
            cost: None,
            proofs: Vec::new(),
        }
    }

    /// A verdict from a question about `maximum` that did not hold.
    fn failed(decision: Decision, step: Step, maximum: &str, failure: Failure) -> Verdict {
        let mut v = Verdict::plain(decision, step, failure.reason);
        v.maximum = Some(maximum.to_string());
        match failure.evidence {
            Evidence::Counterexample(action) => v.counterexample = Some(*action),
            Evidence::Unproved(code) => v.code = Some(code),
        }
        v
    }

    /// Shows `example` (C's new authority, when steps 5–7 decide).
    fn with_counterexample(mut self, example: Option<Action>) -> Verdict {
        self.counterexample = example;
        self
    }
}

/// Appends `proof` to the verdict's `status.proof` record.
fn record(
    proofs: &mut Vec<ProofRecord>,
    question: impl Into<String>,
    maximum: Option<&str>,
    proof: &Proof,
) {
    proofs.push(ProofRecord {
        question: question.into(),
        maximum: maximum.map(str::to_string),
        result: proof.outcome.name().to_string(),
        solver_millis: proof.solver_millis,
    });
}

/// How a policy escapes its governing maximums (docs/design.md §4 steps
/// 2–3), exactly as the verdict reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Escape {
    /// [`Step::Containment`] or [`Step::Invariant`].
    pub step: Step,
    /// The maximum escaped.
    pub maximum: String,
    /// The invariant entered (step 3).
    pub invariant: Option<String>,
    /// One line a person can act on; for an invariant it carries the
    /// invariant's own reason.
    pub reason: String,
    /// The counterexample, or why no proof was found.
    pub evidence: Evidence,
}

impl From<Escape> for Verdict {
    fn from(escape: Escape) -> Verdict {
        let failure = Failure {
            reason: escape.reason,
            evidence: escape.evidence,
        };
        let mut v = Verdict::failed(Decision::Reject, escape.step, &escape.maximum, failure);
        v.invariant = escape.invariant;
        v
    }
}

/// The first escape of `policy` from `maximums`, or `None` when it is
/// proved inside every maximum and outside every invariant. Every
/// containment (step 2) is asked before any invariant (step 3), maximum by
/// maximum in their order, so admission ([`reach_verdict`]) and revocation
/// ([`revoke_until_within`]) name the same escape for the same policy.
/// Each proof run is appended to `proofs`.
pub fn first_escape(
    policy: &CompiledPolicy,
    maximums: &[GoverningMaximum<'_>],
    engine: &dyn ProofEngine,
    proofs: &mut Vec<ProofRecord>,
) -> Option<Escape> {
    for m in maximums {
        let proof = engine.containment(policy, m.policy);
        record(proofs, "containment", Some(m.name), &proof);
        let failed = failure(
            &proof.outcome,
            |action| {
                format!(
                    "exceeds MaximumPolicy {:?}: {action} is not allowed",
                    m.name
                )
            },
            |reason| {
                format!(
                    "cannot prove containment in MaximumPolicy {:?}: {reason}",
                    m.name
                )
            },
        );
        if let Some(Failure { reason, evidence }) = failed {
            return Some(Escape {
                step: Step::Containment,
                maximum: m.name.to_string(),
                invariant: None,
                reason,
                evidence,
            });
        }
    }
    for m in maximums {
        for inv in m.invariants {
            let proof = engine.intersection(policy, &inv.region);
            record(
                proofs,
                format!("invariant {}", inv.name),
                Some(m.name),
                &proof,
            );
            let why = inv
                .reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            let failed = failure(
                &proof.outcome,
                |action| {
                    format!(
                        "violates invariant {:?} of MaximumPolicy {:?}{why}: {action} is allowed",
                        inv.name, m.name
                    )
                },
                |reason| {
                    format!(
                        "cannot prove invariant {:?} of MaximumPolicy {:?}: {reason}",
                        inv.name, m.name
                    )
                },
            );
            if let Some(Failure { reason, evidence }) = failed {
                return Some(Escape {
                    step: Step::Invariant,
                    maximum: m.name.to_string(),
                    invariant: Some(inv.name.clone()),
                    reason,
                    evidence,
                });
            }
        }
    }
    None
}

/// Decides a proposed change (docs/design.md §4).
pub fn reach_verdict(input: &VerdictInput<'_>, engine: &dyn ProofEngine) -> Verdict {
    let mut proofs = Vec::new();
    let (ControlFlow::Break(mut verdict) | ControlFlow::Continue(mut verdict)) =
        steps(input, engine, &mut proofs);
    verdict.proofs = proofs;
    verdict
}

/// The seven steps in order. Each either decides (`Break`) or hands on
/// what the later steps need (`Continue`); the last always decides.
fn steps(
    input: &VerdictInput<'_>,
    engine: &dyn ProofEngine,
    proofs: &mut Vec<ProofRecord>,
) -> ControlFlow<Verdict, Verdict> {
    unmanaged(input)?;
    if let Some(escape) = first_escape(input.candidate.1, input.maximums, engine, proofs) {
        return ControlFlow::Break(escape.into());
    }
    let example = removal(input, engine, proofs)?;
    approval(input, engine, &example, proofs)?;
    ask_mode(input, &example)?;
    ControlFlow::Continue(auto_eligibility(input, engine, example, proofs))
}

/// Step 1: a sandbox no maximum governs is refused unless that is allowed.
fn unmanaged(input: &VerdictInput<'_>) -> ControlFlow<Verdict> {
    if input.maximums.is_empty() && !input.allow_unmanaged {
        return ControlFlow::Break(Verdict::plain(
            Decision::Reject,
            Step::Unmanaged,
            "no MaximumPolicy governs this sandbox; create one that selects it (or run the operator with --allow-unmanaged)".into(),
        ));
    }
    ControlFlow::Continue(())
}

/// Step 4: a pure removal needs no approval. Otherwise hands on an example
/// of C's new authority over P, when there is one, for the later steps to
/// show.
fn removal(
    input: &VerdictInput<'_>,
    engine: &dyn ProofEngine,
    proofs: &mut Vec<ProofRecord>,
) -> ControlFlow<Verdict, Option<Action>> {
    let adds = engine.containment(input.candidate.1, input.current.1);
    record(proofs, "newAuthority", None, &adds);
    let grants_nothing =
        input.added.rules.is_empty() && input.added.filesystem == CompiledFilesystem::default();
    if adds.outcome == Outcome::Within && grants_nothing {
        return ControlFlow::Break(Verdict::plain(
            Decision::Apply,
            Step::Removal,
            "adds no new authority; applied without approval".into(),
        ));
    }
    ControlFlow::Continue(adds.outcome.counterexample().cloned())
}

/// Step 5: approved, or asked by someone who may approve (unless four eyes
/// asks for a second person).
fn approval(
    input: &VerdictInput<'_>,
    engine: &dyn ProofEngine,
    example: &Option<Action>,
    proofs: &mut Vec<ProofRecord>,
) -> ControlFlow<Verdict> {
    let applied = |reason: &str| {
        ControlFlow::Break(
            Verdict::plain(Decision::Apply, Step::Approved, reason.into())
                .with_counterexample(example.clone()),
        )
    };
    match input.requester {
        Requester::Approved => applied("approved by a reviewer"),
        Requester::HumanWithApprove => match four_eyes(input, engine, example, proofs) {
            Some(ask) => ControlFlow::Break(ask),
            None => applied("requested by a user who holds the approve verb"),
        },
        Requester::Agent => ControlFlow::Continue(()),
    }
}

/// Four eyes: in a review-required region of a maximum that asks for it,
/// the requester's own approve verb is not a review.
fn four_eyes(
    input: &VerdictInput<'_>,
    engine: &dyn ProofEngine,
    example: &Option<Action>,
    proofs: &mut Vec<ProofRecord>,
) -> Option<Verdict> {
    let nothing = CompiledPolicy::default();
    for m in input.maximums.iter().filter(|m| m.four_eyes) {
        let view = m.policy.auto_eligible_view();
        let proof = engine.new_authority_within(input.added, &nothing, &view);
        record(proofs, "fourEyes", Some(m.name), &proof);
        let failed = failure(
            &proof.outcome,
            |action| {
                format!(
                    "four eyes: {action} lies in a review-required region of MaximumPolicy {:?}; a second reviewer must approve",
                    m.name
                )
            },
            |reason| {
                format!(
                    "four eyes: cannot prove the new authority outside the review-required regions of MaximumPolicy {:?} ({reason}); a second reviewer must approve",
                    m.name
                )
            },
        );
        if let Some(failed) = failed {
            let mut v = Verdict::failed(Decision::Ask, Step::Approved, m.name, failed);
            if v.counterexample.is_none() {
                // Unproved, four eyes names the new authority's example
                // (and no reason code): a second person is asked either way.
                v.code = None;
                v.counterexample = example.clone();
            }
            return Some(v);
        }
    }
    None
}

/// Step 6: in ask mode a reviewer approves every new grant.
fn ask_mode(input: &VerdictInput<'_>, example: &Option<Action>) -> ControlFlow<Verdict> {
    if input.mode != Mode::Ask {
        return ControlFlow::Continue(());
    }
    let new_grant = example
        .as_ref()
        .map(|a| format!(" (new authority, e.g. {a})"))
        .unwrap_or_default();
    ControlFlow::Break(
        Verdict::plain(
            Decision::Ask,
            Step::AskMode,
            format!("sandbox mode is ask: a reviewer must approve{new_grant}"),
        )
        .with_counterexample(example.clone()),
    )
}

/// A `modelProvider` endpoint of the candidate that the current policy
/// does not have (for the same binaries), shown as `host:ports`. Such an
/// endpoint grants nothing, but what it carries is recorded as the user's
/// words, which `from: [user]` trusts (docs/policy-semantics.md §8.3): an
/// agent must not name its own.
fn new_model_provider(current: &CompiledPolicy, candidate: &CompiledPolicy) -> Option<String> {
    let known = model_providers(current);
    model_providers(candidate)
        .into_iter()
        .find(|p| !known.contains(p))
        .map(|(_, e)| format!("{}:{:?}", e.host.as_str(), e.ports))
}

/// The `modelProvider` endpoints of a policy with their rules' binaries.
fn model_providers(p: &CompiledPolicy) -> Vec<(&[Glob], &CompiledEndpoint)> {
    p.rules
        .iter()
        .flat_map(|r| r.endpoints.iter().map(move |e| (r.binaries.as_slice(), e)))
        .filter(|(_, e)| e.model_provider)
        .collect()
}

/// Step 7: auto mode applies Δ when its grants lie in the auto-eligible
/// region of every maximum and its cost within every budget, and it names
/// no new model provider.
fn auto_eligibility(
    input: &VerdictInput<'_>,
    engine: &dyn ProofEngine,
    example: Option<Action>,
    proofs: &mut Vec<ProofRecord>,
) -> Verdict {
    if let Some(provider) = new_model_provider(input.current.1, input.candidate.1) {
        return Verdict::plain(
            Decision::Ask,
            Step::AutoEligibility,
            format!(
                "needs review: the change names a new model provider ({provider}), whose requests count as the user's words for `from`"
            ),
        )
        .with_counterexample(example);
    }
    let nothing = CompiledPolicy::default();
    for m in input.maximums {
        let view = m.policy.auto_eligible_view();
        let proof = engine.new_authority_within(input.added, &nothing, &view);
        record(proofs, "autoEligible", Some(m.name), &proof);
        let failed = failure(
            &proof.outcome,
            |action| {
                format!(
                    "needs review: {action} lies in a review-required region of MaximumPolicy {:?}",
                    m.name
                )
            },
            |reason| {
                format!(
                    "needs review: cannot prove the new authority is auto-eligible under MaximumPolicy {:?}: {reason}",
                    m.name
                )
            },
        );
        if let Some(failed) = failed {
            return Verdict::failed(Decision::Ask, Step::AutoEligibility, m.name, failed);
        }
    }
    let (current_doc, candidate_doc) = (input.current.0, input.candidate.0);
    if let Some((cost, name, max)) = worst_over_budget(input) {
        let mut v = Verdict::plain(
            Decision::Ask,
            Step::AutoEligibility,
            format!(
                "needs review: cost {} exceeds the budget {max} of MaximumPolicy {name:?}",
                cost.total
            ),
        );
        v.maximum = Some(name.to_string());
        v.cost = Some(cost);
        return v.with_counterexample(example);
    }
    let weights = input
        .maximums
        .iter()
        .find_map(|m| m.budget.map(|b| b.weights))
        .unwrap_or_else(CostWeights::default);
    let cost = delta_cost(current_doc, candidate_doc, &weights);
    let mut v = Verdict::plain(
        Decision::Apply,
        Step::AutoEligibility,
        format!(
            "auto-applied: inside the auto-eligible region of every maximum, cost {} within budget",
            cost.total
        ),
    );
    v.cost = Some(cost);
    v.with_counterexample(example)
}

/// The budget Δ overshoots most (the first such maximum on a tie): its
/// cost under that maximum's weights, the maximum and its limit.
fn worst_over_budget<'a>(input: &VerdictInput<'a>) -> Option<(Cost, &'a str, u32)> {
    let mut worst: Option<(Cost, &'a str, u32)> = None;
    for m in input.maximums {
        let Some(budget) = m.budget else { continue };
        let cost = delta_cost(input.current.0, input.candidate.0, &budget.weights);
        if cost.total > budget.max_cost
            && worst.as_ref().is_none_or(|(c, _, _)| cost.total > c.total)
        {
            worst = Some((cost, m.name, budget.max_cost));
        }
    }
    worst
}

/// What revocation leaves of a committed policy (docs/design.md §5).
#[derive(Debug, Clone, PartialEq)]
pub struct Revocation {
    /// The part of the policy that is proved within every maximum.
    pub kept: PolicyDocument,
    /// Grants taken out, e.g. `network rule "github-write"`, each with the
    /// reason of the escape that took it out, worded as the verdict words it.
    pub revoked: Vec<(String, String)>,
}

impl Revocation {
    /// Nothing is kept: the last entry says why.
    fn everything(mut revoked: Vec<(String, String)>, why: String) -> Revocation {
        revoked.push(("the whole policy".into(), why));
        Revocation {
            kept: PolicyDocument::default(),
            revoked,
        }
    }
}

/// Counterexample-guided revocation (docs/design.md §5): the largest part
/// of `policy`, rule by rule and filesystem entry by entry, that is proved
/// inside every governing maximum and outside their invariants. Each round
/// takes [`first_escape`], the escape admission would name, and revokes
/// every grant that allows its counterexample, until what is left is
/// proved. If a proof cannot be completed, everything is revoked (fail
/// closed). Blocking when the engine is the [`Prover`].
pub fn revoke_until_within(
    policy: &PolicyDocument,
    maximums: &[GoverningMaximum<'_>],
    engine: &dyn ProofEngine,
) -> Revocation {
    let mut kept = policy.clone();
    let mut revoked = Vec::new();
    // Each round removes at least one rule or entry, so this terminates.
    let bound = policy.network.len()
        + policy.filesystem.read_only.len()
        + policy.filesystem.read_write.len()
        + 1;
    for _ in 0..=bound {
        let compiled = match compile(&kept, Role::Sandbox, &Limits::default()) {
            Ok(compiled) => compiled,
            Err(reason) => {
                return Revocation::everything(revoked, format!("it does not compile: {reason}"));
            }
        };
        let Some(escape) = first_escape(&compiled, maximums, engine, &mut Vec::new()) else {
            return Revocation { kept, revoked };
        };
        let Evidence::Counterexample(action) = &escape.evidence else {
            return Revocation::everything(revoked, escape.reason);
        };
        let grants = take_grants_allowing(&mut kept, &compiled, action);
        if grants.is_empty() {
            // The counterexample is allowed by nothing we can name: fail closed.
            return Revocation::everything(revoked, escape.reason);
        }
        revoked.extend(grants.into_iter().map(|g| (g, escape.reason.clone())));
    }
    Revocation::everything(revoked, "revocation did not converge".into())
}

/// Takes out of `kept` every grant that allows `action`, `compiled` being
/// `kept` compiled: each network rule with an endpoint that allows it, each
/// filesystem entry it lies under. Returns their names.
fn take_grants_allowing(
    kept: &mut PolicyDocument,
    compiled: &CompiledPolicy,
    action: &Action,
) -> Vec<String> {
    let mut taken = Vec::new();
    match action {
        Action::Network(_) | Action::Mcp(_) => {
            let allowing: Vec<String> = compiled
                .rules
                .iter()
                .filter(|rule| {
                    let single = CompiledPolicy {
                        filesystem: Default::default(),
                        rules: vec![(*rule).clone()],
                    };
                    allows(&single, action)
                })
                .map(|rule| rule.name.clone())
                .collect();
            kept.network.retain(|r| !allowing.contains(&r.name));
            taken.extend(allowing.into_iter().map(|n| format!("network rule {n:?}")));
        }
        Action::Filesystem(f) => {
            for (list, kind) in [
                (&mut kept.filesystem.read_only, "readOnly"),
                (&mut kept.filesystem.read_write, "readWrite"),
            ] {
                let (gone, stay): (Vec<String>, Vec<String>) = list
                    .drain(..)
                    .partition(|entry| path_is_under(&f.path, entry));
                *list = stay;
                taken.extend(gone.into_iter().map(|e| format!("filesystem.{kind} {e}")));
            }
        }
    }
    taken
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use agentgate_policy::compile::{Limits, Role};
    use agentgate_policy::error::Reason;
    use agentgate_policy::load::{CompiledDocument, load_document};

    const MAXIMUM: &str = r#"
kind: MaximumPolicy
metadata: {name: org-ceiling}
spec:
  policy:
    filesystem: {readWrite: [/sandbox]}
    network:
      - name: github
        binaries: [/usr/bin/gh]
        endpoints:
          - host: api.github.com
            ports: [443]
            protocol: rest
            rules:
              - {methods: [GET], path: /repos/acme/**}
              - {methods: [POST], path: /repos/acme/*/issues/**}
          - host: api.github.com
            ports: [443]
            protocol: rest
            path: /repos/acme/*/pulls/**
            access: read-write
            review: {required: true, reason: code changes}
      - name: anything
        endpoints:
          - {host: "**.internal", ports: [80]}
  invariants:
    - name: no-metadata
      reason: credentials theft
      match: {hosts: [metadata.internal]}
  budget: {maxCost: 4}
"#;

    const CURRENT: &str = r#"
network:
  - name: read
    binaries: [/usr/bin/gh]
    endpoints:
      - host: api.github.com
        ports: [443]
        protocol: rest
        rules: [{methods: [GET], path: /repos/acme/x/issues/**}]
"#;

    fn doc(yaml: &str, role: Role) -> (PolicyDocument, CompiledDocument) {
        let loaded = load_document(yaml, &Limits::default()).unwrap();
        let compiled = loaded.compile(role, &Limits::default()).unwrap();
        (loaded.policy, compiled)
    }

    /// CURRENT plus one more rule.
    fn with_rule(rule: &str) -> String {
        format!("{CURRENT}{rule}")
    }

    struct Case {
        maximum: CompiledDocument,
        current: (PolicyDocument, CompiledDocument),
        candidate: (PolicyDocument, CompiledDocument),
        /// The candidate's rules that CURRENT does not name: Δ's grants.
        added: CompiledPolicy,
        four_eyes: bool,
    }

    fn case(candidate: &str) -> Case {
        let current = doc(CURRENT, Role::Sandbox);
        let candidate = doc(candidate, Role::Sandbox);
        let mut added = candidate.1.policy.clone();
        added.filesystem = Default::default();
        added
            .rules
            .retain(|r| current.1.policy.rules.iter().all(|c| c.name != r.name));
        Case {
            maximum: doc(MAXIMUM, Role::Maximum).1,
            current,
            candidate,
            added,
            four_eyes: false,
        }
    }

    fn run(
        c: &Case,
        maximums: usize,
        requester: Requester,
        mode: Mode,
        engine: &dyn ProofEngine,
    ) -> Verdict {
        let m = GoverningMaximum {
            name: "org-ceiling",
            policy: &c.maximum.policy,
            invariants: &c.maximum.invariants,
            budget: c.maximum.budget,
            four_eyes: c.four_eyes,
        };
        let list = vec![m; maximums];
        reach_verdict(
            &VerdictInput {
                maximums: &list,
                current: (&c.current.0, &c.current.1.policy),
                candidate: (&c.candidate.0, &c.candidate.1.policy),
                added: &c.added,
                requester,
                mode,
                allow_unmanaged: false,
            },
            engine,
        )
    }

    /// A rule in MAXIMUM's review-required region (pull requests).
    const PULL: &str = r#"
  - name: pr
    binaries: [/usr/bin/gh]
    endpoints:
      - {host: api.github.com, ports: [443], protocol: rest, rules: [{methods: [POST], path: /repos/acme/x/pulls/1}]}
"#;

    const COMMENT: &str = r#"
  - name: comment
    binaries: [/usr/bin/gh]
    endpoints:
      - host: api.github.com
        ports: [443]
        protocol: rest
        rules: [{methods: [POST], path: /repos/acme/x/issues/*/comments}]
"#;

    #[test]
    fn step1_no_maximum_rejects() {
        let c = case(&with_rule(COMMENT));
        let v = run(&c, 0, Requester::Agent, Mode::Auto, &Prover::default());
        assert_eq!((v.decision, v.step), (Decision::Reject, Step::Unmanaged));
    }

    #[test]
    fn step1_unmanaged_allowed_goes_on() {
        let c = case("network: []");
        let v = reach_verdict(
            &VerdictInput {
                maximums: &[],
                current: (&c.current.0, &c.current.1.policy),
                candidate: (&c.candidate.0, &c.candidate.1.policy),
                added: &c.added,
                requester: Requester::Agent,
                mode: Mode::Auto,
                allow_unmanaged: true,
            },
            &Prover::default(),
        );
        assert_eq!((v.decision, v.step), (Decision::Apply, Step::Removal));
    }

    #[test]
    fn step2_exceeding_rejects_with_counterexample() {
        let c = case(&with_rule(
            r#"
  - name: delete
    binaries: [/usr/bin/gh]
    endpoints:
      - {host: api.github.com, ports: [443], protocol: rest, rules: [{methods: [DELETE], path: /repos/acme/x}]}
"#,
        ));
        let v = run(&c, 1, Requester::Approved, Mode::Auto, &Prover::default());
        assert_eq!((v.decision, v.step), (Decision::Reject, Step::Containment));
        assert_eq!(v.maximum.as_deref(), Some("org-ceiling"));
        let action = v.counterexample.unwrap().to_string();
        assert_eq!(
            action,
            "DELETE https://api.github.com:443/repos/acme/x by /usr/bin/gh (layer rest)"
        );
        assert!(
            v.reason
                .starts_with("exceeds MaximumPolicy \"org-ceiling\": DELETE"),
            "{}",
            v.reason
        );
    }

    /// An engine whose every answer is the same.
    struct Always(Outcome);
    impl ProofEngine for Always {
        fn containment(&self, _: &CompiledPolicy, _: &CompiledPolicy) -> Proof {
            Proof {
                outcome: self.0.clone(),
                solver_millis: 0.0,
                cached: false,
            }
        }
        fn intersection(&self, _: &CompiledPolicy, _: &CompiledRegion) -> Proof {
            self.containment(&CompiledPolicy::default(), &CompiledPolicy::default())
        }
        fn new_authority_within(
            &self,
            a: &CompiledPolicy,
            _: &CompiledPolicy,
            b: &CompiledPolicy,
        ) -> Proof {
            self.containment(a, b)
        }
    }

    #[test]
    fn step2_inconclusive_rejects_with_code() {
        let c = case(&with_rule(COMMENT));
        let engine = Always(Outcome::Inconclusive {
            reason: Reason::general(ReasonCode::SolverTimeout, "deadline"),
        });
        let v = run(&c, 1, Requester::Approved, Mode::Auto, &engine);
        assert_eq!((v.decision, v.step), (Decision::Reject, Step::Containment));
        assert_eq!(v.code, Some(ReasonCode::SolverTimeout));
    }

    #[test]
    fn step3_invariant_rejects_naming_it() {
        let c = case(&with_rule(
            r#"
  - name: meta
    endpoints: [{host: metadata.internal, ports: [80]}]
"#,
        ));
        let v = run(&c, 1, Requester::Approved, Mode::Auto, &Prover::default());
        assert_eq!((v.decision, v.step), (Decision::Reject, Step::Invariant));
        assert_eq!(v.invariant.as_deref(), Some("no-metadata"));
        assert!(v.reason.contains("credentials theft"), "{}", v.reason);
    }

    #[test]
    fn step4_removal_applies() {
        let c = case("network: []");
        let v = run(&c, 1, Requester::Agent, Mode::Ask, &Prover::default());
        assert_eq!((v.decision, v.step), (Decision::Apply, Step::Removal));
    }

    #[test]
    fn step5_approved_or_approver_applies() {
        let c = case(&with_rule(COMMENT));
        for requester in [Requester::Approved, Requester::HumanWithApprove] {
            let v = run(&c, 1, requester, Mode::Ask, &Prover::default());
            assert_eq!((v.decision, v.step), (Decision::Apply, Step::Approved));
        }
    }

    #[test]
    fn a_copy_of_a_granted_rule_is_reviewed_as_new() {
        // CURRENT already reads issues; a second rule granting the same is no
        // new authority over P, but it would outlive the original's
        // withdrawal, so it is not a removal: ask mode asks.
        let copy = CURRENT.replace("name: read", "name: read-copy");
        let copy = copy.trim_start().trim_start_matches("network:");
        let c = case(&with_rule(copy));
        assert_eq!(c.added.rules.len(), 1);
        let v = run(&c, 1, Requester::Agent, Mode::Ask, &Prover::default());
        assert_eq!(
            (v.decision, v.step),
            (Decision::Ask, Step::AskMode),
            "{}",
            v.reason
        );
    }

    #[test]
    fn four_eyes_makes_an_approver_wait_in_review_regions_only() {
        let mut c = case(&with_rule(PULL));
        c.four_eyes = true;
        let v = run(
            &c,
            1,
            Requester::HumanWithApprove,
            Mode::Ask,
            &Prover::default(),
        );
        assert_eq!((v.decision, v.step), (Decision::Ask, Step::Approved));
        assert!(
            v.reason
                .starts_with("four eyes: POST https://api.github.com:443/repos/acme/x/pulls/1"),
            "{}",
            v.reason
        );
        // An Approved condition is the second person.
        let v = run(&c, 1, Requester::Approved, Mode::Ask, &Prover::default());
        assert_eq!(v.decision, Decision::Apply);
        // Outside review regions the approver's own request still applies.
        let mut c = case(&with_rule(COMMENT));
        c.four_eyes = true;
        let v = run(
            &c,
            1,
            Requester::HumanWithApprove,
            Mode::Ask,
            &Prover::default(),
        );
        assert_eq!((v.decision, v.step), (Decision::Apply, Step::Approved));
    }

    #[test]
    fn step6_ask_mode_asks() {
        let c = case(&with_rule(COMMENT));
        let v = run(&c, 1, Requester::Agent, Mode::Ask, &Prover::default());
        assert_eq!((v.decision, v.step), (Decision::Ask, Step::AskMode));
        assert!(v.counterexample.is_some());
    }

    #[test]
    fn step7_auto_eligible_within_budget_applies() {
        let c = case(&with_rule(COMMENT));
        let v = run(&c, 2, Requester::Agent, Mode::Auto, &Prover::default());
        assert_eq!(
            (v.decision, v.step),
            (Decision::Apply, Step::AutoEligibility),
            "{}",
            v.reason
        );
        assert_eq!(v.cost.unwrap().total, 3);
        assert_eq!(v.proofs.len(), 2 + 2 + 1 + 2);
    }

    #[test]
    fn step7_review_region_asks() {
        let c = case(&with_rule(PULL));
        let v = run(&c, 1, Requester::Agent, Mode::Auto, &Prover::default());
        assert_eq!(
            (v.decision, v.step),
            (Decision::Ask, Step::AutoEligibility),
            "{}",
            v.reason
        );
        assert_eq!(
            v.counterexample.unwrap().to_string(),
            "POST https://api.github.com:443/repos/acme/x/pulls/1 by /usr/bin/gh (layer rest)"
        );
    }

    #[test]
    fn step7_over_budget_asks() {
        let c = case(&with_rule(
            r#"
  - name: wide
    binaries: [/usr/bin/gh]
    endpoints:
      - {host: api.github.com, ports: [443], protocol: rest, rules: [{methods: [GET], path: /repos/acme/**}]}
"#,
        ));
        let v = run(&c, 1, Requester::Agent, Mode::Auto, &Prover::default());
        assert_eq!(
            (v.decision, v.step),
            (Decision::Ask, Step::AutoEligibility),
            "{}",
            v.reason
        );
        assert_eq!(v.cost.unwrap().total, 7);
        assert!(
            v.reason.contains("cost 7 exceeds the budget 4"),
            "{}",
            v.reason
        );
    }

    /// A ceiling over a bank's MCP server: reads auto-eligible, payments
    /// of at most 100 under review, and two invariants over tools.
    const BANK_MAXIMUM: &str = r#"
kind: MaximumPolicy
metadata: {name: bank-ceiling}
spec:
  policy:
    network:
      - name: bank
        binaries: [/usr/bin/python3]
        endpoints:
          - {host: bank.internal, ports: [443], protocol: mcp, path: /mcp, tools: [{name: "get_*"}]}
          - host: bank.internal
            ports: [443]
            protocol: mcp
            path: /mcp
            tools: [{name: send_money, arguments: {amount: {minimum: 0, maximum: 100}}}]
            review: {required: true, reason: payments}
  invariants:
    - name: no-deletes
      match: {tools: [{name: "*delete*"}]}
  budget: {maxCost: 4}
"#;

    /// A bank case: the current policy reads balances, the candidate adds
    /// `rule`.
    fn bank_case(rule: &str) -> Case {
        let current_yaml = "network:\n  - name: balance\n    binaries: [/usr/bin/python3]\n    endpoints:\n      - {host: bank.internal, ports: [443], protocol: mcp, path: /mcp, tools: [{name: get_balance}]}\n";
        let current = doc(current_yaml, Role::Sandbox);
        let candidate = doc(&format!("{current_yaml}{rule}"), Role::Sandbox);
        let mut added = candidate.1.policy.clone();
        added
            .rules
            .retain(|r| current.1.policy.rules.iter().all(|c| c.name != r.name));
        Case {
            maximum: doc(BANK_MAXIMUM, Role::Maximum).1,
            current,
            candidate,
            added,
            four_eyes: false,
        }
    }

    #[test]
    fn naming_a_new_model_provider_needs_a_person() {
        let prover = Prover::default();
        let current_yaml = "network:\n  - name: model\n    binaries: [/usr/bin/python3]\n    endpoints:\n      - {host: model.internal, ports: [443], protocol: rest, rules: [{methods: [POST], path: /v1/chat/completions}]}\n";
        let case = |candidate_yaml: &str| {
            let current = doc(current_yaml, Role::Sandbox);
            let candidate = doc(candidate_yaml, Role::Sandbox);
            let added = candidate.1.policy.clone();
            Case {
                maximum: doc(
                    "kind: MaximumPolicy\nmetadata: {name: m}\nspec:\n  policy:\n    network:\n      - {name: all, endpoints: [{host: '*.internal', ports: [443], protocol: rest, access: full}]}\n",
                    Role::Maximum,
                )
                .1,
                current,
                candidate,
                added,
                four_eyes: false,
            }
        };
        // The same grant, now marked as the model provider: a person decides.
        let marked =
            current_yaml.replace("protocol: rest,", "protocol: rest, modelProvider: true,");
        let v = run(&case(&marked), 1, Requester::Agent, Mode::Auto, &prover);
        assert_eq!(
            (v.decision, v.step),
            (Decision::Ask, Step::AutoEligibility),
            "{}",
            v.reason
        );
        assert!(
            v.reason
                .contains("new model provider (model.internal:[443])"),
            "{}",
            v.reason
        );
        // A grant that names no provider is auto-applied as before.
        let more = format!(
            "{current_yaml}  - name: more\n    endpoints:\n      - {{host: api.internal, ports: [443], protocol: rest, rules: [{{methods: [GET], path: /x}}]}}\n"
        );
        let v = run(&case(&more), 1, Requester::Agent, Mode::Auto, &prover);
        assert_eq!(v.decision, Decision::Apply, "{}", v.reason);
    }

    #[test]
    fn tool_proposals_get_apply_ask_and_reject_with_costs() {
        let prover = Prover::default();
        let verdict = |rule: &str| run(&bank_case(rule), 1, Requester::Agent, Mode::Auto, &prover);
        let tool = |tools: &str| {
            format!(
                "  - name: more\n    binaries: [/usr/bin/python3]\n    endpoints:\n      - {{host: bank.internal, ports: [443], protocol: mcp, path: /mcp, tools: {tools}}}\n"
            )
        };
        // A read inside the auto-eligible part: applied, priced.
        let v = verdict(&tool("[{name: get_statement}]"));
        assert_eq!(v.decision, Decision::Apply, "{}", v.reason);
        assert_eq!(v.cost.map(|c| c.total), Some(1));
        // A payment inside the ceiling but in its review region: a person decides.
        let v = verdict(&tool(
            "[{name: send_money, arguments: {amount: {minimum: 0, maximum: 50}}}]",
        ));
        assert_eq!(
            (v.decision, v.step),
            (Decision::Ask, Step::AutoEligibility),
            "{}",
            v.reason
        );
        // A payment past the ceiling's bound: refused with the call.
        let v = verdict(&tool(
            "[{name: send_money, arguments: {amount: {minimum: 0, maximum: 500}}}]",
        ));
        assert_eq!(v.decision, Decision::Reject, "{}", v.reason);
        assert!(
            v.reason.contains("tools/call send_money")
                && v.reason.contains("bank.internal:443/mcp"),
            "{}",
            v.reason
        );
        // A tool the invariant forbids: the ceiling (consistent, so outside
        // the invariant too) refuses it first, with the call.
        let v = verdict(&tool("[{name: delete_account}]"));
        assert_eq!(v.decision, Decision::Reject, "{}", v.reason);
        assert!(
            v.reason.contains("tools/call delete_account {}"),
            "{}",
            v.reason
        );
    }

    /// A maximum as revocation sees it (steps 2–3 read only its name,
    /// ceiling and invariants).
    fn governing<'a>(name: &'a str, compiled: &'a CompiledDocument) -> GoverningMaximum<'a> {
        GoverningMaximum {
            name,
            policy: &compiled.policy,
            invariants: &compiled.invariants,
            budget: compiled.budget,
            four_eyes: false,
        }
    }

    const CEILING: &str = "kind: MaximumPolicy\nmetadata: {name: m}\nspec:\n  policy:\n    filesystem: {readWrite: [/sandbox]}\n    network:\n      - {name: gh, endpoints: [{host: api.github.com, ports: [443], protocol: rest, access: read-only}]}\n      - {name: web, endpoints: [{host: \"**\", ports: [80]}]}\n  invariants:\n    - {name: no-metadata, match: {hosts: [\"169.254.169.254\"]}}\n";

    #[test]
    fn revocation_keeps_what_is_within_and_names_what_is_revoked() {
        let sandbox = doc(
            "filesystem: {readWrite: [/sandbox, /etc]}\nnetwork:\n  - {name: read, endpoints: [{host: api.github.com, ports: [443], protocol: rest, access: read-only}]}\n  - {name: write, endpoints: [{host: api.github.com, ports: [443], protocol: rest, access: read-write}]}\n  - {name: meta, endpoints: [{host: \"169.254.169.254\", ports: [80]}]}\n",
            Role::Sandbox,
        )
        .0;
        let ceiling = doc(CEILING, Role::Maximum).1;
        let out = revoke_until_within(&sandbox, &[governing("m", &ceiling)], &Prover::default());
        let names: Vec<&str> = out.kept.network.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["read"]);
        assert_eq!(out.kept.filesystem.read_write, ["/sandbox"]);
        let revoked: Vec<&str> = out.revoked.iter().map(|(g, _)| g.as_str()).collect();
        assert!(revoked.contains(&"network rule \"write\""), "{revoked:?}");
        assert!(revoked.contains(&"network rule \"meta\""), "{revoked:?}");
        assert!(
            revoked.contains(&"filesystem.readWrite /etc"),
            "{revoked:?}"
        );
        let meta = out
            .revoked
            .iter()
            .find(|(g, _)| g == "network rule \"meta\"")
            .unwrap();
        assert!(meta.1.contains("invariant \"no-metadata\""), "{}", meta.1);
    }

    #[test]
    fn revocation_keeps_a_policy_within_whole() {
        let sandbox = doc(
            "network: [{name: read, endpoints: [{host: api.github.com, ports: [443], protocol: rest, access: read-only}]}]",
            Role::Sandbox,
        )
        .0;
        let ceiling = doc(CEILING, Role::Maximum).1;
        let out = revoke_until_within(&sandbox, &[governing("m", &ceiling)], &Prover::default());
        assert_eq!(out.kept, sandbox);
        assert!(out.revoked.is_empty());
    }

    #[test]
    fn revocation_names_the_escape_admission_names() {
        // `meta` enters the first maximum's invariant and escapes the
        // second maximum's ceiling: both paths name the containment in the
        // second first, as step 2 comes before step 3.
        let wide = doc(MAXIMUM, Role::Maximum).1;
        let narrow = doc(
            "kind: MaximumPolicy\nmetadata: {name: narrow}\nspec:\n  policy:\n    network:\n      - {name: gh, endpoints: [{host: api.github.com, ports: [443]}]}\n",
            Role::Maximum,
        )
        .1;
        let (meta, compiled) = doc(
            "network: [{name: meta, endpoints: [{host: metadata.internal, ports: [80]}]}]",
            Role::Sandbox,
        );
        let both = [
            governing("org-ceiling", &wide),
            governing("narrow", &narrow),
        ];
        let admitted = reach_verdict(
            &VerdictInput {
                maximums: &both,
                current: (&meta, &compiled.policy),
                candidate: (&meta, &compiled.policy),
                added: &CompiledPolicy::default(),
                requester: Requester::Agent,
                mode: Mode::Ask,
                allow_unmanaged: false,
            },
            &Prover::default(),
        );
        assert_eq!(admitted.step, Step::Containment);
        assert_eq!(admitted.maximum.as_deref(), Some("narrow"));
        let out = revoke_until_within(&meta, &both, &Prover::default());
        assert_eq!(
            out.revoked,
            [("network rule \"meta\"".to_string(), admitted.reason)]
        );

        // With only the first maximum, both name its invariant and carry
        // the invariant's reason.
        let escape = first_escape(
            &compiled.policy,
            &both[..1],
            &Prover::default(),
            &mut Vec::new(),
        )
        .unwrap();
        assert_eq!(escape.step, Step::Invariant);
        assert!(
            escape.reason.contains("(credentials theft)"),
            "{}",
            escape.reason
        );
        let out = revoke_until_within(&meta, &both[..1], &Prover::default());
        assert_eq!(
            out.revoked,
            [("network rule \"meta\"".to_string(), escape.reason)]
        );
    }

    #[test]
    fn an_unproved_escape_revokes_everything() {
        let (sandbox, _) = doc(&with_rule(COMMENT), Role::Sandbox);
        let ceiling = doc(MAXIMUM, Role::Maximum).1;
        let engine = Always(Outcome::Inconclusive {
            reason: Reason::general(ReasonCode::SolverTimeout, "deadline"),
        });
        let out = revoke_until_within(&sandbox, &[governing("org-ceiling", &ceiling)], &engine);
        assert_eq!(out.kept, PolicyDocument::default());
        assert_eq!(out.revoked.len(), 1);
        assert_eq!(out.revoked[0].0, "the whole policy");
        assert!(
            out.revoked[0]
                .1
                .starts_with("cannot prove containment in MaximumPolicy \"org-ceiling\": deadline"),
            "{}",
            out.revoked[0].1
        );
    }

    /// An engine that answers each question as scripted, without a solver:
    /// the verdict's steps (modes, four eyes, review regions, budgets) are
    /// governance, tested here on answers chosen rather than proved.
    struct Scripted<'a> {
        /// The current policy: a containment in it asks for new authority.
        current: &'a CompiledPolicy,
        /// C ⊆ P: whether the candidate adds authority.
        new_authority: Outcome,
        /// Δ ⊆ a ceiling's auto-eligible view: whether the addition stays
        /// out of its review regions.
        auto_eligible: Outcome,
        /// The questions asked, in order.
        asked: std::cell::RefCell<Vec<&'static str>>,
    }

    impl<'a> Scripted<'a> {
        fn new(c: &'a Case, new_authority: Outcome, auto_eligible: Outcome) -> Self {
            Scripted {
                current: &c.current.1.policy,
                new_authority,
                auto_eligible,
                asked: Default::default(),
            }
        }

        fn proof(&self, question: &'static str, outcome: &Outcome) -> Proof {
            self.asked.borrow_mut().push(question);
            Proof {
                outcome: outcome.clone(),
                solver_millis: 0.0,
                cached: false,
            }
        }
    }

    impl ProofEngine for Scripted<'_> {
        fn containment(&self, _: &CompiledPolicy, outer: &CompiledPolicy) -> Proof {
            if std::ptr::eq(outer, self.current) {
                self.proof("new authority", &self.new_authority)
            } else {
                self.proof("ceiling", &Outcome::Within)
            }
        }
        fn intersection(&self, _: &CompiledPolicy, _: &CompiledRegion) -> Proof {
            self.proof("invariant", &Outcome::Within)
        }
        fn new_authority_within(
            &self,
            _: &CompiledPolicy,
            _: &CompiledPolicy,
            _: &CompiledPolicy,
        ) -> Proof {
            self.proof("auto-eligible", &self.auto_eligible)
        }
    }

    fn pull_request() -> Outcome {
        Outcome::Exceeds {
            counterexample: Action::Network(agentgate_policy::action::NetworkAction {
                binary: "/usr/bin/gh".into(),
                host: "api.github.com".into(),
                port: 443,
                layer: agentgate_policy::action::Layer::Rest,
                method: "POST".into(),
                path: "/repos/acme/x/pulls/1".into(),
                credential: None,
                query: Default::default(),
                upgrade: None,
            }),
        }
    }

    #[test]
    fn modes_decide_on_the_engines_answers_alone() {
        let c = case(&with_rule(COMMENT));
        let engine = Scripted::new(&c, pull_request(), Outcome::Within);
        let v = run(&c, 1, Requester::Agent, Mode::Ask, &engine);
        assert_eq!((v.decision, v.step), (Decision::Ask, Step::AskMode));
        assert_eq!(v.counterexample, pull_request().counterexample().cloned());
        assert_eq!(
            *engine.asked.borrow(),
            ["ceiling", "invariant", "new authority"]
        );
        let engine = Scripted::new(&c, pull_request(), Outcome::Within);
        let v = run(&c, 1, Requester::Agent, Mode::Auto, &engine);
        assert_eq!(
            (v.decision, v.step),
            (Decision::Apply, Step::AutoEligibility),
            "{}",
            v.reason
        );
        // The same addition where the ceiling asks for a review.
        let engine = Scripted::new(&c, pull_request(), pull_request());
        let v = run(&c, 1, Requester::Agent, Mode::Auto, &engine);
        assert_eq!((v.decision, v.step), (Decision::Ask, Step::AutoEligibility));
        // A removal needs no review, whatever the regions.
        let removal = case("network: []");
        let engine = Scripted::new(&removal, Outcome::Within, pull_request());
        let v = run(&removal, 1, Requester::Agent, Mode::Ask, &engine);
        assert_eq!((v.decision, v.step), (Decision::Apply, Step::Removal));
    }

    #[test]
    fn four_eyes_decides_on_the_engines_answers_alone() {
        let mut c = case(&with_rule(PULL));
        c.four_eyes = true;
        let in_review = Scripted::new(&c, pull_request(), pull_request());
        let v = run(&c, 1, Requester::HumanWithApprove, Mode::Ask, &in_review);
        assert_eq!((v.decision, v.step), (Decision::Ask, Step::Approved));
        assert!(v.reason.starts_with("four eyes: "), "{}", v.reason);
        let v = run(&c, 1, Requester::Approved, Mode::Ask, &in_review);
        assert_eq!((v.decision, v.step), (Decision::Apply, Step::Approved));
        let outside = Scripted::new(&c, pull_request(), Outcome::Within);
        let v = run(&c, 1, Requester::HumanWithApprove, Mode::Ask, &outside);
        assert_eq!((v.decision, v.step), (Decision::Apply, Step::Approved));
        // Without four eyes the approver's own request is the review.
        let mut one_pair = case(&with_rule(PULL));
        one_pair.four_eyes = false;
        let in_review = Scripted::new(&one_pair, pull_request(), pull_request());
        let v = run(
            &one_pair,
            1,
            Requester::HumanWithApprove,
            Mode::Ask,
            &in_review,
        );
        assert_eq!((v.decision, v.step), (Decision::Apply, Step::Approved));
    }
}
