//! The verdict of DESIGN.md §4: Apply, Ask or Reject for a proposed policy,
//! from prover answers. Pure: the proofs come through [`ProofEngine`], so the
//! controller, the webhook and `agentgate verify` share this one function.

use serde::{Deserialize, Serialize};

use crate::policy::action::Action;
use crate::policy::compile::CompiledPolicy;
use crate::policy::error::ReasonCode;
use crate::policy::load::CompiledInvariant;
use crate::policy::model::{Budget, CostWeights, PolicyDocument};
use crate::prover::budget::{Cost, delta_cost};
use crate::prover::{Outcome, Proof, Prover};
use crate::policy::compile::CompiledRegion;

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
}

/// Who asks for the change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Source {
    /// The agent's own identity.
    Agent,
    /// A human who holds the `approve` verb.
    HumanWithApprove,
    /// A reviewer has approved it.
    Approved,
}

/// The sandbox mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Who asks.
    pub source: Source,
    /// The sandbox mode.
    pub mode: Mode,
    /// Whether sandboxes no maximum governs may proceed.
    pub allow_unmanaged: bool,
}

/// Apply, Ask or Reject (ActGov: ALLOW, REQUIRE_APPROVAL, DENY).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

struct Builder {
    proofs: Vec<ProofRecord>,
}

impl Builder {
    fn record(&mut self, question: impl Into<String>, maximum: Option<&str>, proof: &Proof) {
        self.proofs.push(ProofRecord {
            question: question.into(),
            maximum: maximum.map(str::to_string),
            result: proof.outcome.name().to_string(),
            solver_millis: proof.solver_millis,
        });
    }

    fn verdict(self, decision: Decision, step: Step, reason: String) -> Verdict {
        Verdict {
            decision,
            step,
            reason,
            code: None,
            maximum: None,
            invariant: None,
            counterexample: None,
            cost: None,
            proofs: self.proofs,
        }
    }
}

