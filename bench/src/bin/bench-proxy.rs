//! `make bench-proxy`: agentgate-proxy against no proxy, side by side in one
//! run, with the same client and the same upstream (both in this process;
//! the proxy is the real release binary in its own process, so its CPU and
//! RSS are its own). Prints numbers; asserts nothing about speed, but exits
//! non-zero when a request fails or an answer is wrong.
//!
//! 1. added latency of intercepted HTTPS keep-alive requests (1 KiB bodies);
//! 2. requests/s through one proxy, its CPU per 1,000 requests/s, and no
//!    failed request while the policy is rewritten every 100 ms;
//! 3. proxy RSS after start and after the load;
//! 4. a new intercepted connection (leaf cached): CONNECT + TLS + 1 request;
//! 5. l4 tunnel throughput;
//! 6. in process: decision cost per request and policy load time on the
//!    1,000-rule policy the proxy runs with;
//! 7. proxy RSS with 1,000 and 10,000 idle intercepted connections, last
//!    (`BENCH_PROXY_ONLY=idle` runs 1, 2, 3 and this).
//!
//! Between 1 and 2, the same for MCP: `tools/call` POSTs on one keep-alive
//! connection to an `mcp` endpoint of 101 tool entries, each JSON-RPC
//! message judged by the proxy (`BENCH_PROXY_ONLY=mcp`, which `make
//! bench-mcp` sets, runs only 1 and that). Then 1c: the same GET carrying
//! a bound credential's placeholder (replaced by the secret) beside it
//! without one, through a proxy that holds a credential
//! (docs/proxy.md, "Credentials"); not run against `BENCH_PROXY_BINARY`.
//!
//! `BENCH_PROXY_BINARY=PATH` runs another `agentgate-proxy` build (the
//! previous head's) under the same client, for side-by-side figures.
//!
//! `AGENTGATE_BENCH_SMOKE=1` (`make bench-smoke`): tiny sizes, same checks.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentgate_bench::percentile_duration as percentile;
use agentgate_bench::proc_cpu_seconds;
use agentgate_proxy::decide::{Binary, Snapshot, judge_request};
use agentgate_proxy::idle::PARK_AFTER;
use agentgate_proxy::policy_file::compile_policy;
use agentgate_proxy::testkit::{TestCa, start_upstream};
use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsConnector;

struct Sizes {
    latency_requests: usize,
    load_seconds: f64,
    load_connections: usize,
    open_connections: Vec<usize>,
    new_connections: usize,
    tunnel_bytes: usize,
    decisions: usize,
    rules: usize,
}

fn sizes() -> Sizes {
    if std::env::var("AGENTGATE_BENCH_SMOKE").is_ok_and(|v| v == "1") {
        Sizes {
            latency_requests: 50,
            load_seconds: 0.5,
            load_connections: 4,
            open_connections: vec![20, 40],
            new_connections: 10,
            tunnel_bytes: 4 << 20,
            decisions: 1000,
            rules: 50,
        }
    } else {
        Sizes {
            latency_requests: 5000,
            load_seconds: 5.0,
            load_connections: 32,
            open_connections: vec![1000, 10_000],
            new_connections: 500,
            tunnel_bytes: 2 << 30,
            decisions: 200_000,
            rules: 1000,
        }
    }
}

const HOST: &str = "api.example.test";
const RAW_HOST: &str = "raw.example.test";

/// The credential of section 1c, and its secret.
const CREDENTIAL: &str = "bench-token";
const SECRET: &str = "ghp_benchSecretValue0123456789abcdef";

