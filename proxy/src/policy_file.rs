//! Reads the committed policy (and `findings.json` beside it) and re-reads
//! it when it changes. Polling the content, not inotify: a ConfigMap volume
//! swaps a `..data` symlink atomically, which inotify on the file itself
//! misses, and a 250 ms read of a few KiB costs nothing. An unreadable or
//! invalid file replaces the policy with "refuse everything" until a valid
//! one appears: the newer revision may be a revocation. The same poll reads
//! the sandbox's credentials (`credentials.json` beside the policy, the
//! secrets and the placeholders; [`crate::credentials`]), so a rotated
//! Secret applies within 250 ms. With a policy stream, the updates it
//! pushed are kept in a directory of their own and the newer of it and the
//! ConfigMap volume is read ([`Choice`], [`crate::delivery`]); a push is
//! read at once, not at the next poll.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agentgate_judgement::delivery::Applied;
use agentgate_judgement::findings::{CompiledFindings, FindingRegions};
use agentgate_policy::compile::{Limits, Role, compile};
use agentgate_policy::load::{DocumentKind, load_document};
use tokio::sync::{Notify, watch};

use crate::credentials::{CredentialSet, CredentialSource, Observed};
use crate::decide::{EnforcedPolicy, Snapshot};
use crate::delivery::{Held, held_in, pushed_in};
use crate::telemetry::Metrics;

/// How often the files are read.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// The policy file and its optional findings beside it.
#[derive(Debug, Clone)]
pub struct PolicySource {
    /// `policy.yaml` (YAML or JSON).
    pub policy: PathBuf,
    /// `findings.json` in the same directory.
    pub findings: PathBuf,
    /// `credentials.json` in the same directory, with the secrets and
    /// placeholders directories when the proxy has them.
    pub credentials: CredentialSource,
    /// `--pushed-policy`: where the policy stream keeps what it pushed
    /// ([`crate::delivery`]); the newer of it and the policy's directory is
    /// read.
    pub pushed: Option<PathBuf>,
}

impl PolicySource {
    /// The source for a policy file.
    pub fn new(policy: &Path) -> PolicySource {
        let findings = policy
            .parent()
            .unwrap_or_else(|| Path::new("."))
            .join("findings.json");
        PolicySource {
            policy: policy.to_path_buf(),
            findings,
            credentials: CredentialSource::beside(policy),
            pushed: None,
        }
    }

    fn read(&self, from: Option<&Held>) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
        match from {
            None => (
                std::fs::read(&self.policy).ok(),
                std::fs::read(&self.findings).ok(),
            ),
            Some(held) => {
                let file = |name: &str| held.files.get(name).map(|text| text.as_bytes().to_vec());
                (
                    self.policy
                        .file_name()
                        .and_then(|name| file(&name.to_string_lossy())),
                    file("findings.json"),
                )
            }
        }
    }

    /// The policy's own directory (the ConfigMap volume).
    fn volume(&self) -> &Path {
        self.policy.parent().unwrap_or_else(|| Path::new("."))
    }
}

/// Which of the volume and the pushed directory to read
/// (docs/design.md §10, "Delivery"): the higher revision; at the same
/// revision (the same policy, while findings, credential declarations or
/// CAs may differ) the one that changed last as this proxy saw it, the
/// pushed one after a restart.
#[derive(Debug, Default)]
pub struct Choice {
    volume: Option<String>,
    pushed: Option<String>,
    volume_fresher: bool,
}

impl Choice {
    /// Picks between what the volume and the pushed directory hold.
    pub fn pick(&mut self, volume: Option<Held>, pushed: Option<Held>) -> Option<Held> {
        let digest = |h: &Option<Held>| h.as_ref().map(|h| h.digest.clone());
        if digest(&volume) != self.volume {
            if self.volume.is_some() {
                self.volume_fresher = true;
            }
            self.volume = digest(&volume);
        }
        if digest(&pushed) != self.pushed {
            self.volume_fresher = false;
            self.pushed = digest(&pushed);
        }
        match (volume, pushed) {
            (Some(v), Some(p)) => {
                if v.revision > p.revision
                    || (v.revision == p.revision && self.volume_fresher && v.digest != p.digest)
                {
                    Some(v)
                } else {
                    Some(p)
                }
            }
            (v, p) => p.or(v),
        }
    }
}

/// Compiles a policy file's text. Only a bare policy document is accepted:
/// a manifest here means the wrong file was mounted.
pub fn compile_policy(text: &[u8]) -> Result<Arc<EnforcedPolicy>, String> {
    let text = std::str::from_utf8(text).map_err(|_| "the policy file is not UTF-8".to_string())?;
    let limits = Limits::default();
    let loaded = load_document(text, &limits).map_err(|e| e.to_string())?;
    if loaded.kind != DocumentKind::Bare {
        return Err(
            "expected the effective policy document (filesystem/network), found a manifest".into(),
        );
    }
    compile(&loaded.policy, Role::Sandbox, &limits)
        .map(|compiled| Arc::new(EnforcedPolicy::new(compiled)))
        .map_err(|r| r.to_string())
}

/// Compiles `findings.json`. Absent is empty; invalid is an error (logged,
/// and refusals then cite nothing; the policy still applies).
pub fn compile_findings(text: Option<&[u8]>) -> Result<CompiledFindings, String> {
    let Some(text) = text else {
        return Ok(CompiledFindings::default());
    };
    let findings: Vec<FindingRegions> =
        serde_json::from_slice(text).map_err(|e| format!("findings.json: {e}"))?;
    CompiledFindings::compile(&findings).map_err(|r| format!("findings.json{r}"))
}

