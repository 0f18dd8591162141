//! Credentials end to end (docs/policy-semantics.md §9.4, docs/proxy.md,
//! "Credentials"): `agentgate-proxy` as a process with its secrets and
//! placeholders directories, curl as the agent, and an upstream that keeps
//! every request it received whole. The upstream sees the real secret only
//! on requests a rule binding the credential allows, and never a
//! placeholder; misuse, unbound and unavailable requests never reach it;
//! and nothing the proxy logs or serves holds a secret or a placeholder.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;
use std::time::Duration;

use agentgate_proxy::testkit::{Recorded, recorded};
use serde_json::Value;
use support::{Harness, runtime};

const POLICY: &str = r#"
network:
  - name: open
    binaries: [{CURL}]
    endpoints:
      - host: api.example.test
        ports: [{PORT}]
        protocol: rest
        rules: [{methods: [GET, POST], path: "/record/**"}]
  - name: bound
    binaries: [{CURL}]
    credentials: [github-token, query-token, missing-token]
    endpoints:
      - host: api.example.test
        ports: [{PORT}]
        protocol: rest
        rules: [{methods: [GET, POST], path: "/record/bound/**"}]
  - name: bank
    binaries: [{CURL}]
    credentials: [github-token]
    endpoints:
      - host: api.example.test
        ports: [{PORT}]
        protocol: mcp
        path: /mcp
        tools: [{name: get_balance}]
  - name: raw-uninspected
    binaries: [{CURL}]
    credentials: [github-token]
    allowUninspectedCredentials: true
    endpoints:
      - host: raw.example.test
        ports: [{PORT}]
  - name: bank-anonymous
    binaries: [{CURL}]
    endpoints:
      - host: api.example.test
        ports: [{PORT}]
        protocol: mcp
        path: /mcp
        tools: [{name: send_money}]
"#;

const DECLARED: &str = r#"[
  {"name": "github-token", "secretRef": {"name": "github", "key": "token"},
   "placeholder": {"env": "GITHUB_TOKEN"},
   "attach": {"header": {"name": "Authorization", "format": "Bearer {}"}}},
  {"name": "query-token", "secretRef": {"name": "api", "key": "key"},
   "placeholder": {"file": "/home/agent/.api-key"},
   "attach": {"query": {"name": "access_token"}}},
  {"name": "missing-token", "secretRef": {"name": "missing", "key": "k"},
   "placeholder": {"env": "MISSING_TOKEN"},
   "attach": {"header": {"name": "X-Missing"}}}
]"#;

const GH_SECRET: &str = "ghp_e2eFirstSecretValue0001";
const GH_ROTATED: &str = "ghp_e2eRotatedSecretValue0002";
const QUERY_SECRET: &str = "q secret/with&odd=chars";

struct Credentialed {
    h: Harness,
    _rt: tokio::runtime::Runtime,
    secrets: PathBuf,
    placeholders: PathBuf,
}

impl Credentialed {
    fn start(name: &str) -> Credentialed {
        let rt = runtime();
        let mut h = Harness::new(&rt, name);
        // Everything the proxy's own code logs, at every level.
        h.rust_log = "info,agentgate_proxy=trace".into();
        let secrets = h.dir.join("secrets");
        let placeholders = h.dir.join("placeholders");
        std::fs::create_dir_all(&secrets).unwrap();
        std::fs::create_dir_all(&placeholders).unwrap();
        std::fs::write(secrets.join("github-token"), format!("{GH_SECRET}\n")).unwrap();
        std::fs::write(secrets.join("query-token"), QUERY_SECRET).unwrap();
        std::fs::write(h.dir.join("policy/credentials.json"), DECLARED).unwrap();
        h.write_policy(&h.render(POLICY));
        let (s, p) = (
            secrets.display().to_string(),
            placeholders.display().to_string(),
        );
        h.start_proxy(&["--credential-secrets", &s, "--placeholders", &p]);
        h.wait_ready(200);
        Credentialed {
            h,
            _rt: rt,
            secrets,
            placeholders,
        }
    }

    fn placeholder(&self, name: &str) -> String {
        let value = std::fs::read_to_string(self.placeholders.join(name)).unwrap();
        assert!(
            agentgate_policy::credentials::is_placeholder(&value),
            "{value}"
        );
        value
    }

    /// curl through the proxy: (HTTP status, body as JSON or text).
    fn curl(&self, args: &[&str]) -> (u16, Value) {
        let ca = self.h.sandbox_ca.display().to_string();
        let mut all = vec!["--cacert", &ca];
        all.extend_from_slice(args);
        let (code, body, tail) = self.h.curl(&all);
        assert_eq!(
            code,
            0,
            "curl failed: {body} {tail}\n{}",
            self.h.proxy_log()
        );
        let status = tail
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = serde_json::from_str(&body).unwrap_or(Value::String(body));
        (status, body)
    }

