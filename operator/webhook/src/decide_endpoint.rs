//! `POST /v1/decide` over HTTP: who is asking (TokenReview), whether they
//! may ask about the sandbox, and the decision from the sandbox's
//! committed policy. The decision itself is pure and lives in
//! [`crate::decide`], which benchmarks and differential tests
//! call without a server.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::header::WWW_AUTHENTICATE;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use crate::caller::CallerRefusal;
use crate::decide::{DecideRequest, DecideResponse, FindingCitation, cite_finding, decide_action};
use crate::state::WebhookState;
use agentgate_api::crd::AgentSandbox;
use agentgate_governance::pod_admission::open_findings;
use agentgate_judgement::refusal::RefusalCode;
use agentgate_k8s::metrics::DecisionLabel;
use agentgate_trifecta::image::image_digest;

/// `POST /v1/decide`: 401 without a token the API server accepts, 403 for
/// a caller that is neither the sandbox's agent nor allowed to `get` it,
/// 400 for a body that is not a request, else the decision.
pub(super) async fn decide_endpoint(
    State(state): State<Arc<WebhookState>>,
    headers: HeaderMap,
    body: Result<axum::body::Bytes, BytesRejection>,
) -> axum::response::Response {
    let count = |outcome: &str| {
        state
            .metrics
            .decisions
            .get_or_create(&DecisionLabel {
                decision: outcome.into(),
            })
            .inc();
    };
    let user = match state.authenticate(&headers).await {
        Ok(user) => user,
        Err(refusal) => {
            count(refusal_label(&refusal));
            return refused(refusal);
        }
    };
    let body = match body {
        Ok(body) => body,
        Err(e) => {
            count("bad_request");
            return (
                e.status(),
                Json(DecideResponse::deny(
                    RefusalCode::MalformedAction,
                    format!("cannot read the request: {}", e.body_text()),
                )),
            )
                .into_response();
        }
    };
    // Read one way only: a key given twice (in `arguments` too), a byte
    // order mark or a number some reader would round is refused, since the
    // tool that runs the call may read it otherwise (docs/design.md §8).
    let read = agentgate_policy::strict_json::parse(&body)
        .map_err(|e| e.to_string())
        .and_then(|value| serde_json::from_value(value).map_err(|e| e.to_string()));
    let request: DecideRequest = match read {
        Ok(r) => r,
        Err(e) => {
            count("bad_request");
            return (
                StatusCode::BAD_REQUEST,
                Json(DecideResponse::deny(
                    RefusalCode::MalformedAction,
                    format!("cannot read the request: {e}"),
                )),
            )
                .into_response();
        }
    };
    if let Err(refusal) = state.may_ask(&user, &request).await {
        tracing::info!(
            user = user.username.as_deref().unwrap_or_default(),
            namespace = %request.namespace,
            sandbox = %request.sandbox,
            reason = %refusal,
            "/v1/decide refused"
        );
        count(refusal_label(&refusal));
        return refused(refusal);
    }
    let response = decide_for(&state, &request);
    count(if response.allow { "allow" } else { "deny" });
    (StatusCode::OK, Json(response)).into_response()
}

/// The metric label of a refused caller.
fn refusal_label(refusal: &CallerRefusal) -> &'static str {
    match refusal {
        CallerRefusal::Unauthenticated(_) => "unauthenticated",
        CallerRefusal::Forbidden(_) => "forbidden",
        CallerRefusal::Unavailable(_) => "unavailable",
    }
}

/// The HTTP answer to a refused caller: 401 (with a Bearer challenge), 403
/// or 503, and a deny with the reason in the body.
fn refused(refusal: CallerRefusal) -> axum::response::Response {
    let status = refusal.status();
    let body = Json(DecideResponse::deny(
        RefusalCode::CallerRefused,
        refusal.to_string(),
    ));
    if status == StatusCode::UNAUTHORIZED {
        (
            status,
            [(WWW_AUTHENTICATE, "Bearer realm=\"agentgate\"")],
            body,
        )
            .into_response()
    } else {
        (status, body).into_response()
    }
}

