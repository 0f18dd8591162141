#!/usr/bin/env bash
# Provides the CNI plugins the real-node e2e tests' pod network uses (bridge,
# host-local, loopback, portmap) and prints, as the last line on stdout, the
# directory holding them. All progress goes to stderr.
#
# Built once with `go install github.com/containernetworking/plugins/...@version`
# (its go.mod has no replace directives), static (CGO_ENABLED=0, as upstream
# releases them), into
#   ${AGENTGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentgate}/node/cni-plugins-<version>/bin
# A stamp file marks a complete install; later runs only check it.
#
# Never skips: if a plugin cannot be had, it says which and exits non-zero.
# Needs: go (>= 1.26.8, the module's go line), the Go module proxy, flock.
set -euo pipefail

# Pinned: newest v1.x on the Go proxy when pinned.
CNI_PLUGINS_VERSION="v1.10.0"
# Bump when the layout or build recipe changes, to force a rebuild.
RECIPE=1

# shellcheck source=e2e/hack/lib-kube-build.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib-kube-build.sh"

module=github.com/containernetworking/plugins
PLUGINS=(plugins/main/bridge plugins/ipam/host-local plugins/main/loopback plugins/meta/portmap)
root="$(kb_cache_root)/node/cni-plugins-$CNI_PLUGINS_VERSION"
bin="$root/bin"
stamp="$bin/.installed"
spec="recipe=$RECIPE cni-plugins=$CNI_PLUGINS_VERSION plugins=${PLUGINS[*]##*/}"

kb_reuse_or_lock "${PLUGINS[@]##*/}"

kb_what="the CNI plugins $CNI_PLUGINS_VERSION"
kb_go_env
tmp="$(mktemp -d "${TMPDIR:-/tmp}/agentgate-cni-plugins.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

pkgs=()
for p in "${PLUGINS[@]}"; do pkgs+=("$module/$p@$CNI_PLUGINS_VERSION"); done
logf="$root/logs/cni-plugins.log"
: >"$logf"
# The version stamp upstream's release script sets.
go_install_into "CNI plugins ${PLUGINS[*]##*/} $CNI_PLUGINS_VERSION" "$logf" \
  -ldflags "-s -w -X $module/pkg/utils/buildversion.BuildVersion=$CNI_PLUGINS_VERSION" "${pkgs[@]}"

# A plugin run without CNI_COMMAND prints "CNI <name> plugin <version>" and
# the spec versions it supports (on stderr).
for p in "${PLUGINS[@]}"; do
  p="${p##*/}"
  about="$(CNI_COMMAND= "$bin/$p" 2>&1 </dev/null || true)"
  grep -q "CNI $p plugin $CNI_PLUGINS_VERSION" <<<"$about" \
    || die "built CNI plugin $p does not report $CNI_PLUGINS_VERSION: $(sed -n 1p <<<"$about")"
done

printf '%s\n' "$spec" >"$stamp.tmp"
mv -f "$stamp.tmp" "$stamp"
log "installed into $bin: ${PLUGINS[*]##*/} $CNI_PLUGINS_VERSION"
printf '%s\n' "$bin"
