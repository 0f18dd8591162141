#![allow(clippy::expect_used, clippy::unwrap_used)] // test code: a panic is a failed test
//! The MaximumPolicy reconciler, as a separate process against a real API
//! server: it validates ceilings, proves them against their own invariants
//! and counts the sandboxes each governs, following namespace labels.

use std::time::Duration;

use agentgate_e2e::ControlPlane;

const LIMIT: Duration = Duration::from_secs(60);

fn run(cp: &ControlPlane, args: &[&str]) {
    cp.run(args).expect("kubectl");
}

fn jsonpath(path: &str) -> String {
    format!("jsonpath={path}")
}

#[test]
fn maximum_status_tracks_validity_consistency_and_governed_sandboxes() {
    let cp = ControlPlane::start().expect("local control plane");
    cp.install_crds().expect("CRDs");
    run(&cp, &["create", "namespace", "agents"]);
    run(&cp, &["label", "namespace", "agents", "team=ml"]);
    run(&cp, &["apply", "-f", "examples/sandbox.yaml"]);
    let operator = cp.start_operator().expect("operator");
    run(
        &cp,
        &[
            "apply",
            "-f",
            "examples/maximum.yaml",
            "-f",
            "examples/maximum-egress.yaml",
        ],
    );

    let status = |name: &str, path: &str, want: &str| {
        let args = ["get", "maxpol", name, "-o", &jsonpath(path)];
        cp.wait_for(&args, LIMIT, |out| out == want)
            .unwrap_or_else(|last| {
                panic!(
                    "{name} {path}: wanted {want:?}, last saw {last:?}\noperator log:\n{}",
                    operator.log()
                )
            })
    };
    let condition = |type_: &str, field: &str| {
        format!("{{.status.conditions[?(@.type==\"{type_}\")].{field}}}")
    };

    // org-ceiling selects namespaces labelled team=ml and its invariant is
    // outside the ceiling.
    status("org-ceiling", &condition("Ready", "status"), "True");
    status("org-ceiling", &condition("Consistent", "status"), "True");
    status("org-ceiling", "{.status.governedSandboxes}", "1");
    status("org-ceiling", "{.status.observedGeneration}", "1");

    // egress-ceiling allows every host on 80/443, so it allows the metadata
    // service its own invariant forbids: Consistent=False with the witness.
    status(
        "egress-ceiling",
        &condition("Consistent", "status"),
        "False",
    );
    status(
        "egress-ceiling",
        &condition("Consistent", "reason"),
        "IntersectsInvariant",
    );
    // Not in its desired state until a person fixes it (kstatus: Failed).
    status("egress-ceiling", &condition("Ready", "status"), "False");
    status(
        "egress-ceiling",
        &condition("Stalled", "reason"),
        "IntersectsInvariant",
    );
    let args = [
        "get",
        "maxpol",
        "egress-ceiling",
        "-o",
        &jsonpath(&condition("Consistent", "message")),
    ];
    let message = cp
        .wait_for(&args, LIMIT, |m| !m.is_empty())
        .unwrap_or_default();
    assert!(
        message.contains("invariant \"no-cloud-metadata\""),
        "{message}"
    );
    assert!(
        message.contains("169.254.169.254") || message.contains("metadata.google.internal"),
        "{message}"
    );

    // The decision is an Event a person can find.
    cp.wait_for(
        &[
            "get",
            "events",
            "--field-selector",
            "reason=IntersectsInvariant",
            "-o",
            "name",
        ],
        LIMIT,
        |out| !out.trim().is_empty(),
    )
    .unwrap_or_else(|_| {
        panic!(
            "no IntersectsInvariant event\noperator log:\n{}",
            operator.log()
        )
    });

    // Relabelling the namespace moves the sandbox out of org-ceiling.
    run(&cp, &["label", "namespace", "agents", "team-"]);
    status("org-ceiling", "{.status.governedSandboxes}", "0");
    status("egress-ceiling", "{.status.governedSandboxes}", "1");

    // An invalid ceiling is reported, not ignored.
    let bad = "apiVersion: agentgate.dev/v1alpha1\nkind: MaximumPolicy\nmetadata: {name: bad-glob}\nspec:\n  policy:\n    network:\n      - name: r\n        endpoints: [{host: \"api.*.example.com\", ports: [443]}]\n";
    let output = cp
        .kubectl_stdin(&["apply", "-f", "-"], bad)
        .expect("kubectl");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    status("bad-glob", &condition("Ready", "status"), "False");
    status("bad-glob", &condition("Ready", "reason"), "InvalidPolicy");
    status("bad-glob", &condition("Stalled", "status"), "True");
}
