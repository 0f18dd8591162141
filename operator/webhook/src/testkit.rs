//! The webhook's router in process, for the handlers' unit tests: caches
//! filled with the examples (the org ceiling, namespace `agents` of team
//! ml, namespaces in each enforcement mode, the example sandbox) and a kube
//! `Client` over a fake API server that answers TokenReviews,
//! SubjectAccessReviews and namespace reads from what the test grants, and
//! records every call so a test can say which reviews were asked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, Response, StatusCode};
use clap::Parser;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::ResourceExt;
use kube::core::admission::{AdmissionResponse, AdmissionReview};
use kube::core::{DynamicObject, PartialObjectMeta};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::WebhookArgs;
use crate::certs::CertResolver;
use crate::server::router;
use crate::state::{Caches, WebhookState};
use crate::wakeups::SandboxWakeups;
use agentgate_api::crd::{AgentSandbox, AgentScan, MaximumPolicy};
use agentgate_governance::sandbox_pod::policy_config_map_sandbox;
use agentgate_k8s::metrics::{AdmissionLabel, DecisionLabel, Metrics};
use agentgate_prover::{Prover, ProverOptions};

/// The operator's own user name (given by `--operator-user`).
pub const OPERATOR: &str = "system:serviceaccount:agentgate-system:agentgate";
/// The example sandbox's agent.
pub const AGENT: &str = "system:serviceaccount:agents:triage-bot";
/// A human with no rights unless a test grants them.
pub const ALICE: &str = "alice";
/// A second human, the reviewer in proposal tests.
pub const BOB: &str = "bob";
/// The identity `--scan-writer` names.
pub const CI: &str = "ci";

/// An image pinned by digest.
pub fn pinned_image() -> String {
    format!("registry.example/agent@sha256:{}", "a".repeat(64))
}

fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).unwrap()
}

/// examples/sandbox.yaml: `triage-bot` in `agents`, inside the org ceiling.
pub fn example_sandbox() -> Value {
    yaml(include_str!("../../../examples/sandbox.yaml"))
}

/// The example sandbox with `spec.policy` committed as revision 3.
pub fn committed_sandbox() -> Value {
    let mut sandbox = example_sandbox();
    sandbox["metadata"]["uid"] = json!("sandbox-uid");
    sandbox["status"] = json!({"revision": 3, "effectivePolicy": sandbox["spec"]["policy"]});
    sandbox
}

/// examples/maximum.yaml: `org-ceiling`, governing namespaces of team ml.
pub fn example_maximum() -> Value {
    yaml(include_str!("../../../examples/maximum.yaml"))
}

/// examples/proposals/comment-on-issues.yaml, requested by the agent.
pub fn example_proposal() -> Value {
    yaml(include_str!(
        "../../../examples/proposals/comment-on-issues.yaml"
    ))
}

/// A Namespace with these labels.
pub fn namespace(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
}

/// An AgentScan of `image` with an empty graph (no findings).
pub fn scan(name: &str, image: &str) -> Value {
    json!({
        "apiVersion": "agentgate.dev/v1alpha1", "kind": "AgentScan",
        "metadata": {"name": name, "uid": format!("{name}-uid"), "generation": 1},
        "spec": {"image": image, "graph": {"nodes": [], "edges": []}}
    })
}

/// A plain pod (no sandbox claim) running `image`.
pub fn pod(namespace: &str, image: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "worker", "namespace": namespace},
        "spec": {"containers": [{"name": "agent", "image": image, "command": ["/agent"]}]}
    })
}

/// The group, version, resource and kind an AdmissionReview is about.
pub struct Kind {
    group: &'static str,
    version: &'static str,
    resource: &'static str,
    kind: &'static str,
}

