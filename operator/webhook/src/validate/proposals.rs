//! `POST /validate/policyproposals`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use kube::ResourceExt;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;

use crate::state::WebhookState;
use crate::validate::envelope::{Review, answer};
use agentgate_api::crd::PolicyProposal;
use agentgate_governance::admission::{Answer, ProposalCheck, review_proposal};

pub(crate) async fn validate_proposal(
    State(state): State<Arc<WebhookState>>,
    review: Review,
) -> Json<AdmissionReview<DynamicObject>> {
    let s = state.clone();
    answer(&state, "policyproposals", "PolicyProposal", review, |request, new: Option<PolicyProposal>, old| async move {
        let Some(proposal) = new else {
            return Answer::allow();
        };
        if request.sub_resource.as_deref() == Some("status") && s.by_operator(&request) {
            return Answer::allow();
        }
        let user = request.user_info.username.clone().unwrap_or_default();
        match review_proposal(
            &request.operation,
            request.sub_resource.as_deref(),
            old.as_ref(),
            &proposal,
            &user,
        ) {
            ProposalCheck::Allow => Answer::allow(),
            ProposalCheck::Deny(message) => Answer::Deny(message),
            ProposalCheck::NeedsApprove => {
                let namespace = request.namespace.clone().unwrap_or_default();
                match s.may_approve(&request, &namespace, &proposal.name_any()).await {
                    Ok(true) => Answer::allow(),
                    Ok(false) => Answer::Deny(format!(
                        "policyproposal {:?}: {user:?} may not approve or deny it: that needs the approve verb on policyproposals.agentgate.dev in namespace {namespace:?}",
                        proposal.name_any()
                    )),
                    Err(e) => Answer::Deny(format!("policyproposal {:?}: {e}", proposal.name_any())),
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
        AGENT, ALICE, BOB, Cluster, MAXIMUMS, OPERATOR, PROPOSALS, assert_allowed, assert_denied,
        example_maximum, example_proposal, review, status_review,
    };

    const ENDPOINT: &str = "/validate/policyproposals";

    /// The example proposal, created and awaiting a reviewer.
    fn awaiting() -> Value {
        let mut proposal = example_proposal();
        proposal["metadata"]["generation"] = json!(1);
        proposal["status"] = json!({"phase": "AwaitingApproval"});
        proposal
    }

    /// `proposal` approved by `reviewer`, as `kubectl agentgate approve` writes it.
    fn approved_by(proposal: &Value, reviewer: &str) -> Value {
        let mut approved = proposal.clone();
        approved["status"]["conditions"] = json!([{
            "type": "Approved", "status": "True", "reason": "Approved",
            "message": format!("approved by {reviewer:?}"),
            "observedGeneration": 1,
            "lastTransitionTime": "2025-01-01T00:00:00Z"
        }]);
        approved
    }

    #[tokio::test]
    async fn the_requester_files_a_proposal_in_their_own_name() {
        let harness = Cluster::example().serve();
        let proposal = example_proposal();
        let create = review(&PROPOSALS, "CREATE", AGENT, Some(&proposal), None);
        assert_allowed(&harness.admit(ENDPOINT, &create).await);
        assert_eq!(harness.admissions_counted("policyproposals", true), 1);
    }

    #[tokio::test]
    async fn a_proposal_in_someone_elses_name_is_refused() {
        let harness = Cluster::example().serve();
        let proposal = example_proposal();
        let create = review(&PROPOSALS, "CREATE", ALICE, Some(&proposal), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert_denied(
            &response,
            &[&format!(
                "policyproposal \"comment-on-issues\": spec.requestedBy is {AGENT:?} but the request comes from \"alice\""
            )],
        );
    }

    #[tokio::test]
    async fn a_proposals_spec_never_changes() {
        let harness = Cluster::example().serve();
        let old = example_proposal();
        let mut new = old.clone();
        new["spec"]["rationale"] = json!("something else entirely");
        let update = review(&PROPOSALS, "UPDATE", AGENT, Some(&new), Some(&old));
        let response = harness.admit(ENDPOINT, &update).await;
        assert_denied(&response, &["spec is immutable once created"]);
    }

    #[tokio::test]
    async fn a_review_needs_the_approve_verb() {
        let old = awaiting();
        let new = approved_by(&old, BOB);
        let approve = status_review(&PROPOSALS, BOB, &new, &old);

        let harness = Cluster::example().serve();
        let refused = harness.admit(ENDPOINT, &approve).await;
        assert_denied(
            &refused,
            &[
                "policyproposal \"comment-on-issues\": \"bob\" may not approve or deny it: that needs the approve verb on policyproposals.agentgate.dev in namespace \"agents\"",
            ],
        );
        assert_eq!(harness.api.calls_to("/subjectaccessreviews"), 1);

        let reviewer = Cluster::example().grant(BOB, "approve", "policyproposals");
        assert_allowed(&reviewer.serve().admit(ENDPOINT, &approve).await);
    }

    #[tokio::test]
    async fn the_requester_never_reviews_their_own_proposal() {
        let harness = Cluster::example()
            .grant(AGENT, "approve", "policyproposals")
            .serve();
        let old = awaiting();
        let new = approved_by(&old, AGENT);
        let approve = status_review(&PROPOSALS, AGENT, &new, &old);
        let response = harness.admit(ENDPOINT, &approve).await;
        assert_denied(&response, &["requested it and cannot approve or deny it"]);
        assert_eq!(harness.api.calls_to("/subjectaccessreviews"), 0);
    }

    #[tokio::test]
    async fn the_operator_writes_a_proposals_status_without_review() {
        let harness = Cluster::example().serve();
        let old = awaiting();
        let mut new = old.clone();
        new["status"] = json!({"phase": "Applied", "reason": "committed"});
        let write = status_review(&PROPOSALS, OPERATOR, &new, &old);
        assert_allowed(&harness.admit(ENDPOINT, &write).await);
        assert_eq!(harness.api.calls_to("/subjectaccessreviews"), 0);
    }

    #[tokio::test]
    async fn a_delete_is_admitted() {
        let harness = Cluster::example().serve();
        let proposal = example_proposal();
        let delete = review(&PROPOSALS, "DELETE", ALICE, None, Some(&proposal));
        assert_allowed(&harness.admit(ENDPOINT, &delete).await);
    }

    #[tokio::test]
    async fn a_maximum_sent_as_a_proposal_is_refused() {
        let harness = Cluster::example().serve();
        let maximum = example_maximum();
        // Reviewed as what it is: another kind.
        let create = review(&MAXIMUMS, "CREATE", ALICE, Some(&maximum), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert_denied(
            &response,
            &["judges PolicyProposal objects, not MaximumPolicy"],
        );
        // Reviewed as a proposal: unreadable as one.
        let create = review(&PROPOSALS, "CREATE", ALICE, Some(&maximum), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert_denied(
            &response,
            &["cannot read the PolicyProposal: missing field `sandboxRef`"],
        );
    }
}
