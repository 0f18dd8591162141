//! `make bench-mcp`: the in-process cost of tool-call authority, side by
//! side with the same policies written as REST grants (the baseline every
//! MCP server had before: `POST /path` on the server).
//!
//! - **containment**: policies of N tool rules against a ceiling of N tool
//!   rules (10 servers, each rule one tool with a number range and a string
//!   glob, `additionalArguments: false`, every fifth a name glob; the
//!   ceiling widens every bound and denies `delete_*`), half Within and half
//!   Exceeds (one rule's bound raised past the ceiling), p50/p99 ms; the
//!   baseline proves the same rule count as `rest` endpoints, one path each.
//! - **decision**: `decide_mcp_indexed` on a policy of 1,000 tool rules (100
//!   servers), for allowed and refused calls, ns per call (each sample the
//!   mean of a batch of 100 consecutive calls); the baseline is
//!   `decide_network_indexed` for `POST /tool` on 1,000 `rest` rules.
//!
//! - **provenance**: the same decision with `from: [user]` on every
//!   recipient and amount, judged against a session record of 200 tool calls
//!   (a user request, then per call the result the model read: 1.5 KB of
//!   statements with IBANs, dates and amounts, the whole conversation sent
//!   again with every model request), beside the same policy without
//!   `from`; and the record's size after those 200 calls.
//! - **lineage**: what the proxy adds per allowed call to keep the session's
//!   observed graph (`agentgate_proxy::session`: the origin of every string
//!   and number of the arguments in the same record), ns per call.
//!
//! It exits non-zero when an answer differs from what the generator built.
//! Targets (docs/benchmarks.md): containment of 100-rule tool policies p99
//! ≤ 10 ms, a decision on 1,000 tool rules ≤ 2 µs.
//!
//! Knobs: `AGENTGATE_BENCH_SMOKE=1` (tiny sizes, the numbers are not
//! results), `BENCH_SIZES=10,100`, `BENCH_PAIRS=10`, `BENCH_REPS=20`,
//! `BENCH_DECISIONS=200000`.

use std::process::ExitCode;
use std::time::Instant;

use agentgate_bench::percentile;
use agentgate_policy::action::{Action, Layer, McpAction, McpKind, NetworkAction};
use agentgate_policy::compile::{CompiledPolicy, Role};
use agentgate_policy::index::HostIndex;
use agentgate_policy::matcher::{
    Caller, decide_mcp_indexed, decide_mcp_recorded, decide_network_indexed,
};
use agentgate_policy::provenance::{Lineage, Source};
use agentgate_prover::{Outcome, Prover, ProverOptions};
use agentgate_proxy::session::SessionGraph;
use agentgate_tests::policy;
use serde_json::json;

const SERVERS: usize = 10;

/// How a generated policy relates to the ceiling.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    /// The ceiling: every bound widened, `delete_*` denied.
    Ceiling,
    /// Inside the ceiling.
    Within,
    /// Rule `i`'s maximum raised past the ceiling's.
    Escaping(usize),
}

/// `n` tool rules over `servers` servers, as `mcp` endpoints.
fn tool_policy(n: usize, servers: usize, shape: Shape) -> String {
    let mut yaml = String::from("network:\n");
    for i in 0..n {
        let host = format!("svc{}.internal", i % servers);
        let maximum = match shape {
            Shape::Ceiling => 150 + i,
            Shape::Escaping(at) if at == i => 151 + i,
            _ => 100 + i,
        };
        let glob = if shape == Shape::Ceiling {
            "acct-*".to_string()
        } else {
            format!("acct-{i}-*")
        };
        let tool = if i % 5 == 4 {
            format!("{{name: 'get_{i}_*'}}")
        } else {
            format!(
                "{{name: tool_{i}, arguments: {{amount: {{minimum: 0, maximum: {maximum}}}, recipient: {{glob: '{glob}'}}}}, additionalArguments: false}}"
            )
        };
        let deny = if shape == Shape::Ceiling {
            ", denyTools: [{name: 'delete_*'}]"
        } else {
            ""
        };
        yaml.push_str(&format!(
            "  - {{name: r{i}, binaries: [/usr/bin/python3], endpoints: [{{host: {host}, ports: [443], protocol: mcp, path: /mcp, tools: [{tool}]{deny}}}]}}\n"
        ));
    }
    yaml
}

