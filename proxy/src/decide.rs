//! The proxy's decisions, as pure functions over a policy snapshot: how a
//! connection or a request becomes an action of docs/policy-semantics.md §7, and
//! what a refusal says. No I/O, so the property tests can compare it with
//! the matcher directly; every verdict comes from `agentgate_policy::matcher`.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

use agentgate_judgement::findings::CompiledFindings;
use agentgate_policy::action::{
    Action, Layer, NetworkAction, Upgrade, check_host, check_method, check_origin,
    check_subprotocol, request_path,
};
use agentgate_policy::compile::CompiledPolicy;
use agentgate_policy::index::HostIndex;
use agentgate_policy::query::{self, QueryError};
use http::HeaderMap;

use crate::credentials::{Attachment, Carried, CredentialIssue, CredentialSet};
use agentgate_policy::matcher::{
    ConnectionDecision, ProviderPath, decide_connection_indexed, decide_network_indexed,
    has_model_provider, model_provider_path,
};

/// A compiled policy with its host index: what every decision reads.
#[derive(Debug)]
pub struct EnforcedPolicy {
    /// The compiled effective policy.
    pub compiled: CompiledPolicy,
    /// Endpoints by host, so a decision looks at a few endpoints, not every rule.
    pub index: HostIndex,
    /// True when some endpoint is a `modelProvider`: the session's content
    /// is recorded and `from` judged against it (§8.3); otherwise tool
    /// calls are judged with no record.
    pub records_sessions: bool,
    /// The query parameter names some entry names (§10.1): empty when no
    /// rule reads a query.
    pub query_names: BTreeSet<String>,
}

impl EnforcedPolicy {
    /// Indexes a compiled policy.
    pub fn new(compiled: CompiledPolicy) -> EnforcedPolicy {
        let index = HostIndex::build(&compiled);
        let records_sessions = has_model_provider(&compiled);
        let query_names = compiled.query_names();
        EnforcedPolicy {
            compiled,
            index,
            records_sessions,
            query_names,
        }
    }
}

/// What the proxy enforces right now.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Increases with every load attempt that changed the file's content.
    pub generation: u64,
    /// The compiled policy, or why there is none (then everything is refused).
    pub policy: Result<Arc<EnforcedPolicy>, String>,
    /// The sandbox's trifecta findings, to cite in refusals.
    pub findings: Arc<CompiledFindings>,
}

impl Snapshot {
    /// The state before any policy was read: refuse everything.
    pub fn unloaded() -> Snapshot {
        Snapshot {
            generation: 0,
            policy: Err("no policy has been loaded yet".to_string()),
            findings: Arc::default(),
        }
    }
}

pub use agentgate_judgement::refusal::{Refusal, RefusalCode};
pub use agentgate_policy::matcher::Binary;

/// How a connection proceeds when it is not refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admitted {
    /// Bytes pass through; the allowing `l4` rule.
    Tunnel(String),
    /// TLS is terminated and every request judged.
    Inspect,
}

/// Checks that a destination is a canonical DNS name (§7): lower-cased,
/// without a trailing dot, and not an IP literal or something a URL parser
/// would read as one (a numeric last label).
pub fn canonical_host(raw: &str) -> Result<String, Refusal> {
    let host = raw.trim_end_matches('.').to_ascii_lowercase();
    let bracketed = host.starts_with('[');
    let numeric_tld = host
        .rsplit('.')
        .next()
        .is_some_and(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()));
    if bracketed || host.parse::<IpAddr>().is_ok() || numeric_tld {
        return Err(Refusal::new(
            RefusalCode::NotAHost,
            format!(
                "{raw:?} is an IP address, not a host name: policies grant names, so it cannot be judged"
            ),
        ));
    }
    check_host(&host).map_err(|e| {
        Refusal::new(
            RefusalCode::NotAHost,
            format!("{raw:?} is not a canonical host name: {e}"),
        )
    })?;
    Ok(host)
}

/// The snapshot's policy, or the refusal every action gets without one.
pub(crate) fn policy_of(snapshot: &Snapshot) -> Result<&EnforcedPolicy, Refusal> {
    snapshot.policy.as_deref().map_err(|why| {
        Refusal::new(
            RefusalCode::PolicyUnavailable,
            format!("no valid policy is loaded, so everything is refused: {why}"),
        )
    })
}

/// Judges a new connection to (host, port) by `binary`. `host` must
/// already be canonical.
pub fn judge_connection(
    snapshot: &Snapshot,
    binary: &Binary,
    host: &str,
    port: u16,
) -> Result<Admitted, Refusal> {
    let policy = policy_of(snapshot)?;
    match decide_connection_indexed(&policy.compiled, &policy.index, binary.caller(), host, port) {
        ConnectionDecision::Tunnel { rule } => Ok(Admitted::Tunnel(rule)),
        ConnectionDecision::Inspect => Ok(Admitted::Inspect),
        ConnectionDecision::Refuse { .. } => {
            let action = NetworkAction {
                binary: binary.shown().to_string(),
                host: host.to_string(),
                port,
                layer: Layer::L4,
                method: String::new(),
                path: String::new(),
                credential: None,
                query: Default::default(),
                upgrade: None,
            };
            let mut refusal = Refusal::new(
                RefusalCode::NoRule,
                format!("{action}: no rule allows any request on this connection"),
            );
            refusal.finding = snapshot
                .findings
                .cite(&Action::Network(action.clone()))
                .cloned()
                .map(Box::new);
            Err(refusal)
        }
    }
}

/// Judges one HTTP request on a connection to (host, port) as a `rest`
/// action. `target` is the request target's path and query (origin form);
/// `credential` the credential the request carries (its placeholder in its
/// attach form, docs/policy-semantics.md §9.4), which only a rule that
/// binds it may allow. Returns the allowing rule.
pub fn judge_request(
    snapshot: &Snapshot,
    binary: &Binary,
    host: &str,
    port: u16,
    method: &str,
    target: &str,
    credential: Option<&str>,
) -> Result<String, Refusal> {
    judge_request_action(snapshot, binary, host, port, method, target, credential)
        .map(|(rule, _)| rule)
}

