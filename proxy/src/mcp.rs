//! MCP over Streamable HTTP (docs/proxy.md, "MCP"): the JSON-RPC messages of
//! a POST to an `mcp` endpoint's path, each judged as an MCP action of
//! docs/policy-semantics.md §8 before anything is forwarded, the answers the
//! proxy gives in the server's place, and the filtering of `*/list`
//! results. Pure functions over a policy snapshot, like [`crate::decide`];
//! every verdict comes from `agentgate_policy::matcher`.

use agentgate_policy::action::{McpAction, McpKind};
use agentgate_policy::matcher::{McpQuery, McpServer, decide_mcp_indexed, mcp_query};
use agentgate_policy::mcp::json_equal;
use serde_json::{Map, Value, json};

use crate::decide::{Binary, Refusal, RefusalCode, Snapshot, policy_of};

/// The JSON-RPC error code of a message the policy refuses (an
/// implementation-defined server error, -32000..-32099, that no MCP SDK
/// uses for itself).
pub const REFUSED: i64 = -32010;
/// The largest POST body judged; a longer one is refused.
pub const MAX_BODY_BYTES: usize = 4 << 20;

/// Client-to-server methods of the MCP specification (revisions 2024-11-05
/// to 2025-06-18) that grant no authority (§8.1): allowed whenever the
/// connection to the endpoint is.
const SESSION_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "resources/list",
    "resources/templates/list",
    "resources/unsubscribe",
    "prompts/list",
    "completion/complete",
    "logging/setLevel",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
];

/// A list request whose result is filtered on the way back.
#[derive(Debug, Clone, PartialEq)]
pub struct ListRequest {
    /// The request's JSON-RPC id.
    pub id: Value,
    /// What it lists.
    pub kind: McpKind,
}

/// What the proxy does with one POST to an MCP server.
#[derive(Debug, Clone, PartialEq)]
pub enum Judged {
    /// Forward the body unchanged; filter these list results in the answer.
    Forward {
        /// The list requests of the body.
        lists: Vec<ListRequest>,
        /// The calls it carries, as shown in logs (`tools/call NAME`).
        calls: Vec<String>,
    },
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

/// One message of a body, classified.
enum Message {
    /// A call that carries authority.
    Call(McpAction),
    /// A method that grants none (or a response to a server request);
    /// `list` when its result is filtered.
    Session(Option<McpKind>),
}

fn malformed(reason: impl Into<String>) -> Refusal {
    Refusal::new(RefusalCode::MalformedMcp, reason)
}

/// The call named by `params` (`name` or `uri`, and `arguments`).
fn call(
    method: &str,
    kind: McpKind,
    params: Option<&Value>,
    binary: &Binary,
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
        binary: binary.shown().to_string(),
        host: server.host.to_string(),
        port: server.port,
        path: server.path.to_string(),
        kind,
        name: name.to_string(),
        args,
    };
    action
        .check_canonical()
        .map_err(|e| malformed(format!("{method} {name:?}: not a canonical call ({e})")))?;
    Ok(action)
}

fn classify(message: &Value, binary: &Binary, server: McpServer<'_>) -> Result<Message, Refusal> {
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
        "tools/list" => return Ok(Message::Session(Some(McpKind::Tool))),
        "prompts/list" => return Ok(Message::Session(Some(McpKind::Prompt))),
        "resources/list" => return Ok(Message::Session(Some(McpKind::Resource))),
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
    call(method, kind, params, binary, server).map(Message::Call)
}

