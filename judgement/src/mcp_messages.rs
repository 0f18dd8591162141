//! How MCP's JSON-RPC messages become MCP actions and verdicts
//! (docs/policy-semantics.md §8.1, §8.4): which methods carry a call, which
//! grant no authority, how a refusal is answered in the server's place, and
//! how `*/list` results are filtered. Shared by every enforcement point that
//! reads MCP: the egress proxy (Streamable HTTP) and `agentgate-exec --mcp`
//! (stdio). Pure: no I/O.

use serde_json::{Map, Value, json};

use crate::findings::CompiledFindings;
use crate::refusal::{Refusal, RefusalCode};
use agentgate_policy::action::{Action, McpAction, McpKind};
use agentgate_policy::compile::CompiledPolicy;
use agentgate_policy::index::HostIndex;
use agentgate_policy::matcher::{
    Caller, McpQuery, McpServer, decide_mcp_indexed, decide_mcp_recorded, held_by,
    mcp_query_carrying,
};
use agentgate_policy::mcp::SESSION_METHODS;
use agentgate_policy::mcp::json_equal;
use agentgate_policy::model::RuntimeMode;
use agentgate_policy::provenance::{Origin, Record, find_leaf};

/// The JSON-RPC error code of a message the policy refuses (an
/// implementation-defined server error, -32000..-32099, that no MCP SDK
/// uses for itself).
pub const REFUSED: i64 = -32010;
/// The largest POST body judged; a longer one is refused.
pub const MAX_BODY_BYTES: usize = 4 << 20;

/// What a list request lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// `tools/list`, `prompts/list` or `resources/list`: entries by name
    /// or URI.
    Entries(McpKind),
    /// `resources/templates/list`: URI templates.
    ResourceTemplates,
}

impl Listing {
    /// The result's array and each entry's identifying field.
    fn fields(self) -> (&'static str, &'static str) {
        match self {
            Listing::Entries(McpKind::Tool) => ("tools", "name"),
            Listing::Entries(McpKind::Prompt) => ("prompts", "name"),
            Listing::Entries(McpKind::Resource) => ("resources", "uri"),
            Listing::ResourceTemplates => ("resourceTemplates", "uriTemplate"),
        }
    }

    /// The question whose answer keeps the entry `name` in the list.
    pub fn query(self, name: &str) -> McpQuery<'_> {
        match self {
            Listing::Entries(kind) => McpQuery::Listed(kind, name),
            Listing::ResourceTemplates => McpQuery::ListedTemplate(name),
        }
    }
}

/// A list request whose result is filtered on the way back.
#[derive(Debug, Clone, PartialEq)]
pub struct ListRequest {
    /// The request's JSON-RPC id.
    pub id: Value,
    /// What it lists.
    pub kind: Listing,
}

/// What the proxy does with one POST to an MCP server.
#[derive(Debug, Clone, PartialEq)]
pub enum Judged {
    /// Forward the body unchanged; filter these list results in the answer.
    Forward {
        /// The list requests of the body.
        lists: Vec<ListRequest>,
        /// The calls it carries (shown in logs as `tools/call NAME`).
        calls: Vec<ForwardedCall>,
        /// Calls that completed a trifecta finding's flow in audit mode:
        /// forwarded, to be logged and counted.
        audits: Vec<Refusal>,
    },
    /// One call held for a person's approval: forward it as
    /// [`HeldCall::approved`] says once a person approves, else answer
    /// [`HeldCall::refused`] (docs/proxy.md, "Held calls").
    Hold(Box<HeldCall>),
    /// Answer in the server's place; nothing is forwarded.
    Answer {
        /// HTTP status: 200 for JSON-RPC errors, 400 for a body that is not
        /// JSON-RPC, 403 for refused notifications (no id to answer).
        status: u16,
        /// The JSON body.
        body: String,
        /// The first refusal, for logs and metrics.
        refusal: Refusal,
    },
}

/// A body that is one held call.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldCall {
    /// The call and its JSON-RPC id.
    pub call: ForwardedCall,
    /// The rule that holds it and why it was not allowed.
    pub held: Held,
    /// A runtime-trifecta flow it completes in audit mode, if any.
    pub audit: Option<Refusal>,
}

impl HeldCall {
    /// What to do once a person approved: forward the body unchanged.
    pub fn approved(self) -> Judged {
        Judged::Forward {
            lists: Vec::new(),
            calls: vec![self.call],
            audits: self.audit.into_iter().collect(),
        }
    }

