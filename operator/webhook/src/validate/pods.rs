//! `POST /validate/pods`.

use std::cell::Cell;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;
use kube::runtime::reflector::ObjectRef;

use crate::state::WebhookState;
use crate::validate::envelope::{Review, answer};
use agentgate_api::crd::AgentScan;
use agentgate_governance::admission::Answer;
use agentgate_governance::pod_admission::review_pod;
use agentgate_governance::pod_template::owning_sandbox;

pub(crate) async fn validate_pod(
    State(state): State<Arc<WebhookState>>,
    review: Review,
) -> Json<AdmissionReview<DynamicObject>> {
    let s = state.clone();
    answer(
        &state,
        "pods",
        "Pod",
        review,
        |request, pod: Option<Pod>, old| async move {
            let Some(pod) = pod else {
                return Answer::allow();
            };
            let namespace = request.namespace.clone().unwrap_or_default();
            let labels = match s.namespace_labels(&namespace).await {
                Ok(l) => l,
                Err(e) => return Answer::Deny(format!("pod {:?}: {e}", request.name)),
            };
            // Only the operator's own pods borrow their sandbox's severance
            // proofs and acceptances: an owner reference can be copied by
            // anyone who can read the sandbox.
            let by_operator = s.by_operator(&request);
            let sandbox = owning_sandbox(&pod)
                .filter(|_| by_operator)
                .and_then(|(name, uid)| {
                    s.sandboxes
                        .get(&ObjectRef::new(&name).within(&namespace))
                        .filter(|sb| sb.uid().as_deref() == Some(uid.as_str()))
                });
            // Judged by the cache first; only when the review looked up a
            // digest the cache lacks is it judged again by a live list, so
            // ungoverned pods and images already running cost no API call.
            let judge = |scans: &[Arc<AgentScan>]| {
                let missed = Cell::new(false);
                let tool_labels = sandbox
                    .as_deref()
                    .map(|sb| sb.spec.tool_labels.as_slice())
                    .unwrap_or_default();
                let scan_for = |digest: &str| {
                    let found = s.scan_in(scans, digest, tool_labels);
                    missed.set(missed.get() || matches!(found, Ok(None)));
                    found.map(|found| found.map(|(_, cached)| cached))
                };
                let review = review_pod(
                    &pod,
                    old.as_ref(),
                    &labels,
                    sandbox.as_deref(),
                    &s.data_plane,
                    &scan_for,
                    Timestamp::now(),
                );
                (review, missed.get())
            };
            let (review, missed) = judge(&s.scans.state());
            if missed && let Some(live) = s.live_scans().await {
                return judge(&live).0.answer();
            }
            review.answer()
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::testkit::{
        ALICE, Cluster, PODS, assert_allowed, assert_denied, namespace, pinned_image, pod, review,
        scan,
    };

    const ENDPOINT: &str = "/validate/pods";
    const UNPINNED: &str = "registry.example/agent:1";

    #[tokio::test]
    async fn a_pod_of_an_ungoverned_namespace_is_admitted() {
        let harness = Cluster::example().serve();
        let pod = pod("agents", UNPINNED);
        let create = review(&PODS, "CREATE", ALICE, Some(&pod), None);
        assert_allowed(&harness.admit(ENDPOINT, &create).await);
        assert_eq!(harness.admissions_counted("pods", true), 1);
    }

    #[tokio::test]
    async fn an_enforced_namespace_refuses_an_unpinned_image() {
        let harness = Cluster::example().serve();
        let pod = pod("enforced", UNPINNED);
        let create = review(&PODS, "CREATE", ALICE, Some(&pod), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert_denied(
            &response,
            &["image \"registry.example/agent:1\" is not pinned by digest"],
        );
        assert_eq!(harness.admissions_counted("pods", false), 1);
    }

    #[tokio::test]
    async fn an_enforced_namespace_refuses_an_unscanned_image() {
        let harness = Cluster::example().serve();
        let pod = pod("enforced", &pinned_image());
        let create = review(&PODS, "CREATE", ALICE, Some(&pod), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert_denied(
            &response,
            &["has no AgentScan; scan it with `agentgate scan"],
        );
    }

    #[tokio::test]
    async fn an_enforced_namespace_admits_a_scanned_image_without_findings() {
        let mut cluster = Cluster::example();
        cluster.scans = vec![scan("agent", &pinned_image())];
        let harness = cluster.serve();
        let pod = pod("enforced", &pinned_image());
        let create = review(&PODS, "CREATE", ALICE, Some(&pod), None);
        assert_allowed(&harness.admit(ENDPOINT, &create).await);
    }

    #[tokio::test]
    async fn a_scan_not_yet_in_the_cache_is_read_from_the_api_server() {
        let mut cluster = Cluster::example();
        cluster.api.scans = vec![scan("agent", &pinned_image())];
        let harness = cluster.serve();
        let pod = pod("enforced", &pinned_image());
        let create = review(&PODS, "CREATE", ALICE, Some(&pod), None);
        assert_allowed(&harness.admit(ENDPOINT, &create).await);
        assert_eq!(harness.api.calls_to("/agentscans"), 1);
    }

    #[tokio::test]
    async fn a_cached_scan_needs_no_api_read() {
        let mut cluster = Cluster::example();
        cluster.scans = vec![scan("agent", &pinned_image())];
        let harness = cluster.serve();
        let pod = pod("enforced", &pinned_image());
        let create = review(&PODS, "CREATE", ALICE, Some(&pod), None);
        assert_allowed(&harness.admit(ENDPOINT, &create).await);
        assert_eq!(harness.api.calls_to("/agentscans"), 0);
    }

    #[tokio::test]
    async fn an_ungoverned_pod_needs_no_api_read() {
        let harness = Cluster::example().serve();
        let pod = pod("agents", &pinned_image());
        let create = review(&PODS, "CREATE", ALICE, Some(&pod), None);
        assert_allowed(&harness.admit(ENDPOINT, &create).await);
        assert_eq!(harness.api.calls_to("/agentscans"), 0);
    }

    #[tokio::test]
    async fn two_scans_of_one_digest_refuse_the_pod() {
        let mut cluster = Cluster::example();
        cluster.scans = vec![
            scan("agent", &pinned_image()),
            scan("twin", &pinned_image()),
        ];
        let harness = cluster.serve();
        let pod = pod("enforced", &pinned_image());
        let create = review(&PODS, "CREATE", ALICE, Some(&pod), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert_denied(
            &response,
            &["several AgentScans (agent, twin) describe its digest; delete all but one"],
        );
    }

    #[tokio::test]
    async fn a_warned_namespace_admits_with_the_problem_as_a_warning() {
        let harness = Cluster::example().serve();
        let pod = pod("warned", UNPINNED);
        let create = review(&PODS, "CREATE", ALICE, Some(&pod), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert!(response.allowed, "{}", response.result.message);
        let warnings = response.warnings.unwrap_or_default();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("is not pinned by digest"),
            "{warnings:?}"
        );
    }

    #[tokio::test]
    async fn an_audited_namespace_admits_with_the_problem_in_the_audit_log() {
        let harness = Cluster::example().serve();
        let pod = pod("audited", UNPINNED);
        let create = review(&PODS, "CREATE", ALICE, Some(&pod), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert!(response.allowed, "{}", response.result.message);
        assert_eq!(response.warnings, None);
        let findings = response.audit_annotations.get("findings").cloned();
        assert!(
            findings
                .as_deref()
                .is_some_and(|f| f.contains("is not pinned by digest")),
            "{:?}",
            response.audit_annotations
        );
    }

    #[tokio::test]
    async fn a_namespace_not_yet_cached_is_read_from_the_api_server() {
        let mut cluster = Cluster::example();
        cluster.api.namespaces = vec![namespace(
            "fresh",
            json!({"agentgate.dev/enforce": "enforce"}),
        )];
        let harness = cluster.serve();
        let fresh = pod("fresh", UNPINNED);
        let create = review(&PODS, "CREATE", ALICE, Some(&fresh), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert_denied(&response, &["is not pinned by digest"]);
        assert_eq!(harness.api.calls_to("/api/v1/namespaces/fresh"), 1);

        let elsewhere = pod("nowhere", UNPINNED);
        let create = review(&PODS, "CREATE", ALICE, Some(&elsewhere), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert_denied(
            &response,
            &["pod \"worker\": cannot read namespace \"nowhere\""],
        );
    }

    #[tokio::test]
    async fn a_pod_claiming_a_sandbox_must_be_in_its_enforced_shape() {
        let harness = Cluster::example().serve();
        let mut pod = pod("agents", &pinned_image());
        pod["metadata"]["labels"] = json!({"agentgate.dev/sandbox": "triage-bot"});
        let create = review(&PODS, "CREATE", ALICE, Some(&pod), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert_denied(
            &response,
            &["the pod claims an agent sandbox but is not in its enforced shape"],
        );
    }

    #[tokio::test]
    async fn a_pod_of_the_wrong_shape_is_refused_as_unreadable() {
        let harness = Cluster::example().serve();
        let mut pod = pod("enforced", UNPINNED);
        pod["spec"]["containers"] = json!("agent");
        let create = review(&PODS, "CREATE", ALICE, Some(&pod), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert_denied(
            &response,
            &["cannot read the Pod: invalid type: string \"agent\", expected a sequence"],
        );
    }
}
