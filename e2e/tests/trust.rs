//! The ways around review and approval, each tried with the RBAC a real
//! cluster would give the attacker, each refused by the webhook, and each
//! checked where it matters: the sandbox's effective policy did not gain
//! the grant (docs/webhook.md, "Trust model").
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use agentgate_e2e::wait::{self, Kind};
use agentgate_e2e::{AGENT_IMAGE, ControlPlane, Operator, assert_refused};

const AGENT: &str = "system:serviceaccount:agents:triage-bot";
const NEIGHBOUR: &str = "system:serviceaccount:agents:helper";

fn setup() -> (ControlPlane, Operator) {
    let (cp, operator, _port) = ControlPlane::with_webhook(&[]).unwrap_or_else(|e| panic!("{e}"));
    cp.run(&["apply", "-f", "examples/sandbox.yaml"]).unwrap();
    cp.wait_revision("agents", "triage-bot", Duration::from_secs(30), |r| r >= 1)
        .unwrap_or_else(|last| panic!("never committed ({last})\n{}", operator.log()));
    (cp, operator)
}

/// `agentgate.dev` wildcards in namespace `agents`, as a careless Role gives them.
fn wildcards(cp: &ControlPlane, name: &str, subject: &str) {
    cp.grant(
        name,
        subject,
        "*",
        "agentsandboxes.agentgate.dev,agentsandboxes.agentgate.dev/status,policyproposals.agentgate.dev,policyproposals.agentgate.dev/status",
    )
    .unwrap();
}

fn effective(cp: &ControlPlane) -> String {
    cp.run(&[
        "get",
        "asbx",
        "triage-bot",
        "-n",
        "agents",
        "-o",
        "jsonpath={.status.effectivePolicy}",
    ])
    .unwrap()
}

fn as_user<'a>(args: &[&'a str], user: &'a str) -> Vec<&'a str> {
    let mut all = args.to_vec();
    all.extend(["--as", user]);
    all
}

const PULLS_RULE: &str = r#"{"name":"pulls","binaries":["/usr/bin/gh"],"endpoints":[{"host":"api.github.com","ports":[443],"protocol":"rest","path":"/repos/acme/*/pulls/**","rules":[{"methods":["PATCH"],"path":"/repos/acme/*/pulls/*"}]}]}"#;

