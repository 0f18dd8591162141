//! Watch-driven caches of cluster objects (reflector stores), for readers
//! that may answer from a recent view: the webhook, and counts that do not
//! grant anything. Commits never read from here (docs/design.md §5). Cached
//! objects drop `metadata.managedFields`, which nothing here reads and
//! which is often the largest part of an object that several field
//! managers write.

use futures::StreamExt;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;

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
    let (reader, writer) = reflector::store();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|object: &mut K| object.meta_mut().managed_fields = None)
        .reflect(writer)
        .touched_objects();
    tokio::spawn(async move {
        stream
            .for_each(|event| async move {
                if let Err(e) = event {
                    tracing::warn!(error = %e, "cache watch failed; retrying");
                }
            })
            .await;
    });
    reader
}