fn decide_for(state: &WebhookState, request: &DecideRequest) -> DecideResponse {
    let key = ObjectRef::new(&request.sandbox).within(&request.namespace);
    let Some(sandbox) = state.sandboxes.get(&key) else {
        return DecideResponse::deny(
            RefusalCode::PolicyUnavailable,
            format!("no AgentSandbox {}/{}", request.namespace, request.sandbox),
        );
    };
    let Some(status) = &sandbox.status else {
        return DecideResponse::deny(
            RefusalCode::PolicyUnavailable,
            "the sandbox has no committed policy yet",
        );
    };
    let Some(policy) = &status.effective_policy else {
        return DecideResponse::deny(
            RefusalCode::PolicyUnavailable,
            "the sandbox has no committed policy yet",
        );
    };
    let uid = sandbox.uid().unwrap_or_default();
    match state.policies.get(
        &request.namespace,
        &request.sandbox,
        &uid,
        status.revision,
        policy,
    ) {
        Ok(compiled) => {
            let mut response = decide_action(&compiled, request);
            response.revision = Some(status.revision);
            if !response.allow {
                response.finding = cite_unfixed(state, &sandbox, request);
            }
            response
        }
        Err(reason) => DecideResponse::deny(RefusalCode::PolicyUnavailable, reason),
    }
}

