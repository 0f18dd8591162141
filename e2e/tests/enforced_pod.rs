//! The sandbox's Pod, as the API server stored it, run by the pod runner
//! (no kubelet here): the operator's init container, proxy sidecar and
//! `agentgate-exec` enforce the committed policy on a live agent.
//!
//! 1. allowed GET through the proxy, POST outside the policy refused with
//!    the reason, a direct connection that ignores `HTTP_PROXY` redirected
//!    and judged the same, the same GET by another binary refused (the
//!    rule names curl), UDP to a non-DNS port dropped;
//! 2. a PolicyProposal applied reaches the running agent without a
//!    restart (a REST POST and an MCP tool, `send_money`, until then refused
//!    as a JSON-RPC error with its reason); a tightened MaximumPolicy takes
//!    both away again;
//! 3. a write outside `readWrite` fails with EACCES, inside succeeds;
//! 4. a refusal a trifecta finding predicted cites the finding (through
//!    TLS interception with the sandbox CA from the pod's CA bundle).
//!
//! Needs root, unshare/nsenter/setpriv/ip/nft/curl/python3 (`make
//! netns-tools`); without them the test fails, it never skips.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use agentgate_e2e::pod_runner::{DNS_IP, PodRunner, example_images, example_network};
use agentgate_e2e::probe::{self, now, probes, tail};
use agentgate_e2e::{AGENT_IMAGE, ControlPlane};

/// Waits until a probe that started after `since` has `field == want`;
/// returns the seconds from `since` to that probe's start.
fn first_after(runner: &PodRunner, since: f64, field: &str, want: &str) -> f64 {
    probe::first_after(
        || runner.log("agent"),
        since,
        field,
        want,
        Duration::from_secs(30),
    )
    .unwrap_or_else(|agent| {
        panic!(
            "no probe with {field}={want} after the change\nagent:\n{agent}\nproxy:\n{}",
            tail(&runner.log("agentgate-proxy"), 40)
        )
    })
}

#[test]
fn the_sandbox_pod_enforces_the_committed_policy() {
    let (cp, operator, _port) = ControlPlane::with_webhook(&[]).unwrap();
    cp.apply_yaml(&probe::ceiling("runner", false)).unwrap();
    cp.apply_example_scan().unwrap();
    let sandbox = probe::sandbox("runner", AGENT_IMAGE, "IfNotPresent", "[/srv/agent]");
    // The webhook answers from its caches: retry until they hold the ceiling.
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = cp.apply_yaml(&sandbox) {
        assert!(
            Instant::now() < deadline,
            "the sandbox was never admitted: {e}\n{}",
            tail(&operator.log(), 40)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    cp.wait_pod("runner", "runner-bot", Duration::from_secs(60))
        .unwrap_or_else(|last| panic!("no pod ({last:?})\n{}", operator.log()));

    // The images (the data plane's binaries, the agent's script) and the
    // pod's network (DNS, an echo upstream).
    let dir = std::env::temp_dir().join(format!("agentgate-pod-runner-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let _cleanup = Cleanup(dir.clone());
    let images = example_images(&dir, AGENT_IMAGE, &probe::agent_script()).unwrap();
    let netns = example_network(&dir).unwrap();
    let mut runner = PodRunner::start(
        &cp.kubectl_handle(),
        &netns,
        "runner",
        "runner-bot",
        &images,
        &format!("nameserver {DNS_IP}\n"),
    )
    .unwrap_or_else(|e| panic!("{e}\noperator:\n{}", tail(&operator.log(), 40)));

    // Scenario 1 and 3 and 4: the first round of probes.
    let deadline = Instant::now() + Duration::from_secs(30);
    while probes(&runner.log("agent")).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the agent never probed:\n{}\nproxy:\n{}",
            runner.log("agent"),
            runner.log("agentgate-proxy")
        );
        assert_eq!(
            runner.wait_exit("agent", Duration::ZERO),
            None,
            "{}",
            runner.log("agent")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = runner.log("agent");
    let context = format!(
        "agent:\n{}\nproxy:\n{}\ninit:\n{}",
        tail(&log, 40),
        tail(&runner.log("agentgate-proxy"), 40),
        runner.log("agentgate-init")
    );
    // Scenarios 1, 3 and 4: every way out, once.
    if let Err(e) = probe::check_first_round(&log) {
        panic!("{e}\n{context}");
    }

    // Scenario 2: a proposal reaches the running agent, a tightened
    // maximum takes it away; the agent is never restarted.
    let applied_at = now();
    cp.apply_yaml(&probe::write_proposal("runner")).unwrap();
    let gained = first_after(&runner, applied_at, "post", "200");
    // The same proposal grants the MCP tool send_money: the running agent
    // calls it through the same proxy, unrestarted.
    let tool_gained = first_after(&runner, applied_at, "mcp", "forwarded");
    // Forwarded POST bodies leave the pooled upstream connections usable:
    // the granted GET still passes in the rounds after.
    let since = now();
    first_after(&runner, since, "get", "200");
    let tightened_at = now();
    cp.apply_yaml(&probe::ceiling("runner", true)).unwrap();
    let revoked = first_after(&runner, tightened_at, "post", "403");
    let tool_revoked = first_after(&runner, tightened_at, "mcp", "refused");
    assert_eq!(
        runner.wait_exit("agent", Duration::ZERO),
        None,
        "the agent kept running"
    );
    let rounds = probes(&runner.log("agent"));
    // The ConfigMap changed twice since the first round: the CA bundle is
    // still readable under Landlock, so interception still works.
    let last = rounds.last().map(|p| p.field("github")).unwrap_or_default();
    assert_eq!(
        last,
        "403",
        "after the ConfigMap updates:\n{}",
        tail(&runner.log("agent"), 40)
    );
    let (period, unbroken) = probe::rounds(&rounds);
    assert!(unbroken, "one process, never restarted");
    println!(
        "pod runner: proposal applied → running agent allowed in {gained:.2} s (its tool call in {tool_gained:.2} s); maximum tightened → refused in {revoked:.2} s ({tool_revoked:.2} s) (probe rounds of ~{period:.2} s)"
    );
    drop(runner);
    drop(netns);
    drop(operator);
}

/// Removes the runner's directory however the test ends.
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
