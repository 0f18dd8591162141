//! Webhook benchmark: AgentSandbox admission latency over
//! TLS on loopback, for 10- and 100-rule policies under a 100-rule ceiling,
//! `/v1/decide` latency per call, and pod admission at 500 requests/s. The load comes from a separate process
//! (curl, one reused TLS connection, `--rate` for a steady request rate)
//! talking to the operator's webhook directly, as the API server would.
//! Prints numbers; asserts nothing about speed (docs/benchmarks.md records them),
//! but every answer is checked and any failure exits non-zero.
//! `AGENTGATE_BENCH_SMOKE=1` (`make bench-smoke`): a few requests per row
//! and small policies, same checks; its numbers are not results.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use agentgate_bench::cluster::{load, report};
use agentgate_e2e::{ControlPlane, free_loopback_port};

const RATE: &str = "20/s";
/// Pod admission is answered from caches only, so it is driven harder.
const POD_RATE: &str = "500/s";
const IMAGE: &str = agentgate_e2e::AGENT_IMAGE;

/// How much load: the full run, or `AGENTGATE_BENCH_SMOKE=1`.
struct Sizes {
    /// Requests per sandbox and /v1/decide row (plus one warm-up).
    requests: usize,
    /// Requests per pod row (plus one warm-up).
    pod_requests: usize,
    /// Rules of the candidate policies, one pair of rows each.
    rules: [usize; 2],
    /// Rules of the ceiling they are proved against.
    ceiling: usize,
}

impl Sizes {
    fn from_env() -> Sizes {
        if std::env::var("AGENTGATE_BENCH_SMOKE").is_ok_and(|v| v == "1") {
            Sizes {
                requests: 4,
                pod_requests: 20,
                rules: [2, 5],
                ceiling: 5,
            }
        } else {
            Sizes {
                requests: 200,
                pod_requests: 2000,
                rules: [10, 100],
                ceiling: 100,
            }
        }
    }
}

/// Who creates the pod of a pod AdmissionReview.
enum PodFrom<'a> {
    /// Someone other than the operator (user `bench`): a pod `bot-{variant}`
    /// owned by no sandbox.
    Other,
    /// The operator, whose identity is `user_info` (the control plane's
    /// kubeconfig user, which the operator runs as), creating the pod of
    /// the sandbox `sandbox` (uid `uid`) exactly as it does: named like the
    /// sandbox, labelled and owned by it, with the spec of the pod the
    /// operator created (the enforced shape, running as its agent
    /// ServiceAccount). Only such a pod is lent the sandbox's severance
    /// proofs.
    Operator {
        user_info: &'a serde_json::Value,
        sandbox: &'a str,
        uid: &'a str,
        spec: &'a serde_json::Value,
    },
}

/// An AdmissionReview for creating a pod running IMAGE in `namespace`.
fn pod_review(namespace: &str, variant: usize, from: &PodFrom) -> String {
    let (name, user_info, metadata, spec) = match *from {
        PodFrom::Other => (
            format!("bot-{variant}"),
            serde_json::json!({"username": "bench", "groups": ["system:authenticated"]}),
            serde_json::json!({"name": format!("bot-{variant}"), "namespace": namespace}),
            serde_json::json!({"containers": [{"name": "agent", "image": IMAGE}]}),
        ),
        PodFrom::Operator {
            user_info,
            sandbox,
            uid,
            spec,
        } => (
            sandbox.to_string(),
            user_info.clone(),
            serde_json::json!({
                "name": sandbox,
                "namespace": namespace,
                "labels": {"agentgate.dev/sandbox": sandbox},
                "ownerReferences": [{
                    "apiVersion": "agentgate.dev/v1alpha1", "kind": "AgentSandbox",
                    "name": sandbox, "uid": uid, "controller": true,
                    "blockOwnerDeletion": true
                }],
            }),
            spec.clone(),
        ),
    };
    serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": format!("pod-{variant}"),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": name,
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": user_info,
            "object": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": metadata,
                "spec": spec,
            },
        },
    })
    .to_string()
}

fn ceiling(rules: usize) -> String {
    let mut out = String::from(
        "apiVersion: agentgate.dev/v1alpha1\nkind: MaximumPolicy\nmetadata: {name: bench-ceiling}\nspec:\n  selector:\n    namespaceSelector: {matchLabels: {team: ml}}\n  allowedModes: [ask, auto]\n  invariants:\n    - name: no-metadata\n      match: {hosts: [metadata.google.internal]}\n  policy:\n    network:\n",
    );
    for i in 0..rules {
        let _ = write!(
            out,
            "      - name: svc-{i}\n        binaries: [/usr/local/bin/agent]\n        endpoints:\n          - host: api{i}.example.com\n            ports: [443]\n            protocol: rest\n            rules:\n              - methods: [GET, POST]\n                path: /v1/**\n"
        );
    }
    out
}

