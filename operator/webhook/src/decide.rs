//! The runtime decision point (docs/design.md §8): `POST /v1/decide` answers
//! whether a sandbox's committed effective policy allows one concrete
//! action, with the concrete matcher (no solver). Anything it cannot
//! evaluate is a deny with the reason (fail closed).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use agentgate_governance::severing::finding_regions;
use agentgate_judgement::findings::CompiledFindings;
use agentgate_judgement::refusal::{Refusal, RefusalCode};
use agentgate_policy::action::{
    Access, Action, FilesystemAction, Layer, McpAction, McpKind, NetworkAction, Upgrade,
};
use agentgate_policy::compile::{CompiledPolicy, Limits, Role, compile};
use agentgate_policy::matcher::{allows_filesystem, decide_mcp, decide_network};
use agentgate_policy::model::PolicyDocument;
use agentgate_trifecta::{Channel, Finding, Graph};

/// One action to decide. A network action gives `binary`, `host`, `port`,
/// `layer` (default `rest`), `method` and `path`; a filesystem action gives
/// `access` and `path`; an MCP action (docs/policy-semantics.md §8.1), for
/// tools that run inside the agent, gives `binary`, `host`, `port`, `path`
/// (the server's), `call`, `name` and `arguments`. A network or MCP action
/// may name the `credential` it would carry (docs/policy-semantics.md §9):
/// it is then allowed only where a rule binding that credential allows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecideRequest {
    /// The AgentSandbox.
    pub sandbox: String,
    /// Its namespace.
    pub namespace: String,
    /// Executable opening the connection.
    #[serde(default)]
    pub binary: Option<String>,
    /// Destination host.
    #[serde(default)]
    pub host: Option<String>,
    /// Destination port.
    #[serde(default)]
    pub port: Option<u16>,
    /// `rest` (the default), `l4` or `websocket`.
    #[serde(default)]
    pub layer: Option<Layer>,
    /// HTTP method (rest).
    #[serde(default)]
    pub method: Option<String>,
    /// Request path (rest), or file path (filesystem).
    #[serde(default)]
    pub path: Option<String>,
    /// `read` or `write`: makes this a filesystem action.
    #[serde(default)]
    pub access: Option<Access>,
    /// `tool`, `resource` or `prompt`: makes this an MCP action.
    #[serde(default)]
    pub call: Option<McpKind>,
    /// The tool or prompt name, or the resource URI (MCP).
    #[serde(default)]
    pub name: Option<String>,
    /// The call's arguments (MCP; none when absent).
    #[serde(default)]
    pub arguments: Option<serde_json::Map<String, serde_json::Value>>,
    /// The sandbox credential the action carries (network and MCP).
    #[serde(default)]
    pub credential: Option<String>,
    /// The request's query parameters, decoded (docs/policy-semantics.md
    /// §10.1): a caller reads its query once and states what it read.
    #[serde(default)]
    pub query: Option<std::collections::BTreeMap<String, String>>,
    /// A WebSocket upgrade's offered subprotocol (layer `websocket`, §10.2).
    #[serde(default)]
    pub subprotocol: Option<String>,
    /// A WebSocket upgrade's `Origin`, lower-cased (layer `websocket`).
    #[serde(default)]
    pub origin: Option<String>,
}

impl DecideRequest {
    /// The network action the request describes (`rest` unless the layer
    /// says otherwise), or `None` without binary, host and port. Not yet
    /// checked for canonical form.
    pub fn network_action(&self) -> Option<NetworkAction> {
        let layer = self.layer.unwrap_or(Layer::Rest);
        let upgraded = layer == Layer::Websocket;
        // A subprotocol or origin on another layer stays on the action,
        // where the canonical check refuses it rather than dropping it.
        let upgrade =
            (upgraded || self.subprotocol.is_some() || self.origin.is_some()).then(|| Upgrade {
                subprotocol: self.subprotocol.clone(),
                origin: self.origin.clone(),
            });
        let method = match (&self.method, upgraded) {
            (Some(method), _) => method.clone(),
            (None, true) => "GET".to_string(),
            (None, false) => String::new(),
        };
        Some(NetworkAction {
            binary: self.binary.clone()?,
            host: self.host.clone()?,
            port: self.port?,
            layer,
            method,
            path: self.path.clone().unwrap_or_default(),
            credential: self.credential.clone(),
            query: self.query.clone().unwrap_or_default(),
            upgrade,
        })
    }

