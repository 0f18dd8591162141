//! The pod runner: runs a Pod **as the API server stored it** without a
//! kubelet or a container runtime, so the sandbox's enforcement (nftables
//! redirect, proxy sidecar, `agentgate-exec`) is proved on the real Pod
//! the operator created.
//!
//! What it does, as a kubelet would:
//! - one network namespace for the pod (`unshare --net`), with loopback and
//!   the addresses the test asks for, and `/etc/resolv.conf` naming the
//!   test's DNS server;
//! - volumes materialised in a temporary directory: `emptyDir` as a
//!   directory, `configMap` and `secret` in the kubelet's atomic layout
//!   (`..data` → `..<version>/`, each key a symlink through `..data`),
//!   kept in sync with the API server every 200 ms by swapping `..data`;
//! - each container in its own mount namespace (`unshare --mount`), its
//!   volumes bind-mounted at their `mountPath`, the image's paths mapped to
//!   local files (the test names them), under the container's uid and gid,
//!   with the capabilities its `securityContext` grants (setpriv) and
//!   `no_new_privs` when `allowPrivilegeEscalation` is false;
//! - Kubernetes order: init containers one by one (each must exit 0),
//!   native sidecars (`restartPolicy: Always`) started and held until their
//!   startup probe's HTTP GET answers 200, then the regular containers.
//!
//! The runner mounts a tmpfs over `/agentgate` inside each container's
//! mount namespace, so it creates that (empty) directory on the host once,
//! and so the ServiceAccount token's directory, which the data plane's
//! containers cover with an empty volume.
//! Anything it does not model (a `valueFrom` variable, an exec probe, a
//! volume type other than the three above) is an error, never ignored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::Value;

use crate::world::{DNS_IP, SDK_BANK_HOST, SDK_BANK_PORT, UPSTREAM_IP};
use crate::{HarnessError, failed};

/// A network namespace held open by a sleeping process, with helper
/// processes (upstreams, DNS) running inside it as root.
pub struct Netns {
    holder: Child,
    helpers: Vec<Child>,
    dir: PathBuf,
}

