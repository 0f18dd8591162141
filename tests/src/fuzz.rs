//! Bad-input drivers shared by the bounded tests (`tests/tests/
//! bad_input.rs`, in `make test`) and the time-budgeted `fuzz` binary
//! (`make fuzz`): real AdmissionReviews and policy documents, mutated, then
//! driven through the webhook's axum router in process and through policy
//! load/compile/prove. A finding is a panic or an answer that is not well
//! formed; the drivers say which.

use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentgate::metrics::Metrics;
use agentgate::webhook::WebhookArgs;
use agentgate::webhook::certs::CertResolver;
use agentgate::webhook::server::{Caches, WebhookState, router};
use agentgate_api::crd::{AgentSandbox, AgentScan, MaximumPolicy};
use agentgate_policy::compile::{CompiledPolicy, Limits, Role};
use agentgate_policy::error::{Reason, ReasonCode};
use agentgate_policy::load::{DocumentKind, LoadError, load_document};
use agentgate_prover::{Outcome, Prover, ProverOptions};
use axum::Router;
use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use clap::Parser;
use k8s_openapi::api::core::v1::Namespace;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tower::ServiceExt;

/// A small deterministic generator (SplitMix64): reproducible from a seed
/// without a dependency.
pub struct Rng(u64);

impl Rng {
    /// A generator starting at `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// The admission endpoints the webhook serves.
pub const ENDPOINTS: [&str; 6] = [
    "/validate/agentsandboxes",
    "/validate/policyproposals",
    "/validate/maximumpolicies",
    "/validate/agentscans",
    "/validate/pods",
    "/validate/namespaces",
];

/// What the fake API server knows: one bearer token (for `/v1/decide`).
pub const GOOD_TOKEN: &str = "fuzz-token";

fn repo_file(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("reading {}: {e}", full.display()))
}

fn yaml(path: &str) -> Value {
    serde_saphyr::from_str(&repo_file(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// An AdmissionReview as the API server sends it.
fn review(
    resource: (&str, &str, &str),
    kind: &str,
    operation: &str,
    namespace: Option<&str>,
    object: Option<Value>,
    old: Option<Value>,
    sub_resource: Option<&str>,
) -> Value {
    let (group, version, plural) = resource;
    let name = object
        .as_ref()
        .or(old.as_ref())
        .and_then(|o| o["metadata"]["name"].as_str())
        .unwrap_or("x")
        .to_string();
    let mut request = json!({
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": plural},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": plural},
        "name": name,
        "operation": operation,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": object,
        "oldObject": old,
        "dryRun": false,
        "options": null,
    });
    if let Some(ns) = namespace {
        request["namespace"] = json!(ns);
    }
    if let Some(sub) = sub_resource {
        request["subResource"] = json!(sub);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

/// Real AdmissionReviews, one or more per endpoint: the examples as the API
/// server would send them.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let agentgate = |plural| ("agentgate.dev", "v1alpha1", plural);
    let mut sandbox = yaml("examples/sandbox.yaml");
    sandbox["metadata"]["namespace"] = json!("agents");
    let mut widened = sandbox.clone();
    widened["spec"]["policy"]["network"][0]["endpoints"][0]["host"] = json!("exfil.example.org");
    let maximum = yaml("examples/maximum.yaml");
    let mut proposal = yaml("examples/proposals/comment-on-issues.yaml");
    proposal["metadata"]["namespace"] = json!("agents");
    let image = format!("registry.example/agent@sha256:{}", "a".repeat(64));
    let scan = json!({
        "apiVersion": "agentgate.dev/v1alpha1", "kind": "AgentScan",
        "metadata": {"name": "agent"},
        "spec": {"image": image, "graph": {"nodes": [], "edges": []}}
    });
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "worker", "namespace": "enforced"},
        "spec": {"containers": [{"name": "agent", "image": image, "command": ["/agent"]}]}
    });
    let namespace = |labels: Value| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "agents", "labels": labels}});
    let out = [
        (
            ENDPOINTS[0],
            review(
                agentgate("agentsandboxes"),
                "AgentSandbox",
                "CREATE",
                Some("agents"),
                Some(sandbox.clone()),
                None,
                None,
            ),
        ),
        (
            ENDPOINTS[0],
            review(
                agentgate("agentsandboxes"),
                "AgentSandbox",
                "UPDATE",
                Some("agents"),
                Some(widened),
                Some(sandbox.clone()),
                None,
            ),
        ),
        (
            ENDPOINTS[0],
            review(
                agentgate("agentsandboxes"),
                "AgentSandbox",
                "UPDATE",
                Some("agents"),
                Some(sandbox.clone()),
                Some(sandbox.clone()),
                Some("status"),
            ),
        ),
        (
            ENDPOINTS[0],
            review(
                agentgate("agentsandboxes"),
                "AgentSandbox",
                "DELETE",
                Some("agents"),
                None,
                Some(sandbox),
                None,
            ),
        ),
        (
            ENDPOINTS[1],
            review(
                agentgate("policyproposals"),
                "PolicyProposal",
                "CREATE",
                Some("agents"),
                Some(proposal),
                None,
                None,
            ),
        ),
        (
            ENDPOINTS[2],
            review(
                agentgate("maximumpolicies"),
                "MaximumPolicy",
                "CREATE",
                None,
                Some(maximum),
                None,
                None,
            ),
        ),
        (
            ENDPOINTS[3],
            review(
                agentgate("agentscans"),
                "AgentScan",
                "CREATE",
                None,
                Some(scan),
                None,
                None,
            ),
        ),
        (
            ENDPOINTS[4],
            review(
                ("", "v1", "pods"),
                "Pod",
                "CREATE",
                Some("enforced"),
                Some(pod),
                None,
                None,
            ),
        ),
        (
            ENDPOINTS[5],
            review(
                ("", "v1", "namespaces"),
                "Namespace",
                "UPDATE",
                None,
                Some(namespace(json!({}))),
                Some(namespace(json!({"team": "ml"}))),
                None,
            ),
        ),
    ];
    out.into_iter()
        .map(|(endpoint, review)| (endpoint, review.to_string().into_bytes()))
        .collect()
}

