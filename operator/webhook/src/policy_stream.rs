//! Policy delivery (docs/design.md §10, "Delivery"): `GET /v1/policy/stream`
//! pushes a sandbox's committed policy ConfigMap to its proxy the moment
//! this replica's cache shows it, and `POST /v1/policy/applied` takes the
//! proxy's report that it enforces it. Every replica serves both, like the
//! webhook.
//!
//! The caller proves it is a sandbox's Pod with a projected ServiceAccount
//! token of audience [`POLICY_AUDIENCE`]; the sandbox comes from the token
//! (the Pod it is bound to), never from the request, so a Pod reads its own
//! sandbox's policy and no other. A ConfigMap is pushed only while it is
//! owned by that sandbox and has the digest the operator committed in the
//! sandbox's status (`status.policyDigest`): anyone else's edit of the
//! ConfigMap is never pushed.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

use crate::caller::CallerRefusal;
use crate::state::WebhookState;
use agentgate_api::crd::{AgentSandbox, PodEnforcement};
use agentgate_governance::enforcement::applied_conditions;
use agentgate_governance::sandbox_pod::policy_config_map_name;
use agentgate_judgement::delivery::{
    Applied, HEARTBEAT_SECONDS, POLICY_AUDIENCE, PolicyUpdate, StreamLine,
};
use agentgate_k8s::FIELD_MANAGER;

/// How long one subscription lasts: the proxy then subscribes again with
/// its current token, so an authorization is never older than this.
pub const MAX_STREAM: Duration = Duration::from_secs(600);

/// `GET /v1/policy/stream`: 401 without a token for [`POLICY_AUDIENCE`],
/// 403 unless it is bound to a sandbox's Pod and is that sandbox's agent;
/// else a stream of JSON lines ([`StreamLine`]): the committed update at
/// once when there is one, every later one as it is committed, and a
/// heartbeat every [`HEARTBEAT_SECONDS`] s.
pub(super) async fn policy_stream(
    State(state): State<Arc<WebhookState>>,
    headers: HeaderMap,
) -> Response {
    let caller = match pod_caller(&state, &headers, "subscribes to its policy").await {
        Ok(caller) => caller,
        Err(response) => return response,
    };
    let namespace = caller.sandbox.namespace().unwrap_or_default();
    let name = caller.sandbox.name_any();
    tracing::info!(%namespace, sandbox = %name, pod = %caller.pod, "policy stream subscribed");
    let subscription = Subscription {
        state: state.clone(),
        changes: state.stream_wakeups.subscribe(&namespace, &name),
        namespace,
        name,
        last: None,
        until: tokio::time::Instant::now() + MAX_STREAM,
        _counted: Subscribed::new(&state),
    };
    let lines = futures::stream::unfold(subscription, |mut s| async move {
        s.next_line()
            .await
            .map(|line| (Ok::<_, Infallible>(line), s))
    });
    let mut response = Body::from_stream(lines).into_response();
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// One proxy's subscription.
struct Subscription {
    state: Arc<WebhookState>,
    namespace: String,
    name: String,
    changes: tokio::sync::watch::Receiver<u64>,
    /// The digest last sent.
    last: Option<String>,
    until: tokio::time::Instant,
    _counted: Subscribed,
}

impl Subscription {
    /// The next line to send, or `None` to end the stream.
    async fn next_line(&mut self) -> Option<Bytes> {
        loop {
            if let Some(update) = committed_update(&self.state, &self.namespace, &self.name)
                && self.last.as_deref() != Some(update.digest.as_str())
            {
                self.last = Some(update.digest.clone());
                self.state.metrics.policy_pushes.inc();
                tracing::debug!(namespace = %self.namespace, sandbox = %self.name, revision = update.revision, "policy pushed");
                return Some(line(&StreamLine {
                    update: Some(update),
                }));
            }
            let heartbeat = tokio::time::sleep(Duration::from_secs(HEARTBEAT_SECONDS));
            tokio::select! {
                changed = self.changes.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                }
                () = heartbeat => {
                    if tokio::time::Instant::now() >= self.until {
                        return None;
                    }
                    return Some(line(&StreamLine { update: None }));
                }
                () = tokio::time::sleep_until(self.until) => return None,
            }
        }
    }
}

/// Counts a subscription while it lasts.
struct Subscribed(Arc<WebhookState>);

impl Subscribed {
    fn new(state: &Arc<WebhookState>) -> Subscribed {
        state.metrics.policy_subscribers.inc();
        Subscribed(state.clone())
    }
}

impl Drop for Subscribed {
    fn drop(&mut self) {
        self.0.metrics.policy_subscribers.dec();
    }
}

