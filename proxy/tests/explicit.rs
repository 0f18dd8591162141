//! `agentgate-proxy` as a process, with real clients (`curl`, `python3`) and
//! a real HTTPS upstream on 127.0.0.1: what it allows, refuses, tunnels and
//! intercepts, and how it follows policy changes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;
use support::{Harness, realpath_of, runtime};

const POLICY: &str = r#"
network:
  - name: api-read
    binaries: [{CURL}, {PYTHON}]
    endpoints:
      - host: api.example.test
        ports: [{PORT}, {PLAIN}]
        protocol: rest
        rules:
          - {methods: [GET], path: "/repos/**"}
          - {methods: [POST], path: "/repos/*/issues"}
        denyRules:
          - {methods: [GET], path: "/repos/acme/secret/**"}
  - name: raw
    binaries: [{CURL}, {PYTHON}]
    endpoints: [{host: raw.example.test, ports: [{PORT}]}]
  - name: anyone-status
    endpoints:
      - {host: status.example.test, ports: [{PORT}], protocol: rest, access: read-only}
"#;

fn started(name: &str, policy: &str, extra: &[&str]) -> (tokio::runtime::Runtime, Harness) {
    let rt = runtime();
    let mut h = Harness::new(&rt, name);
    h.write_policy(&h.render(policy));
    h.start_proxy(extra);
    h.wait_ready(200);
    (rt, h)
}

fn ca(h: &Harness) -> String {
    h.sandbox_ca.display().to_string()
}

