//! `make bench-trifecta` (analysis half; the scanner has `bench-scan`): the
//! minimum vertex cut and the whole analysis on a generated agent of 10,000
//! tools around one `__llm__` (10% untrusted inputs, 5% secret readers, 10%
//! egress sinks). The single-cut rows make the sink load-bearing so the
//! max-flow really runs (a removable sink is its own one-node cut).
//! Prints numbers; asserts nothing about speed.

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use agentgate::trifecta::analysis::{analyze, finding_at};
use agentgate::trifecta::cut::minimum_cut;
use agentgate::trifecta::lattice::propagate;
use agentgate::trifecta::{Capability, Channel, Effect, Graph, Node, SourceLocation};

const TOOLS: usize = 10_000;
const ROUNDS: usize = 20;

fn capability(effect: Effect, channel: Channel, line: u32) -> Capability {
    Capability::new(
        effect,
        channel,
        SourceLocation::at(&format!("tools_{}.py", line / 100), line),
    )
}

fn graph() -> Graph {
    let tools = (0..TOOLS)
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

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
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

fn main() -> ExitCode {
    let mut g = graph();
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
        "trifecta benchmark: {TOOLS} tools, {} edges, {ROUNDS} rounds per row; load-bearing sink {sink_id}: cut of {} node(s)",
        g.edges.len(),
        cut.len()
    );
    let (p50, p99) = timed(ROUNDS, || {
        black_box(minimum_cut(&indexed, sink, &removed));
    });
    println!("minimum cut (one load-bearing sink)         p50={p50:>8.2} ms  p99={p99:>8.2} ms");
    let (p50, p99) = timed(ROUNDS, || {
        black_box(finding_at(&indexed, sink, &removed));
    });
    println!("finding at one sink (witnesses + cut)       p50={p50:>8.2} ms  p99={p99:>8.2} ms");
    let (p50, p99) = timed(ROUNDS, || {
        black_box(propagate(&indexed, &removed));
    });
    println!("label fixpoint (whole graph)                p50={p50:>8.2} ms  p99={p99:>8.2} ms");
    let findings = analyze(&g).map(|f| f.len()).unwrap_or_default();
    let (p50, p99) = timed(3, || {
        black_box(analyze(&g).ok());
    });
    println!(
        "analyze ({findings} findings, every sink)       p50={p50:>8.2} ms  p99={p99:>8.2} ms"
    );
    ExitCode::SUCCESS
}
