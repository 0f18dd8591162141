//! The HTTPS shell around `admission` and `decide`: reflector caches,
//! SubjectAccessReviews, deadlines, metrics and the TLS accept loop.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::header::WWW_AUTHENTICATE;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::authentication::v1::{SelfSubjectReview, TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::controller::metrics::{DecisionLabel, Metrics};
use crate::k8s::access::{access_review, approve_proposals, core_resource};
use crate::k8s::cache::reflect;
use crate::k8s::crd::{AgentSandbox, AgentScan, MaximumPolicy, PolicyProposal};
use crate::k8s::governance::{CompiledMaximums, dropped_governance, governing_from};
use crate::k8s::pod_template::{
    agent_identities, owning_sandbox, pod_service_account, template_escapes,
};
use crate::k8s::sandbox_pod::DataPlane;
use crate::prover::Prover;
use crate::trifecta::assess::{image_digest, scan_of_digest};
use crate::trifecta::{Finding, analyze};
use crate::webhook::admission::{
    Answer, ProposalCheck, accepted_findings_changed, review_maximum, review_proposal,
    review_sandbox, review_scan, scan_conflict,
};
use crate::webhook::authority::{
    Requester, agent_writer_refusal, sandbox_writer_refusal, scan_writer_refusal,
    status_writer_refusal,
};
use crate::webhook::caller::{
    ALLOWED_TTL, AUTHENTICATED_TTL, AccessKey, CallerRefusal, DENIED_TTL, REFUSED_TTL, ReviewCache,
    access_key, bearer_token, is_agent, read_sandbox, token_key,
};
use crate::webhook::certs::{CertResolver, Lifetimes, SelfManaged, watch_directory};
use crate::webhook::decide::{
    CompiledPolicies, DecideRequest, DecideResponse, FindingCitation, cite_finding, decide_action,
};
use crate::webhook::pods::{CachedScan, open_findings, review_pod};
use crate::webhook::{CertMode, WebhookArgs, WebhookError};

/// Everything the handlers share.
pub struct WebhookState {
    client: Client,
    /// Its per-check timeout is capped by the admission deadline.
    prover: Prover,
    metrics: Arc<Metrics>,
    allow_unmanaged: bool,
    deadline: Duration,
    maximums: Store<MaximumPolicy>,
    namespaces: Store<Namespace>,
    sandboxes: Store<AgentSandbox>,
    scans: Store<AgentScan>,
    analyses: ScanAnalyses,
    /// The operator's own user name (from a SelfSubjectReview at start):
    /// only its pods borrow their sandbox's proofs and acceptances.
    operator_user: std::sync::OnceLock<String>,
    policies: CompiledPolicies,
    /// TokenReview answers for `/v1/decide` callers, by token hash.
    tokens: ReviewCache<[u8; 32], Result<UserInfo, String>>,
    /// SubjectAccessReview answers (`get` on an AgentSandbox) for them.
    sandbox_readers: ReviewCache<AccessKey, bool>,
    /// Compiled maximums by uid and generation: an admission compiles only
    /// a maximum it has not seen at this generation.
    compiled_maximums: CompiledMaximums,
    /// `--trusted-deployer`: ServiceAccounts that may write sandboxes of
    /// their own namespace.
    trusted_deployers: Vec<String>,
    /// `--proxy-image`: the only data plane trusted in a sandbox's pod.
    data_plane: DataPlane,
    /// `--scan-writer`: who may write AgentScans.
    scan_writers: Vec<String>,
    listening: AtomicBool,
    resolver: Arc<CertResolver>,
}

/// The webhook's views of the cluster: what it reads on every admission.
pub struct Caches {
    /// Every MaximumPolicy.
    pub maximums: Store<MaximumPolicy>,
    /// Every Namespace (labels, enforcement mode).
    pub namespaces: Store<Namespace>,
    /// Every AgentSandbox.
    pub sandboxes: Store<AgentSandbox>,
    /// Every AgentScan.
    pub scans: Store<AgentScan>,
}