/// Decides a proposed change (DESIGN.md §4).
pub fn decide(input: &VerdictInput<'_>, engine: &dyn ProofEngine) -> Verdict {
    let mut b = Builder { proofs: Vec::new() };
    let (current_doc, current) = input.current;
    let (candidate_doc, candidate) = input.candidate;

    // 1. Unmanaged.
    if input.maximums.is_empty() && !input.allow_unmanaged {
        return b.verdict(
            Decision::Reject,
            Step::Unmanaged,
            "no MaximumPolicy governs this sandbox; create one that selects it (or run the operator with --allow-unmanaged)".into(),
        );
    }

    // 2. Containment in every maximum.
    for m in input.maximums {
        let proof = engine.containment(candidate, m.policy);
        b.record("containment", Some(m.name), &proof);
        match &proof.outcome {
            Outcome::Within => {}
            Outcome::Exceeds { counterexample } => {
                let mut v = b.verdict(
                    Decision::Reject,
                    Step::Containment,
                    format!("exceeds MaximumPolicy {:?}: {counterexample} is not allowed", m.name),
                );
                v.maximum = Some(m.name.to_string());
                v.counterexample = Some(counterexample.clone());
                return v;
            }
            Outcome::Unsupported { reason } | Outcome::Inconclusive { reason } => {
                let mut v = b.verdict(
                    Decision::Reject,
                    Step::Containment,
                    format!("cannot prove containment in MaximumPolicy {:?}: {reason}", m.name),
                );
                v.maximum = Some(m.name.to_string());
                v.code = Some(reason.code);
                return v;
            }
        }
    }

    // 3. Invariants.
    for m in input.maximums {
        for inv in m.invariants {
            let proof = engine.intersection(candidate, &inv.region);
            b.record(format!("invariant {}", inv.name), Some(m.name), &proof);
            let why = inv.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default();
            match &proof.outcome {
                Outcome::Within => {}
                Outcome::Exceeds { counterexample } => {
                    let mut v = b.verdict(
                        Decision::Reject,
                        Step::Invariant,
                        format!(
                            "violates invariant {:?} of MaximumPolicy {:?}{why}: {counterexample} is allowed",
                            inv.name, m.name
                        ),
                    );
                    v.maximum = Some(m.name.to_string());
                    v.invariant = Some(inv.name.clone());
                    v.counterexample = Some(counterexample.clone());
                    return v;
                }
                Outcome::Unsupported { reason } | Outcome::Inconclusive { reason } => {
                    let mut v = b.verdict(
                        Decision::Reject,
                        Step::Invariant,
                        format!(
                            "cannot prove invariant {:?} of MaximumPolicy {:?}: {reason}",
                            inv.name, m.name
                        ),
                    );
                    v.maximum = Some(m.name.to_string());
                    v.invariant = Some(inv.name.clone());
                    v.code = Some(reason.code);
                    return v;
                }
            }
        }
    }

    // 4. A pure removal needs no approval.
    let adds = engine.containment(candidate, current);
    b.record("newAuthority", None, &adds);
    if adds.outcome == Outcome::Within {
        return b.verdict(
            Decision::Apply,
            Step::Removal,
            "adds no new authority; applied without approval".into(),
        );
    }
    let example = adds.outcome.counterexample().cloned();

    // 5. Approved, or asked by someone who may approve.
    match input.source {
        Source::Approved => {
            let mut v = b.verdict(Decision::Apply, Step::Approved, "approved by a reviewer".into());
            v.counterexample = example;
            return v;
        }
        Source::HumanWithApprove => {
            let mut v = b.verdict(
                Decision::Apply,
                Step::Approved,
                "requested by a user who holds the approve verb".into(),
            );
            v.counterexample = example;
            return v;
        }
        Source::Agent => {}
    }

    // 6. Ask mode.
    let new_grant = example
        .as_ref()
        .map(|a| format!(" (new authority, e.g. {a})"))
        .unwrap_or_default();
    if input.mode == Mode::Ask {
        let mut v = b.verdict(
            Decision::Ask,
            Step::AskMode,
            format!("sandbox mode is ask: a reviewer must approve{new_grant}"),
        );
        v.counterexample = example;
        return v;
    }

    // 7. Auto mode: auto-eligible region of every maximum, and the budget.
    let mut worst_cost: Option<(Cost, &str, u32)> = None;
    for m in input.maximums {
        let view = m.policy.auto_eligible_view();
        let proof = engine.new_authority_within(candidate, current, &view);
        b.record("autoEligible", Some(m.name), &proof);
        match &proof.outcome {
            Outcome::Within => {}
            Outcome::Exceeds { counterexample } => {
                let mut v = b.verdict(
                    Decision::Ask,
                    Step::AutoEligibility,
                    format!(
                        "needs review: {counterexample} lies in a review-required region of MaximumPolicy {:?}",
                        m.name
                    ),
                );
                v.maximum = Some(m.name.to_string());
                v.counterexample = Some(counterexample.clone());
                return v;
            }
            Outcome::Unsupported { reason } | Outcome::Inconclusive { reason } => {
                let mut v = b.verdict(
                    Decision::Ask,
                    Step::AutoEligibility,
                    format!(
                        "needs review: cannot prove the new authority is auto-eligible under MaximumPolicy {:?}: {reason}",
                        m.name
                    ),
                );
                v.maximum = Some(m.name.to_string());
                v.code = Some(reason.code);
                return v;
            }
        }
        let weights = m.budget.map(|b| b.weights).unwrap_or_default();
        let cost = delta_cost(current_doc, candidate_doc, &weights);
        if let Some(budget) = m.budget
            && cost.total > budget.max_cost
            && worst_cost.as_ref().is_none_or(|(c, _, _)| cost.total > c.total)
        {
            worst_cost = Some((cost, m.name, budget.max_cost));
        }
    }
    if let Some((cost, name, max)) = worst_cost {
        let mut v = b.verdict(
            Decision::Ask,
            Step::AutoEligibility,
            format!(
                "needs review: cost {} exceeds the budget {max} of MaximumPolicy {name:?}",
                cost.total
            ),
        );
        v.maximum = Some(name.to_string());
        v.cost = Some(cost);
        v.counterexample = example;
        return v;
    }
    let weights = input
        .maximums
        .iter()
        .find_map(|m| m.budget.map(|b| b.weights))
        .unwrap_or_else(CostWeights::default);
    let cost = delta_cost(current_doc, candidate_doc, &weights);
    let mut v = b.verdict(
        Decision::Apply,
        Step::AutoEligibility,
        format!(
            "auto-applied: inside the auto-eligible region of every maximum, cost {} within budget",
            cost.total
        ),
    );
    v.cost = Some(cost);
    v.counterexample = example;
    v
}
