//! `POST /validate/agentscans`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;

use crate::state::WebhookState;
use crate::validate::envelope::{Review, answer, object_name, status_answer};
use agentgate_api::crd::AgentScan;
use agentgate_governance::admission::{Answer, review_scan, scan_conflict};
use agentgate_governance::authority::{Requester, scan_writer_refusal};

pub(crate) async fn validate_scan(
    State(state): State<Arc<WebhookState>>,
    review: Review,
) -> Json<AdmissionReview<DynamicObject>> {
    let s = state.clone();
    answer(
        &state,
        "agentscans",
        "AgentScan",
        review,
        |request, new: Option<AgentScan>, old| async move {
            let name = object_name(new.as_ref(), old.as_ref());
            if request.sub_resource.as_deref() == Some("status") {
                return status_answer(&s, &request, "agentscan", &name);
            }
            let who = Requester::of(&request.user_info);
            if let Some(message) =
                scan_writer_refusal(&who, &s.scan_writers, old.as_ref(), new.as_ref())
            {
                return Answer::Deny(message);
            }
            let Some(scan) = new else {
                return Answer::allow();
            };
            match review_scan(&scan) {
                Answer::Allow(warnings) => {
                    let others = s.scans.state();
                    match scan_conflict(&scan, others.iter().map(|s| s.as_ref())) {
                        Some(message) => Answer::Deny(message),
                        None => Answer::Allow(warnings),
                    }
                }
                other => other,
            }
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::testkit::{
        ALICE, CI, Cluster, SCANS, assert_allowed, assert_denied, pinned_image, review, scan,
        status_review,
    };

    const ENDPOINT: &str = "/validate/agentscans";

    #[tokio::test]
    async fn a_trusted_writer_publishes_a_pinned_scan() {
        let harness = Cluster::example().serve();
        let scan = scan("agent", &pinned_image());
        let create = review(&SCANS, "CREATE", CI, Some(&scan), None);
        assert_allowed(&harness.admit(ENDPOINT, &create).await);
        assert_eq!(harness.admissions_counted("agentscans", true), 1);
    }

    #[tokio::test]
    async fn anyone_else_is_refused() {
        let harness = Cluster::example().serve();
        let scan = scan("agent", &pinned_image());
        let create = review(&SCANS, "CREATE", ALICE, Some(&scan), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert_denied(
            &response,
            &["agentscan \"agent\": \"alice\" is not a trusted scan writer"],
        );
        assert_eq!(harness.admissions_counted("agentscans", false), 1);
    }

    #[tokio::test]
    async fn a_scan_of_an_unpinned_image_is_refused() {
        let harness = Cluster::example().serve();
        let scan = scan("agent", "registry.example/agent:latest");
        let create = review(&SCANS, "CREATE", CI, Some(&scan), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert_denied(
            &response,
            &[
                "agentscan \"agent\": spec.image \"registry.example/agent:latest\" is not pinned by digest",
            ],
        );
    }

    #[tokio::test]
    async fn a_second_scan_of_a_digest_is_refused() {
        let mut cluster = Cluster::example();
        cluster.scans = vec![scan("older", &pinned_image())];
        let harness = cluster.serve();
        let scan = scan("agent", &pinned_image());
        let create = review(&SCANS, "CREATE", CI, Some(&scan), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert_denied(
            &response,
            &[
                "agentscan \"agent\": AgentScan \"older\" already describes sha256:",
                "update that one instead",
            ],
        );
    }

    #[tokio::test]
    async fn only_the_operator_writes_a_scans_status() {
        let harness = Cluster::example().serve();
        let old = scan("agent", &pinned_image());
        let mut new = old.clone();
        new["status"] = json!({"findings": []});
        let write = status_review(&SCANS, CI, &new, &old);
        assert_denied(
            &harness.admit(ENDPOINT, &write).await,
            &["agentscan \"agent\": only the agentgate operator writes status; \"ci\" may not"],
        );
    }

    #[tokio::test]
    async fn a_scan_of_the_wrong_shape_is_refused_as_unreadable() {
        let harness = Cluster::example().serve();
        let mut scan = scan("agent", &pinned_image());
        scan["spec"]["graph"] = json!("none");
        let create = review(&SCANS, "CREATE", CI, Some(&scan), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert_denied(
            &response,
            &["cannot read the AgentScan: invalid type: string \"none\", expected struct Graph"],
        );
    }
}
