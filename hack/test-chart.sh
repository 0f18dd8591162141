#!/usr/bin/env bash
# Lints and renders charts/agentgate for several value sets and checks the
# rendered objects. Fails on the first error, saying which case and why.
#
#   hack/test-chart.sh                      # lint + template + assertions
#   hack/test-chart.sh --render-dir DIR     # also write DIR/default.yaml: the
#       default values with release "agentgate", namespace agentgate-system and
#       webhook.url=https://127.0.0.1:9443, for `kubectl apply --server-side
#       --dry-run=server` in the e2e tests (the namespace must exist; use
#       server-side apply: the AgentSandbox CRD is too large for client-side
#       apply's last-applied-configuration annotation).
#
# helm comes from hack/install-helm.sh (its last stdout line).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chart="$repo/charts/agentgate"
release=agentgate
namespace=agentgate-system
# Chart.yaml's kubeVersion is >=1.29; without a cluster helm assumes v1.20.
# The e2e control plane's version.
kube_version=1.33.0

log() { printf 'test-chart: %s\n' "$*" >&2; }
die() { printf 'test-chart: FAIL: %s\n' "$*" >&2; exit 1; }

render_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --render-dir)
      if [ $# -lt 2 ] || [ -z "$2" ]; then die "--render-dir needs a directory"; fi
      render_dir="$2"; shift 2 ;;
    --render-dir=*)
      render_dir="${1#--render-dir=}"
      [ -n "$render_dir" ] || die "--render-dir needs a directory"
      shift ;;
    -h|--help)
      sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1 (usage: $0 [--render-dir DIR])" ;;
  esac
done

helm="$("$repo/hack/install-helm.sh" | tail -n 1)"
[ -x "$helm" ] || die "hack/install-helm.sh did not yield an executable helm (got '$helm')"
log "using $("$helm" version --short 2>/dev/null || echo "$helm")"

cmp -s "$repo/crds/agentgate.yaml" "$chart/files/crds.yaml" \
  || die "charts/agentgate/files/crds.yaml differs from crds/agentgate.yaml; run: cp crds/agentgate.yaml charts/agentgate/files/crds.yaml"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# --- helpers ---------------------------------------------------------------

# case_name and its helm arguments are set by run_case; assertions read $out.
case_name=""
out=""

run_case() {
  case_name="$1"; shift
  log "case '$case_name': helm lint --strict $*"
  if ! "$helm" lint --strict --namespace "$namespace" --kube-version "$kube_version" "$chart" "$@" >"$work/lint.log" 2>&1; then
    cat "$work/lint.log" >&2
    die "case '$case_name': helm lint --strict failed"
  fi
  out="$work/$(printf '%s' "$case_name" | tr -c 'A-Za-z0-9_-' '_').yaml"
  log "case '$case_name': helm template"
  if ! "$helm" template "$release" "$chart" --namespace "$namespace" --kube-version "$kube_version" "$@" >"$out" 2>"$work/template.log"; then
    cat "$work/template.log" >&2
    die "case '$case_name': helm template failed"
  fi
  [ -s "$out" ] || die "case '$case_name': helm template rendered nothing"
  split_docs
}

# Expect helm template to refuse these values, with a message matching $2.
expect_refused() {
  local name="$1" pattern="$2"; shift 2
  log "case '$name': expecting helm template to refuse"
  if "$helm" template "$release" "$chart" --namespace "$namespace" --kube-version "$kube_version" "$@" >/dev/null 2>"$work/refused.log"; then
    die "case '$name': helm template accepted values it should refuse: $*"
  fi
  grep -Eq -- "$pattern" "$work/refused.log" \
    || { cat "$work/refused.log" >&2; die "case '$name': refused, but without a message matching /$pattern/"; }
}