    /// The MCP action the request describes, or `None` without `call`,
    /// binary, host, port, path and name. Not yet checked for canonical form.
    pub fn mcp_action(&self) -> Option<McpAction> {
        Some(McpAction {
            binary: self.binary.clone()?,
            host: self.host.clone()?,
            port: self.port?,
            path: self.path.clone()?,
            kind: self.call?,
            name: self.name.clone()?,
            args: self.arguments.clone().unwrap_or_default(),
            sources: None,
            credential: self.credential.clone(),
        })
    }
}

/// The answer, in the shape every enforcement point states a refusal in
/// (docs/proxy.md, "Refusals": `decision`, `reason`, `code`, `rule`,
/// `finding`), with `revision` beside it. `allow` says what `decision`
/// says; it is kept for one release for the clients that read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecideResponse {
    /// `allow` or `deny`.
    pub decision: String,
    /// Whether the committed policy allows the action (the same as
    /// `decision`; deprecated, removed in the release after next).
    pub allow: bool,
    /// One line: why.
    pub reason: String,
    /// Why it was refused, as the proxy's refusals say it; none when
    /// allowed.
    #[serde(default)]
    pub code: Option<RefusalCode>,
    /// The rule that allowed (or denied) it, if one did.
    #[serde(default)]
    pub rule: Option<String>,
    /// For a deny: the unfixed static finding that predicted this action.
    #[serde(default)]
    pub finding: Option<FindingCitation>,
    /// The committed revision the answer comes from.
    #[serde(default)]
    pub revision: Option<u64>,
}

pub use agentgate_judgement::refusal::FindingCitation;

/// The first unfixed finding with a node (sink first, then the witness
/// paths) that has a capability covering the requested action. Network
/// actions go through the same regions and citation code as the data
/// plane's `findings.json` ([`finding_regions`], [`CompiledFindings`]).
pub fn cite_finding(
    request: &DecideRequest,
    findings: &[&Finding],
    graph: &Graph,
) -> Option<FindingCitation> {
    if let Some(access) = request.access {
        // File reads name their resource literally; no region to compile.
        return findings.iter().find_map(|finding| {
            finding
                .nodes_sink_first()
                .filter_map(|id| graph.node(id))
                .find(|node| {
                    node.capabilities.iter().any(|capability| {
                        access == Access::Read
                            && capability.channel == Channel::File
                            && capability.resource.is_some()
                            && capability.resource == request.path
                    })
                })
                .map(|node| FindingCitation {
                    id: finding.id.clone(),
                    sink: finding.sink.clone(),
                    node: node.id.clone(),
                    witness: finding.to_string(),
                })
        });
    }
    // A malformed request is denied for that reason, not by a finding. A
    // finding's regions hold calls as docs/policy-semantics.md §8.5 says,
    // as in the prover.
    let action = if request.call.is_some() {
        Action::Mcp(
            request
                .mcp_action()
                .filter(|t| t.check_canonical().is_ok())?,
        )
    } else {
        Action::Network(
            request
                .network_action()
                .filter(|a| a.check_canonical().is_ok())?,
        )
    };
    let regions: Vec<_> = findings.iter().map(|f| finding_regions(f, graph)).collect();
    CompiledFindings::compile(&regions)
        .ok()?
        .cite(&action)
        .cloned()
}

impl DecideResponse {
    /// A deny with no rule, for `code` and `reason`.
    pub fn deny(code: RefusalCode, reason: impl Into<String>) -> DecideResponse {
        DecideResponse::refused(&Refusal::new(code, reason))
    }

    /// The answer that states `refusal`.
    pub fn refused(refusal: &Refusal) -> DecideResponse {
        DecideResponse {
            decision: refusal.decision.to_string(),
            allow: false,
            reason: refusal.reason.clone(),
            code: Some(refusal.code),
            rule: refusal.rule.clone(),
            finding: refusal.finding.as_deref().cloned(),
            revision: None,
        }
    }

    /// The matcher's ruling on an action, in `reason`'s words: a deny
    /// by a rule's `denyRules` or by no rule allowing it.
    fn ruled(allow: bool, rule: Option<String>, reason: String) -> DecideResponse {
        let code = match (allow, &rule) {
            (true, _) => None,
            (false, Some(_)) => Some(RefusalCode::DeniedByRule),
            (false, None) => Some(RefusalCode::NoRule),
        };
        DecideResponse {
            decision: if allow { "allow" } else { "deny" }.to_string(),
            allow,
            reason,
            code,
            rule,
            finding: None,
            revision: None,
        }
    }
}