impl Netns {
    /// A new namespace with loopback up and `addresses` (IPv4, /24) on a
    /// dummy (or, without the module, bridge) interface.
    pub fn new(dir: &Path, addresses: &[&str]) -> Result<Netns, HarnessError> {
        for tool in ["unshare", "nsenter", "setpriv", "ip", "nft", "mount"] {
            let found = Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .map_err(|e| failed("looking for tools", e))?;
            if !found.status.success() {
                return Err(failed(
                    format!("the pod runner needs {tool}"),
                    "install it (make netns-tools)",
                ));
            }
        }
        std::fs::create_dir_all(dir).map_err(|e| failed("creating the runner directory", e))?;
        let holder = Command::new("unshare")
            .args(["--net", "--", "sleep", "infinity"])
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| failed("unshare --net", e))?;
        let netns = Netns {
            holder,
            helpers: Vec::new(),
            dir: dir.to_path_buf(),
        };
        // The namespace exists once the holder has unshared.
        let own = std::fs::read_link("/proc/self/ns/net").ok();
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::read_link(netns.ns_path()).ok() == own {
            if Instant::now() > deadline {
                return Err(failed("unshare --net", "the namespace never appeared"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut script = String::from(
            "set -e\nip link set lo up\n{ ip link add ag0 type dummy 2>/dev/null || ip link add ag0 type bridge; }\n",
        );
        for address in addresses {
            script.push_str(&format!("ip addr add {address}/24 dev ag0\n"));
        }
        script.push_str("ip link set ag0 up\n");
        let out = netns
            .command("sh")
            .args(["-c", &script])
            .output()
            .map_err(|e| failed("setting up the pod network", e))?;
        if !out.status.success() {
            return Err(failed(
                "setting up the pod network",
                String::from_utf8_lossy(&out.stderr),
            ));
        }
        Ok(netns)
    }

    /// `/proc/<holder>/ns/net`.
    pub fn ns_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/ns/net", self.holder.id()))
    }

    /// A command that runs `program` inside the namespace (as root).
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--net={}", self.ns_path().display()))
            .arg("--")
            .arg(program);
        command
    }

    /// Starts a helper inside the namespace, logging to `<dir>/<name>.log`,
    /// and waits until its log says `ready`.
    pub fn spawn_helper(&mut self, name: &str, args: &[&str]) -> Result<(), HarnessError> {
        self.spawn_helper_until(name, args, "ready")
    }

    /// Like [`Netns::spawn_helper`], waiting until the log holds `marker`
    /// (for servers that announce themselves in their own words).
    pub fn spawn_helper_until(
        &mut self,
        name: &str,
        args: &[&str],
        marker: &str,
    ) -> Result<(), HarnessError> {
        let log_path = self.dir.join(format!("{name}.log"));
        let log = std::fs::File::create(&log_path).map_err(|e| failed("creating a log", e))?;
        let err = log.try_clone().map_err(|e| failed("creating a log", e))?;
        let (program, rest) = args
            .split_first()
            .ok_or_else(|| failed("spawning a helper", "no program"))?;
        let child = self
            .command(program)
            .args(rest)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| failed(format!("starting {name}"), e))?;
        self.helpers.push(child);
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            if text.contains(marker) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(failed(format!("{name} did not start"), text));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for child in &mut self.helpers {
            kill_group(child);
        }
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

use std::os::unix::process::CommandExt;

fn kill_group(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", child.id())])
        .status();
    let _ = child.kill();
    let _ = child.wait();
}

/// How the runner maps an image's paths to local files: for each image
/// reference, `(path in the image, local file or directory)` pairs that are
/// bind-mounted into its containers.
pub type ImageMap = BTreeMap<String, Vec<(String, PathBuf)>>;

/// Where kubectl is, so the volume sync can run on its own thread.
#[derive(Clone)]
pub struct Kubectl {
    /// The kubectl binary.
    pub binary: PathBuf,
    /// The kubeconfig it uses.
    pub kubeconfig: PathBuf,
}

impl Kubectl {
    fn get_json(&self, args: &[&str]) -> Result<Value, HarnessError> {
        let out = Command::new(&self.binary)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .args(["-o", "json"])
            .output()
            .map_err(|e| failed("running kubectl", e))?;
        if !out.status.success() {
            return Err(failed(
                format!("kubectl {}", args.join(" ")),
                String::from_utf8_lossy(&out.stderr),
            ));
        }
        serde_json::from_slice(&out.stdout).map_err(|e| failed("reading kubectl's JSON", e))
    }
}

/// A configMap or secret volume kept in sync with its object.
struct SyncedVolume {
    kind: &'static str,
    name: String,
    dir: PathBuf,
    version: u64,
    last: Option<BTreeMap<String, Vec<u8>>>,
}

impl SyncedVolume {
    fn files(&self, object: &Value) -> BTreeMap<String, Vec<u8>> {
        let mut files = BTreeMap::new();
        if let Some(data) = object["data"].as_object() {
            for (key, value) in data {
                let text = value.as_str().unwrap_or_default();
                let bytes = if self.kind == "secret" {
                    base64::engine::general_purpose::STANDARD
                        .decode(text)
                        .unwrap_or_default()
                } else {
                    text.as_bytes().to_vec()
                };
                files.insert(key.clone(), bytes);
            }
        }
        files
    }

    /// Writes the object's data as the kubelet's atomic writer does:
    /// a new `..<version>` directory, then `..data` swapped by rename.
    fn write(&mut self, files: BTreeMap<String, Vec<u8>>) -> Result<(), HarnessError> {
        let io = |e: std::io::Error| failed(format!("writing volume {}", self.name), e);
        self.version += 1;
        let version = format!("..{}", self.version);
        let staged = self.dir.join(&version);
        std::fs::create_dir_all(&staged).map_err(io)?;
        for (key, bytes) in &files {
            std::fs::write(staged.join(key), bytes).map_err(io)?;
            let link = self.dir.join(key);
            if std::fs::symlink_metadata(&link).is_err() {
                std::os::unix::fs::symlink(format!("..data/{key}"), &link).map_err(io)?;
            }
        }
        let temporary = self.dir.join("..data_tmp");
        let _ = std::fs::remove_file(&temporary);
        std::os::unix::fs::symlink(&version, &temporary).map_err(io)?;
        std::fs::rename(&temporary, self.dir.join("..data")).map_err(io)?;
        if self.version > 1 {
            let _ = std::fs::remove_dir_all(self.dir.join(format!("..{}", self.version - 1)));
        }
        self.last = Some(files);
        Ok(())
    }

    fn sync(&mut self, kubectl: &Kubectl, namespace: &str) -> Result<(), HarnessError> {
        let object = kubectl.get_json(&["get", self.kind, &self.name, "-n", namespace])?;
        let files = self.files(&object);
        if self.last.as_ref() != Some(&files) {
            self.write(files)?;
        }
        Ok(())
    }
}

/// A running container.
struct Running {
    name: String,
    child: Child,
}

/// A Pod run as local processes.
pub struct PodRunner {
    dir: PathBuf,
    running: Vec<Running>,
    stop: Arc<AtomicBool>,
    sync: Option<std::thread::JoinHandle<()>>,
}

fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The capabilities a container's `securityContext` leaves it: none are
/// inherited from the runner (root) except those it adds.
fn capability_flags(context: &Value) -> Vec<String> {
    let added: Vec<String> = strings(&context["capabilities"]["add"])
        .iter()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    let list = |prefix: &str| {
        let mut all = vec!["-all".to_string()];
        all.extend(added.iter().cloned());
        format!("{prefix}={}", all.join(","))
    };
    let mut flags = vec![list("--inh-caps"), list("--bounding-set")];
    if !added.is_empty() {
        flags.push(list("--ambient-caps"));
    }
    flags
}

impl PodRunner {
    /// Fetches the Pod `namespace/name` from the API server and runs it in
    /// `netns`. `images` maps image paths to local files; `resolv_conf` is
    /// the pod's `/etc/resolv.conf`.
    pub fn start(
        kubectl: &Kubectl,
        netns: &Netns,
        namespace: &str,
        name: &str,
        images: &ImageMap,
        resolv_conf: &str,
    ) -> Result<PodRunner, HarnessError> {
        let pod = kubectl.get_json(&["get", "pod", name, "-n", namespace])?;
        let dir = netns.dir.join(format!("pod-{name}"));
        let _ = std::fs::remove_dir_all(&dir);
        let io = |e: std::io::Error| failed("preparing the pod directory", e);
        std::fs::create_dir_all(dir.join("logs")).map_err(io)?;
        std::fs::create_dir_all("/agentgate").map_err(io)?;
        // The data plane's containers mount an empty directory over the
        // ServiceAccount token's path (the kubelet would create it in the
        // container's root): the mount point has to exist here.
        std::fs::create_dir_all("/var/run/secrets/kubernetes.io/serviceaccount").map_err(io)?;
        let resolv = dir.join("resolv.conf");
        std::fs::write(&resolv, resolv_conf).map_err(io)?;
        std::fs::write(dir.join("pod.json"), pod.to_string()).map_err(io)?;
        let spec = &pod["spec"];

        // Volumes.
        let mut volumes: BTreeMap<String, PathBuf> = BTreeMap::new();
        let mut synced = Vec::new();
        for volume in spec["volumes"].as_array().into_iter().flatten() {
            let vname = volume["name"].as_str().unwrap_or_default().to_string();
            let vdir = dir.join("volumes").join(&vname);
            std::fs::create_dir_all(&vdir).map_err(io)?;
            if volume.get("emptyDir").is_some() {
                Command::new("chmod")
                    .args(["1777", &vdir.display().to_string()])
                    .status()
                    .map_err(io)?;
            } else if let Some(source) = volume.get("configMap") {
                synced.push(SyncedVolume {
                    kind: "configmap",
                    name: source["name"].as_str().unwrap_or_default().to_string(),
                    dir: vdir.clone(),
                    version: 0,
                    last: None,
                });
            } else if let Some(source) = volume.get("secret") {
                synced.push(SyncedVolume {
                    kind: "secret",
                    name: source["secretName"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    dir: vdir.clone(),
                    version: 0,
                    last: None,
                });
            } else {
                return Err(failed(
                    format!("volume {vname:?}"),
                    "the pod runner models emptyDir, configMap and secret volumes only",
                ));
            }
            volumes.insert(vname, vdir);
        }
        for volume in &mut synced {
            volume.sync(kubectl, namespace)?;
            // Traversable by every container's uid, as the kubelet's are.
            Command::new("chmod")
                .args(["-R", "a+rX", &volume.dir.display().to_string()])
                .status()
                .map_err(io)?;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let sync = {
            let (stop, kubectl, namespace) = (stop.clone(), kubectl.clone(), namespace.to_string());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(200));
                    for volume in &mut synced {
                        if let Err(e) = volume.sync(&kubectl, &namespace) {
                            eprintln!("pod runner: volume sync: {e}");
                        }
                        let _ = Command::new("chmod")
                            .args(["-R", "a+rX", &volume.dir.display().to_string()])
                            .status();
                    }
                }
            })
        };
        let mut runner = PodRunner {
            dir: dir.clone(),
            running: Vec::new(),
            stop,
            sync: Some(sync),
        };

        let pod_context = spec["securityContext"].clone();
        let launch = |container: &Value| -> Result<Child, HarnessError> {
            Self::launch(
                netns,
                &dir,
                container,
                &pod_context,
                &volumes,
                images,
                &resolv,
                name,
            )
        };
        for container in spec["initContainers"].as_array().into_iter().flatten() {
            let cname = container["name"].as_str().unwrap_or_default().to_string();
            let mut child = launch(container)?;
            if container["restartPolicy"].as_str() == Some("Always") {
                runner.running.push(Running {
                    name: cname.clone(),
                    child,
                });
                runner.await_startup(netns, &cname, container)?;
                continue;
            }
            let status = child
                .wait()
                .map_err(|e| failed(format!("init container {cname}"), e))?;
            if !status.success() {
                return Err(failed(
                    format!("init container {cname} failed ({status})"),
                    runner.log(&cname),
                ));
            }
        }
        for container in spec["containers"].as_array().into_iter().flatten() {
            let cname = container["name"].as_str().unwrap_or_default().to_string();
            let child = launch(container)?;
            runner.running.push(Running { name: cname, child });
        }
        Ok(runner)
    }

