//! The reports of a scan (docs/design.md §7): JSON for programs, SARIF 2.1.0 for
//! code-scanning UIs (witness paths as code flows with file:line), the
//! AgentScan manifest that CI pipes into `kubectl apply -f -`, and plain
//! text for terminals. Pure: every function renders what it is given.

use std::fmt::Write as _;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::analysis::{Finding, Hop, Severity, TRIFECTA_ID, Witness};
use super::graph::{Confidentiality, Graph, NodeKind, SourceLocation};
use crate::image::image_digest;

/// The SARIF rule id of scanner notes (annotation mismatches and other
/// diagnostics about the agent's source).
pub const ANNOTATION_ID: &str = "AG-ANNOTATION";

/// The SARIF schema URI written into every SARIF report.
pub const SARIF_SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";

/// The `uriBaseId` of every artifact location: paths in the graph are
/// relative to the scanned directory, which only the consumer knows.
const SRCROOT: &str = "%SRCROOT%";

/// How serious a scanner note is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum NoteLevel {
    /// Something looks wrong but the graph is still sound (e.g. an
    /// annotation that contradicts the tool body).
    Warning,
    /// Part of the source could not be analysed, so the graph may miss
    /// nodes or edges.
    Error,
}

impl NoteLevel {
    /// `warning` or `error`, as in SARIF and the JSON report.
    pub fn as_str(self) -> &'static str {
        match self {
            NoteLevel::Warning => "warning",
            NoteLevel::Error => "error",
        }
    }
}

/// A scanner diagnostic that is not a finding, e.g. "readOnlyHint true but
/// body calls requests.post at tools.py:12".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Note {
    /// Warning or error.
    pub level: NoteLevel,
    /// One sentence for a person.
    pub message: String,
    /// Where in the agent's source, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceLocation>,
}

impl std::fmt::Display for Note {
    /// `file:line: warning: message`, as compilers print diagnostics.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.source {
            Some(s) => write!(f, "{s}: {}: {}", self.level.as_str(), self.message),
            None => write!(f, "{}: {}", self.level.as_str(), self.message),
        }
    }
}

/// Everything one scan produced, borrowed for rendering.
#[derive(Debug, Clone, Copy)]
pub struct ScanReport<'a> {
    /// The information-flow graph.
    pub graph: &'a Graph,
    /// The findings `analyze` computed from `graph`.
    pub findings: &'a [Finding],
    /// Scanner diagnostics.
    pub notes: &'a [Note],
    /// The scanned image reference, when the scan was given one.
    pub image: Option<&'a str>,
}

impl ScanReport<'_> {
    /// The number of tool nodes (the model and sub-agents are not tools).
    pub fn tools(&self) -> usize {
        self.graph
            .nodes
            .iter()
            .filter(|n| n.kind == NodeKind::Tool)
            .count()
    }

    fn count(&self, severity: Severity) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == severity)
            .count()
    }
}

/// Why a report cannot be rendered.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// An AgentScan needs an image, and the scan was given none.
    #[error("an AgentScan needs the scanned image: pass --image <name>@sha256:<64 hex digits>")]
    MissingImage,
    /// The image is not pinned by digest, so the scan could describe
    /// whatever the tag points to later.
    #[error(
        "image {image:?} is not pinned by digest; an AgentScan needs <name>@sha256:<64 hex digits> (e.g. from `docker inspect --format '{{{{index .RepoDigests 0}}}}'`)"
    )]
    Unpinned {
        /// The image as given.
        image: String,
    },
    /// The name is not a valid Kubernetes object name.
    #[error(
        "AgentScan name {name:?} is not a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters)"
    )]
    InvalidName {
        /// The name as given.
        name: String,
    },
    /// The YAML serializer failed.
    #[error("cannot write the AgentScan as YAML: {0}")]
    Yaml(#[from] serde_saphyr::SerializeError),
}

/// Serializes a value of this module's types. They are plain derives with
/// string keys, which serde_json cannot fail on; `Null` only keeps the
/// signature total.
fn value<T: Serialize>(item: &T) -> Value {
    serde_json::to_value(item).unwrap_or(Value::Null)
}

