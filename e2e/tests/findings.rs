//! Trifecta findings end to end: `agentgate scan` on the example agent, the
//! AgentScan applied with kubectl, pods refused with the witness and the
//! minimal fix, admitted once the sandbox policy severs the sink or while an
//! acceptance lasts, and admitted with a warning in warn mode.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;

use agentgate_e2e::wait::{self, Kind};
use agentgate_e2e::{AGENT_IMAGE, ControlPlane, Operator, Watched, assert_refused, repo_root};

const IMAGE: &str = AGENT_IMAGE;

/// The one line the webhook and the sandbox status give for the example agent.
const WITNESS: &str = "carries 1 unfixed trifecta finding: AG-TRIFECTA → post_comment; \
    control: fetch_issue → __llm__ → post_comment (tools.py:23); \
    data: lookup_customer → __llm__ → post_comment (tools.py:36). \
    Minimal fix: restrict tool post_comment.";

/// `agentgate scan examples/agent --image IMAGE -o yaml | kubectl apply -f -`
fn scan_and_apply(cp: &ControlPlane) {
    cp.apply_example_scan().unwrap_or_else(|e| panic!("{e}"));
}

/// Waits for the example sandbox's `FindingsClear` to be `want`.
fn findings_clear(cp: &ControlPlane, operator: &Operator, want: &str, limit: Duration) {
    cp.wait_findings_clear("agents", "issue-responder", want, limit)
        .unwrap_or_else(|last| panic!("FindingsClear {last:?}, not {want}\n{}", operator.log()));
}

/// Waits through the watch until `template` of `watched` satisfies `done`.
fn wait(
    cp: &ControlPlane,
    operator: &Operator,
    watched: Watched<'_>,
    template: &str,
    done: impl Fn(&str) -> bool + Send + Sync + 'static,
) -> String {
    cp.wait_logged(
        operator,
        watched,
        template,
        Duration::from_secs(30),
        done,
        &format!("{watched:?} {template}"),
    )
}

/// Waits for the operator's `PodRefused` Event carrying the witness line.
fn pod_refused(cp: &ControlPlane, operator: &Operator) {
    wait(
        cp,
        operator,
        Watched::List(Kind::EVENT, "agents", "reason=PodRefused"),
        "{.items[*].message}",
        |m| m.contains(WITNESS),
    );
}