/// An AdmissionReview for creating a sandbox with `rules` rules inside the
/// ceiling; `variant` makes each policy distinct (no answer-cache hits).
fn review(rules: usize, variant: usize) -> String {
    let network = agentgate_bench::rest_rules(
        rules,
        |i| format!("svc-{i}"),
        |i| format!("api{i}.example.com"),
        &["GET"],
        |_| format!("/v1/r{variant}/items/**"),
    );
    serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": format!("bench-{variant}"),
            "kind": {"group": "agentgate.dev", "version": "v1alpha1", "kind": "AgentSandbox"},
            "resource": {"group": "agentgate.dev", "version": "v1alpha1", "resource": "agentsandboxes"},
            "name": "bench",
            "namespace": "agents",
            "operation": "CREATE",
            "userInfo": {"username": "bench", "groups": ["system:authenticated"]},
            "object": {
                "apiVersion": "agentgate.dev/v1alpha1",
                "kind": "AgentSandbox",
                "metadata": {"name": "bench", "namespace": "agents"},
                "spec": {"mode": "ask", "agentServiceAccount": "bench", "policy": {"network": network}},
            },
            "dryRun": false,
        },
    })
    .to_string()
}

fn run() -> Result<(), String> {
    let Sizes {
        requests,
        pod_requests,
        rules: rule_counts,
        ceiling: ceiling_rules,
    } = Sizes::from_env();
    let cp = ControlPlane::start().map_err(|e| e.to_string())?;
    let port = free_loopback_port().map_err(|e| e.to_string())?;
    cp.install_chart(port, &[]).map_err(|e| e.to_string())?;
    let operator = cp
        .start_webhook_operator(port, &[])
        .map_err(|e| e.to_string())?;
    cp.create_team_namespace().map_err(|e| e.to_string())?;
    let ceiling_file = cp.dir().join("ceiling.yaml");
    std::fs::write(&ceiling_file, ceiling(ceiling_rules)).map_err(|e| e.to_string())?;
    let ceiling_path = ceiling_file.display().to_string();
    cp.wait_webhook(&ceiling_path, Duration::from_secs(60))
        .map_err(|e| format!("{e}\n{}", operator.log()))?;
    cp.run(&["apply", "-f", &ceiling_path])
        .map_err(|e| e.to_string())?;
    // Let the webhook's cache see the ceiling.
    std::thread::sleep(Duration::from_secs(2));

    let ca = cp.webhook_ca().map_err(|e| e.to_string())?;

    let url = format!("https://127.0.0.1:{port}/validate/agentsandboxes");
    println!(
        "webhook benchmark: {requests} requests per row at {RATE}, one TLS connection, ceiling of {ceiling_rules} rules"
    );
    for rules in rule_counts {
        let dir = cp.dir().join(format!("load-{rules}"));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let distinct: Vec<String> = (0..=requests).map(|v| review(rules, v)).collect();
        let times = load(&dir, &ca, &url, &distinct, "\"allowed\":true", RATE, None)?;
        report(
            &format!("admission, {rules} rules, distinct (proved)"),
            &times,
        );
        let same: Vec<String> = (0..=requests).map(|_| review(rules, 0)).collect();
        let times = load(&dir, &ca, &url, &same, "\"allowed\":true", RATE, None)?;
        report(
            &format!("admission, {rules} rules, repeated (cached)"),
            &times,
        );
    }

    // /v1/decide over TLS on the committed policy of examples/sandbox.yaml
    // (org-ceiling governs it; the bench ceiling would refuse it).
    cp.run(&["delete", "maxpol", "bench-ceiling"])
        .map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_secs(1));
    cp.run(&["apply", "-f", "examples/maximum.yaml"])
        .map_err(|e| e.to_string())?;
    cp.run(&["apply", "-f", "examples/sandbox.yaml"])
        .map_err(|e| e.to_string())?;
    cp.wait_revision("agents", "triage-bot", Duration::from_secs(30), |r| r >= 1)
        .map_err(|last| format!("sandbox never committed ({last})"))?;
    std::thread::sleep(Duration::from_secs(1));
    let dir = cp.dir().join("decide");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let body = r#"{"sandbox":"triage-bot","namespace":"agents","binary":"/usr/local/bin/agent","host":"api.github.com","port":443,"layer":"rest","method":"GET","path":"/repos/acme/widgets/issues/7"}"#;
    let bodies: Vec<String> = (0..=requests).map(|_| body.to_string()).collect();
    let times = load(
        &dir,
        &ca,
        &format!("https://127.0.0.1:{port}/v1/decide"),
        &bodies,
        "\"allow\":true",
        RATE,
        // The agent asking about its own sandbox.
        cp.token("system:serviceaccount:agents:triage-bot")
            .as_deref(),
    )?;
    report("/v1/decide over TLS (HTTP round trip)", &times);

    // Pod admission: the example agent's scan, an enforce namespace (the
    // finding is unfixed: deny with the witness) and the severed sandbox's
    // own pods (allow), at POD_RATE.
    cp.apply_example_scan().map_err(|e| e.to_string())?;
    cp.create_enforced_namespace("enforced", "enforce")
        .map_err(|e| e.to_string())?;
    cp.run(&["apply", "-f", "examples/agent/sandbox-severed.yaml"])
        .map_err(|e| e.to_string())?;
    cp.wait_findings_clear("agents", "issue-responder", "True", Duration::from_secs(30))
        .map_err(|last| format!("FindingsClear never True ({last})\n{}", operator.log()))?;
    // The sandbox's pod as the operator creates it: the operator's own
    // identity (the chart's ServiceAccount, which the webhook learns the
    // same way), the sandbox's name and its agent account
    // (sandbox-severed.yaml's template names no other).
    let token = cp
        .token(agentgate_e2e::OPERATOR_USER)
        .ok_or("the operator has no token")?;
    let whoami = cp
        .run(&["auth", "whoami", "-o", "json", &format!("--token={token}")])
        .map_err(|e| e.to_string())?;
    let whoami: serde_json::Value =
        serde_json::from_str(&whoami).map_err(|e| format!("kubectl auth whoami: {e}"))?;
    let user_info = &whoami["status"]["userInfo"];
    if !user_info["username"].is_string() {
        return Err(format!("kubectl auth whoami: no username in {whoami}"));
    }
    let sandbox = cp
        .run(&[
            "get",
            "asbx",
            "issue-responder",
            "-n",
            "agents",
            "-o",
            "jsonpath={.metadata.uid} {.spec.agentServiceAccount}",
        ])
        .map_err(|e| e.to_string())?;
    let Some((uid, _account)) = sandbox.trim().split_once(' ') else {
        return Err(format!(
            "issue-responder: uid and agentServiceAccount, got {sandbox:?}"
        ));
    };
    cp.wait_pod("agents", "issue-responder", Duration::from_secs(30))
        .map_err(|last| {
            format!(
                "the sandbox's pod was not created ({last:?})\n{}",
                operator.log()
            )
        })?;
    let stored = cp
        .run(&[
            "get",
            "pod",
            "issue-responder",
            "-n",
            "agents",
            "-o",
            "json",
        ])
        .map_err(|e| e.to_string())?;
    let stored: serde_json::Value =
        serde_json::from_str(&stored).map_err(|e| format!("the sandbox's pod: {e}"))?;
    let spec = &stored["spec"];
    std::thread::sleep(Duration::from_secs(1));
    let url = format!("https://127.0.0.1:{port}/validate/pods");
    println!("pod admission: {pod_requests} requests per row at {POD_RATE}, one TLS connection");
    let dir = cp.dir().join("pods-deny");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let bodies: Vec<String> = (0..=pod_requests)
        .map(|v| pod_review("enforced", v, &PodFrom::Other))
        .collect();
    let times = load(
        &dir,
        &ca,
        &url,
        &bodies,
        "unfixed trifecta finding",
        POD_RATE,
        None,
    )?;
    report("pod admission, unfixed finding (deny)", &times);
    let dir = cp.dir().join("pods-allow");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let operator_pod = PodFrom::Operator {
        user_info,
        sandbox: "issue-responder",
        uid,
        spec,
    };
    let bodies: Vec<String> = (0..=pod_requests)
        .map(|v| pod_review("agents", v, &operator_pod))
        .collect();
    let times = load(&dir, &ca, &url, &bodies, "\"allowed\":true", POD_RATE, None)?;
    report("pod admission, sandbox pod, severed (allow)", &times);
    drop(operator);
    Ok(())
}

fn main() -> ExitCode {
    agentgate_bench::cluster::exit("bench-webhook", run())
}
