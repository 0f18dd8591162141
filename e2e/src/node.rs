//! The real node: the control plane of [`ControlPlane`] plus
//! kube-controller-manager, kube-scheduler, containerd (runc, the CNI
//! bridge), a kubelet that registers a Ready node, and kube-proxy, all in a
//! network namespace of their own (docs/testing.md).
//!
//! Why a namespace: everything a Pod does stays on this machine. The node's
//! namespace has no default route, so a connection to any address the test
//! did not create fails at once instead of leaving the machine; the test's
//! hosts (DNS, an echo upstream) live on addresses inside it. The host
//! reaches the API server through one veth pair (`10.253.K.1` on the host,
//! `10.253.K.2` on the node, `K` chosen free so several nodes can coexist).
//!
//! What the node runs, and how it differs from a kubeadm node:
//! - kube-apiserver with the default admission plugins (ServiceAccount
//!   included) plus NodeRestriction, `Node,RBAC` authorization, signed
//!   ServiceAccount tokens, serving and kubelet-client certificates from
//!   one CA (e2e/hack/node-pki.sh);
//! - kube-controller-manager (garbage collector, ServiceAccount and token
//!   controllers, the root CA publisher, Deployments, ...) and
//!   kube-scheduler, authenticated by static tokens;
//! - containerd with the overlayfs snapshotter, runc, and a `bridge` +
//!   `host-local` + `portmap` CNI chain on `cni0` (10.254.0.0/24);
//! - the kubelet with the cgroupfs driver on cgroup v1 (`failCgroupV1:
//!   false`), its pods below a cgroup root of their own, webhook
//!   authentication and authorization, DNS at [`DNS_IP`];
//! - kube-proxy in nftables mode, so Pods reach Services (the API server's
//!   own included) and the API server reaches the webhook Service.
//!
//! Images come from OCI archives imported into containerd; nothing is
//! pulled. Teardown kills every container (the cgroup tree), the shims
//! and the node processes, unmounts what they left, removes the cgroups,
//! and drops the namespace with the veth.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::world::{DNS_IP, UPSTREAM_IP};
use crate::{
    ControlPlane, HarnessError, TOKEN_USERS, failed, repo_root, run_checked, script_output, wait,
};

/// The node's name (its kubelet's `--hostname-override`).
pub const NODE_NAME: &str = "agentgate-node";
/// The Service CIDR and the `kubernetes` Service's address.
pub const SERVICE_CIDR: &str = "10.0.0.0/24";
/// The first Service IP: `kubernetes.default`.
pub const KUBERNETES_SERVICE_IP: &str = "10.0.0.1";
/// The Pod CIDR of the node's bridge.
pub const POD_CIDR: &str = "10.254.0.0/24";
/// The bridge's own address: the Pods' gateway.
const POD_GATEWAY: &str = "10.254.0.1";
/// The API server's port on the node address.
pub const APISERVER_PORT: u16 = 6443;
/// The pause image containerd runs each Pod sandbox with.
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// How often the kubelet resyncs each Pod, which bounds how long a
/// ConfigMap or Secret change takes to reach a mounted volume
/// (docs/operations.md). The node keeps the kubelet's default (one
/// minute), as production clusters do: a commit reaches the proxies over
/// the policy stream, not the volume.
pub const KUBELET_SYNC_SECONDS: u64 = 60;

/// The Pods the node holds: the kubelet's default, so the policy delivery
/// benchmark's fleet of 100 sandboxes fits beside the chart's Pods.
pub const MAX_PODS: u32 = 110;

/// A node's network namespace, held open by a sleeping process, and the
/// veth pair between it and the host.
pub struct Node {
    holder: Child,
    layout: Layout,
}

/// What names a node on this machine: its veth index, its directory and
/// its pods' cgroup root (all a teardown needs).
pub struct Layout {
    index: u8,
    dir: PathBuf,
    cgroup_root: String,
}

impl std::ops::Deref for Node {
    type Target = Layout;
    fn deref(&self) -> &Layout {
        &self.layout
    }
}

impl Node {
    /// `/proc/<holder>/ns/net`.
    pub fn ns_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/ns/net", self.holder.id()))
    }

    /// The node's address (the API server's, the kubelet's).
    pub fn address(&self) -> String {
        self.layout.address()
    }
}