fn line(value: &StreamLine) -> Bytes {
    let mut text = serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec());
    text.push(b'\n');
    Bytes::from(text)
}

/// The sandbox's policy ConfigMap as an update, when the cache shows it
/// owned by the sandbox and with the digest its status committed.
pub(super) fn committed_update(
    state: &WebhookState,
    namespace: &str,
    name: &str,
) -> Option<PolicyUpdate> {
    let sandbox = state
        .sandboxes
        .get(&ObjectRef::new(name).within(namespace))?;
    let committed = sandbox.status.as_ref()?.policy_digest.clone()?;
    let config_map = state
        .policy_maps
        .get(&ObjectRef::new(&policy_config_map_name(name)).within(namespace))?;
    owned_by(&config_map, &sandbox).then_some(())?;
    let data = config_map.data.clone()?;
    let update = PolicyUpdate::of(data.into_iter().collect())?;
    (update.digest == committed).then_some(update)
}

/// Whether the sandbox is the ConfigMap's controlling owner.
fn owned_by(config_map: &ConfigMap, sandbox: &AgentSandbox) -> bool {
    let uid = sandbox.uid().unwrap_or_default();
    config_map
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.kind == "AgentSandbox" && o.uid == uid)
}

/// `POST /v1/policy/applied`: the proxy reports the update it enforces.
/// Authenticated like the stream; 400 for a body that is not a report, 409
/// for a report of anything but the committed update; else the sandbox's
/// status records the Pod's enforced revision (`status.pods`) and the
/// `Enforced` condition, and 204.
pub(super) async fn policy_applied(
    State(state): State<Arc<WebhookState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let caller = match pod_caller(&state, &headers, "reports what it enforces").await {
        Ok(caller) => caller,
        Err(response) => return response,
    };
    let applied: Applied = match body
        .map_err(|e| e.body_text())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(applied) => applied,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("not a report: {e}")),
    };
    let namespace = caller.sandbox.namespace().unwrap_or_default();
    let name = caller.sandbox.name_any();
    match record_applied(
        &state,
        &namespace,
        &name,
        &caller.pod,
        caller.pod_uid.as_deref(),
        &applied,
    )
    .await
    {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err((status, reason)) => error(status, reason),
    }
}

/// Records `applied` for the Pod in the sandbox's status, on a fresh read
/// (a status write conflicting with the leader's is retried once).
async fn record_applied(
    state: &WebhookState,
    namespace: &str,
    name: &str,
    pod: &str,
    pod_uid: Option<&str>,
    applied: &Applied,
) -> Result<(), (StatusCode, String)> {
    let unavailable = |e: kube::Error| (StatusCode::SERVICE_UNAVAILABLE, e.to_string());
    // The token names a Pod; it must be the sandbox's live Pod. The watch
    // of sandbox Pods shows it live at that uid, or a read does (the watch
    // may not show a Pod created moments ago); a read of every reporting
    // Pod was the slowest request of a storm's reports.
    if let Some(uid) = pod_uid {
        let cached = state
            .sandbox_pods
            .get(&ObjectRef::new(pod).within(namespace))
            .and_then(|p| p.metadata.uid.clone());
        let live = if cached.as_deref() == Some(uid) {
            cached
        } else {
            Api::<Pod>::namespaced(state.client.clone(), namespace)
                .get_metadata_opt(pod)
                .await
                .map_err(unavailable)?
                .and_then(|p| p.metadata.uid)
        };
        if live.as_deref() != Some(uid) {
            return Err((
                StatusCode::FORBIDDEN,
                format!("Pod {namespace}/{pod} is not the Pod the token is bound to"),
            ));
        }
    }
    let api: Api<AgentSandbox> = Api::namespaced(state.client.clone(), namespace);
    // This replica's cache usually shows the commit already (it pushed it);
    // its resourceVersion is the write's precondition, so a stale copy
    // costs a conflict and a fresh read, never a lost report. A copy that
    // does not show the reported commit is read again at once: the report
    // may reach a replica whose cache lags the one that pushed.
    let mut cached = state
        .sandboxes
        .get(&ObjectRef::new(name).within(namespace))
        .filter(|s| {
            s.resource_version().is_some()
                && s.status.as_ref().is_some_and(|status| {
                    status.policy_digest.as_deref() == Some(applied.digest.as_str())
                        && status.revision == applied.revision
                })
        });
    for _ in 0..3 {
        let sandbox = match cached.take() {
            Some(sandbox) => sandbox,
            None => Arc::new(api.get(name).await.map_err(unavailable)?),
        };
        let status = sandbox.status.clone().unwrap_or_default();
        if status.policy_digest.as_deref() != Some(applied.digest.as_str())
            || status.revision != applied.revision
        {
            return Err((
                StatusCode::CONFLICT,
                format!(
                    "revision {} ({}) is not the committed one (revision {}); the stream will bring it",
                    applied.revision, applied.digest, status.revision
                ),
            ));
        }
        let now = Timestamp::now();
        if let Some(committed) = status
            .policy_committed_at
            .as_deref()
            .and_then(|t| t.parse::<Timestamp>().ok())
            && !status
                .pods
                .iter()
                .any(|p| p.name == pod && p.digest == applied.digest)
        {
            let seconds = now.duration_since(committed).as_secs_f64().max(0.0);
            state.metrics.policy_enforced_seconds.observe(seconds);
        }
        let mut pods: Vec<PodEnforcement> = status
            .pods
            .iter()
            .filter(|p| p.name != pod)
            .cloned()
            .collect();
        pods.push(PodEnforcement {
            name: pod.to_string(),
            revision: applied.revision,
            digest: applied.digest.clone(),
            applied_at: now.to_string(),
        });
        let conditions = applied_conditions(&status.conditions, sandbox.metadata.generation, &now);
        let patch = json!({
            "metadata": {"resourceVersion": sandbox.resource_version()},
            "status": {"pods": pods, "conditions": conditions},
        });
        match api
            .patch_status(
                name,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PatchParams::default()
                },
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => {
                tracing::info!(%namespace, sandbox = %name, %pod, revision = applied.revision, "policy enforced");
                return Ok(());
            }
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(unavailable(e)),
        }
    }
    Err((
        StatusCode::SERVICE_UNAVAILABLE,
        "the sandbox kept changing; report again".into(),
    ))
}

