#![warn(missing_docs)]
//! A local Kubernetes control plane for end-to-end tests: real etcd and
//! kube-apiserver processes on free loopback ports, RBAC authorization,
//! service-account keys, a serving certificate for 127.0.0.1, an admin
//! identity (static token in `system:masters`) and a kubeconfig for the real
//! `kubectl`. The binaries come from `e2e/hack/install-control-plane.sh`
//! (or `KUBEBUILDER_ASSETS`); when they cannot be had the harness fails, it
//! never skips.

pub mod api_requests;
pub mod cpu;
pub mod node;
pub mod pod_runner;
pub mod probe;
pub mod race;
pub mod wait;
pub mod world;

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Why the control plane could not be started or used.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// A command could not run or failed.
    #[error("{what}: {detail}")]
    Command {
        /// What was attempted.
        what: String,
        /// Its error or output.
        detail: String,
    },
    /// The API server did not become ready in time.
    #[error("kube-apiserver not ready after {0:?}; its log: {1}")]
    NotReady(Duration, String),
}

fn failed(what: impl Into<String>, detail: impl ToString) -> HarnessError {
    HarnessError::Command {
        what: what.into(),
        detail: detail.to_string(),
    }
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `command`; its stdout, or an error naming `what` with everything
/// it printed.
pub(crate) fn run_checked(what: &str, command: &mut Command) -> Result<String, HarnessError> {
    let output = command
        .output()
        .map_err(|e| failed(format!("running {what}"), e))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(failed(
            what.to_string(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        ))
    }
}

/// Runs a script of the repository with `args` (its progress on stderr)
/// and returns the lines it printed on stdout.
pub fn script_output(script: &str, args: &[&str]) -> Result<Vec<String>, HarnessError> {
    let out = run_checked(
        script,
        Command::new("bash")
            .arg(repo_root().join(script))
            .args(args)
            .current_dir(repo_root())
            .stderr(Stdio::inherit()),
    )?;
    Ok(out.lines().map(str::to_string).collect())
}

/// Runs an install script of the repository and returns the path it
/// prints last: where what it installed is.
pub(crate) fn installed_path(script: &str) -> Result<PathBuf, HarnessError> {
    installed_path_with(script, &[])
}

/// Like [`installed_path`], calling the script with `args`.
fn installed_path_with(script: &str, args: &[&str]) -> Result<PathBuf, HarnessError> {
    let lines = script_output(script, args)?;
    let path = lines
        .last()
        .ok_or_else(|| failed(script, "printed no path"))?;
    Ok(PathBuf::from(path.trim()))
}

/// The official MCP Python SDK, pinned (hack/install-mcp-sdk.sh).
pub struct McpSdk {
    /// Its virtualenv's python.
    pub python: PathBuf,
    /// The venv's `site-packages`: the SDK and everything it imports.
    pub site_packages: PathBuf,
    /// The real path of the interpreter the venv runs (what a policy's
    /// `binaries` names).
    pub interpreter: String,
}

/// The MCP SDK, installed once if needed.
pub fn mcp_sdk() -> Result<McpSdk, HarnessError> {
    let python = installed_path_with("hack/install-mcp-sdk.sh", &["--print"])?;
    let out = run_checked(
        "asking the SDK's python where it lives",
        Command::new(&python).args([
            "-c",
            "import os, sys, sysconfig; print(sysconfig.get_paths()['purelib']); print(os.path.realpath(sys.executable))",
        ]),
    )?;
    let mut lines = out.lines();
    match (lines.next(), lines.next()) {
        (Some(site), Some(interpreter)) => Ok(McpSdk {
            python,
            site_packages: PathBuf::from(site.trim()),
            interpreter: interpreter.trim().to_string(),
        }),
        _ => Err(failed("asking the SDK's python where it lives", out)),
    }
}

/// The python of the AgentDojo benchmark's virtualenv (agentdojo 0.1.35 and
/// the MCP SDK, pinned by e2e/agentdojo/requirements.txt), installed once
/// if needed with hack/install-agentdojo.sh.
pub fn agentdojo_python() -> Result<PathBuf, HarnessError> {
    installed_path_with("hack/install-agentdojo.sh", &["--print"])
}

/// The directory with kube-apiserver, etcd and kubectl (installing or
/// building them once if needed).
pub fn assets() -> Result<PathBuf, HarnessError> {
    installed_path("e2e/hack/install-control-plane.sh")
}

/// Ports this process has handed out. Tests of one binary run on several
/// threads and each asks the kernel for a free port, then releases it for
/// etcd, the API server or a webhook to bind; the kernel may offer the same
/// port to the next thread before the first has bound it.
static HANDED_OUT_PORTS: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

fn free_port() -> Result<u16, HarnessError> {
    for _ in 0..64 {
        let listener =
            TcpListener::bind("127.0.0.1:0").map_err(|e| failed("finding a free port", e))?;
        let port = listener
            .local_addr()
            .map(|a| a.port())
            .map_err(|e| failed("finding a free port", e))?;
        let mut handed_out = HANDED_OUT_PORTS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if handed_out.insert(port) {
            return Ok(port);
        }
    }
    Err(failed(
        "finding a free port",
        "the kernel offered only ports already handed out",
    ))
}

/// Control planes started by this process, to name their directories.
static PLANES_STARTED: AtomicUsize = AtomicUsize::new(0);

/// A new, empty directory for one control plane, named `PREFIX-PID-N`
/// with a counter and created exclusively, so that no two planes share
/// etcd's data.
pub(crate) fn fresh_plane_dir(prefix: &str) -> Result<PathBuf, HarnessError> {
    loop {
        let n = PLANES_STARTED.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("{prefix}-{}-{n}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            // Left by an earlier process with the same id.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(failed(format!("creating {}", dir.display()), e)),
        }
    }
}

/// The namespace the chart is installed into.
pub const CHART_NAMESPACE: &str = "agentgate-system";

/// A free loopback port (for a webhook address chosen before it starts).
pub fn free_loopback_port() -> Result<u16, HarnessError> {
    free_port()
}

/// A metrics listener's address on a port the harness hands out: a port
/// the kernel picked (`127.0.0.1:0`) could be one already handed out for a
/// webhook that has not bound it yet, and the webhook then fails to start.
fn metrics_address() -> Result<String, HarnessError> {
    Ok(format!("127.0.0.1:{}", free_port()?))
}

/// The webhook flags of a chart installed by [`ControlPlane::install_chart`]:
/// self-managed certificates for 127.0.0.1 in the chart's Secret, checked
/// every 500 ms.
const WEBHOOK_FLAGS: &[&str] = &[
    "--tls-secret-namespace",
    CHART_NAMESPACE,
    "--tls-secret-name",
    "agentgate-webhook-tls",
    "--webhook-config-name",
    "agentgate",
    "--cert-extra-name",
    "127.0.0.1",
    "--cert-check-interval-ms",
    "500",
    // The chart's default webhook.scanWriters.
    "--scan-writer",
    "group:system:masters",
];

/// A running etcd + kube-apiserver, torn down on drop.
pub struct ControlPlane {
    dir: PathBuf,
    bin: PathBuf,
    kubeconfig: PathBuf,
    children: Vec<Process>,
    /// The admin's bearer token; `TOKEN_USERS[i]` has `{token}-{i}`.
    token: String,
    /// The real node, when started with [`ControlPlane::start_with_node`]:
    /// every process then runs in its network namespace.
    node: Option<node::Node>,
    /// The client the typed waits watch through, made at the first wait.
    waiter: std::sync::OnceLock<wait::Waiter>,
}

/// A control-plane process and how it was started, so that it can be
/// killed and started again the same way (the fault scenarios).
struct Process {
    name: String,
    program: PathBuf,
    args: Vec<String>,
    child: Child,
}

/// Identities besides the admin that hold a static bearer token (name,
/// groups): a user with no rights at all, the example sandbox's agent, and
/// the operator's ServiceAccount as the chart installs it.
pub const TOKEN_USERS: [(&str, &str); 3] = [
    ("e2e-nobody", ""),
    (
        "system:serviceaccount:agents:triage-bot",
        "system:serviceaccounts,system:serviceaccounts:agents",
    ),
    (
        OPERATOR_USER,
        "system:serviceaccounts,system:serviceaccounts:agentgate-system",
    ),
];

/// The chart's operator ServiceAccount (release `agentgate` in
/// [`CHART_NAMESPACE`]) as a user name.
pub const OPERATOR_USER: &str = "system:serviceaccount:agentgate-system:agentgate";

impl ControlPlane {
    /// Starts etcd and kube-apiserver and waits until the API server is ready.
    pub fn start() -> Result<ControlPlane, HarnessError> {
        ControlPlane::start_in(fresh_plane_dir("agentgate-e2e")?)
    }

    /// Like [`ControlPlane::start`], with its files (kubeconfig, logs, etcd
    /// data) in `dir`.
    pub fn start_in(dir: PathBuf) -> Result<ControlPlane, HarnessError> {
        let bin = assets()?;
        std::fs::create_dir_all(dir.join("certs"))
            .map_err(|e| failed(format!("creating {}", dir.display()), e))?;
        let mut plane = ControlPlane {
            kubeconfig: dir.join("kubeconfig"),
            dir,
            bin,
            children: Vec::new(),
            token: String::new(),
            node: None,
            waiter: std::sync::OnceLock::new(),
        };
        plane.boot()?;
        Ok(plane)
    }

    fn run_tool(&self, program: &str, args: &[&str]) -> Result<(), HarnessError> {
        let what = format!("{program} {}", args.join(" "));
        run_checked(&what, Command::new(program).args(args)).map(|_| ())
    }

    /// Starts the control-plane binary `name` with `args`.
    fn spawn(&mut self, name: &str, args: &[String]) -> Result<(), HarnessError> {
        self.spawn_program(name, self.bin.join(name), args)
    }

    /// Starts `program` with `args` as the process `name` (on the node,
    /// inside its network namespace).
    fn spawn_program(
        &mut self,
        name: &str,
        program: impl Into<PathBuf>,
        args: &[String],
    ) -> Result<(), HarnessError> {
        let program = program.into();
        let child = self.launch(name, &program, args, false)?;
        self.children.push(Process {
            name: name.into(),
            program,
            args: args.to_vec(),
            child,
        });
        Ok(())
    }

    /// Starts `program` with `args`, its output in `<name>.log` (appended
    /// to when `append`, so a restarted process keeps its first run's log).
    fn launch(
        &self,
        name: &str,
        program: &Path,
        args: &[String],
        append: bool,
    ) -> Result<Child, HarnessError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(self.dir.join(format!("{name}.log")))
            .map_err(|e| failed(format!("creating the {name} log"), e))?;
        let err = log
            .try_clone()
            .map_err(|e| failed(format!("creating the {name} log"), e))?;
        let mut command = match &self.node {
            // nsenter enters the network namespace and execs the program
            // (no fork), so the child is the program itself.
            Some(node) => node.command(program),
            None => Command::new(program),
        };
        if self.node.is_some() {
            // containerd finds its shim, the kubelet its mount helpers.
            let path = std::env::var("PATH").unwrap_or_default();
            command.env("PATH", format!("{}:{path}", self.bin.display()));
        }
        command
            .args(args)
            // The API server calls webhooks on 127.0.0.1: never through a proxy.
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("no_proxy", "127.0.0.1,localhost")
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| failed(format!("starting {name}"), e))
    }

    fn process(&mut self, name: &str) -> Result<&mut Process, HarnessError> {
        self.children
            .iter_mut()
            .find(|p| p.name == name)
            .ok_or_else(|| failed(format!("finding {name}"), "not started by this harness"))
    }

    /// The process id of the control-plane process `name` (`etcd` or
    /// `kube-apiserver`), for benchmarks that read its CPU time.
    pub fn process_id(&self, name: &str) -> Option<u32> {
        self.children
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.child.id())
    }

    /// SIGKILLs the control-plane process `name` (`etcd` or
    /// `kube-apiserver`) and reaps it.
    fn kill_process(&mut self, name: &str) -> Result<(), HarnessError> {
        let process = self.process(name)?;
        process
            .child
            .kill()
            .map_err(|e| failed(format!("killing {name}"), e))?;
        process
            .child
            .wait()
            .map_err(|e| failed(format!("reaping {name}"), e))?;
        Ok(())
    }

    /// Starts `name` again with the program and arguments of its first
    /// start (same ports, same data and certificate directories), then
    /// waits until the API server is ready.
    fn restart_process(&mut self, name: &str, limit: Duration) -> Result<(), HarnessError> {
        let (program, args) = {
            let process = self.process(name)?;
            (process.program.clone(), process.args.clone())
        };
        if self
            .process(name)?
            .child
            .try_wait()
            .ok()
            .flatten()
            .is_none()
        {
            return Err(failed(format!("restarting {name}"), "it is still running"));
        }
        let child = self.launch(name, &program, &args, true)?;
        self.process(name)?.child = child;
        self.wait_ready(limit)
    }

    /// SIGKILLs kube-apiserver (etcd keeps running).
    pub fn kill_apiserver(&mut self) -> Result<(), HarnessError> {
        self.kill_process("kube-apiserver")
    }

    /// Starts kube-apiserver again, same ports and arguments, and waits
    /// until it is ready (at most `limit`).
    pub fn restart_apiserver(&mut self, limit: Duration) -> Result<(), HarnessError> {
        self.restart_process("kube-apiserver", limit)
    }

    /// SIGKILLs etcd (kube-apiserver keeps running, and stops being ready).
    pub fn kill_etcd(&mut self) -> Result<(), HarnessError> {
        self.kill_process("etcd")
    }

    /// Starts etcd again on its data directory and ports, and waits until
    /// the API server is ready again (at most `limit`).
    pub fn restart_etcd(&mut self, limit: Duration) -> Result<(), HarnessError> {
        self.restart_process("etcd", limit)
    }

    fn boot(&mut self) -> Result<(), HarnessError> {
        let base = self.dir.clone();
        let d = |p: &str| base.join(p).display().to_string();
        let (etcd_client, etcd_peer, secure) = (free_port()?, free_port()?, free_port()?);
        // Service-account signing key (ECDSA P-256, PEM).
        self.run_tool(
            "openssl",
            &[
                "ecparam",
                "-name",
                "prime256v1",
                "-genkey",
                "-noout",
                "-out",
                &d("sa.key"),
            ],
        )?;
        self.run_tool(
            "openssl",
            &["ec", "-in", &d("sa.key"), "-pubout", "-out", &d("sa.pub")],
        )?;
        let token = format!("e2e-{}-{secure}", std::process::id());
        let mut tokens = format!("{token},e2e-admin,e2e-admin,\"system:masters\"\n");
        for (i, (user, groups)) in TOKEN_USERS.iter().enumerate() {
            tokens.push_str(&format!("{token}-{i},{user},{user},\"{groups}\"\n"));
        }
        std::fs::write(self.dir.join("tokens.csv"), tokens)
            .map_err(|e| failed("writing the token file", e))?;
        self.token = token.clone();

        let etcd_url = format!("http://127.0.0.1:{etcd_client}");
        self.spawn(
            "etcd",
            &[
                "--name=e2e".into(),
                format!("--data-dir={}", d("etcd")),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"),
                format!("--initial-cluster=e2e=http://127.0.0.1:{etcd_peer}"),
                "--unsafe-no-fsync=true".into(),
            ],
        )?;
        self.spawn(
            "kube-apiserver",
            &[
                format!("--etcd-servers={etcd_url}"),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                format!("--secure-port={secure}"),
                format!("--cert-dir={}", d("certs")),
                "--authorization-mode=RBAC".into(),
                format!("--token-auth-file={}", d("tokens.csv")),
                format!("--service-account-key-file={}", d("sa.pub")),
                format!("--service-account-signing-key-file={}", d("sa.key")),
                "--service-account-issuer=https://kubernetes.default.svc".into(),
                "--service-cluster-ip-range=10.0.0.0/24".into(),
                "--allow-privileged=true".into(),
                "--disable-admission-plugins=ServiceAccount".into(),
                // No controller-manager runs here; skip the endpoints of the
                // `kubernetes` service (else an error every few seconds).
                "--endpoint-reconciler-type=none".into(),
            ],
        )?;
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: https://127.0.0.1:{secure}\n    certificate-authority: {}\nusers:\n- name: e2e-admin\n  user:\n    token: {token}\ncontexts:\n- name: e2e\n  context: {{cluster: e2e, user: e2e-admin}}\ncurrent-context: e2e\n",
            d("certs/apiserver.crt")
        );
        std::fs::write(&self.kubeconfig, kubeconfig)
            .map_err(|e| failed("writing the kubeconfig", e))?;
        self.wait_ready(Duration::from_secs(90))
    }

    /// Waits until the API server answers `/readyz` (at most `limit`); an
    /// error, with the logs, when a control-plane process has exited.
    pub fn wait_ready(&mut self, limit: Duration) -> Result<(), HarnessError> {
        let started = Instant::now();
        while started.elapsed() < limit {
            for process in &mut self.children {
                if let Ok(Some(status)) = process.child.try_wait() {
                    return Err(HarnessError::NotReady(
                        started.elapsed(),
                        format!(
                            "a control-plane process exited with {status}; {}",
                            self.logs()
                        ),
                    ));
                }
            }
            // The CA the kubeconfig names: the API server's self-signed
            // certificate, or the node's PKI.
            let ca = match self.node {
                Some(_) => self.dir.join("pki/ca.crt"),
                None => self.dir.join("certs/apiserver.crt"),
            };
            if ca.exists()
                && self
                    .kubectl(&["get", "--raw", "/readyz"])
                    .is_ok_and(|o| o.status.success())
            {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Err(HarnessError::NotReady(limit, self.logs()))
    }

    /// The last lines of the etcd and kube-apiserver logs (for failure
    /// messages).
    pub fn logs(&self) -> String {
        let tail = |name: &str| {
            let text =
                std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(15)..].join("\n")
        };
        format!(
            "--- etcd\n{}\n--- kube-apiserver\n{}",
            tail("etcd"),
            tail("kube-apiserver")
        )
    }

    /// Leaves the processes running and the files in place (for `make
    /// demo`); returns their pids.
    /// With a node, its state is written next to the kubeconfig for
    /// [`node::tear_down_detached`], and the namespace holder's pid is last.
    pub fn detach(self) -> Vec<u32> {
        let this = std::mem::ManuallyDrop::new(self);
        let mut pids: Vec<u32> = this.children.iter().map(|p| p.child.id()).collect();
        if let Some(node) = &this.node {
            node.write_state();
            pids.push(node.holder_pid());
        }
        pids
    }

    /// The directory holding the kubeconfig, logs and etcd data.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The bearer token of `user` (the admin, or one of [`TOKEN_USERS`]).
    pub fn token(&self, user: &str) -> Option<String> {
        if user == "e2e-admin" {
            return Some(self.token.clone());
        }
        TOKEN_USERS
            .iter()
            .position(|(name, _)| *name == user)
            .map(|i| format!("{}-{i}", self.token))
    }

    /// The kubeconfig of the admin identity.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Runs the real kubectl against this control plane.
    pub fn kubectl(&self, args: &[&str]) -> Result<Output, HarnessError> {
        Command::new(self.bin.join("kubectl"))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .current_dir(repo_root())
            .output()
            .map_err(|e| failed("running kubectl", e))
    }

    /// kubectl and the kubeconfig, for a helper thread (the pod runner's
    /// volume sync).
    pub fn kubectl_handle(&self) -> pod_runner::Kubectl {
        pod_runner::Kubectl {
            binary: self.bin.join("kubectl"),
            kubeconfig: self.kubeconfig.clone(),
        }
    }

    /// Runs kubectl and returns its stdout; a non-zero exit is an error
    /// carrying the command and its stderr.
    pub fn run(&self, args: &[&str]) -> Result<String, HarnessError> {
        Self::checked(args.join(" "), self.kubectl(args)?)
    }

    /// Like [`ControlPlane::run`], with `stdin` as kubectl's input.
    pub fn run_stdin(&self, args: &[&str], stdin: &str) -> Result<String, HarnessError> {
        Self::checked(args.join(" "), self.kubectl_stdin(args, stdin)?)
    }

    /// `kubectl apply -f -` with `yaml`; a refusal is an error.
    pub fn apply_yaml(&self, yaml: &str) -> Result<String, HarnessError> {
        self.run_stdin(&["apply", "-f", "-"], yaml)
    }

    fn checked(what: String, output: Output) -> Result<String, HarnessError> {
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(failed(
                format!("kubectl {what}"),
                String::from_utf8_lossy(&output.stderr),
            ))
        }
    }

    /// Runs kubectl with `stdin` as input.
    pub fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> Result<Output, HarnessError> {
        use std::io::Write;
        let mut child = Command::new(self.bin.join("kubectl"))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .current_dir(repo_root())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| failed("running kubectl", e))?;
        if let Some(mut input) = child.stdin.take() {
            input
                .write_all(stdin.as_bytes())
                .map_err(|e| failed("writing to kubectl", e))?;
        }
        child
            .wait_with_output()
            .map_err(|e| failed("running kubectl", e))
    }
}

