#![allow(clippy::expect_used, clippy::unwrap_used)] // test code: a panic is a failed test
//! Faults: the control plane and the operator's own processes
//! fail under load, and the commit protocol of docs/design.md §5 still holds.
//!
//! 1. kube-apiserver SIGKILLed and restarted in the middle of a 20-proposal race;
//! 2. etcd SIGKILLed and restarted (same data directory) in the middle of one;
//! 3. the leader paused (SIGSTOP) longer than its Lease: the follower takes
//!    over and commits; the old leader, resumed, commits nothing and exits 4;
//! 4. the webhook process killed under a stream of admissions: fail closed
//!    while it is down (kube-system unaffected), admitting again within 5 s
//!    of its return;
//! 5. the MaximumPolicy deleted while proposals are in flight: the sandbox
//!    is then Unmanaged and granted nothing.
//!
//! After each: every proposal reaches a final phase, each Applied one is
//! committed once with the revision rising by one per commit, and every
//! sandbox's committed policy is proved by `agentgate verify` inside every
//! maximum that governs it now.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentgate_e2e::race::{
    LIMIT, NAMESPACE, SANDBOX, committed_once, get, grants_nothing, phases, proposals,
    record_commits, revision, run, sandbox_status, setup, verify_committed, wait_applied,
    wait_committed, wait_decided,
};
use agentgate_e2e::wait::{self, Kind};
use agentgate_e2e::{ControlPlane, Operator, assert_refused, free_loopback_port};

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// What a failure message shows: the operators' logs (their ends) and the
/// control plane's.
fn report(cp: &ControlPlane, operators: &[&Operator]) -> String {
    let mut text = String::new();
    for (i, op) in operators.iter().enumerate() {
        text.push_str(&format!(
            "--- agentgate process {i} (pid {}), last lines:\n{}\n",
            op.pid(),
            tail(&op.log(), 150)
        ));
    }
    text.push_str(&cp.logs());
    text
}

/// `agentgate_commits_total` of a running operator.
fn commits_total(op: &Operator) -> u64 {
    let metrics = op.metrics().unwrap_or_else(|e| panic!("{e}\n{}", op.log()));
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("agentgate_commits_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no agentgate_commits_total in:\n{metrics}"))
}

#[derive(Clone, Copy, Debug)]
enum Outage {
    ApiServer,
    Etcd,
}

