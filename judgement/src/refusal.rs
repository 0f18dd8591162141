//! Refusals as every enforcement point states them (docs/proxy.md,
//! "Refusals"): the egress proxy's 403 body, the JSON-RPC error data of a
//! refused MCP call, the stdio wrapper's answers and the operator's
//! `/v1/decide` share this one shape, so an agent reads the same reason
//! wherever it was stopped.

use serde::{Deserialize, Serialize};

/// The static finding a runtime deny belongs to (docs/design.md §8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FindingCitation {
    /// Finding id, e.g. `AG-TRIFECTA`.
    pub id: String,
    /// The finding's sink.
    pub sink: String,
    /// The node whose capability the action exercises.
    pub node: String,
    /// The finding on one line, with both witnesses.
    pub witness: String,
}

/// Why a refusal happened, as a stable code for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalCode {
    /// No rule allows the action.
    NoRule,
    /// A `denyRules` entry matched (deny wins).
    DeniedByRule,
    /// There is no valid policy.
    PolicyUnavailable,
    /// The destination is not a canonical DNS name (IP literal, no SNI or Host).
    NotAHost,
    /// The request path is not canonical.
    NonCanonicalPath,
    /// The method is not an upper-case HTTP token.
    NonCanonicalMethod,
    /// The query cannot be read one way only (docs/policy-semantics.md
    /// §10.1): a malformed escape, bytes that are not UTF-8, a `;`, or a
    /// query on an MCP message.
    NonCanonicalQuery,
    /// A query parameter some rule names occurs more than once.
    RepeatedQueryParameter,
    /// The request's Host or the TLS SNI names another host than the connection.
    HostMismatch,
    /// Something other than HTTP/1.1 or HTTP/2 (WebSocket upgrades, raw bytes).
    UnsupportedProtocol,
    /// A tunnel opened under an older policy is no longer allowed.
    Revoked,
    /// An MCP message the specification does not name.
    UnsupportedMcpMethod,
    /// A body or message to an MCP server that is not JSON-RPC as MCP
    /// defines it, or a call whose name is not canonical.
    MalformedMcp,
    /// A request to the agent's model provider whose conversation could not
    /// be read (not the format its path names, or too long): its content
    /// would go unrecorded (docs/policy-semantics.md §8.3).
    MalformedModelRequest,
    /// A request with a body to the agent's model provider in no model API
    /// format the runtime reads, on a path the endpoint does not list in
    /// `unrecordedPaths`: its conversation would go unrecorded
    /// (docs/policy-semantics.md §8.3).
    UnreadModelRequest,
    /// A call of a trifecta finding's sink carrying a value of its secret
    /// after its untrusted input reached the model (docs/trifecta.md).
    RuntimeTrifecta,
    /// A held call (`mode: ask`) a person denied.
    HeldCallDenied,
    /// A held call no person decided in time.
    HeldCallExpired,
    /// A held call that could not be put to a person: no approval service,
    /// the service failed, or the call came in a batch.
    HeldCallUnavailable,
    /// A credential's placeholder outside its attach form, two credentials
    /// in one request, or a credential's secret value itself
    /// (docs/policy-semantics.md §9).
    CredentialMisuse,
    /// A request carrying a credential whose secret the proxy does not
    /// hold (its Secret or key is missing, or not valid for its attach
    /// form): never forwarded without it (docs/policy-semantics.md §9).
    CredentialUnavailable,
    /// An action put to `/v1/decide` that is not one the policy language
    /// names: a field missing, fields of two kinds of action, or a value
    /// not in canonical form (the reason says which).
    MalformedAction,
    /// A caller `/v1/decide` does not answer: not authenticated, not
    /// allowed to ask about the sandbox, or not checkable right now.
    CallerRefused,
}

impl RefusalCode {
    /// The code as logged and counted.
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalCode::NoRule => "no_rule",
            RefusalCode::DeniedByRule => "denied_by_rule",
            RefusalCode::PolicyUnavailable => "policy_unavailable",
            RefusalCode::NotAHost => "not_a_host",
            RefusalCode::NonCanonicalPath => "non_canonical_path",
            RefusalCode::NonCanonicalMethod => "non_canonical_method",
            RefusalCode::NonCanonicalQuery => "non_canonical_query",
            RefusalCode::RepeatedQueryParameter => "repeated_query_parameter",
            RefusalCode::HostMismatch => "host_mismatch",
            RefusalCode::UnsupportedProtocol => "unsupported_protocol",
            RefusalCode::Revoked => "revoked",
            RefusalCode::UnsupportedMcpMethod => "unsupported_mcp_method",
            RefusalCode::MalformedMcp => "malformed_mcp",
            RefusalCode::MalformedModelRequest => "malformed_model_request",
            RefusalCode::UnreadModelRequest => "unread_model_request",
            RefusalCode::RuntimeTrifecta => "runtime_trifecta",
            RefusalCode::HeldCallDenied => "held_call_denied",
            RefusalCode::HeldCallExpired => "held_call_expired",
            RefusalCode::HeldCallUnavailable => "held_call_unavailable",
            RefusalCode::CredentialMisuse => "credential_misuse",
            RefusalCode::CredentialUnavailable => "credential_unavailable",
            RefusalCode::MalformedAction => "malformed_action",
            RefusalCode::CallerRefused => "caller_refused",
        }
    }
}

/// A refusal, as the 403 body says it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    /// Always `deny`.
    pub decision: &'static str,
    /// One line in the words of `/v1/decide`.
    pub reason: String,
    /// Machine-readable reason.
    pub code: RefusalCode,
    /// The rule whose `denyRules` refused it, if one did.
    pub rule: Option<String>,
    /// The static trifecta finding that predicted this action, if any
    /// (boxed: refusals travel in `Result`s on the hot path).
    pub finding: Option<Box<FindingCitation>>,
}

impl Refusal {
    /// A refusal no rule decided.
    pub fn new(code: RefusalCode, reason: impl Into<String>) -> Refusal {
        Refusal {
            decision: "deny",
            reason: reason.into(),
            code,
            rule: None,
            finding: None,
        }
    }

    /// The JSON body of the 403.
    pub fn body(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| {
            r#"{"decision":"deny","reason":"refused","rule":null,"finding":null}"#.to_string()
        })
    }
}
