//! The least-privilege cost of a delta (docs/design.md §3 budget weights):
//! a shape-based price of new grants, with a breakdown a reviewer can read.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use agentgate_policy::model::{AccessLevel, CostWeights, Endpoint, PolicyDocument, Protocol};

/// One priced item of a delta.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CostItem {
    /// What was priced, e.g. `network[github].endpoints[0]: host wildcard *.github.com`.
    pub item: String,
    /// Its weight.
    pub weight: u32,
}

/// A cost and its breakdown.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cost {
    /// Sum of the weights.
    pub total: u32,
    /// One entry per priced item.
    pub breakdown: Vec<CostItem>,
}

impl Cost {
    fn add(&mut self, item: String, weight: u32) {
        if weight > 0 {
            self.total = self.total.saturating_add(weight);
            self.breakdown.push(CostItem { item, weight });
        }
    }
}

fn endpoint_cost(cost: &mut Cost, w: &CostWeights, at: &str, binaries: &[String], e: &Endpoint) {
    cost.add(format!("{at}: new grant {}", e.host), w.grant);
    if binaries.is_empty() {
        cost.add(format!("{at}: any binary"), w.binary_wildcard);
    } else {
        for b in binaries.iter().filter(|b| b.contains('*')) {
            cost.add(format!("{at}: binary wildcard {b}"), w.binary_wildcard);
        }
    }
    let first_label = e.host.split('.').next().unwrap_or_default();
    if first_label == "**" {
        cost.add(
            format!("{at}: recursive host wildcard {}", e.host),
            w.recursive_wildcard,
        );
    } else if first_label.contains('*') {
        cost.add(format!("{at}: host wildcard {}", e.host), w.host_wildcard);
    }
    if e.protocol == Protocol::L4 {
        cost.add(
            format!("{at}: raw L4 grant (covers every request)"),
            w.l7_to_l4,
        );
        return;
    }
    let mut paths: Vec<&str> = e.path.iter().map(String::as_str).collect();
    paths.extend(e.rules.iter().filter_map(|r| r.path.as_deref()));
    let any_path_entry = e.access.is_some() || e.rules.iter().any(|r| r.path.is_none());
    if e.path.is_none() && any_path_entry {
        cost.add(format!("{at}: any path"), w.recursive_wildcard);
    }
    for p in paths {
        if p.split('/').any(|s| s == "**") {
            cost.add(
                format!("{at}: recursive path wildcard {p}"),
                w.recursive_wildcard,
            );
        } else if p.contains('*') {
            cost.add(format!("{at}: path wildcard {p}"), w.path_wildcard);
        }
    }
    if e.protocol == Protocol::Mcp {
        mcp_cost(cost, w, at, e);
        return;
    }
    if e.protocol == Protocol::Websocket {
        websocket_cost(cost, w, at, e);
        return;
    }
    if e.access == Some(AccessLevel::Full)
        || e.rules.iter().any(|r| r.methods.iter().any(|m| m == "*"))
    {
        cost.add(format!("{at}: any method"), w.method_wildcard);
    }
}

/// The upgrade-level part of a `websocket` endpoint's price
/// (docs/policy-semantics.md §10.2): any offered subprotocol (`*`) like
/// any method, a wildcard in an origin glob like a host wildcard.
fn websocket_cost(cost: &mut Cost, w: &CostWeights, at: &str, e: &Endpoint) {
    for entry in &e.rules {
        if entry
            .subprotocols
            .as_ref()
            .is_some_and(|s| s.iter().any(|p| p == "*"))
        {
            cost.add(format!("{at}: any subprotocol"), w.method_wildcard);
        }
        for origin in entry.origins.iter().flatten().filter(|o| o.contains('*')) {
            cost.add(format!("{at}: origin wildcard {origin}"), w.host_wildcard);
        }
    }
}

/// The tool-level part of an `mcp` endpoint's price: wildcards in tool,
/// prompt and resource names, priced like the path wildcards they resemble,
/// and a bare `*` like any method.
fn mcp_cost(cost: &mut Cost, w: &CostWeights, at: &str, e: &Endpoint) {
    let calls = e
        .tools
        .iter()
        .map(|t| ("tool", t))
        .chain(e.prompts.iter().map(|p| ("prompt", p)));
    for (kind, entry) in calls {
        if entry.name == "*" {
            cost.add(format!("{at}: any {kind}"), w.method_wildcard);
        } else if entry.name.contains('*') {
            cost.add(
                format!("{at}: {kind} name wildcard {}", entry.name),
                w.path_wildcard,
            );
        }
    }
    for r in &e.resources {
        if r.uri == "**" || r.uri.split('/').any(|s| s == "**") {
            cost.add(
                format!("{at}: recursive resource wildcard {}", r.uri),
                w.recursive_wildcard,
            );
        } else if r.uri.contains('*') {
            cost.add(
                format!("{at}: resource wildcard {}", r.uri),
                w.path_wildcard,
            );
        }
    }
}

