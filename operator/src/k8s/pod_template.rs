//! The shape of a sandbox's agent Pod (DESIGN.md §3, §10), pure: what the
//! operator builds from `spec.template`, and the template fields that would
//! let an agent step around the enforcement point (host namespaces,
//! privilege, host files, another identity's token). The webhook refuses
//! such templates; the reconciler neither runs them nor credits them with
//! severed findings.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{PodSpec, SecurityContext};

use crate::k8s::crd::AgentSandboxSpec;

/// The label the operator puts on everything it creates for a sandbox.
pub const SANDBOX_LABEL: &str = "agentgate.dev/sandbox";

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

/// Every way the template steps outside the enforced shape, one line per
/// field, each naming its path under `spec.template.spec`. Empty: the
/// template is in shape (or there is none).
pub fn template_escapes(spec: &AgentSandboxSpec) -> Vec<String> {
    let Some(pod) = spec.template.as_ref().and_then(|t| t.spec.as_ref()) else {
        return Vec::new();
    };
    let mut problems = pod_escapes(pod, "spec.template.spec");
    let account = pod_service_account(spec);
    if account != spec.agent_service_account && pod.automount_service_account_token != Some(false) {
        problems.push(format!(
            "spec.template.spec.serviceAccountName {account:?} is not the sandbox's agentServiceAccount {:?} and its token would be mounted; run as {:?} or set automountServiceAccountToken: false",
            spec.agent_service_account, spec.agent_service_account
        ));
    }
    problems
}

/// The host-namespace, privilege and host-file escapes of a pod spec, with
/// field paths under `prefix`. The Pod admission applies the same check to
/// the operator's Pod before it lends the sandbox's proofs.
pub fn pod_escapes(pod: &PodSpec, prefix: &str) -> Vec<String> {
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
    for (i, volume) in pod.volumes.iter().flatten().enumerate() {
        if volume.host_path.is_some() {
            problems.push(format!(
                "{prefix}.volumes[{i}] ({:?}) is a hostPath volume: node files are outside the sandbox's filesystem policy",
                volume.name
            ));
        }
    }
    let init = pod.init_containers.iter().flatten().enumerate();
    let regular = pod.containers.iter().enumerate();
    for (list, containers) in [
        ("initContainers", init.collect::<Vec<_>>()),
        ("containers", regular.collect::<Vec<_>>()),
    ] {
        for (i, container) in containers {
            let path = format!("{prefix}.{list}[{i}]");
            check_security_context(container.security_context.as_ref(), &path, &mut problems);
        }
    }
    for (i, container) in pod.ephemeral_containers.iter().flatten().enumerate() {
        let path = format!("{prefix}.ephemeralContainers[{i}]");
        check_security_context(container.security_context.as_ref(), &path, &mut problems);
    }
    problems
}

fn check_security_context(
    context: Option<&SecurityContext>,
    path: &str,
    problems: &mut Vec<String>,
) {
    let Some(context) = context else {
        return;
    };
    if context.privileged == Some(true) {
        problems.push(format!(
            "{path}.securityContext.privileged is true: a privileged container can leave the sandbox"
        ));
    }
    if context.allow_privilege_escalation == Some(true) {
        problems.push(format!(
            "{path}.securityContext.allowPrivilegeEscalation is true: the restricted profile requires false"
        ));
    }
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
                "{path}.securityContext.capabilities.add {capability:?} is beyond the restricted profile (only NET_BIND_SERVICE may be added)"
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
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
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
        // Another account is fine without its token.
        let quiet = spec(
            serde_json::json!({"spec": {"serviceAccountName": "deployer",
            "automountServiceAccountToken": false, "containers": [{"name": "a", "image": "x"}]}}),
        );
        assert!(template_escapes(&quiet).is_empty());
        assert_eq!(pod_service_account(&quiet), "deployer");
    }
}
