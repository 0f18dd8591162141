#![allow(clippy::expect_used, clippy::unwrap_used)] // test code: a panic is a failed test
//! The MaximumPolicy reconciler, as a separate process against a real API
//! server: it validates ceilings, proves them against their own invariants
//! and counts the sandboxes each governs, following namespace labels.

use std::time::Duration;

use agentgate_e2e::ControlPlane;
use agentgate_e2e::wait::{self, Kind};

/// What a wait reads of the object (as JSON).
type Field = Box<dyn Fn(&serde_json::Value) -> String + Send + Sync>;

const LIMIT: Duration = Duration::from_secs(60);

fn run(cp: &ControlPlane, args: &[&str]) {
    cp.run(args).expect("kubectl");
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

    // Each waits through the watch on the MaximumPolicy until `field` of
    // it reads `want`.
    let status = |name: &str, what: &str, field: Field, want: &str| {
        let wanted = want.to_string();
        cp.wait_object(Kind::MAXIMUM, "", name, LIMIT, field, move |out| {
            out == wanted
        })
        .unwrap_or_else(|last| {
            panic!(
                "{name} {what}: wanted {want:?}, last saw {last:?}\noperator log:\n{}",
                operator.log()
            )
        })
    };
    let condition = |type_: &'static str, field: &'static str| -> Field {
        Box::new(move |m| wait::condition_field(m, type_, field))
    };
    let path = |template: &'static str| -> Field {
        Box::new(move |m| wait::template(m, template).unwrap_or_default())
    };

    // org-ceiling selects namespaces labelled team=ml and its invariant is
    // outside the ceiling.
    status("org-ceiling", "Ready", condition("Ready", "status"), "True");
    status(
        "org-ceiling",
        "Consistent",
        condition("Consistent", "status"),
        "True",
    );
    status(
        "org-ceiling",
        "governedSandboxes",
        path("{.status.governedSandboxes}"),
        "1",
    );
    status(
        "org-ceiling",
        "observedGeneration",
        path("{.status.observedGeneration}"),
        "1",
    );

    // egress-ceiling allows every host on 80/443, so it allows the metadata
    // service its own invariant forbids: Consistent=False with the witness.
    status(
        "egress-ceiling",
        "Consistent",
        condition("Consistent", "status"),
        "False",
    );
    status(
        "egress-ceiling",
        "Consistent reason",
        condition("Consistent", "reason"),
        "IntersectsInvariant",
    );
    // Not in its desired state until a person fixes it (kstatus: Failed).
    status(
        "egress-ceiling",
        "Ready",
        condition("Ready", "status"),
        "False",
    );
    status(
        "egress-ceiling",
        "Stalled reason",
        condition("Stalled", "reason"),
        "IntersectsInvariant",
    );
    let message = cp
        .wait_object(
            Kind::MAXIMUM,
            "",
            "egress-ceiling",
            LIMIT,
            |m| wait::condition_field(m, "Consistent", "message"),
            |m| !m.is_empty(),
        )
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
    cp.wait_listed(
        Kind::EVENT,
        "",
        "reason=IntersectsInvariant",
        LIMIT,
        wait::names,
        |names| !names.is_empty(),
    )
    .unwrap_or_else(|_| {
        panic!(
            "no IntersectsInvariant event\noperator log:\n{}",
            operator.log()
        )
    });

    // Relabelling the namespace moves the sandbox out of org-ceiling.
    run(&cp, &["label", "namespace", "agents", "team-"]);
    status(
        "org-ceiling",
        "governedSandboxes",
        path("{.status.governedSandboxes}"),
        "0",
    );
    status(
        "egress-ceiling",
        "governedSandboxes",
        path("{.status.governedSandboxes}"),
        "1",
    );

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
    status("bad-glob", "Ready", condition("Ready", "status"), "False");
    status(
        "bad-glob",
        "Ready reason",
        condition("Ready", "reason"),
        "InvalidPolicy",
    );
    status(
        "bad-glob",
        "Stalled",
        condition("Stalled", "status"),
        "True",
    );
}