    /// What to answer when it was denied, expired or could not be asked:
    /// the refusal, as a JSON-RPC error to its id (HTTP 403 for a call sent
    /// as a notification, which has no answer in JSON-RPC).
    pub fn refused(&self, refusal: Refusal) -> Judged {
        match &self.call.id {
            Some(id) => Judged::Answer {
                status: 200,
                body: refusal_error(id, &refusal).to_string(),
                refusal,
            },
            None => Judged::Answer {
                status: 403,
                body: refusal.body(),
                refusal,
            },
        }
    }
}

/// One message of a body, classified.
enum Message {
    /// A call that carries authority (boxed: a call is several times the
    /// size of a session method, and most bodies hold one message).
    Call(Box<McpAction>),
    /// A method that grants none (or a response to a server request);
    /// `list` when its result is filtered.
    Session(Option<Listing>),
}

fn malformed(reason: impl Into<String>) -> Refusal {
    Refusal::new(RefusalCode::MalformedMcp, reason)
}

/// The call named by `params` (`name` or `uri`, and `arguments`).
fn call(
    method: &str,
    kind: McpKind,
    params: Option<&Value>,
    shown: &str,
    server: McpServer<'_>,
) -> Result<McpAction, Refusal> {
    let key = if kind == McpKind::Resource {
        "uri"
    } else {
        "name"
    };
    let params = params.and_then(Value::as_object);
    let Some(name) = params.and_then(|p| p.get(key)).and_then(Value::as_str) else {
        return Err(malformed(format!("{method} without a string params.{key}")));
    };
    let args = match params.and_then(|p| p.get("arguments")) {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(args)) if kind != McpKind::Resource => args.clone(),
        Some(_) => {
            return Err(malformed(format!(
                "{method} {name}: params.arguments is not an object"
            )));
        }
    };
    let action = McpAction {
        binary: shown.to_string(),
        host: server.host.to_string(),
        port: server.port,
        path: server.path.to_string(),
        kind,
        name: name.to_string(),
        args,
        sources: None,
        credential: None,
    };
    action
        .check_canonical()
        .map_err(|e| malformed(format!("{method} {name:?}: not a canonical call ({e})")))?;
    Ok(action)
}

fn classify(message: &Value, shown: &str, server: McpServer<'_>) -> Result<Message, Refusal> {
    let Some(object) = message.as_object() else {
        return Err(malformed("a JSON-RPC message is an object"));
    };
    let Some(method) = object.get("method") else {
        // A response to the server's own request (sampling, roots,
        // elicitation): it carries no authority of the agent's.
        if object.contains_key("id")
            && (object.contains_key("result") || object.contains_key("error"))
        {
            return Ok(Message::Session(None));
        }
        return Err(malformed(
            "a JSON-RPC message has a method, or is a response with an id",
        ));
    };
    let Some(method) = method.as_str() else {
        return Err(malformed("method is not a string"));
    };
    let params = object.get("params");
    let kind = match method {
        "tools/call" => McpKind::Tool,
        "prompts/get" => McpKind::Prompt,
        "resources/read" | "resources/subscribe" => McpKind::Resource,
        "tools/list" => return Ok(Message::Session(Some(Listing::Entries(McpKind::Tool)))),
        "prompts/list" => return Ok(Message::Session(Some(Listing::Entries(McpKind::Prompt)))),
        "resources/list" => {
            return Ok(Message::Session(Some(Listing::Entries(McpKind::Resource))));
        }
        "resources/templates/list" => {
            return Ok(Message::Session(Some(Listing::ResourceTemplates)));
        }
        m if SESSION_METHODS.contains(&m) => return Ok(Message::Session(None)),
        other => {
            return Err(Refusal::new(
                RefusalCode::UnsupportedMcpMethod,
                format!(
                    "MCP method {other:?} is not one the specification names, so it cannot be judged"
                ),
            ));
        }
    };
    call(method, kind, params, shown, server).map(|t| Message::Call(Box::new(t)))
}

/// What a message's verdict carries when it is allowed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Allowed {
    /// The list it asks for, to filter its answer.
    pub list: Option<Listing>,
    /// The call it makes: for logs, and for the enforcement point to
    /// record its result and the flows into its arguments.
    pub call: Option<Box<McpAction>>,
    /// The runtime-trifecta flow an audited call completed (forwarded, but
    /// to be logged and counted).
    pub audit: Option<Refusal>,
    /// The call is not allowed but held for a person's approval (`mode:
    /// ask`, docs/policy-semantics.md §8.6): the rule that holds it and why
    /// its allow entries refused it.
    pub held: Option<Held>,
}

