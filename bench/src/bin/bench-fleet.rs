//! `make bench-fleet`: the operator's re-verification and commit paths for
//! a fleet of 10,000 and 100,000 sandboxes, in one process and without an
//! API server, to say what breaks first past one cluster's size
//! (docs/operations.md, "A large fleet"). Prints numbers for
//! docs/benchmarks.md.
//!
//! Each run builds, as the controller's cache would hold them, N
//! AgentSandboxes over 50 namespaces under the three MaximumPolicies of
//! `make bench-scale` (20 rules each and one committed proposal on port
//! 8443), drawn from D distinct policies (D = N: every sandbox its own
//! hosts, as in bench-scale; D < N: a fleet stamped from templates). Then:
//!
//! - **memory**: the resident memory the N typed objects take, per
//!   sandbox (each run is its own process, so no run reuses another's
//!   freed memory), and their JSON size (what the watch carries and etcd
//!   stores);
//! - **storm**: the organisation ceiling tightened to port 443; every
//!   sandbox is governed ([`governing_from`]) and re-verified on every core
//!   through the operator's content-addressed revocations
//!   ([`Revocations`]), side by side with the same storm without them (the
//!   prover's own check cache only) on the first sandboxes; every result is
//!   checked: the 8443 grant revoked, the 20 declared rules kept;
//! - **commits**: proposals judged as the proposal controller judges them
//!   ([`judge`]), on every core, each checked to be `Apply`.
//!
//! What it leaves out is the API server: the requests each path costs are
//! counted by `make bench-requests`, and docs/operations.md divides one by
//! the other.
//!
//! Knobs (environment): `BENCH_FLEET` (runs as `N/D`, comma-separated,
//! default `10000/10000,100000/1000`), `BENCH_FLEET_BASELINE` (sandboxes of
//! the side-by-side run without shared revocations, default 2,000),
//! `BENCH_FLEET_COMMITS` (default 2,000), `AGENTGATE_BENCH_SMOKE=1` (one run
//! of 200 sandboxes from 20 policies, 50 baseline, 50 commits).

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agentgate_api::crd::{AgentSandbox, MaximumPolicy, PolicyProposal};
use agentgate_bench::percentile_duration as percentile;
use agentgate_governance::governing::{CompiledMaximums, Governance, Governing, governing_from};
use agentgate_governance::proposal::{Judgement, ProposalCase, judge};
use agentgate_governance::reverify::{Proved, Revocations};
use agentgate_governance::verdict::{Decision, Requester};
use agentgate_prover::{Prover, ProverOptions};

/// Declared rules per sandbox, as in bench-scale.
const RULES: usize = 20;
/// Namespaces the fleet spreads over.
const NAMESPACES: usize = 50;

/// One run: `sandboxes`, stamped from `distinct` policies.
#[derive(Debug, Clone, Copy)]
struct Run {
    sandboxes: usize,
    distinct: usize,
}

struct Knobs {
    runs: Vec<Run>,
    baseline: usize,
    commits: usize,
}

