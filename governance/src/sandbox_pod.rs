//! The enforced shape of a sandbox's agent Pod (docs/design.md §10), pure: the
//! operator builds it from `spec.template`, and pod admission checks that a
//! Pod claiming a sandbox has it, so nobody can borrow a sandbox's severed
//! findings for a pod that is not confined.
//!
//! The shape: the `agentgate-init` init container installs the nftables
//! redirect and copies `agentgate-exec`; the `agentgate-proxy` native
//! sidecar judges every connection; `shareProcessNamespace` lets it tell
//! which binary connected; every agent container's command is wrapped by
//! `agentgate-exec` (Landlock), gets the proxy and CA-bundle environment,
//! never gains a capability and may not escalate privileges.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, EnvVar, HTTPGetAction,
    KeyToPath, PodSpec, Probe, ProjectedVolumeSource, SecretProjection, SecretVolumeSource,
    SecurityContext, ServiceAccountTokenProjection, Volume, VolumeMount, VolumeProjection,
};

use agentgate_policy::credentials::Credential;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::pod_template::PROXY_UID;

/// The data-plane image and how to pull it (operator flag `--proxy-image`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataPlane {
    /// The agentgate image: `agentgate-proxy` and the static `agentgate-exec`.
    pub image: String,
    /// `imagePullPolicy` of the data-plane containers (`None`: the cluster's default).
    pub pull_policy: Option<String>,
    /// The approval service held calls are put to (the operator's
    /// `https://…/v1/hold`); `None`: held calls are refused.
    pub approvals: Option<String>,
    /// Seconds a held call waits for a person.
    pub hold_timeout_seconds: u64,
    /// The policy stream the proxy subscribes to (the operator's
    /// `https://…/v1/policy/stream`, docs/design.md §10, "Delivery");
    /// `None`: the proxy follows the ConfigMap volume alone.
    pub policy_stream: Option<String>,
}

impl DataPlane {
    /// The image this build of agentgate ships with.
    pub fn default_image() -> String {
        format!(
            "ghcr.io/agentgate-dev/agentgate:{}",
            env!("CARGO_PKG_VERSION")
        )
    }
}

/// The init container that installs the redirect and copies `agentgate-exec`.
pub const INIT_CONTAINER: &str = "agentgate-init";
/// The native sidecar running the egress proxy.
pub const PROXY_CONTAINER: &str = "agentgate-proxy";
/// The emptyDir holding `agentgate-exec`.
pub const BIN_VOLUME: &str = "agentgate-bin";
/// The `<sandbox>-policy` ConfigMap: policy, findings and the sandbox CAs.
pub const POLICY_VOLUME: &str = "agentgate-policy";
/// The emptyDir the proxy writes the agent's CA bundle into (the sandbox
/// CAs and the Mozilla roots the image carries); read-only for the agent.
pub const TRUST_VOLUME: &str = "agentgate-trust";
/// The `<sandbox>-ca` Secret: the sandbox CA and its key (proxy only).
pub const CA_VOLUME: &str = "agentgate-ca";
/// An empty, read-only directory over the ServiceAccount token's path in the
/// data plane's containers: the API server's ServiceAccount admission
/// injects the agent's API token into every container that has no mount
/// there, and neither `agentgate-init` nor the proxy needs the agent's
/// identity (nor may a stored Pod's data plane differ from the built one).
pub const TOKEN_SHIELD_VOLUME: &str = "agentgate-no-token";
/// The projected ServiceAccount token, audience [`HOLD_AUDIENCE`], with
/// which the proxy puts held calls to the approval service (the proxy's
/// alone: no agent container may mount it or a token of that audience).
pub const APPROVALS_VOLUME: &str = "agentgate-approvals";
/// Where the proxy finds it.
pub const APPROVALS_DIR: &str = "/agentgate/approvals";
/// The audience of that token: `/v1/hold` accepts no other, and the API
/// server none of it.
pub const HOLD_AUDIENCE: &str = "agentgate.dev/hold";
/// How long each such token lives (the kubelet renews it at 80%).
const APPROVALS_TOKEN_SECONDS: i64 = 3600;
/// The projected ServiceAccount token, audience [`POLICY_AUDIENCE`], with
/// which the proxy subscribes to its policy stream (the proxy's alone).
pub const DELIVERY_VOLUME: &str = "agentgate-delivery";
/// Where the proxy finds it.
pub const DELIVERY_DIR: &str = "/agentgate/delivery";
pub use agentgate_judgement::delivery::POLICY_AUDIENCE;
/// The emptyDir where the proxy keeps the updates the stream pushed: it
/// outlives a proxy restart, so a restarted proxy never falls back to an
/// older policy than it enforced (the proxy's alone).
pub const PUSHED_VOLUME: &str = "agentgate-pushed";
/// Where the proxy keeps them.
pub const PUSHED_DIR: &str = "/agentgate/pushed";
/// The roots that verify the approval service and the policy stream (the
/// operator's serving CA), as the operator publishes them in the policy
/// ConfigMap.
pub const APPROVALS_CA_FILE: &str = "/agentgate/policy/approvals-ca.pem";
/// Where the ServiceAccount admission plugin mounts the API token.
pub const SERVICE_ACCOUNT_TOKEN_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The emptyDir where the proxy keeps each credential's placeholder
/// (docs/policy-semantics.md §9): written by the proxy, read-only for the
/// agent.
pub const PLACEHOLDERS_VOLUME: &str = "agentgate-placeholders";
/// Where the placeholders are mounted.
pub const PLACEHOLDERS_DIR: &str = "/agentgate/placeholders";
/// The credentials' Secret keys, projected into the proxy container only.
pub const CREDENTIALS_VOLUME: &str = "agentgate-credentials";
/// Where the proxy reads the secrets.
pub const CREDENTIALS_DIR: &str = "/agentgate/credentials";
/// The sandbox's credential declarations in the policy ConfigMap (no
/// secrets: where each comes from and how it is attached).
pub const CREDENTIALS_FILE_NAME: &str = "credentials.json";
/// Everything the data plane mounts lives below this directory.
pub const MOUNT_ROOT: &str = "/agentgate";
/// Where `agentgate-exec` is copied.
pub const BIN_DIR: &str = "/agentgate/bin";
/// Where the policy ConfigMap is mounted.
pub const POLICY_DIR: &str = "/agentgate/policy";
/// Where the CA Secret is mounted in the proxy.
pub const CA_DIR: &str = "/agentgate/ca";
/// Where the trust volume is mounted.
pub const TRUST_DIR: &str = "/agentgate/trust";
/// The wrapper every agent command runs under.
pub const EXEC_PATH: &str = "/agentgate/bin/agentgate-exec";
/// The committed effective policy, as the proxy and `agentgate-exec` read it.
pub const POLICY_FILE: &str = "/agentgate/policy/policy.yaml";
/// The sandbox CAs as the operator publishes them (certificates only).
pub const SANDBOX_CAS_FILE: &str = "/agentgate/policy/sandbox-ca.pem";
/// The sandbox CAs plus the Mozilla roots, as the proxy writes them: what
/// the agent's TLS clients trust.
pub const CA_BUNDLE_FILE: &str = "/agentgate/trust/ca-bundle.pem";
/// The proxy's explicit listener (CONNECT, absolute-form http://).
pub const EXPLICIT_PORT: u16 = 15080;
/// The listener `init-net` redirects every other TCP connection to.
pub const TRANSPARENT_PORT: u16 = 15001;
/// `/healthz`, `/readyz`, `/metrics` of the proxy.
pub const ADMIN_PORT: u16 = 15020;
/// Where the image keeps the binaries.
pub const IMAGE_BIN_DIR: &str = "/usr/local/bin";
/// The proxy's allocator options, its container's `MALLOC_CONF`: one
/// jemalloc arena, freed pages handed back after 100 ms. They keep a proxy
/// holding many idle connections small (docs/proxy.md, "Idle
/// connections"); the operator keeps the build's options. The same value
/// as `agentgate_proxy::idle::MALLOC_CONF`, which the proxy's benchmark
/// runs it with (a test checks both; neither crate may depend on the other).
pub const PROXY_MALLOC_CONF: &str = "narenas:1,dirty_decay_ms:100";

