//! `POST /v1/hold`: a sandbox's proxy puts a held call (`mode: ask`) to a
//! person (docs/proxy.md, "Held calls"). The caller proves it is the
//! sandbox's Pod with a projected ServiceAccount token of audience
//! [`HOLD_AUDIENCE`], bound to the Pod; the replica that takes the request
//! writes a HeldCall, publishes an Event, and answers once a reviewer sets
//! `Approved` or `Denied` (`kubectl agentgate approve|deny heldcall/NAME`)
//! or the hold expires, which it records as `Expired` first, so a late
//! approval can never be read as given. If the replica dies, the proxy's
//! request fails and the call is refused: every path but an approval
//! refuses.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::wait::await_condition;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::caller::CallerRefusal;
use crate::state::WebhookState;
use agentgate_api::crd::{
    AgentSandbox, HeldCall, HeldCallDecision, HeldCallSpec, SANDBOX_LABEL, SandboxRef,
    review_message_prefix, reviewer_in,
};
use agentgate_governance::authority::HELD_CALL_EXPIRED;
use agentgate_judgement::held::{HoldAnswer, HoldDecision, HoldRequest, MAX_HOLD_SECONDS};
use agentgate_k8s::FIELD_MANAGER;
use agentgate_k8s::k8s::events::event_note;
use agentgate_policy::compile::EndpointKind;

pub use agentgate_governance::sandbox_pod::HOLD_AUDIENCE;
/// Undecided held calls a sandbox may have at once: a flood of holds
/// cannot bury the reviewers' list.
pub const MAX_PENDING_PER_SANDBOX: usize = 8;
/// The longest arguments a HeldCall shows.
const MAX_ARGUMENT_BYTES: usize = 64 << 10;

/// `POST /v1/hold`: 401 without a token for [`HOLD_AUDIENCE`], 403 unless
/// it is bound to an AgentSandbox's Pod and is that sandbox's agent, 400
/// for a body that is not a hold, 429 with too many pending, 503 when the
/// API server cannot record it; else 200 with the decision.
pub(super) async fn hold_endpoint(
    State(state): State<Arc<WebhookState>>,
    headers: HeaderMap,
    body: Result<axum::body::Bytes, BytesRejection>,
) -> axum::response::Response {
    let user = match state.authenticate_for(&headers, Some(HOLD_AUDIENCE)).await {
        Ok(user) => user,
        Err(refusal) => return refused(refusal),
    };
    let sandbox = match state.pod_sandbox(&user, "puts calls on hold") {
        Ok(caller) => caller.sandbox,
        Err(refusal) => return refused(refusal),
    };
    let request = match body
        .map_err(|e| e.body_text())
        .and_then(|b| read_request(&b))
    {
        Ok(request) => request,
        Err(reason) => return error(StatusCode::BAD_REQUEST, reason),
    };
    if let Err(reason) = holds(&state, &sandbox, &request) {
        return error(StatusCode::FORBIDDEN, reason);
    }
    match hold(&state, &sandbox, &user, &request).await {
        Ok(answer) => (StatusCode::OK, Json(answer)).into_response(),
        Err((status, reason)) => error(status, reason),
    }
}

fn error(status: StatusCode, reason: String) -> axum::response::Response {
    tracing::info!(status = status.as_u16(), %reason, "/v1/hold refused");
    (status, Json(json!({"reason": reason}))).into_response()
}

fn refused(refusal: CallerRefusal) -> axum::response::Response {
    error(refusal.status(), refusal.to_string())
}

/// The request, read one way only (a key given twice, a BOM or a rounded
/// number is refused, as at `/v1/decide`).
fn read_request(body: &[u8]) -> Result<HoldRequest, String> {
    let value = agentgate_policy::strict_json::parse(body)
        .map_err(|e| format!("cannot read the hold: {e}"))?;
    let request: HoldRequest =
        serde_json::from_value(value).map_err(|e| format!("cannot read the hold: {e}"))?;
    if request.kind != "tools/call" {
        return Err(format!("only tools/call is held, not {:?}", request.kind));
    }
    if request.timeout_seconds == 0 || request.timeout_seconds > MAX_HOLD_SECONDS {
        return Err(format!(
            "timeoutSeconds is 1..={MAX_HOLD_SECONDS}, not {}",
            request.timeout_seconds
        ));
    }
    Ok(request)
}

