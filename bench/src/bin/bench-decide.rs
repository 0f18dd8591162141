//! `make bench-webhook` (in-process half): the runtime decision point's
//! cost per evaluation, `decide_action` (canonical checks, matcher and the
//! one-line reason) and the bare matcher, on a compiled 100-rule policy over
//! 1,000 actions (half allowed). Prints numbers; asserts nothing about speed,
//! but exits non-zero when an answer differs from the generator's
//! expectation. `AGENTGATE_BENCH_SMOKE=1` (`make bench-smoke`): a 6-rule
//! policy, 60 actions, 3 rounds; same checks, numbers that are not results.

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use agentgate::webhook::decide::{DecideRequest, decide_action};
use agentgate_policy::action::{Layer, NetworkAction};
use agentgate_policy::compile::{Limits, Role, compile};
use agentgate_policy::matcher::decide_network;
use agentgate_policy::model::PolicyDocument;

/// Rules of the policy, actions, rounds over all actions.
fn sizes() -> (usize, usize, usize) {
    if std::env::var("AGENTGATE_BENCH_SMOKE").is_ok_and(|v| v == "1") {
        (6, 60, 3)
    } else {
        (100, 1000, 1000)
    }
}

fn policy(rules: usize) -> Result<PolicyDocument, String> {
    let network = agentgate_bench::rest_rules(
        rules,
        |i| format!("svc-{i}"),
        |i| format!("api{i}.example.com"),
        &["GET", "POST"],
        |_| "/v1/*/items/**".to_string(),
    );
    serde_json::from_value(serde_json::json!({"network": network})).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let (rules, count, rounds) = sizes();
    let doc = match policy(rules) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("bench-decide: {e}");
            return ExitCode::FAILURE;
        }
    };
    let compiled = match compile(&doc, Role::Sandbox, &Limits::default()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("bench-decide: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Hosts 0..1.5 x rules (0..150): a third match no rule; paths alternate
    // inside/outside. Allowed: a host with a rule and a /v1/ path.
    let hosts = rules * 3 / 2;
    let expected: Vec<bool> = (0..count)
        .map(|i| (i * 7) % hosts < rules && i % 2 == 0)
        .collect();
    let actions: Vec<NetworkAction> = (0..count)
        .map(|i| NetworkAction {
            binary: "/usr/local/bin/agent".into(),
            host: format!("api{}.example.com", (i * 7) % hosts),
            port: 443,
            layer: Layer::Rest,
            method: if i % 3 == 0 { "POST" } else { "GET" }.into(),
            path: if i % 2 == 0 {
                format!("/v1/t{i}/items/{i}")
            } else {
                format!("/v2/t{i}/items")
            },
            credential: None,
            query: Default::default(),
            upgrade: None,
        })
        .collect();
    let requests: Vec<DecideRequest> = actions
        .iter()
        .map(|a| DecideRequest {
            sandbox: "bench".into(),
            namespace: "agents".into(),
            binary: Some(a.binary.clone()),
            host: Some(a.host.clone()),
            port: Some(a.port),
            layer: Some(a.layer),
            method: Some(a.method.clone()),
            path: Some(a.path.clone()),
            ..DecideRequest::default()
        })
        .collect();
    let allowed = actions
        .iter()
        .filter(|a| decide_network(&compiled, a).allow)
        .count();
    // Both paths must give the generator's answer on every action.
    for (i, ((a, r), &want)) in actions.iter().zip(&requests).zip(&expected).enumerate() {
        let bare = decide_network(&compiled, a).allow;
        let full = decide_action(&compiled, r);
        if bare != want || full.allow != want {
            eprintln!(
                "bench-decide: action {i} ({} {}{}): expected allow={want}, matcher said {bare}, decide_action said {} ({})",
                a.method, a.host, a.path, full.allow, full.reason
            );
            return ExitCode::FAILURE;
        }
    }
    if allowed == 0 || allowed == actions.len() {
        eprintln!(
            "bench-decide: {allowed} of {} actions allowed: the mix is broken",
            actions.len()
        );
        return ExitCode::FAILURE;
    }

    let started = Instant::now();
    for _ in 0..rounds {
        for r in &requests {
            black_box(decide_action(black_box(&compiled), black_box(r)));
        }
    }
    let full = started.elapsed().as_secs_f64() / (rounds * requests.len()) as f64;

    let started = Instant::now();
    for _ in 0..rounds {
        for a in &actions {
            black_box(decide_network(black_box(&compiled), black_box(a)));
        }
    }
    let bare = started.elapsed().as_secs_f64() / (rounds * actions.len()) as f64;

    println!(
        "decide in process: {rules}-rule policy, {} actions ({allowed} allowed), {} evaluations each",
        actions.len(),
        rounds * actions.len()
    );
    println!(
        "decide_action (checks + matcher + reason): {:>8.3} us/evaluation",
        full * 1e6
    );
    println!(
        "matcher only (decide_network):            {:>8.3} us/evaluation",
        bare * 1e6
    );
    ExitCode::SUCCESS
}
