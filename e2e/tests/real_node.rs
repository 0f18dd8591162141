//! The product on a real node (docs/testing.md): kube-apiserver with its
//! default admission plugins, kube-controller-manager, kube-scheduler, a
//! kubelet with containerd and runc, kube-proxy. The chart is installed
//! from the image archive this tree builds, so the operator and its webhook
//! run as the chart's Pods, and the sandbox Pod the operator creates is run
//! by the kubelet: the init container installs nftables in the pod's own
//! network namespace, the proxy is a native sidecar, the agent runs under
//! `agentgate-exec`.
//!
//! One behaviour per trial, on one cluster they share (a node takes a
//! minute to boot), run one at a time in this order by a libtest-like
//! harness (`libtest-mimic`: filters, `--list` and `--include-ignored`
//! work as with `cargo test`; the cluster boots at the first trial that
//! runs and goes when the last has):
//! - the node is real: Ready, ServiceAccounts and their CA published by
//!   the controller-manager; the operator's Pods scheduled and running;
//! - on the enforced sandbox `node-bot` (created at the first trial that
//!   needs it): granted requests pass, everything else is refused with the
//!   reason (a direct connection to an IP, another binary, UDP, a write
//!   outside the grant); a proposal reaches the running agent without a
//!   restart, a tightened ceiling takes it away again (pushed over the
//!   policy stream: the kubelet keeps its default one-minute sync), and
//!   the Pod reports the committed revision (`Enforced`); the same,
//!   repeated and timed; `kubectl agentgate lineage` reads the session
//!   from the running proxy, and the refused tool call is an Event on the
//!   sandbox; a held tool call (`mode: ask`) waits while a person decides:
//!   approved it is forwarded, denied or expired it is refused with its
//!   code, and the agent cannot approve its own; the sandbox CA rotated
//!   under the running agent (a CA a day from its end: the next minted,
//!   published and signing) without a restart;
//! - credentials as authority: the agent holds a placeholder, the upstream
//!   receives the real token only where the policy binds it, a placeholder
//!   sent elsewhere is refused (an Event), the agent reads the secret
//!   nowhere, a wider binding waits for review and its approval and the
//!   Secret's rotation take effect without a restart;
//! - the policy stream, against the real TokenReviews: strangers (no token,
//!   another audience, the API token, an unbound policy token) are
//!   refused, and a Pod's token reads only its own sandbox's policy; the
//!   stream cut by the network (packets to and from the operator's Service
//!   dropped in the Pod) while a revocation is committed: once healed, the
//!   revocation arrives and the grant never comes back; one tightened
//!   ceiling over a fleet of running sandboxes: every Pod reports the
//!   revocation and no agent round after its Pod's report is allowed (100
//!   Pods in `make bench-delivery`);
//! - a Pod claiming the sandbox without its enforced shape is refused;
//! - the operator's leader Pod is SIGKILLed by the runtime in the middle of
//!   a proposal burst: no commit lost or doubled, and node-bot's agent,
//!   probing throughout while its proxy's policy stream breaks and is
//!   subscribed again, is refused the revoked grant in every round;
//! - deleting the AgentSandbox deletes its Pod, ConfigMap, Secret,
//!   NetworkPolicy and ServiceAccount (the garbage collector, for real).
//!
//! Needs root, cgroup v1, overlayfs, nftables and the node's binaries
//! (`make node`); without them the test fails, it never skips.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use libtest_mimic::{Arguments, Failed, Trial};

use agentgate_e2e::api_requests;
use agentgate_e2e::cpu::{CpuSample, heaviest};
use agentgate_e2e::node::{Images, NODE_NAME, build_images};
use agentgate_e2e::probe::{
    self, CRED, SECRET_V1, SECRET_V2, credential_manifests, now, probes, tail,
};
use agentgate_e2e::race::{self, NAMESPACE, SANDBOX};
use agentgate_e2e::wait::{self, Kind, names};
use agentgate_e2e::{
    CHART_NAMESPACE, ControlPlane, HarnessError, operator_binary, scan_example_as,
};

/// The sandbox: its agent runs the probe script with the image's bash.
fn sandbox(image: &str) -> String {
    let script = serde_json::to_string(&probe::agent_script()).unwrap();
    probe::sandbox(
        "node",
        image,
        "Never",
        &format!("[/bin/bash, -c, {script}]"),
        None,
    )
}

/// What a failure message wants: the Pods, recent events, the operator
/// Pods' and the kubelet's logs.
fn report(cp: &ControlPlane) -> String {
    let pods = cp
        .run(&["get", "pods", "-A", "-o", "wide"])
        .unwrap_or_default();
    let events = cp
        .run(&["get", "events", "-A", "--sort-by=.lastTimestamp"])
        .map(|e| tail(&e, 25))
        .unwrap_or_default();
    format!(
        "--- pods\n{pods}\n--- events\n{events}\n--- operator\n{}\n--- kubelet\n{}",
        cp.chart_logs(30),
        cp.log_tail("kubelet", 20)
    )
}

/// The images imported, the chart installed from them, and the agent
/// image's scan (the example's findings), without which no sandbox's Pod
/// is admitted.
fn install(cp: &ControlPlane) -> Images {
    let bin_dir = operator_binary().unwrap();
    let images = build_images(bin_dir.parent().unwrap()).unwrap();
    // Held calls expire within the trial (docs/proxy.md, "Held calls").
    cp.install_chart_on_node(&images, &["dataPlane.holdTimeoutSeconds=20"])
        .unwrap_or_else(|e| panic!("{e}\n{}", report(cp)));
    cp.run_stdin(
        &["apply", "-f", "-"],
        &scan_example_as(&images.agent_image, "yaml").unwrap(),
    )
    .unwrap();
    images
}