impl Layout {
    fn address(&self) -> String {
        format!("10.253.{}.2", self.index)
    }

    /// The host's end of the veth pair.
    fn host_address(&self) -> String {
        format!("10.253.{}.1", self.index)
    }

    fn host_link(&self) -> String {
        format!("ag{}h", self.index)
    }

    fn node_link(&self) -> String {
        format!("ag{}n", self.index)
    }
}

impl Node {
    /// A command running `program` inside the node's namespace (as root).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--net={}", self.ns_path().display()))
            .arg("--")
            .arg(program);
        command
    }

    /// The pid of the process holding the namespace.
    pub fn holder_pid(&self) -> u32 {
        self.holder.id()
    }

    /// Records what a later [`tear_down_detached`] needs (`node-state` in
    /// the node's directory): the veth index and the cgroup root.
    pub(crate) fn write_state(&self) {
        let _ = std::fs::write(
            self.dir.join("node-state"),
            format!("{} {}\n", self.index, self.cgroup_root),
        );
    }

    /// The cgroup (below every v1 hierarchy) holding the kubelet's pods.
    pub fn cgroup_root(&self) -> &str {
        &self.cgroup_root
    }
}

/// The cgroup v1 hierarchies the kubelet and runc use here.
const CGROUP_CONTROLLERS: [&str; 9] = [
    "cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids", "systemd",
];

/// The directory holding every node binary (e2e/hack/install-node.sh builds
/// them once into the cache; a missing piece is an error, never a skip).
pub fn node_assets() -> Result<PathBuf, HarnessError> {
    let dir = crate::installed_path("e2e/hack/install-node.sh")?;
    run_checked(
        "e2e/hack/check-node.sh",
        Command::new("bash").arg(repo_root().join("e2e/hack/check-node.sh")),
    )?;
    Ok(dir)
}

