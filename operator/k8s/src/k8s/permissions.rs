//! Every Kubernetes permission the operator and its webhook use, with the
//! code that uses it. The chart's RBAC (charts/agentgate/templates/
//! rbac-controller.yaml) must grant exactly these: the e2e test
//! `chart_rbac` renders the chart and compares both ways, and the e2e
//! suites run the operator as the chart's ServiceAccount, so a call the
//! chart does not allow fails there.

/// Where a permission is granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// A ClusterRole (all namespaces, or cluster-scoped objects).
    Cluster,
    /// A Role in the release namespace.
    ReleaseNamespace,
}

/// When a permission is needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needed {
    /// Always.
    Always,
    /// Only with self-managed serving certificates (not cert-manager).
    SelfManagedCertificates,
}

/// One rule: verbs on a resource of an API group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permission {
    /// API group (`""` for core).
    pub group: &'static str,
    /// Resource, with `/subresource` where it applies.
    pub resource: &'static str,
    /// Verbs.
    pub verbs: &'static [&'static str],
    /// Restricted to these object names (empty: any). `"$webhook"` stands
    /// for the release's ValidatingWebhookConfiguration.
    pub names: &'static [&'static str],
    /// ClusterRole or release-namespace Role.
    pub scope: Scope,
    /// When it is needed.
    pub needed: Needed,
    /// Which code uses it, and why.
    pub used_by: &'static str,
}

const fn cluster(
    group: &'static str,
    resource: &'static str,
    verbs: &'static [&'static str],
    used_by: &'static str,
) -> Permission {
    Permission {
        group,
        resource,
        verbs,
        names: &[],
        scope: Scope::Cluster,
        needed: Needed::Always,
        used_by,
    }
}