/// The same rule count as `rest` grants: `POST /tool_i` (the ceiling: `/**`
/// on every server, or one path too few when escaping).
fn rest_policy(n: usize, servers: usize, shape: Shape) -> String {
    let mut yaml = String::from("network:\n");
    for i in 0..n {
        let host = format!("svc{}.internal", i % servers);
        let path = match shape {
            Shape::Ceiling => format!("/tool_{i}/**"),
            Shape::Escaping(at) if at == i => format!("/tool_{i}x"),
            _ => format!("/tool_{i}/call"),
        };
        yaml.push_str(&format!(
            "  - {{name: r{i}, binaries: [/usr/bin/python3], endpoints: [{{host: {host}, ports: [443], protocol: rest, rules: [{{methods: [POST], path: '{path}'}}]}}]}}\n"
        ));
    }
    yaml
}

fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    std::env::var(name)
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .filter(|v: &Vec<usize>| !v.is_empty())
        .unwrap_or_else(|| default.to_vec())
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// p50 and p99 of samples.
fn summary(mut samples: Vec<f64>) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    (percentile(&samples, 50.0), percentile(&samples, 99.0))
}

/// Times containment of generated pairs; `Err` names a wrong answer.
fn containment(
    prover: &Prover,
    generate: fn(usize, usize, Shape) -> String,
    n: usize,
    pairs: usize,
    reps: usize,
    sizes_first: usize,
) -> Result<Vec<f64>, String> {
    let ceiling = policy(&generate(n, SERVERS, Shape::Ceiling), Role::Maximum);
    let mut samples = Vec::new();
    for pair in 0..pairs {
        let shape = if pair % 2 == 0 {
            Shape::Within
        } else {
            // A rule with a bound (every fifth has only a name glob).
            let at = (pair * 7919) % n;
            Shape::Escaping(if at % 5 == 4 { at - 1 } else { at })
        };
        let candidate = policy(&generate(n, SERVERS, shape), Role::Sandbox);
        for _ in 0..reps {
            let started = Instant::now();
            let proof = prover.containment(&candidate, &ceiling);
            samples.push(started.elapsed().as_secs_f64() * 1000.0);
            let expected = if shape == Shape::Within {
                "within"
            } else {
                "exceeds"
            };
            if proof.outcome.name() != expected {
                return Err(format!(
                    "N={n} pair {pair}: expected {expected}, got {:?}",
                    proof.outcome
                ));
            }
            if let Outcome::Exceeds { counterexample } = &proof.outcome
                && pair == 1
                && n == sizes_first
                && samples.len() == reps + 1
                && matches!(counterexample, Action::Mcp(_))
            {
                println!("  example counterexample (N={n}): {counterexample}");
            }
        }
    }
    Ok(samples)
}

/// Calls timed together: one sample is a batch's time divided by this, so
/// the clock's own cost and a VM's timer noise do not dominate a
/// microsecond.
const BATCH: usize = 100;

/// Times `decide` over `calls`, cycling, in batches of [`BATCH`]; returns
/// ns per call of each batch and how many calls were allowed in one pass.
fn decisions<A>(calls: &[A], total: usize, decide: impl Fn(&A) -> bool) -> (Vec<f64>, usize) {
    let allowed = calls.iter().filter(|c| decide(c)).count();
    let mut samples = Vec::with_capacity(total / BATCH + 1);
    let mut next = 0;
    while next < total {
        let started = Instant::now();
        for i in next..(next + BATCH).min(total) {
            std::hint::black_box(decide(std::hint::black_box(&calls[i % calls.len()])));
        }
        let done = (next + BATCH).min(total) - next;
        samples.push(started.elapsed().as_nanos() as f64 / done as f64);
        next += done;
    }
    (samples, allowed)
}

