//! `make bench-delivery`, the operator's side (docs/benchmarks.md, "Policy
//! delivery"): the webhook server's policy stream in one process, no API
//! server (a fake one answers the TokenReviews), with N subscribed proxies
//! (simulated: in-process HTTP streams, each authenticated as its own
//! sandbox's Pod). It prints, beside the same process with no subscriber:
//! the memory the subscriptions hold, one commit's latency to its Pod's
//! stream while N are subscribed, and a tightened ceiling's fan-out (every
//! sandbox's policy changed at once) until all N streams have their
//! update. `AGENTGATE_BENCH_SMOKE=1` (`make bench-smoke`): N = 10.
//!
//! The real node's side (approval and revocation seen by a running agent
//! under the kubelet's default sync) is `e2e/tests/real_node.rs`.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentgate::metrics::Metrics;
use agentgate::webhook::WebhookArgs;
use agentgate::webhook::certs::CertResolver;
use agentgate::webhook::server::{Caches, WebhookState, router};
use agentgate::webhook::wakeups::SandboxWakeups;
use agentgate_api::crd::AgentSandbox;
use agentgate_bench::{percentile, proc_cpu_seconds};
use agentgate_judgement::delivery::{PolicyUpdate, StreamLine, digest};
use agentgate_prover::{Prover, ProverOptions};
use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use clap::Parser;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tower::ServiceExt;

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    webhook: WebhookArgs,
}

fn sandbox(i: usize, revision: u64, digest: &str) -> AgentSandbox {
    serde_json::from_value(json!({
        "apiVersion": "agentgate.dev/v1alpha1", "kind": "AgentSandbox",
        "metadata": {"name": format!("sb-{i}"), "namespace": "agents", "uid": format!("uid-{i}"),
            "resourceVersion": revision.to_string()},
        "spec": {"agentServiceAccount": format!("bot-{i}"), "policy": {}},
        "status": {"revision": revision, "policyDigest": digest},
    }))
    .unwrap_or_else(|e| panic!("a sandbox: {e}"))
}

fn files(i: usize, revision: u64) -> BTreeMap<String, String> {
    [
        ("revision".to_string(), revision.to_string()),
        (
            "policy.yaml".to_string(),
            format!("network:\n- name: r{i}\n  endpoints:\n  - {{host: api.example.com, ports: [443], protocol: rest, rules: [{{methods: [GET], path: /v{revision}/**}}]}}\n"),
        ),
        ("findings.json".to_string(), "[]".to_string()),
        ("sandbox-ca.pem".to_string(), "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".repeat(2)),
    ]
    .into_iter()
    .collect()
}

fn config_map(i: usize, data: &BTreeMap<String, String>) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("sb-{i}-policy"), "namespace": "agents",
            "resourceVersion": data.get("revision").cloned().unwrap_or_default(),
            "ownerReferences": [{"apiVersion": "agentgate.dev/v1alpha1", "kind": "AgentSandbox",
                "name": format!("sb-{i}"), "uid": format!("uid-{i}"), "controller": true}]},
        "data": data,
    }))
    .unwrap_or_else(|e| panic!("a ConfigMap: {e}"))
}

/// TokenReviews: token `t-I` is the agent of sandbox `sb-I`, bound to its Pod.
async fn fake_api_server(
    request: Request<kube::client::Body>,
) -> Result<Response<kube::client::Body>, Infallible> {
    let body = axum::body::to_bytes(Body::new(request.into_body()), 1 << 20)
        .await
        .unwrap_or_default();
    let sent: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let token = sent["spec"]["token"].as_str().unwrap_or_default();
    let status = match token.strip_prefix("t-") {
        Some(i) => json!({"authenticated": true, "audiences": sent["spec"]["audiences"],
            "user": {"username": format!("system:serviceaccount:agents:bot-{i}"),
                     "extra": {"authentication.kubernetes.io/pod-name": [format!("sb-{i}")]}}}),
        None => json!({"authenticated": false}),
    };
    let answer = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {}, "status": status});
    let mut response = Response::new(kube::client::Body::from(answer.to_string().into_bytes()));
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

