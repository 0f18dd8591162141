//! Watch-driven caches of cluster objects (reflector stores), for readers
//! that may answer from a recent view: the webhook, and counts that do not
//! grant anything. Commits never read from here (docs/design.md §5). Cached
//! objects drop `metadata.managedFields` and kubectl's last-applied copy
//! ([`trim`]).

use futures::StreamExt;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;

/// kubectl's copy of the last applied object, kept in an annotation.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What a cache drops of every object: `managedFields` and kubectl's
/// last-applied copy, which nothing here reads and which are often the
/// largest parts of an object (the copy repeats its whole spec).
pub fn trim<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = &mut meta.annotations {
        annotations.remove(LAST_APPLIED);
    }
}

/// How often a waiter for a store's first list polls again.
const READY_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// Waits until `store` has listed once (`Err` when its writer is gone).
///
/// kube-runtime's `Store::wait_until_ready` wakes only the last of several
/// concurrent waiters: its one-shot channel keeps one waker, the latest
/// poller's. Two reconciles waiting at once (two MaximumPolicies at
/// operator start) left one asleep for good, its object never reconciled.
/// Each wait here polls again every [`READY_POLL`], which bounds a missed
/// wake-up.
pub async fn until_ready<K>(store: &Store<K>) -> bool
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    loop {
        if let Ok(listed) = tokio::time::timeout(READY_POLL, store.wait_until_ready()).await {
            return listed.is_ok();
        }
    }
}

/// Starts a reflector for `K` and returns its store (driven by a task that
/// retries with backoff when the watch fails). With
/// `K = PartialObjectMeta<T>` only the objects' metadata is fetched and
/// held.
pub fn reflect<K>(api: Api<K>) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    reflect_with(api, watcher::Config::default())
}

/// [`reflect`] with a watch `config` (a label selector, say).
pub fn reflect_with<K>(api: Api<K>, config: watcher::Config) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    reflect_touching(api, config, |_| {})
}

/// [`reflect`] with a watch `config`, calling `touched` with every object
/// the store has taken in (applied or deleted) once the store has it, so
/// whatever `touched` wakes reads a store at least as new as the change. A
/// re-list after a lost watch touches every object again.
pub fn reflect_touching<K>(
    api: Api<K>,
    config: watcher::Config,
    touched: impl Fn(&K) + Send + Sync + 'static,
) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, events) = reflected(watcher(api, config));
    let stream = events.touched_objects();
    tokio::spawn(async move {
        stream
            .for_each(|event| {
                match event {
                    Ok(object) => touched(&object),
                    Err(e) => tracing::warn!(error = %e, "cache watch failed; retrying"),
                }
                async {}
            })
            .await;
    });
    reader
}

/// Whether `store` has listed once, without waiting.
pub fn is_ready<K>(store: &Store<K>) -> bool
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    matches!(
        futures::FutureExt::now_or_never(store.wait_until_ready()),
        Some(Ok(()))
    )
}

/// A reflector over `events` (a [`watcher`] or `metadata_watcher`
/// stream) whose objects, once written into the returned store, are passed
/// on as reconcile triggers (every object applied or deleted). The store is
/// written before the trigger leaves, so a reconcile a change starts reads
/// a store at least as new as that change; two separate watches (one for
/// the trigger, one for the store) could start it on a store that does not
/// show the change yet. The stream must be polled (a controller's trigger)
/// for the store to move.
pub fn reflect_triggers<K>(
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
) -> (
    Store<K>,
    impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, events) = reflected(events);
    (reader, events.touched_objects())
}

/// `events` with backoff and [`trim`], written into a new store: every
/// cache of the operator is built this way.
pub fn reflected<K>(
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
) -> (
    Store<K>,
    impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
)
where
    K: Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, writer) = reflector::store();
    (
        reader,
        events.default_backoff().modify(trim::<K>).reflect(writer),
    )
}

/// [`reflect_triggers`] passing on only the changes a reconcile depends
/// on ([`ChangeFilter`]): an object's generation (its spec), its labels,
/// its deletion. A status write, or a metadata write that moves neither,
/// starts nothing: a MaximumPolicy's status write would otherwise re-verify
/// every sandbox again.
pub fn reflect_spec_changes<K>(
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
) -> (
    Store<K>,
    impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, events) = reflected(events);
    let mut changes = ChangeFilter::default();
    let stream = events.flat_map(move |event| {
        let passed: Vec<Result<K, watcher::Error>> = match event {
            Ok(event) => changes.admit(event).into_iter().map(Ok).collect(),
            Err(e) => vec![Err(e)],
        };
        futures::stream::iter(passed)
    });
    (reader, stream)
}

/// Decides which watch events are changes a reconcile depends on: an
/// object first seen, one whose generation, labels or deletion mark moved,
/// one deleted, and one that vanished while the watch was re-listing (no
/// delete event is sent for those).
pub struct ChangeFilter<K> {
    /// The last fingerprint and object passed on, by uid (name when none).
    seen: std::collections::HashMap<String, (u64, K)>,
    /// The keys listed since a re-list began.
    relisted: Option<std::collections::HashSet<String>>,
}

impl<K> Default for ChangeFilter<K> {
    fn default() -> Self {
        ChangeFilter {
            seen: std::collections::HashMap::new(),
            relisted: None,
        }
    }
}

