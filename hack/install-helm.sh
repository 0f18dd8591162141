#!/usr/bin/env bash
# Provides helm for `make test` (chart lint/template) and `make demo` and prints,
# as the last line on stdout, the path of the helm binary. Progress goes to stderr.
#
# helm is built once from its Go module (helm.sh/helm/v3 at HELM_VERSION) into
#   ${AGENTGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentgate}/helm/<version>/helm
# and later runs only check the stamp. AGENTGATE_HELM, if set to an executable,
# is used as is. Never skips: if helm cannot be had, it says so and exits non-zero.
set -euo pipefail

HELM_VERSION="v3.19.0"
RECIPE=1

log() { printf 'install-helm: %s\n' "$*" >&2; }
die() { printf 'install-helm: ERROR: %s\n' "$*" >&2; exit 1; }

if [ -n "${AGENTGATE_HELM:-}" ]; then
  [ -x "$AGENTGATE_HELM" ] || die "AGENTGATE_HELM=$AGENTGATE_HELM is not executable"
  printf '%s\n' "$AGENTGATE_HELM"
  exit 0
fi

cache_root="${AGENTGATE_CACHE:-${XDG_CACHE_HOME:-${HOME:?HOME is not set}/.cache}/agentgate}"
root="$cache_root/helm/$HELM_VERSION"
helm="$root/helm"
stamp="$root/.installed"
spec="recipe=$RECIPE helm=$HELM_VERSION"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$spec" ] && [ -x "$helm" ]; then
  printf '%s\n' "$helm"
  exit 0
fi

mkdir -p "$root"
exec 9>"$root/.lock"
if ! flock -n 9; then
  log "another install is running in $root; waiting for it"
  flock 9
fi
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$spec" ] && [ -x "$helm" ]; then
  printf '%s\n' "$helm"
  exit 0
fi

command -v go >/dev/null || die "go is not installed; it is needed to build helm $HELM_VERSION"
log "building helm $HELM_VERSION from helm.sh/helm/v3 (first run only, a few minutes)"
rm -f "$stamp"
if ! GOBIN="$root" CGO_ENABLED=0 GOFLAGS=-mod=mod \
    go install -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >"$root/build.log" 2>&1; then
  tail -n 30 "$root/build.log" >&2
  die "building helm failed (log: $root/build.log)"
fi
"$helm" version --short >/dev/null || die "the built helm does not run"
printf '%s\n' "$spec" >"$stamp"
log "helm $HELM_VERSION ready: $helm"
printf '%s\n' "$helm"