/// The ways a request is spoiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    /// Cut short at a random byte.
    Truncated,
    /// Sent to another endpoint (a wrong kind for it).
    WrongEndpoint,
    /// `request.kind` / the object's `kind` changed to another kind.
    WrongKind,
    /// A random value replaced by one of another type.
    WrongType,
    /// A random string replaced by a huge one.
    HugeString,
    /// A random value wrapped in deep nesting.
    DeepNesting,
    /// A key repeated with another value.
    DuplicateKey,
    /// Bytes that are not UTF-8 inside a string.
    InvalidUtf8,
    /// Random bytes.
    RandomBytes,
}

/// Every mutation, in order.
pub const MUTATIONS: [Mutation; 9] = [
    Mutation::Truncated,
    Mutation::WrongEndpoint,
    Mutation::WrongKind,
    Mutation::WrongType,
    Mutation::HugeString,
    Mutation::DeepNesting,
    Mutation::DuplicateKey,
    Mutation::InvalidUtf8,
    Mutation::RandomBytes,
];

/// Every value of `value` as a JSON pointer.
fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let key = k.replace('~', "~0").replace('/', "~1");
                pointers(v, format!("{at}/{key}"), out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                pointers(v, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// A random value below the root of `value`, as a pointer.
fn random_pointer(value: &Value, rng: &mut Rng, only_strings: bool) -> Option<String> {
    let mut all = Vec::new();
    pointers(value, String::new(), &mut all);
    let all: Vec<String> = all
        .into_iter()
        .filter(|p| !p.is_empty())
        .filter(|p| !only_strings || value.pointer(p).is_some_and(Value::is_string))
        .collect();
    (!all.is_empty()).then(|| all[rng.below(all.len())].clone())
}

/// `seed` spoiled by `mutation`; returns the endpoint to send it to.
pub fn mutate(
    endpoint: &'static str,
    seed: &[u8],
    mutation: Mutation,
    rng: &mut Rng,
) -> (&'static str, Vec<u8>) {
    let parsed: Value = serde_json::from_slice(seed).unwrap_or(Value::Null);
    match mutation {
        Mutation::Truncated => (endpoint, seed[..rng.below(seed.len())].to_vec()),
        Mutation::WrongEndpoint => (ENDPOINTS[rng.below(ENDPOINTS.len())], seed.to_vec()),
        Mutation::WrongKind => {
            let mut v = parsed;
            let kinds = [
                "Pod",
                "AgentSandbox",
                "MaximumPolicy",
                "Secret",
                "",
                "PolicyProposal",
            ];
            let kind = kinds[rng.below(kinds.len())];
            // Only where the shape allows it: a stacked mutation may have
            // made `request` or its `kind` something else.
            if rng.below(2) == 0
                && let Some(Value::Object(request_kind)) = v.pointer_mut("/request/kind")
            {
                request_kind.insert("kind".into(), json!(kind));
            }
            if let Some(Value::Object(object)) = v.pointer_mut("/request/object") {
                object.insert("kind".into(), json!(kind));
            }
            (endpoint, v.to_string().into_bytes())
        }
        Mutation::WrongType => {
            let mut v = parsed;
            if let Some(p) = random_pointer(&v, rng, false)
                && let Some(slot) = v.pointer_mut(&p)
            {
                let others = [
                    json!(null),
                    json!(true),
                    json!(-1),
                    json!(1.5e300),
                    json!("x"),
                    json!([1, "a"]),
                    json!({"a": 1}),
                ];
                *slot = others[rng.below(others.len())].clone();
            }
            (endpoint, v.to_string().into_bytes())
        }
        Mutation::HugeString => {
            let mut v = parsed;
            if let Some(p) = random_pointer(&v, rng, true)
                && let Some(slot) = v.pointer_mut(&p)
            {
                let sizes = [70_000, 1 << 20, 5 << 20, 9 << 20];
                *slot = json!("A".repeat(sizes[rng.below(sizes.len())]));
            }
            (endpoint, v.to_string().into_bytes())
        }
        Mutation::DeepNesting => {
            let mut v = parsed;
            if let Some(p) = random_pointer(&v, rng, false)
                && let Some(slot) = v.pointer_mut(&p)
            {
                *slot = json!("__deep__");
            }
            let depth = [200, 5_000, 100_000][rng.below(3)];
            let deep = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
            let text = v.to_string().replacen("\"__deep__\"", &deep, 1);
            (endpoint, text.into_bytes())
        }
        Mutation::DuplicateKey => {
            let text = String::from_utf8_lossy(seed).into_owned();
            let keys = [
                "\"request\":{",
                "\"object\":{",
                "\"metadata\":{",
                "\"spec\":{",
            ];
            let key = keys[rng.below(keys.len())];
            let duplicate = [
                "\"uid\":\"other\",",
                "\"name\":\"evil\",",
                "\"kind\":\"Pod\",",
                "\"namespace\":\"kube-system\",",
            ];
            let text = text.replacen(
                key,
                &format!("{key}{}", duplicate[rng.below(duplicate.len())]),
                1,
            );
            (endpoint, text.into_bytes())
        }
        Mutation::InvalidUtf8 => {
            let mut bytes = seed.to_vec();
            let quotes: Vec<usize> = bytes
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'"')
                .map(|(i, _)| i)
                .collect();
            let at = quotes.get(rng.below(quotes.len())).map_or(0, |i| i + 1);
            let bad: [&[u8]; 3] = [b"\xff\xfe", b"\xc0\xaf", b"\xed\xa0\x80"];
            bytes.splice(at..at, bad[rng.below(3)].iter().copied());
            (endpoint, bytes)
        }
        Mutation::RandomBytes => {
            let len = rng.below(512);
            (endpoint, (0..len).map(|_| rng.next_u64() as u8).collect())
        }
    }
}

/// A store holding `objects`, listed once (ready).
fn store_of<K>(objects: Vec<K>) -> Store<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Init);
    for object in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(object));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    reader
}

