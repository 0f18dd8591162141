//! Shared helpers for agentgate's integration tests and benchmarks.

pub mod fuzz;

use agentgate_api::documents::load_document;
use agentgate_policy::compile::{CompiledPolicy, Limits, Role, compile};
use agentgate_policy::error::Reason;
use agentgate_policy::load::LoadError;

/// Compiles a policy from YAML text; panics with the reason on failure
/// (test inputs are fixed and known to be valid).
pub fn policy(yaml: &str, role: Role) -> CompiledPolicy {
    let loaded = match load_document(yaml, &Limits::default()) {
        Ok(loaded) => loaded,
        Err(e) => panic!("test policy does not load: {e}\n{yaml}"),
    };
    match compile(&loaded.policy, role, &Limits::default()) {
        Ok(p) => p,
        Err(e) => panic!("test policy does not compile: {e}\n{yaml}"),
    }
}

/// Loads and compiles a policy that must be refused; returns the first
/// reason (panics if the text is not YAML or the policy is accepted).
pub fn rejection_with(yaml: &str, role: Role, limits: &Limits) -> Reason {
    match load_document(yaml, limits) {
        Err(LoadError::Invalid(reason)) => reason,
        Err(LoadError::Yaml(e)) => panic!("not YAML ({e}):\n{yaml}"),
        Ok(doc) => match doc.compile(role, limits) {
            Ok(_) => panic!("document was accepted but should not be:\n{yaml}"),
            Err(reason) => reason,
        },
    }
}

/// The counterexample of `candidate ⊆ ceiling`, which must be Exceeds,
/// checked here as every conformance suite checks it: canonical, allowed
/// by the candidate, not by the ceiling (docs/policy-semantics.md §5).
#[track_caller]
pub fn replayed_counterexample(
    candidate: &CompiledPolicy,
    ceiling: &CompiledPolicy,
) -> agentgate_policy::Action {
    use agentgate_policy::matcher::allows;
    use agentgate_prover::{Outcome, Prover};
    match Prover::default().containment(candidate, ceiling).outcome {
        Outcome::Exceeds { counterexample } => {
            if let Err(e) = counterexample.check_canonical() {
                panic!("counterexample {counterexample} is not canonical: {e}");
            }
            assert!(allows(candidate, &counterexample), "{counterexample}");
            assert!(!allows(ceiling, &counterexample), "{counterexample}");
            counterexample
        }
        other => panic!("expected Exceeds, got {other:?}"),
    }
}

/// [`replayed_counterexample`], which must be a network action.
#[track_caller]
pub fn network_counterexample(
    candidate: &CompiledPolicy,
    ceiling: &CompiledPolicy,
) -> agentgate_policy::NetworkAction {
    match replayed_counterexample(candidate, ceiling) {
        agentgate_policy::Action::Network(a) => a,
        other => panic!("expected a network counterexample, got {other}"),
    }
}
