//! `make demo` / `make demo-down`: a local cluster with a real node, the
//! chart installed from the image this tree builds, and the examples, left
//! running for you to explore.
//!
//! `agentgate-demo up` starts the control plane and a node (kubelet,
//! containerd, runc, kube-proxy; e2e/src/node.rs), imports the agentgate and
//! agent images, `helm install`s the chart (the operator and its webhook
//! run as the chart's Pods), applies examples/ (a MaximumPolicy with a
//! review region and an invariant, a sandbox, three proposals), waits for
//! their verdicts, prints them; then scans examples/agent, applies the
//! AgentScan, shows the agent's pod refused with the trifecta witness and
//! admitted once the policy severs the sink; then a sandbox's Pod, run by
//! the kubelet, whose agent is refused by the proxy with the reason (a REST
//! request, and an MCP tool call answered as a JSON-RPC error) and allowed
//! once a reviewer approves its proposal; credentials as authority (the
//! prover naming the credential a proposal would widen, an agent holding a
//! placeholder whose secret reaches the API only where it is bound); prints the KUBECONFIG
//! path and exits, leaving everything running. `agentgate-demo down` stops
//! it and removes the files.

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Duration;

use agentgate_e2e::node::{Images, build_images, tear_down_detached};
use agentgate_e2e::wait::Kind;
use agentgate_e2e::{AGENT_IMAGE, ControlPlane, Watched};

fn state_dir() -> PathBuf {
    std::env::temp_dir().join("agentgate-demo")
}

fn alive(pid: &str) -> bool {
    Command::new("kill")
        .args(["-0", pid])
        .status()
        .is_ok_and(|s| s.success())
}

