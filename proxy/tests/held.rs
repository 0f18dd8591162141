//! Held calls through the real `agentgate-proxy` (docs/proxy.md, "Held
//! calls"): a `tools/call` only a `mode: ask` entry matches waits while the
//! approval service decides; approved it reaches the server once, denied
//! or failed it is answered with the refusal's code, and a batch is never
//! held. The approval service here is a plain HTTP server on loopback that
//! answers as the test says and records what it was asked.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use support::{Harness, runtime};

const POLICY: &str = r#"network:
  - name: bank
    binaries: [{CURL}]
    endpoints:
      - host: other.example.test
        ports: [{PORT}]
        protocol: mcp
        path: /mcp
        tools:
          - name: get_balance
          - {name: close_account, mode: ask}
        denyTools:
          - name: close_all_accounts
          - {name: close_account, arguments: {reason: {oneOf: [forbidden]}}, additionalArguments: true}
"#;

/// What the approval service answers, one per hold, and what it was asked.
#[derive(Default)]
struct Approver {
    answers: Mutex<VecDeque<(u16, String)>>,
    asked: Mutex<Vec<(Option<String>, Value)>>,
}

/// Serves `approver` on a loopback port; returns the port.
fn serve(approver: Arc<Approver>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let (mut length, mut token) = (0usize, None);
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                if lower.starts_with("authorization:") {
                    token = line
                        .split_once("Bearer ")
                        .map(|(_, t)| t.trim().to_string());
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let asked: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            approver.asked.lock().unwrap().push((token, asked));
            let (status, answer) = approver
                .answers
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or((500, "no answer queued".into()));
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                answer.len()
            );
        }
    });
    port
}

fn call(h: &Harness, body: &Value) -> Value {
    let ca = h.sandbox_ca.display().to_string();
    let (code, text, _) = h.curl(&[
        "--cacert",
        &ca,
        "-H",
        "content-type: application/json",
        "-H",
        "accept: application/json, text/event-stream",
        "-d",
        &body.to_string(),
        &h.url("other.example.test", "/mcp"),
    ]);
    assert_eq!(code, 0, "{text}\n{}", h.proxy_log());
    let event = text.lines().find_map(|l| l.strip_prefix("data: "));
    serde_json::from_str(event.unwrap_or(&text)).unwrap_or(Value::Null)
}

fn close(id: u32, reason: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "close_account", "arguments": {"account": "ACC-1", "reason": reason}}})
}

#[test]
fn a_held_call_waits_for_a_person_and_reads_the_answer() {
    use agentgate_proxy::testkit::mcp_received;
    let approver = Arc::new(Approver::default());
    let port = serve(approver.clone());
    let rt = runtime();
    let mut h = Harness::new(&rt, "held");
    h.write_policy(&h.render(POLICY));
    let token = h.dir.join("token");
    std::fs::write(&token, "projected-token\n").unwrap();
    let url = format!("http://127.0.0.1:{port}/v1/hold");
    let token_arg = token.display().to_string();
    h.start_proxy(&[
        "--approvals",
        &url,
        "--approvals-token",
        &token_arg,
        "--hold-timeout",
        "7",
    ]);
    h.wait_ready(200);
    let answer = |decision: &str, by: &str, message: &str| {
        (
            200,
            json!({"decision": decision, "heldCall": "bank-bot-x7k2p", "decidedBy": by, "message": message})
                .to_string(),
        )
    };
    {
        let mut answers = approver.answers.lock().unwrap();
        answers.push_back(answer("approved", "alice", ""));
        answers.push_back(answer("denied", "alice", "not that account"));
        answers.push_back(answer("expired", "", ""));
        answers.push_back((503, r#"{"reason": "cannot record the held call"}"#.into()));
    }

    // Approved: forwarded, once.
    let reply = call(&h, &close(1, "moving"));
    assert_eq!(
        reply["result"]["content"][0]["text"], "called close_account",
        "{reply}"
    );
    let (token_sent, asked) = approver.asked.lock().unwrap()[0].clone();
    assert_eq!(token_sent.as_deref(), Some("projected-token"));
    assert_eq!(asked["tool"], "close_account");
    assert_eq!(asked["rule"], "bank");
    assert_eq!(asked["arguments"]["account"], "ACC-1");
    assert_eq!(asked["timeoutSeconds"], 7);
    assert!(
        asked["reason"]
            .as_str()
            .unwrap()
            .contains("no rule allows tools/call close_account")
    );
    let forwarded = |name: &str| {
        mcp_received()
            .iter()
            .filter(|r| *r == &format!("tools/call {name}"))
            .count()
    };
    assert_eq!(forwarded("close_account"), 1);
    let balance = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                         "params": {"name": "get_balance", "arguments": {}}});
    assert!(call(&h, &balance)["result"].is_object());
    // The session's graph shows both calls, the held one as any other.
    let (_, lineage) = h.get_metrics_path("/lineage");
    let lineage: Value = serde_json::from_str(&lineage).unwrap();
    let nodes: Vec<&str> = lineage["graph"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["id"].as_str())
        .collect();
    assert!(
        nodes.contains(&"close_account") && nodes.contains(&"get_balance"),
        "{lineage}"
    );

    // Denied, expired, not recorded: refused with their codes, never sent.
    for (id, code, says) in [
        (
            2,
            "held_call_denied",
            "denied by alice (heldcall bank-bot-x7k2p): not that account",
        ),
        (3, "held_call_expired", "nobody decided in time"),
        (4, "held_call_unavailable", "cannot record the held call"),
    ] {
        let reply = call(&h, &close(id, "moving"));
        assert_eq!(reply["id"], id, "{reply}");
        assert_eq!(reply["error"]["data"]["code"], code, "{reply}");
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
    }
    assert_eq!(forwarded("close_account"), 1);

    // A deny entry refuses outright, and a batch is never held: the
    // approval service is not asked.
    let asked_before = approver.asked.lock().unwrap().len();
    let reply = call(&h, &close(5, "forbidden"));
    assert_eq!(reply["error"]["data"]["code"], "denied_by_rule", "{reply}");
    let batch = json!([
        {"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "get_balance", "arguments": {}}},
        close(7, "moving"),
    ]);
    let replies = call(&h, &batch);
    assert_eq!(
        replies[1]["error"]["data"]["code"], "held_call_unavailable",
        "{replies}"
    );
    assert!(
        replies[1]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("send the call alone")
    );
    assert_eq!(approver.asked.lock().unwrap().len(), asked_before);

    let (_, metrics) = h.get_metrics_path("/metrics");
    assert!(
        metrics.contains("agentgate_proxy_held_calls_total{outcome=\"approved\"} 1"),
        "{metrics}"
    );
}

#[test]
fn without_an_approval_service_a_held_call_is_refused() {
    let rt = runtime();
    let mut h = Harness::new(&rt, "held-none");
    h.write_policy(&h.render(POLICY));
    h.start_proxy(&[]);
    h.wait_ready(200);
    let reply = call(&h, &close(1, "moving"));
    assert_eq!(
        reply["error"]["data"]["code"], "held_call_unavailable",
        "{reply}"
    );
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("no approval service (--approvals)"),
        "{message}"
    );
}