fn knobs() -> Result<Knobs, String> {
    if std::env::var("AGENTGATE_BENCH_SMOKE").is_ok_and(|v| v == "1") {
        return Ok(Knobs {
            runs: vec![Run {
                sandboxes: 200,
                distinct: 20,
            }],
            baseline: 50,
            commits: 50,
        });
    }
    let number = |name: &str, default: usize| -> Result<usize, String> {
        match std::env::var(name) {
            Ok(v) => v.parse().map_err(|_| format!("{name}={v:?}: not a number")),
            Err(_) => Ok(default),
        }
    };
    let runs = std::env::var("BENCH_FLEET").unwrap_or_else(|_| "10000/10000,100000/1000".into());
    let runs = runs
        .split(',')
        .map(|run| {
            let (n, d) = run
                .split_once('/')
                .ok_or_else(|| format!("BENCH_FLEET: {run:?} is not N/D"))?;
            let parse = |s: &str| {
                s.trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("BENCH_FLEET: {run:?}: {s:?} is not a positive number"))
            };
            let (sandboxes, distinct) = (parse(n)?, parse(d)?);
            if distinct > sandboxes {
                return Err(format!(
                    "BENCH_FLEET: {run:?}: more policies than sandboxes"
                ));
            }
            Ok(Run {
                sandboxes,
                distinct,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Knobs {
        runs,
        baseline: number("BENCH_FLEET_BASELINE", 2000)?,
        commits: number("BENCH_FLEET_COMMITS", 2000)?,
    })
}

fn parse<T: serde::de::DeserializeOwned>(
    what: &str,
    value: serde_json::Value,
) -> Result<T, String> {
    serde_json::from_value(value).map_err(|e| format!("{what}: {e}"))
}

/// The three ceilings of bench-scale; `org_ports` is the organisation
/// ceiling's, at `generation`.
fn maximums(org_ports: &[u16], generation: i64) -> Result<Vec<MaximumPolicy>, String> {
    let web = |ports: &[u16]| {
        serde_json::json!({
            "name": "web",
            "binaries": ["/usr/local/bin/agent"],
            "endpoints": [{
                "host": "**.example.com",
                "ports": ports,
                "protocol": "rest",
                "rules": [{"methods": ["GET", "POST"], "path": "/**"}],
            }],
        })
    };
    let mut out = vec![parse(
        "bench-org",
        serde_json::json!({
            "apiVersion": "agentgate.dev/v1alpha1",
            "kind": "MaximumPolicy",
            "metadata": {"name": "bench-org", "uid": "uid-bench-org", "generation": generation},
            "spec": {
                "selector": {"namespaceSelector": {"matchLabels": {"agentgate-bench": "yes"}}},
                "allowedModes": ["ask", "auto"],
                "policy": {
                    "filesystem": {"readOnly": ["/usr", "/app"], "readWrite": ["/sandbox", "/tmp"]},
                    "network": [{
                        "name": "web",
                        "binaries": ["/usr/local/bin/agent"],
                        "endpoints": [
                            web(org_ports)["endpoints"][0].clone(),
                            {
                                "host": "**.example.com",
                                "ports": [443],
                                "protocol": "rest",
                                "path": "/admin/**",
                                "access": "read-write",
                                "review": {"required": true, "reason": "admin APIs change things"},
                            },
                        ],
                    }],
                },
                "invariants": [{
                    "name": "no-cloud-metadata",
                    "match": {"hosts": ["metadata.google.internal", "169.254.169.254"]},
                }],
            },
        }),
    )?];
    for tier in ["a", "b"] {
        out.push(parse(
            "bench-tier",
            serde_json::json!({
                "apiVersion": "agentgate.dev/v1alpha1",
                "kind": "MaximumPolicy",
                "metadata": {"name": format!("bench-tier-{tier}"), "uid": format!("uid-tier-{tier}"), "generation": 1},
                "spec": {
                    "selector": {"namespaceSelector": {"matchLabels": {"agentgate-bench": "yes", "tier": tier}}},
                    "policy": {
                        "filesystem": {"readOnly": ["/usr", "/app"], "readWrite": ["/sandbox", "/tmp"]},
                        "network": [web(&[443, 8443])],
                    },
                    "invariants": [{"name": "no-corp", "match": {"hosts": ["*.corp.invalid"]}}],
                },
            }),
        )?);
    }
    Ok(out)
}

fn namespace_labels(ns: usize) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("agentgate-bench".to_string(), "yes".to_string()),
        (
            "tier".to_string(),
            if ns.is_multiple_of(2) { "a" } else { "b" }.to_string(),
        ),
    ])
}

/// The declared policy of bench-scale's sandboxes (its `sandbox_value`),
/// with `policy` in place of the sandbox's index: the same fleet, so the
/// two benchmarks' figures can be read together.
fn declared(policy: usize) -> serde_json::Value {
    let network = agentgate_bench::rest_rules(
        RULES,
        |k| format!("r{k}"),
        |k| format!("api{k}.s{policy}.example.com"),
        &["GET"],
        |_| "/v1/**".to_string(),
    );
    serde_json::json!({
        "filesystem": {"readOnly": ["/app"], "readWrite": ["/sandbox"]},
        "network": network,
    })
}

fn hooks_rule(policy: usize, port: u16) -> serde_json::Value {
    serde_json::json!({
        "name": "hooks",
        "binaries": ["/usr/local/bin/agent"],
        "endpoints": [{
            "host": format!("hooks.s{policy}.example.com"),
            "ports": [port],
            "protocol": "rest",
            "rules": [{"methods": ["GET"], "path": "/hooks/**"}],
        }],
    })
}