/// AgentSandboxes.
pub const SANDBOXES: Kind = Kind {
    group: "agentgate.dev",
    version: "v1alpha1",
    resource: "agentsandboxes",
    kind: "AgentSandbox",
};
/// PolicyProposals.
pub const PROPOSALS: Kind = Kind {
    group: "agentgate.dev",
    version: "v1alpha1",
    resource: "policyproposals",
    kind: "PolicyProposal",
};
/// MaximumPolicies.
pub const MAXIMUMS: Kind = Kind {
    group: "agentgate.dev",
    version: "v1alpha1",
    resource: "maximumpolicies",
    kind: "MaximumPolicy",
};
/// AgentScans.
pub const SCANS: Kind = Kind {
    group: "agentgate.dev",
    version: "v1alpha1",
    resource: "agentscans",
    kind: "AgentScan",
};
/// HeldCalls.
pub const HELD_CALLS: Kind = Kind {
    group: "agentgate.dev",
    version: "v1alpha1",
    resource: "heldcalls",
    kind: "HeldCall",
};
/// Pods.
pub const PODS: Kind = Kind {
    group: "",
    version: "v1",
    resource: "pods",
    kind: "Pod",
};
/// Namespaces.
pub const NAMESPACES: Kind = Kind {
    group: "",
    version: "v1",
    resource: "namespaces",
    kind: "Namespace",
};

/// The uid every review built here carries.
pub const REVIEW_UID: &str = "705ab4f5-6393-11e8-b7cc-42010a800002";

