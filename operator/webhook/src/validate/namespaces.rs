//! `POST /validate/namespaces`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;

use crate::state::WebhookState;
use crate::validate::envelope::{Review, answer};
use agentgate_governance::admission::Answer;
use agentgate_governance::governing::dropped_governance;

/// A namespace label change must not take its sandboxes out of a ceiling
/// (a MaximumPolicy's `namespaceSelector`) unless the author holds
/// `approve` in that namespace.
pub(crate) async fn validate_namespace(
    State(state): State<Arc<WebhookState>>,
    review: Review,
) -> Json<AdmissionReview<DynamicObject>> {
    let s = state.clone();
    answer(
        &state,
        "namespaces",
        "Namespace",
        review,
        |request, new: Option<Namespace>, old| async move {
            let (Some(new), Some(old)) = (new, old) else {
                return Answer::allow();
            };
            if new.labels() == old.labels() {
                return Answer::allow();
            }
            let namespace = new.name_any();
            let maximums = s.maximums.state();
            let sandboxes = s.sandboxes.state();
            let mut dropped: Vec<String> = Vec::new();
            for sandbox in sandboxes
                .iter()
                .filter(|sb| sb.namespace().as_deref() == Some(namespace.as_str()))
            {
                for maximum in dropped_governance(
                    maximums.iter().map(|m| m.as_ref()),
                    (old.labels(), sandbox.labels()),
                    (new.labels(), sandbox.labels()),
                ) {
                    dropped.push(format!("{} (sandbox {})", maximum, sandbox.name_any()));
                }
            }
            if dropped.is_empty() {
                return Answer::allow();
            }
            let user = request.user_info.username.clone().unwrap_or_default();
            match s.may_approve(&request, &namespace, "").await {
                Ok(true) => Answer::allow(),
                Ok(false) => Answer::Deny(format!(
                    "namespace {namespace:?}: the new labels take sandboxes out of MaximumPolicy {}; stepping out of a ceiling needs the approve verb on policyproposals.agentgate.dev in namespace {namespace:?}, which {user:?} does not hold",
                    dropped.join(", ")
                )),
                Err(e) => Answer::Deny(format!("namespace {namespace:?}: {e}")),
            }
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::testkit::{
        ALICE, Cluster, NAMESPACES, assert_allowed, assert_denied, namespace, review,
    };

    const ENDPOINT: &str = "/validate/namespaces";

    #[tokio::test]
    async fn leaving_a_ceiling_needs_the_approve_verb() {
        let old = namespace("agents", json!({"team": "ml"}));
        let new = namespace("agents", json!({"team": "research"}));
        let update = review(&NAMESPACES, "UPDATE", ALICE, Some(&new), Some(&old));

        let harness = Cluster::example().serve();
        let refused = harness.admit(ENDPOINT, &update).await;
        assert_denied(
            &refused,
            &[
                "namespace \"agents\": the new labels take sandboxes out of MaximumPolicy org-ceiling (sandbox triage-bot)",
                "needs the approve verb on policyproposals.agentgate.dev in namespace \"agents\", which \"alice\" does not hold",
            ],
        );
        assert_eq!(harness.admissions_counted("namespaces", false), 1);

        let reviewer = Cluster::example().grant(ALICE, "approve", "policyproposals");
        assert_allowed(&reviewer.serve().admit(ENDPOINT, &update).await);
    }

    #[tokio::test]
    async fn a_label_that_keeps_every_ceiling_needs_no_review() {
        let harness = Cluster::example().serve();
        let old = namespace("agents", json!({"team": "ml"}));
        let new = namespace("agents", json!({"team": "ml", "cost-centre": "42"}));
        let update = review(&NAMESPACES, "UPDATE", ALICE, Some(&new), Some(&old));
        assert_allowed(&harness.admit(ENDPOINT, &update).await);
        assert_eq!(harness.api.calls_to("/subjectaccessreviews"), 0);
    }

    #[tokio::test]
    async fn a_new_namespace_is_admitted() {
        let harness = Cluster::example().serve();
        let new = namespace("fresh", json!({}));
        let create = review(&NAMESPACES, "CREATE", ALICE, Some(&new), None);
        assert_allowed(&harness.admit(ENDPOINT, &create).await);
    }

    #[tokio::test]
    async fn an_unanswered_access_review_refuses_the_change() {
        let mut cluster = Cluster::example();
        cluster.api.reviews_unavailable = true;
        let old = namespace("agents", json!({"team": "ml"}));
        let new = namespace("agents", json!({}));
        let update = review(&NAMESPACES, "UPDATE", ALICE, Some(&new), Some(&old));
        let response = cluster.serve().admit(ENDPOINT, &update).await;
        assert_denied(
            &response,
            &["namespace \"agents\": cannot check the approve policyproposals permission"],
        );
    }

    #[tokio::test]
    async fn a_namespace_of_the_wrong_shape_is_refused_as_unreadable() {
        let harness = Cluster::example().serve();
        let old = namespace("agents", json!({"team": "ml"}));
        let mut new = old.clone();
        new["spec"] = json!({"finalizers": "kubernetes"});
        let update = review(&NAMESPACES, "UPDATE", ALICE, Some(&new), Some(&old));
        let response = harness.admit(ENDPOINT, &update).await;
        assert_denied(
            &response,
            &[
                "cannot read the Namespace: invalid type: string \"kubernetes\", expected a sequence",
            ],
        );
    }
}
