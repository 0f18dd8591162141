//! Scale benchmark, on the local control plane with the chart
//! installed and the operator (controllers and webhook, as the chart's
//! ServiceAccount) running as one process:
//!
//! - 1,000 AgentSandboxes in 50 namespaces, governed by 3 MaximumPolicies
//!   (one over every namespace, one per tier of half of them; invariants
//!   and a review region), each with a 20-rule policy and one applied
//!   proposal;
//! - operator RSS and CPU at rest;
//! - AgentSandbox admission p50/p99 with all of them in the caches, sent
//!   to the webhook over TLS from a separate curl process;
//! - a PolicyProposal burst across 100 different sandboxes: commits/s;
//! - the organisation ceiling tightened (port 8443 dropped): time until
//!   every sandbox's `status.verifiedAgainst` shows its new generation,
//!   with every proposal grant on 8443 revoked and the declared rules
//!   kept; operator peak RSS and CPU during that storm;
//! - reconciles started over an idle window (5 minutes).
//!
//! Prints numbers; asserts nothing about speed (docs/benchmarks.md records
//! them), but a wrong outcome (a grant not revoked, a proposal not
//! applied) exits non-zero. `AGENTGATE_BENCH_SMOKE=1` (`make
//! bench-smoke`): 12 sandboxes, same checks; its numbers are not results.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use agentgate_bench::cluster::{load, report, watch_lines};
use agentgate_e2e::{ControlPlane, Operator, free_loopback_port};

/// How much: the full run, or `AGENTGATE_BENCH_SMOKE=1`.
struct Sizes {
    sandboxes: usize,
    namespaces: usize,
    burst: usize,
    admissions: usize,
    idle: Duration,
    limit: Duration,
}

impl Sizes {
    fn from_env() -> Sizes {
        if std::env::var("AGENTGATE_BENCH_SMOKE").is_ok_and(|v| v == "1") {
            Sizes {
                sandboxes: 12,
                namespaces: 3,
                burst: 6,
                admissions: 4,
                idle: Duration::from_secs(3),
                limit: Duration::from_secs(120),
            }
        } else {
            Sizes {
                sandboxes: 1000,
                namespaces: 50,
                burst: 100,
                admissions: 200,
                idle: Duration::from_secs(300),
                limit: Duration::from_secs(900),
            }
        }
    }
}

const RULES: usize = 20;

fn namespace_of(i: usize, namespaces: usize) -> String {
    format!("bench-{:02}", i % namespaces)
}

fn tier(ns_index: usize) -> &'static str {
    if ns_index.is_multiple_of(2) { "a" } else { "b" }
}