/// Scenarios 1 and 2: 20 proposals race for one sandbox; once two are
/// Applied, `outage`'s process is SIGKILLed, left down for two seconds and
/// started again with the same arguments. The operator (leader election on,
/// as deployed) rides it out, and every proposal is committed exactly once.
fn race_through(outage: Outage) {
    let started = Instant::now();
    let mut cp = ControlPlane::start().expect("local control plane");
    setup(&cp);
    let op = cp.start_operator().expect("operator");
    let before = wait_committed(&cp, &|| report(&cp, &[&op]));
    let commits = record_commits(&cp);
    cp.apply_yaml(&proposals("comment", 20))
        .expect("20 proposals");
    wait_applied(&cp, 2, &|| report(&cp, &[&op]));

    let applied_at_kill = phases(&cp).values().filter(|p| *p == "Applied").count();
    let killed = Instant::now();
    match outage {
        Outage::ApiServer => cp.kill_apiserver(),
        Outage::Etcd => cp.kill_etcd(),
    }
    .expect("kill");
    let readyz = cp
        .kubectl(&["get", "--raw", "/readyz", "--request-timeout=3s"])
        .unwrap();
    assert!(
        !readyz.status.success(),
        "the API server says it is ready with {outage:?} killed"
    );
    std::thread::sleep(Duration::from_secs(2));
    let restarted = Instant::now();
    match outage {
        Outage::ApiServer => cp.restart_apiserver(Duration::from_secs(90)),
        Outage::Etcd => cp.restart_etcd(Duration::from_secs(90)),
    }
    .unwrap_or_else(|e| panic!("{outage:?} did not come back: {e}\n{}", report(&cp, &[&op])));
    let ready = Instant::now();
    assert!(
        applied_at_kill < 20,
        "the race was over before {outage:?} was killed: nothing was tested"
    );

    let phases = wait_decided(&cp, 20, &|| report(&cp, &[&op]));
    let converged = Instant::now();
    assert!(
        phases.values().all(|p| p == "Applied"),
        "every proposal is within org-ceiling and its budget, so each must be Applied: {phases:?}\n{}",
        report(&cp, &[&op])
    );
    let listed = committed_once(&cp, &|| report(&cp, &[&op]));
    assert_eq!(listed.len(), 20);
    // Nothing else changes the policy here: exactly one revision per commit.
    cp.wait_revision(NAMESPACE, SANDBOX, LIMIT, move |r| r >= before + 20)
        .unwrap_or_else(|last| {
            panic!(
                "revision {last}, wanted {}\n{}",
                before + 20,
                report(&cp, &[&op])
            )
        });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        revision(&cp),
        before + 20,
        "20 commits must raise the revision from {before} by exactly 20\n{}",
        report(&cp, &[&op])
    );
    verify_committed(&cp, &|| report(&cp, &[&op]));
    assert!(
        commits.wait_seen(|s| s.revision >= before + 20, LIMIT),
        "the sandbox watch never saw revision {}: {:?}\n{}",
        before + 20,
        commits.states(),
        commits.log()
    );
    commits.check();
    let sessions = commits
        .states()
        .iter()
        .map(|s| s.session)
        .max()
        .unwrap_or(0);
    if matches!(outage, Outage::ApiServer) {
        assert!(
            sessions >= 2,
            "the sandbox watch was never cut: was the API server really killed? {:?}\nthe watch said:\n{}",
            commits.states(),
            commits.log()
        );
    }
    assert!(
        op.log().contains("leading: starting the reconcilers"),
        "{}",
        op.log()
    );
    let mut op = op;
    assert!(
        op.exited().is_none(),
        "the operator exited during the {outage:?} outage instead of riding it out:\n{}",
        report(&cp, &[&op])
    );
    eprintln!(
        "{outage:?} outage: {applied_at_kill}/20 applied at the kill, down {:.1} s, ready {:.1} s after the restart, all 20 committed {:.1} s after that; test {:.1} s",
        (restarted - killed).as_secs_f64(),
        (ready - restarted).as_secs_f64(),
        (converged - ready).as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn apiserver_killed_and_restarted_mid_race() {
    race_through(Outage::ApiServer);
}

#[test]
fn etcd_killed_and_restarted_mid_race() {
    race_through(Outage::Etcd);
}

/// Waits until the Lease `default/agentgate-leader` is held by `want`.
fn wait_holder(cp: &ControlPlane, want: &str, ops: &[&Operator]) {
    cp.wait_lease_holder(want, Duration::from_secs(60))
        .unwrap_or_else(|last| {
            panic!(
                "lease holder: wanted {want:?}, last saw {last:?}\n{}",
                report(cp, ops)
            )
        });
}

fn wait_phase(cp: &ControlPlane, name: &str, want: &str, ops: &[&Operator]) {
    cp.wait_proposal_phase(NAMESPACE, name, want, LIMIT)
        .unwrap_or_else(|last| {
            panic!(
                "{name}: wanted {want}, last saw {last:?}\n{}",
                report(cp, ops)
            )
        });
}

const LEASE_SECONDS: u64 = 4;

/// Scenario 3: the leader is paused longer than its Lease; the follower
/// takes over and commits. Proposals are created right before the old
/// leader resumes, so it wakes with work to do and a Lease it no longer
/// holds: it must commit nothing (every commit is accounted for by the
/// leader's metrics before the pause and the follower's after) and exit
/// with code 4 (EXIT_LOST_LEADERSHIP).
#[test]
fn paused_leader_is_fenced_after_the_follower_takes_over() {
    let started = Instant::now();
    let cp = ControlPlane::start().expect("local control plane");
    setup(&cp);
    let lease = LEASE_SECONDS.to_string();
    let mut a = cp
        .start_operator_with(&[
            "--lease-duration-seconds",
            &lease,
            "--identity",
            "replica-a",
        ])
        .expect("replica a");
    wait_holder(&cp, "replica-a", &[&a]);
    let b = cp
        .start_operator_with(&[
            "--lease-duration-seconds",
            &lease,
            "--identity",
            "replica-b",
        ])
        .expect("replica b");
    let before = wait_committed(&cp, &|| report(&cp, &[&a, &b]));
    cp.apply_yaml(&proposals("first", 1)).expect("proposal");
    wait_phase(&cp, "first-0", "Applied", &[&a, &b]);
    let commits = record_commits(&cp);
    // The leader is idle now: what it committed is fixed from here on.
    let by_a = commits_total(&a);
    assert_eq!(by_a, 1, "{}", a.log());

    a.pause().expect("SIGSTOP");
    let paused = Instant::now();
    let a_log_at_pause = a.log().len();
    wait_holder(&cp, "replica-b", &[&a, &b]);
    let takeover = paused.elapsed();
    cp.apply_yaml(&proposals("takeover", 1)).expect("proposal");
    wait_phase(&cp, "takeover-0", "Applied", &[&a, &b]);
    assert!(
        commits_total(&b) >= 1,
        "the follower did not commit:\n{}",
        b.log()
    );

    // The follower may take over before a whole Lease has passed (the
    // Lease was renewed up to a grace before the pause): pause the leader
    // longer than its Lease in any case.
    let long_enough = Duration::from_secs(LEASE_SECONDS) + Duration::from_millis(500);
    std::thread::sleep(long_enough.saturating_sub(paused.elapsed()));
    // Work for both, then wake the old leader.
    cp.apply_yaml(&proposals("after", 6)).expect("proposals");
    let pause = paused.elapsed();
    a.resume().expect("SIGCONT");
    let resumed = Instant::now();
    assert!(
        pause > Duration::from_secs(LEASE_SECONDS),
        "the pause ({pause:?}) was not longer than the Lease"
    );
    let status = a.wait_exit(Duration::from_secs(30)).unwrap_or_else(|| {
        panic!(
            "the old leader still runs 30 s after it resumed without the Lease\n{}",
            report(&cp, &[&a, &b])
        )
    });
    let exit_after = resumed.elapsed();
    assert_eq!(
        status.code(),
        Some(4),
        "the old leader must exit with EXIT_LOST_LEADERSHIP (4), got {status}\n{}",
        report(&cp, &[&a, &b])
    );

    let phases = wait_decided(&cp, 8, &|| report(&cp, &[&a, &b]));
    assert!(
        phases.values().all(|p| p == "Applied"),
        "{phases:?}\n{}",
        report(&cp, &[&a, &b])
    );
    let listed = committed_once(&cp, &|| report(&cp, &[&a, &b]));
    let by_b = commits_total(&b);
    assert_eq!(
        listed.len() as u64,
        by_a + by_b,
        "{} commits, but the leader made {by_a} before its pause and the follower {by_b}: the old leader committed after it resumed\n{}",
        listed.len(),
        report(&cp, &[&a, &b])
    );
    let since_pause = a.log()[a_log_at_pause..].to_string();
    assert!(
        !since_pause.contains("committed"),
        "the old leader committed after it resumed:\n{since_pause}"
    );
    let how = if since_pause.contains("fenced") || since_pause.contains("write refused") {
        "the fence"
    } else if since_pause.contains("lost leadership") {
        "the lease watch"
    } else {
        panic!("the old leader exited 4 without saying why:\n{since_pause}")
    };
    cp.wait_revision(NAMESPACE, SANDBOX, LIMIT, move |r| r >= before + 8)
        .unwrap_or_else(|last| panic!("revision {last}\n{}", report(&cp, &[&b])));
    assert_eq!(revision(&cp), before + 8, "one revision per commit");
    verify_committed(&cp, &|| report(&cp, &[&b]));
    assert!(
        commits.wait_seen(|s| s.revision >= before + 8, LIMIT),
        "the sandbox watch never saw revision {}: {:?}",
        before + 8,
        commits.states()
    );
    commits.check();
    eprintln!(
        "leader pause: takeover {:.1} s after SIGSTOP (Lease {LEASE_SECONDS} s), paused {:.1} s, old leader exited 4 {:.2} s after SIGCONT (stopped by {how}); commits: {by_a} before the pause, {by_b} by the follower; test {:.1} s",
        takeover.as_secs_f64(),
        pause.as_secs_f64(),
        exit_after.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

/// An image digest for which a clean scan (no tools, no findings) exists.
const CLEAN_IMAGE: &str =
    "ghcr.io/acme/clean@sha256:0000000000000000000000000000000000000000000000000000000000000c1e";

/// `kubectl run NAME -n NAMESPACE` of the clean image (a server-side dry
/// run when `dry_run`).
fn pod(cp: &ControlPlane, name: &str, namespace: &str, dry_run: bool) -> std::process::Output {
    let image = format!("--image={CLEAN_IMAGE}");
    let mut args = vec![
        "run",
        name,
        "-n",
        namespace,
        image.as_str(),
        "--restart=Never",
    ];
    if dry_run {
        args.push("--dry-run=server");
    }
    cp.kubectl(&args).unwrap()
}

/// A proposal `PREFIX-0` by the admin (the webhook checks `requestedBy`
/// against the requester; the admin holds no `approve` verb of its own,
/// so the verdict treats it like the agent's).
fn admin_proposal(prefix: &str) -> String {
    proposals(prefix, 1).replace(
        "requestedBy: system:serviceaccount:agents:triage-bot",
        "requestedBy: e2e-admin",
    )
}

/// One admission the stream sent.
#[derive(Clone, Debug)]
struct Admission {
    kind: &'static str,
    sent: Instant,
    answered: Instant,
    admitted: bool,
    message: String,
}

/// Sends one admission of `kind` after another until `stop`: an agentgate
/// write (creating a sandbox) or a pod in the enforced namespace, both as
/// server-side dry runs (admission runs, nothing piles up).
fn stream(
    cp: Arc<ControlPlane>,
    kind: &'static str,
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<Vec<Admission>>>,
) -> std::thread::JoinHandle<()> {
    // A sandbox that does not exist: every dry run is a create the webhook
    // judges (an unchanged apply would not reach the API server at all).
    let sandbox = std::fs::read_to_string(agentgate_e2e::repo_root().join("examples/sandbox.yaml"))
        .unwrap()
        .replace("name: triage-bot", "name: streamed");
    std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            let sent = Instant::now();
            let out = match kind {
                "agentsandbox" => {
                    cp.kubectl_stdin(&["create", "--dry-run=server", "-f", "-"], &sandbox)
                }
                _ => Ok(pod(&cp, "streamed", "enforced", true)),
            }
            .unwrap();
            log.lock().unwrap().push(Admission {
                kind,
                sent,
                answered: Instant::now(),
                admitted: out.status.success(),
                message: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
            std::thread::sleep(Duration::from_millis(20));
        }
    })
}

/// Scenario 4: `agentgate webhook` as its own process, killed under a
/// stream of admissions and started again.
#[test]
fn webhook_killed_under_admissions_fails_closed_and_recovers() {
    let started = Instant::now();
    let cp = ControlPlane::start().expect("local control plane");
    let port = free_loopback_port().unwrap();
    cp.install_chart(port, &[]).expect("chart");
    let webhook = cp.start_webhook(port, &[]).expect("webhook");
    cp.wait_webhook("examples/maximum.yaml", Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e}\n{}", webhook.log()));
    run(&cp, &["apply", "-f", "examples/maximum.yaml"]);
    cp.create_team_namespace().unwrap();
    cp.create_enforced_namespace("enforced", "enforce").unwrap();
    cp.apply_yaml(&format!(
        "apiVersion: agentgate.dev/v1alpha1\nkind: AgentScan\nmetadata: {{name: clean}}\nspec:\n  image: \"{CLEAN_IMAGE}\"\n  graph: {{nodes: []}}\n"
    ))
    .unwrap();
    // The reconcilers, without a webhook of their own: the sandbox and the
    // proposal below are committed by them.
    let op = cp.start_chart_controller(&[]).expect("operator");
    // The webhook answers from watch caches: wait until they hold the
    // ceiling, the namespaces and the scan.
    cp.wait_webhook("examples/sandbox.yaml", Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}\n{}", webhook.log()));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !pod(&cp, "probe", "enforced", true).status.success() {
        assert!(
            Instant::now() < deadline,
            "the clean image's pod was never admitted: {}\n{}",
            String::from_utf8_lossy(&pod(&cp, "probe", "enforced", true).stderr),
            webhook.log()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    run(&cp, &["apply", "-f", "examples/sandbox.yaml"]);
    let before = wait_committed(&cp, &|| report(&cp, &[&op, &webhook]));
    let commits = record_commits(&cp);

    let cp = Arc::new(cp);
    let stop = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(Vec::new()));
    let streams: Vec<_> = ["agentsandbox", "pod"]
        .into_iter()
        .map(|kind| stream(cp.clone(), kind, stop.clone(), log.clone()))
        .collect();
    std::thread::sleep(Duration::from_secs(2));

    let webhook_log_before = webhook.log();
    // An admission in flight while the process dies is reset mid-answer:
    // it counts neither as before nor as during the outage.
    let killing = Instant::now();
    drop(webhook); // SIGKILL
    let killed = Instant::now();
    // While it is down: agentgate writes and enforced pods are refused
    // (failurePolicy Fail), kube-system is not affected.
    assert_refused(
        cp.kubectl_stdin(&["apply", "-f", "-"], &admin_proposal("down"))
            .unwrap(),
        "failed calling webhook",
    );
    assert_refused(
        cp.kubectl(&["delete", "asbx", SANDBOX, "-n", NAMESPACE])
            .unwrap(),
        "failed calling webhook",
    );
    assert_refused(
        pod(&cp, "down", "enforced", false),
        "failed calling webhook",
    );
    let system = pod(&cp, "still-admitted", "kube-system", false);
    assert!(
        system.status.success(),
        "a pod in kube-system was refused while the webhook is down: {}",
        String::from_utf8_lossy(&system.stderr)
    );
    std::thread::sleep(Duration::from_secs(2));

    let returned = Instant::now();
    let webhook = cp.start_webhook(port, &[]).expect("webhook restart");
    // Recovered: each kind admitted again, by an admission sent after the
    // restart.
    let recovered = |kind: &str| {
        log.lock()
            .unwrap()
            .iter()
            .find(|a| a.kind == kind && a.sent >= returned && a.admitted)
            .map(|a| a.answered - returned)
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while recovered("agentsandbox").is_none() || recovered("pod").is_none() {
        assert!(
            Instant::now() < deadline,
            "admissions did not recover within 30 s of the webhook's return; last answers: {:?}\nwebhook log:\n{}",
            log.lock().unwrap().iter().rev().take(4).collect::<Vec<_>>(),
            webhook.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::SeqCst);
    for s in streams {
        s.join().unwrap();
    }
    let admissions = log.lock().unwrap().clone();
    let (sandbox_recovery, pod_recovery) = (
        recovered("agentsandbox").unwrap(),
        recovered("pod").unwrap(),
    );

    for kind in ["agentsandbox", "pod"] {
        let of_kind = || admissions.iter().filter(move |a| a.kind == kind);
        // Before the kill, everything was admitted.
        let early: Vec<_> = of_kind()
            .filter(|a| a.answered < killing && !a.admitted)
            .collect();
        assert!(
            early.is_empty(),
            "{kind} admissions refused before the webhook was killed: {early:?}\n{webhook_log_before}"
        );
        // While it was down, everything was refused, by the API server.
        let down: Vec<_> = of_kind()
            .filter(|a| a.sent >= killed && a.answered < returned)
            .collect();
        assert!(
            down.len() >= 2,
            "only {} {kind} admissions while the webhook was down",
            down.len()
        );
        for a in &down {
            assert!(
                !a.admitted && a.message.contains("failed calling webhook"),
                "a {kind} admission while the webhook was down was not refused for it: {a:?}"
            );
        }
        // Once admitted again, admitted from then on.
        let first = of_kind()
            .find(|a| a.sent >= returned && a.admitted)
            .unwrap()
            .sent;
        let relapses: Vec<_> = of_kind()
            .filter(|a| a.sent > first && !a.admitted)
            .collect();
        assert!(
            relapses.is_empty(),
            "{kind} admissions refused again after recovering: {relapses:?}\n{}",
            webhook.log()
        );
    }
    let recovery = sandbox_recovery.max(pod_recovery);
    eprintln!(
        "webhook restart: agentgate writes admitted again {:.2} s and enforced pods {:.2} s after its return ({} admissions streamed); test {:.1} s",
        sandbox_recovery.as_secs_f64(),
        pod_recovery.as_secs_f64(),
        admissions.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        recovery <= Duration::from_secs(5),
        "admissions recovered {:.2} s after the webhook's return (agentgate writes {:.2} s, pods {:.2} s); the bound is 5 s\nwebhook log:\n{}",
        recovery.as_secs_f64(),
        sandbox_recovery.as_secs_f64(),
        pod_recovery.as_secs_f64(),
        webhook.log()
    );

    // What was refused was never written; what is written now is committed.
    assert!(
        !phases(&cp).contains_key("down-0"),
        "a proposal refused by admission exists"
    );
    assert!(
        get(
            &cp,
            &["get", "pod", "down", "-n", "enforced", "--ignore-not-found"]
        )
        .is_empty(),
        "a pod refused by admission exists"
    );
    cp.apply_yaml(&admin_proposal("after"))
        .expect("proposal after the return");
    wait_decided(&cp, 1, &|| report(&cp, &[&op, &webhook]));
    let listed = committed_once(&cp, &|| report(&cp, &[&op, &webhook]));
    assert_eq!(listed, ["after-0"]);
    cp.wait_revision(NAMESPACE, SANDBOX, LIMIT, move |r| r > before)
        .unwrap_or_else(|last| panic!("revision {last}\n{}", report(&cp, &[&op])));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(revision(&cp), before + 1, "one commit, one revision");
    verify_committed(&cp, &|| report(&cp, &[&op, &webhook]));
    assert!(
        commits.wait_seen(|s| s.revision > before, LIMIT),
        "the sandbox watch never saw the commit: {:?}",
        commits.states()
    );
    commits.check();
}

/// Watches MaximumPolicy `name` and returns once the watch runs; the
/// receiver then gets the resourceVersion of its DELETED event (etcd's
/// revision of the deletion).
fn watch_deletion(cp: &ControlPlane, name: &str) -> std::sync::mpsc::Receiver<u64> {
    use std::io::BufRead as _;
    let kubectl = cp.kubectl_handle();
    let mut child = std::process::Command::new(&kubectl.binary)
        .arg("--kubeconfig")
        .arg(&kubectl.kubeconfig)
        .args([
            "get",
            "maxpol",
            name,
            "--watch",
            "--output-watch-events",
            "-o",
            "jsonpath={.type} {.object.metadata.resourceVersion}{\"\\n\"}",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (send, receive) = std::sync::mpsc::channel();
    let (ready, running) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if line.starts_with("ADDED ") {
                let _ = ready.send(());
            } else if let Some(rv) = line.strip_prefix("DELETED ") {
                let _ = send.send(rv.trim().parse().unwrap_or(0));
                break;
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    });
    running
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("the watch of maxpol {name} did not start: {e}"));
    receive
}

/// Scenario 5: org-ceiling, the only maximum governing the sandbox, is
/// deleted while 20 proposals race. From then on nothing is granted: the
/// sandbox is Unmanaged with an empty effective policy (and so is the
/// ConfigMap the proxy enforces), no commit follows the moment the
/// operator saw it, and the proposals not committed before are Rejected.
#[test]
fn maximum_deleted_mid_race_leaves_nothing_granted() {
    let started = Instant::now();
    let cp = ControlPlane::start().expect("local control plane");
    setup(&cp);
    let op = cp.start_operator().expect("operator");
    let logs = || report(&cp, &[&op]);
    wait_committed(&cp, &logs);
    let commits = record_commits(&cp);
    cp.apply_yaml(&proposals("comment", 20))
        .expect("20 proposals");
    wait_applied(&cp, 2, &logs);
    // The watch's DELETED event carries etcd's revision of the deletion,
    // which orders it against the sandbox's writes.
    let deletion = watch_deletion(&cp, "org-ceiling");
    run(&cp, &["delete", "maxpol", "org-ceiling"]);
    let deleted_at = deletion
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("the maxpol watch saw no deletion: {e}"));

    let phases = wait_decided(&cp, 20, &logs);
    cp.wait_object(
        Kind::SANDBOX,
        NAMESPACE,
        SANDBOX,
        LIMIT,
        |sandbox| wait::condition_field(sandbox, "WithinMaximum", "reason"),
        |r| r == "Unmanaged",
    )
    .unwrap_or_else(|last| panic!("the sandbox never became Unmanaged: {last:?}\n{}", logs()));
    let applied: Vec<&String> = phases
        .iter()
        .filter(|(_, p)| *p == "Applied")
        .map(|(n, _)| n)
        .collect();
    assert!(
        applied.len() < 20,
        "every proposal was applied before the deletion took effect: nothing was tested"
    );
    for (name, phase) in &phases {
        if phase == "Rejected" {
            let reason = get(
                &cp,
                &[
                    "get",
                    "pprop",
                    name,
                    "-n",
                    NAMESPACE,
                    "-o",
                    "jsonpath={.status.reason}",
                ],
            );
            assert!(
                reason.contains("no MaximumPolicy governs"),
                "{name} rejected for another reason: {reason}"
            );
        }
    }

    // Nothing granted: not in the status, not in what the proxy enforces.
    let effective: serde_json::Value =
        serde_json::from_str(&sandbox_status(&cp, "effectivePolicy")).unwrap();
    assert!(
        grants_nothing(&effective),
        "an ungoverned sandbox is granted {effective}\n{}",
        logs()
    );
    assert_eq!(sandbox_status(&cp, "governedBy"), "");
    let revision_now = revision(&cp);
    let config_revision = cp
        .wait_object(
            Kind::CONFIG_MAP,
            NAMESPACE,
            "triage-bot-policy",
            LIMIT,
            |map| wait::at(map, &["data", "revision"]),
            move |r| r.trim() == revision_now.to_string(),
        )
        .unwrap_or_else(|last| {
            panic!(
                "the ConfigMap stays at revision {last:?}, the sandbox is at {revision_now}\n{}",
                logs()
            )
        });
    let policy_yaml = get(
        &cp,
        &[
            "get",
            "configmap",
            "triage-bot-policy",
            "-n",
            NAMESPACE,
            "-o",
            "jsonpath={.data.policy\\.yaml}",
        ],
    );
    assert!(
        !policy_yaml.contains("api.github.com"),
        "the proxy's policy (revision {config_revision}) still grants:\n{policy_yaml}"
    );
    // A proposal now is refused, and nothing changes afterwards.
    cp.apply_yaml(&proposals("later", 1)).expect("proposal");
    wait_phase(&cp, "later-0", "Rejected", &[&op]);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        revision(&cp),
        revision_now,
        "the revision moved after Unmanaged"
    );

    // From the first state the watch saw as Unmanaged on, no commit.
    assert!(
        commits.wait_seen(
            |s| s.revision >= revision_now && s.within == "Unmanaged",
            LIMIT
        ),
        "the sandbox watch never saw it Unmanaged at revision {revision_now}: {:?}",
        commits.states()
    );
    let states = commits.states();
    let unmanaged = states
        .iter()
        .position(|s| s.within == "Unmanaged")
        .unwrap_or_else(|| panic!("the watch never saw Unmanaged: {states:?}"));
    for later in &states[unmanaged..] {
        assert_eq!(
            later.applied, states[unmanaged].applied,
            "a proposal was committed after the sandbox was Unmanaged: {states:?}"
        );
    }
    // Commits written after the deletion (in etcd's order).
    let late: Vec<&String> = states
        .windows(2)
        .filter(|w| w[1].applied.len() > w[0].applied.len() && w[1].resource_version > deleted_at)
        .filter_map(|w| w[1].applied.last())
        .collect();
    let listed = committed_once(&cp, &logs);
    verify_committed(&cp, &logs);
    commits.check();
    eprintln!(
        "maximum deleted mid-race: {} of 20 applied, {} of them written after the deletion, the rest rejected; test {:.1} s",
        listed.len(),
        late.len(),
        started.elapsed().as_secs_f64()
    );
}
