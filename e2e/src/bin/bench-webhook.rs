//! Webhook benchmark (issues 4 and 5): AgentSandbox admission latency over
//! TLS on loopback, for 10- and 100-rule policies under a 100-rule ceiling,
//! `/v1/decide` latency per call, and pod admission at 500 requests/s. The load comes from a separate process
//! (curl, one reused TLS connection, `--rate` for a steady request rate)
//! talking to the operator's webhook directly, as the API server would.
//! Prints numbers; asserts nothing about speed (docs/benchmarks.md records them).

use std::fmt::Write as _;
use std::process::{Command, ExitCode};
use std::time::Duration;

use agentgate_e2e::{ControlPlane, free_loopback_port};

const RATE: &str = "20/s";
const REQUESTS: usize = 200;
/// Pod admission is answered from caches only, so it is driven harder.
const POD_RATE: &str = "500/s";
const POD_REQUESTS: usize = 2000;
const IMAGE: &str = agentgate_e2e::AGENT_IMAGE;

/// An AdmissionReview for creating a pod running IMAGE in `namespace`,
/// owned by the sandbox `owner` (name, uid) when given.
fn pod_review(namespace: &str, variant: usize, owner: Option<(&str, &str)>) -> String {
    let mut metadata =
        serde_json::json!({"name": format!("bot-{variant}"), "namespace": namespace});
    if let Some((name, uid)) = owner {
        metadata["labels"] = serde_json::json!({"agentgate.dev/sandbox": name});
        metadata["ownerReferences"] = serde_json::json!([{
            "apiVersion": "agentgate.dev/v1alpha1", "kind": "AgentSandbox",
            "name": name, "uid": uid, "controller": true
        }]);
    }
    serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": format!("pod-{variant}"),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": format!("bot-{variant}"),
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "bench", "groups": ["system:authenticated"]},
            "object": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": metadata,
                "spec": {"containers": [{"name": "agent", "image": IMAGE}]},
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
    let network: Vec<serde_json::Value> = (0..rules)
        .map(|i| {
            serde_json::json!({
                "name": format!("svc-{i}"),
                "binaries": ["/usr/local/bin/agent"],
                "endpoints": [{
                    "host": format!("api{i}.example.com"),
                    "ports": [443],
                    "protocol": "rest",
                    "rules": [{"methods": ["GET"], "path": format!("/v1/r{variant}/items/**")}],
                }],
            })
        })
        .collect();
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

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// Sends every body to `url` from one curl process at RATE; returns the
/// per-request seconds (the first request, which pays the TLS handshake, is
/// dropped). A non-200 answer is an error.
fn load(
    dir: &std::path::Path,
    ca: &std::path::Path,
    url: &str,
    bodies: &[String],
    expect: &str,
    rate: &str,
) -> Result<Vec<f64>, String> {
    let mut config = String::new();
    for (i, body) in bodies.iter().enumerate() {
        let file = dir.join(format!("body-{i}.json"));
        std::fs::write(&file, body).map_err(|e| e.to_string())?;
        if i > 0 {
            config.push_str("next\n");
        }
        let _ = write!(
            config,
            "url = \"{url}\"\ndata-binary = \"@{}\"\nheader = \"content-type: application/json\"\ncacert = \"{}\"\noutput = \"{}\"\nwrite-out = \"%{{http_code}} %{{time_total}}\\n\"\nnoproxy = \"*\"\n",
            file.display(),
            ca.display(),
            dir.join(format!("answer-{i}.json")).display()
        );
    }
    let config_file = dir.join("curl.cfg");
    std::fs::write(&config_file, config).map_err(|e| e.to_string())?;
    let out = Command::new("curl")
        .args(["-sS", "--rate", rate, "-K"])
        .arg(&config_file)
        .output()
        .map_err(|e| format!("running curl: {e}"))?;
    if !out.status.success() {
        return Err(format!("curl: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let mut times = Vec::new();
    for (i, line) in String::from_utf8_lossy(&out.stdout).lines().enumerate() {
        let (code, seconds) = line.split_once(' ').ok_or("bad curl output")?;
        if code != "200" {
            return Err(format!("request {i}: HTTP {code}"));
        }
        let answer = std::fs::read_to_string(dir.join(format!("answer-{i}.json")))
            .map_err(|e| e.to_string())?;
        if !answer.contains(expect) {
            return Err(format!("request {i}: unexpected answer {answer}"));
        }
        if i > 0 {
            times.push(seconds.parse::<f64>().map_err(|e| e.to_string())?);
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}

fn report(what: &str, times: &[f64]) {
    println!(
        "{what:<44} n={:<4} p50={:>7.2} ms  p99={:>7.2} ms  max={:>7.2} ms",
        times.len(),
        percentile(times, 50.0) * 1e3,
        percentile(times, 99.0) * 1e3,
        times.last().copied().unwrap_or_default() * 1e3
    );
}

fn run() -> Result<(), String> {
    let cp = ControlPlane::start().map_err(|e| e.to_string())?;
    let port = free_loopback_port().map_err(|e| e.to_string())?;
    cp.install_chart(port, &[]).map_err(|e| e.to_string())?;
    let operator = cp
        .start_webhook_operator(port, &[])
        .map_err(|e| e.to_string())?;
    cp.run(&["create", "namespace", "agents"])
        .map_err(|e| e.to_string())?;
    cp.run(&["label", "namespace", "agents", "team=ml"])
        .map_err(|e| e.to_string())?;
    let ceiling_file = cp.dir().join("ceiling.yaml");
    std::fs::write(&ceiling_file, ceiling(100)).map_err(|e| e.to_string())?;
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
        "webhook benchmark: {REQUESTS} requests per row at {RATE}, one TLS connection, ceiling of 100 rules"
    );
    for rules in [10usize, 100] {
        let dir = cp.dir().join(format!("load-{rules}"));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let distinct: Vec<String> = (0..=REQUESTS).map(|v| review(rules, v)).collect();
        let times = load(&dir, &ca, &url, &distinct, "\"allowed\":true", RATE)?;
        report(
            &format!("admission, {rules} rules, distinct (proved)"),
            &times,
        );
        let same: Vec<String> = (0..=REQUESTS).map(|_| review(rules, 0)).collect();
        let times = load(&dir, &ca, &url, &same, "\"allowed\":true", RATE)?;
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
    let bodies: Vec<String> = (0..=REQUESTS).map(|_| body.to_string()).collect();
    let times = load(
        &dir,
        &ca,
        &format!("https://127.0.0.1:{port}/v1/decide"),
        &bodies,
        "\"allow\":true",
        RATE,
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
    let uid = cp
        .run(&[
            "get",
            "asbx",
            "issue-responder",
            "-n",
            "agents",
            "-o",
            "jsonpath={.metadata.uid}",
        ])
        .map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_secs(1));
    let url = format!("https://127.0.0.1:{port}/validate/pods");
    println!("pod admission: {POD_REQUESTS} requests per row at {POD_RATE}, one TLS connection");
    let dir = cp.dir().join("pods-deny");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let bodies: Vec<String> = (0..=POD_REQUESTS)
        .map(|v| pod_review("enforced", v, None))
        .collect();
    let times = load(
        &dir,
        &ca,
        &url,
        &bodies,
        "unfixed trifecta finding",
        POD_RATE,
    )?;
    report("pod admission, unfixed finding (deny)", &times);
    let dir = cp.dir().join("pods-allow");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let bodies: Vec<String> = (0..=POD_REQUESTS)
        .map(|v| pod_review("agents", v, Some(("issue-responder", uid.trim()))))
        .collect();
    let times = load(&dir, &ca, &url, &bodies, "\"allowed\":true", POD_RATE)?;
    report("pod admission, sandbox pod, severed (allow)", &times);
    drop(operator);
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-webhook: {e}");
            ExitCode::FAILURE
        }
    }
}