/// The `agentgate` binary of this build (target/<profile>/agentgate; `make
/// test` and `make demo` build it).
pub fn operator_binary() -> Result<PathBuf, HarnessError> {
    built_binary("agentgate")
}

/// The `agentgate-proxy` binary of this build.
pub fn proxy_binary() -> Result<PathBuf, HarnessError> {
    built_binary("agentgate-proxy")
}

/// The `kubectl-agentgate` plugin binary of this build.
pub fn plugin_binary() -> Result<PathBuf, HarnessError> {
    built_binary("kubectl-agentgate")
}

/// helm, built once from its Go module by hack/install-helm.sh (cached
/// outside the repository; never skipped: failing to get it is an error).
pub fn helm_binary() -> Result<PathBuf, HarnessError> {
    installed_path("hack/install-helm.sh")
}

fn built_binary(name: &str) -> Result<PathBuf, HarnessError> {
    let exe = std::env::current_exe().map_err(|e| failed("locating the test binary", e))?;
    // Tests run from target/<profile>/deps/, programs from target/<profile>/.
    let dir = exe
        .parent()
        .ok_or_else(|| failed("locating the agentgate binary", "no target directory"))?;
    let bin = [dir.join(name), dir.join("..").join(name)]
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| dir.join(name));
    if bin.exists() {
        Ok(bin)
    } else {
        Err(failed(
            format!("locating the {name} binary"),
            format!(
                "{} is missing: run `cargo build -p agentgate --bins` first (make test does)",
                bin.display()
            ),
        ))
    }
}