/// What the operator (controllers and webhook, one ServiceAccount) uses.
/// SelfSubjectReview is absent: every authenticated identity may create
/// one (the default ClusterRole `system:basic-user`).
pub const OPERATOR_PERMISSIONS: &[Permission] = &[
    cluster(
        "agentgate.dev",
        "maximumpolicies",
        &["list", "watch"],
        "the MaximumPolicy controller and the watches of the others; the commit re-reads every maximum with a list; the webhook's cache",
    ),
    cluster(
        "agentgate.dev",
        "agentsandboxes",
        &["get", "list", "watch"],
        "the sandbox controller and the watches of the others; the proposal commit re-reads its sandbox; the webhook's cache",
    ),
    cluster(
        "agentgate.dev",
        "policyproposals",
        &["get", "list", "watch"],
        "the proposal controller; the sandbox controller re-reads each applied proposal of its commit record",
    ),
    cluster(
        "agentgate.dev",
        "agentscans",
        &["list", "watch"],
        "the scan controller; the sandbox controller assesses its images against every scan; the webhook's cache",
    ),
    cluster(
        "agentgate.dev",
        "maximumpolicies/status",
        &["patch"],
        "Consistent and governed-sandbox status (server-side apply)",
    ),
    cluster(
        "agentgate.dev",
        "agentsandboxes/status",
        &["update", "patch"],
        "the commit: effectivePolicy and revision with the resourceVersion as precondition (update); a Pod's report of the policy it enforces, status.pods and Enforced, with the same precondition (merge patch, /v1/policy/applied)",
    ),
    cluster(
        "agentgate.dev",
        "policyproposals/status",
        &["patch"],
        "the proposal's verdict and phase (server-side apply)",
    ),
    cluster(
        "agentgate.dev",
        "agentscans/status",
        &["patch"],
        "the scan's recomputed findings (server-side apply)",
    ),
    cluster(
        "agentgate.dev",
        "agentsandboxes/finalizers",
        &["update"],
        "not called: the OwnerReferencesPermissionEnforcement admission plugin asks it of whoever sets blockOwnerDeletion on a sandbox's Pod, ConfigMap, Secret, NetworkPolicy or ServiceAccount",
    ),
    cluster(
        "",
        "pods",
        &["get", "list", "watch", "create"],
        "the sandbox's enforced Pod: created once, read back to adopt or report it, watched as owned; the running ones' addresses, whose proxies' refusals become Events; its uid, checked against the token of a policy report",
    ),
    cluster(
        "",
        "configmaps",
        &["get", "list", "watch", "create", "patch"],
        "the sandbox's policy ConfigMap (server-side apply, which needs create for a new object; a metadata get skips applying unchanged content), watched as owned",
    ),
    cluster(
        "",
        "secrets",
        &["get", "create", "update"],
        "each sandbox's CA Secret <sandbox>-ca, read and rotated by name (no list or watch)",
    ),
    cluster(
        "",
        "serviceaccounts",
        &["get", "list", "watch", "create"],
        "each sandbox's agentServiceAccount, created when missing and owned by the sandbox (a metadata get decides; never update or delete: one it did not create is used as is, and the garbage collector removes its own), watched as owned",
    ),
    cluster(
        "networking.k8s.io",
        "networkpolicies",
        &["get", "list", "watch", "create", "patch"],
        "each sandbox's egress NetworkPolicy (server-side apply, which needs create for a new object; unchanged content is not applied again), watched as owned (metadata only)",
    ),
    cluster(
        "",
        "namespaces",
        &["get", "list", "watch"],
        "namespace labels for MaximumPolicy selectors: the commit's fresh read, the maximum controller's list, the watches and the webhook's cache",
    ),
    cluster(
        "events.k8s.io",
        "events",
        &["create", "patch"],
        "Events for every decision (kube-runtime's Recorder creates, then patches a repeated Event's series)",
    ),
    cluster(
        "openreports.io",
        "reports",
        &["create", "patch"],
        "findings published as OpenReports Reports (server-side apply, which needs create for a new object) where that CRD exists",
    ),
    cluster(
        "authorization.k8s.io",
        "subjectaccessreviews",
        &["create"],
        "the approve verb of reviewers, agent identities' powers, template authors, /v1/decide readers",
    ),
    cluster(
        "authentication.k8s.io",
        "tokenreviews",
        &["create"],
        "/v1/decide callers' and /v1/hold callers' (the sandbox proxies') bearer tokens",
    ),
    cluster(
        "agentgate.dev",
        "heldcalls",
        &["create", "get", "list", "watch"],
        "/v1/hold: the HeldCall a sandbox's proxy puts to a person, the pending ones of its sandbox counted, and a watch of each until it is decided",
    ),
    cluster(
        "agentgate.dev",
        "heldcalls/status",
        &["update", "patch"],
        "/v1/hold: Expired with the resourceVersion as precondition, then the answer the proxy got (server-side apply)",
    ),
    Permission {
        group: "admissionregistration.k8s.io",
        resource: "validatingwebhookconfigurations",
        verbs: &["get"],
        names: &["$webhook"],
        scope: Scope::Cluster,
        needed: Needed::Always,
        used_by: "the caBundle of the release's own webhook configuration, published to each sandbox's proxy to verify the approval service of held calls",
    },
    Permission {
        group: "admissionregistration.k8s.io",
        resource: "validatingwebhookconfigurations",
        verbs: &["patch"],
        names: &["$webhook"],
        scope: Scope::Cluster,
        needed: Needed::SelfManagedCertificates,
        used_by: "the caBundle of the release's own webhook configuration (server-side apply)",
    },
    Permission {
        group: "coordination.k8s.io",
        resource: "leases",
        verbs: &["get", "create", "patch"],
        names: &[],
        scope: Scope::ReleaseNamespace,
        needed: Needed::Always,
        used_by: "leader election (kube-lease-manager)",
    },
    Permission {
        group: "",
        resource: "secrets",
        verbs: &["get", "create", "update"],
        names: &[],
        scope: Scope::ReleaseNamespace,
        needed: Needed::SelfManagedCertificates,
        used_by: "the serving CA and leaf Secret, created once and rotated",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_resource_scope_and_need_is_listed_once_with_its_reason() {
        let mut seen = std::collections::BTreeSet::new();
        for p in OPERATOR_PERMISSIONS {
            // A resource may be listed once per need (some verbs only
            // in one certificate mode).
            let need = p.needed == Needed::Always;
            assert!(
                seen.insert((p.group, p.resource, p.scope, need)),
                "{p:?} twice"
            );
            assert!(!p.verbs.is_empty() && !p.used_by.is_empty(), "{p:?}");
        }
    }
}
