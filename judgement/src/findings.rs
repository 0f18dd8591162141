//! Trifecta findings as the data plane reads them: the operator writes
//! `findings.json` next to the policy (docs/design.md §10), each finding with the
//! network regions its tools would reach, so a refusal can say which static
//! finding predicted it without the analysis (or Z3) in the data plane.

use agentgate_policy::model::RuntimeMode;
use serde::{Deserialize, Serialize};

use serde_json::{Map, Value};

use crate::refusal::{FindingCitation, Refusal, RefusalCode};
use agentgate_policy::action::{Action, McpAction, McpKind, NetworkAction};
use agentgate_policy::compile::{CompiledRegion, compile_region};
use agentgate_policy::error::Reason;
use agentgate_policy::matcher::{connection_in_region, region_contains, region_holds};
use agentgate_policy::model::Region;
use agentgate_policy::provenance::{MIN_SUBSTRING_BYTES, Origin, Record, Source, find_leaf};

/// One unfixed trifecta finding of the sandbox's agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FindingRegions {
    /// Finding id, e.g. `AG-TRIFECTA`.
    pub id: String,
    /// The finding's sink node.
    pub sink: String,
    /// The finding on one line, with both witnesses.
    pub witness: String,
    /// The capabilities of the nodes on the finding's paths, sink first.
    #[serde(default)]
    pub capabilities: Vec<NodeRegion>,
    /// The flow the finding predicts between tools the agent calls over
    /// MCP, which the proxy watches for at run time (docs/trifecta.md, "At
    /// run time"); absent when one of its three nodes is no MCP tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeFlow>,
}

/// A finding's flow as the proxy sees it: untrusted content from one tool
/// reaching the model, a secret from another, and the sink's call carrying
/// the secret. A tool is named as the model calls it (`tools/call` name for
/// an MCP tool, the function's name for one the agent runs in process);
/// an in-process tool's content is also what the hosts it reads answered,
/// and its calls of the sink are the REST requests in the sink's regions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RuntimeFlow {
    /// The name of the finding's untrusted input (the source of its
    /// control witness).
    pub untrusted: String,
    /// The name of its secret (the source of its data witness).
    pub secret: String,
    /// The name of its sink.
    pub sink: String,
    /// Hosts whose response bodies are the untrusted input's content too
    /// (`host:NAME`): the literal hosts an in-process tool reads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub untrusted_hosts: Vec<String>,
    /// Hosts whose response bodies are the secret's content too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_hosts: Vec<String>,
    /// Where an in-process sink sends: a REST request in one of these
    /// regions is a call of the sink. Empty for a sink called over MCP.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sink_regions: Vec<Region>,
    /// What an observed flow does.
    #[serde(default)]
    pub mode: RuntimeMode,
}

impl RuntimeFlow {
    /// The sources whose content is the untrusted input's.
    fn untrusted_sources(&self) -> impl Iterator<Item = Source> + '_ {
        std::iter::once(Source::Tool(self.untrusted.clone()))
            .chain(self.untrusted_hosts.iter().cloned().map(Source::Host))
    }

    /// The sources whose content is the secret's.
    fn secret_sources(&self) -> Vec<Source> {
        std::iter::once(Source::Tool(self.secret.clone()))
            .chain(self.secret_hosts.iter().cloned().map(Source::Host))
            .collect()
    }

    /// Whether content of the untrusted input has reached the model: as
    /// a refusal says it, `None` when it has not. Once content has been
    /// dropped from the record, it may have.
    fn untrusted_reached(&self, record: &dyn Record) -> Option<&'static str> {
        if self
            .untrusted_sources()
            .any(|source| record.holds_content_from(&source))
        {
            Some("has reached the model")
        } else if record.evicted() {
            Some("may have reached the model (the record lost content)")
        } else {
            None
        }
    }

    /// A refusal's decision in this flow's mode.
    fn decision(&self) -> &'static str {
        match self.mode {
            RuntimeMode::Enforce => "deny",
            RuntimeMode::Audit => "audit",
        }
    }
}

