#!/usr/bin/env bash
# Builds e2e/hack/kstatus (a few lines of Go around the real kstatus library,
# sigs.k8s.io/cli-utils/pkg/kstatus/status, as pinned in its go.mod and
# go.sum) once into a cache outside the repository and prints, as the last
# line on stdout, the path of the binary. All progress goes to stderr.
#
#   ${AGENTGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentgate}/kstatus/<source hash>/kstatus
#
# The directory is named by the hash of main.go, go.mod and go.sum, so a
# change to any of them builds anew; a stamp file marks a complete build and
# later runs only check it. The e2e test that judges the operator's statuses
# with it (e2e/tests/kstatus.rs) runs this script first.
#
# Never skips: if the binary cannot be built, it says why and exits non-zero.
# Needs: go (>= the go line of go.mod, else GOTOOLCHAIN=auto is used), access
# to the Go module proxy (or a module cache holding the pinned versions),
# flock (util-linux), sha256sum.
set -euo pipefail

log() { printf 'install-kstatus: %s\n' "$*" >&2; }
die() { printf 'install-kstatus: ERROR: %s\n' "$*" >&2; exit 1; }

src="$(cd "$(dirname "${BASH_SOURCE[0]}")/kstatus" && pwd)"
for f in main.go go.mod go.sum; do
  [ -f "$src/$f" ] || die "$src/$f is missing"
done
hash="$(cat "$src/main.go" "$src/go.mod" "$src/go.sum" | sha256sum | cut -c1-16)"
cache_root="${AGENTGATE_CACHE:-${XDG_CACHE_HOME:-${HOME:?HOME is not set}/.cache}/agentgate}"
root="$cache_root/kstatus/$hash"
bin="$root/kstatus"
stamp="$root/.installed"

# kstatus_ok: the binary judges a Ready=True object Current.
kstatus_ok() {
  local out
  out="$(printf '%s' '{"apiVersion":"agentgate.dev/v1alpha1","kind":"Check","metadata":{"name":"c","generation":1},"status":{"observedGeneration":1,"conditions":[{"type":"Ready","status":"True","reason":"R","message":""}]}}' \
    | "$bin" 2>/dev/null || true)"
  grep -q '"status":"Current"' <<<"$out"
}

if [ -f "$stamp" ] && [ -x "$bin" ]; then
  printf '%s\n' "$bin"
  exit 0
fi

# --- slow path: one builder at a time ----------------------------------------
mkdir -p "$root"
exec 9>"$root/.lock"
if ! flock -n 9; then
  log "another build is running in $root; waiting for it"
  flock 9
fi
if [ -f "$stamp" ] && [ -x "$bin" ]; then
  printf '%s\n' "$bin"
  exit 0
fi

command -v go >/dev/null 2>&1 || die "go is not on PATH; it is needed to build the kstatus checker from $src"

export CGO_ENABLED=0
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export GOWORK=off
# go.sum pins every module: nothing is resolved anew.
export GOFLAGS="-mod=readonly"

logf="$root/build.log"
: >"$logf"
log "building the kstatus checker ($(sed -n 's/^[[:space:]]*sigs.k8s.io\/cli-utils //p' "$src/go.mod")) from $src (log: $logf)"
start=$SECONDS
build() { (cd "$src" && go build -trimpath -ldflags "-s -w" -o "$bin.tmp" .) >>"$logf" 2>&1; }
if ! build; then
  if [ "$GOTOOLCHAIN" = local ] && grep -q 'requires go >=' "$logf"; then
    log "go.mod needs a newer Go than $(go env GOVERSION); retrying with GOTOOLCHAIN=auto"
    export GOTOOLCHAIN=auto
    build || { tail -n 40 "$logf" >&2; die "could not build the kstatus checker (full log: $logf)"; }
  else
    tail -n 40 "$logf" >&2
    die "could not build the kstatus checker (full log: $logf)"
  fi
fi
mv -f "$bin.tmp" "$bin"
kstatus_ok || die "the built checker $bin does not judge a Ready object Current"
printf '%s\n' "$hash" >"$stamp.tmp"
mv -f "$stamp.tmp" "$stamp"
log "built $bin in $((SECONDS - start))s"
printf '%s\n' "$bin"
