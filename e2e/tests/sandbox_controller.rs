#![allow(clippy::expect_used, clippy::unwrap_used)] // test code: a panic is a failed test
//! The AgentSandbox reconciler against a real API server: the effective
//! policy is proved inside every governing maximum, what is not is revoked
//! and named, the ConfigMap for the enforcement proxy follows, and a
//! tightened maximum revokes a committed grant.

use std::time::Duration;

use agentgate_e2e::wait::{self, Kind};
use agentgate_e2e::{AGENT_IMAGE, ControlPlane, Operator, Watched, api_requests, probe};

const LIMIT: Duration = Duration::from_secs(60);

fn run(cp: &ControlPlane, args: &[&str]) {
    cp.run(args).expect("kubectl");
}

fn apply(cp: &ControlPlane, yaml: &str) {
    cp.apply_yaml(yaml).expect("kubectl apply");
}

/// Waits through the watch until the jsonpath `template` of `watched`
/// satisfies `want`; panics with `what`, the last reading and the
/// operator's log.
fn wait(
    cp: &ControlPlane,
    op: &Operator,
    (watched, template): (Watched<'_>, &str),
    want: impl Fn(&str) -> bool + Send + Sync + 'static,
    what: &str,
) -> String {
    cp.wait_logged(op, watched, template, LIMIT, want, what)
}

/// Waits until the policy in the ConfigMap `ns/name` satisfies `want`.
fn config_map(
    cp: &ControlPlane,
    op: &Operator,
    name: &str,
    ns: &str,
    want: impl Fn(&str) -> bool + Send + Sync + 'static,
) -> String {
    let map = Watched::Object(Kind::CONFIG_MAP, ns, name);
    wait(
        cp,
        op,
        (map, "{.data.policy\\.yaml}"),
        want,
        &format!("ConfigMap {name}"),
    )
}

/// Waits until the egress rules of the NetworkPolicy `agents/name`, each
/// printed as `[port port]` (kubectl's
/// `{range .spec.egress[*]}[{.ports[*].port}]{end}`), satisfy `want`.
fn egress_ports(
    cp: &ControlPlane,
    op: &Operator,
    name: &str,
    want: impl Fn(&str) -> bool + Send + Sync + 'static,
    what: &str,
) -> String {
    cp.wait_object(
        Kind::NETWORK_POLICY,
        "agents",
        name,
        LIMIT,
        |policy| {
            policy["spec"]["egress"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|rule| {
                    format!(
                        "[{}]",
                        wait::template(rule, "{.ports[*].port}").unwrap_or_default()
                    )
                })
                .collect()
        },
        want,
    )
    .unwrap_or_else(|last| panic!("{what}: last saw {last:?}\noperator log:\n{}", op.log()))
}

/// What a wait reads of the sandbox (as JSON), and what to call it.
struct Field {
    what: String,
    read: Box<dyn Fn(&serde_json::Value) -> String + Send + Sync>,
}

/// Waits through the watch until `field` of the AgentSandbox `ns/name`
/// satisfies `want`; panics with the last value and the operator's log.
fn sandbox(
    cp: &ControlPlane,
    op: &Operator,
    name: &str,
    ns: &str,
    field: Field,
    want: impl Fn(&str) -> bool + Send + Sync + 'static,
) -> String {
    cp.wait_object(Kind::SANDBOX, ns, name, LIMIT, field.read, want)
        .unwrap_or_else(|last| {
            panic!(
                "{name} {}: last saw {last:?}\noperator log:\n{}",
                field.what,
                op.log()
            )
        })
}

/// `field` of the condition `type_`.
fn condition(type_: &'static str, field: &'static str) -> Field {
    Field {
        what: format!("{type_} {field}"),
        read: Box::new(move |s| wait::condition_field(s, type_, field)),
    }
}

/// The jsonpath `template` (`{.status.revision}`), read as kubectl prints
/// it ([`wait::template`]).
fn path(template: &'static str) -> Field {
    assert!(
        wait::template(&serde_json::Value::Null, template).is_some(),
        "{template} is not a template the typed waits read"
    );
    Field {
        what: template.to_string(),
        read: Box::new(move |s| wait::template(s, template).unwrap_or_default()),
    }
}

const OVERREACH: &str = "apiVersion: agentgate.dev/v1alpha1
kind: AgentSandbox
metadata: {name: overreach, namespace: agents}
spec:
  agentServiceAccount: bot
  policy:
    filesystem: {readWrite: [/sandbox, /etc]}
    network:
      - name: read
        binaries: [/usr/local/bin/agent]
        endpoints:
          - {host: api.github.com, ports: [443], protocol: rest, rules: [{methods: [GET], path: /repos/acme/**}]}
      - name: write
        binaries: [/usr/local/bin/agent]
        endpoints:
          - {host: api.github.com, ports: [443], protocol: rest, access: full}
";

const UNMANAGED: &str = "apiVersion: agentgate.dev/v1alpha1
kind: AgentSandbox
metadata: {name: loner, namespace: other}
spec:
  agentServiceAccount: bot
  policy:
    network: [{name: read, endpoints: [{host: api.github.com, ports: [443]}]}]
";

const WITH_POD: &str = "apiVersion: agentgate.dev/v1alpha1
kind: AgentSandbox
metadata: {name: podded, namespace: agents}
spec:
  agentServiceAccount: bot
  template:
    metadata: {labels: {app: bot}}
    spec:
      containers: [{name: agent, image: ghcr.io/acme/bot@sha256:0000000000000000000000000000000000000000000000000000000000000000, command: [/app/agent]}]
  policy:
    filesystem: {readOnly: [/app]}
";

/// A template the operator cannot wrap (no command) and one that would
/// step around the proxy (privileged, NET_ADMIN, host network).
const UNWRAPPABLE: &str = "apiVersion: agentgate.dev/v1alpha1
kind: AgentSandbox
metadata: {name: bare, namespace: agents}
spec:
  agentServiceAccount: bot
  template:
    spec:
      containers: [{name: agent, image: ghcr.io/acme/bot@sha256:0000000000000000000000000000000000000000000000000000000000000000}]
  policy:
    filesystem: {readOnly: [/app]}
---
apiVersion: agentgate.dev/v1alpha1
kind: AgentSandbox
metadata: {name: privileged, namespace: agents}
spec:
  agentServiceAccount: bot
  template:
    spec:
      hostNetwork: true
      containers: [{name: agent, image: ghcr.io/acme/bot@sha256:0000000000000000000000000000000000000000000000000000000000000000, command: [/app/agent],
        securityContext: {privileged: true, capabilities: {add: [NET_ADMIN]}}}]
  policy:
    filesystem: {readOnly: [/app]}
";

/// org-ceiling without its github rule: the triage bot's grant must go.
const TIGHTENED: &str = "apiVersion: agentgate.dev/v1alpha1
kind: MaximumPolicy
metadata: {name: org-ceiling}
spec:
  selector:
    namespaceSelector: {matchLabels: {team: ml}}
  policy:
    filesystem:
      readOnly: [/usr, /app, /etc/ssl]
      readWrite: [/sandbox, /tmp]
    network:
      - name: package-mirrors
        binaries: [/usr/bin/pip]
        endpoints: [{host: pypi.org, ports: [443], protocol: rest, access: read-only}]
";

#[test]
fn sandboxes_are_proved_revoked_and_materialised() {
    let cp = ControlPlane::start().expect("local control plane");
    cp.install_crds().expect("CRDs");
    run(&cp, &["create", "namespace", "agents"]);
    run(&cp, &["label", "namespace", "agents", "team=ml"]);
    run(&cp, &["create", "namespace", "other"]);
    let op = cp.start_operator().expect("operator");
    run(&cp, &["apply", "-f", "examples/maximum.yaml"]);
    run(&cp, &["apply", "-f", "examples/sandbox.yaml"]);

    // Inside the ceiling: proved, committed, materialised.
    sandbox(
        &cp,
        &op,
        "triage-bot",
        "agents",
        condition("WithinMaximum", "status"),
        |s| s == "True",
    );
    sandbox(
        &cp,
        &op,
        "triage-bot",
        "agents",
        path("{.status.governedBy[*]}"),
        |s| s == "org-ceiling",
    );
    sandbox(
        &cp,
        &op,
        "triage-bot",
        "agents",
        path("{.status.revision}"),
        |s| s == "1",
    );
    let policy = config_map(&cp, &op, "triage-bot-policy", "agents", |s| {
        s.contains("/repos/acme/*/issues/**")
    });
    assert!(policy.contains("github-read"), "{policy}");

    // Overreaching: the write rule and /etc are revoked and named, the read
    // rule stays, and the ConfigMap holds only what was proved.
    apply(&cp, OVERREACH);
    sandbox(
        &cp,
        &op,
        "overreach",
        "agents",
        condition("WithinMaximum", "reason"),
        |s| s == "Revoked",
    );
    let message = sandbox(
        &cp,
        &op,
        "overreach",
        "agents",
        condition("WithinMaximum", "message"),
        |s| !s.is_empty(),
    );
    assert!(message.contains("network rule \"write\""), "{message}");
    assert!(message.contains("filesystem.readWrite /etc"), "{message}");
    assert!(
        message.contains("exceeds MaximumPolicy \"org-ceiling\""),
        "{message}"
    );
    sandbox(
        &cp,
        &op,
        "overreach",
        "agents",
        path("{.status.effectivePolicy.network[*].name}"),
        |s| s == "read",
    );
    let cm = config_map(&cp, &op, "overreach-policy", "agents", |s| {
        s.contains("name: read")
    });
    assert!(!cm.contains("name: write") && !cm.contains("/etc"), "{cm}");
    wait(
        &cp,
        &op,
        (
            Watched::List(Kind::EVENT, "agents", "reason=Revoked"),
            "{.items[*].metadata.name}",
        ),
        |s| !s.trim().is_empty(),
        "a Revoked event",
    );

    // No governing maximum: nothing is granted.
    apply(&cp, UNMANAGED);
    sandbox(
        &cp,
        &op,
        "loner",
        "other",
        condition("WithinMaximum", "reason"),
        |s| s == "Unmanaged",
    );
    let cm = config_map(&cp, &op, "loner-policy", "other", |_| true);
    assert!(!cm.contains("api.github.com"), "{cm}");

    // The agent Pod is materialised from spec.template, owned and labelled.
    apply(&cp, WITH_POD);
    let owner = wait(
        &cp,
        &op,
        (
            Watched::Object(Kind::POD, "agents", "podded"),
            "{.metadata.labels.agentgate\\.dev/sandbox} {.metadata.ownerReferences[0].kind}",
        ),
        |s| !s.is_empty(),
        "the agent Pod",
    );
    assert_eq!(owner, "podded AgentSandbox");
    // ... in the enforced shape of docs/design.md §10, with its CA, the CAs
    // published for the proxy's bundle, and NetworkPolicy.
    let shape = cp
        .run(&[
            "get", "pod", "podded", "-n", "agents", "-o",
            "jsonpath={.spec.shareProcessNamespace} {.spec.initContainers[*].name} {.spec.initContainers[1].restartPolicy} {.spec.containers[0].command}",
        ])
        .unwrap();
    assert_eq!(
        shape.trim(),
        r#"true agentgate-init agentgate-proxy Always ["/agentgate/bin/agentgate-exec","--policy","/agentgate/policy/policy.yaml","--policy-mount","/agentgate","--proxy-uid","1337","--placeholders","/agentgate/placeholders","--","/app/agent"]"#
    );
    let secret = cp
        .run(&[
            "get",
            "secret",
            "podded-ca",
            "-n",
            "agents",
            "-o",
            "jsonpath={.type} {.metadata.ownerReferences[0].kind}",
        ])
        .unwrap();
    assert_eq!(secret.trim(), "kubernetes.io/tls AgentSandbox");
    let bundle = wait(
        &cp,
        &op,
        (
            Watched::Object(Kind::CONFIG_MAP, "agents", "podded-policy"),
            "{.data.sandbox-ca\\.pem}",
        ),
        |b| b.contains("BEGIN CERTIFICATE"),
        "the sandbox CAs",
    );
    // The CA alone: the proxy adds the Mozilla roots from its image, so
    // etcd holds a few KB per sandbox, not a few hundred.
    assert_eq!(bundle.matches("BEGIN CERTIFICATE").count(), 1, "{bundle}");
    assert!(bundle.len() < 2_000, "{} bytes", bundle.len());
    let egress = cp
        .run(&[
            "get",
            "networkpolicy",
            "podded-egress",
            "-n",
            "agents",
            "-o",
            "jsonpath={.spec.policyTypes} {.spec.egress[0].ports[*].port}",
        ])
        .unwrap();
    assert_eq!(egress.trim(), r#"["Egress"] 53 53"#);
    // Widened by hand (any port, anywhere), then deleted: each is put right
    // at once, from the owned NetworkPolicies' watch (no periodic resync
    // would do it within the limit).
    cp.run(&[
        "patch",
        "networkpolicy",
        "podded-egress",
        "-n",
        "agents",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/spec/egress/-","value":{}}]"#,
    ])
    .unwrap();
    egress_ports(
        &cp,
        &op,
        "podded-egress",
        |s| s.trim() == "[53 53]",
        "the widened NetworkPolicy put right",
    );
    cp.run(&["delete", "networkpolicy", "podded-egress", "-n", "agents"])
        .unwrap();
    egress_ports(
        &cp,
        &op,
        "podded-egress",
        |s| s.trim() == "[53 53]",
        "the deleted NetworkPolicy re-created",
    );

    // Templates that cannot be confined run no pod, and Ready says why.
    apply(&cp, UNWRAPPABLE);
    let ready = sandbox(
        &cp,
        &op,
        "bare",
        "agents",
        condition("Ready", "reason"),
        |s| s == "CommandRequired",
    );
    assert_eq!(ready, "CommandRequired");
    let message = sandbox(
        &cp,
        &op,
        "bare",
        "agents",
        condition("Ready", "message"),
        |s| !s.is_empty(),
    );
    assert!(message.contains("add command:"), "{message}");
    let refused = sandbox(
        &cp,
        &op,
        "privileged",
        "agents",
        condition("Ready", "message"),
        |s| s.contains("hostNetwork"),
    );
    for field in ["hostNetwork", "privileged", "NET_ADMIN"] {
        assert!(refused.contains(field), "{field}: {refused}");
    }
    for name in ["bare", "privileged"] {
        assert!(
            cp.kubectl(&["get", "pod", name, "-n", "agents"])
                .unwrap()
                .status
                .code()
                != Some(0),
            "{name} got a pod"
        );
    }

    // The maximum is tightened; the committed grant is revoked
    // and WithinMaximum=False names it.
    apply(&cp, TIGHTENED);
    let message = sandbox(
        &cp,
        &op,
        "triage-bot",
        "agents",
        condition("WithinMaximum", "message"),
        |s| s.contains("network rule \"github-read\""),
    );
    assert!(message.contains("org-ceiling"), "{message}");
    // Revoked grants: not Ready, Stalled with the same message.
    sandbox(
        &cp,
        &op,
        "triage-bot",
        "agents",
        Field {
            what: "Ready status and Stalled reason".into(),
            read: Box::new(|s| {
                format!(
                    "{} {}",
                    wait::condition_field(s, "Ready", "status"),
                    wait::condition_field(s, "Stalled", "reason")
                )
            }),
        },
        |s| s == "False Revoked",
    );
    sandbox(
        &cp,
        &op,
        "triage-bot",
        "agents",
        path("{.status.revision}"),
        |s| s == "2",
    );
    config_map(&cp, &op, "triage-bot-policy", "agents", |s| {
        !s.contains("api.github.com")
    });
}

/// Sandboxes naming a missing account, an account someone made, the same
/// account as another sandbox, and the namespace's `default`.
const ACCOUNTS: &str = "apiVersion: agentgate.dev/v1alpha1
kind: AgentSandbox
metadata: {name: fresh, namespace: agents}
spec:
  agentServiceAccount: labeller
  policy:
    filesystem: {readOnly: [/app]}
---
apiVersion: agentgate.dev/v1alpha1
kind: AgentSandbox
metadata: {name: borrower, namespace: agents}
spec:
  agentServiceAccount: deployer
  policy:
    filesystem: {readOnly: [/app]}
---
apiVersion: agentgate.dev/v1alpha1
kind: AgentSandbox
metadata: {name: defaulted, namespace: agents}
spec:
  agentServiceAccount: default
  template:
    spec:
      containers: [{name: agent, image: ghcr.io/acme/bot@sha256:0000000000000000000000000000000000000000000000000000000000000000, command: [/app/agent]}]
  policy:
    filesystem: {readOnly: [/app]}
";

/// The same account as `fresh`, applied once `fresh` owns it.
const SECOND: &str = "apiVersion: agentgate.dev/v1alpha1
kind: AgentSandbox
metadata: {name: second, namespace: agents}
spec:
  agentServiceAccount: labeller
  policy:
    filesystem: {readOnly: [/app]}
";

/// The agent's ServiceAccount exists because the operator (as the chart's
/// ServiceAccount, so with exactly the chart's RBAC) creates it, owned by
/// the sandbox; an account it did not create (someone's deployer, another
/// sandbox's) is never changed. No controller-manager runs here, so the
/// namespace has no `default` account, and the operator does not make one.
#[test]
fn the_agent_service_account_is_created_owned_and_never_taken_over() {
    let (cp, op, _port) = ControlPlane::with_webhook(&[]).expect("chart, operator and webhook");
    let account = |name: &str, output: &str| {
        cp.run(&["get", "serviceaccount", name, "-n", "agents", "-o", output])
            .expect("kubectl get serviceaccount")
            .trim()
            .to_string()
    };
    apply(
        &cp,
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: deployer, namespace: agents, labels: {team: ci}}\n",
    );
    let theirs =
        "jsonpath={.metadata.resourceVersion} {.metadata.labels} {.metadata.ownerReferences}";
    let before = account("deployer", theirs);
    apply(&cp, ACCOUNTS);

    let owner = wait(
        &cp,
        &op,
        (
            Watched::Object(Kind::SERVICE_ACCOUNT, "agents", "labeller"),
            "{.metadata.labels.agentgate\\.dev/sandbox} {.metadata.ownerReferences[*].kind} {.metadata.ownerReferences[*].name} {.metadata.ownerReferences[*].uid} {.metadata.ownerReferences[*].controller} {.metadata.ownerReferences[*].blockOwnerDeletion}",
        ),
        |s| !s.is_empty(),
        "ServiceAccount labeller",
    );
    let uid = cp
        .run(&[
            "get",
            "asbx",
            "fresh",
            "-n",
            "agents",
            "-o",
            "jsonpath={.metadata.uid}",
        ])
        .unwrap();
    assert_eq!(
        owner,
        format!("fresh AgentSandbox fresh {} true true", uid.trim())
    );

    // The account someone made is used as is: the Event says so, and not a
    // byte of it changed.
    let events = |reason: &str| {
        wait(
            &cp,
            &op,
            (
                Watched::List(Kind::EVENT, "agents", &format!("reason={reason}")),
                "{.items[*].involvedObject.name}",
            ),
            |s| !s.trim().is_empty(),
            &format!("a {reason} Event"),
        )
    };
    assert_eq!(events("ServiceAccountNotOwned"), "borrower");
    assert_eq!(account("deployer", theirs), before);
    assert!(before.contains(r#"{"team":"ci"}"#), "{before}");

    // Another sandbox naming the same account does not take it over.
    apply(&cp, SECOND);
    assert_eq!(events("ServiceAccountOwnedElsewhere"), "second");
    let owners = "jsonpath={.metadata.ownerReferences[*].name} {.metadata.ownerReferences[*].uid}";
    assert_eq!(account("labeller", owners), format!("fresh {}", uid.trim()));

    // `default` is the ServiceAccount controller's: no account is made for
    // it. Its Pod is tried after the account is decided, and refused here
    // (the image is not scanned): once the refusal shows, the decision is
    // made.
    wait(
        &cp,
        &op,
        (
            Watched::List(
                Kind::EVENT,
                "agents",
                "involvedObject.name=defaulted,reason=PodRefused",
            ),
            "{.items[*].metadata.name}",
        ),
        |names| !names.is_empty(),
        "the defaulted sandbox's Pod tried",
    );
    let missing = cp
        .kubectl(&["get", "serviceaccount", "default", "-n", "agents"])
        .unwrap();
    assert!(!missing.status.success(), "a default account was made");

    // Its own account, deleted, is created again at once (it is watched).
    let first = account("labeller", "jsonpath={.metadata.uid}");
    run(
        &cp,
        &["delete", "serviceaccount", "labeller", "-n", "agents"],
    );
    let again = wait(
        &cp,
        &op,
        (
            Watched::Object(Kind::SERVICE_ACCOUNT, "agents", "labeller"),
            "{.metadata.uid} {.metadata.ownerReferences[*].name}",
        ),
        {
            let first = first.clone();
            move |s| !s.is_empty() && !s.starts_with(&first)
        },
        "ServiceAccount labeller again",
    );
    assert!(again.ends_with(" fresh"), "{again}");
}

/// A tightened ceiling that revokes a sandbox's only rule costs the API
/// server what the revocation changes, once each, in one reconcile: the
/// status, the policy ConfigMap the proxy enforces, the egress
/// NetworkPolicy (its port is gone), one read of the sandbox CA, and no
/// LIST of every AgentScan (the findings read the scan watch's view;
/// docs/design.md §5). Counted by the API server.
#[test]
fn a_revocation_writes_what_it_changes_once_and_lists_nothing() {
    let cp = ControlPlane::start().expect("local control plane");
    cp.install_crds().expect("CRDs");
    let op = cp.start_operator().expect("operator");
    apply(&cp, &probe::ceiling("fleet", false));
    apply(&cp, &probe::fleet_manifests("fleet", 1, AGENT_IMAGE));
    let revision = |want: u64| {
        sandbox(
            &cp,
            &op,
            "fleet-0",
            "fleet",
            path("{.status.revision}"),
            move |r: &str| r.parse::<u64>().is_ok_and(|r| r >= want),
        )
    };
    let committed: u64 = revision(1).parse().expect("a revision");
    let data_plane_revision = |want: u64| {
        wait(
            &cp,
            &op,
            (
                Watched::Object(Kind::CONFIG_MAP, "fleet", "fleet-0-policy"),
                "{.data.revision}",
            ),
            move |r| r == want.to_string(),
            "the ConfigMap at the committed revision",
        )
    };
    data_plane_revision(committed);
    // What the sandbox's reconciles still had in flight settles first.
    std::thread::sleep(Duration::from_secs(2));
    let before = api_requests::counted(&cp).expect("the API server's metrics");
    apply(&cp, &probe::ceiling("fleet", true));
    data_plane_revision(committed + 1);
    // The reconcile's writes after the ConfigMap's.
    std::thread::sleep(Duration::from_secs(2));
    let after = api_requests::counted(&cp).expect("the API server's metrics");
    let requests = |verb: &str, group: &str, resource: &str, subresource: &str| {
        let key = (
            verb.into(),
            group.into(),
            resource.into(),
            subresource.into(),
        );
        after.get(&key).map_or(0.0, |a| a.requests) - before.get(&key).map_or(0.0, |b| b.requests)
    };
    let seen = api_requests::busiest(&before, &after, 20);
    for (verb, group, resource, subresource) in [
        ("PUT", "agentgate.dev", "agentsandboxes", "status"),
        ("APPLY", "", "configmaps", ""),
        ("APPLY", "networking.k8s.io", "networkpolicies", ""),
    ] {
        assert_eq!(
            requests(verb, group, resource, subresource),
            1.0,
            "{verb} {resource}: {seen}"
        );
    }
    assert_eq!(
        cp.run(&[
            "get",
            "networkpolicy",
            "fleet-0-egress",
            "-n",
            "fleet",
            "-o",
            "jsonpath={.spec.egress[*].ports[*].port}",
        ])
        .expect("the NetworkPolicy"),
        "53 53",
        "the revoked rule's port is no longer open"
    );
    assert_eq!(
        requests("LIST", "agentgate.dev", "agentscans", ""),
        0.0,
        "{seen}"
    );
    // One reconcile, which reads the sandbox CA once: the watch events of
    // its own writes start no second one, even when they outrun the
    // writes' answers.
    assert_eq!(
        requests("GET", "", "secrets", ""),
        1.0,
        "{seen}\n{}",
        op.log()
    );
}
