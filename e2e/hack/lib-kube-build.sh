# shellcheck shell=bash
# Sourced by the e2e/hack/install-*.sh scripts: the pinned Kubernetes version
# and the helpers that build Go binaries from their modules into the cache
#   ${AGENTGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentgate}
# Never prints to stdout: the scripts keep stdout for their one result line.
#
# The caller sets, before calling the build helpers:
#   root  the cache directory of the thing being built (logs go to $root/logs)
#   bin   where binaries are installed
#   tmp   a scratch directory it removes on exit
# and calls kb_go_env once.

# Pinned: matches the k8s-openapi `v1_33` feature of the Rust crates. Every
# Kubernetes binary (control plane and node) is built at this one version.
KUBE_VERSION="v1.33.13"

kube_minor="${KUBE_VERSION#v1.}"; kube_minor="${kube_minor%%.*}"   # 33
staging_version="v0.${KUBE_VERSION#v1.}"                          # v0.33.13

kb_name="${0##*/}"; kb_name="${kb_name%.sh}"
log() { printf '%s: %s\n' "$kb_name" "$*" >&2; }
die() { printf '%s: ERROR: %s\n' "$kb_name" "$*" >&2; exit 1; }

kb_cache_root() { printf '%s\n' "${AGENTGATE_CACHE:-${XDG_CACHE_HOME:-${HOME:?HOME is not set}/.cache}/agentgate}"; }

# kb_go_env: the build environment. Static (CGO_ENABLED=0) unless a script
# turns cgo on for one build; never a toolchain other than the local one
# unless a module demands it (see run_go); never a go.work from around.
kb_go_env() {
  command -v go >/dev/null 2>&1 || die "go is not on PATH; it is needed to build ${kb_what:-the binaries} (from Go modules)"
  export CGO_ENABLED=0
  export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
  export GOTOOLCHAIN=local
  export GOWORK=off
}

# kb_lock: one installer at a time per $root (fd 9, released on exit).
kb_lock() {
  mkdir -p "$root/logs"
  exec 9>"$root/.lock"
  if ! flock -n 9; then
    log "another install is running in $root; waiting for it"
    flock 9
  fi
}

# kb_installed FILE...: $stamp says $spec and every FILE is executable in $bin.
kb_installed() {
  local f
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$spec" ] || return 1
  for f in "$@"; do
    [ -x "$bin/$f" ] || return 1
  done
}

# kb_reuse_or_lock FILE...: prints $bin and exits when it already holds the
# install of $spec; otherwise takes the lock, checks again (another
# installer may have finished while we waited) and clears the stamp.
kb_reuse_or_lock() {
  if kb_installed "$@"; then
    printf '%s\n' "$bin"
    exit 0
  fi
  mkdir -p "$bin"
  kb_lock
  if kb_installed "$@"; then
    printf '%s\n' "$bin"
    exit 0
  fi
  rm -f "$stamp"
}

# Never `cmd | grep -q` under pipefail: grep exits at the first match, the
# writer may die of SIGPIPE, and the check fails at random ("built etcd does
# not report 3.5.35: etcd Version: 3.5.35"). Capture the output, then match.
output_of() { "$@" 2>/dev/null || true; }

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

# go_install_into NAME LOG GO-INSTALL-ARGS... PKG@VERSION...: `go install`
# (the module's own go.mod, no throwaway module) into a scratch GOBIN, then
# moves every binary it made into $bin. For modules without replace directives.
go_install_into() {
  local name="$1" logf="$2" start f; shift 2
  local gobin="$tmp/gobin-$name"
  mkdir -p "$gobin"
  cd "$tmp"
  start=$SECONDS
  log "building $name (log: $logf)"
  GOBIN="$gobin" run_go "$logf" install -trimpath "$@" || fail_build "$name" "$logf"
  for f in "$gobin"/*; do
    [ -x "$f" ] || fail_build "$name (go install made no binary)" "$logf"
    mv -f "$f" "$bin/.${f##*/}.tmp"
    mv -f "$bin/.${f##*/}.tmp" "$bin/${f##*/}"
  done
  log "built $name in $((SECONDS - start))s"
}

# The throwaway module for k8s.io/kubernetes binaries, created on first use.
# k8s.io/kubernetes replaces its staging modules (k8s.io/api, k8s.io/apiserver,
# ...) with ./staging/src/..., which `go install mod@version` refuses, so this
# module requires k8s.io/kubernetes and replaces each staging module, taken
# from k8s.io/kubernetes's own go.mod, with its published v0.<minor>.<patch>.
# Its resolution log is $root/logs/${kube_module_log:-kubernetes-module.log}.
kube_mod=""
prepare_kube_module() {
  [ -z "$kube_mod" ] || return 0
  local logf="$root/logs/${kube_module_log:-kubernetes-module.log}" gomod replaces=() m
  : >"$logf"
  kube_mod="$tmp/kubernetes"
  mkdir -p "$kube_mod"
  cd "$kube_mod"
  log "resolving k8s.io/kubernetes@$KUBE_VERSION (log: $logf)"
  run_go "$logf" mod init agentgate.invalid/kube-build || fail_build "the k8s.io/kubernetes build module" "$logf"
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

# build_kube_cmd NAME: k8s.io/kubernetes/cmd/NAME at KUBE_VERSION into $bin.
# Static like upstream's release builds (hack/lib/golang.sh builds every
# server and node binary, kubelet included, with CGO_ENABLED=0).
build_kube_cmd() {
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

# kube_version_ok PATH: PATH --version prints exactly "Kubernetes $KUBE_VERSION".
kube_version_ok() { grep -qx "Kubernetes $KUBE_VERSION" <<<"$(output_of "$1" --version)"; }