/// Judges one message; `Ok` carries the list kind to filter, if any.
fn judge_message(
    snapshot: &Snapshot,
    binary: &Binary,
    server: McpServer<'_>,
    message: &Value,
) -> Result<(Option<McpKind>, Option<String>), Refusal> {
    let policy = policy_of(snapshot)?;
    match classify(message, binary, server)? {
        Message::Call(action) => {
            let decision =
                decide_mcp_indexed(&policy.compiled, &policy.index, binary.caller(), &action);
            if decision.allow {
                return Ok((
                    None,
                    Some(format!("{} {}", action.kind.method(), action.name)),
                ));
            }
            Err(Refusal {
                decision: "deny",
                reason: format!("{action}: {}", decision.reason),
                code: if decision.rule.is_some() {
                    RefusalCode::DeniedByRule
                } else {
                    RefusalCode::NoRule
                },
                rule: decision.rule,
                finding: snapshot
                    .findings
                    .cite(&action.transport())
                    .cloned()
                    .map(Box::new),
            })
        }
        Message::Session(list) => {
            let allowed = mcp_query(
                &policy.compiled,
                &policy.index,
                binary.caller(),
                server,
                McpQuery::Session,
            );
            if allowed {
                return Ok((list, None));
            }
            Err(Refusal::new(
                RefusalCode::NoRule,
                format!(
                    "POST https://{}:{}{} by {}: no rule allows a session with this MCP server",
                    server.host,
                    server.port,
                    server.path,
                    binary.shown()
                ),
            ))
        }
    }
}

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

/// Judges the body of a POST to `server`: a single JSON-RPC message or a
/// batch (protocol revision 2025-03-26). Every message is judged before
/// anything is forwarded; if one is refused, none is: the proxy answers
/// every request of the body itself, the refused ones with their reason.
pub fn judge_post(
    snapshot: &Snapshot,
    binary: &Binary,
    server: McpServer<'_>,
    body: &[u8],
) -> Judged {
    let Ok(parsed) = serde_json::from_slice::<Value>(body) else {
        return parse_error("the body is not JSON, so its MCP messages cannot be judged");
    };
    let (messages, batch) = match &parsed {
        Value::Array(items) if items.is_empty() => {
            return parse_error("an empty batch holds no message to judge");
        }
        Value::Array(items) => (items.iter().collect::<Vec<_>>(), true),
        single => (vec![single], false),
    };
    let verdicts: Vec<_> = messages
        .iter()
        .map(|m| judge_message(snapshot, binary, server, m))
        .collect();
    let Some(first) = verdicts.iter().find_map(|v| v.as_ref().err()).cloned() else {
        let mut lists = Vec::new();
        let mut calls = Vec::new();
        for (message, verdict) in messages.iter().zip(verdicts) {
            if let Ok((list, call)) = verdict {
                if let (Some(kind), Some(id)) = (list, message.get("id")) {
                    lists.push(ListRequest {
                        id: id.clone(),
                        kind,
                    });
                }
                calls.extend(call);
            }
        }
        return Judged::Forward { lists, calls };
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

/// Filters the `*/list` results among `message` (one JSON-RPC message or a
/// batch) that answer `lists`, keeping the entries `visible` shows.
/// Returns how many entries were removed.
pub fn filter_lists(
    message: &mut Value,
    lists: &[ListRequest],
    visible: &dyn Fn(McpKind, &str) -> bool,
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
    let Some(kind) = lists.iter().find(|l| json_equal(&l.id, id)).map(|l| l.kind) else {
        return 0;
    };
    let (field, key) = match kind {
        McpKind::Tool => ("tools", "name"),
        McpKind::Prompt => ("prompts", "name"),
        McpKind::Resource => ("resources", "uri"),
    };
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
            .is_some_and(|name| visible(kind, name))
    });
    before - entries.len()
}

/// Filters the list results of a server-sent event stream as it passes:
/// complete events (ended by a blank line) are rewritten when their data is
/// a list result to filter, and passed on unchanged otherwise.
pub struct SseFilter {
    pending: Vec<u8>,
    lists: Vec<ListRequest>,
}

impl SseFilter {
    /// A filter for the answers to `lists`.
    pub fn new(lists: Vec<ListRequest>) -> SseFilter {
        SseFilter {
            pending: Vec::new(),
            lists,
        }
    }

    /// Feeds bytes; returns the complete events among them, filtered.
    pub fn push(&mut self, chunk: &[u8], visible: &dyn Fn(McpKind, &str) -> bool) -> Vec<u8> {
        self.pending.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some((end, separator)) = event_end(&self.pending) {
            let event: Vec<u8> = self.pending.drain(..end + separator).collect();
            out.extend(self.rewrite(&event[..end], visible));
            out.extend_from_slice(&event[end..]);
        }
        out
    }