#[test]
fn agents_cannot_write_their_authority_nor_anyone_but_the_operator_status() {
    let (cp, operator) = setup();
    // The agent and a neighbour account hold agentgate.dev wildcards in
    // their namespace (RBAC alone would let them do all of this), and the
    // agent even a cluster role on MaximumPolicies.
    wildcards(&cp, "agent-all", "--serviceaccount=agents:triage-bot");
    wildcards(&cp, "helper-all", "--serviceaccount=agents:helper");
    wildcards(&cp, "mallory-all", "--user=mallory");
    cp.grant_cluster(
        "ceilings",
        "--serviceaccount=agents:triage-bot",
        "*",
        "maximumpolicies.agentgate.dev",
    )
    .unwrap();
    let widen = format!(r#"[{{"op":"add","path":"/spec/policy/network/-","value":{PULLS_RULE}}}]"#);

    // 1. The agent edits its own sandbox, deletes it, or a neighbour does.
    for who in [AGENT, NEIGHBOUR] {
        let patch = as_user(
            &[
                "patch",
                "asbx",
                "triage-bot",
                "-n",
                "agents",
                "--type=json",
                "-p",
                &widen,
            ],
            who,
        );
        assert_refused(cp.kubectl(&patch).unwrap(), "file a PolicyProposal");
    }
    assert_refused(
        cp.kubectl(&as_user(
            &["delete", "asbx", "triage-bot", "-n", "agents"],
            AGENT,
        ))
        .unwrap(),
        "may not write the sandbox that governs it",
    );
    assert_refused(
        cp.kubectl(&as_user(&["delete", "maxpol", "org-ceiling"], AGENT))
            .unwrap(),
        "agents never write sandboxes or MaximumPolicies",
    );

    // 2. Status is the operator's: a proposal awaiting approval listed in
    // appliedProposals, findings forged "Severed", a proposal marked Applied.
    cp.run(&[
        "create",
        "-f",
        "examples/proposals/update-pull-requests.yaml",
        "--as",
        AGENT,
    ])
    .unwrap();
    cp.wait_proposal_phase(
        "agents",
        "update-pull-requests",
        "AwaitingApproval",
        Duration::from_secs(30),
    )
    .unwrap_or_else(|last| panic!("phase {last}\n{}", operator.log()));
    let uid = cp
        .run(&[
            "get",
            "pprop",
            "update-pull-requests",
            "-n",
            "agents",
            "-o",
            "jsonpath={.metadata.uid}",
        ])
        .unwrap();
    let forged_record = format!(
        r#"{{"status":{{"appliedProposals":[{{"name":"update-pull-requests","uid":"{uid}","changeHash":"sha256:x","decidedBy":"auto"}}],"findings":{{"total":1,"unfixed":0}}}}}}"#
    );
    for who in ["mallory", AGENT] {
        let patch = as_user(
            &[
                "patch",
                "asbx",
                "triage-bot",
                "-n",
                "agents",
                "--subresource=status",
                "--type=merge",
                "-p",
                &forged_record,
            ],
            who,
        );
        assert_refused(
            cp.kubectl(&patch).unwrap(),
            "only the agentgate operator writes status",
        );
    }
    let forged_phase = as_user(
        &[
            "patch",
            "pprop",
            "update-pull-requests",
            "-n",
            "agents",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"phase":"Applied","verdict":"Apply"}}"#,
        ],
        "mallory",
    );
    assert_refused(
        cp.kubectl(&forged_phase).unwrap(),
        "only the agentgate operator writes the status",
    );

    // 6. A pending proposal is not rewritten: its resourceVersion holds for 30 s.
    let version = || {
        cp.run(&[
            "get",
            "pprop",
            "update-pull-requests",
            "-n",
            "agents",
            "-o",
            "jsonpath={.metadata.resourceVersion}",
        ])
        .unwrap()
    };
    let before = version();
    std::thread::sleep(Duration::from_secs(30));
    assert_eq!(
        version(),
        before,
        "a pending proposal was rewritten\n{}",
        operator.log()
    );
    // None of it reached the effective policy.
    let policy = effective(&cp);
    assert!(!policy.contains("pulls"), "{policy}");
    drop(operator);
}

