//! Held calls on the wire (docs/proxy.md, "Held calls"): what an
//! enforcement point sends the approval service (`POST /v1/hold` of the
//! operator's webhook server) when a `mode: ask` entry holds a call, and
//! what it reads back. One definition, so the proxy and the operator read
//! the same bytes the same way.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::mcp_messages::HeldCall;
use crate::refusal::{Refusal, RefusalCode};
use agentgate_policy::action::McpAction;

/// The longest a call is held: the approval service refuses a longer
/// timeout, since the agent's MCP client is waiting on it.
pub const MAX_HOLD_SECONDS: u64 = 3600;

/// Where a held call goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HoldServer {
    /// The MCP server's canonical host.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// Its path.
    pub path: String,
}

/// The question put to the approval service: this call, held by this rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HoldRequest {
    /// The JSON-RPC method: `tools/call`.
    pub kind: String,
    /// The tool's name.
    pub tool: String,
    /// Its arguments, as the agent sent them (read one way only).
    pub arguments: Map<String, Value>,
    /// Where it goes.
    pub server: HoldServer,
    /// The binary that sent it, as refusals show it.
    pub binary: String,
    /// The rule whose `mode: ask` entry holds it.
    pub rule: String,
    /// Why no allow entry let it through.
    pub reason: String,
    /// How long the enforcement point waits for a person.
    pub timeout_seconds: u64,
}

impl HoldRequest {
    /// The request for a held call, waiting `timeout_seconds`.
    pub fn of(held: &HeldCall, timeout_seconds: u64) -> HoldRequest {
        let action: &McpAction = &held.call.action;
        HoldRequest {
            kind: action.kind.method().to_string(),
            tool: action.name.clone(),
            arguments: action.args.clone(),
            server: HoldServer {
                host: action.host.clone(),
                port: action.port,
                path: action.path.clone(),
            },
            binary: action.binary.clone(),
            rule: held.held.rule.clone(),
            reason: held.held.reason.clone(),
            timeout_seconds,
        }
    }
}

/// What a person decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HoldDecision {
    /// Let the call through, once.
    Approved,
    /// Refuse it.
    Denied,
    /// Nobody decided in time: refused.
    Expired,
}

/// The approval service's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HoldAnswer {
    /// The decision.
    pub decision: HoldDecision,
    /// The HeldCall object that recorded it (`kubectl get heldcall NAME`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_call: Option<String>,
    /// Who decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// Their reason, or the service's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl HoldAnswer {
    /// `Ok` when the call may go, else the refusal the agent reads.
    pub fn verdict(&self, held: &HeldCall) -> Result<(), Refusal> {
        let call = &held.call;
        let record = self
            .held_call
            .as_deref()
            .map(|name| format!(" (heldcall {name})"))
            .unwrap_or_default();
        let by = self.decided_by.as_deref().unwrap_or("a person");
        let why = self
            .message
            .as_deref()
            .filter(|m| !m.is_empty())
            .map(|m| format!(": {m}"))
            .unwrap_or_default();
        let refusal = |code, reason: String| {
            let mut refusal = Refusal::new(code, reason);
            refusal.rule = Some(held.held.rule.clone());
            Err(refusal)
        };
        match self.decision {
            HoldDecision::Approved => Ok(()),
            HoldDecision::Denied => refusal(
                RefusalCode::HeldCallDenied,
                format!(
                    "{call}: held for approval by rule {:?} and denied by {by}{record}{why}",
                    held.held.rule
                ),
            ),
            HoldDecision::Expired => refusal(
                RefusalCode::HeldCallExpired,
                format!(
                    "{call}: held for approval by rule {:?}, and nobody decided in time{record}{why}",
                    held.held.rule
                ),
            ),
        }
    }
}

/// The refusal of a held call that could not be put to a person.
pub fn unavailable(held: &HeldCall, why: &str) -> Refusal {
    let mut refusal = Refusal::new(
        RefusalCode::HeldCallUnavailable,
        format!(
            "{}: held for approval by rule {:?}, but {why}; refused ({})",
            held.call, held.held.rule, held.held.reason
        ),
    );
    refusal.rule = Some(held.held.rule.clone());
    refusal
}