/// The endpoint without its tool-level entries: what names the server.
fn server_part(e: &Endpoint) -> Endpoint {
    Endpoint {
        tools: Vec::new(),
        deny_tools: Vec::new(),
        resources: Vec::new(),
        prompts: Vec::new(),
        ..e.clone()
    }
}

/// Two `mcp` endpoints for the same server, review marker included.
fn same_server(a: &Endpoint, b: &Endpoint) -> bool {
    a.protocol == Protocol::Mcp && b.protocol == Protocol::Mcp && server_part(a) == server_part(b)
}

/// Prices what an `mcp` endpoint gains over the same server's prior grant:
/// each new tool, prompt and resource entry (a changed entry is a new one),
/// with its wildcards, and each `denyTools` entry dropped.
fn mcp_delta_cost(cost: &mut Cost, w: &CostWeights, at: &str, prior: &Endpoint, e: &Endpoint) {
    let added = Endpoint {
        tools: e
            .tools
            .iter()
            .filter(|t| !prior.tools.contains(t))
            .cloned()
            .collect(),
        prompts: e
            .prompts
            .iter()
            .filter(|t| !prior.prompts.contains(t))
            .cloned()
            .collect(),
        resources: e
            .resources
            .iter()
            .filter(|r| !prior.resources.contains(r))
            .cloned()
            .collect(),
        ..server_part(e)
    };
    for t in &added.tools {
        cost.add(format!("{at}: new tool {}", t.name), w.grant);
    }
    for p in &added.prompts {
        cost.add(format!("{at}: new prompt {}", p.name), w.grant);
    }
    for r in &added.resources {
        cost.add(format!("{at}: new resource {}", r.uri), w.grant);
    }
    for d in prior
        .deny_tools
        .iter()
        .filter(|d| !e.deny_tools.contains(d))
    {
        cost.add(format!("{at}: denyTools entry {} removed", d.name), w.grant);
    }
    mcp_cost(cost, w, at, &added);
}

/// Prices the grants of `candidate` that `current` does not already have,
/// endpoint by endpoint (an endpoint present, unchanged, in the same-named
/// rule with the same binaries costs nothing; narrowing costs nothing).
pub fn delta_cost(current: &PolicyDocument, candidate: &PolicyDocument, w: &CostWeights) -> Cost {
    let mut cost = Cost::default();
    for rule in &candidate.network {
        let existing = current
            .network
            .iter()
            .find(|r| r.name == rule.name && r.binaries == rule.binaries);
        for (i, e) in rule.endpoints.iter().enumerate() {
            let at = format!("network[{}].endpoints[{i}]", rule.name);
            // Each credential the grant may now carry that it could not.
            let credentials = rule.credentials.iter().filter(|c| {
                existing.is_none_or(|r| !r.endpoints.contains(e) || !r.credentials.contains(c))
            });
            for c in credentials {
                cost.add(format!("{at}: carries credential {c}"), w.credential);
            }
            if existing.is_some_and(|r| r.endpoints.contains(e)) {
                continue;
            }
            // The same MCP server already granted: only the entries it
            // gains (and the denyTools entries it loses) are new authority.
            if let Some(prior) =
                existing.and_then(|r| r.endpoints.iter().find(|p| same_server(p, e)))
            {
                mcp_delta_cost(&mut cost, w, &at, prior, e);
                continue;
            }
            endpoint_cost(&mut cost, w, &at, &rule.binaries, e);
        }
    }
    let fs = [
        (
            "readOnly",
            &candidate.filesystem.read_only,
            &current.filesystem.read_only,
        ),
        (
            "readWrite",
            &candidate.filesystem.read_write,
            &current.filesystem.read_write,
        ),
    ];
    for (name, new, old) in fs {
        for p in new.iter().filter(|p| !old.contains(p)) {
            cost.add(format!("filesystem.{name}: new grant {p}"), w.grant);
        }
    }
    cost
}

