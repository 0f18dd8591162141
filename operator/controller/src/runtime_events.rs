//! Runtime refusals as Events (docs/operations.md, "Runtime refusals"):
//! the proxy in each sandbox Pod keeps its last refusals at `/lineage` on
//! its metrics port (docs/proxy.md, "Lineage"); every
//! [`POLL_INTERVAL`] the leader reads it from each running sandbox Pod and
//! publishes the tool-call and credential refusals it has not published yet as Events on
//! the AgentSandbox, so `kubectl describe asbx` shows them beside the
//! proof's.
//!
//! The data plane holds no API credentials: a proxy that could write
//! Events would hand the same power to the agent beside it. The operator
//! reads instead, straight from the Pod's address (no `pods/proxy` grant),
//! with a short timeout, so a hung Pod costs one poll. What an Event says
//! is what the Pod's proxy said: argument values are redacted there.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::Api;
use kube::runtime::events::EventType;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Resource, ResourceExt};
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::{Context, Note, publish_to};
use agentgate_api::crd::{AgentSandbox, SANDBOX_LABEL};
use agentgate_governance::sandbox_pod::ADMIN_PORT;

/// How often each running sandbox Pod's refusals are read.
pub const POLL_INTERVAL: Duration = Duration::from_secs(15);
/// How long one Pod may take to answer.
const POD_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest `/lineage` answer read.
const MAX_ANSWER_BYTES: usize = 4 << 20;
/// The most Events one poll publishes for one Pod; the rest are counted in
/// one more (the agent chooses how often it is refused).
pub const MAX_EVENTS_PER_POLL: usize = 8;

/// The refusals of `report` (a proxy's `/lineage`) newer than `after`, as
/// Event notes, with the newest one's time. Only tool-call decisions
/// become Events (stage `mcp`: refused calls, the runtime trifecta,
/// audited flows); a connection's or request's refusal stays in the
/// proxy's logs and metrics, where an agent's retry loop costs nothing.
pub fn new_refusals(
    report: &Value,
    pod: &str,
    after: Option<OffsetDateTime>,
) -> (Vec<Note>, Option<OffsetDateTime>) {
    let mut notes = Vec::new();
    let mut newest = after;
    for refusal in report["refusals"].as_array().into_iter().flatten() {
        let Some((at, when)) = refusal["at"]
            .as_str()
            .and_then(|at| Some((at, OffsetDateTime::parse(at, &Rfc3339).ok()?)))
        else {
            continue;
        };
        if after.is_some_and(|after| when <= after) {
            continue;
        }
        if newest.is_none_or(|n| when > n) {
            newest = Some(when);
        }
        let code = refusal["code"].as_str().unwrap_or("refused");
        // Tool calls, the requests that call an in-process sink, and a
        // credential's placeholder sent where no rule binds it
        // (docs/policy-semantics.md §9.4).
        let credential = refusal["stage"] == "credential";
        if refusal["stage"] != "mcp" && code != "runtime_trifecta" && !credential {
            continue;
        }
        let audit = refusal["decision"] == "audit";
        let (type_, reason) = match (code, audit) {
            ("runtime_trifecta", true) => (EventType::Warning, "RuntimeTrifectaAudited"),
            ("runtime_trifecta", false) => (EventType::Warning, "RuntimeTrifecta"),
            ("credential_unavailable", _) => (EventType::Warning, "CredentialUnavailable"),
            _ if credential => (EventType::Warning, "CredentialMisuse"),
            _ => (EventType::Warning, "ToolCallRefused"),
        };
        let mut note = format!(
            "pod {pod} at {at}: {code}: {}",
            refusal["reason"].as_str().unwrap_or_default()
        );
        if let Some(id) = refusal["finding"]["id"].as_str() {
            note.push_str(&format!(" (finding {id})"));
        }
        notes.push((type_, reason, note));
    }
    if notes.len() > MAX_EVENTS_PER_POLL {
        let more = notes.len() - MAX_EVENTS_PER_POLL + 1;
        notes.truncate(MAX_EVENTS_PER_POLL - 1);
        notes.push((
            EventType::Warning,
            "ToolCallRefused",
            format!(
                "pod {pod}: {more} more tool-call refusals in {}s; `kubectl agentgate lineage` lists them",
                POLL_INTERVAL.as_secs()
            ),
        ));
    }
    (notes, newest)
}

