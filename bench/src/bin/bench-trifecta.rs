//! `make bench-trifecta` (analysis half; the scanner has `bench-scan`): the
//! minimum vertex cut and the whole analysis on a generated agent of 10,000
//! tools around one `__llm__` (10% untrusted inputs, 5% secret readers, 10%
//! egress sinks). The single-cut rows make the sink load-bearing so the
//! max-flow really runs (a removable sink is its own one-node cut).
//! Prints numbers; asserts nothing about speed, but exits non-zero when the
//! cut, the finding at the sink or the number of findings is not what the
//! generator implies. `AGENTGATE_BENCH_SMOKE=1` (`make bench-smoke`): 200
//! tools, 2 rounds; same checks, numbers that are not results.

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use agentgate_bench::percentile;
use agentgate_trifecta::analysis::{analyze, finding_at};
use agentgate_trifecta::cut::minimum_cut;
use agentgate_trifecta::lattice::propagate;
use agentgate_trifecta::{Capability, Channel, Effect, Graph, Node, SourceLocation};

/// Tools of the generated agent and rounds per row: the full run, or
/// `AGENTGATE_BENCH_SMOKE=1`.
fn sizes() -> (usize, usize) {
    if std::env::var("AGENTGATE_BENCH_SMOKE").is_ok_and(|v| v == "1") {
        (200, 2)
    } else {
        (10_000, 20)
    }
}

fn capability(effect: Effect, channel: Channel, line: u32) -> Capability {
    Capability::new(
        effect,
        channel,
        SourceLocation::at(&format!("tools_{}.py", line / 100), line),
    )
}

fn graph(count: usize) -> Graph {
    let tools = (0..count)
        .map(|i| {
            let line = i as u32 + 1;
            let mut capabilities = Vec::new();
            if i % 10 == 0 {
                capabilities.push(capability(Effect::UntrustedInput, Channel::Http, line));
            }
            if i % 20 == 3 {
                capabilities.push(capability(Effect::ReadsSecret, Channel::Env, line));
            }
            if i % 10 == 7 {
                capabilities.push(capability(Effect::Egress, Channel::Http, line));
            }
            Node::tool(&format!("tool_{i:05}"), capabilities, None)
        })
        .collect();
    Graph::single_agent(tools)
}

fn timed(rounds: usize, mut work: impl FnMut()) -> (f64, f64) {
    let mut times: Vec<f64> = (0..rounds)
        .map(|_| {
            let started = Instant::now();
            work();
            started.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    (percentile(&times, 50.0), percentile(&times, 99.0))
}

fn fail(message: String) -> ExitCode {
    eprintln!("bench-trifecta: {message}");
    ExitCode::FAILURE
}

fn main() -> ExitCode {
    let (tools, rounds) = sizes();
    // What the generator implies: every untrusted input and every secret
    // reader reaches the sink through the model, so the smaller group is
    // the minimum cut; every egress tool is a sink with a finding.
    let untrusted = (0..tools).filter(|i| i % 10 == 0).count();
    let secrets = (0..tools).filter(|i| i % 20 == 3).count();
    let sinks = (0..tools).filter(|i| i % 10 == 7).count();
    let mut g = graph(tools);
    let sink_id = "tool_00007";
    let Some(sink) = g.nodes.iter().position(|n| n.id == sink_id) else {
        eprintln!("bench-trifecta: no sink");
        return ExitCode::FAILURE;
    };
    g.nodes[sink].load_bearing = true;
    let indexed = match g.indexed() {
        Ok(i) => i,
        Err(e) => {
            eprintln!("bench-trifecta: {e}");
            return ExitCode::FAILURE;
        }
    };
    let removed = vec![false; indexed.len()];
    let cut = minimum_cut(&indexed, sink, &removed);
    println!(
        "trifecta benchmark: {tools} tools, {} edges, {rounds} rounds per row; load-bearing sink {sink_id}: cut of {} node(s)",
        g.edges.len(),
        cut.len()
    );
    if cut.len() != untrusted.min(secrets) || cut.contains(&sink) {
        return fail(format!(
            "cut of {} node(s) at the load-bearing sink, expected {} others",
            cut.len(),
            untrusted.min(secrets)
        ));
    }
    if finding_at(&indexed, sink, &removed).is_none() {
        return fail(format!("no finding at {sink_id}"));
    }
    let (p50, p99) = timed(rounds, || {
        black_box(minimum_cut(&indexed, sink, &removed));
    });
    println!("minimum cut (one load-bearing sink)         p50={p50:>8.2} ms  p99={p99:>8.2} ms");
    let (p50, p99) = timed(rounds, || {
        black_box(finding_at(&indexed, sink, &removed));
    });
    println!("finding at one sink (witnesses + cut)       p50={p50:>8.2} ms  p99={p99:>8.2} ms");
    let (p50, p99) = timed(rounds, || {
        black_box(propagate(&indexed, &removed));
    });
    println!("label fixpoint (whole graph)                p50={p50:>8.2} ms  p99={p99:>8.2} ms");
    let findings = match analyze(&g) {
        Ok(f) => f.len(),
        Err(e) => return fail(format!("analyze: {e}")),
    };
    if findings != sinks {
        return fail(format!(
            "analyze found {findings} findings, expected {sinks}"
        ));
    }
    let (p50, p99) = timed(rounds.min(3), || {
        black_box(analyze(&g).ok());
    });
    println!(
        "analyze ({findings} findings, every sink)       p50={p50:>8.2} ms  p99={p99:>8.2} ms"
    );
    ExitCode::SUCCESS
}