fn down() -> ExitCode {
    let dir = state_dir();
    let Ok(pids) = std::fs::read_to_string(dir.join("pids")) else {
        println!("no demo is running");
        return ExitCode::SUCCESS;
    };
    for pid in pids.split_whitespace() {
        let _ = Command::new("kill").arg(pid).status();
    }
    std::thread::sleep(Duration::from_secs(1));
    for pid in pids.split_whitespace().filter(|p| alive(p)) {
        let _ = Command::new("kill").args(["-9", pid]).status();
    }
    // The node's containers, shims, mounts, cgroups and veth.
    tear_down_detached(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    println!("demo stopped");
    ExitCode::SUCCESS
}

fn kubectl(cp: &ControlPlane, args: &[&str]) -> Result<String, String> {
    cp.run(args).map_err(|e| e.to_string())
}

fn up() -> Result<(), String> {
    let dir = state_dir();
    if let Ok(pids) = std::fs::read_to_string(dir.join("pids"))
        && pids.split_whitespace().all(alive)
    {
        println!(
            "the demo is already running; KUBECONFIG={}",
            dir.join("kubeconfig").display()
        );
        println!("stop it with: make demo-down");
        return Ok(());
    }
    let _ = std::fs::remove_dir_all(&dir);
    let release = agentgate_e2e::operator_binary().map_err(|e| e.to_string())?;
    let bin_dir = release
        .parent()
        .ok_or("the agentgate binary has no directory")?;
    eprintln!("packing the images from {} ...", bin_dir.display());
    let images = build_images(bin_dir).map_err(|e| e.to_string())?;
    eprintln!("starting the control plane and the node (kubelet, containerd, kube-proxy) ...");
    let cp = ControlPlane::start_with_node_in(dir.clone()).map_err(|e| e.to_string())?;
    eprintln!("helm install agentgate charts/agentgate (images imported into the node) ...");
    cp.install_chart_on_node(&images, &[])
        .map_err(|e| e.to_string())?;
    cp.create_team_namespace().map_err(|e| e.to_string())?;
    // The agent's identity may propose (the chart's agentgate-agent role); alice reviews (the chart's
    // reviewer rules; in a cluster, bind the aggregated agentgate-reviewer).
    kubectl(
        &cp,
        &[
            "create",
            "rolebinding",
            "agent-proposes",
            "-n",
            "agents",
            "--clusterrole=agentgate-agent",
            "--serviceaccount=agents:triage-bot",
        ],
    )?;
    kubectl(
        &cp,
        &[
            "create",
            "rolebinding",
            "alice-reviews",
            "-n",
            "agents",
            "--clusterrole=agentgate-reviewer-base",
            "--user=alice",
        ],
    )?;
    kubectl(&cp, &["apply", "-f", "examples/maximum.yaml"])?;
    // The webhook answers from watch caches: the ceiling must be in them
    // before the sandbox it governs is admitted.
    cp.wait_webhook("examples/sandbox.yaml", Duration::from_secs(30))
        .map_err(|e| format!("the webhook never saw org-ceiling: {e}"))?;
    kubectl(&cp, &["apply", "-f", "examples/sandbox.yaml"])?;
    cp.wait_revision("agents", "triage-bot", Duration::from_secs(60), |r| r == 1)
        .map_err(|last| {
            format!(
                "the sandbox was not committed (last: {last:?})\n{}",
                cp.chart_logs(40)
            )
        })?;
    kubectl(
        &cp,
        &[
            "apply",
            "-f",
            "examples/proposals/",
            "--as",
            "system:serviceaccount:agents:triage-bot",
        ],
    )?;
    for (name, phase) in [
        ("comment-on-issues", "Applied"),
        ("update-pull-requests", "AwaitingApproval"),
        ("post-anywhere", "Rejected"),
    ] {
        cp.wait_proposal_phase("agents", name, phase, Duration::from_secs(60))
            .map_err(|last| {
                format!(
                    "{name} did not reach {phase} (last: {last:?})\n{}",
                    cp.chart_logs(40)
                )
            })?;
    }

    let show = |title: &str, args: &[&str]| -> Result<(), String> {
        println!("\n\x1b[1m# {title}\x1b[0m\n$ kubectl {}", args.join(" "));
        print!("{}", kubectl(&cp, args)?);
        Ok(())
    };
    println!(
        "\n\x1b[1m# A sandbox outside its ceiling: refused at kubectl apply, with the counterexample\x1b[0m\n$ kubectl apply -f examples/sandbox-outside.yaml"
    );
    let refused = cp
        .kubectl(&["apply", "-f", "examples/sandbox-outside.yaml"])
        .map_err(|e| e.to_string())?;
    if refused.status.success() {
        return Err("the webhook admitted examples/sandbox-outside.yaml".into());
    }
    print!("{}", String::from_utf8_lossy(&refused.stderr));
    show(
        "The ceiling: valid, consistent with its invariant, governing one sandbox",
        &["get", "maxpol"],
    )?;
    show(
        "The sandbox: proved within the ceiling; revision 2 after one auto-applied proposal",
        &["get", "asbx", "-n", "agents", "-o", "wide"],
    )?;
    show(
        "Three proposals: applied automatically, waiting for a reviewer, rejected with a counterexample",
        &[
            "get",
            "pprop",
            "-n",
            "agents",
            "-o",
            "custom-columns=NAME:.metadata.name,VERDICT:.status.verdict,PHASE:.status.phase,COST:.status.cost,REASON:.status.reason",
        ],
    )?;
    show(
        "The committed policy the enforcement proxy reads",
        &[
            "get",
            "configmap",
            "triage-bot-policy",
            "-n",
            "agents",
            "-o",
            "jsonpath={.data.policy\\.yaml}",
        ],
    )?;

    trifecta(&cp)?;
    enforcement(&cp, &images)?;
    credentials(&cp, &images)?;

    let kubeconfig = cp.kubeconfig().display().to_string();
    let pids = cp.detach();
    std::fs::write(
        dir.join("pids"),
        pids.iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(" "),
    )
    .map_err(|e| e.to_string())?;
    let plugin_dir = agentgate_e2e::plugin_binary()
        .ok()
        .and_then(|p| p.parent().map(|d| d.display().to_string()))
        .unwrap_or_default();
    println!("\n\x1b[1mThe demo is running.\x1b[0m Try:");
    println!("  export KUBECONFIG={kubeconfig} PATH={plugin_dir}:$PATH");
    println!("  kubectl get agentgate -A");
    println!(
        "  kubectl agentgate why post-anywhere -n agents          # the counterexample and proof record"
    );
    println!(
        "  kubectl agentgate approve update-pull-requests -n agents --as bob     # refused: bob is no reviewer"
    );
    println!(
        "  kubectl agentgate approve update-pull-requests -n agents --as alice --reason 'PR labels are fine'"
    );
    println!(
        "  kubectl get pprop -n agents                            # update-pull-requests is now Applied"
    );
    println!(
        "  kubectl agentgate export triage-bot -n agents          # the effective policy, for git"
    );
    println!(
        "  kubectl agentgate export triage-bot -n agents --into examples/sandbox.yaml --diff   # the approved grant as a change to the file in git"
    );
    println!(
        "  kubectl port-forward -n agentgate-system svc/agentgate-webhook 9443:443 >/dev/null &   # the webhook Service, from this shell"
    );
    println!(
        "  curl -sk -H \"authorization: Bearer $(kubectl create token triage-bot -n agents)\" https://127.0.0.1:9443/v1/decide -d '{{\"sandbox\":\"triage-bot\",\"namespace\":\"agents\",\"binary\":\"/usr/local/bin/agent\",\"host\":\"api.github.com\",\"port\":443,\"method\":\"DELETE\",\"path\":\"/repos/acme/x\"}}'"
    );
    println!(
        "  kubectl logs -f labeller -n sandboxed -c agent          # the sandboxed agent, run by the kubelet"
    );
    println!(
        "  kubectl get asbx issue-responder -n agents -o jsonpath='{{.status.findings}}'   # per-finding state: Severed, by post_comment"
    );
    println!(
        "  agentgate scan examples/agent -o sarif                 # the same findings as SARIF code flows"
    );
    println!("Operator logs: kubectl logs -n agentgate-system -l app.kubernetes.io/name=agentgate");
    println!(
        "Node logs (kubelet, containerd, kube-apiserver, ...): {}/*.log",
        state_dir().display()
    );
    println!("Stop it with: make demo-down");
    Ok(())
}

/// The trifecta part: scan, apply the AgentScan, a refused pod with the
/// witness, the policy severing the sink, the pod admitted.
fn trifecta(cp: &ControlPlane) -> Result<(), String> {
    let scan = |output: &str| agentgate_e2e::scan_example(output).map_err(|e| e.to_string());
    println!(
        "\n\x1b[1m# The agent in examples/agent: untrusted issue text, a private customer database, posting comments\x1b[0m\n$ agentgate scan examples/agent --image {AGENT_IMAGE}"
    );
    print!("{}", scan("text")?);
    println!(
        "\n\x1b[1m# CI applies the scan; the operator recomputes the findings from the graph\x1b[0m\n$ agentgate scan examples/agent --image {AGENT_IMAGE} -o yaml | kubectl apply -f -"
    );
    print!(
        "{}",
        cp.run_stdin(&["apply", "-f", "-"], &scan("yaml")?)
            .map_err(|e| e.to_string())?
    );
    cp.create_enforced_namespace("enforced", "enforce")
        .map_err(|e| e.to_string())?;
    cp.wait_template(
        Watched::List(Kind::SCAN, "", ""),
        "{.items[0].status.findings[*].sink}",
        Duration::from_secs(30),
        |s| !s.is_empty(),
    )
    .map_err(|last| {
        format!(
            "the scan was never analysed ({last:?})\n{}",
            cp.chart_logs(40)
        )
    })?;
    println!(
        "\n\x1b[1m# A pod running that image in an enforced namespace: refused with both witness paths and the minimal fix\x1b[0m\n$ kubectl run bot -n enforced --image={AGENT_IMAGE}"
    );
    let refused = cp
        .kubectl(&[
            "run",
            "bot",
            "-n",
            "enforced",
            &format!("--image={AGENT_IMAGE}"),
            "--restart=Never",
        ])
        .map_err(|e| e.to_string())?;
    if refused.status.success() {
        return Err("the pod with an unfixed finding was admitted".into());
    }
    print!("{}", String::from_utf8_lossy(&refused.stderr));
    let condition = |cp: &ControlPlane, want: &str| {
        cp.wait_findings_clear("agents", "issue-responder", want, Duration::from_secs(60))
            .map_err(|last| {
                format!(
                    "FindingsClear never {want} ({last:?})\n{}",
                    cp.chart_logs(40)
                )
            })
    };
    println!(
        "\n\x1b[1m# A sandbox running the image with every leg open: FindingsClear=False, its pod refused\x1b[0m\n$ kubectl apply -f examples/agent/sandbox.yaml"
    );
    print!(
        "{}",
        kubectl(cp, &["apply", "-f", "examples/agent/sandbox.yaml"])?
    );
    condition(cp, "False")?;
    print!(
        "$ kubectl get asbx issue-responder -n agents -o jsonpath='{{.status.conditions[?(@.type==\"FindingsClear\")].message}}'\n{}\n",
        kubectl(
            cp,
            &[
                "get",
                "asbx",
                "issue-responder",
                "-n",
                "agents",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"FindingsClear\")].message}"
            ]
        )?
    );
    println!(
        "\n\x1b[1m# The policy severs the sink (GET only: post_comment cannot send): the pod is admitted\x1b[0m\n$ kubectl apply -f examples/agent/sandbox-severed.yaml"
    );
    print!(
        "{}",
        kubectl(cp, &["apply", "-f", "examples/agent/sandbox-severed.yaml"])?
    );
    condition(cp, "True")?;
    cp.wait_pod("agents", "issue-responder", Duration::from_secs(60))
        .map_err(|last| {
            format!(
                "the severed sandbox's pod was not created ({last:?})\n{}",
                cp.chart_logs(40)
            )
        })?;
    print!(
        "$ kubectl get pod issue-responder -n agents\n{}",
        kubectl(cp, &["get", "pod", "issue-responder", "-n", "agents"])?
    );
    println!(
        "(admitted; the example's image digest is illustrative, so the kubelet has nothing to run: the sandbox below runs a real image)"
    );
    Ok(())
}

const DEMO_SANDBOX: &str = "apiVersion: v1
kind: Namespace
metadata: {name: sandboxed, labels: {team: sandboxed}}
---
apiVersion: agentgate.dev/v1alpha1
kind: MaximumPolicy
metadata: {name: sandboxed-ceiling}
spec:
  selector:
    namespaceSelector: {matchLabels: {team: sandboxed}}
  allowedModes: [ask]
  defaultMode: ask
  policy:
    filesystem:
      readOnly: [/usr, /bin, /lib, /lib64, /etc, /srv]
      readWrite: [/tmp]
    network:
      - name: issues
        endpoints:
          - {host: api.example.test, ports: [8080], protocol: rest, rules: [{methods: [GET, POST], path: \"/repos/acme/**\"}]}
      - name: tracker
        endpoints:
          - host: api.example.test
            ports: [8080]
            protocol: mcp
            path: /mcp
            tools:
              - name: \"get_*\"
              - {name: add_label, arguments: {label: {oneOf: [triaged, needs-info, duplicate]}}}
---
apiVersion: agentgate.dev/v1alpha1
kind: AgentSandbox
metadata: {name: labeller, namespace: sandboxed}
spec:
  mode: ask
  agentServiceAccount: labeller
  template:
    spec:
      securityContext: {runAsUser: 1000, runAsGroup: 1000}
      volumes: [{name: work, emptyDir: {}}]
      containers:
        - name: agent
          image: IMAGE
          imagePullPolicy: Never
          command: [/bin/bash, -c, SCRIPT]
          volumeMounts: [{name: work, mountPath: /tmp}]
  policy:
    filesystem:
      readOnly: [/usr, /bin, /lib, /lib64, /etc, /srv]
      readWrite: [/tmp]
    network:
      - name: read-issues
        endpoints:
          - {host: api.example.test, ports: [8080], protocol: rest, rules: [{methods: [GET], path: \"/repos/acme/**\"}]}
      - name: tracker-read
        endpoints:
          - {host: api.example.test, ports: [8080], protocol: mcp, path: /mcp, tools: [{name: get_issue}]}
";

const DEMO_PROPOSAL: &str = "apiVersion: agentgate.dev/v1alpha1
kind: PolicyProposal
metadata: {name: label-issues, namespace: sandboxed}
spec:
  sandboxRef: {name: labeller}
  rationale: label the issues it triages
  requestedBy: system:serviceaccount:sandboxed:labeller
  add:
    network:
      - name: label-issues
        endpoints:
          - {host: api.example.test, ports: [8080], protocol: rest, rules: [{methods: [POST], path: \"/repos/acme/*/issues/*/labels\"}]}
          - {host: api.example.test, ports: [8080], protocol: mcp, path: /mcp, tools: [{name: add_label, arguments: {label: {oneOf: [triaged]}}}]}
";

/// The demo's agent: every half second, label an issue, by the REST API
/// and by the tracker's MCP tool `add_label`, and say how each went.
const DEMO_AGENT: &str = r#"#!/bin/bash
while true; do
  code=$(curl -s -o /tmp/body -w '%{http_code}' --max-time 5 -X POST -d '{"labels":["triaged"]}' http://api.example.test:8080/repos/acme/widgets/issues/1/labels)
  echo "POST http://api.example.test:8080/repos/acme/widgets/issues/1/labels -> $code $(tr -d '
' < /tmp/body)"
  curl -s --max-time 5 -X POST -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add_label","arguments":{"issue":1,"label":"triaged"}}}' http://api.example.test:8080/mcp > /tmp/mcp 2>/dev/null
  echo "MCP tools/call add_label {\"issue\":1,\"label\":\"triaged\"} -> $(tr -d '
' < /tmp/mcp)"
  sleep 0.5
done
"#;

/// The enforcement part: the sandbox's Pod, run by the kubelet; its agent
/// refused by the proxy, then allowed once alice approves.
fn enforcement(cp: &ControlPlane, images: &Images) -> Result<(), String> {
    println!(
        "\n\x1b[1m# The sandbox's Pod enforces what was proved: an init container installs the redirect, the agentgate-proxy sidecar judges every request, agentgate-exec wraps the agent\x1b[0m"
    );
    let script = serde_json::to_string(DEMO_AGENT).map_err(|e| e.to_string())?;
    // The agent image is scanned like any other (pods of sandboxes run
    // scanned images only); this sandbox's policy severs its finding.
    let scan =
        agentgate_e2e::scan_example_as(&images.agent_image, "yaml").map_err(|e| e.to_string())?;
    cp.run_stdin(&["apply", "-f", "-"], &scan)
        .map_err(|e| e.to_string())?;
    cp.apply_yaml(
        &DEMO_SANDBOX
            .replace("IMAGE", &images.agent_image)
            .replace("SCRIPT", &script),
    )
    .map_err(|e| e.to_string())?;
    for (name, role, subject) in [
        (
            "labeller-proposes",
            "agentgate-agent",
            "--serviceaccount=sandboxed:labeller",
        ),
        ("alice-reviews", "agentgate-reviewer-base", "--user=alice"),
    ] {
        kubectl(
            cp,
            &[
                "create",
                "rolebinding",
                name,
                "-n",
                "sandboxed",
                &format!("--clusterrole={role}"),
                subject,
            ],
        )?;
    }
    cp.wait_pod_ready("sandboxed", "labeller", Duration::from_secs(180))
        .map_err(|last| {
            format!(
                "the labeller's Pod never became Ready ({last:?})\n{}",
                cp.chart_logs(40)
            )
        })?;
    print!(
        "$ kubectl get pod labeller -n sandboxed -o wide\n{}",
        kubectl(
            cp,
            &["get", "pod", "labeller", "-n", "sandboxed", "-o", "wide"]
        )?
    );
    print!(
        "$ kubectl get pod labeller -n sandboxed -o jsonpath='{{.spec.initContainers[*].name}} | {{.spec.containers[0].command[0]}}'\n{}\n",
        kubectl(
            cp,
            &[
                "get",
                "pod",
                "labeller",
                "-n",
                "sandboxed",
                "-o",
                "jsonpath={.spec.initContainers[*].name} | {.spec.containers[0].command[0]}"
            ],
        )?
    );
    let agent_log = || cp.container_log("sandboxed", "labeller", "agent");
    let line_with = |needle: &str, after: usize| -> Result<(usize, String), String> {
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            let log = agent_log();
            if let Some((i, line)) = log
                .lines()
                .enumerate()
                .skip(after)
                .find(|(_, l)| l.contains(needle))
            {
                return Ok((i, line.to_string()));
            }
            if std::time::Instant::now() > deadline {
                return Err(format!(
                    "the agent never printed {needle:?}:\n{log}\nproxy:\n{}",
                    cp.container_log("sandboxed", "labeller", "agentgate-proxy")
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let (seen, refused) = line_with("-> 403", 0)?;
    let (tool_seen, tool_refused) = line_with("refused by agentgate", 0)?;
    println!(
        "\x1b[1m# The agent labels an issue; its policy grants GET only, so the proxy refuses, with the reason\x1b[0m\n$ kubectl logs labeller -n sandboxed -c agent\n{refused}"
    );
    println!(
        "\x1b[1m# It also calls the tracker's MCP tool add_label; only get_issue is granted, so the proxy answers the call itself, as a JSON-RPC error the model reads\x1b[0m\n{tool_refused}"
    );
    println!(
        "\n\x1b[1m# The agent asks for the grant; the sandbox is in ask mode, so a reviewer decides\x1b[0m\n$ kubectl apply -f label-issues.yaml --as system:serviceaccount:sandboxed:labeller"
    );
    print!(
        "{}",
        cp.run_stdin(
            &[
                "apply",
                "-f",
                "-",
                "--as",
                "system:serviceaccount:sandboxed:labeller"
            ],
            DEMO_PROPOSAL
        )
        .map_err(|e| e.to_string())?
    );
    cp.wait_proposal_phase(
        "sandboxed",
        "label-issues",
        "AwaitingApproval",
        Duration::from_secs(60),
    )
    .map_err(|last| {
        format!(
            "label-issues never awaited approval ({last:?})\n{}",
            cp.chart_logs(40)
        )
    })?;
    println!(
        "$ kubectl agentgate approve label-issues -n sandboxed --as alice --reason 'labels are harmless'"
    );
    let approved_at = std::time::Instant::now();
    let approved = cp
        .plugin(&[
            "approve",
            "label-issues",
            "-n",
            "sandboxed",
            "--as",
            "alice",
            "--reason",
            "labels are harmless",
        ])
        .map_err(|e| e.to_string())?;
    print!(
        "{}{}",
        String::from_utf8_lossy(&approved.stdout),
        String::from_utf8_lossy(&approved.stderr)
    );
    if !approved.status.success() {
        return Err("alice's approval was refused".into());
    }
    let (_, allowed) = line_with("-> 200", seen)?;
    println!(
        "\x1b[1m# Committed, and the running agent is allowed {:.1} s after the approval (no restart: the operator pushes the commit to the sandbox's proxy; the kubelet keeps its default one-minute sync)\x1b[0m\n{allowed}",
        approved_at.elapsed().as_secs_f64()
    );
    // The tracker's upstream echoes the path it was sent: the call got there.
    let (_, tool_allowed) = line_with("-> {\"path\": \"/mcp\"", tool_seen)?;
    println!(
        "\x1b[1m# The same proposal granted add_label with label triaged: the call now reaches the tracker\x1b[0m\n{tool_allowed}"
    );
    Ok(())
}

/// Credentials as authority (docs/policy-semantics.md §9): the prover's
/// counterexample for a proposal that widens where a token goes, then a
/// sandbox Pod whose agent holds a placeholder: the upstream receives the
/// real token on the bound request, and the placeholder sent elsewhere is
/// refused.
fn credentials(cp: &ControlPlane, images: &Images) -> Result<(), String> {
    use agentgate_e2e::probe::{CRED, credential_manifests};
    println!(
        "\n\x1b[1m# Credentials are authority: a proposal that looks narrow but binds the GitHub token to every repository's comments is caught, the credential named\x1b[0m"
    );
    let files = [
        "examples/gitops/namespaces.yaml",
        "examples/credentials/maximum.yaml",
        "examples/credentials/sandbox.yaml",
        "examples/credentials/widen-comments.yaml",
    ];
    println!("$ agentgate verify {}", files.join(" "));
    let verify = Command::new(agentgate_e2e::operator_binary().map_err(|e| e.to_string())?)
        .arg("verify")
        .args(files)
        .current_dir(agentgate_e2e::repo_root())
        .output()
        .map_err(|e| e.to_string())?;
    print!("{}", String::from_utf8_lossy(&verify.stdout));
    println!(
        "\n\x1b[1m# A sandbox whose agent holds only a placeholder of the token (the Secret is mounted into the proxy container alone)\x1b[0m"
    );
    cp.apply_yaml(&credential_manifests(&images.agent_image))
        .map_err(|e| e.to_string())?;
    cp.wait_pod_ready(CRED, "cred-bot", Duration::from_secs(180))
        .map_err(|last| format!("the credentials Pod never became Ready ({last:?})"))?;
    let log = || cp.container_log(CRED, "cred-bot", "agent");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let round = loop {
        if let Some(line) = log().lines().find(|l| l.starts_with("CRED ")) {
            break line.to_string();
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("the credentials agent never probed:\n{}", log()));
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    println!("$ kubectl logs cred-bot -n {CRED} -c agent\n{round}");
    println!(
        "  (envok: $GITHUB_TOKEN is a placeholder; bound: the credentialed GET reached the API; unbound, misuse: the placeholder sent where no rule binds it, or in a query parameter, refused; leak: the agent found the secret nowhere)"
    );
    let body = log()
        .lines()
        .find_map(|l| l.strip_prefix("BODY misuse ").map(str::to_string))
        .unwrap_or_default();
    println!("{body}");
    let auth: Vec<String> = cp
        .log_tail("upstream", 100_000)
        .lines()
        .filter(|l| l.starts_with("AUTH "))
        .take(1)
        .map(str::to_string)
        .collect();
    println!(
        "\x1b[1m# What the API received: the real token, on the bound request only\x1b[0m\n{}",
        auth.join("\n")
    );
    Ok(())
}

fn main() -> ExitCode {
    match std::env::args().nth(1).as_deref() {
        Some("up") => match up() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("agentgate-demo: {e}");
                ExitCode::FAILURE
            }
        },
        Some("down") => down(),
        _ => {
            eprintln!("usage: agentgate-demo up|down");
            ExitCode::from(2)
        }
    }
}