#[test]
fn commits_are_bound_to_what_was_decided_and_four_eyes_hold() {
    let (cp, operator) = setup();
    cp.grant(
        "agent-proposes",
        "--serviceaccount=agents:triage-bot",
        "get,list,create,delete",
        "policyproposals.agentgate.dev",
    )
    .unwrap();
    for reviewer in ["alice", "carol"] {
        cp.run(&[
            "create",
            "rolebinding",
            &format!("{reviewer}-reviews"),
            "-n",
            "agents",
            "--clusterrole=agentgate-reviewer-base",
            &format!("--user={reviewer}"),
        ])
        .unwrap();
    }
    cp.grant(
        "alice-proposes",
        "--user=alice",
        "create",
        "policyproposals.agentgate.dev",
    )
    .unwrap();
    let create = |file: &str, who: &str| {
        cp.run(&["create", "-f", file, "--as", who]).unwrap();
    };
    let phase = |name: &str, want: &str| {
        cp.wait_proposal_phase("agents", name, want, Duration::from_secs(30))
            .unwrap_or_else(|last| panic!("{name}: phase {last}\n{}", operator.log()));
    };
    let wait_effective = |want: bool, needle: &'static str| {
        cp.wait_object(
            Kind::SANDBOX,
            "agents",
            "triage-bot",
            Duration::from_secs(30),
            |sandbox| wait::at(sandbox, &["status", "effectivePolicy"]),
            move |policy| policy.contains(needle) == want,
        )
        .unwrap_or_else(|last| {
            panic!(
                "effective policy never {} {needle}: {last}\n{}",
                if want { "gained" } else { "lost" },
                operator.log()
            )
        });
    };

    // An auto-applied proposal, then deleted: its grant leaves.
    create("examples/proposals/comment-on-issues.yaml", AGENT);
    phase("comment-on-issues", "Applied");
    wait_effective(true, "github-comment");
    let record = cp
        .run(&[
            "get",
            "asbx",
            "triage-bot",
            "-n",
            "agents",
            "-o",
            "jsonpath={.status.appliedProposals[0].decidedBy} {.status.appliedProposals[0].changeHash}",
        ])
        .unwrap();
    assert!(record.starts_with("auto sha256:"), "{record}");
    cp.run(&[
        "delete",
        "pprop",
        "comment-on-issues",
        "-n",
        "agents",
        "--as",
        AGENT,
    ])
    .unwrap();
    wait_effective(false, "github-comment");

    // 3. The same name again, now asking for the review region: it waits,
    // and the old record lends it nothing.
    let reused = std::fs::read_to_string(
        agentgate_e2e::repo_root().join("examples/proposals/update-pull-requests.yaml"),
    )
    .unwrap()
    .replace("name: update-pull-requests", "name: comment-on-issues");
    cp.run_stdin(&["create", "-f", "-", "--as", AGENT], &reused)
        .unwrap();
    phase("comment-on-issues", "AwaitingApproval");
    assert!(!effective(&cp).contains("github-pulls"));
    let out = cp
        .plugin(&[
            "approve",
            "comment-on-issues",
            "-n",
            "agents",
            "--as",
            "alice",
        ])
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    phase("comment-on-issues", "Applied");
    wait_effective(true, "github-pulls");
    let decided = cp
        .run(&[
            "get",
            "asbx",
            "triage-bot",
            "-n",
            "agents",
            "-o",
            "jsonpath={.status.appliedProposals[*].decidedBy}|{.status.appliedProposals[0].pruned.reason}",
        ])
        .unwrap();
    // The first record stays, pruned; the grant comes from the reviewed one.
    assert_eq!(
        decided,
        "auto reviewer:alice|deleted, re-created or changed since it was committed"
    );

    // Withdrawing a narrowing does not widen: a removal stays applied
    // after its proposal is deleted.
    cp.run_stdin(
        &["create", "-f", "-", "--as", AGENT],
        &format!(
            "apiVersion: agentgate.dev/v1alpha1\nkind: PolicyProposal\nmetadata: {{name: drop-read, namespace: agents}}\nspec:\n  sandboxRef: {{name: triage-bot}}\n  requestedBy: {AGENT}\n  remove: {{network: [github-read]}}\n"
        ),
    )
    .unwrap();
    phase("drop-read", "Applied");
    wait_effective(false, "github-read");
    cp.run(&[
        "delete",
        "pprop",
        "drop-read",
        "-n",
        "agents",
        "--as",
        AGENT,
    ])
    .unwrap();
    cp.wait_object(
        Kind::SANDBOX,
        "agents",
        "triage-bot",
        Duration::from_secs(30),
        |sandbox| {
            sandbox["status"]["appliedProposals"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["name"] == "drop-read")
                .map(|p| wait::at(p, &["pruned", "reason"]))
                .collect()
        },
        |r| !r.is_empty(),
    )
    .unwrap_or_else(|last| panic!("drop-read never pruned ({last})\n{}", operator.log()));
    assert!(
        !effective(&cp).contains("github-read"),
        "{}",
        effective(&cp)
    );
    // A decided review is final, even for a reviewer, and not only in the
    // plugin: the API server refuses it.
    let deny = r#"[{"op":"add","path":"/status/conditions/-","value":{"type":"Denied","status":"True","reason":"Reviewed","message":"denied by \"carol\"","observedGeneration":1,"lastTransitionTime":"2026-11-30T00:00:00Z"}}]"#;
    assert_refused(
        cp.kubectl(&[
            "patch",
            "pprop",
            "comment-on-issues",
            "-n",
            "agents",
            "--subresource=status",
            "--type=json",
            "-p",
            deny,
            "--as",
            "carol",
        ])
        .unwrap(),
        "a decided review is final",
    );

    // Four eyes: a reviewer's own proposal in the review region waits for
    // a second reviewer.
    let mut four_eyes =
        std::fs::read_to_string(agentgate_e2e::repo_root().join("examples/maximum.yaml")).unwrap();
    four_eyes.push_str("  review: {fourEyes: true}\n");
    cp.run_stdin(&["apply", "-f", "-"], &four_eyes).unwrap();
    let own = std::fs::read_to_string(
        agentgate_e2e::repo_root().join("examples/proposals/update-pull-requests.yaml"),
    )
    .unwrap()
    .replace("name: update-pull-requests", "name: alice-merges")
    .replace(
        "requestedBy: system:serviceaccount:agents:triage-bot",
        "requestedBy: alice",
    )
    .replace("name: github-pulls", "name: alice-pulls")
    .replace("methods: [PATCH]", "methods: [PUT]")
    .replace(
        "path: /repos/acme/*/pulls/*\n",
        "path: /repos/acme/*/pulls/*/merge\n",
    );
    cp.run_stdin(&["create", "-f", "-", "--as", "alice"], &own)
        .unwrap();
    phase("alice-merges", "AwaitingApproval");
    let reason = cp
        .run(&[
            "get",
            "pprop",
            "alice-merges",
            "-n",
            "agents",
            "-o",
            "jsonpath={.status.reason}",
        ])
        .unwrap();
    assert!(reason.starts_with("four eyes:"), "{reason}");
    assert!(!effective(&cp).contains("alice-pulls"));
    let out = cp
        .plugin(&["approve", "alice-merges", "-n", "agents", "--as", "carol"])
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    phase("alice-merges", "Applied");
    wait_effective(true, "alice-pulls");
    // An approved proposal deleted: its grant leaves the effective policy.
    cp.run(&["delete", "pprop", "alice-merges", "-n", "agents"])
        .unwrap();
    wait_effective(false, "alice-pulls");
    drop(operator);
}

