//! Process-level test harness: a real `agentgate-proxy` process, a local
//! HTTPS upstream with its own CA, and real clients (`curl`, `python3`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use agentgate_proxy::testkit::{TestCa, start_upstream};

pub mod netns;

/// Hosts the upstream has a certificate for.
pub const HOSTS: &[&str] = &[
    "api.example.test",
    "raw.example.test",
    "status.example.test",
    "other.example.test",
];

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The realpath of an executable on PATH.
pub fn realpath_of(program: &str) -> String {
    if program == "python3" {
        let out = Command::new("python3")
            .args([
                "-c",
                "import os,sys; print(os.path.realpath(sys.executable))",
            ])
            .output()
            .expect("python3 is required for these tests");
        return String::from_utf8(out.stdout).unwrap().trim().to_string();
    }
    let out = Command::new("sh")
        .args(["-c", &format!("readlink -f \"$(command -v {program})\"")])
        .output()
        .unwrap();
    let path = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(!path.is_empty(), "{program} is required for these tests");
    path
}

pub struct Harness {
    pub dir: PathBuf,
    pub upstream: SocketAddr,
    pub plain_upstream: SocketAddr,
    pub listen: SocketAddr,
    pub metrics: SocketAddr,
    pub sandbox_ca: PathBuf,
    pub upstream_ca: PathBuf,
    pub policy_path: PathBuf,
    /// The proxy's RUST_LOG (`info` unless a test wants more).
    pub rust_log: String,
    proxy: Option<Child>,
    log: PathBuf,
}

