#![warn(missing_docs)]
//! The operator's reconcilers: thin shells around the pure core (policy,
//! prover, verdict) that read and write the API server. Solver work runs on
//! blocking threads; no Z3 value crosses an `.await`.

pub mod agent_account;
pub mod approvals;
pub mod event_queue;
pub mod leader_fence;
pub mod maximum;
mod owned;
pub mod proposal;
pub mod revoke;
pub mod runtime_events;
pub mod sandbox;
pub mod sandbox_ca;
pub mod scan;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::future::Future;

use agentgate_k8s::FIELD_MANAGER;
use agentgate_k8s::metrics;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::Reporter;
use kube::{Client, Resource, ResourceExt};

use agentgate_governance::governing::CompiledMaximums;
use agentgate_governance::sandbox_pod::DataPlane;
use agentgate_governance::selector::SelectorError;
use agentgate_prover::Prover;

/// Why a reconcile failed (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// A request to the API server failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A prover task panicked or was cancelled.
    #[error("prover task failed: {0}")]
    Prover(String),
    /// A label selector cannot be evaluated.
    #[error("selector {0}")]
    Selector(#[from] SelectorError),
    /// A status could not be serialised.
    #[error("serialising status: {0}")]
    Serialize(#[from] serde_json::Error),
    /// An object the reconciler would write belongs to someone else.
    #[error("{0}")]
    Conflict(String),
    /// Certificate material could not be made or read.
    #[error("{0}")]
    Pki(#[from] agentgate_k8s::pki::PkiError),
    /// The leader fence refused a write: this replica does not (or no
    /// longer provably) hold the Lease.
    #[error("{0}")]
    Fenced(String),
}

/// Shared state of the reconcilers.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// The prover (its answer cache is shared by all reconciles).
    pub prover: Prover,
    /// Publishes Events, one task in the order they are told
    /// ([`event_queue`]).
    pub events: event_queue::EventQueue,
    /// Whether sandboxes no MaximumPolicy governs may hold any grant.
    pub allow_unmanaged: bool,
    /// Prometheus metrics.
    pub metrics: Arc<metrics::Metrics>,
    /// Namespaces whose sandboxes and proposals are not reconciled (the
    /// webhook does not see them: kube-system and the release namespace).
    pub ignored_namespaces: BTreeSet<String>,
    /// The data-plane image the sandbox Pods run (`--proxy-image`).
    pub data_plane: DataPlane,
    /// How long each sandbox CA is valid.
    pub ca_lifetime: Duration,
    /// Compiled MaximumPolicies by uid and generation, shared by every
    /// reconcile (a storm after a tightened maximum compiles it once).
    pub maximums: CompiledMaximums,
    /// Revocations by content, shared by every sandbox reconcile (a storm
    /// proves each distinct effective policy once).
    pub revocations: Arc<agentgate_governance::reverify::Revocations>,
    /// Solver work running at once ([`Context::solve`]).
    solver_slots: tokio::sync::Semaphore,
    /// How many objects of one kind are reconciled at once
    /// (`--concurrent-reconciles`, [`CONCURRENCY`] by default).
    concurrency: u16,
    /// The leader fence (with leader election only): checked before every
    /// write that grants authority.
    fence: Option<leader_fence::LeaseFence>,
    /// What this process last server-side applied to each object it owns
    /// outright, to skip applying the same content again.
    pub applied: AppliedObjects,
    /// The sandbox statuses this process wrote, by resourceVersion: the
    /// watch event each write causes starts no second reconcile.
    pub status_writes: OwnWrites,
    /// Watch-fed views the sandbox reconciler reads where a stale answer
    /// cannot widen a grant (set once, when the sandbox controller starts).
    pub views: std::sync::OnceLock<Views>,
    /// Consecutive failures per object, for exponential backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// Where sandbox proxies put held calls (`--approvals-url`), if
    /// anywhere.
    pub approvals: Option<approvals::ApprovalsWiring>,
}

/// Owned objects by API path: the hash of the content last applied (or,
/// for a sandbox's Pod, of what its shape was last checked against) and the
/// resourceVersion the API server answered with.
#[derive(Default)]
pub struct AppliedObjects {
    by_path: Mutex<HashMap<String, ([u8; 32], String)>>,
    /// This process's applies sent and not yet answered.
    in_flight: InFlight,
}

/// Writes sent and not yet answered, by key, with the resourceVersions the
/// watch showed meanwhile. The watch event of a write can arrive before
/// its answer, when the write's resourceVersion is not known yet: it is
/// held back rather than taken for someone else's change (which started a
/// second reconcile after every write on a loaded API server), and once
/// the answer is in, a version other than the write's (someone else's
/// write in between) says the object must be looked at again.
#[derive(Default)]
struct InFlight {
    by_key: Mutex<HashMap<String, Vec<String>>>,
}

/// Whether a write was the only one its object saw while it was in flight.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raced {
    /// Only this write: its watch event is its echo.
    No,
    /// The watch showed another version meanwhile, whose trigger was held
    /// back: reconcile the owner again.
    Yes,
}