/// The unfixed finding of the sandbox's images that predicted a denied
/// action, from the sandbox's current findings status and the scan cache.
fn cite_unfixed(
    state: &WebhookState,
    sandbox: &AgentSandbox,
    request: &DecideRequest,
) -> Option<FindingCitation> {
    let status = sandbox.status.as_ref()?;
    // Severance records count only when proved for the committed revision
    // and this very scan, as at pod admission.
    let summary = status
        .findings
        .as_ref()
        .filter(|f| f.revision == Some(status.revision))?;
    let now = Timestamp::now();
    summary.images.iter().find_map(|image| {
        let labels = &sandbox.spec.tool_labels;
        let (scan, cached) = state.scan_for(image_digest(&image.image)?, labels).ok()??;
        let findings = cached.findings.as_ref().as_ref().ok()?;
        let accepted = &sandbox.spec.accepted_findings;
        let unfixed = open_findings(findings, Some(image), &cached, accepted, now);
        let graph = agentgate_governance::findings::sandbox_graph(&scan.spec.graph, labels);
        cite_finding(request, &unfixed, &graph)
    })
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use axum::http::header::WWW_AUTHENTICATE;
    use serde_json::{Value, json};

    use crate::server::MAX_REVIEW_BYTES;
    use crate::testkit::{AGENT, Cluster, Harness, committed_sandbox, example_sandbox};

    const ENDPOINT: &str = "/v1/decide";
    const AGENT_TOKEN: &str = "agent-token";
    const READER_TOKEN: &str = "reader-token";
    const READER: &str = "reader";

    /// The committed example sandbox; the agent's and a reader's tokens.
    fn cluster() -> Cluster {
        let mut cluster = Cluster::example();
        cluster.sandboxes = vec![committed_sandbox()];
        cluster.api.tokens = [(AGENT_TOKEN, AGENT), (READER_TOKEN, READER)]
            .into_iter()
            .map(|(t, u)| (t.to_string(), u.to_string()))
            .collect();
        cluster
    }

    /// A GET by the agent binary under `path` on api.github.com.
    fn github(method: &str, path: &str) -> Value {
        json!({
            "sandbox": "triage-bot", "namespace": "agents",
            "binary": "/usr/local/bin/agent", "host": "api.github.com", "port": 443,
            "layer": "rest", "method": method, "path": path
        })
    }

    async fn ask(harness: &Harness, body: &Value, token: Option<&str>) -> (StatusCode, Value) {
        let reply = harness.post(ENDPOINT, body.to_string(), token).await;
        (reply.status, reply.json())
    }

    #[track_caller]
    fn assert_decision(answer: &Value, allow: bool, reason: &str) {
        assert_eq!(answer["allow"], allow, "{answer}");
        let said = answer["reason"].as_str().unwrap_or_default();
        assert!(said.contains(reason), "{said:?} lacks {reason:?}");
    }

    #[tokio::test]
    async fn the_agent_is_allowed_what_its_committed_policy_allows() {
        let harness = cluster().serve();
        let request = github("GET", "/repos/acme/widgets/issues/7");
        let (status, answer) = ask(&harness, &request, Some(AGENT_TOKEN)).await;
        assert_eq!(status, StatusCode::OK);
        assert_decision(&answer, true, "api.github.com");
        assert_eq!(answer["revision"], 3);
        assert_eq!(answer["rule"], "github-read");
        assert_eq!(harness.decisions_counted("allow"), 1);
        // The agent of the sandbox needs no access review.
        assert_eq!(harness.api.calls_to("/subjectaccessreviews"), 0);
    }

    #[tokio::test]
    async fn the_agent_is_denied_what_its_committed_policy_does_not_allow() {
        let harness = cluster().serve();
        let request = github("DELETE", "/repos/acme/widgets");
        let (status, answer) = ask(&harness, &request, Some(AGENT_TOKEN)).await;
        assert_eq!(status, StatusCode::OK);
        assert_decision(&answer, false, "DELETE");
        assert_eq!(answer["revision"], 3);
        assert_eq!(harness.decisions_counted("deny"), 1);
    }

    #[tokio::test]
    async fn filesystem_actions_are_decided_by_the_allowed_paths() {
        let harness = cluster().serve();
        let read = json!({"sandbox": "triage-bot", "namespace": "agents", "access": "read", "path": "/app/main.py"});
        let (status, answer) = ask(&harness, &read, Some(AGENT_TOKEN)).await;
        assert_eq!(status, StatusCode::OK);
        assert_decision(&answer, true, "is under an allowed filesystem path");
        let write = json!({"sandbox": "triage-bot", "namespace": "agents", "access": "write", "path": "/etc/passwd"});
        let (status, answer) = ask(&harness, &write, Some(AGENT_TOKEN)).await;
        assert_eq!(status, StatusCode::OK);
        assert_decision(&answer, false, "is not under an allowed filesystem path");
    }

    #[tokio::test]
    async fn an_incomplete_action_is_denied_saying_what_is_missing() {
        let harness = cluster().serve();
        let request =
            json!({"sandbox": "triage-bot", "namespace": "agents", "host": "api.github.com"});
        let (status, answer) = ask(&harness, &request, Some(AGENT_TOKEN)).await;
        assert_eq!(status, StatusCode::OK);
        assert_decision(
            &answer,
            false,
            "a network action needs binary, host and port",
        );
    }

    #[tokio::test]
    async fn a_sandbox_without_a_committed_policy_denies_everything() {
        let mut cluster = cluster();
        cluster.sandboxes = vec![example_sandbox()];
        let harness = cluster.serve();
        let request = github("GET", "/repos/acme/widgets/issues/7");
        let (status, answer) = ask(&harness, &request, Some(AGENT_TOKEN)).await;
        assert_eq!(status, StatusCode::OK);
        assert_decision(&answer, false, "the sandbox has no committed policy yet");
    }

    #[tokio::test]
    async fn a_caller_without_a_token_is_challenged() {
        let harness = cluster().serve();
        let reply = harness
            .post(ENDPOINT, github("GET", "/").to_string(), None)
            .await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
        assert_eq!(
            reply
                .headers
                .get(WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok()),
            Some("Bearer realm=\"agentgate\"")
        );
        assert_decision(&reply.json(), false, "no bearer token");
        assert_eq!(harness.decisions_counted("unauthenticated"), 1);
        assert_eq!(harness.api.calls_to("/tokenreviews"), 0);
    }

    #[tokio::test]
    async fn a_token_the_api_server_rejects_is_401_and_remembered() {
        let harness = cluster().serve();
        for _ in 0..2 {
            let (status, answer) = ask(&harness, &github("GET", "/"), Some("stolen")).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED);
            assert_decision(
                &answer,
                false,
                "the token is not valid: invalid bearer token",
            );
        }
        assert_eq!(harness.api.calls_to("/tokenreviews"), 1);
    }

    #[tokio::test]
    async fn a_body_that_is_not_a_request_is_400() {
        let harness = cluster().serve();
        let reply = harness
            .post(ENDPOINT, "{\"sandbox\":", Some(AGENT_TOKEN))
            .await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST);
        assert_decision(&reply.json(), false, "cannot read the request: ");

        let mut unknown = github("GET", "/");
        unknown["verb"] = json!("GET");
        let (status, answer) = ask(&harness, &unknown, Some(AGENT_TOKEN)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_decision(&answer, false, "unknown field `verb`");
        assert_eq!(harness.decisions_counted("bad_request"), 2);

        // Read one way only: an argument given twice is refused, not read as
        // the last (the tool that runs the call may keep the first).
        let twice = r#"{"sandbox": "triage-bot", "namespace": "agents", "binary": "/usr/bin/python3",
            "host": "bank.internal", "port": 443, "path": "/mcp", "call": "tool", "name": "send_money",
            "arguments": {"recipient": "GB29NWBK60161331926819", "recipient": "US133000000121212121212"}}"#;
        let reply = harness.post(ENDPOINT, twice, Some(AGENT_TOKEN)).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST);
        assert_decision(
            &reply.json(),
            false,
            "cannot read the request: an object names the key \"recipient\" twice",
        );
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_413() {
        let harness = cluster().serve();
        let huge = vec![b' '; MAX_REVIEW_BYTES + 1];
        let reply = harness.post(ENDPOINT, huge, Some(AGENT_TOKEN)).await;
        assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_decision(&reply.json(), false, "cannot read the request: ");
    }

    #[tokio::test]
    async fn someone_who_may_not_get_the_sandbox_is_403() {
        let harness = cluster().serve();
        let request = github("GET", "/repos/acme/widgets/issues/7");
        let (status, answer) = ask(&harness, &request, Some(READER_TOKEN)).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert_decision(
            &answer,
            false,
            "\"reader\" is not the agent of agentsandbox agents/triage-bot and may not get it",
        );
        assert_eq!(harness.decisions_counted("forbidden"), 1);
    }

    #[tokio::test]
    async fn someone_who_may_get_the_sandbox_is_answered_and_remembered() {
        let harness = cluster().grant(READER, "get", "agentsandboxes").serve();
        let request = github("GET", "/repos/acme/widgets/issues/7");
        for _ in 0..2 {
            let (status, answer) = ask(&harness, &request, Some(READER_TOKEN)).await;
            assert_eq!(status, StatusCode::OK);
            assert_decision(&answer, true, "api.github.com");
        }
        assert_eq!(harness.api.calls_to("/tokenreviews"), 1);
        assert_eq!(harness.api.calls_to("/subjectaccessreviews"), 1);
    }

    #[tokio::test]
    async fn a_sandbox_that_does_not_exist_is_denied_by_name() {
        let harness = cluster().grant(READER, "get", "agentsandboxes").serve();
        let mut request = github("GET", "/");
        request["sandbox"] = json!("ghost");
        let (status, answer) = ask(&harness, &request, Some(READER_TOKEN)).await;
        assert_eq!(status, StatusCode::OK);
        assert_decision(&answer, false, "no AgentSandbox agents/ghost");
    }

    #[tokio::test]
    async fn an_unanswered_access_review_is_503() {
        let mut cluster = cluster();
        cluster.api.reviews_unavailable = true;
        let harness = cluster.serve();
        let request = github("GET", "/repos/acme/widgets/issues/7");
        let (status, answer) = ask(&harness, &request, Some(READER_TOKEN)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_decision(
            &answer,
            false,
            "cannot check the get agentsandboxes permission",
        );
        assert_eq!(harness.decisions_counted("unavailable"), 1);
    }
}
