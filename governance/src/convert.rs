//! The boundary between the domain and the `v1alpha1` API: the API owns its
//! wire types (`agentgate_api::scan`, `agentgate_api::verdict`), the prover
//! and the trifecta analysis own theirs, and these conversions are the one
//! place the two meet. Both directions are total and lossless (the types
//! have the same fields and variants); every conversion destructures its
//! value, so a field or variant added on either side fails to compile here
//! instead of being dropped silently.
//!
//! Extension traits rather than `From`, because neither side's types are
//! this crate's (the orphan rule).

use crate::budget::CostItem;
use crate::verdict::{Decision, Mode};
use agentgate_api::scan as api;
use agentgate_api::verdict as api_verdict;
use agentgate_trifecta::analysis::{Finding, Hop, Severity, Witness};
use agentgate_trifecta::graph::{
    Capability, Channel, Confidentiality, Destination, Edge, EdgeKind, Effect, Graph, Integrity,
    Label, McpTool, Node, NodeKind, SourceLocation,
};

/// A domain value's form in the API, for writing it into an object.
pub trait ToApi {
    /// The API type.
    type Api;
    /// The value as the API carries it.
    fn to_api(&self) -> Self::Api;
}

/// An API value's form in the domain, for computing with what an object
/// carries.
pub trait ToDomain {
    /// The domain type.
    type Domain;
    /// The value as the domain computes with it.
    fn to_domain(&self) -> Self::Domain;
}

impl<T: ToApi> ToApi for [T] {
    type Api = Vec<T::Api>;
    fn to_api(&self) -> Self::Api {
        self.iter().map(ToApi::to_api).collect()
    }
}

impl<T: ToDomain> ToDomain for [T] {
    type Domain = Vec<T::Domain>;
    fn to_domain(&self) -> Self::Domain {
        self.iter().map(ToDomain::to_domain).collect()
    }
}

impl<T: ToApi> ToApi for Option<T> {
    type Api = Option<T::Api>;
    fn to_api(&self) -> Self::Api {
        self.as_ref().map(ToApi::to_api)
    }
}

impl<T: ToDomain> ToDomain for Option<T> {
    type Domain = Option<T::Domain>;
    fn to_domain(&self) -> Self::Domain {
        self.as_ref().map(ToDomain::to_domain)
    }
}

/// Both directions for a field-less enum whose variants have the same names
/// on both sides; the matches are exhaustive, so a new variant on either
/// side does not compile until it is mapped.
macro_rules! same_variants {
    ($domain:ty, $api:ty, [$($variant:ident),+ $(,)?]) => {
        impl ToApi for $domain {
            type Api = $api;
            fn to_api(&self) -> $api {
                match self {
                    $(<$domain>::$variant => <$api>::$variant,)+
                }
            }
        }

        impl ToDomain for $api {
            type Domain = $domain;
            fn to_domain(&self) -> $domain {
                match self {
                    $(<$api>::$variant => <$domain>::$variant,)+
                }
            }
        }
    };
}

same_variants!(Mode, api_verdict::Mode, [Ask, Auto]);
same_variants!(Decision, api_verdict::Decision, [Apply, Ask, Reject]);
same_variants!(Integrity, api::Integrity, [Untrusted, Trusted]);
same_variants!(
    Confidentiality,
    api::Confidentiality,
    [Public, Internal, Secret]
);
same_variants!(NodeKind, api::NodeKind, [Tool, Llm, Agent]);
same_variants!(
    Effect,
    api::Effect,
    [UntrustedInput, Egress, ReadsInternal, ReadsSecret]
);
same_variants!(
    Channel,
    api::Channel,
    [
        Http, Mail, Feed, Browser, Search, Chat, Webhook, Socket, Exec, Env, File, Database,
        Storage, Keyring,
    ]
);
same_variants!(EdgeKind, api::EdgeKind, [Data, Control]);
same_variants!(Severity, api::Severity, [Medium, High, Critical]);