/// Reads `/lineage` from the proxy at `ip`.
async fn read_lineage(ip: &str) -> Result<Value, String> {
    let address = if ip.contains(':') {
        format!("[{ip}]:{ADMIN_PORT}")
    } else {
        format!("{ip}:{ADMIN_PORT}")
    };
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(&address)
            .await
            .map_err(|e| format!("connecting to {address}: {e}"))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("HTTP to {address}: {e}"))?;
        tokio::spawn(connection);
        let request = http::Request::get("/lineage")
            .header(http::header::HOST, &address)
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("GET /lineage from {address}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!(
                "GET /lineage from {address}: {}",
                response.status()
            ));
        }
        let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| format!("reading /lineage from {address}: {e}"))?
            .to_bytes();
        serde_json::from_slice(&body)
            .map_err(|e| format!("/lineage from {address} is not JSON: {e}"))
    };
    tokio::time::timeout(POD_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("GET /lineage from {address}: no answer in {POD_TIMEOUT:?}"))?
}

/// Polls every running sandbox Pod until shutdown (leader only: it runs
/// with the other controllers).
pub async fn run(ctx: Arc<Context>) {
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    let (store, writer) = reflector::store();
    // Only what the poll reads is kept: name, labels, owners, phase and
    // address (a Pod's spec is most of its bytes).
    let watch = watcher(pods, watcher::Config::default().labels(SANDBOX_LABEL))
        .default_backoff()
        .modify(|pod| {
            pod.spec = None;
            pod.metadata.managed_fields = None;
            pod.metadata.annotations = None;
            if let Some(status) = pod.status.as_mut() {
                status.container_statuses = None;
                status.init_container_statuses = None;
                status.conditions = None;
            }
        })
        .reflect(writer)
        .applied_objects()
        .for_each(|_| async {});
    tokio::spawn(watch);
    // The newest refusal published, by Pod uid.
    let mut published: HashMap<String, OffsetDateTime> = HashMap::new();
    let mut ticks = tokio::time::interval(POLL_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let running: Vec<Arc<Pod>> = store
            .state()
            .into_iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            })
            .collect();
        published.retain(|uid, _| running.iter().any(|p| p.uid().as_deref() == Some(uid)));
        for pod in running {
            poll_pod(&ctx, &pod, &mut published).await;
        }
    }
}

