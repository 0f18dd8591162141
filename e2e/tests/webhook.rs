//! The admission webhook end to end: the chart installed with helm into a
//! real API server, the operator serving the webhook as a local process,
//! real kubectl (and the kubectl-agentgate plugin) as the user.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agentgate_e2e::{CHART_NAMESPACE, ControlPlane, Operator, assert_refused};

const AGENT: &str = "system:serviceaccount:agents:triage-bot";

/// A sandbox of team ml whose policy POSTs where org-ceiling does not allow.
const OUTSIDE: &str = r#"
apiVersion: agentgate.dev/v1alpha1
kind: AgentSandbox
metadata: {name: bot, namespace: agents}
spec:
  mode: ask
  agentServiceAccount: triage-bot
  policy:
    network:
      - name: github
        binaries: [/usr/bin/gh]
        endpoints:
          - host: api.github.com
            ports: [443]
            protocol: rest
            rules:
              - {methods: [POST], path: /repos/acme}
"#;

/// Control plane + chart + operator with the webhook, namespace `agents`
/// (team ml) and org-ceiling applied.
fn setup(extra: &[&str]) -> (ControlPlane, Operator, u16) {
    ControlPlane::with_webhook(extra).unwrap_or_else(|e| panic!("{e}"))
}

/// POST /v1/decide over TLS, verifying the server against the published CA.
fn decide(cp: &ControlPlane, port: u16, body: &str) -> serde_json::Value {
    cp.decide(port, body).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn explained_denials_dry_run_and_runtime_decisions() {
    let (cp, operator, port) = setup(&[]);

    // Outside the maximum: refused with the counterexample.
    assert_refused(
        cp.kubectl_stdin(&["apply", "-f", "-"], OUTSIDE).unwrap(),
        r#"agentsandbox "bot" exceeds MaximumPolicy "org-ceiling": POST https://api.github.com:443/repos/acme by /usr/bin/gh"#,
    );
    // --dry-run=server gives the same answer.
    assert_refused(
        cp.kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], OUTSIDE)
            .unwrap(),
        r#"exceeds MaximumPolicy "org-ceiling": POST https://api.github.com:443/repos/acme by /usr/bin/gh"#,
    );
    // Inside: admitted.
    cp.run(&["apply", "-f", "examples/sandbox.yaml"]).unwrap();

    // A ceiling that meets its own invariant: admitted with a warning.
    let inconsistent = cp
        .kubectl(&["apply", "-f", "examples/maximum-egress.yaml"])
        .unwrap();
    assert!(inconsistent.status.success());
    let warning = String::from_utf8_lossy(&inconsistent.stderr);
    assert!(
        warning.contains("Warning:") && warning.contains("inside its own invariant"),
        "{warning}"
    );
    // An invalid glob in a ceiling: refused with the field.
    let bad_glob = cp
        .kubectl_stdin(
            &["apply", "-f", "-"],
            "apiVersion: agentgate.dev/v1alpha1\nkind: MaximumPolicy\nmetadata: {name: bad}\nspec:\n  policy:\n    network:\n      - name: x\n        endpoints:\n          - {host: \"api.*.com*\", ports: [443]}\n",
        )
        .unwrap();
    assert_refused(bad_glob, "maximumpolicy \"bad\"");
    // AgentScan: the image must be pinned by digest.
    let scan = cp
        .kubectl_stdin(
            &["apply", "-f", "-"],
            "apiVersion: agentgate.dev/v1alpha1\nkind: AgentScan\nmetadata: {name: s}\nspec:\n  image: ghcr.io/acme/bot:latest\n",
        )
        .unwrap();
    assert_refused(scan, "not pinned by digest");

    // /v1/decide on the committed policy.
    cp.wait_revision("agents", "triage-bot", Duration::from_secs(30), |r| r >= 1)
        .unwrap_or_else(|last| panic!("never committed ({last})\n{}", operator.log()));
    let allow = decide(
        &cp,
        port,
        r#"{"sandbox":"triage-bot","namespace":"agents","binary":"/usr/local/bin/agent","host":"api.github.com","port":443,"layer":"rest","method":"GET","path":"/repos/acme/widgets/issues/7"}"#,
    );
    assert_eq!(allow["allow"], true, "{allow}");
    assert_eq!(allow["rule"], "github-read", "{allow}");
    let deny = decide(
        &cp,
        port,
        r#"{"sandbox":"triage-bot","namespace":"agents","binary":"/usr/local/bin/agent","host":"api.github.com","port":443,"layer":"rest","method":"DELETE","path":"/repos/acme/widgets"}"#,
    );
    assert_eq!(deny["allow"], false, "{deny}");
    let reason = deny["reason"].as_str().unwrap();
    assert!(
        reason.contains(
            "DELETE https://api.github.com:443/repos/acme/widgets by /usr/local/bin/agent"
        ) && reason.contains("no rule allows it"),
        "{deny}"
    );
    let unknown = decide(
        &cp,
        port,
        r#"{"sandbox":"nope","namespace":"agents","binary":"/b","host":"h","port":1}"#,
    );
    assert_eq!(unknown["allow"], false);

    // Who may ask: a bearer token the API server accepts (401 otherwise),
    // and the sandbox's own agent or someone who may get the sandbox (403
    // otherwise).
    let question = r#"{"sandbox":"triage-bot","namespace":"agents","binary":"/usr/local/bin/agent","host":"api.github.com","port":443,"method":"GET","path":"/repos/acme/widgets/issues/7"}"#;
    let ask = |token: Option<&str>| cp.decide_as(port, question, token).unwrap();
    let (status, answer) = ask(None);
    assert_eq!(status, 401, "{answer}");
    assert!(
        answer["reason"]
            .as_str()
            .unwrap()
            .contains("no bearer token"),
        "{answer}"
    );
    let (status, answer) = ask(Some("not-a-token"));
    assert_eq!(status, 401, "{answer}");
    assert!(
        answer["reason"].as_str().unwrap().contains("not valid"),
        "{answer}"
    );
    let nobody = cp.token("e2e-nobody").unwrap();
    let (status, answer) = ask(Some(&nobody));
    assert_eq!(status, 403, "{answer}");
    assert_eq!(answer["allow"], false, "{answer}");
    assert!(
        answer["reason"]
            .as_str()
            .unwrap()
            .contains("may not get it"),
        "{answer}"
    );
    let agent = cp.token("system:serviceaccount:agents:triage-bot").unwrap();
    let (status, answer) = ask(Some(&agent));
    assert_eq!(
        (status, &answer["allow"]),
        (200, &serde_json::json!(true)),
        "{answer}"
    );
    // Granting get on the sandbox lets nobody ask, once the cached denial
    // (5 s) has lapsed.
    cp.grant(
        "read-sandboxes",
        "--user=e2e-nobody",
        "get",
        "agentsandboxes.agentgate.dev",
    )
    .unwrap();
    let started = Instant::now();
    loop {
        let (status, answer) = ask(Some(&nobody));
        if status == 200 {
            assert_eq!(answer["allow"], true, "{answer}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "still {status} after the grant: {answer}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    drop(operator);
}

/// Waits until the proposal `name` in `agents` reaches `phase`.
fn wait_phase(cp: &ControlPlane, operator: &Operator, name: &str, phase: &str) {
    cp.wait_proposal_phase("agents", name, phase, Duration::from_secs(30))
        .unwrap_or_else(|last| panic!("{name}: phase {last}\n{}", operator.log()));
}

#[test]
fn approvals_need_the_verb_and_a_second_person() {
    let (cp, operator, _port) = setup(&[]);
    cp.run(&["apply", "-f", "examples/sandbox.yaml"]).unwrap();
    // The agent may create proposals, and (to show the webhook, not RBAC,
    // stops self-approval) even holds approve.
    cp.grant(
        "agent",
        &format!("--user={AGENT}"),
        "get,list,create,approve",
        "policyproposals.agentgate.dev",
    )
    .unwrap();
    cp.grant(
        "agent-status",
        &format!("--user={AGENT}"),
        "get,patch,update",
        "policyproposals.agentgate.dev/status",
    )
    .unwrap();
    // bob may write the status but lacks approve.
    cp.grant(
        "bob",
        "--user=bob",
        "get,list,patch,update",
        "policyproposals.agentgate.dev/status",
    )
    .unwrap();
    cp.grant(
        "bob-read",
        "--user=bob",
        "get,list,create",
        "policyproposals.agentgate.dev",
    )
    .unwrap();
    // alice is a reviewer. In a cluster she is bound to the chart's
    // aggregated `agentgate-reviewer`; aggregation is done by
    // kube-controller-manager, which this harness does not run, so she is
    // bound to the role that carries the rules.
    cp.run(&[
        "create",
        "rolebinding",
        "alice-reviews",
        "-n",
        "agents",
        "--clusterrole=agentgate-reviewer-base",
        "--user=alice",
    ])
    .unwrap();

    // requestedBy must be the creator.
    let forged = cp
        .kubectl(&[
            "create",
            "-f",
            "examples/proposals/update-pull-requests.yaml",
            "--as",
            "bob",
        ])
        .unwrap();
    assert_refused(forged, "spec.requestedBy");

    cp.run(&[
        "create",
        "-f",
        "examples/proposals/update-pull-requests.yaml",
        "--as",
        AGENT,
    ])
    .unwrap();
    wait_phase(&cp, &operator, "update-pull-requests", "AwaitingApproval");

    // bob: no approve verb.
    let out = cp
        .plugin(&[
            "approve",
            "update-pull-requests",
            "-n",
            "agents",
            "--as",
            "bob",
        ])
        .unwrap();
    assert_refused(out, "may not approve");
    // The agent approving its own request.
    let out = cp
        .plugin(&[
            "approve",
            "update-pull-requests",
            "-n",
            "agents",
            "--as",
            AGENT,
        ])
        .unwrap();
    assert_refused(out, "requested it and cannot approve");
    // The spec cannot change under a pending review.
    let edit = cp
        .kubectl(&[
            "patch",
            "pprop",
            "update-pull-requests",
            "-n",
            "agents",
            "--type=merge",
            "-p",
            r#"{"spec":{"rationale":"something else"}}"#,
        ])
        .unwrap();
    assert_refused(edit, "immutable");

    // alice approves; the proposal is committed.
    let out = cp
        .plugin(&[
            "approve",
            "update-pull-requests",
            "-n",
            "agents",
            "--as",
            "alice",
            "--reason",
            "PR labelling is fine",
        ])
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_phase(&cp, &operator, "update-pull-requests", "Applied");

    // why and export.
    let out = cp
        .plugin(&["why", "update-pull-requests", "-n", "agents"])
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "verdict:",
        "Apply",
        "proof:",
        "Approved=True",
        "PR labelling is fine",
    ] {
        assert!(text.contains(needle), "{needle} missing in\n{text}");
    }
    let out = cp
        .plugin(&["export", "triage-bot", "-n", "agents"])
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let manifest = String::from_utf8_lossy(&out.stdout);
    assert!(
        manifest.contains("github-pulls")
            && manifest.contains("applied proposals: update-pull-requests"),
        "{manifest}"
    );
    // The export is a valid sandbox the webhook admits.
    cp.run_stdin(&["apply", "--dry-run=server", "-f", "-"], &manifest)
        .unwrap();

    // The runtime grant becomes a reviewable change to the file in git:
    // `--diff` shows it without writing, `--into` writes only spec.policy.
    let repo = std::env::temp_dir().join(format!("agentgate-export-{}", std::process::id()));
    std::fs::create_dir_all(&repo).unwrap();
    let file = repo.join("triage-bot.yaml");
    let original = format!(
        "{}---\n# kept: a second document\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: notes, namespace: agents}}\n",
        std::fs::read_to_string(agentgate_e2e::repo_root().join("examples/sandbox.yaml")).unwrap()
    );
    std::fs::write(&file, &original).unwrap();
    let path = file.to_str().unwrap();
    let out = cp
        .plugin(&[
            "export",
            "triage-bot",
            "-n",
            "agents",
            "--into",
            path,
            "--diff",
        ])
        .unwrap();
    let diff = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        diff.lines()
            .any(|l| l.starts_with('+') && l.contains("github-pulls")),
        "{diff}"
    );
    assert!(
        !diff
            .lines()
            .any(|l| l.starts_with('-') && l.contains("# An agent sandbox")),
        "{diff}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        original,
        "--diff wrote the file"
    );
    let out = cp
        .plugin(&["export", "triage-bot", "-n", "agents", "--into", path])
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let folded = std::fs::read_to_string(&file).unwrap();
    for kept in [
        "# An agent sandbox whose declared policy stays inside org-ceiling.",
        "# kept: a second document",
        "metadata: {name: notes, namespace: agents}",
    ] {
        assert!(folded.contains(kept), "{kept:?} lost:\n{folded}");
    }
    assert!(folded.contains("github-pulls"), "{folded}");
    // And the folded file proves against the live ceilings and namespaces.
    // As CI would run it: an identity with only the chart's verifier role.
    let ci = cp.kubeconfig_of("e2e-nobody").unwrap();
    let verify = |args: &[&str]| {
        Command::new(agentgate_e2e::operator_binary().unwrap())
            .arg("verify")
            .args(args)
            .env("KUBECONFIG", &ci)
            .output()
            .unwrap()
    };
    let out = verify(&["--cluster", path]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--cluster: listing namespaces"), "{err}");
    cp.run(&[
        "create",
        "clusterrolebinding",
        "ci-verifies",
        "--clusterrole=agentgate-verifier",
        "--user=e2e-nobody",
    ])
    .unwrap();
    let out = verify(&["--cluster", path]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("AgentSandbox agents/triage-bot holds: within MaximumPolicy \"org-ceiling\""),
        "{text}"
    );
    // A proposal whose sandbox is only in the cluster gets the verdict the
    // operator would give, against the committed policy.
    let proposal = agentgate_e2e::repo_root().join("examples/proposals/post-anywhere.yaml");
    let out = verify(&["--cluster", "-o", "json", proposal.to_str().unwrap()]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{json}");
    assert_eq!(json["objects"][0]["verdict"], "Reject", "{json}");
    assert_eq!(json["objects"][0]["governedBy"][0], "org-ceiling", "{json}");
    std::fs::remove_dir_all(&repo).unwrap();
    drop(operator);
}

fn served_fingerprint(port: u16) -> String {
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "openssl s_client -connect 127.0.0.1:{port} -servername 127.0.0.1 </dev/null 2>/dev/null | openssl x509 -noout -fingerprint -sha256"
        ))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn rotation_under_load_and_failing_closed() {
    // Leaves of 6 s: re-issued every 4 s while admissions stream in.
    let (cp, operator, port) = setup(&["--cert-validity-seconds", "6"]);
    let first = served_fingerprint(port);
    assert!(first.contains("Fingerprint"), "{first}");

    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
    let cp = Arc::new(cp);
    let client = {
        let (cp, stop, sent, failures) = (cp.clone(), stop.clone(), sent.clone(), failures.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let out = cp
                    .kubectl(&["apply", "--dry-run=server", "-f", "examples/sandbox.yaml"])
                    .unwrap();
                sent.fetch_add(1, Ordering::Relaxed);
                if !out.status.success() {
                    failures
                        .lock()
                        .unwrap()
                        .push(String::from_utf8_lossy(&out.stderr).into_owned());
                }
            }
        })
    };
    let started = Instant::now();
    let mut fingerprints = vec![first];
    while started.elapsed() < Duration::from_secs(14) {
        std::thread::sleep(Duration::from_secs(1));
        let f = served_fingerprint(port);
        if !f.is_empty() && fingerprints.last() != Some(&f) {
            fingerprints.push(f);
        }
    }
    stop.store(true, Ordering::Relaxed);
    client.join().unwrap();
    let failures = failures.lock().unwrap().clone();
    assert!(
        failures.is_empty(),
        "{} of {} admissions failed: {failures:?}",
        failures.len(),
        sent.load(Ordering::Relaxed)
    );
    assert!(
        sent.load(Ordering::Relaxed) >= 10,
        "too few admissions sent"
    );
    assert!(
        fingerprints.len() >= 3,
        "the certificate was not rotated at least twice: {fingerprints:?}\n{}",
        operator.log()
    );
    let metrics = operator.metrics().unwrap();
    assert!(
        metrics.contains("agentgate_certificate_rotations_total"),
        "{metrics}"
    );

    // Webhook gone: agentgate objects are refused, kube-system is not affected.
    drop(operator);
    assert_refused(
        cp.kubectl(&["apply", "--dry-run=server", "-f", "examples/sandbox.yaml"])
            .unwrap(),
        "failed calling webhook",
    );
    cp.run(&[
        "create",
        "configmap",
        "still-fine",
        "-n",
        "kube-system",
        "--from-literal=a=b",
    ])
    .unwrap();
    cp.run(&[
        "create",
        "configmap",
        "still-fine",
        "-n",
        "agents",
        "--from-literal=a=b",
    ])
    .unwrap();
}