fn parked(h: &Harness) -> u64 {
    let (_, metrics) = h.get_metrics_path("/metrics");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("agentgate_proxy_parked_connections "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// An idle keep-alive connection is parked (hyper's buffers released) and
/// served again on its next request, judged as before; a request head
/// that arrives in two halves around the parking delay is not lost.
#[test]
fn an_idle_connection_is_parked_and_served_again() {
    let (_rt, h) = started("parked", POLICY, &[]);
    let resume = h.dir.join("resume");
    let parked_seen = std::thread::scope(|scope| {
        let client = scope.spawn(|| {
            h.python(
                &h.target("api.example.test"),
                &h.sandbox_ca,
                &[
                    "GET /repos/acme/x",
                    &format!("wait {}", resume.display()),
                    "GET /repos/acme/y",
                    "GET /repos/acme/secret/key",
                    "split 2.5 GET /repos/acme/z",
                    "POST /repos/acme/issues",
                ],
            )
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        let mut seen = 0;
        while std::time::Instant::now() < deadline && seen == 0 {
            std::thread::sleep(Duration::from_millis(100));
            seen = parked(&h);
        }
        std::fs::write(&resume, b"").unwrap();
        (seen, client.join().unwrap())
    });
    let (seen, out) = parked_seen;
    assert_eq!(seen, 1, "the idle connection was parked");
    assert_eq!(out[0]["connect"], 200, "{out:?}");
    assert_eq!(out[1]["status"], 200, "{out:?}");
    assert_eq!(out[2]["status"], 200, "served again after parking: {out:?}");
    assert_eq!(out[3]["status"], 403, "still judged: {out:?}");
    assert_eq!(out[3]["body"]["code"], "denied_by_rule", "{out:?}");
    assert_eq!(out[4]["status"], 200, "a split head survives: {out:?}");
    assert_eq!(out[5]["status"], 200, "{out:?}");
    assert!(!h.proxy_log().contains("panicked"), "{}", h.proxy_log());
}

#[test]
fn curl_is_judged_per_request_and_told_apart_from_python() {
    let policy = POLICY.replace(
        "binaries: [{CURL}, {PYTHON}]\n    endpoints:\n      - host: api",
        "binaries: [{CURL}]\n    endpoints:\n      - host: api",
    );
    let (_rt, h) = started("binaries", &policy, &[]);
    let (code, body, tail) = h.curl(&[
        "--cacert",
        &ca(&h),
        &h.url("api.example.test", "/repos/acme/x?page=2"),
    ]);
    assert_eq!(
        (code, tail.as_str()),
        (0, "200 200 1.1"),
        "{body}\n{}",
        h.proxy_log()
    );
    let echo: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(echo["path"], "/repos/acme/x");
    assert_eq!(echo["query"], "page=2");
    // Headers pass through unchanged, hop-by-hop ones do not.
    let (_, body, _) = h.curl(&[
        "--cacert",
        &ca(&h),
        "-H",
        "Authorization: Bearer t0k",
        "-H",
        "Connection: x-hop",
        "-H",
        "X-Hop: 1",
        &h.url("api.example.test", "/repos/acme/x"),
    ]);
    let echo: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(echo["headers"]["authorization"], "Bearer t0k");
    assert_eq!(echo["headers"]["x-hop"], Value::Null);
    // python3 is another binary: no rule could allow it on this host.
    let python = h.python(
        &h.target("api.example.test"),
        &h.sandbox_ca,
        &["GET /repos/acme/x"],
    );
    assert_eq!(python[0]["connect"], 403, "{python:?}");
    let reason = python[0]["body"]["reason"].as_str().unwrap();
    assert!(reason.contains(&realpath_of("python3")), "{reason}");
    assert_eq!(python[0]["body"]["code"], "no_rule");
    assert!(
        h.proxy_log().contains("refused"),
        "one log line per refusal"
    );
}

#[test]
fn one_request_is_refused_inside_a_keep_alive_connection() {
    let (_rt, h) = started("keepalive", POLICY, &[]);
    let out = h.python(
        &h.target("api.example.test"),
        &h.sandbox_ca,
        &[
            "GET /repos/acme/x",
            "GET /repos/acme/secret/key",
            "POST /repos/acme/x",
            "POST /repos/acme/issues",
            "GET /repos/%2e%2e/admin",
            "HEAD /repos/acme/y",
        ],
    );
    assert_eq!(out[0]["connect"], 200, "{out:?}");
    assert_eq!(out[1]["status"], 200, "{out:?}");
    assert_eq!(out[2]["status"], 403);
    assert_eq!(out[2]["decision"], "deny");
    assert_eq!(out[2]["body"]["rule"], "api-read");
    assert_eq!(out[2]["body"]["code"], "denied_by_rule");
    assert_eq!(out[2]["body"]["finding"], Value::Null);
    assert!(
        out[2]["body"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("GET https://api.example.test:"),
        "{out:?}"
    );
    assert_eq!(out[3]["status"], 403);
    assert_eq!(out[3]["body"]["code"], "no_rule");
    assert_eq!(out[3]["body"]["rule"], Value::Null);
    assert_eq!(
        out[4]["status"], 200,
        "POST to an issues path is allowed: {out:?}"
    );
    assert_eq!(out[5]["body"]["code"], "non_canonical_path");
    assert_eq!(
        out[6]["status"], 200,
        "GET covers HEAD; the connection survived every refusal"
    );
    // Two Host headers, a method override, a backslash path.
    let tricks = h.python(
        &h.target("api.example.test"),
        &h.sandbox_ca,
        &[
            "GET /repos/a|Host: api.example.test|Host: other.example.test",
            "POST /repos/acme/issues|X-HTTP-Method-Override: DELETE",
            "GET /repos/acme/..\\..\\admin",
            "POST /repos/acme/issues|X-HTTP-Method-Override: GET",
        ],
    );
    assert_eq!(tricks[1]["body"]["code"], "host_mismatch", "{tricks:?}");
    assert_eq!(tricks[2]["body"]["code"], "no_rule", "{tricks:?}");
    assert!(
        tricks[2]["body"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("x-http-method-override"),
        "{tricks:?}"
    );
    assert_eq!(
        tricks[3]["body"]["code"], "non_canonical_path",
        "{tricks:?}"
    );
    assert_eq!(
        tricks[4]["status"], 200,
        "an override to an allowed method passes: {tricks:?}"
    );
}

/// A refused request whose body the proxy did not read ends its
/// connection, and the refusal says `Connection: close`, so the client
/// opens a new one instead of sending its next request into a closed one;
/// a refused request without a body leaves the connection open.
#[test]
fn a_refusal_that_leaves_a_body_unread_says_the_connection_closes() {
    let (_rt, h) = started("unread-body", POLICY, &[]);
    let out = h.python(
        &h.target("api.example.test"),
        &h.sandbox_ca,
        &[
            "GET /repos/acme/secret/key",
            "POST /repos/acme/x|@body: x",
            "GET /repos/acme/y",
        ],
    );
    assert_eq!(out[1]["status"], 403, "{out:?}");
    assert_eq!(out[1]["connection"], Value::Null, "no body, kept: {out:?}");
    assert_eq!(out[2]["status"], 403, "{out:?}");
    assert_eq!(out[2]["body"]["code"], "no_rule", "{out:?}");
    assert_eq!(out[2]["connection"], "close", "{out:?}");
    assert!(
        out[3]["error"].is_string(),
        "the connection closed after the refusal: {out:?}"
    );
}

#[test]
fn http2_streams_are_judged_each_on_their_own() {
    let (_rt, h) = started("h2", POLICY, &[]);
    let (code, body, tail) = h.curl(&[
        "--http2",
        "--cacert",
        &ca(&h),
        &h.url("api.example.test", "/repos/a"),
    ]);
    assert_eq!((code, tail.as_str()), (0, "200 200 2"), "{body}");
    let echo: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(echo["version"], "HTTP/2.0", "the upstream speaks h2 too");
    // Two streams on one connection: one allowed, one refused.
    let (code, body, tail) = h.curl(&[
        "--http2",
        "--cacert",
        &ca(&h),
        &h.url("api.example.test", "/repos/a"),
        &h.url("api.example.test", "/admin"),
    ]);
    assert_eq!(code, 0, "{body}");
    assert!(tail.ends_with("403 2"), "{tail}");
    assert!(
        body.contains("\"path\":\"/repos/a\"") && body.contains("\"decision\":\"deny\""),
        "{body}"
    );
}

#[test]
fn l4_grants_are_tunnelled_not_intercepted() {
    let (_rt, h) = started("tunnel", POLICY, &[]);
    // Trusting only the upstream's own CA proves the proxy did not terminate TLS.
    let upstream_ca = h.upstream_ca.display().to_string();
    let (code, body, tail) = h.curl(&[
        "--cacert",
        &upstream_ca,
        &h.url("raw.example.test", "/anything/at/all"),
    ]);
    assert_eq!(
        (code, tail.as_str()),
        (0, "200 200 1.1"),
        "{body}\n{}",
        h.proxy_log()
    );
    // A tunnel carries the granted name only: another SNI on the granted
    // address would be domain fronting.
    let (code, _, tail) = h.curl(&[
        "--cacert",
        &upstream_ca,
        "--connect-to",
        &format!(
            "other.example.test:{0}:raw.example.test:{0}",
            h.upstream.port()
        ),
        &h.url("other.example.test", "/x"),
    ]);
    assert_ne!(code, 0, "{tail}\n{}", h.proxy_log());
    assert!(
        h.proxy_log()
            .contains("is not the CONNECT target \"raw.example.test\""),
        "{}",
        h.proxy_log()
    );
    // And an intercepted host does not verify against the upstream CA.
    let (code, _, _) = h.curl(&[
        "--cacert",
        &upstream_ca,
        &h.url("api.example.test", "/repos/a"),
    ]);
    assert_ne!(code, 0);
}

#[test]
fn plain_http_absolute_form_is_judged() {
    let (_rt, h) = started("plain", POLICY, &[]);
    let port = h.plain_upstream.port();
    let (code, body, tail) = h.curl(&[&format!("http://api.example.test:{port}/repos/x")]);
    assert_eq!(
        (code, tail.as_str()),
        (0, "000 200 1.1"),
        "{body}\n{}",
        h.proxy_log()
    );
    let (_, body, tail) = h.curl(&[
        "-X",
        "DELETE",
        &format!("http://api.example.test:{port}/repos/x"),
    ]);
    assert_eq!(tail, "000 403 1.1");
    assert!(body.contains("DELETE"), "{body}");
    // A Host header naming another host than the URI: the upstream would
    // route by the header, so it is refused.
    let (_, body, tail) = h.curl(&[
        "-H",
        "Host: other.example.test",
        &format!("http://api.example.test:{port}/repos/x"),
    ]);
    assert_eq!(tail, "000 403 1.1");
    assert!(body.contains("host_mismatch"), "{body}");
    let (_, body, tail) = h.curl(&[&format!("http://127.0.0.1:{port}/repos/x")]);
    assert_eq!(tail, "000 403 1.1");
    assert!(body.contains("not_a_host"), "{body}");
}

#[test]
fn a_revocation_reaches_open_connections_and_tunnels() {
    let (_rt, h) = started("reload", POLICY, &[]);
    let go = h.dir.join("go");
    let go_arg = format!("wait {}", go.display());
    let steps = ["GET /repos/a", go_arg.as_str(), "GET /repos/a"];
    let (api, raw) = (h.target("api.example.test"), h.target("raw.example.test"));
    let (sandbox_ca, upstream_ca) = (h.sandbox_ca.clone(), h.upstream_ca.clone());
    std::thread::scope(|s| {
        let hr = &h;
        let intercepted = s.spawn(move || hr.python(&api, &sandbox_ca, &steps));
        let tunnelled = s.spawn(move || hr.python(&raw, &upstream_ca, &steps));
        std::thread::sleep(Duration::from_millis(1500));
        let before = h.generation();
        // Revoke both grants.
        h.write_policy(&h.render(
            "network:\n  - {name: other, endpoints: [{host: other.example.test, ports: [443]}]}\n",
        ));
        h.wait_generation_after(before);
        std::fs::write(&go, "").unwrap();
        let intercepted = intercepted.join().unwrap();
        let tunnelled = tunnelled.join().unwrap();
        assert_eq!(intercepted[1]["status"], 200, "{intercepted:?}");
        assert_eq!(intercepted[2]["status"], 403, "{intercepted:?}");
        assert_eq!(tunnelled[1]["status"], 200, "{tunnelled:?}");
        assert!(
            tunnelled[2].get("error").is_some(),
            "the tunnel was closed: {tunnelled:?}"
        );
    });
    assert!(
        h.get_metrics_path("/metrics")
            .1
            .contains("agentgate_proxy_tunnels_revoked_total 1")
    );
}

#[test]
fn a_revocation_between_connect_and_the_first_byte_closes_the_tunnel() {
    let (_rt, h) = started("revoke-early", POLICY, &[]);
    let go = h.dir.join("go");
    let before_tls = format!("before-tls {}", go.display());
    let (raw, upstream_ca) = (h.target("raw.example.test"), h.upstream_ca.clone());
    std::thread::scope(|s| {
        let hr = &h;
        let client =
            s.spawn(move || hr.python(&raw, &upstream_ca, &[before_tls.as_str(), "GET /x"]));
        // The revocation must come after the CONNECT was allowed: wait for
        // that decision (a fixed sleep lost the race on a busy machine).
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !h
            .get_metrics_path("/metrics")
            .1
            .contains(r#"agentgate_proxy_decisions_total{decision="allow",stage="connect""#)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the CONNECT was never allowed: {}",
                h.proxy_log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let before = h.generation();
        h.write_policy("network: []\n");
        h.wait_generation_after(before);
        std::fs::write(&go, "").unwrap();
        let out = client.join().unwrap();
        assert_eq!(out[0]["connect"], 200, "{out:?}");
        assert!(
            out[1].get("error").is_some(),
            "the handshake never reached the upstream: {out:?}"
        );
    });
    assert!(
        h.proxy_log().contains("no longer allows this tunnel"),
        "{}",
        h.proxy_log()
    );
}

#[test]
fn a_configmap_symlink_swap_is_followed() {
    let rt = runtime();
    let mut h = Harness::new(&rt, "configmap");
    // The layout kubelet writes: policy.yaml -> ..data/policy.yaml, ..data -> ..v1.
    let dir = h.dir.join("policy");
    std::fs::create_dir(dir.join("..v1")).unwrap();
    std::fs::write(dir.join("..v1/policy.yaml"), h.render(POLICY)).unwrap();
    std::os::unix::fs::symlink("..v1", dir.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/policy.yaml", dir.join("policy.yaml")).unwrap();
    h.start_proxy(&[]);
    h.wait_ready(200);
    let (_, _, tail) = h.curl(&["--cacert", &ca(&h), &h.url("api.example.test", "/repos/a")]);
    assert_eq!(tail, "200 200 1.1");
    std::fs::create_dir(dir.join("..v2")).unwrap();
    std::fs::write(dir.join("..v2/policy.yaml"), "network: []\n").unwrap();
    std::os::unix::fs::symlink("..v2", dir.join("..data_tmp")).unwrap();
    let before = h.generation();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    h.wait_generation_after(before);
    let (_, _, tail) = h.curl(&["--cacert", &ca(&h), &h.url("api.example.test", "/repos/a")]);
    assert_eq!(tail, "403 000 0", "refused at CONNECT now");
}

#[test]
fn an_invalid_policy_refuses_everything_until_a_valid_one_appears() {
    let (_rt, h) = started("invalid", POLICY, &[]);
    let before = h.generation();
    h.write_policy("network: [{name: x, endpoints: [{host: '*', ports: [443]}]}]\n");
    h.wait_generation_after(before);
    h.wait_ready(503);
    let (_, body, tail) = h.curl(&["--cacert", &ca(&h), &h.url("status.example.test", "/")]);
    assert_eq!(tail, "403 000 0");
    let (_, readyz) = h.get_metrics_path("/readyz");
    assert!(readyz.contains("not ready"), "{readyz}");
    assert!(
        h.get_metrics_path("/metrics")
            .1
            .contains("agentgate_proxy_policy_valid 0")
    );
    assert!(h.proxy_log().contains("no valid policy"), "{body}");
    let before = h.generation();
    h.write_policy(&h.render(POLICY));
    h.wait_generation_after(before);
    h.wait_ready(200);
    let (_, _, tail) = h.curl(&["--cacert", &ca(&h), &h.url("status.example.test", "/")]);
    assert_eq!(tail, "200 200 1.1");
}

#[test]
fn an_unknown_binary_gets_only_rules_without_binaries() {
    let (_rt, h) = started("unknown", POLICY, &["--identity", "none"]);
    let (_, body, tail) = h.curl(&["--cacert", &ca(&h), &h.url("api.example.test", "/repos/a")]);
    assert_eq!(tail, "403 000 0", "{body}");
    let (_, _, tail) = h.curl(&[
        "--cacert",
        &ca(&h),
        &h.url("status.example.test", "/health"),
    ]);
    assert_eq!(tail, "200 200 1.1");
    let (_, body, tail) = h.curl(&[
        "-X",
        "POST",
        "--cacert",
        &ca(&h),
        &h.url("status.example.test", "/health"),
    ]);
    assert_eq!(tail, "200 403 1.1");
    assert!(body.contains("(unknown binary)"), "{body}");
}

#[test]
fn refusals_cite_the_finding_that_predicted_them() {
    let rt = runtime();
    let mut h = Harness::new(&rt, "findings");
    h.write_policy(&h.render(POLICY));
    std::fs::write(
        h.dir.join("policy/findings.json"),
        r#"[{"id":"AG-TRIFECTA","sink":"post_issue","witness":"fetch_page -> read_env -> post_issue",
             "capabilities":[{"node":"post_issue","region":{"hosts":["api.example.test"],"methods":["DELETE"]}}]}]"#,
    )
    .unwrap();
    h.start_proxy(&[]);
    h.wait_ready(200);
    let (_, body, tail) = h.curl(&[
        "-X",
        "DELETE",
        "--cacert",
        &ca(&h),
        &h.url("api.example.test", "/repos/a"),
    ]);
    assert_eq!(tail, "200 403 1.1");
    let refusal: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(refusal["finding"]["id"], "AG-TRIFECTA");
    assert_eq!(refusal["finding"]["node"], "post_issue");
}

fn raw_exchange(h: &Harness, request: &[u8]) -> String {
    let mut s = TcpStream::connect(h.listen).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).to_string()
}

#[test]
fn bad_input_gets_a_clear_refusal_and_never_a_panic() {
    let (_rt, mut h) = started(
        "badinput",
        POLICY,
        &["--client-timeout", "1", "--upstream-timeout", "1"],
    );
    // Malformed CONNECT lines.
    assert!(raw_exchange(&h, b"CONNECT nonsense HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 400"));
    assert!(
        raw_exchange(&h, b"CONNECT api.example.test HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 400")
    );
    assert!(raw_exchange(&h, b"\x00\x01garbage\r\n\r\n").starts_with("HTTP/1.1 400"));
    let ip = raw_exchange(&h, b"CONNECT 127.0.0.1:443 HTTP/1.1\r\n\r\n");
    assert!(
        ip.starts_with("HTTP/1.1 403") && ip.contains("not_a_host"),
        "{ip}"
    );
    // An origin-form request to a proxy.
    assert!(raw_exchange(&h, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").starts_with("HTTP/1.1 400"));
    // Huge headers.
    let mut huge =
        b"GET http://api.example.test/repos/a HTTP/1.1\r\nHost: api.example.test\r\nX-Big: "
            .to_vec();
    huge.extend(std::iter::repeat_n(b'a', 200 * 1024));
    huge.extend(b"\r\n\r\n");
    let answer = raw_exchange(&h, &huge);
    assert!(
        answer.starts_with("HTTP/1.1 431") || answer.is_empty(),
        "{answer}"
    );
    // Non-TLS bytes after CONNECT to an intercepted host: closed, not served.
    // (This test binary is the client: only binary-less rules apply to it.)
    let target = h.target("status.example.test");
    let junk = raw_exchange(
        &h,
        format!("CONNECT {target} HTTP/1.1\r\n\r\n\x16\x03\x01\x00\x05hello").as_bytes(),
    );
    assert!(
        junk.starts_with("HTTP/1.1 200") && !junk.contains("x-upstream"),
        "{junk}"
    );
    // A client that sends nothing is dropped after --client-timeout.
    let mut slow = TcpStream::connect(h.listen).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = std::time::Instant::now();
    let mut buf = [0u8; 64];
    let _ = slow.read(&mut buf);
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "a silent client is not held forever"
    );
    // An upstream that never answers, and one that resets.
    let (_, body, tail) = h.curl(&["--cacert", &ca(&h), &h.url("status.example.test", "/hang")]);
    assert_eq!(tail, "200 504 1.1", "{body}");
    let (_, body, tail) = h.curl(&["--cacert", &ca(&h), &h.url("status.example.test", "/reset")]);
    assert_eq!(tail, "200 502 1.1", "{body}");
    assert!(body.contains("upstream_protocol"), "{body}");
    assert!(h.proxy_alive(), "{}", h.proxy_log());
    assert!(!h.proxy_log().contains("panicked"), "{}", h.proxy_log());
}

#[test]
fn upstream_certificates_are_always_verified() {
    let (_rt, h) = started("verify", POLICY, &["--no-upstream-ca"]);
    let (_, body, tail) = h.curl(&["--cacert", &ca(&h), &h.url("status.example.test", "/")]);
    assert_eq!(tail, "200 502 1.1", "{body}");
    assert!(
        body.contains("upstream_tls") && body.contains("certificate"),
        "{body}"
    );
}

const MCP_POLICY: &str = r#"
network:
  - name: bank
    binaries: [{CURL}]
    endpoints:
      - host: other.example.test
        ports: [{PORT}]
        protocol: mcp
        path: "/mcp*"
        tools:
          - name: "get_*"
          - name: send_money
            arguments: {amount: {maximum: 100}}
"#;

/// One JSON-RPC POST to the MCP routes of the upstream through the proxy:
/// (HTTP status, parsed body).
fn mcp_post(h: &Harness, path: &str, body: &Value) -> (String, Value) {
    let (code, text, tail) = h.curl(&[
        "--cacert",
        &ca(h),
        "-H",
        "content-type: application/json",
        "-H",
        "accept: application/json, text/event-stream",
        "-H",
        "mcp-session-id: s-1",
        "-d",
        &body.to_string(),
        &h.url("other.example.test", path),
    ]);
    assert_eq!(code, 0, "{text}\n{}", h.proxy_log());
    let status = tail.split(' ').nth(1).unwrap_or_default().to_string();
    let events: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    let parsed = match events.as_slice() {
        [] => serde_json::from_str(&text).unwrap_or(Value::Null),
        [one] => serde_json::from_str(one).unwrap(),
        many => Value::Array(
            many.iter()
                .map(|e| serde_json::from_str(e).unwrap())
                .collect(),
        ),
    };
    (status, parsed)
}

fn call(id: u32, name: &str, arguments: Value) -> Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                       "params": {"name": name, "arguments": arguments}})
}

fn listed(answer: &Value) -> Vec<String> {
    answer["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tool list in {answer}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn mcp_calls_are_judged_one_by_one_and_lists_are_filtered() {
    use agentgate_proxy::testkit::mcp_received;
    let (_rt, h) = started("mcp", MCP_POLICY, &[]);
    let list = serde_json::json!({"jsonrpc": "2.0", "id": "l", "method": "tools/list"});
    let (status, answer) = mcp_post(&h, "/mcp", &list);
    assert_eq!(status, "200");
    assert_eq!(listed(&answer), ["get_balance", "send_money"], "{answer}");
    // The same list as an event stream is filtered event by event.
    let (_, answer) = mcp_post(&h, "/mcp-sse", &list);
    assert_eq!(listed(&answer), ["get_balance", "send_money"], "{answer}");

    let (_, answer) = mcp_post(
        &h,
        "/mcp",
        &call(1, "send_money", serde_json::json!({"amount": 50})),
    );
    assert_eq!(
        answer["result"]["content"][0]["text"], "called send_money",
        "{answer}"
    );
    let (status, answer) = mcp_post(
        &h,
        "/mcp",
        &call(2, "send_money", serde_json::json!({"amount": 500})),
    );
    assert_eq!(status, "200", "a refusal is a JSON-RPC answer");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("refused by agentgate: tools/call send_money {\"amount\":500}"),
        "{message}"
    );
    assert_eq!(answer["error"]["data"]["code"], "no_rule");
    // A batch with one refused call is answered whole and forwarded not at all.
    let (_, answers) = mcp_post(
        &h,
        "/mcp",
        &serde_json::json!([
            call(3, "get_balance", serde_json::json!({})),
            call(4, "delete_account", serde_json::json!({}))
        ]),
    );
    assert_eq!(answers.as_array().map(Vec::len), Some(2), "{answers}");
    assert!(
        answers[1]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("delete_account")
    );
    let received = mcp_received();
    assert!(
        received.contains(&"tools/call send_money".to_string()),
        "{received:?}"
    );
    assert_eq!(
        received
            .iter()
            .filter(|r| r.starts_with("tools/call"))
            .count(),
        1,
        "only the allowed call reached the server: {received:?}"
    );

    // Hot reload applies to the open session: delete_account becomes allowed.
    let before = h.generation();
    h.write_policy(
        &h.render(&MCP_POLICY.replace("\"get_*\"", "\"get_*\"\n          - name: delete_account")),
    );
    h.wait_generation_after(before);
    let (_, answer) = mcp_post(
        &h,
        "/mcp",
        &call(5, "delete_account", serde_json::json!({})),
    );
    assert_eq!(
        answer["result"]["content"][0]["text"], "called delete_account",
        "{answer}"
    );
    let (_, answer) = mcp_post(&h, "/mcp", &list);
    assert_eq!(
        listed(&answer),
        ["get_balance", "send_money", "delete_account"]
    );
    // Unknown methods are refused with a reason.
    let (_, answer) = mcp_post(
        &h,
        "/mcp",
        &serde_json::json!({"jsonrpc": "2.0", "id": 6, "method": "tools/destroy"}),
    );
    assert_eq!(
        answer["error"]["data"]["code"], "unsupported_mcp_method",
        "{answer}"
    );
    assert!(h.proxy_log().contains("unsupported_mcp_method"));
}

#[test]
fn every_request_to_the_model_provider_is_read_or_refused() {
    let rt = runtime();
    let mut h = Harness::new(&rt, "model-requests");
    let policy = r#"
network:
  - name: model
    binaries: [{CURL}]
    endpoints:
      - host: api.example.test
        ports: [{PORT}]
        protocol: rest
        modelProvider: true
        access: full
        unrecordedPaths: [/v1/embeddings]
"#;
    h.write_policy(&h.render(policy));
    h.start_proxy(&[]);
    h.wait_ready(200);
    let ca = ca(&h);
    let post = |path: &str, body: &str| {
        let url = h.url("api.example.test", path);
        h.curl(&[
            "-X",
            "POST",
            "--cacert",
            &ca,
            "-H",
            "content-type: application/json",
            "--data-binary",
            body,
            &url,
        ])
    };
    let chat = r#"{"model": "m", "messages": [{"role": "user", "content": "Pay GB29NWBK60161331926819"}]}"#;
    let (_, _, tail) = post("/v1/chat/completions", chat);
    assert_eq!(tail, "200 200 1.1", "{}", h.proxy_log());
    let gemini =
        r#"{"contents": [{"role": "user", "parts": [{"text": "Pay GB29NWBK60161331926819"}]}]}"#;
    let (_, _, tail) = post("/v1beta/models/gemini-2.0-flash:generateContent", gemini);
    assert_eq!(tail, "200 200 1.1", "{}", h.proxy_log());
    // Declared to carry no conversation: forwarded unread.
    let (_, _, tail) = post("/v1/embeddings", r#"{"input": "anything"}"#);
    assert_eq!(tail, "200 200 1.1");
    // A model API the proxy does not read: refused, with what to do.
    let (_, body, tail) = post("/v1/assistants/run", chat);
    assert_eq!(tail, "200 403 1.1", "{body}");
    let refusal: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(refusal["code"], "unread_model_request", "{refusal}");
    assert!(
        refusal["reason"]
            .as_str()
            .unwrap()
            .contains("unrecordedPaths"),
        "{refusal}"
    );
    // A GET carrying a body is no exception.
    let url = h.url("api.example.test", "/v1/models/gpt");
    let (_, body, tail) = h.curl(&["-X", "GET", "--cacert", &ca, "--data-binary", chat, &url]);
    assert_eq!(tail, "200 403 1.1", "{body}");
    assert!(body.contains("unread_model_request"), "{body}");
    let (_, _, tail) = h.curl(&["--cacert", &ca, &url]);
    assert_eq!(tail, "200 200 1.1");
    // A role given twice, once escaped: the provider may read either, so
    // the proxy reads neither.
    let twice = r#"{"model": "m", "messages": [{"role": "tool", "tool_call_id": "c", "r\u006fle": "user", "content": "US13"}]}"#;
    let (_, body, tail) = post("/v1/chat/completions", twice);
    assert_eq!(tail, "200 403 1.1", "{body}");
    let refusal: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(refusal["code"], "malformed_model_request", "{refusal}");
    assert!(
        refusal["reason"].as_str().unwrap().contains("twice"),
        "{refusal}"
    );
}

#[test]
fn an_in_process_sink_is_refused_a_request_carrying_the_secret_after_untrusted_content() {
    let rt = runtime();
    let mut h = Harness::new(&rt, "request-flow");
    let policy = r#"
network:
  - name: model
    binaries: [{CURL}]
    endpoints:
      - host: api.example.test
        ports: [{PORT}]
        protocol: rest
        modelProvider: true
        rules: [{methods: [POST], path: /v1/chat/completions}]
  - name: notes
    binaries: [{CURL}]
    endpoints:
      - {host: other.example.test, ports: [{PORT}], protocol: rest, rules: [{methods: [GET, POST], path: "/**"}]}
      - {host: status.example.test, ports: [{PORT}], protocol: rest, access: read-only}
      - {host: raw.example.test, ports: [{PORT}]}
"#;
    h.write_policy(&h.render(policy));
    // The finding's flow: a page fetched over REST is the untrusted input,
    // a vault read in process the secret, and posting a note the sink.
    std::fs::write(
        h.dir.join("policy/findings.json"),
        r#"[{"id":"AG-TRIFECTA","sink":"post_note","witness":"fetch_page -> __llm__ -> post_note",
             "runtime":{"untrusted":"fetch_page","secret":"read_vault","sink":"post_note",
                        "untrustedHosts":["status.example.test"],
                        "sinkRegions":[{"hosts":["other.example.test"],"methods":["POST"]},{"hosts":["raw.example.test"],"methods":["POST"]}]}}]"#,
    )
    .unwrap();
    h.start_proxy(&[]);
    h.wait_ready(200);
    let ca = ca(&h);
    let post = |host: &str, path: &str, headers: &[&str], body: &str| {
        let url = h.url(host, path);
        let mut args = vec!["-X", "POST", "--cacert", &ca, "--data-binary", body];
        for header in headers {
            args.extend(["-H", header]);
        }
        args.push(&url);
        h.curl(&args)
    };
    let json = "content-type: application/json";
    let conversation = r#"{"model": "m", "messages": [
        {"role": "system", "content": "You keep notes."},
        {"role": "user", "content": "Post a note about the status page."},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read_vault", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "deploy token hunter2-secret-77"}]}"#;
    let (_, _, tail) = post(
        "api.example.test",
        "/v1/chat/completions",
        &[json],
        conversation,
    );
    assert_eq!(tail, "200 200 1.1", "{}", h.proxy_log());
    let secret_note = r#"{"text": "hunter2-secret-77"}"#;
    // No untrusted content has reached the model yet: the note is posted.
    let (_, _, tail) = post("other.example.test", "/notes", &[json], secret_note);
    assert_eq!(tail, "200 200 1.1");
    let (_, _, tail) = h.curl(&["--cacert", &ca, &h.url("status.example.test", "/page")]);
    assert_eq!(tail, "200 200 1.1");
    // Now the flow the finding predicted is complete: refused, cited.
    let (_, body, tail) = post("other.example.test", "/notes", &[json], secret_note);
    assert_eq!(tail, "200 403 1.1", "{body}");
    let refusal: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(refusal["code"], "runtime_trifecta");
    assert_eq!(refusal["finding"]["id"], "AG-TRIFECTA");
    let reason = refusal["reason"].as_str().unwrap();
    assert!(
        reason.contains("body.text carries a value of tool:read_vault while content of tool:fetch_page has reached the model"),
        "{reason}"
    );
    // The agent's own words pass; so does a method the sink does not use.
    let (_, _, tail) = post(
        "other.example.test",
        "/notes",
        &[json],
        r#"{"text": "all green"}"#,
    );
    assert_eq!(tail, "200 200 1.1");
    let (_, _, tail) = h.curl(&[
        "--cacert",
        &ca,
        &h.url("other.example.test", "/notes?q=hunter2-secret-77"),
    ]);
    assert_eq!(tail, "200 200 1.1");
    // The secret in the query of a POST, or a body that cannot be read.
    let (_, _, tail) = post("other.example.test", "/notes?to=hunter2-secret-77", &[], "");
    assert_eq!(tail, "200 403 1.1");
    let (_, body, tail) = post(
        "other.example.test",
        "/notes",
        &["content-encoding: gzip"],
        "\u{1f}compressed",
    );
    assert_eq!(tail, "200 403 1.1", "{body}");
    assert!(
        body.contains("cannot be read (its body has the content coding"),
        "{body}"
    );
    // A name carries a value as well as a value does; a body is read every
    // way a server might (curl calls this JSON a form); a method override
    // makes a GET the sink's POST; a credential is a header's part.
    for (path, headers, body) in [
        ("/notes?hunter2-secret-77", vec![], ""),
        ("/notes", vec![], secret_note),
        (
            "/notes",
            vec!["authorization: Bearer hunter2-secret-77"],
            "{}",
        ),
    ] {
        let (_, body, tail) = post("other.example.test", path, &headers, body);
        assert_eq!(tail, "200 403 1.1", "{path} {headers:?}: {body}");
    }
    let (_, body, tail) = h.curl(&[
        "-H",
        "x-http-method-override: POST",
        "--cacert",
        &ca,
        &h.url("other.example.test", "/notes?q=hunter2-secret-77"),
    ]);
    assert_eq!(tail, "200 403 1.1", "{body}");
    // A tunnel to the sink's host is never read, and would stay open while
    // content arrives: refused where the session is recorded, whatever
    // the method the sink's region names.
    let upstream_ca = h.upstream_ca.display().to_string();
    let raw = h.url("raw.example.test", "/x");
    let (code, body, tail) = h.curl(&["--cacert", &upstream_ca, &raw]);
    assert_ne!(code, 0, "{tail}");
    assert!(
        body.is_empty() || body.contains("runtime_trifecta"),
        "{body}"
    );
    // The poller reads them with the tool-call refusals.
    let (_, lineage) = h.get_metrics_path("/lineage");
    let lineage: Value = serde_json::from_str(&lineage).unwrap();
    let refused: Vec<&Value> = lineage["refusals"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["code"] == "runtime_trifecta")
        .map(|r| &r["stage"])
        .collect();
    assert_eq!(
        refused,
        [
            "request", "request", "request", "request", "request", "request", "request", "connect"
        ],
        "{lineage}"
    );
}

/// Query matchers (docs/policy-semantics.md §10.1) with curl and the real
/// upstream: the query decides, as the upstream receives it, and what
/// servers could read two ways is refused before it is forwarded.
#[test]
fn query_parameters_are_judged_as_the_server_reads_them() {
    let policy = r#"
network:
  - name: search
    binaries: [{CURL}]
    endpoints:
      - host: api.example.test
        ports: [{PORT}]
        protocol: rest
        rules:
          - {methods: [GET], path: /search, query: {q: "*", sort: {any: [relevance, "date*"], optional: true}}}
        denyRules:
          - {methods: ["*"], query: {debug: "*"}}
"#;
    let (_rt, h) = started("query", policy, &[]);
    let get = |target: &str| {
        let (code, body, tail) = h.curl(&["--cacert", &ca(&h), &h.url("api.example.test", target)]);
        assert_eq!(code, 0, "{body}\n{}", h.proxy_log());
        let status = tail.split(' ').nth(1).unwrap_or_default().to_string();
        (
            status,
            serde_json::from_str::<Value>(&body).unwrap_or(Value::Null),
        )
    };
    let (status, echo) = get("/search?q=agent+gate&sort=date-desc&page=2");
    assert_eq!(status, "200", "{echo}");
    // Forwarded as it came.
    assert_eq!(echo["query"], "q=agent+gate&sort=date-desc&page=2");
    let (status, echo) = get("/search?sort=relevance");
    assert_eq!(
        (status.as_str(), &echo["code"]),
        ("403", &Value::from("no_rule")),
        "{echo}"
    );
    let (status, echo) = get("/search?q=x&debug=1");
    assert_eq!(
        (status.as_str(), &echo["code"]),
        ("403", &Value::from("denied_by_rule")),
        "{echo}"
    );
    // Escaped names are the same names.
    let (status, echo) = get("/search?q=x&%64ebug=1");
    assert_eq!(
        (status.as_str(), &echo["code"]),
        ("403", &Value::from("denied_by_rule")),
        "{echo}"
    );
    let (status, echo) = get("/search?q=x&q=y");
    assert_eq!(
        (status.as_str(), &echo["code"]),
        ("403", &Value::from("repeated_query_parameter")),
        "{echo}"
    );
    let (status, echo) = get("/search?q=x;debug=1");
    assert_eq!(
        (status.as_str(), &echo["code"]),
        ("403", &Value::from("non_canonical_query")),
        "{echo}"
    );
    // "date+x" is "date x" to one server and "date+x" to another: both
    // match "date*", so both readings are allowed.
    let (status, _) = get("/search?q=x&sort=date+x");
    assert_eq!(status, "200");
}
