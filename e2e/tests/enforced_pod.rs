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
//!    both away again. The same holds for the agent's client from the
//!    official MCP SDK (e2e/support/mcp_agent.py) against the SDK's bank
//!    server, within one open Streamable HTTP session: the grant and the
//!    revocation reach that session, and the server's own call log shows
//!    exactly the calls the client saw forwarded;
//! 3. a write outside `readWrite` fails with EACCES, inside succeeds;
//! 4. a refusal a trifecta finding predicted cites the finding (through
//!    TLS interception with the sandbox CA from the pod's CA bundle).
//!
//! Needs root, unshare/nsenter/setpriv/ip/nft/curl/python3 (`make
//! netns-tools`) and the MCP SDK (`make mcp-sdk`); without them the test
//! fails, it never skips.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use agentgate_e2e::pod_runner::{PodRunner, example_images, example_network, example_sdk_bank};
use agentgate_e2e::probe::{self, Probe, now, probes, sdk_rounds, tail};
use agentgate_e2e::world::{DNS_IP, SDK_BANK_HOST, SDK_BANK_PORT};
use agentgate_e2e::{AGENT_IMAGE, ControlPlane, mcp_sdk, repo_root};
use serde_json::Value;

/// Waits until a round that started after `since` has `field == want`,
/// among the probe loop's rounds ([`probes`]) or the SDK client's
/// ([`sdk_rounds`]); returns the seconds from `since` to that round's start.
fn first_after(
    runner: &PodRunner,
    rounds: fn(&str) -> Vec<Probe>,
    since: f64,
    field: &str,
    want: &str,
) -> f64 {
    probe::first_round_after(
        || runner.log("agent"),
        rounds,
        since,
        field,
        want,
        Duration::from_secs(30),
    )
    .unwrap_or_else(|agent| {
        // The SDK client's lines and stderr are lost among the probes'.
        let log = runner.log("agent");
        let others: Vec<&str> = log.lines().filter(|l| !l.starts_with("PROBE ")).collect();
        panic!(
            "no round with {field}={want} after the change\nagent:\n{agent}\nits other lines:\n{}\nproxy:\n{}",
            tail(&others.join("\n"), 40),
            tail(&runner.log("agentgate-proxy"), 40)
        )
    })
}

/// The agent container's entry point: the SDK client in the background,
/// then the probe loop in the foreground (one process tree, never
/// restarted).
fn launcher(interpreter: &str) -> String {
    format!(
        "#!/bin/bash\nPYTHONPATH=/srv/sdk {interpreter} /srv/mcp-agent.py http://{SDK_BANK_HOST}:{SDK_BANK_PORT}/mcp &\nexec /srv/probe\n"
    )
}

/// The rounds numbers whose `send_money` the SDK bank server received
/// (its call log names the round in the recipient).
fn rounds_the_server_paid(calls_log: &std::path::Path) -> Vec<u64> {
    std::fs::read_to_string(calls_log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|c| c["tool"] == "send_money")
        .filter_map(|c| {
            c["arguments"]["recipient"]
                .as_str()
                .and_then(|r| r.strip_prefix("GB-round-"))
                .and_then(|n| n.parse().ok())
        })
        .collect()
}