fn json_response(status: StatusCode, value: &Value) -> Response<kube::client::Body> {
    let mut response = Response::new(kube::client::Body::from(value.to_string().into_bytes()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    response
}

fn status_not_found() -> Response<kube::client::Body> {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"});
    json_response(StatusCode::NOT_FOUND, &body)
}

/// The fake API server: TokenReviews accept only [`GOOD_TOKEN`],
/// SubjectAccessReviews allow nothing, anything else is 404.
async fn fake_api_server(
    request: Request<kube::client::Body>,
) -> Result<Response<kube::client::Body>, Infallible> {
    let path = request.uri().path().to_string();
    let body = axum::body::to_bytes(Body::new(request.into_body()), 1 << 20)
        .await
        .unwrap_or_default();
    let sent: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let answer = if path.ends_with("/tokenreviews") {
        let ok = sent["spec"]["token"] == GOOD_TOKEN;
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {},
               "status": {"authenticated": ok, "user": {"username": if ok { "fuzz-reader" } else { "" }}}})
    } else if path.ends_with("/subjectaccessreviews") {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
               "spec": sent["spec"], "status": {"allowed": false}})
    } else {
        return Ok(status_not_found());
    };
    Ok(json_response(StatusCode::OK, &answer))
}

#[derive(Parser)]
struct WebhookFlags {
    #[command(flatten)]
    webhook: WebhookArgs,
}

