//! Which policy streams a cache change wakes (docs/design.md §10,
//! "Delivery"): a change to a sandbox, or to its policy ConfigMap, wakes
//! that sandbox's streams and no other. One counter for every change would
//! wake every stream on each of a storm's commits: N commits over N
//! streams, N² looks (`make bench-delivery`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

/// A sandbox, by namespace and name.
type SandboxKey = (String, String);

/// One wake-up counter per sandbox with a subscribed stream.
#[derive(Clone, Default)]
pub struct SandboxWakeups {
    counters: Arc<Mutex<HashMap<SandboxKey, watch::Sender<u64>>>>,
}

impl SandboxWakeups {
    /// A receiver that moves after every later change to sandbox
    /// `namespace/name` or its policy ConfigMap.
    pub fn subscribe(&self, namespace: &str, name: &str) -> watch::Receiver<u64> {
        let mut counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        counters
            .entry((namespace.to_string(), name.to_string()))
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// Wakes the streams of sandbox `namespace/name`; forgets its counter
    /// once no stream holds it.
    pub fn wake(&self, namespace: &str, name: &str) {
        let mut counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (namespace.to_string(), name.to_string());
        if let Some(counter) = counters.get(&key) {
            if counter.receiver_count() == 0 {
                counters.remove(&key);
            } else {
                counter.send_modify(|n| *n = n.wrapping_add(1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many sandboxes have a counter (subscribed, or not yet forgotten).
    fn counters(wakeups: &SandboxWakeups) -> usize {
        wakeups.counters.lock().unwrap().len()
    }

    #[test]
    fn a_change_wakes_its_own_sandboxs_streams_only() {
        let wakeups = SandboxWakeups::default();
        let mine = wakeups.subscribe("team", "bot");
        let other = wakeups.subscribe("team", "other-bot");
        let elsewhere = wakeups.subscribe("elsewhere", "bot");
        wakeups.wake("team", "bot");
        assert!(mine.has_changed().unwrap());
        assert!(!other.has_changed().unwrap());
        assert!(!elsewhere.has_changed().unwrap());
        wakeups.wake("team", "other-bot");
        assert!(other.has_changed().unwrap());
        assert!(!elsewhere.has_changed().unwrap());
    }

    #[test]
    fn a_counter_no_stream_holds_is_forgotten_at_the_next_change() {
        let wakeups = SandboxWakeups::default();
        let first = wakeups.subscribe("team", "bot");
        let second = wakeups.subscribe("team", "bot");
        assert_eq!(counters(&wakeups), 1);
        drop(first);
        wakeups.wake("team", "bot");
        assert!(second.has_changed().unwrap());
        drop(second);
        wakeups.wake("team", "bot");
        assert_eq!(counters(&wakeups), 0);
        // A change to a sandbox nobody subscribed to keeps nothing.
        wakeups.wake("team", "unsubscribed");
        assert_eq!(counters(&wakeups), 0);
    }
}