    /// The bytes of an unfinished last event, unchanged (the stream ended).
    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.pending)
    }

    fn rewrite(&self, event: &[u8], visible: &dyn Fn(McpKind, &str) -> bool) -> Vec<u8> {
        let Ok(text) = std::str::from_utf8(event) else {
            return event.to_vec();
        };
        let data: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        let Ok(mut message) = serde_json::from_str::<Value>(&data.join("\n")) else {
            return event.to_vec();
        };
        if filter_lists(&mut message, &self.lists, visible) == 0 {
            return event.to_vec();
        }
        let mut lines: Vec<String> = Vec::new();
        let mut data_written = false;
        for line in text.lines() {
            if line.starts_with("data:") {
                if !data_written {
                    lines.push(format!("data: {message}"));
                    data_written = true;
                }
            } else {
                lines.push(line.to_string());
            }
        }
        lines.join("\n").into_bytes()
    }
}

/// Where the first event of `buffer` ends: the offset of its blank-line
/// separator and the separator's length.
fn event_end(buffer: &[u8]) -> Option<(usize, usize)> {
    let find = |needle: &[u8]| {
        buffer
            .windows(needle.len())
            .position(|w| w == needle)
            .map(|i| (i, needle.len()))
    };
    [find(b"\n\n"), find(b"\r\n\r\n"), find(b"\r\r")]
        .into_iter()
        .flatten()
        .min_by_key(|(i, _)| *i)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use agentgate_policy::compile::{Limits, Role, compile};
    use agentgate_policy::index::HostIndex;
    use agentgate_policy::matcher::{Caller, decide_mcp};
    use agentgate_policy::testing::{mcp_calls, mcp_document};
    use proptest::prelude::*;

    use super::*;
    use crate::decide::EnforcedPolicy;

    const BANK: &str = r#"
network:
  - name: bank
    binaries: [/usr/bin/python3]
    endpoints:
      - host: bank.internal
        ports: [443]
        protocol: mcp
        path: /mcp
        tools:
          - name: "get_*"
          - name: send_money
            arguments:
              recipient: {oneOf: ["GB29"]}
              amount: {maximum: 100}
        denyTools:
          - name: get_secret
        resources:
          - uri: "file:///reports/**"
"#;

    fn snapshot(yaml: &str) -> Snapshot {
        let doc = agentgate_policy::load::load_document(yaml, &Limits::default()).unwrap();
        let compiled = compile(&doc.policy, Role::Sandbox, &Limits::default()).unwrap();
        Snapshot {
            generation: 1,
            policy: Ok(Arc::new(EnforcedPolicy::new(compiled))),
            findings: Arc::default(),
        }
    }

    fn python() -> Binary {
        Binary(Some("/usr/bin/python3".into()))
    }

    const SERVER: McpServer<'static> = McpServer {
        host: "bank.internal",
        port: 443,
        path: "/mcp",
    };

    fn judge(s: &Snapshot, body: Value) -> Judged {
        judge_post(s, &python(), SERVER, body.to_string().as_bytes())
    }

    fn tool(id: u32, name: &str, arguments: Value) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": name, "arguments": arguments}})
    }

    #[test]
    fn allowed_calls_and_session_methods_are_forwarded() {
        let s = snapshot(BANK);
        let Judged::Forward { lists, calls } = judge(
            &s,
            json!([
                {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": "l", "method": "tools/list"},
                tool(2, "send_money", json!({"recipient": "GB29", "amount": 100})),
                {"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": "file:///reports/q3"}},
                {"jsonrpc": "2.0", "id": 9, "result": {"roots": []}},
            ]),
        ) else {
            panic!("expected forward");
        };
        assert_eq!(
            lists,
            [ListRequest {
                id: json!("l"),
                kind: McpKind::Tool
            }]
        );
        assert_eq!(
            calls,
            ["tools/call send_money", "resources/read file:///reports/q3"]
        );
    }

    #[test]
    fn a_refused_call_is_answered_with_its_reason_and_never_forwarded() {
        let s = snapshot(BANK);
        let Judged::Answer {
            status,
            body,
            refusal,
        } = judge(
            &s,
            tool(7, "send_money", json!({"recipient": "evil", "amount": 5})),
        )
        else {
            panic!("expected an answer");
        };
        assert_eq!(status, 200);
        assert_eq!(refusal.code, RefusalCode::NoRule);
        let answer: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(answer["id"], 7);
        assert_eq!(answer["error"]["code"], REFUSED);
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("refused by agentgate: tools/call send_money {")
                && message.contains("\"recipient\":\"evil\"")
                && message.contains("by /usr/bin/python3 on bank.internal:443/mcp: no rule allows"),
            "{message}"
        );
        assert_eq!(answer["error"]["data"]["code"], "no_rule");
        // Deny wins, and names the rule.
        let Judged::Answer { refusal, .. } = judge(&s, tool(8, "get_secret", json!({}))) else {
            panic!("get_secret is denied");
        };
        assert_eq!(
            (refusal.code, refusal.rule.as_deref()),
            (RefusalCode::DeniedByRule, Some("bank"))
        );
    }

    #[test]
    fn one_refusal_holds_back_its_whole_batch() {
        let s = snapshot(BANK);
        let Judged::Answer { status, body, .. } = judge(
            &s,
            json!([
                tool(1, "get_balance", json!({})),
                {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}},
                tool(2, "delete_account", json!({})),
            ]),
        ) else {
            panic!("expected an answer");
        };
        assert_eq!(status, 200);
        let answers: Vec<Value> = serde_json::from_str(&body).unwrap();
        assert_eq!(answers.len(), 2, "notifications get no answer");
        let held = answers[0]["error"]["message"].as_str().unwrap();
        assert!(held.contains("not forwarded"), "{held}");
        assert!(
            answers[1]["error"]["message"]
                .as_str()
                .unwrap()
                .contains("delete_account")
        );
    }

    #[test]
    fn malformed_and_unknown_messages_fail_closed() {
        let s = snapshot(BANK);
        for (body, code, status) in [
            (
                json!({"jsonrpc": "2.0", "id": 1, "method": "tools/destroy"}),
                RefusalCode::UnsupportedMcpMethod,
                200,
            ),
            (
                json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}}),
                RefusalCode::MalformedMcp,
                200,
            ),
            (tool(1, "get_x", json!([1])), RefusalCode::MalformedMcp, 200),
            (
                tool(1, "tab\tname", json!({})),
                RefusalCode::MalformedMcp,
                200,
            ),
            (json!([]), RefusalCode::MalformedMcp, 400),
            (
                json!({"jsonrpc": "2.0", "method": "notifications/unknown"}),
                RefusalCode::UnsupportedMcpMethod,
                403,
            ),
        ] {
            let Judged::Answer {
                refusal,
                status: got,
                ..
            } = judge(&s, body.clone())
            else {
                panic!("{body} was forwarded");
            };
            assert_eq!((refusal.code, got), (code, status), "{body}");
        }
        let Judged::Answer { status, .. } = judge_post(&s, &python(), SERVER, b"not json") else {
            panic!("not JSON was forwarded");
        };
        assert_eq!(status, 400);
        // Another binary has no session with the server at all.
        let other = Binary(Some("/usr/bin/curl".into()));
        let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
        assert!(matches!(
            judge_post(&s, &other, SERVER, ping.to_string().as_bytes()),
            Judged::Answer { .. }
        ));
    }

    fn visible_in(s: &Snapshot) -> impl Fn(McpKind, &str) -> bool + '_ {
        move |kind, name| {
            let p = s.policy.as_ref().unwrap();
            mcp_query(
                &p.compiled,
                &p.index,
                python().caller(),
                SERVER,
                McpQuery::Listed(kind, name),
            )
        }
    }

    #[test]
    fn list_results_show_only_what_could_be_allowed() {
        let s = snapshot(BANK);
        let lists = [ListRequest {
            id: json!(4),
            kind: McpKind::Tool,
        }];
        let mut result = json!({"jsonrpc": "2.0", "id": 4, "result": {"tools": [
            {"name": "get_balance"}, {"name": "get_secret"}, {"name": "send_money"},
            {"name": "update_password"}, {"title": "no name"}
        ]}});
        assert_eq!(filter_lists(&mut result, &lists, &visible_in(&s)), 3);
        let names: Vec<&str> = result["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["get_balance", "send_money"]);
        // Another id is not touched.
        let mut other = json!({"id": 5, "result": {"tools": [{"name": "x"}]}});
        assert_eq!(filter_lists(&mut other, &lists, &visible_in(&s)), 0);
    }

    #[test]
    fn event_streams_are_filtered_event_by_event() {
        let s = snapshot(BANK);
        let mut filter = SseFilter::new(vec![ListRequest {
            id: json!(1),
            kind: McpKind::Tool,
        }]);
        let list = json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "get_a"}, {"name": "rm"}]}});
        let stream = format!(
            "event: message\nid: e1\ndata: {list}\n\n: keepalive\n\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}}\n\npartial"
        );
        let (a, b) = stream.as_bytes().split_at(17);
        let mut out = filter.push(a, &visible_in(&s));
        out.extend(filter.push(b, &visible_in(&s)));
        out.extend(filter.finish());
        let out = String::from_utf8(out).unwrap();
        assert!(out.starts_with("event: message\nid: e1\ndata: {"), "{out}");
        assert!(out.contains("get_a") && !out.contains("\"rm\""), "{out}");
        assert!(out.contains("\n\n: keepalive\n\n"), "{out}");
        assert!(
            out.ends_with("notifications/progress\"}\n\npartial"),
            "{out}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 150, ..ProptestConfig::default() })]

        /// The proxy's verdict on every call is the matcher's, on random
        /// policies mixing l4, rest and mcp endpoints, wherever the policy
        /// makes the path an MCP server.
        #[test]
        fn proxy_call_decisions_equal_the_matcher(doc in mcp_document()) {
            let compiled = compile(&doc, Role::Maximum, &Limits::default()).unwrap();
            let index = HostIndex::build(&compiled);
            let s = Snapshot {
                generation: 1,
                policy: Ok(Arc::new(EnforcedPolicy::new(compiled.clone()))),
                findings: Arc::default(),
            };
            for t in mcp_calls("/usr/bin/gh", "a.io", 443) {
                let server = McpServer { host: &t.host, port: t.port, path: &t.path };
                if !agentgate_policy::matcher::is_mcp_server(&compiled, &index, server) {
                    // The proxy judges the POST as a rest request there:
                    // without an mcp endpoint on the path, that is the call's verdict.
                    let wire = agentgate_policy::matcher::decide_network(&compiled, &t.transport()).allow;
                    prop_assert_eq!(wire, decide_mcp(&compiled, &t).allow, "{}", t);
                    continue;
                }
                let (method, key) = match t.kind {
                    McpKind::Tool => ("tools/call", "name"),
                    McpKind::Prompt => ("prompts/get", "name"),
                    McpKind::Resource => ("resources/read", "uri"),
                };
                let mut params = json!({ key: t.name });
                if t.kind != McpKind::Resource {
                    params["arguments"] = Value::Object(t.args.clone());
                }
                let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
                let binary = Binary(Some(t.binary.clone()));
                let proxy = matches!(judge_post(&s, &binary, server, body.to_string().as_bytes()), Judged::Forward { .. });
                prop_assert_eq!(proxy, decide_mcp(&compiled, &t).allow, "{}", t);
                // A listed entry is never one that no call of it could pass.
                let listed = mcp_query(&compiled, &index, Caller::Binary(&t.binary), server, McpQuery::Listed(t.kind, &t.name));
                prop_assert!(listed || !decide_mcp(&compiled, &t).allow, "{} allowed but not listed", t);
            }
        }
    }
}
