#!/usr/bin/env bash
# Provides every binary of a real Kubernetes node (control plane included) for
# the real-node e2e tests and prints, as the last line on stdout, ONE directory
# holding (as symlinks into the caches of the scripts below):
#   kube-apiserver etcd kubectl                      install-control-plane.sh
#   kubelet kube-proxy kube-scheduler
#   kube-controller-manager                          install-kube-node.sh
#   containerd containerd-shim-runc-v2 ctr           install-containerd.sh
#   runc                                             install-runc.sh
#   cni/bridge cni/host-local cni/loopback
#   cni/portmap                                      install-cni-plugins.sh
# The directory is
#   ${AGENTGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentgate}/node/bundle-<hash>
# where <hash> names the set of source directories, so checkouts with other
# pins get their own. All progress goes to stderr. Every script builds once
# and later only checks its stamp, so a cached run takes well under a second.
# The versions are pinned at the top of each script (Kubernetes's in
# lib-kube-build.sh).
#
# Never skips: if anything cannot be had, it says what and exits non-zero.
set -euo pipefail

# shellcheck source=e2e/hack/lib-kube-build.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib-kube-build.sh"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# run_install SCRIPT BINARY...: runs SCRIPT, checks its directory (its last
# stdout line) holds every BINARY, and sets $dir to it.
run_install() {
  local script="$1" out b; shift
  out="$(bash "$here/$script")" || die "$script failed (see above)"
  dir="${out##*$'\n'}"
  [ -n "$dir" ] && [ -d "$dir" ] || die "$script printed no directory (last line: '$dir')"
  for b in "$@"; do
    [ -x "$dir/$b" ] || die "$script's directory $dir has no $b"
  done
}

declare -A source_of=()  # binary -> its directory
add() { # add DIR BINARY...
  local d="$1" b; shift
  for b in "$@"; do source_of[$b]="$d"; done
}

BIN_CP=(kube-apiserver etcd kubectl)
BIN_KUBE=(kubelet kube-proxy kube-scheduler kube-controller-manager)
BIN_CONTAINERD=(containerd containerd-shim-runc-v2 ctr)
BIN_RUNC=(runc)
CNI=(bridge host-local loopback portmap)

run_install install-control-plane.sh "${BIN_CP[@]}";   add "$dir" "${BIN_CP[@]}"
run_install install-kube-node.sh "${BIN_KUBE[@]}";     add "$dir" "${BIN_KUBE[@]}"
run_install install-containerd.sh "${BIN_CONTAINERD[@]}"; add "$dir" "${BIN_CONTAINERD[@]}"
run_install install-runc.sh "${BIN_RUNC[@]}";          add "$dir" "${BIN_RUNC[@]}"
run_install install-cni-plugins.sh "${CNI[@]}";        cni_dir="$dir"

all=("${BIN_CP[@]}" "${BIN_KUBE[@]}" "${BIN_CONTAINERD[@]}" "${BIN_RUNC[@]}")
links=()  # "LINK TARGET" pairs, relative to the bundle
for b in "${all[@]}"; do links+=("$b ${source_of[$b]}/$b"); done
for p in "${CNI[@]}"; do links+=("cni/$p $cni_dir/$p"); done

hash="$(printf '%s\n' "${links[@]}" | sha256sum)"
bundle="$(kb_cache_root)/node/bundle-${hash:0:12}"
mkdir -p "$bundle/cni"
# Each link is replaced atomically (rename) and only when it is wrong, so a
# concurrent run or a running test never sees a missing binary.
for l in "${links[@]}"; do
  name="${l%% *}" target="${l#* }"
  [ "$(readlink "$bundle/$name" 2>/dev/null || true)" = "$target" ] && continue
  ln -sfn "$target" "$bundle/$name.tmp.$$"
  mv -Tf "$bundle/$name.tmp.$$" "$bundle/$name"
done
printf '%s\n' "$bundle"