/// Loads once and then follows the files, publishing each change.
pub struct PolicyWatcher {
    source: PolicySource,
    metrics: Arc<Metrics>,
    sender: watch::Sender<Arc<Snapshot>>,
    last: (Option<Vec<u8>>, Option<Vec<u8>>),
    generation: u64,
    credentials: watch::Sender<Arc<CredentialSet>>,
    /// What the last poll read of the credentials; `None` before the first.
    last_credentials: Option<Observed>,
    /// With a policy stream: which source is read, and what is enforced.
    choice: Choice,
    held: Option<Held>,
    applied: watch::Sender<Option<Applied>>,
    /// Notified when the stream wrote an update: read at once.
    wake: Arc<Notify>,
}

impl PolicyWatcher {
    /// Reads the files now and returns the watcher with a receiver of snapshots.
    pub fn start(
        source: PolicySource,
        metrics: Arc<Metrics>,
    ) -> (PolicyWatcher, watch::Receiver<Arc<Snapshot>>) {
        let (sender, receiver) = watch::channel(Arc::new(Snapshot::unloaded()));
        let (credentials, _) = watch::channel(Arc::new(CredentialSet::default()));
        let mut watcher = PolicyWatcher {
            source,
            metrics,
            sender,
            last: (None, None),
            generation: 0,
            credentials,
            last_credentials: None,
            choice: Choice::default(),
            held: None,
            applied: watch::channel(None).0,
            wake: Arc::new(Notify::new()),
        };
        watcher.reload(true);
        (watcher, receiver)
    }

    /// What the proxy enforces, as it reports it to the policy stream
    /// (`None` until a valid policy with a revision is in force).
    pub fn applied(&self) -> watch::Receiver<Option<Applied>> {
        self.applied.subscribe()
    }

    /// What the policy stream notifies when it wrote an update.
    pub fn wake(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// The credentials as each poll finds them; the first were read (and
    /// their placeholders written) by [`PolicyWatcher::start`].
    pub fn credentials(&self) -> watch::Receiver<Arc<CredentialSet>> {
        self.credentials.subscribe()
    }

    /// Re-reads the credentials; publishes them when anything changed (a
    /// declaration, a secret, a placeholder). Logs names and why a
    /// credential cannot be attached, never a value.
    fn reload_credentials(&mut self) {
        let source = &self.source.credentials;
        let observed = source.observe();
        if self.last_credentials.as_ref() == Some(&observed) {
            return;
        }
        let set = source.build(&observed);
        if let Some(text) = observed.declarations() {
            match crate::credentials::parse_declarations(text) {
                Ok(_) => tracing::info!(
                    credentials = set.status().len(),
                    path = %source.declarations.display(),
                    "credentials loaded"
                ),
                Err(e) => tracing::error!(
                    error = %e,
                    "invalid credentials.json: every credential is unavailable, and requests carrying a placeholder are refused"
                ),
            }
        }
        for (name, why) in set.status() {
            if let Some(why) = why {
                tracing::warn!(credential = name, why, "a credential cannot be attached");
            }
        }
        if let Some(why) = &set.not_ready {
            tracing::error!(error = %why, "a placeholder could not be written: not ready");
        }
        self.last_credentials = Some(observed);
        self.credentials.send_replace(Arc::new(set));
    }

    /// Re-reads the files; publishes a new snapshot when they changed.
    pub fn reload(&mut self, first: bool) {
        let chosen = self.source.pushed.clone().and_then(|pushed| {
            self.choice
                .pick(held_in(self.source.volume()), pushed_in(&pushed))
        });
        if let Some(held) = &chosen {
            self.source.credentials.declarations = held.dir.join("credentials.json");
        }
        self.reload_credentials();
        let current = self.source.read(chosen.as_ref());
        let unchanged = !first && current == self.last;
        if chosen != self.held {
            if let Some(held) = &chosen {
                tracing::info!(revision = held.revision, digest = %held.digest, from = %held.dir.display(), "policy source");
            }
            self.held = chosen;
            if unchanged {
                self.report();
            }
        }
        if unchanged {
            return;
        }
        self.generation += 1;
        let policy = match &current.0 {
            Some(text) => compile_policy(text),
            None => Err(format!("cannot read {}", self.source.policy.display())),
        };
        let findings = compile_findings(current.1.as_deref()).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "ignoring findings: refusals will cite no finding");
            CompiledFindings::default()
        });
        match &policy {
            Ok(p) => tracing::info!(
                generation = self.generation,
                rules = p.compiled.rules.len(),
                findings = findings.len(),
                path = %self.source.policy.display(),
                "policy loaded"
            ),
            Err(e) => tracing::error!(
                generation = self.generation,
                error = %e,
                path = %self.source.policy.display(),
                "no valid policy: refusing every connection until a valid one appears"
            ),
        }
        self.metrics.policy_loaded(policy.is_ok(), self.generation);
        self.last = current;
        self.sender.send_replace(Arc::new(Snapshot {
            generation: self.generation,
            policy,
            findings: Arc::new(findings),
        }));
        self.report();
    }

    /// Tells the policy stream what is enforced now: the held update, when
    /// its policy is valid.
    fn report(&self) {
        let valid = self.sender.borrow().policy.is_ok();
        let applied = self.held.as_ref().filter(|_| valid).map(|held| Applied {
            revision: held.revision,
            digest: held.digest.clone(),
        });
        self.applied.send_if_modified(|current| {
            let changed = *current != applied;
            if changed {
                current.clone_from(&applied);
            }
            changed
        });
    }

    /// Polls forever.
    pub async fn run(mut self) {
        let mut tick = tokio::time::interval(POLL_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let wake = self.wake.clone();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = wake.notified() => {}
            }
            self.reload(false);
        }
    }
}