/// [`judge_request`], also returning the action the request was judged as
/// (for the questions asked of an allowed request: [`model_request`]).
/// A query is read as docs/policy-semantics.md §10.1 says; where the two
/// readings of `+` differ where a rule looks, both must be allowed, and
/// the action returned is the first reading's.
pub fn judge_request_action(
    snapshot: &Snapshot,
    binary: &Binary,
    host: &str,
    port: u16,
    method: &str,
    target: &str,
    credential: Option<&str>,
) -> Result<(String, NetworkAction), Refusal> {
    let head = Head {
        binary,
        host,
        port,
        method,
        target,
        credential,
    };
    judge_each(snapshot, &head, Layer::Rest, &[None])
}

/// What every judged request shares: who sends it, where, and its target.
struct Head<'a> {
    binary: &'a Binary,
    host: &'a str,
    port: u16,
    method: &'a str,
    target: &'a str,
    credential: Option<&'a str>,
}

/// Judges a request (layer `rest`) or an upgrade (layer `websocket`, one
/// action per element of `upgrades`) as docs/policy-semantics.md §7 and
/// §10 say: the path canonical, the query read in every reading that
/// differs where a rule looks, and every resulting action allowed.
/// Returns the allowing rule and the first action.
fn judge_each(
    snapshot: &Snapshot,
    head: &Head<'_>,
    layer: Layer,
    upgrades: &[Option<Upgrade>],
) -> Result<(String, NetworkAction), Refusal> {
    let Head {
        binary,
        host,
        port,
        method,
        target,
        credential,
    } = *head;
    let policy = policy_of(snapshot)?;
    let (target_path, raw_query) = match target.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (target, None),
    };
    let path = request_path(target_path).map_err(|e| {
        Refusal::new(
            RefusalCode::NonCanonicalPath,
            format!("{method} https://{host}:{port}{target_path}: not a canonical path ({e}), so it cannot be judged"),
        )
    })?;
    check_method(method).map_err(|e| {
        Refusal::new(
            RefusalCode::NonCanonicalMethod,
            format!("{method:?} is not a canonical method: {e}"),
        )
    })?;
    let readings =
        query::readings(raw_query.unwrap_or_default(), &policy.query_names).map_err(|e| {
            let code = match e {
                QueryError::NonCanonical(_) => RefusalCode::NonCanonicalQuery,
                QueryError::Repeated(_) => RefusalCode::RepeatedQueryParameter,
            };
            Refusal::new(
                code,
                format!("{method} https://{host}:{port}{target}: {e}, so it cannot be judged"),
            )
        })?;
    let several = readings.len() > 1;
    let mut judged = None;
    for (plus, query) in readings {
        for upgrade in upgrades {
            let action = NetworkAction {
                binary: binary.shown().to_string(),
                host: host.to_string(),
                port,
                layer,
                method: method.to_string(),
                path: path.clone(),
                credential: credential.map(str::to_string),
                query: query.clone(),
                upgrade: upgrade.clone(),
            };
            let decision =
                decide_network_indexed(&policy.compiled, &policy.index, binary.caller(), &action);
            if !decision.allow {
                let code = if decision.rule.is_some() {
                    RefusalCode::DeniedByRule
                } else {
                    RefusalCode::NoRule
                };
                let reading = if several {
                    format!(" (with {})", plus.as_str())
                } else {
                    String::new()
                };
                return Err(Refusal {
                    decision: "deny",
                    reason: format!("{action}{reading}: {}", decision.reason),
                    code,
                    rule: decision.rule,
                    finding: snapshot
                        .findings
                        .cite(&Action::Network(action.clone()))
                        .cloned()
                        .map(Box::new),
                });
            }
            judged.get_or_insert((decision.rule.unwrap_or_default(), action));
        }
    }
    judged.ok_or_else(|| {
        Refusal::new(
            RefusalCode::NoRule,
            format!("{method} https://{host}:{port}{target}: no reading of the request to judge"),
        )
    })
}

/// A WebSocket opening handshake as the proxy reads it (RFC 6455 §4.1,
/// docs/policy-semantics.md §10.2): the subprotocols offered and the origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebsocketHead {
    /// Each token of every `Sec-WebSocket-Protocol` header, in order.
    pub subprotocols: Vec<String>,
    /// The `Origin` header, lower-cased.
    pub origin: Option<String>,
}

impl WebsocketHead {
    /// The upgrade of each action the handshake is judged as: one per
    /// subprotocol offered, or one without when none is.
    pub fn upgrades(&self) -> Vec<Option<Upgrade>> {
        let origin = self.origin.clone();
        if self.subprotocols.is_empty() {
            return vec![Some(Upgrade {
                subprotocol: None,
                origin,
            })];
        }
        self.subprotocols
            .iter()
            .map(|s| {
                Some(Upgrade {
                    subprotocol: Some(s.clone()),
                    origin: origin.clone(),
                })
            })
            .collect()
    }
}

fn unsupported_upgrade(why: impl Into<String>) -> Refusal {
    Refusal::new(RefusalCode::UnsupportedProtocol, why)
}