/// Whether the sandbox's committed policy (compiled once per revision, as
/// for `/v1/decide`) has the rule the request names, with a `mode: ask`
/// entry for its tool on its server's port: a request that names anything
/// else was not held by this sandbox's policy.
fn holds(
    state: &WebhookState,
    sandbox: &AgentSandbox,
    request: &HoldRequest,
) -> Result<(), String> {
    let namespace = sandbox.namespace().unwrap_or_default();
    let refused = || {
        format!(
            "agentsandbox {namespace}/{}: its committed policy has no mode: ask entry of rule {:?} for tool {:?}",
            sandbox.name_any(),
            request.rule,
            request.tool
        )
    };
    let status = sandbox.status.as_ref().ok_or_else(refused)?;
    let policy = status.effective_policy.as_ref().ok_or_else(refused)?;
    let uid = sandbox.uid().unwrap_or_default();
    let compiled = state.policies.get(
        &namespace,
        &sandbox.name_any(),
        &uid,
        status.revision,
        policy,
    )?;
    let held = compiled
        .rules
        .iter()
        .filter(|rule| rule.name == request.rule)
        .flat_map(|rule| &rule.endpoints)
        .filter(|e| e.ports.contains(&request.server.port))
        .filter_map(|e| match &e.kind {
            EndpointKind::Mcp(mcp) => Some(&mcp.tools),
            EndpointKind::L4 | EndpointKind::Rest { .. } | EndpointKind::Websocket { .. } => None,
        })
        .flatten()
        .any(|entry| entry.held && entry.name.matches(&request.tool));
    if held { Ok(()) } else { Err(refused()) }
}

/// The HeldCall recording `request` for `sandbox`, expiring at `expires`.
pub fn held_call_object(
    sandbox: &AgentSandbox,
    requester: &str,
    request: &HoldRequest,
    expires: Timestamp,
) -> HeldCall {
    let mut arguments = serde_json::Value::Object(request.arguments.clone()).to_string();
    if arguments.len() > MAX_ARGUMENT_BYTES {
        let mut end = MAX_ARGUMENT_BYTES;
        while !arguments.is_char_boundary(end) {
            end -= 1;
        }
        arguments.truncate(end);
        arguments.push_str("… (cut: the arguments are longer)");
    }
    let name = sandbox.name_any();
    let mut held = HeldCall::new(
        "",
        HeldCallSpec {
            sandbox_ref: SandboxRef { name: name.clone() },
            pod: name.clone(),
            requester: requester.to_string(),
            kind: request.kind.clone(),
            tool: request.tool.clone(),
            arguments,
            server: format!(
                "{}:{}{}",
                request.server.host, request.server.port, request.server.path
            ),
            binary: request.binary.clone(),
            rule: request.rule.clone(),
            reason: request.reason.clone(),
            expires_at: expires.to_string(),
        },
    );
    held.metadata.name = None;
    held.metadata.generate_name = Some(format!("{name}-"));
    held.metadata.namespace = sandbox.namespace();
    held.metadata.labels = Some([(SANDBOX_LABEL.to_string(), name)].into());
    held.metadata.owner_references = sandbox.controller_owner_ref(&()).map(|mut owner| {
        // Collected with its sandbox, but the sandbox does not manage it.
        owner.controller = None;
        owner.block_owner_deletion = None;
        vec![owner]
    });
    held
}

