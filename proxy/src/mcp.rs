//! MCP over Streamable HTTP (docs/proxy.md, "MCP"): the proxy's view of
//! [`agentgate_policy::mcp_messages`] over a policy snapshot, and the
//! filtering of `*/list` results in server-sent event streams as they pass.

use agentgate_policy::action::McpKind;
use agentgate_policy::matcher::McpServer;
pub use agentgate_policy::mcp_messages::{
    Judge, Judged, ListRequest, MAX_BODY_BYTES, REFUSED, filter_lists, judge_messages,
    refusal_error,
};
use serde_json::Value;

use crate::decide::{Binary, Refusal, Snapshot, policy_of};

/// The judge of messages to `server` by the snapshot's policy, or the
/// refusal every message gets without one.
fn judge<'a>(
    snapshot: &'a Snapshot,
    binary: &'a Binary,
    server: McpServer<'a>,
) -> Result<Judge<'a>, Refusal> {
    let policy = policy_of(snapshot)?;
    Ok(Judge {
        policy: &policy.compiled,
        index: &policy.index,
        caller: binary.caller(),
        shown: binary.shown(),
        findings: &snapshot.findings,
        server,
    })
}

/// Judges the body of a POST to `server` by the snapshot's policy (with
/// none, every message is refused with that reason).
pub fn judge_post(
    snapshot: &Snapshot,
    binary: &Binary,
    server: McpServer<'_>,
    body: &[u8],
) -> Judged {
    match judge(snapshot, binary, server) {
        Ok(judge) => judge.body(body),
        Err(refusal) => judge_messages(body, &|_| Err(refusal.clone())),
    }
}

/// Whether `binary` may hold a session with `server` at all (a GET for the
/// server's event stream, a DELETE ending the session): [`Judge::session`].
pub fn judge_session(
    snapshot: &Snapshot,
    binary: &Binary,
    server: McpServer<'_>,
) -> Result<(), Refusal> {
    judge(snapshot, binary, server)?.session()
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
    use crate::decide::{EnforcedPolicy, RefusalCode};
    use agentgate_policy::matcher::{McpQuery, mcp_query};
    use serde_json::json;

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
    fn a_refused_call_of_a_finding_sink_tool_cites_the_finding() {
        let mut s = snapshot(BANK);
        let findings: Vec<agentgate_policy::findings::FindingRegions> = serde_json::from_value(json!([{
            "id": "AG-TRIFECTA", "sink": "send_money",
            "witness": "read_email -> __llm__ -> send_money",
            "capabilities": [{"node": "send_money",
                              "region": {"hosts": ["bank.internal"], "tools": [{"name": "send_money"}]}}]
        }]))
        .unwrap();
        s.findings =
            Arc::new(agentgate_policy::findings::CompiledFindings::compile(&findings).unwrap());
        let Judged::Answer { body, refusal, .. } = judge(
            &s,
            tool(7, "send_money", json!({"recipient": "evil", "amount": 5})),
        ) else {
            panic!("expected an answer");
        };
        assert_eq!(
            refusal.finding.as_ref().map(|f| f.node.as_str()),
            Some("send_money")
        );
        let answer: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(answer["error"]["data"]["finding"]["id"], "AG-TRIFECTA");
        // A refused call of another tool is not that finding's.
        let Judged::Answer { refusal, .. } = judge(&s, tool(8, "get_secret", json!({}))) else {
            panic!("get_secret is denied");
        };
        assert_eq!(refusal.finding, None);
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