impl Node {
    /// A new namespace with loopback, the veth pair to the host and the test
    /// hosts' addresses on a dummy interface.
    fn create(dir: &Path) -> Result<Node, HarnessError> {
        let holder = Command::new("unshare")
            .args(["--net", "--", "sleep", "infinity"])
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| failed("unshare --net", e))?;
        let own = std::fs::read_link("/proc/self/ns/net").ok();
        let ns = PathBuf::from(format!("/proc/{}/ns/net", holder.id()));
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::read_link(&ns).ok() == own {
            if Instant::now() > deadline {
                return Err(failed("unshare --net", "the namespace never appeared"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // Unique to this process and node, so that neither a concurrent
        // node nor one a crashed run left shares it.
        let cgroup_root = format!(
            "agentgate-node-{}-{}",
            std::process::id(),
            NODES_STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let mut node = Node {
            holder,
            layout: Layout {
                index: 0,
                dir: dir.to_path_buf(),
                cgroup_root,
            },
        };
        // The first free pair name: another node (a running demo) may hold
        // the others.
        let mut created = false;
        for index in 1..=250u8 {
            node.layout.index = index;
            let added = Command::new("ip")
                .args(["link", "add", &node.host_link(), "type", "veth", "peer"])
                .args(["name", &node.node_link(), "netns"])
                .arg(node.holder.id().to_string())
                .output()
                .map_err(|e| failed("ip link add", e))?;
            if added.status.success() {
                created = true;
                break;
            }
        }
        if !created {
            return Err(failed(
                "creating the node's veth pair",
                "ag1h..ag250h are all taken",
            ));
        }
        run_checked(
            "the host end of the node's veth",
            Command::new("sh").args([
                "-c",
                &format!(
                    "set -e; ip addr add {}/30 dev {link}; ip link set {link} up",
                    node.host_address(),
                    link = node.host_link()
                ),
            ]),
        )?;
        let script = format!(
            "set -e
ip link set lo up
ip addr add {address}/30 dev {link}
ip link set {link} up
{{ ip link add agtest type dummy 2>/dev/null || ip link add agtest type bridge; }}
ip addr add {UPSTREAM_IP}/24 dev agtest
ip addr add {DNS_IP}/24 dev agtest
ip link set agtest up
# The API server's connections to a Service (its webhooks) are routed
# before kube-proxy's DNAT: without a route to the Service CIDR they fail
# with ENETUNREACH. Nothing answers on agtest; the DNAT sends them on.
ip route add {SERVICE_CIDR} dev agtest
sysctl -qw net.ipv4.ip_forward=1
",
            address = node.address(),
            link = node.node_link()
        );
        run_checked(
            "setting up the node's network",
            node.command("sh").args(["-c", &script]),
        )?;
        node.create_cgroups()?;
        Ok(node)
    }
}

/// Nodes started by this process, to name their cgroups.
static NODES_STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Layout {
    /// The kubelet's cgroup root in every v1 hierarchy (the kubelet wants it
    /// to exist; cpuset needs its CPUs and memory nodes before any task).
    fn create_cgroups(&self) -> Result<(), HarnessError> {
        for controller in CGROUP_CONTROLLERS {
            let base = Path::new("/sys/fs/cgroup").join(controller);
            if !base.is_dir() {
                continue;
            }
            let path = base.join(&self.cgroup_root);
            std::fs::create_dir_all(&path)
                .map_err(|e| failed(format!("creating {}", path.display()), e))?;
            if controller == "cpuset" {
                for file in ["cpuset.cpus", "cpuset.mems"] {
                    let value = std::fs::read_to_string(base.join(file))
                        .map_err(|e| failed(format!("reading {file}"), e))?;
                    std::fs::write(path.join(file), value.trim())
                        .map_err(|e| failed(format!("writing {file}"), e))?;
                }
            }
        }
        Ok(())
    }

    /// SIGKILLs every process in the pods' cgroups and every shim of this
    /// node's containerd.
    fn kill_workloads(&self) {
        for _ in 0..5 {
            let mut pids = Vec::new();
            collect_procs(
                &Path::new("/sys/fs/cgroup/pids").join(&self.cgroup_root),
                &mut pids,
            );
            pids.extend(shim_pids(&self.dir));
            if pids.is_empty() {
                return;
            }
            for pid in pids {
                let _ = Command::new("kill").args(["-KILL", &pid]).status();
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Unmounts whatever the kubelet and containerd left below the node's
    /// directory (deepest first), then removes the pods' cgroups.
    fn clean_up(&self) {
        let dir = self.dir.display().to_string();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut targets: Vec<String> = mounts
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|t| t.starts_with(&dir))
            .map(str::to_string)
            .collect();
        targets.sort_by_key(|t| std::cmp::Reverse(t.len()));
        for target in targets {
            let _ = Command::new("umount").args(["-l", &target]).status();
        }
        for controller in CGROUP_CONTROLLERS {
            remove_cgroup(
                &Path::new("/sys/fs/cgroup")
                    .join(controller)
                    .join(&self.cgroup_root),
            );
        }
    }
}

/// Tears down what a detached node left (`make demo-down`), after its
/// processes were killed: containers and shims, mounts, cgroups, the veth.
pub fn tear_down_detached(dir: &Path) {
    let Ok(state) = std::fs::read_to_string(dir.join("node-state")) else {
        return;
    };
    let mut words = state.split_whitespace();
    let (Some(index), Some(cgroup_root)) = (
        words.next().and_then(|w| w.parse::<u8>().ok()),
        words.next(),
    ) else {
        return;
    };
    let layout = Layout {
        index,
        dir: dir.to_path_buf(),
        cgroup_root: cgroup_root.to_string(),
    };
    layout.kill_workloads();
    layout.clean_up();
    let _ = Command::new("ip")
        .args(["link", "del", &format!("ag{index}h")])
        .stderr(Stdio::null())
        .status();
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
        // The host end goes with the namespace; make sure.
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_link()])
            .stderr(Stdio::null())
            .status();
    }
}

/// Whether this process may lower an OOM score (CAP_SYS_RESOURCE): the
/// effective capability set of `/proc/self/status`, bit 24.
fn can_lower_oom_score() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 24) != 0)
}

fn collect_procs(dir: &Path, pids: &mut Vec<String>) {
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        pids.extend(text.split_whitespace().map(str::to_string));
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                collect_procs(&entry.path(), pids);
            }
        }
    }
}

fn remove_cgroup(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// The shims whose `-address` is this node's containerd socket.
fn shim_pids(dir: &Path) -> Vec<String> {
    let socket = dir.join("containerd/containerd.sock").display().to_string();
    let mut pids = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let words: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let is_shim = words
            .first()
            .is_some_and(|w| w.ends_with(b"containerd-shim-runc-v2"));
        if is_shim && words.contains(&socket.as_bytes()) {
            pids.push(name);
        }
    }
    pids
}

