#!/usr/bin/env bash
# The images the real node imports into containerd (docs/testing.md):
#   - the agentgate image, packed by hack/image.sh from BIN_DIR (target/debug
#     for the tests, target/release for `make demo`, which is `make image`'s
#     archive) and the static agentgate-exec;
#   - the agent image (hack/agent-image.sh: bash, curl, python3).
# Prints two lines:
#   agentgate ARCHIVE
#   agent ARCHIVE ghcr.io/acme/triage-bot@sha256:<manifest digest>
# The archives go to target/node-images/<profile>/ (beside the binaries they
# hold, removed with them by `cargo clean`).
#
# Usage: node-images.sh BIN_DIR
set -euo pipefail
die() { printf 'node-images: ERROR: %s\n' "$*" >&2; exit 1; }
[ "$#" -eq 1 ] || die "usage: node-images.sh BIN_DIR"
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin_dir="$(cd "$1" && pwd)"
for b in agentgate kubectl-agentgate agentgate-proxy; do
  [ -x "$bin_dir/$b" ] || die "$bin_dir/$b is missing: build the workspace's binaries first (make test and make demo do)"
done
out="$root/target/node-images/$(basename "$bin_dir")"
mkdir -p "$out"
cd "$root"
static_exec="$(./hack/check-static-exec.sh)"
# Debug binaries are large: fast compression, the archive never leaves the machine.
level=1
[ "$(basename "$bin_dir")" = release ] && level=9
agentgate="$(GZIP_LEVEL=$level ./hack/image.sh "$bin_dir" "$static_exec" "$out" | tail -n 1)"
[ -f "$agentgate" ] || die "hack/image.sh wrote no archive"
agent="$(./hack/agent-image.sh "$out" | tail -n 2)"
archive="$(printf '%s\n' "$agent" | sed -n 1p)"
digest="$(printf '%s\n' "$agent" | sed -n 2p)"
[ -f "$archive" ] || die "hack/agent-image.sh wrote no archive"
case "$digest" in sha256:*) ;; *) die "hack/agent-image.sh printed no digest: $digest" ;; esac
printf 'agentgate %s\n' "$agentgate"
printf 'agent %s ghcr.io/acme/triage-bot@%s\n' "$archive" "$digest"