impl Raced {
    fn when(raced: bool) -> Raced {
        if raced { Raced::Yes } else { Raced::No }
    }

    /// Raced when either write did.
    pub fn or(self, other: Raced) -> Raced {
        Raced::when(self == Raced::Yes || other == Raced::Yes)
    }
}

impl InFlight {
    fn begin(&self, key: &str) {
        let mut map = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        map.insert(key.to_string(), Vec::new());
    }

    /// Holds back `resource_version` of `key` when a write of it is in
    /// flight; whether it did.
    fn hold(&self, key: &str, resource_version: &str) -> bool {
        let mut map = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        match map.get_mut(key) {
            Some(seen) => {
                seen.push(resource_version.to_string());
                true
            }
            None => false,
        }
    }

    /// Ends the write of `key`: the versions held back while it was in
    /// flight.
    fn end(&self, key: &str) -> Vec<String> {
        let mut map = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(key).unwrap_or_default()
    }
}

/// Entries kept before the map starts over (far more than the objects of
/// a cluster's sandboxes; a restart forgets it all anyway).
const APPLIED_OBJECTS: usize = 100_000;

impl AppliedObjects {
    /// The resourceVersion of the last apply of `key`, when it applied
    /// `content`.
    pub fn unchanged(&self, key: &str, content: &[u8; 32]) -> Option<String> {
        let map = self.by_path.lock().unwrap_or_else(|e| e.into_inner());
        map.get(key)
            .filter(|(hash, _)| hash == content)
            .map(|(_, resource_version)| resource_version.clone())
    }

    /// Records that `key` now holds `content` at `resource_version`.
    pub fn remember(&self, key: String, content: [u8; 32], resource_version: String) {
        let mut map = self.by_path.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= APPLIED_OBJECTS {
            map.clear();
        }
        map.insert(key, (content, resource_version));
    }

    /// An apply of `key` is about to be sent ([`InFlight`]).
    pub fn begin(&self, key: &str) {
        self.in_flight.begin(key);
    }

    /// The apply of `key` was answered: `key` now holds `content` at
    /// `resource_version`; whether the watch showed another version while
    /// it was in flight (not this write's, nor the one this process wrote
    /// before it).
    pub fn finish(&self, key: String, content: [u8; 32], resource_version: String) -> Raced {
        let held = self.in_flight.end(&key);
        let before = {
            let map = self.by_path.lock().unwrap_or_else(|e| e.into_inner());
            map.get(&key).map(|(_, rv)| rv.clone())
        };
        let raced = held
            .iter()
            .any(|v| *v != resource_version && Some(v) != before.as_ref());
        self.remember(key, content, resource_version);
        Raced::when(raced)
    }

    /// The apply of `key` ended without a version to tell its echo by (it
    /// failed, or was answered without one): nothing is held back any
    /// longer; [`Raced::Yes`] when something was, for the caller to look
    /// again (a failed reconcile is retried anyway).
    pub fn abandon(&self, key: &str) -> Raced {
        Raced::when(!self.in_flight.end(key).is_empty())
    }
}

impl AppliedObjects {
    /// Whether `key` at `resource_version` is what this process's last
    /// apply of it answered (the watch event of its own write), or is held
    /// back while an apply of it is in flight ([`AppliedObjects::finish`]
    /// then tells whether it was someone else's).
    pub fn is_own(&self, key: &str, resource_version: &str) -> bool {
        if self.in_flight.hold(key, resource_version) {
            return true;
        }
        let map = self.by_path.lock().unwrap_or_else(|e| e.into_inner());
        map.get(key).is_some_and(|(_, rv)| rv == resource_version)
    }
}