impl Caches {
    /// Reflectors of the four kinds, each driven by a task.
    pub fn watch(client: &Client) -> Caches {
        Caches {
            maximums: reflect(Api::all(client.clone())),
            namespaces: reflect(Api::all(client.clone())),
            sandboxes: reflect(Api::all(client.clone())),
            scans: reflect(Api::all(client.clone())),
        }
    }
}

impl WebhookState {
    /// The state the handlers share: `caches` for the cluster, `client`
    /// for reviews (SubjectAccessReview, TokenReview, namespace reads). The
    /// operator's identity is `args.operator_user` when given, else learnt
    /// later from a SelfSubjectReview.
    pub fn new(
        args: &WebhookArgs,
        client: Client,
        prover: Prover,
        metrics: Arc<Metrics>,
        allow_unmanaged: bool,
        caches: Caches,
        resolver: Arc<CertResolver>,
    ) -> WebhookState {
        let operator_user = std::sync::OnceLock::new();
        if let Some(user) = args.operator_user.clone() {
            let _ = operator_user.set(user);
        }
        WebhookState {
            maximums: caches.maximums,
            namespaces: caches.namespaces,
            sandboxes: caches.sandboxes,
            scans: caches.scans,
            analyses: ScanAnalyses::default(),
            operator_user,
            client,
            // No single check may outlive the whole request's deadline.
            prover: prover.with_timeout(prover.options().timeout.min(args.deadline())),
            metrics,
            allow_unmanaged,
            deadline: args.deadline(),
            policies: CompiledPolicies::default(),
            tokens: ReviewCache::default(),
            sandbox_readers: ReviewCache::default(),
            compiled_maximums: CompiledMaximums::default(),
            trusted_deployers: args.trusted_deployers.clone(),
            data_plane: args.data_plane.data_plane(),
            scan_writers: args.scan_writers.clone(),
            listening: AtomicBool::new(false),
            resolver,
        }
    }

    async fn ready(&self) -> bool {
        self.listening.load(Ordering::Acquire)
            && self.resolver.is_loaded()
            && self.operator_user.get().is_some()
            && self.synced().await
    }

    /// Whether every cache has listed once. Until then an empty cache would
    /// read as "no sandbox, no agent, no ceiling" and let writes through.
    async fn synced(&self) -> bool {
        self.maximums.wait_until_ready().await.is_ok()
            && self.namespaces.wait_until_ready().await.is_ok()
            && self.sandboxes.wait_until_ready().await.is_ok()
            && self.scans.wait_until_ready().await.is_ok()
    }

    /// The AgentScan for an image digest, with its findings recomputed
    /// from the graph; an error when several scans claim the digest.
    fn scan_for(&self, digest: &str) -> Result<Option<(Arc<AgentScan>, CachedScan)>, String> {
        let all = self.scans.state();
        let Some(scan) = scan_of_digest(&all, digest)? else {
            return Ok(None);
        };
        let cached = self.analyses.get(scan, &all);
        Ok(Some((scan.clone(), cached)))
    }

    async fn namespace_labels(&self, namespace: &str) -> Result<BTreeMap<String, String>, String> {
        if let Some(ns) = self.namespaces.get(&ObjectRef::new(namespace)) {
            return Ok(ns.labels().clone());
        }
        // Created a moment ago and not in the cache yet: ask the API server.
        Api::<Namespace>::all(self.client.clone())
            .get(namespace)
            .await
            .map(|ns| ns.labels().clone())
            .map_err(|e| format!("cannot read namespace {namespace:?}: {e}"))
    }

