#![allow(clippy::expect_used, clippy::unwrap_used)] // test code: a panic is a failed test
//! PolicyProposals through the verified commit path, against a real API
//! server: applied automatically inside
//! the auto-eligible region, rejected with a counterexample outside the
//! maximum, waiting for approval in a review region and applied after an
//! Approved condition, and rejected with its reason code on an unmodelled
//! surface.

use std::time::Duration;

use agentgate_e2e::wait::Kind;
use agentgate_e2e::{ControlPlane, Operator, Watched};

const LIMIT: Duration = Duration::from_secs(60);

fn run(cp: &ControlPlane, args: &[&str]) {
    cp.run(args).expect("kubectl");
}

/// Waits through the watch until the jsonpath `path` of the proposal
/// `name` in agents satisfies `want`.
fn proposal(
    cp: &ControlPlane,
    op: &Operator,
    name: &str,
    path: &str,
    want: impl Fn(&str) -> bool + Send + Sync + 'static,
) -> String {
    wait(
        cp,
        op,
        Watched::Object(Kind::PROPOSAL, "agents", name),
        path,
        want,
    )
}

/// The same for the sandbox triage-bot.
fn sandbox(
    cp: &ControlPlane,
    op: &Operator,
    path: &str,
    want: impl Fn(&str) -> bool + Send + Sync + 'static,
) -> String {
    wait(
        cp,
        op,
        Watched::Object(Kind::SANDBOX, "agents", "triage-bot"),
        path,
        want,
    )
}

/// Waits through the watch until `path` of `watched` satisfies `want`;
/// panics with the last reading and the operator's log.
fn wait(
    cp: &ControlPlane,
    op: &Operator,
    watched: Watched<'_>,
    path: &str,
    want: impl Fn(&str) -> bool + Send + Sync + 'static,
) -> String {
    cp.wait_logged(
        op,
        watched,
        path,
        LIMIT,
        want,
        &format!("{watched:?} {path}"),
    )
}

const GRAPHQL: &str = "apiVersion: agentgate.dev/v1alpha1
kind: PolicyProposal
metadata: {name: graphql, namespace: agents}
spec:
  sandboxRef: {name: triage-bot}
  requestedBy: system:serviceaccount:agents:triage-bot
  add:
    network:
      - name: github-graphql
        binaries: [/usr/bin/gh]
        endpoints: [{host: api.github.com, ports: [443], protocol: graphql}]
";