/// Why a call is held rather than allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The rule whose `mode: ask` entry holds it.
    pub rule: String,
    /// Why no allow entry let it through, as a refusal would say it.
    pub reason: String,
}

/// A call a forwarded body carries.
#[derive(Debug, Clone, PartialEq)]
pub struct ForwardedCall {
    /// Its JSON-RPC id (`None` for a notification, which has no result).
    pub id: Option<Value>,
    /// The call, as judged.
    pub action: Box<McpAction>,
}

impl std::fmt::Display for ForwardedCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.action.kind.method(), self.action.name)
    }
}

/// Everything one judgment of an MCP server's messages reads.
#[derive(Clone, Copy)]
pub struct Judge<'a> {
    /// The compiled policy in force.
    pub policy: &'a CompiledPolicy,
    /// Its host index.
    pub index: &'a HostIndex,
    /// Who sends the messages.
    pub caller: Caller<'a>,
    /// The caller as refusals show it.
    pub shown: &'a str,
    /// The trifecta findings refusals cite.
    pub findings: &'a CompiledFindings,
    /// Where the messages go.
    pub server: McpServer<'a>,
    /// The session's record of where values were seen (§8.3), where the
    /// enforcement point keeps one; without it no allow entry's `from`
    /// holds.
    pub record: Option<&'a dyn Record>,
    /// The credential the request carrying the messages holds
    /// (docs/policy-semantics.md §9): every message is judged as carrying
    /// it, so only rules that bind it may allow.
    pub credential: Option<&'a str>,
}

impl Judge<'_> {
    /// Judges one message; `Ok` carries the list kind to filter, if any.
    pub fn message(&self, message: &Value) -> Result<Allowed, Refusal> {
        let server = self.server;
        match classify(message, self.shown, server)? {
            Message::Call(mut action) => {
                action.credential = self.credential.map(str::to_string);
                let decision = match self.record {
                    Some(record) => {
                        decide_mcp_recorded(self.policy, self.index, self.caller, &action, record)
                    }
                    None => decide_mcp_indexed(self.policy, self.index, self.caller, &action),
                };
                let seen = || {
                    self.record
                        .map(|r| sources_seen(r, &action.args))
                        .unwrap_or_default()
                };
                let held = match decision.allow {
                    true => None,
                    // Deny entries win over a hold: `held_by` reads them.
                    false => held_by(self.policy, self.index, self.caller, &action, self.record)
                        .map(|rule| Held {
                            rule,
                            reason: format!("{}{}", decision.reason, seen()),
                        }),
                };
                if decision.allow || held.is_some() {
                    // A flow the trifecta forbids is refused, never held.
                    let audit = match self.runtime_trifecta(&action) {
                        None => None,
                        Some((refusal, RuntimeMode::Audit)) => Some(refusal),
                        Some((refusal, RuntimeMode::Enforce)) => return Err(refusal),
                    };
                    return Ok(Allowed {
                        list: None,
                        call: Some(action),
                        audit,
                        held,
                    });
                }
                Err(Refusal {
                    decision: "deny",
                    reason: format!("{action}: {}{}", decision.reason, seen()),
                    code: if decision.rule.is_some() {
                        RefusalCode::DeniedByRule
                    } else {
                        RefusalCode::NoRule
                    },
                    rule: decision.rule,
                    finding: self
                        .findings
                        .cite(&Action::Mcp((*action).clone()))
                        .cloned()
                        .map(Box::new),
                })
            }
            Message::Session(list) => self.session().map(|()| Allowed {
                list,
                ..Allowed::default()
            }),
        }
    }

    /// The refusal a call gets when it completes the flow a trifecta
    /// finding predicts (docs/trifecta.md, "At run time"), with the flow's
    /// mode; `None` without a record or when no flow is complete.
    fn runtime_trifecta(&self, action: &McpAction) -> Option<(Refusal, RuntimeMode)> {
        let observed = self.findings.observed_flow(action, self.record?)?;
        Some((observed.refusal(action), observed.flow.mode))
    }

    /// Whether the methods that grant no authority may be sent to the
    /// server at all ([`McpQuery::Session`]): for those messages, and for a
    /// transport's own requests that carry none (an event stream's GET).
    pub fn session(&self) -> Result<(), Refusal> {
        let server = self.server;
        if mcp_query_carrying(
            self.policy,
            self.index,
            self.caller,
            self.credential,
            server,
            McpQuery::Session,
        ) {
            return Ok(());
        }
        let carrying = match self.credential {
            Some(credential) => format!(" with credential {credential}"),
            None => String::new(),
        };
        Err(Refusal::new(
            RefusalCode::NoRule,
            format!(
                "POST https://{}:{}{} by {}{carrying}: no rule allows a session with this MCP server",
                server.host, server.port, server.path, self.shown
            ),
        ))
    }

    /// Whether a `*/list` result shows an entry ([`McpQuery::Listed`],
    /// [`McpQuery::ListedTemplate`]).
    pub fn listed(&self, query: McpQuery<'_>) -> bool {
        mcp_query_carrying(
            self.policy,
            self.index,
            self.caller,
            self.credential,
            self.server,
            query,
        )
    }

    /// [`judge_messages`] with this judge.
    pub fn body(&self, body: &[u8]) -> Judged {
        judge_messages(body, &|m| self.message(m))
    }
}

