//! Scanner corpus: one directory per tool convention and language under
//! `tests/corpus/`, each with realistic agent code and an `expected.yaml`
//! listing per tool the effects and channels (and literal host) the scanner
//! must find, the expected diagnostics and manifest effects, and the
//! lethal-trifecta findings the analysis must report on the scanned graph
//! (sink, control and data witness paths, minimum cut).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use agentgate_trifecta::analysis::analyze;
use agentgate_trifecta::graph::{EdgeKind, Effect, LLM, NodeKind};
use agentgate_trifecta::scan::{Scan, scan_path};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Expected {
    tools: BTreeMap<String, Vec<ExpectedCapability>>,
    /// Substrings of the expected diagnostics, one per diagnostic.
    #[serde(default)]
    diagnostics: Vec<String>,
    /// Sub-agent model node → its tools.
    #[serde(default)]
    agents: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    load_bearing: Vec<String>,
    #[serde(default)]
    declassifiers: BTreeMap<String, Vec<String>>,
    /// What `analyze` must report, in order; empty for a benign agent.
    findings: Vec<ExpectedFinding>,
}

/// A finding as node-id lists, easy to read and compare.
#[derive(Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct ExpectedFinding {
    sink: String,
    severity: String,
    control: Vec<String>,
    data: Vec<String>,
    cut: Vec<String>,
}

#[derive(Debug, Deserialize, PartialEq, Eq, PartialOrd, Ord, Clone)]
#[serde(deny_unknown_fields)]
struct ExpectedCapability {
    effect: String,
    channel: String,
    #[serde(default)]
    host: Option<String>,
}

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

fn cases() -> Vec<PathBuf> {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(corpus())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("expected.yaml").is_file())
        .collect();
    cases.sort();
    cases
}

fn effect_name(e: Effect) -> String {
    serde_json::to_value(e)
        .unwrap()
        .as_str()
        .unwrap()
        .to_string()
}

/// What the scan found, in the shape of `expected.yaml`.
fn found(scan: &Scan) -> BTreeMap<String, BTreeSet<ExpectedCapability>> {
    scan.graph
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Tool)
        .map(|n| {
            let caps = n
                .capabilities
                .iter()
                .map(|c| ExpectedCapability {
                    effect: effect_name(c.effect),
                    channel: c.channel.to_string(),
                    host: c.destination.as_ref().and_then(|d| d.host.clone()),
                })
                .collect();
            (n.id.clone(), caps)
        })
        .collect()
}