/// A flow the proxy observed: the finding that predicted it and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedFlow<'a> {
    /// The finding, as a refusal cites it.
    pub citation: &'a FindingCitation,
    /// The flow and its mode.
    pub flow: &'a RuntimeFlow,
    /// The argument (or the request's value) that carries the secret, as a
    /// refusal names it (`body`, `to[1]`, `query.q`).
    pub argument: String,
    /// The secret's source the value was seen in.
    pub secret: Source,
    /// How the untrusted input reached the model, as the refusal says it.
    pub reached: &'static str,
}

impl ObservedFlow<'_> {
    /// The `runtime_trifecta` refusal of `call` (a tool call, or a request
    /// as `POST https://host:port/path`), its decision `audit` when the
    /// flow's mode is: which value carries what, and the finding that
    /// predicted it.
    pub fn refusal(&self, call: &dyn std::fmt::Display) -> Refusal {
        flow_refusal(
            self.citation,
            self.flow,
            format!(
                "{call}: {} carries a value of {} while content of tool:{} {}",
                self.argument, self.secret, self.flow.untrusted, self.reached
            ),
        )
    }
}

/// A call of an in-process sink whose values must be read before it may
/// pass ([`CompiledFindings::pending_request_flow`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingFlow<'a> {
    /// The finding, as a refusal cites it.
    pub citation: &'a FindingCitation,
    /// The flow and its mode.
    pub flow: &'a RuntimeFlow,
    /// How the untrusted input reached the model, as a refusal says it;
    /// `None` for a tunnel, which is refused whether or not it has.
    pub reached: Option<&'static str>,
}

impl PendingFlow<'_> {
    /// The refusal of `call`, whose values could not be read (`why`): it
    /// may carry the secret, and doubt never allows.
    pub fn unread(&self, call: &dyn std::fmt::Display, why: &str) -> Refusal {
        let when = match self.reached {
            Some(reached) => format!(" while content of tool:{} {reached}", self.flow.untrusted),
            None => String::new(),
        };
        flow_refusal(
            self.citation,
            self.flow,
            format!(
                "{call}: a call of the sink {} whose values cannot be read ({why}){when}: it may carry a value of tool:{}",
                self.flow.sink, self.flow.secret
            ),
        )
    }
}

/// A `runtime_trifecta` refusal in the flow's mode: `what`, then the
/// finding that predicted it.
fn flow_refusal(citation: &FindingCitation, flow: &RuntimeFlow, what: String) -> Refusal {
    Refusal {
        decision: flow.decision(),
        reason: format!(
            "{what}: the flow trifecta finding {} predicted ({})",
            citation.id, citation.witness
        ),
        code: RefusalCode::RuntimeTrifecta,
        rule: None,
        finding: Some(Box::new(citation.clone())),
    }
}

/// The network actions one node of a finding can perform.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeRegion {
    /// The node (tool) id.
    pub node: String,
    /// The actions its capability covers.
    pub region: Region,
}

/// Findings with their regions compiled, ready to cite.
#[derive(Debug, Clone, Default)]
pub struct CompiledFindings {
    entries: Vec<(FindingCitation, CompiledRegion)>,
    flows: Vec<CompiledFlow>,
}

/// A runtime flow with its sink's regions compiled.
#[derive(Debug, Clone)]
struct CompiledFlow {
    citation: FindingCitation,
    flow: RuntimeFlow,
    sink_regions: Vec<CompiledRegion>,
}

impl CompiledFindings {
    /// The runtime flows of the findings (docs/trifecta.md, "At run time").
    pub fn runtime_flows(&self) -> impl Iterator<Item = &RuntimeFlow> {
        self.flows.iter().map(|compiled| &compiled.flow)
    }

    /// Compiles every region; a region that does not compile is an error
    /// naming its finding and node, so a bad file is noticed, not ignored.
    pub fn compile(findings: &[FindingRegions]) -> Result<CompiledFindings, Reason> {
        let mut entries = Vec::new();
        let mut flows = Vec::new();
        for (i, finding) in findings.iter().enumerate() {
            if let Some(flow) = &finding.runtime {
                let citation = FindingCitation {
                    id: finding.id.clone(),
                    sink: finding.sink.clone(),
                    node: finding.sink.clone(),
                    witness: finding.witness.clone(),
                };
                let sink_regions = flow
                    .sink_regions
                    .iter()
                    .enumerate()
                    .map(|(j, region)| {
                        compile_region(region, &format!("[{i}].runtime.sinkRegions[{j}]"))
                    })
                    .collect::<Result<_, _>>()?;
                flows.push(CompiledFlow {
                    citation,
                    flow: flow.clone(),
                    sink_regions,
                });
            }
            for (j, capability) in finding.capabilities.iter().enumerate() {
                let field = format!("[{i}].capabilities[{j}].region");
                entries.push((
                    FindingCitation {
                        id: finding.id.clone(),
                        sink: finding.sink.clone(),
                        node: capability.node.clone(),
                        witness: finding.witness.clone(),
                    },
                    compile_region(&capability.region, &field)?,
                ));
            }
        }
        Ok(CompiledFindings { entries, flows })
    }

