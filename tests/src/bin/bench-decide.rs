//! `make bench-webhook` (in-process half): the runtime decision point's
//! cost per evaluation, `decide_action` (canonical checks, matcher and the
//! one-line reason) and the bare matcher, on a compiled 100-rule policy over
//! 1,000 actions (half allowed). Prints numbers; asserts nothing about speed.

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use agentgate::policy::action::{Layer, NetworkAction};
use agentgate::policy::compile::{Limits, Role, compile};
use agentgate::policy::matcher::decide_network;
use agentgate::policy::model::PolicyDocument;
use agentgate::webhook::decide::{DecideRequest, decide_action};

const RULES: usize = 100;
const ROUNDS: usize = 1000;

fn policy() -> Result<PolicyDocument, String> {
    let network: Vec<serde_json::Value> = (0..RULES)
        .map(|i| {
            serde_json::json!({
                "name": format!("svc-{i}"),
                "binaries": ["/usr/local/bin/agent"],
                "endpoints": [{
                    "host": format!("api{i}.example.com"),
                    "ports": [443],
                    "protocol": "rest",
                    "rules": [{"methods": ["GET", "POST"], "path": "/v1/*/items/**"}],
                    "denyRules": [{"methods": ["POST"], "path": "/v1/admin/**"}],
                }],
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({"network": network})).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let doc = match policy() {
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
    // Hosts 0..150: a third match no rule; paths alternate inside/outside.
    let actions: Vec<NetworkAction> = (0..1000)
        .map(|i| NetworkAction {
            binary: "/usr/local/bin/agent".into(),
            host: format!("api{}.example.com", (i * 7) % 150),
            port: 443,
            layer: Layer::Rest,
            method: if i % 3 == 0 { "POST" } else { "GET" }.into(),
            path: if i % 2 == 0 {
                format!("/v1/t{i}/items/{i}")
            } else {
                format!("/v2/t{i}/items")
            },
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
            access: None,
        })
        .collect();
    let allowed = actions
        .iter()
        .filter(|a| decide_network(&compiled, a).allow)
        .count();

    let started = Instant::now();
    for _ in 0..ROUNDS {
        for r in &requests {
            black_box(decide_action(black_box(&compiled), black_box(r)));
        }
    }
    let full = started.elapsed().as_secs_f64() / (ROUNDS * requests.len()) as f64;

    let started = Instant::now();
    for _ in 0..ROUNDS {
        for a in &actions {
            black_box(decide_network(black_box(&compiled), black_box(a)));
        }
    }
    let bare = started.elapsed().as_secs_f64() / (ROUNDS * actions.len()) as f64;

    println!(
        "decide in process: {RULES}-rule policy, {} actions ({allowed} allowed), {} evaluations each",
        actions.len(),
        ROUNDS * actions.len()
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