fn maximums(org_ports: &str) -> String {
    let mut out = format!(
        "apiVersion: agentgate.dev/v1alpha1
kind: MaximumPolicy
metadata: {{name: bench-org}}
spec:
  selector: {{namespaceSelector: {{matchLabels: {{agentgate-bench: \"yes\"}}}}}}
  allowedModes: [ask, auto]
  policy:
    filesystem: {{readOnly: [/usr, /app], readWrite: [/sandbox, /tmp]}}
    network:
      - name: web
        binaries: [/usr/local/bin/agent]
        endpoints:
          - host: \"**.example.com\"
            ports: {org_ports}
            protocol: rest
            rules: [{{methods: [GET, POST], path: \"/**\"}}]
          - host: \"**.example.com\"
            ports: [443]
            protocol: rest
            path: /admin/**
            access: read-write
            review: {{required: true, reason: admin APIs change things}}
  invariants:
    - name: no-cloud-metadata
      match: {{hosts: [metadata.google.internal, \"169.254.169.254\"]}}
"
    );
    for t in ["a", "b"] {
        let _ = write!(
            out,
            "---
apiVersion: agentgate.dev/v1alpha1
kind: MaximumPolicy
metadata: {{name: bench-tier-{t}}}
spec:
  selector: {{namespaceSelector: {{matchLabels: {{agentgate-bench: \"yes\", tier: {t}}}}}}}
  policy:
    filesystem: {{readOnly: [/usr, /app], readWrite: [/sandbox, /tmp]}}
    network:
      - name: web
        binaries: [/usr/local/bin/agent]
        endpoints:
          - {{host: \"**.example.com\", ports: [443, 8443], protocol: rest, rules: [{{methods: [GET, POST], path: \"/**\"}}]}}
  invariants:
    - name: no-corp
      match: {{hosts: [\"*.corp.invalid\"]}}
"
        );
    }
    out
}

/// Sandbox `i` with its 20-rule policy (hosts differ per sandbox, so no
/// proof is a cache hit of another's), as JSON (which kubectl reads as
/// YAML too).
fn sandbox_value(i: usize, namespaces: usize) -> serde_json::Value {
    let network = agentgate_bench::rest_rules(
        RULES,
        |k| format!("r{k}"),
        |k| format!("api{k}.s{i}.example.com"),
        &["GET"],
        |_| "/v1/**".to_string(),
    );
    serde_json::json!({
        "apiVersion": "agentgate.dev/v1alpha1",
        "kind": "AgentSandbox",
        "metadata": {"name": format!("bot-{i}"), "namespace": namespace_of(i, namespaces)},
        "spec": {
            "mode": "auto",
            "agentServiceAccount": format!("bot-{i}"),
            "policy": {
                "filesystem": {"readOnly": ["/app"], "readWrite": ["/sandbox"]},
                "network": network,
            },
        },
    })
}

fn sandbox(i: usize, namespaces: usize) -> String {
    sandbox_value(i, namespaces).to_string()
}

fn proposal(name: &str, i: usize, namespaces: usize, port: u16) -> String {
    format!(
        "apiVersion: agentgate.dev/v1alpha1
kind: PolicyProposal
metadata: {{name: {name}-{i}, namespace: {ns}, labels: {{agentgate-bench: {name}}}}}
spec:
  sandboxRef: {{name: bot-{i}}}
  requestedBy: e2e-admin
  add:
    network:
      - name: {name}
        binaries: [/usr/local/bin/agent]
        endpoints:
          - {{host: hooks.s{i}.example.com, ports: [{port}], protocol: rest, rules: [{{methods: [GET], path: /hooks/**}}]}}
",
        ns = namespace_of(i, namespaces)
    )
}

/// An AgentSandbox CREATE review for a new sandbox `bot-{100000 + i}`.
fn admission_review(i: usize, namespaces: usize) -> String {
    let object = sandbox_value(100_000 + i, namespaces);
    serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": format!("scale-{i}"),
            "kind": {"group": "agentgate.dev", "version": "v1alpha1", "kind": "AgentSandbox"},
            "resource": {"group": "agentgate.dev", "version": "v1alpha1", "resource": "agentsandboxes"},
            "name": object["metadata"]["name"],
            "namespace": object["metadata"]["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": "bench", "groups": ["system:authenticated"]},
            "object": object,
            "dryRun": false,
        },
    })
    .to_string()
}

/// (RSS bytes, CPU seconds) of a process.
fn usage(pid: u32) -> Result<(u64, f64), String> {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| e.to_string())?;
    let rss_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or("no VmRSS")?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| e.to_string())?;
    let after = stat.rsplit_once(')').map(|(_, s)| s).ok_or("bad stat")?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields
        .get(11..13)
        .ok_or("short stat")?
        .iter()
        .filter_map(|f| f.parse::<f64>().ok())
        .sum();
    Ok((rss_kb * 1024, ticks / 100.0))
}

/// Total reconciles started, from the operator's metrics.
fn reconciles(operator: &Operator) -> Result<BTreeMap<String, u64>, String> {
    let metrics = operator.metrics().map_err(|e| e.to_string())?;
    Ok(metrics
        .lines()
        .filter(|l| l.starts_with("agentgate_reconciles_total{"))
        .filter_map(|l| {
            let kind = l.split('"').nth(1)?.to_string();
            let n = l.rsplit(' ').next()?.parse().ok()?;
            Some((kind, n))
        })
        .collect())
}

/// Streams `kubectl get RESOURCE -A -o jsonpath=TEMPLATE -w` lines,
/// stamped on arrival.
fn watch(
    cp: &ControlPlane,
    resource: &str,
    selector: Option<&str>,
    template: &str,
) -> Result<mpsc::Receiver<(String, Instant)>, String> {
    let output = format!("jsonpath={template}{{\"\\n\"}}");
    let mut args = vec![resource, "-A", "-o", &output];
    if let Some(selector) = selector {
        args.extend(["-l", selector]);
    }
    watch_lines(cp, &args)
}

fn kubectl_stdin(cp: &ControlPlane, args: &[&str], input: &str) -> Result<(), String> {
    cp.run_stdin(args, input)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Waits until `count` of the outputs of `args` (whitespace-separated)
/// equal `want`; returns the elapsed time.
fn wait_count(
    cp: &ControlPlane,
    args: &[&str],
    want: &str,
    count: usize,
    limit: Duration,
) -> Result<Duration, String> {
    let started = Instant::now();
    loop {
        let out = cp.run(args).map_err(|e| e.to_string())?;
        let n = out.split_whitespace().filter(|w| *w == want).count();
        if n >= count {
            return Ok(started.elapsed());
        }
        if started.elapsed() > limit {
            return Err(format!("{n} of {count} reached {want} within {limit:?}"));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Waits until no reconcile has started for 5 s; returns the counts then.
fn quiesce(operator: &Operator, limit: Duration) -> Result<BTreeMap<String, u64>, String> {
    let started = Instant::now();
    let mut before = reconciles(operator)?;
    loop {
        std::thread::sleep(Duration::from_secs(5));
        let now = reconciles(operator)?;
        if now == before {
            return Ok(now);
        }
        if started.elapsed() > limit {
            return Err(format!("reconciles never stopped: {now:?}"));
        }
        before = now;
    }
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn run() -> Result<(), String> {
    let sizes = Sizes::from_env();
    let n = sizes.sandboxes;
    let cp = ControlPlane::start().map_err(|e| e.to_string())?;
    let port = free_loopback_port().map_err(|e| e.to_string())?;
    cp.install_chart(port, &[]).map_err(|e| e.to_string())?;
    // BENCH_SCALE_CONCURRENCY=N runs the operator with
    // --concurrent-reconciles N (its default otherwise).
    let concurrency = std::env::var("BENCH_SCALE_CONCURRENCY").ok();
    let extra: Vec<&str> = concurrency
        .iter()
        .flat_map(|n| ["--concurrent-reconciles", n.as_str()])
        .collect();
    if let Some(n) = &concurrency {
        println!("operator: --concurrent-reconciles {n}");
    }
    let operator = cp
        .start_webhook_operator(port, &extra)
        .map_err(|e| e.to_string())?;
    cp.wait_webhook("examples/maximum.yaml", Duration::from_secs(60))
        .map_err(|e| format!("{e}\n{}", operator.log()))?;
    let pid = operator.pid();

    // The cluster: namespaces, ceilings, sandboxes, one proposal each.
    let setup = Instant::now();
    let mut namespaces = String::new();
    for j in 0..sizes.namespaces {
        let _ = write!(
            namespaces,
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: bench-{j:02}, labels: {{agentgate-bench: \"yes\", tier: {}}}}}\n---\n",
            tier(j)
        );
    }
    kubectl_stdin(&cp, &["apply", "-f", "-"], &namespaces)?;
    kubectl_stdin(&cp, &["apply", "-f", "-"], &maximums("[443, 8443]"))?;
    // The webhook's caches must hold the ceilings before the first sandbox.
    std::thread::sleep(Duration::from_secs(2));
    let all: Vec<String> = (0..n).map(|i| sandbox(i, sizes.namespaces)).collect();
    for chunk in all.chunks(100) {
        kubectl_stdin(&cp, &["apply", "-f", "-"], &chunk.join("\n---\n"))?;
    }
    let created = setup.elapsed();
    wait_count(
        &cp,
        &[
            "get",
            "asbx",
            "-A",
            "-o",
            "jsonpath={.items[*].status.revision}",
        ],
        "1",
        n,
        sizes.limit,
    )
    .map_err(|e| format!("sandboxes never committed: {e}\n{}", operator.log()))?;
    let proposals: Vec<String> = (0..n)
        .map(|i| proposal("hooks", i, sizes.namespaces, 8443))
        .collect();
    for chunk in proposals.chunks(100) {
        kubectl_stdin(&cp, &["create", "-f", "-"], &chunk.join("\n---\n"))?;
    }
    wait_count(
        &cp,
        &[
            "get",
            "pprop",
            "-A",
            "-l",
            "agentgate-bench=hooks",
            "-o",
            "jsonpath={.items[*].status.phase}",
        ],
        "Applied",
        n,
        sizes.limit,
    )
    .map_err(|e| format!("proposals never applied: {e}\n{}", operator.log()))?;
    println!(
        "setup: {n} sandboxes in {} namespaces ({} s to create through the webhook), {n} proposals applied, {:.0} s in all",
        sizes.namespaces,
        created.as_secs(),
        setup.elapsed().as_secs_f64()
    );

    // At rest: once the setup's reconciles have died down.
    quiesce(&operator, sizes.limit)?;
    let (rss, cpu0) = usage(pid)?;
    std::thread::sleep(Duration::from_secs(10));
    let (rss_rest, cpu1) = usage(pid)?;
    // Both readings: the first still holds the setup's working set, which
    // the allocator hands back within its decay (1 s, .cargo/config.toml).
    println!(
        "operator at rest: RSS {:.0} MB (the larger of {:.0} MB as the setup's reconciles ended and {:.0} MB 10 s later), CPU {:.1}% of one core (over 10 s)",
        mb(rss.max(rss_rest)),
        mb(rss),
        mb(rss_rest),
        (cpu1 - cpu0) * 10.0
    );

    // Admission with every sandbox in the caches.
    let dir = cp.dir().join("scale-admission");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let ca = cp.webhook_ca().map_err(|e| e.to_string())?;
    let bodies: Vec<String> = (0..=sizes.admissions)
        .map(|i| admission_review(i, sizes.namespaces))
        .collect();
    let url = format!("https://127.0.0.1:{port}/validate/agentsandboxes");
    let times = load(&dir, &ca, &url, &bodies, "\"allowed\":true", "20/s", None)?;
    report(
        &format!("AgentSandbox admission, {n} in the caches"),
        &times,
    );

    // A burst of proposals across different sandboxes.
    let burst = sizes.burst.min(n);
    let stream = watch(
        &cp,
        "pprop",
        Some("agentgate-bench=burst"),
        "{.metadata.namespace}/{.metadata.name} {.status.phase}",
    )?;
    let yaml: Vec<String> = (0..burst)
        .map(|i| proposal("burst", i * (n / burst), sizes.namespaces, 443))
        .collect();
    // Created by ten clients at once, so that creation (each proposal is
    // proved by the webhook too) does not pace the commits.
    let start = Instant::now();
    std::thread::scope(|scope| {
        let handles: Vec<_> = yaml
            .chunks(burst.div_ceil(10))
            .map(|chunk| {
                let docs = chunk.join("\n---\n");
                let cp = &cp;
                scope.spawn(move || kubectl_stdin(cp, &["create", "-f", "-"], &docs))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a creating thread panicked".into()))
            })
            .collect::<Result<Vec<()>, String>>()
    })?;
    let created = start.elapsed();
    let mut applied: BTreeMap<String, Instant> = BTreeMap::new();
    while applied.len() < burst {
        let (line, at) = stream.recv_timeout(sizes.limit).map_err(|_| {
            format!(
                "burst: {} of {burst} applied\n{}",
                applied.len(),
                operator.log()
            )
        })?;
        if let Some((name, phase)) = line.split_once(' ') {
            if phase == "Applied" {
                applied.entry(name.to_string()).or_insert(at);
            } else if phase == "Rejected" {
                return Err(format!("burst proposal {name} was rejected"));
            }
        }
    }
    let last = applied.values().max().copied().unwrap_or(start);
    let seconds = last.saturating_duration_since(start).as_secs_f64();
    println!(
        "proposal burst across {burst} sandboxes (created by 10 clients in {:.2} s): all applied {seconds:.2} s after the first create, {:.1} commits/s",
        created.as_secs_f64(),
        burst as f64 / seconds
    );

    // Tighten the organisation ceiling: every sandbox re-verified.
    let generation: i64 = cp
        .run(&[
            "get",
            "maxpol",
            "bench-org",
            "-o",
            "jsonpath={.metadata.generation}",
        ])
        .map_err(|e| e.to_string())?
        .trim()
        .parse()
        .map_err(|e| format!("generation: {e}"))?;
    let stream = watch(
        &cp,
        "asbx",
        None,
        "{.metadata.namespace}/{.metadata.name} {.status.verifiedAgainst[?(@.name==\"bench-org\")].generation}",
    )?;
    let (_, storm_cpu0) = usage(pid)?;
    // The control plane's share of the storm, beside the operator's.
    let plane: Vec<(&str, u32)> = ["kube-apiserver", "etcd"]
        .into_iter()
        .filter_map(|name| Some((name, cp.process_id(name)?)))
        .collect();
    let plane_cpu0: Vec<f64> = plane
        .iter()
        .map(|(_, p)| usage(*p).map(|u| u.1))
        .collect::<Result<_, _>>()?;
    let start = Instant::now();
    kubectl_stdin(&cp, &["apply", "-f", "-"], &maximums("[443]"))?;
    let want = (generation + 1).to_string();
    let mut verified: BTreeSet<String> = BTreeSet::new();
    let mut peak = 0;
    let mut last = start;
    while verified.len() < n {
        match stream.recv_timeout(Duration::from_millis(200)) {
            Ok((line, at)) => {
                if let Some((name, generation)) = line.split_once(' ')
                    && generation.trim() == want
                    && verified.insert(name.to_string())
                {
                    last = at;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err("the watch ended".into()),
        }
        peak = peak.max(usage(pid)?.0);
        if start.elapsed() > sizes.limit {
            return Err(format!(
                "{} of {n} re-verified\n{}",
                verified.len(),
                operator.log()
            ));
        }
    }
    let (_, storm_cpu1) = usage(pid)?;
    let storm = last.saturating_duration_since(start).as_secs_f64();
    println!(
        "ceiling tightened: {n} sandboxes re-verified in {storm:.1} s; operator peak RSS {:.0} MB, {:.1} CPU s ({:.0}% of one core)",
        mb(peak),
        storm_cpu1 - storm_cpu0,
        (storm_cpu1 - storm_cpu0) / storm.max(0.001) * 100.0
    );
    for ((name, p), cpu0) in plane.iter().zip(&plane_cpu0) {
        let cpu = usage(*p)?.1 - cpu0;
        println!(
            "   {name} in the storm: {cpu:.1} CPU s ({:.0}% of one core)",
            cpu / storm.max(0.001) * 100.0
        );
    }
    // The revocations: every 8443 grant gone, the declared rules kept.
    let out = cp
        .run(&[
            "get",
            "asbx",
            "-A",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.status.effectivePolicy.network[*].name} |{.status.effectivePolicy.network[*].endpoints[*].ports[*]}| {.status.conditions[?(@.type==\"WithinMaximum\")].status}{\"\\n\"}{end}",
        ])
        .map_err(|e| e.to_string())?;
    let mut wrong = Vec::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let kept = (0..RULES).all(|k| line.split_whitespace().any(|w| w == format!("r{k}")));
        let ports = line.split('|').nth(1).unwrap_or_default();
        if ports.contains("8443") || !kept || !line.trim_end().ends_with("False") {
            wrong.push(line.to_string());
        }
    }
    if !wrong.is_empty() || out.lines().filter(|l| !l.trim().is_empty()).count() != n {
        return Err(format!(
            "revocations wrong on {} sandboxes, e.g. {:?}",
            wrong.len(),
            wrong.first()
        ));
    }
    println!(
        "revocations: the 8443 grant revoked in all {n}, WithinMaximum=False, 20 declared rules kept"
    );

    // Idle: wait for the storm's tail, then count reconciles.
    let before = quiesce(&operator, sizes.limit)?;
    let (_, idle_cpu0) = usage(pid)?;
    std::thread::sleep(sizes.idle);
    let after = reconciles(&operator)?;
    let (idle_rss, idle_cpu1) = usage(pid)?;
    let started: u64 = after
        .iter()
        .map(|(kind, n)| n - before.get(kind).copied().unwrap_or(0))
        .sum();
    println!(
        "idle {} s with {n} sandboxes: {started} reconciles started; operator RSS {:.0} MB, CPU {:.2}% of one core",
        sizes.idle.as_secs(),
        mb(idle_rss),
        (idle_cpu1 - idle_cpu0) / sizes.idle.as_secs_f64() * 100.0
    );
    drop(operator);
    Ok(())
}

fn main() -> ExitCode {
    agentgate_bench::cluster::exit("bench-scale", run())
}