#[test]
fn the_sandbox_pod_enforces_the_committed_policy() {
    let sdk = mcp_sdk().unwrap();
    let (cp, operator, _port) = ControlPlane::with_webhook(&[]).unwrap();
    cp.apply_yaml(&probe::ceiling("runner", false)).unwrap();
    cp.apply_example_scan().unwrap();
    let sandbox = probe::sandbox(
        "runner",
        AGENT_IMAGE,
        "IfNotPresent",
        "[/srv/agent]",
        Some(&sdk.interpreter),
    );
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
    let mut images = example_images(&dir, AGENT_IMAGE, &launcher(&sdk.interpreter)).unwrap();
    // The agent image's other files: the probe loop, the SDK client and,
    // mounted over /srv/sdk, the SDK itself (read-only, as /srv is).
    let app = dir.join("image-agent");
    std::fs::write(app.join("probe"), probe::agent_script()).unwrap();
    std::fs::set_permissions(app.join("probe"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::copy(
        repo_root().join("e2e/support/mcp_agent.py"),
        app.join("mcp-agent.py"),
    )
    .unwrap();
    std::fs::set_permissions(
        app.join("mcp-agent.py"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    std::fs::create_dir_all(app.join("sdk")).unwrap();
    images
        .get_mut(AGENT_IMAGE)
        .unwrap()
        .push(("/srv/sdk".to_string(), sdk.site_packages.clone()));
    let mut netns = example_network(&dir).unwrap();
    let sdk_calls = example_sdk_bank(&mut netns, &dir, &sdk.python.display().to_string()).unwrap();
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
    // The SDK client's first round: the granted tool reaches the server,
    // the other is refused with a JSON-RPC error the SDK raises.
    first_after(&runner, sdk_rounds, 0.0, "get_balance", "forwarded");
    let log = runner.log("agent");
    let first: Probe = sdk_rounds(&log).remove(0);
    let session = first.field("session");
    assert_eq!(first.field("get_balance"), "forwarded", "{context}");
    assert_eq!(first.field("send_money"), "refused", "{log}");
    assert!(session.len() > 8, "the SDK reports its session id: {log}");
    let refusal: Value =
        serde_json::from_str(&probe::line_after(&log, "SDKBODY ")).unwrap_or_default();
    let message = refusal["message"].as_str().unwrap_or_default();
    assert!(
        refusal["code"] == -32010
            && message.starts_with("refused by agentgate: tools/call send_money")
            && refusal["data"]["code"] == "no_rule",
        "the SDK client reads why: {refusal}\n{log}"
    );

    // Scenario 2: a proposal reaches the running agent, a tightened
    // maximum takes it away; the agent is never restarted.
    let applied_at = now();
    cp.apply_yaml(&probe::write_proposal("runner", Some(&sdk.interpreter)))
        .unwrap();
    let gained = first_after(&runner, probes, applied_at, "post", "200");
    // The same proposal grants the MCP tool send_money: the running agent
    // calls it through the same proxy, unrestarted, and so does the SDK
    // client in the session it opened before.
    let tool_gained = first_after(&runner, probes, applied_at, "mcp", "forwarded");
    let sdk_gained = first_after(&runner, sdk_rounds, applied_at, "send_money", "forwarded");
    // Forwarded POST bodies leave the pooled upstream connections usable:
    // the granted GET still passes in the rounds after.
    let since = now();
    first_after(&runner, probes, since, "get", "200");
    let tightened_at = now();
    cp.apply_yaml(&probe::ceiling("runner", true)).unwrap();
    let revoked = first_after(&runner, probes, tightened_at, "post", "403");
    let tool_revoked = first_after(&runner, probes, tightened_at, "mcp", "refused");
    let sdk_revoked = first_after(&runner, sdk_rounds, tightened_at, "send_money", "refused");
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
    // One SDK session throughout, and the server's own log: every
    // send_money the client saw forwarded reached it, no refused one did
    // (the client's log is read first, so the server may hold one more
    // round, in flight then).
    let sdk_log = runner.log("agent");
    let sdk = sdk_rounds(&sdk_log);
    let (_, sdk_unbroken) = probe::rounds(&sdk);
    assert!(sdk_unbroken, "one SDK client, never restarted: {sdk_log}");
    assert!(
        sdk.iter().all(|r| r.field("session") == session),
        "one MCP session throughout: {sdk_log}"
    );
    let forwarded: Vec<u64> = sdk
        .iter()
        .filter(|r| r.field("send_money") == "forwarded")
        .filter_map(|r| r.field("n").parse().ok())
        .collect();
    let last_seen: u64 = sdk
        .last()
        .and_then(|r| r.field("n").parse().ok())
        .unwrap_or(0);
    let paid: Vec<u64> = rounds_the_server_paid(&sdk_calls)
        .into_iter()
        .filter(|n| *n <= last_seen)
        .collect();
    assert!(!forwarded.is_empty(), "{sdk_log}");
    assert_eq!(
        paid, forwarded,
        "the SDK server received exactly the forwarded calls\nagent:\n{sdk_log}"
    );
    println!(
        "pod runner: proposal applied → running agent allowed in {gained:.2} s (its tool call in {tool_gained:.2} s, the SDK client's open session in {sdk_gained:.2} s); maximum tightened → refused in {revoked:.2} s ({tool_revoked:.2} s, {sdk_revoked:.2} s) (probe rounds of ~{period:.2} s)"
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