#[test]
fn rendered_chart_applies_with_server_dry_run() {
    let cp = ControlPlane::start().expect("control plane");
    cp.run(&["create", "namespace", CHART_NAMESPACE]).unwrap();
    for sets in [
        vec!["webhook.url=https://127.0.0.1:9443"],
        vec!["networkPolicy.enabled=true", "rbac.aggregateToAdmin=true"],
    ] {
        // Chart.yaml requires Kubernetes 1.29+; `helm template` assumes 1.20
        // unless told (the control plane's version).
        let mut args = vec![
            "template",
            "agentgate",
            "charts/agentgate",
            "--namespace",
            CHART_NAMESPACE,
            "--kube-version",
            "1.33.0",
        ];
        for s in &sets {
            args.extend(["--set", s]);
        }
        let rendered = cp.helm(&args).unwrap();
        let out = cp
            .run_stdin(
                &[
                    "apply",
                    "--server-side",
                    "--dry-run=server",
                    "--field-manager=helm",
                    "-f",
                    "-",
                ],
                &rendered,
            )
            .unwrap_or_else(|e| panic!("{sets:?}: {e}"));
        for kind in [
            "customresourcedefinition.apiextensions.k8s.io/agentsandboxes.agentgate.dev",
            "validatingwebhookconfiguration.admissionregistration.k8s.io/agentgate",
            "deployment.apps/agentgate",
            "clusterrole.rbac.authorization.k8s.io/agentgate-reviewer",
        ] {
            assert!(
                out.contains(kind),
                "{kind} not applied with {sets:?}:\n{out}"
            );
        }
    }
}