/// The key [`AppliedObjects`] keeps an object of kind `K` under: its API
/// path.
pub fn applied_key<K>(namespace: Option<&str>, name: &str) -> String
where
    K: Resource<DynamicType = ()>,
{
    format!("{}/{name}", K::url_path(&(), namespace))
}

/// The resourceVersions of this process's own writes, by object: a watch
/// event showing an object at one of them is the echo of that write.
#[derive(Default)]
pub struct OwnWrites {
    by_key: Mutex<HashMap<String, String>>,
    /// This process's writes sent and not yet answered.
    in_flight: InFlight,
}

impl OwnWrites {
    /// Records that this process wrote `key`, which is now at
    /// `resource_version`.
    pub fn remember(&self, key: String, resource_version: String) {
        let mut map = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= APPLIED_OBJECTS {
            map.clear();
        }
        map.insert(key, resource_version);
    }

    /// A write of `key` is about to be sent ([`InFlight`]).
    pub fn begin(&self, key: &str) {
        self.in_flight.begin(key);
    }

    /// The write of `key` was answered at `resource_version`; whether the
    /// watch showed another version while it was in flight. The echo held
    /// back meanwhile is not expected again.
    pub fn finish(&self, key: String, resource_version: String) -> Raced {
        let held = self.in_flight.end(&key);
        let raced = held.iter().any(|v| *v != resource_version);
        if !held.contains(&resource_version) {
            self.remember(key, resource_version);
        }
        Raced::when(raced)
    }

    /// The write of `key` ended without a version to tell its echo by:
    /// nothing is held back any longer; [`Raced::Yes`] when something was.
    pub fn abandon(&self, key: &str) -> Raced {
        Raced::when(!self.in_flight.end(key).is_empty())
    }

    /// Whether `key` at `resource_version` is this process's last write of
    /// it (then forgotten: the echo comes once), or is held back while a
    /// write of it is in flight ([`OwnWrites::finish`] then tells whether
    /// it was someone else's).
    pub fn echo(&self, key: &str, resource_version: &str) -> bool {
        if self.in_flight.hold(key, resource_version) {
            return true;
        }
        let mut map = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        if map.get(key).is_some_and(|rv| rv == resource_version) {
            map.remove(key);
            return true;
        }
        false
    }
}

/// Watch-fed views of what the sandbox reconciler reads on every pass.
/// Each store is written by the same watch that triggers the reconciles
/// its changes call for ([`agentgate_k8s::k8s::cache::reflect_triggers`]), so a
/// reconcile never starts on a view older than its cause. Reads that could
/// widen a grant still go to the API server (docs/design.md §5).
pub struct Views {
    /// Every MaximumPolicy.
    pub maximums: kube::runtime::reflector::Store<agentgate_api::crd::MaximumPolicy>,
    /// Every Namespace's metadata (its labels select maximums).
    pub namespaces: kube::runtime::reflector::Store<
        kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Namespace>,
    >,
    /// The agent ServiceAccounts the operator created (labelled), metadata
    /// only.
    pub accounts: kube::runtime::reflector::Store<
        kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::ServiceAccount>,
    >,
    /// The policy ConfigMaps (labelled), metadata only.
    pub config_maps: kube::runtime::reflector::Store<
        kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::ConfigMap>,
    >,
    /// The egress NetworkPolicies (labelled), metadata only.
    pub network_policies: kube::runtime::reflector::Store<
        kube::core::PartialObjectMeta<k8s_openapi::api::networking::v1::NetworkPolicy>,
    >,
    /// Every PolicyProposal: a commit record whose proposal shows here
    /// unchanged (uid and change hash) keeps its grant without a read.
    pub proposals: kube::runtime::reflector::Store<agentgate_api::crd::PolicyProposal>,
    /// Every AgentScan: a sandbox's findings are assessed against the scans
    /// of its images shown here (a scan's change starts the reconcile of
    /// every sandbox running its digest once this store shows it).
    pub scans: kube::runtime::reflector::Store<agentgate_api::crd::AgentScan>,
    /// The sandbox Pods (labelled), metadata only: a Pod whose shape was
    /// checked at the version shown here is not read again.
    pub pods: kube::runtime::reflector::Store<
        kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Pod>,
    >,
}

/// SHA-256 of a JSON value's text.
pub fn content_hash(value: &serde_json::Value) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(value.to_string().as_bytes()).into()
}

