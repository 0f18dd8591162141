//! Counterexample-guided revocation in the AgentSandbox reconciler
//! (docs/design.md §5). The decision is the pure
//! [`agentgate_governance::verdict::revoke_until_within`], which shares its
//! escape search with admission, through
//! [`agentgate_governance::reverify::Revocations`] (each distinct policy
//! proved once per set of maximums); this module runs it off the async
//! runtime and words its result for the `WithinMaximum` condition and the
//! `Revoked` Event.

use crate::{Context, ControllerError};
use agentgate_governance::governing::Governing;
use agentgate_governance::reverify::Proved;
use agentgate_governance::verdict::Revocation;
use agentgate_policy::model::PolicyDocument;

/// Revokes from `policy` whatever escapes `governing`, on a blocking
/// thread (it runs the prover), and counts the solver time; a sandbox
/// whose policy and maximums another sandbox's revocation already had
/// reuses that result ([`agentgate_governance::reverify`]).
pub async fn revoke(
    ctx: &Context,
    policy: PolicyDocument,
    governing: Vec<Governing>,
) -> Result<Revocation, ControllerError> {
    let prover = ctx.prover.clone();
    let revocations = ctx.revocations.clone();
    let (revocation, proved, took) = ctx
        .solve(move || {
            let started = std::time::Instant::now();
            let (revocation, proved) = revocations.revoke(&policy, &governing, &prover);
            (revocation, proved, started.elapsed())
        })
        .await?;
    match proved {
        Proved::Now => ctx.metrics.solver_seconds.observe(took.as_secs_f64()),
        Proved::Shared => {
            ctx.metrics.shared_revocations.inc();
        }
    }
    Ok(revocation)
}

/// The `WithinMaximum=False` / `Revoked` message: each revoked grant with
/// the reason of the escape that took it out.
pub fn revoked_message(revoked: &[(String, String)]) -> String {
    format!(
        "revoked {}",
        revoked
            .iter()
            .map(|(grant, why)| format!("{grant} ({why})"))
            .collect::<Vec<_>>()
            .join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_each_grant_with_its_reason() {
        let revoked = [
            ("network rule \"a\"".to_string(), "exceeds X".to_string()),
            (
                "filesystem.readWrite /etc".to_string(),
                "exceeds Y".to_string(),
            ),
        ];
        assert_eq!(
            revoked_message(&revoked),
            "revoked network rule \"a\" (exceeds X); filesystem.readWrite /etc (exceeds Y)"
        );
    }
}
