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
#
# Never skips: if a binary cannot be had, it says which and exits non-zero.
# Needs: go (>= the go line of the modules, else GOTOOLCHAIN=auto is used),
# access to the Go module proxy, flock (util-linux).
set -euo pipefail

# Pinned: matches the k8s-openapi `v1_33` feature of the Rust crates.
KUBE_VERSION="v1.33.13"
# Newest etcd 3.5.x on the Go proxy when pinned (Kubernetes 1.33 itself pins 3.5.21).
ETCD_VERSION="v3.5.35"
# Used when present and a 1.33 client; otherwise kubectl is built too.
GCLOUD_KUBECTL="${AGENTGATE_GCLOUD_KUBECTL:-/usr/lib/google-cloud-sdk/bin/kubectl.1.33}"
# Bump when the layout or build recipe changes, to force a rebuild.
RECIPE=1

kube_minor="${KUBE_VERSION#v1.}"; kube_minor="${kube_minor%%.*}"   # 33
staging_version="v0.${KUBE_VERSION#v1.}"                          # v0.33.13

log() { printf 'install-control-plane: %s\n' "$*" >&2; }
die() { printf 'install-control-plane: ERROR: %s\n' "$*" >&2; exit 1; }

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
cache_root="${AGENTGATE_CACHE:-${XDG_CACHE_HOME:-${HOME:?HOME is not set}/.cache}/agentgate}"
root="$cache_root/k8s/$KUBE_VERSION"
bin="$root/bin"
stamp="$bin/.installed"
spec="recipe=$RECIPE kube=$KUBE_VERSION etcd=$ETCD_VERSION"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$spec" ] && have_all "$bin"; then
  printf '%s\n' "$bin"
  exit 0
fi

# --- slow path: one installer at a time ------------------------------------
mkdir -p "$bin" "$root/logs"
exec 9>"$root/.lock"
if ! flock -n 9; then
  log "another install is running in $root; waiting for it"
  flock 9
fi
# It may have finished the job while we waited.
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$spec" ] && have_all "$bin"; then
  printf '%s\n' "$bin"
  exit 0
fi
rm -f "$stamp"

command -v go >/dev/null 2>&1 || die "go is not on PATH; it is needed to build kube-apiserver $KUBE_VERSION and etcd $ETCD_VERSION (or set KUBEBUILDER_ASSETS)"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/agentgate-control-plane.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
export GOTOOLCHAIN=local
export GOWORK=off

# run_go LOG ARGS...: runs `go ARGS` in the current directory, output appended
# to LOG. If a module needs a newer Go than the local toolchain, retries once
# with GOTOOLCHAIN=auto (which fetches that toolchain from the Go proxy).
run_go() {
  local logf="$1"; shift
  printf '\n$ go %s\n' "$*" >>"$logf"
  if go "$@" >>"$logf" 2>&1; then return 0; fi
  if [ "$GOTOOLCHAIN" = local ] && grep -q 'requires go >=' <<<"$(tail -n 20 "$logf")"; then
    log "a module needs a newer Go than $(go env GOVERSION); retrying with GOTOOLCHAIN=auto"
    export GOTOOLCHAIN=auto
    printf '\n$ GOTOOLCHAIN=auto go %s\n' "$*" >>"$logf"
    go "$@" >>"$logf" 2>&1 && return 0
  fi
  return 1
}

fail_build() { # fail_build WHAT LOG
  log "---- last lines of $2 ----"
  tail -n 40 "$2" >&2 || true
  die "could not build $1 (full log: $2)"
}