#[test]
fn proposals_are_applied_rejected_or_wait_for_approval() {
    let cp = ControlPlane::start().expect("local control plane");
    cp.install_crds().expect("CRDs");
    run(&cp, &["create", "namespace", "agents"]);
    run(&cp, &["label", "namespace", "agents", "team=ml"]);
    let op = cp.start_operator().expect("operator");
    run(
        &cp,
        &[
            "apply",
            "-f",
            "examples/maximum.yaml",
            "-f",
            "examples/sandbox.yaml",
        ],
    );
    sandbox(&cp, &op, "{.status.revision}", |s| s == "1");

    // 1. Inside the auto-eligible region and the budget: applied.
    run(
        &cp,
        &["apply", "-f", "examples/proposals/comment-on-issues.yaml"],
    );
    proposal(&cp, &op, "comment-on-issues", "{.status.phase}", |s| {
        s == "Applied"
    });
    proposal(&cp, &op, "comment-on-issues", "{.status.verdict}", |s| {
        s == "Apply"
    });
    proposal(&cp, &op, "comment-on-issues", "{.status.cost}", |s| {
        s == "3"
    });
    sandbox(&cp, &op, "{.status.revision}", |s| s == "2");
    sandbox(&cp, &op, "{.status.appliedProposals[*].name}", |s| {
        s == "comment-on-issues"
    });
    wait(
        &cp,
        &op,
        Watched::Object(Kind::CONFIG_MAP, "agents", "triage-bot-policy"),
        "{.data.policy\\.yaml}",
        |s| s.contains("github-comment"),
    );

    wait(
        &cp,
        &op,
        Watched::List(Kind::EVENT, "agents", "reason=Applied"),
        "{.items[*].message}",
        |s| s.contains("comment-on-issues"),
    );

    // 2. Outside the maximum: rejected with a replayed counterexample.
    run(
        &cp,
        &["apply", "-f", "examples/proposals/post-anywhere.yaml"],
    );
    proposal(&cp, &op, "post-anywhere", "{.status.phase}", |s| {
        s == "Rejected"
    });
    let reason = proposal(&cp, &op, "post-anywhere", "{.status.reason}", |s| {
        !s.is_empty()
    });
    assert!(
        reason.starts_with(
            "exceeds MaximumPolicy \"org-ceiling\": POST https://api.github.com:443/repos/acme"
        ),
        "{reason}"
    );
    proposal(
        &cp,
        &op,
        "post-anywhere",
        "{.status.counterexample.method}",
        |s| s == "POST",
    );
    // Rejected is final, not Ready: Stalled with the verdict's reason.
    let stalled = "{.status.conditions[?(@.type==\"Ready\")].status} {.status.conditions[?(@.type==\"Stalled\")].message}";
    proposal(&cp, &op, "post-anywhere", stalled, |s| {
        s.starts_with("False exceeds MaximumPolicy \"org-ceiling\"")
    });

    // 3. In the review region: waits; an Approved condition applies it.
    run(
        &cp,
        &[
            "apply",
            "-f",
            "examples/proposals/update-pull-requests.yaml",
        ],
    );
    proposal(&cp, &op, "update-pull-requests", "{.status.phase}", |s| {
        s == "AwaitingApproval"
    });
    let reason = proposal(&cp, &op, "update-pull-requests", "{.status.reason}", |s| {
        !s.is_empty()
    });
    assert!(reason.contains("review-required region"), "{reason}");
    sandbox(&cp, &op, "{.status.revision}", |s| s == "2");
    run(
        &cp,
        &[
            "patch",
            "pprop",
            "update-pull-requests",
            "-n",
            "agents",
            "--subresource=status",
            "--type=json",
            "-p",
            r#"[{"op":"add","path":"/status/conditions/-","value":{"type":"Approved","status":"True","reason":"Reviewed","message":"approved by \"e2e-admin\"","observedGeneration":1,"lastTransitionTime":"2026-11-29T00:00:00Z"}}]"#,
        ],
    );
    proposal(&cp, &op, "update-pull-requests", "{.status.phase}", |s| {
        s == "Applied"
    });
    sandbox(&cp, &op, "{.status.revision}", |s| s == "3");
    sandbox(&cp, &op, "{.status.appliedProposals[*].name}", |s| {
        s == "comment-on-issues update-pull-requests"
    });

    // A reviewer's Denied condition rejects a proposal waiting for approval
    // (new authority in the review region: merging pull requests).
    let denied = std::fs::read_to_string(
        agentgate_e2e::repo_root().join("examples/proposals/update-pull-requests.yaml"),
    )
    .unwrap()
    .replace("name: update-pull-requests", "name: retitle-prs")
    .replace("name: github-pulls", "name: github-merge")
    .replace("methods: [PATCH]", "methods: [PUT]")
    .replace(
        "path: /repos/acme/*/pulls/*\n",
        "path: /repos/acme/*/pulls/*/merge\n",
    );
    assert!(denied.contains("/pulls/*/merge"), "{denied}");
    let output = cp
        .kubectl_stdin(&["apply", "-f", "-"], &denied)
        .expect("kubectl");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    proposal(&cp, &op, "retitle-prs", "{.status.phase}", |s| {
        s == "AwaitingApproval"
    });
    run(
        &cp,
        &[
            "patch",
            "pprop",
            "retitle-prs",
            "-n",
            "agents",
            "--subresource=status",
            "--type=json",
            "-p",
            r#"[{"op":"add","path":"/status/conditions/-","value":{"type":"Denied","status":"True","reason":"Reviewed","message":"no","lastTransitionTime":"2026-11-29T00:00:00Z"}}]"#,
        ],
    );
    proposal(&cp, &op, "retitle-prs", "{.status.phase}", |s| {
        s == "Rejected"
    });
    proposal(&cp, &op, "retitle-prs", "{.status.reason}", |s| {
        s == "denied by a reviewer"
    });
    sandbox(&cp, &op, "{.status.revision}", |s| s == "3");

    // 8. An unmodelled surface: rejected with its reason code, never applied.
    let output = cp
        .kubectl_stdin(&["apply", "-f", "-"], GRAPHQL)
        .expect("kubectl");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    proposal(&cp, &op, "graphql", "{.status.phase}", |s| s == "Rejected");
    let reason = proposal(&cp, &op, "graphql", "{.status.reason}", |s| !s.is_empty());
    assert!(
        reason.contains("unsupported_policy_shape") && reason.contains("protocol"),
        "{reason}"
    );
    sandbox(&cp, &op, "{.status.revision}", |s| s == "3");

    // Metrics on the plain port count what happened.
    let metrics = op.metrics().expect("metrics");
    for needle in [
        "agentgate_commits_total 2",
        "agentgate_verdicts_total{verdict=\"apply\"}",
        "agentgate_verdicts_total{verdict=\"reject\"}",
        "agentgate_verdicts_total{verdict=\"ask\"}",
        "agentgate_reconciles_total{kind=\"policyproposal\"}",
        "agentgate_solver_seconds_count",
    ] {
        assert!(
            metrics.contains(needle),
            "{needle} missing from:\n{metrics}"
        );
    }

    // The commits are the only writers of revision: exactly one per commit.
    let revision = sandbox(&cp, &op, "{.status.revision}", |_| true);
    assert_eq!(revision, "3");
}