/// Where the session saw each string and number of a refused call's
/// arguments, as a refusal's last clause (`; recipient seen in
/// tool:read_email, amount seen nowhere, to[1] seen in user`): what a person
/// needs to tell an injected value from a typed one. At most
/// [`MAX_SOURCES_SHOWN`] values are listed.
fn sources_seen(record: &dyn Record, args: &Map<String, Value>) -> String {
    let mut parts = Vec::new();
    find_leaf::<()>(args, &mut |at, shown, leaf| {
        match record.origin_at(at, leaf) {
            Origin::Seen(sources) => {
                let list: Vec<String> = sources.iter().map(ToString::to_string).collect();
                parts.push(format!("{shown} seen in {}", list.join(" and ")));
            }
            Origin::Nowhere { evicted: false } => parts.push(format!("{shown} seen nowhere")),
            Origin::Nowhere { evicted: true } => {
                parts.push(format!(
                    "{shown} seen nowhere in what the session still holds"
                ));
            }
            Origin::Untracked => {}
        }
        None
    });
    if parts.len() > MAX_SOURCES_SHOWN {
        let more = parts.len() - MAX_SOURCES_SHOWN;
        parts.truncate(MAX_SOURCES_SHOWN);
        parts.push(format!("{more} more"));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("; {}", parts.join(", "))
    }
}

/// The most values a refusal lists the sources of.
pub const MAX_SOURCES_SHOWN: usize = 16;

/// The JSON-RPC error answering `id` with a refusal the model can read.
pub fn refusal_error(id: &Value, refusal: &Refusal) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": REFUSED,
            "message": format!("refused by agentgate: {}", refusal.reason),
            "data": refusal,
        },
    })
}

fn parse_error(reason: &str) -> Judged {
    let refusal = malformed(reason);
    let body = json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32700, "message": format!("agentgate: {reason}"), "data": &refusal},
    });
    Judged::Answer {
        status: 400,
        body: body.to_string(),
        refusal,
    }
}

