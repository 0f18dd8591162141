//! What the pod's agent did in its session, as the proxy observed it
//! (docs/proxy.md, "Lineage"): which sources' content reached the model,
//! which tools the model called, which argument values came from which
//! source, and the last refusals. Served at `/lineage` on the metrics port
//! and read by `kubectl agentgate lineage`.
//!
//! The observed graph is exported in the AgentScan graph schema
//! (docs/trifecta.md): nodes are the model (`__llm__`), the user
//! (`__user__`), each tool called or read, and each host whose responses
//! were recorded (`host:NAME`); a data edge `A → __llm__` says A's content
//! reached the model, a control edge `__llm__ → T` that the model called
//! T, a data edge `A → T` that a value of A's content reached an argument
//! of T. Labels come from the static findings' flows (untrusted input,
//! secret, sink); a host's responses are untrusted input. Bounded: at most
//! [`MAX_NODES`] nodes, [`MAX_FLOWS`] flows and [`MAX_REFUSALS`] refusals;
//! what does not fit is counted. Pure: no I/O.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use agentgate_judgement::findings::CompiledFindings;
use agentgate_judgement::refusal::{Refusal, RefusalCode};
use agentgate_policy::action::McpAction;
use agentgate_policy::provenance::{Origin, Record, Source, find_leaf};
use serde::Serialize;
use serde_json::{Value, json};

/// The model's node id, as in the scanner's graphs.
pub const MODEL_NODE: &str = "__llm__";
/// The user's node id.
pub const USER_NODE: &str = "__user__";
/// The most nodes the graph holds; later tools are counted, not shown.
pub const MAX_NODES: usize = 512;
/// The most distinct flows (source, tool, argument) kept.
pub const MAX_FLOWS: usize = 4096;
/// The most recent refusals kept.
pub const MAX_REFUSALS: usize = 32;

/// The node id of a source.
fn node_of(source: &Source) -> String {
    match source {
        Source::User => USER_NODE.to_string(),
        Source::Tool(name) => name.clone(),
        Source::Host(name) => format!("host:{name}"),
    }
}

/// Where a tool was called.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct Server {
    host: String,
    port: u16,
    path: String,
}

/// A value of `from`'s content reached the argument `argument` of `to`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Flow {
    /// The source node (`__user__`, a tool, `host:NAME`, or `__llm__` for
    /// a value seen in no content: the model made it).
    pub from: String,
    /// The tool called.
    pub to: String,
    /// The argument, as a JSON pointer into the call's arguments.
    pub argument: String,
}

/// A refusal as the session shows it.
#[derive(Debug, Clone, Serialize)]
pub struct RefusalSeen {
    /// When (RFC 3339, UTC), set as it is kept.
    pub at: String,
    /// `connect`, `request` or `mcp`.
    pub stage: &'static str,
    /// The binary refused.
    pub binary: String,
    /// Where it went.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// The refusal: code, reason, rule and the finding it cites.
    #[serde(flatten)]
    pub refusal: Refusal,
}

/// The observed session (see the module docs).
#[derive(Debug, Default)]
pub struct SessionGraph {
    /// Tools called over MCP, with where.
    called: BTreeMap<String, Server>,
    /// Sources whose content reached the model.
    read: BTreeSet<String>,
    flows: BTreeMap<Flow, u64>,
    /// Tool-call decisions, kept apart from connection and request
    /// refusals: an agent's cheap retries of the one cannot push the other
    /// out before it is read.
    tool_refusals: VecDeque<RefusalSeen>,
    refusals: VecDeque<RefusalSeen>,
    dropped_flows: u64,
    dropped_nodes: u64,
    record_bytes: usize,
    record_evicted: bool,
}

impl SessionGraph {
    fn nodes(&self) -> usize {
        self.called.len() + self.read.len()
    }

    /// Content of `source` reached the model (a tool result forwarded to
    /// the agent, a model request carrying it).
    pub fn content_read(&mut self, source: &Source) {
        let node = node_of(source);
        if self.read.contains(&node) {
            return;
        }
        if self.nodes() >= MAX_NODES {
            self.dropped_nodes += 1;
            return;
        }
        self.read.insert(node);
    }