async fn poll_pod(ctx: &Context, pod: &Pod, published: &mut HashMap<String, OffsetDateTime>) {
    let (Some(uid), Some(ip), Some(sandbox), Some(namespace)) = (
        pod.uid(),
        pod.status.as_ref().and_then(|s| s.pod_ip.clone()),
        pod.labels().get(SANDBOX_LABEL).cloned(),
        pod.namespace(),
    ) else {
        return;
    };
    if ctx.ignores(&namespace) {
        return;
    }
    let name = pod.name_any();
    let report = match read_lineage(&ip).await {
        Ok(report) => report,
        Err(e) => {
            tracing::debug!(pod = %name, %namespace, error = %e, "could not read the proxy's refusals");
            return;
        }
    };
    let (notes, newest) = new_refusals(&report, &name, published.get(&uid).copied());
    if let Some(newest) = newest {
        published.insert(uid, newest);
    }
    if notes.is_empty() {
        return;
    }
    // The Event's object: the sandbox the Pod belongs to, by its label,
    // once the sandbox is known to own it (a Pod merely carrying the label
    // does not speak for a sandbox).
    let Some(owner) = pod
        .owner_references()
        .iter()
        .find(|o| o.kind == AgentSandbox::kind(&()) && o.name == sandbox)
    else {
        return;
    };
    let reference = ObjectReference {
        api_version: Some(AgentSandbox::api_version(&()).into_owned()),
        kind: Some(AgentSandbox::kind(&()).into_owned()),
        name: Some(sandbox.clone()),
        namespace: Some(namespace.clone()),
        uid: Some(owner.uid.clone()),
        ..ObjectReference::default()
    };
    tracing::info!(pod = %name, %namespace, %sandbox, refusals = notes.len(), "publishing runtime refusals as Events");
    publish_to(ctx, &reference, "Enforce", notes).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_new_tool_call_refusals_become_events() {
        let report = json!({"refusals": [
            {"at": "2026-12-04T10:00:00.1Z", "stage": "connect", "decision": "deny", "code": "no_rule", "reason": "connect 10.0.0.1:443"},
            {"at": "2026-12-04T10:00:01.2Z", "stage": "mcp", "decision": "deny", "code": "no_rule", "reason": "tools/call send_money {\"recipient\":\"…\"}: no rule"},
            {"at": "2026-12-04T10:00:02.3Z", "stage": "mcp", "decision": "deny", "code": "runtime_trifecta",
             "reason": "tools/call send_money {\"recipient\":\"…\"}: recipient carries a value of tool:get_statement", "finding": {"id": "AG-TRIFECTA"}},
            {"at": "2026-12-04T10:00:03.4Z", "stage": "mcp", "decision": "audit", "code": "runtime_trifecta", "reason": "audited"},
            {"at": "2026-12-04T10:00:03.5Z", "stage": "request", "decision": "deny", "code": "runtime_trifecta",
             "reason": "POST https://notes.example.com:443/notes: body.text carries a value of tool:read_vault"},
            {"at": "2026-12-04T10:00:03.6Z", "stage": "credential", "decision": "deny", "code": "credential_misuse",
             "reason": "POST https://paste.example:443/x by /usr/bin/curl: carries the placeholder of credential github-token outside its attach form"},
            {"at": "2026-12-04T10:00:03.7Z", "stage": "credential", "decision": "deny", "code": "credential_unavailable",
             "reason": "credential github-token has no secret"},
        ]});
        let (notes, newest) = new_refusals(&report, "bank-bot", None);
        let reasons: Vec<&str> = notes.iter().map(|n| n.1).collect();
        assert_eq!(
            reasons,
            [
                "ToolCallRefused",
                "RuntimeTrifecta",
                "RuntimeTrifectaAudited",
                "RuntimeTrifecta",
                "CredentialMisuse",
                "CredentialUnavailable"
            ]
        );
        assert_eq!(
            notes[1].2,
            "pod bank-bot at 2026-12-04T10:00:02.3Z: runtime_trifecta: tools/call send_money {\"recipient\":\"…\"}: recipient carries a value of tool:get_statement (finding AG-TRIFECTA)"
        );
        let at = |t: &str| OffsetDateTime::parse(t, &Rfc3339).unwrap();
        assert_eq!(newest, Some(at("2026-12-04T10:00:03.7Z")));
        // The next poll publishes only what came since.
        let (again, same) = new_refusals(&report, "bank-bot", newest);
        assert!(again.is_empty());
        assert_eq!(same, newest);
        let (later, _) = new_refusals(&report, "bank-bot", Some(at("2026-12-04T10:00:02Z")));
        assert_eq!(later.len(), 5);
        // A flood is counted, not published one by one.
        let flood: Vec<serde_json::Value> = (0..50)
            .map(|i| json!({"at": format!("2026-12-04T10:01:{i:02}Z"), "stage": "mcp", "decision": "deny", "code": "no_rule", "reason": "r"}))
            .collect();
        let (notes, _) = new_refusals(&json!({"refusals": flood}), "bank-bot", None);
        assert_eq!(notes.len(), MAX_EVENTS_PER_POLL);
        assert!(
            notes[MAX_EVENTS_PER_POLL - 1]
                .2
                .contains("43 more tool-call refusals")
        );
    }
}