/// The JSON report: `{image?, summary, findings, graph, notes}`. Each finding
/// is its serde form plus `message` (the one-line Display) and `fix`.
pub fn json(report: &ScanReport<'_>) -> Value {
    let mut out = Map::new();
    if let Some(image) = report.image {
        out.insert("image".into(), json!(image));
    }
    out.insert(
        "summary".into(),
        json!({
            "tools": report.tools(),
            "findings": report.findings.len(),
            "critical": report.count(Severity::Critical),
            "high": report.count(Severity::High),
            "medium": report.count(Severity::Medium),
        }),
    );
    let findings = report
        .findings
        .iter()
        .map(|f| {
            let mut item = value(f);
            if let Value::Object(fields) = &mut item {
                fields.insert("message".into(), json!(f.to_string()));
                fields.insert("fix".into(), json!(f.fix()));
            }
            item
        })
        .collect();
    out.insert("findings".into(), Value::Array(findings));
    out.insert("graph".into(), value(report.graph));
    out.insert("notes".into(), value(&report.notes));
    Value::Object(out)
}

/// The plain-text report: one line per finding with its severity and fix,
/// then one per note.
pub fn text(report: &ScanReport<'_>) -> String {
    let mut out = String::new();
    if report.findings.is_empty() {
        let tools = report.tools();
        let noun = if tools == 1 { "tool" } else { "tools" };
        // Writing to a String cannot fail. Nothing recognised is not
        // "no findings": nothing could have been found.
        if tools == 0 {
            let _ = writeln!(
                out,
                "WARNING  0 tools recognised: no finding can be reported (see the notes below for files that import an agent framework)"
            );
        } else {
            let _ = writeln!(out, "no trifecta findings in {tools} {noun}");
        }
    }
    for finding in report.findings {
        let _ = writeln!(
            out,
            "{:<8} {}",
            // Severity's Display ignores width, so pad its text.
            finding.severity.to_string(),
            finding.line_with_fix()
        );
    }
    for note in report.notes {
        let level = note.level.as_str().to_uppercase();
        match &note.source {
            Some(source) => {
                let _ = writeln!(out, "{level:<8} {source}: {}", note.message);
            }
            None => {
                let _ = writeln!(out, "{level:<8} {}", note.message);
            }
        }
    }
    out
}

/// The SARIF 2.1.0 log: one run of the `agentgate` driver with the rules
/// `AG-TRIFECTA` and `AG-ANNOTATION`, one result per finding (located at
/// the sink's egress call, with the control and data witnesses as two
/// thread flows of one code flow) and one per note.
pub fn sarif(report: &ScanReport<'_>) -> Value {
    let mut results: Vec<Value> = report
        .findings
        .iter()
        .map(|f| finding_result(report.graph, f))
        .collect();
    results.extend(report.notes.iter().map(note_result));
    let root = match report.image {
        Some(image) => format!("The scanned agent source directory (image {image})."),
        None => "The scanned agent source directory.".to_string(),
    };
    let mut run = json!({
        "tool": {
            "driver": {
                "name": "agentgate",
                "informationUri": env!("CARGO_PKG_REPOSITORY"),
                "version": env!("CARGO_PKG_VERSION"),
                "rules": [trifecta_rule(), annotation_rule()],
            }
        },
        // The scan root is a local directory whose absolute path the report
        // must not leak; consumers resolve %SRCROOT% to their checkout.
        "originalUriBaseIds": {SRCROOT: {"description": {"text": root}}},
        "results": results,
    });
    if let (Some(image), Value::Object(fields)) = (report.image, &mut run) {
        fields.insert("properties".into(), json!({"image": image}));
    }
    json!({
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [run],
    })
}

