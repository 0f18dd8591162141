//! The shape of a sandbox's agent Pod (docs/design.md §3, §10), pure: what the
//! operator builds from `spec.template`, and the template fields that would
//! let an agent step around the enforcement point (host namespaces,
//! privilege, host files, another identity's token). The webhook refuses
//! such templates; the reconciler neither runs them nor credits them with
//! severed findings.

use std::collections::BTreeSet;

use kube_core::ResourceExt;

use k8s_openapi::api::core::v1::{
    AppArmorProfile, Container, Pod, PodSpec, SELinuxOptions, SeccompProfile, SecurityContext,
    Volume, WindowsSecurityContextOptions,
};

use agentgate_api::crd::{AgentSandbox, AgentSandboxSpec};

/// The only capability the Pod Security "restricted" profile lets a
/// container add.
pub const RESTRICTED_ADDABLE_CAPABILITIES: [&str; 1] = ["NET_BIND_SERVICE"];

/// The images of a sandbox's `spec.template`, or `None` without a template
/// (then the sandbox runs no pod).
pub fn template_images(spec: &AgentSandboxSpec) -> Option<Vec<String>> {
    spec.template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .map(spec_images)
}

/// Every container image of a pod spec, unique, in order of appearance.
pub fn spec_images(spec: &PodSpec) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| c.image.as_ref());
    let regular = spec.containers.iter().map(|c| c.image.as_ref());
    let ephemeral = spec
        .ephemeral_containers
        .iter()
        .flatten()
        .map(|c| c.image.as_ref());
    init.chain(regular)
        .chain(ephemeral)
        .map(|i| i.cloned().unwrap_or_default())
        .filter(|i| seen.insert(i.clone()))
        .collect()
}

/// The sandbox a pod names as its controller: `(name, uid)`.
pub fn owning_sandbox(pod: &Pod) -> Option<(String, String)> {
    pod.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| {
            o.kind == "AgentSandbox"
                && o.api_version.starts_with("agentgate.dev/")
                && o.controller == Some(true)
        })
        .map(|o| (o.name.clone(), o.uid.clone()))
}

/// The ServiceAccount the sandbox's Pod runs as: the template's
/// `serviceAccountName`, else the sandbox's `agentServiceAccount` (the
/// operator fills it in, so the agent's pod acts as the agent).
pub fn pod_service_account(spec: &AgentSandboxSpec) -> String {
    spec.template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .and_then(|p| {
            p.service_account_name
                .clone()
                .or_else(|| p.service_account.clone())
        })
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| spec.agent_service_account.clone())
}

/// The user name of ServiceAccount `name` in `namespace`.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// The ServiceAccounts (as user names) that act for a sandbox's agent: its
/// `agentServiceAccount` and the account its pod runs as.
pub fn agent_identities(sandbox: &AgentSandbox) -> BTreeSet<String> {
    let namespace = sandbox.namespace().unwrap_or_default();
    [
        sandbox.spec.agent_service_account.clone(),
        pod_service_account(&sandbox.spec),
    ]
    .into_iter()
    .filter(|name| !name.is_empty())
    .map(|name| service_account_user(&namespace, &name))
    .collect()
}

/// Every way the template steps outside the enforced shape, one line per
/// field, each naming its path under `spec.template.spec`. Empty: the
/// template is in shape (or there is none).
pub fn template_escapes(spec: &AgentSandboxSpec) -> Vec<String> {
    let Some(pod) = spec.template.as_ref().and_then(|t| t.spec.as_ref()) else {
        return Vec::new();
    };
    let mut problems = pod_escapes(pod, "spec.template.spec", &|_| false);
    let annotations = spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref());
    for (key, value) in annotations.into_iter().flatten() {
        if key.starts_with("container.apparmor.security.beta.kubernetes.io/")
            && value == "unconfined"
        {
            problems.push(format!(
                "spec.template.metadata.annotations[{key:?}] is unconfined: use runtime/default"
            ));
        }
    }
    let account = pod_service_account(spec);
    if account != spec.agent_service_account {
        if pod.automount_service_account_token != Some(false) {
            problems.push(format!(
                "spec.template.spec.serviceAccountName {account:?} is not the sandbox's agentServiceAccount {:?} and its token would be mounted; run as {:?} or set automountServiceAccountToken: false",
                spec.agent_service_account, spec.agent_service_account
            ));
        }
        for (i, volume) in pod.volumes.iter().flatten().enumerate() {
            let sources = volume.projected.as_ref().and_then(|p| p.sources.as_ref());
            if sources
                .into_iter()
                .flatten()
                .any(|s| s.service_account_token.is_some())
            {
                problems.push(format!(
                    "spec.template.spec.volumes[{i}] ({:?}) projects a token of {account:?}, which is not the sandbox's agentServiceAccount {:?}",
                    volume.name, spec.agent_service_account
                ));
            }
        }
    }
    problems
}