/// Applies with `apply` until the webhook admits it: each webhook replica
/// admits by its own cache of MaximumPolicies, and the one that answers may
/// not have seen the ceiling yet. Fails after a minute, naming `what`.
fn apply_admitted(cp: &ControlPlane, what: &str, apply: impl Fn() -> Result<String, HarnessError>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(e) = apply() {
        assert!(
            Instant::now() < deadline,
            "{what} was never admitted: {e}\n{}",
            report(cp)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// What only a real control plane and node provide.
fn node_is_real(cp: &ControlPlane) {
    let nodes = cp
        .run(&["get", "nodes", "-o", "jsonpath={.items[*].metadata.name}"])
        .unwrap();
    assert_eq!(nodes, NODE_NAME);
    cp.run(&["create", "namespace", "node-probe"]).unwrap();
    for (kind, name) in [
        (Kind::SERVICE_ACCOUNT, "default"),
        (Kind::CONFIG_MAP, "kube-root-ca.crt"),
    ] {
        cp.wait_object(
            kind,
            "node-probe",
            name,
            Duration::from_secs(60),
            |object| wait::at(object, &["metadata", "name"]),
            |s| !s.is_empty(),
        )
        .unwrap_or_else(|_| panic!("the controller-manager never created {kind} {name}"));
    }
    // A ServiceAccount token, signed by the API server (the demo's hint).
    let token = cp
        .run(&["create", "token", "default", "-n", "node-probe"])
        .unwrap();
    assert_eq!(token.trim().split('.').count(), 3, "a JWT: {token}");
}

/// `jsonpath` over the list of the chart's operator Pods.
fn operator_pods(cp: &ControlPlane, jsonpath: &str) -> String {
    cp.run(&[
        "get",
        "pods",
        "-n",
        CHART_NAMESPACE,
        "-l",
        "app.kubernetes.io/name=agentgate",
        "-o",
        &format!("jsonpath={jsonpath}"),
    ])
    .unwrap()
}

/// The operator's Pods: scheduled onto the node and running from the
/// imported image.
fn operator_pods_run(cp: &ControlPlane) {
    let pods = operator_pods(
        cp,
        "{range .items[*]}{.spec.nodeName} {.status.phase} {.status.containerStatuses[0].imageID}{\"\\n\"}{end}",
    );
    let lines: Vec<&str> = pods.lines().collect();
    assert_eq!(lines.len(), 2, "the chart's two replicas: {pods}");
    for line in lines {
        assert!(
            line.starts_with(&format!("{NODE_NAME} Running ")) && line.contains("sha256:"),
            "an operator Pod on the node, running the imported image: {line}"
        );
    }
}

fn agent_log(cp: &ControlPlane) -> String {
    cp.container_log("node", "node-bot", "agent")
}

fn restarts(cp: &ControlPlane, pod: &str, namespace: &str) -> String {
    cp.run(&[
        "get",
        "pod",
        pod,
        "-n",
        namespace,
        "-o",
        "jsonpath={range .status.initContainerStatuses[*]}{.name}={.restartCount} {end}{range .status.containerStatuses[*]}{.name}={.restartCount} {end}",
    ])
    .unwrap_or_default()
}

/// The enforced sandbox `node/node-bot` that the trials on a running agent
/// share: its ceiling (not yet tightened) and the sandbox; its Pod Ready and its agent's first probe round as the
/// sandbox's own policy says (the POST not granted yet).
fn create_node_bot(cp: &ControlPlane, images: &Images) {
    cp.apply_yaml(&probe::ceiling("node", false)).unwrap();
    let manifest = sandbox(&images.agent_image);
    apply_admitted(cp, "the sandbox", || cp.apply_yaml(&manifest));
    cp.wait_pod_ready("node", "node-bot", Duration::from_secs(180))
        .unwrap_or_else(|last| {
            let previous = cp
                .kubectl(&["logs", "node-bot", "-n", "node", "-c", "agentgate-init", "--previous"])
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            panic!(
                "the sandbox Pod never became Ready ({last:?})\ninit:\n{}{previous}\nproxy:\n{}\n{}",
                cp.container_log("node", "node-bot", "agentgate-init"),
                cp.container_log("node", "node-bot", "agentgate-proxy"),
                report(cp)
            )
        });
    let deadline = Instant::now() + Duration::from_secs(60);
    while probes(&agent_log(cp)).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the agent never probed:\n{}\n{}",
            agent_log(cp),
            report(cp)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    if let Err(e) = probe::check_first_round(&agent_log(cp)) {
        panic!("{e}\n{}", node_bot_context(cp));
    }
}

/// What a failed node-bot trial prints: the agent's and proxy's logs (and
/// the init container's), the cluster's Pods and Events, the operator's
/// and kubelet's logs.
fn node_bot_context(cp: &ControlPlane) -> String {
    let proxy = cp.container_log("node", "node-bot", "agentgate-proxy");
    let init = cp.container_log("node", "node-bot", "agentgate-init");
    format!(
        "agent:\n{}\nproxy:\n{}\ninit:\n{init}\n{}",
        tail(&agent_log(cp), 30),
        tail(&proxy, 30),
        report(cp)
    )
}

/// The sandbox Pod, run by the kubelet, enforces the committed policy: a
/// proposal reaches the running agent without a restart, a tightened
/// ceiling takes it away again, and the Pod reports the committed
/// revision (`Enforced`).
fn enforced_pod(cp: &ControlPlane) {
    let context = || node_bot_context(cp);
    let limit = Duration::from_secs(90);
    let applied_at = now();
    cp.apply_yaml(&probe::write_proposal("node", None)).unwrap();
    let gained = post_seen(cp, applied_at, "200", limit, "the approved POST", &context);
    // The same proposal grants the tool: the running session may call it.
    probe::first_after(|| agent_log(cp), applied_at, "mcp", "forwarded", limit).unwrap_or_else(
        |_| {
            panic!(
                "the approved tool send_money never reached the agent\n{}",
                context()
            )
        },
    );
    let tightened_at = now();
    cp.apply_yaml(&probe::ceiling("node", true)).unwrap();
    let revoked = post_seen(
        cp,
        tightened_at,
        "403",
        limit,
        "the tightened ceiling",
        &context,
    );
    probe::first_after(|| agent_log(cp), tightened_at, "mcp", "refused", limit).unwrap_or_else(
        |_| {
            panic!(
                "the tightened ceiling never took send_money away\n{}",
                context()
            )
        },
    );
    // The Pod reported what it enforces: the committed revision, Applied.
    let enforced = cp
        .wait_object(
            Kind::SANDBOX,
            "node",
            "node-bot",
            Duration::from_secs(30),
            |sandbox| {
                format!(
                    "{} {} {}",
                    wait::at(sandbox, &["status", "revision"]),
                    wait::at(sandbox, &["status", "pods", "0", "revision"]),
                    wait::condition_field(sandbox, "Enforced", "reason")
                )
            },
            |text| {
                let mut parts = text.split(' ');
                let committed = parts.next();
                committed.is_some() && parts.next() == committed && parts.next() == Some("Applied")
            },
        )
        .unwrap_or_else(|last| {
            panic!(
                "the Pod never reported the committed revision (revision, Pod's, Enforced: {last:?})\n{}",
                context()
            )
        });
    let rounds = probes(&agent_log(cp));
    let (period, unbroken) = probe::rounds(&rounds);
    assert!(
        unbroken,
        "one agent process, never restarted\n{}",
        context()
    );
    assert_eq!(
        restarts(cp, "node-bot", "node"),
        "agentgate-init=0 agentgate-proxy=0 agent=0 ",
        "no container restarted\n{}",
        context()
    );
    // The ConfigMap changed twice since the first round: the CA bundle is
    // still readable under Landlock, so interception still works.
    assert_eq!(
        rounds.last().map(|p| p.field("github")).unwrap_or_default(),
        "403",
        "after the ConfigMap updates\n{}",
        context()
    );
    println!(
        "real node: proposal applied → running agent allowed in {gained:.2} s; ceiling tightened → refused in {revoked:.2} s (policy stream; kubelet syncFrequency {} s, probe rounds of ~{period:.2} s); enforced (revision, Pod's, reason): {enforced}",
        agentgate_e2e::node::KUBELET_SYNC_SECONDS
    );
}

/// Has the kubelet sync Pod `pod` now, which rewrites its Secret and
/// ConfigMap volumes: a change to the Pod's annotations starts a sync. The
/// node keeps the default one-minute sync period; the policy needs no
/// nudge (it is pushed), the CA and credential Secrets do, and without it
/// these trials would each wait for the next periodic sync.
fn nudge_kubelet(cp: &ControlPlane, namespace: &str, pod: &str) {
    cp.run(&[
        "annotate",
        "pod",
        pod,
        "-n",
        namespace,
        "--overwrite",
        &format!("e2e.agentgate.dev/nudge={}", now()),
    ])
    .unwrap();
}

/// One HeldCall of the sandbox as listed.
struct HeldCallRow {
    name: String,
    /// Its creationTimestamp, in Unix seconds.
    created: f64,
    /// Empty while pending.
    decision: String,
}

/// The held calls of the sandbox, oldest first.
fn held_calls(cp: &ControlPlane) -> Vec<HeldCallRow> {
    cp.run(&[
        "get",
        "heldcalls",
        "-n",
        "node",
        "--sort-by=.metadata.creationTimestamp",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.metadata.creationTimestamp} {.status.decision}{\"\\n\"}{end}",
    ])
    .unwrap_or_default()
    .lines()
    .filter_map(|line| {
        let mut fields = line.split_whitespace();
        let (name, created) = (fields.next()?, fields.next()?);
        let created =
            time::OffsetDateTime::parse(created, &time::format_description::well_known::Rfc3339)
                .ok()?;
        Some(HeldCallRow {
            name: name.to_string(),
            created: created.unix_timestamp() as f64,
            decision: fields.next().unwrap_or_default().to_string(),
        })
    })
    .collect()
}

/// The agent's newest held call, once one is held and still fresh: an
/// older one may expire (the chart's holdTimeoutSeconds) before a review
/// reaches it, more so on a node busy with other work.
fn next_pending(cp: &ControlPlane, context: &dyn Fn() -> String) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let fresh = held_calls(cp)
            .into_iter()
            .rev()
            .find(|call| call.decision.is_empty() && now() - call.created < 5.0)
            .map(|call| call.name);
        if let Some(name) = fresh {
            return name;
        }
        assert!(
            Instant::now() < deadline,
            "no held call appeared\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The first `HELD` result the agent printed after `since`.
fn held_result_after(cp: &ControlPlane, since: f64, context: &dyn Fn() -> String) -> (String, f64) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let log = agent_log(cp);
        let found = log
            .lines()
            .filter(|l| l.starts_with("HELD "))
            .find_map(|line| {
                let field = |name: &str| {
                    line.split_whitespace()
                        .find_map(|w| w.strip_prefix(&format!("{name}=")))
                        .map(str::to_string)
                };
                let at: f64 = field("t")?.parse().ok()?;
                (at > since).then(|| (field("result").unwrap_or_default(), at))
            });
        if let Some(found) = found {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "the agent printed no held result after {since}\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Held calls on the real node: the agent's `get_statement` (`mode: ask`)
/// waits in the proxy while the operator records it as a HeldCall; a
/// reviewer's approval lets it through, a denial and an expiry refuse it
/// with their codes, the agent cannot approve its own, and the sandbox
/// shows each step as an Event. Returns hold → approved → forwarded, in
/// seconds.
fn held_calls_decided(cp: &ControlPlane, context: &dyn Fn() -> String) -> f64 {
    let plugin = |args: &[&str]| {
        let out = cp.plugin(args).unwrap();
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    // The agent may not decide its own call (nor hold the approve verb).
    let first = next_pending(cp, context);
    let (ok, said) = plugin(&[
        "--as",
        "system:serviceaccount:node:node-bot",
        "approve",
        &format!("heldcall/{first}"),
        "-n",
        "node",
    ]);
    assert!(!ok, "the agent approved its own call: {said}");

    let approved_at = now();
    let (ok, said) = plugin(&["approve", &format!("heldcall/{first}"), "-n", "node"]);
    assert!(ok, "approve: {said}\n{}", context());
    let (result, at) = held_result_after(cp, approved_at, context);
    assert_eq!(result, "forwarded", "the approved call\n{}", context());
    let latency = at - approved_at;

    let second = next_pending(cp, context);
    assert_ne!(second, first);
    let denied_at = now();
    let (ok, said) = plugin(&[
        "deny",
        &format!("heldcall/{second}"),
        "-n",
        "node",
        "--reason",
        "not this month",
    ]);
    assert!(ok, "deny: {said}\n{}", context());
    let (result, _) = held_result_after(cp, denied_at, context);
    assert_eq!(result, "held_call_denied", "the denied call\n{}", context());
    // A decided hold is final.
    let (ok, said) = plugin(&["approve", &format!("heldcall/{second}"), "-n", "node"]);
    assert!(!ok && said.contains("final"), "{said}");

    // Nobody decides the third: it expires (the chart's holdTimeoutSeconds).
    let third = next_pending(cp, context);
    let waited_at = now();
    let (result, at) = held_result_after(cp, waited_at, context);
    assert_eq!(
        result,
        "held_call_expired",
        "the undecided call\n{}",
        context()
    );
    assert!(
        at - waited_at < 60.0,
        "expired after {:.1} s",
        at - waited_at
    );
    let decisions: std::collections::BTreeMap<String, String> = held_calls(cp)
        .into_iter()
        .map(|call| (call.name, call.decision))
        .collect();
    assert_eq!(decisions.get(&first).map(String::as_str), Some("approved"));
    assert_eq!(decisions.get(&second).map(String::as_str), Some("denied"));
    assert_eq!(decisions.get(&third).map(String::as_str), Some("expired"));
    let events = cp
        .run(&[
            "get",
            "events",
            "-n",
            "node",
            "-o",
            "jsonpath={.items[*].reason}",
        ])
        .unwrap_or_default();
    for reason in [
        "CallHeld",
        "HeldCallApproved",
        "HeldCallDenied",
        "HeldCallExpired",
    ] {
        assert!(events.contains(reason), "no {reason} Event: {events}");
    }
    latency
}

/// `kubectl agentgate lineage` reads the running proxy's session through
/// the API server's pod proxy: the tool the agent called is a node of the
/// observed graph, and the refusals the agent just met are listed, the
/// refused call's argument values redacted; the leader publishes the
/// refused tool call as an Event on the sandbox. (The graph's schema is
/// checked against the AgentScan types in proxy/tests/mcp_sdk.rs.)
fn session_lineage(cp: &ControlPlane, context: &dyn Fn() -> String) {
    let run = |args: &[&str]| {
        let out = cp.plugin(args).unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "kubectl agentgate {args:?}: {stdout}{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            context()
        );
        stdout
    };
    let text = run(&["lineage", "node-bot", "-n", "node"]);
    assert!(
        text.contains("pod node/node-bot: record")
            && text.contains("mcp no_rule: tools/call send_money {")
            && text.contains("\"…\""),
        "{text}"
    );
    let graph: serde_json::Value =
        serde_json::from_str(&run(&["lineage", "node-bot", "-n", "node", "-o", "graph"])).unwrap();
    let ids: Vec<&str> = graph["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["id"].as_str())
        .collect();
    assert!(
        ids.contains(&"get_balance"),
        "{graph}\n{text}\n{}",
        context()
    );
    // The leader publishes the refused tool call as an Event on the sandbox.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let events = cp
            .run(&[
                "get",
                "events",
                "-n",
                "node",
                "--field-selector",
                "reason=ToolCallRefused,involvedObject.kind=AgentSandbox,involvedObject.name=node-bot",
                "-o",
                "jsonpath={.items[*].note}{.items[*].message}",
            ])
            .unwrap_or_default();
        if events.contains("no_rule: tools/call send_money {") {
            assert!(
                events.contains("\"…\""),
                "argument values redacted: {events}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no ToolCallRefused Event on the sandbox: {events}\n{}",
            context()
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    assert!(
        graph["edges"].as_array().unwrap().iter().all(|e| {
            ids.contains(&e["from"].as_str().unwrap_or_default())
                && ids.contains(&e["to"].as_str().unwrap_or_default())
        }),
        "{graph}"
    );
}

/// A CA as the operator mints them, with one day of its ten left.
fn expiring_ca() -> (String, String) {
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, "node-bot sandbox CA (expiring)");
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(9);
    params.not_after = now + time::Duration::days(1);
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// `text` without whitespace.
fn squeeze(text: &str) -> String {
    text.chars().filter(|c| !c.is_whitespace()).collect()
}

fn secret_field(cp: &ControlPlane, field: &str) -> String {
    cp.run(&[
        "get",
        "secret",
        "node-bot-ca",
        "-n",
        "node",
        "-o",
        &format!("jsonpath={{.data.{}}}", field.replace('.', "\\.")),
    ])
    .unwrap_or_default()
}

/// The sandbox CA rotated under the running agent. The CA is
/// replaced by one with a day left, so the operator mints the next at once
/// and, that close to the end, signs with it at once too (the scheduled
/// path, a third and a sixth before expiry, is the same code with a year
/// between its steps). The proxy and the agent's bundle follow through
/// their volumes; the agent is never restarted and intercepted TLS works
/// with the new CA. Returns the seconds until it did.
fn ca_rotation(cp: &ControlPlane) -> f64 {
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let (cert, key) = expiring_ca();
    let patch = serde_json::json!({"data": {"tls.crt": b64(&cert), "tls.key": b64(&key)}});
    let replaced_at = now();
    cp.run(&[
        "patch",
        "secret",
        "node-bot-ca",
        "-n",
        "node",
        "--type=merge",
        "-p",
        &patch.to_string(),
    ])
    .unwrap();
    // The operator reads the Secret when it reconciles the sandbox, which it
    // schedules for the CA's next step (a year off): nudge it now.
    cp.run(&[
        "annotate",
        "asbx",
        "node-bot",
        "-n",
        "node",
        "--overwrite",
        &format!("e2e.agentgate.dev/ca-replaced={replaced_at}"),
    ])
    .unwrap();
    let expiring = b64(&cert);
    cp.wait_object(
        Kind::SECRET,
        "node",
        "node-bot-ca",
        Duration::from_secs(60),
        |secret| wait::at(secret, &["data", "previous.crt"]),
        move |previous| previous == expiring,
    )
    .unwrap_or_else(|last| {
        panic!(
            "the operator never rotated the expiring CA (previous.crt {last:?})\n{}",
            report(cp)
        )
    });
    let current = secret_field(cp, "tls.crt");
    assert_ne!(current, b64(&cert), "a new CA signs");
    let new_ca = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(current.trim())
            .unwrap(),
    )
    .unwrap();
    // The CAs are the ConfigMap's, written in the same reconcile; the
    // proxy turns them into the agent's bundle when the kubelet has
    // refreshed the volume.
    let signer = squeeze(&new_ca);
    cp.wait_object(
        Kind::CONFIG_MAP,
        "node",
        "node-bot-policy",
        Duration::from_secs(30),
        |map| wait::at(map, &["data", "sandbox-ca.pem"]),
        // Compared without line breaks: PEM writers differ in them.
        move |bundle| squeeze(bundle).contains(&signer),
    )
    .unwrap_or_else(|_| panic!("the pod's bundle never trusted the new CA\n{}", report(cp)));
    // After the kubelet has refreshed both volumes (the CA Secret and the
    // ConfigMap, each at its next sync of the Pod: up to a minute), the
    // proxy signs with the new CA and the agent trusts it: a round that
    // started after the proxy said both.
    nudge_kubelet(cp, "node", "node-bot");
    let proxy_log = || cp.container_log("node", "node-bot", "agentgate-proxy");
    let deadline =
        Instant::now() + Duration::from_secs(3 * agentgate_e2e::node::KUBELET_SYNC_SECONDS);
    while !(proxy_log().contains("sandbox CA rotated")
        && proxy_log().contains("the agent's CA bundle is rewritten"))
    {
        assert!(
            Instant::now() < deadline,
            "the proxy never took up the rotated CA\n{}\n{}",
            tail(&proxy_log(), 30),
            report(cp)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let settled = now();
    let waited = probe::first_after(
        || agent_log(cp),
        settled,
        "github",
        "403",
        Duration::from_secs(90),
    )
    .unwrap_or_else(|log| {
        panic!(
            "intercepted TLS never worked with the new CA:\n{log}\n{}",
            report(cp)
        )
    });
    assert_eq!(
        restarts(cp, "node-bot", "node"),
        "agentgate-init=0 agentgate-proxy=0 agent=0 ",
        "no container restarted for the rotation"
    );
    let (_, unbroken) = probe::rounds(&probes(&agent_log(cp)));
    assert!(unbroken, "one agent process through the rotation");
    settled + waited - replaced_at
}

/// Seconds from `since` to the first probe round of node-bot's agent whose
/// POST answered `want`; `what` (the change) never reaching the agent
/// fails the test with the context.
fn post_seen(
    cp: &ControlPlane,
    since: f64,
    want: &str,
    limit: Duration,
    what: &str,
    context: &dyn Fn() -> String,
) -> f64 {
    probe::first_after(|| agent_log(cp), since, "post", want, limit)
        .unwrap_or_else(|_| panic!("{what} never reached the agent\n{}", context()))
}

/// Commit → the running agent, repeated (`make bench-delivery`: 20 trials,
/// `AGENTGATE_DELIVERY_TRIALS`; 2 in `make test`): the ceiling loosened, a
/// new proposal applied, the seconds until the agent's first probe round
/// whose POST is allowed; the ceiling tightened, until one is refused. Over
/// the policy stream, the kubelet at its default sync. Printed with p50 and
/// p99 (rounds of about 0.28 s bound the resolution).
fn delivery_trials(cp: &ControlPlane, context: &dyn Fn() -> String) {
    let trials: usize = std::env::var("AGENTGATE_DELIVERY_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let limit = Duration::from_secs(30);
    let (mut gained, mut revoked) = (Vec::new(), Vec::new());
    for trial in 0..trials {
        cp.apply_yaml(&probe::ceiling("node", false)).unwrap();
        let proposal = probe::write_proposal("node", None).replace(
            "name: example-write, namespace",
            &format!("name: example-write-{trial}, namespace"),
        );
        let applied_at = now();
        cp.apply_yaml(&proposal).unwrap();
        let what = format!("trial {trial}: the approved POST");
        gained.push(post_seen(cp, applied_at, "200", limit, &what, context));
        let tightened_at = now();
        cp.apply_yaml(&probe::ceiling("node", true)).unwrap();
        let what = format!("trial {trial}: the tightened ceiling");
        revoked.push(post_seen(cp, tightened_at, "403", limit, &what, context));
    }
    let summary = |name: &str, seconds: Vec<f64>| format!("{name} {}", percentiles(seconds));
    if trials > 0 {
        eprintln!(
            "real node: delivery over {trials} trials (kubelet syncFrequency {} s): {}; {}",
            agentgate_e2e::node::KUBELET_SYNC_SECONDS,
            summary("proposal applied → agent allowed", gained),
            summary("ceiling tightened → agent refused", revoked)
        );
    }
}

/// The policy stream against the real API server's TokenReviews, from the
/// node's network straight to an operator Pod: no token, a token for
/// another audience, a policy token bound to no Pod are refused; a Pod's
/// own bound token reads its own sandbox's committed policy, and the
/// request cannot name another sandbox (the token does).
fn strangers_never_subscribe(cp: &ControlPlane) {
    let ip = operator_pods(cp, "{.items[0].status.podIP}");
    let url = format!("https://{}:9443/v1/policy/stream", ip.trim());
    // Status and the first line of the body, within 3 s.
    let subscribe = |token: Option<&str>| -> (String, String) {
        let header = token.map(|t| format!("Authorization: Bearer {t}"));
        let mut args = vec!["-sk", "--max-time", "3", "-w", "\n%{http_code}"];
        if let Some(h) = &header {
            args.extend(["-H", h.as_str()]);
        }
        args.push(&url);
        let (_, out) = cp.in_node_network("curl", &args).expect("a node");
        let (body, status) = out.rsplit_once('\n').unwrap_or(("", &out));
        (
            status.trim().to_string(),
            body.lines().next().unwrap_or_default().to_string(),
        )
    };
    let token = |args: &[&str]| {
        cp.run(&[&["create", "token"], args].concat())
            .unwrap()
            .trim()
            .to_string()
    };
    assert_eq!(subscribe(None).0, "401", "no token");
    let hold = token(&["node-bot", "-n", "node", "--audience", "agentgate.dev/hold"]);
    assert_eq!(
        subscribe(Some(&hold)).0,
        "401",
        "a token for the hold audience"
    );
    let api = token(&["node-bot", "-n", "node"]);
    assert_eq!(subscribe(Some(&api)).0, "401", "the agent's API token");
    let loose = token(&[
        "node-bot",
        "-n",
        "node",
        "--audience",
        "agentgate.dev/policy",
    ]);
    let (status, body) = subscribe(Some(&loose));
    assert_eq!(status, "403", "a policy token bound to no Pod: {body}");
    // The credentials sandbox's own Pod token reads the credentials
    // sandbox's committed policy, whatever it asks for.
    let own = token(&[
        "cred-bot",
        "-n",
        CRED,
        "--audience",
        "agentgate.dev/policy",
        "--bound-object-kind",
        "Pod",
        "--bound-object-name",
        "cred-bot",
    ]);
    let stream = format!("{url}?namespace=node&sandbox=node-bot");
    let (_, out) = cp
        .in_node_network(
            "curl",
            &[
                "-sk",
                "--max-time",
                "3",
                "-H",
                &format!("Authorization: Bearer {own}"),
                &stream,
            ],
        )
        .expect("a node");
    let first: serde_json::Value =
        serde_json::from_str(out.lines().next().unwrap_or("{}")).unwrap_or_default();
    let committed = cp
        .run(&[
            "get",
            "asbx",
            "cred-bot",
            "-n",
            CRED,
            "-o",
            "jsonpath={.status.policyDigest}",
        ])
        .unwrap();
    assert_eq!(
        first["update"]["digest"].as_str(),
        Some(committed.trim()),
        "cred-bot's token reads cred-bot's committed policy: {out}"
    );
    eprintln!(
        "real node: the policy stream refused no token, the hold audience, the API token and an unbound policy token; a Pod's own token read only its own sandbox's policy"
    );
}

/// Every probe round of node-bot's agent since `from` (across an operator
/// fault) was refused the revoked POST: the proxy never enforced an older,
/// wider revision while its policy stream was down or subscribed again.
fn never_wider_during_the_fault(cp: &ControlPlane, from: f64) {
    let rounds: Vec<probe::Probe> = probes(&agent_log(cp))
        .into_iter()
        .filter(|p| p.started >= from)
        .collect();
    assert!(
        rounds.len() > 5,
        "the agent kept probing through the fault ({} rounds)",
        rounds.len()
    );
    let wider: Vec<String> = rounds
        .iter()
        .filter(|p| p.field("post") != "403")
        .map(|p| format!("{:.2}: post {}", p.started, p.field("post")))
        .collect();
    assert!(
        wider.is_empty(),
        "rounds saw the revoked grant during the operator fault: {wider:?}\n{}",
        report(cp)
    );
    let proxy = cp.container_log("node", "node-bot", "agentgate-proxy");
    eprintln!(
        "real node: {} probe rounds through the operator's fault, every one refused the revoked POST; the proxy subscribed {} times in all",
        rounds.len(),
        proxy.matches("policy stream subscribed").count()
    );
}

/// The pid of a process in Pod `namespace/pod`'s network namespace: its
/// agent container's task, as containerd knows it.
fn pod_task_pid(cp: &ControlPlane, namespace: &str, pod: &str) -> String {
    let id = cp
        .run(&[
            "get",
            "pod",
            pod,
            "-n",
            namespace,
            "-o",
            "jsonpath={.status.containerStatuses[?(@.name==\"agent\")].containerID}",
        ])
        .unwrap();
    let id = id.trim().trim_start_matches("containerd://").to_string();
    let tasks = cp.ctr(&["tasks", "ls"]).unwrap();
    tasks
        .lines()
        .find(|line| line.starts_with(&id))
        .and_then(|line| line.split_whitespace().nth(1))
        .unwrap_or_else(|| panic!("no task for container {id:?}:\n{tasks}"))
        .to_string()
}

/// `nft -f -` of `rules` inside the network namespace of process `pid`.
fn nft_in(pid: &str, rules: &str) {
    use std::io::Write as _;
    let mut child = std::process::Command::new("nsenter")
        .arg(format!("--net=/proc/{pid}/ns/net"))
        .args(["--", "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("nsenter nft");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(rules.as_bytes())
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "nft -f - in {pid}'s network: {rules}");
}

/// The policy stream cut by the network, a revocation committed during the
/// cut: node-bot's Pod drops every packet to and from the operator's
/// Service while the ceiling is tightened. The proxy keeps what it holds
/// (docs/design.md §10 "Delivery": it cannot hear a revocation it is cut
/// from, unless the kubelet's volume brings it); once the network heals the
/// revocation reaches it, and from its first refused round on the agent is
/// never allowed again.
fn stream_cut_by_the_network(cp: &ControlPlane, context: &dyn Fn() -> String) {
    let limit = Duration::from_secs(60);
    cp.apply_yaml(&probe::ceiling("node", false)).unwrap();
    let proposal = probe::write_proposal("node", None).replace(
        "name: example-write, namespace",
        "name: example-write-cut, namespace",
    );
    let applied_at = now();
    cp.apply_yaml(&proposal).unwrap();
    post_seen(
        cp,
        applied_at,
        "200",
        limit,
        "the approval before the cut",
        context,
    );

    let pod = cp
        .run(&["get", "pod", "node-bot", "-n", "node", "-o", "json"])
        .unwrap();
    let stream = pod
        .split('"')
        .find_map(|s| s.strip_prefix("--policy-stream=https://"))
        .and_then(|rest| rest.split('.').next())
        .unwrap_or_else(|| panic!("node-bot's proxy has no --policy-stream"))
        .to_string();
    let service = cp
        .run(&[
            "get",
            "service",
            &stream,
            "-n",
            CHART_NAMESPACE,
            "-o",
            "jsonpath={.spec.clusterIP}",
        ])
        .unwrap();
    let service = service.trim();
    let pid = pod_task_pid(cp, "node", "node-bot");
    let subscribed = || {
        cp.container_log("node", "node-bot", "agentgate-proxy")
            .matches("policy stream subscribed")
            .count()
    };
    let subscriptions = subscribed();
    let revision = cp
        .wait_revision("node", "node-bot", limit, |_| true)
        .unwrap();
    nft_in(
        &pid,
        &format!(
            "table inet e2e_cut {{
  chain out {{ type filter hook output priority -400; ip daddr {service} drop; }}
  chain in {{ type filter hook input priority -400; ip saddr {service} drop; }}
}}
"
        ),
    );
    let cut_at = now();
    cp.apply_yaml(&probe::ceiling("node", true)).unwrap();
    cp.wait_revision("node", "node-bot", limit, move |r| r > revision)
        .unwrap_or_else(|last| {
            panic!("the revocation was never committed ({last})\n{}", context())
        });
    std::thread::sleep(Duration::from_secs(3));
    nft_in(&pid, "delete table inet e2e_cut\n");
    let healed_at = now();
    let refused = post_seen(
        cp,
        healed_at,
        "403",
        limit,
        "the revocation after the cut healed",
        context,
    );
    std::thread::sleep(Duration::from_secs(2));
    let rounds = probes(&agent_log(cp));
    let during = rounds
        .iter()
        .filter(|p| p.started >= cut_at && p.started < healed_at)
        .count();
    let held_wider = rounds
        .iter()
        .filter(|p| p.started >= cut_at && p.started < healed_at && p.field("post") == "200")
        .count();
    let first_refused = rounds
        .iter()
        .find(|p| p.started >= cut_at && p.field("post") == "403")
        .map(|p| p.started)
        .unwrap_or(healed_at);
    let wider: Vec<String> = rounds
        .iter()
        .filter(|p| p.started >= first_refused && p.field("post") != "403")
        .map(|p| format!("{:.2}: post {}", p.started, p.field("post")))
        .collect();
    assert!(
        wider.is_empty(),
        "once refused, the revoked POST came back after the cut: {wider:?}\n{}",
        context()
    );
    eprintln!(
        "real node: policy stream cut for {:.1} s with a revocation committed in it: {held_wider}/{during} rounds in the cut still allowed (what the proxy held); healed → refused in {refused:.2} s, never allowed again; subscriptions {subscriptions} → {}",
        healed_at - cut_at,
        subscribed()
    );
}

/// The fleet's namespace (and team): `make bench-delivery` runs 100
/// sandboxes there, `make test` a few.
const FLEET: &str = "fleet";

/// Seconds since the epoch of an RFC 3339 time as the operator writes it.
fn epoch_seconds(text: &str) -> Option<f64> {
    let at =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    Some(at.unix_timestamp_nanos() as f64 / 1e9)
}

/// When the proxy whose JSON log is `log` began enforcing `revision`: the
/// time of the first "policy loaded" after it took `revision` as its
/// source (it publishes the compiled policy right after that line).
fn enforcing_since(log: &str, revision: u64) -> Option<f64> {
    let mut taken = false;
    for line in log.lines() {
        let Ok(entry) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let message = entry["fields"]["message"].as_str();
        if message == Some("policy source")
            && entry["fields"]["revision"].as_u64() == Some(revision)
        {
            taken = true;
        } else if taken && message == Some("policy loaded") {
            return epoch_seconds(entry["timestamp"].as_str()?);
        }
    }
    None
}

/// `p50 …, p99 …, max …` of `seconds`.
fn percentiles(mut seconds: Vec<f64>) -> String {
    seconds.sort_by(f64::total_cmp);
    let at = |p: f64| seconds[((seconds.len() as f64 - 1.0) * p).round() as usize];
    format!(
        "p50 {:.2} s, p99 {:.2} s, max {:.2} s",
        at(0.5),
        at(0.99),
        at(1.0)
    )
}

/// One tightened ceiling over a fleet of running sandboxes
/// (`AGENTGATE_FLEET_PODS`, 3 by default, 100 in `make bench-delivery`):
/// every Pod reports the revocation's revision (`status.pods`), no agent
/// round that started after its Pod's report was allowed the POST, and
/// every agent was refused it. Printed: tightened → each sandbox's commit
/// (`status.policyCommittedAt`, the operator's share), commit → its Pod's
/// report (the delivery's), tightened → each Pod's report and tightened →
/// each agent's first refused round.
fn fleet_revoked(cp: &ControlPlane, images: &Images) {
    let count: usize = std::env::var("AGENTGATE_FLEET_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    cp.apply_yaml(&probe::ceiling(FLEET, false)).unwrap();
    let manifests = probe::fleet_manifests(FLEET, count, &images.agent_image);
    apply_admitted(cp, "the fleet", || cp.apply_yaml(&manifests));
    let started = Instant::now();
    let limit = Duration::from_secs(120 + 3 * count as u64);
    cp.wait_listed(
        Kind::POD,
        FLEET,
        "",
        limit,
        |pods| {
            pods.iter()
                .map(|pod| wait::condition_status(pod, "Ready"))
                .collect::<Vec<_>>()
                .join(" ")
        },
        |text| text.split_whitespace().filter(|s| *s == "True").count() == count,
    )
    .unwrap_or_else(|last| {
        panic!(
            "the fleet's {count} Pods never all became Ready ({last:?})\n{}",
            report(cp)
        )
    });
    let ready = started.elapsed().as_secs_f64();
    let names: Vec<String> = (0..count).map(|i| format!("{FLEET}-{i}")).collect();
    let log = |pod: &str| cp.container_log(FLEET, pod, "agent");
    let granted_at = now();
    for pod in &names {
        probe::first_after(|| log(pod), granted_at - 60.0, "post", "200", limit)
            .unwrap_or_else(|tail| panic!("{pod}'s agent was never allowed its POST:\n{tail}"));
    }
    // name, committed revision, the Pod's revision, its appliedAt, the
    // commit's policyCommittedAt.
    let committed = |text: &str| -> Vec<(String, u64, u64, String, String)> {
        text.lines()
            .filter_map(|line| {
                let mut f = line.split(' ');
                Some((
                    f.next()?.to_string(),
                    f.next()?.parse().ok()?,
                    f.next()?.parse().ok()?,
                    f.next()?.to_string(),
                    f.next()?.to_string(),
                ))
            })
            .collect()
    };
    // One line per sandbox: name, revision, its Pod's, appliedAt,
    // policyCommittedAt.
    let rows = |sandboxes: &[&serde_json::Value]| {
        sandboxes
            .iter()
            .map(|s| {
                [
                    &["metadata", "name"][..],
                    &["status", "revision"],
                    &["status", "pods", "0", "revision"],
                    &["status", "pods", "0", "appliedAt"],
                    &["status", "policyCommittedAt"],
                ]
                .iter()
                .map(|path| wait::at(s, path))
                .collect::<Vec<_>>()
                .join(" ")
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let statuses = |limit: Duration, done: &dyn Fn(&str) -> bool| {
        cp.wait_listed(Kind::SANDBOX, FLEET, "", limit, rows, done)
    };
    let listed = statuses(Duration::from_secs(30), &|_| true)
        .unwrap_or_else(|_| panic!("the fleet's sandboxes could not be listed"));
    let before: BTreeMap<String, u64> = committed(&listed)
        .into_iter()
        .map(|(name, revision, _, _, _)| (name, revision))
        .collect();
    let requests_before = api_requests::counted(cp).unwrap_or_default();
    let cpu_before = CpuSample::now();
    let tightened_at = now();
    cp.apply_yaml(&probe::ceiling(FLEET, true)).unwrap();
    let reported = statuses(Duration::from_secs(60), &|text| {
        let rows = committed(text);
        rows.len() == count
            && rows.iter().all(|(name, revision, enforced, _, _)| {
                before.get(name).is_some_and(|b| revision > b) && enforced == revision
            })
    })
    .unwrap_or_else(|last| {
        panic!(
            "not every Pod reported the revocation (name, revision, Pod's, appliedAt):\n{last}\n{}",
            report(cp)
        )
    });
    let (cpu_used, busy) = CpuSample::now().since(&cpu_before);
    let requests = api_requests::busiest(
        &requests_before,
        &api_requests::counted(cp).unwrap_or_default(),
        14,
    );
    let mut commits = Vec::new();
    let mut delivered = Vec::new();
    let mut applied = Vec::new();
    let mut refused = Vec::new();
    let mut enforcing = Vec::new();
    let mut unanswered = 0;
    for (name, revision, _, at, committed_at) in committed(&reported) {
        let at = epoch_seconds(&at)
            .unwrap_or_else(|| panic!("{name}: appliedAt {at:?} is no RFC 3339 time"));
        let committed_at = epoch_seconds(&committed_at).unwrap_or_else(|| {
            panic!("{name}: policyCommittedAt {committed_at:?} is no RFC 3339 time")
        });
        commits.push(committed_at - tightened_at);
        delivered.push(at - committed_at);
        applied.push(at - tightened_at);
        let proxy = cp.container_log(FLEET, &name, "agentgate-proxy");
        let since = enforcing_since(&proxy, revision).unwrap_or_else(|| {
            panic!(
                "{name}'s proxy reported revision {revision} but never logged loading it:\n{}",
                probe::tail(&proxy, 20)
            )
        });
        enforcing.push(since - tightened_at);
        // A round that started after the Pod's report sent its POST to a
        // proxy that already enforced the revocation.
        probe::first_after(|| log(&name), at, "post", "403", Duration::from_secs(30))
            .unwrap_or_else(|tail| panic!("{name}'s agent never refused after {at}:\n{tail}"));
        let rounds = probes(&log(&name));
        let after: Vec<&probe::Probe> = rounds.iter().filter(|p| p.started >= at).collect();
        let allowed: Vec<String> = after
            .iter()
            .filter(|p| p.field("post").starts_with('2'))
            .map(|p| format!("{:.2}: post {}", p.started, p.field("post")))
            .collect();
        assert!(
            allowed.is_empty(),
            "{name}: rounds after the Pod reported the revocation at {at} were allowed: {allowed:?}"
        );
        // A round the loaded node answered with neither (000: no answer
        // within the agent's 5 s) is no grant; counted and printed.
        unanswered += after.iter().filter(|p| p.field("post") != "403").count();
        let first = rounds
            .iter()
            .find(|p| p.started >= tightened_at && p.field("post") == "403")
            .map(|p| p.started - tightened_at)
            .unwrap_or_else(|| panic!("{name}: no refused round"));
        refused.push(first);
    }
    eprintln!(
        "real node: fleet of {count} sandbox Pods Ready in {ready:.1} s (the node holds {} Pods); one ceiling tightened → each sandbox's commit {}, its commit → its Pod's report {}, tightened → each Pod's report of the revocation {}; tightened → each proxy enforcing it (its log) {}; each agent's first refused round (rounds of ~1 s) {}; no round after its Pod's report allowed ({unanswered} unanswered under the load); the machine {:.0} % busy from tightened to the last report, CPU by process: {}; the API server's busiest requests in it: {requests}",
        agentgate_e2e::node::MAX_PODS,
        percentiles(commits),
        percentiles(delivered),
        percentiles(applied),
        percentiles(enforcing),
        percentiles(refused),
        busy * 100.0,
        heaviest(&cpu_used, 10)
    );
    cp.run(&["delete", "namespace", FLEET, "--wait=false"])
        .unwrap();
}

/// A Pod that claims the sandbox but lacks its data plane.
fn unconfined_pod_refused(cp: &ControlPlane, images: &Images) {
    let pod = format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: borrowed, namespace: node, labels: {{agentgate.dev/sandbox: node-bot}}}}
spec:
  serviceAccountName: node-bot
  containers: [{{name: agent, image: \"{}\", command: [/bin/sleep, \"60\"]}}]
",
        images.agent_image
    );
    let out = cp.kubectl_stdin(&["apply", "-f", "-"], &pod).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("pods.agentgate.dev"),
        "a Pod claiming the sandbox without its enforced shape was admitted: {stderr}"
    );
}

/// The leader's operator Pod, by the Lease it holds.
fn leader_pod(cp: &ControlPlane) -> String {
    cp.run(&[
        "get",
        "lease",
        "agentgate-leader",
        "-n",
        CHART_NAMESPACE,
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ])
    .unwrap()
    .trim()
    .to_string()
}

/// The leader's container SIGKILLed by the runtime while 20
/// proposals race.
fn operator_killed_mid_burst(cp: &ControlPlane) {
    let logs = || report(cp);
    cp.create_team_namespace().unwrap();
    race::run(cp, &["apply", "-f", "examples/maximum.yaml"]);
    apply_admitted(cp, "the sandbox under its ceiling", || {
        cp.run(&["apply", "-f", "examples/sandbox.yaml"])
    });
    // The webhook checks requestedBy against the requester: the agent
    // proposes, with the chart's agentgate-agent role.
    cp.run(&[
        "create",
        "rolebinding",
        "agent-proposes",
        "-n",
        NAMESPACE,
        "--clusterrole=agentgate-agent",
        &format!("--serviceaccount={NAMESPACE}:{SANDBOX}"),
    ])
    .unwrap();
    let before = race::wait_committed(cp, &logs);
    let commits = race::record_commits(cp);
    let agent = format!("system:serviceaccount:{NAMESPACE}:{SANDBOX}");
    cp.run_stdin(
        &["apply", "-f", "-", "--as", &agent],
        &race::proposals("burst", 20),
    )
    .unwrap_or_else(|e| panic!("the agent's proposals: {e}"));
    race::wait_applied(cp, 2, &logs);
    let leader = leader_pod(cp);
    let container = cp
        .run(&[
            "get",
            "pod",
            &leader,
            "-n",
            CHART_NAMESPACE,
            "-o",
            "jsonpath={.status.containerStatuses[0].containerID}",
        ])
        .unwrap_or_else(|e| panic!("the leader {leader:?} is no Pod: {e}\n{}", logs()));
    let id = container.trim().trim_start_matches("containerd://");
    let applied_at_kill = race::applied_count(cp);
    cp.ctr(&["tasks", "kill", "--signal", "SIGKILL", id])
        .unwrap_or_else(|e| panic!("killing the leader's container: {e}"));
    assert!(
        applied_at_kill < 20,
        "the burst was over before the leader was killed: nothing was tested"
    );
    let phases = race::wait_decided(cp, 20, &logs);
    assert!(
        phases.values().all(|p| p == "Applied"),
        "every proposal is within org-ceiling: {phases:?}\n{}",
        logs()
    );
    assert_eq!(race::committed_once(cp, &logs).len(), 20);
    cp.wait_revision(NAMESPACE, SANDBOX, race::LIMIT, move |r| r >= before + 20)
        .unwrap_or_else(|last| panic!("revision {last}, wanted {}\n{}", before + 20, logs()));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        race::revision(cp),
        before + 20,
        "exactly one revision per commit"
    );
    race::verify_committed(cp, &logs);
    commits.check();
    let restarted = restarts(cp, &leader, CHART_NAMESPACE);
    assert!(
        !restarted.contains("=0 "),
        "the kubelet restarted the killed container: {restarted}"
    );
    eprintln!(
        "real node: leader Pod {leader} SIGKILLed with {applied_at_kill}/20 applied; all 20 committed once; restarts: {restarted}"
    );
}

/// The sandbox's owned objects go with it.
fn deletion_collects_everything(cp: &ControlPlane) {
    cp.run(&["delete", "asbx", "node-bot", "-n", "node", "--wait=false"])
        .unwrap();
    for (kind, name) in [
        (Kind::POD, "node-bot"),
        (Kind::CONFIG_MAP, "node-bot-policy"),
        (Kind::SECRET, "node-bot-ca"),
        (Kind::NETWORK_POLICY, "node-bot-egress"),
        (Kind::SERVICE_ACCOUNT, "node-bot"),
    ] {
        cp.wait_listed(kind, "node", "", Duration::from_secs(120), names, |names| {
            !names.split_whitespace().any(|n| n == name)
        })
        .unwrap_or_else(|left| {
            panic!(
                "{kind} {name} outlived its AgentSandbox ({left:?})\n{}",
                report(cp)
            )
        });
    }
}

/// The proposal that binds the token to comments on acme/app's issues:
/// inside the ceiling's review region, so it waits for a person.
const CRED_PROPOSAL: &str = r#"apiVersion: agentgate.dev/v1alpha1
kind: PolicyProposal
metadata: {name: cred-comments, namespace: cred}
spec:
  sandboxRef: {name: cred-bot}
  rationale: answer on acme/app's issues
  requestedBy: e2e-admin
  add:
    network:
      - name: gh-comments
        binaries: [/usr/bin/curl]
        credentials: [github-token]
        endpoints:
          - {host: api.example.test, ports: [8080], protocol: rest, rules: [{methods: [POST], path: "/repos/acme/app/issues/*/comments"}]}
"#;

fn cred_log(cp: &ControlPlane) -> String {
    cp.container_log(CRED, "cred-bot", "agent")
}

fn cred_rounds(log: &str) -> Vec<probe::Probe> {
    log.split_inclusive('\n')
        .filter_map(|l| l.strip_suffix('\n'))
        .filter_map(|l| l.strip_prefix("CRED "))
        .map(|l| {
            let fields: std::collections::BTreeMap<String, String> = l
                .split(' ')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let started = fields.get("t").and_then(|t| t.parse().ok()).unwrap_or(0.0);
            probe::Probe { started, fields }
        })
        .collect()
}

/// Lines of the upstream's log with the Authorization it received.
fn upstream_auth(cp: &ControlPlane) -> Vec<String> {
    cp.log_tail("upstream", 100_000)
        .lines()
        .filter(|l| l.starts_with("AUTH "))
        .map(str::to_string)
        .collect()
}

/// Credentials as authority (docs/policy-semantics.md §9). The
/// agent holds a placeholder; the upstream receives the real token only
/// on the requests the policy binds it to; the placeholder sent elsewhere
/// is refused (a `CredentialMisuse` Event); the agent reads the secret
/// nowhere (its environment, the proxy's /proc, the kubelet's volume
/// paths) and its ServiceAccount may not get Secrets; a proposal that
/// widens the token's reach waits for review with a counterexample naming
/// it, and its approval takes effect without a restart; a rotated Secret
/// reaches the upstream without one. Returns seconds from the Secret's
/// rotation to the upstream's first request with the new value.
fn credentials_attached(cp: &ControlPlane, images: &Images) -> f64 {
    let manifests = credential_manifests(&images.agent_image);
    apply_admitted(cp, "the credentials sandbox", || cp.apply_yaml(&manifests));
    cp.wait_pod_ready(CRED, "cred-bot", Duration::from_secs(180))
        .unwrap_or_else(|last| {
            panic!(
                "the credentials Pod never became Ready ({last:?})\nproxy:\n{}\n{}",
                cp.container_log(CRED, "cred-bot", "agentgate-proxy"),
                report(cp)
            )
        });
    let context = || {
        format!(
            "agent:\n{}\nproxy:\n{}\nupstream:\n{}\n{}",
            tail(&cred_log(cp), 20),
            tail(&cp.container_log(CRED, "cred-bot", "agentgate-proxy"), 30),
            upstream_auth(cp).join("\n"),
            report(cp)
        )
    };
    let first_round = || {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(round) = cred_rounds(&cred_log(cp)).into_iter().next() {
                return round;
            }
            assert!(
                Instant::now() < deadline,
                "the agent never probed\n{}",
                context()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    let round = first_round();
    for (field, want) in [
        ("envok", "yes"),
        ("bound", "200"),
        ("unbound", "403"),
        ("misuse", "403"),
        ("write", "403"),
        ("leak", "none"),
    ] {
        assert_eq!(round.field(field), want, "{field}\n{}", context());
    }
    let log = cred_log(cp);
    let body = |kind: &str| -> serde_json::Value {
        serde_json::from_str(&probe::line_after(&log, &format!("BODY {kind} "))).unwrap_or_default()
    };
    assert_eq!(body("unbound")["code"], "no_rule", "{}", context());
    assert!(
        body("unbound")["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("no rule binding credential github-token"),
        "{}",
        context()
    );
    assert_eq!(body("misuse")["code"], "credential_misuse", "{}", context());
    // The upstream saw the real token on the bound path only, never the
    // placeholder.
    let auth = upstream_auth(cp);
    assert!(
        auth.iter()
            .any(|l| l == &format!("AUTH GET /repos/acme/app/issues Bearer {SECRET_V1}")),
        "{}",
        context()
    );
    assert!(
        auth.iter()
            .all(|l| l.starts_with("AUTH GET /repos/acme/") && !l.contains("agentgate-placeholder")),
        "{}",
        context()
    );
    // The agent's account may not read the Secret through the API
    // (`can-i` answers "no" and exits 1).
    let can = cp
        .kubectl(&[
            "auth",
            "can-i",
            "get",
            "secret/github",
            "-n",
            CRED,
            "--as",
            "system:serviceaccount:cred:cred-bot",
        ])
        .unwrap();
    let answer = String::from_utf8_lossy(&can.stdout).trim().to_string();
    assert_eq!(answer, "no", "the agent may read the Secret: {can:?}");
    // Misuse is an Event on the sandbox (published on the operator's poll).
    cp.wait_listed(
        Kind::EVENT,
        CRED,
        "reason=CredentialMisuse",
        Duration::from_secs(60),
        names,
        |s| !s.is_empty(),
    )
    .unwrap_or_else(|last| panic!("no CredentialMisuse Event: {last}\n{}", context()));
    // The status shows the token's reach and that it is available.
    let reach = cp
        .run(&[
            "get",
            "asbx",
            "cred-bot",
            "-n",
            CRED,
            "-o",
            "jsonpath={.status.credentials[0].available} {.status.credentials[0].reach[0]}",
        ])
        .unwrap_or_default();
    assert!(
        reach.starts_with("true gh-read: GET api.example.test:8080/repos/acme/** by /usr/bin/curl"),
        "{reach}"
    );

    // A wider binding waits for a person, with the credential named.
    cp.run(&[
        "create",
        "rolebinding",
        "carol-reviews",
        "-n",
        CRED,
        "--clusterrole=agentgate-reviewer",
        "--user=carol",
    ])
    .unwrap();
    cp.apply_yaml(CRED_PROPOSAL).unwrap();
    cp.wait_proposal_phase(
        CRED,
        "cred-comments",
        "AwaitingApproval",
        Duration::from_secs(60),
    )
    .unwrap_or_else(|last| panic!("proposal phase {last}\n{}", context()));
    let shown = cp
        .run(&[
            "get",
            "pprop",
            "cred-comments",
            "-n",
            CRED,
            "-o",
            "jsonpath={.status.newAuthority}",
        ])
        .unwrap_or_default();
    assert!(shown.contains("\"credential\":\"github-token\""), "{shown}");
    let approved_at = now();
    let out = cp
        .plugin(&["approve", "cred-comments", "-n", CRED, "--as", "carol"])
        .unwrap();
    assert!(
        out.status.success(),
        "approve: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    probe::first_round_after(
        || cred_log(cp),
        cred_rounds,
        approved_at,
        "write",
        "200",
        Duration::from_secs(90),
    )
    .unwrap_or_else(|_| {
        panic!(
            "the approved binding never reached the agent\n{}",
            context()
        )
    });
    assert!(
        upstream_auth(cp).iter().any(
            |l| l == &format!("AUTH POST /repos/acme/app/issues/1/comments Bearer {SECRET_V1}")
        ),
        "{}",
        context()
    );

    // Rotation: the next bound request carries the new value, no restart.
    let rotated_at = Instant::now();
    cp.run(&[
        "patch",
        "secret",
        "github",
        "-n",
        CRED,
        "--type=merge",
        "-p",
        &format!(r#"{{"stringData":{{"token":"{SECRET_V2}"}}}}"#),
    ])
    .unwrap();
    nudge_kubelet(cp, CRED, "cred-bot");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !upstream_auth(cp)
        .iter()
        .any(|l| l.ends_with(&format!("Bearer {SECRET_V2}")))
    {
        assert!(
            Instant::now() < deadline,
            "the rotated Secret never reached the upstream\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let rotation = rotated_at.elapsed().as_secs_f64();
    assert_eq!(
        restarts(cp, "cred-bot", CRED),
        "agentgate-init=0 agentgate-proxy=0 agent=0 ",
        "no container restarted\n{}",
        context()
    );
    // Nothing the proxy said holds the secret.
    let proxy_log = cp.container_log(CRED, "cred-bot", "agentgate-proxy");
    assert!(
        !proxy_log.contains("e2e-github-secret"),
        "the proxy logged the secret"
    );
    let events = cp
        .run(&[
            "get",
            "events",
            "-n",
            CRED,
            "-o",
            "jsonpath={.items[*].message}",
        ])
        .unwrap_or_default();
    assert!(
        !events.contains("e2e-github-secret"),
        "an Event holds the secret"
    );
    assert!(
        cred_rounds(&cred_log(cp))
            .iter()
            .all(|r| r.field("leak") == "none"),
        "the agent read the secret\n{}",
        context()
    );
    rotation
}

/// The cluster every trial shares, booted at the first trial that needs
/// it and torn down (its processes killed, its node's mounts and network
/// namespace gone) when the last trial has run.
#[derive(Default)]
struct Cluster {
    booted: OnceLock<Result<Booted, String>>,
}

/// A booted cluster: the node Ready, the chart installed from this tree's
/// images.
struct Booted {
    cp: ControlPlane,
    images: Images,
    /// Seconds from the start to the node Ready, and to the chart running.
    booted_in: f64,
    installed_in: f64,
    node_bot: OnceLock<Result<(), String>>,
}

impl Cluster {
    /// The booted cluster, booting it on the first call; a boot that
    /// failed fails every trial with its reason, and is not tried again.
    fn get(&self) -> Result<&Booted, Failed> {
        self.booted
            .get_or_init(|| {
                let started = Instant::now();
                caught(|| {
                    let cp = ControlPlane::start_with_node().unwrap_or_else(|e| panic!("{e}"));
                    let booted_in = started.elapsed().as_secs_f64();
                    let images = install(&cp);
                    Booted {
                        cp,
                        images,
                        booted_in,
                        installed_in: started.elapsed().as_secs_f64(),
                        node_bot: OnceLock::new(),
                    }
                })
            })
            .as_ref()
            .map_err(|e| format!("the cluster did not boot: {e}").into())
    }

    /// The cluster when a trial booted it.
    fn booted(&self) -> Option<&Booted> {
        self.booted.get().and_then(|b| b.as_ref().ok())
    }
}

impl Booted {
    /// `node/node-bot` ([`create_node_bot`]), created on the first call.
    fn node_bot(&self) -> Result<(), Failed> {
        self.node_bot
            .get_or_init(|| caught(|| create_node_bot(&self.cp, &self.images)))
            .clone()
            .map_err(|e| format!("node-bot never ran: {e}").into())
    }
}

/// `run`'s value, or the message it panicked with.
fn caught<T>(run: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).map_err(|payload| {
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".to_string())
    })
}

/// What a trial needs of the cluster.
enum Needs {
    /// The cluster.
    Cluster(fn(&Booted)),
    /// The cluster and `node/node-bot` running.
    NodeBot(fn(&Booted)),
}

/// The trials, in the order they run: one behaviour each. They share the
/// cluster, which is the expensive part (a node takes a minute to boot),
/// and the trials marked [`Needs::NodeBot`] share node-bot's running agent:
/// each leaves the POST grant revoked, as it found it (a filter that runs
/// one of them alone runs it on a fresh node-bot, whose POST is not
/// granted yet). Garbage collection deletes node-bot, so it runs last.
fn trials() -> Vec<(&'static str, Needs)> {
    vec![
        (
            "cluster::the_node_is_real",
            Needs::Cluster(|b| node_is_real(&b.cp)),
        ),
        (
            "cluster::the_operator_runs_as_the_charts_pods",
            Needs::Cluster(|b| operator_pods_run(&b.cp)),
        ),
        (
            "sandbox_pod::grants_and_revocations_reach_the_running_agent",
            Needs::NodeBot(|b| enforced_pod(&b.cp)),
        ),
        (
            "sandbox_pod::delivery_at_the_kubelets_default_sync",
            Needs::NodeBot(|b| delivery_trials(&b.cp, &|| node_bot_context(&b.cp))),
        ),
        (
            "sandbox_pod::lineage_read_from_the_running_proxy",
            Needs::NodeBot(|b| session_lineage(&b.cp, &|| node_bot_context(&b.cp))),
        ),
        (
            "held_calls::a_person_decides_never_the_agent",
            Needs::NodeBot(|b| {
                let approved = held_calls_decided(&b.cp, &|| node_bot_context(&b.cp));
                eprintln!(
                    "real node: held call approved → forwarded to the waiting agent in {approved:.2} s"
                );
            }),
        ),
        (
            "sandbox_ca::rotated_under_the_running_agent",
            Needs::NodeBot(|b| {
                let rotated = ca_rotation(&b.cp);
                eprintln!(
                    "real node: sandbox CA rotated under the running agent; intercepted TLS with the new CA within {rotated:.1} s"
                );
            }),
        ),
        (
            "credentials::the_secret_attached_only_where_bound",
            Needs::Cluster(|b| {
                let rotation = credentials_attached(&b.cp, &b.images);
                eprintln!(
                    "real node: the placeholder's secret attached only where bound; Secret rotated → upstream saw the new value in {rotation:.1} s"
                );
            }),
        ),
        (
            "policy_stream::strangers_never_subscribe",
            Needs::NodeBot(|b| strangers_never_subscribe(&b.cp)),
        ),
        (
            "policy_stream::cut_by_the_network_mid_revocation",
            Needs::NodeBot(|b| stream_cut_by_the_network(&b.cp, &|| node_bot_context(&b.cp))),
        ),
        (
            "policy_stream::delivery_of_one_tightened_ceiling_to_a_fleet",
            Needs::Cluster(|b| fleet_revoked(&b.cp, &b.images)),
        ),
        (
            "admission::a_pod_without_the_enforced_shape_is_refused",
            Needs::NodeBot(|b| unconfined_pod_refused(&b.cp, &b.images)),
        ),
        (
            "operator::leader_killed_mid_burst_nothing_lost_nothing_wider",
            // node-bot's agent keeps probing while the operator's leader
            // is killed (its proxy's stream breaks and is subscribed
            // again): not one round may see the revoked grant again.
            Needs::NodeBot(|b| {
                let fault_from = now();
                operator_killed_mid_burst(&b.cp);
                never_wider_during_the_fault(&b.cp, fault_from);
            }),
        ),
        (
            "garbage_collection::the_sandbox_takes_what_it_owns",
            Needs::NodeBot(|b| deletion_collects_everything(&b.cp)),
        ),
    ]
}

/// libtest's arguments (filters, `--list`, `--include-ignored`), one trial
/// at a time in [`trials`]'s order: they share one node.
fn main() -> ExitCode {
    let mut args = Arguments::from_args();
    args.test_threads = Some(1);
    let started = Instant::now();
    let cluster = Arc::new(Cluster::default());
    let trials = trials()
        .into_iter()
        .map(|(name, needs)| {
            let cluster = cluster.clone();
            Trial::test(name, move || {
                let booted = cluster.get()?;
                match needs {
                    Needs::Cluster(run) => run(booted),
                    Needs::NodeBot(run) => {
                        booted.node_bot()?;
                        run(booted)
                    }
                }
                Ok(())
            })
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    if let Some(booted) = cluster.booted() {
        eprintln!(
            "real node: booted in {:.1} s, chart running {:.1} s, all trials {:.1} s",
            booted.booted_in,
            booted.installed_in,
            started.elapsed().as_secs_f64()
        );
    }
    // The last reference: the cluster goes before the process does.
    drop(cluster);
    conclusion.exit_code()
}
