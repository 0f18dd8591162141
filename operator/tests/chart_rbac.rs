#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // test code: a panic is a failed test
//! The chart grants the operator exactly the permissions the code uses
//! (`agentgate::k8s::permissions::OPERATOR_PERMISSIONS`), in both
//! certificate modes: a permission the table lists and the chart lacks
//! fails here, and so does one the chart grants that nothing uses. (That
//! the table covers every call is checked by the e2e suites, which run the
//! operator as the chart's ServiceAccount.)
//!
//! Needs helm, which hack/install-helm.sh builds once from its Go module:
//! `make test` runs it (`--include-ignored`); `make check`, which needs
//! nothing but Z3, leaves it out.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use agentgate::k8s::permissions::{Needed, OPERATOR_PERMISSIONS, Scope};
use serde_json::Value;

const RELEASE: &str = "agentgate";

/// (scope, group, resource, verb, resource names) of one granted verb.
type Grant = (Scope, String, String, String, Vec<String>);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// helm, installed (once, cached) by hack/install-helm.sh.
fn helm() -> PathBuf {
    let out = Command::new(repo().join("hack/install-helm.sh"))
        .output()
        .expect("running hack/install-helm.sh");
    assert!(
        out.status.success(),
        "hack/install-helm.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(stdout.lines().last().expect("helm's path").trim())
}

/// The chart's rendered documents with `values`.
fn render(values: &[&str]) -> Vec<Value> {
    let mut helm = Command::new(helm());
    // Chart.yaml requires Kubernetes 1.29+; without a cluster helm assumes 1.20.
    helm.args(["template", RELEASE, "charts/agentgate", "--namespace"])
        .arg("agentgate-system")
        .args(["--kube-version", "1.33.0"])
        .current_dir(repo());
    for value in values {
        helm.args(["--set", value]);
    }
    let out = helm.output().expect("running helm template");
    assert!(
        out.status.success(),
        "helm template {values:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    serde_saphyr::from_str_multiple::<Value, Vec<Value>>(&text)
        .expect("helm's output is YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
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

/// Every verb the operator's ClusterRole and Role grant.
fn granted(docs: &[Value]) -> BTreeSet<Grant> {
    let controller = format!("{RELEASE}-controller");
    let mut grants = BTreeSet::new();
    for doc in docs {
        let scope = match doc["kind"].as_str() {
            Some("ClusterRole") => Scope::Cluster,
            Some("Role") => Scope::ReleaseNamespace,
            _ => continue,
        };
        if doc["metadata"]["name"].as_str() != Some(controller.as_str()) {
            continue;
        }
        for rule in doc["rules"].as_array().into_iter().flatten() {
            let mut names = strings(&rule["resourceNames"]);
            names.sort();
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    for verb in strings(&rule["verbs"]) {
                        assert_ne!(verb, "*", "a wildcard verb in {rule}");
                        assert_ne!(resource, "*", "a wildcard resource in {rule}");
                        grants.insert((
                            scope,
                            group.clone(),
                            resource.clone(),
                            verb,
                            names.clone(),
                        ));
                    }
                }
            }
        }
    }
    grants
}

/// What the table says the operator needs, in this certificate mode.
fn needed(self_managed: bool) -> BTreeSet<Grant> {
    let mut grants = BTreeSet::new();
    for p in OPERATOR_PERMISSIONS {
        if p.needed == Needed::SelfManagedCertificates && !self_managed {
            continue;
        }
        let mut names: Vec<String> = p
            .names
            .iter()
            .map(|n| {
                if *n == "$webhook" {
                    RELEASE.to_string()
                } else {
                    n.to_string()
                }
            })
            .collect();
        names.sort();
        for verb in p.verbs {
            grants.insert((
                p.scope,
                p.group.to_string(),
                p.resource.to_string(),
                verb.to_string(),
                names.clone(),
            ));
        }
    }
    grants
}

fn compare(case: &str, values: &[&str], self_managed: bool) {
    let granted = granted(&render(values));
    let needed = needed(self_managed);
    let missing: Vec<_> = needed.difference(&granted).collect();
    let unused: Vec<_> = granted.difference(&needed).collect();
    assert!(
        missing.is_empty() && unused.is_empty(),
        "{case}: the chart's RBAC differs from operator/k8s/src/k8s/permissions.rs\n  needed but not granted: {missing:?}\n  granted but not used: {unused:?}"
    );
}

#[test]
#[ignore = "needs helm (built from its Go module): make test runs it (--include-ignored)"]
fn the_chart_grants_exactly_what_the_operator_uses() {
    compare("self-managed certificates", &[], true);
    compare("cert-manager", &["webhook.certManager.enabled=true"], false);
}
