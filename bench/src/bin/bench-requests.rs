//! Count before cutting: every API request one proposal commit costs, and
//! one sandbox's share of a re-verification storm (its ceiling tightened
//! so that the commit's grant is revoked), by
//! verb and resource, with the bytes the API server answered and the time
//! it spent, from kube-apiserver's own metrics (`apiserver_request_total`,
//! `apiserver_response_sizes`, `apiserver_request_duration_seconds`), and
//! the operator's reconciles, solver time and commits, from its metrics.
//! The local control plane with the chart, the operator serving the
//! webhook, the example ceiling and sandbox; once everything is quiet, the
//! agent creates one auto-eligible proposal and the figures are the
//! difference between before and after it is `Applied` and quiet again;
//! then the same for the tightened ceiling, until the sandbox is verified
//! against it.
//! Prints the table docs/benchmarks.md records; exits non-zero when the
//! proposal is not applied. `AGENTGATE_BENCH_SMOKE=1`: the same run.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use agentgate_bench::cluster::{proposal_phases, watch_lines};
use agentgate_e2e::api_requests::{self, Row};
use agentgate_e2e::race::{TIGHTENED, proposal};
use agentgate_e2e::{ControlPlane, Operator};

const AGENT: &str = "system:serviceaccount:agents:triage-bot";

/// The operator's counters: `name{labels}` → value, for its own metrics.
fn operator_counters(operator: &Operator) -> Result<BTreeMap<String, f64>, String> {
    let text = operator.metrics().map_err(|e| e.to_string())?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("agentgate_") && !l.contains("_bucket{"))
        .filter_map(|l| {
            let (name, v) = l.rsplit_once(' ')?;
            Some((name.to_string(), v.parse().ok()?))
        })
        .collect())
}