# Never `cmd | grep -q` under pipefail: grep exits at the first match, the
# writer may die of SIGPIPE, and the check fails at random ("built etcd does
# not report 3.5.35: etcd Version: 3.5.35"). Capture the output, then match.
output_of() { "$@" 2>/dev/null || true; }
apiserver_ok() { grep -qx "Kubernetes $KUBE_VERSION" <<<"$(output_of "$bin/kube-apiserver" --version)"; }
etcd_ok() { grep -qx "etcd Version: ${ETCD_VERSION#v}" <<<"$(output_of "$bin/etcd" --version)"; }
kubectl_ok() { # kubectl_ok PATH: client minor must equal the apiserver's
  grep -q "\"gitVersion\": *\"v1\\.${kube_minor}\\." <<<"$(output_of "$1" version --client -o json)"
}

# The throwaway module for k8s.io/kubernetes binaries, created on first use.
kube_mod=""
prepare_kube_module() {
  [ -z "$kube_mod" ] || return 0
  local logf="$root/logs/kubernetes-module.log" gomod replaces=() m
  : >"$logf"
  kube_mod="$tmp/kubernetes"
  mkdir -p "$kube_mod"
  cd "$kube_mod"
  log "resolving k8s.io/kubernetes@$KUBE_VERSION (log: $logf)"
  run_go "$logf" mod init agentgate.invalid/control-plane-build || fail_build "the k8s.io/kubernetes build module" "$logf"
  local json
  # -json reports a failure on stdout, so keep that for the log too.
  if ! json="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" 2>>"$logf")"; then
    printf '%s\n' "$json" >>"$logf"
    fail_build "k8s.io/kubernetes@$KUBE_VERSION (download)" "$logf"
  fi
  gomod="$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
  [ -f "$gomod" ] || fail_build "k8s.io/kubernetes@$KUBE_VERSION (no go.mod in download output)" "$logf"
  # Every `X => ./staging/src/X` in its replace block, single-line or grouped.
  while read -r m; do
    replaces+=("-replace=$m=$m@$staging_version")
  done < <(awk '
      /^replace[[:space:]]*\($/ { inblock = 1; next }
      inblock && /^\)/          { inblock = 0; next }
      inblock && $2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }
      /^replace[[:space:]]/ && $3 == "=>" && $4 ~ /^\.\/staging\// { print $2 }
    ' "$gomod")
  [ "${#replaces[@]}" -gt 0 ] || fail_build "k8s.io/kubernetes@$KUBE_VERSION (found no staging replace directives in $gomod)" "$logf"
  log "replacing ${#replaces[@]} staging modules with their $staging_version releases"
  run_go "$logf" mod edit "-require=k8s.io/kubernetes@$KUBE_VERSION" "${replaces[@]}" \
    || fail_build "the k8s.io/kubernetes build module" "$logf"
  # Mirror what hack/lib/version.sh stamps, so `--version` and kubectl's skew
  # checks see the real version.
  local info date pkg
  info="$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Info": "\(.*\)",\{0,1\}$/\1/p')"
  date="$(sed -n 's/.*"Time": *"\([^"]*\)".*/\1/p' "$info" 2>/dev/null || true)"
  date="${date:-1970-01-01T00:00:00Z}"
  kube_ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kube_ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$kube_minor"
    kube_ldflags+=" -X $pkg.gitTreeState=archive -X $pkg.buildDate=$date"
  done
}

build_kube_cmd() { # build_kube_cmd NAME
  local name="$1" logf="$root/logs/$1.log" start
  prepare_kube_module
  : >"$logf"
  cd "$kube_mod"
  log "building $name $KUBE_VERSION from k8s.io/kubernetes (takes several minutes; log: $logf)"
  start=$SECONDS
  run_go "$logf" get "k8s.io/kubernetes/cmd/$name@$KUBE_VERSION" || fail_build "$name $KUBE_VERSION" "$logf"
  run_go "$logf" build -trimpath -ldflags "$kube_ldflags" -o "$bin/.$name.tmp" "k8s.io/kubernetes/cmd/$name" \
    || fail_build "$name $KUBE_VERSION" "$logf"
  mv -f "$bin/.$name.tmp" "$bin/$name"
  log "built $name in $((SECONDS - start))s ($(du -h "$bin/$name" | cut -f1))"
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
