//! Operator benchmark: time from PolicyProposal creation to
//! `Applied` (p50/p99) over 100 proposals created one after another, and
//! commits per second for 100 proposals created at once, on the local
//! control plane with the real operator. Prints numbers; asserts nothing
//! about speed (docs/benchmarks.md records them), but exits non-zero when a
//! proposal is rejected or never applied. `AGENTGATE_BENCH_SMOKE=1` (`make
//! bench-smoke`): 3 proposals each way, same checks; its numbers are not
//! results.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use agentgate_bench::cluster::proposal_phases;
use agentgate_bench::percentile;
use agentgate_e2e::ControlPlane;
use agentgate_e2e::race::{proposal, proposals};

fn wait_applied(
    rx: &mpsc::Receiver<(String, String, Instant)>,
    names: &[String],
    seen: &mut HashMap<String, Instant>,
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(300);
    while names.iter().any(|n| !seen.contains_key(n)) {
        let left = deadline.saturating_duration_since(Instant::now());
        let (name, phase, at) = rx
            .recv_timeout(left)
            .map_err(|_| "timed out waiting for Applied".to_string())?;
        match phase.as_str() {
            "Applied" => {
                seen.entry(name).or_insert(at);
            }
            "Rejected" => return Err(format!("{name} was rejected")),
            _ => {}
        }
    }
    Ok(())
}

fn run() -> Result<(), String> {
    let cp = ControlPlane::start().map_err(|e| e.to_string())?;
    cp.install_crds().map_err(|e| e.to_string())?;
    let kubectl = |args: &[&str], stdin: Option<&str>| -> Result<(), String> {
        match stdin {
            Some(text) => cp.run_stdin(args, text),
            None => cp.run(args),
        }
        .map(drop)
        .map_err(|e| e.to_string())
    };
    kubectl(&["create", "namespace", "agents"], None)?;
    kubectl(&["label", "namespace", "agents", "team=ml"], None)?;
    let operator = cp.start_operator().map_err(|e| e.to_string())?;
    kubectl(
        &[
            "apply",
            "-f",
            "examples/maximum.yaml",
            "-f",
            "examples/sandbox.yaml",
        ],
        None,
    )?;
    cp.wait_revision("agents", "triage-bot", Duration::from_secs(60), |r| r == 1)
        .map_err(|_| format!("sandbox not committed\n{}", operator.log()))?;
    let rx = proposal_phases(&cp)?;
    let mut seen = HashMap::new();
    let n = if std::env::var("AGENTGATE_BENCH_SMOKE").is_ok_and(|v| v == "1") {
        3
    } else {
        100
    };

    // Latency: one proposal at a time, each waited for.
    let mut latencies = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("seq-{i}");
        kubectl(&["create", "-f", "-"], Some(&proposal("seq", i)))?;
        let created = Instant::now();
        wait_applied(&rx, std::slice::from_ref(&name), &mut seen)?;
        latencies.push(seen[&name].saturating_duration_since(created).as_secs_f64() * 1000.0);
    }
    latencies.sort_by(f64::total_cmp);

    // Throughput: n created at once.
    let batch: Vec<String> = (0..n).map(|i| format!("burst-{i}")).collect();
    let yaml = proposals("burst", n);
    let started = Instant::now();
    kubectl(&["create", "-f", "-"], Some(&yaml))?;
    wait_applied(&rx, &batch, &mut seen)?;
    let elapsed = batch
        .iter()
        .map(|b| seen[b])
        .max()
        .unwrap_or(started)
        .saturating_duration_since(started);

    println!(
        "# operator benchmark: PolicyProposal creation -> Applied (local control plane, real operator)"
    );
    println!(
        "machine: {} cores",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    println!(
        "sequential, {n} proposals (each an auto-eligible grant, committed with the resourceVersion precondition):"
    );
    println!(
        "  p50 {:.0} ms   p99 {:.0} ms   max {:.0} ms",
        percentile(&latencies, 50.0),
        percentile(&latencies, 99.0),
        latencies[n - 1]
    );
    println!("burst, {n} proposals created at once:");
    println!(
        "  all applied in {:.2} s = {:.1} commits/s",
        elapsed.as_secs_f64(),
        n as f64 / elapsed.as_secs_f64()
    );
    let target = percentile(&latencies, 99.0) <= 1000.0;
    println!(
        "target p99 <= 1 s: {}",
        if target { "met" } else { "NOT met" }
    );
    Ok(())
}

fn main() -> ExitCode {
    agentgate_bench::cluster::exit("bench-proposals", run())
}