/// Variables naming the CA bundle, for the TLS stacks agents use (OpenSSL,
/// Python requests, curl, Node.js, git).
pub const CA_BUNDLE_VARS: [&str; 5] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
];
/// Variables naming the explicit proxy (clients honouring them get the
/// refusal at CONNECT, with a better error than a reset).
pub const PROXY_VARS: [&str; 4] = ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"];
/// Variables listing what bypasses the explicit proxy: loopback only.
pub const NO_PROXY_VARS: [&str; 2] = ["NO_PROXY", "no_proxy"];

/// The ConfigMap the operator writes the committed policy into.
pub fn policy_config_map_name(sandbox: &str) -> String {
    format!("{sandbox}{POLICY_CONFIG_MAP_SUFFIX}")
}

/// The sandbox whose policy ConfigMap is named `config_map`
/// ([`policy_config_map_name`] read backwards); `None` for a name no
/// sandbox's policy ConfigMap has.
pub fn policy_config_map_sandbox(config_map: &str) -> Option<&str> {
    config_map
        .strip_suffix(POLICY_CONFIG_MAP_SUFFIX)
        .filter(|sandbox| !sandbox.is_empty())
}

const POLICY_CONFIG_MAP_SUFFIX: &str = "-policy";

/// The Secret holding the sandbox CA.
pub fn ca_secret_name(sandbox: &str) -> String {
    format!("{sandbox}-ca")
}

/// The NetworkPolicy limiting the pod's egress.
pub fn network_policy_name(sandbox: &str) -> String {
    format!("{sandbox}-egress")
}

/// `agentgate-exec`'s arguments before the agent's own command. The data
/// plane's directory is named as the policy's mount: `agentgate-exec` adds
/// no read grant of its own beyond the policy's, and the agent needs the
/// CA bundle in the trust volume (the grant is on the directory, which
/// survives the kubelet's `..data` swaps of the policy mount beneath it).
pub fn exec_prefix() -> Vec<String> {
    [
        EXEC_PATH,
        "--policy",
        POLICY_FILE,
        "--policy-mount",
        MOUNT_ROOT,
        "--proxy-uid",
        &PROXY_UID.to_string(),
        "--placeholders",
        PLACEHOLDERS_DIR,
        "--",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Why the operator cannot build the sandbox's Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRefusal {
    /// Condition reason (`CommandRequired`, `ReservedName`).
    pub reason: &'static str,
    /// What to change, naming the fields.
    pub message: String,
}

fn string(s: &str) -> String {
    s.to_string()
}

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: string(name),
        mount_path: string(path),
        read_only: Some(true),
        ..VolumeMount::default()
    }
}

fn capabilities(add: &[&str]) -> Capabilities {
    Capabilities {
        add: (!add.is_empty()).then(|| add.iter().map(|c| string(c)).collect()),
        drop: Some(vec![string("ALL")]),
    }
}

/// The `agentgate-init` container: root with NET_ADMIN and NET_RAW only,
/// runs `init-net` and exits.
pub fn init_container(data_plane: &DataPlane) -> Container {
    Container {
        name: string(INIT_CONTAINER),
        image: Some(data_plane.image.clone()),
        image_pull_policy: data_plane.pull_policy.clone(),
        command: Some(vec![
            format!("{IMAGE_BIN_DIR}/agentgate-proxy"),
            string("init-net"),
            format!("--proxy-uid={PROXY_UID}"),
            format!("--redirect-port={TRANSPARENT_PORT}"),
            format!("--install-exec={EXEC_PATH}"),
        ]),
        security_context: Some(SecurityContext {
            run_as_user: Some(0),
            run_as_non_root: Some(false),
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            capabilities: Some(capabilities(&["NET_ADMIN", "NET_RAW"])),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(vec![
            VolumeMount {
                read_only: None,
                ..mount(BIN_VOLUME, BIN_DIR)
            },
            mount(TOKEN_SHIELD_VOLUME, SERVICE_ACCOUNT_TOKEN_DIR),
        ]),
        ..Container::default()
    }
}

/// The `agentgate-proxy` native sidecar: uid 1337, read-only root,
/// SYS_PTRACE only (reading other uids' `/proc/PID/fd` to tell which
/// binary connected), started before the agent and probed on `/readyz`, so
/// no agent container starts before a valid policy is loaded.
///
/// A runtime gives a non-root process none of its container's capabilities
/// across exec (Kubernetes sets no ambient capabilities), so the image's
/// `agentgate-proxy` carries `cap_sys_ptrace=p` as a file capability (it
/// raises it itself), and `allowPrivilegeEscalation` is true here:
/// `no_new_privs` would void it. The bounding set (SYS_PTRACE alone) bounds
/// whatever a file in the image could grant.
pub fn proxy_container(data_plane: &DataPlane) -> Container {
    Container {
        name: string(PROXY_CONTAINER),
        image: Some(data_plane.image.clone()),
        image_pull_policy: data_plane.pull_policy.clone(),
        restart_policy: Some(string("Always")),
        command: Some(
            vec![
                format!("{IMAGE_BIN_DIR}/agentgate-proxy"),
                format!("--policy={POLICY_FILE}"),
                format!("--listen=127.0.0.1:{EXPLICIT_PORT}"),
                format!("--transparent-listen=127.0.0.1:{TRANSPARENT_PORT}"),
                format!("--metrics-listen=0.0.0.0:{ADMIN_PORT}"),
                format!("--ca-cert={CA_DIR}/tls.crt"),
                format!("--ca-key={CA_DIR}/tls.key"),
                format!("--agent-cas={SANDBOX_CAS_FILE}"),
                format!("--agent-ca-bundle={CA_BUNDLE_FILE}"),
                format!("--credential-secrets={CREDENTIALS_DIR}"),
                format!("--placeholders={PLACEHOLDERS_DIR}"),
                string("--log-json"),
            ]
            .into_iter()
            .chain(data_plane.approvals.iter().flat_map(|url| {
                [
                    format!("--approvals={url}"),
                    format!("--approvals-ca={APPROVALS_CA_FILE}"),
                    format!("--approvals-token={APPROVALS_DIR}/token"),
                    format!("--hold-timeout={}", data_plane.hold_timeout_seconds),
                ]
            }))
            .chain(data_plane.policy_stream.iter().flat_map(|url| {
                [
                    format!("--policy-stream={url}"),
                    format!("--policy-stream-ca={APPROVALS_CA_FILE}"),
                    format!("--policy-stream-token={DELIVERY_DIR}/token"),
                    format!("--pushed-policy={PUSHED_DIR}"),
                ]
            }))
            .collect(),
        ),
        env: Some(vec![EnvVar {
            name: string("MALLOC_CONF"),
            value: Some(string(PROXY_MALLOC_CONF)),
            value_from: None,
        }]),
        security_context: Some(SecurityContext {
            run_as_user: Some(PROXY_UID),
            run_as_group: Some(PROXY_UID),
            run_as_non_root: Some(true),
            allow_privilege_escalation: Some(true),
            read_only_root_filesystem: Some(true),
            capabilities: Some(capabilities(&["SYS_PTRACE"])),
            ..SecurityContext::default()
        }),
        startup_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some(string("/readyz")),
                port: IntOrString::Int(i32::from(ADMIN_PORT)),
                ..HTTPGetAction::default()
            }),
            period_seconds: Some(1),
            failure_threshold: Some(300),
            ..Probe::default()
        }),
        readiness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some(string("/readyz")),
                port: IntOrString::Int(i32::from(ADMIN_PORT)),
                ..HTTPGetAction::default()
            }),
            period_seconds: Some(5),
            ..Probe::default()
        }),
        volume_mounts: Some(
            vec![
                mount(POLICY_VOLUME, POLICY_DIR),
                mount(CA_VOLUME, CA_DIR),
                VolumeMount {
                    read_only: None,
                    ..mount(TRUST_VOLUME, TRUST_DIR)
                },
                mount(TOKEN_SHIELD_VOLUME, SERVICE_ACCOUNT_TOKEN_DIR),
                mount(CREDENTIALS_VOLUME, CREDENTIALS_DIR),
                VolumeMount {
                    read_only: None,
                    ..mount(PLACEHOLDERS_VOLUME, PLACEHOLDERS_DIR)
                },
            ]
            .into_iter()
            .chain(
                data_plane
                    .approvals
                    .is_some()
                    .then(|| mount(APPROVALS_VOLUME, APPROVALS_DIR)),
            )
            .chain(
                data_plane
                    .policy_stream
                    .is_some()
                    .then(|| {
                        [
                            mount(DELIVERY_VOLUME, DELIVERY_DIR),
                            VolumeMount {
                                read_only: None,
                                ..mount(PUSHED_VOLUME, PUSHED_DIR)
                            },
                        ]
                    })
                    .into_iter()
                    .flatten(),
            )
            .collect(),
        ),
        ..Container::default()
    }
}