impl ToApi for CostItem {
    type Api = api_verdict::CostItem;
    fn to_api(&self) -> Self::Api {
        let CostItem { item, weight } = self;
        api_verdict::CostItem {
            item: item.clone(),
            weight: *weight,
        }
    }
}

impl ToDomain for api_verdict::CostItem {
    type Domain = CostItem;
    fn to_domain(&self) -> Self::Domain {
        let api_verdict::CostItem { item, weight } = self;
        CostItem {
            item: item.clone(),
            weight: *weight,
        }
    }
}

impl ToApi for Label {
    type Api = api::Label;
    fn to_api(&self) -> Self::Api {
        let Label {
            integrity,
            confidentiality,
        } = self;
        api::Label {
            integrity: integrity.to_api(),
            confidentiality: confidentiality.to_api(),
        }
    }
}

impl ToDomain for api::Label {
    type Domain = Label;
    fn to_domain(&self) -> Self::Domain {
        let api::Label {
            integrity,
            confidentiality,
        } = self;
        Label {
            integrity: integrity.to_domain(),
            confidentiality: confidentiality.to_domain(),
        }
    }
}

impl ToApi for Destination {
    type Api = api::Destination;
    fn to_api(&self) -> Self::Api {
        let Destination {
            host,
            port,
            method,
            path,
        } = self;
        api::Destination {
            host: host.clone(),
            port: *port,
            method: method.clone(),
            path: path.clone(),
        }
    }
}

impl ToApi for McpTool {
    type Api = api::McpTool;
    fn to_api(&self) -> Self::Api {
        let McpTool {
            name,
            host,
            port,
            path,
        } = self;
        api::McpTool {
            name: name.clone(),
            host: host.clone(),
            port: *port,
            path: path.clone(),
        }
    }
}

impl ToDomain for api::McpTool {
    type Domain = McpTool;
    fn to_domain(&self) -> Self::Domain {
        let api::McpTool {
            name,
            host,
            port,
            path,
        } = self;
        McpTool {
            name: name.clone(),
            host: host.clone(),
            port: *port,
            path: path.clone(),
        }
    }
}

impl ToDomain for api::Destination {
    type Domain = Destination;
    fn to_domain(&self) -> Self::Domain {
        let api::Destination {
            host,
            port,
            method,
            path,
        } = self;
        Destination {
            host: host.clone(),
            port: *port,
            method: method.clone(),
            path: path.clone(),
        }
    }
}

impl ToApi for SourceLocation {
    type Api = api::SourceLocation;
    fn to_api(&self) -> Self::Api {
        let SourceLocation { file, line } = self;
        api::SourceLocation {
            file: file.clone(),
            line: *line,
        }
    }
}

impl ToDomain for api::SourceLocation {
    type Domain = SourceLocation;
    fn to_domain(&self) -> Self::Domain {
        let api::SourceLocation { file, line } = self;
        SourceLocation {
            file: file.clone(),
            line: *line,
        }
    }
}

impl ToApi for Capability {
    type Api = api::Capability;
    fn to_api(&self) -> Self::Api {
        let Capability {
            effect,
            channel,
            call,
            destination,
            resource,
            source,
        } = self;
        api::Capability {
            effect: effect.to_api(),
            channel: channel.to_api(),
            call: call.clone(),
            destination: destination.to_api(),
            resource: resource.clone(),
            source: source.to_api(),
        }
    }
}

impl ToDomain for api::Capability {
    type Domain = Capability;
    fn to_domain(&self) -> Self::Domain {
        let api::Capability {
            effect,
            channel,
            call,
            destination,
            resource,
            source,
        } = self;
        Capability {
            effect: effect.to_domain(),
            channel: channel.to_domain(),
            call: call.clone(),
            destination: destination.to_domain(),
            resource: resource.clone(),
            source: source.to_domain(),
        }
    }
}

