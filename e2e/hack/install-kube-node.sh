#!/usr/bin/env bash
# Provides kubelet, kube-proxy, kube-scheduler and kube-controller-manager for
# the real-node e2e tests and prints, as the last line on stdout, the directory
# holding them. All progress goes to stderr.
#
# Built once from the k8s.io/kubernetes Go module at KUBE_VERSION (pinned in
# lib-kube-build.sh, the same version as install-control-plane.sh's
# kube-apiserver), through the same throwaway module, static (CGO_ENABLED=0,
# as upstream builds kubelet too), into the control plane's directory
#   ${AGENTGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentgate}/k8s/<version>/bin
# with a stamp file of its own (.installed-node). Shares that directory's lock
# with install-control-plane.sh, so the two never compile the same packages
# at once (the second reuses the Go build cache instead).
#
# Never skips: if a binary cannot be had, it says which and exits non-zero.
# Needs: go, access to the Go module proxy, flock (util-linux).
set -euo pipefail

# shellcheck source=e2e/hack/lib-kube-build.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib-kube-build.sh"

# Bump when the layout or build recipe changes, to force a rebuild.
RECIPE=1
BINARIES=(kubelet kube-proxy kube-scheduler kube-controller-manager)

root="$(kb_cache_root)/k8s/$KUBE_VERSION"
bin="$root/bin"
stamp="$bin/.installed-node"
spec="recipe=$RECIPE kube=$KUBE_VERSION node=${BINARIES[*]}"

kb_reuse_or_lock "${BINARIES[@]}"

kb_what="${BINARIES[*]} $KUBE_VERSION"
kb_go_env
tmp="$(mktemp -d "${TMPDIR:-/tmp}/agentgate-kube-node.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
kube_module_log=kubernetes-module-node.log

for b in "${BINARIES[@]}"; do
  if [ -x "$bin/$b" ] && kube_version_ok "$bin/$b"; then
    log "$b $KUBE_VERSION already built"
    continue
  fi
  build_kube_cmd "$b"
  kube_version_ok "$bin/$b" || die "built $b does not report Kubernetes $KUBE_VERSION: $("$bin/$b" --version 2>&1 | sed -n 1p)"
done

printf '%s\n' "$spec" >"$stamp.tmp"
mv -f "$stamp.tmp" "$stamp"
log "installed into $bin: ${BINARIES[*]} ($("$bin/kubelet" --version))"
printf '%s\n' "$bin"