/// A sandbox running the example agent image, with `template` as its pod spec.
fn templated(name: &str, labels: &str, pod_spec: &str) -> String {
    format!(
        "apiVersion: agentgate.dev/v1alpha1\nkind: AgentSandbox\nmetadata: {{name: {name}, namespace: agents{labels}}}\nspec:\n  agentServiceAccount: {name}\n  template:\n    spec: {pod_spec}\n  policy: {{}}\n"
    )
}

#[test]
fn templates_scans_labels_and_excluded_namespaces_cannot_be_used_to_escape() {
    let (cp, operator) = setup();
    let benign = format!(r#"{{containers: [{{name: agent, image: "{AGENT_IMAGE}"}}]}}"#);

    // 4. A template that leaves the sandbox, whoever writes it.
    let escaping = format!(
        r#"{{hostNetwork: true, containers: [{{name: agent, image: "{AGENT_IMAGE}", securityContext: {{privileged: true}}}}], volumes: [{{name: root, hostPath: {{path: /}}}}]}}"#
    );
    let out = cp
        .kubectl_stdin(&["apply", "-f", "-"], &templated("escape", "", &escaping))
        .unwrap();
    assert_refused(out, "spec.template.spec.hostNetwork is true");
    // An author who may not run pods does not borrow the operator's rights.
    cp.run(&[
        "create",
        "rolebinding",
        "dana-sandboxes",
        "-n",
        "agents",
        "--clusterrole=agentgate-sandbox-editor",
        "--user=dana",
    ])
    .unwrap();
    let out = cp
        .kubectl_stdin(
            &["apply", "-f", "-", "--as", "dana"],
            &templated("dana-bot", "", &benign),
        )
        .unwrap();
    assert_refused(out, "may not create pods in namespace \"agents\"");
    cp.grant("dana-pods", "--user=dana", "create", "pods")
        .unwrap();
    cp.grant(
        "dana-accounts",
        "--user=dana",
        "impersonate",
        "serviceaccounts",
    )
    .unwrap();
    // Its agent was (carelessly) given pod rights: admitted, with a warning.
    cp.grant(
        "dana-bot-pods",
        "--serviceaccount=agents:dana-bot",
        "create",
        "pods",
    )
    .unwrap();
    let out = cp
        .kubectl_stdin(
            &["apply", "-f", "-", "--as", "dana"],
            &templated("dana-bot", ", labels: {tier: agent}", &benign),
        )
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("may create pods in namespace \"agents\", which steps around any sandbox"),
        "{stderr}"
    );

    // Governance you cannot step out of: a second ceiling selects tier=agent.
    cp.run_stdin(
        &["apply", "-f", "-"],
        "apiVersion: agentgate.dev/v1alpha1\nkind: MaximumPolicy\nmetadata: {name: agent-tier}\nspec:\n  selector:\n    sandboxSelector: {matchLabels: {tier: agent}}\n  policy:\n    filesystem: {readOnly: [/app]}\n",
    )
    .unwrap();
    assert_refused(
        cp.kubectl(&[
            "label", "asbx", "dana-bot", "-n", "agents", "tier-", "--as", "dana",
        ])
        .unwrap(),
        "take it out of MaximumPolicy agent-tier",
    );

    // Nor by relabelling the namespace out of org-ceiling's namespaceSelector.
    cp.grant_cluster(
        "namespace-labeller",
        "--user=dana",
        "get,patch,update",
        "namespaces",
    )
    .unwrap();
    assert_refused(
        cp.kubectl(&["label", "namespace", "agents", "team-", "--as", "dana"])
            .unwrap(),
        "take sandboxes out of MaximumPolicy org-ceiling",
    );
    // A label no ceiling selects on is anyone's to change.
    cp.run(&[
        "label",
        "namespace",
        "agents",
        "cost-centre=42",
        "--as",
        "dana",
    ])
    .unwrap();

    // 5. Scans come from the listed writers only.
    cp.grant_cluster("scans", "--user=mallory", "*", "agentscans.agentgate.dev")
        .unwrap();
    let clean = format!(
        "apiVersion: agentgate.dev/v1alpha1\nkind: AgentScan\nmetadata: {{name: first}}\nspec:\n  image: \"{AGENT_IMAGE}\"\n  graph: {{nodes: []}}\n"
    );
    assert_refused(
        cp.kubectl_stdin(&["apply", "-f", "-", "--as", "mallory"], &clean)
            .unwrap(),
        "is not a trusted scan writer",
    );
    cp.apply_example_scan().unwrap();
    let scan = cp
        .run(&["get", "ascan", "-o", "jsonpath={.items[0].metadata.name}"])
        .unwrap();
    assert_refused(
        cp.kubectl(&[
            "patch",
            "ascan",
            &scan,
            "--type=merge",
            "-p",
            r#"{"spec":{"graph":{"nodes":[],"edges":[]}}}"#,
            "--as",
            "mallory",
        ])
        .unwrap(),
        "removes nodes or edges",
    );

    // Excluded namespaces are not reconciled: nothing is committed there.
    cp.run_stdin(
        &["apply", "-f", "-"],
        &std::fs::read_to_string(agentgate_e2e::repo_root().join("examples/sandbox.yaml"))
            .unwrap()
            .replace("namespace: agents", "namespace: agentgate-system"),
    )
    .unwrap();
    // dana-bot (created above) is reconciled meanwhile: the operator is live.
    cp.wait_revision("agents", "dana-bot", Duration::from_secs(30), |r| r >= 1)
        .unwrap_or_else(|last| panic!("dana-bot never committed ({last})\n{}", operator.log()));
    std::thread::sleep(Duration::from_secs(3));
    let status = cp
        .run(&[
            "get",
            "asbx",
            "triage-bot",
            "-n",
            "agentgate-system",
            "-o",
            "jsonpath={.status}",
        ])
        .unwrap();
    assert_eq!(
        status, "",
        "a sandbox in an excluded namespace was reconciled"
    );
    drop(operator);
}