/// The user id of the sandbox's egress proxy (docs/design.md §10): its
/// connections are not redirected, so no agent container may run as it.
pub const PROXY_UID: i64 = 1337;

/// Volume types a sandbox's pod may use (the Pod Security "restricted"
/// list): everything else is node storage or a network mount made by the
/// kubelet, outside the sandbox's file and egress policy.
pub const ALLOWED_VOLUME_TYPES: [&str; 8] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// Sysctls the Pod Security "baseline" profile calls safe.
pub const SAFE_SYSCTLS: [&str; 10] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// SELinux types the Pod Security "baseline" profile allows.
const SELINUX_TYPES: [&str; 4] = [
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

/// The escapes of a pod spec, with field paths under `prefix`: host
/// namespaces, privilege (privileged, privilege escalation, capabilities,
/// unmasked /proc, unconfined seccomp or AppArmor, SELinux types, Windows
/// host processes, unsafe sysctls), the proxy's uid, host ports and
/// volume types beyond the restricted profile's. The Pod admission applies
/// the same check to the operator's Pod before it lends the sandbox's proofs,
/// skipping the containers `trusted` vouches for (the data plane's own,
/// which need the proxy's uid and NET_ADMIN).
pub fn pod_escapes(
    pod: &PodSpec,
    prefix: &str,
    trusted: &dyn Fn(&Container) -> bool,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (flag, field) in [
        (pod.host_network, "hostNetwork"),
        (pod.host_pid, "hostPID"),
        (pod.host_ipc, "hostIPC"),
    ] {
        if flag == Some(true) {
            problems.push(format!(
                "{prefix}.{field} is true: the agent would share the node's namespace and bypass the sandbox"
            ));
        }
    }
    // The DNS servers are the one destination init-net lets through
    // unredirected, and the proxy resolves every granted name: neither may
    // be chosen by the template.
    if pod.dns_policy.as_deref() == Some("None") {
        problems.push(format!(
            "{prefix}.dnsPolicy is None: the pod's resolvers would be the template's, and DNS to them bypasses the proxy; use ClusterFirst or Default"
        ));
    }
    if pod
        .dns_config
        .as_ref()
        .and_then(|c| c.nameservers.as_ref())
        .is_some_and(|n| !n.is_empty())
    {
        problems.push(format!(
            "{prefix}.dnsConfig.nameservers is set: DNS to those servers would bypass the proxy"
        ));
    }
    if pod.host_aliases.as_ref().is_some_and(|a| !a.is_empty()) {
        problems.push(format!(
            "{prefix}.hostAliases is set: /etc/hosts entries would point granted names elsewhere"
        ));
    }
    for (i, volume) in pod.volumes.iter().flatten().enumerate() {
        let kinds = volume_types(volume);
        for kind in kinds
            .iter()
            .filter(|k| !ALLOWED_VOLUME_TYPES.contains(&k.as_str()))
        {
            problems.push(format!(
                "{prefix}.volumes[{i}] ({:?}) is a {kind} volume: only {} volumes keep the agent's files and connections inside the sandbox",
                volume.name,
                ALLOWED_VOLUME_TYPES.join(", ")
            ));
        }
    }
    if let Some(context) = &pod.security_context {
        let path = format!("{prefix}.securityContext");
        check_identity(context.run_as_user, &path, &mut problems);
        check_profiles(
            Profiles {
                seccomp: context.seccomp_profile.as_ref(),
                app_armor: context.app_armor_profile.as_ref(),
                se_linux: context.se_linux_options.as_ref(),
                windows: context.windows_options.as_ref(),
            },
            &path,
            &mut problems,
        );
        for (i, sysctl) in context.sysctls.iter().flatten().enumerate() {
            if !SAFE_SYSCTLS.contains(&sysctl.name.as_str()) {
                problems.push(format!(
                    "{path}.sysctls[{i}] {:?} is not a safe sysctl",
                    sysctl.name
                ));
            }
        }
    }
    let init = pod.init_containers.iter().flatten().enumerate();
    let regular = pod.containers.iter().enumerate();
    for (list, containers) in [
        ("initContainers", init.collect::<Vec<_>>()),
        ("containers", regular.collect::<Vec<_>>()),
    ] {
        for (i, container) in containers.into_iter().filter(|(_, c)| !trusted(c)) {
            let path = format!("{prefix}.{list}[{i}]");
            check_security_context(container.security_context.as_ref(), &path, &mut problems);
            let host_ports = container.ports.iter().flatten().map(|p| p.host_port);
            check_host_ports(host_ports, &path, &mut problems);
        }
    }
    for (i, container) in pod.ephemeral_containers.iter().flatten().enumerate() {
        let path = format!("{prefix}.ephemeralContainers[{i}]");
        check_security_context(container.security_context.as_ref(), &path, &mut problems);
        let host_ports = container.ports.iter().flatten().map(|p| p.host_port);
        check_host_ports(host_ports, &path, &mut problems);
    }
    problems
}

/// The type(s) of a volume: its fields other than `name`.
fn volume_types(volume: &Volume) -> Vec<String> {
    match serde_json::to_value(volume) {
        Ok(serde_json::Value::Object(fields)) => fields
            .keys()
            .filter(|k| k.as_str() != "name")
            .cloned()
            .collect(),
        // Cannot be read: say so rather than let it through.
        _ => vec!["unreadable".to_string()],
    }
}

fn check_host_ports(
    ports: impl Iterator<Item = Option<i32>>,
    path: &str,
    problems: &mut Vec<String>,
) {
    for (j, port) in ports.enumerate() {
        if port.is_some_and(|p| p != 0) {
            problems.push(format!(
                "{path}.ports[{j}].hostPort is set: a host port is reachable outside the sandbox's network policy"
            ));
        }
    }
}

fn check_identity(run_as_user: Option<i64>, path: &str, problems: &mut Vec<String>) {
    if run_as_user == Some(PROXY_UID) {
        problems.push(format!(
            "{path}.runAsUser is {PROXY_UID}, the egress proxy's uid, whose connections are not redirected through the proxy"
        ));
    }
}

/// The confinement settings a pod and a container security context share.
struct Profiles<'a> {
    seccomp: Option<&'a SeccompProfile>,
    app_armor: Option<&'a AppArmorProfile>,
    se_linux: Option<&'a SELinuxOptions>,
    windows: Option<&'a WindowsSecurityContextOptions>,
}