impl<K: Resource + Clone> ChangeFilter<K> {
    /// The objects `event` passes on.
    pub fn admit(&mut self, event: watcher::Event<K>) -> Vec<K> {
        match event {
            watcher::Event::Init => {
                self.relisted = Some(std::collections::HashSet::new());
                Vec::new()
            }
            watcher::Event::InitApply(object) => {
                if let Some(relisted) = &mut self.relisted {
                    relisted.insert(key(&object));
                }
                self.applied(object).into_iter().collect()
            }
            watcher::Event::Apply(object) => self.applied(object).into_iter().collect(),
            watcher::Event::Delete(object) => {
                self.seen.remove(&key(&object));
                vec![object]
            }
            watcher::Event::InitDone => {
                let Some(relisted) = self.relisted.take() else {
                    return Vec::new();
                };
                let gone: Vec<String> = self
                    .seen
                    .keys()
                    .filter(|k| !relisted.contains(*k))
                    .cloned()
                    .collect();
                gone.into_iter()
                    .filter_map(|k| self.seen.remove(&k).map(|(_, object)| object))
                    .collect()
            }
        }
    }

    fn applied(&mut self, object: K) -> Option<K> {
        let print = fingerprint(&object);
        let key = key(&object);
        if self.seen.get(&key).is_some_and(|(seen, _)| *seen == print) {
            return None;
        }
        self.seen.insert(key, (print, object.clone()));
        Some(object)
    }
}

fn key<K: Resource>(object: &K) -> String {
    let meta = object.meta();
    meta.uid.clone().unwrap_or_else(|| {
        format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default()
        )
    })
}

/// What of an object a reconcile depends on, hashed: its generation (its
/// spec: namespaces have none), its labels and whether it is being
/// deleted.
fn fingerprint<K: Resource>(object: &K) -> u64 {
    use std::hash::{Hash, Hasher};
    let meta = object.meta();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    meta.generation.hash(&mut hasher);
    meta.labels.hash(&mut hasher);
    meta.deletion_timestamp.is_some().hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn ns(uid: &str, generation: i64, labels: &[(&str, &str)], rv: &str) -> Namespace {
        Namespace {
            metadata: ObjectMeta {
                name: Some(format!("ns-{uid}")),
                uid: Some(uid.into()),
                generation: Some(generation),
                resource_version: Some(rv.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).into(), (*v).into()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        }
    }

    fn names(objects: Vec<Namespace>) -> Vec<String> {
        objects.into_iter().map(|o| o.name_any()).collect()
    }

    use kube::ResourceExt;

    #[test]
    fn only_spec_label_and_deletion_changes_pass() {
        let mut filter = ChangeFilter::default();
        assert_eq!(
            names(filter.admit(watcher::Event::Apply(ns("a", 1, &[], "1")))),
            ["ns-a"]
        );
        // A status or annotation write: same generation and labels.
        assert!(
            filter
                .admit(watcher::Event::Apply(ns("a", 1, &[], "2")))
                .is_empty()
        );
        assert_eq!(
            names(filter.admit(watcher::Event::Apply(ns("a", 2, &[], "3")))),
            ["ns-a"]
        );
        assert_eq!(
            names(filter.admit(watcher::Event::Apply(ns("a", 2, &[("tier", "a")], "4")))),
            ["ns-a"]
        );
        let mut deleting = ns("a", 2, &[("tier", "a")], "5");
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert_eq!(
            names(filter.admit(watcher::Event::Apply(deleting))),
            ["ns-a"]
        );
        assert_eq!(
            names(filter.admit(watcher::Event::Delete(ns("a", 2, &[], "6")))),
            ["ns-a"]
        );
        // Seen anew after its deletion (same uid re-listed): passed on.
        assert_eq!(
            names(filter.admit(watcher::Event::Apply(ns("a", 2, &[], "7")))),
            ["ns-a"]
        );
    }

    #[test]
    fn a_cached_object_keeps_its_annotations_but_not_kubectls_copy_of_itself() {
        let mut object = ns("a", 1, &[], "1");
        object.metadata.annotations = Some(
            [
                (
                    LAST_APPLIED.to_string(),
                    "{\"spec\": \"all of it\"}".to_string(),
                ),
                ("team".to_string(), "infra".to_string()),
            ]
            .into(),
        );
        object.metadata.managed_fields = Some(Vec::new());
        trim(&mut object);
        assert_eq!(object.metadata.managed_fields, None);
        assert_eq!(
            object.metadata.annotations,
            Some([("team".to_string(), "infra".to_string())].into())
        );
    }

    #[test]
    fn an_object_gone_during_a_relist_is_passed_on_as_gone() {
        let mut filter = ChangeFilter::default();
        filter.admit(watcher::Event::Apply(ns("a", 1, &[], "1")));
        filter.admit(watcher::Event::Apply(ns("b", 1, &[], "2")));
        assert!(filter.admit(watcher::Event::Init).is_empty());
        // Unchanged on the re-list: nothing; `b` was deleted meanwhile.
        assert!(
            filter
                .admit(watcher::Event::InitApply(ns("a", 1, &[], "1")))
                .is_empty()
        );
        assert_eq!(names(filter.admit(watcher::Event::InitDone)), ["ns-b"]);
        // And only once.
        filter.admit(watcher::Event::Init);
        filter.admit(watcher::Event::InitApply(ns("a", 1, &[], "1")));
        assert!(filter.admit(watcher::Event::InitDone).is_empty());
    }
}