/// Waits until the operator started no reconcile for 3 s.
fn quiesce(operator: &Operator) -> Result<(), String> {
    let started = Instant::now();
    let reconciles = |o: &Operator| -> Result<BTreeMap<String, f64>, String> {
        Ok(operator_counters(o)?
            .into_iter()
            .filter(|(k, _)| k.starts_with("agentgate_reconciles_total"))
            .collect())
    };
    let mut before = reconciles(operator)?;
    loop {
        std::thread::sleep(Duration::from_secs(3));
        let now = reconciles(operator)?;
        if now == before {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(120) {
            return Err(format!("reconciles never stopped: {now:?}"));
        }
        before = now;
    }
}

/// What one counted phase did: the name of the figure and how long the
/// action took to show.
struct Done {
    what: &'static str,
    took: Duration,
}

/// Runs `act` once the operator is quiet and prints every API request and
/// operator counter it cost, until the operator is quiet again, beside an
/// idle window as long.
fn count(
    cp: &ControlPlane,
    operator: &Operator,
    title: &str,
    act: impl FnOnce() -> Result<Done, String>,
) -> Result<(), String> {
    quiesce(operator)?;
    let api_before = api_requests::counted(cp)?;
    let op_before = operator_counters(operator)?;
    let started = Instant::now();
    let done = act()?;
    quiesce(operator)?;
    let api_after = api_requests::counted(cp)?;
    let op_after = operator_counters(operator)?;
    let window = started.elapsed();
    // What a quiet operator asks for in a window as long (leader election,
    // the webhook's certificate loop): the background the phase adds to.
    let idle_started = Instant::now();
    std::thread::sleep(window);
    let api_idle = api_requests::counted(cp)?;
    let idle_window = idle_started.elapsed();

    println!("# {title}: API requests (kube-apiserver's metrics) and operator work");
    println!(
        "{}: {:.0} ms; the figures below run until the operator was quiet again",
        done.what,
        done.took.as_secs_f64() * 1000.0
    );
    println!(
        "window: {:.1} s, then {:.1} s idle for comparison",
        window.as_secs_f64(),
        idle_window.as_secs_f64()
    );
    println!(
        "| verb | resource | requests | idle window | of them 409 | response bytes | API server time (ms) |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    let mut total = Row::default();
    let mut idle_total = 0.0;
    for (key, after) in &api_after {
        let before = api_before.get(key).cloned().unwrap_or_default();
        let delta = after.since(&before);
        let idle = api_idle.get(key).map_or(0.0, |i| i.requests) - after.requests;
        if delta.requests < 0.5 && idle < 0.5 {
            continue;
        }
        let (verb, group, resource, subresource) = key;
        let mut name = if group.is_empty() {
            resource.clone()
        } else {
            format!("{resource}.{group}")
        };
        if !subresource.is_empty() {
            name.push('/');
            name.push_str(subresource);
        }
        println!(
            "| {verb} | {name} | {:.0} | {idle:.0} | {:.0} | {:.0} | {:.1} |",
            delta.requests,
            delta.conflicts,
            delta.response_bytes,
            delta.seconds * 1000.0
        );
        total.requests += delta.requests;
        idle_total += idle;
        total.conflicts += delta.conflicts;
        total.response_bytes += delta.response_bytes;
        total.seconds += delta.seconds;
    }
    println!(
        "| **all** (one is the bench's own write) | | **{:.0}** | {idle_total:.0} | {:.0} | {:.0} | {:.1} |",
        total.requests,
        total.conflicts,
        total.response_bytes,
        total.seconds * 1000.0
    );
    println!();
    println!("operator (its metrics, after minus before):");
    for (name, after) in &op_after {
        let delta = after - op_before.get(name).copied().unwrap_or(0.0);
        let shown = name.starts_with("agentgate_reconciles_total")
            || name.starts_with("agentgate_solver_seconds")
            || name.starts_with("agentgate_commits_total")
            || name.starts_with("agentgate_verdicts_total")
            || name.starts_with("agentgate_admission")
            || name.starts_with("agentgate_fresh_reverifications")
            || name.starts_with("agentgate_shared_revocations");
        if shown && delta > 0.0 {
            println!("  {name} +{delta}");
        }
    }
    println!();
    Ok(())
}

fn run() -> Result<(), String> {
    let (cp, operator, _port) = ControlPlane::with_webhook(&[]).map_err(|e| e.to_string())?;
    cp.run(&["apply", "-f", "examples/sandbox.yaml"])
        .map_err(|e| e.to_string())?;
    cp.wait_revision("agents", "triage-bot", Duration::from_secs(60), |r| r == 1)
        .map_err(|_| format!("the sandbox was not committed\n{}", operator.log()))?;
    cp.grant(
        "agent-proposes",
        "--serviceaccount=agents:triage-bot",
        "create",
        "policyproposals.agentgate.dev",
    )
    .map_err(|e| e.to_string())?;
    // Phases are read from watches opened now, so waiting adds no request
    // to the counts.
    let phases = proposal_phases(&cp)?;
    let verified = watch_lines(
        &cp,
        &[
            "asbx",
            "triage-bot",
            "-n",
            "agents",
            "-o",
            "jsonpath={.status.verifiedAgainst[?(@.name==\"org-ceiling\")].generation} {.status.conditions[?(@.type==\"WithinMaximum\")].status}{\"\\n\"}",
        ],
    )?;

    count(&cp, &operator, "one proposal commit", || {
        let created = Instant::now();
        cp.run_stdin(&["create", "-f", "-", "--as", AGENT], &proposal("count", 0))
            .map_err(|e| e.to_string())?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (name, phase, at) = phases
                .recv_timeout(left)
                .map_err(|_| format!("count-0 was never Applied\n{}", operator.log()))?;
            match (name.as_str(), phase.as_str()) {
                ("count-0", "Applied") => {
                    return Ok(Done {
                        what: "created -> Applied",
                        took: at.saturating_duration_since(created),
                    });
                }
                ("count-0", "Rejected") => return Err("count-0 was rejected".into()),
                _ => {}
            }
        }
    })?;

    // What etcd keeps for the sandbox's data plane.
    let config_map = cp
        .run(&[
            "get",
            "configmap",
            "triage-bot-policy",
            "-n",
            "agents",
            "-o",
            "json",
        ])
        .map_err(|e| e.to_string())?;
    let data: serde_json::Value = serde_json::from_str(&config_map).map_err(|e| e.to_string())?;
    let sizes: Vec<String> = data["data"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k} {}", v.as_str().map_or(0, str::len)))
        .collect();
    println!(
        "the sandbox's policy ConfigMap: {} bytes as JSON ({})",
        config_map.len(),
        sizes.join(", ")
    );
    println!();

    // One sandbox's share of a storm: the ceiling tightened (no more POST),
    // until the sandbox is verified against it with its grant revoked.
    let generation = |line: &str| {
        line.split_whitespace()
            .next()
            .and_then(|g| g.parse::<i64>().ok())
    };
    let mut last = None;
    while let Ok((line, _)) = verified.recv_timeout(Duration::from_millis(200)) {
        last = generation(&line).or(last);
    }
    let before = last.ok_or("the sandbox shows no verification against org-ceiling")?;
    count(
        &cp,
        &operator,
        "one sandbox re-verified under a tightened ceiling",
        || {
            let tightened = Instant::now();
            cp.run_stdin(&["apply", "-f", "-"], TIGHTENED)
                .map_err(|e| e.to_string())?;
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let (line, at) = verified
                    .recv_timeout(left)
                    .map_err(|_| format!("triage-bot was never re-verified\n{}", operator.log()))?;
                if generation(&line).is_some_and(|g| g > before) && line.ends_with("False") {
                    return Ok(Done {
                        what: "tightened -> verified against it, the grant revoked",
                        took: at.saturating_duration_since(tightened),
                    });
                }
            }
        },
    )?;
    drop(operator);
    Ok(())
}

fn main() -> ExitCode {
    agentgate_bench::cluster::exit("bench-requests", run())
}