fn trifecta_rule() -> Value {
    json!({
        "id": TRIFECTA_ID,
        "name": "LethalTrifecta",
        "shortDescription": {
            "text": "Untrusted input can steer a tool that sends confidential data out."
        },
        "fullDescription": {
            "text": "The agent combines the lethal trifecta: a tool that brings in content an \
                     attacker may control (control path), a tool that reads internal or secret \
                     data (data path), and an egress tool reachable from both. A prompt \
                     injection in the untrusted content can make the model send the data out."
        },
        "help": {
            "text": "Remove one leg of the trifecta for this sink. The result message names a \
                     minimum set of tools whose restriction breaks every path (\"Minimal fix\"): \
                     deny their network actions in the AgentSandbox policy, or remove them from \
                     the agent. If the tools are load-bearing, declassify the data before it \
                     reaches the sink (a redaction step that declares `declassifies` for the \
                     sink's channel), or record an expiring risk acceptance in the sandbox's \
                     acceptedFindings."
        },
        "defaultConfiguration": {"level": "error"},
        "properties": {"tags": ["security", "prompt-injection", "data-exfiltration"]},
    })
}

fn annotation_rule() -> Value {
    json!({
        "id": ANNOTATION_ID,
        "name": "AnnotationMismatch",
        "shortDescription": {
            "text": "A tool's declared behaviour or source does not match what its body does."
        },
        "fullDescription": {
            "text": "The scanner classifies tools by the calls in their bodies, not by their \
                     names or annotations. This rule reports annotations that contradict the \
                     body (e.g. readOnlyHint on a tool that posts data) and source the scanner \
                     could not analyse."
        },
        "help": {
            "text": "Correct the annotation to match the body, or change the body. A \
                     contradicting annotation misleads reviewers and clients that trust it."
        },
        "defaultConfiguration": {"level": "warning"},
        "properties": {"tags": ["security"]},
    })
}