    /// Whether `user` may do `attributes` (a SubjectAccessReview on their
    /// behalf, with their groups).
    async fn may(&self, user: &UserInfo, attributes: ResourceAttributes) -> Result<bool, String> {
        let what = format!(
            "{} {}",
            attributes.verb.clone().unwrap_or_default(),
            attributes.resource.clone().unwrap_or_default()
        );
        Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access_review(user, attributes))
            .await
            .map(|r| r.status.is_some_and(|s| s.allowed))
            .map_err(|e| format!("cannot check the {what} permission: {e}"))
    }

    /// Whether the requesting user holds `approve` on policyproposals in
    /// `namespace` (on `name`, when given).
    async fn may_approve(
        &self,
        request: &AdmissionRequest<DynamicObject>,
        namespace: &str,
        name: &str,
    ) -> Result<bool, String> {
        let name = (!name.is_empty()).then_some(name);
        self.may(&request.user_info, approve_proposals(namespace, name))
            .await
    }

    /// Whether the request comes from the operator itself.
    fn by_operator(&self, request: &AdmissionRequest<DynamicObject>) -> bool {
        self.operator_user
            .get()
            .is_some_and(|me| request.user_info.username.as_deref() == Some(me.as_str()))
    }

    /// Warnings when a sandbox's agent identities hold rights that step
    /// around any sandbox: creating pods of their own, or acting as another
    /// ServiceAccount (a SubjectAccessReview as each identity). Warnings,
    /// not refusals: the sandbox is not what grants them, RBAC is.
    async fn agent_power_warnings(&self, sandbox: &AgentSandbox) -> Vec<String> {
        let namespace = sandbox.namespace().unwrap_or_default();
        let name = sandbox.name_any();
        let checks = agent_identities(sandbox).into_iter().flat_map(|user| {
            let agent = UserInfo {
                username: Some(user),
                groups: Some(vec![
                    "system:serviceaccounts".to_string(),
                    format!("system:serviceaccounts:{namespace}"),
                    "system:authenticated".to_string(),
                ]),
                ..UserInfo::default()
            };
            [("create", "pods"), ("impersonate", "serviceaccounts")].map(|(verb, resource)| {
                let (agent, name, namespace) = (agent.clone(), &name, &namespace);
                async move {
                    let user = agent.username.as_deref().unwrap_or_default();
                    let attributes = core_resource(verb, resource, namespace, None);
                    match self.may(&agent, attributes).await {
                        Ok(true) => Some(format!(
                            "agentsandbox {name:?}: its agent {user:?} may {verb} {resource} in namespace {namespace:?}, which steps around any sandbox; bind it to the agentgate-agent ClusterRole instead of edit"
                        )),
                        Ok(false) => None,
                        Err(e) => Some(format!(
                            "agentsandbox {name:?}: could not check what its agent {user:?} may do: {e}"
                        )),
                    }
                }
            })
        });
        futures::future::join_all(checks)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    /// Whether the author of a sandbox's pod template could run that pod
    /// themselves: create pods in the namespace, and act as the account it
    /// runs as (`impersonate` on that ServiceAccount; the pod would carry
    /// its token). The operator creates the pod with its own rights, so
    /// without this it would lend them to anyone who may write a sandbox.
    async fn template_author_refusal(
        &self,
        request: &AdmissionRequest<DynamicObject>,
        sandbox: &AgentSandbox,
    ) -> Option<String> {
        let namespace = sandbox.namespace().unwrap_or_default();
        let user = request.user_info.username.clone().unwrap_or_default();
        let account = pod_service_account(&sandbox.spec);
        let checks = [
            (
                core_resource("create", "pods", &namespace, None),
                format!("create pods in namespace {namespace:?}"),
            ),
            (
                core_resource("impersonate", "serviceaccounts", &namespace, Some(&account)),
                format!("impersonate ServiceAccount {namespace}/{account} (the pod runs as it)"),
            ),
        ];
        for (attributes, what) in checks {
            match self.may(&request.user_info, attributes).await {
                Ok(true) => {}
                Ok(false) => {
                    return Some(format!(
                        "agentsandbox {:?}: {user:?} may not {what}, so may not have agentgate run this pod template",
                        sandbox.name_any()
                    ));
                }
                Err(e) => return Some(format!("agentsandbox {:?}: {e}", sandbox.name_any())),
            }
        }
        None
    }

    /// Runs blocking solver work under the admission deadline; running out
    /// is a denial that says so.
    async fn with_deadline<F>(&self, kind: &str, work: F) -> Answer
    where
        F: FnOnce(Prover) -> Answer + Send + 'static,
    {
        let prover = self.prover.clone();
        let task = tokio::task::spawn_blocking(move || work(prover));
        match tokio::time::timeout(self.deadline, task).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => Answer::Deny(format!("{kind}: the proof failed ({e}); refused")),
            Err(_) => Answer::Deny(format!(
                "{kind}: the proof did not finish within the admission deadline of {} ms; refused (fail closed). Retry, or raise --admission-deadline-ms",
                self.deadline.as_millis()
            )),
        }
    }
}