    fn url(&self, path: &str) -> String {
        self.h.url("api.example.test", path)
    }
}

/// What the upstream received at paths starting with `prefix`.
fn received(prefix: &str) -> Vec<Recorded> {
    recorded()
        .into_iter()
        .filter(|r| r.target.starts_with(prefix))
        .collect()
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

fn header<'r>(r: &'r Recorded, name: &str) -> Option<&'r [u8]> {
    r.headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_slice())
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} never happened");
}

#[test]
fn the_secret_reaches_only_bound_requests_and_never_the_agent_or_the_logs() {
    let c = Credentialed::start("credentials");
    let gh = c.placeholder("github-token");
    let query = c.placeholder("query-token");
    let missing = c.placeholder("missing-token");
    assert_ne!(gh, query);
    let bearer = format!("Authorization: Bearer {gh}");

    // Bound, over HTTP/1.1 and HTTP/2: the upstream gets the secret in the
    // placeholder's place; the agent's echo has it masked.
    for (path, http2) in [("/record/bound/h1", false), ("/record/bound/h2", true)] {
        let url = c.url(path);
        let mut args = vec!["-H", &bearer, url.as_str()];
        if http2 {
            args.insert(0, "--http2");
        }
        let (status, echo) = c.curl(&args);
        assert_eq!(status, 200, "{echo}\n{}", c.h.proxy_log());
        let got = received(path);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(
            header(&got[0], "authorization"),
            Some(format!("Bearer {GH_SECRET}").as_bytes())
        );
        let shown = echo.to_string();
        assert!(!shown.contains(GH_SECRET), "{shown}");
        assert!(shown.contains("Bearer ****"), "{shown}");
    }

    // The query form: the secret percent-encoded, the rest as it was.
    let url = c.url(&format!(
        "/record/bound/query?a=%41&access_token={query}&b=c+d"
    ));
    let (status, _) = c.curl(&[&url]);
    assert_eq!(status, 200, "{}", c.h.proxy_log());
    let got = received("/record/bound/query");
    assert_eq!(
        got[0].target,
        "/record/bound/query?a=%41&access_token=q%20secret%2Fwith%26odd%3Dchars&b=c+d"
    );

    // A streamed body without a needle passes whole beside the attached
    // secret.
    let upload = c.h.dir.join("upload");
    let big: Vec<u8> = (0..(1 << 20)).map(|i| b"abcdefgh\n"[i % 9]).collect();
    std::fs::write(&upload, &big).unwrap();
    let data = format!("@{}", upload.display());
    let (status, _) = c.curl(&[
        "-H",
        &bearer,
        "--data-binary",
        &data,
        &c.url("/record/bound/upload"),
    ]);
    assert_eq!(status, 200, "{}", c.h.proxy_log());
    assert_eq!(received("/record/bound/upload")[0].body, big);

    // Unbound: the placeholder where no rule binding it allows the
    // request is the policy's refusal, and never leaves.
    let (status, refusal) = c.curl(&["-H", &bearer, &c.url("/record/open/unbound")]);
    assert_eq!(status, 403);
    assert_eq!(refusal["code"], "no_rule", "{refusal}");
    assert!(
        refusal["reason"]
            .as_str()
            .unwrap()
            .contains("no rule binding credential github-token allows it"),
        "{refusal}"
    );
    // The same request without it is allowed.
    let (status, _) = c.curl(&[&c.url("/record/open/bare")]);
    assert_eq!(status, 200);

    // Misuse: in another header, in the body (raw or as the secret
    // itself), beside a second credential.
    let token = format!("X-Token: {gh}");
    let body = format!("{{\"leak\": \"{gh}\"}}");
    let secret_body = format!("token={GH_SECRET}");
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("/record/bound/misuse-header", vec!["-H", &token]),
        (
            "/record/bound/misuse-body",
            vec!["-H", &bearer, "--data-binary", &body],
        ),
        (
            "/record/bound/misuse-secret",
            vec!["--data-binary", &secret_body],
        ),
    ];
    for (path, mut args) in cases {
        let url = c.url(path);
        args.push(&url);
        let (status, refusal) = c.curl(&args);
        assert_eq!(status, 403, "{path}: {refusal}");
        assert_eq!(refusal["code"], "credential_misuse", "{path}: {refusal}");
        assert!(
            refusal["reason"]
                .as_str()
                .unwrap()
                .contains("credential github-token"),
            "{refusal}"
        );
        assert!(received(path).is_empty(), "{path} reached the upstream");
    }
    let two = c.url(&format!("/record/bound/two?access_token={query}"));
    let (status, refusal) = c.curl(&["-H", &bearer, &two]);
    assert_eq!(
        (status, refusal["code"].as_str()),
        (403, Some("credential_misuse"))
    );

    // Unavailable: bound, but the proxy holds no secret for it.
    let x_missing = format!("X-Missing: {missing}");
    let (status, refusal) = c.curl(&["-H", &x_missing, &c.url("/record/bound/missing")]);
    assert_eq!(status, 403);
    assert_eq!(refusal["code"], "credential_unavailable", "{refusal}");
    assert!(
        refusal["reason"].as_str().unwrap().ends_with(
            "credential missing-token has no secret: key k of Secret missing is missing"
        ),
        "{refusal}"
    );
    assert!(received("/record/bound/missing").is_empty());

    // MCP: the call is judged as carrying the credential, and the secret
    // attached to the POST that carries it.
    let call = |tool: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#
        )
    };
    let mcp = |tool: &str, with: bool| {
        let body = call(tool);
        let mut args = vec![
            "-H",
            "content-type: application/json",
            "-H",
            "accept: application/json, text/event-stream",
            "--data-binary",
            &body,
        ];
        if with {
            args.extend(["-H", bearer.as_str()]);
        }
        let url = c.url("/mcp");
        args.push(&url);
        c.curl(&args)
    };
    let before = received("/mcp").len();
    let (status, answer) = mcp("get_balance", true);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["result"]["content"][0]["text"], "called get_balance");
    let got = received("/mcp");
    assert_eq!(got.len(), before + 1);
    assert_eq!(
        header(&got[before], "authorization"),
        Some(format!("Bearer {GH_SECRET}").as_bytes())
    );
    // Without it the binding rule allows the call bare (§9.2), and no
    // secret travels; with it, no rule binding it allows send_money.
    let (_, answer) = mcp("get_balance", false);
    assert_eq!(answer["result"]["content"][0]["text"], "called get_balance");
    assert_eq!(header(&received("/mcp")[before + 1], "authorization"), None);
    let (_, answer) = mcp("send_money", true);
    assert_eq!(answer["error"]["data"]["code"], "no_rule", "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("binding credential github-token"),
        "{answer}"
    );
    assert_eq!(received("/mcp").len(), before + 2);

    // An l4 endpoint bound with allowUninspectedCredentials: the proxy
    // inspects the connection instead of tunnelling it, so it can attach
    // the secret, and the credential reaches every request of the endpoint
    // (§9.3), any method and path; a placeholder outside its form is still
    // misuse there.
    for (method, path) in [
        ("GET", "/record/l4/read"),
        ("DELETE", "/record/l4/any/path"),
    ] {
        let url = c.h.url("raw.example.test", path);
        let (status, _) = c.curl(&["-X", method, "-H", &bearer, &url]);
        assert_eq!(status, 200, "{method} {path}\n{}", c.h.proxy_log());
        let got = received(path);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(
            header(&got[0], "authorization"),
            Some(format!("Bearer {GH_SECRET}").as_bytes()),
            "{method} {path}"
        );
    }
    let url = c.h.url("raw.example.test", "/record/l4/misuse");
    let (status, refusal) = c.curl(&["-H", &token, &url]);
    assert_eq!(
        (status, refusal["code"].as_str()),
        (403, Some("credential_misuse")),
        "{refusal}"
    );
    assert!(received("/record/l4/misuse").is_empty());
    // Without a placeholder the endpoint is plain l4, as before.
    let (status, _) = c.curl(&[&c.h.url("raw.example.test", "/record/l4/bare")]);
    assert_eq!(status, 200);
    assert_eq!(
        header(&received("/record/l4/bare")[0], "authorization"),
        None
    );

    // Rotation: the kubelet swaps the file; the next request carries the
    // new secret, without a restart.
    let tmp = c.secrets.join(".rotating");
    std::fs::write(&tmp, GH_ROTATED).unwrap();
    std::fs::rename(&tmp, c.secrets.join("github-token")).unwrap();
    let mut round = 0;
    wait_for("the rotated secret attached", || {
        round += 1;
        let path = format!("/record/bound/rotated-{round}");
        let (status, _) = c.curl(&["-H", &bearer, &c.url(&path)]);
        assert_eq!(status, 200);
        header(&received(&path)[0], "authorization")
            == Some(format!("Bearer {GH_ROTATED}").as_bytes())
    });
    // The old value is now just data; the new one is the needle.
    let leak = format!("x={GH_ROTATED}");
    let (status, refusal) = c.curl(&["--data-binary", &leak, &c.url("/record/bound/rotated-leak")]);
    assert_eq!(
        (status, refusal["code"].as_str()),
        (403, Some("credential_misuse"))
    );

    // The upstream never received a placeholder.
    for r in recorded() {
        for p in [&gh, &query, &missing] {
            assert!(
                !contains(&r.bytes(), p),
                "{} received a placeholder",
                r.target
            );
        }
    }

    // Counted by name and outcome, and logged as credential refusals.
    let (_, metrics) = c.h.get_metrics_path("/metrics");
    for line in [
        r#"agentgate_proxy_credentials_total{credential="github-token",outcome="attached"}"#,
        r#"agentgate_proxy_credentials_total{credential="query-token",outcome="attached"}"#,
        r#"agentgate_proxy_credentials_total{credential="github-token",outcome="misuse"}"#,
        r#"agentgate_proxy_credentials_total{credential="github-token",outcome="unbound"}"#,
        r#"agentgate_proxy_credentials_total{credential="missing-token",outcome="unavailable"}"#,
    ] {
        assert!(metrics.contains(line), "{line} missing:\n{metrics}");
    }
    let (_, lineage) = c.h.get_metrics_path("/lineage");
    let lineage_json: Value = serde_json::from_str(&lineage).unwrap();
    let stages: Vec<&str> = lineage_json["refusals"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["stage"].as_str())
        .collect();
    assert!(stages.contains(&"credential"), "{lineage}");

    // Nothing the proxy logged or serves holds a secret or a placeholder.
    let log = c.h.proxy_log();
    assert!(log.contains("credential_misuse"), "{log}");
    assert!(!log.contains("panicked"), "{log}");
    for (what, text) in [
        ("log", &log),
        ("/metrics", &metrics),
        ("/lineage", &lineage),
    ] {
        for needle in [GH_SECRET, GH_ROTATED, QUERY_SECRET, &gh, &query, &missing] {
            assert!(
                !text.contains(needle),
                "{what} holds a secret or placeholder"
            );
        }
        // The query secret as it travels, too.
        assert!(
            !text.contains("q%20secret"),
            "{what} holds the encoded secret"
        );
    }
}