fn kubeconfig(server: &str, ca: &Path, user: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {server}\n    certificate-authority: {}\nusers:\n- name: {user}\n  user:\n    token: {token}\ncontexts:\n- name: e2e\n  context: {{cluster: e2e, user: {user}}}\ncurrent-context: e2e\n",
        ca.display()
    )
}

/// The static-token identities of the node's components (user, groups).
const COMPONENTS: [(&str, &str, &str); 4] = [
    (
        "kube-controller-manager",
        "system:kube-controller-manager",
        "",
    ),
    ("kube-scheduler", "system:kube-scheduler", ""),
    ("kube-proxy", "system:kube-proxy", ""),
    ("kubelet", "system:node:agentgate-node", "system:nodes"),
];

impl ControlPlane {
    /// A control plane with a real node (see the module docs), its files in
    /// a fresh temporary directory.
    pub fn start_with_node() -> Result<ControlPlane, HarnessError> {
        ControlPlane::start_with_node_in(crate::fresh_plane_dir("agentgate-node")?)
    }

    /// Like [`ControlPlane::start_with_node`], with its files in `dir`.
    pub fn start_with_node_in(dir: PathBuf) -> Result<ControlPlane, HarnessError> {
        let bin = node_assets()?;
        std::fs::create_dir_all(dir.join("pki"))
            .map_err(|e| failed(format!("creating {}", dir.display()), e))?;
        let node = Node::create(&dir).inspect_err(|_| {
            let _ = std::fs::remove_dir_all(&dir);
        })?;
        let mut plane = ControlPlane {
            kubeconfig: dir.join("kubeconfig"),
            dir,
            bin,
            children: Vec::new(),
            token: String::new(),
            node: Some(node),
            waiter: std::sync::OnceLock::new(),
        };
        plane.boot_node()?;
        Ok(plane)
    }

    /// The node, when this control plane has one.
    pub fn node(&self) -> Option<&Node> {
        self.node.as_ref()
    }

    fn node_ref(&self) -> Result<&Node, HarnessError> {
        self.node
            .as_ref()
            .ok_or_else(|| failed("the node", "this control plane has no node"))
    }

    fn write(&self, name: &str, text: &str) -> Result<PathBuf, HarnessError> {
        let path = self.dir.join(name);
        std::fs::write(&path, text).map_err(|e| failed(format!("writing {name}"), e))?;
        Ok(path)
    }

