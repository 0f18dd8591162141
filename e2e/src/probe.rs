//! The probing agent of the enforced-pod scenarios, and how its log is
//! read: whether it runs under the pod runner or on the real node, the same
//! script tries every way out of the sandbox once per round and prints one
//! `PROBE` line, so both suites assert the same things.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::world::{SDK_BANK_HOST, SDK_BANK_PORT, UPSTREAM_IP};

/// The agent: a loop of probes, one `PROBE` line per round, and the body of
/// the first refusal of each kind before the first round's line.
///
/// - `get`/`post`: through `HTTP_PROXY` (curl, a GET the policy grants and a
///   POST it does not);
/// - `dget`/`dpost`: the same, ignoring the proxy (redirected by nftables);
/// - `ip`: straight to the upstream's address, a host no rule names;
/// - `github`: a POST to the trifecta finding's sink, through TLS
///   interception with the sandbox CA from the pod's bundle;
/// - `bget`: the granted GET by bash, which the rule (curl only) excludes;
/// - `mcp`/`mcpread`: MCP `tools/call`s (JSON-RPC over POST /mcp) of
///   `send_money`, which the policy does not grant until a proposal does,
///   and of the granted `get_balance`: `forwarded` when the upstream
///   answered, `refused` when the proxy answered with agentgate's JSON-RPC
///   error;
/// - `udp`: a datagram to a non-DNS port; `inside`/`outside`: writes inside
///   and outside `readWrite`.
///
/// Beside the rounds, one call after another of `get_statement`, which the
/// sandbox holds for a person's approval (`mode: ask`): a `HELD` line per
/// call, `result=forwarded` once approved, else the refusal's code
/// (`held_call_denied`, `held_call_expired`, `held_call_unavailable`).
pub fn agent_script() -> String {
    format!(
        r#"#!/bin/bash
held() {{
  k=0
  while true; do
    k=$((k+1))
    curl -s --max-time 600 -X POST -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
      -d "{{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{{\"name\":\"get_statement\",\"arguments\":{{\"month\":$k}}}}}}" \
      http://api.example.test:8080/mcp > /tmp/held.body 2>/dev/null
    if grep -q '"upstream"' /tmp/held.body; then r=forwarded; else r=$(grep -o 'held_call_[a-z]*' /tmp/held.body | head -1); r=${{r:-other}}; fi
    echo "HELD k=$k t=$(date +%s.%N) result=$r"
    sleep 1
  done
}}
held &
n=0
while true; do
  n=$((n+1))
  t=$(date +%s.%N)
  code() {{ curl -s -o "$1" -w '%{{http_code}}' --max-time 5 "${{@:2}}" 2>/dev/null; }}
  get=$(code /dev/null http://api.example.test:8080/repos/acme/x)
  post=$(code /tmp/post.body -X POST -d x http://api.example.test:8080/repos/acme/x)
  dget=$(code /dev/null --noproxy '*' http://api.example.test:8080/repos/acme/x)
  dpost=$(code /tmp/dpost.body --noproxy '*' -X POST -d x http://api.example.test:8080/repos/acme/x)
  ip=$(code /tmp/ip.body --noproxy '*' http://{UPSTREAM_IP}:8080/repos/acme/x)
  github=$(code /tmp/github.body -X POST -d '{{}}' https://api.github.com/repos/acme/widgets/issues/1/comments)
  mcpcall() {{
    curl -s --max-time 5 -X POST -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
      -d "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{{\"name\":\"$1\",\"arguments\":{{\"amount\":5}}}}}}" \
      http://api.example.test:8080/mcp > "$2" 2>/dev/null
    if grep -q '"upstream"' "$2"; then echo forwarded; elif grep -q -- '-32010' "$2"; then echo refused; else echo other; fi
  }}
  mcp=$(mcpcall send_money /tmp/mcp.body)
  mcpread=$(mcpcall get_balance /tmp/mcpread.body)
  bget=$(bash -c 'exec 3<>/dev/tcp/api.example.test/8080; printf "GET /repos/acme/x HTTP/1.1\r\nHost: api.example.test:8080\r\nConnection: close\r\n\r\n" >&3; head -1 <&3 | cut -d" " -f2' 2>/dev/null)
  if bash -c "echo x > /dev/udp/{UPSTREAM_IP}/9999" 2>/dev/null; then udp=sent; else udp=dropped; fi
  if echo x > /tmp/inside 2>/dev/null; then inside=ok; else inside=denied; fi
  outside=$( {{ echo x > /dev/shm/agentgate-probe; }} 2>&1 && echo ok)
  if [ $n = 1 ]; then
    echo "OUTSIDE $outside"
    echo "BODY post $(tr -d '\n' < /tmp/post.body)"
    echo "BODY dpost $(tr -d '\n' < /tmp/dpost.body)"
    echo "BODY ip $(tr -d '\n' < /tmp/ip.body)"
    echo "BODY github $(tr -d '\n' < /tmp/github.body)"
    echo "BODY mcp $(tr -d '\n' < /tmp/mcp.body)"
  fi
  echo "PROBE n=$n t=$t get=$get post=$post dget=$dget dpost=$dpost ip=$ip bget=$bget github=$github udp=$udp inside=$inside mcp=$mcp mcpread=$mcpread"
  sleep 0.1
done
"#
    )
}

/// One round of the agent's probes.
pub struct Probe {
    /// When the round started (seconds since the epoch, the pod's clock).
    pub started: f64,
    /// `name → value` of the round's line.
    pub fields: BTreeMap<String, String>,
}

impl Probe {
    /// A field's value (empty when the line lacks it).
    pub fn field(&self, name: &str) -> String {
        self.fields.get(name).cloned().unwrap_or_default()
    }
}

/// Every complete `PROBE` line of `log`.
pub fn probes(log: &str) -> Vec<Probe> {
    rounds_of(log, "PROBE ")
}

/// Every complete `SDK` line of `log`: the rounds of the agent's MCP SDK
/// client (e2e/support/mcp_agent.py).
pub fn sdk_rounds(log: &str) -> Vec<Probe> {
    rounds_of(log, "SDK ")
}

/// The rounds of the lines of `log` that start with `prefix`, each
/// `key=value` separated by spaces, `t` the round's start.
fn rounds_of(log: &str, prefix: &str) -> Vec<Probe> {
    log.split_inclusive('\n')
        // A line still being written is not a round yet.
        .filter_map(|l| l.strip_suffix('\n'))
        .filter_map(|l| l.strip_prefix(prefix))
        .map(|l| {
            let fields: BTreeMap<String, String> = l
                .split(' ')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let started = fields.get("t").and_then(|t| t.parse().ok()).unwrap_or(0.0);
            Probe { started, fields }
        })
        .collect()
}

/// The text after `prefix` on the first line that starts with it (the
/// first round's `OUTSIDE` and `BODY` lines).
pub fn line_after(log: &str, prefix: &str) -> String {
    log.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_default()
        .to_string()
}

/// Seconds since the epoch.
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Waits (at most `limit`) until a probe that started after `since` has
/// `field == want` in the log `read` returns; the seconds from `since` to
/// that probe's start, or the log's tail.
pub fn first_after(
    read: impl Fn() -> String,
    since: f64,
    field: &str,
    want: &str,
    limit: Duration,
) -> Result<f64, String> {
    first_round_after(read, probes, since, field, want, limit)
}

/// Like [`first_after`], for the rounds `parse` reads from the log (such
/// as [`sdk_rounds`]).
pub fn first_round_after(
    read: impl Fn() -> String,
    parse: fn(&str) -> Vec<Probe>,
    since: f64,
    field: &str,
    want: &str,
    limit: Duration,
) -> Result<f64, String> {
    let deadline = Instant::now() + limit;
    loop {
        let log = read();
        if let Some(p) = parse(&log)
            .into_iter()
            .find(|p| p.started >= since && p.fields.get(field).map(String::as_str) == Some(want))
        {
            return Ok(p.started - since);
        }
        if Instant::now() > deadline {
            return Err(tail(&log, 40));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The mean seconds between rounds, and whether the rounds are one
/// process's (numbered without a gap: the agent was never restarted).
pub fn rounds(probes: &[Probe]) -> (f64, bool) {
    let gaps: Vec<f64> = probes
        .windows(2)
        .map(|w| w[1].started - w[0].started)
        .collect();
    let mean = gaps.iter().sum::<f64>() / gaps.len().max(1) as f64;
    let numbers: Vec<u64> = probes
        .iter()
        .filter_map(|p| p.fields.get("n").and_then(|n| n.parse().ok()))
        .collect();
    let unbroken = numbers.len() == probes.len() && numbers.windows(2).all(|w| w[0] + 1 == w[1]);
    (mean, unbroken)
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Checks the agent's first round against the policy both suites commit
/// (examples of it in e2e/tests/enforced_pod.rs): what is granted passes,
/// everything else is refused with the reason, the finding's sink cites the
/// finding. The first mismatch, described.
pub fn check_first_round(log: &str) -> Result<(), String> {
    let first = probes(log)
        .into_iter()
        .next()
        .ok_or_else(|| "the agent has not finished a round".to_string())?;
    let expect = |field: &str, want: &str, what: &str| {
        let got = first.field(field);
        if got == want {
            Ok(())
        } else {
            Err(format!("{what}: {field}={got:?}, wanted {want:?}"))
        }
    };
    expect("get", "200", "allowed GET through HTTP_PROXY")?;
    expect("post", "403", "POST outside the policy")?;
    expect("dget", "200", "direct GET, redirected")?;
    expect("dpost", "403", "direct POST, redirected and judged")?;
    expect(
        "ip",
        "403",
        "a direct connection to an address no rule names",
    )?;
    expect(
        "bget",
        "403",
        "the same GET by bash, not curl: the proxy (uid 1337, SYS_PTRACE only) tells the binaries apart",
    )?;
    expect("udp", "dropped", "UDP to a non-DNS port")?;
    expect("inside", "ok", "a write inside readWrite")?;
    expect(
        "github",
        "403",
        "the intercepted POST to the finding's sink",
    )?;
    expect(
        "mcpread",
        "forwarded",
        "a granted MCP tools/call (get_balance)",
    )?;
    expect(
        "mcp",
        "refused",
        "an MCP tools/call of a tool the policy does not grant (send_money), answered by the proxy",
    )?;
    let outside = line_after(log, "OUTSIDE ");
    if !outside.contains("Permission denied") {
        return Err(format!("a write outside readWrite is EACCES: {outside:?}"));
    }
    let body = |kind: &str| -> Result<serde_json::Value, String> {
        serde_json::from_str(&line_after(log, &format!("BODY {kind} ")))
            .map_err(|e| format!("the {kind} refusal's body is not JSON: {e}"))
    };
    for kind in ["post", "dpost", "ip"] {
        let body = body(kind)?;
        if body["decision"] != "deny" || body["reason"].as_str().unwrap_or_default().is_empty() {
            return Err(format!("the {kind} refusal carries no reason: {body}"));
        }
    }
    for kind in ["post", "dpost"] {
        let body = body(kind)?;
        if !body["reason"].as_str().unwrap_or_default().contains("POST") {
            return Err(format!("the reason names what was refused: {body}"));
        }
    }
    // The refused call is answered as JSON-RPC, with a reason the model
    // can read and the machine-readable refusal in `data`.
    let mcp = body("mcp")?;
    let message = mcp["error"]["message"].as_str().unwrap_or_default();
    if mcp["error"]["code"] != -32010
        || !message.contains("tools/call send_money")
        || mcp["error"]["data"]["code"] != "no_rule"
    {
        return Err(format!(
            "the refused tool call is not a readable JSON-RPC error: {mcp}"
        ));
    }
    // Refused through TLS interception (curl trusted the sandbox CA from
    // the pod's bundle) and cited.
    let github = body("github")?;
    if github["finding"]["id"] != "AG-TRIFECTA" || github["finding"]["node"] != "post_comment" {
        return Err(format!(
            "the sink's refusal does not cite the finding: {github}"
        ));
    }
    Ok(())
}

/// The ceiling of the enforced-pod scenarios, `<namespace>-ceiling`,
/// governing namespaces labelled `team=<namespace>`: GET and POST to the
/// example API, GET to GitHub, and the example API's MCP tools `get_*` and
/// `send_money` of at most 100. `tightened` leaves the example API GET
/// only, and `get_*` only.
pub fn ceiling(namespace: &str, tightened: bool) -> String {
    let methods = if tightened { "[GET]" } else { "[GET, POST]" };
    let tools = if tightened {
        "[{name: \"get_*\"}]"
    } else {
        "[{name: \"get_*\"}, {name: send_money, arguments: {amount: {minimum: 0, maximum: 100}}}]"
    };
    format!(
        "apiVersion: agentgate.dev/v1alpha1
kind: MaximumPolicy
metadata: {{name: {namespace}-ceiling}}
spec:
  selector:
    namespaceSelector: {{matchLabels: {{team: {namespace}}}}}
  allowedModes: [ask, auto]
  defaultMode: auto
  policy:
    filesystem:
      readOnly: [/usr, /bin, /lib, /lib64, /etc, /srv]
      readWrite: [/tmp]
    network:
      - name: example
        endpoints:
          - {{host: api.example.test, ports: [8080], protocol: rest, rules: [{{methods: {methods}, path: \"/repos/**\"}}]}}
      - name: github
        endpoints:
          - {{host: api.github.com, ports: [443], protocol: rest, rules: [{{methods: [GET], path: \"/repos/**\"}}]}}
      - name: bank
        endpoints:
          - {{host: api.example.test, ports: [8080], protocol: mcp, path: /mcp, tools: {tools}}}
          - {{host: {SDK_BANK_HOST}, ports: [{SDK_BANK_PORT}], protocol: mcp, path: /mcp, tools: {tools}}}
"
    )
}

/// The sandbox's rule for the SDK client run by `python` (its real path):
/// `get_balance` on the SDK bank server.
fn sdk_read_rule(python: &str) -> String {
    format!(
        "      - name: bank-sdk-read
        binaries: [{python}]
        endpoints:
          - {{host: {SDK_BANK_HOST}, ports: [{SDK_BANK_PORT}], protocol: mcp, path: /mcp, tools: [{{name: get_balance}}]}}
"
    )
}

/// The proposal's grant for the SDK client run by `python`: `send_money`
/// of at most 100 on the SDK bank server.
fn sdk_pay_rule(python: &str) -> String {
    format!(
        "      - name: bank-sdk-pay
        binaries: [{python}]
        endpoints:
          - {{host: {SDK_BANK_HOST}, ports: [{SDK_BANK_PORT}], protocol: mcp, path: /mcp, tools: [{{name: send_money, arguments: {{amount: {{minimum: 0, maximum: 100}}}}}}]}}
"
    )
}

/// A sandbox's `template:` (at a spec's indentation): the agent container
/// running `image` with `command` (a YAML flow sequence) as uid 1000, `/tmp`
/// an emptyDir.
fn agent_template(image: &str, pull_policy: &str, command: &str) -> String {
    format!(
        "  template:
    spec:
      securityContext: {{runAsUser: 1000, runAsGroup: 1000}}
      volumes: [{{name: work, emptyDir: {{}}}}]
      containers:
        - name: agent
          image: {image}
          imagePullPolicy: {pull_policy}
          command: {command}
          volumeMounts: [{{name: work, mountPath: /tmp}}]
"
    )
}

/// Namespace `<namespace>` (team `<namespace>`) and its sandbox
/// `<namespace>-bot`, whose agent container runs `image` with `command` (a
/// YAML flow sequence) as uid 1000: the example API by curl only and GET
/// only, GitHub GET, the MCP tool `get_balance` by curl and `get_statement`
/// held for approval, `/tmp` writable;
/// with `sdk_python`, also `get_balance` on the SDK bank server by that
/// python.
pub fn sandbox(
    namespace: &str,
    image: &str,
    pull_policy: &str,
    command: &str,
    sdk_python: Option<&str>,
) -> String {
    let sdk = sdk_python.map(sdk_read_rule).unwrap_or_default();
    let template = agent_template(image, pull_policy, command);
    format!(
        "apiVersion: v1
kind: Namespace
metadata: {{name: {namespace}, labels: {{team: {namespace}}}}}
---
apiVersion: agentgate.dev/v1alpha1
kind: AgentSandbox
metadata: {{name: {namespace}-bot, namespace: {namespace}}}
spec:
  mode: auto
  agentServiceAccount: {namespace}-bot
{template}  policy:
    filesystem:
      readOnly: [/usr, /bin, /lib, /lib64, /etc, /srv]
      readWrite: [/tmp]
    network:
      - name: example-read
        binaries: [/usr/bin/curl]
        endpoints:
          - {{host: api.example.test, ports: [8080], protocol: rest, rules: [{{methods: [GET], path: \"/repos/**\"}}]}}
      - name: github-read
        endpoints:
          - {{host: api.github.com, ports: [443], protocol: rest, rules: [{{methods: [GET], path: \"/repos/**\"}}]}}
      - name: bank-read
        binaries: [/usr/bin/curl]
        endpoints:
          - {{host: api.example.test, ports: [8080], protocol: mcp, path: /mcp, tools: [{{name: get_balance}}, {{name: get_statement, mode: ask}}]}}
{sdk}"
    )
}

/// The proposal granting `<namespace>-bot` POST to the example API and the
/// MCP tool `send_money` (amounts up to 100) to curl, and with
/// `sdk_python`, the same tool on the SDK bank server to that python.
pub fn write_proposal(namespace: &str, sdk_python: Option<&str>) -> String {
    let sdk = sdk_python.map(sdk_pay_rule).unwrap_or_default();
    format!(
        "apiVersion: agentgate.dev/v1alpha1
kind: PolicyProposal
metadata: {{name: example-write, namespace: {namespace}}}
spec:
  sandboxRef: {{name: {namespace}-bot}}
  rationale: write back to the example API
  requestedBy: e2e-admin
  add:
    network:
      - name: example-write
        endpoints:
          - {{host: api.example.test, ports: [8080], protocol: rest, rules: [{{methods: [POST], path: \"/repos/**\"}}]}}
      - name: bank-pay
        binaries: [/usr/bin/curl]
        endpoints:
          - {{host: api.example.test, ports: [8080], protocol: mcp, path: /mcp, tools: [{{name: send_money, arguments: {{amount: {{minimum: 0, maximum: 100}}}}}}]}}
{sdk}"
    )
}

/// The credentials scenario's namespace (and team).
pub const CRED: &str = "cred";
/// The Secret's first value.
pub const SECRET_V1: &str = "e2e-github-secret-v1";
/// The Secret's value after rotation.
pub const SECRET_V2: &str = "e2e-github-secret-v2";

/// The agent of the credentials scenario: one `CRED` line per round.
/// - `envok`: `$GITHUB_TOKEN` is a placeholder, the same as the file one;
/// - `bound`: a GET the policy binds the token to, with the placeholder;
/// - `unbound`: the placeholder sent where no rule binds the token;
/// - `misuse`: the placeholder in a query parameter (outside its form);
/// - `write`: a POST the proposal binds the token to once approved;
/// - `leak`: what reading the secret from the proxy's process gave
///   (`none` when every way failed).
pub fn credential_agent() -> String {
    r#"#!/bin/bash
code() { curl -s -o "$1" -w '%{http_code}' --max-time 5 "${@:2}" 2>/dev/null; }
n=0
while true; do
  n=$((n+1)); t=$(date +%s.%N)
  ph=$(cat /etc/github-token 2>/dev/null)
  case "$GITHUB_TOKEN" in agentgate-placeholder-*) [ "$GITHUB_TOKEN" = "$ph" ] && envok=yes || envok=differs;; *) envok=no;; esac
  auth="Authorization: Bearer $GITHUB_TOKEN"
  bound=$(code /tmp/bound.body -H "$auth" http://api.example.test:8080/repos/acme/app/issues)
  unbound=$(code /tmp/unbound.body -H "$auth" http://api.example.test:8080/public/x)
  misuse=$(code /tmp/misuse.body "http://api.example.test:8080/public/x?t=$GITHUB_TOKEN")
  write=$(code /tmp/write.body -X POST -d x -H "$auth" http://api.example.test:8080/repos/acme/app/issues/1/comments)
  leak=$(python3 - <<'PY'
import glob, os
found = []
for d in glob.glob("/proc/[0-9]*"):
    try:
        cmd = open(d + "/cmdline", "rb").read()
    except OSError:
        continue
    if b"agentgate-proxy" not in cmd:
        continue
    for p in ("/environ", "/root/agentgate/credentials/github-token", "/mem", "/maps"):
        try:
            with open(d + p, "rb") as f:
                data = f.read(65536)
            if b"e2e-github-secret" in data:
                found.append(p.strip("/").split("/")[0])
        except OSError:
            pass
for p in ["/agentgate/credentials/github-token"] + glob.glob("/var/lib/kubelet/pods/*/volumes/*/*/*"):
    try:
        if b"e2e-github-secret" in open(p, "rb").read():
            found.append(p)
    except OSError:
        pass
env = "\0".join(f"{k}={v}" for k, v in os.environ.items())
if "e2e-github-secret" in env:
    found.append("own-environment")
print(",".join(found) or "none")
PY
)
  if [ $n = 1 ]; then
    echo "BODY unbound $(tr -d '\n' < /tmp/unbound.body)"
    echo "BODY misuse $(tr -d '\n' < /tmp/misuse.body)"
  fi
  echo "CRED n=$n t=$t envok=$envok bound=$bound unbound=$unbound misuse=$misuse write=$write leak=$leak"
  sleep 0.3
done
"#
    .to_string()
}

/// The namespace, the Secret, a reviewer, the ceiling and the sandbox of
/// the credentials scenario: the token may be attached by curl to GETs
/// under /repos/acme and, in a review region, to POSTs under
/// /repos/acme/app; the sandbox binds it to the GETs only.
pub fn credential_manifests(image: &str) -> String {
    let script = serde_json::Value::String(credential_agent()).to_string();
    let template = agent_template(image, "Never", &format!("[/bin/bash, -c, {script}]"));
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: {CRED}, labels: {{team: {CRED}}}}}
---
apiVersion: v1
kind: Secret
metadata: {{name: github, namespace: {CRED}}}
stringData: {{token: {SECRET_V1}}}
---
apiVersion: agentgate.dev/v1alpha1
kind: MaximumPolicy
metadata: {{name: {CRED}-ceiling}}
spec:
  selector:
    namespaceSelector: {{matchLabels: {{team: {CRED}}}}}
  allowedModes: [ask, auto]
  policy:
    filesystem:
      readOnly: [/usr, /bin, /lib, /lib64, /etc, /proc]
      readWrite: [/tmp]
    network:
      - name: token-reads
        binaries: [/usr/bin/curl]
        credentials: [github-token]
        endpoints:
          - {{host: api.example.test, ports: [8080], protocol: rest, rules: [{{methods: [GET], path: "/repos/acme/**"}}]}}
      - name: token-writes
        binaries: [/usr/bin/curl]
        credentials: [github-token]
        review: {{required: true, reason: credentialed writes need a human}}
        endpoints:
          - {{host: api.example.test, ports: [8080], protocol: rest, rules: [{{methods: [POST], path: "/repos/acme/app/**"}}]}}
      - name: anonymous
        endpoints:
          - {{host: api.example.test, ports: [8080], protocol: rest, rules: [{{methods: [GET, POST], path: "/**"}}]}}
---
apiVersion: agentgate.dev/v1alpha1
kind: AgentSandbox
metadata: {{name: {CRED}-bot, namespace: {CRED}}}
spec:
  mode: auto
  agentServiceAccount: {CRED}-bot
  credentials:
    - name: github-token
      secretRef: {{name: github, key: token}}
      placeholder: {{env: GITHUB_TOKEN, file: /etc/github-token}}
      attach: {{header: {{name: Authorization, format: "Bearer {{}}"}}}}
{template}  policy:
    filesystem:
      readOnly: [/usr, /bin, /lib, /lib64, /etc, /proc]
      readWrite: [/tmp]
    network:
      - name: gh-read
        binaries: [/usr/bin/curl]
        credentials: [github-token]
        endpoints:
          - {{host: api.example.test, ports: [8080], protocol: rest, rules: [{{methods: [GET], path: "/repos/acme/**"}}]}}
      - name: public
        binaries: [/usr/bin/curl]
        endpoints:
          - {{host: api.example.test, ports: [8080], protocol: rest, rules: [{{methods: [GET, POST], path: "/**"}}]}}
"#
    )
}

/// The fleet agent: a POST to the example API through the proxy every
/// second, one `PROBE n=… t=… post=<status>` line per round (`000` when
/// the round got no answer). A hundred of them share the node's two cores,
/// so it is one Python process holding one keep-alive connection, as an
/// SDK client does (the proxy judges every request on it by the policy it
/// holds then); a shell forking a curl per round took a third of the
/// cores during a revocation.
pub fn fleet_agent() -> String {
    r#"import http.client, time
def connect():
    return http.client.HTTPConnection("api.example.test", 8080, timeout=5)
def post(conn):
    conn.request("POST", "/repos/acme/x", body=b"x")
    answer = conn.getresponse()
    answer.read()
    return answer
n, conn = 0, None
while True:
    n += 1
    t = time.time()
    try:
        fresh = conn is None
        if fresh:
            conn = connect()
        try:
            answer = post(conn)
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
            # The other end closed the kept-alive connection without
            # saying so: once more on a new one, as an SDK client does.
            if fresh:
                raise
            conn.close()
            conn = connect()
            answer = post(conn)
        post_status = str(answer.status)
        if answer.will_close:
            conn.close()
            conn = None
    except Exception:
        post_status = "000"
        if conn is not None:
            conn.close()
        conn = None
    print(f"PROBE n={n} t={t:.6f} post={post_status}", flush=True)
    time.sleep(1)
"#
    .to_string()
}

/// The real path of `/usr/bin/python3` on this host: the agent image's
/// interpreter is the host's (hack/agent-image.sh), and a policy's
/// `binaries` names the real path the proxy sees.
pub fn agent_python() -> String {
    std::fs::canonicalize("/usr/bin/python3")
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "/usr/bin/python3".to_string())
}

/// Namespace `<namespace>` (team `<namespace>`) and `count` sandboxes
/// `<namespace>-0…`, each declaring GET and POST to the example API for
/// its Python, its agent running [`fleet_agent`] in `image`: one ceiling
/// ([`ceiling`]) governs them all, so tightening it revokes the POST of
/// every one at once.
pub fn fleet_manifests(namespace: &str, count: usize, image: &str) -> String {
    let script = serde_json::to_string(&fleet_agent()).unwrap_or_default();
    let python = agent_python();
    let template = agent_template(image, "Never", &format!("[{python}, -u, -c, {script}]"));
    let mut out = format!(
        "apiVersion: v1
kind: Namespace
metadata: {{name: {namespace}, labels: {{team: {namespace}}}}}
"
    );
    for i in 0..count {
        out.push_str(&format!(
            "---
apiVersion: agentgate.dev/v1alpha1
kind: AgentSandbox
metadata: {{name: {namespace}-{i}, namespace: {namespace}}}
spec:
  mode: auto
  agentServiceAccount: {namespace}-{i}
{template}  policy:
    filesystem:
      readOnly: [/usr, /bin, /lib, /lib64, /etc]
      readWrite: [/tmp]
    network:
      - name: example
        binaries: [{python}]
        endpoints:
          - {{host: api.example.test, ports: [8080], protocol: rest, rules: [{{methods: [GET, POST], path: \"/repos/**\"}}]}}
"
        ));
    }
    out
}
