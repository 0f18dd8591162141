//! The base of the AgentDojo replay through agentgate-proxy:
//!
//! - the four suites as MCP servers (e2e/agentdojo/suite_server.py): each,
//!   started as the replay starts it, answers the official MCP SDK's client
//!   exactly as AgentDojo's own runtime answers (e2e/agentdojo/check_server.py:
//!   the same tools and schemas, the same result text for the first user
//!   task's ground-truth calls, injection vectors filled);
//! - the traces an agent would produce (e2e/agentdojo/traces.py): the
//!   split by task number, the trace format, the injected calls right after
//!   the call that read the injection;
//! - their replay (e2e/agentdojo/replay.py) through agentgate-proxy in a
//!   network namespace: each call is refused exactly when the policy's
//!   tool allowlist lacks its tool, and the server's call log holds exactly
//!   the calls allowed.
//!
//! Needs the AgentDojo virtualenv (hack/install-agentdojo.sh, which these
//! tests run: pip, once, cached under ~/.cache/agentgate), and for the
//! replay root, unshare, ip and curl; without them a test fails, it never
//! skips.
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

/// The banking suite's test-split traces, as traces.py prints them.
fn banking_test_traces(python: &std::path::Path) -> String {
    let out = Command::new(python)
        .arg(repo_root().join("e2e/agentdojo/traces.py"))
        .args(["banking", "test"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn traces_split_by_task_number_and_insert_the_injected_calls_once() {
    let python = agentdojo_python().unwrap();
    let traces: Vec<Value> = banking_test_traces(&python)
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

/// The tools the replay's policy grants on the banking server: neither
/// `update_password` nor `update_user_info` (both called by test traces).
const GRANTED: [&str; 6] = [
    "get_most_recent_transactions",
    "get_scheduled_transactions",
    "read_file",
    "schedule_transaction",
    "send_money",
    "update_scheduled_transaction",
];

/// A sandbox CA for the proxy (it intercepts nothing here: the server
/// speaks plain HTTP).
fn sandbox_ca() -> (String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
}

#[test]
fn replayed_calls_are_refused_exactly_where_the_policy_says() {
    // unshare, ip and curl: installed once, or the reason it cannot be.
    agentgate_e2e::script_output("hack/install-netns-tools.sh", &[]).unwrap();
    let python = agentdojo_python().unwrap();
    let dir =
        std::env::temp_dir().join(format!("agentgate-agentdojo-replay-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("traces.jsonl"), banking_test_traces(&python)).unwrap();
    let (cert, key) = sandbox_ca();
    std::fs::write(dir.join("ca.pem"), cert).unwrap();
    std::fs::write(dir.join("ca.key"), key).unwrap();
    let tools: Vec<String> = GRANTED
        .iter()
        .map(|t| format!("          - name: {t}\n"))
        .collect();
    std::fs::write(
        dir.join("policy.yaml"),
        format!(
            "network:\n  - name: banking\n    endpoints:\n      - host: banking.agentdojo\n        ports: [8931]\n        protocol: mcp\n        path: /mcp\n        tools:\n{}",
            tools.concat()
        ),
    )
    .unwrap();
    let support = repo_root().join("e2e/agentdojo");
    let script = format!(
        r#"set -u
d={dir}
ip link set lo up
{python} {support}/suite_server.py banking 127.0.0.1 8931 $d/calls.log > $d/server.log 2>&1 &
{proxy} --policy $d/policy.yaml --listen 127.0.0.1:15000 --metrics-listen 127.0.0.1:15020 \
  --ca-cert $d/ca.pem --ca-key $d/ca.key --resolve banking.agentdojo:8931:127.0.0.1 > $d/proxy.log 2>&1 &
for i in $(seq 300); do
  grep -q ready $d/server.log && curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:15020/readyz 2>/dev/null | grep -q 200 && break
  sleep 0.1
done
HTTP_PROXY=http://127.0.0.1:15000 http_proxy=http://127.0.0.1:15000 NO_PROXY= no_proxy= \
  {python} {support}/replay.py $d/traces.jsonl banking=http://banking.agentdojo:8931/mcp
status=$?
kill $(jobs -p) 2>/dev/null
wait 2>/dev/null
exit $status
"#,
        dir = dir.display(),
        python = python.display(),
        support = support.display(),
        proxy = agentgate_e2e::proxy_binary().unwrap().display(),
    );
    let out = Command::new("unshare")
        .args(["--net", "bash", "-c", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let context = format!(
        "{stdout}\n{}\nserver:\n{}\nproxy:\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(dir.join("server.log")).unwrap_or_default(),
        std::fs::read_to_string(dir.join("proxy.log")).unwrap_or_default()
    );
    assert!(out.status.success(), "{context}");
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut allowed = Vec::new();
    let mut refused = 0;
    for trace in lines.iter().filter(|l| l.get("id").is_some()) {
        for call in trace["calls"].as_array().unwrap() {
            let name = call["name"].as_str().unwrap();
            let granted = GRANTED.contains(&name);
            assert_eq!(
                call["decision"],
                if granted { "allow" } else { "deny" },
                "{}: {call}",
                trace["id"]
            );
            if granted {
                allowed.push(name.to_string());
            } else {
                refused += 1;
                assert!(
                    call["reason"].as_str().unwrap().starts_with(&format!(
                        "no_rule: refused by agentgate: tools/call {name} "
                    )),
                    "{call}"
                );
            }
        }
    }
    assert!(
        refused > 0,
        "the traces call tools the policy lacks: {context}"
    );
    // The server saw exactly the allowed calls, in order.
    let reached: Vec<String> = std::fs::read_to_string(dir.join("calls.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|c| c["tool"].as_str().map(str::to_string))
        .collect();
    assert_eq!(reached, allowed, "{context}");
    // The totals agree with the lines.
    let benign = lines.iter().find(|l| l["totals"] == "benign").unwrap();
    assert_eq!(benign["traces"], 8, "{context}");
    let _ = std::fs::remove_dir_all(&dir);
}