/// A pod of `sandbox` (owner reference with its uid, and the label) running IMAGE.
fn owned_pod(cp: &ControlPlane, name: &str, sandbox: &str) -> String {
    let uid = cp
        .run(&[
            "get",
            "asbx",
            sandbox,
            "-n",
            "agents",
            "-o",
            "jsonpath={.metadata.uid}",
        ])
        .unwrap();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: agents\n  labels: {{agentgate.dev/sandbox: {sandbox}}}\n  ownerReferences:\n    - {{apiVersion: agentgate.dev/v1alpha1, kind: AgentSandbox, name: {sandbox}, uid: {uid}, controller: true}}\nspec:\n  containers:\n    - {{name: agent, image: \"{IMAGE}\"}}\n",
        uid = uid.trim()
    )
}

#[test]
fn pods_are_refused_with_the_witness_until_the_policy_severs_the_sink() {
    let (cp, operator, port) = ControlPlane::with_webhook(&[]).unwrap_or_else(|e| panic!("{e}"));

    // CI scans the agent and applies the AgentScan; the operator recomputes
    // the findings from the graph.
    scan_and_apply(&cp);
    let scan_name = cp
        .run(&["get", "ascan", "-o", "jsonpath={.items[0].metadata.name}"])
        .unwrap();
    wait(
        &cp,
        &operator,
        Watched::Object(Kind::SCAN, "", scan_name.trim()),
        "{.status.findings[*].sink}",
        |s| s == "post_comment",
    );

    // Enforce mode: a pod with the image is refused with the witness.
    cp.create_enforced_namespace("enforced", "enforce").unwrap();
    let refused = cp
        .kubectl(&[
            "run",
            "bot",
            "-n",
            "enforced",
            &format!("--image={IMAGE}"),
            "--restart=Never",
        ])
        .unwrap();
    assert_refused(
        refused,
        &format!("image ghcr.io/acme/triage-bot@sha256:4f1c9a7e2b6d… {WITNESS}"),
    );
    // An unpinned image is refused too, and a namespace without the label
    // is not governed.
    assert_refused(
        cp.kubectl(&[
            "run",
            "nginx",
            "-n",
            "enforced",
            "--image=nginx:1.27",
            "--restart=Never",
        ])
        .unwrap(),
        "is not pinned by digest",
    );
    cp.run(&["create", "namespace", "free"]).unwrap();
    cp.run(&[
        "run",
        "bot",
        "-n",
        "free",
        &format!("--image={IMAGE}"),
        "--restart=Never",
    ])
    .unwrap();

    // Warn mode: admitted, with the witness as a warning.
    cp.create_enforced_namespace("staging", "warn").unwrap();
    let warned = cp
        .kubectl(&[
            "run",
            "bot",
            "-n",
            "staging",
            &format!("--image={IMAGE}"),
            "--restart=Never",
        ])
        .unwrap();
    assert!(
        warned.status.success(),
        "{}",
        String::from_utf8_lossy(&warned.stderr)
    );
    let warning = String::from_utf8_lossy(&warned.stderr);
    assert!(
        warning.contains("Warning:") && warning.contains(WITNESS),
        "{warning}"
    );

    // The sandbox's own pod: every leg open, so the operator's pod is
    // refused and FindingsClear says why.
    cp.run(&["apply", "-f", "examples/agent/sandbox.yaml"])
        .unwrap();
    let message = wait(
        &cp,
        &operator,
        Watched::Object(Kind::SANDBOX, "agents", "issue-responder"),
        "{.status.conditions[?(@.type==\"FindingsClear\")].message}",
        |m| m.contains("post_comment"),
    );
    assert!(
        message.contains("Minimal fix: restrict tool post_comment."),
        "{message}"
    );
    pod_refused(&cp, &operator);
    assert!(
        cp.kubectl(&["get", "pod", "issue-responder", "-n", "agents"])
            .unwrap()
            .status
            .code()
            != Some(0)
    );

    // The runtime decision point cites the finding for an action of its sink.
    let deny = cp
        .decide(
            port,
            r#"{"sandbox":"issue-responder","namespace":"agents","binary":"/usr/local/bin/agent","host":"api.github.com","port":443,"layer":"rest","method":"POST","path":"/repos/acme/widgets/pulls"}"#,
        )
        .unwrap();
    // Stated as the proxy states a refusal (docs/proxy.md, "Refusals").
    assert_eq!(
        (&deny["decision"], &deny["allow"], &deny["code"]),
        (
            &serde_json::json!("deny"),
            &serde_json::json!(false),
            &serde_json::json!("no_rule")
        ),
        "{deny}"
    );
    assert_eq!(deny["finding"]["id"], "AG-TRIFECTA", "{deny}");
    assert_eq!(deny["finding"]["node"], "post_comment", "{deny}");
    assert!(
        deny["finding"]["witness"]
            .as_str()
            .unwrap()
            .contains("control: fetch_issue → __llm__ → post_comment"),
        "{deny}"
    );

    // This sandbox's issues come from its own team: its owner (who holds
    // the approve verb) lowers fetch_issue to trusted. No untrusted input
    // is left in this sandbox's analysis, so the operator's findings clear
    // and pod admission, reading the same relabelled graph, admits its pod.
    cp.run(&[
        "patch",
        "asbx",
        "issue-responder",
        "-n",
        "agents",
        "--type=merge",
        "-p",
        r#"{"spec":{"toolLabels":[{"tool":"fetch_issue","integrity":"trusted"}]}}"#,
    ])
    .unwrap();
    findings_clear(&cp, &operator, "True", Duration::from_secs(30));
    cp.wait_pod("agents", "issue-responder", Duration::from_secs(30))
        .unwrap_or_else(|last| panic!("no pod after relabelling ({last:?})\n{}", operator.log()));
    let total = cp
        .run(&[
            "get",
            "asbx",
            "issue-responder",
            "-n",
            "agents",
            "-o",
            "jsonpath={.status.findings.total}",
        ])
        .unwrap();
    assert_eq!(total.trim(), "0", "no finding under the sandbox's labels");
    // Taken back: the finding is open again (the running pod stays).
    cp.run(&[
        "patch",
        "asbx",
        "issue-responder",
        "-n",
        "agents",
        "--type=merge",
        "-p",
        r#"{"spec":{"toolLabels":null}}"#,
    ])
    .unwrap();
    findings_clear(&cp, &operator, "False", Duration::from_secs(30));

    // Severing the sink (no more POST) admits the sandbox's pod.
    cp.run(&["apply", "-f", "examples/agent/sandbox-severed.yaml"])
        .unwrap();
    findings_clear(&cp, &operator, "True", Duration::from_secs(30));
    cp.wait_pod("agents", "issue-responder", Duration::from_secs(30))
        .unwrap_or_else(|last| panic!("no pod ({last:?})\n{}", operator.log()));
    let record = cp
        .run(&[
            "get", "asbx", "issue-responder", "-n", "agents", "-o",
            "jsonpath={.status.findings.images[0].findings[0].state}/{.status.findings.images[0].findings[0].severedBy[0]}",
        ])
        .unwrap();
    assert_eq!(record.trim(), "Severed/post_comment");
    // The proxy's copy: findings.json beside the policy, with the regions
    // a refusal is cited by, in the format the data plane loads.
    let findings_json = cp
        .run(&[
            "get",
            "cm",
            "issue-responder-policy",
            "-n",
            "agents",
            "-o",
            "jsonpath={.data.findings\\.json}",
        ])
        .unwrap();
    let findings: Vec<agentgate_judgement::findings::FindingRegions> =
        serde_json::from_str(findings_json.trim())
            .unwrap_or_else(|e| panic!("{e}: {findings_json}"));
    assert_eq!(findings.len(), 1, "{findings_json}");
    assert_eq!(findings[0].sink, "post_comment");
    assert_eq!(
        findings[0].capabilities[0].node, "post_comment",
        "{findings_json}"
    );
    assert!(agentgate_judgement::findings::CompiledFindings::compile(&findings).is_ok());
    drop(operator);
}

#[test]
fn an_accepted_finding_is_admitted_until_it_expires() {
    let (cp, operator, _port) = ControlPlane::with_webhook(&[]).unwrap_or_else(|e| panic!("{e}"));
    // With OpenReports installed, the findings are published there too.
    cp.run(&["apply", "-f", "e2e/fixtures/openreports-crd.yaml"])
        .unwrap();
    cp.wait_object(
        Kind::CRD,
        "",
        "reports.openreports.io",
        Duration::from_secs(30),
        |crd| wait::condition_status(crd, "Established"),
        |s| s == "True",
    )
    .unwrap();
    scan_and_apply(&cp);
    // The webhook must know the scan before the sandbox's pod is judged.
    wait(
        &cp,
        &operator,
        Watched::List(Kind::SCAN, "", ""),
        "{.items[0].status.findings[*].sink}",
        |s| s == "post_comment",
    );
    let expires = time_in(25);
    let accepted = std::fs::read_to_string(repo_root().join("examples/agent/sandbox.yaml"))
        .unwrap()
        .replace("  template:", &format!(
            "  acceptedFindings:\n    - {{id: AG-TRIFECTA, sink: post_comment, reason: \"pilot, comments reviewed daily\", expires: \"{expires}\"}}\n  template:"
        ));
    cp.run_stdin(&["apply", "-f", "-"], &accepted).unwrap();
    cp.wait_pod("agents", "issue-responder", Duration::from_secs(30))
        .unwrap_or_else(|last| panic!("no pod ({last:?})\n{}", operator.log()));
    let state = cp
        .run(&[
            "get",
            "asbx",
            "issue-responder",
            "-n",
            "agents",
            "-o",
            "jsonpath={.status.findings.images[0].findings[0].state}",
        ])
        .unwrap();
    assert_eq!(state.trim(), "Accepted");
    wait(
        &cp,
        &operator,
        Watched::Object(Kind::REPORT, "agents", "agentgate-issue-responder"),
        "{.summary.skip}/{.results[0].rule}/{.results[0].result}",
        |s| s == "1/AG-TRIFECTA/post_comment/skip",
    );
    // The acceptance is lent only to the operator's own pod: mallory, who
    // can create pods and read the sandbox, copies its owner reference and
    // label and is refused, acceptance or not.
    cp.run(&[
        "create",
        "role",
        "pod-maker",
        "-n",
        "agents",
        "--verb=create,get",
        "--resource=pods",
    ])
    .unwrap();
    cp.run(&[
        "create",
        "rolebinding",
        "pod-maker",
        "-n",
        "agents",
        "--role=pod-maker",
        "--user=mallory",
    ])
    .unwrap();
    assert_refused(
        cp.kubectl_stdin(
            &["apply", "-f", "-", "--as", "mallory"],
            &owned_pod(&cp, "copycat", "issue-responder"),
        )
        .unwrap(),
        WITNESS,
    );
    // After it expires the operator re-assesses on time, and the sandbox's
    // pod, created again, is refused.
    findings_clear(&cp, &operator, "False", Duration::from_secs(60));
    cp.run(&[
        "delete",
        "pod",
        "issue-responder",
        "-n",
        "agents",
        "--wait=false",
    ])
    .unwrap();
    pod_refused(&cp, &operator);
    assert!(
        !cp.kubectl(&["get", "pod", "issue-responder", "-n", "agents"])
            .unwrap()
            .status
            .success()
    );
    drop(operator);
}

/// RFC 3339 UTC time `seconds` from now.
fn time_in(seconds: u64) -> String {
    let out = Command::new("date")
        .args([
            "-u",
            "-d",
            &format!("+{seconds} seconds"),
            "+%Y-%m-%dT%H:%M:%SZ",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