/// The operator running as a separate process; stopped on drop.
pub struct Operator {
    child: Child,
    log: PathBuf,
}

impl Operator {
    /// The operator's log so far (for assertion messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `GET /metrics` from the operator's metrics port (read from its log).
    pub fn metrics(&self) -> Result<String, HarnessError> {
        use std::io::{Read, Write};
        let log = self.log();
        let address = log
            .lines()
            .filter(|l| l.contains("metrics listening"))
            .find_map(|l| l.split("address=").nth(1))
            .map(|a| a.split_whitespace().next().unwrap_or_default().to_string())
            .ok_or_else(|| failed("finding the metrics address", "not in the operator log yet"))?;
        let mut stream = std::net::TcpStream::connect(&address)
            .map_err(|e| failed(format!("connecting to {address}"), e))?;
        stream
            .write_all(
                format!("GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .map_err(|e| failed("requesting /metrics", e))?;
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .map_err(|e| failed("reading /metrics", e))?;
        Ok(response)
    }
}

impl Operator {
    /// Leaves the operator running (for `make demo`); returns its pid and log.
    pub fn detach(self) -> (u32, PathBuf) {
        let this = std::mem::ManuallyDrop::new(self);
        (this.child.id(), this.log.clone())
    }
}

impl Operator {
    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (a name `kill` knows: STOP, CONT, TERM, ...).
    pub fn signal(&self, signal: &str) -> Result<(), HarnessError> {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .map_err(|e| failed(format!("kill -{signal}"), e))?;
        if status.success() {
            Ok(())
        } else {
            Err(failed(format!("kill -{signal}"), status))
        }
    }

    /// Pauses the process (SIGSTOP): it neither runs nor renews its Lease.
    pub fn pause(&self) -> Result<(), HarnessError> {
        self.signal("STOP")
    }

    /// Resumes a paused process (SIGCONT).
    pub fn resume(&self) -> Result<(), HarnessError> {
        self.signal("CONT")
    }

    /// Its exit status if it has exited, else `None` (never blocks).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits up to `limit` for the process to exit; its status, or `None`
    /// when it is still running.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            if started.elapsed() >= limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ControlPlane {
    /// Installs the CRDs from crds/agentgate.yaml and waits until they are
    /// established (server-side apply: the AgentSandbox CRD embeds a pod
    /// template and is larger than client-side apply's annotation allows).
    pub fn install_crds(&self) -> Result<(), HarnessError> {
        self.run(&[
            "apply",
            "--server-side",
            "--field-manager=agentgate",
            "-f",
            "crds/agentgate.yaml",
        ])?;
        self.wait_crds_established()
    }

    /// Waits until the four agentgate CRDs are established.
    fn wait_crds_established(&self) -> Result<(), HarnessError> {
        let started = Instant::now();
        loop {
            let waited = self.run(&[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/maximumpolicies.agentgate.dev",
                "crd/agentsandboxes.agentgate.dev",
                "crd/policyproposals.agentgate.dev",
                "crd/agentscans.agentgate.dev",
            ]);
            match waited {
                // kubectl wait gives up at once when it reads a CRD before
                // the API server has written any condition (a loaded
                // machine): that is "not yet", so wait again.
                Err(e)
                    if e.to_string().contains("accessor error")
                        && started.elapsed() < Duration::from_secs(60) =>
                {
                    std::thread::sleep(Duration::from_millis(200));
                }
                other => return other.map(|_| ()),
            }
        }
    }

    /// Starts `agentgate controller` against this control plane.
    pub fn start_operator(&self) -> Result<Operator, HarnessError> {
        self.start_operator_with(&[])
    }

    /// Starts `agentgate controller` with extra arguments.
    pub fn start_operator_with(&self, extra: &[&str]) -> Result<Operator, HarnessError> {
        let metrics = metrics_address()?;
        let mut args = vec!["controller", "--metrics-bind-address", &metrics];
        args.extend_from_slice(extra);
        self.start_agentgate(&self.kubeconfig, &args)
    }

    /// A kubeconfig for `user` (one of [`TOKEN_USERS`]): the admin's with
    /// that user's token, written next to it.
    pub fn kubeconfig_of(&self, user: &str) -> Result<PathBuf, HarnessError> {
        let token = self
            .token(user)
            .ok_or_else(|| failed("a kubeconfig", format!("{user} has no token")))?;
        let admin = std::fs::read_to_string(&self.kubeconfig)
            .map_err(|e| failed("reading the kubeconfig", e))?;
        let path = self
            .dir
            .join(format!("kubeconfig-{}", user.replace(':', "_")));
        std::fs::write(&path, admin.replace(&self.token, &token))
            .map_err(|e| failed("writing a kubeconfig", e))?;
        Ok(path)
    }

    /// Runs `agentgate ARGS` against this control plane with `kubeconfig`,
    /// logging to a file of its own.
    pub fn start_agentgate(
        &self,
        kubeconfig: &Path,
        args: &[&str],
    ) -> Result<Operator, HarnessError> {
        let log = self.dir.join(format!("operator-{}.log", free_port()?));
        let out =
            std::fs::File::create(&log).map_err(|e| failed("creating the operator log", e))?;
        let err = out
            .try_clone()
            .map_err(|e| failed("creating the operator log", e))?;
        let child = Command::new(operator_binary()?)
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env(
                "AGENTGATE_LOG",
                std::env::var("AGENTGATE_E2E_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| failed(format!("starting agentgate {}", args.join(" ")), e))?;
        Ok(Operator { child, log })
    }

    /// Runs helm against this control plane; returns stdout, or an error
    /// with stderr.
    pub fn helm(&self, args: &[&str]) -> Result<String, HarnessError> {
        let output = Command::new(helm_binary()?)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HELM_CACHE_HOME", self.dir.join("helm/cache"))
            .env("HELM_CONFIG_HOME", self.dir.join("helm/config"))
            .env("HELM_DATA_HOME", self.dir.join("helm/data"))
            .current_dir(repo_root())
            .output()
            .map_err(|e| failed("running helm", e))?;
        Self::checked(format!("(helm) {}", args.join(" ")), output)
    }

    /// `helm install agentgate charts/agentgate` into `agentgate-system`,
    /// with the webhook registered at `https://127.0.0.1:<webhook_port>`
    /// (the operator runs as a local process, so the chart's Deployment is
    /// scaled to 0), plus `extra` `--set` values; waits for the CRDs.
    pub fn install_chart(&self, webhook_port: u16, extra: &[&str]) -> Result<(), HarnessError> {
        self.run(&["create", "namespace", CHART_NAMESPACE])?;
        let url = format!("webhook.url=https://127.0.0.1:{webhook_port}");
        let mut args = vec![
            "install",
            "agentgate",
            "charts/agentgate",
            "--namespace",
            CHART_NAMESPACE,
            "--set",
            &url,
            "--set",
            "replicaCount=0",
        ];
        for value in extra {
            args.extend(["--set", value]);
        }
        self.helm(&args)?;
        self.wait_crds_established()
    }

    /// Starts `agentgate controller` serving the webhook of a chart
    /// installed with [`ControlPlane::install_chart`] on `port`, with
    /// self-managed certificates for 127.0.0.1, plus `extra` arguments. It
    /// runs as the chart's ServiceAccount ([`OPERATOR_USER`]), so it holds
    /// exactly the permissions the chart grants.
    pub fn start_webhook_operator(
        &self,
        port: u16,
        extra: &[&str],
    ) -> Result<Operator, HarnessError> {
        let webhook = self.webhook_args(port);
        let mut args: Vec<&str> = webhook.iter().map(String::as_str).collect();
        args.extend_from_slice(extra);
        self.start_chart_controller(&args)
    }

    /// Starts `agentgate controller` alone (no webhook) for a chart
    /// installed with [`ControlPlane::install_chart`], as the chart's
    /// ServiceAccount, its Lease in the release namespace, plus `extra`.
    pub fn start_chart_controller(&self, extra: &[&str]) -> Result<Operator, HarnessError> {
        let metrics = metrics_address()?;
        let mut args = vec![
            "controller",
            "--metrics-bind-address",
            &metrics,
            "--lease-namespace",
            CHART_NAMESPACE,
        ];
        args.extend_from_slice(extra);
        self.start_agentgate(&self.kubeconfig_of(OPERATOR_USER)?, &args)
    }

    /// The arguments that serve the chart's webhook on `port` (as
    /// [`ControlPlane::start_webhook_operator`] passes them), for
    /// `agentgate controller` or `agentgate webhook`.
    pub fn webhook_args(&self, port: u16) -> Vec<String> {
        let mut args = vec![
            "--webhook-bind-address".to_string(),
            format!("127.0.0.1:{port}"),
        ];
        args.extend(WEBHOOK_FLAGS.iter().map(|f| f.to_string()));
        args
    }

    /// Starts `agentgate webhook` (the webhook alone, no reconcilers) on
    /// `port` for a chart installed with [`ControlPlane::install_chart`],
    /// with the flags of [`ControlPlane::start_webhook_operator`].
    /// Like the operator, it runs as the chart's ServiceAccount.
    pub fn start_webhook(&self, port: u16, extra: &[&str]) -> Result<Operator, HarnessError> {
        let webhook = self.webhook_args(port);
        let metrics = metrics_address()?;
        let mut args = vec!["webhook", "--metrics-bind-address", &metrics];
        args.extend(webhook.iter().map(String::as_str));
        args.extend_from_slice(extra);
        self.start_agentgate(&self.kubeconfig_of(OPERATOR_USER)?, &args)
    }

    /// A control plane with the chart installed, the operator serving the
    /// webhook on a free port, org-ceiling applied and namespace `agents`
    /// (team ml) created: the starting point of the admission scenarios.
    pub fn with_webhook(extra: &[&str]) -> Result<(ControlPlane, Operator, u16), HarnessError> {
        let cp = ControlPlane::start()?;
        let port = free_loopback_port()?;
        cp.install_chart(port, &[])?;
        let operator = cp.start_webhook_operator(port, extra)?;
        if let Err(e) = cp.wait_webhook("examples/maximum.yaml", Duration::from_secs(60)) {
            return Err(failed(
                "waiting for the webhook",
                format!("{e}\noperator log:\n{}", operator.log()),
            ));
        }
        cp.run(&["apply", "-f", "examples/maximum.yaml"])?;
        cp.create_team_namespace()?;
        // The webhook answers from watch caches: wait until they hold the
        // ceiling and the namespace, so the first sandbox is governed.
        cp.wait_webhook("examples/sandbox.yaml", Duration::from_secs(30))?;
        Ok((cp, operator, port))
    }

    /// `POST /v1/decide` over TLS on `port` as the admin, verifying the
    /// server against the published CA; returns the JSON answer.
    pub fn decide(&self, port: u16, body: &str) -> Result<serde_json::Value, HarnessError> {
        match self.decide_as(port, body, Some(&self.token))? {
            (200, answer) => Ok(answer),
            (status, answer) => Err(failed(
                "POST /v1/decide",
                format!("HTTP {status}: {answer}"),
            )),
        }
    }

    /// `POST /v1/decide` with `token` as the bearer token (none: no
    /// Authorization header); returns the HTTP status and the JSON body.
    pub fn decide_as(
        &self,
        port: u16,
        body: &str,
        token: Option<&str>,
    ) -> Result<(u16, serde_json::Value), HarnessError> {
        let mut curl = Command::new("curl");
        curl.args(["-sS", "--noproxy", "*", "--cacert"])
            .arg(self.webhook_ca()?)
            .args(["-H", "content-type: application/json", "--data", body])
            .args(["-w", "\n%{http_code}"]);
        if let Some(token) = token {
            curl.args(["-H", &format!("authorization: Bearer {token}")]);
        }
        let output = curl
            .arg(format!("https://127.0.0.1:{port}/v1/decide"))
            .output()
            .map_err(|e| failed("running curl", e))?;
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let (json, status) = text.rsplit_once('\n').unwrap_or(("", text.as_str()));
        if !output.status.success() {
            return Err(failed(
                "POST /v1/decide",
                String::from_utf8_lossy(&output.stderr),
            ));
        }
        let status = status
            .trim()
            .parse()
            .map_err(|e| failed(format!("reading the HTTP status {status:?}"), e))?;
        let answer = serde_json::from_str(json)
            .map_err(|e| failed(format!("reading the decide answer {json:?}"), e))?;
        Ok((status, answer))
    }

    /// `agentgate scan examples/agent --image AGENT_IMAGE -o yaml | kubectl
    /// apply -f -`: what CI does for the example agent.
    pub fn apply_example_scan(&self) -> Result<String, HarnessError> {
        self.run_stdin(&["apply", "-f", "-"], &scan_example("yaml")?)
    }

    /// Waits until the operators' Lease `default/agentgate-leader` is held
    /// by `want`; returns the last holder seen on timeout.
    pub fn wait_lease_holder(&self, want: &str, limit: Duration) -> Result<String, String> {
        let want = want.to_string();
        self.wait_object(
            wait::Kind::LEASE,
            "default",
            "agentgate-leader",
            limit,
            |lease| wait::at(lease, &["spec", "holderIdentity"]),
            move |holder| holder == want,
        )
    }

    /// Waits through the watch until `field` of the object `namespace/name`
    /// of `kind` (cluster-scoped: `namespace` empty) satisfies `done`;
    /// returns it, or the last value seen ([`wait::Waiter::until`]).
    pub fn wait_object(
        &self,
        kind: wait::Kind,
        namespace: &str,
        name: &str,
        limit: Duration,
        field: impl Fn(&serde_json::Value) -> String + Send + Sync + 'static,
        done: impl Fn(&str) -> bool + Send + Sync + 'static,
    ) -> Result<String, String> {
        self.waiter()?
            .until(kind, namespace, name, limit, field, done)
    }

    /// Waits through the watch until the objects of `kind` in `namespace`
    /// (all, or cluster-scoped: empty) that the field selector `fields`
    /// selects (empty: all), read as one list by `read`, satisfy `done`;
    /// returns the reading, or the last one ([`wait::Waiter::until_listed`]).
    pub fn wait_listed(
        &self,
        kind: wait::Kind,
        namespace: &str,
        fields: &str,
        limit: Duration,
        read: impl Fn(&[&serde_json::Value]) -> String,
        done: impl Fn(&str) -> bool,
    ) -> Result<String, String> {
        self.waiter()?
            .until_listed(kind, namespace, fields, limit, read, done)
    }

    /// Every state the watch shows of the object `namespace/name` of
    /// `kind`, to `seen` with its session ([`wait::Waiter::record`]).
    pub fn record_object(
        &self,
        kind: wait::Kind,
        namespace: &str,
        name: &str,
        seen: impl FnMut(u32, &serde_json::Value) + Send + 'static,
        broke: impl FnMut(u32, &str) + Send + 'static,
    ) -> Result<wait::Recording, String> {
        Ok(self.waiter()?.record(kind, namespace, name, seen, broke))
    }

    /// The client the typed waits watch through (made once).
    fn waiter(&self) -> Result<&wait::Waiter, String> {
        if let Some(waiter) = self.waiter.get() {
            return Ok(waiter);
        }
        let waiter = wait::Waiter::new(&self.kubeconfig).map_err(|e| e.to_string())?;
        // A wait on another thread may have made one meanwhile: either serves.
        let _ = self.waiter.set(waiter);
        self.waiter
            .get()
            .ok_or_else(|| "no client for waits".to_string())
    }

    /// Waits through the watch until the kubectl jsonpath `template`
    /// ([`wait::template`]) of what `watched` names satisfies `done`; a
    /// list is read as kubectl prints one (`{.items[*].message}`). Returns
    /// the reading, or the last one; a template the typed waits cannot read
    /// is an error, never read some other way.
    pub fn wait_template(
        &self,
        watched: Watched<'_>,
        template: &str,
        limit: Duration,
        done: impl Fn(&str) -> bool + Send + Sync + 'static,
    ) -> Result<String, String> {
        if wait::template(&serde_json::Value::Null, template).is_none() {
            return Err(format!(
                "{template:?} is not a jsonpath template the typed waits read"
            ));
        }
        let template = template.to_string();
        match watched {
            Watched::Object(kind, namespace, name) => self.wait_object(
                kind,
                namespace,
                name,
                limit,
                move |object| wait::template(object, &template).unwrap_or_default(),
                done,
            ),
            Watched::List(kind, namespace, fields) => self.wait_listed(
                kind,
                namespace,
                fields,
                limit,
                |items| {
                    let list = serde_json::json!({ "items": items.to_vec() });
                    wait::template(&list, &template).unwrap_or_default()
                },
                done,
            ),
        }
    }

    /// [`ControlPlane::wait_template`] that panics on timeout with `what`,
    /// the last reading and the operator's log: the failure message every
    /// e2e test wants.
    #[allow(clippy::panic)]
    pub fn wait_logged(
        &self,
        operator: &Operator,
        watched: Watched<'_>,
        template: &str,
        limit: Duration,
        done: impl Fn(&str) -> bool + Send + Sync + 'static,
        what: &str,
    ) -> String {
        self.wait_template(watched, template, limit, done)
            .unwrap_or_else(|last| {
                panic!(
                    "{what}: last saw {last:?}\noperator log:\n{}",
                    operator.log()
                )
            })
    }

    /// Waits until the pod `namespace/name` exists (the local control plane
    /// has no nodes, so it stays Pending: existing is what admission
    /// decides).
    pub fn wait_pod(&self, namespace: &str, name: &str, limit: Duration) -> Result<String, String> {
        let want = name.to_string();
        self.wait_object(
            wait::Kind::POD,
            namespace,
            name,
            limit,
            |pod| wait::at(pod, &["metadata", "name"]),
            move |n| n == want,
        )
    }

    /// Creates namespace `name` labelled `agentgate.dev/enforce=MODE`
    /// (enforce, warn or audit), where the pod webhook judges every pod.
    pub fn create_enforced_namespace(&self, name: &str, mode: &str) -> Result<(), HarnessError> {
        self.run_stdin(
            &["apply", "-f", "-"],
            &format!(
                "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}, labels: {{agentgate.dev/enforce: {mode}}}}}\n"
            ),
        )?;
        Ok(())
    }

    /// Waits until the proposal `namespace/name` reaches `phase`; returns
    /// the last phase seen on failure.
    pub fn wait_proposal_phase(
        &self,
        namespace: &str,
        name: &str,
        phase: &str,
        limit: Duration,
    ) -> Result<String, String> {
        let phase = phase.to_string();
        self.wait_object(
            wait::Kind::PROPOSAL,
            namespace,
            name,
            limit,
            |proposal| wait::at(proposal, &["status", "phase"]),
            move |p| p == phase,
        )
    }

    /// Waits until the sandbox's `FindingsClear` condition is `want`
    /// (`True`/`False`/`Unknown`); returns the last status seen on failure.
    pub fn wait_findings_clear(
        &self,
        namespace: &str,
        sandbox: &str,
        want: &str,
        limit: Duration,
    ) -> Result<String, String> {
        let want = want.to_string();
        self.wait_object(
            wait::Kind::SANDBOX,
            namespace,
            sandbox,
            limit,
            |sandbox| wait::condition_status(sandbox, "FindingsClear"),
            move |s| s == want,
        )
    }

    /// Writes the CA of the self-managed webhook certificate (from the
    /// Secret in the chart's namespace) to a file and returns its path.
    pub fn webhook_ca(&self) -> Result<PathBuf, HarnessError> {
        use base64::Engine as _;
        let b64 = self.run(&[
            "get",
            "secret",
            "agentgate-webhook-tls",
            "-n",
            CHART_NAMESPACE,
            "-o",
            "jsonpath={.data.ca\\.crt}",
        ])?;
        let pem = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|e| failed("decoding the webhook CA", e))?;
        let path = self.dir.join("webhook-ca.crt");
        std::fs::write(&path, pem).map_err(|e| failed("writing the webhook CA", e))?;
        Ok(path)
    }

    /// Waits until the API server admits a server-side dry run of
    /// `probe` (a manifest the webhook accepts): the webhook is serving
    /// and its CA is published.
    pub fn wait_webhook(&self, probe: &str, limit: Duration) -> Result<(), HarnessError> {
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < limit {
            let output = self.kubectl(&["apply", "--dry-run=server", "-f", probe])?;
            if output.status.success() {
                return Ok(());
            }
            last = String::from_utf8_lossy(&output.stderr).into_owned();
            std::thread::sleep(Duration::from_millis(250));
        }
        Err(failed("waiting for the webhook", last))
    }

    /// Waits until the sandbox `namespace/name` has committed a revision
    /// that `done` accepts; returns it, or the last value seen.
    pub fn wait_revision(
        &self,
        namespace: &str,
        name: &str,
        limit: Duration,
        done: impl Fn(u64) -> bool + Send + Sync + 'static,
    ) -> Result<u64, String> {
        self.wait_object(
            wait::Kind::SANDBOX,
            namespace,
            name,
            limit,
            |sandbox| wait::at(sandbox, &["status", "revision"]),
            move |r| r.trim().parse().is_ok_and(&done),
        )
        .and_then(|r| r.trim().parse().map_err(|_| r))
    }

    /// Creates namespace `agents` labelled `team=ml` (org-ceiling's
    /// selector) in one write: no namespace webhook is asked (a create is
    /// not a label change), and no cache ever holds it unlabelled.
    pub fn create_team_namespace(&self) -> Result<(), HarnessError> {
        self.run_stdin(
            &["apply", "-f", "-"],
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: agents, labels: {team: ml}}\n",
        )?;
        Ok(())
    }

    /// A Role `name` in namespace `agents` with `verbs` on `resources`
    /// (kubectl's comma lists), bound to `subject` (`--user=NAME` or
    /// `--serviceaccount=NS:NAME`): the RBAC a test's actor holds.
    pub fn grant(
        &self,
        name: &str,
        subject: &str,
        verbs: &str,
        resources: &str,
    ) -> Result<(), HarnessError> {
        self.run(&[
            "create",
            "role",
            name,
            "-n",
            "agents",
            &format!("--verb={verbs}"),
            &format!("--resource={resources}"),
        ])?;
        self.run(&[
            "create",
            "rolebinding",
            name,
            "-n",
            "agents",
            &format!("--role={name}"),
            subject,
        ])?;
        Ok(())
    }

    /// A ClusterRole `name` with `verbs` on `resources`, bound cluster-wide
    /// to `subject` (as in [`ControlPlane::grant`]).
    pub fn grant_cluster(
        &self,
        name: &str,
        subject: &str,
        verbs: &str,
        resources: &str,
    ) -> Result<(), HarnessError> {
        self.run(&[
            "create",
            "clusterrole",
            name,
            &format!("--verb={verbs}"),
            &format!("--resource={resources}"),
        ])?;
        self.run(&[
            "create",
            "clusterrolebinding",
            name,
            &format!("--clusterrole={name}"),
            subject,
        ])?;
        Ok(())
    }

    /// Runs `kubectl-agentgate ARGS` against this control plane.
    pub fn plugin(&self, args: &[&str]) -> Result<Output, HarnessError> {
        Command::new(plugin_binary()?)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .output()
            .map_err(|e| failed("running kubectl-agentgate", e))
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // The node's workloads and processes first (nothing may restart a
        // container while the rest goes down).
        let node = self.stop_node();
        // API server first, then etcd.
        for process in self.children.iter_mut().rev() {
            let _ = process.child.kill();
            let _ = process.child.wait();
        }
        drop(node);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What a typed wait watches ([`ControlPlane::wait_template`]).
#[derive(Debug, Clone, Copy)]
pub enum Watched<'a> {
    /// The object of a kind in a namespace (cluster-scoped: empty), by
    /// name.
    Object(wait::Kind, &'a str, &'a str),
    /// The objects of a kind in a namespace (every namespace, or
    /// cluster-scoped: empty) that a field selector selects (empty: all).
    List(wait::Kind, &'a str, &'a str),
}

/// The image examples/agent/sandbox.yaml runs (the digest is illustrative:
/// the local control plane has no nodes, nothing is pulled).
pub const AGENT_IMAGE: &str = "ghcr.io/acme/triage-bot@sha256:4f1c9a7e2b6d8053c1e4a9f7b2d6c8e0a3f5b7d9c1e3a5f7b9d1c3e5a7f9b1d3";

/// `agentgate scan examples/agent --image AGENT_IMAGE -o OUTPUT`; stdout.
pub fn scan_example(output: &str) -> Result<String, HarnessError> {
    scan_example_as(AGENT_IMAGE, output)
}

/// `agentgate scan examples/agent --image IMAGE -o OUTPUT`; stdout (the
/// real node's agent image has a digest of its own).
pub fn scan_example_as(image: &str, output: &str) -> Result<String, HarnessError> {
    let out = Command::new(operator_binary()?)
        .args(["scan", "examples/agent", "--image", image, "-o", output])
        .current_dir(repo_root())
        .output()
        .map_err(|e| failed("running agentgate scan", e))?;
    if !out.status.success() {
        return Err(failed(
            "agentgate scan",
            String::from_utf8_lossy(&out.stderr),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Asserts that a kubectl command was refused and that its stderr says
/// `expected`.
#[allow(clippy::panic)]
pub fn assert_refused(out: Output, expected: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "admitted, expected a refusal saying {expected:?}"
    );
    assert!(
        stderr.contains(expected),
        "{expected:?} missing in:\n{stderr}"
    );
}
