//! `kubectl agentgate lineage SANDBOX`: what a sandbox's agent did in its
//! session, as its proxy observed it (docs/proxy.md, "Lineage"): where
//! each argument value of its tool calls came from, and the last
//! refusals with the finding each cites. Read from the proxy's `/lineage`
//! through the API server's pod proxy (`pods/proxy` in the sandbox's
//! namespace), so it needs no route to the pod.

use std::fmt::Write as _;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde_json::Value;

use agentgate_api::crd::SANDBOX_LABEL;
use agentgate_governance::sandbox_pod::ADMIN_PORT;

/// How the lineage is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LineageFormat {
    /// Flows, labelled nodes and the last refusals, for people.
    Text,
    /// The proxy's whole answer, as JSON.
    Json,
    /// Only the observed graph, in the AgentScan graph schema.
    Graph,
}

/// Reads the lineage of every running Pod of `sandbox` and prints it.
pub async fn lineage(
    client: &Client,
    namespace: &str,
    sandbox: &str,
    format: LineageFormat,
) -> anyhow::Result<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let listed = pods
        .list(&ListParams::default().labels(&format!("{SANDBOX_LABEL}={sandbox}")))
        .await
        .with_context(|| format!("listing the Pods of agentsandbox {namespace}/{sandbox}"))?;
    let running: Vec<&Pod> = listed
        .items
        .iter()
        .filter(|p| {
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                && p.metadata.deletion_timestamp.is_none()
        })
        .collect();
    if running.is_empty() {
        anyhow::bail!(
            "agentsandbox {namespace}/{sandbox} has no running Pod ({} listed): its proxy holds the session's lineage only while it runs",
            listed.items.len()
        );
    }
    let mut out = String::new();
    for pod in running {
        let name = pod.name_any();
        let path = format!("/api/v1/namespaces/{namespace}/pods/{name}:{ADMIN_PORT}/proxy/lineage");
        let request = http::Request::get(&path)
            .body(Vec::new())
            .context("building the request")?;
        let text = client.request_text(request).await.with_context(|| {
            format!("reading the lineage of pod {namespace}/{name} (GET {path})")
        })?;
        let report: Value = serde_json::from_str(&text)
            .with_context(|| format!("pod {namespace}/{name} answered no lineage: {text}"))?;
        match format {
            LineageFormat::Json => {
                out.push_str(&serde_json::to_string_pretty(&report)?);
                out.push('\n');
            }
            LineageFormat::Graph => {
                out.push_str(&serde_json::to_string_pretty(&report["graph"])?);
                out.push('\n');
            }
            LineageFormat::Text => out.push_str(&render(namespace, &name, &report)),
        }
    }
    Ok(out)
}

/// A string field, control characters escaped: argument names, tool names
/// and reasons come from the agent, and must not drive the terminal.
fn text(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or("")
        .chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

/// The lineage of one Pod for people: a header, the flows, the labelled
/// nodes and the last refusals.
pub fn render(namespace: &str, pod: &str, report: &Value) -> String {
    let mut out = String::new();
    let record = &report["record"];
    let _ = writeln!(
        out,
        "pod {namespace}/{pod}: record {} bytes{}",
        record["bytes"].as_u64().unwrap_or(0),
        if record["evicted"].as_bool() == Some(true) {
            " (content dropped or unread: doubt refuses)"
        } else {
            ""
        }
    );
    let flows = report["flows"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if flows.is_empty() {
        out.push_str("flows: none observed\n");
    } else {
        out.push_str("flows (value seen in -> tool argument, allowed calls):\n");
        let width = flows
            .iter()
            .map(|f| text(f, "from").len())
            .max()
            .unwrap_or(0);
        for flow in flows {
            let _ = writeln!(
                out,
                "  {:width$} -> {}{}  x{}",
                text(flow, "from"),
                text(flow, "to"),
                text(flow, "argument"),
                flow["calls"].as_u64().unwrap_or(0),
            );
        }
    }
    let nodes = report["graph"]["nodes"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let labelled: Vec<String> = nodes
        .iter()
        .filter_map(|n| {
            let mut marks = Vec::new();
            if n["label"]["integrity"] == "untrusted" {
                marks.push("untrusted");
            }
            if n["label"]["confidentiality"] == "secret" {
                marks.push("secret");
            }
            if n["capabilities"].is_array() {
                marks.push("sink");
            }
            (!marks.is_empty()).then(|| format!("{} ({})", text(n, "id"), marks.join(", ")))
        })
        .collect();
    if !labelled.is_empty() {
        let _ = writeln!(out, "labels: {}", labelled.join("; "));
    }
    let dropped = &report["dropped"];
    let (flows_dropped, nodes_dropped) = (
        dropped["flows"].as_u64().unwrap_or(0),
        dropped["nodes"].as_u64().unwrap_or(0),
    );
    if flows_dropped + nodes_dropped > 0 {
        let _ = writeln!(
            out,
            "not shown: {flows_dropped} flows and {nodes_dropped} nodes past the bounds"
        );
    }
    let refusals = report["refusals"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if refusals.is_empty() {
        out.push_str("refusals: none\n");
    } else {
        out.push_str("last refusals (newest last):\n");
        for r in refusals {
            let _ = writeln!(
                out,
                "  {} {} {} {}: {}",
                text(r, "at"),
                text(r, "decision"),
                text(r, "stage"),
                text(r, "code"),
                text(r, "reason"),
            );
            if let Some(finding) = r["finding"].as_object() {
                let finding = Value::Object(finding.clone());
                let _ = writeln!(
                    out,
                    "      finding {}: {}",
                    text(&finding, "id"),
                    text(&finding, "witness")
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_text_shows_flows_labels_and_refusals_with_their_finding() {
        let report = json!({
            "graph": {"nodes": [
                {"id": "__llm__", "kind": "llm"},
                {"id": "read_email", "kind": "tool", "label": {"integrity": "untrusted", "confidentiality": "public"}},
                {"id": "send_money", "kind": "tool", "label": {"integrity": "trusted", "confidentiality": "public"},
                 "capabilities": [{"effect": "egress", "channel": "http"}]},
            ], "edges": []},
            "flows": [
                {"from": "__user__", "to": "send_money", "argument": "/recipient", "calls": 2},
                {"from": "read_email", "to": "send_money", "argument": "/amount", "calls": 1},
            ],
            "refusals": [{"at": "2026-12-04T00:00:00Z", "decision": "deny", "stage": "mcp",
                "code": "runtime_trifecta", "reason": "tools/call send_money {\"recipient\":\"…\"}: …\u{1b}[2J",
                "finding": {"id": "AG-TRIFECTA", "witness": "read_email -> __llm__ -> send_money"}}],
            "record": {"bytes": 2048, "evicted": false},
            "dropped": {"flows": 0, "nodes": 0},
        });
        let shown = render("bank", "agent", &report);
        assert_eq!(
            shown,
            "pod bank/agent: record 2048 bytes
flows (value seen in -> tool argument, allowed calls):
  __user__   -> send_money/recipient  x2
  read_email -> send_money/amount  x1
labels: read_email (untrusted); send_money (sink)
last refusals (newest last):
  2026-12-04T00:00:00Z deny mcp runtime_trifecta: tools/call send_money {\"recipient\":\"…\"}: …\\u{1b}[2J
      finding AG-TRIFECTA: read_email -> __llm__ -> send_money
"
        );
    }
}