/// The data plane's volumes: the emptyDirs for `agentgate-exec`, the
/// agent's CA bundle and the credentials' placeholders, the policy
/// ConfigMap, the CA Secret, the credentials' Secret keys and the empty
/// directory shielding the data plane from the agent's API token; with
/// an approval service, the proxy's token for it.
pub fn volumes(sandbox: &str, data_plane: &DataPlane, credentials: &[Credential]) -> Vec<Volume> {
    let token_volume = |name: &str, audience: &str| Volume {
        name: string(name),
        projected: Some(ProjectedVolumeSource {
            sources: Some(vec![VolumeProjection {
                service_account_token: Some(ServiceAccountTokenProjection {
                    audience: Some(string(audience)),
                    expiration_seconds: Some(APPROVALS_TOKEN_SECONDS),
                    path: string("token"),
                }),
                ..VolumeProjection::default()
            }]),
            default_mode: None,
        }),
        ..Volume::default()
    };
    let approvals = data_plane
        .approvals
        .is_some()
        .then(|| token_volume(APPROVALS_VOLUME, HOLD_AUDIENCE));
    let delivery = data_plane.policy_stream.is_some().then(|| {
        [
            token_volume(DELIVERY_VOLUME, POLICY_AUDIENCE),
            Volume {
                name: string(PUSHED_VOLUME),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Volume::default()
            },
        ]
    });
    let mut all = vec![
        Volume {
            name: string(BIN_VOLUME),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
        Volume {
            name: string(TRUST_VOLUME),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
        Volume {
            name: string(TOKEN_SHIELD_VOLUME),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
        Volume {
            name: string(POLICY_VOLUME),
            config_map: Some(ConfigMapVolumeSource {
                name: policy_config_map_name(sandbox),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        },
        Volume {
            name: string(CA_VOLUME),
            secret: Some(SecretVolumeSource {
                secret_name: Some(ca_secret_name(sandbox)),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        },
    ];
    all.push(Volume {
        name: string(PLACEHOLDERS_VOLUME),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    });
    all.push(credentials_volume(credentials));
    all.extend(approvals);
    all.extend(delivery.into_iter().flatten());
    all
}

/// The credentials' Secret keys for the proxy, one file per credential
/// named by the credential: optional, so that a missing Secret or key
/// leaves the Pod running and that credential unavailable (its requests
/// refused, docs/policy-semantics.md §9.4) rather than the Pod stuck. An
/// emptyDir when the sandbox declares none.
fn credentials_volume(credentials: &[Credential]) -> Volume {
    if credentials.is_empty() {
        return Volume {
            name: string(CREDENTIALS_VOLUME),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        };
    }
    let sources = credentials
        .iter()
        .map(|c| VolumeProjection {
            secret: Some(SecretProjection {
                name: c.secret_ref.name.clone(),
                items: Some(vec![KeyToPath {
                    key: c.secret_ref.key.clone(),
                    path: c.name.clone(),
                    mode: None,
                }]),
                optional: Some(true),
            }),
            ..VolumeProjection::default()
        })
        .collect();
    Volume {
        name: string(CREDENTIALS_VOLUME),
        projected: Some(ProjectedVolumeSource {
            sources: Some(sources),
            default_mode: None,
        }),
        ..Volume::default()
    }
}

/// Whether a stored credentials volume has a form the data plane makes:
/// an emptyDir, or Secret keys projected and nothing else.
fn is_credentials_volume(volume: &Volume) -> bool {
    let only_secrets = volume.projected.as_ref().is_some_and(|p| {
        p.sources.iter().flatten().all(|s| {
            s.secret.is_some()
                && s.config_map.is_none()
                && s.downward_api.is_none()
                && s.service_account_token.is_none()
                && s.cluster_trust_bundle.is_none()
        })
    });
    let others = volume.secret.is_none()
        && volume.config_map.is_none()
        && volume.host_path.is_none()
        && volume.persistent_volume_claim.is_none();
    others
        && (volume.empty_dir.is_some() != volume.projected.is_some())
        && (volume.empty_dir.is_some() || only_secrets)
}

/// The Secrets a sandbox's credentials read.
fn credential_secrets(credentials: &[Credential]) -> BTreeSet<&str> {
    credentials
        .iter()
        .map(|c| c.secret_ref.name.as_str())
        .collect()
}

/// Every place a Pod spec (or a template's, under `at`) would hand a
/// credential's Secret to something other than the proxy's own
/// `agentgate-credentials` volume: a Secret or projected volume, an
/// environment variable or `envFrom` of any container
/// (docs/policy-semantics.md §9.4: the secret never reaches the agent).
pub fn credential_exposures(spec: &PodSpec, credentials: &[Credential], at: &str) -> Vec<String> {
    let secrets = credential_secrets(credentials);
    if secrets.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (i, volume) in spec.volumes.iter().flatten().enumerate() {
        if volume.name == CREDENTIALS_VOLUME {
            continue;
        }
        if let Some(secret) = volume_secrets(volume).find(|n| secrets.contains(n)) {
            out.push(format!(
                "{at}.volumes[{i}] ({:?}) mounts Secret {secret:?}, which holds a credential of the sandbox: only the proxy may read it; the agent gets a placeholder",
                volume.name
            ));
        }
    }
    for (list, containers) in container_lists(spec) {
        for (i, container) in containers.iter().enumerate() {
            for (j, env) in container.env.iter().flatten().enumerate() {
                let secret = env
                    .value_from
                    .as_ref()
                    .and_then(|v| v.secret_key_ref.as_ref())
                    .map(|r| r.name.as_str())
                    .filter(|n| secrets.contains(n));
                if let Some(secret) = secret {
                    out.push(format!(
                        "{at}.{list}[{i}].env[{j}] ({}) reads Secret {secret:?}, which holds a credential of the sandbox: use the credential's placeholder instead",
                        env.name
                    ));
                }
            }
            for (j, from) in container.env_from.iter().flatten().enumerate() {
                let secret = from
                    .secret_ref
                    .as_ref()
                    .map(|r| r.name.as_str())
                    .filter(|n| secrets.contains(n));
                if let Some(secret) = secret {
                    out.push(format!(
                        "{at}.{list}[{i}].envFrom[{j}] reads Secret {secret:?}, which holds a credential of the sandbox: use the credential's placeholder instead"
                    ));
                }
            }
        }
    }
    out
}

/// Whether a mount is one credential's file placeholder: one file of the
/// placeholders volume, read-only, outside the data plane's directory.
fn is_placeholder_file_mount(m: &VolumeMount) -> bool {
    m.name == PLACEHOLDERS_VOLUME
        && m.read_only == Some(true)
        && m.sub_path_expr.is_none()
        && m.sub_path
            .as_deref()
            .is_some_and(|p| agentgate_policy::action::check_credential_name(p).is_ok())
        && !under_mount_root(&m.mount_path)
}

/// Whether a stored volume is the data plane's `want`: same source and
/// object, all keys, not optional (the API server fills in `defaultMode`).
fn same_volume(found: &Volume, want: &Volume) -> bool {
    let plain = |v: &Volume| Volume {
        name: v.name.clone(),
        empty_dir: v
            .empty_dir
            .as_ref()
            .map(|_| EmptyDirVolumeSource::default()),
        config_map: v.config_map.as_ref().map(|c| ConfigMapVolumeSource {
            default_mode: None,
            ..c.clone()
        }),
        secret: v.secret.as_ref().map(|s| SecretVolumeSource {
            default_mode: None,
            ..s.clone()
        }),
        projected: v.projected.as_ref().map(|p| ProjectedVolumeSource {
            default_mode: None,
            ..p.clone()
        }),
        ..v.clone()
    };
    plain(found) == plain(want)
}

fn is_reserved_name(name: &str) -> bool {
    name.starts_with("agentgate-")
}

/// A path with `//`, `.` and `..` resolved (lexically, as the runtime
/// cleans a mount path).
fn clean_path(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Whether a mount path is, or cleans to, the data plane's directory or
/// something below it (or the root, which holds it).
fn under_mount_root(path: &str) -> bool {
    let cleaned = clean_path(path);
    cleaned == "/" || cleaned == MOUNT_ROOT || cleaned.starts_with(&format!("{MOUNT_ROOT}/"))
}

/// Why a container's exec hooks or exec probes cannot run in the sandbox:
/// the kubelet runs them inside the container, outside `agentgate-exec`.
fn exec_handlers(container: &Container) -> Vec<&'static str> {
    let mut found = Vec::new();
    if let Some(lifecycle) = &container.lifecycle {
        for (name, handler) in [
            ("lifecycle.postStart", &lifecycle.post_start),
            ("lifecycle.preStop", &lifecycle.pre_stop),
        ] {
            if handler.as_ref().is_some_and(|h| h.exec.is_some()) {
                found.push(name);
            }
        }
    }
    for (name, probe) in [
        ("startupProbe", &container.startup_probe),
        ("readinessProbe", &container.readiness_probe),
        ("livenessProbe", &container.liveness_probe),
    ] {
        if probe.as_ref().is_some_and(|p| p.exec.is_some()) {
            found.push(name);
        }
    }
    found
}

/// Whether a volume reads the sandbox CA's Secret (whose key only the
/// proxy may hold), directly or projected.
fn reads_ca_secret(volume: &Volume, sandbox: &str) -> bool {
    let ca = ca_secret_name(sandbox);
    volume_secrets(volume).any(|name| name == ca)
}

/// The Secrets a volume reads, directly or projected.
fn volume_secrets(volume: &Volume) -> impl Iterator<Item = &str> {
    let direct = volume
        .secret
        .as_ref()
        .and_then(|s| s.secret_name.as_deref());
    let projected = volume
        .projected
        .as_ref()
        .and_then(|p| p.sources.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|source| source.secret.as_ref())
        .map(|s| s.name.as_str());
    direct.into_iter().chain(projected)
}

/// A Pod spec's container lists by field name: `initContainers`, then
/// `containers`.
fn container_lists(spec: &PodSpec) -> [(&'static str, &[Container]); 2] {
    [
        (
            "initContainers",
            spec.init_containers.as_deref().unwrap_or(&[]),
        ),
        ("containers", spec.containers.as_slice()),
    ]
}

/// The data plane's token audiences, each with the one volume that may
/// project it and what a token of it does.
const DATA_PLANE_AUDIENCES: &[(&str, &str, &str)] = &[
    (HOLD_AUDIENCE, APPROVALS_VOLUME, "putting calls on hold"),
    (
        POLICY_AUDIENCE,
        DELIVERY_VOLUME,
        "subscribing to the sandbox's policy",
    ),
];

/// The data plane audience a volume projects a token for, if any, with its
/// volume and use: only the data plane's volume may, or the agent could
/// put calls on hold or report enforcement itself.
fn projected_data_plane_audience(
    volume: &Volume,
) -> Option<(&'static str, &'static str, &'static str)> {
    volume
        .projected
        .as_ref()
        .and_then(|p| p.sources.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|source| source.service_account_token.as_ref())
        .find_map(|token| {
            DATA_PLANE_AUDIENCES
                .iter()
                .find(|(audience, _, _)| token.audience.as_deref() == Some(*audience))
                .copied()
        })
}

/// What the template may not contain: the data plane's names and mount
/// point, and containers that cannot be wrapped.
fn template_refusals(sandbox: &str, spec: &PodSpec) -> Vec<PodRefusal> {
    let mut out = Vec::new();
    let reserved = |message: String| PodRefusal {
        reason: "ReservedName",
        message,
    };
    for (i, volume) in spec.volumes.iter().flatten().enumerate() {
        if is_reserved_name(&volume.name) {
            out.push(reserved(format!(
                "spec.template.spec.volumes[{i}].name {:?}: names starting with agentgate- belong to the sandbox's data plane; rename it",
                volume.name
            )));
        }
        if reads_ca_secret(volume, sandbox) {
            out.push(reserved(format!(
                "spec.template.spec.volumes[{i}] ({:?}) reads Secret {:?}: the sandbox CA's key is the proxy's alone",
                volume.name,
                ca_secret_name(sandbox)
            )));
        }
        if let Some((audience, _, what)) = projected_data_plane_audience(volume) {
            out.push(reserved(format!(
                "spec.template.spec.volumes[{i}] ({:?}) projects a token for audience {audience}: {what} is the proxy's alone",
                volume.name
            )));
        }
    }
    for (list, containers) in container_lists(spec) {
        for (i, container) in containers.iter().enumerate() {
            let path = format!("spec.template.spec.{list}[{i}]");
            if is_reserved_name(&container.name) {
                out.push(reserved(format!(
                    "{path}.name {:?}: names starting with agentgate- belong to the sandbox's data plane; rename it",
                    container.name
                )));
            }
            for (j, m) in container.volume_mounts.iter().flatten().enumerate() {
                if clean_path(&m.mount_path) != m.mount_path.trim_end_matches('/') {
                    out.push(reserved(format!(
                        "{path}.volumeMounts[{j}].mountPath {:?} is not a clean absolute path (no //, . or ..); write {:?}",
                        m.mount_path,
                        clean_path(&m.mount_path)
                    )));
                } else if under_mount_root(&m.mount_path) {
                    out.push(reserved(format!(
                        "{path}.volumeMounts[{j}].mountPath {:?}: {MOUNT_ROOT} belongs to the sandbox's data plane; mount elsewhere",
                        m.mount_path
                    )));
                }
            }
            if list == "initContainers" && container.restart_policy.is_some() {
                out.push(reserved(format!(
                    "{path}.restartPolicy: sidecars in the template are not supported; run it as a regular container"
                )));
            }
            for handler in exec_handlers(container) {
                out.push(PodRefusal {
                    reason: "ExecHandler",
                    message: format!(
                        "{path}.{handler} runs a command in the container outside agentgate-exec, so without the filesystem policy; use an httpGet or tcpSocket handler"
                    ),
                });
            }
            if container.command.as_ref().is_none_or(Vec::is_empty) {
                out.push(PodRefusal {
                    reason: "CommandRequired",
                    message: format!(
                        "{path} ({:?}) has no command: agentgate-exec must wrap it to apply the filesystem policy, and the image's entrypoint cannot be known without a registry; add command: [the entrypoint of {:?}] (args stay as they are)",
                        container.name,
                        container.image.as_deref().unwrap_or("its image")
                    ),
                });
            }
        }
    }
    out
}

fn agent_env(env: Option<Vec<EnvVar>>) -> Vec<EnvVar> {
    let ours: Vec<(&str, String)> = PROXY_VARS
        .iter()
        .map(|n| (*n, format!("http://127.0.0.1:{EXPLICIT_PORT}")))
        .chain(
            NO_PROXY_VARS
                .iter()
                .map(|n| (*n, string("localhost,127.0.0.1,::1"))),
        )
        .chain(CA_BUNDLE_VARS.iter().map(|n| (*n, string(CA_BUNDLE_FILE))))
        .collect();
    let mut env: Vec<EnvVar> = env
        .unwrap_or_default()
        .into_iter()
        .filter(|e| !ours.iter().any(|(n, _)| *n == e.name))
        .collect();
    env.extend(ours.into_iter().map(|(name, value)| EnvVar {
        name: string(name),
        value: Some(value),
        value_from: None,
    }));
    env
}

/// An agent container in the enforced shape: wrapped command, proxy and CA
/// environment, the data plane's read-only mounts, no capabilities beyond
/// the restricted profile's NET_BIND_SERVICE, no privilege escalation.
fn agent_container(mut container: Container, credentials: &[Credential]) -> Container {
    let mut command = exec_prefix();
    command.extend(container.command.take().unwrap_or_default());
    container.command = Some(command);
    container.env = Some(agent_env(container.env.take()));
    let mut mounts = container.volume_mounts.take().unwrap_or_default();
    mounts.push(mount(BIN_VOLUME, BIN_DIR));
    mounts.push(mount(POLICY_VOLUME, POLICY_DIR));
    mounts.push(mount(TRUST_VOLUME, TRUST_DIR));
    mounts.push(mount(PLACEHOLDERS_VOLUME, PLACEHOLDERS_DIR));
    // A file placeholder is the proxy's file for that credential, one
    // file mounted by itself (the proxy writes it before it is ready, so
    // before any agent container starts).
    for c in credentials {
        if let Some(file) = &c.placeholder.file {
            mounts.push(VolumeMount {
                sub_path: Some(c.name.clone()),
                ..mount(PLACEHOLDERS_VOLUME, file)
            });
        }
    }
    container.volume_mounts = Some(mounts);
    let mut context = container.security_context.take().unwrap_or_default();
    context.allow_privilege_escalation = Some(false);
    context.privileged = None;
    let kept: Vec<String> = context
        .capabilities
        .as_ref()
        .and_then(|c| c.add.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.trim_start_matches("CAP_") == "NET_BIND_SERVICE")
        .collect();
    context.capabilities = Some(Capabilities {
        add: (!kept.is_empty()).then_some(kept),
        drop: Some(vec![string("ALL")]),
    });
    container.security_context = Some(context);
    container
}

/// The Pod spec the operator creates for a sandbox from its template's
/// spec (whose escapes the caller has already refused), or why it cannot.
pub fn enforced_pod_spec(
    sandbox: &str,
    template: &PodSpec,
    data_plane: &DataPlane,
    credentials: &[Credential],
) -> Result<PodSpec, Vec<PodRefusal>> {
    let mut refusals = template_refusals(sandbox, template);
    refusals.extend(
        credential_exposures(template, credentials, "spec.template.spec")
            .into_iter()
            .map(|message| PodRefusal {
                reason: "CredentialExposed",
                message,
            }),
    );
    if !refusals.is_empty() {
        return Err(refusals);
    }
    let mut spec = template.clone();
    spec.share_process_namespace = Some(true);
    let mut init = vec![init_container(data_plane), proxy_container(data_plane)];
    init.extend(
        spec.init_containers
            .take()
            .unwrap_or_default()
            .into_iter()
            .map(|c| agent_container(c, credentials)),
    );
    spec.init_containers = Some(init);
    spec.containers = std::mem::take(&mut spec.containers)
        .into_iter()
        .map(|c| agent_container(c, credentials))
        .collect();
    let mut all_volumes = volumes(sandbox, data_plane, credentials);
    all_volumes.extend(spec.volumes.take().unwrap_or_default());
    spec.volumes = Some(all_volumes);
    Ok(spec)
}

/// The fields of a container that decide what it may do, for comparing a
/// stored data-plane container with the expected one (the API server adds
/// defaults elsewhere: termination paths, pull policy, probe thresholds).
fn essentials(c: &Container) -> impl PartialEq + '_ {
    (
        (
            &c.name,
            &c.image,
            &c.command,
            &c.args,
            &c.security_context,
            &c.volume_mounts,
            &c.restart_policy,
        ),
        (&c.ports, &c.working_dir, &c.volume_devices),
        (
            // Exactly the expected variables: one more (LD_PRELOAD, say)
            // would run other code with the data plane's privileges.
            c.env.as_deref().unwrap_or_default(),
            c.env_from.as_ref().is_none_or(Vec::is_empty),
            // Hooks and exec probes run commands inside the container, as
            // its uid: in the proxy's, outside the redirect.
            c.lifecycle.is_none(),
            [&c.startup_probe, &c.readiness_probe, &c.liveness_probe]
                .iter()
                .all(|p| {
                    p.as_ref()
                        .is_none_or(|p| p.exec.is_none() && p.grpc.is_none())
                }),
        ),
    )
}

/// Whether `container` is exactly the data plane's `agentgate-init` or
/// `agentgate-proxy` for this image: such a container is trusted with the
/// capabilities and the uid no agent container may have.
pub fn is_data_plane_container(container: &Container, data_plane: &DataPlane) -> bool {
    let init = init_container(data_plane);
    let proxy = proxy_container(data_plane);
    essentials(container) == essentials(&init) || essentials(container) == essentials(&proxy)
}

/// Every way a Pod that claims `sandbox` departs from the enforced shape,
/// one line each with its field path. Empty: the Pod is confined as
/// docs/design.md §10 says, so the sandbox's severed findings may count for it.
pub fn shape_problems(spec: &PodSpec, sandbox: &str, data_plane: &DataPlane) -> Vec<String> {
    let mut problems = Vec::new();
    if spec.share_process_namespace != Some(true) {
        problems.push(
            "spec.shareProcessNamespace is not true: the proxy could not tell which binary connected"
                .to_string(),
        );
    }
    let init = spec.init_containers.as_deref().unwrap_or(&[]);
    let expected = [init_container(data_plane), proxy_container(data_plane)];
    for (i, want) in expected.iter().enumerate() {
        match init.get(i) {
            Some(c) if essentials(c) == essentials(want) => {}
            _ => problems.push(format!(
                "spec.initContainers[{i}] is not the sandbox's {} container from image {:?}",
                want.name, data_plane.image
            )),
        }
    }
    // The credentials volume's Secrets are the sandbox's to say (pod
    // admission checks them against its declarations): here only its form.
    let want_volumes = volumes(sandbox, data_plane, &[]);
    for want in &want_volumes {
        let found = spec.volumes.iter().flatten().find(|v| v.name == want.name);
        let fits = |f: &Volume| match want.name == CREDENTIALS_VOLUME {
            true => is_credentials_volume(f),
            false => same_volume(f, want),
        };
        if !found.is_some_and(fits) {
            problems.push(format!(
                "spec.volumes: {:?} is not the sandbox's own ({})",
                want.name,
                match (&want.config_map, &want.secret) {
                    (Some(c), _) => format!("ConfigMap {}", c.name),
                    (_, Some(s)) => format!("Secret {}", s.secret_name.as_deref().unwrap_or("")),
                    _ if want.name == CREDENTIALS_VOLUME =>
                        "the credentials' Secret keys, or an emptyDir".to_string(),
                    _ => "an emptyDir".to_string(),
                }
            ));
        }
    }
    let agents = init
        .iter()
        .enumerate()
        .skip(expected.len())
        .map(|(i, c)| (format!("spec.initContainers[{i}]"), c))
        .chain(
            spec.containers
                .iter()
                .enumerate()
                .map(|(i, c)| (format!("spec.containers[{i}]"), c)),
        );
    for (i, volume) in spec.volumes.iter().flatten().enumerate() {
        if volume.name != CA_VOLUME && reads_ca_secret(volume, sandbox) {
            problems.push(format!(
                "spec.volumes[{i}] ({:?}) reads the sandbox CA's Secret, whose key is the proxy's alone",
                volume.name
            ));
        }
        if let Some((audience, own, _)) = projected_data_plane_audience(volume)
            && volume.name != own
        {
            problems.push(format!(
                "spec.volumes[{i}] ({:?}) projects a token for audience {audience}, which is the proxy's alone",
                volume.name
            ));
        }
    }
    let prefix = exec_prefix();
    for (path, container) in agents {
        for handler in exec_handlers(container) {
            problems.push(format!(
                "{path}.{handler} runs a command outside agentgate-exec"
            ));
        }
        for (j, m) in container.volume_mounts.iter().flatten().enumerate() {
            if clean_path(&m.mount_path) != m.mount_path.trim_end_matches('/') {
                problems.push(format!(
                    "{path}.volumeMounts[{j}].mountPath {:?} is not a clean absolute path",
                    m.mount_path
                ));
            }
        }
        let wrapped = container
            .command
            .as_ref()
            .is_some_and(|c| c.len() > prefix.len() && c.starts_with(&prefix));
        if !wrapped {
            problems.push(format!(
                "{path}.command does not start with {}: the agent would run without its filesystem policy",
                prefix.join(" ")
            ));
        }
        if container.restart_policy.is_some() {
            problems.push(format!(
                "{path}.restartPolicy is set: only the sandbox's proxy runs as a sidecar"
            ));
        }
        let data_plane_mounts: BTreeSet<(&str, &str, bool)> = container
            .volume_mounts
            .iter()
            .flatten()
            .filter(|m| !is_placeholder_file_mount(m))
            // Every data plane volume is named agentgate-…: one rule, so a
            // volume added to the data plane is covered without a list here.
            .filter(|m| under_mount_root(&m.mount_path) || is_reserved_name(&m.name))
            .map(|m| {
                (
                    m.name.as_str(),
                    m.mount_path.as_str(),
                    m.read_only == Some(true) && m.sub_path.is_none() && m.sub_path_expr.is_none(),
                )
            })
            .collect();
        let want: BTreeSet<(&str, &str, bool)> = [
            (BIN_VOLUME, BIN_DIR, true),
            (POLICY_VOLUME, POLICY_DIR, true),
            (TRUST_VOLUME, TRUST_DIR, true),
            (PLACEHOLDERS_VOLUME, PLACEHOLDERS_DIR, true),
        ]
        .into_iter()
        .collect();
        if data_plane_mounts != want {
            problems.push(format!(
                "{path}.volumeMounts: an agent container mounts exactly {BIN_VOLUME} at {BIN_DIR}, {POLICY_VOLUME} at {POLICY_DIR}, {TRUST_VOLUME} at {TRUST_DIR} and {PLACEHOLDERS_VOLUME} at {PLACEHOLDERS_DIR}, read-only, and nothing else under {MOUNT_ROOT} (never the CA key or the credentials)"
            ));
        }
        let context = container.security_context.as_ref();
        if context.and_then(|c| c.allow_privilege_escalation) != Some(false) {
            problems.push(format!(
                "{path}.securityContext.allowPrivilegeEscalation is not false"
            ));
        }
        let drops_all = context
            .and_then(|c| c.capabilities.as_ref())
            .and_then(|c| c.drop.as_ref())
            .is_some_and(|d| d.iter().any(|c| c == "ALL"));
        if !drops_all {
            problems.push(format!(
                "{path}.securityContext.capabilities.drop does not include ALL: an agent with NET_ADMIN or NET_RAW could undo the redirect"
            ));
        }
    }
    if spec
        .ephemeral_containers
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        problems.push(
            "spec.ephemeralContainers: a debug container runs without the sandbox's filesystem policy; debug a copy of the pod instead".to_string(),
        );
    }
    problems
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn data_plane() -> DataPlane {
        DataPlane {
            image: "ghcr.io/agentgate-dev/agentgate:test".into(),
            pull_policy: None,
            approvals: None,
            policy_stream: None,
            hold_timeout_seconds: 120,
        }
    }

    fn template(json: serde_json::Value) -> PodSpec {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_policy_configmap_names_its_sandbox_and_nothing_else_does() {
        for sandbox in ["triage-bot", "a", "bot-policy"] {
            let name = policy_config_map_name(sandbox);
            assert_eq!(policy_config_map_sandbox(&name), Some(sandbox));
        }
        assert_eq!(policy_config_map_sandbox("-policy"), None);
        assert_eq!(policy_config_map_sandbox("triage-bot"), None);
        assert_eq!(policy_config_map_sandbox("triage-bot-policies"), None);
    }

    #[test]
    fn the_built_pod_has_the_enforced_shape() {
        let spec = template(serde_json::json!({
            "volumes": [{"name": "work", "emptyDir": {}}],
            "containers": [{"name": "agent", "image": "bot", "command": ["/usr/local/bin/agent"],
                "args": ["--serve"], "env": [{"name": "HTTPS_PROXY", "value": "http://elsewhere"}, {"name": "A", "value": "1"}],
                "volumeMounts": [{"name": "work", "mountPath": "/sandbox"}],
                "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE", "NET_ADMIN"]}, "privileged": true}}]
        }));
        let pod = enforced_pod_spec("bot", &spec, &data_plane(), &[]).unwrap();
        assert_eq!(pod.share_process_namespace, Some(true));
        let init = pod.init_containers.as_ref().unwrap();
        assert_eq!(init[0].name, INIT_CONTAINER);
        assert_eq!(init[1].name, PROXY_CONTAINER);
        assert_eq!(init[1].restart_policy.as_deref(), Some("Always"));
        let agent = &pod.containers[0];
        assert_eq!(
            agent.command.as_ref().unwrap().join(" "),
            "/agentgate/bin/agentgate-exec --policy /agentgate/policy/policy.yaml --policy-mount /agentgate --proxy-uid 1337 --placeholders /agentgate/placeholders -- /usr/local/bin/agent"
        );
        assert_eq!(agent.args, Some(vec!["--serve".to_string()]));
        let env: Vec<(String, String)> = agent
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect();
        assert!(env.contains(&("A".into(), "1".into())));
        assert!(env.contains(&("HTTPS_PROXY".into(), "http://127.0.0.1:15080".into())));
        assert!(!env.contains(&("HTTPS_PROXY".into(), "http://elsewhere".into())));
        assert!(env.contains(&("NODE_EXTRA_CA_CERTS".into(), CA_BUNDLE_FILE.into())));
        let context = agent.security_context.as_ref().unwrap();
        assert_eq!(context.privileged, None);
        assert_eq!(
            context.capabilities.as_ref().unwrap().add,
            Some(vec!["NET_BIND_SERVICE".to_string()])
        );
        assert_eq!(pod.volumes.as_ref().unwrap().len(), 8);
        // Only the proxy writes the agent's CA bundle; the agent reads it.
        let trust = |c: &Container| {
            c.volume_mounts
                .iter()
                .flatten()
                .find(|m| m.name == TRUST_VOLUME)
                .map(|m| (m.mount_path.clone(), m.read_only))
        };
        assert_eq!(trust(&init[1]), Some((TRUST_DIR.to_string(), None)));
        assert_eq!(trust(agent), Some((TRUST_DIR.to_string(), Some(true))));
        assert_eq!(trust(&init[0]), None);
        assert!(CA_BUNDLE_FILE.starts_with(TRUST_DIR));
        // Only the proxy mounts the CA key.
        let mounts_ca = |c: &Container| {
            c.volume_mounts
                .iter()
                .flatten()
                .any(|m| m.name == CA_VOLUME)
        };
        assert!(mounts_ca(&init[1]));
        assert!(!mounts_ca(agent) && !mounts_ca(&init[0]));
        assert_eq!(
            shape_problems(&pod, "bot", &data_plane()),
            Vec::<String>::new()
        );
        // As the API server stores it: modes filled in.
        let mut stored = pod.clone();
        for volume in stored.volumes.iter_mut().flatten() {
            if let Some(c) = volume.config_map.as_mut() {
                c.default_mode = Some(420);
            }
            if let Some(s) = volume.secret.as_mut() {
                s.default_mode = Some(420);
            }
        }
        assert!(shape_problems(&stored, "bot", &data_plane()).is_empty());
        assert!(is_data_plane_container(&init[0], &data_plane()));
        assert!(!is_data_plane_container(agent, &data_plane()));
    }

    /// What the API server's ServiceAccount admission does to a Pod: the
    /// token volume, mounted into every container with no mount at the
    /// token's path.
    fn with_service_account_token(mut pod: PodSpec) -> PodSpec {
        let token = VolumeMount {
            name: "kube-api-access-x7k2p".into(),
            mount_path: SERVICE_ACCOUNT_TOKEN_DIR.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        };
        let inject = |c: &mut Container| {
            let mounts = c.volume_mounts.get_or_insert_with(Vec::new);
            if !mounts
                .iter()
                .any(|m| m.mount_path == SERVICE_ACCOUNT_TOKEN_DIR)
            {
                mounts.push(token.clone());
            }
        };
        pod.init_containers.iter_mut().flatten().for_each(inject);
        pod.containers.iter_mut().for_each(inject);
        pod.volumes.get_or_insert_with(Vec::new).push(Volume {
            name: "kube-api-access-x7k2p".into(),
            projected: Some(Default::default()),
            ..Volume::default()
        });
        pod
    }

    #[test]
    fn the_agents_token_reaches_the_agent_only_and_keeps_the_shape() {
        let spec = template(serde_json::json!({
            "containers": [{"name": "agent", "image": "bot", "command": ["/agent"]}]
        }));
        let built = enforced_pod_spec("bot", &spec, &data_plane(), &[]).unwrap();
        let stored = with_service_account_token(built);
        assert_eq!(
            shape_problems(&stored, "bot", &data_plane()),
            Vec::<String>::new()
        );
        let has_token = |c: &Container| {
            c.volume_mounts
                .iter()
                .flatten()
                .any(|m| m.name.starts_with("kube-api-access-"))
        };
        let init = stored.init_containers.as_ref().unwrap();
        assert!(!has_token(&init[0]) && !has_token(&init[1]));
        assert!(has_token(&stored.containers[0]));
        assert!(is_data_plane_container(&init[1], &data_plane()));
    }

    /// The example agent's Pod as built with `data_plane`, and as stored
    /// (with the API token the ServiceAccount admission adds), which the
    /// shape check admits.
    fn built_and_stored(data_plane: &DataPlane) -> (PodSpec, PodSpec) {
        let spec = template(serde_json::json!({
            "containers": [{"name": "agent", "image": "bot", "command": ["/agent"]}]
        }));
        let built = enforced_pod_spec("bot", &spec, data_plane, &[]).unwrap();
        let stored = with_service_account_token(built.clone());
        assert_eq!(
            shape_problems(&stored, "bot", data_plane),
            Vec::<String>::new()
        );
        (built, stored)
    }

    fn mounts(c: &Container) -> Vec<String> {
        c.volume_mounts
            .iter()
            .flatten()
            .map(|m| m.name.clone())
            .collect()
    }

    #[test]
    fn the_hold_token_reaches_the_proxy_only() {
        let approvals = DataPlane {
            approvals: Some("https://agentgate-webhook.ops.svc.cluster.local/v1/hold".into()),
            hold_timeout_seconds: 30,
            ..data_plane()
        };
        let (built, stored) = built_and_stored(&approvals);
        let proxy = &built.init_containers.as_ref().unwrap()[1];
        let command = proxy.command.as_ref().unwrap();
        assert!(command.contains(&"--approvals-token=/agentgate/approvals/token".to_string()));
        assert!(command.contains(&"--hold-timeout=30".to_string()));
        assert!(mounts(proxy).contains(&APPROVALS_VOLUME.to_string()));
        assert!(!mounts(&built.containers[0]).contains(&APPROVALS_VOLUME.to_string()));
        // Without the service, the Pod it built is not the one admitted.
        assert!(!shape_problems(&stored, "bot", &data_plane()).is_empty());

        // An agent mounting the token, or a volume of its own for that
        // audience, is refused.
        let mut leaked = stored.clone();
        leaked.containers[0]
            .volume_mounts
            .get_or_insert_with(Vec::new)
            .push(VolumeMount {
                name: APPROVALS_VOLUME.into(),
                mount_path: "/tmp/token".into(),
                ..VolumeMount::default()
            });
        assert!(
            shape_problems(&leaked, "bot", &approvals)
                .iter()
                .any(|p| p.contains("volumeMounts"))
        );
        let own = template(serde_json::json!({
            "volumes": [{"name": "mine", "projected": {"sources": [
                {"serviceAccountToken": {"audience": HOLD_AUDIENCE, "path": "t"}}]}}],
            "containers": [{"name": "agent", "image": "bot", "command": ["/agent"]}]
        }));
        let refused = enforced_pod_spec("bot", &own, &approvals, &[]).unwrap_err();
        assert!(
            refused.iter().any(|r| r.message.contains(HOLD_AUDIENCE)),
            "{refused:?}"
        );
    }

    #[test]
    fn the_policy_stream_token_and_pushed_updates_reach_the_proxy_only() {
        let delivery = DataPlane {
            policy_stream: Some(
                "https://agentgate-webhook.ops.svc.cluster.local/v1/policy/stream".into(),
            ),
            ..data_plane()
        };
        let (built, stored) = built_and_stored(&delivery);
        let proxy = &built.init_containers.as_ref().unwrap()[1];
        let command = proxy.command.as_ref().unwrap();
        for flag in [
            "--policy-stream=https://agentgate-webhook.ops.svc.cluster.local/v1/policy/stream",
            "--policy-stream-token=/agentgate/delivery/token",
            "--pushed-policy=/agentgate/pushed",
        ] {
            assert!(command.contains(&flag.to_string()), "{flag}");
        }
        for volume in [DELIVERY_VOLUME, PUSHED_VOLUME] {
            assert!(mounts(proxy).contains(&volume.to_string()), "{volume}");
            assert!(!mounts(&built.containers[0]).contains(&volume.to_string()));
        }
        let token = built
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == DELIVERY_VOLUME)
            .and_then(|v| v.projected.as_ref())
            .and_then(|p| p.sources.as_ref())
            .and_then(|s| s[0].service_account_token.as_ref())
            .and_then(|t| t.audience.clone());
        assert_eq!(token.as_deref(), Some(POLICY_AUDIENCE));
        // An agent mounting the pushed updates, or a volume of its own for
        // the policy audience, is refused.
        let mut leaked = stored.clone();
        leaked.containers[0]
            .volume_mounts
            .get_or_insert_with(Vec::new)
            .push(VolumeMount {
                name: PUSHED_VOLUME.into(),
                mount_path: "/tmp/pushed".into(),
                ..VolumeMount::default()
            });
        assert!(!shape_problems(&leaked, "bot", &delivery).is_empty());
        let own = template(serde_json::json!({
            "volumes": [{"name": "mine", "projected": {"sources": [
                {"serviceAccountToken": {"audience": POLICY_AUDIENCE, "path": "t"}}]}}],
            "containers": [{"name": "agent", "image": "bot", "command": ["/agent"]}]
        }));
        let refused = enforced_pod_spec("bot", &own, &delivery, &[]).unwrap_err();
        assert!(
            refused.iter().any(|r| r.message.contains(POLICY_AUDIENCE)),
            "{refused:?}"
        );
    }

    #[test]
    fn a_proxy_container_with_another_environment_is_not_the_data_plane() {
        let proxy = proxy_container(&data_plane());
        assert!(is_data_plane_container(&proxy, &data_plane()));
        let mut preloaded = proxy.clone();
        preloaded.env.get_or_insert_with(Vec::new).push(EnvVar {
            name: "LD_PRELOAD".into(),
            value: Some("/tmp/hook.so".into()),
            value_from: None,
        });
        assert!(!is_data_plane_container(&preloaded, &data_plane()));
        let mut retuned = proxy.clone();
        retuned.env = Some(vec![EnvVar {
            name: "MALLOC_CONF".into(),
            value: Some("narenas:64".into()),
            value_from: None,
        }]);
        assert!(!is_data_plane_container(&retuned, &data_plane()));
        let mut bare = proxy;
        bare.env = None;
        assert!(!is_data_plane_container(&bare, &data_plane()));
    }

    #[test]
    fn a_container_without_a_command_or_with_reserved_names_is_refused() {
        let spec = template(serde_json::json!({
            "volumes": [{"name": "agentgate-bin", "emptyDir": {}}],
            "containers": [{"name": "agent", "image": "bot",
                "volumeMounts": [{"name": "x", "mountPath": "/agentgate/bin/"}]}]
        }));
        let refusals = enforced_pod_spec("bot", &spec, &data_plane(), &[]).unwrap_err();
        let reasons: Vec<&str> = refusals.iter().map(|r| r.reason).collect();
        assert_eq!(reasons, ["ReservedName", "ReservedName", "CommandRequired"]);
        assert!(
            refusals[2]
                .message
                .starts_with("spec.template.spec.containers[0] (\"agent\") has no command"),
            "{}",
            refusals[2].message
        );
    }

    #[test]
    fn exec_handlers_unclean_mounts_and_the_ca_key_are_refused() {
        let spec = template(serde_json::json!({
            "volumes": [{"name": "keys", "secret": {"secretName": "bot-ca"}},
                        {"name": "more", "projected": {"sources": [{"secret": {"name": "bot-ca"}}]}}],
            "containers": [{"name": "agent", "image": "bot", "command": ["/agent"],
                "lifecycle": {"postStart": {"exec": {"command": ["/bin/sh"]}}},
                "livenessProbe": {"exec": {"command": ["/bin/true"]}},
                "volumeMounts": [{"name": "keys", "mountPath": "//agentgate/bin/agentgate-exec"},
                                 {"name": "more", "mountPath": "/./agentgate/policy"},
                                 {"name": "more", "mountPath": "/srv/../agentgate/ca"}]}]
        }));
        let refusals = enforced_pod_spec("bot", &spec, &data_plane(), &[]).unwrap_err();
        let lines: Vec<(&str, &str)> = refusals
            .iter()
            .map(|r| (r.reason, r.message.split(' ').next().unwrap()))
            .collect();
        assert_eq!(
            lines,
            [
                ("ReservedName", "spec.template.spec.volumes[0]"),
                ("ReservedName", "spec.template.spec.volumes[1]"),
                (
                    "ReservedName",
                    "spec.template.spec.containers[0].volumeMounts[0].mountPath"
                ),
                (
                    "ReservedName",
                    "spec.template.spec.containers[0].volumeMounts[1].mountPath"
                ),
                (
                    "ReservedName",
                    "spec.template.spec.containers[0].volumeMounts[2].mountPath"
                ),
                (
                    "ExecHandler",
                    "spec.template.spec.containers[0].lifecycle.postStart"
                ),
                (
                    "ExecHandler",
                    "spec.template.spec.containers[0].livenessProbe"
                ),
            ]
        );
        assert_eq!(clean_path("/srv/../agentgate//ca/."), "/agentgate/ca");
        assert!(under_mount_root("/"));
        assert!(!under_mount_root("/agentgate-data"));
        // The same in a stored pod: the built pod with an exec hook added.
        let plain = template(serde_json::json!({
            "containers": [{"name": "agent", "image": "bot", "command": ["/agent"]}]
        }));
        let mut built = enforced_pod_spec("bot", &plain, &data_plane(), &[]).unwrap();
        built.containers[0].lifecycle = spec.containers[0].lifecycle.clone();
        built
            .volumes
            .as_mut()
            .unwrap()
            .push(spec.volumes.as_ref().unwrap()[0].clone());
        let problems = shape_problems(&built, "bot", &data_plane());
        assert_eq!(problems.len(), 2, "{problems:?}");
    }

    fn github_credential(file: Option<&str>) -> Credential {
        serde_json::from_value(serde_json::json!({
            "name": "github-token",
            "secretRef": {"name": "github", "key": "token"},
            "placeholder": {"env": "GITHUB_TOKEN", "file": file},
            "attach": {"header": {"name": "Authorization", "format": "Bearer {}"}},
        }))
        .unwrap()
    }

    #[test]
    fn credentials_reach_the_proxy_alone_and_placeholders_the_agent() {
        let spec = template(serde_json::json!({
            "containers": [{"name": "agent", "image": "bot", "command": ["/agent"]}]
        }));
        let credentials = [github_credential(Some("/home/agent/.github-token"))];
        let pod = enforced_pod_spec("bot", &spec, &data_plane(), &credentials).unwrap();
        assert!(shape_problems(&pod, "bot", &data_plane()).is_empty());
        assert!(credential_exposures(&pod, &credentials, "spec").is_empty());
        let volume = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == CREDENTIALS_VOLUME)
            .unwrap();
        let source = volume.projected.as_ref().unwrap().sources.as_ref().unwrap()[0]
            .secret
            .clone()
            .unwrap();
        assert_eq!(source.name, "github");
        assert_eq!(source.optional, Some(true));
        assert_eq!(source.items.unwrap()[0].path, "github-token");
        // Only the proxy mounts the secrets.
        let mounting: Vec<&str> = pod
            .init_containers
            .iter()
            .flatten()
            .chain(&pod.containers)
            .filter(|c| {
                c.volume_mounts
                    .iter()
                    .flatten()
                    .any(|m| m.name == CREDENTIALS_VOLUME)
            })
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(mounting, [PROXY_CONTAINER]);
        // The agent sees its file placeholder, one file, read-only.
        let agent = &pod.containers[0];
        assert!(agent.volume_mounts.iter().flatten().any(|m| {
            m.name == PLACEHOLDERS_VOLUME
                && m.mount_path == "/home/agent/.github-token"
                && m.sub_path.as_deref() == Some("github-token")
                && m.read_only == Some(true)
        }));
        // An agent container that mounts the secrets is out of shape.
        let mut leaked = pod.clone();
        leaked.containers[0]
            .volume_mounts
            .as_mut()
            .unwrap()
            .push(mount(CREDENTIALS_VOLUME, "/tmp/creds"));
        assert_eq!(shape_problems(&leaked, "bot", &data_plane()).len(), 1);
        // A template that hands the Secret to the agent is refused, by
        // volume or by environment.
        let by_volume = template(serde_json::json!({
            "containers": [{"name": "agent", "image": "bot", "command": ["/agent"],
                "volumeMounts": [{"name": "gh", "mountPath": "/gh"}]}],
            "volumes": [{"name": "gh", "secret": {"secretName": "github"}}]
        }));
        let refused =
            enforced_pod_spec("bot", &by_volume, &data_plane(), &credentials).unwrap_err();
        assert_eq!(refused[0].reason, "CredentialExposed");
        assert!(refused[0].message.contains("spec.template.spec.volumes[0]"));
        let by_env = template(serde_json::json!({
            "containers": [{"name": "agent", "image": "bot", "command": ["/agent"],
                "env": [{"name": "GH", "valueFrom": {"secretKeyRef": {"name": "github", "key": "token"}}}],
                "envFrom": [{"secretRef": {"name": "github"}}]}]
        }));
        let exposures = credential_exposures(&by_env, &credentials, "spec");
        assert_eq!(exposures.len(), 2, "{exposures:?}");
        assert!(exposures[0].starts_with("spec.containers[0].env[0] (GH) reads Secret \"github\""));
        // Another Secret is none of the data plane's business.
        assert!(credential_exposures(&by_env, &[], "spec").is_empty());
    }

    #[test]
    fn a_pod_outside_the_shape_is_named_field_by_field() {
        let bare = template(serde_json::json!({
            "containers": [{"name": "agent", "image": "bot", "command": ["/agent"]}]
        }));
        let problems = shape_problems(&bare, "bot", &data_plane());
        let fields: Vec<&str> = problems
            .iter()
            .map(|p| p.split(' ').next().unwrap())
            .collect();
        assert_eq!(
            fields,
            [
                "spec.shareProcessNamespace",
                "spec.initContainers[0]",
                "spec.initContainers[1]",
                "spec.volumes:",
                "spec.volumes:",
                "spec.volumes:",
                "spec.volumes:",
                "spec.volumes:",
                "spec.volumes:",
                "spec.volumes:",
                "spec.containers[0].command",
                "spec.containers[0].volumeMounts:",
                "spec.containers[0].securityContext.allowPrivilegeEscalation",
                "spec.containers[0].securityContext.capabilities.drop",
            ]
        );
        // A built pod whose proxy image was swapped, whose agent mounts the
        // CA key, or whose policy volume names another sandbox's ConfigMap.
        let spec = template(serde_json::json!({
            "containers": [{"name": "agent", "image": "bot", "command": ["/agent"]}]
        }));
        let built = enforced_pod_spec("bot", &spec, &data_plane(), &[]).unwrap();
        let mut swapped = built.clone();
        swapped.init_containers.as_mut().unwrap()[1].image = Some("evil/proxy".into());
        assert_eq!(shape_problems(&swapped, "bot", &data_plane()).len(), 1);
        let mut key = built.clone();
        key.containers[0]
            .volume_mounts
            .as_mut()
            .unwrap()
            .push(mount(CA_VOLUME, "/keys"));
        assert_eq!(shape_problems(&key, "bot", &data_plane()).len(), 1);
        assert_eq!(shape_problems(&built, "other", &data_plane()).len(), 2);
    }
}