/// Sandbox `i` as the operator's cache holds it after its commit: the
/// declared policy of policy `i % distinct`, and a status with the
/// proposal's 8443 grant committed, its record, the maximums and the
/// conditions the reconciler writes.
fn sandbox(i: usize, distinct: usize) -> Result<AgentSandbox, String> {
    let policy = i % distinct;
    let mut effective = declared(policy);
    if let Some(network) = effective["network"].as_array_mut() {
        network.push(hooks_rule(policy, 8443));
    }
    let at = "2026-12-05T06:00:00Z";
    let condition = |type_: &str, status: &str, reason: &str, message: &str| {
        serde_json::json!({"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": at, "observedGeneration": 1})
    };
    parse(
        "sandbox",
        serde_json::json!({
            "apiVersion": "agentgate.dev/v1alpha1",
            "kind": "AgentSandbox",
            "metadata": {
                "name": format!("bot-{i}"),
                "namespace": format!("bench-{:02}", i % NAMESPACES),
                "uid": format!("00000000-0000-4000-8000-{i:012}"),
                "resourceVersion": format!("{}", 100_000 + i),
                "generation": 1,
                "creationTimestamp": at,
            },
            "spec": {
                "mode": "auto",
                "agentServiceAccount": format!("bot-{i}"),
                "policy": declared(policy),
            },
            "status": {
                "effectivePolicy": effective,
                "revision": 2,
                "appliedProposals": [{
                    "name": format!("grant-{i}"),
                    "uid": format!("00000000-0000-4000-9000-{i:012}"),
                    "generation": 1,
                    "changeHash": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
                    "decidedBy": "auto",
                    "at": at,
                }],
                "governedBy": ["bench-org", format!("bench-tier-{}", if (i % NAMESPACES).is_multiple_of(2) { "a" } else { "b" })],
                "verifiedAgainst": [{"name": "bench-org", "generation": 1}],
                "conditions": [
                    condition("WithinMaximum", "True", "Proved", "proved within bench-org, bench-tier-a"),
                    condition("Ready", "True", "Committed", "revision 2"),
                    condition("Reconciling", "False", "Committed", "revision 2"),
                    condition("Stalled", "False", "Committed", "revision 2"),
                ],
                "observedGeneration": 1,
            },
        }),
    )
}

/// The process's resident set, in bytes.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// Runs `work(i)` for every `i < n` on `threads` threads; returns each
/// item's duration and what it said, in order.
fn on_every_core<T: Send>(
    n: usize,
    threads: usize,
    work: impl Fn(usize) -> T + Sync,
) -> Vec<(Duration, T)> {
    let next = AtomicUsize::new(0);
    let mut done: Vec<(usize, Duration, T)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            return mine;
                        }
                        let started = Instant::now();
                        let said = work(i);
                        mine.push((i, started.elapsed(), said));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_default())
            .collect()
    });
    done.sort_by_key(|(i, _, _)| *i);
    done.into_iter().map(|(_, d, t)| (d, t)).collect()
}

/// Governs sandbox `sandbox` under `maximums`.
fn governing(
    sandbox: &AgentSandbox,
    maximums: &[MaximumPolicy],
    namespaces: &[BTreeMap<String, String>],
    compiled: &CompiledMaximums,
) -> Result<Vec<Governing>, String> {
    let ns: usize = sandbox
        .metadata
        .namespace
        .as_deref()
        .and_then(|n| n.strip_prefix("bench-"))
        .and_then(|n| n.parse().ok())
        .ok_or("sandbox without a bench namespace")?;
    let labels = namespaces.get(ns).ok_or("namespace out of range")?;
    let no_labels = BTreeMap::new();
    match governing_from(maximums, labels, &no_labels, false, compiled) {
        Governance::Governed(g) => Ok(g),
        Governance::Refused(reason, message) => Err(format!("{reason}: {message}")),
    }
}

/// What one re-verification left: `None` when right (8443 revoked, the 20
/// declared rules kept), else why not.
fn storm_check(
    kept: &agentgate_policy::model::PolicyDocument,
    revoked: &[(String, String)],
) -> Option<String> {
    let hooks_gone = !kept.network.iter().any(|r| r.name == "hooks")
        && revoked.iter().any(|(grant, _)| grant.contains("hooks"));
    (!hooks_gone || kept.network.len() != RULES)
        .then(|| format!("kept {} rules, revoked {revoked:?}", kept.network.len()))
}

struct StormFigures {
    wall: Duration,
    p50: Duration,
    p99: Duration,
    proved: usize,
    wrong: Vec<String>,
}

