//! The AdmissionReview envelope every admission handler shares: read the
//! body (garbage gets an AdmissionReview that says why), refuse a review
//! of another kind than the handler's, decode the objects as that kind,
//! refuse until the caches have synced, then encode the handler's
//! [`Answer`] and count it.

use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::rejection::BytesRejection;
use kube::ResourceExt;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use serde::de::DeserializeOwned;

use crate::state::WebhookState;
use agentgate_governance::admission::Answer;
use agentgate_governance::authority::{Requester, status_writer_refusal};

fn typed<T: DeserializeOwned>(object: &DynamicObject, kind: &str) -> Result<T, String> {
    serde_json::to_value(object)
        .and_then(serde_json::from_value)
        .map_err(|e| format!("cannot read the {kind}: {e}"))
}

/// A request body, read whole (up to [`MAX_REVIEW_BYTES`]) and decoded by
/// [`read_review`], so that garbage gets an AdmissionReview that says why
/// instead of the framework's plain-text rejection.
pub(crate) type Review = Result<axum::body::Bytes, BytesRejection>;

/// The largest AdmissionReview read: an object and its old object at the
/// API server's request limit (3 MiB each), plus the envelope.
pub const MAX_REVIEW_BYTES: usize = 8 * 1024 * 1024;

/// The AdmissionReview in a request body, or the refusal to send back: a
/// body too large or unreadable, not JSON, or not an AdmissionReview.
fn read_review(body: Review) -> Result<AdmissionReview<DynamicObject>, String> {
    let bytes = body.map_err(|e| format!("cannot read the request body: {}", e.body_text()))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("not an AdmissionReview: {e}"))
}

/// The request's object and old object as `T` (a delete has only the old
/// one); an unreadable one is a denial.
fn decode<T: DeserializeOwned>(
    request: &AdmissionRequest<DynamicObject>,
    type_name: &str,
) -> Result<(Option<T>, Option<T>), String> {
    let read = |o: &Option<DynamicObject>| o.as_ref().map(|o| typed(o, type_name)).transpose();
    Ok((read(&request.object)?, read(&request.old_object)?))
}

/// Decodes the review and its objects as `T`, runs `decide` on them,
/// encodes the answer, and counts it.
pub(crate) async fn answer<T, F, Fut>(
    state: &WebhookState,
    kind: &'static str,
    type_name: &'static str,
    review: Review,
    decide: F,
) -> Json<AdmissionReview<DynamicObject>>
where
    T: DeserializeOwned,
    F: FnOnce(AdmissionRequest<DynamicObject>, Option<T>, Option<T>) -> Fut,
    Fut: Future<Output = Answer>,
{
    let started = Instant::now();
    let review = match read_review(review) {
        Ok(review) => review,
        Err(e) => {
            tracing::warn!(kind, error = %e, "unreadable admission review");
            state
                .metrics
                .admission(kind, false, started.elapsed().as_secs_f64());
            return Json(AdmissionResponse::invalid(e).into_review());
        }
    };
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(kind, error = %e, "malformed admission review");
            return Json(AdmissionResponse::invalid(e.to_string()).into_review());
        }
    };
    // A review about another kind would be read as this one with every
    // unknown field dropped and most of it defaulted: refuse it instead.
    let wrong_kind = (request.kind.kind != type_name || request.resource.resource != kind)
        .then(|| {
            format!(
                "{kind}: this endpoint judges {type_name} objects, not {} (resource {:?} of {}/{}): the webhook configuration sends it to the wrong endpoint (fail closed)",
                request.kind.kind, request.resource.resource, request.resource.group, request.resource.version
            )
        });
    let base = AdmissionResponse::from(&request);
    let (uid, name, namespace, user, operation) = (
        request.uid.clone(),
        request.name.clone(),
        request.namespace.clone().unwrap_or_default(),
        request.user_info.username.clone().unwrap_or_default(),
        format!("{:?}", request.operation),
    );
    let synced = wrong_kind.is_some()
        || tokio::time::timeout(Duration::from_secs(2), state.synced())
            .await
            .unwrap_or(false);
    let answer = match wrong_kind {
        Some(message) => Answer::Deny(message),
        None => match decode::<T>(&request, type_name) {
            _ if !synced => Answer::Deny(format!(
                "{kind}: the agentgate webhook has not synced its caches yet; retry in a moment (fail closed)"
            )),
            Ok((None, None)) => Answer::allow(),
            Ok((new, old)) => decide(request, new, old).await,
            Err(e) => Answer::Deny(e),
        },
    };
    let allowed = !matches!(answer, Answer::Deny(_));
    let response = match answer {
        Answer::Audit(problems) => {
            tracing::info!(kind, %uid, %name, %namespace, %user, %operation, problems = %problems.join(" "), "admitted in audit mode");
            let mut r = base;
            // The API server prefixes the key with the webhook's name
            // (pods.agentgate.dev/findings); a key with a '/' is dropped.
            r.audit_annotations
                .insert("findings".into(), problems.join(" "));
            r
        }
        Answer::Allow(warnings) => {
            let mut r = base;
            if !warnings.is_empty() {
                r.warnings = Some(warnings);
            }
            r
        }
        Answer::Deny(message) => {
            tracing::info!(kind, %uid, %name, %namespace, %user, %operation, %message, "admission denied");
            let mut r = base.deny(message);
            r.result.code = 403;
            r.result.reason = "Forbidden".into();
            r
        }
    };
    state
        .metrics
        .admission(kind, allowed, started.elapsed().as_secs_f64());
    Json(response.into_review())
}