/// The webhook's router in process, over caches holding the examples (the
/// org ceiling, namespace `agents` of team ml, an enforced namespace, the
/// example sandbox) and the fake API server.
pub struct Webhook {
    router: Router,
    runtime: tokio::runtime::Runtime,
}

impl Webhook {
    /// Builds the router and its state: no scans, no scan writers.
    pub fn new() -> Webhook {
        Webhook::with_scans(Vec::new(), &[])
    }

    /// The same router, with `scans` in its cache and `scan_writers` (as
    /// `--scan-writer`, e.g. the chart's default `group:system:masters`)
    /// trusted to write scans.
    pub fn with_scans(scans: Vec<AgentScan>, scan_writers: &[&str]) -> Webhook {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("a tokio runtime: {e}"));
        let router = runtime.block_on(async {
            let client = kube::Client::new(tower::service_fn(fake_api_server), "default");
            let mut args = vec![
                "fuzz".to_string(),
                "--operator-user".to_string(),
                "system:serviceaccount:agentgate-system:agentgate".to_string(),
                "--admission-deadline-ms".to_string(),
                "2000".to_string(),
            ];
            args.extend(scan_writers.iter().map(|w| format!("--scan-writer={w}")));
            let flags = WebhookFlags::parse_from(args);
            let maximum: MaximumPolicy = serde_json::from_value(yaml("examples/maximum.yaml"))
                .unwrap_or_else(|e| panic!("examples/maximum.yaml: {e}"));
            let mut sandbox: AgentSandbox = serde_json::from_value(yaml("examples/sandbox.yaml"))
                .unwrap_or_else(|e| panic!("examples/sandbox.yaml: {e}"));
            sandbox.metadata.namespace = Some("agents".into());
            let namespace = |name: &str, labels: Value| -> Namespace {
                serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))
                    .unwrap_or_else(|e| panic!("{e}"))
            };
            let caches = Caches {
                maximums: store_of(vec![maximum]),
                namespaces: store_of(vec![
                    namespace("agents", json!({"team": "ml"})),
                    namespace("enforced", json!({"agentgate.dev/enforce": "enforce"})),
                ]),
                sandboxes: store_of(vec![sandbox]),
                scans: store_of(scans),
                policy_maps: store_of(Vec::new()),
                sandbox_pods: store_of(Vec::new()),
                stream_wakeups: Default::default(),
            };
            let state = WebhookState::new(
                &flags.webhook,
                client,
                Prover::new(ProverOptions {
                    timeout: Duration::from_millis(2000),
                    ..ProverOptions::default()
                }),
                Arc::new(Metrics::new()),
                false,
                caches,
                Arc::new(CertResolver::new()),
            );
            router(Arc::new(state))
        });
        Webhook { router, runtime }
    }

    /// Sends `body` to `path` (with `token` as bearer, if any); returns the
    /// status and body.
    pub fn send(&self, path: &str, body: Vec<u8>, token: Option<&str>) -> (StatusCode, Vec<u8>) {
        let mut request = Request::post(path).header("content-type", "application/json");
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let request = request
            .body(Body::from(body))
            .unwrap_or_else(|e| panic!("a request: {e}"));
        self.runtime.block_on(async {
            let response = self
                .router
                .clone()
                .oneshot(request)
                .await
                .unwrap_or_else(|never| match never {});
            let status = response.status();
            let body = axum::body::to_bytes(response.into_body(), 64 << 20)
                .await
                .unwrap_or_default();
            (status, body.to_vec())
        })
    }

    /// The answer to one admission request: whether it was admitted, and
    /// the refusal's message.
    pub fn admission_answer(
        &self,
        endpoint: &str,
        body: Vec<u8>,
    ) -> Result<(bool, String), String> {
        let (_, answer) = self.send(endpoint, body, None);
        let review: AdmissionReview<DynamicObject> =
            serde_json::from_slice(&answer).map_err(|e| format!("not an AdmissionReview ({e})"))?;
        let response = review.response.ok_or("no response")?;
        Ok((response.allowed, response.result.message))
    }

    /// Sends one admission request and checks the answer is a well-formed
    /// AdmissionReview (its uid the request's when the request had one); a
    /// refusal of input that is not an AdmissionReview must say why.
    pub fn check_admission(&self, endpoint: &str, body: Vec<u8>) -> Result<(), String> {
        let sent: Option<AdmissionReview<DynamicObject>> = serde_json::from_slice(&body).ok();
        let (status, answer) = self.send(endpoint, body, None);
        if status != StatusCode::OK {
            return Err(format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&answer)
            ));
        }
        let review: AdmissionReview<DynamicObject> =
            serde_json::from_slice(&answer).map_err(|e| {
                format!(
                    "not an AdmissionReview ({e}): {}",
                    String::from_utf8_lossy(&answer)
                )
            })?;
        let response = review
            .response
            .ok_or_else(|| "an AdmissionReview without a response".to_string())?;
        match sent.as_ref().and_then(|r| r.request.as_ref()) {
            Some(request) if response.uid != request.uid && !response.uid.is_empty() => {
                return Err(format!(
                    "answered uid {:?} for {:?}",
                    response.uid, request.uid
                ));
            }
            None if response.allowed => {
                return Err("admitted input that is not an AdmissionReview".into());
            }
            _ => {}
        }
        if !response.allowed && response.result.message.trim().is_empty() {
            return Err("a refusal without a reason".into());
        }
        Ok(())
    }

    /// Sends one `/v1/decide` request as the authenticated reader and checks
    /// the answer is a decision (JSON with `allow` and a reason), 400 for
    /// garbage, 403 for a sandbox the reader may not get.
    pub fn check_decide(&self, body: Vec<u8>) -> Result<(), String> {
        let (status, answer) = self.send("/v1/decide", body, Some(GOOD_TOKEN));
        let value: Value = serde_json::from_slice(&answer).map_err(|e| {
            format!(
                "HTTP {status}, not JSON ({e}): {}",
                String::from_utf8_lossy(&answer)
            )
        })?;
        let expected = [
            StatusCode::OK,
            StatusCode::BAD_REQUEST,
            StatusCode::FORBIDDEN,
            StatusCode::PAYLOAD_TOO_LARGE,
        ];
        if !expected.contains(&status) {
            return Err(format!("HTTP {status}: {value}"));
        }
        if !value["allow"].is_boolean() || value["reason"].as_str().is_none_or(str::is_empty) {
            return Err(format!("HTTP {status}, not a decision: {value}"));
        }
        if status != StatusCode::OK && value["allow"] == true {
            return Err(format!("HTTP {status} with allow: {value}"));
        }
        Ok(())
    }
}

