//! Policy delivery on the wire (docs/design.md §10, "Delivery"): what the
//! operator pushes to a sandbox's proxy when it commits, and what the proxy
//! reports back once it enforces it. One definition, so both read the same
//! bytes the same way.
//!
//! An update is the whole of the sandbox's policy ConfigMap (`data`): the
//! same files the proxy reads from the ConfigMap volume, so the two sources
//! differ only in when they arrive. Its order is `revision`, which moves
//! exactly when the effective policy does; the digest covers every file.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The audience of the projected ServiceAccount token a proxy subscribes
/// with: good for the policy stream and nothing else.
pub const POLICY_AUDIENCE: &str = "agentgate.dev/policy";
/// The ConfigMap key holding the revision.
pub const REVISION_KEY: &str = "revision";
/// How often the stream carries a heartbeat when nothing changes: a proxy
/// that hears nothing for [`SILENCE_LIMIT_SECONDS`] drops the connection
/// and subscribes again.
pub const HEARTBEAT_SECONDS: u64 = 10;
/// See [`HEARTBEAT_SECONDS`].
pub const SILENCE_LIMIT_SECONDS: u64 = 30;
/// The largest update line a proxy reads (a ConfigMap is at most 1 MiB).
pub const MAX_UPDATE_BYTES: usize = 2 << 20;

/// One line of the stream: an update, or a heartbeat (`{}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamLine {
    /// The update, absent in a heartbeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update: Option<PolicyUpdate>,
}

/// A committed policy as the sandbox's ConfigMap holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyUpdate {
    /// The commit's revision (`status.revision`).
    pub revision: u64,
    /// [`digest`] of `data`.
    pub digest: String,
    /// The ConfigMap's files by name.
    pub data: BTreeMap<String, String>,
}

/// Why an update cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpdateError {
    /// The revision file is missing or is not the revision the update names.
    #[error("the update's revision {named} does not match its files ({found:?})")]
    Revision {
        /// `revision` of the update.
        named: u64,
        /// What `data["revision"]` says.
        found: Option<String>,
    },
    /// The digest does not cover these files.
    #[error("the update's digest does not match its files")]
    Digest,
    /// A file name that could escape the directory it is written to.
    #[error("file name {0:?} is not a plain ConfigMap key")]
    Name(String),
}

impl PolicyUpdate {
    /// The update for a ConfigMap's `data`; `None` without a revision.
    pub fn of(data: BTreeMap<String, String>) -> Option<PolicyUpdate> {
        let revision = data.get(REVISION_KEY)?.trim().parse().ok()?;
        Some(PolicyUpdate {
            revision,
            digest: digest(&data),
            data,
        })
    }

    /// Checks that the files are what the update says: the revision, the
    /// digest, and names a directory can hold as they are.
    pub fn check(&self) -> Result<(), UpdateError> {
        let found = self.data.get(REVISION_KEY);
        if found.and_then(|r| r.trim().parse::<u64>().ok()) != Some(self.revision) {
            return Err(UpdateError::Revision {
                named: self.revision,
                found: found.cloned(),
            });
        }
        if let Some(bad) = self.data.keys().find(|k| !is_config_map_key(k)) {
            return Err(UpdateError::Name(bad.clone()));
        }
        if digest(&self.data) != self.digest {
            return Err(UpdateError::Digest);
        }
        Ok(())
    }
}

/// What a proxy reports once it enforces an update.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Applied {
    /// The revision it enforces.
    pub revision: u64,
    /// The digest of the files it enforces.
    pub digest: String,
}

/// `sha256:HEX` over the files in key order, each as its key's and its
/// value's lengths and bytes, so no two different maps share an encoding.
pub fn digest(data: &BTreeMap<String, String>) -> String {
    let mut hash = Sha256::new();
    for (key, value) in data {
        hash.update((key.len() as u64).to_be_bytes());
        hash.update(key.as_bytes());
        hash.update((value.len() as u64).to_be_bytes());
        hash.update(value.as_bytes());
    }
    format!("sha256:{}", hex::encode(hash.finalize()))
}

/// A ConfigMap key (`[-._a-zA-Z0-9]+`, at most 253 bytes), not `.` or `..`
/// nor starting with `..` (the kubelet's own names in a volume).
pub fn is_config_map_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 253
        && !key.starts_with("..")
        && key != "."
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn an_update_is_checked_against_its_files() {
        let update = PolicyUpdate::of(data(&[("revision", "3"), ("policy.yaml", "network: []")]))
            .expect("a revision");
        assert_eq!(update.revision, 3);
        assert_eq!(update.check(), Ok(()));
        let mut forged = update.clone();
        forged.revision = 4;
        assert!(matches!(forged.check(), Err(UpdateError::Revision { .. })));
        let mut edited = update.clone();
        edited
            .data
            .insert("policy.yaml".into(), "network: [x]".into());
        assert_eq!(edited.check(), Err(UpdateError::Digest));
        let mut escaping = update.clone();
        escaping.data.insert("../x".into(), String::new());
        escaping.digest = digest(&escaping.data);
        assert!(matches!(escaping.check(), Err(UpdateError::Name(_))));
        assert!(PolicyUpdate::of(data(&[("policy.yaml", "")])).is_none());
    }

    #[test]
    fn the_digest_tells_apart_maps_that_concatenate_alike() {
        assert_ne!(digest(&data(&[("a", "bc")])), digest(&data(&[("ab", "c")])));
        assert_ne!(digest(&data(&[("a", "")])), digest(&data(&[])));
    }
}