fn main() -> ExitCode {
    let smoke = std::env::var("AGENTGATE_BENCH_SMOKE").is_ok_and(|v| v == "1");
    let sizes = env_list("BENCH_SIZES", if smoke { &[10] } else { &[10, 100] });
    let pairs = env_number("BENCH_PAIRS", if smoke { 2 } else { 10 });
    let reps = env_number("BENCH_REPS", if smoke { 1 } else { 20 });
    let total = env_number("BENCH_DECISIONS", if smoke { 2_000 } else { 200_000 });
    let rules = if smoke { 100 } else { 1_000 };
    println!("bench-mcp: tool-call authority in process (release build unless smoke)");
    if smoke {
        println!("smoke run: the numbers are not results");
    }
    let prover = Prover::new(ProverOptions {
        cache_entries: 0,
        ..ProverOptions::default()
    });

    println!(
        "containment, N tool rules against an N-rule tool ceiling | the same as rest rules (ms)"
    );
    for &n in &sizes {
        let first = sizes[0];
        let tools = containment(&prover, tool_policy, n, pairs, reps, first);
        let rest = containment(&prover, rest_policy, n, pairs, reps, first);
        match (tools, rest) {
            (Ok(tools), Ok(rest)) => {
                let (count, (t50, t99), (r50, r99)) = (tools.len(), summary(tools), summary(rest));
                println!(
                    "  N={n:<5} checks={count:<5} tools p50 {t50:8.3} p99 {t99:8.3} | rest p50 {r50:8.3} p99 {r99:8.3}"
                );
            }
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("bench-mcp: wrong answer: {e}");
                return ExitCode::FAILURE;
            }
        }
    }

    let servers = rules / 10;
    let tools = policy(&tool_policy(rules, servers, Shape::Within), Role::Sandbox);
    let rest = policy(&rest_policy(rules, servers, Shape::Within), Role::Sandbox);
    let calls: Vec<McpAction> = (0..rules)
        .map(|i| McpAction {
            binary: "/usr/bin/python3".into(),
            host: format!("svc{}.internal", i % servers),
            port: 443,
            path: "/mcp".into(),
            kind: McpKind::Tool,
            name: if i % 5 == 4 {
                format!("get_{i}_x")
            } else {
                format!("tool_{i}")
            },
            // Every third call asks for more than any rule allows.
            args: json!({"amount": if i % 3 == 0 { 100_000 } else { 50 }, "recipient": format!("acct-{i}-7")})
                .as_object()
                .cloned()
                .unwrap_or_default(),
            sources: None,
            credential: None,
        })
        .collect();
    let requests: Vec<NetworkAction> = (0..rules)
        .map(|i| NetworkAction {
            binary: "/usr/bin/python3".into(),
            host: format!("svc{}.internal", i % servers),
            port: 443,
            layer: Layer::Rest,
            method: "POST".into(),
            path: if i % 3 == 0 {
                format!("/tool_{i}/other")
            } else {
                format!("/tool_{i}/call")
            },
            credential: None,
            query: Default::default(),
            upgrade: None,
        })
        .collect();
    let index_of = |p: &CompiledPolicy| HostIndex::build(p);
    let (tools_index, rest_index) = (index_of(&tools), index_of(&rest));
    let caller = Caller::Binary("/usr/bin/python3");
    let (mcp_ns, mcp_allowed) = decisions(&calls, total, |t| {
        decide_mcp_indexed(&tools, &tools_index, caller, t).allow
    });
    let (rest_ns, rest_allowed) = decisions(&requests, total, |a| {
        decide_network_indexed(&rest, &rest_index, caller, a).allow
    });
    let expected = calls
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 3 != 0 || i % 5 == 4)
        .count();
    if mcp_allowed != expected {
        eprintln!("bench-mcp: {mcp_allowed} tool calls allowed, expected {expected}");
        return ExitCode::FAILURE;
    }
    let (m50, m99) = summary(mcp_ns);
    let (r50, r99) = summary(rest_ns);
    println!(
        "decision on {rules} rules ({total} decisions, {mcp_allowed}/{} calls allowed): tools p50 {m50:.0} ns p99 {m99:.0} ns | rest ({rest_allowed} allowed) p50 {r50:.0} ns p99 {r99:.0} ns",
        calls.len()
    );

    // Provenance: the same calls, `from: [user]` on both arguments, judged
    // against a 200-call session's record.
    let sourced = policy(
        &tool_policy(rules, servers, Shape::Within)
            .replace("maximum: ", "from: [user], maximum: ")
            .replace("recipient: {glob:", "recipient: {from: [user], glob:"),
        Role::Sandbox,
    );
    let sourced_index = index_of(&sourced);
    let session = session_record(200, rules);
    let (with_ns, with_allowed) = decisions(&calls, total, |t| {
        decide_mcp_recorded(&sourced, &sourced_index, caller, t, &session).allow
    });
    let (without_ns, _) = decisions(&calls, total, |t| {
        decide_mcp_indexed(&tools, &tools_index, caller, t).allow
    });
    // The user named every recipient of an even-numbered tool: those calls
    // within the bounds are allowed, the others refused.
    let expected = calls
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 5 == 4 || (i % 3 != 0 && i % 2 == 0))
        .count();
    if with_allowed != expected {
        eprintln!("bench-mcp: {with_allowed} sourced calls allowed, expected {expected}");
        return ExitCode::FAILURE;
    }
    let (w50, w99) = summary(with_ns);
    let (o50, o99) = summary(without_ns);
    println!(
        "provenance on {rules} rules, a 200-call session's record: with from p50 {w50:.0} ns p99 {w99:.0} ns | without p50 {o50:.0} ns p99 {o99:.0} ns | added p99 {:.0} ns",
        w99 - o99
    );
    println!(
        "session record after 200 calls: {} bytes of content, about {} bytes of heap",
        session.kept_bytes(),
        session.heap_bytes()
    );
    let graph = std::cell::RefCell::new(SessionGraph::default());
    let (graph_ns, _) = decisions(&calls, total, |t| {
        graph.borrow_mut().called(t, Some(&session));
        true
    });
    let (g50, g99) = summary(graph_ns);
    println!(
        "lineage: the session graph per allowed call (origins of every argument value in the same record): p50 {g50:.0} ns p99 {g99:.0} ns"
    );
    ExitCode::SUCCESS
}