/// An AdmissionReview as the API server sends it: `user` does `operation`
/// on `object` (the new version) replacing `old`.
pub fn review(
    kind: &Kind,
    operation: &str,
    user: &str,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Value {
    let about = object.or(old);
    let name = about
        .and_then(|o| o["metadata"]["name"].as_str())
        .unwrap_or("x");
    let gvk = json!({"group": kind.group, "version": kind.version, "kind": kind.kind});
    let gvr = json!({"group": kind.group, "version": kind.version, "resource": kind.resource});
    let mut request = json!({
        "uid": REVIEW_UID,
        "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": name,
        "operation": operation,
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
        "object": object,
        "oldObject": old,
        "dryRun": false,
    });
    if let Some(namespace) = about.and_then(|o| o["metadata"]["namespace"].as_str()) {
        request["namespace"] = json!(namespace);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

/// [`review`] of the status subresource.
pub fn status_review(kind: &Kind, user: &str, object: &Value, old: &Value) -> Value {
    let mut review = review(kind, "UPDATE", user, Some(object), Some(old));
    review["request"]["subResource"] = json!("status");
    review
}

/// A right the fake API server grants in SubjectAccessReviews: `user`
/// may `verb` the `resource` (in any namespace, on any name).
#[derive(Debug, Clone)]
pub struct Grant {
    user: String,
    verb: String,
    resource: String,
}

impl Grant {
    /// `user` may `verb` `resource`.
    pub fn new(user: &str, verb: &str, resource: &str) -> Grant {
        Grant {
            user: user.into(),
            verb: verb.into(),
            resource: resource.into(),
        }
    }
}

/// What the fake API server knows.
#[derive(Debug, Default)]
pub struct FakeApi {
    /// Bearer tokens the TokenReview accepts, and whose they are (for any
    /// audience asked for).
    pub tokens: BTreeMap<String, String>,
    /// Tokens bound to a Pod: token → the Pod's name.
    pub bound_pods: BTreeMap<String, String>,
    /// Tokens minted for these audiences only (others: whatever is asked).
    pub token_audiences: BTreeMap<String, Vec<String>>,
    /// What SubjectAccessReviews allow; everything else is refused.
    pub grants: Vec<Grant>,
    /// Namespaces a GET finds (those not yet in the webhook's cache).
    pub namespaces: Vec<Value>,
    /// AgentScans a live list finds (those not yet in the webhook's cache).
    pub scans: Vec<Value>,
    /// AgentSandboxes a live list of their namespace finds (those not yet
    /// in the webhook's cache).
    pub sandboxes: Vec<Value>,
    /// SubjectAccessReviews fail with 500, as when the API server is down.
    pub reviews_unavailable: bool,
    /// Pods a GET finds: name → uid (tokens bound to a Pod carry its uid
    /// from here too).
    pub pods: BTreeMap<String, String>,
    /// Pods a GET finds at another uid than the tokens bound to them carry
    /// (a Pod that replaced theirs): name → uid.
    pub pods_replaced: BTreeMap<String, String>,
    /// The bodies of sandbox status patches, in order.
    pub status_patches: Mutex<Vec<Value>>,
    /// Every call, as `METHOD path`.
    calls: Mutex<Vec<String>>,
}

impl FakeApi {
    /// The calls whose path ends with `suffix`.
    pub fn calls_to(&self, suffix: &str) -> usize {
        let calls = self.calls.lock().unwrap();
        calls.iter().filter(|c| c.ends_with(suffix)).count()
    }

    fn answer(&self, method: &str, path: &str, sent: &Value) -> (StatusCode, Value) {
        self.calls.lock().unwrap().push(format!("{method} {path}"));
        if path.ends_with("/tokenreviews") {
            let token = sent["spec"]["token"].as_str().unwrap_or_default();
            let status = match self.tokens.get(token) {
                Some(user) => {
                    let mut user = json!({"username": user});
                    if let Some(pod) = self.bound_pods.get(token) {
                        user["extra"] = json!({"authentication.kubernetes.io/pod-name": [pod]});
                        if let Some(uid) = self.pods.get(pod) {
                            user["extra"]["authentication.kubernetes.io/pod-uid"] = json!([uid]);
                        }
                    }
                    let audiences = match self.token_audiences.get(token) {
                        Some(minted) => json!(minted),
                        None => sent["spec"]["audiences"].clone(),
                    };
                    json!({"authenticated": true, "user": user, "audiences": audiences})
                }
                None => json!({"authenticated": false, "error": "invalid bearer token"}),
            };
            let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {}, "status": status});
            return (StatusCode::OK, review);
        }
        if path.ends_with("/subjectaccessreviews") {
            if self.reviews_unavailable {
                return failure(StatusCode::INTERNAL_SERVER_ERROR, "InternalError");
            }
            let spec = &sent["spec"];
            let attributes = &spec["resourceAttributes"];
            let allowed = self.grants.iter().any(|g| {
                spec["user"] == g.user.as_str()
                    && attributes["verb"] == g.verb.as_str()
                    && attributes["resource"] == g.resource.as_str()
            });
            let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec, "status": {"allowed": allowed}});
            return (StatusCode::OK, review);
        }
        if method == "GET" && path == "/apis/agentgate.dev/v1alpha1/agentscans" {
            let list = json!({"apiVersion": "agentgate.dev/v1alpha1", "kind": "AgentScanList", "metadata": {"resourceVersion": "1"}, "items": self.scans});
            return (StatusCode::OK, list);
        }
        if method == "GET"
            && let Some(namespace) = path
                .strip_prefix("/apis/agentgate.dev/v1alpha1/namespaces/")
                .and_then(|rest| rest.strip_suffix("/agentsandboxes"))
        {
            let items: Vec<&Value> = self
                .sandboxes
                .iter()
                .filter(|s| s["metadata"]["namespace"] == namespace)
                .collect();
            let list = json!({"apiVersion": "agentgate.dev/v1alpha1", "kind": "AgentSandboxList", "metadata": {"resourceVersion": "1"}, "items": items});
            return (StatusCode::OK, list);
        }
        if let Some(rest) = path.strip_prefix("/apis/agentgate.dev/v1alpha1/namespaces/")
            && let Some((namespace, rest)) = rest.split_once("/agentsandboxes/")
        {
            let (name, status) = match rest.strip_suffix("/status") {
                Some(name) => (name, true),
                None => (rest, false),
            };
            let Some(found) = self
                .sandboxes
                .iter()
                .find(|s| s["metadata"]["namespace"] == namespace && s["metadata"]["name"] == name)
            else {
                return failure(StatusCode::NOT_FOUND, "NotFound");
            };
            if status && method == "PATCH" {
                self.status_patches.lock().unwrap().push(sent.clone());
            }
            return (StatusCode::OK, found.clone());
        }
        if method == "GET"
            && let Some(rest) = path.strip_prefix("/api/v1/namespaces/")
            && let Some((namespace, name)) = rest.split_once("/pods/")
        {
            return match self.pods_replaced.get(name).or_else(|| self.pods.get(name)) {
                Some(uid) => (
                    StatusCode::OK,
                    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                           "metadata": {"name": name, "namespace": namespace, "uid": uid}}),
                ),
                None => failure(StatusCode::NOT_FOUND, "NotFound"),
            };
        }
        if let Some(name) = path.strip_prefix("/api/v1/namespaces/")
            && let Some(found) = self
                .namespaces
                .iter()
                .find(|n| n["metadata"]["name"] == name)
        {
            return (StatusCode::OK, found.clone());
        }
        failure(StatusCode::NOT_FOUND, "NotFound")
    }
}