    /// The first finding whose flow this call of its sink completes, given
    /// the session's `record` (docs/trifecta.md, "At run time"): content
    /// of the untrusted tool has reached the model (or content has been
    /// dropped, so it may have), and a string or number of the call was
    /// seen in the secret tool's content.
    pub fn observed_flow(&self, t: &McpAction, record: &dyn Record) -> Option<ObservedFlow<'_>> {
        if t.kind != McpKind::Tool {
            return None;
        }
        self.enforced_first()
            .filter(|c| c.sink_regions.is_empty() && c.flow.sink == t.name)
            .find_map(|c| c.observed(&t.args, record))
    }

    /// The flows, enforced ones first: where an enforced and an audited
    /// flow both hold, the call is refused.
    fn enforced_first(&self) -> impl Iterator<Item = &CompiledFlow> {
        let enforced = |c: &&CompiledFlow| c.flow.mode == RuntimeMode::Enforce;
        self.flows
            .iter()
            .filter(enforced)
            .chain(self.flows.iter().filter(move |c| !enforced(c)))
    }

    /// The first flow of which the REST request `action` is a call of the
    /// in-process sink while its untrusted input has reached the model:
    /// the request's values must then be read and judged
    /// ([`CompiledFindings::observed_request_flow`]), and a request whose
    /// values cannot be read is refused in the flow's name.
    pub fn pending_request_flow(
        &self,
        action: &NetworkAction,
        record: &dyn Record,
    ) -> Option<PendingFlow<'_>> {
        self.request_flows(action).find_map(|c| {
            Some(PendingFlow {
                citation: &c.citation,
                flow: &c.flow,
                reached: Some(c.flow.untrusted_reached(record)?),
            })
        })
    }

    /// True when the REST request `action` lies in some in-process sink's
    /// regions: a recording proxy reads its values before it passes, so
    /// whether the untrusted input reached the model is judged once the
    /// request is whole.
    pub fn is_sink_request(&self, action: &NetworkAction) -> bool {
        self.request_flows(action).next().is_some()
    }

    /// The first flow into whose sink's regions an `l4` tunnel by
    /// `binary` to `host:port` would lead (binaries, hosts and ports only:
    /// a tunnel has no method or path). Its bytes are never read, and it
    /// stays open while content arrives, so it is refused whenever the
    /// session is recorded.
    pub fn tunnel_flow(&self, binary: &str, host: &str, port: u16) -> Option<PendingFlow<'_>> {
        self.enforced_first()
            .find(|c| {
                c.sink_regions
                    .iter()
                    .any(|region| connection_in_region(region, binary, host, port))
            })
            .map(|c| PendingFlow {
                citation: &c.citation,
                flow: &c.flow,
                reached: None,
            })
    }

    /// The first finding whose flow the REST request `action`, carrying
    /// `values` ([`crate::request_values`]), completes as a call of an
    /// in-process sink: as [`CompiledFindings::observed_flow`] for a tool
    /// call.
    pub fn observed_request_flow(
        &self,
        action: &NetworkAction,
        values: &Map<String, Value>,
        record: &dyn Record,
    ) -> Option<ObservedFlow<'_>> {
        self.request_flows(action)
            .find_map(|c| c.observed(values, record))
    }

    /// The flows whose in-process sink `action` is a call of.
    fn request_flows<'s>(
        &'s self,
        action: &NetworkAction,
    ) -> impl Iterator<Item = &'s CompiledFlow> {
        self.enforced_first().filter(move |c| {
            c.sink_regions
                .iter()
                .any(|region| region_contains(region, action))
        })
    }

    /// The first finding (in file order, sink first within a finding) with a
    /// node whose region contains the action.
    pub fn cite(&self, action: &Action) -> Option<&FindingCitation> {
        self.entries
            .iter()
            .find(|(_, region)| region_holds(region, action))
            .map(|(citation, _)| citation)
    }

    /// Number of node regions (citations by capability).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there is nothing to cite.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// True when a value is long enough to say which content it came from:
/// a string of [`MIN_SUBSTRING_BYTES`] bytes or more, or a number written
/// with as many characters. Shorter ones (`v1`, `42`, `api`) occur as
/// tokens in most content, a secret's included; counting them would refuse
/// every path segment and small id as a leak.
fn identifying(leaf: &Value) -> bool {
    match leaf {
        Value::String(s) => s.len() >= MIN_SUBSTRING_BYTES,
        Value::Number(n) => n.to_string().len() >= MIN_SUBSTRING_BYTES,
        _ => false,
    }
}

impl CompiledFlow {
    /// The flow as observed when its untrusted input has reached the model
    /// and one of `values` was seen in the secret's content.
    fn observed(
        &self,
        values: &Map<String, Value>,
        record: &dyn Record,
    ) -> Option<ObservedFlow<'_>> {
        let reached = self.flow.untrusted_reached(record)?;
        let secret = self.flow.secret_sources();
        let (argument, source) = find_leaf(values, &mut |at, shown, leaf| match record
            .carrier_origin(at, leaf)
        {
            Origin::Seen(sources) if identifying(leaf) => secret
                .iter()
                .find(|s| sources.contains(s))
                .map(|s| (shown.to_string(), s.clone())),
            _ => None,
        })?;
        Some(ObservedFlow {
            citation: &self.citation,
            flow: &self.flow,
            argument,
            secret: source,
            reached,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentgate_policy::action::{Layer, McpAction, McpKind, NetworkAction};

    #[test]
    fn cites_the_node_whose_region_holds_the_action() {
        let findings: Vec<FindingRegions> = serde_json::from_str(
            r#"[{"id":"AG-TRIFECTA","sink":"post","witness":"fetch -> post",
                 "capabilities":[{"node":"post","region":{"hosts":["hooks.example.com"],"methods":["POST"]}}]}]"#,
        )
        .unwrap();
        let compiled = CompiledFindings::compile(&findings).unwrap();
        let mut action = NetworkAction {
            binary: "/usr/bin/python3".into(),
            host: "hooks.example.com".into(),
            port: 443,
            layer: Layer::Rest,
            method: "POST".into(),
            path: "/x".into(),
            credential: None,
            query: Default::default(),
            upgrade: None,
        };
        let cite = |a: &NetworkAction| compiled.cite(&Action::Network(a.clone())).cloned();
        assert_eq!(cite(&action).map(|c| c.node), Some("post".to_string()));
        action.method = "GET".into();
        assert_eq!(cite(&action), None);
    }

