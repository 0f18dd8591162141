//! The verdict on one PolicyProposal (docs/design.md §4): its change
//! applied to the sandbox's current policy, compiled, and judged under the
//! sandbox's mode against every governing maximum. The reconciler and
//! `agentgate verify` share it, so a repository check gives the verdict the
//! operator would.

use crate::verdict::{GoverningMaximum, Mode, Requester, VerdictInput, reach_verdict};
use agentgate_api::crd::{AgentSandbox, PolicyProposal};
use agentgate_policy::compile::{Limits, Role, compile};
use agentgate_policy::compose::apply_proposal;
use agentgate_policy::model::PolicyDocument;

use crate::convert::ToDomain;
use crate::governing::Governing;
use crate::pod_template::agent_identities;

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
    pub requester: Requester,
    /// Whether ungoverned sandboxes may proceed.
    pub allow_unmanaged: bool,
}

/// What [`judge`] found.
pub enum Judgement {
    /// Refused before any proof: the change cannot be applied to the
    /// policy, or is outside the modelled language. One line.
    Refused(String),
    /// The verdict of docs/design.md §4.
    Decided {
        /// Apply, Ask or Reject, with its proofs.
        verdict: Box<crate::verdict::Verdict>,
        /// The sandbox's policy with the proposal applied.
        candidate: PolicyDocument,
        /// Up to the requested number of examples of new authority.
        new_authority: Vec<agentgate_policy::action::Action>,
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
    prover: &agentgate_prover::Prover,
    new_authority_examples: usize,
) -> Judgement {
    let ProposalCase {
        proposal,
        sandbox,
        current,
        governing,
        requester,
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
    // A credential the candidate binds must be one the sandbox declares
    // (docs/policy-semantics.md §9.4): a proposal cannot bring a secret.
    if let Err(reason) = agentgate_policy::credentials::check(
        "spec.credentials of the sandbox",
        &sandbox.spec.credentials,
        &compiled_candidate,
        "",
    ) {
        return Judgement::Refused(format!(
            "the proposal binds what the sandbox does not declare: {reason}"
        ));
    }
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
    let mode = match sandbox.spec.mode.to_domain() {
        Some(Mode::Auto) if all_allow_auto && !foreign_agent => Mode::Auto,
        _ => Mode::Ask,
    };
    let maximums: Vec<GoverningMaximum<'_>> =
        governing.iter().map(Governing::as_verdict_input).collect();
    let verdict = reach_verdict(
        &VerdictInput {
            maximums: &maximums,
            current: (current, &compiled_current),
            candidate: (&candidate, &compiled_candidate),
            added: &compiled_added,
            requester,
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