fn storm(
    fleet: &[Arc<AgentSandbox>],
    maximums: &[MaximumPolicy],
    namespaces: &[BTreeMap<String, String>],
    threads: usize,
    revocations: Option<&Revocations>,
) -> StormFigures {
    let compiled = CompiledMaximums::default();
    let prover = Prover::new(ProverOptions::default());
    let started = Instant::now();
    let results = on_every_core(fleet.len(), threads, |i| {
        let sandbox = &fleet[i];
        let effective = sandbox
            .status
            .as_ref()
            .and_then(|s| s.effective_policy.clone())
            .unwrap_or_default();
        let governing = match governing(sandbox, maximums, namespaces, &compiled) {
            Ok(g) => g,
            Err(e) => return (Proved::Now, Some(e)),
        };
        let (revocation, proved) = match revocations {
            Some(revocations) => revocations.revoke(&effective, &governing, &prover),
            None => {
                let inputs: Vec<_> = governing.iter().map(Governing::as_verdict_input).collect();
                let r = agentgate_governance::verdict::revoke_until_within(
                    &effective, &inputs, &prover,
                );
                (r, Proved::Now)
            }
        };
        (proved, storm_check(&revocation.kept, &revocation.revoked))
    });
    let wall = started.elapsed();
    let mut times: Vec<Duration> = results.iter().map(|(d, _)| *d).collect();
    times.sort();
    StormFigures {
        wall,
        p50: percentile(&times, 50.0),
        p99: percentile(&times, 99.0),
        proved: results
            .iter()
            .filter(|(_, (p, _))| *p == Proved::Now)
            .count(),
        wrong: results
            .into_iter()
            .filter_map(|(_, (_, wrong))| wrong)
            .take(3)
            .collect(),
    }
}

fn proposal(i: usize, distinct: usize) -> Result<PolicyProposal, String> {
    parse(
        "proposal",
        serde_json::json!({
            "apiVersion": "agentgate.dev/v1alpha1",
            "kind": "PolicyProposal",
            "metadata": {"name": format!("more-{i}"), "namespace": format!("bench-{:02}", i % NAMESPACES),
                "uid": format!("00000000-0000-4000-a000-{i:012}"), "generation": 1},
            "spec": {
                "sandboxRef": {"name": format!("bot-{i}")},
                "requestedBy": format!("system:serviceaccount:bench-{:02}:bot-{i}", i % NAMESPACES),
                "add": {"network": [{
                    "name": "more",
                    "binaries": ["/usr/local/bin/agent"],
                    "endpoints": [{"host": format!("more.s{}.example.com", i % distinct), "ports": [443],
                        "protocol": "rest", "rules": [{"methods": ["GET"], "path": "/more/**"}]}],
                }]},
            },
        }),
    )
}