fn typed<T: DeserializeOwned>(object: &DynamicObject, kind: &str) -> Result<T, String> {
    serde_json::to_value(object)
        .and_then(serde_json::from_value)
        .map_err(|e| format!("cannot read the {kind}: {e}"))
}

/// A request body, read whole (up to [`MAX_REVIEW_BYTES`]) and decoded by
/// [`read_review`], so that garbage gets an AdmissionReview that says why
/// instead of the framework's plain-text rejection.
type Review = Result<axum::body::Bytes, BytesRejection>;

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
async fn answer<T, F, Fut>(
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
    let base = AdmissionResponse::from(&request);
    let (uid, name, namespace, user, operation) = (
        request.uid.clone(),
        request.name.clone(),
        request.namespace.clone().unwrap_or_default(),
        request.user_info.username.clone().unwrap_or_default(),
        format!("{:?}", request.operation),
    );
    let synced = tokio::time::timeout(Duration::from_secs(2), state.synced())
        .await
        .unwrap_or(false);
    let answer = match decode::<T>(&request, type_name) {
        _ if !synced => Answer::Deny(format!(
            "{kind}: the agentgate webhook has not synced its caches yet; retry in a moment (fail closed)"
        )),
        Ok((None, None)) => Answer::allow(),
        Ok((new, old)) => decide(request, new, old).await,
        Err(e) => Answer::Deny(e),
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
fn object_name<K: ResourceExt>(new: Option<&K>, old: Option<&K>) -> String {
    new.or(old).map(|o| o.name_any()).unwrap_or_default()
}

/// Only the operator writes any status.
fn status_answer(
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

async fn validate_sandbox(
    State(state): State<Arc<WebhookState>>,
    review: Review,
) -> Json<AdmissionReview<DynamicObject>> {
    let s = state.clone();
    answer(&state, "agentsandboxes", "AgentSandbox", review, |request, new: Option<AgentSandbox>, old| async move {
        let name = object_name(new.as_ref(), old.as_ref());
        if request.sub_resource.as_deref() == Some("status") {
            return status_answer(&s, &request, "agentsandbox", &name);
        }
        let who = Requester::of(&request.user_info);
        let user = who.username;
        if !s.by_operator(&request) {
            let refusal = sandbox_writer_refusal(&who, old.as_ref(), new.as_ref(), &s.trusted_deployers)
                .or_else(|| {
                    // Nor the agent of any other sandbox.
                    let sandboxes = s.sandboxes.state();
                    let what = format!("agentsandbox {name:?}");
                    agent_writer_refusal(&who, &what, sandboxes.iter().map(|s| s.as_ref()))
                });
            if let Some(message) = refusal {
                return Answer::Deny(message);
            }
        }
        let Some(sandbox) = new else {
            return Answer::allow(); // a delete: the pod and every grant go with it
        };
        let namespace = request.namespace.clone().unwrap_or_default();
        let template_changed = old.as_ref().is_none_or(|o| {
            o.spec.template != sandbox.spec.template
                || o.spec.agent_service_account != sandbox.spec.agent_service_account
        });
        if template_changed {
            let escapes = template_escapes(&sandbox.spec);
            if !escapes.is_empty() {
                return Answer::Deny(format!(
                    "agentsandbox {name:?}: the pod template could step around the sandbox's enforcement: {}",
                    escapes.join("; ")
                ));
            }
            if sandbox.spec.template.is_some()
                && let Some(message) = s.template_author_refusal(&request, &sandbox).await
            {
                return Answer::Deny(message);
            }
        }
        if accepted_findings_changed(old.as_ref(), &sandbox) {
            match s.may_approve(&request, &namespace, "").await {
                Ok(true) => {}
                Ok(false) => {
                    return Answer::Deny(format!(
                        "agentsandbox {name:?}: changing spec.acceptedFindings (or the images they cover) accepts risk and needs the approve verb on policyproposals.agentgate.dev in namespace {namespace:?}, which {user:?} does not hold"
                    ));
                }
                Err(e) => return Answer::Deny(format!("agentsandbox {name:?}: {e}")),
            }
        }
        let ns_labels = match s.namespace_labels(&namespace).await {
            Ok(l) => l,
            Err(e) => return Answer::Deny(format!("agentsandbox {name:?}: {e}")),
        };
        let maximums = s.maximums.state();
        if let Some(old) = &old {
            let dropped = dropped_governance(
                maximums.iter().map(|m| m.as_ref()),
                (&ns_labels, old.labels()),
                (&ns_labels, sandbox.labels()),
            );
            if !dropped.is_empty() {
                match s.may_approve(&request, &namespace, "").await {
                    Ok(true) => {}
                    Ok(false) => {
                        return Answer::Deny(format!(
                            "agentsandbox {name:?}: the new labels take it out of MaximumPolicy {}; stepping out of a ceiling needs the approve verb on policyproposals.agentgate.dev in namespace {namespace:?}, which {user:?} does not hold",
                            dropped.join(", ")
                        ));
                    }
                    Err(e) => return Answer::Deny(format!("agentsandbox {name:?}: {e}")),
                }
            }
        }
        let allow_unmanaged = s.allow_unmanaged;
        let identities_changed = old.as_ref().is_none_or(|o| {
            o.spec.agent_service_account != sandbox.spec.agent_service_account
                || template_changed
        });
        // The agent-power reviews run while the solver proves the policy.
        let powers = async {
            if identities_changed {
                s.agent_power_warnings(&sandbox).await
            } else {
                Vec::new()
            }
        };
        let judged = sandbox.clone();
        let cached = s.clone();
        let proof = s.with_deadline("agentsandbox", move |prover| {
            let governance = governing_from(
                maximums.iter().map(|m| m.as_ref()),
                &ns_labels,
                judged.labels(),
                allow_unmanaged,
                &cached.compiled_maximums,
            );
            review_sandbox(&judged, &governance, &prover, allow_unmanaged)
        });
        let (powers, answer) = tokio::join!(powers, proof);
        match answer {
            Answer::Allow(mut warnings) => {
                warnings.extend(powers);
                Answer::Allow(warnings)
            }
            other => other,
        }
    })
    .await
}

async fn validate_proposal(
    State(state): State<Arc<WebhookState>>,
    review: Review,
) -> Json<AdmissionReview<DynamicObject>> {
    let s = state.clone();
    answer(&state, "policyproposals", "PolicyProposal", review, |request, new: Option<PolicyProposal>, old| async move {
        let Some(proposal) = new else {
            return Answer::allow();
        };
        if request.sub_resource.as_deref() == Some("status") && s.by_operator(&request) {
            return Answer::allow();
        }
        let user = request.user_info.username.clone().unwrap_or_default();
        match review_proposal(
            &request.operation,
            request.sub_resource.as_deref(),
            old.as_ref(),
            &proposal,
            &user,
        ) {
            ProposalCheck::Allow => Answer::allow(),
            ProposalCheck::Deny(message) => Answer::Deny(message),
            ProposalCheck::NeedsApprove => {
                let namespace = request.namespace.clone().unwrap_or_default();
                match s.may_approve(&request, &namespace, &proposal.name_any()).await {
                    Ok(true) => Answer::allow(),
                    Ok(false) => Answer::Deny(format!(
                        "policyproposal {:?}: {user:?} may not approve or deny it: that needs the approve verb on policyproposals.agentgate.dev in namespace {namespace:?}",
                        proposal.name_any()
                    )),
                    Err(e) => Answer::Deny(format!("policyproposal {:?}: {e}", proposal.name_any())),
                }
            }
        }
    })
    .await
}

async fn validate_maximum(
    State(state): State<Arc<WebhookState>>,
    review: Review,
) -> Json<AdmissionReview<DynamicObject>> {
    let s = state.clone();
    answer(
        &state,
        "maximumpolicies",
        "MaximumPolicy",
        review,
        |request, new: Option<MaximumPolicy>, old| async move {
            let name = object_name(new.as_ref(), old.as_ref());
            if request.sub_resource.as_deref() == Some("status") {
                return status_answer(&s, &request, "maximumpolicy", &name);
            }
            let who = Requester::of(&request.user_info);
            let sandboxes = s.sandboxes.state();
            let what = format!("maximumpolicy {name:?}");
            if let Some(message) =
                agent_writer_refusal(&who, &what, sandboxes.iter().map(|s| s.as_ref()))
            {
                return Answer::Deny(message);
            }
            let Some(maximum) = new else {
                return Answer::allow();
            };
            s.with_deadline("maximumpolicy", move |prover| {
                review_maximum(&maximum, &prover)
            })
            .await
        },
    )
    .await
}

async fn validate_scan(
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

/// A namespace label change must not take its sandboxes out of a ceiling
/// (a MaximumPolicy's `namespaceSelector`) unless the author holds
/// `approve` in that namespace.
async fn validate_namespace(
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

async fn validate_pod(
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
            let scan_for = |digest: &str| {
                s.scan_for(digest)
                    .map(|found| found.map(|(_, cached)| cached))
            };
            review_pod(
                &pod,
                old.as_ref(),
                &labels,
                sandbox.as_deref(),
                &s.data_plane,
                &scan_for,
                Timestamp::now(),
            )
            .answer()
        },
    )
    .await
}

/// `POST /v1/decide`: 401 without a token the API server accepts, 403 for
/// a caller that is neither the sandbox's agent nor allowed to `get` it,
/// 400 for a body that is not a request, else the decision.
async fn decide_endpoint(
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
                Json(DecideResponse::deny(format!(
                    "cannot read the request: {}",
                    e.body_text()
                ))),
            )
                .into_response();
        }
    };
    let request: DecideRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            count("bad_request");
            return (
                StatusCode::BAD_REQUEST,
                Json(DecideResponse::deny(format!(
                    "cannot read the request: {e}"
                ))),
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
    let status = match refusal {
        CallerRefusal::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
        CallerRefusal::Forbidden(_) => StatusCode::FORBIDDEN,
        CallerRefusal::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    let body = Json(DecideResponse::deny(refusal.to_string()));
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

impl WebhookState {
    /// Who sent the bearer token, by a TokenReview (cached by the token's
    /// hash for [`AUTHENTICATED_TTL`], refusals for [`REFUSED_TTL`]).
    async fn authenticate(&self, headers: &HeaderMap) -> Result<UserInfo, CallerRefusal> {
        let token = bearer_token(headers)?;
        let key = token_key(token);
        if let Some(known) = self.tokens.get(&key, Instant::now()) {
            return known.map_err(CallerRefusal::Unauthenticated);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| CallerRefusal::Unavailable(format!("cannot review the token: {e}")))?;
        let status = answer.status.unwrap_or_default();
        let outcome = match (status.authenticated, status.user) {
            (Some(true), Some(user)) if user.username.as_deref().is_some_and(|u| !u.is_empty()) => {
                Ok(user)
            }
            _ => Err(format!(
                "the token is not valid: {}",
                status
                    .error
                    .filter(|e| !e.is_empty())
                    .unwrap_or_else(|| "the API server did not authenticate it".into())
            )),
        };
        let ttl = if outcome.is_ok() {
            AUTHENTICATED_TTL
        } else {
            REFUSED_TTL
        };
        self.tokens
            .insert(key, outcome.clone(), ttl, Instant::now());
        outcome.map_err(CallerRefusal::Unauthenticated)
    }

    /// Whether `user` may ask about the request's sandbox: its own agent,
    /// or a subject that may `get` the AgentSandbox (a SubjectAccessReview,
    /// cached for [`ALLOWED_TTL`] / [`DENIED_TTL`]).
    async fn may_ask(&self, user: &UserInfo, request: &DecideRequest) -> Result<(), CallerRefusal> {
        let key = ObjectRef::new(&request.sandbox).within(&request.namespace);
        if let Some(sandbox) = self.sandboxes.get(&key)
            && is_agent(user, agent_identities(&sandbox).iter())
        {
            return Ok(());
        }
        let cache_key = access_key(user, &request.namespace, &request.sandbox);
        let allowed = match self.sandbox_readers.get(&cache_key, Instant::now()) {
            Some(allowed) => allowed,
            None => {
                let allowed = self
                    .may(user, read_sandbox(&request.namespace, &request.sandbox))
                    .await
                    .map_err(CallerRefusal::Unavailable)?;
                let ttl = if allowed { ALLOWED_TTL } else { DENIED_TTL };
                self.sandbox_readers
                    .insert(cache_key, allowed, ttl, Instant::now());
                allowed
            }
        };
        if allowed {
            Ok(())
        } else {
            Err(CallerRefusal::Forbidden(format!(
                "{:?} is not the agent of agentsandbox {}/{} and may not get it",
                user.username.as_deref().unwrap_or_default(),
                request.namespace,
                request.sandbox
            )))
        }
    }
}

fn decide_for(state: &WebhookState, request: &DecideRequest) -> DecideResponse {
    let key = ObjectRef::new(&request.sandbox).within(&request.namespace);
    let Some(sandbox) = state.sandboxes.get(&key) else {
        return DecideResponse::deny(format!(
            "no AgentSandbox {}/{}",
            request.namespace, request.sandbox
        ));
    };
    let Some(status) = &sandbox.status else {
        return DecideResponse::deny("the sandbox has no committed policy yet");
    };
    let Some(policy) = &status.effective_policy else {
        return DecideResponse::deny("the sandbox has no committed policy yet");
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
        Err(reason) => DecideResponse::deny(reason),
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
        let (scan, cached) = state.scan_for(image_digest(&image.image)?).ok()??;
        let findings = cached.findings.as_ref().as_ref().ok()?;
        let accepted = &sandbox.spec.accepted_findings;
        let unfixed = open_findings(findings, Some(image), &cached, accepted, now);
        cite_finding(request, &unfixed, &scan.spec.graph)
    })
}

/// Findings of one scan, or why its graph cannot be analysed.
type SharedFindings = Arc<Result<Vec<Finding>, String>>;

/// Findings recomputed from each cached AgentScan's graph, by uid and
/// generation: the scanner's own list is never trusted, and a graph is
/// analysed once per generation, not once per admission.
#[derive(Default)]
struct ScanAnalyses {
    by_uid: std::sync::Mutex<HashMap<String, (Option<i64>, SharedFindings)>>,
}

impl ScanAnalyses {
    /// The findings of `scan`, analysing it when its generation is new;
    /// entries of scans no longer in `all` are dropped then. The analysis
    /// runs outside the lock (bounded by the AgentScan size limits).
    fn get(&self, scan: &AgentScan, all: &[Arc<AgentScan>]) -> CachedScan {
        let uid = scan.uid().unwrap_or_default();
        let generation = scan.metadata.generation;
        let cached = self
            .by_uid
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&uid)
            .filter(|(g, _)| *g == generation)
            .map(|(_, findings)| findings.clone());
        let findings = match cached {
            Some(findings) => findings,
            None => {
                let findings = Arc::new(analyze(&scan.spec.graph).map_err(|e| e.to_string()));
                let mut by_uid = self.by_uid.lock().unwrap_or_else(|e| e.into_inner());
                let live: std::collections::HashSet<String> =
                    all.iter().filter_map(|s| s.uid()).collect();
                by_uid.retain(|uid, _| live.contains(uid));
                by_uid.insert(uid.clone(), (generation, findings.clone()));
                findings
            }
        };
        CachedScan {
            name: scan.name_any(),
            uid,
            generation,
            findings,
        }
    }
}

async fn readyz(State(state): State<Arc<WebhookState>>) -> impl IntoResponse {
    let ready = tokio::time::timeout(Duration::from_millis(200), state.ready())
        .await
        .unwrap_or(false);
    if ready {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

/// This process's user name as the API server sees it (SelfSubjectReview).
/// `None` when it cannot be learnt (yet): until it is, no pod borrows a
/// sandbox's proofs or acceptances and nobody writes status (fail closed).
async fn whoami(client: &Client) -> Option<String> {
    let review = SelfSubjectReview::default();
    match Api::<SelfSubjectReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
    {
        Ok(answer) => {
            let user = answer
                .status
                .and_then(|s| s.user_info)
                .and_then(|u| u.username);
            tracing::info!(user = ?user, "webhook: the operator's identity, trusted for sandbox pods");
            user
        }
        Err(e) => {
            tracing::warn!(error = %e, "webhook: cannot learn the operator's identity; sandbox pods borrow no proofs");
            None
        }
    }
}

/// The routes of the webhook server.
pub fn router(state: Arc<WebhookState>) -> Router {
    Router::new()
        .route("/validate/agentsandboxes", post(validate_sandbox))
        .route("/validate/policyproposals", post(validate_proposal))
        .route("/validate/maximumpolicies", post(validate_maximum))
        .route("/validate/agentscans", post(validate_scan))
        .route("/validate/pods", post(validate_pod))
        .route("/validate/namespaces", post(validate_namespace))
        .route("/v1/decide", post(decide_endpoint))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .layer(DefaultBodyLimit::max(MAX_REVIEW_BYTES))
        .with_state(state)
}

/// Serves the webhook on `args.webhook_bind_address` until the process
/// ends: starts the caches and the certificate source, binds, and accepts
/// TLS connections (the certificate is chosen per handshake).
pub async fn run(
    args: WebhookArgs,
    address: std::net::SocketAddr,
    client: Client,
    prover: Prover,
    metrics: Arc<Metrics>,
    allow_unmanaged: bool,
) -> Result<(), WebhookError> {
    let resolver = Arc::new(CertResolver::new());
    let check = Duration::from_millis(args.cert_check_interval_ms.max(50));
    match args.cert_mode {
        CertMode::SelfManaged => {
            let manager = SelfManaged {
                namespace: args.secret_namespace(),
                secret: args.tls_secret_name.clone(),
                webhook_config: (!args.webhook_config_name.is_empty())
                    .then(|| args.webhook_config_name.clone()),
                names: args.cert_names(),
                lifetimes: Lifetimes {
                    ca: Duration::from_secs(args.ca_validity_seconds.max(60)),
                    leaf: Duration::from_secs(args.cert_validity_seconds.max(3)),
                },
            };
            tokio::spawn(manager.run(client.clone(), resolver.clone(), metrics.clone(), check));
        }
        CertMode::CertManager => {
            tokio::spawn(watch_directory(
                args.cert_dir.clone(),
                resolver.clone(),
                metrics.clone(),
                check,
            ));
        }
    }
    let caches = Caches::watch(&client);
    let state = Arc::new(WebhookState::new(
        &args,
        client,
        prover,
        metrics,
        allow_unmanaged,
        caches,
        resolver.clone(),
    ));

    match args.operator_user.clone() {
        Some(_) => {}
        None => {
            // Learnt from the API server, retried until known; the webhook
            // is not ready (and nobody writes status) until then.
            let (state, client) = (state.clone(), state.client.clone());
            tokio::spawn(async move {
                loop {
                    if let Some(user) = whoami(&client).await {
                        let _ = state.operator_user.set(user);
                        return;
                    }
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
            });
        }
    }

    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind(address)
        .await
        .map_err(|source| WebhookError::Bind { address, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| WebhookError::Bind { address, source })?;
    tracing::info!(address = %bound, "webhook listening (HTTPS)");
    state.listening.store(true, Ordering::Release);
    let app = router(state);
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let tls = match acceptor.accept(stream).await {
                Ok(tls) => tls,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
            };
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}
