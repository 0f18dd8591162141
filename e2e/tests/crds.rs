//! The generated CRDs on a real API server: they install, the examples
//! apply, and malformed objects are refused by the schema with field paths,
//! before anything reaches the operator.

use agentgate_e2e::ControlPlane;

fn ok(output: std::process::Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{what} failed:\n{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn refused(output: std::process::Output, what: &str) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "{what} was accepted");
    stderr
}

const SANDBOX: &str = "apiVersion: agentgate.dev/v1alpha1
kind: AgentSandbox
metadata: {name: bad, namespace: agents}
spec:
  agentServiceAccount: bot
  policy:
    network:
      - name: r
        endpoints:
          - host: api.github.com
            ports: [443]
            protocol: rest
            access: read-only
";

#[test]
fn crds_install_examples_apply_and_bad_objects_are_refused() {
    let cp = ControlPlane::start().expect("local control plane");
    cp.install_crds().expect("CRDs");
    ok(
        cp.kubectl(&["create", "namespace", "agents"])
            .expect("kubectl"),
        "creating a namespace",
    );
    for example in [
        "examples/maximum.yaml",
        "examples/maximum-egress.yaml",
        "examples/sandbox.yaml",
    ] {
        ok(
            cp.kubectl(&["apply", "-f", example]).expect("kubectl"),
            example,
        );
    }

    // Short names, printer columns and the category.
    let table = ok(
        cp.kubectl(&["get", "maxpol"]).expect("kubectl"),
        "get maxpol",
    );
    for column in [
        "NAME",
        "READY",
        "CONSISTENT",
        "GOVERNED",
        "AGE",
        "org-ceiling",
        "egress-ceiling",
    ] {
        assert!(table.contains(column), "{column} missing from:\n{table}");
    }
    let all = ok(
        cp.kubectl(&["get", "agentgate", "-A"]).expect("kubectl"),
        "get agentgate",
    );
    assert!(
        all.contains("agentsandbox.agentgate.dev/triage-bot"),
        "{all}"
    );
    let sandbox = ok(
        cp.kubectl(&[
            "get",
            "asbx",
            "triage-bot",
            "-n",
            "agents",
            "-o",
            "jsonpath={.spec.policy.network[0].endpoints[0].rules[0].path}",
        ])
        .expect("kubectl"),
        "get asbx",
    );
    assert_eq!(
        sandbox, "/repos/acme/*/issues/**",
        "the policy round-trips unchanged"
    );

    // Malformed objects are refused by the API server, naming the field.
    let wrong_access = SANDBOX.replace("access: read-only", "access: readonly");
    let err = refused(
        cp.kubectl_stdin(&["apply", "-f", "-"], &wrong_access)
            .expect("kubectl"),
        "access: readonly",
    );
    assert!(
        err.contains("spec.policy.network[0].endpoints[0].access"),
        "{err}"
    );
    assert!(err.contains("Unsupported value: \"readonly\""), "{err}");

    let wrong_port = SANDBOX.replace("ports: [443]", "ports: [https]");
    let err = refused(
        cp.kubectl_stdin(&["apply", "-f", "-"], &wrong_port)
            .expect("kubectl"),
        "ports: [https]",
    );
    assert!(
        err.contains("spec.policy.network[0].endpoints[0].ports[0]"),
        "{err}"
    );

    let wrong_protocol = SANDBOX.replace("protocol: rest", "protocol: https");
    let err = refused(
        cp.kubectl_stdin(&["apply", "-f", "-"], &wrong_protocol)
            .expect("kubectl"),
        "protocol: https",
    );
    assert!(
        err.contains("spec.policy.network[0].endpoints[0].protocol"),
        "{err}"
    );

    let no_account = SANDBOX.replace("  agentServiceAccount: bot\n", "");
    let err = refused(
        cp.kubectl_stdin(&["apply", "-f", "-"], &no_account)
            .expect("kubectl"),
        "no agentServiceAccount",
    );
    assert!(err.contains("spec.agentServiceAccount"), "{err}");

    let no_ports = SANDBOX.replace("            ports: [443]\n", "");
    let err = refused(
        cp.kubectl_stdin(&["apply", "-f", "-"], &no_ports)
            .expect("kubectl"),
        "no ports",
    );
    assert!(err.contains("spec.policy.network[0].endpoints[0]"), "{err}");
    assert!(err.contains("at least one port is required"), "{err}");

    // The well-formed one is accepted.
    ok(
        cp.kubectl_stdin(&["apply", "-f", "-"], SANDBOX)
            .expect("kubectl"),
        "a valid sandbox",
    );
}
