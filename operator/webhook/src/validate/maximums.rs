//! `POST /validate/maximumpolicies`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;

use crate::state::WebhookState;
use crate::validate::envelope::{Review, answer, object_name, status_answer};
use agentgate_api::crd::MaximumPolicy;
use agentgate_governance::admission::{Answer, review_maximum};
use agentgate_governance::authority::Requester;

pub(crate) async fn validate_maximum(
    State(state): State<Arc<WebhookState>>,
    review: Review,
) -> Json<AdmissionReview<DynamicObject>> {
    let s = state.clone();
    answer(
        &state,
        "maximumpolicies",
        "MaximumPolicy",
        review,
        |request, new: Option<MaximumPolicy>, old| async move {
            let name = object_name(new.as_ref(), old.as_ref());
            if request.sub_resource.as_deref() == Some("status") {
                return status_answer(&s, &request, "maximumpolicy", &name);
            }
            let who = Requester::of(&request.user_info);
            let what = format!("maximumpolicy {name:?}");
            if let Some(message) = s.agent_refusal(&who, &what).await {
                return Answer::Deny(message);
            }
            let Some(maximum) = new else {
                return Answer::allow();
            };
            s.with_deadline("maximumpolicy", move |prover| {
                review_maximum(&maximum, &prover)
            })
            .await
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::testkit::{
        AGENT, ALICE, Cluster, MAXIMUMS, OPERATOR, assert_allowed, assert_denied, example_maximum,
        review, status_review,
    };

    const ENDPOINT: &str = "/validate/maximumpolicies";

    #[tokio::test]
    async fn a_well_formed_ceiling_is_admitted() {
        let harness = Cluster::example().serve();
        let maximum = example_maximum();
        let create = review(&MAXIMUMS, "CREATE", ALICE, Some(&maximum), None);
        assert_allowed(&harness.admit(ENDPOINT, &create).await);
        assert_eq!(harness.admissions_counted("maximumpolicies", true), 1);
    }

    #[tokio::test]
    async fn a_default_mode_outside_the_allowed_modes_is_refused() {
        let harness = Cluster::example().serve();
        let mut maximum = example_maximum();
        maximum["spec"]["allowedModes"] = json!(["ask"]);
        maximum["spec"]["defaultMode"] = json!("auto");
        let create = review(&MAXIMUMS, "CREATE", ALICE, Some(&maximum), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert_denied(
            &response,
            &[
                "maximumpolicy \"org-ceiling\": spec.defaultMode \"auto\" is not in spec.allowedModes",
            ],
        );
        assert_eq!(harness.admissions_counted("maximumpolicies", false), 1);
    }

    #[tokio::test]
    async fn an_agent_never_writes_a_ceiling() {
        let harness = Cluster::example().serve();
        let maximum = example_maximum();
        let update = review(&MAXIMUMS, "UPDATE", AGENT, Some(&maximum), Some(&maximum));
        let response = harness.admit(ENDPOINT, &update).await;
        assert_denied(
            &response,
            &[
                "maximumpolicy \"org-ceiling\"",
                "is the agent of sandbox agents/triage-bot",
            ],
        );
        let delete = review(&MAXIMUMS, "DELETE", AGENT, None, Some(&maximum));
        assert_denied(
            &harness.admit(ENDPOINT, &delete).await,
            &["is the agent of sandbox"],
        );
    }

    #[tokio::test]
    async fn an_agent_the_cache_does_not_show_yet_still_never_writes_a_ceiling() {
        // The sandbox was created a moment ago: the API server has it, the
        // webhook's cache not yet.
        let mut cluster = Cluster::example();
        cluster.api.sandboxes = std::mem::take(&mut cluster.sandboxes);
        let harness = cluster.serve();
        let maximum = example_maximum();
        let delete = review(&MAXIMUMS, "DELETE", AGENT, None, Some(&maximum));
        assert_denied(
            &harness.admit(ENDPOINT, &delete).await,
            &["is the agent of sandbox agents/triage-bot"],
        );
    }

    #[tokio::test]
    async fn a_service_account_no_sandbox_names_may_write_a_ceiling() {
        // A GitOps controller's account: neither the cache nor the live
        // list of its namespace names it as an agent.
        let mut cluster = Cluster::example();
        cluster.sandboxes.clear();
        let harness = cluster.serve();
        let maximum = example_maximum();
        let delete = review(
            &MAXIMUMS,
            "DELETE",
            "system:serviceaccount:no-such:bot",
            None,
            Some(&maximum),
        );
        let response = harness.admit(ENDPOINT, &delete).await;
        assert_allowed(&response);
    }

    #[tokio::test]
    async fn only_the_operator_writes_a_ceilings_status() {
        let harness = Cluster::example().serve();
        let maximum = example_maximum();
        let mut marked = maximum.clone();
        marked["status"] = json!({"observedGeneration": 2});
        let by_alice = status_review(&MAXIMUMS, ALICE, &marked, &maximum);
        assert_denied(
            &harness.admit(ENDPOINT, &by_alice).await,
            &["maximumpolicy \"org-ceiling\": only the agentgate operator writes status"],
        );
        let by_operator = status_review(&MAXIMUMS, OPERATOR, &marked, &maximum);
        assert_allowed(&harness.admit(ENDPOINT, &by_operator).await);
    }

    #[tokio::test]
    async fn a_ceiling_of_the_wrong_shape_is_refused_as_unreadable() {
        let harness = Cluster::example().serve();
        let mut maximum = example_maximum();
        maximum["spec"]["allowedModes"] = json!("whenever");
        let create = review(&MAXIMUMS, "CREATE", ALICE, Some(&maximum), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert_denied(
            &response,
            &[
                "cannot read the MaximumPolicy: invalid type: string \"whenever\", expected a sequence",
            ],
        );
    }
}