    fn boot_node(&mut self) -> Result<(), HarnessError> {
        let (address, dir) = (self.node_ref()?.address(), self.dir.clone());
        let d = |p: &str| dir.join(p).display().to_string();
        let pki = dir.join("pki");
        let p = |f: &str| pki.join(f).display().to_string();
        run_checked(
            "e2e/hack/node-pki.sh",
            Command::new("bash")
                .arg(repo_root().join("e2e/hack/node-pki.sh"))
                .args([&p(""), &address, KUBERNETES_SERVICE_IP, NODE_NAME]),
        )?;

        // Identities: the admin, the harness's test users, the components.
        let token = format!("e2e-{}-{}", std::process::id(), self.node_ref()?.index);
        let mut tokens = format!("{token},e2e-admin,e2e-admin,\"system:masters\"\n");
        for (i, (user, groups)) in TOKEN_USERS.iter().enumerate() {
            tokens.push_str(&format!("{token}-{i},{user},{user},\"{groups}\"\n"));
        }
        let server = format!("https://{address}:{APISERVER_PORT}");
        let ca = pki.join("ca.crt");
        for (name, user, groups) in COMPONENTS {
            let secret = format!("{token}-{name}");
            tokens.push_str(&format!("{secret},{user},{user},\"{groups}\"\n"));
            self.write(
                &format!("{name}.kubeconfig"),
                &kubeconfig(&server, &ca, user, &secret),
            )?;
        }
        self.write("tokens.csv", &tokens)?;
        self.token = token.clone();
        self.write("kubeconfig", &kubeconfig(&server, &ca, "e2e-admin", &token))?;

        self.spawn(
            "etcd",
            &[
                "--name=e2e".into(),
                format!("--data-dir={}", d("etcd")),
                "--listen-client-urls=http://127.0.0.1:2379".into(),
                "--advertise-client-urls=http://127.0.0.1:2379".into(),
                "--listen-peer-urls=http://127.0.0.1:2380".into(),
                "--initial-advertise-peer-urls=http://127.0.0.1:2380".into(),
                "--initial-cluster=e2e=http://127.0.0.1:2380".into(),
                "--unsafe-no-fsync=true".into(),
            ],
        )?;
        self.spawn(
            "kube-apiserver",
            &[
                "--etcd-servers=http://127.0.0.1:2379".into(),
                "--bind-address=0.0.0.0".into(),
                format!("--advertise-address={address}"),
                format!("--secure-port={APISERVER_PORT}"),
                format!("--tls-cert-file={}", p("apiserver.crt")),
                format!("--tls-private-key-file={}", p("apiserver.key")),
                format!("--client-ca-file={}", p("ca.crt")),
                format!(
                    "--kubelet-client-certificate={}",
                    p("apiserver-kubelet-client.crt")
                ),
                format!("--kubelet-client-key={}", p("apiserver-kubelet-client.key")),
                format!("--kubelet-certificate-authority={}", p("ca.crt")),
                "--kubelet-preferred-address-types=InternalIP".into(),
                "--authorization-mode=Node,RBAC".into(),
                "--enable-admission-plugins=NodeRestriction".into(),
                format!("--token-auth-file={}", d("tokens.csv")),
                format!("--service-account-key-file={}", p("sa.pub")),
                format!("--service-account-signing-key-file={}", p("sa.key")),
                "--service-account-issuer=https://kubernetes.default.svc".into(),
                format!("--service-cluster-ip-range={SERVICE_CIDR}"),
                "--allow-privileged=true".into(),
            ],
        )?;
        self.wait_ready(Duration::from_secs(120))?;

        self.spawn(
            "kube-controller-manager",
            &[
                format!("--kubeconfig={}", d("kube-controller-manager.kubeconfig")),
                format!("--service-account-private-key-file={}", p("sa.key")),
                format!("--root-ca-file={}", p("ca.crt")),
                "--use-service-account-credentials=true".into(),
                format!("--service-cluster-ip-range={SERVICE_CIDR}"),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
                "--controllers=*".into(),
            ],
        )?;
        self.spawn(
            "kube-scheduler",
            &[
                format!("--kubeconfig={}", d("kube-scheduler.kubeconfig")),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
            ],
        )?;

        self.start_containerd()?;
        let pause = script_output("e2e/hack/pause-image.sh", &[])?;
        let pause = pause
            .last()
            .ok_or_else(|| failed("e2e/hack/pause-image.sh", "printed no archive"))?;
        self.import_image(Path::new(pause))?;
        self.start_kubelet()?;
        self.spawn_kube_proxy()?;
        self.start_test_hosts()?;
        self.wait_node_ready(Duration::from_secs(120))
    }