/// `rules` rules; the ones the benchmark uses come last, so every decision
/// walks the whole policy. With `credential`, one more rule binds
/// [`CREDENTIAL`] to the GETs the benchmark makes.
fn policy_text(
    rules: usize,
    port: u16,
    sink_port: u16,
    generation: usize,
    credential: bool,
) -> String {
    let mut text = format!("# generation {generation}\nnetwork:\n");
    for i in 0..rules.saturating_sub(2) {
        if i % 3 == 0 {
            text.push_str(&format!(
                "  - {{name: r{i}, binaries: [/usr/bin/tool{i}], endpoints: [{{host: svc-{i}.example.test, ports: [443]}}]}}\n"
            ));
        } else {
            text.push_str(&format!(
                "  - name: r{i}\n    endpoints:\n      - host: \"*.svc-{i}.example.test\"\n        ports: [443, {port}]\n        protocol: rest\n        rules: [{{methods: [GET, POST], path: \"/v{i}/**\"}}]\n        denyRules: [{{methods: [DELETE], path: \"/**\"}}]\n"
            ));
        }
    }
    text.push_str(&format!(
        "  - name: bench\n    endpoints:\n      - host: {HOST}\n        ports: [{port}]\n        protocol: rest\n        rules: [{{methods: [GET], path: \"/bytes/**\"}}]\n        denyRules: [{{methods: [GET], path: \"/bytes/secret/**\"}}]\n"
    ));
    text.push_str(&format!(
        "  - {{name: raw, endpoints: [{{host: {RAW_HOST}, ports: [{sink_port}]}}]}}\n"
    ));
    if credential {
        text.push_str(&format!(
            "  - name: bench-credential\n    credentials: [{CREDENTIAL}]\n    endpoints:\n      - host: {HOST}\n        ports: [{port}]\n        protocol: rest\n        rules: [{{methods: [GET], path: \"/bytes/**\"}}]\n"
        ));
    }
    text.push_str(&format!(
        "  - name: bench-mcp\n    endpoints:\n      - host: {HOST}\n        ports: [{port}]\n        protocol: mcp\n        path: /mcp\n        tools:\n"
    ));
    for i in 0..100 {
        text.push_str(&format!(
            "          - {{name: tool_{i}, arguments: {{n: {{maximum: {i}}}}}}}\n"
        ));
    }
    text.push_str("          - {name: send_money, arguments: {recipient: {glob: \"GB*\"}, amount: {minimum: 0, maximum: 100}}, additionalArguments: false}\n");
    text
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

struct Bench {
    dir: PathBuf,
    upstream: SocketAddr,
    sink: SocketAddr,
    proxy_addr: SocketAddr,
    metrics_addr: SocketAddr,
    proxy: Child,
    direct_tls: Arc<ClientConfig>,
    proxied_tls: Arc<ClientConfig>,
    policy_path: PathBuf,
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = self.proxy.kill();
        let _ = self.proxy.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn client_config(ca_pem: &str) -> anyhow::Result<Arc<ClientConfig>> {
    let mut roots = RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca_pem.as_bytes())?)?;
    let config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
    Ok(Arc::new(config))
}

fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// Reads until EOF, counting, then answers with the count (8 bytes).
async fn serve_sink(listener: TcpListener) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(async move {
            let mut buffer = vec![0u8; 256 * 1024];
            let mut total: u64 = 0;
            loop {
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => total += n as u64,
                }
            }
            let _ = stream.write_all(&total.to_be_bytes()).await;
        });
    }
}