impl ToApi for Node {
    type Api = api::Node;
    fn to_api(&self) -> Self::Api {
        let Node {
            id,
            kind,
            label,
            capabilities,
            load_bearing,
            declassifies,
            source,
            mcp,
        } = self;
        api::Node {
            id: id.clone(),
            kind: kind.to_api(),
            label: label.to_api(),
            capabilities: capabilities.to_api(),
            load_bearing: *load_bearing,
            declassifies: declassifies.to_api(),
            source: source.to_api(),
            mcp: mcp.to_api(),
        }
    }
}

impl ToDomain for api::Node {
    type Domain = Node;
    fn to_domain(&self) -> Self::Domain {
        let api::Node {
            id,
            kind,
            label,
            capabilities,
            load_bearing,
            declassifies,
            source,
            mcp,
        } = self;
        Node {
            id: id.clone(),
            kind: kind.to_domain(),
            label: label.to_domain(),
            capabilities: capabilities.to_domain(),
            load_bearing: *load_bearing,
            declassifies: declassifies.to_domain(),
            source: source.to_domain(),
            mcp: mcp.to_domain(),
        }
    }
}

impl ToApi for Edge {
    type Api = api::Edge;
    fn to_api(&self) -> Self::Api {
        let Edge { from, to, kind } = self;
        api::Edge {
            from: from.clone(),
            to: to.clone(),
            kind: kind.to_api(),
        }
    }
}

impl ToDomain for api::Edge {
    type Domain = Edge;
    fn to_domain(&self) -> Self::Domain {
        let api::Edge { from, to, kind } = self;
        Edge {
            from: from.clone(),
            to: to.clone(),
            kind: kind.to_domain(),
        }
    }
}

impl ToApi for Graph {
    type Api = api::Graph;
    fn to_api(&self) -> Self::Api {
        let Graph { nodes, edges } = self;
        api::Graph {
            nodes: nodes.to_api(),
            edges: edges.to_api(),
        }
    }
}

impl ToDomain for api::Graph {
    type Domain = Graph;
    fn to_domain(&self) -> Self::Domain {
        let api::Graph { nodes, edges } = self;
        Graph {
            nodes: nodes.to_domain(),
            edges: edges.to_domain(),
        }
    }
}

impl ToApi for Hop {
    type Api = api::Hop;
    fn to_api(&self) -> Self::Api {
        let Hop { node, source } = self;
        api::Hop {
            node: node.clone(),
            source: source.to_api(),
        }
    }
}

impl ToDomain for api::Hop {
    type Domain = Hop;
    fn to_domain(&self) -> Self::Domain {
        let api::Hop { node, source } = self;
        Hop {
            node: node.clone(),
            source: source.to_domain(),
        }
    }
}

impl ToApi for Witness {
    type Api = api::Witness;
    fn to_api(&self) -> Self::Api {
        let Witness { path } = self;
        api::Witness {
            path: path.to_api(),
        }
    }
}

impl ToDomain for api::Witness {
    type Domain = Witness;
    fn to_domain(&self) -> Self::Domain {
        let api::Witness { path } = self;
        Witness {
            path: path.to_domain(),
        }
    }
}

impl ToApi for Finding {
    type Api = api::Finding;
    fn to_api(&self) -> Self::Api {
        let Finding {
            id,
            sink,
            severity,
            control,
            data,
            cut,
        } = self;
        api::Finding {
            id: id.clone(),
            sink: sink.clone(),
            severity: severity.to_api(),
            control: control.to_api(),
            data: data.to_api(),
            cut: cut.clone(),
        }
    }
}