/// What a reviewer decided, if anyone has: the `Approved` or `Denied`
/// condition, who (its message begins "approved by \"USER\"") and why.
pub fn decision_of(held: &HeldCall) -> Option<HoldAnswer> {
    let conditions = held.status.as_ref().map(|s| s.conditions.as_slice())?;
    let found = conditions.iter().find(|c| {
        c.status == "True" && ["Approved", "Denied", HELD_CALL_EXPIRED].contains(&c.type_.as_str())
    })?;
    let decision = match found.type_.as_str() {
        "Approved" => HoldDecision::Approved,
        "Denied" => HoldDecision::Denied,
        _ => HoldDecision::Expired,
    };
    // `approved by "alice": reason` (review_message_prefix) → alice, reason.
    let decided_by = reviewer_in(&found.type_, &found.message);
    let message = decided_by
        .as_deref()
        .and_then(|who| {
            found
                .message
                .strip_prefix(&review_message_prefix(&found.type_, who))
        })
        .and_then(|rest| rest.strip_prefix(": "))
        .map(str::to_string);
    Some(HoldAnswer {
        decision,
        held_call: held.metadata.name.clone(),
        decided_by,
        message: message
            .or_else(|| (decision == HoldDecision::Expired).then(|| found.message.clone())),
    })
}

async fn hold(
    state: &WebhookState,
    sandbox: &AgentSandbox,
    user: &UserInfo,
    request: &HoldRequest,
) -> Result<HoldAnswer, (StatusCode, String)> {
    let namespace = sandbox.namespace().unwrap_or_default();
    let unavailable = |e: kube::Error| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("cannot record the held call: {e}"),
        )
    };
    let api: Api<HeldCall> = Api::namespaced(state.client.clone(), &namespace);
    let selector = format!("{SANDBOX_LABEL}={}", sandbox.name_any());
    let pending = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(unavailable)?
        .items
        .iter()
        .filter(|h| decision_of(h).is_none())
        .count();
    if pending >= MAX_PENDING_PER_SANDBOX {
        return Err((
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "agentsandbox {namespace}/{} has {pending} held calls awaiting a decision already",
                sandbox.name_any()
            ),
        ));
    }
    let timeout = Duration::from_secs(request.timeout_seconds);
    let expires = Timestamp::now()
        .checked_add(timeout)
        .unwrap_or_else(|_| Timestamp::now());
    let requester = user.username.clone().unwrap_or_default();
    let shown = held_call_object(sandbox, &requester, request, expires);
    let created = api
        .create(&PostParams::default(), &shown)
        .await
        .map_err(unavailable)?;
    let name = created.name_any();
    tracing::info!(namespace, sandbox = %sandbox.name_any(), heldcall = %name, tool = %request.tool, rule = %request.rule, "tools/call held for a person's approval");
    publish(
        state,
        sandbox,
        EventType::Normal,
        "CallHeld",
        format!(
            "tools/call {} held by rule {:?} until {expires}: kubectl agentgate approve heldcall/{name} (or deny)",
            request.tool, request.rule
        ),
    )
    .await;
    let decided = tokio::time::timeout(
        timeout,
        await_condition(api.clone(), &name, |h: Option<&HeldCall>| {
            h.is_none_or(|h| decision_of(h).is_some())
        }),
    )
    .await;
    let answer = match decided {
        Ok(Ok(Some(held))) if held.spec == created.spec => decision_of(&held),
        Ok(Ok(Some(_))) => Some(denied(&name, "its spec changed while it was held")),
        Ok(Ok(None)) => Some(denied(&name, "it was deleted while held")),
        Ok(Err(e)) => {
            tracing::warn!(heldcall = %name, error = %e, "lost the watch of a held call");
            None
        }
        Err(_) => None,
    };
    let answer = match answer {
        Some(answer) => answer,
        None => expire(&api, &name).await,
    };
    record_answer(&api, &name, answer.decision).await;
    publish(
        state,
        sandbox,
        match answer.decision {
            HoldDecision::Approved => EventType::Normal,
            _ => EventType::Warning,
        },
        match answer.decision {
            HoldDecision::Approved => "HeldCallApproved",
            HoldDecision::Denied => "HeldCallDenied",
            HoldDecision::Expired => "HeldCallExpired",
        },
        format!(
            "tools/call {} (heldcall/{name}): {}{}",
            request.tool,
            format!("{:?}", answer.decision).to_lowercase(),
            answer
                .decided_by
                .as_deref()
                .map(|by| format!(" by {by:?}"))
                .unwrap_or_default()
        ),
    )
    .await;
    Ok(answer)
}

