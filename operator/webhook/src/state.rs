//! What every handler shares: the cluster caches the webhook reads on
//! each request, the per-object memos (compiled policies and maximums,
//! scan analyses, review answers), the flags that shape decisions, and the
//! admission deadline under which solver work runs.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::Api;
use kube::core::admission::AdmissionRequest;
use kube::core::{DynamicObject, PartialObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

use crate::WebhookArgs;
use crate::caller::{AccessKey, ReviewCache};
use crate::certs::CertResolver;
use crate::decide::CompiledPolicies;
use crate::wakeups::SandboxWakeups;
use agentgate_api::crd::{AgentSandbox, AgentScan, MaximumPolicy, SANDBOX_LABEL, ToolLabel};
use agentgate_governance::admission::Answer;
use agentgate_governance::authority::{Requester, agent_writer_refusal};
use agentgate_governance::findings::{sandbox_graph, scan_of_digest};
use agentgate_governance::governing::CompiledMaximums;
use agentgate_governance::pod_admission::CachedScan;
use agentgate_governance::sandbox_pod::{DataPlane, policy_config_map_sandbox};
use agentgate_k8s::k8s::cache::{reflect, reflect_touching, reflect_with, until_ready};
use agentgate_k8s::metrics::Metrics;
use agentgate_prover::Prover;
use agentgate_trifecta::{Finding, analyze};

/// Everything the handlers share.
pub struct WebhookState {
    pub(super) client: Client,
    /// Its per-check timeout is capped by the admission deadline.
    pub(super) prover: Prover,
    pub(super) metrics: Arc<Metrics>,
    pub(super) allow_unmanaged: bool,
    pub(super) deadline: Duration,
    pub(super) maximums: Store<MaximumPolicy>,
    pub(super) namespaces: Store<Namespace>,
    pub(super) sandboxes: Store<AgentSandbox>,
    pub(super) scans: Store<AgentScan>,
    /// Every sandbox's policy ConfigMap (`agentgate.dev/sandbox`-labelled).
    pub(super) policy_maps: Store<ConfigMap>,
    /// The metadata of every `agentgate.dev/sandbox`-labelled Pod: a
    /// proxy's report is checked against it before any read.
    pub(super) sandbox_pods: Store<PartialObjectMeta<Pod>>,
    /// Wakes a sandbox's policy streams after every change to it or to its
    /// policy ConfigMap in the caches above: they look again.
    pub(super) stream_wakeups: SandboxWakeups,
    pub(super) analyses: ScanAnalyses,
    /// The operator's own user name (from a SelfSubjectReview at start):
    /// only its pods borrow their sandbox's proofs and acceptances.
    pub(super) operator_user: std::sync::OnceLock<String>,
    pub(super) policies: CompiledPolicies,
    /// TokenReview answers for `/v1/decide` callers, by token hash.
    pub(super) tokens: ReviewCache<[u8; 32], Result<UserInfo, String>>,
    /// SubjectAccessReview answers (`get` on an AgentSandbox) for them.
    pub(super) sandbox_readers: ReviewCache<AccessKey, bool>,
    /// Compiled maximums by uid and generation: an admission compiles only
    /// a maximum it has not seen at this generation.
    pub(super) compiled_maximums: CompiledMaximums,
    /// `--trusted-deployer`: ServiceAccounts that may write sandboxes of
    /// their own namespace.
    pub(super) trusted_deployers: Vec<String>,
    /// `--proxy-image`: the only data plane trusted in a sandbox's pod.
    pub(super) data_plane: DataPlane,
    /// `--scan-writer`: who may write AgentScans.
    pub(super) scan_writers: Vec<String>,
    pub(super) listening: AtomicBool,
    pub(super) resolver: Arc<CertResolver>,
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
    /// Every sandbox's policy ConfigMap.
    pub policy_maps: Store<ConfigMap>,
    /// The metadata of every sandbox Pod.
    pub sandbox_pods: Store<PartialObjectMeta<Pod>>,
    /// Wakes a sandbox's policy streams after every change to it or to its
    /// policy ConfigMap in these caches.
    pub stream_wakeups: SandboxWakeups,
}

impl Caches {
    /// Reflectors of the six kinds, each driven by a task.
    pub fn watch(client: &Client) -> Caches {
        let stream_wakeups = SandboxWakeups::default();
        let wakeups = stream_wakeups.clone();
        let sandboxes = reflect_touching(
            Api::all(client.clone()),
            watcher::Config::default(),
            move |sandbox: &AgentSandbox| {
                wakeups.wake(
                    &sandbox.namespace().unwrap_or_default(),
                    &sandbox.name_any(),
                );
            },
        );
        let wakeups = stream_wakeups.clone();
        let policy_maps = reflect_touching(
            Api::all(client.clone()),
            watcher::Config::default().labels(SANDBOX_LABEL),
            move |config_map: &ConfigMap| {
                // The streams read a sandbox's ConfigMap by its name.
                if let Some(sandbox) = policy_config_map_sandbox(&config_map.name_any()) {
                    wakeups.wake(&config_map.namespace().unwrap_or_default(), sandbox);
                }
            },
        );
        Caches {
            maximums: reflect(Api::all(client.clone())),
            namespaces: reflect(Api::all(client.clone())),
            sandboxes,
            scans: reflect(Api::all(client.clone())),
            policy_maps,
            sandbox_pods: reflect_with(
                Api::all(client.clone()),
                watcher::Config::default().labels(SANDBOX_LABEL),
            ),
            stream_wakeups,
        }
    }
}

impl WebhookState {
    /// Why `who` may not write `what` as the agent of some sandbox
    /// ([`agent_writer_refusal`]). The cache answers first; a ServiceAccount
    /// it does not show as an agent is checked again against a fresh list of
    /// its namespace's sandboxes, since a sandbox created moments ago may not
    /// be in the cache yet, and a stale cache must not let its agent write
    /// a ceiling. A failed read refuses (fail closed).
    pub(super) async fn agent_refusal(&self, who: &Requester<'_>, what: &str) -> Option<String> {
        let cached = self.sandboxes.state();
        if let Some(refusal) = agent_writer_refusal(who, what, cached.iter().map(|s| s.as_ref())) {
            return Some(refusal);
        }
        let (namespace, _) = who.service_account()?;
        match Api::<AgentSandbox>::namespaced(self.client.clone(), namespace)
            .list(&kube::api::ListParams::default())
            .await
        {
            Ok(fresh) => agent_writer_refusal(who, what, fresh.items.iter()),
            Err(e) => Some(format!(
                "{what}: cannot confirm that {:?} is no sandbox's agent ({e}); retry",
                who.username
            )),
        }
    }

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
            policy_maps: caches.policy_maps,
            sandbox_pods: caches.sandbox_pods,
            stream_wakeups: caches.stream_wakeups,
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

    pub(super) async fn ready(&self) -> bool {
        self.listening.load(Ordering::Acquire)
            && self.resolver.is_loaded()
            && self.operator_user.get().is_some()
            && self.synced().await
    }

    /// Whether every cache has listed once. Until then an empty cache would
    /// read as "no sandbox, no agent, no ceiling" and let writes through.
    pub(super) async fn synced(&self) -> bool {
        until_ready(&self.maximums).await
            && until_ready(&self.namespaces).await
            && until_ready(&self.sandboxes).await
            && until_ready(&self.scans).await
    }

    /// The AgentScan for an image digest in the cache, with its findings
    /// recomputed from the graph; an error when several scans claim the
    /// digest.
    /// `labels` are the sandbox's tool labels (empty for a pod that
    /// borrows no sandbox's records).
    pub(super) fn scan_for(
        &self,
        digest: &str,
        labels: &[ToolLabel],
    ) -> Result<Option<(Arc<AgentScan>, CachedScan)>, String> {
        self.scan_in(&self.scans.state(), digest, labels)
    }

    /// [`Self::scan_for`] over a given set of scans.
    pub(super) fn scan_in(
        &self,
        all: &[Arc<AgentScan>],
        digest: &str,
        labels: &[ToolLabel],
    ) -> Result<Option<(Arc<AgentScan>, CachedScan)>, String> {
        let Some(scan) = scan_of_digest(all, digest)? else {
            return Ok(None);
        };
        let cached = self.analyses.get(scan, all, labels);
        Ok(Some((scan.clone(), cached)))
    }

    /// Every AgentScan, read from the API server rather than the cache:
    /// CI applies an AgentScan and deploys a moment later, and the
    /// webhook's watch may not have delivered it yet. `None` (logged) when
    /// the list fails, so the caller keeps what the cache said.
    pub(super) async fn live_scans(&self) -> Option<Vec<Arc<AgentScan>>> {
        match Api::<AgentScan>::all(self.client.clone())
            .list(&Default::default())
            .await
        {
            Ok(list) => Some(list.items.into_iter().map(Arc::new).collect()),
            Err(e) => {
                tracing::warn!(error = %e, "cannot list AgentScans; judging by the cache");
                None
            }
        }
    }

    pub(super) async fn namespace_labels(
        &self,
        namespace: &str,
    ) -> Result<BTreeMap<String, String>, String> {
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

    /// Whether the request comes from the operator itself.
    pub(super) fn by_operator(&self, request: &AdmissionRequest<DynamicObject>) -> bool {
        self.operator_user
            .get()
            .is_some_and(|me| request.user_info.username.as_deref() == Some(me.as_str()))
    }

    /// Runs blocking solver work under the admission deadline; running out
    /// is a denial that says so.
    pub(super) async fn with_deadline<F>(&self, kind: &str, work: F) -> Answer
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

/// Findings of one scan, or why its graph cannot be analysed.
pub(super) type SharedFindings = Arc<Result<Vec<Finding>, String>>;

/// Findings recomputed from each cached AgentScan's graph, by uid and
/// generation: the scanner's own list is never trusted, and a graph is
/// analysed once per generation, not once per admission.
#[derive(Default)]
pub(super) struct ScanAnalyses {
    /// By scan uid and the tool labels analysed with (as JSON; most
    /// sandboxes have none, so most scans have one entry).
    by_uid: std::sync::Mutex<HashMap<AnalysisKey, (Option<i64>, SharedFindings)>>,
}

/// A scan's uid and the tool labels (as JSON) it was analysed with.
type AnalysisKey = (String, String);

/// The most label sets analysed per scan that are kept; past it the
/// scan's entries are dropped and analysed again when asked.
const MAX_LABEL_SETS: usize = 64;

impl ScanAnalyses {
    /// The findings of `scan` with a sandbox's tool `labels`, analysing it
    /// when its generation (or the labels) are new; entries of scans no
    /// longer in `all` are dropped then. The analysis runs outside the
    /// lock (bounded by the AgentScan size limits).
    pub(super) fn get(
        &self,
        scan: &AgentScan,
        all: &[Arc<AgentScan>],
        labels: &[ToolLabel],
    ) -> CachedScan {
        let uid = scan.uid().unwrap_or_default();
        let key = (
            uid.clone(),
            serde_json::to_string(labels).unwrap_or_default(),
        );
        let generation = scan.metadata.generation;
        let cached = self
            .by_uid
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .filter(|(g, _)| *g == generation)
            .map(|(_, findings)| findings.clone());
        let findings = match cached {
            Some(findings) => findings,
            None => {
                let graph = sandbox_graph(&scan.spec.graph, labels);
                let findings = Arc::new(analyze(&graph).map_err(|e| e.to_string()));
                let mut by_uid = self.by_uid.lock().unwrap_or_else(|e| e.into_inner());
                let live: std::collections::HashSet<String> =
                    all.iter().filter_map(|s| s.uid()).collect();
                by_uid.retain(|(uid, _), _| live.contains(uid));
                if by_uid.keys().filter(|(u, _)| *u == uid).count() >= MAX_LABEL_SETS {
                    by_uid.retain(|(u, _), _| *u != uid);
                }
                by_uid.insert(key, (generation, findings.clone()));
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