/// Prices every grant of a proposal's `add` section.
pub fn grant_cost(added: &PolicyDocument, w: &CostWeights) -> Cost {
    delta_cost(&PolicyDocument::default(), added, w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentgate_policy::model::{NetworkRule, RuleEntry};

    fn endpoint(host: &str, protocol: Protocol) -> Endpoint {
        Endpoint {
            host: host.into(),
            ports: vec![443],
            protocol,
            ..Default::default()
        }
    }

    #[test]
    fn exact_is_cheaper_than_wildcards_than_l4() {
        let w = CostWeights::default();
        let mut exact = endpoint("api.github.com", Protocol::Rest);
        exact.rules = vec![RuleEntry {
            methods: vec!["GET".into()],
            path: Some("/repos/acme".into()),
            query: Default::default(),
            subprotocols: None,
            origins: None,
        }];
        let mut star = exact.clone();
        star.rules[0].path = Some("/repos/*".into());
        let mut recursive = exact.clone();
        recursive.rules[0].path = Some("/repos/**".into());
        let l4 = endpoint("api.github.com", Protocol::L4);
        let price = |e: &Endpoint| {
            let doc = PolicyDocument {
                network: vec![NetworkRule {
                    name: "r".into(),
                    binaries: vec!["/usr/bin/gh".into()],
                    endpoints: vec![e.clone()],
                    review: None,
                    ..NetworkRule::default()
                }],
                ..Default::default()
            };
            grant_cost(&doc, &w).total
        };
        assert_eq!(price(&exact), 1);
        assert_eq!(price(&star), 3);
        assert_eq!(price(&recursive), 7);
        assert_eq!(price(&l4), 9);
        // An upgrade (docs/policy-semantics.md §10.2): its path like a
        // request's, any subprotocol like any method, an origin wildcard
        // like a host wildcard; still below raw L4.
        let mut upgrade = endpoint("api.github.com", Protocol::Websocket);
        upgrade.rules = vec![RuleEntry {
            path: Some("/ws".into()),
            ..RuleEntry::default()
        }];
        assert_eq!(price(&upgrade), 1);
        upgrade.rules[0].subprotocols = Some(vec!["*".into()]);
        upgrade.rules[0].origins = Some(vec!["https://*.github.com".into()]);
        assert_eq!(price(&upgrade), 1 + w.method_wildcard + w.host_wildcard);
        assert!(price(&upgrade) < price(&l4));
    }

    #[test]
    fn a_tool_added_to_a_granted_server_costs_only_itself() {
        use agentgate_policy::model::ToolEntry;
        let w = CostWeights::default();
        let tool = |name: &str| ToolEntry {
            name: name.into(),
            ..ToolEntry::default()
        };
        let mut server = endpoint("bank.internal", Protocol::Mcp);
        server.path = Some("/mcp".into());
        server.tools = vec![tool("get_*")];
        server.deny_tools = vec![tool("update_password")];
        let doc = |e: &Endpoint| PolicyDocument {
            network: vec![NetworkRule {
                name: "bank".into(),
                binaries: vec!["/usr/bin/python3".into()],
                endpoints: vec![e.clone()],
                review: None,
                ..NetworkRule::default()
            }],
            ..Default::default()
        };
        let mut more = server.clone();
        more.tools.push(tool("send_*"));
        let c = delta_cost(&doc(&server), &doc(&more), &w);
        let items: Vec<&str> = c.breakdown.iter().map(|i| i.item.as_str()).collect();
        assert_eq!(
            items,
            [
                "network[bank].endpoints[0]: new tool send_*",
                "network[bank].endpoints[0]: tool name wildcard send_*",
            ]
        );
        assert_eq!(c.total, 1 + 2);
        // Dropping a deny entry is new authority too; narrowing is free.
        let mut undenied = server.clone();
        undenied.deny_tools.clear();
        assert_eq!(delta_cost(&doc(&server), &doc(&undenied), &w).total, 1);
        assert_eq!(delta_cost(&doc(&more), &doc(&server), &w).total, 0);
        // Another server is a new grant, priced whole.
        let mut other = more.clone();
        other.path = Some("/admin".into());
        let c = delta_cost(&doc(&server), &doc(&other), &w);
        assert!(
            c.breakdown[0].item.ends_with("new grant bank.internal"),
            "{c:?}"
        );
    }

    #[test]
    fn unchanged_endpoints_are_free() {
        let w = CostWeights::default();
        let doc = PolicyDocument {
            network: vec![NetworkRule {
                name: "r".into(),
                binaries: vec![],
                endpoints: vec![endpoint("*.example.com", Protocol::L4)],
                review: None,
                ..NetworkRule::default()
            }],
            ..Default::default()
        };
        assert_eq!(delta_cost(&doc, &doc, &w).total, 0);
        let c = grant_cost(&doc, &w);
        assert_eq!(c.total, 1 + 4 + 3 + 8);
        assert_eq!(c.breakdown.len(), 4);
    }
}
