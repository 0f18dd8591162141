//! The sandbox's Pod, as the API server stored it, run by the pod runner
//! (no kubelet here): the operator's init container, proxy sidecar and
//! `agentgate-exec` enforce the committed policy on a live agent.
//!
//! 1. allowed GET through the proxy, POST outside the policy refused with
//!    the reason, a direct connection that ignores `HTTP_PROXY` redirected
//!    and judged the same, the same GET by another binary refused (the
//!    rule names curl), UDP to a non-DNS port dropped;
//! 2. a PolicyProposal applied reaches the running agent without a
//!    restart; a tightened MaximumPolicy takes it away again;
//! 3. a write outside `readWrite` fails with EACCES, inside succeeds;
//! 4. a refusal a trifecta finding predicted cites the finding (through
//!    TLS interception with the sandbox CA from the pod's CA bundle).
//!
//! Needs root, unshare/nsenter/setpriv/ip/nft/curl/python3 (`make
//! netns-tools`); without them the test fails, it never skips.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agentgate_e2e::pod_runner::{DNS_IP, PodRunner, example_images, example_network};
use agentgate_e2e::{AGENT_IMAGE, ControlPlane};

const CEILING: &str = "apiVersion: agentgate.dev/v1alpha1
kind: MaximumPolicy
metadata: {name: runner-ceiling}
spec:
  selector:
    namespaceSelector: {matchLabels: {team: runner}}
  allowedModes: [ask, auto]
  defaultMode: auto
  policy:
    filesystem:
      readOnly: [/usr, /bin, /lib, /lib64, /etc, /srv]
      readWrite: [/tmp]
    network:
      - name: example
        endpoints:
          - {host: api.example.test, ports: [8080], protocol: rest, rules: [{methods: [GET, POST], path: \"/repos/**\"}]}
      - name: github
        endpoints:
          - {host: api.github.com, ports: [443], protocol: rest, rules: [{methods: [GET], path: \"/repos/**\"}]}
";

const SANDBOX: &str = "apiVersion: v1
kind: Namespace
metadata: {name: runner, labels: {team: runner}}
---
apiVersion: agentgate.dev/v1alpha1
kind: AgentSandbox
metadata: {name: runner-bot, namespace: runner}
spec:
  mode: auto
  agentServiceAccount: runner-bot
  template:
    spec:
      securityContext: {runAsUser: 1000, runAsGroup: 1000}
      volumes: [{name: work, emptyDir: {}}]
      containers:
        - name: agent
          image: IMAGE
          command: [/srv/agent]
          volumeMounts: [{name: work, mountPath: /tmp}]
  policy:
    filesystem:
      readOnly: [/usr, /bin, /lib, /lib64, /etc, /srv]
      readWrite: [/tmp]
    network:
      - name: example-read
        binaries: [/usr/bin/curl]
        endpoints:
          - {host: api.example.test, ports: [8080], protocol: rest, rules: [{methods: [GET], path: \"/repos/**\"}]}
      - name: github-read
        endpoints:
          - {host: api.github.com, ports: [443], protocol: rest, rules: [{methods: [GET], path: \"/repos/**\"}]}
";

const PROPOSAL: &str = "apiVersion: agentgate.dev/v1alpha1
kind: PolicyProposal
metadata: {name: example-write, namespace: runner}
spec:
  sandboxRef: {name: runner-bot}
  rationale: write back to the example API
  requestedBy: e2e-admin
  add:
    network:
      - name: example-write
        endpoints:
          - {host: api.example.test, ports: [8080], protocol: rest, rules: [{methods: [POST], path: \"/repos/**\"}]}
";

/// The agent: a loop of probes, one `PROBE` line per round, and the body of
/// the first refusal of each kind.
const AGENT: &str = r#"#!/bin/bash
n=0
while true; do
  n=$((n+1))
  t=$(date +%s.%N)
  code() { curl -s -o "$1" -w '%{http_code}' --max-time 5 "${@:2}" 2>/dev/null; }
  get=$(code /dev/null http://api.example.test:8080/repos/acme/x)
  post=$(code /tmp/post.body -X POST -d x http://api.example.test:8080/repos/acme/x)
  dget=$(code /dev/null --noproxy '*' http://api.example.test:8080/repos/acme/x)
  dpost=$(code /tmp/dpost.body --noproxy '*' -X POST -d x http://api.example.test:8080/repos/acme/x)
  github=$(code /tmp/github.body -X POST -d '{}' https://api.github.com/repos/acme/widgets/issues/1/comments)
  bget=$(bash -c 'exec 3<>/dev/tcp/api.example.test/8080; printf "GET /repos/acme/x HTTP/1.1\r\nHost: api.example.test:8080\r\nConnection: close\r\n\r\n" >&3; head -1 <&3 | cut -d" " -f2' 2>/dev/null)
  if bash -c "echo x > /dev/udp/10.77.0.2/9999" 2>/dev/null; then udp=sent; else udp=dropped; fi
  if echo x > /tmp/inside 2>/dev/null; then inside=ok; else inside=denied; fi
  outside=$( { echo x > /dev/shm/agentgate-probe; } 2>&1 && echo ok)
  # The first round's details come before its PROBE line: the test reads
  # them once it sees that line.
  if [ $n = 1 ]; then
    echo "OUTSIDE $outside"
    echo "BODY post $(tr -d '\n' < /tmp/post.body)"
    echo "BODY dpost $(tr -d '\n' < /tmp/dpost.body)"
    echo "BODY github $(tr -d '\n' < /tmp/github.body)"
  fi
  echo "PROBE n=$n t=$t get=$get post=$post dget=$dget dpost=$dpost bget=$bget github=$github udp=$udp inside=$inside"
  sleep 0.1
done
"#;

struct Probe {
    started: f64,
    fields: std::collections::BTreeMap<String, String>,
}

fn probes(log: &str) -> Vec<Probe> {
    log.lines()
        .filter_map(|l| l.strip_prefix("PROBE "))
        // A line still being written is not a probe yet.
        .filter(|l| l.contains(" inside="))
        .map(|l| {
            let fields: std::collections::BTreeMap<String, String> = l
                .split(' ')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let started = fields.get("t").and_then(|t| t.parse().ok()).unwrap_or(0.0);
            Probe { started, fields }
        })
        .collect()
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Waits until a probe that started after `since` has `field == want`;
/// returns the seconds from `since` to that probe's start.
fn first_after(runner: &PodRunner, since: f64, field: &str, want: &str) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = runner.log("agent");
        if let Some(p) = probes(&log)
            .into_iter()
            .find(|p| p.started >= since && p.fields.get(field).map(String::as_str) == Some(want))
        {
            return p.started - since;
        }
        if Instant::now() > deadline {
            panic!(
                "no probe with {field}={want} after the change\nagent:\n{}\nproxy:\n{}",
                tail(&log),
                tail(&runner.log("agentgate-proxy"))
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

#[test]
fn the_sandbox_pod_enforces_the_committed_policy() {
    let (cp, operator, _port) = ControlPlane::with_webhook(&[]).unwrap();
    cp.apply_yaml(CEILING).unwrap();
    cp.apply_example_scan().unwrap();
    let sandbox = SANDBOX.replace("IMAGE", AGENT_IMAGE);
    // The webhook answers from its caches: retry until they hold the ceiling.
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = cp.apply_yaml(&sandbox) {
        assert!(
            Instant::now() < deadline,
            "the sandbox was never admitted: {e}\n{}",
            tail(&operator.log())
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    cp.wait_pod("runner", "runner-bot", Duration::from_secs(60))
        .unwrap_or_else(|last| panic!("no pod ({last:?})\n{}", operator.log()));

    // The images (the data plane's binaries, the agent's script) and the
    // pod's network (DNS, an echo upstream).
    let dir = std::env::temp_dir().join(format!("agentgate-pod-runner-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let _cleanup = Cleanup(dir.clone());
    let images = example_images(&dir, AGENT_IMAGE, AGENT).unwrap();
    let netns = example_network(&dir).unwrap();
    let mut runner = PodRunner::start(
        &cp.kubectl_handle(),
        &netns,
        "runner",
        "runner-bot",
        &images,
        &format!("nameserver {DNS_IP}\n"),
    )
    .unwrap_or_else(|e| panic!("{e}\noperator:\n{}", tail(&operator.log())));

    // Scenario 1 and 3 and 4: the first round of probes.
    let deadline = Instant::now() + Duration::from_secs(30);
    while probes(&runner.log("agent")).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the agent never probed:\n{}\nproxy:\n{}",
            runner.log("agent"),
            runner.log("agentgate-proxy")
        );
        assert_eq!(
            runner.wait_exit("agent", Duration::ZERO),
            None,
            "{}",
            runner.log("agent")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = runner.log("agent");
    let context = format!(
        "agent:\n{}\nproxy:\n{}\ninit:\n{}",
        tail(&log),
        tail(&runner.log("agentgate-proxy")),
        runner.log("agentgate-init")
    );
    let first = &probes(&log)[0];
    let field = |name: &str| first.fields.get(name).cloned().unwrap_or_default();
    assert_eq!(
        field("get"),
        "200",
        "allowed GET through HTTP_PROXY: {context}"
    );
    assert_eq!(field("post"), "403", "POST outside the policy: {context}");
    assert_eq!(field("dget"), "200", "direct GET, redirected: {context}");
    assert_eq!(
        field("dpost"),
        "403",
        "direct POST, redirected and judged: {context}"
    );
    assert_eq!(
        field("bget"),
        "403",
        "the same GET by bash, not curl: the proxy (uid 1337, SYS_PTRACE only) told the binaries apart: {context}"
    );
    assert_eq!(field("udp"), "dropped", "UDP to a non-DNS port: {context}");
    assert_eq!(field("inside"), "ok", "write inside readWrite: {context}");
    assert_eq!(field("github"), "403", "intercepted POST: {context}");
    let line = |prefix: &str| {
        log.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_default()
            .to_string()
    };
    let outside = line("OUTSIDE ");
    assert!(
        outside.contains("Permission denied"),
        "a write outside readWrite is EACCES: {outside:?}\n{context}"
    );
    for kind in ["post", "dpost"] {
        let body: serde_json::Value = serde_json::from_str(&line(&format!("BODY {kind} ")))
            .unwrap_or_else(|e| panic!("{kind}: {e}\n{context}"));
        assert_eq!(body["decision"], "deny", "{body}");
        assert!(
            body["reason"].as_str().unwrap_or_default().contains("POST"),
            "the reason names what was refused: {body}"
        );
    }
    // Scenario 4: the sink of the scanned image's finding, refused through
    // TLS interception (curl trusted the sandbox CA from the pod's bundle)
    // and cited.
    let github: serde_json::Value = serde_json::from_str(&line("BODY github "))
        .unwrap_or_else(|e| panic!("github: {e}\n{context}"));
    assert_eq!(github["finding"]["id"], "AG-TRIFECTA", "{github}");
    assert_eq!(github["finding"]["node"], "post_comment", "{github}");

    // Scenario 2: a proposal reaches the running agent, a tightened
    // maximum takes it away; the agent is never restarted.
    let applied_at = now();
    cp.apply_yaml(PROPOSAL).unwrap();
    let gained = first_after(&runner, applied_at, "post", "200");
    let tightened_at = now();
    cp.apply_yaml(&CEILING.replace("methods: [GET, POST]", "methods: [GET]"))
        .unwrap();
    let revoked = first_after(&runner, tightened_at, "post", "403");
    assert_eq!(
        runner.wait_exit("agent", Duration::ZERO),
        None,
        "the agent kept running"
    );
    let rounds = probes(&runner.log("agent"));
    // The ConfigMap changed twice since the first round: the CA bundle is
    // still readable under Landlock, so interception still works.
    let last = rounds.last().map(|p| p.fields.clone()).unwrap_or_default();
    assert_eq!(
        last.get("github").map(String::as_str),
        Some("403"),
        "after the ConfigMap updates: {last:?}\n{}",
        tail(&runner.log("agent"))
    );
    assert!(
        rounds
            .windows(2)
            .all(|w| w[0].fields["n"].parse::<u64>().unwrap() + 1
                == w[1].fields["n"].parse::<u64>().unwrap()),
        "one process, never restarted"
    );
    println!(
        "pod runner: proposal applied → running agent allowed in {gained:.2} s; maximum tightened → refused in {revoked:.2} s (probe rounds of ~{:.2} s)",
        rounds
            .windows(2)
            .map(|w| w[1].started - w[0].started)
            .sum::<f64>()
            / (rounds.len().max(2) - 1) as f64
    );
    drop(runner);
    drop(netns);
    drop(operator);
}

/// Removes the runner's directory however the test ends.
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