/// A cache that has listed and holds nothing.
fn listed_empty<K>() -> Store<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Init);
    writer.apply_watcher_event(&watcher::Event::InitDone);
    reader
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

struct Bench {
    router: axum::Router,
    sandboxes: Mutex<Writer<AgentSandbox>>,
    maps: Mutex<Writer<ConfigMap>>,
    wakeups: SandboxWakeups,
}

impl Bench {
    /// Commits `revision` for the sandboxes `which` (status and ConfigMap),
    /// then wakes their streams, as their watch events would.
    fn commit(&self, which: impl Iterator<Item = usize>, revision: u64) {
        let mut sandboxes = self.sandboxes.lock().unwrap_or_else(|e| e.into_inner());
        let mut maps = self.maps.lock().unwrap_or_else(|e| e.into_inner());
        for i in which {
            let data = files(i, revision);
            sandboxes.apply_watcher_event(&watcher::Event::Apply(sandbox(
                i,
                revision,
                &digest(&data),
            )));
            maps.apply_watcher_event(&watcher::Event::Apply(config_map(i, &data)));
            self.wakeups.wake("agents", &format!("sb-{i}"));
        }
    }
}

/// Subscribes as sandbox `i`'s Pod; each update's revision goes to `seen`.
async fn subscribe(router: axum::Router, i: usize, seen: mpsc::UnboundedSender<(usize, u64)>) {
    let request = Request::get("/v1/policy/stream")
        .header("authorization", format!("Bearer t-{i}"))
        .body(Body::empty())
        .unwrap_or_else(|e| panic!("a request: {e}"));
    let response = router
        .oneshot(request)
        .await
        .unwrap_or_else(|never| match never {});
    assert_eq!(response.status(), StatusCode::OK, "subscription {i}");
    let mut body = response.into_body();
    let mut pending = Vec::new();
    while let Some(Ok(frame)) = body.frame().await {
        let Ok(data) = frame.into_data() else {
            continue;
        };
        pending.extend_from_slice(&data);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let line: StreamLine = serde_json::from_slice(line.trim_ascii())
                .unwrap_or_else(|e| panic!("a stream line: {e}"));
            if let Some(update) = line.update.as_ref().map(PolicyUpdate::check) {
                update.unwrap_or_else(|e| panic!("a pushed update: {e}"));
            }
            if let Some(update) = line.update
                && seen.send((i, update.revision)).is_err()
            {
                return;
            }
        }
    }
}

/// Waits until `n` streams have sent `revision`.
async fn all_streams_have(
    seen: &mut mpsc::UnboundedReceiver<(usize, u64)>,
    n: usize,
    revision: u64,
) {
    let mut got = 0;
    while got < n {
        match seen.recv().await {
            Some((_, r)) if r == revision => got += 1,
            Some(_) => {}
            None => panic!("the streams ended with {got} of {n} at revision {revision}"),
        }
    }
}