fn denied(name: &str, why: &str) -> HoldAnswer {
    HoldAnswer {
        decision: HoldDecision::Denied,
        held_call: Some(name.to_string()),
        decided_by: None,
        message: Some(why.to_string()),
    }
}

/// Nobody decided in time: the `Expired` condition is written first, with
/// the resourceVersion read as precondition, so a review that lands at the
/// same moment either wins (and is honoured) or is refused by the webhook
/// afterwards (a decided hold is final).
async fn expire(api: &Api<HeldCall>, name: &str) -> HoldAnswer {
    for _ in 0..3 {
        let Ok(mut held) = api.get(name).await else {
            break;
        };
        if let Some(answer) = decision_of(&held) {
            return answer;
        }
        let status = held.status.get_or_insert_with(Default::default);
        status
            .conditions
            .push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: HELD_CALL_EXPIRED.into(),
                status: "True".into(),
                reason: "NotDecidedInTime".into(),
                message: format!("nobody approved or denied it by {}", held.spec.expires_at),
                observed_generation: held.metadata.generation,
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    Timestamp::now(),
                ),
            });
        match api
            .replace_status(name, &PostParams::default(), &held)
            .await
        {
            Ok(held) => {
                if let Some(answer) = decision_of(&held) {
                    return answer;
                }
            }
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => {
                tracing::warn!(heldcall = %name, error = %e, "could not record the held call's expiry");
                break;
            }
        }
    }
    // Refused all the same: only an approval that was read lets a call go.
    HoldAnswer {
        decision: HoldDecision::Expired,
        held_call: Some(name.to_string()),
        decided_by: None,
        message: Some("nobody approved or denied it in time".into()),
    }
}

/// Writes the answer the proxy got into the status (the Decision column).
async fn record_answer(api: &Api<HeldCall>, name: &str, decision: HoldDecision) {
    let decision = match decision {
        HoldDecision::Approved => HeldCallDecision::Approved,
        HoldDecision::Denied => HeldCallDecision::Denied,
        HoldDecision::Expired => HeldCallDecision::Expired,
    };
    let patch = json!({
        "apiVersion": "agentgate.dev/v1alpha1",
        "kind": "HeldCall",
        "status": {"decision": decision},
    });
    if let Err(e) = api
        .patch_status(
            name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&patch),
        )
        .await
    {
        tracing::warn!(heldcall = %name, error = %e, "could not record the held call's answer");
    }
}