/// Judges a body: a single JSON-RPC message or a batch (protocol revision
/// 2025-03-26), each message by `judge`. Every message is judged before
/// anything is forwarded; if one is refused, none is: the enforcement point
/// answers every request of the body itself, the refused ones with their
/// reason.
pub fn judge_messages(body: &[u8], judge: &dyn Fn(&Value) -> Result<Allowed, Refusal>) -> Judged {
    let parsed = match agentgate_policy::strict_json::parse(body) {
        Ok(parsed) => parsed,
        Err(e) => {
            return parse_error(&format!(
                "the body cannot be judged, since {e} (docs/policy-semantics.md §8.4)"
            ));
        }
    };
    let (messages, batch) = match &parsed {
        Value::Array(items) if items.is_empty() => {
            return parse_error("an empty batch holds no message to judge");
        }
        Value::Array(items) => (items.iter().collect::<Vec<_>>(), true),
        single => (vec![single], false),
    };
    let mut verdicts: Vec<_> = messages.iter().map(|m| judge(m)).collect();
    if batch {
        // A batch is answered as a whole, so one held call would hold
        // every other message with it: refused, with the way out.
        for verdict in &mut verdicts {
            if let Ok(Allowed {
                held: Some(_),
                call: Some(call),
                ..
            }) = verdict
            {
                *verdict = Err(Refusal::new(
                    RefusalCode::HeldCallUnavailable,
                    format!(
                        "{call}: held for a person's approval, which a batch cannot wait for; send the call alone"
                    ),
                ));
            }
        }
    }
    if let [Ok(allowed)] = verdicts.as_mut_slice()
        && allowed.held.is_some()
        && let (Some(held), Some(action)) = (allowed.held.take(), allowed.call.take())
    {
        return Judged::Hold(Box::new(HeldCall {
            call: ForwardedCall {
                id: messages[0].get("id").cloned(),
                action,
            },
            held,
            audit: allowed.audit.take(),
        }));
    }
    let Some(first) = verdicts.iter().find_map(|v| v.as_ref().err()).cloned() else {
        let mut lists = Vec::new();
        let mut calls = Vec::new();
        let mut audits = Vec::new();
        for (message, verdict) in messages.iter().zip(verdicts) {
            if let Ok(allowed) = verdict {
                audits.extend(allowed.audit);
                if let (Some(kind), Some(id)) = (allowed.list, message.get("id")) {
                    lists.push(ListRequest {
                        id: id.clone(),
                        kind,
                    });
                }
                if let Some(action) = allowed.call {
                    calls.push(ForwardedCall {
                        id: message.get("id").cloned(),
                        action,
                    });
                }
            }
        }
        return Judged::Forward {
            lists,
            calls,
            audits,
        };
    };
    let answers: Vec<Value> = messages
        .iter()
        .zip(&verdicts)
        .filter_map(|(message, verdict)| {
            let id = message.get("id")?;
            Some(match verdict {
                Err(refusal) => refusal_error(id, refusal),
                Ok(_) => {
                    let mut held = first.clone();
                    held.reason = format!(
                        "not forwarded, because another message of its batch was refused ({})",
                        first.reason
                    );
                    refusal_error(id, &held)
                }
            })
        })
        .collect();
    match (answers.is_empty(), batch) {
        // Only notifications: nothing to answer in JSON-RPC, so HTTP says it.
        (true, _) => Judged::Answer {
            status: 403,
            body: first.body(),
            refusal: first,
        },
        (false, true) => Judged::Answer {
            status: 200,
            body: Value::Array(answers).to_string(),
            refusal: first,
        },
        (false, false) => Judged::Answer {
            status: 200,
            body: answers[0].to_string(),
            refusal: first,
        },
    }
}

/// Drops from `lists` the requests `message` (one JSON-RPC message or a
/// batch) answers, with a result or an error: they are awaited no more, and
/// a later message reusing the id is someone else's. A server's own request
/// that happens to carry the same id answers nothing.
pub fn forget_answered(lists: &mut Vec<ListRequest>, message: &Value) {
    fn answers(message: &Value, id: &Value) -> bool {
        match message {
            Value::Array(items) => items.iter().any(|m| answers(m, id)),
            Value::Object(object) => {
                (object.contains_key("result") || object.contains_key("error"))
                    && object.get("id").is_some_and(|got| json_equal(got, id))
            }
            _ => false,
        }
    }
    lists.retain(|list| !answers(message, &list.id));
}

/// Filters the `*/list` results among `message` (one JSON-RPC message or a
/// batch) that answer `lists`, keeping the entries `visible` shows.
/// Returns how many entries were removed.
pub fn filter_lists(
    message: &mut Value,
    lists: &[ListRequest],
    visible: &dyn Fn(McpQuery<'_>) -> bool,
) -> usize {
    if let Value::Array(items) = message {
        return items
            .iter_mut()
            .map(|m| filter_lists(m, lists, visible))
            .sum();
    }
    let Some(object) = message.as_object_mut() else {
        return 0;
    };
    let Some(id) = object.get("id") else {
        return 0;
    };
    let Some(listing) = lists.iter().find(|l| json_equal(&l.id, id)).map(|l| l.kind) else {
        return 0;
    };
    let (field, key) = listing.fields();
    let Some(entries) = object
        .get_mut("result")
        .and_then(|r| r.get_mut(field))
        .and_then(Value::as_array_mut)
    else {
        return 0;
    };
    let before = entries.len();
    entries.retain(|entry| {
        entry
            .get(key)
            .and_then(Value::as_str)
            .is_some_and(|name| visible(listing.query(name)))
    });
    before - entries.len()
}
