#!/usr/bin/env bash
# Provides kube-apiserver, etcd and kubectl for the e2e tests and prints, as
# the last line on stdout, the directory holding the three binaries. All
# progress goes to stderr.
#
#   1. KUBEBUILDER_ASSETS, if set and it holds all three binaries, is used as is.
#   2. Otherwise the binaries are built once into a cache outside the repository:
#        ${AGENTGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentgate}/k8s/<version>/bin
#      - kube-apiserver: from the k8s.io/kubernetes Go module at KUBE_VERSION. That
#        module replaces its staging modules (k8s.io/api, k8s.io/apiserver, ...) with
#        ./staging/src/..., which `go install mod@version` refuses, so a throwaway
#        module (in a temp dir) requires k8s.io/kubernetes and replaces each staging
#        module, taken from k8s.io/kubernetes's own go.mod, with its published
#        v0.<minor>.<patch> release.
#      - etcd: from the go.etcd.io/etcd/server/v3 module (its root is the main
#        package). Kubernetes 1.33 expects etcd 3.5.x; Debian's etcd-server is 3.4.
#      - kubectl: the Cloud SDK's kubectl.1.33 if present (the machines carry it),
#        else built from k8s.io/kubernetes/cmd/kubectl like kube-apiserver.
#      A stamp file marks a complete install; later runs only check it.
#      KUBE_VERSION and the build helpers live in lib-kube-build.sh, shared
#      with install-kube-node.sh (kubelet & co., same version, same bin dir).
#
# Never skips: if a binary cannot be had, it says which and exits non-zero.
# Needs: go (>= the go line of the modules, else GOTOOLCHAIN=auto is used),
# access to the Go module proxy, flock (util-linux).
set -euo pipefail

# KUBE_VERSION (pinned there, shared with install-kube-node.sh), log, die and
# the build helpers.
# shellcheck source=e2e/hack/lib-kube-build.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib-kube-build.sh"

# Newest etcd 3.5.x on the Go proxy when pinned (Kubernetes 1.33 itself pins 3.5.21).
ETCD_VERSION="v3.5.35"
# Used when present and a 1.33 client; otherwise kubectl is built too.
GCLOUD_KUBECTL="${AGENTGATE_GCLOUD_KUBECTL:-/usr/lib/google-cloud-sdk/bin/kubectl.1.33}"
# Bump when the layout or build recipe changes, to force a rebuild.
RECIPE=1

have_all() {
  local dir="$1" b
  for b in kube-apiserver etcd kubectl; do
    [ -x "$dir/$b" ] || return 1
  done
}

# --- 1. KUBEBUILDER_ASSETS -------------------------------------------------
if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
  if have_all "$KUBEBUILDER_ASSETS"; then
    log "using KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
    printf '%s\n' "$KUBEBUILDER_ASSETS"
    exit 0
  fi
  missing=""
  for b in kube-apiserver etcd kubectl; do
    [ -x "$KUBEBUILDER_ASSETS/$b" ] || missing="$missing $b"
  done
  log "warning: KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks:$missing; using the cache instead"
fi

# --- 2. cache fast path -----------------------------------------------------
root="$(kb_cache_root)/k8s/$KUBE_VERSION"
bin="$root/bin"
stamp="$bin/.installed"
spec="recipe=$RECIPE kube=$KUBE_VERSION etcd=$ETCD_VERSION"

# The fast path, else one installer at a time (it may have finished the
# job while we waited).
kb_reuse_or_lock kube-apiserver etcd kubectl

command -v go >/dev/null 2>&1 || die "go is not on PATH; it is needed to build kube-apiserver $KUBE_VERSION and etcd $ETCD_VERSION (or set KUBEBUILDER_ASSETS)"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/agentgate-control-plane.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

kb_go_env

apiserver_ok() { kube_version_ok "$bin/kube-apiserver"; }
etcd_ok() { grep -qx "etcd Version: ${ETCD_VERSION#v}" <<<"$(output_of "$bin/etcd" --version)"; }
kubectl_ok() { # kubectl_ok PATH: client minor must equal the apiserver's
  grep -q "\"gitVersion\": *\"v1\\.${kube_minor}\\." <<<"$(output_of "$1" version --client -o json)"
}

# --- kube-apiserver ----------------------------------------------------------
if [ -x "$bin/kube-apiserver" ] && apiserver_ok; then
  log "kube-apiserver $KUBE_VERSION already built"
else
  build_kube_cmd kube-apiserver
  apiserver_ok || die "built kube-apiserver does not report $KUBE_VERSION: $("$bin/kube-apiserver" --version 2>&1 | sed -n 1p)"
fi

# --- etcd ----------------------------------------------------------------------
if [ -x "$bin/etcd" ] && etcd_ok; then
  log "etcd $ETCD_VERSION already built"
else
  logf="$root/logs/etcd.log"
  : >"$logf"
  mkdir -p "$tmp/etcd"
  cd "$tmp/etcd"
  log "building etcd $ETCD_VERSION from go.etcd.io/etcd/server/v3 (log: $logf)"
  start=$SECONDS
  run_go "$logf" mod init agentgate.invalid/etcd-build || fail_build "etcd $ETCD_VERSION" "$logf"
  run_go "$logf" get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" || fail_build "etcd $ETCD_VERSION" "$logf"
  run_go "$logf" build -trimpath -ldflags "-s -w" -o "$bin/.etcd.tmp" go.etcd.io/etcd/server/v3 \
    || fail_build "etcd $ETCD_VERSION" "$logf"
  mv -f "$bin/.etcd.tmp" "$bin/etcd"
  log "built etcd in $((SECONDS - start))s ($(du -h "$bin/etcd" | cut -f1))"
  etcd_ok || die "built etcd does not report ${ETCD_VERSION#v}: $("$bin/etcd" --version 2>&1 | sed -n 1p)"
fi

# --- kubectl -----------------------------------------------------------------
if [ -x "$bin/kubectl" ] && kubectl_ok "$bin/kubectl"; then
  log "kubectl 1.$kube_minor already present"
elif [ -x "$GCLOUD_KUBECTL" ] && kubectl_ok "$GCLOUD_KUBECTL"; then
  log "using $GCLOUD_KUBECTL"
  cp -f "$GCLOUD_KUBECTL" "$bin/.kubectl.tmp"
  mv -f "$bin/.kubectl.tmp" "$bin/kubectl"
else
  [ -x "$GCLOUD_KUBECTL" ] && log "$GCLOUD_KUBECTL is not a 1.$kube_minor client; building kubectl"
  build_kube_cmd kubectl
  kubectl_ok "$bin/kubectl" || die "built kubectl is not a 1.$kube_minor client: $("$bin/kubectl" version --client 2>&1 | sed -n 1p)"
fi

printf '%s\n' "$spec" >"$stamp.tmp"
mv -f "$stamp.tmp" "$stamp"
log "installed into $bin: $("$bin/kube-apiserver" --version), etcd $("$bin/etcd" --version | sed -n 's/^etcd Version: //p'), kubectl $("$bin/kubectl" version --client -o json | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p' | sed -n 1p)"
printf '%s\n' "$bin"
