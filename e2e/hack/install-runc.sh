#!/usr/bin/env bash
# Provides runc for the real-node e2e tests (containerd-shim-runc-v2 runs it)
# and prints, as the last line on stdout, the directory holding it. All
# progress goes to stderr.
#
# Built once with `go install github.com/opencontainers/runc@version` (its
# go.mod has no replace directives) into
#   ${AGENTGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentgate}/node/runc-<version>/bin
# runc needs cgo (libcontainer/nsenter is C, run before the Go runtime starts),
# so this build has CGO_ENABLED=1 and needs a C compiler. Built with the
# `seccomp` tag, as upstream's release is: the chart's Pods ask for the
# RuntimeDefault profile, and a runc without seccomp refuses every such Pod
# ("seccomp: config provided but seccomp not supported"). That needs
# libseccomp's headers (Debian's libseccomp-dev, installed here when missing).
# A stamp file marks a complete install; later runs only check it.
#
# Never skips: if it cannot be had, it says why and exits non-zero.
# Needs: go, a C compiler (gcc), access to the Go module proxy, flock.
set -euo pipefail

# Pinned: the 1.3 line containerd 2.2 is tested with (its
# script/setup/runc-version says v1.3.6); 1.3.0 is known to build here.
RUNC_VERSION="v1.3.0"
RUNC_TAGS="seccomp"
# Bump when the layout or build recipe changes, to force a rebuild.
RECIPE=2

# shellcheck source=e2e/hack/lib-kube-build.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib-kube-build.sh"

root="$(kb_cache_root)/node/runc-$RUNC_VERSION"
bin="$root/bin"
stamp="$bin/.installed"
spec="recipe=$RECIPE runc=$RUNC_VERSION tags=$RUNC_TAGS"

kb_reuse_or_lock runc

kb_what="runc $RUNC_VERSION"
kb_go_env
export CGO_ENABLED=1
cc="$(go env CC)"
command -v "${cc%% *}" >/dev/null 2>&1 || die "runc needs cgo, and the C compiler '$cc' (go env CC) is not on PATH"
if ! pkg-config --exists libseccomp 2>/dev/null; then
  log "installing libseccomp-dev and pkg-config (apt-get) for runc's seccomp support"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libseccomp-dev pkg-config; } >&2 \
    || die "could not install libseccomp-dev (runc's seccomp support needs its headers)"
fi
tmp="$(mktemp -d "${TMPDIR:-/tmp}/agentgate-runc.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

logf="$root/logs/runc.log"
: >"$logf"
go_install_into "runc $RUNC_VERSION" "$logf" -tags "$RUNC_TAGS" -ldflags "-s -w" \
  "github.com/opencontainers/runc@$RUNC_VERSION"

# The version comes from runc's embedded VERSION file: "runc version 1.3.0".
grep -qx "runc version ${RUNC_VERSION#v}" <<<"$(output_of "$bin/runc" --version)" \
  || die "built runc does not report ${RUNC_VERSION#v}: $(output_of "$bin/runc" --version)"

printf '%s\n' "$spec" >"$stamp.tmp"
mv -f "$stamp.tmp" "$stamp"
log "installed into $bin: $("$bin/runc" --version | sed -n 1p)"
printf '%s\n' "$bin"