async fn publish(
    state: &WebhookState,
    sandbox: &AgentSandbox,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let recorder = Recorder::new(
        state.client.clone(),
        Reporter {
            controller: "agentgate-webhook".into(),
            instance: None,
        },
    );
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(event_note(note)),
        action: "Hold".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &sandbox.object_ref(&())).await {
        tracing::warn!(reason, error = %e, "could not publish an event");
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use serde_json::{Value, json};

    use super::*;
    use crate::testkit::{AGENT, Cluster, committed_sandbox};

    const ENDPOINT: &str = "/v1/hold";
    const BOUND: &str = "bound-token";
    const LOOSE: &str = "loose-token";
    const ELSEWHERE: &str = "elsewhere-token";

    /// The committed example sandbox with a held entry; the agent's token
    /// bound to its Pod, one bound to no Pod, and one bound to another Pod.
    fn cluster() -> Cluster {
        let mut sandbox = committed_sandbox();
        sandbox["status"]["effectivePolicy"]["network"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "drive", "endpoints": [{
                "host": "drive.internal", "ports": [443], "protocol": "mcp", "path": "/mcp",
                "tools": [{"name": "list_files"}, {"name": "delete_*", "mode": "ask"}]
            }]}));
        let mut cluster = Cluster::example();
        cluster.sandboxes = vec![sandbox];
        for token in [BOUND, LOOSE, ELSEWHERE] {
            cluster.api.tokens.insert(token.into(), AGENT.into());
        }
        cluster
            .api
            .bound_pods
            .insert(BOUND.into(), "triage-bot".into());
        cluster
            .api
            .bound_pods
            .insert(ELSEWHERE.into(), "someone-else".into());
        cluster
    }

    fn hold(tool: &str, rule: &str) -> Value {
        json!({
            "kind": "tools/call", "tool": tool, "arguments": {"file_id": "13"},
            "server": {"host": "drive.internal", "port": 443, "path": "/mcp"},
            "binary": "/usr/local/bin/agent", "rule": rule,
            "reason": "no rule allows tools/call delete_file with these arguments",
            "timeoutSeconds": 30
        })
    }

    #[tokio::test]
    async fn only_the_sandboxs_own_pod_puts_a_call_on_hold() {
        let harness = cluster().serve();
        let body = hold("delete_file", "drive").to_string();
        let reply = harness.post(ENDPOINT, body.clone(), None).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
        let reply = harness.post(ENDPOINT, body.clone(), Some(LOOSE)).await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.text());
        assert!(reply.text().contains("bound to no Pod"), "{}", reply.text());
        let reply = harness.post(ENDPOINT, body, Some(ELSEWHERE)).await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN);
        assert!(reply.text().contains("someone-else"), "{}", reply.text());
    }

    #[tokio::test]
    async fn a_hold_the_committed_policy_does_not_make_is_refused() {
        let harness = cluster().serve();
        for (tool, rule) in [("list_files", "drive"), ("delete_file", "github-read")] {
            let reply = harness
                .post(ENDPOINT, hold(tool, rule).to_string(), Some(BOUND))
                .await;
            assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.text());
            assert!(
                reply.text().contains("no mode: ask entry"),
                "{}",
                reply.text()
            );
        }
        let twice = r#"{"kind": "tools/call", "kind": "tools/call"}"#;
        let reply = harness.post(ENDPOINT, twice, Some(BOUND)).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text());
        let mut long = hold("delete_file", "drive");
        long["timeoutSeconds"] = json!(MAX_HOLD_SECONDS + 1);
        let reply = harness.post(ENDPOINT, long.to_string(), Some(BOUND)).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text());
    }

    #[tokio::test]
    async fn a_hold_that_cannot_be_recorded_is_refused() {
        // The fake API server knows no HeldCalls: the hold fails closed.
        let harness = cluster().serve();
        let reply = harness
            .post(
                ENDPOINT,
                hold("delete_file", "drive").to_string(),
                Some(BOUND),
            )
            .await;
        assert_eq!(
            reply.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{}",
            reply.text()
        );
    }

    #[test]
    fn a_decision_reads_who_and_why_from_its_condition() {
        let sandbox: AgentSandbox = serde_json::from_value(committed_sandbox()).unwrap();
        let request: HoldRequest = serde_json::from_value(hold("delete_file", "drive")).unwrap();
        let expires = Timestamp::from_second(1_800_000_000).unwrap();
        let mut held = held_call_object(&sandbox, AGENT, &request, expires);
        assert_eq!(held.metadata.generate_name.as_deref(), Some("triage-bot-"));
        assert_eq!(held.spec.arguments, r#"{"file_id":"13"}"#);
        assert_eq!(held.spec.server, "drive.internal:443/mcp");
        assert_eq!(decision_of(&held), None);
        held.metadata.name = Some("triage-bot-x7k2p".into());
        held.status = Some(
            serde_json::from_value(json!({"conditions": [{
                "type": "Denied", "status": "True", "reason": "ReviewerDenied",
                "message": "denied by \"alice\": not this file",
                "lastTransitionTime": "2026-12-06T05:59:00Z"
            }]}))
            .unwrap(),
        );
        let answer = decision_of(&held).unwrap();
        assert_eq!(answer.decision, HoldDecision::Denied);
        assert_eq!(answer.decided_by.as_deref(), Some("alice"));
        assert_eq!(answer.message.as_deref(), Some("not this file"));
        assert_eq!(answer.held_call.as_deref(), Some("triage-bot-x7k2p"));
    }
}