fn main() {
    let smoke = std::env::var("AGENTGATE_BENCH_SMOKE").is_ok_and(|v| v == "1");
    let n: usize = if smoke { 10 } else { 1000 };
    let trials = if smoke { 5 } else { 20 };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("a runtime: {e}"));
    runtime.block_on(async move {
        let (sandbox_reader, mut sandbox_writer) = reflector::store();
        let (map_reader, mut map_writer) = reflector::store();
        sandbox_writer.apply_watcher_event(&watcher::Event::Init);
        map_writer.apply_watcher_event(&watcher::Event::Init);
        for i in 0..n {
            let data = files(i, 1);
            sandbox_writer.apply_watcher_event(&watcher::Event::InitApply(sandbox(
                i,
                1,
                &digest(&data),
            )));
            map_writer.apply_watcher_event(&watcher::Event::InitApply(config_map(i, &data)));
        }
        sandbox_writer.apply_watcher_event(&watcher::Event::InitDone);
        map_writer.apply_watcher_event(&watcher::Event::InitDone);
        let wakeups = SandboxWakeups::default();
        let caches = Caches {
            maximums: listed_empty(),
            namespaces: listed_empty(),
            sandboxes: sandbox_reader,
            scans: listed_empty(),
            policy_maps: map_reader,
            sandbox_pods: listed_empty(),
            stream_wakeups: wakeups.clone(),
        };
        let flags = Flags::parse_from([
            "bench",
            "--operator-user",
            "system:serviceaccount:agentgate-system:agentgate",
        ]);
        let state = WebhookState::new(
            &flags.webhook,
            kube::Client::new(tower::service_fn(fake_api_server), "default"),
            Prover::new(ProverOptions::default()),
            Arc::new(Metrics::new()),
            false,
            caches,
            Arc::new(CertResolver::new()),
        );
        let bench = Bench {
            router: router(Arc::new(state)),
            sandboxes: Mutex::new(sandbox_writer),
            maps: Mutex::new(map_writer),
            wakeups,
        };

        let before = rss_bytes();
        let (seen_sender, mut seen) = mpsc::unbounded_channel();
        let started = Instant::now();
        for i in 0..n {
            tokio::spawn(subscribe(bench.router.clone(), i, seen_sender.clone()));
        }
        let mut first = 0;
        while first < n {
            if let Some((_, 1)) = seen.recv().await {
                first += 1;
            }
        }
        let subscribed = started.elapsed();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let after = rss_bytes();

        // One commit while all are subscribed: its Pod's stream has it.
        let mut latencies = Vec::new();
        for t in 0..trials {
            let i = (t * 37) % n;
            let committed = Instant::now();
            bench.commit(std::iter::once(i), 2 + t as u64);
            loop {
                let Some((who, revision)) = seen.recv().await else {
                    panic!("the streams ended")
                };
                if who == i && revision == 2 + t as u64 {
                    break;
                }
            }
            latencies.push(committed.elapsed().as_secs_f64() * 1000.0);
        }
        latencies.sort_by(f64::total_cmp);

        // A tightened ceiling: every sandbox's policy changes at once.
        let revision = 1000;
        let committed = Instant::now();
        bench.commit(0..n, revision);
        all_streams_have(&mut seen, n, revision).await;
        let fan_out = committed.elapsed();

        // The same as a storm reaches a replica: each sandbox's commit on
        // its own watch events, a millisecond apart. What counts is the CPU
        // the streams take for it.
        let revision = 1001;
        let cpu = proc_cpu_seconds(std::process::id());
        let committed = Instant::now();
        for i in 0..n {
            bench.commit(std::iter::once(i), revision);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        all_streams_have(&mut seen, n, revision).await;
        let storm = committed.elapsed();
        let storm_cpu = proc_cpu_seconds(std::process::id()) - cpu;

        println!(
            "policy delivery, operator side (one process, fake API server; {} subscribed proxies)",
            n
        );
        println!("| figure | no subscriber | {n} subscribed |");
        println!("|---|---|---|");
        println!(
            "| RSS | {:.1} MB | {:.1} MB (+{:.1} MB, {:.1} KB per subscription) |",
            before as f64 / 1e6,
            after as f64 / 1e6,
            after.saturating_sub(before) as f64 / 1e6,
            after.saturating_sub(before) as f64 / 1e3 / n as f64
        );
        println!(
            "| all subscribed, first update each | — | {:.1} ms |",
            subscribed.as_secs_f64() * 1000.0
        );
        println!(
            "| one commit → its Pod's stream, {trials} trials | — | p50 {:.2} ms, p99 {:.2} ms |",
            percentile(&latencies, 50.0),
            percentile(&latencies, 99.0)
        );
        println!(
            "| every sandbox's policy changed → all {n} streams have it | — | {:.1} ms |",
            fan_out.as_secs_f64() * 1000.0
        );
        println!(
            "| the same, one commit a millisecond → all {n} streams have it | — | {:.0} ms, {:.2} s of CPU |",
            storm.as_secs_f64() * 1000.0,
            storm_cpu
        );
    });
}
