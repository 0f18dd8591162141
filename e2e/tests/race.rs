#![allow(clippy::expect_used, clippy::unwrap_used)] // test code: a panic is a failed test
//! Issue 3, scenarios 5 and 6: 20 proposals for one sandbox created at once
//! while the maximum is tightened halfway (and, in the second test, the
//! operator killed in the middle and restarted). At the end: every proposal
//! is decided, each applied one is committed exactly once, and the
//! committed effective policy is proved inside the maximum as it is now.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use agentgate_e2e::{ControlPlane, assets, operator_binary};

/// The sandbox's `(revision, appliedProposals)` as the watch saw them.
type CommitLog = Arc<Mutex<Vec<(u64, Vec<String>)>>>;

/// Records every state of the sandbox's `revision` and `appliedProposals`
/// as the API server reports it (one line per watch event).
fn record_commits(cp: &ControlPlane) -> CommitLog {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut child = Command::new(assets().unwrap().join("kubectl"))
        .arg("--kubeconfig")
        .arg(cp.kubeconfig())
        .args([
            "get",
            "asbx",
            "triage-bot",
            "-n",
            "agents",
            "-w",
            "-o",
            "jsonpath={.status.revision}|{.status.appliedProposals[*].name}{\"\\n\"}",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let sink = seen.clone();
    std::thread::spawn(move || {
        let _child = child;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let Some((revision, applied)) = line.split_once('|') else {
                continue;
            };
            let Ok(revision) = revision.trim().parse() else {
                continue;
            };
            let applied = applied.split_whitespace().map(str::to_string).collect();
            sink.lock().unwrap().push((revision, applied));
        }
    });
    seen
}

/// Every change the watch saw is one commit: the revision goes up by
/// exactly one, and appliedProposals gains at most one name, never loses
/// one, and never changes without a new revision.
fn one_revision_per_commit(states: &[(u64, Vec<String>)]) {
    let mut distinct: Vec<&(u64, Vec<String>)> = Vec::new();
    for state in states {
        if distinct.last().is_none_or(|last| *last != state) {
            distinct.push(state);
        }
    }
    for pair in distinct.windows(2) {
        let ((r1, a1), (r2, a2)) = (pair[0], pair[1]);
        assert_eq!(
            *r2,
            r1 + 1,
            "revision jumped {r1} -> {r2} ({a1:?} -> {a2:?})"
        );
        assert!(
            a2.starts_with(a1),
            "appliedProposals lost or reordered names: {a1:?} -> {a2:?}"
        );
        assert!(
            a2.len() <= a1.len() + 1,
            "two commits in one revision: {a1:?} -> {a2:?}"
        );
    }
    assert!(distinct.len() > 1, "the watch saw no commits: {states:?}");
}

const LIMIT: Duration = Duration::from_secs(120);

fn run(cp: &ControlPlane, args: &[&str]) {
    cp.run(args).expect("kubectl");
}

fn apply(cp: &ControlPlane, yaml: &str) {
    cp.apply_yaml(yaml).expect("kubectl apply");
}

fn get(cp: &ControlPlane, args: &[&str]) -> String {
    let output = cp.kubectl(args).expect("kubectl");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// 20 proposals, each a distinct auto-eligible grant (cost 3 <= budget 4).
fn proposals() -> String {
    (0..20)
        .map(|i| {
            format!(
                "apiVersion: agentgate.dev/v1alpha1
kind: PolicyProposal
metadata: {{name: comment-{i}, namespace: agents}}
spec:
  sandboxRef: {{name: triage-bot}}
  requestedBy: system:serviceaccount:agents:triage-bot
  add:
    network:
      - name: comment-{i}
        binaries: [/usr/bin/gh]
        endpoints:
          - host: api.github.com
            ports: [443]
            protocol: rest
            rules: [{{methods: [POST], path: /repos/acme/repo{i}/issues/*/comments}}]
"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// org-ceiling without POST: comment grants are no longer inside it.
const TIGHTENED: &str = "apiVersion: agentgate.dev/v1alpha1
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

fn applied_count(cp: &ControlPlane) -> usize {
    get(
        cp,
        &[
            "get",
            "pprop",
            "-n",
            "agents",
            "-o",
            "jsonpath={.items[*].status.phase}",
        ],
    )
    .split_whitespace()
    .filter(|p| *p == "Applied")
    .count()
}

/// Waits until every proposal is Applied or Rejected and the sandbox is
/// proved within the maximum as it is now; then checks the commit record.
fn converged(cp: &ControlPlane, logs: &dyn Fn() -> String) {
    let started = Instant::now();
    loop {
        let phases = get(
            cp,
            &[
                "get",
                "pprop",
                "-n",
                "agents",
                "-o",
                "jsonpath={.items[*].status.phase}",
            ],
        );
        let decided = phases
            .split_whitespace()
            .filter(|p| *p == "Applied" || *p == "Rejected")
            .count();
        let within = get(
            cp,
            &[
                "get",
                "asbx",
                "triage-bot",
                "-n",
                "agents",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"WithinMaximum\")].status}",
            ],
        );
        let observed = get(
            cp,
            &[
                "get",
                "asbx",
                "triage-bot",
                "-n",
                "agents",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"WithinMaximum\")].message}",
            ],
        );
        if decided == 20 && (within == "True" || observed.contains("revoked")) {
            break;
        }
        assert!(
            started.elapsed() < LIMIT,
            "not converged: {phases:?} {within:?}\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(300));
    }

    // Each applied proposal is committed exactly once, and only those.
    let listed: Vec<String> = get(
        cp,
        &[
            "get",
            "asbx",
            "triage-bot",
            "-n",
            "agents",
            "-o",
            "jsonpath={.status.appliedProposals[*].name}",
        ],
    )
    .split_whitespace()
    .map(str::to_string)
    .collect();
    let unique: BTreeSet<&String> = listed.iter().collect();
    assert_eq!(
        unique.len(),
        listed.len(),
        "a proposal was committed twice: {listed:?}"
    );
    let names = get(
        cp,
        &[
            "get",
            "pprop",
            "-n",
            "agents",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.status.phase}{\"\\n\"}{end}",
        ],
    );
    let applied: BTreeSet<String> = names
        .lines()
        .filter_map(|l| l.strip_suffix("=Applied"))
        .map(str::to_string)
        .collect();
    assert_eq!(
        applied,
        listed.iter().cloned().collect::<BTreeSet<_>>(),
        "Applied phases and appliedProposals differ"
    );
    let revision: u64 = get(
        cp,
        &[
            "get",
            "asbx",
            "triage-bot",
            "-n",
            "agents",
            "-o",
            "jsonpath={.status.revision}",
        ],
    )
    .trim()
    .parse()
    .unwrap();
    // One per commit; revocations are commits too, so at least this many.
    assert!(
        revision > listed.len() as u64,
        "revision {revision} for {} commits",
        listed.len()
    );

    let rejected = names.lines().filter(|l| l.ends_with("=Rejected")).count();
    eprintln!(
        "race outcome: {} applied, {rejected} rejected, revision {revision}",
        listed.len()
    );

    // The invariant of DESIGN.md §5: the committed policy is inside the
    // maximum as it is now, proved by the same prover CI runs.
    let effective = get(
        cp,
        &[
            "get",
            "asbx",
            "triage-bot",
            "-n",
            "agents",
            "-o",
            "jsonpath={.status.effectivePolicy}",
        ],
    );
    let maximum = get(cp, &["get", "maxpol", "org-ceiling", "-o", "json"]);
    let dir = std::env::temp_dir().join(format!("agentgate-race-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("effective.yaml"), &effective).unwrap();
    std::fs::write(dir.join("maximum.yaml"), &maximum).unwrap();
    let verify = Command::new(operator_binary().unwrap())
        .args(["verify", "--maximum"])
        .arg(dir.join("maximum.yaml"))
        .arg(dir.join("effective.yaml"))
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        verify.status.success(),
        "the committed policy escapes the current maximum:\n{}{}\neffective: {effective}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
}

fn setup(cp: &ControlPlane) {
    cp.install_crds().expect("CRDs");
    run(cp, &["create", "namespace", "agents"]);
    run(cp, &["label", "namespace", "agents", "team=ml"]);
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

fn wait_applied(cp: &ControlPlane, at_least: usize, logs: &dyn Fn() -> String) {
    let started = Instant::now();
    while applied_count(cp) < at_least {
        assert!(
            started.elapsed() < LIMIT,
            "fewer than {at_least} applied\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn concurrent_proposals_while_the_maximum_tightens() {
    let cp = ControlPlane::start().expect("local control plane");
    setup(&cp);
    let op = cp.start_operator().expect("operator");
    let commits = record_commits(&cp);
    apply(&cp, &proposals());
    wait_applied(&cp, 3, &|| op.log());
    apply(&cp, TIGHTENED);
    converged(&cp, &|| op.log());
    std::thread::sleep(Duration::from_millis(500));
    one_revision_per_commit(&commits.lock().unwrap());
}

#[test]
fn operator_killed_mid_race_converges_after_restart() {
    let cp = ControlPlane::start().expect("local control plane");
    setup(&cp);
    let first = cp
        .start_operator_with(&["--lease-duration-seconds", "3", "--identity", "first"])
        .expect("operator");
    apply(&cp, &proposals());
    wait_applied(&cp, 2, &|| first.log());
    drop(first); // SIGKILL, possibly between a sandbox commit and its proposal write
    apply(&cp, TIGHTENED);
    let second = cp
        .start_operator_with(&["--lease-duration-seconds", "3", "--identity", "second"])
        .expect("operator");
    converged(&cp, &|| second.log());
}