#[test]
fn a_pod_claiming_a_sandbox_must_be_its_enforced_pod() {
    let (cp, operator) = setup();
    // A pod of one's own that claims a sandbox by label, in a namespace
    // without the enforce label: refused, field by field.
    let claimed = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: borrower, namespace: agents, labels: {{agentgate.dev/sandbox: triage-bot}}}}\nspec:\n  containers: [{{name: agent, image: \"{AGENT_IMAGE}\", command: [/bin/agent]}}]\n"
    );
    assert_refused(
        cp.kubectl_stdin(&["apply", "-f", "-"], &claimed).unwrap(),
        "the pod claims an agent sandbox but is not in its enforced shape: spec.shareProcessNamespace is not true",
    );
    // The operator's own pod, once admitted, keeps its claim and its shape.
    cp.apply_example_scan().unwrap();
    cp.run(&["apply", "-f", "examples/agent/sandbox-severed.yaml"])
        .unwrap();
    cp.wait_pod("agents", "issue-responder", Duration::from_secs(60))
        .unwrap_or_else(|last| panic!("no pod ({last:?})\n{}", operator.log()));
    assert_refused(
        cp.kubectl(&[
            "label",
            "pod",
            "issue-responder",
            "-n",
            "agents",
            "agentgate.dev/sandbox-",
        ])
        .unwrap(),
        "may not remove or change the pod's sandbox claim",
    );
    assert_refused(
        cp.kubectl(&[
            "set",
            "image",
            "pod/issue-responder",
            "-n",
            "agents",
            "agentgate-proxy=registry.example/pass-through:1",
        ])
        .unwrap(),
        "spec.initContainers[1] is not the sandbox's agentgate-proxy container",
    );
}