    /// The model called `action` (allowed and forwarded): its argument
    /// values' origins in `record`, where the proxy keeps one, are the
    /// flows into it.
    pub fn called(&mut self, action: &McpAction, record: Option<&dyn Record>) {
        if !self.called.contains_key(&action.name) {
            if self.nodes() >= MAX_NODES {
                self.dropped_nodes += 1;
                return;
            }
            let server = Server {
                host: action.host.clone(),
                port: action.port,
                path: action.path.clone(),
            };
            self.called.insert(action.name.clone(), server);
        }
        let Some(record) = record else {
            return;
        };
        let mut flows = Vec::new();
        find_leaf::<()>(&action.args, &mut |at, _, leaf| {
            let argument = at.pointer();
            match record.origin_at(at, leaf) {
                Origin::Seen(sources) => flows.extend(sources.iter().map(|s| Flow {
                    from: node_of(s),
                    to: action.name.clone(),
                    argument: argument.clone(),
                })),
                Origin::Nowhere { .. } => flows.push(Flow {
                    from: MODEL_NODE.to_string(),
                    to: action.name.clone(),
                    argument,
                }),
                Origin::Untracked => {}
            }
            None
        });
        for flow in flows {
            if let Some(count) = self.flows.get_mut(&flow) {
                *count += 1;
            } else if self.flows.len() < MAX_FLOWS {
                self.flows.insert(flow, 1);
            } else {
                self.dropped_flows += 1;
            }
        }
    }

    /// The size of the record flows are judged by, as last seen.
    pub fn record_state(&mut self, bytes: usize, evicted: bool) {
        self.record_bytes = bytes;
        self.record_evicted = evicted;
    }

    /// Keeps a refusal (the oldest of its kind goes past [`MAX_REFUSALS`]:
    /// tool calls and the rest are kept apart), its argument values
    /// redacted ([`redact_arguments`]) and its time taken now, under the
    /// session's lock, so that the kept ones are in time order.
    pub fn refused(&mut self, mut refusal: RefusalSeen) {
        refusal.refusal.reason = redact_arguments(&refusal.refusal.reason);
        refusal.at = time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default();
        // A runtime trifecta refusal of a request (an in-process sink's
        // call) is a tool call's refusal too: kept, and shown, with them.
        let kept = if refusal.stage == "mcp" || refusal.refusal.code == RefusalCode::RuntimeTrifecta
        {
            &mut self.tool_refusals
        } else {
            &mut self.refusals
        };
        if kept.len() == MAX_REFUSALS {
            kept.pop_front();
        }
        kept.push_back(refusal);
    }

    /// The observed graph in the AgentScan graph schema, labelled by the
    /// flows of `findings`.
    pub fn graph(&self, findings: &CompiledFindings) -> Value {
        let mut untrusted = BTreeSet::new();
        let mut secret = BTreeSet::new();
        let mut sinks = BTreeSet::new();
        for flow in findings.runtime_flows() {
            untrusted.insert(flow.untrusted.as_str());
            secret.insert(flow.secret.as_str());
            sinks.insert(flow.sink.as_str());
        }
        let mut ids: BTreeSet<&str> = self.read.iter().map(String::as_str).collect();
        ids.extend(self.called.keys().map(String::as_str));
        ids.extend(self.flows.keys().map(|f| f.from.as_str()));
        ids.remove(MODEL_NODE);
        let mut nodes = vec![json!({"id": MODEL_NODE, "kind": "llm"})];
        for id in ids {
            let mut node = json!({"id": id, "kind": "tool"});
            let integrity = if untrusted.contains(id) || id.starts_with("host:") {
                "untrusted"
            } else {
                "trusted"
            };
            let confidentiality = if secret.contains(id) {
                "secret"
            } else {
                "public"
            };
            node["label"] = json!({"integrity": integrity, "confidentiality": confidentiality});
            if sinks.contains(id) {
                node["capabilities"] = json!([{"effect": "egress", "channel": "http", "call": format!("tools/call {id}")}]);
            }
            if let Some(server) = self.called.get(id) {
                node["mcp"] = json!({"name": id, "host": server.host, "port": server.port, "path": server.path});
            }
            nodes.push(node);
        }
        let mut edges: BTreeSet<(&str, &str, &str)> = BTreeSet::new();
        for id in &self.read {
            edges.insert((id, MODEL_NODE, "data"));
        }
        for id in self.called.keys() {
            edges.insert((MODEL_NODE, id, "control"));
        }
        for flow in self.flows.keys() {
            edges.insert((&flow.from, &flow.to, "data"));
        }
        let edges: Vec<Value> = edges
            .into_iter()
            .filter(|(from, to, _)| from != to)
            .map(|(from, to, kind)| json!({"from": from, "to": to, "kind": kind}))
            .collect();
        json!({"nodes": nodes, "edges": edges})
    }

