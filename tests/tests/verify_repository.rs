//! `agentgate verify PATH...` as CI runs it: a rendered stream on stdin,
//! directories, namespace labels from the input or a file, and each output
//! format read back by what consumes it (JSON, JUnit XML parsed as XML,
//! SARIF validated in sarif.rs). Runs the real binary (`make test` builds it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("agentgate");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p agentgate` first (make test does)",
        bin.display()
    );
    bin
}

/// Runs `agentgate verify ARGS` with `stdin`; returns (exit code, stdout, stderr).
fn verify(args: &[&str], stdin: &str) -> (i32, String, String) {
    let mut child = Command::new(binary())
        .arg("verify")
        .args(args)
        .current_dir(repo_root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn example(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap()
}

/// A rendered stream as `kustomize build` prints it: documents separated by
/// `---`, the ceiling, the namespaces and a sandbox.
fn stream(sandbox: &str) -> String {
    format!(
        "{}---\n{}---\n{}",
        example("examples/maximum.yaml"),
        example("examples/gitops/namespaces.yaml"),
        sandbox
    )
}

#[test]
fn a_rendered_stream_on_stdin_holds_or_exceeds() {
    let input = stream(&example("examples/sandbox.yaml"));
    let line_of = |text: &str, needle: &str| {
        // The last occurrence: the sandbox comes after the ceiling.
        text.lines()
            .collect::<Vec<_>>()
            .iter()
            .rposition(|l| *l == needle)
            .unwrap()
            + 1
    };
    let (code, out, err) = verify(&["-"], &input);
    assert_eq!(code, 0, "{out}{err}");
    // The object's line is its first (after its leading comment).
    let first = line_of(&input, "  name: triage-bot") - 3;
    let expected = format!(
        "-:{first}: AgentSandbox agents/triage-bot holds: within MaximumPolicy \"org-ceiling\""
    );
    assert!(out.contains(&expected), "{out}");
    assert!(out.contains("2 objects: 2 hold"), "{out}");

    let input = stream(&example("examples/sandbox-outside.yaml"));
    let (code, out, err) = verify(&["-"], &input);
    assert_eq!(code, 1, "{out}{err}");
    // The line is the rule that grants the counterexample.
    let rule = line_of(&input, "      - name: github");
    assert!(out.contains(&format!("-:{rule}: AgentSandbox agents/reckless-bot exceeds: exceeds MaximumPolicy \"org-ceiling\": POST https://api.github.com:443/repos/acme")), "{out}");
}

#[test]
fn json_names_every_object_with_its_line_and_counterexample() {
    let (code, out, _) = verify(
        &[
            "-o",
            "json",
            "examples/maximum.yaml",
            "examples/gitops/namespaces.yaml",
            "examples/sandbox-outside.yaml",
            "examples/proposals",
        ],
        "",
    );
    assert_eq!(code, 1, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["result"], "exceeds");
    assert_eq!(v["summary"]["objects"], 5);
    let objects = v["objects"].as_array().unwrap();
    let sandbox = objects
        .iter()
        .find(|o| o["kind"] == "AgentSandbox")
        .unwrap();
    assert_eq!(sandbox["file"], "examples/sandbox-outside.yaml");
    assert_eq!(sandbox["line"], 13);
    assert_eq!(sandbox["field"], "spec.policy.network[0]");
    assert_eq!(sandbox["maximum"], "org-ceiling");
    assert_eq!(sandbox["counterexample"]["method"], "POST");
    assert_eq!(sandbox["governedBy"], serde_json::json!(["org-ceiling"]));
    // Proposals against a sandbox that is not in the input are inconclusive,
    // never guessed.
    let proposal = objects
        .iter()
        .find(|o| o["name"] == "post-anywhere")
        .unwrap();
    assert_eq!(proposal["result"], "inconclusive", "{proposal}");
    assert!(
        proposal["message"]
            .as_str()
            .unwrap()
            .contains("not in the input"),
        "{proposal}"
    );
}

#[test]
fn namespace_labels_come_from_a_file_in_either_shape() {
    let dir = std::env::temp_dir().join(format!("agentgate-verify-ns-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mapping = dir.join("labels.yaml");
    std::fs::write(&mapping, "agents: {team: ml}\n").unwrap();
    let listed = dir.join("namespaces.yaml");
    std::fs::write(
        &listed,
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Namespace\n  metadata: {name: agents, labels: {team: ml}}\n",
    )
    .unwrap();
    for file in [&mapping, &listed] {
        let (code, out, err) = verify(
            &[
                "--namespace-labels",
                file.to_str().unwrap(),
                "examples/maximum.yaml",
                "examples/sandbox.yaml",
            ],
            "",
        );
        assert_eq!(code, 0, "{}: {out}{err}", file.display());
    }
    // Wrong labels: the ceiling selects nothing, the sandbox is ungoverned.
    std::fs::write(&mapping, "agents: {team: web}\n").unwrap();
    let args = [
        "--namespace-labels",
        mapping.to_str().unwrap(),
        "examples/maximum.yaml",
        "examples/sandbox.yaml",
    ];
    let (code, out, _) = verify(&args, "");
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("no MaximumPolicy governs this sandbox"),
        "{out}"
    );
    let mut allowed = args.to_vec();
    allowed.push("--allow-unmanaged");
    let (code, out, _) = verify(&allowed, "");
    assert_eq!(code, 0, "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_documents_are_all_named_with_file_line_and_field() {
    let stream = format!(
        "{}---\napiVersion: agentgate.dev/v1beta1\nkind: AgentSandbox\nmetadata: {{name: future}}\n---\n{}",
        example("tests/data/verify/bad-account.yaml"),
        example("examples/sandbox.yaml").replace("# An agent", "# A second copy: an agent"),
    );
    let stream = format!("{stream}---\n{}", example("examples/sandbox.yaml"));
    let (code, out, err) = verify(&["-"], &stream);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.is_empty(), "nothing is proved on bad input: {out}");
    for needle in [
        "-:10: spec.agentServiceAccount: invalid type: sequence, expected a string",
        "-:12: apiVersion: agentgate.dev/v1beta1 is not served by this agentgate; it reads agentgate.dev/v1alpha1",
        "metadata.name: a second AgentSandbox named \"triage-bot\" (the first is at -:",
    ] {
        assert!(err.contains(needle), "{needle:?} missing in\n{err}");
    }
    let (code, _, err) = verify(&["-"], "kind: [unclosed\n");
    assert_eq!(code, 2);
    assert!(err.contains("agentgate verify: -:"), "{err}");
    let (code, _, err) = verify(&["no/such/dir"], "");
    assert_eq!(code, 2);
    assert!(err.contains("no/such/dir"), "{err}");
}

#[test]
fn unsupported_policy_points_at_the_field() {
    let sandbox = example("examples/sandbox.yaml").replace("protocol: rest", "protocol: graphql");
    let (code, out, _) = verify(&["-"], &stream(&sandbox));
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("unsupported: not in the modelled language: spec.policy.network[0].endpoints[0].protocol"), "{out}");
    // The line is the protocol's own.
    let line = stream(&sandbox)
        .lines()
        .position(|l| l.contains("protocol: graphql"))
        .unwrap()
        + 1;
    assert!(
        out.contains(&format!(
            "-:{line}: AgentSandbox agents/triage-bot unsupported"
        )),
        "{out}"
    );
}

#[test]
fn junit_is_xml_with_one_test_case_per_object() {
    let (code, out, _) = verify(
        &[
            "-o",
            "junit",
            "examples/maximum.yaml",
            "examples/gitops/namespaces.yaml",
            "examples/sandbox.yaml",
            "examples/sandbox-outside.yaml",
        ],
        "",
    );
    assert_eq!(code, 1);
    let doc = roxmltree::Document::parse(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "testsuites");
    assert_eq!(root.attribute("tests"), Some("3"));
    assert_eq!(root.attribute("failures"), Some("1"));
    let cases: Vec<_> = root
        .descendants()
        .filter(|n| n.has_tag_name("testcase"))
        .collect();
    assert_eq!(cases.len(), 3);
    let failed = cases
        .iter()
        .find(|c| c.attribute("name") == Some("agents/reckless-bot"))
        .unwrap();
    assert_eq!(failed.attribute("classname"), Some("AgentSandbox"));
    assert_eq!(
        failed.attribute("file"),
        Some("examples/sandbox-outside.yaml")
    );
    assert_eq!(failed.attribute("line"), Some("13"));
    let failure = failed
        .children()
        .find(|n| n.has_tag_name("failure"))
        .unwrap();
    assert!(
        failure
            .attribute("message")
            .unwrap()
            .contains("exceeds MaximumPolicy \"org-ceiling\"")
    );
    assert!(
        failure
            .text()
            .unwrap()
            .contains("counterexample: POST https://api.github.com:443/repos/acme")
    );
}

#[test]
fn a_status_written_into_a_manifest_approves_nothing() {
    // Only the webhook decides who may set Approved; in a file, anyone can.
    let approved = format!(
        "{}status:\n  conditions:\n    - {{type: Approved, status: \"True\", reason: Approved, message: 'approved by \"mallory\"', lastTransitionTime: \"2026-01-01T00:00:00Z\"}}\n",
        example("examples/proposals/update-pull-requests.yaml")
    );
    let input = format!(
        "{}---\n{approved}",
        stream(&example("examples/sandbox.yaml"))
    );
    let (code, out, err) = verify(&["-"], &input);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("PolicyProposal agents/update-pull-requests ask: needs review"),
        "{out}"
    );
}

/// A sandbox granting more of a tool than its ceiling allows: every output
/// names the call, and SARIF carries it as a structured counterexample.
#[test]
fn tool_grants_are_verified_and_reported_as_calls() {
    let sandbox = "apiVersion: agentgate.dev/v1alpha1
kind: AgentSandbox
metadata: {name: payer, namespace: bank}
spec:
  agentServiceAccount: payer
  policy:
    network:
      - name: bank
        binaries: [/usr/bin/python3]
        endpoints:
          - host: bank.internal
            ports: [443]
            protocol: mcp
            path: /mcp
            tools:
              - {name: send_money, arguments: {amount: {minimum: 0, maximum: 500}}}
";
    let input = format!("{}---\n{sandbox}", example("examples/mcp/maximum.yaml"));
    let (code, out, err) = verify(&["-o", "sarif", "-"], &input);
    assert_eq!(code, 1, "{err}");
    let sarif: Value = serde_json::from_str(&out).unwrap();
    let results = sarif["runs"][0]["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "{out}");
    let message = results[0]["message"]["text"].as_str().unwrap();
    assert!(
        message.contains("exceeds MaximumPolicy \"bank-ceiling\": tools/call send_money"),
        "{message}"
    );
    let counterexample = &results[0]["properties"]["counterexample"];
    assert_eq!(counterexample["kind"], "mcp", "{counterexample}");
    assert_eq!(counterexample["name"], "send_money", "{counterexample}");
    assert!(counterexample["args"].is_object(), "{counterexample}");
    // Text output, the same call.
    let (code, text, _) = verify(&["-"], &input);
    assert_eq!(code, 1);
    assert!(text.contains("tools/call send_money"), "{text}");
}

/// Counterexamples are deterministic: the same stream gives byte-identical
/// findings (counterexamples, revocations, lines) in every fresh process,
/// whose hash seeds all differ. Eighty random pairs of a ceiling and a
/// sandbox under it (REST, `l4` and MCP endpoints, from the differential
/// tests' generators with a fixed seed), verified in five processes.
#[test]
fn counterexamples_are_the_same_in_every_process() {
    use agentgate_policy::model::PolicyDocument;
    use agentgate_policy::testing::{document, mcp_document};
    use proptest::strategy::{Strategy, ValueTree};
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let mut pairs: Vec<(PolicyDocument, PolicyDocument)> = Vec::new();
    for i in 0..80 {
        let strategy = if i % 2 == 0 {
            (document(), document()).boxed()
        } else {
            (mcp_document(), mcp_document()).boxed()
        };
        pairs.push(strategy.new_tree(&mut runner).unwrap().current());
    }
    let mut stream = String::new();
    for (i, (candidate, maximum)) in pairs.iter().enumerate() {
        let documents = [
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": format!("ns-{i}"), "labels": {"team": format!("t{i}")}}}),
            serde_json::json!({"apiVersion": "agentgate.dev/v1alpha1", "kind": "MaximumPolicy",
                "metadata": {"name": format!("ceiling-{i}")},
                "spec": {"selector": {"namespaceSelector": {"matchLabels": {"team": format!("t{i}")}}},
                         "policy": maximum}}),
            serde_json::json!({"apiVersion": "agentgate.dev/v1alpha1", "kind": "AgentSandbox",
                "metadata": {"name": format!("bot-{i}"), "namespace": format!("ns-{i}")},
                "spec": {"agentServiceAccount": "bot", "policy": candidate}}),
        ];
        for d in documents {
            stream.push_str(&serde_json::to_string_pretty(&d).unwrap());
            stream.push_str("\n---\n");
        }
    }
    let run = || {
        let (code, out, err) = verify(&["-o", "json", "-"], &stream);
        assert!(code <= 3, "{out}{err}");
        let mut findings: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        strip_timings(&mut findings);
        (code, serde_json::to_string_pretty(&findings).unwrap())
    };
    let first = run();
    let exceeds = first.1.matches("\"exceeds\"").count();
    assert!(
        exceeds >= 10,
        "the sample exercises counterexamples: {exceeds} exceed\n{}",
        first.1
    );
    for attempt in 1..5 {
        let next = run();
        assert!(
            next == first,
            "process {attempt} differs from the first:\n{}",
            first_difference(&first.1, &next.1)
        );
    }
}

/// Removes what is measured, not proved (`solverMillis`, `millis`, ...).
fn strip_timings(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.retain(|k, _| !k.to_ascii_lowercase().contains("millis"));
            map.values_mut().for_each(strip_timings);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_timings),
        _ => {}
    }
}

fn first_difference(a: &str, b: &str) -> String {
    let line = a
        .lines()
        .zip(b.lines())
        .position(|(x, y)| x != y)
        .unwrap_or(0);
    let around = |text: &str| {
        text.lines()
            .skip(line.saturating_sub(5))
            .take(12)
            .collect::<Vec<_>>()
            .join("\n")
    };
    format!("first:\n{}\nthen:\n{}", around(a), around(b))
}