/// The chart's matchConditions: while no webhook answers (failurePolicy
/// Fail), everyone's writes of agentgate kinds are refused, but the
/// operator's own status writes still land, so commits and revocations
/// do not wait for the webhook.
#[test]
fn the_operators_status_writes_do_not_wait_for_the_webhook() {
    let cp = ControlPlane::start().unwrap();
    let port = agentgate_e2e::free_loopback_port().unwrap();
    cp.install_chart(port, &[]).unwrap();
    let webhook = cp.start_webhook(port, &[]).unwrap();
    cp.wait_webhook("examples/maximum.yaml", Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e}\n{}", webhook.log()));
    cp.run(&["apply", "-f", "examples/maximum.yaml"]).unwrap();
    cp.create_team_namespace().unwrap();
    cp.wait_webhook("examples/sandbox.yaml", Duration::from_secs(30))
        .unwrap();
    cp.run(&["apply", "-f", "examples/sandbox.yaml"]).unwrap();
    drop(webhook); // killed: nothing answers on the webhook's port now

    let refused = cp
        .kubectl(&["apply", "-f", "examples/proposals/comment-on-issues.yaml"])
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("failed calling webhook"), "{stderr}");

    // The controller alone (no webhook), as the chart's ServiceAccount.
    let controller = cp.start_chart_controller(&[]).unwrap();
    let revision = cp
        .wait_revision("agents", "triage-bot", Duration::from_secs(30), |r| r >= 1)
        .unwrap_or_else(|last| {
            panic!(
                "the commit never landed with the webhook down ({last})\n{}",
                controller.log()
            )
        });
    assert_eq!(revision, 1);
}