impl Bench {
    /// Starts the proxy; `as_pod` runs it as the sandbox Pod does: uid
    /// 1337 with CAP_SYS_PTRACE only (needs root and setpriv); `credential`
    /// gives it [`CREDENTIAL`] (declared, its secret, a placeholder).
    async fn start(
        sizes: &Sizes,
        identity: &str,
        as_pod: bool,
        credential: bool,
    ) -> anyhow::Result<Bench> {
        let dir = std::env::temp_dir().join(format!(
            "agentgate-bench-proxy-{}-{identity}-{as_pod}-{credential}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir)?;
        let upstream_ca = TestCa::new("bench upstream CA")?;
        let sandbox_ca = TestCa::new("bench sandbox CA")?;
        let tls = upstream_ca
            .server_config(&[HOST])
            .map_err(anyhow::Error::msg)?;
        let upstream = start_upstream(Some(tls)).await?;
        let sink_listener = TcpListener::bind("127.0.0.1:0").await?;
        let sink = sink_listener.local_addr()?;
        tokio::spawn(serve_sink(sink_listener));
        std::fs::write(dir.join("upstream-ca.pem"), &upstream_ca.cert_pem)?;
        std::fs::write(dir.join("ca.pem"), &sandbox_ca.cert_pem)?;
        std::fs::write(dir.join("ca.key"), &sandbox_ca.key_pem)?;
        let policy_path = dir.join("policy.yaml");
        std::fs::write(
            &policy_path,
            policy_text(sizes.rules, upstream.port(), sink.port(), 0, credential),
        )?;
        let mut credential_args = Vec::new();
        if credential {
            std::fs::write(
                dir.join("credentials.json"),
                serde_json::json!([{"name": CREDENTIAL, "secretRef": {"name": "bench", "key": "token"},
                    "placeholder": {"env": "BENCH_TOKEN"},
                    "attach": {"header": {"name": "Authorization", "format": "Bearer {}"}}}])
                .to_string(),
            )?;
            for sub in ["secrets", "placeholders"] {
                std::fs::create_dir_all(dir.join(sub))?;
            }
            std::fs::write(dir.join("secrets").join(CREDENTIAL), SECRET)?;
            credential_args.push("--credential-secrets".into());
            credential_args.push(dir.join("secrets").display().to_string());
            credential_args.push("--placeholders".into());
            credential_args.push(dir.join("placeholders").display().to_string());
        }
        let proxy_addr = free_addr()?;
        let metrics_addr = free_addr()?;
        // BENCH_PROXY_BINARY runs another build (the previous head's) under
        // the same client, for side-by-side figures.
        let binary = match std::env::var_os("BENCH_PROXY_BINARY") {
            Some(path) => PathBuf::from(path),
            None => std::env::current_exe()?.with_file_name("agentgate-proxy"),
        };
        if !binary.exists() {
            bail!(
                "{} is missing: build it first (make bench-proxy does)",
                binary.display()
            );
        }
        let mut command = if as_pod {
            use std::os::unix::fs::PermissionsExt;
            // uid 1337 reads the CA and the policy.
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
            for file in ["ca.pem", "ca.key", "upstream-ca.pem", "policy.yaml"] {
                std::fs::set_permissions(dir.join(file), std::fs::Permissions::from_mode(0o644))?;
            }
            let mut c = Command::new("setpriv");
            c.args([
                "--reuid=1337",
                "--regid=1337",
                "--clear-groups",
                "--inh-caps=-all,+sys_ptrace",
                "--ambient-caps=-all,+sys_ptrace",
                "--bounding-set=-all,+sys_ptrace",
                "--",
            ])
            .arg(&binary);
            c
        } else {
            Command::new(&binary)
        };
        let proxy = command
            .arg("--policy")
            .arg(&policy_path)
            .args([
                "--listen",
                &proxy_addr.to_string(),
                "--metrics-listen",
                &metrics_addr.to_string(),
            ])
            .arg("--ca-cert")
            .arg(dir.join("ca.pem"))
            .arg("--ca-key")
            .arg(dir.join("ca.key"))
            .arg("--upstream-ca")
            .arg(dir.join("upstream-ca.pem"))
            .args(["--identity", identity])
            .args(&credential_args)
            .args([
                "--resolve",
                &format!("{HOST}:{}:127.0.0.1", upstream.port()),
            ])
            .args([
                "--resolve",
                &format!("{RAW_HOST}:{}:127.0.0.1", sink.port()),
            ])
            .env("RUST_LOG", "warn")
            // As the sandbox Pod runs it.
            .env("MALLOC_CONF", agentgate_proxy::idle::MALLOC_CONF)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let bench = Bench {
            dir,
            upstream,
            sink,
            proxy_addr,
            metrics_addr,
            proxy,
            direct_tls: client_config(&upstream_ca.cert_pem)?,
            proxied_tls: client_config(&sandbox_ca.cert_pem)?,
            policy_path,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while bench
            .metric_text("/readyz")
            .await
            .is_none_or(|t| !t.starts_with("ready"))
        {
            if Instant::now() > deadline {
                bail!("the proxy never became ready");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(bench)
    }

    async fn metric_text(&self, path: &str) -> Option<String> {
        let mut s = TcpStream::connect(self.metrics_addr).await.ok()?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).await.ok()?;
        text.split_once("\r\n\r\n")
            .map(|(_, body)| body.to_string())
    }

    async fn metric(&self, name: &str) -> f64 {
        let text = self.metric_text("/metrics").await.unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
            .unwrap_or(0.0)
    }

    /// CONNECTs through the proxy; returns the stream after the 200.
    async fn connect_via_proxy(&self, host: &str, port: u16) -> anyhow::Result<TcpStream> {
        let mut stream = TcpStream::connect(self.proxy_addr).await?;
        stream.set_nodelay(true)?;
        stream
            .write_all(
                format!("CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n").as_bytes(),
            )
            .await?;
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).await? == 0 {
                bail!("the proxy closed during CONNECT");
            }
            head.push(byte[0]);
        }
        if !head.starts_with(b"HTTP/1.1 200") {
            bail!("CONNECT refused: {}", String::from_utf8_lossy(&head));
        }
        Ok(stream)
    }

    /// An HTTP/1.1 keep-alive connection to the upstream, direct or through the proxy.
    async fn http_client<B>(&self, proxied: bool) -> anyhow::Result<SendRequest<B>>
    where
        B: hyper::body::Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (tcp, tls) = if proxied {
            (
                self.connect_via_proxy(HOST, self.upstream.port()).await?,
                self.proxied_tls.clone(),
            )
        } else {
            let tcp = TcpStream::connect(self.upstream).await?;
            tcp.set_nodelay(true)?;
            (tcp, self.direct_tls.clone())
        };
        let stream = TlsConnector::from(tls)
            .connect(ServerName::try_from(HOST)?, tcp)
            .await?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        Ok(sender)
    }
}

async fn get(sender: &mut SendRequest<Empty<Bytes>>, path: &str) -> anyhow::Result<(u16, usize)> {
    sender.ready().await?;
    let request = http::Request::get(path)
        .header("host", HOST)
        .body(Empty::new())?;
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await?.to_bytes();
    Ok((status, body.len()))
}

/// One `tools/call` on the MCP route; checks that the server answered it.
async fn mcp_call(sender: &mut SendRequest<Full<Bytes>>, body: &Bytes) -> anyhow::Result<()> {
    sender.ready().await?;
    let request = http::Request::post("/mcp")
        .header("host", HOST)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(Full::new(body.clone()))?;
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    let answer = response.into_body().collect().await?.to_bytes();
    if status != 200 || !String::from_utf8_lossy(&answer).contains("called send_money") {
        bail!(
            "unexpected MCP answer {status}: {}",
            String::from_utf8_lossy(&answer)
        );
    }
    Ok(())
}

async fn mcp_latency(bench: &Bench, proxied: bool, n: usize) -> anyhow::Result<Vec<Duration>> {
    let mut sender = bench.http_client::<Full<Bytes>>(proxied).await?;
    let body = Bytes::from(
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "send_money", "arguments": {"recipient": "GB29", "amount": 50}}})
        .to_string(),
    );
    for _ in 0..n.min(500) {
        mcp_call(&mut sender, &body).await?;
    }
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        mcp_call(&mut sender, &body).await?;
        samples.push(start.elapsed());
    }
    samples.sort();
    Ok(samples)
}