/// Decides `request` against a compiled policy. Non-canonical input is a
/// deny that says which field is wrong.
pub fn decide_action(policy: &CompiledPolicy, request: &DecideRequest) -> DecideResponse {
    if request.call.is_some() {
        if request.access.is_some() || request.layer.is_some() || request.method.is_some() {
            return DecideResponse::deny(
                RefusalCode::MalformedAction,
                "an MCP action (call) has no access, layer or method: it travels as POST to its path",
            );
        }
        let Some(call) = request.mcp_action() else {
            return DecideResponse::deny(
                RefusalCode::MalformedAction,
                "an MCP action needs binary, host, port, path and name",
            );
        };
        if let Err(e) = call.check_canonical() {
            return DecideResponse::deny(
                RefusalCode::MalformedAction,
                format!("not a canonical action: {e}"),
            );
        }
        let decision = decide_mcp(policy, &call);
        // A call a `mode: ask` entry holds waits for a person only at the
        // egress proxy; asked here, it is refused, saying so.
        let held = (!decision.allow)
            .then(|| {
                let caller = agentgate_policy::matcher::Caller::Binary(&call.binary);
                agentgate_policy::matcher::held_by_as(policy, caller, &call)
            })
            .flatten();
        let reason = match &held {
            Some(rule) => format!(
                "{call}: {}; rule {rule:?} holds it for a person's approval (mode: ask), which only the egress proxy asks for",
                decision.reason
            ),
            None => format!("{call}: {}", decision.reason),
        };
        let mut response = DecideResponse::ruled(decision.allow, decision.rule, reason);
        if held.is_some() {
            response.code = Some(RefusalCode::HeldCallUnavailable);
        }
        return response;
    }
    if request.name.is_some() || request.arguments.is_some() {
        return DecideResponse::deny(
            RefusalCode::MalformedAction,
            "name and arguments belong to an MCP action: give call too",
        );
    }
    if let Some(access) = request.access {
        if request.credential.is_some() {
            return DecideResponse::deny(
                RefusalCode::MalformedAction,
                "a filesystem action carries no credential: credentials travel on requests",
            );
        }
        let Some(path) = request.path.clone() else {
            return DecideResponse::deny(
                RefusalCode::MalformedAction,
                "a filesystem action needs a path",
            );
        };
        let action = FilesystemAction { access, path };
        if let Err(e) = action.check_canonical() {
            return DecideResponse::deny(
                RefusalCode::MalformedAction,
                format!("not a canonical action: {e}"),
            );
        }
        let allow = allows_filesystem(policy, &action);
        let reason = if allow {
            format!("{action} is under an allowed filesystem path")
        } else {
            format!("{action} is not under an allowed filesystem path")
        };
        return DecideResponse::ruled(allow, None, reason);
    }
    let Some(action) = request.network_action() else {
        return DecideResponse::deny(
            RefusalCode::MalformedAction,
            "a network action needs binary, host and port",
        );
    };
    if let Err(e) = action.check_canonical() {
        return DecideResponse::deny(
            RefusalCode::MalformedAction,
            format!("not a canonical action: {e}"),
        );
    }
    let decision = decide_network(policy, &action);
    DecideResponse::ruled(
        decision.allow,
        decision.rule,
        format!("{action}: {}", decision.reason),
    )
}

/// A compiled policy with the sandbox uid and revision it was compiled for.
type CompiledAt = (String, u64, Arc<CompiledPolicy>);

/// Compiled effective policies by sandbox, reused while the committed
/// revision is unchanged (compiling is far slower than matching).
#[derive(Default)]
pub struct CompiledPolicies {
    by_sandbox: RwLock<HashMap<(String, String), CompiledAt>>,
}

