//! The policy stream (docs/design.md §10, "Delivery"): the proxy subscribes
//! to the operator's `GET /v1/policy/stream` and keeps every committed
//! update it pushes in a directory of its own (`--pushed-policy`, an
//! emptyDir that outlives a proxy restart), laid out like the ConfigMap
//! volume, so the policy source ([`crate::policy_file`]) reads either the same
//! way and enforces the newer. It reports each update it enforces to
//! `POST /v1/policy/applied`.
//!
//! Order is the revision: an update older than what the proxy holds
//! (pushed or on the volume) is never written, so neither a replayed
//! stream, a lagging replica nor an operator restart can roll a Pod back.
//! While the stream is down the proxy enforces what it holds and follows
//! the volume, which only moves forward too.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use tokio::sync::{Notify, watch};

use crate::operator_api::{Endpoint, EndpointError};
use crate::resolve::Resolver;
use agentgate_judgement::delivery::{
    Applied, MAX_UPDATE_BYTES, PolicyUpdate, REVISION_KEY, SILENCE_LIMIT_SECONDS, StreamLine,
    digest, is_config_map_key,
};

/// The link in the pushed directory to the update in force.
pub const CURRENT: &str = "current";
/// The first wait before subscribing again after a failure; doubled up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What a directory of ConfigMap files holds: its revision and digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The directory the files are read from.
    pub dir: PathBuf,
    /// Its `revision`.
    pub revision: u64,
    /// [`digest`] of its files.
    pub digest: String,
    /// The files as read, so the policy source enforces exactly the
    /// version the digest names without reading them again.
    pub files: BTreeMap<String, String>,
}

/// Reads the ConfigMap files in `dir` (the kubelet's `..`-prefixed entries
/// are not files of the ConfigMap); `None` without a readable revision.
pub fn held_in(dir: &Path) -> Option<Held> {
    // A ConfigMap volume's files are links through `..data` to a directory
    // the kubelet swaps whole: read that directory, so every file comes
    // from one version of the ConfigMap.
    let data_dir = dir.join("..data");
    let dir = if data_dir.exists() {
        std::fs::canonicalize(data_dir).ok()?
    } else {
        std::fs::canonicalize(dir).ok()?
    };
    let mut data = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).ok()?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !is_config_map_key(&name) {
            continue;
        }
        let path = entry.path();
        if !path.is_file() {
            continue;
        }
        data.insert(name, std::fs::read_to_string(&path).ok()?);
    }
    let revision = data.get(REVISION_KEY)?.trim().parse().ok()?;
    Some(Held {
        digest: digest(&data),
        dir,
        revision,
        files: data,
    })
}

/// What the pushed directory holds in force (through [`CURRENT`]).
pub fn pushed_in(pushed: &Path) -> Option<Held> {
    held_in(&pushed.join(CURRENT))
}