/// Prints a direct / proxied / added table (µs).
fn latency_table(direct: &[Duration], proxied: &[Duration], targets: &str) {
    println!(
        "   {:<22} {:>10} {:>10} {:>10}",
        "", "p50 µs", "p90 µs", "p99 µs"
    );
    for (name, s) in [("direct", direct), ("through the proxy", proxied)] {
        println!(
            "   {:<22} {:>10.0} {:>10.0} {:>10.0}",
            name,
            micros(percentile(s, 50.0)),
            micros(percentile(s, 90.0)),
            micros(percentile(s, 99.0))
        );
    }
    println!(
        "   {:<22} {:>10.0} {:>10.0} {:>10.0}   ({targets})",
        "added by the proxy",
        micros(percentile(proxied, 50.0)) - micros(percentile(direct, 50.0)),
        micros(percentile(proxied, 90.0)) - micros(percentile(direct, 90.0)),
        micros(percentile(proxied, 99.0)) - micros(percentile(direct, 99.0)),
    );
}

/// One GET of 1 KiB with an `authorization` header; checks the answer.
async fn get_with(
    sender: &mut SendRequest<Empty<Bytes>>,
    authorization: &str,
) -> anyhow::Result<()> {
    sender.ready().await?;
    let request = http::Request::get("/bytes/1024")
        .header("host", HOST)
        .header("authorization", authorization)
        .body(Empty::new())?;
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await?.to_bytes();
    if status != 200 || body.len() != 1024 {
        bail!(
            "unexpected answer {status}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    Ok(())
}

/// Section 1c: the same GET through a proxy that holds [`CREDENTIAL`],
/// carrying its placeholder (attached: replaced by the secret) and
/// carrying a value of the same length that is none (judged without a
/// credential), alternately on two keep-alive connections so that both
/// see the same machine. (without, with) samples.
async fn credential_latency(
    bench: &Bench,
    n: usize,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let placeholder = std::fs::read_to_string(bench.dir.join("placeholders").join(CREDENTIAL))
        .context("the proxy wrote no placeholder")?;
    let with = format!("Bearer {placeholder}");
    let without = format!("Bearer {}", "x".repeat(placeholder.len()));
    let mut plain = bench.http_client(true).await?;
    let mut carrying = bench.http_client(true).await?;
    for _ in 0..n.min(500) {
        get_with(&mut plain, &without).await?;
        get_with(&mut carrying, &with).await?;
    }
    let (mut bare, mut attached) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let start = Instant::now();
        get_with(&mut plain, &without).await?;
        bare.push(start.elapsed());
        let start = Instant::now();
        get_with(&mut carrying, &with).await?;
        attached.push(start.elapsed());
    }
    bare.sort();
    attached.sort();
    let attached_total = bench
        .metric(&format!(
            "agentgate_proxy_credentials_total{{credential=\"{CREDENTIAL}\",outcome=\"attached\"}} "
        ))
        .await;
    if attached_total < n as f64 {
        bail!("the proxy attached the secret {attached_total} times, not {n}");
    }
    Ok((bare, attached))
}

async fn latency(bench: &Bench, proxied: bool, n: usize) -> anyhow::Result<Vec<Duration>> {
    let mut sender = bench.http_client(proxied).await?;
    for _ in 0..n.min(500) {
        get(&mut sender, "/bytes/1024").await?;
    }
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let (status, len) = get(&mut sender, "/bytes/1024").await?;
        samples.push(start.elapsed());
        if status != 200 || len != 1024 {
            bail!("unexpected answer {status}, {len} bytes");
        }
    }
    samples.sort();
    Ok(samples)
}