fn check(case: &Path) -> Result<(), String> {
    let name = case.file_name().unwrap().to_string_lossy().into_owned();
    let expected: Expected =
        serde_saphyr::from_str(&std::fs::read_to_string(case.join("expected.yaml")).unwrap())
            .map_err(|e| format!("{name}/expected.yaml: {e}"))?;
    let scan = scan_path(case).map_err(|e| format!("{name}: scan failed: {e}"))?;
    let graph = &scan.graph;
    graph.indexed().map_err(|e| format!("{name}: {e}"))?;

    let want: BTreeMap<String, BTreeSet<ExpectedCapability>> = expected
        .tools
        .iter()
        .map(|(k, v)| (k.clone(), v.iter().cloned().collect()))
        .collect();
    let got = found(&scan);
    if got != want {
        return Err(format!(
            "{name}: capabilities differ\n  want: {want:?}\n  got:  {got:?}\n  graph: {}",
            serde_json::to_string_pretty(graph).unwrap()
        ));
    }
    // Every capability carries its call and source line.
    for node in &graph.nodes {
        for c in &node.capabilities {
            if node
                .source
                .as_ref()
                .is_some_and(|s| s.file.ends_with(".yaml"))
            {
                continue;
            }
            let from_manifest = c.call.is_none() && c.source.is_none();
            if !from_manifest && (c.call.is_none() || c.source.is_none()) {
                return Err(format!(
                    "{name}: {} has a capability without call/source: {c:?}",
                    node.id
                ));
            }
            if let Some(s) = &c.source
                && (s.file.contains('\\') || s.file.starts_with('/'))
            {
                return Err(format!("{name}: source path not relative: {s}"));
            }
        }
    }

    let mut messages: Vec<&str> = scan
        .diagnostics
        .iter()
        .map(|d| d.message.as_str())
        .collect();
    messages.sort();
    if messages.len() != expected.diagnostics.len()
        || !expected
            .diagnostics
            .iter()
            .all(|want| messages.iter().any(|m| m.contains(want.as_str())))
    {
        return Err(format!(
            "{name}: diagnostics differ\n  want: {:?}\n  got:  {messages:?}",
            expected.diagnostics
        ));
    }

    let has_edge = |from: &str, to: &str, kind: EdgeKind| {
        graph
            .edges
            .iter()
            .any(|e| e.from == from && e.to == to && e.kind == kind)
    };
    let mut owned = BTreeSet::new();
    for (llm, tools) in &expected.agents {
        if !(has_edge(LLM, llm, EdgeKind::Control) && has_edge(llm, LLM, EdgeKind::Data)) {
            return Err(format!("{name}: no delegation edges for {llm}"));
        }
        for t in tools {
            owned.insert(t.clone());
            if !(has_edge(t, llm, EdgeKind::Data) && has_edge(llm, t, EdgeKind::Control)) {
                return Err(format!("{name}: {t} is not attached to {llm}"));
            }
        }
    }
    for t in expected.tools.keys().filter(|t| !owned.contains(*t)) {
        for (from, to, kind) in [
            (t.as_str(), LLM, EdgeKind::Data),
            (LLM, t.as_str(), EdgeKind::Control),
            (LLM, t.as_str(), EdgeKind::Data),
        ] {
            if !has_edge(from, to, kind) {
                return Err(format!("{name}: missing edge {from} -> {to} ({kind:?})"));
            }
        }
    }
    for node in &graph.nodes {
        let want_lb = expected.load_bearing.contains(&node.id);
        if node.load_bearing != want_lb {
            return Err(format!(
                "{name}: {} loadBearing is {}",
                node.id, node.load_bearing
            ));
        }
        let want_dc: Vec<String> = expected
            .declassifiers
            .get(&node.id)
            .cloned()
            .unwrap_or_default();
        let got_dc: Vec<String> = node.declassifies.iter().map(|c| c.to_string()).collect();
        if got_dc != want_dc {
            return Err(format!("{name}: {} declassifies {got_dc:?}", node.id));
        }
    }

    let findings: Vec<ExpectedFinding> = analyze(graph)
        .map_err(|e| format!("{name}: analysis failed: {e}"))?
        .iter()
        .map(|f| ExpectedFinding {
            sink: f.sink.clone(),
            severity: f.severity.to_string(),
            control: f.control.nodes().iter().map(|s| s.to_string()).collect(),
            data: f.data.nodes().iter().map(|s| s.to_string()).collect(),
            cut: f.cut.clone(),
        })
        .collect();
    if findings != expected.findings {
        return Err(format!(
            "{name}: findings differ\n  want: {:?}\n  got:  {findings:?}",
            expected.findings
        ));
    }
    // Deterministic: a second scan is identical.
    if scan_path(case).map_err(|e| e.to_string())?.graph != scan.graph {
        return Err(format!("{name}: second scan differs"));
    }
    Ok(())
}

#[test]
fn corpus_cases_match_expectations() {
    let cases = cases();
    assert!(cases.len() >= 15, "corpus went missing: {cases:?}");
    let failures: Vec<String> = cases.iter().filter_map(|c| check(c).err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_convention_has_a_case() {
    let names: BTreeSet<String> = cases()
        .iter()
        .map(|c| c.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for want in [
        "langchain_tool",
        "langchain_basetool",
        "mcp_fastmcp",
        "mcp_lowlevel_python",
        "openai_agents",
        "crewai",
        "ts_mcp_tool",
        "ts_mcp_register_tool",
        "ts_mcp_request_handler",
        "manifest_delegation",
        "helper_hop_python",
        "helper_hop_ts",
        "benign_read_only",
        "benign_egress_no_secrets",
        "benign_secrets_no_untrusted",
    ] {
        assert!(names.contains(want), "missing corpus case {want}");
    }
}