/// The name of the object a request is about.
pub(crate) fn object_name<K: ResourceExt>(new: Option<&K>, old: Option<&K>) -> String {
    new.or(old).map(|o| o.name_any()).unwrap_or_default()
}

/// Only the operator writes any status.
pub(crate) fn status_answer(
    state: &WebhookState,
    request: &AdmissionRequest<DynamicObject>,
    kind: &str,
    name: &str,
) -> Answer {
    let who = Requester::of(&request.user_info);
    let operator = state.operator_user.get().map(String::as_str);
    match status_writer_refusal(&who, operator, kind, name) {
        Some(message) => Answer::Deny(message),
        None => Answer::allow(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::MAX_REVIEW_BYTES;
    use crate::testkit::{
        ALICE, Cluster, REVIEW_UID, SANDBOXES, assert_denied, example_sandbox, review,
    };

    const ENDPOINT: &str = "/validate/agentsandboxes";

    #[tokio::test]
    async fn a_body_that_is_not_json_is_refused_saying_so() {
        let harness = Cluster::example().serve();
        let response = harness.admit_bytes(ENDPOINT, "{not json").await;
        assert!(!response.allowed);
        assert_eq!(response.result.reason, "InvalidRequest");
        assert!(
            response
                .result
                .message
                .starts_with("not an AdmissionReview: "),
            "{}",
            response.result.message
        );
        assert_eq!(harness.admissions_counted("agentsandboxes", false), 1);
    }

    #[tokio::test]
    async fn json_that_is_not_an_admission_review_is_refused_saying_so() {
        let harness = Cluster::example().serve();
        let response = harness
            .admit(ENDPOINT, &json!({"kind": "AdmissionReview", "request": 7}))
            .await;
        assert!(!response.allowed);
        assert!(
            response
                .result
                .message
                .starts_with("not an AdmissionReview: "),
            "{}",
            response.result.message
        );
    }

    #[tokio::test]
    async fn a_review_without_a_request_is_refused_saying_so() {
        let harness = Cluster::example().serve();
        let response = harness
            .admit(
                ENDPOINT,
                &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
            )
            .await;
        assert!(!response.allowed);
        assert_eq!(response.result.reason, "InvalidRequest");
        assert_eq!(
            response.result.message,
            "failed to convert AdmissionReview into AdmissionRequest"
        );
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused_as_an_admission_review() {
        let harness = Cluster::example().serve();
        let response = harness
            .admit_bytes(ENDPOINT, vec![b' '; MAX_REVIEW_BYTES + 1])
            .await;
        assert!(!response.allowed);
        assert!(
            response
                .result
                .message
                .starts_with("cannot read the request body: "),
            "{}",
            response.result.message
        );
    }

    #[tokio::test]
    async fn a_review_of_another_kind_is_refused_saying_so() {
        let harness = Cluster::example().serve();
        let sandbox = example_sandbox();
        let create = review(&SANDBOXES, "CREATE", ALICE, Some(&sandbox), None);
        let response = harness.admit("/validate/pods", &create).await;
        assert_denied(
            &response,
            &[
                "pods: this endpoint judges Pod objects, not AgentSandbox",
                "wrong endpoint (fail closed)",
            ],
        );
        assert_eq!(response.uid, REVIEW_UID);
        assert_eq!(harness.admissions_counted("pods", false), 1);
    }

    #[tokio::test]
    async fn every_request_is_refused_until_the_caches_have_listed() {
        let mut cluster = Cluster::example();
        cluster.synced = false;
        let harness = cluster.serve();
        let sandbox = example_sandbox();
        let create = review(&SANDBOXES, "CREATE", ALICE, Some(&sandbox), None);
        let response = harness.admit(ENDPOINT, &create).await;
        assert_denied(
            &response,
            &[
                "agentsandboxes: the agentgate webhook has not synced its caches yet",
                "fail closed",
            ],
        );
        assert_eq!(harness.admissions_counted("agentsandboxes", false), 1);
    }

    #[tokio::test]
    async fn a_review_without_any_object_is_admitted_with_its_uid() {
        let harness = Cluster::example().serve();
        let response = harness
            .admit(ENDPOINT, &review(&SANDBOXES, "CONNECT", ALICE, None, None))
            .await;
        assert!(response.allowed, "{}", response.result.message);
        assert_eq!(response.uid, REVIEW_UID);
        assert_eq!(harness.admissions_counted("agentsandboxes", true), 1);
    }
}