impl Harness {
    /// Starts the upstreams (on the given runtime) and writes CAs; the proxy
    /// starts with [`Harness::start_proxy`].
    pub fn new(runtime: &tokio::runtime::Runtime, name: &str) -> Harness {
        let dir =
            std::env::temp_dir().join(format!("agentgate-proxy-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("policy")).unwrap();
        let upstream_ca = TestCa::new("test upstream CA").unwrap();
        let sandbox_ca = TestCa::new("test sandbox CA").unwrap();
        let tls = upstream_ca.server_config(HOSTS).unwrap();
        let upstream = runtime.block_on(start_upstream(Some(tls))).unwrap();
        let plain_upstream = runtime.block_on(start_upstream(None)).unwrap();
        std::fs::write(dir.join("upstream-ca.pem"), &upstream_ca.cert_pem).unwrap();
        std::fs::write(dir.join("sandbox-ca.pem"), &sandbox_ca.cert_pem).unwrap();
        std::fs::write(dir.join("sandbox-ca.key"), &sandbox_ca.key_pem).unwrap();
        Harness {
            upstream,
            plain_upstream,
            listen: SocketAddr::from(([127, 0, 0, 1], free_port())),
            metrics: SocketAddr::from(([127, 0, 0, 1], free_port())),
            sandbox_ca: dir.join("sandbox-ca.pem"),
            upstream_ca: dir.join("upstream-ca.pem"),
            policy_path: dir.join("policy/policy.yaml"),
            log: dir.join("proxy.log"),
            rust_log: "info".into(),
            dir,
            proxy: None,
        }
    }

    /// `{PORT}`, `{PLAIN}`, `{CURL}` and `{PYTHON}` in a policy template.
    pub fn render(&self, template: &str) -> String {
        template
            .replace("{PORT}", &self.upstream.port().to_string())
            .replace("{PLAIN}", &self.plain_upstream.port().to_string())
            .replace("{CURL}", &realpath_of("curl"))
            .replace("{PYTHON}", &realpath_of("python3"))
    }

    /// Replaces the policy atomically (write, then rename).
    pub fn write_policy(&self, text: &str) {
        let tmp = self.dir.join("policy/.policy.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &self.policy_path).unwrap();
    }

    pub fn start_proxy(&mut self, extra: &[&str]) {
        let port = self.upstream.port();
        let plain = self.plain_upstream.port();
        let mut args: Vec<String> = vec![
            "--policy".into(),
            self.policy_path.display().to_string(),
            "--listen".into(),
            self.listen.to_string(),
            "--metrics-listen".into(),
            self.metrics.to_string(),
            "--ca-cert".into(),
            self.sandbox_ca.display().to_string(),
            "--ca-key".into(),
            self.dir.join("sandbox-ca.key").display().to_string(),
        ];
        if !extra.contains(&"--no-upstream-ca") {
            args.extend([
                "--upstream-ca".into(),
                self.upstream_ca.display().to_string(),
            ]);
        }
        for host in HOSTS {
            args.extend(["--resolve".into(), format!("{host}:{port}:127.0.0.1")]);
            args.extend(["--resolve".into(), format!("{host}:{plain}:127.0.0.1")]);
        }
        args.extend(
            extra
                .iter()
                .filter(|a| **a != "--no-upstream-ca")
                .map(|a| a.to_string()),
        );
        let log = std::fs::File::create(&self.log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_agentgate-proxy"))
            .args(&args)
            .env("RUST_LOG", &self.rust_log)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.proxy = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.get_metrics_path("/healthz").0 == 200 {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the proxy did not start:\n{}", self.proxy_log());
    }

    /// Stops the proxy (a restart then calls [`Harness::start_proxy`]).
    pub fn stop_proxy(&mut self) {
        if let Some(mut child) = self.proxy.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn proxy_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn proxy_alive(&mut self) -> bool {
        self.proxy
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// GET on the metrics port: (status, body).
    pub fn get_metrics_path(&self, path: &str) -> (u16, String) {
        let Ok(mut s) = TcpStream::connect(self.metrics) else {
            return (0, String::new());
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        );
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, body)
    }

    /// Waits until /readyz answers `status`.
    pub fn wait_ready(&self, status: u16) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.get_metrics_path("/readyz").0 == status {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "/readyz never answered {status}: {:?}\n{}",
            self.get_metrics_path("/readyz"),
            self.proxy_log()
        );
    }

    /// The policy generation the proxy reports.
    pub fn generation(&self) -> u64 {
        let (_, body) = self.get_metrics_path("/metrics");
        body.lines()
            .find_map(|l| l.strip_prefix("agentgate_proxy_policy_generation "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Waits until the proxy has seen a policy change after `generation`.
    pub fn wait_generation_after(&self, generation: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.generation() > generation {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("the proxy never reloaded the policy\n{}", self.proxy_log());
    }

    /// curl through the explicit proxy. Returns (exit code, body, the -w line).
    pub fn curl(&self, args: &[&str]) -> (i32, String, String) {
        let out = Command::new("curl")
            .args([
                "-sS",
                "--max-time",
                "20",
                "--proxy",
                &format!("http://{}", self.listen),
            ])
            .args(["-w", "\n@@%{http_connect} %{http_code} %{http_version}"])
            .args((!args.contains(&"--http2")).then_some("--http1.1"))
            .args(args)
            .output()
            .unwrap();
        split_curl(out)
    }

    /// The python tunnel client: one JSON value per line.
    pub fn python(&self, target: &str, cafile: &Path, steps: &[&str]) -> Vec<serde_json::Value> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/tunnel_client.py");
        let out = Command::new("python3")
            .arg(script)
            .arg(self.listen.to_string())
            .arg(target)
            .arg(cafile)
            .args(steps)
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("python printed {l:?}")))
            .collect()
    }

    pub fn target(&self, host: &str) -> String {
        format!("{host}:{}", self.upstream.port())
    }

    pub fn url(&self, host: &str, path: &str) -> String {
        format!("https://{host}:{}{path}", self.upstream.port())
    }
}

fn split_curl(out: Output) -> (i32, String, String) {
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, tail) = stdout.rsplit_once("\n@@").unwrap_or((&stdout, ""));
    (
        out.status.code().unwrap_or(-1),
        body.to_string(),
        tail.trim().to_string(),
    )
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(mut child) = self.proxy.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A runtime for the upstream servers of one test.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
