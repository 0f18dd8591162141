#![allow(clippy::expect_used, clippy::unwrap_used)] // test code: a panic is a failed test
//! kstatus compliance of every kind, against a real API server: each kind
//! is created in a good and a bad state, the operator reconciles them, and
//! the live objects are judged by the real kstatus library
//! (sigs.k8s.io/cli-utils `status.Compute`, which Flux health checks use;
//! built by e2e/hack/install-kstatus.sh, and when it cannot be built this
//! test fails). Good objects must be Current, bad ones Failed, a proposal
//! awaiting approval InProgress, an object whose new generation the
//! operator has not yet seen InProgress; and `kubectl wait
//! --for=condition=Ready` must succeed for a good sandbox. Once settled,
//! nothing is written while nothing changes.
//!
//! With `AGENTGATE_CAPTURE_DIR=DIR` the judged objects are also written
//! there as `<Kind>-<name>.json`: that is how the `live-*.yaml` testdata of
//! the Argo CD health checks (charts/agentgate/argocd) were captured.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use agentgate_e2e::wait::Kind;
use agentgate_e2e::{ControlPlane, Operator, Watched, repo_root};

const LIMIT: Duration = Duration::from_secs(60);

/// The kstatus checker, built once (e2e/hack/install-kstatus.sh).
fn kstatus_binary() -> PathBuf {
    let script = repo_root().join("e2e/hack/install-kstatus.sh");
    let output = Command::new("bash")
        .arg(&script)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        output.status.success(),
        "install-kstatus.sh exited with {}: the kstatus checker could not be built",
        output.status
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    PathBuf::from(stdout.lines().last().expect("a path").trim())
}

/// `(kind, namespace/name)` → `(status, message)` as kstatus judges the
/// objects in `json` (a kubectl List).
fn judge(kstatus: &PathBuf, json: &str) -> BTreeMap<(String, String), (String, String)> {
    let mut child = Command::new(kstatus)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kstatus");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(json.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kstatus: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let text = |k: &str| v[k].as_str().unwrap_or_default().to_string();
            let name = match text("namespace") {
                ns if ns.is_empty() => text("name"),
                ns => format!("{ns}/{}", text("name")),
            };
            ((text("kind"), name), (text("status"), text("message")))
        })
        .collect()
}

fn run(cp: &ControlPlane, args: &[&str]) {
    cp.run(args).expect("kubectl");
}

fn apply(cp: &ControlPlane, yaml: &str) {
    cp.apply_yaml(yaml).expect("kubectl apply");
}

/// Waits through the watch until the jsonpath `path` of the `kind` named
/// `name` (`namespace/name` for a namespaced one) is `want`.
fn wait(cp: &ControlPlane, op: &Operator, kind: Kind, name: &str, path: &str, want: &str) {
    let (ns, name) = name.split_once('/').unwrap_or(("", name));
    let wanted = want.to_string();
    cp.wait_logged(
        op,
        Watched::Object(kind, ns, name),
        path,
        LIMIT,
        move |s| s == wanted,
        &format!("{kind} {ns}/{name} {path}"),
    );
}

fn condition(type_: &str) -> String {
    format!("{{.status.conditions[?(@.type==\"{type_}\")].status}}")
}

