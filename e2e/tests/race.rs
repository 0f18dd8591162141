#![allow(clippy::expect_used, clippy::unwrap_used)] // test code: a panic is a failed test
//! The race: 20 proposals for one sandbox created at once
//! while the maximum is tightened halfway (and, in the second test, the
//! operator killed in the middle and restarted). At the end: every proposal
//! is decided, each applied one is committed exactly once, and the
//! committed effective policy is proved inside the maximum as it is now.

use std::time::{Duration, Instant};

use agentgate_e2e::ControlPlane;
use agentgate_e2e::race::{
    LIMIT, TIGHTENED, committed_once, proposals, record_commits, revision, sandbox_status, setup,
    verify_committed, wait_applied, wait_decided,
};

/// Waits until every proposal is Applied or Rejected and the sandbox is
/// proved within the maximum as it is now (or says what it revoked); then
/// checks the commit record and proves the committed policy.
fn converged(cp: &ControlPlane, logs: &dyn Fn() -> String) {
    let phases = wait_decided(cp, 20, logs);
    let started = Instant::now();
    loop {
        let within = sandbox_status(cp, "conditions[?(@.type==\"WithinMaximum\")].status");
        let message = sandbox_status(cp, "conditions[?(@.type==\"WithinMaximum\")].message");
        if within == "True" || message.contains("revoked") {
            break;
        }
        assert!(
            started.elapsed() < LIMIT,
            "not converged: {within:?} {message:?}\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let listed = committed_once(cp, logs);
    let revision = revision(cp);
    // One per commit; revocations are commits too, so at least this many.
    assert!(
        revision > listed.len() as u64,
        "revision {revision} for {} commits",
        listed.len()
    );
    let rejected = phases.values().filter(|p| *p == "Rejected").count();
    eprintln!(
        "race outcome: {} applied, {rejected} rejected, revision {revision}",
        listed.len()
    );
    // The invariant of docs/design.md §5, proved by the same prover CI runs.
    verify_committed(cp, logs);
}

#[test]
fn concurrent_proposals_while_the_maximum_tightens() {
    let cp = ControlPlane::start().expect("local control plane");
    setup(&cp);
    let op = cp.start_operator().expect("operator");
    let commits = record_commits(&cp);
    cp.apply_yaml(&proposals("comment", 20)).expect("proposals");
    wait_applied(&cp, 3, &|| op.log());
    cp.apply_yaml(TIGHTENED).expect("tightened maximum");
    converged(&cp, &|| op.log());
    std::thread::sleep(Duration::from_millis(500));
    commits.check();
}

#[test]
fn operator_killed_mid_race_converges_after_restart() {
    let cp = ControlPlane::start().expect("local control plane");
    setup(&cp);
    let first = cp
        .start_operator_with(&["--lease-duration-seconds", "3", "--identity", "first"])
        .expect("operator");
    cp.apply_yaml(&proposals("comment", 20)).expect("proposals");
    wait_applied(&cp, 2, &|| first.log());
    drop(first); // SIGKILL, possibly between a sandbox commit and its proposal write
    cp.apply_yaml(TIGHTENED).expect("tightened maximum");
    let second = cp
        .start_operator_with(&["--lease-duration-seconds", "3", "--identity", "second"])
        .expect("operator");
    converged(&cp, &|| second.log());
}