/// Writes `update` into `pushed` and points [`CURRENT`] at it, unless
/// what is held there or in `volume` has a newer revision, or the same
/// update is already in force. Returns whether it was written. The files
/// are written into a fresh directory and the link is swapped by a rename,
/// so a reader sees the old update or the new one, never a mix.
pub fn store_update(pushed: &Path, volume: &Path, update: &PolicyUpdate) -> std::io::Result<bool> {
    let current = pushed_in(pushed);
    let floor = [current.as_ref(), held_in(volume).as_ref()]
        .into_iter()
        .flatten()
        .map(|h| h.revision)
        .max()
        .unwrap_or(0);
    if update.revision < floor
        || current
            .as_ref()
            .is_some_and(|c| c.revision == update.revision && c.digest == update.digest)
    {
        return Ok(false);
    }
    let short = update.digest.trim_start_matches("sha256:");
    let name = format!("rev-{}-{}", update.revision, &short[..short.len().min(16)]);
    let target = pushed.join(&name);
    let building = pushed.join(format!(".{name}.tmp"));
    let _ = std::fs::remove_dir_all(&building);
    std::fs::create_dir_all(&building)?;
    for (key, value) in &update.data {
        let mut file = std::fs::File::create(building.join(key))?;
        file.write_all(value.as_bytes())?;
        file.sync_all()?;
    }
    let _ = std::fs::remove_dir_all(&target);
    std::fs::rename(&building, &target)?;
    let link = pushed.join(format!(".{CURRENT}.tmp"));
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&name, &link)?;
    std::fs::rename(&link, pushed.join(CURRENT))?;
    // Keep the update in force and the one before it (a reader may still
    // be reading it); the rest go.
    let previous = current.and_then(|c| c.dir.file_name().map(|n| n.to_os_string()));
    if let Ok(entries) = std::fs::read_dir(pushed) {
        for entry in entries.flatten() {
            let entry_name = entry.file_name();
            let keep = entry_name == std::ffi::OsStr::new(&name)
                || Some(&entry_name) == previous.as_ref()
                || entry_name == CURRENT;
            if !keep && entry_name.to_string_lossy().starts_with("rev-") {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    Ok(true)
}

/// The subscription: where the stream is, where its updates are kept, the
/// volume they are compared with.
pub struct PolicyStream {
    endpoint: Arc<Endpoint>,
    pushed: PathBuf,
    volume: PathBuf,
}

impl PolicyStream {
    /// The stream at `url` (`--policy-stream`), verified with the roots in
    /// `ca`, authenticated with the token file `token`; updates kept in
    /// `pushed`, compared with the ConfigMap volume `volume`.
    pub fn new(
        url: &str,
        ca: Option<&Path>,
        token: Option<PathBuf>,
        pushed: PathBuf,
        volume: PathBuf,
    ) -> Result<PolicyStream, EndpointError> {
        std::fs::create_dir_all(&pushed).map_err(|e| EndpointError::File {
            path: pushed.display().to_string(),
            reason: e.to_string(),
        })?;
        Ok(PolicyStream {
            endpoint: Arc::new(Endpoint::new(
                "--policy-stream",
                url,
                ca,
                token,
                "/v1/policy/stream",
            )?),
            pushed,
            volume,
        })
    }

    /// Subscribes, and subscribes again after every failure or silence,
    /// forever; `wake` is notified after each update written.
    pub async fn run(self, resolver: Arc<Resolver>, wake: Arc<Notify>) {
        let mut backoff = FIRST_BACKOFF;
        loop {
            match self.subscribe(&resolver, &wake).await {
                Ok(()) => backoff = FIRST_BACKOFF,
                Err(e) => {
                    tracing::warn!(stream = %self.endpoint.shown(), error = %e, "policy stream lost; enforcing what is held and following the volume");
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// One subscription: reads lines until the server ends it (`Ok`) or it
    /// fails or falls silent.
    async fn subscribe(&self, resolver: &Resolver, wake: &Notify) -> Result<(), String> {
        let silence = Duration::from_secs(SILENCE_LIMIT_SECONDS);
        let response =
            tokio::time::timeout(silence, self.endpoint.send(resolver, Method::GET, "", None))
                .await
                .map_err(|_| "no answer".to_string())?
                .map_err(|e| e.to_string())?;
        if response.status() != StatusCode::OK {
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            return Err(format!(
                "answered {status}: {}",
                String::from_utf8_lossy(&body)
                    .chars()
                    .take(300)
                    .collect::<String>()
            ));
        }
        tracing::info!(stream = %self.endpoint.shown(), "policy stream subscribed");
        let mut body = response.into_body();
        let mut pending: Vec<u8> = Vec::new();
        loop {
            let frame = tokio::time::timeout(silence, body.frame())
                .await
                .map_err(|_| format!("silent for {SILENCE_LIMIT_SECONDS} s"))?;
            let Some(frame) = frame else {
                return Ok(());
            };
            let frame = frame.map_err(|e| e.to_string())?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            pending.extend_from_slice(&data);
            if pending.len() > MAX_UPDATE_BYTES {
                return Err("an update longer than the limit".into());
            }
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                self.take(&line, wake)?;
            }
        }
    }

    /// Applies one line: a heartbeat is nothing; an update is checked and
    /// kept when it is newer.
    fn take(&self, line: &[u8], wake: &Notify) -> Result<(), String> {
        let line: StreamLine = serde_json::from_slice(line.trim_ascii())
            .map_err(|e| format!("not a stream line: {e}"))?;
        let Some(update) = line.update else {
            return Ok(());
        };
        update.check().map_err(|e| e.to_string())?;
        match store_update(&self.pushed, &self.volume, &update) {
            Ok(true) => {
                tracing::info!(revision = update.revision, digest = %update.digest, "policy update pushed");
                wake.notify_one();
                Ok(())
            }
            Ok(false) => {
                tracing::debug!(
                    revision = update.revision,
                    "policy update not newer than what is held"
                );
                Ok(())
            }
            Err(e) => Err(format!("cannot keep the update: {e}")),
        }
    }
}

/// Reports each update the proxy enforces to `POST /v1/policy/applied`
/// (`endpoint`), retrying with backoff until it is taken, refused as not
/// the committed one, or superseded by a newer report.
pub async fn report_applied(
    endpoint: Arc<Endpoint>,
    resolver: Arc<Resolver>,
    mut applied: watch::Receiver<Option<Applied>>,
) {
    'reports: loop {
        let report = applied.borrow_and_update().clone();
        if let Some(report) = report {
            let mut backoff = FIRST_BACKOFF;
            loop {
                let body = Bytes::from(serde_json::to_vec(&report).unwrap_or_default());
                let sent = tokio::time::timeout(
                    Duration::from_secs(SILENCE_LIMIT_SECONDS),
                    endpoint.send(&resolver, Method::POST, "", Some(body)),
                )
                .await;
                match sent {
                    Ok(Ok(response)) if response.status().is_success() => {
                        tracing::info!(revision = report.revision, "reported the enforced policy");
                        break;
                    }
                    // Not the committed update (any more): a newer one is coming.
                    Ok(Ok(response)) if response.status() == StatusCode::CONFLICT => {
                        tracing::debug!(
                            revision = report.revision,
                            "the enforced policy is not the committed one"
                        );
                        break;
                    }
                    Ok(Ok(response)) => {
                        tracing::warn!(status = %response.status(), "reporting the enforced policy failed")
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "reporting the enforced policy failed")
                    }
                    Err(_) => tracing::warn!("reporting the enforced policy timed out"),
                }
                tokio::select! {
                    changed = applied.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        continue 'reports;
                    }
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
        if applied.changed().await.is_err() {
            return;
        }
    }
}

impl PolicyStream {
    /// Where the proxy reports what it enforces: the stream's sibling
    /// `…/applied`.
    pub fn report_endpoint(&self) -> Arc<Endpoint> {
        Arc::new(self.endpoint.sibling("applied"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::policy_file::Choice;

    /// A fresh directory of this test's own, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir()
                .join(format!("agentgate-delivery-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn update(revision: u64, policy: &str) -> PolicyUpdate {
        let data: BTreeMap<String, String> = [
            ("revision".to_string(), revision.to_string()),
            ("policy.yaml".to_string(), policy.to_string()),
        ]
        .into_iter()
        .collect();
        PolicyUpdate::of(data).unwrap()
    }

    fn write_volume(dir: &Path, u: &PolicyUpdate) {
        std::fs::create_dir_all(dir).unwrap();
        for (k, v) in &u.data {
            std::fs::write(dir.join(k), v).unwrap();
        }
    }

    #[test]
    fn an_update_older_than_what_is_held_is_never_kept() {
        let root = Scratch::new("order");
        let (pushed, volume) = (root.path().join("pushed"), root.path().join("volume"));
        std::fs::create_dir_all(&pushed).unwrap();
        write_volume(&volume, &update(2, "v2"));
        // Older than the volume: refused; newer: kept and in force.
        assert!(!store_update(&pushed, &volume, &update(1, "v1")).unwrap());
        assert!(pushed_in(&pushed).is_none());
        assert!(store_update(&pushed, &volume, &update(3, "v3")).unwrap());
        assert_eq!(pushed_in(&pushed).unwrap().revision, 3);
        // A replay of it, or of anything older (a lagging replica): nothing.
        assert!(!store_update(&pushed, &volume, &update(3, "v3")).unwrap());
        assert!(!store_update(&pushed, &volume, &update(2, "v2")).unwrap());
        // The same revision with other files (findings, CAs): kept.
        let mut same = update(3, "v3");
        same.data.insert("findings.json".into(), "[]".into());
        same.digest = digest(&same.data);
        assert!(store_update(&pushed, &volume, &same).unwrap());
        let held = pushed_in(&pushed).unwrap();
        assert_eq!(held.digest, same.digest);
        assert_eq!(
            std::fs::read_to_string(held.dir.join("policy.yaml")).unwrap(),
            "v3"
        );
        // Only the update in force and the one before it are kept.
        for n in 4..8 {
            assert!(store_update(&pushed, &volume, &update(n, "vn")).unwrap());
        }
        let kept = std::fs::read_dir(&pushed)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("rev-"))
            .count();
        assert_eq!(kept, 2);
    }

    #[test]
    fn the_newer_source_is_read_and_at_a_tie_the_one_that_changed_last() {
        let root = Scratch::new("choice");
        let held = |revision: u64, digest: &str| Held {
            dir: root.path().join(digest),
            revision,
            digest: digest.into(),
            files: BTreeMap::new(),
        };
        let mut choice = Choice::default();
        // After a (re)start: the higher revision, the pushed one at a tie.
        assert_eq!(
            choice
                .pick(Some(held(2, "a")), Some(held(3, "b")))
                .unwrap()
                .digest,
            "b"
        );
        assert_eq!(
            choice
                .pick(Some(held(4, "c")), Some(held(3, "b")))
                .unwrap()
                .digest,
            "c"
        );
        let mut choice = Choice::default();
        assert_eq!(
            choice
                .pick(Some(held(3, "a")), Some(held(3, "b")))
                .unwrap()
                .digest,
            "b"
        );
        // The volume catches up with newer files at the same revision.
        assert_eq!(
            choice
                .pick(Some(held(3, "c")), Some(held(3, "b")))
                .unwrap()
                .digest,
            "c"
        );
        // Then the stream pushes again: it is the newer.
        assert_eq!(
            choice
                .pick(Some(held(3, "c")), Some(held(3, "d")))
                .unwrap()
                .digest,
            "d"
        );
        // Only one source: that one.
        assert_eq!(choice.pick(None, Some(held(1, "e"))).unwrap().digest, "e");
        assert_eq!(choice.pick(Some(held(1, "f")), None).unwrap().digest, "f");
        assert!(choice.pick(None, None).is_none());
    }

    #[test]
    fn a_configmap_volume_is_read_through_its_data_link() {
        let root = Scratch::new("volume");
        let volume = root.path().join("volume");
        let version = volume.join("..2026_12_06");
        write_volume(&version, &update(5, "v5"));
        std::os::unix::fs::symlink("..2026_12_06", volume.join("..data")).unwrap();
        for key in ["revision", "policy.yaml"] {
            std::os::unix::fs::symlink(format!("..data/{key}"), volume.join(key)).unwrap();
        }
        let held = held_in(&volume).unwrap();
        assert_eq!(held.revision, 5);
        assert_eq!(held.digest, update(5, "v5").digest);
        assert!(held.dir.ends_with("..2026_12_06"));
    }
}
