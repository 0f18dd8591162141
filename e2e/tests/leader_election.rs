#![allow(clippy::expect_used, clippy::unwrap_used)] // test code: a panic is a failed test
//! Leader election: with two operator replicas only the Lease holder
//! reconciles and commits; when it dies the other takes over.

use std::time::Duration;

use agentgate_e2e::wait::{self, Kind};
use agentgate_e2e::{ControlPlane, Operator};

const LIMIT: Duration = Duration::from_secs(60);

fn run(cp: &ControlPlane, args: &[&str]) {
    cp.run(args).expect("kubectl");
}

fn holder(cp: &ControlPlane, want: &str, ops: &[&Operator]) {
    cp.wait_lease_holder(want, LIMIT).unwrap_or_else(|last| {
        let logs: Vec<String> = ops.iter().map(|o| o.log()).collect();
        panic!(
            "lease holder: wanted {want:?}, last saw {last:?}\nlogs:\n{}",
            logs.join("\n---\n")
        )
    });
}

fn phase(cp: &ControlPlane, name: &str, want: &str, op: &Operator) {
    cp.wait_proposal_phase("agents", name, want, LIMIT)
        .unwrap_or_else(|last| {
            panic!(
                "{name}: wanted {want}, last saw {last:?}\nlog:\n{}",
                op.log()
            )
        });
}

#[test]
fn only_the_leader_commits_and_a_follower_takes_over() {
    let cp = ControlPlane::start().expect("local control plane");
    cp.install_crds().expect("CRDs");
    run(&cp, &["create", "namespace", "agents"]);
    run(&cp, &["label", "namespace", "agents", "team=ml"]);
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

    let lease = ["--lease-duration-seconds", "4"];
    let a = cp
        .start_operator_with(&[&lease[..], &["--identity", "replica-a"]].concat())
        .expect("replica a");
    holder(&cp, "replica-a", &[&a]);
    let b = cp
        .start_operator_with(&[&lease[..], &["--identity", "replica-b"]].concat())
        .expect("replica b");

    run(
        &cp,
        &["apply", "-f", "examples/proposals/comment-on-issues.yaml"],
    );
    phase(&cp, "comment-on-issues", "Applied", &a);
    // Give the follower time to misbehave, then check it did nothing.
    std::thread::sleep(Duration::from_secs(2));
    let follower = b.log();
    assert!(follower.contains("waiting for leadership"), "{follower}");
    assert!(
        !follower.contains("reconciled"),
        "the follower reconciled:\n{follower}"
    );
    assert!(
        a.log().contains("leading: starting the reconcilers"),
        "{}",
        a.log()
    );

    // The leader dies; the follower takes over and commits.
    drop(a);
    holder(&cp, "replica-b", &[&b]);
    run(
        &cp,
        &["apply", "-f", "examples/proposals/post-anywhere.yaml"],
    );
    phase(&cp, "post-anywhere", "Rejected", &b);
    assert!(
        b.log().contains("leading: starting the reconcilers"),
        "{}",
        b.log()
    );
    // Nothing was committed twice.
    let state = cp
        .wait_object(
            Kind::SANDBOX,
            "agents",
            "triage-bot",
            LIMIT,
            |sandbox| {
                format!(
                    "{} {}",
                    wait::template(sandbox, "{.status.appliedProposals[*].name}")
                        .unwrap_or_default(),
                    wait::at(sandbox, &["status", "revision"])
                )
            },
            |_| true,
        )
        .unwrap_or_default();
    assert_eq!(state, "comment-on-issues 2");
}
