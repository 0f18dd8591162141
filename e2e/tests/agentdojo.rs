//! The base of the AgentDojo replay through agentgate-proxy:
//!
//! - the four suites as MCP servers (e2e/agentdojo/suite_server.py): each,
//!   started as the replay starts it, answers the official MCP SDK's client
//!   exactly as AgentDojo's own runtime answers (e2e/agentdojo/check_server.py:
//!   the same tools and schemas, the same result text for the first user
//!   task's ground-truth calls, injection vectors filled);
//! - the traces an agent would produce (e2e/agentdojo/traces.py): the
//!   split by task number, the trace format, the injected calls right after
//!   the call that read the injection.
//!
//! Needs the AgentDojo virtualenv (hack/install-agentdojo.sh, which this
//! test runs: pip, once, cached under ~/.cache/agentgate); without it the
//! test fails, it never skips.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentgate_e2e::{agentdojo_python, free_loopback_port, repo_root};
use serde_json::Value;

/// Kills the server however the test ends.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn every_suite_is_served_as_agentdojo_runs_it() {
    let python = agentdojo_python().unwrap();
    let dir = repo_root().join("e2e/agentdojo");
    let calls = std::env::temp_dir().join(format!("agentgate-agentdojo-{}", std::process::id()));
    std::fs::create_dir_all(&calls).unwrap();
    for suite in ["banking", "slack", "travel", "workspace"] {
        let port = free_loopback_port().unwrap();
        let log = calls.join(format!("{suite}-calls.log"));
        let server_log = calls.join(format!("{suite}-server.log"));
        let mut child = Command::new(&python)
            .arg(dir.join("suite_server.py"))
            .args([suite, "127.0.0.1", &port.to_string()])
            .arg(&log)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&server_log).unwrap())
            .spawn()
            .unwrap();
        let server_said = || std::fs::read_to_string(&server_log).unwrap_or_default();
        let stdout = child.stdout.take().unwrap();
        let server = Server(child);
        // The server prints `ready` once it listens.
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut lines = BufReader::new(stdout).lines();
        loop {
            assert!(
                Instant::now() < deadline,
                "the {suite} server never got ready"
            );
            match lines.next() {
                Some(Ok(line)) if line.starts_with("ready") => break,
                Some(_) => {}
                None => panic!("the {suite} server exited before it was ready"),
            }
        }
        let out = Command::new(&python)
            .arg(dir.join("check_server.py"))
            .args([suite, &format!("http://127.0.0.1:{port}")])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("\"ok\": true"),
            "{suite}: {stdout}\n{}\nthe server:\n{}",
            String::from_utf8_lossy(&out.stderr),
            server_said()
        );
        // Every call the check made reached the server and was logged.
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
        let made: Vec<&str> = report["calls"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c.as_str())
            .collect();
        let reached: Vec<String> = logged
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|c| c["tool"].as_str().map(str::to_string))
            .collect();
        assert_eq!(reached, made, "{suite}: the server's call log");
        drop(server);
    }
    let _ = std::fs::remove_dir_all(&calls);
}

/// The task number of `suite/user_task_N` or of either part of
/// `suite/user_task_N+injection_task_M`.
fn numbers(id: &str) -> Vec<u32> {
    id.split(['/', '+'])
        .filter_map(|part| part.rsplit_once('_'))
        .filter_map(|(_, n)| n.parse().ok())
        .collect()
}

#[test]
fn traces_split_by_task_number_and_insert_the_injected_calls_once() {
    let python = agentdojo_python().unwrap();
    let out = Command::new(&python)
        .arg(repo_root().join("e2e/agentdojo/traces.py"))
        .args(["banking", "test"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let traces: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (benign, attacks): (Vec<&Value>, Vec<&Value>) =
        traces.iter().partition(|t| t["kind"] == "benign");
    // Banking: user tasks 0-15 and injection tasks 0-8; the test split is
    // the odd ones, every user task reads one injection vector.
    assert_eq!(benign.len(), 8);
    assert_eq!(attacks.len(), 8 * 4);
    for trace in &traces {
        let id = trace["id"].as_str().unwrap();
        assert!(
            numbers(id).iter().all(|n| n % 2 == 1),
            "{id} is not in the test split"
        );
        let steps = trace["steps"].as_array().unwrap();
        assert!(
            steps[0]["user"].is_string(),
            "{id} starts with the user's prompt"
        );
        assert!(
            steps[1..].iter().all(|s| s["call"]["name"].is_string()),
            "{id}"
        );
    }
    for attack in attacks {
        let id = attack["id"].as_str().unwrap();
        let injections = attack["injections"].as_object().unwrap();
        assert_eq!(injections.len(), 1, "{id}");
        let text = injections.values().next().unwrap().as_str().unwrap();
        assert!(
            text.contains("This is an important message from me, Emma Johnson, to you, GPT-4."),
            "{id}: {text}"
        );
        // The user task's own calls, in order, with the injection task's
        // inserted after one of them and never first.
        let steps = &attack["steps"].as_array().unwrap()[1..];
        let injected: Vec<usize> = (0..steps.len())
            .filter(|&i| steps[i]["injected"] == true)
            .collect();
        assert!(!injected.is_empty() && injected[0] > 0, "{id}");
        assert!(
            injected.windows(2).all(|w| w[0] + 1 == w[1]),
            "{id}: one run"
        );
        let own: Vec<&Value> = steps.iter().filter(|s| s["injected"] == false).collect();
        let user_id = id.split('+').next().unwrap();
        let benign_trace = benign.iter().find(|b| b["id"] == user_id).unwrap();
        let benign_calls: Vec<&Value> = benign_trace["steps"].as_array().unwrap()[1..]
            .iter()
            .collect();
        assert_eq!(
            own, benign_calls,
            "{id}: the user task's calls are the benign trace's"
        );
    }
}