    /// What `/lineage` serves: the graph, the flows with their counts, the
    /// last refusals (tool calls' and others', each newest last, merged in
    /// time order) and the record's size.
    pub fn report(&self, findings: &CompiledFindings) -> Value {
        let mut refusals: Vec<&RefusalSeen> =
            self.tool_refusals.iter().chain(&self.refusals).collect();
        refusals.sort_by(|a, b| a.at.cmp(&b.at));
        let flows: Vec<Value> = self
            .flows
            .iter()
            .map(|(flow, calls)| {
                json!({"from": flow.from, "to": flow.to, "argument": flow.argument, "calls": calls})
            })
            .collect();
        json!({
            "graph": self.graph(findings),
            "flows": flows,
            "refusals": refusals,
            "record": {"bytes": self.record_bytes, "evicted": self.record_evicted},
            "dropped": {"flows": self.dropped_flows, "nodes": self.dropped_nodes},
        })
    }
}

/// A refusal's reason with the values of the call it quotes replaced by
/// `"…"`: `/lineage` is served on the metrics port, which more can reach
/// than the proxy's logs, and a refused call's arguments may hold the very
/// secret it tried to send. Argument names, sources and the rest of the
/// reason stay. A reason that quotes no arguments object is unchanged.
pub fn redact_arguments(reason: &str) -> String {
    fn redact(value: &mut Value) {
        match value {
            Value::String(_) | Value::Number(_) => *value = Value::String("…".into()),
            Value::Array(items) => items.iter_mut().for_each(redact),
            Value::Object(members) => members.values_mut().for_each(redact),
            Value::Bool(_) | Value::Null => {}
        }
    }
    // The arguments follow the tool's name, which may itself hold " {":
    // each candidate is tried in turn.
    let candidates = reason.match_indices(" {").map(|(i, _)| i + 1);
    for start in candidates {
        let mut values = serde_json::Deserializer::from_str(&reason[start..]).into_iter::<Value>();
        if let Some(Ok(mut arguments @ Value::Object(_))) = values.next() {
            let end = start + values.byte_offset();
            redact(&mut arguments);
            return format!("{}{arguments}{}", &reason[..start], &reason[end..]);
        }
    }
    match reason.find(" {") {
        // Something like arguments that do not parse: everything after it
        // goes, rather than a value shown.
        Some(start) => format!("{} {{…}}", &reason[..start]),
        None => reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentgate_policy::action::McpKind;
    use agentgate_policy::provenance::Lineage;

    fn call(name: &str, args: Value) -> McpAction {
        McpAction {
            binary: "/bin/agent".into(),
            host: "bank.internal".into(),
            port: 443,
            path: "/mcp".into(),
            kind: McpKind::Tool,
            name: name.into(),
            args: args.as_object().cloned().unwrap_or_default(),
            sources: None,
            credential: None,
        }
    }

    #[test]
    fn flows_name_the_source_of_each_argument_value() {
        let mut lineage = Lineage::new(1 << 20);
        lineage.observe(Source::User, "Pay the rent to GB29NWBK60161331926819");
        lineage.observe(
            Source::Tool("read_email".into()),
            "Send 100 to US133000000121212121212",
        );
        let mut session = SessionGraph::default();
        session.content_read(&Source::User);
        session.content_read(&Source::Tool("read_email".into()));
        let pay = call(
            "send_money",
            json!({"recipient": "GB29NWBK60161331926819", "amount": 100, "subject": "x y z", "urgent": true}),
        );
        session.called(&pay, Some(&lineage));
        session.called(&pay, Some(&lineage));
        let report = session.report(&CompiledFindings::default());
        let flows = report["flows"].as_array().unwrap();
        let shown: Vec<(String, String, u64)> = flows
            .iter()
            .map(|f| {
                (
                    f["from"].as_str().unwrap().to_string(),
                    f["argument"].as_str().unwrap().to_string(),
                    f["calls"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                (MODEL_NODE.to_string(), "/subject".to_string(), 2),
                (USER_NODE.to_string(), "/recipient".to_string(), 2),
                ("read_email".to_string(), "/amount".to_string(), 2),
            ]
        );
        let edges = report["graph"]["edges"].as_array().unwrap();
        assert!(edges.contains(&json!({"from": "read_email", "to": "__llm__", "kind": "data"})));
        assert!(edges.contains(&json!({"from": "__llm__", "to": "send_money", "kind": "control"})));
        assert!(edges.contains(&json!({"from": "read_email", "to": "send_money", "kind": "data"})));
    }

    #[test]
    fn refusals_shown_hold_no_argument_values() {
        let reason = r#"tools/call send_money {"recipient":"GB33BUKB20201555555555","amount":50,"to":["a@b.c"]} by /usr/bin/python3 on bank.internal:443/mcp: recipient carries a value of tool:get_statement"#;
        assert_eq!(
            redact_arguments(reason),
            r#"tools/call send_money {"recipient":"…","amount":"…","to":["…"]} by /usr/bin/python3 on bank.internal:443/mcp: recipient carries a value of tool:get_statement"#
        );
        let plain = "POST https://example.com/upload by /usr/bin/curl: no rule allows it";
        assert_eq!(redact_arguments(plain), plain);
        let broken = "tools/call x {\"a\": \"GB33\" by /bin/agent";
        assert_eq!(redact_arguments(broken), "tools/call x {…}");
        let braced =
            r#"tools/call lookup {v2} {"iban":"GB33BUKB20201555555555"} by /bin/agent: no rule"#;
        assert_eq!(
            redact_arguments(braced),
            r#"tools/call lookup {v2} {"iban":"…"} by /bin/agent: no rule"#
        );
    }

    #[test]
    fn refusals_and_flows_are_bounded() {
        let mut session = SessionGraph::default();
        for i in 0..MAX_REFUSALS + 3 {
            session.refused(RefusalSeen {
                at: String::new(),
                stage: "mcp",
                binary: "/bin/agent".into(),
                host: "h".into(),
                port: 1,
                refusal: Refusal::new(
                    agentgate_judgement::refusal::RefusalCode::NoRule,
                    format!("refusal {i}"),
                ),
            });
        }
        assert_eq!(session.tool_refusals.len(), MAX_REFUSALS);
        assert_eq!(session.tool_refusals[0].refusal.reason, "refusal 3");
        // A flood of connection refusals leaves the tool calls' in place.
        for _ in 0..MAX_REFUSALS * 2 {
            session.refused(RefusalSeen {
                at: String::new(),
                stage: "connect",
                binary: "/bin/agent".into(),
                host: "h".into(),
                port: 1,
                refusal: Refusal::new(agentgate_judgement::refusal::RefusalCode::NoRule, "x"),
            });
        }
        assert_eq!(session.tool_refusals[0].refusal.reason, "refusal 3");
        assert_eq!(session.refusals.len(), MAX_REFUSALS);
        let lineage = Lineage::new(1 << 20);
        for i in 0..MAX_FLOWS + 5 {
            session.called(
                &call("t", json!({format!("a{i}"): "made up value"})),
                Some(&lineage),
            );
        }
        assert_eq!(session.flows.len(), MAX_FLOWS);
        assert_eq!(session.dropped_flows, 5);
    }
}