#[test]
fn invalid_declarations_refuse_every_placeholder_and_placeholders_survive_a_restart() {
    let mut c = Credentialed::start("credentials-invalid");
    let gh = c.placeholder("github-token");
    let bearer = format!("Authorization: Bearer {gh}");
    // A restart keeps the Pod's placeholders: the agent holds them.
    let (s, p) = (
        c.secrets.display().to_string(),
        c.placeholders.display().to_string(),
    );
    c.h.stop_proxy();
    c.h.start_proxy(&["--credential-secrets", &s, "--placeholders", &p]);
    c.h.wait_ready(200);
    assert_eq!(c.placeholder("github-token"), gh);
    let (status, _) = c.curl(&["-H", &bearer, &c.url("/record/bound/restarted")]);
    assert_eq!(status, 200, "{}", c.h.proxy_log());
    // Broken declarations: never free, every placeholder refused.
    std::fs::write(c.h.dir.join("policy/credentials.json"), "[{\"name\": 7}]").unwrap();
    let mut round = 0;
    wait_for("the invalid declarations applied", || {
        round += 1;
        let path = format!("/record/bound/invalid-{round}");
        c.curl(&["-H", &bearer, &c.url(&path)]).0 == 403
    });
    assert!(received(&format!("/record/bound/invalid-{round}")).is_empty());
    let (_, refusal) = c.curl(&["-H", &bearer, &c.url("/record/open/invalid")]);
    assert_eq!(refusal["code"], "credential_unavailable", "{refusal}");
    assert!(
        refusal["reason"].as_str().unwrap().contains("invalid"),
        "{refusal}"
    );
    assert!(received("/record/open/invalid").is_empty());
    // A request without a placeholder is judged as before.
    assert_eq!(c.curl(&[&c.url("/record/open/plain")]).0, 200);
}

#[test]
fn without_a_placeholders_directory_a_placeholder_is_unavailable() {
    let rt = runtime();
    let mut h = Harness::new(&rt, "credentials-bare");
    std::fs::write(h.dir.join("policy/credentials.json"), DECLARED).unwrap();
    h.write_policy(&h.render(POLICY));
    h.start_proxy(&[]);
    h.wait_ready(200);
    let ca = h.sandbox_ca.display().to_string();
    let placeholder = "agentgate-placeholder-0123456789abcdef0123456789abcdef";
    let (_, body, _) = h.curl(&[
        "--cacert",
        &ca,
        "-H",
        &format!("Authorization: Bearer {placeholder}"),
        &h.url("api.example.test", "/record/bound/bare"),
    ]);
    let refusal: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(refusal["code"], "credential_unavailable", "{refusal}");
    assert!(
        refusal["reason"]
            .as_str()
            .unwrap()
            .contains("--placeholders"),
        "{refusal}"
    );
    assert!(!refusal.to_string().contains(placeholder));
    assert!(received("/record/bound/bare").is_empty());
}