/// Reads a request that asks for an upgrade: `Ok(None)` when it does not,
/// the handshake when it is a well-formed WebSocket opening (HTTP/1.1
/// `GET`, `Upgrade: websocket` and nothing else, `Connection: upgrade`,
/// version 13, a 16-byte key), and a refusal for any other upgrade or a
/// malformed one: servers disagree on what a malformed handshake is.
pub fn websocket_head(
    method: &http::Method,
    version: http::Version,
    headers: &HeaderMap,
) -> Result<Option<WebsocketHead>, Refusal> {
    use base64::Engine;
    let upgrade: Vec<&http::HeaderValue> = headers.get_all(http::header::UPGRADE).iter().collect();
    if upgrade.is_empty() {
        return Ok(None);
    }
    let names: Vec<String> = upgrade
        .iter()
        .flat_map(|v| v.to_str().unwrap_or("\u{0}").split(','))
        .map(|p| p.trim().to_ascii_lowercase())
        .filter(|p| !p.is_empty())
        .collect();
    if names != ["websocket"] {
        return Err(unsupported_upgrade(format!(
            "an upgrade to {names:?}: only a WebSocket upgrade is modelled (docs/policy-semantics.md §10.2)"
        )));
    }
    if method != http::Method::GET || version != http::Version::HTTP_11 {
        return Err(unsupported_upgrade(format!(
            "a WebSocket upgrade is an HTTP/1.1 GET, not {method} over {version:?}"
        )));
    }
    let connection_upgrades = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .flat_map(|v| v.to_str().unwrap_or_default().split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    if !connection_upgrades {
        return Err(unsupported_upgrade(
            "a WebSocket upgrade without Connection: upgrade",
        ));
    }
    let one = |name: &str| -> Result<Option<&str>, Refusal> {
        let mut values = headers.get_all(name).iter();
        let first = values.next();
        if values.next().is_some() {
            return Err(unsupported_upgrade(format!(
                "a WebSocket upgrade with two {name} headers"
            )));
        }
        first
            .map(|v| {
                v.to_str()
                    .map_err(|_| unsupported_upgrade(format!("{name} is not text")))
            })
            .transpose()
    };
    if one("sec-websocket-version")?.map(str::trim) != Some("13") {
        return Err(unsupported_upgrade(
            "a WebSocket upgrade must say Sec-WebSocket-Version: 13",
        ));
    }
    let key = one("sec-websocket-key")?.unwrap_or_default().trim();
    let decoded = base64::engine::general_purpose::STANDARD.decode(key);
    if decoded.map(|k| k.len()) != Ok(16) {
        return Err(unsupported_upgrade(
            "a WebSocket upgrade's Sec-WebSocket-Key must be 16 bytes in base64",
        ));
    }
    let mut subprotocols = Vec::new();
    for value in headers.get_all("sec-websocket-protocol") {
        let text = value
            .to_str()
            .map_err(|_| unsupported_upgrade("Sec-WebSocket-Protocol is not text"))?;
        for token in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            check_subprotocol(token).map_err(|e| unsupported_upgrade(e.to_string()))?;
            subprotocols.push(token.to_string());
        }
    }
    let origin = one("origin")?
        .map(|o| o.trim().to_ascii_lowercase())
        .filter(|o| !o.is_empty());
    if let Some(origin) = &origin {
        check_origin(origin).map_err(|e| unsupported_upgrade(e.to_string()))?;
    }
    Ok(Some(WebsocketHead {
        subprotocols,
        origin,
    }))
}

/// Judges a WebSocket opening handshake (docs/policy-semantics.md §10.2):
/// one `websocket` action per subprotocol offered (or one without), each
/// with the request's path, query and origin; the upgrade goes through
/// only if every one is allowed. Returns the allowing rule and the actions.
#[allow(clippy::too_many_arguments)]
pub fn judge_upgrade(
    snapshot: &Snapshot,
    binary: &Binary,
    host: &str,
    port: u16,
    target: &str,
    handshake: &WebsocketHead,
    credential: Option<&str>,
) -> Result<(String, Vec<NetworkAction>), Refusal> {
    let head = Head {
        binary,
        host,
        port,
        method: "GET",
        target,
        credential,
    };
    let upgrades = handshake.upgrades();
    let (rule, first) = judge_each(snapshot, &head, Layer::Websocket, &upgrades)?;
    let actions = upgrades
        .into_iter()
        .map(|upgrade| NetworkAction {
            upgrade,
            ..first.clone()
        })
        .collect();
    Ok((rule, actions))
}

