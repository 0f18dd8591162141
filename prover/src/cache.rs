//! A bounded in-memory cache of proof answers, keyed by a SHA-256 content
//! hash of (question kind, parameters, every policy and region involved).
//!
//! Only answers that do not depend on time are cached: Within, Exceeds and
//! Unsupported. A timeout may succeed on the next try, so it is not kept.

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

/// A content hash.
pub type Key = [u8; 32];

/// A `Hasher` whose output is SHA-256 over everything written, so derived
/// `Hash` impls give a content hash. Writes are buffered and digested once:
/// derived impls make many tiny writes, each costly as a SHA-256 update.
pub struct ContentHasher(Vec<u8>);

impl ContentHasher {
    /// A hasher for a question of kind `tag`.
    pub fn new(tag: &str) -> Self {
        let mut buffer = Vec::with_capacity(4096);
        buffer.extend_from_slice(tag.as_bytes());
        buffer.push(0);
        ContentHasher(buffer)
    }

    /// Adds a value.
    pub fn with<T: Hash + ?Sized>(mut self, value: &T) -> Self {
        value.hash(&mut self);
        self
    }

    /// The final key.
    pub fn key(self) -> Key {
        Sha256::digest(&self.0).into()
    }
}

impl Hasher for ContentHasher {
    fn finish(&self) -> u64 {
        // Not used: `key` gives the full digest.
        0
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }
}

/// A bounded FIFO cache.
pub struct Cache<V> {
    capacity: usize,
    inner: Mutex<(HashMap<Key, V>, VecDeque<Key>)>,
}

impl<V: Clone> Cache<V> {
    /// A cache holding at most `capacity` answers (0 disables it).
    pub fn new(capacity: usize) -> Self {
        Cache {
            capacity,
            inner: Mutex::new((HashMap::new(), VecDeque::new())),
        }
    }

    /// The cached answer for `key`.
    pub fn get(&self, key: &Key) -> Option<V> {
        let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        guard.0.get(key).cloned()
    }

    /// Stores an answer, evicting the oldest when full.
    pub fn put(&self, key: Key, value: V) {
        if self.capacity == 0 {
            return;
        }
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (map, order) = &mut *guard;
        if map.insert(key, value).is_none() {
            order.push_back(key);
            while order.len() > self.capacity {
                if let Some(old) = order.pop_front() {
                    map.remove(&old);
                }
            }
        }
    }

    /// False when the cache keeps nothing (then keys need not be computed).
    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// Number of cached answers.
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).0.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