    fn start_containerd(&mut self) -> Result<(), HarnessError> {
        let dir = self.dir.join("containerd");
        std::fs::create_dir_all(self.dir.join("cni/net.d"))
            .map_err(|e| failed("creating the CNI directory", e))?;
        let d = |p: &str| self.dir.join(p).display().to_string();
        let bin = self.bin.display().to_string();
        let config = format!(
            r#"version = 3
root = "{root}"
state = "{state}"
imports = []
# No NRI socket, no /opt: nothing outside the node's directory.
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.internal.v1.opt"]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[plugins.'io.containerd.image-verifier.v1.bindir']
  bin_dir = "{verifiers}"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{PAUSE_IMAGE}"

[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  # The kubelet asks for negative OOM scores (-998 for every Pod's sandbox),
  # which need CAP_SYS_RESOURCE; where root lacks it (this workplace's
  # machines do), runc fails with "can't get final child's PID". Clamp the
  # scores at containerd's own instead, as rootless nodes do.
  restrict_oom_score_adj = {restrict_oom}
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "{bin}/runc"
        Root = "{runc_root}"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{bin}/cni"]
    conf_dir = "{conf}"
    max_conf_num = 1

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"#,
            root = dir.join("root").display(),
            state = dir.join("state").display(),
            socket = dir.join("containerd.sock").display(),
            conf = d("cni/net.d"),
            verifiers = dir.join("verifiers").display(),
            restrict_oom = !can_lower_oom_score(),
            runc_root = dir.join("runc").display(),
        );
        let path = self.write("containerd.toml", &config)?;
        let conflist = format!(
            r#"{{
  "cniVersion": "1.0.0",
  "name": "agentgate",
  "plugins": [
    {{
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {{
        "type": "host-local",
        "ranges": [[{{"subnet": "{POD_CIDR}", "gateway": "{POD_GATEWAY}"}}]],
        "routes": [{{"dst": "0.0.0.0/0"}}],
        "dataDir": "{ipam}"
      }}
    }},
    {{"type": "portmap", "capabilities": {{"portMappings": true}}, "backend": "nftables"}}
  ]
}}
"#,
            ipam = d("cni/ipam")
        );
        self.write("cni/net.d/10-agentgate.conflist", &conflist)?;
        self.spawn("containerd", &[format!("--config={}", path.display())])?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if self.ctr(&["version"]).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(failed(
                    "containerd did not answer",
                    self.log_tail("containerd", 30),
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Runs `ctr` against the node's containerd, namespace `k8s.io`.
    pub fn ctr(&self, args: &[&str]) -> Result<String, HarnessError> {
        let socket = self.dir.join("containerd/containerd.sock");
        run_checked(
            &format!("ctr {}", args.join(" ")),
            Command::new(self.bin.join("ctr"))
                .arg("--address")
                .arg(socket)
                .args(["--namespace", "k8s.io"])
                .args(args),
        )
    }

    /// Imports an OCI archive into the node's containerd (what `kind load`
    /// or a registry pull would do); the kubelet then finds it by name.
    pub fn import_image(&self, archive: &Path) -> Result<(), HarnessError> {
        let archive = archive.display().to_string();
        self.ctr(&["images", "import", "--local", &archive])
            .map(|_| ())
    }

    fn start_kubelet(&mut self) -> Result<(), HarnessError> {
        let node = self.node_ref()?;
        let (address, cgroup_root) = (node.address(), node.cgroup_root().to_string());
        let d = |p: &str| self.dir.join(p).display().to_string();
        let pki = |f: &str| self.dir.join("pki").join(f).display().to_string();
        self.write("resolv.conf", &format!("nameserver {DNS_IP}\n"))?;
        let config = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {address}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: {cert}
tlsPrivateKeyFile: {key}
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {ca}}}
authorization: {{mode: Webhook}}
cgroupDriver: cgroupfs
cgroupRoot: /{cgroup_root}
cgroupsPerQOS: true
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://{socket}
clusterDNS: [{DNS_IP}]
clusterDomain: cluster.local
resolvConf: {resolv}
podLogsDir: {logs}
evictionHard: {{memory.available: 100Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
rotateCertificates: false
serverTLSBootstrap: false
maxPods: {MAX_PODS}
shutdownGracePeriod: 0s
",
            cert = pki("kubelet.crt"),
            key = pki("kubelet.key"),
            ca = pki("ca.crt"),
            socket = d("containerd/containerd.sock"),
            resolv = d("resolv.conf"),
            logs = d("pod-logs"),
        );
        let path = self.write("kubelet.yaml", &config)?;
        self.spawn(
            "kubelet",
            &[
                format!("--config={}", path.display()),
                format!("--kubeconfig={}", d("kubelet.kubeconfig")),
                format!("--root-dir={}", d("kubelet")),
                format!("--hostname-override={NODE_NAME}"),
                format!("--node-ip={address}"),
            ],
        )
    }

    fn spawn_kube_proxy(&mut self) -> Result<(), HarnessError> {
        let config = format!(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection: {{kubeconfig: {kubeconfig}}}
hostnameOverride: {NODE_NAME}
clusterCIDR: {POD_CIDR}
conntrack: {{maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
",
            kubeconfig = self.dir.join("kube-proxy.kubeconfig").display()
        );
        let path = self.write("kube-proxy.yaml", &config)?;
        self.spawn("kube-proxy", &[format!("--config={}", path.display())])
    }

    /// The test's hosts inside the node's namespace: DNS at [`DNS_IP`]
    /// (`api.example.test` and `api.github.com` → [`UPSTREAM_IP`]) and a
    /// plain-HTTP echo upstream at [`UPSTREAM_IP`]:8080.
    fn start_test_hosts(&mut self) -> Result<(), HarnessError> {
        let records = self.write(
            "records.json",
            &format!(
                r#"{{"api.example.test": "{UPSTREAM_IP}", "api.github.com": "{UPSTREAM_IP}"}}"#
            ),
        )?;
        let root = repo_root();
        let dns = root.join("e2e/support/dns.py").display().to_string();
        let upstream = root
            .join("proxy/tests/support/upstream.py")
            .display()
            .to_string();
        self.spawn_program(
            "dns",
            "python3",
            &[dns, DNS_IP.into(), records.display().to_string()],
        )?;
        self.spawn_program(
            "upstream",
            "python3",
            &[upstream, UPSTREAM_IP.into(), "8080".into()],
        )?;
        for name in ["dns", "upstream"] {
            let deadline = Instant::now() + Duration::from_secs(15);
            while !self.log_tail(name, 5).contains("ready") {
                if Instant::now() > deadline {
                    return Err(failed(
                        format!("{name} did not start"),
                        self.log_tail(name, 20),
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    /// The last `n` lines of a process's log (`<name>.log`).
    pub fn log_tail(&self, name: &str, n: usize) -> String {
        let text =
            std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Waits until the node reports Ready (at most `limit`).
    pub fn wait_node_ready(&self, limit: Duration) -> Result<(), HarnessError> {
        self.wait_object(
            wait::Kind::NODE,
            "",
            NODE_NAME,
            limit,
            |node| wait::condition_status(node, "Ready"),
            |s| s == "True",
        )
        .map(|_| ())
        .map_err(|last| {
            failed(
                format!("the node was not Ready after {limit:?} (Ready={last:?})"),
                format!(
                    "--- kubelet\n{}\n--- containerd\n{}",
                    self.log_tail("kubelet", 30),
                    self.log_tail("containerd", 15)
                ),
            )
        })
    }

    /// Stops the node's workloads and processes before the control plane
    /// (from [`Drop`]): the kubelet first, so nothing restarts a container,
    /// then every container and shim, containerd, and what they mounted.
    pub(crate) fn stop_node(&mut self) -> Option<Node> {
        let node = self.node.take()?;
        for name in ["kube-proxy", "kubelet", "dns", "upstream"] {
            let _ = self.kill_process(name);
        }
        node.kill_workloads();
        let _ = self.kill_process("containerd");
        node.kill_workloads();
        node.clean_up();
        for name in ["kube-scheduler", "kube-controller-manager"] {
            let _ = self.kill_process(name);
        }
        // The namespace goes once the last process in it has: the caller
        // kills the API server and etcd, then drops the node (its holder).
        Some(node)
    }
}

/// The images the tests and the demo import into the node, built by
/// e2e/hack/node-images.sh from `bin_dir` (target/debug for the tests,
/// target/release for `make demo`): the agentgate image and the agent image
/// (a shell, curl, python3) with its manifest digest, which a sandbox pins.
pub struct Images {
    /// The agentgate OCI archive (operator, webhook, proxy, agentgate-exec).
    pub agentgate: PathBuf,
    /// The agent OCI archive.
    pub agent: PathBuf,
    /// `ghcr.io/acme/triage-bot@sha256:...`: the agent image by digest.
    pub agent_image: String,
}

/// Builds (or finds cached) the node's images from the binaries in `bin_dir`.
pub fn build_images(bin_dir: &Path) -> Result<Images, HarnessError> {
    let lines = script_output("e2e/hack/node-images.sh", &[&bin_dir.display().to_string()])?;
    let field = |kind: &str, n: usize| {
        lines
            .iter()
            .filter_map(|l| l.strip_prefix(kind))
            .filter_map(|rest| rest.split_whitespace().nth(n))
            .next_back()
            .map(str::to_string)
            .ok_or_else(|| failed("e2e/hack/node-images.sh", format!("printed no {kind}line")))
    };
    Ok(Images {
        agentgate: PathBuf::from(field("agentgate ", 0)?),
        agent: PathBuf::from(field("agent ", 0)?),
        agent_image: field("agent ", 1)?,
    })
}

impl ControlPlane {
    /// Imports `images` into the node and installs the chart from them
    /// (`helm install --wait`: the operator's Deployment available), with
    /// `extra` `--set` values; then waits until the webhook answers from
    /// its Pods.
    pub fn install_chart_on_node(
        &self,
        images: &Images,
        extra: &[&str],
    ) -> Result<(), HarnessError> {
        self.import_image(&images.agentgate)?;
        self.import_image(&images.agent)?;
        self.run(&["create", "namespace", crate::CHART_NAMESPACE])?;
        let mut args = vec![
            "install",
            "agentgate",
            "charts/agentgate",
            "--namespace",
            crate::CHART_NAMESPACE,
            // Imported, never pulled: a missing image fails at once.
            "--set",
            "image.pullPolicy=Never",
            "--set",
            "dataPlane.pullPolicy=Never",
            "--wait",
            "--timeout=5m",
        ];
        for value in extra {
            args.extend(["--set", value]);
        }
        self.helm(&args).map_err(|e| {
            failed(
                "helm install on the node",
                format!("{e}\n{}", self.chart_logs(30)),
            )
        })?;
        self.wait_webhook("examples/maximum.yaml", Duration::from_secs(120))
            .map_err(|e| {
                failed(
                    "the webhook Pods never answered",
                    format!("{e}\n{}", self.chart_logs(30)),
                )
            })?;
        // The sandbox proxies reach the operator's /v1/hold by the
        // Service's name, which a cluster's DNS would answer.
        let service = "agentgate-webhook";
        let address = self.run(&[
            "get",
            "service",
            service,
            "-n",
            crate::CHART_NAMESPACE,
            "-o",
            "jsonpath={.spec.clusterIP}",
        ])?;
        self.add_test_host(
            &format!("{service}.{}.svc.cluster.local", crate::CHART_NAMESPACE),
            address.trim(),
        )
    }

    /// Adds `name` → `address` to the test DNS (which re-reads its records
    /// file when it changes).
    pub fn add_test_host(&self, name: &str, address: &str) -> Result<(), HarnessError> {
        let path = self.dir.join("records.json");
        let text =
            std::fs::read_to_string(&path).map_err(|e| failed("reading the DNS records", e))?;
        let mut records: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&text).map_err(|e| failed("reading the DNS records", e))?;
        records.insert(name.to_string(), address.into());
        let partial = self.dir.join("records.json.partial");
        std::fs::write(&partial, serde_json::Value::Object(records).to_string())
            .map_err(|e| failed("writing the DNS records", e))?;
        std::fs::rename(&partial, &path).map_err(|e| failed("writing the DNS records", e))
    }

    /// The last `lines` of every operator Pod's log (kubectl logs: the API
    /// server asks the kubelet), prefixed with the Pod's name.
    pub fn chart_logs(&self, lines: usize) -> String {
        self.kubectl(&[
            "logs",
            "-n",
            crate::CHART_NAMESPACE,
            "-l",
            "app.kubernetes.io/name=agentgate",
            &format!("--tail={lines}"),
            "--prefix",
        ])
        .map(|o| {
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        })
        .unwrap_or_default()
    }

    /// `program args` run in the node's network namespace, where Pod
    /// addresses are reachable (`None` without a node): its exit status
    /// and standard output.
    pub fn in_node_network(&self, program: &str, args: &[&str]) -> Option<(Option<i32>, String)> {
        let output = self
            .node
            .as_ref()?
            .command(program)
            .args(args)
            .output()
            .ok()?;
        Some((
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
        ))
    }

    /// The log of container `container` of Pod `namespace/pod` (empty when
    /// it cannot be read yet).
    pub fn container_log(&self, namespace: &str, pod: &str, container: &str) -> String {
        self.kubectl(&["logs", pod, "-n", namespace, "-c", container])
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// Waits until Pod `namespace/name` is Ready (at most `limit`).
    pub fn wait_pod_ready(
        &self,
        namespace: &str,
        name: &str,
        limit: Duration,
    ) -> Result<(), String> {
        self.wait_object(
            wait::Kind::POD,
            namespace,
            name,
            limit,
            |pod| wait::condition_status(pod, "Ready"),
            |s| s == "True",
        )
        .map(|_| ())
    }
}