impl Context {
    /// A context for `client`, reporting Events as `agentgate`, without a
    /// leader fence (see [`Context::with_fence`]).
    pub fn new(
        client: Client,
        prover: Prover,
        allow_unmanaged: bool,
        metrics: Arc<metrics::Metrics>,
        ignored_namespaces: BTreeSet<String>,
        data_plane: DataPlane,
        ca_lifetime: Duration,
    ) -> Context {
        let reporter = Reporter {
            controller: "agentgate".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Context {
            events: event_queue::EventQueue::new(client.clone(), reporter),
            client,
            prover,
            allow_unmanaged,
            metrics,
            ignored_namespaces,
            data_plane,
            ca_lifetime,
            maximums: CompiledMaximums::default(),
            revocations: Arc::default(),
            solver_slots: tokio::sync::Semaphore::new(
                std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
            ),
            concurrency: CONCURRENCY,
            applied: AppliedObjects::default(),
            status_writes: OwnWrites::default(),
            views: std::sync::OnceLock::new(),
            fence: None,
            failures: Mutex::new(HashMap::new()),
            approvals: None,
        }
    }

    /// This context with sandbox Pods wired to the approval service.
    pub fn with_approvals(mut self, approvals: Option<approvals::ApprovalsWiring>) -> Context {
        self.approvals = approvals;
        self
    }

    /// This context with the leader fence `fence`.
    pub fn with_fence(self, fence: leader_fence::LeaseFence) -> Context {
        Context {
            fence: Some(fence),
            ..self
        }
    }

    /// This context reconciling `concurrency` objects of a kind at once
    /// (at least one).
    pub fn with_concurrency(self, concurrency: u16) -> Context {
        Context {
            concurrency: concurrency.max(1),
            ..self
        }
    }

    /// The leader fence, when there is one.
    pub fn lease_fence(&self) -> Option<&leader_fence::LeaseFence> {
        self.fence.as_ref()
    }

    /// Immediately before a write that grants authority (`what`): `Ok`
    /// while this replica provably holds the Lease, or when it runs
    /// without leader election (see [`fence`]).
    pub async fn fence(&self, what: &str) -> Result<(), ControllerError> {
        match &self.fence {
            Some(fence) => fence.check(what).await,
            None => Ok(()),
        }
    }

    /// Runs solver or analysis `work` on a blocking thread, at most one per
    /// core at once. Reconciles run 16 at a time because they mostly wait
    /// for the API server; their proofs need the cores, and each holds its
    /// automata and Z3's memory while it runs, so more at once than cores
    /// only raises a storm's peak memory.
    pub async fn solve<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ControllerError> {
        let _slot = self
            .solver_slots
            .acquire()
            .await
            .map_err(|e| ControllerError::Prover(e.to_string()))?;
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| ControllerError::Prover(e.to_string()))
    }

    /// Whether objects in `namespace` are outside agentgate's reach (the
    /// webhook never sees them, so nothing there may be committed).
    pub fn ignores(&self, namespace: &str) -> bool {
        self.ignored_namespaces.contains(namespace)
    }

    /// Records a failed reconcile of `key` and returns how long to wait
    /// before the next try: 1 s, doubling per consecutive failure, at most
    /// 2 minutes.
    pub fn backoff(&self, kind: &str, key: String) -> Duration {
        self.metrics.error(kind);
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = failures.entry(key).or_insert(0);
        *n = n.saturating_add(1);
        Duration::from_secs(1u64 << (*n - 1).min(7)).min(Duration::from_secs(120))
    }

