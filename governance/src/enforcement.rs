//! The `Enforced` condition of an AgentSandbox (docs/status.md) as a Pod's
//! report makes it: pure, so the webhook server that receives the report
//! and the controller that reads the status agree on it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use agentgate_api::crd::ENFORCED_CONDITION as ENFORCED;

/// `conditions` with `Enforced` True (`Applied`): the sandbox has one Pod,
/// and it enforces the committed update.
pub fn applied_conditions(
    conditions: &[Condition],
    generation: Option<i64>,
    now: &Timestamp,
) -> Vec<Condition> {
    let mut out: Vec<Condition> = conditions
        .iter()
        .filter(|c| c.type_ != ENFORCED)
        .cloned()
        .collect();
    let before = conditions.iter().find(|c| c.type_ == ENFORCED);
    let unchanged = before.is_some_and(|c| c.status == "True");
    out.push(Condition {
        type_: ENFORCED.into(),
        status: "True".into(),
        reason: "Applied".into(),
        message: "the Pod enforces the committed policy".into(),
        observed_generation: generation,
        last_transition_time: match before {
            Some(c) if unchanged => c.last_transition_time.clone(),
            _ => Time(*now),
        },
    });
    out
}