impl CompiledPolicies {
    /// The compiled form of `policy`, committed as revision `revision` of
    /// the sandbox with this `uid`.
    pub fn get(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        revision: u64,
        policy: &PolicyDocument,
    ) -> Result<Arc<CompiledPolicy>, String> {
        let key = (namespace.to_string(), name.to_string());
        if let Some((u, r, compiled)) = self
            .by_sandbox
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            && u == uid
            && *r == revision
        {
            return Ok(compiled.clone());
        }
        let compiled = Arc::new(
            compile(policy, Role::Sandbox, &Limits::default())
                .map_err(|reason| format!("the committed policy does not compile: {reason}"))?,
        );
        self.by_sandbox
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, (uid.to_string(), revision, compiled.clone()));
        Ok(compiled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled(text: &str) -> CompiledPolicy {
        let doc: PolicyDocument = serde_saphyr::from_str(text).unwrap();
        compile(&doc, Role::Sandbox, &Limits::default()).unwrap()
    }

    fn policy() -> CompiledPolicy {
        compiled(
            r#"
filesystem: {readOnly: [/app], readWrite: [/sandbox]}
network:
  - name: github-read
    binaries: [/usr/local/bin/agent]
    endpoints:
      - host: api.github.com
        ports: [443]
        protocol: rest
        rules:
          - {methods: [GET], path: "/repos/acme/**"}
        denyRules:
          - {methods: [GET], path: "/repos/acme/secret/**"}
"#,
        )
    }

    fn request(method: &str, path: &str) -> DecideRequest {
        DecideRequest {
            sandbox: "bot".into(),
            namespace: "agents".into(),
            binary: Some("/usr/local/bin/agent".into()),
            host: Some("api.github.com".into()),
            port: Some(443),
            layer: None,
            method: Some(method.into()),
            path: Some(path.into()),
            ..DecideRequest::default()
        }
    }

    /// Query parameters and upgrades are part of the action (§10): a
    /// caller states the parameters it read and the upgrade it makes.
    #[test]
    fn decides_queries_and_websocket_upgrades() {
        let p = compiled(
            r#"
network:
  - name: search
    binaries: [/usr/local/bin/agent]
    endpoints:
      - {host: api.github.com, ports: [443], protocol: rest, rules: [{methods: [GET], path: /search, query: {q: "*"}}]}
      - {host: api.github.com, ports: [443], protocol: websocket, rules: [{path: /ws, subprotocols: [chat]}]}
"#,
        );
        let mut search = request("GET", "/search");
        assert!(!decide_action(&p, &search).allow, "q is required");
        search.query = Some([("q".to_string(), "agents".to_string())].into());
        assert!(decide_action(&p, &search).allow);
        let mut upgrade = DecideRequest {
            layer: Some(Layer::Websocket),
            method: None,
            ..request("GET", "/ws")
        };
        assert!(!decide_action(&p, &upgrade).allow, "no subprotocol offered");
        upgrade.subprotocol = Some("chat".into());
        assert!(decide_action(&p, &upgrade).allow);
        // A subprotocol on a request is refused, not dropped.
        let mut odd = request("GET", "/search");
        odd.query = search.query.clone();
        odd.subprotocol = Some("chat".into());
        let refused = decide_action(&p, &odd);
        assert!(!refused.allow);
        assert!(refused.reason.contains("upgrade"), "{}", refused.reason);
    }

    #[test]
    fn allows_with_the_rule_and_denies_with_the_reason() {
        let p = policy();
        let yes = decide_action(&p, &request("GET", "/repos/acme/x"));
        assert!(yes.allow);
        assert_eq!(yes.rule.as_deref(), Some("github-read"));
        let no = decide_action(&p, &request("POST", "/repos/acme/x"));
        assert!(!no.allow);
        assert!(no.reason.contains("no rule allows it"), "{}", no.reason);
        let denied = decide_action(&p, &request("GET", "/repos/acme/secret/k"));
        assert!(!denied.allow);
        assert_eq!(denied.rule.as_deref(), Some("github-read"));
    }

    #[test]
    fn a_deny_is_stated_as_every_enforcement_point_states_a_refusal() {
        let p = policy();
        let as_json = |r: &DecideResponse| serde_json::to_value(r).expect("serialisable");
        let no_rule = decide_action(&p, &request("POST", "/repos/acme/x"));
        let by_rule = decide_action(&p, &request("GET", "/repos/acme/secret/k"));
        let malformed = decide_action(&p, &request("GET", "repos/acme/x"));
        for (answer, code) in [
            (&no_rule, RefusalCode::NoRule),
            (&by_rule, RefusalCode::DeniedByRule),
            (&malformed, RefusalCode::MalformedAction),
        ] {
            let mut refusal = Refusal::new(code, answer.reason.clone());
            refusal.rule = answer.rule.clone();
            let body = serde_json::to_value(&refusal).expect("serialisable");
            let answer = as_json(answer);
            // Every key of the proxy's 403 body, with the same value.
            for (key, value) in body.as_object().expect("an object") {
                assert_eq!(&answer[key], value, "{key} in {answer}");
            }
            assert_eq!(answer["allow"], false, "kept for one release");
        }
        let yes = as_json(&decide_action(&p, &request("GET", "/repos/acme/x")));
        assert_eq!(
            (&yes["decision"], &yes["allow"], &yes["code"]),
            (
                &serde_json::json!("allow"),
                &serde_json::json!(true),
                &serde_json::Value::Null
            )
        );
    }

    #[test]
    fn bad_input_fails_closed_with_the_field() {
        let p = policy();
        let no = decide_action(&p, &request("GET", "repos/acme/x"));
        assert!(!no.allow);
        assert!(
            no.reason.contains("not a canonical action"),
            "{}",
            no.reason
        );
        let mut partial = request("GET", "/x");
        partial.host = None;
        assert!(!decide_action(&p, &partial).allow);
    }

    #[test]
    fn a_credential_is_allowed_only_where_a_rule_binding_it_allows_the_action() {
        let p = compiled(
            r#"
network:
  - name: anonymous
    binaries: [/usr/local/bin/agent]
    endpoints:
      - {host: api.github.com, ports: [443], protocol: rest, rules: [{methods: [GET, POST], path: "/repos/**"}]}
  - name: token-reads
    binaries: [/usr/local/bin/agent]
    credentials: [github-token]
    endpoints:
      - {host: api.github.com, ports: [443], protocol: rest, rules: [{methods: [GET], path: "/repos/acme/**"}]}
"#,
        );
        let with = |method: &str, path: &str, credential: &str| DecideRequest {
            credential: Some(credential.into()),
            ..request(method, path)
        };
        let read = decide_action(&p, &with("GET", "/repos/acme/x", "github-token"));
        assert!(read.allow, "{}", read.reason);
        assert_eq!(read.rule.as_deref(), Some("token-reads"));
        // The anonymous rule allows the write bare, not with the token.
        assert!(decide_action(&p, &request("POST", "/repos/acme/x")).allow);
        let write = decide_action(&p, &with("POST", "/repos/acme/x", "github-token"));
        assert!(!write.allow);
        assert!(
            write.reason.contains("with credential github-token"),
            "{}",
            write.reason
        );
        assert!(!decide_action(&p, &with("GET", "/repos/acme/x", "other-token")).allow);
        let bad = decide_action(&p, &with("GET", "/repos/acme/x", "Not_A_Label"));
        assert!(
            bad.reason.contains("not a canonical action"),
            "{}",
            bad.reason
        );
        let mut file = with("", "/sandbox/x", "github-token");
        file.access = Some(Access::Read);
        assert!(!decide_action(&p, &file).allow);
    }

    #[test]
    fn filesystem_actions() {
        let p = policy();
        let mut r = request("", "/sandbox/out.txt");
        r.access = Some(Access::Write);
        assert!(decide_action(&p, &r).allow);
        r.path = Some("/app/main.py".into());
        assert!(!decide_action(&p, &r).allow);
        r.access = Some(Access::Read);
        assert!(decide_action(&p, &r).allow);
    }

    #[test]
    fn mcp_actions_are_judged_per_call() {
        let p = compiled(
            r#"
network:
  - name: bank
    binaries: [/usr/local/bin/agent]
    endpoints:
      - host: bank.internal
        ports: [443]
        protocol: mcp
        path: /mcp
        tools:
          - name: send_money
            arguments: {amount: {maximum: 100}}
"#,
        );
        let call = |amount: u32| DecideRequest {
            sandbox: "bot".into(),
            namespace: "agents".into(),
            binary: Some("/usr/local/bin/agent".into()),
            host: Some("bank.internal".into()),
            port: Some(443),
            path: Some("/mcp".into()),
            call: Some(McpKind::Tool),
            name: Some("send_money".into()),
            arguments: serde_json::json!({ "amount": amount }).as_object().cloned(),
            ..DecideRequest::default()
        };
        let yes = decide_action(&p, &call(100));
        assert!(yes.allow, "{}", yes.reason);
        assert_eq!(yes.rule.as_deref(), Some("bank"));
        let no = decide_action(&p, &call(101));
        assert!(!no.allow);
        assert!(
            no.reason
                .starts_with("tools/call send_money {\"amount\":101}"),
            "{}",
            no.reason
        );
        let mut mixed = call(1);
        mixed.method = Some("POST".into());
        assert!(!decide_action(&p, &mixed).allow);
        let mut nameless = call(1);
        nameless.name = None;
        assert!(decide_action(&p, &nameless).reason.contains("needs"));
        let mut stray = request("POST", "/mcp");
        stray.name = Some("send_money".into());
        assert!(!decide_action(&p, &stray).allow);
        // Unknown fields stay an error, so a typo cannot widen a question.
        let typo = serde_json::from_value::<DecideRequest>(serde_json::json!({
            "sandbox": "s", "namespace": "n", "call": "tool", "tool": "x"
        }));
        assert!(typo.is_err());
    }

    #[test]
    fn compiled_policies_follow_the_revision() {
        let cache = CompiledPolicies::default();
        let doc = PolicyDocument::default();
        let a = cache.get("ns", "bot", "u1", 1, &doc).unwrap();
        let b = cache.get("ns", "bot", "u1", 1, &doc).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let c = cache.get("ns", "bot", "u1", 2, &doc).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
    }
}
