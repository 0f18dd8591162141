//! `POST /validate/heldcalls`: the operator writes a held call and its
//! answer; a reviewer may only approve or deny it (docs/proxy.md, "Held
//! calls").

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use kube::ResourceExt;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;

use crate::state::WebhookState;
use crate::validate::envelope::{Review, answer};
use agentgate_api::crd::HeldCall;
use agentgate_governance::access::approve_held_calls;
use agentgate_governance::admission::{Answer, ProposalCheck, review_held_call};

pub(crate) async fn validate_held_call(
    State(state): State<Arc<WebhookState>>,
    review: Review,
) -> Json<AdmissionReview<DynamicObject>> {
    let s = state.clone();
    answer(&state, "heldcalls", "HeldCall", review, |request, new: Option<HeldCall>, old| async move {
        let Some(held) = new else {
            return Answer::allow();
        };
        if s.by_operator(&request) {
            return Answer::allow();
        }
        let user = request.user_info.username.clone().unwrap_or_default();
        match review_held_call(
            &request.operation,
            request.sub_resource.as_deref(),
            old.as_ref(),
            &held,
            &user,
        ) {
            ProposalCheck::Allow => Answer::allow(),
            ProposalCheck::Deny(message) => Answer::Deny(message),
            ProposalCheck::NeedsApprove => {
                let namespace = request.namespace.clone().unwrap_or_default();
                let name = held.name_any();
                match s.may(&request.user_info, approve_held_calls(&namespace, Some(&name))).await {
                    Ok(true) => Answer::allow(),
                    Ok(false) => Answer::Deny(format!(
                        "heldcall {name:?}: {user:?} may not approve or deny it: that needs the approve verb on heldcalls.agentgate.dev in namespace {namespace:?}"
                    )),
                    Err(e) => Answer::Deny(format!("heldcall {name:?}: {e}")),
                }
            }
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::testkit::{
        AGENT, ALICE, BOB, Cluster, HELD_CALLS, OPERATOR, assert_allowed, assert_denied, review,
        status_review,
    };

    const ENDPOINT: &str = "/validate/heldcalls";

    /// A held call of the example sandbox's agent, pending.
    fn pending() -> Value {
        json!({
            "apiVersion": "agentgate.dev/v1alpha1", "kind": "HeldCall",
            "metadata": {"name": "triage-bot-x7k2p", "namespace": "agents", "generation": 1},
            "spec": {
                "sandboxRef": {"name": "triage-bot"}, "pod": "triage-bot", "requester": AGENT,
                "kind": "tools/call", "tool": "delete_file", "arguments": "{\"file_id\":\"13\"}",
                "server": "drive.internal:443/mcp", "binary": "/usr/local/bin/agent",
                "rule": "drive", "reason": "no rule allows tools/call delete_file with these arguments",
                "expiresAt": "2026-12-06T06:00:00Z"
            }
        })
    }

    /// `held` with `condition` (Approved, Denied, Expired) set by `who`.
    fn decided(held: &Value, condition: &str, who: &str) -> Value {
        let mut decided = held.clone();
        decided["status"] = json!({"conditions": [{
            "type": condition, "status": "True", "reason": format!("Reviewer{condition}"),
            "message": format!("{} by {who:?}", condition.to_lowercase()),
            "observedGeneration": 1, "lastTransitionTime": "2026-12-06T05:59:00Z"
        }]});
        decided
    }

    #[tokio::test]
    async fn only_the_operator_writes_a_held_call() {
        let harness = Cluster::example().serve();
        let held = pending();
        let by = |user: &str| review(&HELD_CALLS, "CREATE", user, Some(&held), None);
        assert_allowed(&harness.admit(ENDPOINT, &by(OPERATOR)).await);
        for user in [AGENT, ALICE] {
            assert_denied(
                &harness.admit(ENDPOINT, &by(user)).await,
                &["held calls are written by the agentgate operator"],
            );
        }
        let mut changed = held.clone();
        changed["spec"]["arguments"] = json!("{\"file_id\":\"7\"}");
        let update = review(&HELD_CALLS, "UPDATE", ALICE, Some(&changed), Some(&held));
        assert_denied(
            &harness.admit(ENDPOINT, &update).await,
            &["spec is immutable"],
        );
    }

    #[tokio::test]
    async fn a_person_with_the_approve_verb_decides_but_never_the_agent() {
        let old = pending();
        let approve =
            |who: &str| status_review(&HELD_CALLS, who, &decided(&old, "Approved", who), &old);
        let harness = Cluster::example().serve();
        assert_denied(
            &harness.admit(ENDPOINT, &approve(BOB)).await,
            &[
                "\"bob\" may not approve or deny it: that needs the approve verb on heldcalls.agentgate.dev",
            ],
        );
        let reviewer = Cluster::example()
            .grant(BOB, "approve", "heldcalls")
            .serve();
        assert_allowed(&reviewer.admit(ENDPOINT, &approve(BOB)).await);
        let agent = Cluster::example()
            .grant(AGENT, "approve", "heldcalls")
            .serve();
        assert_denied(
            &agent.admit(ENDPOINT, &approve(AGENT)).await,
            &["made this call and cannot approve or deny it"],
        );
        // In someone else's name: refused.
        let forged = status_review(&HELD_CALLS, BOB, &decided(&old, "Approved", ALICE), &old);
        assert_denied(
            &reviewer.admit(ENDPOINT, &forged).await,
            &["must begin with approved by \"bob\""],
        );
    }

    #[tokio::test]
    async fn a_decided_or_expired_call_stays_so() {
        let reviewer = Cluster::example()
            .grant(BOB, "approve", "heldcalls")
            .serve();
        let denied = decided(&pending(), "Denied", ALICE);
        let mut flipped = decided(&pending(), "Approved", BOB);
        flipped["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(denied["status"]["conditions"][0].clone());
        let flip = status_review(&HELD_CALLS, BOB, &flipped, &denied);
        assert_denied(&reviewer.admit(ENDPOINT, &flip).await, &["final"]);

        // Expired is the operator's to write, and final too.
        let expired = decided(&pending(), "Expired", "nobody");
        let expire = status_review(&HELD_CALLS, BOB, &expired, &pending());
        assert_denied(
            &reviewer.admit(ENDPOINT, &expire).await,
            &["only the agentgate operator writes the status"],
        );
        let mut late = expired.clone();
        late["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(decided(&pending(), "Approved", BOB)["status"]["conditions"][0].clone());
        let approve_late = status_review(&HELD_CALLS, BOB, &late, &expired);
        assert_denied(
            &reviewer.admit(ENDPOINT, &approve_late).await,
            &["already expired"],
        );
        let operator = status_review(&HELD_CALLS, OPERATOR, &expired, &pending());
        assert_allowed(&reviewer.admit(ENDPOINT, &operator).await);
    }
}