fn run(run: Run, knobs: &Knobs, threads: usize) -> Result<(), String> {
    println!(
        "\n## {} sandboxes from {} distinct policies ({threads} threads)",
        run.sandboxes, run.distinct
    );
    let namespaces: Vec<_> = (0..NAMESPACES).map(namespace_labels).collect();

    // Memory: the typed objects as the controller's store holds them.
    let before = rss();
    let built = Instant::now();
    let fleet: Vec<Arc<AgentSandbox>> = (0..run.sandboxes)
        .map(|i| sandbox(i, run.distinct).map(Arc::new))
        .collect::<Result<_, _>>()?;
    let held = rss().saturating_sub(before);
    let json_bytes: usize = fleet
        .iter()
        .take(100)
        .map(|s| serde_json::to_vec(s.as_ref()).map_or(0, |v| v.len()))
        .sum::<usize>()
        / fleet.len().min(100);
    println!(
        "memory: {} typed sandboxes take {:.1} MB resident ({:.1} KB each; {:.1} KB of JSON each), built in {:.1} s",
        run.sandboxes,
        held as f64 / 1e6,
        held as f64 / run.sandboxes as f64 / 1e3,
        json_bytes as f64 / 1e3,
        built.elapsed().as_secs_f64()
    );

    // The storm: the organisation ceiling tightened to 443.
    let tightened = maximums(&[443], 2)?;
    let shared = Revocations::new(run.distinct.max(1));
    let with = storm(&fleet, &tightened, &namespaces, threads, Some(&shared));
    println!(
        "storm, shared revocations: {} re-verified in {:.2} s ({:.0}/s), {} proved, {} shared; per sandbox p50 {:.2} ms p99 {:.2} ms",
        run.sandboxes,
        with.wall.as_secs_f64(),
        run.sandboxes as f64 / with.wall.as_secs_f64(),
        with.proved,
        run.sandboxes - with.proved,
        with.p50.as_secs_f64() * 1e3,
        with.p99.as_secs_f64() * 1e3,
    );
    let base_n = knobs.baseline.min(run.sandboxes);
    let without = storm(&fleet[..base_n], &tightened, &namespaces, threads, None);
    println!(
        "storm, checks cached only (baseline), first {base_n}: {:.2} s ({:.0}/s); per sandbox p50 {:.2} ms p99 {:.2} ms; shared revocations on the same {base_n} would take about {:.2} s",
        without.wall.as_secs_f64(),
        base_n as f64 / without.wall.as_secs_f64(),
        without.p50.as_secs_f64() * 1e3,
        without.p99.as_secs_f64() * 1e3,
        with.wall.as_secs_f64() * base_n as f64 / run.sandboxes as f64,
    );
    let mut wrong = with.wrong;
    wrong.extend(without.wrong);

    // Commits: the proposal controller's verdict, under the ceilings as
    // they were (8443 allowed), on each sandbox's committed policy.
    let before_storm = maximums(&[443, 8443], 1)?;
    let compiled = CompiledMaximums::default();
    let prover = Prover::new(ProverOptions::default());
    let commits = knobs.commits.min(run.sandboxes);
    let proposals: Vec<PolicyProposal> = (0..commits)
        .map(|i| proposal(i, run.distinct))
        .collect::<Result<_, _>>()?;
    let started = Instant::now();
    let verdicts = on_every_core(commits, threads, |i| {
        let sandbox = &fleet[i];
        let governing = governing(sandbox, &before_storm, &namespaces, &compiled)?;
        let current = sandbox
            .status
            .as_ref()
            .and_then(|s| s.effective_policy.clone())
            .unwrap_or_default();
        let case = ProposalCase {
            proposal: &proposals[i],
            sandbox,
            current: &current,
            governing: &governing,
            requester: Requester::Agent,
            allow_unmanaged: false,
        };
        match judge(&case, &prover, 3) {
            Judgement::Decided { verdict, .. } if verdict.decision == Decision::Apply => Ok(()),
            Judgement::Decided { verdict, .. } => Err(format!(
                "proposal {i}: {:?}: {}",
                verdict.decision, verdict.reason
            )),
            Judgement::Refused(reason) => Err(format!("proposal {i}: refused: {reason}")),
        }
    });
    let wall = started.elapsed();
    let mut times: Vec<Duration> = verdicts.iter().map(|(d, _)| *d).collect();
    times.sort();
    println!(
        "commits: {commits} proposals judged Apply in {:.2} s ({:.0} verdicts/s); per verdict p50 {:.2} ms p99 {:.2} ms",
        wall.as_secs_f64(),
        commits as f64 / wall.as_secs_f64(),
        percentile(&times, 50.0).as_secs_f64() * 1e3,
        percentile(&times, 99.0).as_secs_f64() * 1e3,
    );
    wrong.extend(verdicts.into_iter().filter_map(|(_, r)| r.err()).take(3));
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!("wrong results: {}", wrong.join("; ")))
    }
}

/// Set in the child process that does one run.
const ONE_RUN: &str = "BENCH_FLEET_ONE_RUN";

fn main() -> ExitCode {
    let knobs = match knobs() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("bench-fleet: {e}");
            return ExitCode::from(2);
        }
    };
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    if std::env::var_os(ONE_RUN).is_some() {
        return match knobs.runs.first().map(|r| run(*r, &knobs, threads)) {
            Some(Ok(())) => ExitCode::SUCCESS,
            Some(Err(e)) => {
                eprintln!("bench-fleet: {e}");
                ExitCode::FAILURE
            }
            None => ExitCode::from(2),
        };
    }
    println!("# the operator's re-verification and commit paths in one process, no API server");
    let me = match std::env::current_exe() {
        Ok(me) => me,
        Err(e) => {
            eprintln!("bench-fleet: cannot find this program: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Each run in a process of its own: its memory is then its own.
    for r in &knobs.runs {
        let status = std::process::Command::new(&me)
            .env(ONE_RUN, "1")
            .env("AGENTGATE_BENCH_SMOKE", "0")
            .env("BENCH_FLEET", format!("{}/{}", r.sandboxes, r.distinct))
            .env("BENCH_FLEET_BASELINE", knobs.baseline.to_string())
            .env("BENCH_FLEET_COMMITS", knobs.commits.to_string())
            .status();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => {
                eprintln!(
                    "bench-fleet: the run of {} sandboxes failed ({s})",
                    r.sandboxes
                );
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("bench-fleet: cannot run {}: {e}", me.display());
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