# Split $out into one file per document and index them as "kind name file"
# (run once per case; the CRDs are large).
split_docs() {
  rm -rf "$work/docs"; mkdir -p "$work/docs"
  awk -v dir="$work/docs" '
    function start() { i++; f = sprintf("%s/%03d.yaml", dir, i); k = "-"; n = "-"; inmeta = 0 }
    function finish() { if (f != "") { close(f); print k, n, f > (dir "/index") } }
    BEGIN { i = 0; start() }
    /^---/ { finish(); start(); next }
    {
      print > f
      if ($0 ~ /^kind: /) k = $2
      else if ($0 ~ /^metadata:/) { inmeta = 1; next }
      else if (inmeta && $0 ~ /^  name: /) { n = $2; inmeta = 0 }
      if ($0 ~ /^[^ #]/) inmeta = 0
    }
    END { finish(); close(dir "/index") }
  ' "$out"
}

# Print the rendered documents whose top-level kind is $1 (and, if given and
# not empty, whose name is $2).
docs() {
  local kind="$1" name="${2:-}" k n f
  while read -r k n f; do
    if [ "$k" = "$kind" ] && { [ -z "$name" ] || [ "$n" = "$name" ]; }; then
      cat "$f"; printf -- '---\n'
    fi
  done <"$work/docs/index"
}

count_kind() { docs "$1" | grep -c '^kind: ' || true; }

assert_kind_count() {
  local kind="$1" want="$2" got
  got="$(count_kind "$kind")"
  [ "$got" = "$want" ] || die "case '$case_name': expected $want $kind object(s), rendered $got"
}

# assert_in KIND NAME FIXED-STRING [COUNT]: the object contains the string
# (at least once, or exactly COUNT times).
assert_in() {
  local kind="$1" name="$2" needle="$3" want="${4:-}" got
  got="$(docs "$kind" "$name" | grep -cF -- "$needle" || true)"
  if [ -n "$want" ]; then
    [ "$got" = "$want" ] || die "case '$case_name': $kind/$name: expected '$needle' $want time(s), found $got"
  else
    [ "$got" -ge 1 ] || die "case '$case_name': $kind/$name: expected '$needle', not found"
  fi
}

assert_not_in() {
  local kind="$1" name="$2" needle="$3"
  # grep -c reads everything: `| grep -q` under pipefail can fail at random
  # when the writer dies of SIGPIPE.
  if [ "$(docs "$kind" "$name" | grep -cF -- "$needle" || true)" -gt 0 ]; then
    die "case '$case_name': $kind/$name must not contain '$needle'"
  fi
}

# Checks shared by every case that renders the Deployment.
common_checks() {
  assert_kind_count Deployment 1
  assert_kind_count ValidatingWebhookConfiguration 1
  local vwc=(ValidatingWebhookConfiguration agentgate)
  local n="${webhooks:-8}"
  for w in agentsandboxes policyproposals maximumpolicies agentscans heldcalls namespaces; do
    assert_in "${vwc[@]}" "- name: $w.agentgate.dev" 1
  done
  if [ "$n" = 8 ]; then
    # Pods: enforce-labelled namespaces, and sandbox pods everywhere else.
    assert_in "${vwc[@]}" "- name: pods.agentgate.dev" 1
    assert_in "${vwc[@]}" "- name: sandbox-pods.agentgate.dev" 1
    assert_in "${vwc[@]}" "key: agentgate.dev/enforce" 2
    assert_in "${vwc[@]}" "operator: DoesNotExist" 1
    assert_in "${vwc[@]}" "key: agentgate.dev/sandbox" 1
  else
    assert_not_in "${vwc[@]}" "pods.agentgate.dev"
  fi
  # Status subresources go through the webhook: only the operator writes status.
  for w in agentsandboxes policyproposals maximumpolicies agentscans heldcalls; do
    assert_in "${vwc[@]}" "- $w/status" 1
  done
  assert_in "${vwc[@]}" "- DELETE" 3
  assert_in "${vwc[@]}" 'admissionReviewVersions: ["v1"]' "$n"
  assert_in "${vwc[@]}" "sideEffects: None" "$n"
  assert_in "${vwc[@]}" "matchPolicy: Equivalent" "$n"
  assert_in "${vwc[@]}" "key: kubernetes.io/metadata.name" "$n"
  assert_in "${vwc[@]}" "operator: NotIn" "$n"
  assert_in "${vwc[@]}" "- kube-system" "$n"
  assert_in "${vwc[@]}" "- $namespace" "$n"
  # helm must never own caBundle (the operator or the cainjector does).
  assert_not_in "${vwc[@]}" "caBundle:"
  local dep=(Deployment agentgate)
  for needle in "runAsNonRoot: true" "runAsUser: 65532" "fsGroup: 65532" "type: RuntimeDefault" \
      "allowPrivilegeEscalation: false" "readOnlyRootFilesystem: true" "- ALL" \
      "mountPath: /tmp" "emptyDir: {}" "scheme: HTTPS" "path: /healthz" "path: /readyz" \
      "containerPort: 9443" "containerPort: 8080" "fieldPath: metadata.name" "fieldPath: metadata.namespace" \
      "- --lease-name=agentgate-leader" "- --lease-namespace=$namespace" \
      "- --tls-secret-name=agentgate-webhook-tls" "- --webhook-config-name=agentgate" \
      "- --service-name=agentgate-webhook" "- --admission-deadline-ms=3000" "- --timeout-ms=5000" \
      "- --webhook-bind-address=0.0.0.0:9443" "- --metrics-bind-address=0.0.0.0:8080" \
      "image: \"ghcr.io/agentgate-dev/agentgate:0.1.0\""; do
    assert_in "${dep[@]}" "$needle"
  done
  assert_not_in "${dep[@]}" "--allow-unmanaged"
}

# --- cases -----------------------------------------------------------------

run_case defaults
common_checks
assert_in Deployment agentgate "- --proxy-image=ghcr.io/agentgate-dev/agentgate:0.1.0"
assert_in Deployment agentgate "- --sandbox-ca-validity-seconds=31536000"
assert_in Deployment agentgate "- --concurrent-reconciles=16"
assert_in ValidatingWebhookConfiguration agentgate "failurePolicy: Fail" 8
assert_in ValidatingWebhookConfiguration agentgate "timeoutSeconds: 10" 8
assert_in ValidatingWebhookConfiguration agentgate "name: agentgate-webhook" 8
assert_in ValidatingWebhookConfiguration agentgate "port: 443" 8
assert_in ValidatingWebhookConfiguration agentgate 'path: "/validate/agentsandboxes"' 1
assert_not_in ValidatingWebhookConfiguration agentgate "url:"
assert_not_in ValidatingWebhookConfiguration agentgate "cert-manager.io/inject-ca-from"
assert_in Deployment agentgate "replicas: 2"
assert_in Deployment agentgate "- --leader-elect=true"
assert_in Deployment agentgate "- --cert-mode=self-managed"
assert_in Deployment agentgate "maxUnavailable: 0"
assert_in Deployment agentgate "podAntiAffinity:"
assert_not_in Deployment agentgate "--cert-dir"
assert_kind_count CustomResourceDefinition 5
assert_in CustomResourceDefinition "" "helm.sh/resource-policy: keep" 5
for crd in maximumpolicies agentsandboxes policyproposals agentscans heldcalls; do
  assert_in CustomResourceDefinition "$crd.agentgate.dev" "group: agentgate.dev"
done
assert_in CustomResourceDefinition maximumpolicies.agentgate.dev "scope: Cluster"
assert_in CustomResourceDefinition agentsandboxes.agentgate.dev "scope: Namespaced"
assert_in CustomResourceDefinition policyproposals.agentgate.dev "scope: Namespaced"
assert_in CustomResourceDefinition agentscans.agentgate.dev "scope: Cluster"
assert_in CustomResourceDefinition heldcalls.agentgate.dev "scope: Namespaced"
# Held calls: the proxies ask this operator's Service; the operator records
# them, reviewers decide them.
assert_in Deployment agentgate "- --approvals-url=https://agentgate-webhook.$namespace.svc.cluster.local/v1/hold"
assert_in Deployment agentgate "- --hold-timeout-seconds=120"
# Policy delivery: the proxies subscribe to this operator's stream, and a
# Pod's report of what it enforces is a status patch.
assert_in Deployment agentgate "- --policy-stream-url=https://agentgate-webhook.$namespace.svc.cluster.local/v1/policy/stream"
assert_in ClusterRole agentgate-controller 'verbs: ["update", "patch"]'
assert_in ClusterRole agentgate-controller '"heldcalls"'
assert_in ClusterRole agentgate-controller '"heldcalls/status"'
assert_in ClusterRole agentgate-reviewer-base '"heldcalls"'
assert_in ClusterRole agentgate-controller 'verbs: ["get", "patch"]' 1
assert_kind_count Service 2
assert_in Service agentgate-webhook "targetPort: webhook"
assert_in Service agentgate-metrics "port: 8080"
assert_kind_count ServiceAccount 1
assert_kind_count PodDisruptionBudget 1
assert_kind_count ServiceMonitor 0
assert_kind_count NetworkPolicy 0
assert_kind_count Certificate 0
assert_kind_count Issuer 0
assert_kind_count ClusterRole 8
assert_in ClusterRole agentgate-controller 'resourceNames: ["agentgate"]'
assert_in ClusterRole agentgate-controller '"subjectaccessreviews"'
assert_in ClusterRole agentgate-reviewer "agentgate.dev/aggregate-to-reviewer: \"true\""
assert_not_in ClusterRole agentgate-reviewer "rules:"
assert_in ClusterRole agentgate-reviewer-base '"approve"'
assert_in ClusterRole agentgate-verifier '"namespaces"'
assert_not_in ClusterRole agentgate-verifier '"get"'
assert_not_in ClusterRole agentgate-reviewer-base "aggregate-to-admin"
assert_in ClusterRole agentgate-view 'rbac.authorization.k8s.io/aggregate-to-view: "true"'
assert_in ClusterRole agentgate-edit 'rbac.authorization.k8s.io/aggregate-to-edit: "true"'
assert_not_in ClusterRole agentgate-edit '"approve"'
assert_not_in ClusterRole agentgate-edit '/status"'
# Agents are often bound to `edit`: it must not let them write their sandbox.
assert_not_in ClusterRole agentgate-edit '"agentsandboxes"'
assert_not_in ClusterRole agentgate-edit 'aggregate-to-admin'
assert_in ClusterRole agentgate-sandbox-editor '"agentsandboxes"'
assert_in ClusterRole agentgate-agent '"policyproposals"'
assert_not_in ClusterRole agentgate-agent '"update"'
assert_not_in ClusterRole agentgate-agent 'aggregate-to'
assert_in ClusterRole agentgate-sandbox-editor 'rbac.authorization.k8s.io/aggregate-to-admin: "true"'
assert_in Deployment agentgate "- --scan-writer=group:system:masters"
assert_not_in Deployment agentgate "--trusted-deployer"
assert_in Role agentgate-controller '"leases"'
assert_in Role agentgate-controller '"secrets"'
# Cluster-wide, Secrets only as each sandbox's CA needs them: named reads
# and writes, never list or watch (the webhook TLS Secret is in the Role).
assert_in ClusterRole agentgate-controller 'resources: ["secrets"]' 1
assert_in ClusterRole agentgate-controller 'verbs: ["get", "create", "update"]' 1
assert_in ClusterRole agentgate-controller 'resources: ["networkpolicies"]' 1
# Each sandbox's agent ServiceAccount: created when missing, never updated
# or deleted (the same verbs as pods: get, list, watch, create).
assert_in ClusterRole agentgate-controller 'resources: ["serviceaccounts"]' 1
assert_in ClusterRole agentgate-controller 'verbs: ["get", "list", "watch", "create"]' 2

run_case cert-manager --set webhook.certManager.enabled=true
common_checks
assert_in ValidatingWebhookConfiguration agentgate "cert-manager.io/inject-ca-from: $namespace/agentgate-webhook-tls" 1
assert_in Deployment agentgate "- --cert-mode=cert-manager"
assert_in Deployment agentgate "- --cert-dir=/etc/agentgate/tls"
assert_in Deployment agentgate "mountPath: /etc/agentgate/tls"
assert_in Deployment agentgate "secretName: agentgate-webhook-tls"
assert_kind_count Certificate 2
assert_kind_count Issuer 2
assert_in Certificate agentgate-webhook-tls "- agentgate-webhook.$namespace.svc"
assert_in Certificate agentgate-webhook-tls "- agentgate-webhook.$namespace.svc.cluster.local"
assert_in Certificate agentgate-webhook-tls "duration: 2160h"
assert_in Certificate agentgate-webhook-tls "renewBefore: 720h"
assert_in Certificate agentgate-webhook-tls "rotationPolicy: Always"
assert_in Certificate agentgate-webhook-tls "name: agentgate-ca"
assert_in Certificate agentgate-ca "isCA: true"
assert_in Issuer agentgate-selfsigned "selfSigned: {}"
assert_not_in Role agentgate-controller '"secrets"'
# The webhook configuration is only read (its caBundle, for the proxies).
assert_in ClusterRole agentgate-controller 'resourceNames: ["agentgate"]' 1
assert_not_in ClusterRole agentgate-controller 'verbs: ["get", "patch"]'

run_case cert-manager-issuerRef --set webhook.certManager.enabled=true \
  --set webhook.certManager.issuerRef.name=corp-ca --set webhook.certManager.issuerRef.kind=ClusterIssuer
common_checks
assert_kind_count Certificate 1
assert_kind_count Issuer 0
assert_in Certificate agentgate-webhook-tls "name: corp-ca"
assert_in Certificate agentgate-webhook-tls "kind: ClusterIssuer"

run_case monitoring-netpol-pdb --set serviceMonitor.enabled=true --set networkPolicy.enabled=true \
  --set podDisruptionBudget.enabled=true --set serviceMonitor.labels.release=prom \
  --set-json 'networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]'
common_checks
assert_kind_count ServiceMonitor 1
assert_in ServiceMonitor agentgate "port: http-metrics"
assert_in ServiceMonitor agentgate "release: prom"
assert_in ServiceMonitor agentgate "app.kubernetes.io/component: metrics"
assert_kind_count NetworkPolicy 1
assert_in NetworkPolicy agentgate "port: 9443"
assert_in NetworkPolicy agentgate "port: 6443"
assert_in NetworkPolicy agentgate "kubernetes.io/metadata.name: monitoring"
assert_kind_count PodDisruptionBudget 1
assert_in PodDisruptionBudget agentgate "minAvailable: 1"

run_case pods-off --set webhook.pods.enabled=false
webhooks=6 common_checks

run_case crds-disabled --set crds.enabled=false
common_checks
assert_kind_count CustomResourceDefinition 0

run_case held-calls-off --set dataPlane.heldCalls=false
common_checks
assert_not_in Deployment agentgate "--approvals-url"

run_case policy-stream-off --set dataPlane.policyStream=false
common_checks
assert_not_in Deployment agentgate "--policy-stream-url"

run_case crds-not-kept --set crds.keep=false
assert_kind_count CustomResourceDefinition 5
assert_not_in CustomResourceDefinition "" "helm.sh/resource-policy"

run_case webhook-url --set webhook.url=https://127.0.0.1:9443 --set replicaCount=0
common_checks
assert_in ValidatingWebhookConfiguration agentgate 'url: "https://127.0.0.1:9443/validate/agentsandboxes"' 1
assert_in ValidatingWebhookConfiguration agentgate 'url: "https://127.0.0.1:9443/validate/policyproposals"' 1
assert_in ValidatingWebhookConfiguration agentgate 'url: "https://127.0.0.1:9443/validate/maximumpolicies"' 1
assert_in ValidatingWebhookConfiguration agentgate 'url: "https://127.0.0.1:9443/validate/agentscans"' 1
assert_in ValidatingWebhookConfiguration agentgate 'url: "https://127.0.0.1:9443/validate/pods"' 2
assert_not_in ValidatingWebhookConfiguration agentgate "service:"
assert_kind_count PodDisruptionBudget 0

run_case options --set allowUnmanaged=true --set concurrentReconciles=48 --set webhook.failurePolicy=Ignore --set rbac.aggregateToAdmin=true \
  --set image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef \
  --set replicaCount=1 --set leaderElection.enabled=false --set-json 'affinity={"nodeAffinity":{}}' \
  --set-json 'webhook.trustedDeployers=["system:serviceaccount:agents:deployer"]' \
  --set-json 'webhook.scanWriters=["system:serviceaccount:ci:scanner","group:release-managers"]'
assert_in Deployment agentgate "- --trusted-deployer=system:serviceaccount:agents:deployer"
assert_in Deployment agentgate "- --scan-writer=system:serviceaccount:ci:scanner"
assert_in Deployment agentgate "- --scan-writer=group:release-managers"
assert_not_in Deployment agentgate "group:system:masters"
assert_in ValidatingWebhookConfiguration agentgate "failurePolicy: Ignore" 6
# Loosening the agentgate kinds does not open pod enforcement.
assert_in ValidatingWebhookConfiguration agentgate "failurePolicy: Fail" 2
assert_in Deployment agentgate "- --allow-unmanaged"
assert_in Deployment agentgate "- --concurrent-reconciles=48"
assert_in Deployment agentgate "- --leader-elect=false"
assert_in Deployment agentgate 'image: "ghcr.io/agentgate-dev/agentgate@sha256:0123456789abcdef'
# The sandbox Pods' data plane follows the operator image (its digest too).
assert_in Deployment agentgate '- --proxy-image=ghcr.io/agentgate-dev/agentgate@sha256:0123456789abcdef'
assert_in Deployment agentgate "nodeAffinity: {}"
assert_not_in Deployment agentgate "podAntiAffinity"
assert_in ClusterRole agentgate-reviewer-base 'rbac.authorization.k8s.io/aggregate-to-admin: "true"'
assert_kind_count PodDisruptionBudget 0

run_case data-plane --set dataPlane.image=registry.example/agentgate:9 --set dataPlane.pullPolicy=Always \
  --set dataPlane.caValiditySeconds=2592000
common_checks
assert_in Deployment agentgate "- --proxy-image=registry.example/agentgate:9"
assert_in Deployment agentgate "- --proxy-image-pull-policy=Always"
assert_in Deployment agentgate "- --sandbox-ca-validity-seconds=2592000"

run_case rbac-off --set rbac.create=false --set serviceAccount.create=false --set serviceAccount.name=existing
assert_kind_count ClusterRole 0
assert_kind_count Role 0
assert_kind_count ServiceAccount 0
assert_in Deployment agentgate "serviceAccountName: existing"

expect_refused deadline-too-long 'solverDeadlineMs' --set webhook.timeoutSeconds=3 --set webhook.solverDeadlineMs=3000
expect_refused no-leader-election-with-replicas 'leaderElection' --set leaderElection.enabled=false
expect_refused unknown-value 'additional properties|additionalProperties|not allowed' --set webhook.failurPolicy=Ignore
expect_refused bad-failure-policy 'failurePolicy' --set webhook.failurePolicy=Maybe
expect_refused no-reconciles 'concurrentReconciles' --set concurrentReconciles=0
expect_refused http-url 'webhook.url|url' --set webhook.url=http://127.0.0.1:9443
expect_refused bad-trusted-deployer 'trustedDeployers' --set-json 'webhook.trustedDeployers=["alice"]'
# Native sidecars, matchConditions and the CRDs' CEL rules: 1.29 or later.
expect_refused kubernetes-too-old 'requires kubeVersion' --kube-version 1.28.9
expect_refused issuerRef-without-name 'issuerRef' --set webhook.certManager.enabled=true --set webhook.certManager.issuerRef.kind=ClusterIssuer

if [ -n "$render_dir" ]; then
  mkdir -p "$render_dir"
  dest="$render_dir/default.yaml"
  log "rendering defaults with webhook.url=https://127.0.0.1:9443 to $dest"
  "$helm" template "$release" "$chart" --namespace "$namespace" --kube-version "$kube_version" \
    --set webhook.url=https://127.0.0.1:9443 >"$dest.tmp" \
    || die "helm template for --render-dir failed"
  mv "$dest.tmp" "$dest"
  [ -s "$dest" ] || die "$dest is empty"
  log "wrote $dest ($(grep -c '^kind: ' "$dest") objects)"
fi

log "all chart checks passed"