impl Default for Webhook {
    fn default() -> Self {
        Webhook::new()
    }
}

/// A `/v1/decide` body to mutate.
pub fn decide_seed() -> Vec<u8> {
    br#"{"sandbox":"triage-bot","namespace":"agents","binary":"/usr/local/bin/agent","host":"api.github.com","port":443,"layer":"rest","method":"GET","path":"/repos/acme/widgets/issues/7"}"#.to_vec()
}

/// The policy documents to mutate: the examples.
pub fn policy_seeds() -> Vec<String> {
    [
        "examples/maximum.yaml",
        "examples/sandbox.yaml",
        "examples/candidate-comment.yaml",
        "examples/candidate-exceeds.yaml",
        "examples/maximum-egress.yaml",
    ]
    .iter()
    .map(|p| repo_file(p))
    .collect()
}

/// Text-level mutations of a YAML document: cut, a byte changed, a line
/// duplicated or dropped, a token inserted, a value made huge or deep.
pub fn mutate_yaml(seed: &str, rng: &mut Rng) -> String {
    if seed.is_empty() {
        return ["kind: MaximumPolicy", "network: [", "{}", "- a", "\u{0}"][rng.below(5)]
            .to_string();
    }
    let lines: Vec<&str> = seed.lines().collect();
    let at = rng.below(lines.len());
    if lines.is_empty() {
        return format!("{seed}\nnetwork: []");
    }
    let tokens = [
        "- ",
        ": ",
        "{",
        "}",
        "[",
        "]",
        "*",
        "**",
        "&a ",
        "*a",
        "!!binary ",
        "~",
        "'",
        "\"",
        "\t",
        "- {host: '**', ports: [0, 65536]}",
        "path: /a/../b",
        "methods: [FETCH]",
        "ports: [-1]",
        "readWrite: [/]",
        "match: {}",
        "protocol: carrier-pigeon",
        "<<: *a",
    ];
    match rng.below(7) {
        0 => seed[..seed.floor_char_boundary(rng.below(seed.len()))].to_string(),
        1 => {
            let mut bytes = seed.as_bytes().to_vec();
            let i = rng.below(bytes.len());
            bytes[i] = b" -:{}[]*!&\n\"'#x0"[rng.below(16)];
            String::from_utf8_lossy(&bytes).into_owned()
        }
        2 => {
            let mut l = lines.clone();
            l.insert(at, lines[at]);
            l.join("\n")
        }
        3 => {
            let mut l = lines.clone();
            l.remove(at);
            l.join("\n")
        }
        4 => {
            let mut l: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
            let token = tokens[rng.below(tokens.len())];
            let line = &mut l[at];
            let col = line.floor_char_boundary(rng.below(line.len() + 1));
            line.insert_str(col, token);
            l.join("\n")
        }
        5 => {
            let mut l: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
            l[at].push_str(&"x".repeat([1_000, 100_000, 5 << 20][rng.below(3)]));
            l.join("\n")
        }
        _ => {
            let depth = [50, 2_000, 50_000][rng.below(3)];
            format!(
                "{seed}\nextra: {}1{}\n",
                "[".repeat(depth),
                "]".repeat(depth)
            )
        }
    }
}

