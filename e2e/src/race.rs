//! The proposal race (20 proposals for one sandbox at once) and the
//! checks every race and fault scenario ends with: no proposal lost (each
//! reaches a final phase), none applied twice (each Applied proposal is in
//! `status.appliedProposals` once, and the revision rises by exactly one per
//! commit as a watch sees it), and the invariant of docs/design.md §5: every
//! sandbox's committed effective policy proved by `agentgate verify` inside
//! every MaximumPolicy that governs it now.
#![allow(clippy::panic)] // assertions: a panic is a failed test, with its message

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::wait::Kind;
use crate::{ControlPlane, operator_binary};

/// The namespace of the race (labelled `team=ml`, governed by org-ceiling).
pub const NAMESPACE: &str = "agents";
/// The sandbox the proposals race for (examples/sandbox.yaml).
pub const SANDBOX: &str = "triage-bot";
/// How long convergence may take on a loaded machine.
pub const LIMIT: Duration = Duration::from_secs(120);

/// kubectl's stdout (empty when kubectl fails: the caller's wait or check
/// then says what it expected).
pub fn get(cp: &ControlPlane, args: &[&str]) -> String {
    let output = cp
        .kubectl(args)
        .unwrap_or_else(|e| panic!("kubectl {}: {e}", args.join(" ")));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs kubectl; a failure is a failed test, with kubectl's stderr.
pub fn run(cp: &ControlPlane, args: &[&str]) -> String {
    cp.run(args).unwrap_or_else(|e| panic!("{e}"))
}

/// Proposal `PREFIX-i` for the sandbox, by its agent: a distinct
/// auto-eligible grant (cost 3, within org-ceiling's budget of 4).
pub fn proposal(prefix: &str, i: usize) -> String {
    format!(
        "apiVersion: agentgate.dev/v1alpha1
kind: PolicyProposal
metadata: {{name: {prefix}-{i}, namespace: {NAMESPACE}}}
spec:
  sandboxRef: {{name: {SANDBOX}}}
  requestedBy: system:serviceaccount:{NAMESPACE}:{SANDBOX}
  add:
    network:
      - name: {prefix}-{i}
        binaries: [/usr/bin/gh]
        endpoints:
          - host: api.github.com
            ports: [443]
            protocol: rest
            rules: [{{methods: [POST], path: /repos/acme/{prefix}{i}/issues/*/comments}}]
"
    )
}

/// `n` [`proposal`]s named `PREFIX-i`, as one multi-document manifest.
pub fn proposals(prefix: &str, n: usize) -> String {
    (0..n)
        .map(|i| proposal(prefix, i))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// org-ceiling without POST: comment grants are no longer inside it.
pub const TIGHTENED: &str = "apiVersion: agentgate.dev/v1alpha1
kind: MaximumPolicy
metadata: {name: org-ceiling}
spec:
  selector:
    namespaceSelector: {matchLabels: {team: ml}}
  policy:
    filesystem:
      readOnly: [/usr, /app, /etc/ssl]
      readWrite: [/sandbox, /tmp]
    network:
      - name: github
        binaries: [/usr/bin/gh, /usr/bin/git, /usr/local/bin/agent]
        endpoints:
          - host: api.github.com
            ports: [443]
            protocol: rest
            rules: [{methods: [GET], path: /repos/acme/**}]
  budget: {maxCost: 4}
";

/// The CRDs, namespace `agents` (team ml), org-ceiling and the
/// triage-bot sandbox (examples/).
pub fn setup(cp: &ControlPlane) {
    cp.install_crds().unwrap_or_else(|e| panic!("CRDs: {e}"));
    cp.create_team_namespace()
        .unwrap_or_else(|e| panic!("namespace: {e}"));
    run(
        cp,
        &[
            "apply",
            "-f",
            "examples/maximum.yaml",
            "-f",
            "examples/sandbox.yaml",
        ],
    );
}

/// A field of the sandbox's status (a jsonpath below `.status`).
pub fn sandbox_status(cp: &ControlPlane, path: &str) -> String {
    get(
        cp,
        &[
            "get",
            "asbx",
            SANDBOX,
            "-n",
            NAMESPACE,
            "-o",
            &format!("jsonpath={{.status.{path}}}"),
        ],
    )
}

/// The sandbox's committed revision (0 before its first commit).
pub fn revision(cp: &ControlPlane) -> u64 {
    sandbox_status(cp, "revision").trim().parse().unwrap_or(0)
}

/// Waits until the sandbox has a committed policy; returns its revision.
pub fn wait_committed(cp: &ControlPlane, logs: &dyn Fn() -> String) -> u64 {
    cp.wait_revision(NAMESPACE, SANDBOX, LIMIT, |r| r >= 1)
        .unwrap_or_else(|last| panic!("the sandbox was never committed ({last:?})\n{}", logs()))
}

/// Every proposal of the namespace and its phase (empty before it has one).
pub fn phases(cp: &ControlPlane) -> BTreeMap<String, String> {
    get(
        cp,
        &[
            "get",
            "pprop",
            "-n",
            NAMESPACE,
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.status.phase}{\"\\n\"}{end}",
        ],
    )
    .lines()
    .filter_map(|l| l.split_once('='))
    .map(|(name, phase)| (name.to_string(), phase.to_string()))
    .collect()
}

/// How many proposals are Applied.
pub fn applied_count(cp: &ControlPlane) -> usize {
    phases(cp).values().filter(|p| *p == "Applied").count()
}

/// Waits until at least `at_least` proposals are Applied (the race is under
/// way).
pub fn wait_applied(cp: &ControlPlane, at_least: usize, logs: &dyn Fn() -> String) {
    let started = Instant::now();
    while applied_count(cp) < at_least {
        assert!(
            started.elapsed() < LIMIT,
            "fewer than {at_least} applied: {:?}\n{}",
            phases(cp),
            logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A phase no reconcile moves a proposal out of.
pub fn is_final(phase: &str) -> bool {
    matches!(phase, "Applied" | "Rejected" | "Superseded")
}

/// Waits until there are `expected` proposals and every one is in a final
/// phase (none lost); returns their phases.
pub fn wait_decided(
    cp: &ControlPlane,
    expected: usize,
    logs: &dyn Fn() -> String,
) -> BTreeMap<String, String> {
    let started = Instant::now();
    loop {
        let phases = phases(cp);
        if phases.len() == expected && phases.values().all(|p| is_final(p)) {
            return phases;
        }
        assert!(
            started.elapsed() < LIMIT,
            "not every one of {expected} proposals reached a final phase after {LIMIT:?}: {phases:?}\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Each Applied proposal is in the sandbox's `appliedProposals` exactly
/// once, and only those are; returns them in commit order.
pub fn committed_once(cp: &ControlPlane, logs: &dyn Fn() -> String) -> Vec<String> {
    let listed: Vec<String> = sandbox_status(cp, "appliedProposals[*].name")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let unique: BTreeSet<&String> = listed.iter().collect();
    assert_eq!(
        unique.len(),
        listed.len(),
        "a proposal was committed twice: {listed:?}\n{}",
        logs()
    );
    let applied: BTreeSet<String> = phases(cp)
        .into_iter()
        .filter(|(_, phase)| phase == "Applied")
        .map(|(name, _)| name)
        .collect();
    assert_eq!(
        applied,
        listed.iter().cloned().collect::<BTreeSet<_>>(),
        "Applied phases and appliedProposals differ\n{}",
        logs()
    );
    listed
}

/// Whether a policy document (as JSON) allows nothing: no network rule
/// and no filesystem path.
pub fn grants_nothing(policy: &Value) -> bool {
    let empty = |v: Option<&Value>| match v {
        None | Some(Value::Null) => true,
        Some(Value::Array(items)) => items.is_empty(),
        Some(Value::Object(fields)) => fields
            .values()
            .all(|f| f.is_null() || f.as_array().is_some_and(Vec::is_empty)),
        Some(_) => false,
    };
    empty(policy.get("network")) && empty(policy.get("filesystem"))
}

/// Whether `selector` (a LabelSelector as JSON, absent = everything)
/// selects `labels`. Only `matchLabels` is evaluated; a selector with
/// `matchExpressions` is refused rather than guessed at.
fn selects(selector: Option<&Value>, labels: &Value) -> bool {
    let Some(selector) = selector.filter(|s| !s.is_null()) else {
        return true;
    };
    assert!(
        selector.get("matchExpressions").is_none(),
        "this check evaluates matchLabels only: {selector}"
    );
    selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(|want| want.iter().all(|(k, v)| labels.get(k) == Some(v)))
}

/// The invariant of docs/design.md §5, checked with the real CLI: for every
/// sandbox, the maximums that govern it now (evaluated here from their
/// selectors, and compared with `status.governedBy`), and `agentgate verify
/// --maximum M... EFFECTIVE` on its committed effective policy. A sandbox
/// no maximum governs must be granted nothing.
pub fn verify_committed(cp: &ControlPlane, logs: &dyn Fn() -> String) {
    let parse = |args: &[&str]| -> Value {
        let text = run(cp, args);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("kubectl {args:?}: {e}: {text}"))
    };
    let sandboxes = parse(&["get", "asbx", "-A", "-o", "json"]);
    let maximums = parse(&["get", "maxpol", "-o", "json"]);
    let namespaces = parse(&["get", "namespaces", "-o", "json"]);
    let items = |v: &Value| v["items"].as_array().cloned().unwrap_or_default();
    let ns_labels: BTreeMap<String, Value> = items(&namespaces)
        .iter()
        .map(|ns| {
            (
                ns["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                ns["metadata"]["labels"].clone(),
            )
        })
        .collect();
    let dir = cp.dir().join(format!(
        "verify-{}",
        crate::free_loopback_port().unwrap_or(0)
    ));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let sandboxes = items(&sandboxes);
    let all_maximums = items(&maximums);
    assert!(!sandboxes.is_empty(), "no sandbox to verify");
    for sandbox in &sandboxes {
        let (namespace, name) = (
            sandbox["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default(),
            sandbox["metadata"]["name"].as_str().unwrap_or_default(),
        );
        let status = &sandbox["status"];
        let effective = &status["effectivePolicy"];
        assert!(
            !effective.is_null(),
            "sandbox {namespace}/{name} has no committed policy: {status}\n{}",
            logs()
        );
        let governing: Vec<&Value> = all_maximums
            .iter()
            .filter(|m| {
                let selector = &m["spec"]["selector"];
                selects(
                    selector.get("namespaceSelector"),
                    ns_labels.get(namespace).unwrap_or(&Value::Null),
                ) && selects(
                    selector.get("sandboxSelector"),
                    &sandbox["metadata"]["labels"],
                )
            })
            .collect();
        let names: BTreeSet<&str> = governing
            .iter()
            .filter_map(|m| m["metadata"]["name"].as_str())
            .collect();
        let recorded: BTreeSet<&str> = status["governedBy"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(
            names,
            recorded,
            "sandbox {namespace}/{name}: governedBy disagrees with the maximums' selectors\n{}",
            logs()
        );
        if governing.is_empty() {
            assert!(
                grants_nothing(effective),
                "sandbox {namespace}/{name} is governed by no maximum but is granted {effective}\n{}",
                logs()
            );
            continue;
        }
        let candidate = dir.join(format!("{namespace}-{name}.json"));
        std::fs::write(&candidate, effective.to_string())
            .unwrap_or_else(|e| panic!("{}: {e}", candidate.display()));
        let mut verify = Command::new(operator_binary().unwrap_or_else(|e| panic!("{e}")));
        verify.arg("verify");
        for maximum in &governing {
            let file = dir.join(format!(
                "maximum-{}.json",
                maximum["metadata"]["name"].as_str().unwrap_or_default()
            ));
            std::fs::write(&file, maximum.to_string())
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            verify.arg("--maximum").arg(file);
        }
        let out = verify
            .arg(&candidate)
            .output()
            .unwrap_or_else(|e| panic!("running agentgate verify: {e}"));
        assert!(
            out.status.success(),
            "sandbox {namespace}/{name}: the committed policy escapes {names:?} as they are now:\n{}{}\neffective: {effective}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            logs()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// One state of the sandbox as a watch reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// Which watch saw it (a new one after the API server came back).
    pub session: u32,
    /// `status.revision`.
    pub revision: u64,
    /// `status.appliedProposals[*].name`, in order.
    pub applied: Vec<String>,
    /// The reason of the `WithinMaximum` condition.
    pub within: String,
    /// `metadata.resourceVersion` (etcd's revision of this write: it
    /// orders the sandbox's writes against other objects' writes).
    pub resource_version: u64,
}

/// Records every state of the sandbox's revision, appliedProposals and
/// `WithinMaximum` reason that its watch shows; a break of the watch (the
/// API server went away) starts a new session. Stops on drop.
pub struct CommitRecorder {
    seen: Arc<Mutex<Vec<Observed>>>,
    breaks: Arc<Mutex<String>>,
    _watch: crate::wait::Recording,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What one state of the sandbox is recorded as.
const RECORDED: &str = "{.status.revision}|{.status.appliedProposals[*].name}|{.status.conditions[?(@.type==\"WithinMaximum\")].reason}|{.metadata.resourceVersion}";

/// Starts recording the sandbox's commits.
pub fn record_commits(cp: &ControlPlane) -> CommitRecorder {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let breaks = Arc::new(Mutex::new(String::new()));
    let (into, broken) = (seen.clone(), breaks.clone());
    let watch = cp
        .record_object(
            Kind::SANDBOX,
            NAMESPACE,
            SANDBOX,
            move |session, sandbox| {
                let Some(line) = crate::wait::template(sandbox, RECORDED) else {
                    return;
                };
                let mut fields = line.split('|');
                let (Some(revision), Some(applied), Some(within), Some(rv)) =
                    (fields.next(), fields.next(), fields.next(), fields.next())
                else {
                    return;
                };
                let Ok(revision) = revision.trim().parse() else {
                    return;
                };
                locked(&into).push(Observed {
                    session,
                    revision,
                    applied: applied.split_whitespace().map(str::to_string).collect(),
                    within: within.trim().to_string(),
                    resource_version: rv.trim().parse().unwrap_or(0),
                });
            },
            move |session, error| {
                use std::fmt::Write as _;
                let _ = writeln!(
                    locked(&broken),
                    "[recorder] session {session} broke at {:?}: {error}",
                    std::time::SystemTime::now()
                );
            },
        )
        .unwrap_or_else(|e| panic!("watching the sandbox's commits: {e}"));
    CommitRecorder {
        seen,
        breaks,
        _watch: watch,
    }
}

impl CommitRecorder {
    /// What the watches saw so far.
    pub fn states(&self) -> Vec<Observed> {
        locked(&self.seen).clone()
    }

    /// Waits until a watch has reported a state `done` accepts (a watch
    /// resumed while the API server was coming back reports only once it
    /// is ready); whether it did within `limit`.
    pub fn wait_seen(&self, done: impl Fn(&Observed) -> bool, limit: Duration) -> bool {
        let started = Instant::now();
        while started.elapsed() < limit {
            if locked(&self.seen).iter().any(&done) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// Each break of the watch, with its session and why.
    pub fn log(&self) -> String {
        locked(&self.breaks).clone()
    }

    /// Checks [`one_revision_per_commit`] on what the watches saw.
    pub fn check(&self) {
        one_revision_per_commit(&self.states());
    }
}

/// Every change one watch saw is one commit: the revision goes up by
/// exactly one, and appliedProposals gains at most one name, never loses
/// or reorders one, and never changes without a new revision. Between two
/// watches (the API server was away meanwhile) changes may have gone
/// unseen, so there only: the revision never goes down and rises at least
/// by the number of names gained.
pub fn one_revision_per_commit(states: &[Observed]) {
    let mut distinct: Vec<&Observed> = Vec::new();
    for state in states {
        if distinct
            .last()
            .is_none_or(|last| (last.revision, &last.applied) != (state.revision, &state.applied))
        {
            distinct.push(state);
        }
    }
    for pair in distinct.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        assert!(
            b.applied.starts_with(&a.applied),
            "appliedProposals lost or reordered names: {:?} -> {:?}",
            a.applied,
            b.applied
        );
        let gained = (b.applied.len() - a.applied.len()) as u64;
        if a.session == b.session {
            assert_eq!(
                b.revision,
                a.revision + 1,
                "revision jumped {} -> {} ({:?} -> {:?})",
                a.revision,
                b.revision,
                a.applied,
                b.applied
            );
            assert!(
                gained <= 1,
                "two commits in one revision: {:?} -> {:?}",
                a.applied,
                b.applied
            );
        } else {
            assert!(
                b.revision >= a.revision + gained,
                "across a reconnect the revision went {} -> {} while {gained} commits were added ({:?} -> {:?})",
                a.revision,
                b.revision,
                a.applied,
                b.applied
            );
        }
    }
    assert!(distinct.len() > 1, "the watch saw no commits: {states:?}");
}