fn failure(code: StatusCode, reason: &str) -> (StatusCode, Value) {
    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code.as_u16(), "message": reason});
    (code, status)
}

async fn serve_fake(
    api: Arc<FakeApi>,
    request: Request<kube::client::Body>,
) -> Result<Response<kube::client::Body>, Infallible> {
    let (method, path) = (
        request.method().to_string(),
        request.uri().path().to_string(),
    );
    let body = axum::body::to_bytes(Body::new(request.into_body()), 1 << 20)
        .await
        .unwrap_or_default();
    let sent: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let (status, value) = api.answer(&method, &path, &sent);
    let mut response = Response::new(kube::client::Body::from(value.to_string().into_bytes()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

/// A store holding `objects`, listed once (ready); with `synced` false it
/// never lists (its writer is gone), as a cache before its first list.
fn store_of<K>(objects: &[Value], synced: bool) -> Store<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
    K: serde::de::DeserializeOwned,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    writable_store(objects, synced).0
}

fn writable_store<K>(objects: &[Value], synced: bool) -> (Store<K>, reflector::store::Writer<K>)
where
    K: kube::Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
    K: serde::de::DeserializeOwned,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, mut writer) = reflector::store();
    if synced {
        writer.apply_watcher_event(&watcher::Event::Init);
        for object in objects {
            let object: K = serde_json::from_value(object.clone()).unwrap();
            writer.apply_watcher_event(&watcher::Event::InitApply(object));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
    }
    (reader, writer)
}

#[derive(Parser)]
struct WebhookFlags {
    #[command(flatten)]
    webhook: WebhookArgs,
}

/// What the webhook sees: its caches, the fake API server, its flags.
pub struct Cluster {
    /// Cached MaximumPolicies.
    pub maximums: Vec<Value>,
    /// Cached Namespaces.
    pub namespaces: Vec<Value>,
    /// Cached AgentSandboxes.
    pub sandboxes: Vec<Value>,
    /// Cached AgentScans.
    pub scans: Vec<Value>,
    /// Cached policy ConfigMaps.
    pub policy_maps: Vec<Value>,
    /// Cached sandbox Pods' metadata.
    pub sandbox_pods: Vec<Value>,
    /// The API server behind the client.
    pub api: FakeApi,
    /// Flags of `agentgate webhook` beyond `--operator-user`.
    pub flags: Vec<String>,
    /// Whether the caches have listed once.
    pub synced: bool,
}

impl Cluster {
    /// The org ceiling, namespace `agents` of team ml, namespaces
    /// `enforced`, `warned` and `audited` in each pod-admission mode, and
    /// the example sandbox; `--scan-writer ci`; nobody granted anything.
    pub fn example() -> Cluster {
        let mode = |mode: &str| json!({"agentgate.dev/enforce": mode});
        Cluster {
            maximums: vec![example_maximum()],
            namespaces: vec![
                namespace("agents", json!({"team": "ml"})),
                namespace("enforced", mode("enforce")),
                namespace("warned", mode("warn")),
                namespace("audited", mode("audit")),
            ],
            sandboxes: vec![example_sandbox()],
            scans: Vec::new(),
            policy_maps: Vec::new(),
            sandbox_pods: Vec::new(),
            api: FakeApi::default(),
            flags: vec!["--scan-writer".into(), CI.into()],
            synced: true,
        }
    }

    /// Grants `user` `verb` on `resource` in SubjectAccessReviews.
    pub fn grant(mut self, user: &str, verb: &str, resource: &str) -> Cluster {
        self.api.grants.push(Grant::new(user, verb, resource));
        self
    }

    /// The router over this cluster, and what the test inspects.
    pub fn serve(self) -> Harness {
        let api = Arc::new(self.api);
        let fake = api.clone();
        let client = kube::Client::new(
            tower::service_fn(move |request| serve_fake(fake.clone(), request)),
            "default",
        );
        let mut argv = vec![
            "agentgate".to_string(),
            "--operator-user".into(),
            OPERATOR.into(),
        ];
        argv.extend(self.flags);
        let flags = WebhookFlags::parse_from(argv);
        let synced = self.synced;
        let (sandboxes, sandbox_writer) = writable_store::<AgentSandbox>(&self.sandboxes, synced);
        let (policy_maps, policy_map_writer) =
            writable_store::<ConfigMap>(&self.policy_maps, synced);
        let stream_wakeups = SandboxWakeups::default();
        let caches = Caches {
            maximums: store_of::<MaximumPolicy>(&self.maximums, synced),
            namespaces: store_of::<Namespace>(&self.namespaces, synced),
            sandboxes,
            scans: store_of::<AgentScan>(&self.scans, synced),
            policy_maps,
            sandbox_pods: store_of::<PartialObjectMeta<Pod>>(&self.sandbox_pods, synced),
            stream_wakeups: stream_wakeups.clone(),
        };
        let prover = Prover::new(ProverOptions {
            timeout: Duration::from_millis(2000),
            ..ProverOptions::default()
        });
        let metrics = Arc::new(Metrics::new());
        let resolver = Arc::new(CertResolver::new());
        let state = Arc::new(WebhookState::new(
            &flags.webhook,
            client,
            prover,
            metrics,
            false,
            caches,
            resolver,
        ));
        Harness {
            router: router(state.clone()),
            state,
            api,
            writers: Mutex::new((sandbox_writer, policy_map_writer)),
            stream_wakeups,
        }
    }
}

/// The router in process, its state and the fake API server behind it.
pub struct Harness {
    router: Router,
    /// The state the handlers share.
    pub state: Arc<WebhookState>,
    /// The fake API server.
    pub api: Arc<FakeApi>,
    /// Writers of the sandbox and policy ConfigMap caches.
    writers: Mutex<(
        reflector::store::Writer<AgentSandbox>,
        reflector::store::Writer<ConfigMap>,
    )>,
    /// Wakes the policy streams as the caches' watches do.
    stream_wakeups: SandboxWakeups,
}

impl Harness {
    /// Puts `sandbox` into the cache (as a watch event would) and wakes
    /// its policy streams.
    pub fn put_sandbox(&self, sandbox: Value) {
        let object: AgentSandbox = serde_json::from_value(sandbox).unwrap();
        let (namespace, name) = (object.namespace().unwrap(), object.name_any());
        self.writers
            .lock()
            .unwrap()
            .0
            .apply_watcher_event(&watcher::Event::Apply(object));
        self.stream_wakeups.wake(&namespace, &name);
    }

    /// Puts a policy ConfigMap into the cache and wakes the streams of the
    /// sandbox it is named for.
    pub fn put_policy_map(&self, config_map: Value) {
        let object: ConfigMap = serde_json::from_value(config_map).unwrap();
        let (namespace, name) = (object.namespace().unwrap(), object.name_any());
        self.writers
            .lock()
            .unwrap()
            .1
            .apply_watcher_event(&watcher::Event::Apply(object));
        if let Some(sandbox) = policy_config_map_sandbox(&name) {
            self.stream_wakeups.wake(&namespace, sandbox);
        }
    }
}

/// An HTTP answer.
pub struct Reply {
    /// The status code.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Vec<u8>,
}

impl Reply {
    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

impl Harness {
    /// Sends `request` through the router.
    pub async fn send(&self, request: Request<Body>) -> Reply {
        let response = self.respond(request).await;
        let status = response.status();
        let headers = response.headers().clone();
        let body = axum::body::to_bytes(response.into_body(), 64 << 20)
            .await
            .unwrap();
        Reply {
            status,
            headers,
            body: body.to_vec(),
        }
    }

    /// The router's response to `request`, its body unread.
    async fn respond(&self, request: Request<Body>) -> axum::response::Response {
        self.router
            .clone()
            .oneshot(request)
            .await
            .unwrap_or_else(|never| match never {})
    }

    /// `GET path` bearing `token`, read as a stream: the status, and a
    /// receiver of each chunk of the body as it comes.
    pub async fn stream(
        &self,
        path: &str,
        token: &str,
    ) -> (StatusCode, tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>) {
        use http_body_util::BodyExt;
        let request = Request::get(path)
            .header("authorization", format!("Bearer {token}"))
            .body(Body::empty())
            .unwrap();
        let response = self.respond(request).await;
        let status = response.status();
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        let mut body = response.into_body();
        tokio::spawn(async move {
            while let Some(Ok(frame)) = body.frame().await {
                if let Ok(data) = frame.into_data()
                    && sender.send(data.to_vec()).is_err()
                {
                    return;
                }
            }
        });
        (status, receiver)
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Reply {
        self.send(Request::get(path).body(Body::empty()).unwrap())
            .await
    }

    /// `POST path` with a JSON `body`, bearing `token` when given.
    pub async fn post(&self, path: &str, body: impl Into<Body>, token: Option<&str>) -> Reply {
        let mut request = Request::post(path).header("content-type", "application/json");
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        self.send(request.body(body.into()).unwrap()).await
    }

    /// Posts `review` to an admission endpoint; the answer must be HTTP
    /// 200 with an AdmissionReview holding a response.
    pub async fn admit(&self, path: &str, review: &Value) -> AdmissionResponse {
        self.admit_bytes(path, review.to_string()).await
    }

    /// [`Harness::admit`] of raw bytes.
    pub async fn admit_bytes(&self, path: &str, body: impl Into<Body>) -> AdmissionResponse {
        let reply = self.post(path, body, None).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
        let review: AdmissionReview<DynamicObject> = serde_json::from_slice(&reply.body)
            .unwrap_or_else(|e| panic!("not an AdmissionReview ({e}): {}", reply.text()));
        review.response.expect("an AdmissionReview with a response")
    }

    /// How many admission answers of `kind` were counted as `allowed`.
    pub fn admissions_counted(&self, kind: &str, allowed: bool) -> u64 {
        self.state
            .metrics
            .admissions
            .get_or_create(&AdmissionLabel {
                kind: kind.into(),
                allowed: allowed.to_string(),
            })
            .get()
    }

    /// How many `/v1/decide` answers were counted as `outcome`.
    pub fn decisions_counted(&self, outcome: &str) -> u64 {
        self.state
            .metrics
            .decisions
            .get_or_create(&DecisionLabel {
                decision: outcome.into(),
            })
            .get()
    }
}

/// Asserts a refusal the API server shows as 403 Forbidden with a message
/// containing every one of `parts`.
#[track_caller]
pub fn assert_denied(response: &AdmissionResponse, parts: &[&str]) {
    assert!(!response.allowed, "admitted: {response:?}");
    assert_eq!(response.result.code, 403, "{response:?}");
    assert_eq!(response.result.reason, "Forbidden", "{response:?}");
    assert_eq!(response.uid, REVIEW_UID);
    for part in parts {
        assert!(
            response.result.message.contains(part),
            "{:?} lacks {part:?}",
            response.result.message
        );
    }
}

/// Asserts an admission without warnings.
#[track_caller]
pub fn assert_allowed(response: &AdmissionResponse) {
    assert!(response.allowed, "refused: {}", response.result.message);
    assert_eq!(response.uid, REVIEW_UID);
    assert_eq!(response.warnings, None, "{response:?}");
}