/// The sandbox Pod a request comes from: a token of [`POLICY_AUDIENCE`]
/// bound to a sandbox's Pod, of that sandbox's agent; else the refusal.
async fn pod_caller(
    state: &WebhookState,
    headers: &HeaderMap,
    what: &str,
) -> Result<crate::access_reviews::PodSandbox, Response> {
    let user = state
        .authenticate_for(headers, Some(POLICY_AUDIENCE))
        .await
        .map_err(refused)?;
    state.pod_sandbox(&user, what).map_err(refused)
}

fn refused(refusal: CallerRefusal) -> Response {
    let status = refusal.status();
    tracing::info!(status = status.as_u16(), reason = %refusal, "policy delivery refused");
    let mut response = (status, Json(json!({"reason": refusal.to_string()}))).into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"agentgate\""),
        );
    }
    response
}

fn error(status: StatusCode, reason: String) -> Response {
    tracing::info!(status = status.as_u16(), %reason, "policy report refused");
    (status, Json(json!({"reason": reason}))).into_response()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use axum::http::StatusCode;
    use serde_json::{Value, json};

    use super::*;
    use crate::testkit::{AGENT, Cluster, committed_sandbox};

    const STREAM: &str = "/v1/policy/stream";
    const BOUND: &str = "bound-token";
    const HOLD_ONLY: &str = "hold-token";
    const ELSEWHERE: &str = "elsewhere-token";

    fn files(revision: u64, policy: &str) -> BTreeMap<String, String> {
        [
            ("revision".to_string(), revision.to_string()),
            ("policy.yaml".to_string(), policy.to_string()),
        ]
        .into_iter()
        .collect()
    }

    fn config_map(data: &BTreeMap<String, String>, owner_uid: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": "triage-bot-policy", "namespace": "agents",
                "labels": {"agentgate.dev/sandbox": "triage-bot"},
                "ownerReferences": [{"apiVersion": "agentgate.dev/v1alpha1", "kind": "AgentSandbox",
                    "name": "triage-bot", "uid": owner_uid, "controller": true}],
            },
            "data": data,
        })
    }

    fn sandbox_committing(revision: u64, digest: &str) -> Value {
        let mut sandbox = committed_sandbox();
        sandbox["status"]["revision"] = json!(revision);
        sandbox["status"]["policyDigest"] = json!(digest);
        sandbox
    }

    /// The committed example sandbox and its ConfigMap at revision 3; the
    /// agent's token for the policy audience bound to its Pod, one minted
    /// for the hold audience only, one bound to another Pod.
    fn cluster() -> Cluster {
        let data = files(3, "network: []\n");
        let mut cluster = Cluster::example();
        cluster.sandboxes = vec![sandbox_committing(
            3,
            &agentgate_judgement::delivery::digest(&data),
        )];
        cluster.policy_maps = vec![config_map(&data, "sandbox-uid")];
        for token in [BOUND, HOLD_ONLY, ELSEWHERE] {
            cluster.api.tokens.insert(token.into(), AGENT.into());
        }
        for token in [BOUND, HOLD_ONLY] {
            cluster
                .api
                .bound_pods
                .insert(token.into(), "triage-bot".into());
        }
        cluster
            .api
            .bound_pods
            .insert(ELSEWHERE.into(), "someone-else".into());
        cluster
            .api
            .token_audiences
            .insert(HOLD_ONLY.into(), vec!["agentgate.dev/hold".into()]);
        cluster
    }

    /// [`cluster`] with the sandbox committed at revision 3 (`digest`),
    /// resourceVersion 42, in the cache and live, and the token's Pod live
    /// at `pod-uid`.
    fn reporting(digest: &str) -> Cluster {
        let mut cluster = cluster();
        let mut sandbox = sandbox_committing(3, digest);
        sandbox["metadata"]["resourceVersion"] = json!("42");
        cluster.sandboxes = vec![sandbox.clone()];
        cluster.api.sandboxes = vec![sandbox];
        cluster
            .api
            .pods
            .insert("triage-bot".into(), "pod-uid".into());
        cluster
    }

    async fn next_line(lines: &mut tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>) -> StreamLine {
        let chunk = tokio::time::timeout(Duration::from_secs(5), lines.recv())
            .await
            .expect("a line within 5 s")
            .expect("the stream is open");
        serde_json::from_slice(chunk.trim_ascii()).unwrap()
    }

    #[tokio::test]
    async fn only_a_sandboxs_own_pod_with_a_policy_token_subscribes() {
        let harness = cluster().serve();
        let reply = harness.get(STREAM).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
        let (status, _) = harness.stream(STREAM, "unknown").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        // A token minted for another audience (the hold's) is refused.
        let (status, _) = harness.stream(STREAM, HOLD_ONLY).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        // Another Pod's token never reads this sandbox's policy.
        let (status, _) = harness.stream(STREAM, ELSEWHERE).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let (status, mut lines) = harness.stream(STREAM, BOUND).await;
        assert_eq!(status, StatusCode::OK);
        let first = next_line(&mut lines).await.update.expect("an update");
        assert_eq!(first.revision, 3);
        assert_eq!(first.check(), Ok(()));
    }

    #[tokio::test]
    async fn a_pods_report_of_the_committed_policy_is_recorded_and_nothing_else() {
        let data = files(3, "network: []\n");
        let digest = agentgate_judgement::delivery::digest(&data);
        // The replica's cache shows the commit it pushed: the report is
        // written on it, with its resourceVersion as the precondition, and
        // the sandbox is not read again.
        let harness = reporting(&digest).serve();
        let report = |revision: u64, digest: &str| {
            json!({"revision": revision, "digest": digest}).to_string()
        };
        let reply = harness
            .post("/v1/policy/applied", report(3, &digest), Some(BOUND))
            .await;
        assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text());
        assert_eq!(harness.api.calls_to("/agentsandboxes/triage-bot"), 0);
        let patches = harness.api.status_patches.lock().unwrap().clone();
        assert_eq!(patches.len(), 1);
        let patch = &patches[0];
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        assert_eq!(patch["status"]["pods"][0]["name"], "triage-bot");
        assert_eq!(patch["status"]["pods"][0]["revision"], 3);
        let enforced = patch["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Enforced")
            .unwrap();
        assert_eq!(
            (enforced["status"].as_str(), enforced["reason"].as_str()),
            (Some("True"), Some("Applied"))
        );
        // Anything but the committed update is refused, and not recorded.
        let reply = harness
            .post("/v1/policy/applied", report(2, "sha256:old"), Some(BOUND))
            .await;
        assert_eq!(reply.status, StatusCode::CONFLICT, "{}", reply.text());
        let reply = harness
            .post("/v1/policy/applied", "{\"revision\": 3}", Some(BOUND))
            .await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST);
        // Another Pod's token, or none, reports nothing.
        let reply = harness
            .post("/v1/policy/applied", report(3, &digest), Some(ELSEWHERE))
            .await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN);
        let reply = harness
            .post("/v1/policy/applied", report(3, &digest), None)
            .await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
        assert_eq!(harness.api.status_patches.lock().unwrap().len(), 1);
    }

    /// The report's Pod is checked against the watch of sandbox Pods
    /// first: shown there at the token's uid, it is not read; shown at
    /// another uid (the watch has not seen the Pod that replaced it), it is
    /// read, and a Pod the read shows at another uid reports nothing.
    #[tokio::test]
    async fn a_reports_pod_is_read_only_when_the_watch_does_not_show_it_live() {
        let pod = |uid: &str| {
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "triage-bot", "namespace": "agents", "uid": uid}})
        };
        let data = files(3, "network: []\n");
        let digest = agentgate_judgement::delivery::digest(&data);
        let report = json!({"revision": 3, "digest": digest}).to_string();
        // The committed sandbox, the token's Pod at `pod-uid`, the watch
        // showing the Pod at `cached`, a read finding it at `live`.
        let harness = |cached: &str, live: &str| {
            let mut cluster = reporting(&digest);
            cluster
                .api
                .pods_replaced
                .insert("triage-bot".into(), live.into());
            cluster.sandbox_pods = vec![pod(cached)];
            cluster.serve()
        };
        let shown = harness("pod-uid", "pod-uid");
        let reply = shown
            .post("/v1/policy/applied", report.clone(), Some(BOUND))
            .await;
        assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text());
        assert_eq!(shown.api.calls_to("/pods/triage-bot"), 0);

        // The watch has not yet seen this Pod replace an older one: read.
        let lagging = harness("replaced-uid", "pod-uid");
        let reply = lagging
            .post("/v1/policy/applied", report.clone(), Some(BOUND))
            .await;
        assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text());
        assert_eq!(lagging.api.calls_to("/pods/triage-bot"), 1);

        // The token's Pod is gone and a newer one has its name: nothing is
        // recorded.
        let gone = harness("replaced-uid", "newer-uid");
        let reply = gone.post("/v1/policy/applied", report, Some(BOUND)).await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.text());
        assert!(gone.api.status_patches.lock().unwrap().is_empty());
    }

    /// A replica whose cache lags (it shows an older commit than the one
    /// reported, pushed by another replica) reads the sandbox and records
    /// the report on what it read.
    #[tokio::test]
    async fn a_report_reaching_a_lagging_replica_is_recorded_on_a_fresh_read() {
        let data = files(3, "network: []\n");
        let digest = agentgate_judgement::delivery::digest(&data);
        let mut cluster = cluster();
        let mut lagging = sandbox_committing(2, "sha256:older");
        lagging["metadata"]["resourceVersion"] = json!("41");
        cluster.sandboxes = vec![lagging];
        let mut live = sandbox_committing(3, &digest);
        live["metadata"]["resourceVersion"] = json!("42");
        cluster.api.sandboxes = vec![live];
        cluster
            .api
            .pods
            .insert("triage-bot".into(), "pod-uid".into());
        let harness = cluster.serve();
        let report = json!({"revision": 3, "digest": digest}).to_string();
        let reply = harness
            .post("/v1/policy/applied", report, Some(BOUND))
            .await;
        assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text());
        assert_eq!(harness.api.calls_to("/agentsandboxes/triage-bot"), 1);
        let patches = harness.api.status_patches.lock().unwrap().clone();
        assert_eq!(patches.len(), 1);
        assert_eq!(patches[0]["metadata"]["resourceVersion"], "42");
    }

    #[tokio::test]
    async fn only_the_committed_configmap_is_pushed_and_each_commit_at_once() {
        let harness = cluster().serve();
        let (_, mut lines) = harness.stream(STREAM, BOUND).await;
        assert_eq!(next_line(&mut lines).await.update.unwrap().revision, 3);

        // Someone edits the ConfigMap: not what the status committed, so
        // nothing is pushed.
        let forged = files(
            3,
            "network: [{name: wide, endpoints: [{host: '*', ports: [443]}]}]\n",
        );
        harness.put_policy_map(config_map(&forged, "sandbox-uid"));
        // A ConfigMap another object owns is not the sandbox's either.
        let next = files(4, "network: []\nfilesystem: {}\n");
        let digest = agentgate_judgement::delivery::digest(&next);
        harness.put_policy_map(config_map(&next, "another-uid"));
        harness.put_sandbox(sandbox_committing(4, &digest));
        assert!(
            tokio::time::timeout(Duration::from_millis(300), lines.recv())
                .await
                .is_err(),
            "nothing committed was pushed"
        );
        // The commit's ConfigMap, owned by the sandbox: pushed on that
        // change, not at the next heartbeat.
        harness.put_policy_map(config_map(&next, "sandbox-uid"));
        let update = next_line(&mut lines).await.update.unwrap();
        assert_eq!((update.revision, update.digest), (4, digest));
        assert_eq!(harness.state.metrics.policy_pushes.get(), 2);
        assert_eq!(harness.state.metrics.policy_subscribers.get(), 1);
    }
}