    /// Forgets `key`'s failures after a successful reconcile.
    pub fn succeeded(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}

/// `kind/namespace/name`, the key of an object's failure count.
fn object_key<K: ResourceExt>(kind: &str, obj: &K) -> String {
    format!(
        "{kind}/{}/{}",
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    )
}

/// Runs `reconcile` on `obj`, counting it and resetting its backoff on
/// success (every controller's reconcile goes through this).
pub async fn counted<K, F, Fut>(
    kind: &'static str,
    obj: Arc<K>,
    ctx: Arc<Context>,
    reconcile: F,
) -> Result<Action, ControllerError>
where
    K: ResourceExt,
    F: FnOnce(Arc<K>, Arc<Context>) -> Fut,
    Fut: Future<Output = Result<Action, ControllerError>>,
{
    ctx.metrics.reconcile(kind);
    let key = object_key(kind, obj.as_ref());
    let result = reconcile(obj, ctx.clone()).await;
    if result.is_ok() {
        ctx.succeeded(&key);
    }
    result
}

/// The error policy of every controller: log, count, and retry after the
/// object's exponential backoff.
pub fn retry_with_backoff<K: ResourceExt>(
    kind: &'static str,
    obj: &K,
    error: &ControllerError,
    ctx: &Context,
) -> Action {
    let wait = ctx.backoff(kind, object_key(kind, obj));
    tracing::warn!(kind, name = %obj.name_any(), %error, retry_in = ?wait, "reconcile failed; retrying");
    Action::requeue(wait)
}

/// How many objects of one kind are reconciled at once by default
/// (`--concurrent-reconciles`). A reconcile spends
/// most of its time waiting for the API server (a commit makes about ten
/// requests) and the rest proving on a blocking thread, so more run at once
/// than there are cores; bounded, since each proof holds solver memory.
/// Measured with `make bench-scale` (docs/benchmarks.md).
pub const CONCURRENCY: u16 = 16;

/// How long a reconciled object waits before it is looked at again when
/// nothing it watches changes: a safety net for drift nothing watches (a
/// sandbox's CA Secret deleted by hand), as long as controller-runtime's
/// default sync period, so that idle reconciles do not grow with the number
/// of objects. Time-driven work (CA rotation, an acceptance expiring, a
/// refused pod) asks for its own, earlier requeue.
pub const RESYNC: Duration = Duration::from_secs(10 * 60 * 60);

pub use event_queue::Note;

/// Publishes Events about `obj` for `action` (e.g. `Verify`): queued, so
/// the reconcile goes on without waiting for them ([`event_queue`]). An
/// Event is a view of a decision the status already records, so a failure
/// to publish is logged and never fails the reconcile.
pub async fn publish<K>(ctx: &Context, obj: &K, action: &str, notes: Vec<Note>)
where
    K: Resource<DynamicType = ()>,
{
    publish_to(ctx, &obj.object_ref(&()), action, notes).await;
}

/// [`publish`] to the object `reference` names.
pub async fn publish_to(
    ctx: &Context,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    action: &str,
    notes: Vec<Note>,
) {
    ctx.events.tell(reference, action, notes).await;
}

pub use agentgate_k8s::k8s::events::{EVENT_NOTE_LIMIT, event_note};

/// Runs a configured controller until shutdown (SIGINT/SIGTERM), with the
/// shared concurrency bound, `counted` reconciles and backoff on errors.
/// Stream errors (watch hiccups, failed reconciles) are already logged and
/// retried by the runtime and the error policy, so they are only traced.
pub async fn drive<K, F, Fut>(
    controller: kube::runtime::Controller<K>,
    reconcile: F,
    error_policy: fn(Arc<K>, &ControllerError, Arc<Context>) -> Action,
    ctx: Arc<Context>,
) where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: std::fmt::Debug + Eq + std::hash::Hash + Clone + Unpin,
    F: FnMut(Arc<K>, Arc<Context>) -> Fut,
    Fut: Future<Output = Result<Action, ControllerError>> + Send + 'static,
{
    use futures::StreamExt as _;
    let concurrency = ctx.concurrency;
    controller
        .shutdown_on_signal()
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "controller event");
            }
        })
        .await;
}

