#!/usr/bin/env bash
# Provides containerd, containerd-shim-runc-v2 and ctr for the real-node e2e
# tests and prints, as the last line on stdout, the directory holding them.
# All progress goes to stderr.
#
# Built once with `go install module/cmd/...@version` (containerd's go.mod has
# no replace directives, so no throwaway module is needed), static
# (CGO_ENABLED=0), into
#   ${AGENTGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentgate}/node/containerd-<version>/bin
# A stamp file marks a complete install; later runs only check it.
#
# Never skips: if a binary cannot be had, it says which and exits non-zero.
# Needs: go, access to the Go module proxy, flock (util-linux).
set -euo pipefail

# Pinned: newest containerd 2.x on the Go proxy when pinned that builds with
# go 1.26 (its go.mod says go 1.25); 2.x serves the CRI v1 API kubelet 1.33 needs.
CONTAINERD_VERSION="v2.2.9"
# Build tags, as upstream's Makefile sets them, plus the snapshotters the node
# does not use (it uses overlayfs): no_btrfs (the btrfs snapshotter is cgo and
# needs btrfs-progs' C headers; CGO_ENABLED=0 drops it too, the tag says so),
# no_devmapper and no_zfs (they need dmsetup/thin pools and zfs tools at run
# time, and only add code). urfave_cli_no_docs drops the man-page generator.
CONTAINERD_TAGS="urfave_cli_no_docs no_btrfs no_devmapper no_zfs"
# The shim speaks only ttrpc; upstream builds it with no_grpc as well.
SHIM_TAGS="$CONTAINERD_TAGS no_grpc"
# Bump when the layout or build recipe changes, to force a rebuild.
RECIPE=1

# shellcheck source=e2e/hack/lib-kube-build.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib-kube-build.sh"

module=github.com/containerd/containerd/v2
root="$(kb_cache_root)/node/containerd-$CONTAINERD_VERSION"
bin="$root/bin"
stamp="$bin/.installed"
spec="recipe=$RECIPE containerd=$CONTAINERD_VERSION tags=$CONTAINERD_TAGS"
BINARIES=(containerd containerd-shim-runc-v2 ctr)

kb_reuse_or_lock "${BINARIES[@]}"

kb_what="containerd $CONTAINERD_VERSION"
kb_go_env
tmp="$(mktemp -d "${TMPDIR:-/tmp}/agentgate-containerd.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

# What upstream's Makefile stamps (the module proxy carries no git revision).
ldflags="-s -w -X $module/version.Version=$CONTAINERD_VERSION -X $module/version.Package=$module"

# `containerd --version`: "containerd github.com/containerd/containerd/v2 v2.2.9 ".
version_ok() { # version_ok NAME FLAG
  grep -q "$CONTAINERD_VERSION" <<<"$(output_of "$bin/$1" "$2")"
}

logf="$root/logs/containerd.log"
: >"$logf"
go_install_into "containerd and ctr $CONTAINERD_VERSION" "$logf" \
  -tags "$CONTAINERD_TAGS" -ldflags "$ldflags" \
  "$module/cmd/containerd@$CONTAINERD_VERSION" "$module/cmd/ctr@$CONTAINERD_VERSION"
logf="$root/logs/containerd-shim-runc-v2.log"
: >"$logf"
go_install_into "containerd-shim-runc-v2 $CONTAINERD_VERSION" "$logf" \
  -tags "$SHIM_TAGS" -ldflags "$ldflags" \
  "$module/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION"

version_ok containerd --version || die "built containerd does not report $CONTAINERD_VERSION: $(output_of "$bin/containerd" --version)"
version_ok ctr --version || die "built ctr does not report $CONTAINERD_VERSION: $(output_of "$bin/ctr" --version)"
version_ok containerd-shim-runc-v2 -v || die "built containerd-shim-runc-v2 does not report $CONTAINERD_VERSION: $(output_of "$bin/containerd-shim-runc-v2" -v)"

printf '%s\n' "$spec" >"$stamp.tmp"
mv -f "$stamp.tmp" "$stamp"
log "installed into $bin: $("$bin/containerd" --version)"
printf '%s\n' "$bin"
