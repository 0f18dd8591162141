//! WebSocket upgrades end to end (docs/policy-semantics.md §10.2): in a
//! network namespace this test creates (`unshare --net`, as root), a real
//! WebSocket client and server from the `websockets` library (pinned by
//! hack/install-mcp-sdk.sh) talk through `agentgate-proxy`: the client
//! opens with CONNECT and sends its handshake inside. The allowed upgrade
//! reaches the server and its frames flow both ways; an extra subprotocol
//! offered, another origin, a path only a REST grant covers and a denied
//! query parameter are refused before the server sees them (its own log
//! shows it); a policy that stops allowing the upgrade closes the open
//! socket.
//!
//! Needs root, unshare, ip, curl and the venv: `make test` installs them
//! and runs it with `--include-ignored`; anything missing fails, it never
//! skips there. Alone:
//! `cargo test -p agentgate-proxy --test websocket -- --include-ignored`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use serde_json::Value;
use support::netns::{Setup, setup};

const POLICY: &str = r#"network:
  - name: realtime
    binaries: [{PYTHON}]
    endpoints:
      - host: rt.internal
        ports: [8932]
        protocol: websocket
        rules:
          - path: /v1/realtime
            query: {model: "gpt-*"}
            subprotocols: [chat]
            origins: ["https://app.example.com"]
        denyRules:
          - path: "**"
            query: {debug: "*"}
      - host: rt.internal
        ports: [8932]
        protocol: rest
        rules: [{methods: [GET], path: /v1/other}]
"#;

#[test]
#[ignore = "needs root and a network namespace; make test runs it"]
fn websocket_upgrades_are_judged_relayed_and_revoked() {
    let Setup {
        python,
        real_python,
        dir,
    } = setup("websocket");
    let policy = POLICY.replace("{PYTHON}", &real_python);
    std::fs::write(dir.join("policy.yaml"), &policy).unwrap();
    // The revocation: the websocket grant gone, the REST one kept.
    let start = policy
        .find("      - host: rt.internal\n        ports: [8932]\n        protocol: websocket")
        .unwrap();
    let end = policy
        .find("      - host: rt.internal\n        ports: [8932]\n        protocol: rest")
        .unwrap();
    let narrower = format!("{}{}", &policy[..start], &policy[end..]);
    std::fs::write(dir.join("policy-narrower.yaml"), narrower).unwrap();

    let support = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support");
    let script = format!(
        r#"set -u
d={dir}
ip link set lo up
{python} {support}/ws_echo_server.py 127.0.0.1 8932 $d/server.jsonl > $d/server.log 2>&1 &
{proxy} --policy $d/policy.yaml --listen 127.0.0.1:15000 --metrics-listen 127.0.0.1:15020 \
  --ca-cert $d/sandbox-ca.pem --ca-key $d/sandbox-ca.key \
  --resolve rt.internal:8932:127.0.0.1 > $d/proxy.log 2>&1 &
generation() {{ curl -s http://127.0.0.1:15020/metrics | sed -n 's/^agentgate_proxy_policy_generation //p'; }}
for i in $(seq 200); do
  curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:15020/readyz 2>/dev/null | grep -q 200 \
    && (echo > /dev/tcp/127.0.0.1/8932) 2>/dev/null && break
  sleep 0.1
done
(
  for i in $(seq 400); do [ -e $d/reload-me ] && break; sleep 0.05; done
  before=$(generation)
  cp $d/policy-narrower.yaml $d/policy.yaml.new && mv $d/policy.yaml.new $d/policy.yaml
  for i in $(seq 200); do [ "$(generation)" != "$before" ] && break; sleep 0.05; done
  touch $d/go
) &
{python} {support}/ws_client.py http://127.0.0.1:15000 ws://rt.internal:8932 $d 2> $d/client.err | sed 's/^/CASE /'
echo "--- proxy log ---" >&2; cat $d/proxy.log >&2
echo "--- client stderr ---" >&2; cat $d/client.err >&2
echo "--- server log ---" >&2; cat $d/server.log >&2
sed 's/^/SEEN /' $d/server.jsonl 2>/dev/null
kill $(jobs -p) 2>/dev/null
wait 2>/dev/null
"#,
        dir = dir.display(),
        proxy = env!("CARGO_BIN_EXE_agentgate-proxy"),
        support = support.display(),
    );
    let out = Command::new("unshare")
        .args(["--net", "bash", "-c", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let context = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
    let cases: HashMap<String, Value> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("CASE "))
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| (v["case"].as_str().unwrap_or_default().to_string(), v))
        .collect();
    let seen: Vec<Value> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("SEEN "))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let case = |name: &str| {
        cases
            .get(name)
            .unwrap_or_else(|| panic!("no case {name}: {context}"))
    };
    let allowed = case("allowed");
    assert_eq!(allowed["ok"], true, "{context}");
    assert_eq!(
        allowed["echo"], "hello allowed",
        "frames flow both ways: {context}"
    );
    assert_eq!(allowed["subprotocol"], "chat", "{context}");
    for (name, code) in [
        ("other-offer", "no_rule"),
        ("other-origin", "no_rule"),
        ("rest-path-only", "no_rule"),
        ("denied-query", "denied_by_rule"),
    ] {
        let refused = case(name);
        assert_eq!(refused["ok"], false, "{name}: {context}");
        assert_eq!(refused["status"], 403, "{name}: {context}");
        assert_eq!(refused["body"]["code"], code, "{name}: {context}");
    }
    let reason = case("other-offer")["body"]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        reason.contains("offering v2"),
        "the refusal names the offer: {reason}"
    );
    let revoked = case("revoked");
    assert_eq!(revoked["before"], "before", "{context}");
    assert_eq!(
        revoked["closed"], true,
        "the revocation closed the socket: {context}"
    );
    // Only the allowed upgrades reached the server.
    assert_eq!(seen.len(), 2, "{context}");
    for s in &seen {
        assert_eq!(s["path"], "/v1/realtime?model=gpt-4o", "{context}");
        assert_eq!(s["subprotocol"], "chat", "{context}");
        assert_eq!(s["origin"], "https://app.example.com", "{context}");
    }
}
