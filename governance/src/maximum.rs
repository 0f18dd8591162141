//! What the MaximumPolicy reconciler and `agentgate verify` check about a
//! ceiling by itself (docs/design.md §3): its policy and invariants compile,
//! and the policy allows nothing inside its own invariants (the witness
//! when it does). Pure: the caller brings the prover.

use agentgate_api::crd::MaximumPolicy;
use agentgate_policy::compile::{CompiledRegion, Limits, Role, compile, compile_region};
use agentgate_policy::error::Reason;
use agentgate_prover::Outcome;

/// What the pure checks found about one ceiling.
#[derive(Debug, Clone, PartialEq)]
pub enum Assessment {
    /// The policy or an invariant does not compile.
    Invalid(Reason),
    /// It compiles; `inconsistent` names the first invariant it intersects
    /// and the witness, `unproven` an invariant that could not be decided.
    Valid {
        /// `(invariant, witness)` of the first intersection found.
        inconsistent: Option<(String, String)>,
        /// `(invariant, reason)` of an undecided invariant.
        unproven: Option<(String, Reason)>,
    },
}

/// Validates a ceiling and proves it against its own invariants (blocking:
/// call from a blocking thread).
pub fn assess(maximum: &MaximumPolicy, prover: &agentgate_prover::Prover) -> Assessment {
    let limits = Limits::default();
    let policy = match compile(&maximum.spec.policy, Role::Maximum, &limits) {
        Ok(p) => p,
        Err(reason) => return Assessment::Invalid(reason.within("spec.policy")),
    };
    let regions: Result<Vec<(String, CompiledRegion)>, Reason> = maximum
        .spec
        .invariants
        .iter()
        .enumerate()
        .map(|(i, inv)| {
            compile_region(&inv.region, &format!("spec.invariants[{i}].match"))
                .map(|r| (inv.name.clone(), r))
        })
        .collect();
    let regions = match regions {
        Ok(r) => r,
        Err(reason) => return Assessment::Invalid(reason),
    };
    let mut unproven = None;
    for (name, region) in &regions {
        match prover.intersection(&policy, region).outcome {
            Outcome::Within => {}
            Outcome::Exceeds { counterexample } => {
                return Assessment::Valid {
                    inconsistent: Some((name.clone(), counterexample.to_string())),
                    unproven,
                };
            }
            Outcome::Unsupported { reason } | Outcome::Inconclusive { reason } => {
                unproven.get_or_insert((name.clone(), reason));
            }
        }
    }
    Assessment::Valid {
        inconsistent: None,
        unproven,
    }
}