/// The org ceiling (examples/maximum.yaml), compiled: what
/// [`check_policy`] proves sandboxes against, compiled once per run.
pub fn org_ceiling() -> CompiledPolicy {
    let limits = Limits::default();
    load_document(&repo_file("examples/maximum.yaml"), &limits)
        .map_err(|e| e.to_string())
        .and_then(|m| m.compile(Role::Maximum, &limits).map_err(|e| e.to_string()))
        .map(|compiled| compiled.policy)
        .unwrap_or_else(|e| panic!("examples/maximum.yaml: {e}"))
}

/// Loads, compiles and (for a sandbox or candidate against the org
/// ceiling) proves one document. A refusal must name its field; a proof
/// that says "exceeds" must carry a counterexample (the prover replays it).
pub fn check_policy(text: &str, prover: &Prover, ceiling: &CompiledPolicy) -> Result<(), String> {
    let limits = Limits::default();
    // A reason about the whole document (too large, not a mapping of a
    // known kind) has no field below the root; every other names one.
    let named = |reason: &Reason| {
        reason.field.as_deref().is_some_and(|f| !f.is_empty())
            || (reason.field.is_none()
                && matches!(
                    reason.code,
                    ReasonCode::ResourceLimit | ReasonCode::UnsupportedPolicyShape
                )
                && !reason.message.is_empty())
    };
    let loaded = match load_document(text, &limits) {
        Ok(loaded) => loaded,
        Err(LoadError::Yaml(message)) if message.trim().is_empty() => {
            return Err("a YAML error without a message".into());
        }
        Err(LoadError::Invalid(reason)) if !named(&reason) => {
            return Err(format!("a refusal without a field path: {reason:?}"));
        }
        Err(_) => return Ok(()),
    };
    let role = match loaded.kind {
        DocumentKind::MaximumPolicy => Role::Maximum,
        _ => Role::Sandbox,
    };
    let compiled = match loaded.compile(role, &limits) {
        Ok(compiled) => compiled,
        Err(reason) if !named(&reason) => {
            return Err(format!("a refusal without a field path: {reason:?}"));
        }
        Err(_) => return Ok(()),
    };
    if role == Role::Sandbox {
        let proof = prover.containment(&compiled.policy, ceiling);
        if let Outcome::Exceeds { counterexample } = &proof.outcome
            && counterexample.to_string().is_empty()
        {
            return Err("exceeds without a counterexample".into());
        }
    }
    Ok(())
}
