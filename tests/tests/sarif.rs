//! The scan reports against their consumers' contracts: the SARIF output
//! validates against the official SARIF 2.1.0 schema (vendored in
//! `tests/schemas/`, see its README), and the AgentScan manifest reads back
//! as the object `kubectl apply` would create, with the input graph.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentgate_trifecta::report::{
    Note, NoteLevel, ScanReport, agent_scan_manifest, sarif, scan_name,
};
use agentgate_trifecta::{Capability, Channel, Effect, Graph, Node, SourceLocation, analyze};
use serde_json::{Value, json};

const SCHEMA: &str = include_str!("../schemas/sarif-2.1.0.json");

/// The pattern of `run.language` and `toolComponent.language` in the official
/// schema has a bare `]`, which the validator's `regex` format check rejects
/// when it checks the schema against draft-07 itself. Escaping it keeps the
/// meaning it has for engines that accept it; our output sets no language.
const BAD_PATTERN: &str = r#""^[a-zA-Z]{2}|^[a-zA-Z]{2}-[a-zA-Z]{2}]?$""#;
const FIXED_PATTERN: &str = r#""^[a-zA-Z]{2}|^[a-zA-Z]{2}-[a-zA-Z]{2}\\]?$""#;

fn validator() -> jsonschema::Validator {
    assert_eq!(
        SCHEMA.matches(BAD_PATTERN).count(),
        2,
        "the vendored schema changed; revisit the pattern fix"
    );
    let schema: Value = serde_json::from_str(&SCHEMA.replace(BAD_PATTERN, FIXED_PATTERN)).unwrap();
    // The schema declares draft-07; formats (uri, date-time) are checked too,
    // since consumers such as code-scanning uploads reject bad URIs.
    jsonschema::draft7::options()
        .should_validate_formats(true)
        .build(&schema)
        .unwrap()
}