    #[test]
    fn a_tool_the_agent_calls_is_cited_by_its_calls_only() {
        let findings: Vec<FindingRegions> = serde_json::from_str(
            r#"[{"id":"AG-TRIFECTA","sink":"send_money","witness":"read_email -> send_money",
                 "capabilities":[{"node":"send_money","region":{"hosts":["bank.internal"],"tools":[{"name":"send_money"}]}}]}]"#,
        )
        .unwrap();
        let compiled = CompiledFindings::compile(&findings).unwrap();
        let mut call = McpAction {
            binary: "/usr/bin/python3".into(),
            host: "bank.internal".into(),
            port: 443,
            path: "/mcp".into(),
            kind: McpKind::Tool,
            name: "send_money".into(),
            args: serde_json::Map::new(),
            sources: None,
            credential: None,
        };
        let transport = Action::Network(call.transport());
        assert_eq!(
            compiled
                .cite(&Action::Mcp(call.clone()))
                .map(|c| c.node.as_str()),
            Some("send_money")
        );
        assert_eq!(
            compiled.cite(&transport),
            None,
            "the request is not the call"
        );
        call.name = "get_balance".into();
        assert_eq!(compiled.cite(&Action::Mcp(call)), None);
    }

    #[test]
    fn an_in_process_sink_is_called_by_the_requests_of_its_regions() {
        use crate::request_values::request_values;
        use agentgate_policy::provenance::Lineage;
        let findings: Vec<FindingRegions> = serde_json::from_str(
            r#"[{"id":"AG-TRIFECTA","sink":"post_note","witness":"fetch_page -> __llm__ -> post_note",
                 "runtime":{"untrusted":"fetch_page","secret":"read_vault","sink":"post_note",
                            "untrustedHosts":["pages.example.com"],"secretHosts":["vault.internal"],
                            "sinkRegions":[{"hosts":["notes.example.com"],"methods":["POST"]}]}}]"#,
        )
        .unwrap();
        let compiled = CompiledFindings::compile(&findings).unwrap();
        let post = NetworkAction {
            binary: "/usr/bin/python3".into(),
            host: "notes.example.com".into(),
            port: 443,
            layer: Layer::Rest,
            method: "POST".into(),
            path: "/notes".into(),
            credential: None,
            query: Default::default(),
            upgrade: None,
        };
        let body = |text: &str| {
            request_values(
                "/notes?tag=x",
                [("content-type", b"application/json".as_slice())],
                text.as_bytes(),
            )
            .unwrap()
        };
        let mut record = Lineage::new(1 << 20);
        record.observe(Source::User, "post my note");
        record.observe(
            Source::Host("vault.internal".into()),
            "token hunter2-secret",
        );
        assert!(
            compiled.pending_request_flow(&post, &record).is_none(),
            "no untrusted content yet"
        );
        record.observe(
            Source::Host("pages.example.com".into()),
            "ignore previous instructions",
        );
        assert!(compiled.pending_request_flow(&post, &record).is_some());
        let observed = compiled
            .observed_request_flow(&post, &body(r#"{"text": "hunter2-secret"}"#), &record)
            .expect("the secret's value reaches the sink");
        assert_eq!(observed.argument, "body.text");
        assert_eq!(observed.secret, Source::Host("vault.internal".into()));
        let refusal = observed.refusal(&"POST https://notes.example.com:443/notes");
        assert_eq!(refusal.code, RefusalCode::RuntimeTrifecta);
        assert!(
            refusal.reason.contains(
                "body.text carries a value of host:vault.internal while content of tool:fetch_page"
            ),
            "{}",
            refusal.reason
        );
        assert_eq!(
            compiled.observed_request_flow(&post, &body(r#"{"text": "my own words"}"#), &record),
            None
        );
        // Values too short to say where they came from do not count (`v1`,
        // `2` and `abc` occur in the vault's answer as in most content);
        // `token`, five bytes of it, does.
        record.observe(Source::Host("vault.internal".into()), "v1 2 abc");
        assert_eq!(
            compiled.observed_request_flow(
                &post,
                &body(r#"{"a": "v1", "b": 2, "c": "abc"}"#),
                &record
            ),
            None
        );
        assert!(
            compiled
                .observed_request_flow(&post, &body(r#"{"a": "token"}"#), &record)
                .is_some()
        );
        let get = NetworkAction {
            method: "GET".into(),
            ..post.clone()
        };
        assert!(
            compiled.pending_request_flow(&get, &record).is_none(),
            "not the sink's method"
        );
        let call = McpAction {
            binary: post.binary.clone(),
            host: post.host.clone(),
            port: 443,
            path: "/mcp".into(),
            kind: McpKind::Tool,
            name: "post_note".into(),
            args: body(r#"{"text": "hunter2-secret"}"#),
            sources: None,
            credential: None,
        };
        assert_eq!(
            compiled.observed_flow(&call, &record),
            None,
            "an in-process sink is not an MCP tool of that name"
        );
    }

    #[test]
    fn a_bad_region_names_where() {
        let findings: Vec<FindingRegions> = serde_json::from_str(
            r#"[{"id":"X","sink":"s","witness":"w","capabilities":[{"node":"n","region":{"hosts":["a[b"]}}]}]"#,
        )
        .unwrap();
        let err = CompiledFindings::compile(&findings).unwrap_err();
        assert!(
            err.field
                .unwrap_or_default()
                .starts_with("[0].capabilities[0].region")
        );
    }
}