    #[allow(clippy::too_many_arguments)]
    fn launch(
        netns: &Netns,
        dir: &Path,
        container: &Value,
        pod_context: &Value,
        volumes: &BTreeMap<String, PathBuf>,
        images: &ImageMap,
        resolv: &Path,
        pod_name: &str,
    ) -> Result<Child, HarnessError> {
        let cname = container["name"].as_str().unwrap_or_default();
        let image = container["image"].as_str().unwrap_or_default();
        let context = &container["securityContext"];
        let pick = |field: &str| {
            context
                .get(field)
                .filter(|v| !v.is_null())
                .or_else(|| pod_context.get(field).filter(|v| !v.is_null()))
                .and_then(Value::as_i64)
        };
        let uid = pick("runAsUser").ok_or_else(|| {
            failed(
                format!("container {cname}"),
                "no runAsUser: the runner cannot read the image's USER",
            )
        })?;
        let gid = pick("runAsGroup").unwrap_or(uid);
        let mut command = strings(&container["command"]);
        if command.is_empty() {
            return Err(failed(
                format!("container {cname}"),
                "no command: the runner cannot read the image's entrypoint",
            ));
        }
        command.extend(strings(&container["args"]));

        // Every source is first bound to a staging point under the pod's own
        // /agentgate tmpfs, then to its target, then the staging points go:
        // a volume mounted over /tmp must not hide the sources that follow.
        let mut script = String::from(
            "set -e\nmount -t tmpfs -o mode=755 agentgate /agentgate\nmkdir /agentgate/.stage\n",
        );
        let mut binds: Vec<(PathBuf, String, bool)> = Vec::new();
        let mut bind = |source: &Path, target: &str, read_only: bool| {
            binds.push((source.to_path_buf(), target.to_string(), read_only));
        };
        bind(resolv, "/etc/resolv.conf", true);
        for (path, local) in images.get(image).into_iter().flatten() {
            bind(local, path, true);
        }
        for mount in container["volumeMounts"].as_array().into_iter().flatten() {
            let vname = mount["name"].as_str().unwrap_or_default();
            let source = volumes.get(vname).ok_or_else(|| {
                failed(
                    format!("container {cname}"),
                    format!("mounts unknown volume {vname:?}"),
                )
            })?;
            if mount.get("subPath").is_some() {
                return Err(failed(
                    format!("container {cname}"),
                    "subPath is not modelled",
                ));
            }
            let target = mount["mountPath"].as_str().unwrap_or_default();
            bind(source, target, mount["readOnly"].as_bool() == Some(true));
        }
        for (i, (source, _, _)) in binds.iter().enumerate() {
            let stage = format!("/agentgate/.stage/{i}");
            script.push_str(&format!(
                "if [ -d {s} ]; then mkdir {t}; else touch {t}; fi\nmount --bind {s} {t}\n",
                s = quote(&source.display().to_string()),
                t = quote(&stage)
            ));
        }
        for (i, (source, target, read_only)) in binds.iter().enumerate() {
            let stage = quote(&format!("/agentgate/.stage/{i}"));
            let t = quote(target);
            let ensure = if target.starts_with("/agentgate/") {
                // Inside the pod's own tmpfs.
                let kind = if source.is_dir() { "mkdir -p" } else { "touch" };
                format!("[ -e {t} ] || {kind} {t}")
            } else {
                // Never create files on the host: a mount point must exist.
                format!(
                    "[ -e {t} ] || {{ echo \"pod runner: mount point \"{t}\" does not exist on this machine\" >&2; exit 1; }}"
                )
            };
            script.push_str(&format!("{ensure}\nmount --bind {stage} {t}\n"));
            if *read_only {
                script.push_str(&format!("mount -o remount,bind,ro {t}\n"));
            }
        }
        for i in 0..binds.len() {
            script.push_str(&format!("umount /agentgate/.stage/{i}\n"));
        }
        script.push_str("rm -rf /agentgate/.stage\n");
        for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
            if container[probe].get("exec").is_some() {
                return Err(failed(
                    format!("container {cname}"),
                    "exec probes are not modelled",
                ));
            }
        }
        let mut env = vec![
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
            format!("HOSTNAME={pod_name}"),
            "HOME=/".to_string(),
        ];
        for var in container["env"].as_array().into_iter().flatten() {
            let Some(value) = var["value"].as_str() else {
                return Err(failed(
                    format!("container {cname}"),
                    "env valueFrom is not modelled",
                ));
            };
            env.push(format!(
                "{}={value}",
                var["name"].as_str().unwrap_or_default()
            ));
        }
        let mut setpriv = vec![
            "setpriv".to_string(),
            format!("--reuid={uid}"),
            format!("--regid={gid}"),
            "--clear-groups".to_string(),
        ];
        setpriv.extend(capability_flags(context));
        if context["allowPrivilegeEscalation"].as_bool() == Some(false) {
            setpriv.push("--no-new-privs".to_string());
        }
        setpriv.push("--".to_string());
        let workdir = container["workingDir"].as_str().unwrap_or("/");
        script.push_str(&format!("cd {}\n", quote(workdir)));
        script.push_str("exec ");
        for word in setpriv
            .iter()
            .chain(["env".to_string(), "-i".to_string()].iter())
            .chain(env.iter())
            .chain(command.iter())
        {
            script.push_str(&quote(word));
            script.push(' ');
        }
        script.push('\n');
        let script_path = dir.join(format!("{cname}.sh"));
        std::fs::write(&script_path, &script)
            .map_err(|e| failed("writing a container script", e))?;
        let log = std::fs::File::create(dir.join("logs").join(format!("{cname}.log")))
            .map_err(|e| failed("creating a container log", e))?;
        let err = log
            .try_clone()
            .map_err(|e| failed("creating a container log", e))?;
        netns
            .command("unshare")
            .args(["--mount", "--propagation", "private", "--", "sh"])
            .arg(&script_path)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| failed(format!("starting container {cname}"), e))
    }

    /// Waits for a sidecar's startup probe (HTTP GET, from inside the pod's
    /// network) to answer 200; fails when the sidecar exits first.
    fn await_startup(
        &mut self,
        netns: &Netns,
        cname: &str,
        container: &Value,
    ) -> Result<(), HarnessError> {
        let probe = &container["startupProbe"]["httpGet"];
        if probe.is_null() {
            return Ok(());
        }
        let port = probe["port"].as_i64().unwrap_or(0);
        let path = probe["path"].as_str().unwrap_or("/");
        let url = format!("http://127.0.0.1:{port}{path}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = netns
                .command("curl")
                .args([
                    "-s",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    "--max-time",
                    "1",
                    &url,
                ])
                .output()
                .map_err(|e| failed("probing", e))?;
            if String::from_utf8_lossy(&out.stdout) == "200" {
                return Ok(());
            }
            if let Some(running) = self.running.iter_mut().find(|r| r.name == cname)
                && let Ok(Some(status)) = running.child.try_wait()
            {
                return Err(failed(
                    format!("sidecar {cname} exited ({status}) before its startup probe passed"),
                    self.log(cname),
                ));
            }
            if Instant::now() > deadline {
                return Err(failed(
                    format!("sidecar {cname}: startup probe {url} never answered 200"),
                    self.log(cname),
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A container's output so far.
    pub fn log(&self, container: &str) -> String {
        std::fs::read_to_string(self.dir.join("logs").join(format!("{container}.log")))
            .unwrap_or_default()
    }

    /// Waits up to `limit` for a container to exit; its exit code.
    pub fn wait_exit(&mut self, container: &str, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        loop {
            let running = self.running.iter_mut().find(|r| r.name == container)?;
            if let Ok(Some(status)) = running.child.try_wait() {
                return status.code();
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The directory holding the pod's volumes, scripts and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for PodRunner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for running in self.running.iter_mut().rev() {
            kill_group(&mut running.child);
        }
        if let Some(sync) = self.sync.take() {
            let _ = sync.join();
        }
    }
}

/// The data-plane image the operator puts into sandbox Pods by default.
pub const DATA_PLANE_IMAGE: &str = concat!(
    "ghcr.io/agentgate-dev/agentgate:",
    env!("CARGO_PKG_VERSION")
);

/// A pod network for the examples: `api.example.test` and `api.github.com`
/// resolve (through a DNS server at [`DNS_IP`]) to a plain-HTTP echo
/// upstream at [`UPSTREAM_IP`]:8080; so does the SDK bank's host, whose
/// server [`example_sdk_bank`] adds.
pub fn example_network(dir: &Path) -> Result<Netns, HarnessError> {
    let mut netns = Netns::new(dir, &[UPSTREAM_IP, DNS_IP])?;
    let records = dir.join("records.json");
    std::fs::write(
        &records,
        format!(
            r#"{{"api.example.test": "{UPSTREAM_IP}", "api.github.com": "{UPSTREAM_IP}", "{}": "{UPSTREAM_IP}"}}"#,
            SDK_BANK_HOST
        ),
    )
    .map_err(|e| failed("writing the DNS records", e))?;
    let root = crate::repo_root();
    let dns = root.join("e2e/support/dns.py");
    let upstream = root.join("proxy/tests/support/upstream.py");
    netns.spawn_helper(
        "dns",
        &[
            "python3",
            &dns.display().to_string(),
            DNS_IP,
            &records.display().to_string(),
        ],
    )?;
    netns.spawn_helper(
        "upstream",
        &[
            "python3",
            &upstream.display().to_string(),
            UPSTREAM_IP,
            "8080",
        ],
    )?;
    Ok(netns)
}

/// Starts the official MCP SDK's bank server (run by the SDK's `python`)
/// at [`UPSTREAM_IP`]:[`SDK_BANK_PORT`](SDK_BANK_PORT) in
/// the example network, over Streamable HTTP. Returns its call log: one
/// JSON line per tool call that reached it.
pub fn example_sdk_bank(
    netns: &mut Netns,
    dir: &Path,
    python: &str,
) -> Result<PathBuf, HarnessError> {
    let calls = dir.join("sdk-bank-calls.log");
    let server = crate::repo_root().join("proxy/tests/support/mcp_bank_server.py");
    netns.spawn_helper_until(
        "sdk-bank",
        &[
            python,
            &server.display().to_string(),
            UPSTREAM_IP,
            &SDK_BANK_PORT.to_string(),
            &calls.display().to_string(),
            "streamable-http",
        ],
        "Uvicorn running",
    )?;
    Ok(calls)
}

/// The images of an example sandbox Pod: the data plane's binaries (this
/// build's `agentgate-proxy` and `agentgate-exec`) at `/usr/local/bin` of
/// [`DATA_PLANE_IMAGE`], and `agent_script` as `/srv/agent` of `agent_image`.
pub fn example_images(
    dir: &Path,
    agent_image: &str,
    agent_script: &str,
) -> Result<ImageMap, HarnessError> {
    let io = |e: std::io::Error| failed("preparing the images", e);
    let bin = dir.join("image-agentgate");
    let app = dir.join("image-agent");
    std::fs::create_dir_all(&bin).map_err(io)?;
    std::fs::create_dir_all(&app).map_err(io)?;
    let built = crate::operator_binary()?;
    for name in ["agentgate-proxy", "agentgate-exec"] {
        let path = built.with_file_name(name);
        if !path.exists() {
            return Err(failed(
                format!("{} is missing", path.display()),
                "build the workspace first (cargo build --workspace, or make test)",
            ));
        }
        std::fs::copy(&path, bin.join(name)).map_err(io)?;
    }
    std::fs::write(app.join("agent"), agent_script).map_err(io)?;
    for path in [&bin, &app, &app.join("agent")] {
        Command::new("chmod")
            .args(["-R", "a+rX", &path.display().to_string()])
            .status()
            .map_err(io)?;
    }
    Command::new("chmod")
        .args(["755", &app.join("agent").display().to_string()])
        .status()
        .map_err(io)?;
    let mut images = ImageMap::new();
    images.insert(
        DATA_PLANE_IMAGE.to_string(),
        vec![("/usr/local/bin".to_string(), bin)],
    );
    images.insert(agent_image.to_string(), vec![("/srv".to_string(), app)]);
    Ok(images)
}