/// The record of a session of `calls` tool calls, as the proxy builds it
/// from the model requests: the user asks to pay the recipients of the
/// even-numbered tools (50 each); each call's result, 1.5 KB of a
/// statement, is in every later request (kept once).
fn session_record(calls: usize, rules: usize) -> Lineage {
    let mut lineage = Lineage::new(4 << 20);
    let recipients: Vec<String> = (0..rules)
        .step_by(2)
        .map(|i| format!("acct-{i}-7"))
        .collect();
    let user = format!(
        "Please pay 50 to each of {} and tell me my balance.",
        recipients.join(", ")
    );
    let mut conversation = vec![
        (
            Source::User,
            "You are a careful banking assistant.".to_string(),
        ),
        (Source::User, user),
    ];
    for call in 0..calls {
        for (source, text) in &conversation {
            lineage.observe(source.clone(), text);
        }
        let mut statement = String::new();
        while statement.len() < 1500 {
            let n = statement.len();
            statement.push_str(&format!(
                "- id: {n}\n  date: 2024-03-{:02}\n  amount: {}.{:02}\n  recipient: DE89370400440532{n:06}\n  subject: statement line {call}\n",
                n % 28 + 1,
                n * 7 % 1000,
                n % 100
            ));
        }
        conversation.push((
            Source::Tool(format!("get_statement_{}", call % 7)),
            statement,
        ));
    }
    lineage
}
