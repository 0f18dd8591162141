//! The verdict of DESIGN.md §4: Apply, Ask or Reject for a proposed policy,
//! from prover answers. Pure: the proofs come through [`ProofEngine`], so the
//! controller, the webhook and `agentgate verify` share this one function.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::policy::action::Action;
use crate::policy::compile::CompiledPolicy;
use crate::policy::compile::CompiledRegion;
use crate::policy::error::ReasonCode;
use crate::policy::load::CompiledInvariant;
use crate::policy::model::{Budget, CostWeights, PolicyDocument};
use crate::prover::budget::{Cost, delta_cost};
use crate::prover::{Outcome, Proof, Prover};

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
pub enum Source {
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
    pub source: Source,
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
                    format!(
                        "exceeds MaximumPolicy {:?}: {counterexample} is not allowed",
                        m.name
                    ),
                );
                v.maximum = Some(m.name.to_string());
                v.counterexample = Some(counterexample.clone());
                return v;
            }
            Outcome::Unsupported { reason } | Outcome::Inconclusive { reason } => {
                let mut v = b.verdict(
                    Decision::Reject,
                    Step::Containment,
                    format!(
                        "cannot prove containment in MaximumPolicy {:?}: {reason}",
                        m.name
                    ),
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
            let why = inv
                .reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
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
    let grants_nothing = input.added.rules.is_empty()
        && input.added.filesystem == crate::policy::compile::CompiledFilesystem::default();
    if adds.outcome == Outcome::Within && grants_nothing {
        return b.verdict(
            Decision::Apply,
            Step::Removal,
            "adds no new authority; applied without approval".into(),
        );
    }
    let example = adds.outcome.counterexample().cloned();
    let nothing = CompiledPolicy::default();

    // 5. Approved, or asked by someone who may approve.
    match input.source {
        Source::Approved => {
            let mut v = b.verdict(
                Decision::Apply,
                Step::Approved,
                "approved by a reviewer".into(),
            );
            v.counterexample = example;
            return v;
        }
        Source::HumanWithApprove => {
            // Four eyes: in a review-required region of a maximum that asks
            // for it, the requester's own approve verb is not a review.
            for m in input.maximums.iter().filter(|m| m.four_eyes) {
                let view = m.policy.auto_eligible_view();
                let proof = engine.new_authority_within(input.added, &nothing, &view);
                b.record("fourEyes", Some(m.name), &proof);
                let reason = match &proof.outcome {
                    Outcome::Within => continue,
                    Outcome::Exceeds { counterexample } => format!(
                        "four eyes: {counterexample} lies in a review-required region of MaximumPolicy {:?}; a second reviewer must approve",
                        m.name
                    ),
                    Outcome::Unsupported { reason } | Outcome::Inconclusive { reason } => format!(
                        "four eyes: cannot prove the new authority outside the review-required regions of MaximumPolicy {:?} ({reason}); a second reviewer must approve",
                        m.name
                    ),
                };
                let mut v = b.verdict(Decision::Ask, Step::Approved, reason);
                v.maximum = Some(m.name.to_string());
                v.counterexample = match &proof.outcome {
                    Outcome::Exceeds { counterexample } => Some(counterexample.clone()),
                    _ => example,
                };
                return v;
            }
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
        let proof = engine.new_authority_within(input.added, &nothing, &view);
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
            && worst_cost
                .as_ref()
                .is_none_or(|(c, _, _)| cost.total > c.total)
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::policy::compile::{Limits, Role};
    use crate::policy::error::Reason;
    use crate::policy::load::{CompiledDocument, load_document};

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
        source: Source,
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
        decide(
            &VerdictInput {
                maximums: &list,
                current: (&c.current.0, &c.current.1.policy),
                candidate: (&c.candidate.0, &c.candidate.1.policy),
                added: &c.added,
                source,
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
        let v = run(&c, 0, Source::Agent, Mode::Auto, &Prover::default());
        assert_eq!((v.decision, v.step), (Decision::Reject, Step::Unmanaged));
    }

    #[test]
    fn step1_unmanaged_allowed_goes_on() {
        let c = case("network: []");
        let v = decide(
            &VerdictInput {
                maximums: &[],
                current: (&c.current.0, &c.current.1.policy),
                candidate: (&c.candidate.0, &c.candidate.1.policy),
                added: &c.added,
                source: Source::Agent,
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
        let v = run(&c, 1, Source::Approved, Mode::Auto, &Prover::default());
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
        let v = run(&c, 1, Source::Approved, Mode::Auto, &engine);
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
        let v = run(&c, 1, Source::Approved, Mode::Auto, &Prover::default());
        assert_eq!((v.decision, v.step), (Decision::Reject, Step::Invariant));
        assert_eq!(v.invariant.as_deref(), Some("no-metadata"));
        assert!(v.reason.contains("credentials theft"), "{}", v.reason);
    }

    #[test]
    fn step4_removal_applies() {
        let c = case("network: []");
        let v = run(&c, 1, Source::Agent, Mode::Ask, &Prover::default());
        assert_eq!((v.decision, v.step), (Decision::Apply, Step::Removal));
    }

    #[test]
    fn step5_approved_or_approver_applies() {
        let c = case(&with_rule(COMMENT));
        for source in [Source::Approved, Source::HumanWithApprove] {
            let v = run(&c, 1, source, Mode::Ask, &Prover::default());
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
        let v = run(&c, 1, Source::Agent, Mode::Ask, &Prover::default());
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
            Source::HumanWithApprove,
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
        let v = run(&c, 1, Source::Approved, Mode::Ask, &Prover::default());
        assert_eq!(v.decision, Decision::Apply);
        // Outside review regions the approver's own request still applies.
        let mut c = case(&with_rule(COMMENT));
        c.four_eyes = true;
        let v = run(
            &c,
            1,
            Source::HumanWithApprove,
            Mode::Ask,
            &Prover::default(),
        );
        assert_eq!((v.decision, v.step), (Decision::Apply, Step::Approved));
    }

    #[test]
    fn step6_ask_mode_asks() {
        let c = case(&with_rule(COMMENT));
        let v = run(&c, 1, Source::Agent, Mode::Ask, &Prover::default());
        assert_eq!((v.decision, v.step), (Decision::Ask, Step::AskMode));
        assert!(v.counterexample.is_some());
    }

    #[test]
    fn step7_auto_eligible_within_budget_applies() {
        let c = case(&with_rule(COMMENT));
        let v = run(&c, 2, Source::Agent, Mode::Auto, &Prover::default());
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
        let v = run(&c, 1, Source::Agent, Mode::Auto, &Prover::default());
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
        let v = run(&c, 1, Source::Agent, Mode::Auto, &Prover::default());
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
}