fn check_profiles(profiles: Profiles<'_>, path: &str, problems: &mut Vec<String>) {
    let seccomp = profiles.seccomp.map(|p| p.type_.as_str());
    let app_armor = profiles.app_armor.map(|p| p.type_.as_str());
    let se_linux_type = profiles.se_linux.and_then(|o| o.type_.as_deref());
    let host_process = profiles.windows.and_then(|w| w.host_process);
    if seccomp == Some("Unconfined") {
        problems.push(format!(
            "{path}.seccompProfile.type is Unconfined: use RuntimeDefault or Localhost"
        ));
    }
    if app_armor == Some("Unconfined") {
        problems.push(format!(
            "{path}.appArmorProfile.type is Unconfined: use RuntimeDefault or Localhost"
        ));
    }
    if let Some(kind) = se_linux_type.filter(|t| !t.is_empty() && !SELINUX_TYPES.contains(t)) {
        problems.push(format!(
            "{path}.seLinuxOptions.type {kind:?} is not one of {}",
            SELINUX_TYPES.join(", ")
        ));
    }
    if host_process == Some(true) {
        problems.push(format!(
            "{path}.windowsOptions.hostProcess is true: a host process is outside the sandbox"
        ));
    }
}

fn check_security_context(
    context: Option<&SecurityContext>,
    path: &str,
    problems: &mut Vec<String>,
) {
    let Some(context) = context else {
        return;
    };
    let path = format!("{path}.securityContext");
    let path = path.as_str();
    if context.privileged == Some(true) {
        problems.push(format!(
            "{path}.privileged is true: a privileged container can leave the sandbox"
        ));
    }
    if context.allow_privilege_escalation == Some(true) {
        problems.push(format!(
            "{path}.allowPrivilegeEscalation is true: the restricted profile requires false"
        ));
    }
    if context.proc_mount.as_deref() == Some("Unmasked") {
        problems.push(format!(
            "{path}.procMount is Unmasked: the host's /proc paths would be visible"
        ));
    }
    check_identity(context.run_as_user, path, problems);
    check_profiles(
        Profiles {
            seccomp: context.seccomp_profile.as_ref(),
            app_armor: context.app_armor_profile.as_ref(),
            se_linux: context.se_linux_options.as_ref(),
            windows: context.windows_options.as_ref(),
        },
        path,
        problems,
    );
    let added = context
        .capabilities
        .as_ref()
        .and_then(|c| c.add.as_ref())
        .into_iter()
        .flatten();
    for capability in added {
        let bare = capability.trim_start_matches("CAP_");
        if !RESTRICTED_ADDABLE_CAPABILITIES.contains(&bare) {
            problems.push(format!(
                "{path}.capabilities.add {capability:?} is beyond the restricted profile (only NET_BIND_SERVICE may be added)"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn spec(template: serde_json::Value) -> AgentSandboxSpec {
        serde_json::from_value(serde_json::json!({
            "agentServiceAccount": "bot",
            "template": template,
        }))
        .unwrap()
    }

    #[test]
    fn an_ordinary_template_is_in_shape() {
        let s = spec(
            serde_json::json!({"spec": {"containers": [{"name": "a", "image": "x",
            "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}]}}),
        );
        assert_eq!(template_escapes(&s), Vec::<String>::new());
        assert_eq!(pod_service_account(&s), "bot");
        assert!(template_escapes(&spec(serde_json::Value::Null)).is_empty());
    }

    #[test]
    fn every_escape_is_named_with_its_field_path() {
        let s = spec(serde_json::json!({"spec": {
            "hostNetwork": true, "hostPID": true, "hostIPC": true,
            "serviceAccountName": "deployer",
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}, {"name": "cache", "emptyDir": {}}],
            "initContainers": [{"name": "i", "image": "x", "securityContext": {"capabilities": {"add": ["CAP_SYS_ADMIN"]}}}],
            "containers": [{"name": "a", "image": "x", "securityContext": {"privileged": true, "allowPrivilegeEscalation": true}}]
        }}));
        let problems = template_escapes(&s);
        let fields: Vec<&str> = problems
            .iter()
            .map(|p| p.split(' ').next().unwrap())
            .collect();
        assert_eq!(
            fields,
            [
                "spec.template.spec.hostNetwork",
                "spec.template.spec.hostPID",
                "spec.template.spec.hostIPC",
                "spec.template.spec.volumes[0]",
                "spec.template.spec.initContainers[0].securityContext.capabilities.add",
                "spec.template.spec.containers[0].securityContext.privileged",
                "spec.template.spec.containers[0].securityContext.allowPrivilegeEscalation",
                "spec.template.spec.serviceAccountName",
            ]
        );
        // The rest of the restricted profile, and the proxy's uid.
        let more = spec(serde_json::json!({
            "metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/a": "unconfined"}},
            "spec": {
            "securityContext": {"runAsUser": 1337, "seccompProfile": {"type": "Unconfined"},
                "sysctls": [{"name": "kernel.msgmax", "value": "1"}]},
            "volumes": [{"name": "share", "nfs": {"server": "10.0.0.1", "path": "/"}}],
            "containers": [{"name": "a", "image": "x", "ports": [{"containerPort": 80, "hostPort": 80}],
                "securityContext": {"procMount": "Unmasked", "seLinuxOptions": {"type": "spc_t"}}}]
        }}));
        let fields: Vec<String> = template_escapes(&more)
            .iter()
            .map(|p| p.split(' ').next().unwrap().to_string())
            .collect();
        assert_eq!(
            fields,
            [
                "spec.template.spec.volumes[0]",
                "spec.template.spec.securityContext.runAsUser",
                "spec.template.spec.securityContext.seccompProfile.type",
                "spec.template.spec.securityContext.sysctls[0]",
                "spec.template.spec.containers[0].securityContext.procMount",
                "spec.template.spec.containers[0].securityContext.seLinuxOptions.type",
                "spec.template.spec.containers[0].ports[0].hostPort",
                "spec.template.metadata.annotations[\"container.apparmor.security.beta.kubernetes.io/a\"]",
            ]
        );
        // A projected token of another account counts as mounting it.
        let projected = spec(
            serde_json::json!({"spec": {"serviceAccountName": "deployer",
            "automountServiceAccountToken": false, "containers": [{"name": "a", "image": "x"}],
            "volumes": [{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]}}),
        );
        assert_eq!(template_escapes(&projected).len(), 1);
        // Another account is fine without its token.
        let quiet = spec(
            serde_json::json!({"spec": {"serviceAccountName": "deployer",
            "automountServiceAccountToken": false, "containers": [{"name": "a", "image": "x"}]}}),
        );
        assert!(template_escapes(&quiet).is_empty());
        assert_eq!(pod_service_account(&quiet), "deployer");
        // DNS the template chooses would be the one unredirected way out.
        let dns = spec(serde_json::json!({"spec": {"dnsPolicy": "None",
            "dnsConfig": {"nameservers": ["203.0.113.9"]},
            "hostAliases": [{"ip": "203.0.113.9", "hostnames": ["api.github.com"]}],
            "containers": [{"name": "a", "image": "x"}]}}));
        let fields: Vec<String> = template_escapes(&dns)
            .iter()
            .map(|p| p.split(' ').next().unwrap().to_string())
            .collect();
        assert_eq!(
            fields,
            [
                "spec.template.spec.dnsPolicy",
                "spec.template.spec.dnsConfig.nameservers",
                "spec.template.spec.hostAliases",
            ]
        );
    }
}