/// The current time, as condition timestamps take it.
pub fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// Writes `status` of `object` by server-side apply under
/// [`FIELD_MANAGER`] (no resourceVersion precondition: for statuses only
/// the operator writes, where the last word is the right one). The
/// object's uid goes with it, so a status decided for one object never
/// lands on another created under the same name meanwhile.
pub async fn apply_status<K>(
    api: &Api<K>,
    object: &K,
    status: &impl serde::Serialize,
) -> Result<(), ControllerError>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = object.name_any();
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {"name": name, "uid": object.uid()},
        "status": serde_json::to_value(status)?,
    });
    api.patch_status(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_event_note_is_cut_on_a_character_boundary() {
        assert_eq!(event_note("short".into()), "short");
        let exact = "x".repeat(EVENT_NOTE_LIMIT);
        assert_eq!(event_note(exact.clone()), exact);
        // 'é' is two bytes: the cut must not split one.
        let long = "é".repeat(EVENT_NOTE_LIMIT);
        let cut = event_note(long);
        assert!(cut.len() <= EVENT_NOTE_LIMIT, "{}", cut.len());
        assert!(cut.ends_with('…'));
        assert!(cut.trim_end_matches('…').chars().all(|c| c == 'é'));
    }

    #[test]
    fn the_echo_of_an_own_write_is_known_once_and_only_at_its_version() {
        // The key an owned object's watch event is looked up under is the
        // one `apply` remembers it under (the Api's resource URL).
        let key = applied_key::<k8s_openapi::api::core::v1::ConfigMap>(Some("n"), "x");
        assert_eq!(key, "/api/v1/namespaces/n/configmaps/x");
        let applied = AppliedObjects::default();
        applied.remember(key.clone(), [0; 32], "7".into());
        assert!(applied.is_own(&key, "7"));
        assert!(!applied.is_own(&key, "8"), "someone else's write since");

        let writes = OwnWrites::default();
        writes.remember("n/s".into(), "12".into());
        assert!(!writes.echo("n/s", "11"));
        assert!(writes.echo("n/s", "12"));
        assert!(!writes.echo("n/s", "12"), "an echo comes once");
    }

    #[test]
    fn an_echo_that_outruns_its_answer_is_held_back_and_told_apart() {
        let key = "/api/v1/namespaces/n/configmaps/x";
        let applied = AppliedObjects::default();
        applied.remember(key.into(), [0; 32], "7".into());
        // The echo arrives before the answer: held back, not a trigger.
        applied.begin(key);
        assert!(applied.is_own(key, "8"));
        assert_eq!(applied.finish(key.into(), [1; 32], "8".into()), Raced::No);
        assert!(applied.is_own(key, "8"));
        assert!(!applied.is_own(key, "9"), "nothing is held back after it");
        // A late echo of the write before it is no one else's either.
        applied.begin(key);
        assert!(applied.is_own(key, "8"));
        assert_eq!(applied.finish(key.into(), [2; 32], "10".into()), Raced::No);
        // Someone else's write while ours was in flight, even with our own
        // echo after it: the owner must be looked at again.
        applied.begin(key);
        assert!(applied.is_own(key, "11"));
        assert!(applied.is_own(key, "12"));
        assert_eq!(applied.finish(key.into(), [3; 32], "12".into()), Raced::Yes);
        // A failed write holds nothing back afterwards.
        applied.begin(key);
        assert_eq!(applied.abandon(key), Raced::No);
        assert!(!applied.is_own(key, "13"));
        applied.begin(key);
        assert!(applied.is_own(key, "14"));
        assert_eq!(
            applied.abandon(key),
            Raced::Yes,
            "held back, then no answer"
        );

        let writes = OwnWrites::default();
        writes.begin("n/s");
        assert!(writes.echo("n/s", "20"), "held back while in flight");
        assert_eq!(writes.finish("n/s".into(), "20".into()), Raced::No);
        assert!(!writes.echo("n/s", "20"), "the held-back echo was the one");
        writes.begin("n/s");
        assert_eq!(writes.finish("n/s".into(), "21".into()), Raced::No);
        assert!(writes.echo("n/s", "21"), "an echo after the answer");
        writes.begin("n/s");
        assert!(writes.echo("n/s", "22"));
        assert!(writes.echo("n/s", "23"));
        assert_eq!(writes.finish("n/s".into(), "23".into()), Raced::Yes);
        writes.begin("n/s");
        assert_eq!(writes.abandon("n/s"), Raced::No);
        assert!(!writes.echo("n/s", "24"));
    }

    #[test]
    fn an_applied_object_is_skipped_only_for_the_same_content() {
        let applied = AppliedObjects::default();
        let a = content_hash(&serde_json::json!({"data": {"k": "v"}}));
        let b = content_hash(&serde_json::json!({"data": {"k": "w"}}));
        let path = "/api/v1/namespaces/n/configmaps/x";
        assert_eq!(applied.unchanged(path, &a), None);
        applied.remember(path.into(), a, "7".into());
        assert_eq!(applied.unchanged(path, &a).as_deref(), Some("7"));
        assert_eq!(applied.unchanged(path, &b), None);
        assert_eq!(
            applied.unchanged("/api/v1/namespaces/n/configmaps/y", &a),
            None
        );
    }
}