/// A ceiling that allows what its own invariant forbids, governing no
/// namespace here (so it judges nothing else in this test).
const INCONSISTENT: &str = "apiVersion: agentgate.dev/v1alpha1
kind: MaximumPolicy
metadata: {name: inconsistent-ceiling}
spec:
  selector:
    namespaceSelector: {matchLabels: {team: nobody}}
  policy:
    network:
      - name: web
        endpoints: [{host: \"**\", ports: [80, 443]}]
  invariants:
    - name: no-cloud-metadata
      reason: credentials theft
      match: {hosts: [\"169.254.169.254\"]}
";

/// A sandbox no MaximumPolicy governs (its namespace has no team label).
const UNMANAGED: &str = "apiVersion: agentgate.dev/v1alpha1
kind: AgentSandbox
metadata: {name: stray-bot, namespace: elsewhere}
spec:
  agentServiceAccount: stray-bot
";

/// An image whose graph has no trifecta.
const CLEAR_SCAN: &str = "apiVersion: agentgate.dev/v1alpha1
kind: AgentScan
metadata: {name: quiet-bot}
spec:
  image: ghcr.io/acme/quiet-bot@sha256:1111111111111111111111111111111111111111111111111111111111111111
";

#[test]
fn every_kind_is_judged_by_kstatus_as_its_conditions_say() {
    let kstatus = kstatus_binary();
    let cp = ControlPlane::start().expect("local control plane");
    cp.install_crds().expect("CRDs");
    run(&cp, &["create", "namespace", "agents"]);
    run(&cp, &["label", "namespace", "agents", "team=ml"]);
    run(&cp, &["create", "namespace", "elsewhere"]);
    let op = cp.start_operator().expect("operator");

    // Good and bad of each kind.
    run(
        &cp,
        &[
            "apply",
            "-f",
            "examples/maximum.yaml",
            "-f",
            "examples/sandbox.yaml",
            "-f",
            "examples/sandbox-outside.yaml",
            "-f",
            "examples/agent/sandbox.yaml",
        ],
    );
    // The same agent with its sink severed, beside it.
    let severed = std::fs::read_to_string(repo_root().join("examples/agent/sandbox-severed.yaml"))
        .unwrap()
        .replace("  name: issue-responder\n", "  name: severed-responder\n");
    assert!(severed.contains("severed-responder"), "{severed}");
    apply(&cp, &severed);
    apply(&cp, INCONSISTENT);
    apply(&cp, UNMANAGED);
    apply(&cp, CLEAR_SCAN);
    cp.apply_example_scan()
        .expect("the example agent's AgentScan");
    wait(
        &cp,
        &op,
        Kind::SANDBOX,
        "agents/triage-bot",
        "{.status.revision}",
        "1",
    );
    run(
        &cp,
        &[
            "apply",
            "-f",
            "examples/proposals/comment-on-issues.yaml",
            "-f",
            "examples/proposals/post-anywhere.yaml",
            "-f",
            "examples/proposals/update-pull-requests.yaml",
        ],
    );

    // Wait on the domain state (not on Ready, which is under test).
    wait(
        &cp,
        &op,
        Kind::MAXIMUM,
        "org-ceiling",
        &condition("Consistent"),
        "True",
    );
    wait(
        &cp,
        &op,
        Kind::MAXIMUM,
        "inconsistent-ceiling",
        &condition("Consistent"),
        "False",
    );
    wait(
        &cp,
        &op,
        Kind::SANDBOX,
        "agents/reckless-bot",
        &condition("WithinMaximum"),
        "False",
    );
    wait(
        &cp,
        &op,
        Kind::SANDBOX,
        "elsewhere/stray-bot",
        &condition("WithinMaximum"),
        "False",
    );
    wait(
        &cp,
        &op,
        Kind::SANDBOX,
        "agents/issue-responder",
        &condition("FindingsClear"),
        "False",
    );
    wait(
        &cp,
        &op,
        Kind::SANDBOX,
        "agents/severed-responder",
        &condition("FindingsClear"),
        "True",
    );
    wait(
        &cp,
        &op,
        Kind::SCAN,
        "quiet-bot",
        &condition("FindingsClear"),
        "True",
    );
    let scans = cp
        .run(&["get", "ascan", "-o", "jsonpath={.items[*].metadata.name}"])
        .unwrap();
    let example_scan = scans
        .split_whitespace()
        .find(|name| *name != "quiet-bot")
        .unwrap_or_else(|| panic!("the example scan is missing: {scans}"))
        .to_string();
    wait(
        &cp,
        &op,
        Kind::SCAN,
        &example_scan,
        &condition("FindingsClear"),
        "False",
    );
    wait(
        &cp,
        &op,
        Kind::PROPOSAL,
        "agents/comment-on-issues",
        "{.status.phase}",
        "Applied",
    );
    wait(
        &cp,
        &op,
        Kind::PROPOSAL,
        "agents/post-anywhere",
        "{.status.phase}",
        "Rejected",
    );
    wait(
        &cp,
        &op,
        Kind::PROPOSAL,
        "agents/update-pull-requests",
        "{.status.phase}",
        "AwaitingApproval",
    );
    // The commit moved triage-bot to revision 2: wait for its own reconcile.
    wait(
        &cp,
        &op,
        Kind::SANDBOX,
        "agents/triage-bot",
        "{.status.revision}",
        "2",
    );

    let json = cp
        .run(&["get", "maxpol,asbx,pprop,ascan", "-A", "-o", "json"])
        .unwrap();
    let verdicts = judge(&kstatus, &json);
    let want: &[(&str, &str, &str)] = &[
        ("MaximumPolicy", "org-ceiling", "Current"),
        ("MaximumPolicy", "inconsistent-ceiling", "Failed"),
        ("AgentSandbox", "agents/triage-bot", "Current"),
        ("AgentSandbox", "agents/severed-responder", "Current"),
        ("AgentSandbox", "agents/reckless-bot", "Failed"),
        ("AgentSandbox", "elsewhere/stray-bot", "Failed"),
        ("AgentSandbox", "agents/issue-responder", "Failed"),
        ("PolicyProposal", "agents/comment-on-issues", "Current"),
        ("PolicyProposal", "agents/post-anywhere", "Failed"),
        (
            "PolicyProposal",
            "agents/update-pull-requests",
            "InProgress",
        ),
        ("AgentScan", "quiet-bot", "Current"),
        ("AgentScan", example_scan.as_str(), "Failed"),
    ];
    for (kind, name, status) in want {
        let (got, message) = verdicts
            .get(&(kind.to_string(), name.to_string()))
            .unwrap_or_else(|| panic!("kstatus judged no {kind} {name}: {verdicts:?}"));
        assert_eq!(got, status, "{kind} {name}: {message}\n{json}");
    }
    assert_eq!(verdicts.len(), want.len(), "{verdicts:?}");
    // Failed and InProgress carry the deciding condition's message.
    let message =
        |kind: &str, name: &str| verdicts[&(kind.to_string(), name.to_string())].1.clone();
    assert!(
        message("PolicyProposal", "agents/post-anywhere")
            .starts_with("exceeds MaximumPolicy \"org-ceiling\""),
        "{verdicts:?}"
    );
    assert!(
        message("PolicyProposal", "agents/update-pull-requests").contains("review-required region"),
        "{verdicts:?}"
    );
    assert!(
        message("AgentSandbox", "agents/reckless-bot").starts_with("revoked"),
        "{verdicts:?}"
    );
    assert!(
        message("MaximumPolicy", "inconsistent-ceiling").contains("no-cloud-metadata"),
        "{verdicts:?}"
    );
    assert!(
        message("AgentSandbox", "agents/issue-responder").contains("AG-TRIFECTA"),
        "{verdicts:?}"
    );

    if let Some(dir) = std::env::var_os("AGENTGATE_CAPTURE_DIR") {
        let list: serde_json::Value = serde_json::from_str(&json).unwrap();
        for item in list["items"].as_array().unwrap() {
            let name = format!(
                "{}-{}.json",
                item["kind"].as_str().unwrap(),
                item["metadata"]["name"].as_str().unwrap()
            );
            let path = PathBuf::from(&dir).join(name);
            std::fs::write(&path, serde_json::to_string_pretty(item).unwrap()).unwrap();
        }
    }

    // kubectl wait on the good sandbox, and the bad ones' Stalled.
    run(
        &cp,
        &[
            "wait",
            "--for=condition=Ready",
            "asbx/triage-bot",
            "asbx/severed-responder",
            "-n",
            "agents",
            "--timeout=60s",
        ],
    );
    run(
        &cp,
        &[
            "wait",
            "--for=condition=Stalled",
            "asbx/reckless-bot",
            "pprop/post-anywhere",
            "-n",
            "agents",
            "--timeout=60s",
        ],
    );

    // A new generation the operator has not seen yet is InProgress (the
    // operator is paused), then Current again once it has.
    op.pause().expect("pausing the operator");
    run(
        &cp,
        &[
            "patch",
            "asbx",
            "triage-bot",
            "-n",
            "agents",
            "--type=merge",
            "-p",
            r#"{"spec":{"mode":"ask"}}"#,
        ],
    );
    let json = cp
        .run(&["get", "asbx", "triage-bot", "-n", "agents", "-o", "json"])
        .unwrap();
    let key = ("AgentSandbox".to_string(), "agents/triage-bot".to_string());
    let (status, message) = judge(&kstatus, &json)[&key].clone();
    op.resume().expect("resuming the operator");
    assert_eq!(status, "InProgress", "{message}");
    assert!(message.contains("generation is 2"), "{message}");
    wait(
        &cp,
        &op,
        Kind::SANDBOX,
        "agents/triage-bot",
        "{.status.observedGeneration}",
        "2",
    );
    let json = cp
        .run(&["get", "asbx", "triage-bot", "-n", "agents", "-o", "json"])
        .unwrap();
    assert_eq!(judge(&kstatus, &json)[&key].0, "Current", "{json}");

    // The conditions cost no writes of their own: once settled, nothing
    // is written while nothing changes.
    let versions = || {
        cp.run(&[
            "get",
            "maxpol,asbx,pprop,ascan",
            "-A",
            "-o",
            "jsonpath={range .items[*]}{.kind}/{.metadata.name}={.metadata.resourceVersion}{\"\\n\"}{end}",
        ])
        .unwrap()
    };
    std::thread::sleep(Duration::from_secs(2));
    let settled = versions();
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        versions(),
        settled,
        "a status was written while nothing changed\noperator log:\n{}",
        op.log()
    );
}