fn proc_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

/// Requests/s over `seconds` with `connections` keep-alive clients, and the
/// number of failed requests. With `reload`, the policy file is rewritten
/// every 100 ms meanwhile.
async fn load(
    bench: &Bench,
    proxied: bool,
    sizes: &Sizes,
    reload: bool,
) -> anyhow::Result<(f64, u64, f64, u64)> {
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..sizes.load_connections {
        let mut sender = bench.http_client(proxied).await?;
        let (done, failed, stop) = (done.clone(), failed.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match get(&mut sender, "/bytes/1024").await {
                    Ok((200, 1024)) => done.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    let generation_before = bench.metric("agentgate_proxy_policy_generation ").await;
    let reloader = reload.then(|| {
        let (path, stop, rules, port, sink) = (
            bench.policy_path.clone(),
            stop.clone(),
            sizes.rules,
            bench.upstream.port(),
            bench.sink.port(),
        );
        tokio::spawn(async move {
            let mut generation = 1;
            while !stop.load(Ordering::Relaxed) {
                let tmp = path.with_extension("tmp");
                let _ = std::fs::write(&tmp, policy_text(rules, port, sink, generation, false));
                let _ = std::fs::rename(&tmp, &path);
                generation += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    });
    let pid = bench.proxy.id();
    let cpu_before = proc_cpu_seconds(pid);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(sizes.load_seconds)).await;
    let count_at_stop = done.load(Ordering::Relaxed);
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = proc_cpu_seconds(pid) - cpu_before;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let _ = task.await;
    }
    if let Some(r) = reloader {
        let _ = r.await;
    }
    // Let the last rewrite be seen before counting reloads.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let reloads = (bench.metric("agentgate_proxy_policy_generation ").await - generation_before)
        .max(0.0) as u64;
    Ok((
        count_at_stop as f64 / elapsed,
        failed.load(Ordering::Relaxed),
        cpu / elapsed,
        reloads,
    ))
}

/// CONNECT (or TCP) + TLS + one request, sequentially.
async fn new_connections(bench: &Bench, proxied: bool, n: usize) -> anyhow::Result<Vec<Duration>> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let mut sender = bench.http_client(proxied).await?;
        let (status, _) = get(&mut sender, "/bytes/1024").await?;
        samples.push(start.elapsed());
        if status != 200 {
            bail!("new connection answered {status}");
        }
    }
    samples.sort();
    Ok(samples)
}

async fn tunnel_throughput(bench: &Bench, proxied: bool, bytes: usize) -> anyhow::Result<f64> {
    let mut stream = if proxied {
        bench.connect_via_proxy(RAW_HOST, bench.sink.port()).await?
    } else {
        TcpStream::connect(bench.sink).await?
    };
    let chunk = vec![7u8; 256 * 1024];
    let start = Instant::now();
    let mut sent = 0;
    while sent < bytes {
        let n = chunk.len().min(bytes - sent);
        stream.write_all(&chunk[..n]).await?;
        sent += n;
    }
    stream.shutdown().await?;
    let mut count = [0u8; 8];
    stream.read_exact(&mut count).await?;
    let elapsed = start.elapsed().as_secs_f64();
    if u64::from_be_bytes(count) != bytes as u64 {
        bail!(
            "the sink counted {} of {bytes} bytes",
            u64::from_be_bytes(count)
        );
    }
    Ok(bytes as f64 / elapsed / 1e9)
}

fn in_process(sizes: &Sizes) -> anyhow::Result<(f64, f64, f64)> {
    let text = policy_text(sizes.rules, 8443, 9000, 0, false);
    let rounds = 5;
    let start = Instant::now();
    let mut compiled = None;
    for _ in 0..rounds {
        compiled = Some(compile_policy(text.as_bytes()).map_err(anyhow::Error::msg)?);
    }
    let load_ms = start.elapsed().as_secs_f64() * 1e3 / rounds as f64;
    let policy = compiled.context("no rounds")?;
    let snapshot = Snapshot {
        generation: 1,
        policy: Ok(policy),
        findings: Arc::default(),
    };
    let binary = Binary(Some("/usr/local/bin/agent".into()));
    let start = Instant::now();
    for i in 0..sizes.decisions {
        let path = if i % 2 == 0 {
            "/bytes/1024"
        } else {
            "/bytes/secret/x"
        };
        let verdict = judge_request(
            &snapshot,
            &binary,
            HOST,
            8443,
            "GET",
            std::hint::black_box(path),
            None,
        );
        if verdict.is_ok() != (i % 2 == 0) {
            bail!("wrong decision for {path}");
        }
    }
    let per_decision_us = start.elapsed().as_secs_f64() * 1e6 / sizes.decisions as f64;
    // A refused path on the last rule, the most expensive miss.
    let start = Instant::now();
    for _ in 0..sizes.decisions {
        let _ = std::hint::black_box(judge_request(
            &snapshot,
            &binary,
            "nowhere.example.test",
            8443,
            "GET",
            "/x",
            None,
        ));
    }
    let miss_us = start.elapsed().as_secs_f64() * 1e6 / sizes.decisions as f64;
    Ok((per_decision_us, miss_us, load_ms))
}

/// Section 7: RSS with `sizes.open_connections` idle intercepted
/// connections (each made one request), past the proxy's parking delay;
/// then every 97th of them must still answer.
async fn idle_connections(bench: &Bench, pid: u32, sizes: &Sizes) -> anyhow::Result<()> {
    let rss_rest = proc_rss_mib(pid);
    println!(
        "7. proxy RSS with idle intercepted connections ({rss_rest:.1} MiB before; target ≤ 30 MB at 1,000)"
    );
    let mut open = Vec::new();
    for &count in &sizes.open_connections {
        while open.len() < count {
            let mut sender = bench.http_client(true).await?;
            get(&mut sender, "/bytes/1024").await?;
            open.push(sender);
        }
        // Idle means idle past the proxy's parking delay
        // (agentgate_proxy::idle::PARK_AFTER), not just opened.
        tokio::time::sleep(2 * PARK_AFTER + Duration::from_millis(500)).await;
        let rss_open = proc_rss_mib(pid);
        let open_now = bench.metric("agentgate_proxy_open_connections ").await;
        let parked = bench.metric("agentgate_proxy_parked_connections ").await;
        println!(
            "   {count:>6} connections: {rss_open:>6.1} MiB = {:>5.1} KiB each ({open_now} open, {parked} parked)",
            (rss_open - rss_rest) * 1024.0 / count as f64
        );
    }
    for sender in open.iter_mut().step_by(97) {
        let (status, _) = get(sender, "/bytes/1024").await?;
        if status != 200 {
            bail!("an idle connection answered {status}");
        }
    }
    Ok(())
}

async fn run() -> anyhow::Result<()> {
    let sizes = sizes();
    let bench = Bench::start(&sizes, "proc", false, false).await?;
    let pid = bench.proxy.id();
    let rss_start = proc_rss_mib(pid);
    println!(
        "agentgate-proxy benchmark: {} rules in the policy, client and upstream in this process",
        sizes.rules
    );
    println!();

    // With BENCH_PROXY_ONLY=mcp, 1 still runs: it warms the proxy and is
    // the REST baseline the MCP figures are read against.
    let only = std::env::var("BENCH_PROXY_ONLY").unwrap_or_default();
    let (only_mcp, only_idle) = (only == "mcp", only == "idle");
    let direct = latency(&bench, false, sizes.latency_requests).await?;
    let proxied = latency(&bench, true, sizes.latency_requests).await?;
    println!(
        "1. keep-alive HTTPS GET, 1 KiB answers, {} sequential requests on one connection",
        sizes.latency_requests
    );
    latency_table(&direct, &proxied, "targets: p50 ≤ 100, p99 ≤ 500");
    println!();

    let direct = mcp_latency(&bench, false, sizes.latency_requests).await?;
    let proxied = mcp_latency(&bench, true, sizes.latency_requests).await?;
    println!(
        "1b. MCP tools/call over keep-alive HTTPS (each message judged against 101 tool entries), {} sequential calls",
        sizes.latency_requests
    );
    latency_table(&direct, &proxied, "target: p99 ≤ 500");
    println!();
    if only_mcp {
        return Ok(());
    }

    // An older build (BENCH_PROXY_BINARY) knows no credential flags.
    if std::env::var_os("BENCH_PROXY_BINARY").is_none() {
        let credentialed = Bench::start(&sizes, "proc", false, true).await?;
        let (bare, attached) = credential_latency(&credentialed, sizes.latency_requests).await?;
        drop(credentialed);
        println!(
            "1c. keep-alive HTTPS GET carrying a bound credential's placeholder (replaced by the secret) beside the same GET without one, {} each, alternating",
            sizes.latency_requests
        );
        println!(
            "   {:<26} {:>10} {:>10} {:>10}",
            "", "p50 µs", "p90 µs", "p99 µs"
        );
        for (name, samples) in [
            ("without a credential", &bare),
            ("with the credential", &attached),
        ] {
            println!(
                "   {:<26} {:>10.0} {:>10.0} {:>10.0}",
                name,
                micros(percentile(samples, 50.0)),
                micros(percentile(samples, 90.0)),
                micros(percentile(samples, 99.0))
            );
        }
        println!(
            "   {:<26} {:>10.1} {:>10.1} {:>10.1}   (target: p99 ≤ 20)",
            "added by the credential",
            micros(percentile(&attached, 50.0)) - micros(percentile(&bare, 50.0)),
            micros(percentile(&attached, 90.0)) - micros(percentile(&bare, 90.0)),
            micros(percentile(&attached, 99.0)) - micros(percentile(&bare, 99.0)),
        );
        println!();
    }

    let (direct_rps, direct_failed, _, _) = load(&bench, false, &sizes, false).await?;
    let (proxy_rps, proxy_failed, proxy_cores, _) = load(&bench, true, &sizes, false).await?;
    let (reload_rps, reload_failed, _, reloads) = load(&bench, true, &sizes, true).await?;
    println!(
        "2. throughput, {} keep-alive connections for {:.1} s",
        sizes.load_connections, sizes.load_seconds
    );
    println!("   direct                 {direct_rps:>10.0} requests/s   failed {direct_failed}");
    println!(
        "   through the proxy      {proxy_rps:>10.0} requests/s   failed {proxy_failed}   proxy CPU {proxy_cores:.2} cores = {:.3} cores per 1,000 requests/s (target ≥ 5,000/s, ≤ 0.1)",
        proxy_cores / (proxy_rps / 1000.0).max(f64::MIN_POSITIVE)
    );
    println!(
        "   while reloading        {reload_rps:>10.0} requests/s   failed {reload_failed}   policy reloads {reloads} (target: 0 failed)"
    );
    println!();

    let rss_rest = proc_rss_mib(pid);
    println!(
        "3. proxy RSS: {rss_start:.1} MiB after start, {rss_rest:.1} MiB after the load runs (idle connections: 7.)"
    );
    println!();
    if only_idle {
        return idle_connections(&bench, pid, &sizes).await;
    }

    let direct_new = new_connections(&bench, false, sizes.new_connections).await?;
    let proxied_new = new_connections(&bench, true, sizes.new_connections).await?;
    let anonymous = Bench::start(&sizes, "none", false, false).await?;
    let proxied_none = new_connections(&anonymous, true, sizes.new_connections).await?;
    drop(anonymous);
    // As in the Pod: another uid, so every process is inspected through
    // pidfd_getfd rather than /proc/PID/fd.
    let as_root = std::fs::read_to_string("/proc/self/status")
        .is_ok_and(|s| s.lines().any(|l| l.starts_with("Uid:\t0\t")));
    let proxied_pod = if as_root {
        let pod = Bench::start(&sizes, "proc", true, false).await?;
        let times = new_connections(&pod, true, sizes.new_connections).await?;
        drop(pod);
        Some(times)
    } else {
        None
    };
    let processes = std::fs::read_dir("/proc")?
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .count();
    println!(
        "4. new connection + TLS + 1 request, {} sequential, leaf cached ({processes} processes in /proc)",
        sizes.new_connections
    );
    let mut rows = vec![
        ("direct", &direct_new),
        ("proxy, identity proc", &proxied_new),
        ("proxy, identity none", &proxied_none),
    ];
    match &proxied_pod {
        Some(times) => rows.push(("proxy as uid 1337", times)),
        None => println!("   (proxy as uid 1337: not measured, needs root)"),
    }
    for (name, s) in rows {
        println!(
            "   {:<22} p50 {:>8.0} µs   p99 {:>8.0} µs",
            name,
            micros(percentile(s, 50.0)),
            micros(percentile(s, 99.0))
        );
    }
    println!("   (target: through the proxy p99 ≤ 2,000 µs)");
    println!();

    let direct_gbps = tunnel_throughput(&bench, false, sizes.tunnel_bytes).await?;
    let tunnel_gbps = tunnel_throughput(&bench, true, sizes.tunnel_bytes).await?;
    println!("5. l4 tunnel, {} MiB one way", sizes.tunnel_bytes >> 20);
    println!(
        "   direct {direct_gbps:.2} GB/s   through the proxy {tunnel_gbps:.2} GB/s (target ≥ 1 GB/s)"
    );
    println!();

    let (hit_us, miss_us, load_ms) = in_process(&sizes)?;
    println!("6. in process, {}-rule policy", sizes.rules);
    println!(
        "   decision per request   {hit_us:.2} µs (rule at the end of the policy), {miss_us:.2} µs (no rule) (target ≤ 5)"
    );
    println!("   policy load + compile  {load_ms:.1} ms (target ≤ 50)");
    println!();

    // Last: the bench process's descriptor table, grown by the idle
    // connections, would slow every later identity lookup (4.).
    idle_connections(&bench, pid, &sizes).await?;

    if direct_failed + proxy_failed + reload_failed > 0 {
        bail!(
            "{} requests failed",
            direct_failed + proxy_failed + reload_failed
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("bench-proxy: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-proxy: {e:#}");
            ExitCode::FAILURE
        }
    }
}
