//! The AgentDojo suites as MCP servers (e2e/agentdojo/suite_server.py),
//! the base of the AgentDojo replay through agentgate-proxy: for each of
//! the four suites, the server started as the replay starts it answers the
//! official MCP SDK's client exactly as AgentDojo's own runtime answers
//! (e2e/agentdojo/check_server.py: the same tools and schemas, the same
//! result text for the first user task's ground-truth calls, injection
//! vectors filled).
//!
//! Needs the AgentDojo virtualenv (hack/install-agentdojo.sh, which this
//! test runs: pip, once, cached under ~/.cache/agentgate); without it the
//! test fails, it never skips.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentgate_e2e::{agentdojo_python, free_loopback_port, repo_root};

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