/// A relative path as a URI reference: SARIF's `uri` must be one, so a file
/// named `my tools.py` becomes `my%20tools.py`. ':' is encoded too, so a
/// first segment like `c:` cannot read as a scheme.
pub fn uri_reference(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for byte in path.bytes() {
        let keep = byte.is_ascii_alphanumeric()
            || matches!(
                byte,
                b'/' | b'-'
                    | b'.'
                    | b'_'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b'@'
            );
        if keep {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// A SARIF physical location for a source line, relative to %SRCROOT%.
fn physical_location(source: &SourceLocation) -> Value {
    json!({
        "artifactLocation": {"uri": uri_reference(&source.file), "uriBaseId": SRCROOT},
        // SARIF lines are 1-based like ours; 0 would be invalid.
        "region": {"startLine": source.line.max(1)},
    })
}

fn finding_result(graph: &Graph, finding: &Finding) -> Value {
    let level = match finding.severity {
        Severity::Critical | Severity::High => "error",
        Severity::Medium => "warning",
    };
    // The sink's egress call is where a reviewer acts; fall back to where the
    // sink is defined when the witness has no line for it.
    let sink_source = finding
        .control
        .path
        .last()
        .and_then(|h| h.source.as_ref())
        .or_else(|| finding.data.path.last().and_then(|h| h.source.as_ref()))
        .or_else(|| graph.node(&finding.sink).and_then(|n| n.source.as_ref()));
    let locations: Vec<Value> = sink_source
        .map(|s| json!({"physicalLocation": physical_location(s)}))
        .into_iter()
        .collect();
    json!({
        "ruleId": TRIFECTA_ID,
        "ruleIndex": 0,
        "level": level,
        "message": {"text": finding.line_with_fix()},
        "locations": locations,
        "codeFlows": [{
            "message": {"text": format!("Lethal trifecta at {}", finding.sink)},
            "threadFlows": [
                thread_flow(graph, &finding.control, "control", Role::Untrusted),
                thread_flow(graph, &finding.data, "data", data_role(graph, &finding.data)),
            ],
        }],
        "partialFingerprints": {"agentgateFinding/v1": fingerprint(finding)},
        "properties": {
            "severity": finding.severity,
            "sink": finding.sink,
            "cut": finding.cut,
        },
    })
}

/// What the first hop of a witness is.
#[derive(Clone, Copy)]
enum Role {
    Untrusted,
    Internal,
    Secret,
}

fn data_role(graph: &Graph, witness: &Witness) -> Role {
    let secret = witness
        .path
        .first()
        .and_then(|h| graph.node(&h.node))
        .is_some_and(|n| n.intrinsic_label().confidentiality == Confidentiality::Secret);
    if secret { Role::Secret } else { Role::Internal }
}

fn thread_flow(graph: &Graph, witness: &Witness, id: &str, role: Role) -> Value {
    let what = match role {
        Role::Untrusted => "untrusted input steers the sink",
        Role::Internal => "internal data reaches the sink",
        Role::Secret => "secret data reaches the sink",
    };
    let last = witness.path.len().saturating_sub(1);
    let locations: Vec<Value> = witness
        .path
        .iter()
        .enumerate()
        .map(|(position, hop)| hop_location(graph, hop, position, last, role))
        .collect();
    json!({
        "id": id,
        "message": {"text": format!("{id}: {what}")},
        "locations": locations,
    })
}

fn hop_location(graph: &Graph, hop: &Hop, position: usize, last: usize, role: Role) -> Value {
    let kind = graph.node(&hop.node).map(|n| n.kind);
    let part = if position == 0 {
        match role {
            Role::Untrusted => "untrusted input",
            Role::Internal => "internal data",
            Role::Secret => "secret data",
        }
    } else if position == last {
        "egress sink"
    } else {
        match kind {
            Some(NodeKind::Llm) => "model context",
            Some(NodeKind::Agent) => "delegated agent",
            _ => "tool",
        }
    };
    let mut location = json!({"message": {"text": format!("{} ({part})", hop.node)}});
    if let (Some(source), Value::Object(fields)) = (&hop.source, &mut location) {
        fields.insert("physicalLocation".into(), physical_location(source));
    }
    let importance = if position == 0 || position == last {
        "essential"
    } else {
        "important"
    };
    json!({
        "location": location,
        "executionOrder": position + 1,
        "importance": importance,
    })
}

/// A fingerprint that survives code moving around: the rule, the sink and
/// the witness node ids, without line numbers, so code-scanning UIs keep
/// one alert per finding across commits.
fn fingerprint(finding: &Finding) -> String {
    let mut hasher = Sha256::new();
    for part in [
        finding.id.clone(),
        finding.sink.clone(),
        finding.control.nodes().join("\u{1f}"),
        finding.data.nodes().join("\u{1f}"),
    ] {
        // Separators keep ("ab","c") and ("a","bc") apart.
        hasher.update(part.as_bytes());
        hasher.update([0u8]);
    }
    hex::encode(hasher.finalize())[..32].to_string()
}

fn note_result(note: &Note) -> Value {
    let mut result = json!({
        "ruleId": ANNOTATION_ID,
        "ruleIndex": 1,
        "level": note.level.as_str(),
        "message": {"text": note.message},
    });
    if let (Some(source), Value::Object(fields)) = (&note.source, &mut result) {
        fields.insert(
            "locations".into(),
            json!([{"physicalLocation": physical_location(source)}]),
        );
    }
    result
}

/// A stable DNS-1123 name for the AgentScan of `image`: the last path
/// segment of the repository (tag dropped), lower-cased, with every other
/// character than a letter or digit turned into '-', then '-' and the first
/// 12 hex digits of the digest, at most 63 characters. The same image always
/// gets the same name, so re-applying a scan updates it in place.
pub fn scan_name(image: &str) -> String {
    let (repository, digest) = match image.rsplit_once('@') {
        Some((repository, digest)) => (repository, Some(digest)),
        None => (image, None),
    };
    let segment = repository.rsplit('/').next().unwrap_or(repository);
    // A ':' in the last segment starts a tag (a registry port sits in an
    // earlier segment).
    let segment = segment.split(':').next().unwrap_or(segment);
    let mut base = String::with_capacity(segment.len());
    for c in segment.chars() {
        let c = if c.is_ascii_alphanumeric() {
            c.to_ascii_lowercase()
        } else {
            '-'
        };
        // One dash per run keeps `a__b` readable as `a-b`.
        if !(c == '-' && base.ends_with('-')) {
            base.push(c);
        }
    }
    let suffix = digest
        .and_then(|d| d.strip_prefix("sha256:"))
        .map(|hex| {
            hex.chars()
                .filter(|c| c.is_ascii_hexdigit())
                .take(12)
                .collect::<String>()
                .to_ascii_lowercase()
        })
        .filter(|hex| !hex.is_empty())
        .map(|hex| format!("-{hex}"))
        .unwrap_or_default();
    // Keep the digest suffix whole: it is what tells two builds apart.
    base.truncate(63 - suffix.len());
    let base = base.trim_matches('-');
    let base = if base.is_empty() { "agent" } else { base };
    format!("{base}{suffix}")
}

/// True when `name` is a DNS-1123 subdomain, which cluster-scoped object
/// names must be.
fn is_dns1123_subdomain(name: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = name.as_bytes();
    !name.is_empty()
        && name.len() <= 253
        && bytes.first().copied().is_some_and(alnum)
        && bytes.last().copied().is_some_and(alnum)
        && bytes.iter().all(|&b| alnum(b) || b == b'-' || b == b'.')
}

/// The AgentScan manifest for `kubectl apply -f -`: apiVersion, kind,
/// `metadata.name` and `spec {image, graph}`. The findings stay out: the
/// operator recomputes them from the graph and does not trust a scanner's
/// list. The image must be pinned by digest, as the admission webhook
/// requires, so the error shows up in CI rather than at apply time.
pub fn agent_scan_manifest(report: &ScanReport<'_>, name: &str) -> Result<String, ReportError> {
    let image = report.image.ok_or(ReportError::MissingImage)?;
    if image_digest(image).is_none() {
        return Err(ReportError::Unpinned {
            image: image.to_string(),
        });
    }
    if !is_dns1123_subdomain(name) {
        return Err(ReportError::InvalidName {
            name: name.to_string(),
        });
    }
    let manifest = json!({
        "apiVersion": "agentgate.dev/v1alpha1",
        "kind": "AgentScan",
        "metadata": {"name": name},
        "spec": {"image": image, "graph": value(report.graph)},
    });
    Ok(serde_saphyr::to_string(&manifest)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Effect, analyze};

    const DIGEST: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    /// The docs/design.md example: mail in, customer records, mail out.
    fn design_graph() -> Graph {
        crate::fixtures::mail_agent()
    }

    fn note() -> Note {
        Note {
            level: NoteLevel::Warning,
            message: "readOnlyHint true but body calls requests.post".into(),
            source: Some(SourceLocation {
                file: "tools.py".into(),
                line: 12,
            }),
        }
    }

    fn image() -> String {
        format!("ghcr.io/acme/Triage_Bot:v1@sha256:{DIGEST}")
    }

    #[test]
    fn json_has_summary_findings_graph_and_notes_in_order() {
        let g = design_graph();
        let findings = analyze(&g).unwrap();
        let notes = [note()];
        let image = image();
        let report = ScanReport {
            graph: &g,
            findings: &findings,
            notes: &notes,
            image: Some(&image),
        };
        let v = json(&report);
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["image", "summary", "findings", "graph", "notes"]);
        assert_eq!(
            v["summary"],
            json!({"tools": 3, "findings": 1, "critical": 0, "high": 1, "medium": 0})
        );
        let f = &v["findings"][0];
        assert_eq!(f["id"], "AG-TRIFECTA");
        assert_eq!(f["severity"], "HIGH");
        assert_eq!(f["fix"], "restrict tool send_email");
        assert_eq!(
            f["message"],
            "AG-TRIFECTA → send_email; control: read_email → __llm__ → send_email (tools.py:42); \
             data: query_customers → __llm__ → send_email (db.py:10)"
        );
        assert_eq!(f["control"]["path"][0]["source"]["line"], 42);
        let back: Graph = serde_json::from_value(v["graph"].clone()).unwrap();
        assert_eq!(back, g);
        assert_eq!(v["notes"][0]["level"], "warning");

        // Without an image the key is absent rather than null.
        let v = json(&ScanReport {
            image: None,
            ..report
        });
        assert!(v.get("image").is_none());
    }

    #[test]
    fn sarif_result_has_location_code_flows_and_fingerprint() {
        let g = design_graph();
        let findings = analyze(&g).unwrap();
        let notes = [note()];
        let report = ScanReport {
            graph: &g,
            findings: &findings,
            notes: &notes,
            image: None,
        };
        let v = sarif(&report);
        assert_eq!(v["version"], "2.1.0");
        assert_eq!(v["$schema"], SARIF_SCHEMA);
        let run = &v["runs"][0];
        let driver = &run["tool"]["driver"];
        assert_eq!(driver["name"], "agentgate");
        assert_eq!(driver["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(driver["rules"][0]["id"], TRIFECTA_ID);
        assert_eq!(driver["rules"][1]["id"], ANNOTATION_ID);
        assert!(run["originalUriBaseIds"].get(SRCROOT).is_some());

        let r = &run["results"][0];
        assert_eq!(r["ruleId"], TRIFECTA_ID);
        assert_eq!(r["level"], "error");
        assert!(
            r["message"]["text"]
                .as_str()
                .unwrap()
                .ends_with("(db.py:10). Minimal fix: restrict tool send_email.")
        );
        let physical = &r["locations"][0]["physicalLocation"];
        assert_eq!(physical["artifactLocation"]["uri"], "tools.py");
        assert_eq!(physical["artifactLocation"]["uriBaseId"], SRCROOT);
        assert_eq!(physical["region"]["startLine"], 77);

        let flows = r["codeFlows"][0]["threadFlows"].as_array().unwrap();
        assert_eq!(flows.len(), 2);
        let control = flows[0]["locations"].as_array().unwrap();
        let texts: Vec<&str> = control
            .iter()
            .map(|l| l["location"]["message"]["text"].as_str().unwrap())
            .collect();
        assert_eq!(
            texts,
            [
                "read_email (untrusted input)",
                "__llm__ (model context)",
                "send_email (egress sink)"
            ]
        );
        assert_eq!(
            control[0]["location"]["physicalLocation"]["region"]["startLine"],
            42
        );
        // The model has no source line, so only a message.
        assert!(control[1]["location"].get("physicalLocation").is_none());
        let data = flows[1]["locations"].as_array().unwrap();
        assert_eq!(
            data[0]["location"]["message"]["text"],
            "query_customers (internal data)"
        );
        assert_eq!(
            data[0]["location"]["physicalLocation"]["artifactLocation"]["uri"],
            "db.py"
        );
        assert_eq!(
            r["properties"],
            json!({"severity": "HIGH", "sink": "send_email", "cut": ["send_email"]})
        );

        // Line numbers do not enter the fingerprint; node ids do.
        let fp = r["partialFingerprints"]["agentgateFinding/v1"].clone();
        assert_eq!(fp.as_str().unwrap().len(), 32);
        let mut moved = findings.clone();
        moved[0].control.path[0].source = Some(SourceLocation {
            file: "tools.py".into(),
            line: 99,
        });
        let again = sarif(&ScanReport {
            findings: &moved,
            ..report
        });
        assert_eq!(
            again["runs"][0]["results"][0]["partialFingerprints"]["agentgateFinding/v1"],
            fp
        );
        let mut other = findings.clone();
        other[0].sink = "post_slack".into();
        assert_ne!(fingerprint(&other[0]), fingerprint(&findings[0]));

        let n = &run["results"][1];
        assert_eq!(n["ruleId"], ANNOTATION_ID);
        assert_eq!(n["level"], "warning");
        assert_eq!(
            n["locations"][0]["physicalLocation"]["region"]["startLine"],
            12
        );
    }

    #[test]
    fn sarif_medium_is_a_warning_and_secret_data_is_named() {
        let mut g = design_graph();
        g.nodes[2].capabilities[0].effect = Effect::ReadsSecret;
        for node in &mut g.nodes {
            node.source = None;
        }
        g.nodes[1].capabilities[0].source = None;
        let findings = analyze(&g).unwrap();
        assert_eq!(findings[0].severity, Severity::Medium);
        let v = sarif(&ScanReport {
            graph: &g,
            findings: &findings,
            notes: &[],
            image: None,
        });
        let r = &v["runs"][0]["results"][0];
        assert_eq!(r["level"], "warning");
        let flows = &r["codeFlows"][0]["threadFlows"];
        assert_eq!(
            flows[1]["locations"][0]["location"]["message"]["text"],
            "query_customers (secret data)"
        );
        assert!(
            flows[0]["locations"][0]["location"]
                .get("physicalLocation")
                .is_none()
        );
    }

    #[test]
    fn text_lists_findings_with_fix_then_notes() {
        let g = design_graph();
        let findings = analyze(&g).unwrap();
        let notes = [note()];
        let report = ScanReport {
            graph: &g,
            findings: &findings,
            notes: &notes,
            image: None,
        };
        assert_eq!(
            text(&report),
            "HIGH     AG-TRIFECTA → send_email; control: read_email → __llm__ → send_email \
             (tools.py:42); data: query_customers → __llm__ → send_email (db.py:10). \
             Minimal fix: restrict tool send_email.\n\
             WARNING  tools.py:12: readOnlyHint true but body calls requests.post\n"
        );
        let clean = text(&ScanReport {
            findings: &[],
            notes: &[],
            ..report
        });
        assert_eq!(clean, "no trifecta findings in 3 tools\n");
    }

    #[test]
    fn artifact_uris_are_percent_encoded() {
        assert_eq!(uri_reference("agent/tools.py"), "agent/tools.py");
        assert_eq!(uri_reference("my tools/ü#1.py"), "my%20tools/%C3%BC%231.py");
        assert_eq!(uri_reference("c:x.py"), "c%3Ax.py");
    }

    #[test]
    fn scan_names_are_stable_dns_labels() {
        assert_eq!(scan_name(&image()), "triage-bot-0123456789ab");
        assert_eq!(
            scan_name(&format!("localhost:5000/a/b/agent@sha256:{DIGEST}")),
            "agent-0123456789ab"
        );
        let long = format!("r.io/{}@sha256:{DIGEST}", "x".repeat(100));
        let name = scan_name(&long);
        assert_eq!(name.len(), 63);
        assert!(name.ends_with("-0123456789ab"));
        assert!(is_dns1123_subdomain(&name));
        assert_eq!(
            scan_name(&format!("r.io/__@sha256:{DIGEST}")),
            "agent-0123456789ab"
        );
        assert_eq!(scan_name("ghcr.io/acme/bot:latest"), "bot");
        assert!(is_dns1123_subdomain(&scan_name("x/-._@sha256:zz")));
    }

    #[test]
    fn manifest_refuses_unpinned_images_and_bad_names() {
        let g = design_graph();
        let unpinned = ScanReport {
            graph: &g,
            findings: &[],
            notes: &[],
            image: Some("ghcr.io/acme/bot:latest"),
        };
        let err = agent_scan_manifest(&unpinned, "bot").unwrap_err();
        assert!(matches!(err, ReportError::Unpinned { .. }));
        assert!(err.to_string().contains("not pinned by digest"), "{err}");
        assert!(err.to_string().contains("RepoDigests 0}}"), "{err}");
        let none = ScanReport {
            image: None,
            ..unpinned
        };
        assert!(matches!(
            agent_scan_manifest(&none, "bot"),
            Err(ReportError::MissingImage)
        ));
        let image = image();
        let pinned = ScanReport {
            image: Some(&image),
            ..unpinned
        };
        assert!(matches!(
            agent_scan_manifest(&pinned, "Bad_Name"),
            Err(ReportError::InvalidName { .. })
        ));
    }
}