/// Headers some frameworks read as the request's real method.
pub const METHOD_OVERRIDES: &[&str] = &[
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// Each method-override value a request carries, with its header's name
/// (a value that is not text reads as NUL, which no rule allows).
pub fn method_overrides(headers: &HeaderMap) -> impl Iterator<Item = (&'static str, &str)> {
    METHOD_OVERRIDES.iter().flat_map(move |name| {
        headers
            .get_all(*name)
            .iter()
            .map(move |value| (*name, value.to_str().unwrap_or("\u{0}").trim()))
    })
}

/// How a request's head was refused.
#[derive(Debug, Clone)]
pub enum Refused {
    /// By the policy (no rule allows it, a deny does, it cannot be
    /// judged), with or without a credential.
    Policy(Refusal),
    /// Allowed with its credential, whose secret the proxy does not hold.
    Credential(CredentialIssue),
}

/// A request the policy allows, with what to attach.
#[derive(Debug, Clone)]
pub struct JudgedRequest {
    /// The allowing rule.
    pub rule: String,
    /// The action it was judged as (its credential included).
    pub action: NetworkAction,
    /// The secret to put in the placeholder's place, when the request
    /// carries a credential.
    pub attachment: Option<Attachment>,
}

/// Judges a request's head as docs/policy-semantics.md §7 and §9.4 say:
/// the action carries the credential `carried` names (what
/// [`CredentialSet::detect`] found), so only a rule that binds it may
/// allow; each method override is judged too; and a request allowed with
/// a credential must have its secret at hand.
#[allow(clippy::too_many_arguments)]
pub fn judge_carrying(
    snapshot: &Snapshot,
    credentials: &CredentialSet,
    carried: Option<&Carried>,
    binary: &Binary,
    host: &str,
    port: u16,
    method: &str,
    target: &str,
    headers: &HeaderMap,
) -> Result<JudgedRequest, Refused> {
    let credential = carried.map(Carried::name);
    let (rule, action) =
        judge_request_action(snapshot, binary, host, port, method, target, credential)
            .map_err(Refused::Policy)?;
    // Servers that honour a method override run the overriding method:
    // it is judged as well, so an allowed POST cannot carry a DELETE.
    for (name, method) in method_overrides(headers) {
        if let Err(mut refusal) =
            judge_request(snapshot, binary, host, port, method, target, credential)
        {
            refusal.reason = format!("{name}: {}", refusal.reason);
            return Err(Refused::Policy(refusal));
        }
    }
    let attachment = carried
        .map(|carried| credentials.attachment(carried))
        .transpose()
        .map_err(Refused::Credential)?;
    Ok(JudgedRequest {
        rule,
        action,
        attachment,
    })
}

/// The model API format of a request the policy allowed (`action`, as
/// [`judge_request_action`] judged it), when the request carries the
/// agent's conversation with its model (docs/policy-semantics.md §8.3):
/// a request with a body (`has_body`, whatever its method) that a
/// `modelProvider` endpoint allows for this binary, on a path it does not
/// list in `unrecordedPaths`. Its body is then recorded; `Some(Err)` when
/// its path names no format the proxy reads
/// ([`crate::model_provider::ProviderApi::from_path`]), since its conversation
/// would go unrecorded. `None`: nothing to record.
pub fn model_request(
    snapshot: &Snapshot,
    binary: &Binary,
    action: &NetworkAction,
    has_body: bool,
) -> Option<Result<crate::model_provider::ProviderApi, Refusal>> {
    let policy = policy_of(snapshot).ok()?;
    if !has_body || !policy.records_sessions {
        return None;
    }
    match model_provider_path(&policy.compiled, &policy.index, binary.caller(), action)? {
        ProviderPath::Unrecorded => None,
        ProviderPath::Conversation => Some(
            crate::model_provider::ProviderApi::from_path(&action.path).ok_or_else(|| {
                Refusal::new(
                    RefusalCode::UnreadModelRequest,
                    format!(
                        "{} {} on the model provider {}: no model API agentgate reads ({}), so the conversation it may carry could not be recorded and it is not sent; a path that carries none belongs in the endpoint's unrecordedPaths (docs/policy-semantics.md §8.3)",
                        action.method,
                        action.path,
                        action.host,
                        crate::model_provider::ProviderApi::KNOWN,
                    ),
                )
            }),
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use agentgate_policy::compile::{Limits, Role, compile};
    use agentgate_policy::matcher::decide_network;
    use agentgate_policy::testing::{document, universe};
    use proptest::prelude::*;

    use super::*;

    fn snapshot(yaml: &str) -> Snapshot {
        let doc = agentgate_policy::load::load_document(yaml, &Limits::default()).unwrap();
        Snapshot {
            generation: 1,
            policy: Ok(Arc::new(EnforcedPolicy::new(
                compile(&doc.policy, Role::Sandbox, &Limits::default()).unwrap(),
            ))),
            findings: Arc::default(),
        }
    }

    const POLICY: &str = r#"
network:
  - name: gh
    binaries: [/usr/bin/curl]
    endpoints:
      - host: api.github.com
        ports: [443]
        protocol: rest
        rules: [{methods: [GET], path: "/repos/**"}]
        denyRules: [{methods: [GET], path: "/repos/acme/secret/**"}]
  - name: pypi
    endpoints: [{host: pypi.org, ports: [443]}]
"#;

    fn curl() -> Binary {
        Binary(Some("/usr/bin/curl".into()))
    }

    #[test]
    fn every_request_with_a_body_to_the_agents_model_provider_is_read_or_refused() {
        use crate::model_provider::ProviderApi;
        let s = snapshot(
            r#"
network:
  - name: model
    binaries: [/usr/bin/python3]
    endpoints:
      - {host: api.openai.com, ports: [443], protocol: rest, modelProvider: true, access: full,
         unrecordedPaths: [/v1/embeddings, "/v1/models/**"]}
  - name: others
    endpoints:
      - {host: api.openai.com, ports: [443], protocol: rest, access: full}
      - {host: api.anthropic.com, ports: [443], protocol: rest, access: full}
"#,
        );
        let python = Binary(Some("/usr/bin/python3".into()));
        let ask = |b: &Binary, host: &str, method: &str, path: &str| {
            let (_, action) = judge_request_action(&s, b, host, 443, method, path, None).ok()?;
            // Every request here has a body but GET's.
            model_request(&s, b, &action, method != "GET")
        };
        assert_eq!(
            ask(&python, "api.openai.com", "POST", "/v1/chat/completions"),
            Some(Ok(ProviderApi::ChatCompletions))
        );
        assert_eq!(
            ask(&python, "api.openai.com", "POST", "/v1/responses"),
            Some(Ok(ProviderApi::Responses))
        );
        assert_eq!(
            ask(
                &python,
                "api.openai.com",
                "POST",
                "/v1beta/models/gemini-2.0-flash:generateContent"
            ),
            Some(Ok(ProviderApi::GeminiGenerateContent))
        );
        // A body the proxy cannot read as a model API: refused, unless the
        // endpoint says its path carries no conversation.
        for (method, path) in [
            ("POST", "/v1/files"),
            ("PUT", "/v1/chat"),
            ("POST", "/api/other"),
        ] {
            let refused = ask(&python, "api.openai.com", method, path)
                .expect("a provider request")
                .expect_err("unread");
            assert_eq!(refused.code, RefusalCode::UnreadModelRequest);
            assert!(
                refused.reason.contains("unrecordedPaths"),
                "{}",
                refused.reason
            );
        }
        assert_eq!(
            ask(&python, "api.openai.com", "POST", "/v1/embeddings"),
            None
        );
        assert_eq!(
            ask(&python, "api.openai.com", "POST", "/v1/models/x/y"),
            None
        );
        // Not the conversation: no body, another binary (its content is no
        // one's `user`), another host. A GET with a body is read too.
        assert_eq!(
            ask(&python, "api.openai.com", "GET", "/v1/chat/completions"),
            None
        );
        let (_, get) =
            judge_request_action(&s, &python, "api.openai.com", 443, "GET", "/v1/x", None)
                .expect("allowed");
        assert_eq!(
            model_request(&s, &python, &get, true).map(|r| r.map_err(|e| e.code)),
            Some(Err(RefusalCode::UnreadModelRequest))
        );
        assert_eq!(
            ask(&curl(), "api.openai.com", "POST", "/v1/chat/completions"),
            None
        );
        assert_eq!(
            ask(&python, "api.anthropic.com", "POST", "/v1/messages"),
            None
        );
        assert!(s.policy.as_ref().unwrap().records_sessions);
        assert!(!snapshot(POLICY).policy.as_ref().unwrap().records_sessions);
    }

    #[test]
    fn hosts_must_be_names() {
        assert_eq!(canonical_host("API.GitHub.com.").unwrap(), "api.github.com");
        for bad in [
            "127.0.0.1",
            "[::1]",
            "::1",
            "1.2.3",
            "",
            "a..b",
            "ex ample.com",
            "x.123",
        ] {
            let r = canonical_host(bad).unwrap_err();
            assert_eq!(r.code, RefusalCode::NotAHost, "{bad}");
        }
    }

    #[test]
    fn connections_tunnel_inspect_or_refuse() {
        let s = snapshot(POLICY);
        assert_eq!(
            judge_connection(&s, &curl(), "pypi.org", 443),
            Ok(Admitted::Tunnel("pypi".into()))
        );
        assert_eq!(
            judge_connection(&s, &curl(), "api.github.com", 443),
            Ok(Admitted::Inspect)
        );
        let refused = judge_connection(&s, &curl(), "evil.example", 443).unwrap_err();
        assert_eq!(refused.code, RefusalCode::NoRule);
        assert!(
            refused
                .reason
                .starts_with("connect evil.example:443 by /usr/bin/curl"),
            "{}",
            refused.reason
        );
        // Unknown binaries get only binary-less rules.
        let unknown = Binary(None);
        assert!(judge_connection(&s, &unknown, "api.github.com", 443).is_err());
        assert!(judge_connection(&s, &unknown, "pypi.org", 443).is_ok());
    }

    #[test]
    fn requests_say_why_in_the_words_of_decide() {
        let s = snapshot(POLICY);
        assert_eq!(
            judge_request(&s, &curl(), "api.github.com", 443, "GET", "/repos/x", None).unwrap(),
            "gh"
        );
        // GET covers HEAD.
        assert!(
            judge_request(&s, &curl(), "api.github.com", 443, "HEAD", "/repos/x", None).is_ok()
        );
        let no = judge_request(&s, &curl(), "api.github.com", 443, "POST", "/repos/x", None)
            .unwrap_err();
        assert_eq!(
            no.reason,
            "POST https://api.github.com:443/repos/x by /usr/bin/curl (layer rest): no rule allows it"
        );
        assert_eq!(no.rule, None);
        let denied = judge_request(
            &s,
            &curl(),
            "api.github.com",
            443,
            "GET",
            "/repos/acme/secret/k",
            None,
        )
        .unwrap_err();
        assert_eq!(
            (denied.code, denied.rule.as_deref()),
            (RefusalCode::DeniedByRule, Some("gh"))
        );
        let body: serde_json::Value = serde_json::from_str(&denied.body()).unwrap();
        assert_eq!(body["decision"], "deny");
        assert_eq!(body["finding"], serde_json::Value::Null);
        // An escape that would smuggle the denied path past the glob.
        let smuggled = judge_request(
            &s,
            &curl(),
            "api.github.com",
            443,
            "GET",
            "/repos/acme/%73ecret/k",
            None,
        )
        .unwrap_err();
        assert_eq!(smuggled.code, RefusalCode::DeniedByRule);
        let dotted = judge_request(
            &s,
            &curl(),
            "api.github.com",
            443,
            "GET",
            "/repos/x/%2e%2e/acme",
            None,
        )
        .unwrap_err();
        assert_eq!(dotted.code, RefusalCode::NonCanonicalPath);
        let lower =
            judge_request(&s, &curl(), "api.github.com", 443, "get", "/repos/x", None).unwrap_err();
        assert_eq!(lower.code, RefusalCode::NonCanonicalMethod);
    }

    #[test]
    fn no_policy_refuses_everything() {
        let s = Snapshot::unloaded();
        assert_eq!(
            judge_connection(&s, &curl(), "pypi.org", 443)
                .unwrap_err()
                .code,
            RefusalCode::PolicyUnavailable
        );
        assert_eq!(
            judge_request(&s, &curl(), "pypi.org", 443, "GET", "/", None)
                .unwrap_err()
                .code,
            RefusalCode::PolicyUnavailable
        );
    }

    /// The differential test's credentials: each name of
    /// [`agentgate_policy::testing::CREDENTIALS`] in another attach form,
    /// with its placeholder and secret.
    fn credential_set() -> CredentialSet {
        use agentgate_policy::testing::CREDENTIALS;
        let attach = [
            serde_json::json!({"header": {"name": "Authorization", "format": "Bearer {}"}}),
            serde_json::json!({"basic": {"username": "oauth2"}}),
            serde_json::json!({"query": {"name": "token"}}),
            serde_json::json!({"header": {"name": "X-Key"}}),
        ];
        let declarations: Vec<serde_json::Value> = CREDENTIALS
            .iter()
            .zip(attach)
            .map(|(name, attach)| {
                serde_json::json!({"name": name, "secretRef": {"name": name, "key": "k"},
                    "placeholder": {"env": "T"}, "attach": attach})
            })
            .collect();
        let placeholders: Vec<(&str, String)> = CREDENTIALS
            .iter()
            .map(|c| (*c, placeholder_of(c)))
            .collect();
        let secrets: Vec<(&str, Vec<u8>)> = CREDENTIALS
            .iter()
            .map(|c| (*c, secret_of(c).into_bytes()))
            .collect();
        let placeholders: Vec<(&str, &str)> =
            placeholders.iter().map(|(n, p)| (*n, p.as_str())).collect();
        let secrets: Vec<(&str, &[u8])> = secrets.iter().map(|(n, s)| (*n, s.as_slice())).collect();
        crate::credentials::testing_set(
            &serde_json::Value::Array(declarations),
            &placeholders,
            &secrets,
        )
    }

    fn placeholder_of(credential: &str) -> String {
        let i = agentgate_policy::testing::CREDENTIALS
            .iter()
            .position(|c| *c == credential)
            .unwrap();
        format!(
            "{}{:032x}",
            agentgate_policy::credentials::PLACEHOLDER_PREFIX,
            0xabc0 + i
        )
    }

    fn secret_of(credential: &str) -> String {
        format!("s3cret-of-{credential}-0123")
    }

    /// Where a request puts its credential's placeholder.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Placement {
        /// In the credential's attach form.
        InForm,
        /// In a header of its own.
        OtherHeader,
        /// In the query (another parameter, or the attach one twice).
        Query,
        /// In the path.
        Path,
    }

    /// A request head for `a`, carrying its credential's placeholder as
    /// `placement` says.
    fn head_of(a: &NetworkAction, placement: Placement) -> (http::Uri, HeaderMap) {
        use base64::Engine;
        let mut headers = HeaderMap::new();
        let mut target = a.path.clone();
        let Some(credential) = &a.credential else {
            return (target.parse().unwrap(), headers);
        };
        let p = placeholder_of(credential);
        let mut put = |name: &'static str, value: String| {
            headers.append(name, http::HeaderValue::from_str(&value).unwrap());
        };
        match (placement, credential.as_str()) {
            (Placement::InForm, "github") => put("authorization", format!("Bearer {p}")),
            (Placement::InForm, "gitlab") => put(
                "authorization",
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(format!("oauth2:{p}"))
                ),
            ),
            (Placement::InForm, "npm-token") => target = format!("{target}?a=1&token={p}"),
            (Placement::InForm, _) => put("x-key", p),
            (Placement::OtherHeader, _) => put("x-forwarded-token", p),
            (Placement::Query, "npm-token") => target = format!("{target}?token={p}&token={p}"),
            (Placement::Query, _) => target = format!("{target}?q={p}"),
            (Placement::Path, _) => target = format!("/x/{p}{target}"),
        }
        (target.parse().unwrap(), headers)
    }

    /// Whether a scanned body holding `content` is refused (polled by hand:
    /// every frame is ready).
    fn body_refused(set: &Arc<CredentialSet>, content: String) -> bool {
        use http_body_util::BodyExt;
        use hyper::body::Body as _;
        let scan =
            crate::credentials::BodyScan::new(set.clone(), "POST x".into(), Box::new(|_, _| {}));
        let inner = http_body_util::Full::new(bytes::Bytes::from(content))
            .map_err(|never| -> crate::credentials::BodyError { match never {} })
            .boxed();
        let mut body = crate::credentials::Scanned::refusing(inner, scan.clone());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        while let std::task::Poll::Ready(Some(frame)) =
            std::pin::Pin::new(&mut body).poll_frame(&mut cx)
        {
            if frame.is_err() {
                break;
            }
        }
        scan.hit()
            .is_some_and(|r| r.code == RefusalCode::CredentialMisuse)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// On random policies binding credentials (MaximumPolicy globs, so
        /// `l4` bindings too) and every request of the small alphabet, with
        /// and without each credential's placeholder in its attach form:
        /// the proxy forwards with the secret attached exactly when the
        /// matcher allows the action carrying the credential
        /// (docs/policy-semantics.md §9.2), and misuse (the placeholder in
        /// another header, the query, the path or the body) is refused
        /// whatever the policy says.
        #[test]
        fn proxy_credential_decisions_equal_the_matcher(doc in agentgate_policy::testing::credentialed_document()) {
            use agentgate_policy::testing::{CREDENTIALS, credentialed_universe};
            let compiled = compile(&doc, Role::Maximum, &Limits::default()).unwrap();
            let s = Snapshot {
                generation: 1,
                policy: Ok(Arc::new(EnforcedPolicy::new(compiled.clone()))),
                findings: Arc::default(),
            };
            let set = Arc::new(credential_set());
            for action in credentialed_universe() {
                let agentgate_policy::action::Action::Network(a) = action else { continue };
                let binary = Binary(Some(a.binary.clone()));
                let bare = NetworkAction { credential: None, ..a.clone() };
                let connection = judge_connection(&s, &binary, &a.host, a.port);
                if let Ok(Admitted::Tunnel(_)) = connection {
                    // Never read: sound only where every action on it is
                    // allowed bare; a placeholder there passes as it is,
                    // and no secret travels (§9.4).
                    prop_assert!(decide_network(&compiled, &bare).allow, "tunnelled {}", a);
                    continue;
                }
                if a.layer == Layer::L4 {
                    // Inspected or refused: each request is judged below.
                    continue;
                }
                let matcher = decide_network(&compiled, a).allow;
                let (uri, headers) = head_of(a, Placement::InForm);
                let carried = set.detect(&uri, &headers).unwrap();
                prop_assert_eq!(carried.as_ref().map(Carried::name), a.credential.as_deref());
                let proxy = connection.is_ok() && match judge_carrying(
                    &s, &set, carried.as_ref(), &binary, &a.host, a.port, &a.method, uri.path(), &headers,
                ) {
                    Ok(judged) => {
                        prop_assert_eq!(&judged.action, a);
                        if let Some(attachment) = judged.attachment {
                            let (mut uri, mut headers) = (uri.clone(), headers.clone());
                            attachment.apply(&mut headers, &mut uri).unwrap();
                            let mut sent = uri.to_string();
                            for (n, v) in &headers {
                                sent.push_str(&format!("\n{n}: {}", String::from_utf8_lossy(v.as_bytes())));
                            }
                            let credential = a.credential.as_deref().unwrap();
                            prop_assert!(!sent.contains(&placeholder_of(credential)), "{}", a);
                            let secret = secret_of(credential);
                            let shown = if credential == "gitlab" {
                                use base64::Engine;
                                base64::engine::general_purpose::STANDARD.encode(format!("oauth2:{secret}"))
                            } else {
                                secret
                            };
                            prop_assert!(sent.contains(&shown), "{} sent {}", a, sent);
                        }
                        true
                    }
                    Err(Refused::Policy(_)) => false,
                    Err(Refused::Credential(issue)) => {
                        return Err(TestCaseError::fail(format!("{a}: {issue:?}")));
                    }
                };
                prop_assert_eq!(proxy, matcher, "{}", a);
                if a.credential.is_some() {
                    for placement in [Placement::OtherHeader, Placement::Query, Placement::Path] {
                        let (uri, headers) = head_of(a, placement);
                        let issue = set.detect(&uri, &headers).unwrap_err();
                        prop_assert_eq!(issue.code, RefusalCode::CredentialMisuse, "{} {:?}", a, placement);
                    }
                }
            }
            for credential in CREDENTIALS {
                let leak = format!("{{\"note\": \"{}\"}}", placeholder_of(credential));
                prop_assert!(body_refused(&set, leak), "{}", credential);
                prop_assert!(body_refused(&set, format!("x={}", secret_of(credential))), "{}", credential);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        /// The proxy's verdict on every request is the matcher's, on random
        /// policies over the whole enumerated action space; and a tunnelled
        /// connection only carries actions the matcher allows.
        #[test]
        fn proxy_decisions_equal_the_matcher(doc in document()) {
            let compiled = compile(&doc, Role::Maximum, &Limits::default()).unwrap();
            let s = Snapshot {
                generation: 1,
                policy: Ok(Arc::new(EnforcedPolicy::new(compiled.clone()))),
                findings: Arc::default(),
            };
            for action in universe() {
                let agentgate_policy::action::Action::Network(a) = action else { continue };
                let binary = Binary(Some(a.binary.clone()));
                let matcher = decide_network(&compiled, a).allow;
                match a.layer {
                    Layer::Rest => {
                        let proxy = judge_connection(&s, &binary, &a.host, a.port).is_ok()
                            && judge_request(&s, &binary, &a.host, a.port, &a.method, &a.path, None).is_ok();
                        prop_assert_eq!(proxy, matcher, "{}", a);
                    }
                    // The alphabet has no upgrades: the websocket property below.
                    Layer::Websocket => {}
                    Layer::L4 => {
                        // Inspecting an l4-allowed connection is also sound:
                        // each request is then judged as above.
                        let tunnel = matches!(judge_connection(&s, &binary, &a.host, a.port), Ok(Admitted::Tunnel(_)));
                        prop_assert!(!tunnel || matcher, "tunnelled {}", a);
                    }
                }
            }
        }

        /// Query matchers (§10.1): the proxy reads each request's target
        /// into the query the matcher judges, and agrees with it on every
        /// combination of parameter values.
        #[test]
        fn proxy_query_decisions_equal_the_matcher(doc in agentgate_policy::testing::query_document()) {
            let compiled = compile(&doc, Role::Maximum, &Limits::default()).unwrap();
            let s = Snapshot {
                generation: 1,
                policy: Ok(Arc::new(EnforcedPolicy::new(compiled.clone()))),
                findings: Arc::default(),
            };
            for action in agentgate_policy::testing::query_universe() {
                let agentgate_policy::action::Action::Network(a) = action else { continue };
                if a.layer != Layer::Rest {
                    continue;
                }
                let binary = Binary(Some(a.binary.clone()));
                let matcher = decide_network(&compiled, a).allow;
                let target = target_of(a);
                let judged = judge_connection(&s, &binary, &a.host, a.port).is_ok()
                    && judge_request(&s, &binary, &a.host, a.port, &a.method, &target, None).is_ok();
                prop_assert_eq!(judged, matcher, "{} as {}", a, target);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        /// WebSocket upgrades (§10.2): the handshake the proxy reads is
        /// judged as the matcher judges the upgrade's action, on every
        /// upgrade of the alphabet.
        #[test]
        fn proxy_upgrade_decisions_equal_the_matcher(doc in agentgate_policy::testing::websocket_document()) {
            let compiled = compile(&doc, Role::Maximum, &Limits::default()).unwrap();
            let s = Snapshot {
                generation: 1,
                policy: Ok(Arc::new(EnforcedPolicy::new(compiled.clone()))),
                findings: Arc::default(),
            };
            for action in agentgate_policy::testing::websocket_universe() {
                let agentgate_policy::action::Action::Network(a) = action else { continue };
                if a.layer != Layer::Websocket {
                    continue;
                }
                let upgrade = a.upgrade.clone().unwrap_or_default();
                let mut headers = HeaderMap::new();
                headers.insert("upgrade", "websocket".parse().unwrap());
                headers.insert("connection", "Upgrade".parse().unwrap());
                headers.insert("sec-websocket-version", "13".parse().unwrap());
                headers.insert("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==".parse().unwrap());
                if let Some(p) = &upgrade.subprotocol {
                    headers.insert("sec-websocket-protocol", p.parse().unwrap());
                }
                if let Some(o) = &upgrade.origin {
                    headers.insert("origin", o.to_uppercase().parse().unwrap());
                }
                let handshake = websocket_head(&http::Method::GET, http::Version::HTTP_11, &headers)
                    .unwrap()
                    .unwrap();
                let target = target_of(a);
                let binary = Binary(Some(a.binary.clone()));
                let matcher = decide_network(&compiled, a).allow;
                let judged = judge_connection(&s, &binary, &a.host, a.port).is_ok()
                    && judge_upgrade(&s, &binary, &a.host, a.port, &target, &handshake, None).is_ok();
                prop_assert_eq!(judged, matcher, "{} as {}", a, target);
            }
        }
    }

    /// The request target an action's path and query are read from.
    fn target_of(a: &NetworkAction) -> String {
        if a.query.is_empty() {
            a.path.clone()
        } else {
            format!(
                "{}?{}",
                a.path,
                agentgate_policy::query::to_target(&a.query)
            )
        }
    }

    /// A handshake is read as a WebSocket upgrade only when it is a
    /// well-formed one; each offered subprotocol is judged (§10.2).
    #[test]
    fn a_websocket_handshake_is_read_strictly_and_every_offer_judged() {
        let mut headers = HeaderMap::new();
        assert_eq!(
            websocket_head(&http::Method::GET, http::Version::HTTP_11, &headers).unwrap(),
            None
        );
        headers.insert("upgrade", "websocket".parse().unwrap());
        headers.insert("connection", "keep-alive, Upgrade".parse().unwrap());
        headers.insert("sec-websocket-version", "13".parse().unwrap());
        headers.insert(
            "sec-websocket-key",
            "dGhlIHNhbXBsZSBub25jZQ==".parse().unwrap(),
        );
        headers.append("sec-websocket-protocol", "chat, v2".parse().unwrap());
        headers.append("sec-websocket-protocol", "v3".parse().unwrap());
        let read = |h: &HeaderMap, m: http::Method| websocket_head(&m, http::Version::HTTP_11, h);
        let head = read(&headers, http::Method::GET).unwrap().unwrap();
        assert_eq!(head.subprotocols, ["chat", "v2", "v3"]);
        assert_eq!(head.upgrades().len(), 3);
        assert!(read(&headers, http::Method::POST).is_err());
        let mut h2c = headers.clone();
        h2c.insert("upgrade", "h2c".parse().unwrap());
        assert_eq!(
            read(&h2c, http::Method::GET).unwrap_err().code,
            RefusalCode::UnsupportedProtocol
        );
        let mut two = headers.clone();
        two.insert("upgrade", "websocket, h2c".parse().unwrap());
        assert!(read(&two, http::Method::GET).is_err());
        let mut short_key = headers.clone();
        short_key.insert("sec-websocket-key", "c2hvcnQ=".parse().unwrap());
        assert!(read(&short_key, http::Method::GET).is_err());
        let mut bad_token = headers.clone();
        bad_token.insert("sec-websocket-protocol", "a b".parse().unwrap());
        assert!(read(&bad_token, http::Method::GET).is_err());
        let s = snapshot(
            r#"
network:
  - name: realtime
    endpoints:
      - host: rt.example.com
        port: 443
        protocol: websocket
        rules: [{path: /ws, subprotocols: [chat, v2]}]
"#,
        );
        let refused =
            judge_upgrade(&s, &curl(), "rt.example.com", 443, "/ws", &head, None).unwrap_err();
        assert!(refused.reason.contains("offering v3"), "{}", refused.reason);
        let two_offers = WebsocketHead {
            subprotocols: vec!["chat".into(), "v2".into()],
            origin: None,
        };
        let (_, actions) =
            judge_upgrade(&s, &curl(), "rt.example.com", 443, "/ws", &two_offers, None).unwrap();
        assert_eq!(actions.len(), 2);
        // A REST grant of the same path never allows the upgrade.
        let rest = snapshot(
            "network:\n  - name: r\n    endpoints: [{host: rt.example.com, port: 443, protocol: rest, access: full}]\n",
        );
        assert_eq!(
            judge_upgrade(
                &rest,
                &curl(),
                "rt.example.com",
                443,
                "/ws",
                &two_offers,
                None
            )
            .unwrap_err()
            .code,
            RefusalCode::NoRule
        );
    }

    /// A query where readers disagree is judged in every reading, or
    /// refused (§10.1).
    #[test]
    fn a_query_is_judged_as_every_server_could_read_it() {
        let s = snapshot(
            r#"
network:
  - name: search
    endpoints:
      - host: search.example
        port: 443
        protocol: rest
        rules: [{methods: [GET], path: /s, query: {q: "a b", page: {glob: "*", optional: true}}}]
"#,
        );
        let judge =
            |target: &str| judge_request(&s, &curl(), "search.example", 443, "GET", target, None);
        assert!(judge("/s?q=a%20b").is_ok());
        assert!(
            judge("/s?q=a%20b&other=x+y").is_ok(),
            "a '+' where no rule looks"
        );
        // '+' is a space to one server and itself to another.
        let plus = judge("/s?q=a+b").unwrap_err();
        assert_eq!(plus.code, RefusalCode::NoRule);
        assert!(
            plus.reason.contains("'+' read as itself"),
            "{}",
            plus.reason
        );
        let repeated = judge("/s?q=a%20b&page=1&page=2").unwrap_err();
        assert_eq!(repeated.code, RefusalCode::RepeatedQueryParameter);
        for bad in ["/s?q=a%20b&page=%zz", "/s?q=a%20b;page=1", "/s?q=%ff"] {
            assert_eq!(
                judge(bad).unwrap_err().code,
                RefusalCode::NonCanonicalQuery,
                "{bad}"
            );
        }
        assert_eq!(judge("/s").unwrap_err().code, RefusalCode::NoRule);
    }
}