impl ToDomain for api::Finding {
    type Domain = Finding;
    fn to_domain(&self) -> Self::Domain {
        let api::Finding {
            id,
            sink,
            severity,
            control,
            data,
            cut,
        } = self;
        Finding {
            id: id.clone(),
            sink: sink.clone(),
            severity: severity.to_domain(),
            control: control.to_domain(),
            data: data.to_domain(),
            cut: cut.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::fmt::Debug;

    use serde::Serialize;
    use serde::de::DeserializeOwned;

    use super::*;
    use crate::budget::delta_cost;
    use agentgate_api::crd::AgentScan;
    use agentgate_policy::model::{CostWeights, PolicyDocument};
    use agentgate_trifecta::analysis::{TRIFECTA_ID, analyze};
    use agentgate_trifecta::fixtures::mail_agent;
    use agentgate_trifecta::report::{ScanReport, agent_scan_manifest};
    use agentgate_trifecta::scan::{agent_llm, scan_source};

    /// Domain → API → domain gives the value back, and the API form is the
    /// same JSON as the domain form (so the objects written before the API
    /// owned its types read the same), read back as the same API value.
    fn assert_round_trip<D>(domain: &D)
    where
        D: ToApi + PartialEq + Debug + Serialize,
        D::Api: ToDomain<Domain = D> + PartialEq + Debug + Serialize + DeserializeOwned,
    {
        let api = domain.to_api();
        assert_eq!(&api.to_domain(), domain);
        let json = serde_json::to_value(domain).unwrap();
        assert_eq!(serde_json::to_value(&api).unwrap(), json, "{domain:?}");
        assert_eq!(serde_json::from_value::<D::Api>(json).unwrap(), api);
    }

    /// A graph and its findings, each converted on its own and as parts.
    fn assert_graph_round_trips(graph: &Graph) {
        assert_round_trip(graph);
        for node in &graph.nodes {
            assert_round_trip(node);
        }
        for finding in analyze(graph).unwrap() {
            assert_round_trip(&finding);
            // The findings of the converted graph are the same findings.
            assert!(
                analyze(&graph.to_api().to_domain())
                    .unwrap()
                    .contains(&finding)
            );
        }
    }

    #[test]
    fn every_variant_maps_to_the_one_of_the_same_name() {
        for mode in [Mode::Ask, Mode::Auto] {
            assert_round_trip(&mode);
        }
        for decision in [Decision::Apply, Decision::Ask, Decision::Reject] {
            assert_round_trip(&decision);
        }
        for integrity in [Integrity::Untrusted, Integrity::Trusted] {
            assert_round_trip(&integrity);
        }
        for confidentiality in [
            Confidentiality::Public,
            Confidentiality::Internal,
            Confidentiality::Secret,
        ] {
            assert_round_trip(&confidentiality);
        }
        for kind in [NodeKind::Tool, NodeKind::Llm, NodeKind::Agent] {
            assert_round_trip(&kind);
        }
        for effect in [
            Effect::UntrustedInput,
            Effect::Egress,
            Effect::ReadsInternal,
            Effect::ReadsSecret,
        ] {
            assert_round_trip(&effect);
        }
        for channel in [
            Channel::Http,
            Channel::Mail,
            Channel::Feed,
            Channel::Browser,
            Channel::Search,
            Channel::Chat,
            Channel::Webhook,
            Channel::Socket,
            Channel::Exec,
            Channel::Env,
            Channel::File,
            Channel::Database,
            Channel::Storage,
            Channel::Keyring,
        ] {
            assert_round_trip(&channel);
        }
        for kind in [EdgeKind::Data, EdgeKind::Control] {
            assert_round_trip(&kind);
        }
        for severity in [Severity::Medium, Severity::High, Severity::Critical] {
            assert_round_trip(&severity);
        }
        // Severity orders the same on both sides (findings sort by it).
        assert!(Severity::Medium.to_api() < Severity::High.to_api());
        assert!(Severity::High.to_api() < Severity::Critical.to_api());
    }

    #[test]
    fn a_cost_breakdown_round_trips() {
        let grant: PolicyDocument = serde_saphyr::from_str(
            "network:\n- name: gh\n  endpoints: [{host: \"*.github.com\", ports: [443]}]\n",
        )
        .unwrap();
        let cost = delta_cost(&PolicyDocument::default(), &grant, &CostWeights::default());
        assert!(cost.breakdown.len() >= 2, "{cost:?}");
        for item in &cost.breakdown {
            assert_round_trip(item);
        }
        assert_eq!(cost.breakdown.to_api().to_domain(), cost.breakdown);
    }

    #[test]
    fn a_graph_with_every_field_set_round_trips() {
        let source = SourceLocation::at("agent/tools.py", 7);
        let capability = Capability {
            effect: Effect::Egress,
            channel: Channel::Http,
            call: Some("requests.post".into()),
            destination: Some(Destination {
                host: Some("api.example.com".into()),
                port: Some(443),
                method: Some("POST".into()),
                path: Some("/v1/upload".into()),
            }),
            resource: Some("/etc/token".into()),
            source: source.clone(),
        };
        let graph = Graph {
            nodes: vec![
                Node {
                    id: "researcher/__llm__".into(),
                    kind: NodeKind::Agent,
                    label: Label {
                        integrity: Integrity::Untrusted,
                        confidentiality: Confidentiality::Secret,
                    },
                    capabilities: vec![capability.clone()],
                    load_bearing: true,
                    declassifies: vec![Channel::Mail, Channel::Chat],
                    source,
                    mcp: Some(McpTool {
                        name: "send_money".into(),
                        host: Some("bank.internal".into()),
                        port: Some(443),
                        path: Some("/mcp".into()),
                    }),
                },
                Node::default(),
            ],
            edges: vec![
                Edge {
                    from: "researcher/__llm__".into(),
                    to: String::new(),
                    kind: EdgeKind::Control,
                },
                Edge {
                    from: String::new(),
                    to: "researcher/__llm__".into(),
                    kind: EdgeKind::Data,
                },
            ],
        };
        assert_round_trip(&graph);
        assert_round_trip(&capability);
        assert_round_trip(&Graph::default());
    }

    #[test]
    fn the_design_example_and_its_finding_round_trip() {
        let graph = mail_agent();
        assert_eq!(analyze(&graph).unwrap().len(), 1);
        assert_graph_round_trips(&graph);
    }

    #[test]
    fn a_scanned_agent_and_its_findings_round_trip() {
        let files = [(
            "tools.py".to_string(),
            include_str!("../../examples/agent/tools.py").to_string(),
        )];
        // The manifest adds what only it can: a load-bearing tool (so the
        // cut changes), a declassifier and a delegated agent.
        let manifest = "loadBearing: [post_comment]\n\
            declassifiers:\n  - {tool: lookup_customer, channels: [mail]}\n\
            agents:\n  - name: researcher\n    tools: [fetch_issue]\n";
        for manifest in [None, Some(manifest)] {
            let scan = scan_source(&files, manifest).unwrap();
            assert!(!analyze(&scan.graph).unwrap().is_empty(), "{manifest:?}");
            assert_graph_round_trips(&scan.graph);
        }
        let declared = scan_source(&files, Some(manifest)).unwrap().graph;
        assert!(declared.nodes.iter().any(|n| n.load_bearing));
        assert!(declared.nodes.iter().any(|n| !n.declassifies.is_empty()));
        assert!(declared.node(&agent_llm("researcher")).is_some());
    }

    #[test]
    fn the_scanners_agentscan_manifest_reads_as_the_api_and_back() {
        let graph = mail_agent();
        let findings = analyze(&graph).unwrap();
        let image = format!("ghcr.io/acme/bot@sha256:{}", "0".repeat(64));
        let report = ScanReport {
            graph: &graph,
            findings: &findings,
            notes: &[],
            image: Some(&image),
        };
        let manifest = agent_scan_manifest(&report, "bot").unwrap();
        let scan: AgentScan = serde_saphyr::from_str(&manifest).unwrap();
        assert_eq!(scan.spec.image, image);
        assert_eq!(scan.spec.graph.to_domain(), graph);
    }

    #[test]
    fn both_sides_name_the_trifecta_finding_alike() {
        assert_eq!(agentgate_api::scan::TRIFECTA_ID, TRIFECTA_ID);
    }
}