/// Every schema violation, one per line, for the assertion message.
fn violations(instance: &Value) -> Vec<String> {
    validator()
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

fn at(file: &str, line: u32) -> Option<SourceLocation> {
    SourceLocation::at(file, line)
}

/// Three sinks: a CRITICAL one (secret data, full evidence), a HIGH one
/// (internal data) and a MEDIUM one (no source line for its egress call), so
/// every shape of result is validated.
fn graph() -> Graph {
    let tool = |id: &str, effect: Effect, channel: Channel, call: Option<SourceLocation>, def| {
        Node::tool(id, vec![Capability::new(effect, channel, call)], def)
    };
    Graph::single_agent(vec![
        tool(
            "read_email",
            Effect::UntrustedInput,
            Channel::Mail,
            at("agent/tools.py", 42),
            at("agent/tools.py", 40),
        ),
        tool(
            "get_token",
            Effect::ReadsSecret,
            Channel::Env,
            at("agent/secrets.py", 3),
            at("agent/secrets.py", 1),
        ),
        tool(
            "send_email",
            Effect::Egress,
            Channel::Mail,
            at("agent/tools.py", 77),
            at("agent/tools.py", 75),
        ),
        tool("post webhook", Effect::Egress, Channel::Webhook, None, None),
    ])
}

fn notes() -> Vec<Note> {
    vec![
        Note {
            level: NoteLevel::Warning,
            message: "readOnlyHint true but body calls requests.post at agent/tools.py:12".into(),
            // A path that is not a URI as it stands.
            source: at("agent/hooks/post hook #1.py", 12),
        },
        Note {
            level: NoteLevel::Error,
            message: "cannot parse agent/broken.py".into(),
            source: None,
        },
    ]
}

fn image() -> String {
    format!("ghcr.io/acme/triage-bot@sha256:{}", "ab".repeat(32))
}

fn sarif_of(g: &Graph) -> Value {
    let findings = analyze(g).unwrap();
    assert_eq!(findings.len(), 2, "{findings:?}");
    let notes = notes();
    let image = image();
    sarif(&ScanReport {
        graph: g,
        findings: &findings,
        notes: &notes,
        image: Some(&image),
    })
}

#[test]
fn sarif_output_is_valid_sarif_2_1_0() {
    let g = graph();
    let log = sarif_of(&g);
    let errors = violations(&log);
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    let results = log["runs"][0]["results"].as_array().unwrap();
    let levels: Vec<&str> = results
        .iter()
        .map(|r| r["level"].as_str().unwrap())
        .collect();
    // post webhook (MEDIUM: no egress line), send_email (CRITICAL), two notes.
    assert_eq!(levels, ["warning", "error", "warning", "error"]);

    // A clean scan is valid too: empty results, no image.
    let clean = sarif(&ScanReport {
        graph: &Graph::default(),
        findings: &[],
        notes: &[],
        image: None,
    });
    let errors = violations(&clean);
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

/// A change that makes a SARIF log invalid.
type Mutation = fn(&mut Value);

#[test]
fn the_schema_check_rejects_invalid_sarif() {
    let g = graph();
    let good = sarif_of(&g);
    let mutations: [(&str, Mutation); 5] = [
        ("wrong version", |v| v["version"] = json!("2.0.0")),
        ("unknown top-level property", |v| v["extra"] = json!(1)),
        ("unknown level", |v| {
            v["runs"][0]["results"][0]["level"] = json!("fatal")
        }),
        ("unencoded uri", |v| {
            v["runs"][0]["results"][2]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] =
                json!("agent/hooks/post hook #1.py")
        }),
        ("line 0", |v| {
            v["runs"][0]["results"][1]["locations"][0]["physicalLocation"]["region"]["startLine"] =
                json!(0)
        }),
    ];
    for (what, mutate) in mutations {
        let mut bad = good.clone();
        mutate(&mut bad);
        assert!(!violations(&bad).is_empty(), "{what}: accepted");
    }
}

#[test]
fn the_manifest_reads_back_as_the_agent_scan_of_the_graph() {
    let g = graph();
    let findings = analyze(&g).unwrap();
    let image = image();
    let report = ScanReport {
        graph: &g,
        findings: &findings,
        notes: &[],
        image: Some(&image),
    };
    let yaml = agent_scan_manifest(&report, &scan_name(&image)).unwrap();
    let v: Value = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(v["apiVersion"], "agentgate.dev/v1alpha1");
    assert_eq!(v["kind"], "AgentScan");
    assert_eq!(v["metadata"], json!({"name": "triage-bot-abababababab"}));
    assert_eq!(v["spec"]["image"], image.as_str());
    // The operator recomputes findings; the manifest must not carry any.
    assert_eq!(
        v["spec"].as_object().unwrap().keys().collect::<Vec<_>>(),
        ["image", "graph"]
    );
    assert_eq!(
        v.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["apiVersion", "kind", "metadata", "spec"]
    );
    assert!(!yaml.contains("findings"));
    let back: Graph = serde_json::from_value(v["spec"]["graph"].clone()).unwrap();
    assert_eq!(back, g);
}

/// `agentgate verify -o sarif`: one result per object that does not hold,
/// at its manifest's file and line, valid against the official schema.
#[test]
fn verify_sarif_is_valid_and_located_at_the_manifest() {
    use agentgate::cli::manifests::parse_stream;
    use agentgate::cli::verify::report::{Summary, sarif as verify_sarif};
    use agentgate::cli::verify::repository::{Context, classify, judge_all};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut manifests = Vec::new();
    for file in [
        "examples/maximum.yaml",
        "examples/gitops/namespaces.yaml",
        "examples/sandbox.yaml",
        "examples/sandbox-outside.yaml",
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        manifests.extend(parse_stream(file, &text).unwrap());
    }
    let graphql = std::fs::read_to_string(root.join("examples/sandbox.yaml"))
        .unwrap()
        .replace("protocol: rest", "protocol: graphql")
        .replace("triage-bot", "graphql-bot");
    manifests.extend(parse_stream("-", &graphql).unwrap());
    let repo = classify(manifests, "default").unwrap_or_else(|bad| panic!("{bad:?}"));
    let prover = agentgate_prover::Prover::new(Default::default());
    let findings = judge_all(&repo, &Context::default(), &prover);
    let log = verify_sarif(&Summary {
        findings: &findings,
        ignored: 0,
        millis: 1.0,
    });
    let problems = violations(&log);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let results = log["runs"][0]["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{log:#}");
    let exceeds = &results[0];
    assert_eq!(exceeds["ruleId"], "AG-EXCEEDS");
    let physical = &exceeds["locations"][0]["physicalLocation"];
    assert_eq!(
        physical["artifactLocation"]["uri"],
        "examples/sandbox-outside.yaml"
    );
    assert_eq!(physical["region"]["startLine"], 13);
    assert_eq!(
        exceeds["properties"]["counterexample"]["path"],
        "/repos/acme"
    );
    // From stdin: a logical location only.
    let unsupported = &results[1];
    assert_eq!(unsupported["ruleId"], "AG-UNSUPPORTED");
    assert!(
        unsupported["locations"][0]
            .get("physicalLocation")
            .is_none()
    );
    assert_eq!(
        unsupported["locations"][0]["logicalLocations"][0]["fullyQualifiedName"],
        "AgentSandbox agents/graphql-bot"
    );
}
